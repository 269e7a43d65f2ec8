"""``python -m benchmarks.chess.pz_chess``: PettingZoo's chess_v6 against
``envfleet.pettingzoo.chess_v6``, the same AEC loop on both sides, on one core.

The loop is what PettingZoo's documentation writes: ``for agent in env.agent_iter()``,
``env.last()``, a uniformly random legal action drawn from ``obs["action_mask"]`` with NumPy
(``None`` once the agent is done), ``env.step(action)``; a finished game is reset. An env
step is one ``step()`` call (a game's two closing ``step(None)`` calls count too). The time
spent inside the env (``last()`` + ``step()``) is also kept apart from the policy's draw.
Series alternate in rounds (a loaded machine slows all alike). For scale, the same run
measures native Chess-v0's batched step (``NativeGames``: 512 boards, one thread, random
legal actions drawn in compiled code): what stepping many boards per call adds.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np


def _makers() -> dict[str, Callable[[], Any]]:
    """The AEC envs measured: PettingZoo's env() and raw_env(), envfleet's env() and raw_env()."""
    from envfleet.pettingzoo import chess_v6 as ours

    makers: dict[str, Callable[[], Any]] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from pettingzoo.classic import chess_v6 as theirs
        makers["pettingzoo env()"] = theirs.env
        makers["pettingzoo raw_env()"] = theirs.raw_env
    except ImportError as error:  # python-chess or pygame missing: envfleet alone
        print(f"pettingzoo's chess_v6 unavailable ({error}): measuring envfleet only")
    makers["envfleet env()"] = ours.env
    makers["envfleet raw_env()"] = ours.raw_env
    return makers


class AECLoop:
    """One AEC env played by random legal moves; ``run(seconds)`` -> (steps, wall, env time)."""

    def __init__(self, make: Callable[[], Any], seed: int) -> None:
        self.env = make()
        self.env.reset()
        self.rng = np.random.default_rng(seed)

    def run(self, seconds: float) -> tuple[int, float, float]:
        env, rng, clock = self.env, self.rng, time.perf_counter
        steps, in_env = 0, 0.0
        t0 = clock()
        while True:
            if not env.agents:
                env.reset()
            for _ in env.agent_iter():
                a = clock()
                obs, _, terminated, truncated, _ = env.last()
                b = clock()
                action = None if terminated or truncated else \
                    int(rng.choice(np.flatnonzero(obs["action_mask"])))
                c = clock()
                env.step(action)
                in_env += (b - a) + (clock() - c)
                steps += 1
                if steps & 63 == 0 and clock() - t0 >= seconds:
                    return steps, clock() - t0, in_env


def one_core() -> int | None:
    """Pin this process to one allowed CPU (the bench's "one core"); the CPU, or None where
    the OS cannot pin."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def compare(seconds: float = 1.0, rounds: int = 5, seed: int = 0,
            batched_envs: int = 512, pin: bool = True) -> dict[str, Any]:
    """Steps/s of each AEC env (median round), env-only µs a step, envfleet's ratios to
    PettingZoo's, and native Chess-v0's batched plies/s on the same core (``pin``: this
    process stays pinned to one CPU afterwards)."""
    from benchmarks.chess.games import NativeGames
    from envfleet.bench.report import cpu_model

    cpu = one_core() if pin else None
    loops = {name: AECLoop(make, seed) for name, make in _makers().items()}
    for loop in loops.values():  # compile, warm up off the clock
        loop.run(0.2)
    batched = NativeGames(batched_envs, seed, num_threads=1)
    batched.reset()
    for _ in range(20):
        batched.step()
    rates: dict[str, list[float]] = {name: [] for name in [*loops, "Chess-v0 batched"]}
    env_us: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            steps, wall, in_env = loop.run(seconds)
            rates[name].append(steps / wall)
            env_us[name].append(1e6 * in_env / steps)
        calls, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            batched.step()
            calls += 1
        rates["Chess-v0 batched"].append(batched_envs * calls / (time.perf_counter() - t0))
    getattr(batched, "close", lambda: None)()
    series = []
    for name, r in rates.items():
        r = sorted(r)
        row = {"name": name, "steps_per_s": statistics.median(r), "min": r[0], "max": r[-1]}
        if name in env_us:
            row["env_us_per_step"] = statistics.median(env_us[name])
        series.append(row)
    by = {s["name"]: s for s in series}
    ratios = {}
    for mine, theirs in (("envfleet env()", "pettingzoo env()"),
                         ("envfleet raw_env()", "pettingzoo raw_env()")):
        if theirs in by:
            ratios[f"{mine} / {theirs}"] = {
                "loop": by[mine]["steps_per_s"] / by[theirs]["steps_per_s"],
                "env_only": by[theirs]["env_us_per_step"] / by[mine]["env_us_per_step"]}
    ratios["Chess-v0 batched / envfleet env()"] = {
        "loop": by["Chess-v0 batched"]["steps_per_s"] / by["envfleet env()"]["steps_per_s"]}
    return {"seconds": seconds, "rounds": rounds, "seed": seed, "pinned_cpu": cpu,
            "batched_envs": batched_envs, "cpu": cpu_model() or platform.processor(),
            "load_before": os.getloadavg(), "series": series, "ratios": ratios}


def plot(result: dict[str, Any], path: str) -> None:
    """A bar per series (steps/s, log scale), the CPU in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["name"] for s in result["series"]]
    values = [s["steps_per_s"] for s in result["series"]]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    bars = ax.barh(names, values, color=["#999" if n.startswith("pettingzoo") else "#2a7"
                                         for n in names])
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=8)
    ax.set_xlabel("env steps/s, one core (Chess-v0 batched: plies/s over "
                  f"{result['batched_envs']} boards)")
    ax.set_title(f"chess_v6 (AEC, random legal moves) — {result['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _main() -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.chess.pz_chess",
                                     description="PettingZoo's chess_v6 against envfleet's, "
                                     "the same AEC loop, alternating rounds on one core")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the result as JSON here (and a "
                        "PNG next to it)")
    args = parser.parse_args()
    out = compare(args.seconds, args.rounds)
    out["load_after"] = os.getloadavg()
    for s in out["series"]:
        extra = f"  ({s['env_us_per_step']:.1f} us in the env)" if "env_us_per_step" in s else ""
        print(f"{s['name']:24s} {s['steps_per_s']:>12,.0f} steps/s{extra}")
    for name, r in out["ratios"].items():
        parts = ", ".join(f"{k} {v:.1f}x" for k, v in r.items())
        print(f"{name:44s} {parts}")
    print(f"CPU: {out['cpu']}; load {out['load_before']} -> {out['load_after']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
        plot(out, os.path.splitext(args.out)[0] + ".png")


if __name__ == "__main__":
    _main()
