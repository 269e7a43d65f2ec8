"""``--study executors``: N copies of a Gymnasium env, every way a user can run them.

Seeds 001 and 002: time per call and steps/s against num_envs and workers for envfleet's
executors (``serial``, ``subprocess``, ``pool`` at each worker count, ``async``: the pool in
first-ready mode, ``batch_size = num_envs / 2``, ``recv`` / ``send`` as EnvPool's users step it)
next to Gymnasium's Sync/Async vector envs, SB3's Dummy/Subproc vec envs, PufferLib's
Multiprocessing vector env (at the same worker counts as the pool; its workers busy-wait) and
EnvPool (its own C++ env of the same id, where it has one), for CartPole-v1, Acrobot-v1,
HumanoidStandup-v5 (MuJoCo) and Atari Breakout (``ALE/Breakout-v5``, ale-py; seed 001's game).

Every contender steps the same Gymnasium env (``gymnasium.make(id)``, default arguments) with
the same fixed batch of random actions (``measure.measure``); copies of the outputs as each
returns them (envfleet's ``copy=True``). A contender or env that cannot run here is a row that
says why (``not installed: ...``, ``EnvPool has no ... env``). Each env is one job: a fresh
process that builds, measures and closes each contender at each num_envs in turn (their worker
processes are their own); every point is timed ``repeats`` times.

Ratios against ``gym-sync`` (a Python loop in one process: 1 core) are given as measured and per
core used (steps/s divided by the cores the contender's process tree really used, CPU seconds
over wall seconds: worker processes count, busy-waiting included).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from benchmarks.studies.common import Job, StudyRun, md_table, ok, spread_text
from envfleet.bench.baselines import BASELINES
from envfleet.bench.measure import PointSpec
from envfleet.bench.report import human, micros

DEFAULT_ENVS = ("CartPole-v1", "Acrobot-v1", "HumanoidStandup-v5", "ALE/Breakout-v5")
DEFAULT_NUM_ENVS = (4, 16)
DEFAULT_SECONDS = 0.2
#: the module an id's namespace needs imported in every process (``module:id`` ids)
NAMESPACE_MODULES = {"ALE/": ("ale_py", "bench")}
#: EnvPool's env of the same id preprocesses differently: not the same work
ENVPOOL_NOT_SAME = {"ALE/": "EnvPool's Breakout-v5 returns 84x84 grayscale stacked frames "
                            "with episodic life: not the same work"}
REFERENCE = "gym-sync"


def contenders(workers: list[int], only: list[str] | None = None
               ) -> list[tuple[str, str, dict[str, Any]]]:
    """(series label, backend or baseline, options) in table order; ``only``: the names
    (``--backends``: a backend, a baseline or ``async``) to keep."""
    out = [("serial", "serial", {}), ("subprocess", "subprocess", {})]
    out += [(f"pool {w}w", "pool", {"num_workers": w}) for w in workers]
    out += [(f"async {w}w", "pool", {"num_workers": w, "batch_size": "half"}) for w in workers]
    out += [(b, b, {}) for b in ("gym-sync", "gym-async", "sb3-dummy", "sb3-subproc")]
    out += [(f"pufferlib {w}w", "pufferlib", {"num_workers": w}) for w in workers]
    out.append(("envpool", "envpool", {}))
    return [c for c in out if only is None or c[0].split()[0] in only]


def resolve(env_id: str) -> tuple[str, str | None]:
    """(the id every process can make: ``module:id`` where a namespace needs its module
    imported, why it cannot run here or None)."""
    for prefix, (module, extra) in NAMESPACE_MODULES.items():
        if env_id.startswith(prefix):
            if importlib.util.find_spec(module) is None:
                return env_id, (f"not installed: needs {module} "
                                f"(pip install 'envfleet[{extra}]')")
            return f"{module}:{env_id}", None
    import gymnasium

    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as error:
        return env_id, f"{type(error).__name__}: {error}"
    if "mujoco" in str(gymnasium.spec(env_id).entry_point) \
            and importlib.util.find_spec("mujoco") is None:
        return env_id, "not installed: needs mujoco (pip install 'gymnasium[mujoco]')"
    return env_id, None


def plan(envs: list[str], sizes: list[int], workers: list[int], seconds: float,
         repeats: int, only: list[str] | None = None
         ) -> tuple[list[Job], list[dict[str, Any]]]:
    """One job per env (its contenders one after the other), and the rows of what cannot
    run here."""
    jobs, skipped = [], []
    for env in envs:
        ref, why_env = resolve(env)
        items, labels = [], []
        for label, backend, options in contenders(workers, only):
            base = {"env": env, "series": label, "backend": backend,
                    "num_workers": options.get("num_workers")}
            why = why_env
            if why is None and backend in BASELINES:
                why = BASELINES[backend].status(ref.split(":", 1)[-1] if backend == "envpool"
                                                else ref)
                if backend == "envpool" and why is None:
                    why = next((v for k, v in ENVPOOL_NOT_SAME.items() if env.startswith(k)),
                               None)
            if why:
                skipped += [{**base, "num_envs": n, "status": "skipped", "note": why,
                             "label": f"{env} {label} {n}"} for n in sizes]
                continue
            for n in sizes:
                opts = dict(options)
                w = opts.get("num_workers")
                if backend == "pufferlib" and n % w:
                    skipped.append({**base, "num_envs": n, "status": "skipped",
                                    "label": f"{env} {label} {n}",
                                    "note": f"PufferLib needs num_envs divisible by {w} workers"})
                    continue
                if opts.get("batch_size") == "half":
                    if n < 2:
                        continue
                    opts["batch_size"] = n // 2
                if w is not None and backend == "pool" and w > n:
                    continue
                items.append(PointSpec(ref, ref, backend, n, seconds=seconds, repeats=repeats,
                                       min_calls=2, options=opts))
                labels.append({**base, "num_envs": n, "label": f"{env} {label} {n} envs"})
        if items:
            jobs.append(Job(items, labels))
    return jobs, skipped


def analyse(rows: list[dict[str, Any]]) -> None:
    """Per-core rates and the ratios to gym-sync at the same env and num_envs (in place)."""
    ref = {(r["env"], r["num_envs"]): r for r in rows if ok(r) and r["series"] == REFERENCE}
    for r in rows:
        if not ok(r):
            continue
        cores = r.get("cores_used")
        r["steps_per_s_per_core"] = r["steps_per_s"] / cores if cores else None
        g = ref.get((r["env"], r["num_envs"]))
        if g:
            r["ratio_vs_gym_sync"] = r["steps_per_s"] / g["steps_per_s"]
            if r["steps_per_s_per_core"] and g.get("cores_used"):
                r["ratio_vs_gym_sync_per_core"] = (r["steps_per_s_per_core"]
                                                   / (g["steps_per_s"] / g["cores_used"]))


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table per env: every contender at every num_envs."""
    parts = ["Time per call = one step of every env (async: of `batch_size` envs). "
             "`× gym-sync`: steps/s over gym-sync's at the same num_envs, as measured; "
             "`per core`: each divided by the cores its process tree used (CPU s / wall s)."]
    f2 = lambda v: f"{v:.2f}" if v is not None else ""  # noqa: E731
    for env in dict.fromkeys(r["env"] for r in rows):
        body, notes = [], {}
        for r in rows:
            if r["env"] != env:
                continue
            if not ok(r):
                notes.setdefault(r["series"], r.get("note") or r.get("error", ""))
                continue
            body.append([r["series"], f"{r['num_envs']:,}", str(r.get("num_workers") or ""),
                         human(r["steps_per_s"]), spread_text(r),
                         micros(r["us_per_call_median"]), f2(r.get("cores_used")),
                         human(r["steps_per_s_per_core"]) if r.get("steps_per_s_per_core")
                         else "", f2(r.get("ratio_vs_gym_sync")),
                         f2(r.get("ratio_vs_gym_sync_per_core"))])
        parts += ["", f"### {env}", "",
                  md_table(["contender", "num_envs", "workers", "steps/s", "±", "time/call",
                            "cores used", "steps/s per core", "× gym-sync",
                            "× gym-sync per core"], body)]
        if notes:
            parts += [""] + [f"- {s}: not measured: {note}" for s, note in notes.items()]
    return "\n".join(parts)


def plot(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """One panel per env: steps/s against num_envs, one line per contender."""
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in rows if ok(r)))
    cols = max(1, min(2, len(envs)))
    nrows = max(1, (len(envs) + cols - 1) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols, 4.5 * nrows),
                             layout="constrained", squeeze=False)
    series = list(dict.fromkeys(r["series"] for r in rows))
    colors = dict(zip(series, plt.get_cmap("tab20").colors, strict=False))  # one per series
    for ax, env in zip(axes.flat, envs, strict=False):
        for s in series:
            rs = sorted((r for r in rows if ok(r) and r["env"] == env and r["series"] == s),
                        key=lambda r: r["num_envs"])
            if rs:
                ax.plot([r["num_envs"] for r in rs], [r["steps_per_s"] for r in rs],
                        marker="o", label=s, color=colors.get(s),
                        linestyle="--" if rs[0]["backend"] in BASELINES else "-")
        sizes = sorted({r["num_envs"] for r in rows if ok(r) and r["env"] == env})
        ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="steps/s", title=env)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.minorticks_off()
        ax.grid(alpha=0.4)
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The executors study (``python -m benchmarks --study executors``)."""
    from envfleet.machine import usable_cores

    envs = envs or list(DEFAULT_ENVS)
    sizes = args.num_envs or list(DEFAULT_NUM_ENVS)
    workers = args.num_workers or sorted({1, usable_cores()})
    seconds = args.seconds or DEFAULT_SECONDS
    study = StudyRun("executors", args, {"envs": envs, "num_envs": sizes,
                                         "num_workers": workers, "seconds": seconds,
                                         "repeats": args.repeats, "reference": REFERENCE})
    jobs, skipped = plan(envs, sizes, workers, seconds, args.repeats, args.backends)
    rows = study.run(jobs, skipped)
    analyse(rows)
    title = (f"executors: {study.info['cpu']}, {usable_cores()} usable cores, "
             f"{study.info['date'][:10]}")
    return study.finish(markdown(rows), lambda path: plot(rows, title, path),
                        {"ratios": [{k: r.get(k) for k in (
                            "env", "series", "num_envs", "steps_per_s", "cores_used",
                            "steps_per_s_per_core", "ratio_vs_gym_sync",
                            "ratio_vs_gym_sync_per_core")} for r in rows if ok(r)]})
