"""``--study tpb``: CUDA threads per block against num_envs, the turning point marked.

Seed 000's Figure 4: the ``cuda`` backend (one GPU thread per env,
``make(..., backend="cuda", threads_per_block=B)``) stepping a native env (default
CartPole-v1) at B = 32 .. 1024 and num_envs = 10^2 .. 10^7; the time per call (one step of
every env, the device synchronised) for each, and each B's *turning point*, where the runtime
starts to grow linearly with num_envs (``common.turning_point``). One job (a fresh process)
per B.

Without a GPU it measures nothing and says so: "not measured: no GPU" in the JSON, the table
and the PNG. Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, for tests) it runs a tiny
sweep that checks the study's structure; its timings are the simulator's, not a GPU's, and
the report says so.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from benchmarks.studies.common import (
    Job,
    StudyRun,
    md_table,
    ok,
    require_native,
    turning_point,
)
from envfleet.bench.measure import PointSpec
from envfleet.bench.report import micros

DEFAULT_BLOCK_SIZES = (32, 64, 128, 256, 512, 1024)
DEFAULT_NUM_ENVS = (100, 1000, 10_000, 100_000, 1_000_000, 10_000_000)
#: the CUDA simulator runs Python per thread (~ms each): a sweep that checks structure only
SIMULATOR_BLOCK_SIZES = (32, 64)
SIMULATOR_NUM_ENVS = (8, 32)
DEFAULT_SECONDS = 0.3
NO_GPU = "not measured: no GPU"


def gpu_status() -> str | None:
    """None when a real CUDA GPU can run the cuda backend, "simulator" under the CUDA
    simulator, else why there is no GPU to measure."""
    from envfleet.registry import backend_status

    reason = backend_status("cuda")
    if reason is not None:
        return reason
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "simulator"
    return None


def plan(env: str, block_sizes: list[int], sizes: list[int], seconds: float,
         repeats: int) -> list[Job]:
    """One job per threads-per-block value, over every num_envs."""
    return [Job([PointSpec(env, env, "cuda", n, seconds=seconds, repeats=repeats, min_calls=2,
                           options={"threads_per_block": b}) for n in sizes],
                [{"env": env, "threads_per_block": b, "num_envs": n,
                  "label": f"{env} cuda tpb={b} num_envs={n:,}"} for n in sizes])
            for b in block_sizes]


def turning_points(rows: list[dict[str, Any]]) -> dict[int, int | None]:
    """threads per block -> where the runtime turns linear in num_envs."""
    series: dict[int, list] = {}
    for r in rows:
        if ok(r):
            series.setdefault(r["threads_per_block"], []).append(
                (r["num_envs"], r["us_per_call_median"]))
    return {b: turning_point(points) for b, points in series.items()}


def markdown(rows: list[dict[str, Any]], turning: dict[int, int | None], simulator: bool,
             env: str) -> str:
    """num_envs x threads-per-block table of time per call, and the turning points."""
    blocks = sorted({r["threads_per_block"] for r in rows})
    sizes = sorted({r["num_envs"] for r in rows})
    at = {(r["threads_per_block"], r["num_envs"]): r for r in rows}
    body = [[f"{n:,}", *(micros(at[b, n]["us_per_call_median"]) if ok(at.get((b, n)))
                         else at.get((b, n), {}).get("status", "") for b in blocks)]
            for n in sizes]
    body.append(["turning point", *(f"{turning[b]:,}" if turning.get(b) else ""
                                    for b in blocks)])
    note = ("**CUDA simulator (NUMBA_ENABLE_CUDASIM=1): a structure check, not a measurement "
            "of a GPU.**\n\n" if simulator else "")
    return (f"### {env} on the cuda backend: time per call by num_envs and threads per block"
            f"\n\n{note}Time per call (every env stepped once, the device synchronised); "
            "turning point: the smallest num_envs from which the runtime grows linearly "
            "(linear growth from the largest num_envs is at least half of the time).\n\n"
            + md_table(["num_envs", *(f"tpb {b}" for b in blocks)], body))


def plot(rows: list[dict[str, Any]], turning: dict[int, int | None], title: str,
         path: Path) -> None:
    """Time per call against num_envs, one line per threads-per-block, turning points starred."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    for b in sorted({r["threads_per_block"] for r in rows}):
        rs = sorted((r for r in rows if ok(r) and r["threads_per_block"] == b),
                    key=lambda r: r["num_envs"])
        if not rs:
            continue
        (line,) = ax.plot([r["num_envs"] for r in rs],
                          [r["us_per_call_median"] * 1e-6 for r in rs], marker="o",
                          label=f"tpb {b}")
        tp = turning.get(b)
        if tp:
            r = next(r for r in rs if r["num_envs"] == tp)
            ax.plot([tp], [r["us_per_call_median"] * 1e-6], marker="*", markersize=15,
                    color=line.get_color(), linestyle="none")
    ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="seconds per call",
           title=title)
    ax.grid(alpha=0.4)
    ax.legend(title="★ turning point", fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_message(message: str, path: Path) -> None:
    """A PNG that says why there is no plot."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 2.5), layout="constrained")
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=13, wrap=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The threads-per-block study (``python -m benchmarks --study tpb``)."""
    env = envs[0] if envs else "CartPole-v1"
    require_native([env], "tpb")
    status = gpu_status()
    simulator = status == "simulator"
    seconds = args.seconds or DEFAULT_SECONDS
    block_sizes = args.block_sizes or list(SIMULATOR_BLOCK_SIZES if simulator
                                           else DEFAULT_BLOCK_SIZES)
    sizes = args.num_envs or list(SIMULATOR_NUM_ENVS if simulator else DEFAULT_NUM_ENVS)
    settings = {"env": env, "threads_per_block": block_sizes, "num_envs": sizes,
                "seconds": seconds, "repeats": args.repeats, "simulator": simulator}
    if status is not None and not simulator:
        message = f"{NO_GPU} ({status})"
        study = StudyRun("tpb", args, {**settings, "measured": False, "reason": message})
        study.add({"status": "not measured", "note": message, "label": "cuda",
                   "env": env})
        study.console.print(f"[yellow]{message}[/]")
        return study.finish(f"### {env} on the cuda backend\n\n**{message}.** Run "
                            f"`{study.command}` on a machine with a CUDA GPU (and "
                            "`pip install 'envfleet[cuda]'`) to measure it.",
                            lambda path: plot_message(message, path),
                            {"measured": False, "reason": message}) or 0
    if not simulator:  # which GPU the numbers belong to
        import torch

        settings["gpu"] = torch.cuda.get_device_name(0)
    study = StudyRun("tpb", args, {**settings, "measured": not simulator})
    rows = study.run(plan(env, block_sizes, sizes, seconds, args.repeats))
    for r in rows:
        r["simulator"] = simulator
    turning = turning_points(rows)
    title = (f"{env}, cuda: {'CUDA simulator (not a GPU)' if simulator else 'GPU'}, "
             f"{study.info['date'][:10]}")
    return study.finish(markdown(rows, turning, simulator, env),
                        lambda path: plot(rows, turning, title, path),
                        {"measured": not simulator, "simulator": simulator,
                         "turning_points": {str(b): n for b, n in turning.items()}})
