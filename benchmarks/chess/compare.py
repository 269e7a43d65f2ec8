"""``python -m benchmarks.chess``: envfleet and the peers measured in one process, in
alternating rounds (a loaded machine slows all alike), in the tight loop and the user loop;
ratios as measured and per core used, and each series' tight-loop figure over its user loop's."""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.chess.games import (
    BENCH_POSITIONS,
    GAME_PLIES,
    EnvPoolGames,
    OpenSpielGames,
    PgxGames,
    PythonChessGames,
    _missing,
    build_games,
    chess_env_status,
)
from benchmarks.chess.userloop import UserLoop, timed_user_loop

#: the loops ``compare`` measures by default: each side's own (tight) and the user loop
LOOPS = ("tight", "user")


@dataclass
class Contender:
    """One series of ``compare``: how it plays, on how many threads, with which copy rule."""

    name: str
    build: Any  # () -> an object with reset(), step() (a ply on every board), play(), policy()
    threads: int | None  # None: its own choice (pgx's XLA)
    copy: str  # what the caller gets each ply: "copy" (its own) or "view" (overwritten)


def contenders(num_envs: int, seed: int = 0, threads: int | None = None) -> list[Contender]:
    """envfleet (numba: all usable cores and 1 thread, copy=True; and copy=False) and each
    installed peer (python-chess; OpenSpiel with its list mask and as NumPy; pgx on JAX's CPU
    backend; EnvPool's Chess-v1 on all usable cores and on 1 thread)."""
    from envfleet.machine import usable_cores

    t = threads or usable_cores()
    counts = list(dict.fromkeys((t, 1)))
    out = []
    if chess_env_status() is None:
        out += [Contender(f"envfleet numba {k}t",
                          lambda k=k: build_games("numba", num_envs, seed, k), k, "copy")
                for k in counts]
        out += [Contender(f"envfleet numba {k}t copy=False",
                          lambda k=k: build_games("numba", num_envs, seed, k, copy=False),
                          k, "view")
                for k in counts]
    if _missing("chess") is None:
        out.append(Contender("python-chess", lambda: PythonChessGames(num_envs, seed), 1,
                             "copy"))
    if _missing("pyspiel") is None:
        out += [Contender("openspiel", lambda: OpenSpielGames(num_envs, seed), 1, "copy"),
                Contender("openspiel-numpy", lambda: OpenSpielGames(num_envs, seed, True), 1,
                          "copy")]
    if _missing("pgx") is None:
        out.append(Contender("pgx", lambda: PgxGames(num_envs, seed), None, "copy"))
    if importlib.util.find_spec("envpool") is not None:
        out += [Contender(f"envpool {k}t", lambda k=k: EnvPoolGames(num_envs, seed, k), k,
                          "copy") for k in counts]
    return out


def _tight(games: Any, seconds: float) -> tuple[int, float]:
    """(calls, seconds) of ``step()`` (each side's own random legal moves) for ``seconds``."""
    calls, t0 = 0, time.perf_counter()
    while True:
        games.step()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return calls, elapsed


def compare(num_envs: int = 512, seconds: float = 0.5, rounds: int = 5, seed: int = 0,
            threads: int | None = None, names: list[str] | None = None,
            loops: tuple[str, ...] = LOOPS) -> dict[str, Any]:
    """Plies/s of every contender on the same positions, in its tight loop (each side draws
    its random legal moves its own way, inside the clock) and in the user loop (the same
    NumPy policy between steps on every side, outside the clock: ``timed_user_loop``), in
    rounds that alternate them (the machine's load hits all alike); the median round of each,
    and envfleet's ratios to each peer in the same loop, as measured and per core used
    (envfleet's threads against the peer's)."""
    import platform
    import statistics

    from envfleet.bench.report import cpu_model

    chosen = [c for c in contenders(num_envs, seed, threads) if not names or c.name in names]
    games, masks, rngs = {}, {}, {}
    for c in chosen:  # build, reset and play a little: compile and warm up off the clock
        for loop in loops:
            key = (c.name, loop)
            g = games[key] = c.build()
            masks[key] = g.reset()
            rngs[key] = np.random.default_rng(seed)
            if loop == "tight":
                _tight(g, 0.2)
            else:
                _, masks[key] = timed_user_loop(g, masks[key], rngs[key], 0.2)
    rates: dict[tuple[str, str], list[float]] = {key: [] for key in games}
    cpu_rates: dict[tuple[str, str], list[float]] = {key: [] for key in games}
    extra: dict[tuple[str, str], list[UserLoop]] = {key: [] for key in games}
    for _ in range(rounds):
        for c in chosen:
            for loop in loops:
                key = (c.name, loop)
                cpu0 = time.process_time()
                if loop == "tight":
                    calls, elapsed = _tight(games[key], seconds)
                else:
                    measured, masks[key] = timed_user_loop(games[key], masks[key], rngs[key],
                                                           seconds)
                    calls, elapsed = measured.calls, measured.step_s
                    extra[key].append(measured)
                rates[key].append(num_envs * calls / elapsed)
                # CPU seconds of every thread of this process (numba's included, spinning
                # too); the user loop's include its policy's: not reported
                if loop == "tight":
                    cpu_rates[key].append(num_envs * calls
                                          / max(time.process_time() - cpu0, 1e-9))
    for g in games.values():
        getattr(g, "close", lambda: None)()
    series = []
    for c in chosen:
        for loop in loops:
            key = (c.name, loop)
            r = sorted(rates[key])
            median = statistics.median(r)
            entry = {"name": c.name, "loop": loop, "threads": c.threads, "copy": c.copy,
                     "plies_per_s": median, "min": r[0], "max": r[-1],
                     "us_per_ply_per_core": 1e6 * c.threads / median if c.threads else None,
                     "plies_per_cpu_s": (statistics.median(cpu_rates[key])
                                         if cpu_rates[key] else None)}
            if extra[key]:
                calls = sum(m.calls for m in extra[key])
                entry["policy_us_per_call"] = 1e6 * sum(m.policy_s for m in extra[key]) / calls
                entry["minor_faults_per_step"] = sum(m.minor_faults for m in extra[key]) / calls
            series.append(entry)
    ratios = []
    for ours in (s for s in series if s["name"].startswith("envfleet")):
        for peer in (s for s in series if not s["name"].startswith("envfleet")
                     and s["loop"] == ours["loop"]):
            measured = ours["plies_per_s"] / peer["plies_per_s"]
            per_core = (measured * peer["threads"] / ours["threads"]
                        if peer["threads"] else None)
            ratios.append({"envfleet": ours["name"], "peer": peer["name"], "loop": ours["loop"],
                           "measured": measured, "per_core": per_core,
                           "per_cpu_s": (ours["plies_per_cpu_s"] / peer["plies_per_cpu_s"]
                                         if ours["plies_per_cpu_s"] else None)})
    gaps = []
    if "tight" in loops and "user" in loops:
        by = {(s["name"], s["loop"]): s for s in series}
        gaps = [{"name": c.name, "tight_over_user": by[c.name, "tight"]["plies_per_s"]
                 / by[c.name, "user"]["plies_per_s"]} for c in chosen]
    return {"num_envs": num_envs, "seconds": seconds, "rounds": rounds,
            "threads_available": os.cpu_count(),
            "game_plies": GAME_PLIES, "positions": len(BENCH_POSITIONS),
            "load_before": os.getloadavg(), "cpu": cpu_model() or platform.machine(),
            "series": series, "ratios": ratios, "tight_over_user": gaps}


def _main() -> None:
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m benchmarks.chess",
                                     description="Chess-v0 against its peers on the same "
                                     "positions, alternating rounds in one process, in the "
                                     "tight loop and the user loop")
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--loops", nargs="*", default=list(LOOPS), choices=LOOPS)
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the result (one JSON object) to this file")
    args = parser.parse_args()
    out = compare(args.num_envs, args.seconds, args.rounds, threads=args.threads,
                  names=args.only, loops=tuple(args.loops))
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")

    def times(x: float | None) -> str:
        return f"{x:8.1f}x" if x is not None else "       -"

    for s in out["series"]:
        per_core = (f"{s['us_per_ply_per_core']:.3f} us/ply/core"
                    if s["us_per_ply_per_core"] else "threads: its own")
        policy = (f", policy {s['policy_us_per_call']:,.0f} us/call, "
                  f"{s['minor_faults_per_step']:.1f} faults/step"
                  if "policy_us_per_call" in s else "")
        cpu = f"{s['plies_per_cpu_s']:>12,.0f}" if s["plies_per_cpu_s"] else f"{'-':>12}"
        print(f"{s['name']:28s} {s['loop']:5s} {s['plies_per_s']:>12,.0f} plies/s "
              f"{cpu} plies/cpu-s ({s['threads'] or '?'}t, "
              f"{s['copy']}, {per_core}{policy})")
    for r in out["ratios"]:
        print(f"{r['envfleet']:28s} / {r['peer']:16s} {r['loop']:5s} {times(r['measured'])} "
              f"measured {times(r['per_core'])} per core {times(r['per_cpu_s'])} per CPU s")
    for g in out["tight_over_user"]:
        print(f"{g['name']:28s} tight / user {g['tight_over_user']:.2f}x")


if __name__ == "__main__":
    _main()
