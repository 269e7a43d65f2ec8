"""``--study threads``: strong and weak scaling of the numba backend over CPU threads.

Seed 003's Figures 5 and 6, for native CartPole-v1 and Chess-v0 at several sizes:

- strong scaling: a fixed num_envs stepped on p = 1 .. max threads; the speed-up
  ``S_p = (steps/s on p threads) / (steps/s on 1 thread)`` and the efficiency ``S_p / p``
  (per thread asked for) and ``S_p / (cores used on p / cores used on 1)`` (per core the
  process really got: on a loaded machine p threads may get fewer than p cores);
- weak scaling: ``num_envs = p * envs_per_thread``; ``E_p = (time per call on 1 thread) /
  (time per call on p threads)`` (1 is perfect: p times the work in the same time).

Threads are numba's (``make(..., backend="numba", num_threads=p)``); above the usable cores
they are oversubscribed (marked). Each env's points are one job (one fresh process, kernels
compiled once); every point is timed ``repeats`` times. Chess-v0 steps with fresh random legal
actions every call (``random_legal_actions()``, as ``envfleet bench`` does).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.studies.common import (
    Job,
    StudyRun,
    md_table,
    ok,
    require_native,
    spread_text,
)
from envfleet.bench.measure import PointSpec
from envfleet.bench.report import human, micros
from envfleet.machine import usable_cores

DEFAULT_ENVS = ("CartPole-v1", "Chess-v0")
#: strong scaling sizes per env (default; ``--num-envs`` replaces them for every env)
STRONG_SIZES = {"CartPole-v1": (4096, 65_536, 1_048_576), "Chess-v0": (256, 2048)}
#: weak scaling: envs per thread
WEAK_PER_THREAD = {"CartPole-v1": (65_536,), "Chess-v0": (1024,)}
OTHER_STRONG, OTHER_WEAK = (4096, 65_536), (16_384,)
DEFAULT_SECONDS = 0.3


def thread_counts(max_threads: int) -> list[int]:
    """1, 2, 4, ... up to ``max_threads``, and ``max_threads`` itself."""
    counts, p = [], 1
    while p < max_threads:
        counts.append(p)
        p *= 2
    return [*counts, max_threads]


def plan(envs: list[str], max_threads: int, sizes: list[int] | None, seconds: float,
         repeats: int) -> list[Job]:
    """One job per env: its strong points (size x threads), then its weak points."""
    jobs = []
    for env in envs:
        items, labels = [], []
        for n in sizes or STRONG_SIZES.get(env, OTHER_STRONG):
            for p in thread_counts(max_threads):
                items.append(PointSpec(env, env, "numba", n, threads=p, seconds=seconds,
                                       repeats=repeats))
                labels.append({"env": env, "kind": "strong", "num_envs": n, "threads": p,
                               "label": f"{env} strong {n:,} envs, {p} threads"})
        for per in ([max(s // max_threads, 1) for s in sizes] if sizes
                    else WEAK_PER_THREAD.get(env, OTHER_WEAK)):
            for p in thread_counts(max_threads):
                items.append(PointSpec(env, env, "numba", per * p, threads=p, seconds=seconds,
                                       repeats=repeats))
                labels.append({"env": env, "kind": "weak", "envs_per_thread": per,
                               "num_envs": per * p, "threads": p,
                               "label": f"{env} weak {per:,} envs/thread, {p} threads"})
        jobs.append(Job(items, labels))
    return jobs


def analyse(rows: list[dict[str, Any]]) -> None:
    """Add S_p, the efficiencies and E_p to the rows (in place), against the 1-thread row."""
    base = {(r["env"], r["kind"], r.get("envs_per_thread") or r["num_envs"]): r
            for r in rows if ok(r) and r["threads"] == 1}
    for r in rows:
        one = base.get((r["env"], r["kind"], r.get("envs_per_thread") or r["num_envs"]))
        if not ok(r) or one is None:
            continue
        p = r["threads"]
        if r["kind"] == "strong":
            r["speedup"] = r["steps_per_s"] / one["steps_per_s"]
            r["efficiency"] = r["speedup"] / p
            if r.get("cores_used") and one.get("cores_used"):
                r["efficiency_per_core_used"] = r["speedup"] / (r["cores_used"]
                                                                / one["cores_used"])
        else:  # the same work per thread: time per call, 1 thread over p threads
            r["weak_efficiency"] = one["us_per_call_median"] / r["us_per_call_median"]


def markdown(rows: list[dict[str, Any]], cores: int) -> str:
    """The strong and weak scaling tables."""
    f2 = lambda v: f"{v:.2f}" if v is not None else ""  # noqa: E731
    strong, weak = [], []
    for r in rows:
        if not ok(r):
            (strong if r["kind"] == "strong" else weak).append(
                [r["env"], f"{r['num_envs']:,}", str(r["threads"]),
                 f"{r['status']}: {r.get('error', '')[:60]}", "", "", "", "", "", ""])
            continue
        over = "*" if r["threads"] > cores else ""
        common = [human(r["steps_per_s"]), spread_text(r), micros(r["us_per_call_median"])]
        if r["kind"] == "strong":
            strong.append([r["env"], f"{r['num_envs']:,}", f"{r['threads']}{over}", *common,
                           f2(r.get("speedup")), f2(r.get("efficiency")),
                           f2(r.get("cores_used")), f2(r.get("efficiency_per_core_used"))])
        else:
            weak.append([r["env"], f"{r['envs_per_thread']:,}", f"{r['threads']}{over}",
                         f"{r['num_envs']:,}", *common, f2(r.get("weak_efficiency")),
                         f2(r.get("cores_used"))])
    parts = [
        "### Strong scaling (fixed num_envs)", "",
        "S_p = steps/s on p threads / steps/s on 1 thread, as measured; `S_p/p` is per thread "
        "asked for; `per core used` divides by the cores the process really got "
        "(CPU seconds / wall seconds), which a loaded machine keeps below p.", "",
        md_table(["env", "num_envs", "threads", "steps/s", "±", "time/call", "S_p",
                  "S_p/p", "cores used", "S_p per core used"], strong), "",
        "### Weak scaling (num_envs = threads x envs per thread)", "",
        "E_p = time per call on 1 thread / time per call on p threads (1.00: p times the work "
        "in the same time).", "",
        md_table(["env", "envs/thread", "threads", "num_envs", "steps/s", "±", "time/call",
                  "E_p", "cores used"], weak),
    ]
    if any(r["threads"] > cores for r in rows):
        parts += ["", f"\\* more threads than the {cores} usable cores (oversubscribed)."]
    return "\n".join(parts)


def plot(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """Strong scaling S_p and weak scaling E_p against threads, with the ideal lines."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), layout="constrained")
    threads = sorted({r["threads"] for r in rows})
    ax1.plot(threads, threads, "k--", linewidth=1, label="ideal")
    ax2.plot(threads, [1.0] * len(threads), "k--", linewidth=1, label="ideal")
    series: dict[tuple, list] = {}
    for r in rows:
        if ok(r) and ("speedup" in r or "weak_efficiency" in r):
            key = (r["kind"], r["env"], r.get("envs_per_thread") or r["num_envs"])
            series.setdefault(key, []).append(r)
    for (kind, env, n), rs in series.items():
        rs.sort(key=lambda r: r["threads"])
        ax = ax1 if kind == "strong" else ax2
        y = [r["speedup"] if kind == "strong" else r["weak_efficiency"] for r in rs]
        label = f"{env}, {n:,} envs" + ("/thread" if kind == "weak" else "")
        ax.plot([r["threads"] for r in rs], y, marker="o", label=label)
    ax1.set(xlabel="threads p", ylabel="speed-up S_p", title="strong scaling")
    ax2.set(xlabel="threads p", ylabel="weak-scaling efficiency E_p", title="weak scaling",
            ylim=(0, 1.2))
    for ax in (ax1, ax2):
        ax.set_xticks(threads)
        ax.grid(alpha=0.4)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The threads study (``python -m benchmarks --study threads``)."""
    from envfleet.native.numba_backend import default_threads

    max_threads = args.max_threads or default_threads()
    seconds = args.seconds or DEFAULT_SECONDS
    envs = envs or list(DEFAULT_ENVS)
    require_native(envs, "threads")
    study = StudyRun("threads", args, {"envs": envs, "max_threads": max_threads,
                                       "num_envs": args.num_envs, "seconds": seconds,
                                       "repeats": args.repeats})
    rows = study.run(plan(envs, max_threads, args.num_envs, seconds, args.repeats))
    analyse(rows)
    cores = usable_cores()
    title = (f"numba threads: {study.info['cpu']}, {cores} usable cores, "
             f"{study.info['date'][:10]}")
    return study.finish(markdown(rows, cores), lambda path: plot(rows, title, path),
                        {"analysis": [{k: r.get(k) for k in (
                            "env", "kind", "num_envs", "threads", "steps_per_s", "speedup",
                            "efficiency", "efficiency_per_core_used", "weak_efficiency")}
                            for r in rows if ok(r)]})
