"""What ``envfleet train`` shows and writes: the run's first lines, its progress (a bar and a log
line a second), its last lines (why it stopped, steps/s, the machine's load), then its outputs
(policy, summary JSON, learning-curve plot), each written where asked or, where that fails or
Ctrl-C stopped the run, at a new file beside it. Rich, torch and matplotlib are imported only
when a run uses them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envfleet.command import CommandError
from envfleet.train.args import Args, eval_backend
from envfleet.train.presets import env_name

if TYPE_CHECKING:
    from envfleet.train.bookkeeping import Progress, Summary

#: seconds between the log lines of a run's progress
LOG_EVERY_S = 1.0


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _rate(x: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _breakdown(times: dict[str, float]) -> str:
    total = sum(times.values()) or 1.0
    short = {"inference": "infer", "learning": "learn", "evaluation": "eval"}
    return " ".join(f"{short.get(k, k)} {100 * v / total:.0f}%" for k, v in times.items())


def header(args: Args) -> list[str]:
    """The run's first lines: env, the backend actually used, budget, target, PPO's knobs."""
    budget = f"{args.total_steps:,} steps"
    if args.time_limit is not None:
        budget += f" or {args.time_limit:,g} s (time limit), whichever comes first"
    minibatch = math.ceil(args.num_envs * args.num_steps / args.num_minibatches)
    backend = args.backend + "".join(
        f" {key}={getattr(args, key):g}" for key in ("num_workers", "cpus_per_worker")
        if getattr(args, key) is not None)
    if eval_backend(args.env_id, args.backend) != args.backend:
        backend += f" (evaluation: {eval_backend(args.env_id, args.backend)}, in this process)"
    return [f"[bold]envfleet train[/bold] {args.env_id} backend={backend} "
            f"num_envs={args.num_envs} seed={args.seed}; budget {budget}; target "
            + ("none" if args.target_return is None else f"{args.target_return:g} (greedy "
               f"{args.eval_episodes}-episode mean, evaluated "
               + (f"every {args.eval_every:,} steps)" if args.eval_every > 0 else "at the end)")),
            f"ppo: {args.num_steps} steps x {args.num_envs} envs per rollout, "
            f"{args.num_minibatches} minibatch{'es' if args.num_minibatches > 1 else ''} of "
            f"{minibatch} x {args.update_epochs} epochs, lr {args.learning_rate:g}"
            f"{' (annealed)' if args.anneal_lr else ''}, gamma {args.gamma:g}, gae_lambda "
            f"{args.gae_lambda:g}, ent_coef {args.ent_coef:g}, clip_coef {args.clip_coef:g}"]


class ProgressLog:
    """A run's progress on ``console``: a bar (steps, the recent training return, the last
    evaluation) redrawn at most every 0.25 s and a log line every ``LOG_EVERY_S``; after a
    short run, the ideal loop's top-up bar in its place. The bar shows inside ``with``."""

    def __init__(self, args: Args, console: Any, quiet: bool) -> None:
        from rich import progress as rich

        self.args = args
        self.bar = rich.Progress(
            rich.TextColumn("[progress.description]{task.description}"), rich.BarColumn(),
            rich.MofNCompleteColumn(), rich.TimeElapsedColumn(),
            rich.TextColumn("{task.fields[info]}"), console=console, auto_refresh=False,
            disable=quiet, transient=True)
        batch = args.num_envs * args.num_steps  # whole rollouts: the steps the budget runs
        self.task = self.bar.add_task("training", total=max(1, args.total_steps // batch)
                                      * batch, info="")
        self.ideal_task: Any = None
        self.last_log = self.last_refresh = -math.inf
        self.eval = "-"

    def __enter__(self) -> ProgressLog:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)

    def on_progress(self, p: Progress) -> None:
        """``ppo.train``'s report after every iteration."""
        if p.eval_return is not None:  # "<target": stopped once the target was out of reach
            self.eval = (_fmt(p.eval_return) if p.eval_complete
                         else f"<{self.args.target_return:g}")
        info = f"return {_fmt(p.episodic_return)} eval {self.eval}"
        self.bar.update(self.task, completed=p.steps, info=info)
        if p.seconds - self.last_refresh >= 0.25 or p.done:
            self.last_refresh = p.seconds
            self.bar.refresh()
        if p.seconds - self.last_log >= LOG_EVERY_S or p.done:
            self.last_log = p.seconds
            self.bar.console.print(
                f"steps {p.steps:>9,} | {p.seconds:6.1f} s | return {_fmt(p.episodic_return):>6}"
                f" | eval {self.eval:>6} | steps/s env {_rate(p.sps_env):>6} "
                f"end-to-end {_rate(p.sps_end_to_end):>6} | {_breakdown(p.times)}",
                soft_wrap=True)

    def on_top_up(self, done: int, wanted: int) -> None:
        """The ideal loop's iterations timed after a short run: ``done`` of ``wanted``."""
        if self.ideal_task is None:
            self.bar.update(self.task, visible=False)
            self.ideal_task = self.bar.add_task("ideal loop", total=wanted, info=(
                f"at most {self.args.ideal_top_up_s:g} s (--no-ideal skips it)"))
        self.bar.update(self.ideal_task, completed=done)
        self.bar.refresh()


def ending(args: Args, summary: Summary) -> str:
    """Why training stopped, when it reached the target (if it has one), the final eval."""
    if summary.stop_reason == "target":
        stopped = "at the target"
    elif summary.stop_reason == "time limit":
        stopped = f"at the time limit ({args.time_limit:,g} s)"
    elif summary.stop_reason == "interrupted":
        stopped = f"when interrupted (Ctrl-C) at {summary.total_steps:,} steps"
    else:
        stopped = f"after the {args.total_steps:,}-step budget"
        if summary.total_steps != args.total_steps:  # whole rollouts, never past it
            stopped += (f" ({summary.total_steps:,} steps, in whole rollouts of "
                        f"{args.num_envs * args.num_steps:,})")
    text = f"[bold]stopped[/bold] {stopped} in {summary.wall_s:.2f} s"
    if args.target_return is not None:
        solved = ("never (within the budget)" if summary.solved_at_s is None else
                  f"{summary.solved_at_s:.2f} s ({summary.solved_at_steps:,} steps)")
        text += f"; [bold]solved at[/bold] {solved}"
    text += f"; compile {summary.compile_s:.2f} s (apart); "
    if summary.final_eval is None:
        return text + "no final evaluation"
    return (text + f"final greedy eval {_fmt(summary.final_eval_return)} over "
            f"{summary.final_eval['episodes']} episodes")


def last_lines(args: Args, summary: Summary, console: Any, load: float) -> dict[str, Any]:
    """Print the run's last lines: why it stopped, its steps/s and time split (a warning on
    stderr when the end-to-end rate beat the ideal loop's), Chess-v0's outcomes; the run's
    summary, as ``--json`` writes it."""
    from rich.console import Console

    console.print(ending(args, summary), soft_wrap=True)
    low, high = summary.sps_ideal_iqr
    if summary.ideal_iterations:
        ideal = (f"ideal {_rate(summary.sps_ideal)} (IQR {_rate(low)}-{_rate(high)}, "
                 f"{summary.ideal_iterations} iterations), end-to-end "
                 f"{_rate(summary.sps_end_to_end)} (efficiency {summary.efficiency:.2f})")
    else:
        ideal = (f"ideal not measured ({'--no-ideal' if args.ideal_every == 0 else 'stopped first'}"
                 f"), end-to-end {_rate(summary.sps_end_to_end)}")
    console.print(f"steps/s: env-only {_rate(summary.sps_env)}, {ideal}; time: "
                  f"{_breakdown(summary.times)}; other processes' load {_fmt(load, 2)} cores",
                  soft_wrap=True)
    if summary.above_ideal:  # on stderr, --quiet or not
        warn = Console(stderr=True, highlight=False)
        warn.print(f"[yellow]warning: end-to-end {_rate(summary.sps_end_to_end)} steps/s is "
                   f"above the ideal loop's IQR ({_rate(high)}): the ideal does the same work "
                   f"with an env that costs nothing, so the machine's load changed during the "
                   f"run (real iterations timed alike: median {_rate(summary.sps_iteration)}), "
                   f"or this is a bug[/yellow]", soft_wrap=True)
    result = finite({"env": args.env_id, "backend": args.backend, "num_envs": args.num_envs,
                     "seed": args.seed, **asdict(summary), "background_load": load})
    if env_name(args.env_id) == "Chess-v0" and summary.final_eval is not None:
        result["final_outcomes"] = outcomes(summary.final_eval["returns"])
        o = result["final_outcomes"]
        console.print(f"final evaluation over {summary.final_eval['episodes']} games: win "
                      f"{o['win_rate']:.3f} draw {o['draw_rate']:.3f} loss {o['loss_rate']:.3f} "
                      f"(win - loss {o['win_rate'] - o['loss_rate']:+.3f})", soft_wrap=True)
    return result


def write_outputs(options: argparse.Namespace, args: Args, agent: Any, summary: Summary,
                  result: dict[str, Any], console: Any, plot_path: Path | None) -> int:
    """Write the policy (first: the costliest to lose), the summary ``result`` and the plot
    where asked (interrupted: the policy and the summary even unasked), each at a new file
    beside the asked path where that fails; say where each went. The exit status: 130 when
    interrupted, 1 when an asked path failed (the output is elsewhere), else 0."""
    from envfleet.train.checkpoint import save

    interrupted = summary.stop_reason == "interrupted"
    no_plot: list[str] = []  # why plot_curve drew nothing (matplotlib missing)

    def write_plot(path: Path) -> None:
        why = plot_curve([result], path, args.target_return)
        if why:
            no_plot.append(why)

    # (label, option, the asked path, writer); interrupted: policy and summary even unasked
    outputs: list[tuple[str, str, Path | None, Callable[[Path], None]]] = [
        ("policy", "--save", options.save, lambda path: save(agent, args, str(path))),
        ("summary", "--json", options.json,
         lambda path: path.write_text(json.dumps(result, indent=1) + "\n")),
        ("learning curve", "--plot", plot_path, write_plot)]
    stamp = time.strftime("%Y%m%d-%H%M%S")  # one per run: its fallback files pair up
    stem = "envfleet-train-" + re.sub(r"[^\w.-]", "_", env_name(args.env_id))
    status = 0
    if interrupted:
        print(f"envfleet train: interrupted (Ctrl-C) at {summary.total_steps:,} steps, "
              f"{summary.wall_s:.1f} s into training", file=sys.stderr)
    for label, option, asked, write in outputs:
        if asked is None and not (interrupted and label != "learning curve"):
            continue
        fallback = (f"{asked.stem}-{stamp}{asked.suffix}" if asked is not None else
                    f"{stem}-{stamp}{'.pt' if label == 'policy' else '.json'}")
        try:
            where, why = write_somewhere(asked, write, fallback)
        except OSError as error:
            print(f"envfleet train: error: the {label} could not be written anywhere: {error}",
                  file=sys.stderr)
            status = 1
            continue
        if no_plot and label == "learning curve":
            console.print(no_plot[0])
        elif why is not None:
            print(f"envfleet train: error: could not write {option} {asked} ({why}): the "
                  f"{label} is at {where}", file=sys.stderr)
            status = 1
        elif interrupted and label != "learning curve":
            print(f"{label} so far: {where}", file=sys.stderr)
        else:
            console.print(f"{label}: {where}")
    return 130 if interrupted else status


def outcomes(returns: Any) -> dict[str, float]:
    """Win / draw / loss rates of games scored +1 / 0 / -1."""
    import numpy as np

    r = np.asarray(returns)
    return {"win_rate": float((r > 0).mean()), "draw_rate": float((r == 0).mean()),
            "loss_rate": float((r < 0).mean())}


def finite(x: Any) -> Any:
    """``x`` with NaN and infinities as None (JSON's null: ``--no-ideal``'s ideal steps/s):
    the summary stays strict JSON."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def write_somewhere(path: Path | None, write: Callable[[Path], None], fallback: str
                    ) -> tuple[Path, str | None]:
    """Write an output with ``write`` at ``path`` (its folders made); where that fails, or
    with no path, at a new file named ``fallback`` (``-1``, ``-2``... added if taken) next to
    it, else in the current directory, else in the temp directory. Returns where it went and
    why ``path`` failed (None: it did not); an OSError when no place takes it."""
    why = None
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            return path, None
        except (OSError, RuntimeError) as error:  # torch.save: RuntimeError for an open()
            why = getattr(error, "strerror", None) or next(iter(str(error).splitlines()), "")
    folders = ([path.parent] if path is not None else []) + [Path("."),
                                                             Path(tempfile.gettempdir())]
    for folder in dict.fromkeys(folders):
        target = _new_file(folder, Path(fallback))
        if target is None:
            continue
        try:
            write(target)
        except (OSError, RuntimeError):
            target.unlink(missing_ok=True)
            continue
        return Path(os.path.abspath(target)), why
    raise OSError(f"no place took it ({', '.join(map(str, dict.fromkeys(folders)))})")


def _new_file(folder: Path, name: Path) -> Path | None:
    """A new empty file ``name`` in ``folder`` (``-1``, ``-2``... added while taken: nothing
    of anyone's is overwritten), or None where the folder takes no file."""
    for n in range(100):
        target = folder / (name.name if n == 0 else f"{name.stem}-{n}{name.suffix}")
        try:
            open(target, "xb").close()
            return target
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


@contextlib.contextmanager
def no_interrupt() -> Iterator[None]:
    """Ctrl-C ignored inside (only the main thread can set signal handlers; elsewhere, as is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def plot_curve(runs: list[dict[str, Any]], path: Path, target: float | None,
               title: str | None = None) -> str | None:
    """Return vs wall-clock seconds and vs steps for one or more runs; why not, if it can't."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install 'envfleet[bench]'): no plot"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained", sharey=True)
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        label = run.get("label") or f"seed {run['seed']}"
        train_pts = [c for c in run["curve"] if c["episodic_return"] is not None]
        evals = run["evaluations"]
        for ax, key in zip(axes, ("seconds", "steps"), strict=True):
            ax.plot([c[key] for c in train_pts], [c["episodic_return"] for c in train_pts],
                    color=color, alpha=0.45, linewidth=1)
            ax.plot([e[key] for e in evals if e["complete"]],
                    [e["mean_return"] for e in evals if e["complete"]], color=color, marker="o",
                    markersize=4, linestyle="none", label=label if key == "seconds" else None)
            # evaluations stopped once the target was out of reach: their partial mean
            ax.plot([e[key] for e in evals if not e["complete"]],
                    [e["mean_return"] for e in evals if not e["complete"]], color=color,
                    marker="o", markersize=3, markerfacecolor="none", linestyle="none")
            if run.get("solved_at_s") is not None:
                x = run["solved_at_s"] if key == "seconds" else run["solved_at_steps"]
                ax.axvline(x, color=color, linestyle=":", linewidth=1)
    for ax, label in zip(axes, ("wall-clock seconds of training (evaluations included)",
                                "env steps"), strict=True):
        if target is not None:
            ax.axhline(target, color="gray", linestyle="--", linewidth=1)
        ax.set_xlabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("return")
    episodes = runs[0].get("args", {}).get("eval_episodes", 100)
    axes[0].legend(fontsize=8, title="line: training episodes (last 100)\n"
                   f"dot: greedy eval ({episodes} episodes)\nopen: eval stopped below target",
                   title_fontsize=7)
    env = runs[0]["env"]
    fig.suptitle(title or f"envfleet train {env} ({runs[0]['backend']}, "
                 f"{runs[0]['num_envs']} envs)", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def check_plot_format(path: Path) -> None:
    """Refuse ``--plot`` in a format matplotlib cannot write (without matplotlib: no plot, as
    the end of the run says)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().removeprefix(".")
    if suffix and suffix not in formats:
        raise CommandError(f"--plot {path}: matplotlib cannot write .{suffix} files (it "
                           f"writes {', '.join(sorted(formats))})")
