"""``--study e2e``: the whole PPO loop (env step + policy inference + PPO update) against
num_envs, for each way to run the same env, with the ideal line (an env that costs nothing).

Seed 003's Figures 7 and 8. Each point is one ``envfleet train`` run (``ppo.train``) of a fixed
number of iterations, in a fresh process: the env's preset (``envfleet train``'s settings:
CartPole-v1's, Chess-v0's against the random opponent on the ``planes`` observation), its
minibatch size kept as num_envs grows (``train.cli.build_args``), no target, no evaluation
but the final one (off the clock). The contenders run the same game with the same network:

- CartPole-v1: native numba; Gymnasium's CartPoleEnv in envfleet's pool (worker processes) and
  serial (one process);
- Chess-v0: native numba; the python-chess env (``pychess_env``: the same observation, action
  labels, mask, rewards and ends, checked in lock step) serial and in the pool; OpenSpiel's
  chess serial (``openspiel_env``: the same game and opponent, but OpenSpiel's own 20x8x8
  observation and 4674 action ids, so the network's first and last layers differ by ~5%).

Reported per point: end-to-end steps/s (the loop's wall clock, as ``envfleet train`` reports
it) with the per-iteration median and spread, the ideal loop's median and interquartile range
(``train/ideal.py``: the same rollout, bookkeeping and update against a replayed env, one timed
right after each real iteration), the real iterations timed the same way (``iter/ideal``: like
for like), env-only steps/s, and the seconds per update spent stepping the env, in inference
and in learning (real and ideal). The ideal loop is an upper bound of the same work:
end-to-end above its IQR's upper end is flagged.
``--repeats R``: 3R iterations per point (the spread is over iterations).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import time
from pathlib import Path
from typing import Any

from benchmarks.studies.common import Job, StudyRun, Task, md_table, ok, spread_text
from benchmarks.studies.openspiel_env import OPENSPIEL_IMPORT_ID
from benchmarks.studies.pychess_env import PYCHESS_IMPORT_ID
from envfleet.bench.report import human

DEFAULT_ENVS = ("CartPole-v1", "Chess-v0")
DEFAULT_NUM_ENVS = {"CartPole-v1": (8, 64, 512), "Chess-v0": (16, 64, 256)}
#: (series, env id the series runs, backend) per env
SERIES = {
    "CartPole-v1": (("native numba", "CartPole-v1", "numba"),
                    ("pool", "CartPole-v1", "pool"),
                    ("serial", "CartPole-v1", "serial")),
    "Chess-v0": (("native numba", "Chess-v0", "numba"),
                 ("python-chess pool", PYCHESS_IMPORT_ID, "pool"),
                 ("python-chess serial", PYCHESS_IMPORT_ID, "serial"),
                 ("openspiel serial", OPENSPIEL_IMPORT_ID, "serial")),
}
#: series that need a package: (module, pip name)
REQUIRES = {"openspiel serial": ("pyspiel", "open_spiel")}
#: series whose env takes none of the preset's env arguments (its own encoding)
OWN_ENV_KWARGS = {"openspiel serial": {}}
PHASES = ("env", "inference", "learning", "other")
#: evaluation episodes of the final (untimed) evaluation: kept small, it is not measured here
EVAL_EPISODES = 8


def train_args(preset_env: str, env_id: str, backend: str, num_envs: int, iterations: int,
               ideal_every: int, seed: int = 1, env_kwargs: dict | None = None) -> Any:
    """``ppo.Args`` of ``envfleet train PRESET_ENV --num-envs N`` for ``iterations``
    iterations, run on ``env_id`` with ``backend`` (no target, no evaluation but the last)."""
    from envfleet.train.cli import add_train_arguments, build_args

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    # (a budget of whole preset rollouts, set below: no rollout shrunk to the preset's budget)
    args = build_args(parser.parse_args([preset_env, "--num-envs", str(num_envs),
                                         "--seed", str(seed), "--total-steps", str(2**62)]))
    batch = args.num_envs * args.num_steps
    return dataclasses.replace(
        args, env_kwargs=args.env_kwargs if env_kwargs is None else env_kwargs,
        env_id=env_id, backend=backend, total_steps=iterations * batch, eval_every=0,
        eval_episodes=EVAL_EPISODES, target_return=None, time_limit=None,
        stop_at_target=False, ideal_every=ideal_every)


def train_point(preset_env: str, env_id: str, backend: str, num_envs: int, iterations: int,
                ideal_every: int = 1, seed: int = 1, env_kwargs: dict | None = None
                ) -> dict[str, Any]:
    """One ``ppo.train`` run (a study Task): its rates, ideal IQR and time split per update."""
    from envfleet.machine import background_load, cpu_seconds
    from envfleet.train import ppo

    args = train_args(preset_env, env_id, backend, num_envs, iterations, ideal_every, seed,
                      env_kwargs)
    marks: list[float] = []  # training seconds (evaluations off) after each iteration
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    _, summary = ppo.train(args, on_progress=lambda p: marks.append(
        p.seconds - p.times["evaluation"]))
    wall = time.perf_counter() - t0
    cpu1 = cpu_seconds()
    batch = args.num_envs * args.num_steps
    iteration_s = [b - a for a, b in zip([0.0, *marks], marks, strict=False)]
    n = len(marks)
    train_s = summary.total_steps / summary.sps_end_to_end
    per_update = {k: summary.times[k] / n for k in ("env", "inference", "learning")}
    per_update["other"] = max(train_s / n - sum(per_update.values()), 0.0)
    low, high = map(float, summary.sps_ideal_iqr)
    return {
        "iterations": n, "batch": batch, "num_steps": args.num_steps,
        "num_minibatches": args.num_minibatches, "update_epochs": args.update_epochs,
        "hidden_sizes": list(args.hidden_sizes), "env_kwargs": args.env_kwargs,
        "steps_per_s_samples": [batch / s for s in iteration_s if s > 0],
        "sps_end_to_end": summary.sps_end_to_end, "sps_env": summary.sps_env,
        "sps_ideal": summary.sps_ideal, "sps_ideal_q1": low, "sps_ideal_q3": high,
        "ideal_iterations": summary.ideal_iterations, "efficiency": summary.efficiency,
        "above_ideal": summary.above_ideal,
        "sps_iteration": summary.sps_iteration,
        "sps_iteration_q1": float(summary.sps_iteration_iqr[0]),
        "sps_iteration_q3": float(summary.sps_iteration_iqr[1]),
        "cpu_per_iteration": summary.cpu_per_iteration,
        "ideal_seconds_per_update": summary.ideal_times,
        "seconds_per_update": per_update, "compile_s": summary.compile_s,
        "us_per_call_median": 1e6 * sorted(iteration_s)[n // 2] / args.num_steps,
        "cores_used": (round((cpu1[1] - cpu0[1]) / wall, 3) if cpu0 and cpu1 else None),
        "timed_background_load": background_load(cpu0, cpu1, wall),
    }


def plan(envs: list[str], sizes: list[int] | None, iterations: int,
         only: list[str] | None) -> tuple[list[Job], list[dict[str, Any]]]:
    """One job per (env, series, num_envs): a fresh process for every training run."""
    jobs, skipped = [], []
    for env in envs:
        for series, env_id, backend in SERIES[env]:
            if only and not {*series.split(), backend} & set(only):  # a word or backend
                continue
            missing = REQUIRES.get(series)
            if missing and importlib.util.find_spec(missing[0]) is None:
                skipped.append({"env": env, "series": series, "status": "skipped",
                                "note": f"not measured: not installed (pip install {missing[1]})",
                                "label": f"{env} {series}"})
                continue
            for n in sizes or DEFAULT_NUM_ENVS[env]:
                label = f"{env} {series} {n:,} envs"
                jobs.append(Job([Task(f"{__name__}:train_point",
                                      {"preset_env": env, "env_id": env_id, "backend": backend,
                                       "num_envs": n, "iterations": iterations,
                                       "env_kwargs": OWN_ENV_KWARGS.get(series)})],
                                [{"env": env, "series": series, "backend": backend,
                                  "num_envs": n, "label": label}]))
    return jobs, skipped


def markdown(rows: list[dict[str, Any]]) -> str:
    """Per env: throughput, ideal and the time split per update; the not-measured rows."""
    ms = lambda s: f"{1e3 * s:.1f}"  # noqa: E731
    body, notes = [], []
    for r in rows:
        if r.get("status") == "skipped":
            notes.append(f"- {r['env']} {r['series']}: {r['note']}")
            continue
        if not ok(r):
            body.append([r["env"], r["series"], f"{r['num_envs']:,}",
                         f"{r.get('status')}: {r.get('error', '')[:60]}"] + [""] * 10)
            continue
        t = r["seconds_per_update"]
        flag = " ⚠" if r["above_ideal"] else ""
        body.append([r["env"], r["series"], f"{r['num_envs']:,}",
                     human(r["sps_end_to_end"]) + flag, human(r["steps_per_s"]), spread_text(r),
                     f"{human(r['sps_ideal'])} ({human(r['sps_ideal_q1'])}-"
                     f"{human(r['sps_ideal_q3'])})", f"{r['efficiency']:.2f}",
                     f"{r['sps_iteration'] / r['sps_ideal']:.2f}",
                     human(r["sps_env"]), ms(t["env"]), ms(t["inference"]),
                     ms(t["learning"]), ms(t["other"])])
    parts = [
        "End-to-end steps/s of the whole PPO loop (`envfleet train`'s number: env steps over "
        "the loop's wall clock, evaluation off), the median iteration's rate with its spread, "
        "the ideal loop (the same rollout, bookkeeping and update against an env that costs "
        "nothing: median iteration and interquartile range), end-to-end / ideal, env-only "
        "steps/s (env steps over the time inside `env.step`), and milliseconds per update "
        "(one rollout of num_envs x num_steps steps and its PPO update) by phase. "
        "⚠: end-to-end above the ideal's IQR. The ideal loop does the same work minus the env "
        "(one iteration right after each real one, replaying its observations from the same "
        "parameters), so that is either a bug or a burst of load on the machine: `iter/ideal` "
        "(the median real iteration over the median ideal one, both timed the same way: "
        "rollout, bookkeeping and update) compares like for like, and the JSON lines hold "
        "each's thread CPU per iteration (`cpu_per_iteration`, less sensitive to load) and the "
        "ideal's ms per phase (`ideal_seconds_per_update`).", "",
        md_table(["env", "series", "num_envs", "end-to-end", "median iter", "±",
                  "ideal (IQR)", "e2e/ideal", "iter/ideal", "env-only", "env ms", "inference ms",
                  "learning ms", "other ms"], body),
    ]
    if notes:
        parts += ["", "Not measured:", "", *notes]
    settings = {(r["env"], r["num_envs"]): r for r in rows if ok(r)}
    if settings:
        parts += ["", "PPO settings per point (the env's `envfleet train` preset, its "
                      "minibatch size kept): " + "; ".join(
                          f"{env} {n:,} envs: {r['num_steps']} steps, {r['num_minibatches']} "
                          f"minibatches x {r['update_epochs']} epochs, MLP "
                          f"{'x'.join(map(str, r['hidden_sizes']))}"
                          for (env, n), r in sorted(settings.items()))]
    return "\n".join(parts)


def plot(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """Per env: steps/s against num_envs (ideal dashed), and stacked ms per update."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import NullLocator

    measured = [r for r in rows if ok(r)]
    envs = list(dict.fromkeys(r["env"] for r in measured)) or ["none"]
    fig, axes = plt.subplots(len(envs), 2, figsize=(13, 4.5 * len(envs)), layout="constrained",
                             squeeze=False)
    colours = dict(zip(PHASES, ("tab:blue", "tab:orange", "tab:green", "tab:gray"),
                       strict=True))
    for (ax, bars), env in zip(axes, envs, strict=True):
        mine = [r for r in measured if r["env"] == env]
        series = list(dict.fromkeys(r["series"] for r in mine))
        for k, s in enumerate(series):
            rs = sorted((r for r in mine if r["series"] == s), key=lambda r: r["num_envs"])
            x = [r["num_envs"] for r in rs]
            line = ax.plot(x, [r["sps_end_to_end"] for r in rs], marker="o", label=s)[0]
            ax.plot(x, [r["sps_ideal"] for r in rs], "--", color=line.get_color(),
                    linewidth=1, label=f"{s}: ideal" if k == 0 else None)
            ax.fill_between(x, [r["sps_ideal_q1"] for r in rs],
                            [r["sps_ideal_q3"] for r in rs], color=line.get_color(), alpha=0.1)
        ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="steps/s (PPO loop)",
               title=f"{env}: end-to-end (solid) and ideal (dashed, IQR shaded)")
        ax.xaxis.set_minor_locator(NullLocator())  # only the num_envs measured are labelled
        ax.set_xticks(sorted({r["num_envs"] for r in mine}) or [1])
        ax.set_xticklabels([f"{n:,}" for n in sorted({r["num_envs"] for r in mine})])
        ax.grid(alpha=0.4, which="both")
        ax.legend(fontsize=8)
        labels = [f"{r['series']}\n{r['num_envs']:,}" for r in mine]
        bottom = np.zeros(len(mine))
        for phase in PHASES:
            values = np.array([1e3 * r["seconds_per_update"][phase] for r in mine])
            bars.bar(range(len(mine)), values, bottom=bottom, color=colours[phase], label=phase)
            bottom += values
        bars.set_xticks(range(len(mine)))
        bars.set_xticklabels(labels, fontsize=7, rotation=45, ha="right")
        bars.set(yscale="log" if bottom.size and bottom.max() > 50 * max(bottom.min(), 1e-9)
                 else "linear", ylabel="ms per update", title=f"{env}: time per update")
        bars.legend(fontsize=8)
        bars.grid(alpha=0.4, axis="y")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


class _E2ERun(StudyRun):
    def footer(self, load_after: list[float] | None) -> str:
        """The common footer; a point here is one training run, its repeats its iterations."""
        return super().footer(load_after).replace(
            " (0 s each)", " (PPO iterations; each point a fresh training run)")


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The e2e study (``python -m benchmarks --study e2e``)."""
    from envfleet.command import CommandError
    from envfleet.machine import usable_cores

    envs = envs or list(DEFAULT_ENVS)
    unknown = [e for e in envs if e not in SERIES]
    if unknown:
        raise CommandError(f"--study e2e covers {', '.join(SERIES)}; not {', '.join(unknown)}")
    iterations = 3 * args.repeats
    study = _E2ERun("e2e", args, {"envs": envs, "num_envs": args.num_envs,
                                  "iterations": iterations, "repeats": iterations,
                                  "backends": args.backends})
    jobs, skipped = plan(envs, args.num_envs, iterations, args.backends)
    rows = study.run(jobs, skipped)
    title = (f"PPO end-to-end: {study.info['cpu']}, {usable_cores()} usable cores, "
             f"{study.info['date'][:10]}")
    return study.finish(markdown(rows), lambda path: plot(rows, title, path),
                        {"points": [{k: r.get(k) for k in (
                            "env", "series", "num_envs", "sps_end_to_end", "sps_ideal",
                            "sps_ideal_q1", "sps_ideal_q3", "efficiency", "above_ideal",
                            "sps_env", "seconds_per_update")} for r in rows if ok(r)]})
