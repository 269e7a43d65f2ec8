"""``envfleet train ENV`` and ``envfleet eval ENV --load PATH``: PPO from the command line.

Per-env presets (``PRESETS``) make ``envfleet train CartPole-v1`` solve with no flags; any other
id gets CleanRL's PPO defaults and Gymnasium's ``reward_threshold`` as its target. Torch is
imported only when a command runs (``envfleet --help`` and ``envfleet bench`` stay light).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from envfleet.cli import CommandError

#: tuned settings per env id (anything not given: ``ppo.Args``'s defaults)
PRESETS: dict[str, dict[str, Any]] = {
    # rl-zoo's CartPole shape (8 envs x 32 steps, one 256-sample minibatch, 20 epochs, gamma
    # 0.98, lambda 0.8, lr 1e-3, no entropy bonus): the fewest gradient steps to a solved policy
    # we found; small batches keep each step cheap on CPU. A cheap batched evaluation every
    # 1024 steps (a failing one stops as soon as 475 is out of reach).
    "CartPole-v1": dict(num_envs=8, num_steps=32, num_minibatches=1, update_epochs=20,
                        learning_rate=1e-3, anneal_lr=False, gamma=0.98, gae_lambda=0.8,
                        ent_coef=0.0, total_steps=200_000, eval_every=1024,
                        target_return=475.0, max_episode_return=500.0),
    # masked policy against the random opponent: reward +1 win, 0 draw, -1 loss at the end
    # the 4672-way policy head dominates the cost: a 128-wide MLP, few epochs
    "Chess-v0": dict(num_envs=256, num_steps=16, num_minibatches=2, update_epochs=2,
                     learning_rate=1e-3, gamma=0.99, gae_lambda=0.95, ent_coef=0.01,
                     hidden_sizes=(128, 128), activation="relu", total_steps=20_000_000,
                     eval_every=1_000_000, eval_episodes=1000, target_return=None,
                     time_limit=1200.0,
                     env_kwargs={"opponent": "random", "observation": "planes"}),
}
LOG_EVERY_S = 1.0


def _env_name(env_id: str) -> str:
    return env_id.removeprefix("envfleet/")


def preset(env_id: str) -> dict[str, Any]:
    """The tuned settings for ``env_id``, else generic ones with Gymnasium's target."""
    name = _env_name(env_id)
    if name in PRESETS:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in PRESETS[name].items()}
    target = None
    try:
        import gymnasium

        target = gymnasium.spec(name).reward_threshold
    except Exception:  # an id Gymnasium does not know: make() will say so
        pass
    return {"target_return": target}


# --- argument parsing ---------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _seed(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``train`` subcommand's options."""
    parser.add_argument("env", metavar="ENV", help="env id (native, e.g. CartPole-v1, or any "
                                                  "Gymnasium id with an executor backend)")
    parser.add_argument("--backend", default="auto",
                        help="numba, torch, cuda (native ids); serial, subprocess, pool "
                             "(any id). Default: numba for native ids, pool otherwise")
    parser.add_argument("--num-envs", type=_positive_int, help="envs in the training batch")
    parser.add_argument("--num-steps", type=_positive_int, help="steps per env per rollout")
    parser.add_argument("--total-steps", type=_positive_int, help="env steps budget")
    parser.add_argument("--seed", type=_seed, default=1, help="seed (default: %(default)s)")
    parser.add_argument("--target-return", type=float,
                        help="stop once a greedy 100-episode evaluation reaches this mean "
                             "return (default: the preset's, or Gymnasium's reward_threshold)")
    parser.add_argument("--keep-going", action="store_true",
                        help="keep training after the target is reached")
    parser.add_argument("--time-limit", type=_positive_float, metavar="SEC",
                        help="stop after SEC seconds of training (evaluations included)")
    parser.add_argument("--eval-every", type=int, metavar="STEPS",
                        help="env steps between greedy evaluations (0: only at the end)")
    parser.add_argument("--eval-episodes", type=_positive_int,
                        help="episodes per evaluation, played at once (default: 100; "
                             "Chess-v0: 1000)")
    parser.add_argument("--learning-rate", type=_positive_float, help="Adam's step size")
    parser.add_argument("--torch-threads", type=_positive_int,
                        help="torch intra-op threads (default: 1)")
    parser.add_argument("--device", help="torch device of the agent (default: cpu)")
    parser.add_argument("--opponent", help="Chess-v0's opponent (default: random)")
    parser.add_argument("--agent-color", choices=("white", "black", "alternate"),
                        help="Chess-v0: the colour the agent plays (default: white)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the run's summary here")
    parser.add_argument("--plot", type=Path, metavar="PATH",
                        help="learning-curve PNG (default: next to --json, if given)")
    parser.add_argument("--save", type=Path, metavar="PATH", help="save the trained policy here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    parser.set_defaults(func=run_train)


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``eval`` subcommand's options."""
    parser.add_argument("env", metavar="ENV", help="env id the policy was trained on")
    parser.add_argument("--load", type=Path, required=True, metavar="PATH",
                        help="a policy saved by envfleet train --save")
    parser.add_argument("--backend", default="auto", help="envfleet backend (default: auto)")
    parser.add_argument("--episodes", type=_positive_int, default=None,
                        help="episodes, played at once (default: 100; Chess-v0: 1000)")
    parser.add_argument("--seed", type=_seed, default=0, help="seed (default: %(default)s)")
    parser.add_argument("--sample", action="store_true",
                        help="sample actions from the policy instead of playing greedily")
    parser.add_argument("--opponent", help="Chess-v0's opponent (default: random)")
    parser.add_argument("--agent-color", choices=("white", "black", "alternate"),
                        help="Chess-v0: the colour the agent plays (default: white)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the result here")
    parser.set_defaults(func=run_eval)


def build_args(options: argparse.Namespace) -> Any:
    """``ppo.Args`` from the preset of ``options.env`` and the flags given."""
    from envfleet.train.ppo import Args

    settings = preset(options.env)
    settings.update(env_id=options.env, backend=options.backend, seed=options.seed)
    flags = {"num_envs": options.num_envs, "num_steps": options.num_steps,
             "total_steps": options.total_steps, "target_return": options.target_return,
             "time_limit": options.time_limit, "eval_every": options.eval_every,
             "eval_episodes": options.eval_episodes,
             "learning_rate": options.learning_rate, "torch_threads": options.torch_threads,
             "device": options.device}
    settings.update({k: v for k, v in flags.items() if v is not None})
    if options.keep_going:
        settings["stop_at_target"] = False
    for key in ("opponent", "agent_color"):
        if getattr(options, key, None) is not None:
            settings.setdefault("env_kwargs", {})[key] = getattr(options, key)
    known = {f.name for f in fields(Args)}
    return Args(**{k: v for k, v in settings.items() if k in known})


def _check_env(env_id: str, backend: str) -> None:
    """Refuse an env this branch cannot build, before torch and the envs start."""
    import envfleet
    from envfleet.registry import NATIVE_ENVS

    name = _env_name(env_id)
    if name == "Chess-v0" and name not in NATIVE_ENVS:
        raise CommandError("Chess-v0 is not available in this build of envfleet yet (it "
                           "lands with the Chess-v0 issue); train CartPole-v1 or a Gymnasium "
                           "id meanwhile")
    if backend != "auto" and backend not in envfleet.registry.ALL_BACKENDS:
        raise CommandError(f"unknown backend {backend!r}; valid backends: "
                           f"{', '.join(envfleet.registry.ALL_BACKENDS)}")


# --- train --------------------------------------------------------------------------------


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


def run_train(options: argparse.Namespace) -> int:
    """Train, print progress and the summary; write JSON, plot and policy when asked."""
    _check_env(options.env, options.backend)
    # numba's OpenMP threads (an env with num_threads > 1) spin after each parallel step and
    # starve torch on a small machine; passive waiting costs nothing here (set before torch loads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import envfleet
    from envfleet.bench.measure import background_load, cpu_seconds
    from envfleet.train import ppo

    args = build_args(options)
    console = Console(quiet=options.quiet, highlight=False)
    console.print(f"[bold]envfleet train[/bold] {args.env_id} backend={args.backend} "
                  f"num_envs={args.num_envs} total_steps={args.total_steps:,} seed={args.seed} "
                  f"target={_fmt(args.target_return)}", soft_wrap=True)
    bar = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                   console=console, auto_refresh=False, disable=options.quiet, transient=True)
    task = bar.add_task("training", total=args.total_steps, info="")
    state = {"last_log": -math.inf, "last_refresh": -math.inf, "eval": None}

    def on_progress(p: ppo.Progress) -> None:
        if p.eval_return is not None:
            state["eval"] = p.eval_return
        info = f"return {_fmt(p.episodic_return)} eval {_fmt(state['eval'])}"
        bar.update(task, completed=p.steps, info=info)
        if p.seconds - state["last_refresh"] >= 0.25 or p.done:
            state["last_refresh"] = p.seconds
            bar.refresh()
        if p.seconds - state["last_log"] >= LOG_EVERY_S or p.done:
            state["last_log"] = p.seconds
            bar.console.print(
                f"steps {p.steps:>9,} | {p.seconds:6.1f} s | return {_fmt(p.episodic_return):>6}"
                f" | eval {_fmt(state['eval']):>6} | steps/s env {_rate(p.sps_env):>6} "
                f"end-to-end {_rate(p.sps_end_to_end):>6} | {_breakdown(p.times)}",
                soft_wrap=True)

    cpu_before = cpu_seconds()
    t0 = time.perf_counter()
    try:
        with bar:
            agent, summary = ppo.train(args, on_progress)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError) as error:
        raise CommandError(str(error)) from None
    except (ValueError, TypeError) as error:
        if "make" in str(error) or "backend" in str(error) or "option" in str(error):
            raise CommandError(str(error)) from None
        raise
    load = background_load(cpu_before, cpu_seconds(), time.perf_counter() - t0)

    solved = ("never (within the budget)" if summary.solved_at_s is None else
              f"{summary.solved_at_s:.2f} s ({summary.solved_at_steps:,} steps)")
    console.print(f"[bold]solved at[/bold] {solved}; compile {summary.compile_s:.2f} s (apart); "
                  f"final greedy eval {_fmt(summary.final_eval_return)} over "
                  f"{summary.final_eval['episodes']} episodes", soft_wrap=True)
    console.print(f"steps/s: env-only {_rate(summary.sps_env)}, ideal {_rate(summary.sps_ideal)}"
                  f", end-to-end {_rate(summary.sps_end_to_end)} (efficiency "
                  f"{summary.efficiency:.2f}); time: {_breakdown(summary.times)}; "
                  f"other processes' load {_fmt(load, 2)} cores", soft_wrap=True)
    result = {"env": args.env_id, "backend": args.backend, "num_envs": args.num_envs,
              "seed": args.seed, **asdict(summary), "background_load": load}
    if _env_name(args.env_id) == "Chess-v0":
        result["final_outcomes"] = outcomes(summary.final_eval["returns"])
        o = result["final_outcomes"]
        console.print(f"final evaluation over {summary.final_eval['episodes']} games: win "
                      f"{o['win_rate']:.3f} draw {o['draw_rate']:.3f} loss {o['loss_rate']:.3f} "
                      f"(win - loss {o['win_rate'] - o['loss_rate']:+.3f})", soft_wrap=True)
    plot_path = options.plot or (options.json.with_suffix(".png") if options.json else None)
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"summary: {options.json}")
    if plot_path:
        why = plot_curve([result], plot_path, args.target_return)
        console.print(why or f"learning curve: {plot_path}")
    if options.save:
        options.save.parent.mkdir(parents=True, exist_ok=True)
        ppo.save(agent, args, str(options.save))
        console.print(f"policy: {options.save}")
    return 0


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


# --- eval ---------------------------------------------------------------------------------


def run_eval(options: argparse.Namespace) -> int:
    """Play a saved policy greedily on a batched env; print the mean return."""
    _check_env(options.env, options.backend)
    if not options.load.exists():
        raise CommandError(f"no saved policy at {options.load}")
    import numpy as np
    import torch

    import envfleet
    from envfleet.train import ppo

    name = _env_name(options.env)
    episodes = options.episodes or (1000 if name == "Chess-v0" else 100)
    kwargs = dict(preset(options.env).get("env_kwargs", {}))
    for key in ("opponent", "agent_color"):
        if getattr(options, key) is not None:
            kwargs[key] = getattr(options, key)
    torch.set_num_threads(1)
    try:
        env = envfleet.make(options.env, episodes, backend=options.backend, seed=options.seed,
                            copy=False, **kwargs)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError, ValueError) as error:
        raise CommandError(str(error)) from None
    agent, saved = ppo.load(str(options.load), env)
    if _env_name(saved["env_id"]) != name:
        env.close()
        raise CommandError(f"{options.load} was trained on {saved['env_id']}, not {options.env}")
    obs, _ = env.reset(seed=options.seed)
    result = ppo.evaluate(env, agent, options.seed, torch.device("cpu"),
                          isinstance(obs, torch.Tensor),
                          ppo.box_bounds(env.single_action_space, torch.device("cpu")),
                          greedy=not options.sample)
    env.close()
    returns = np.asarray(result.returns)
    out = {"env": options.env, "policy": "sampled" if options.sample else "greedy",
           "episodes": len(returns), "mean_return": float(returns.mean()),
           "std_return": float(returns.std()), "min_return": float(returns.min()),
           "max_return": float(returns.max()), "eval_s": result.seconds}
    line = (f"{options.env} ({out['policy']}): mean return {out['mean_return']:.2f} ± "
            f"{out['std_return']:.2f} over {out['episodes']} episodes (min "
            f"{out['min_return']:g}, max {out['max_return']:g})")
    if name == "Chess-v0":
        out.update(outcomes(returns))
        line += (f"; win {out['win_rate']:.3f} draw {out['draw_rate']:.3f} "
                 f"loss {out['loss_rate']:.3f}")
    print(line)
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def outcomes(returns: Any) -> dict[str, float]:
    """Win / draw / loss rates of games scored +1 / 0 / -1."""
    import numpy as np

    r = np.asarray(returns)
    return {"win_rate": float((r > 0).mean()), "draw_rate": float((r == 0).mean()),
            "loss_rate": float((r < 0).mean())}
