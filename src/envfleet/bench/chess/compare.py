"""``python -m envfleet.bench.chess``: envfleet and the peers measured in one process, in
alternating rounds (a loaded machine slows all alike); ratios as measured and per core used."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from envfleet.bench.chess.games import (
    BENCH_POSITIONS,
    GAME_PLIES,
    NativeGames,
    OpenSpielGames,
    PythonChessGames,
    _missing,
    chess_env_status,
)


@dataclass
class Contender:
    """One series of ``compare``: how it plays, on how many threads, with which copy rule."""

    name: str
    build: Any  # () -> an object with reset() and step() (one ply on every board)
    threads: int
    copy: str  # what the caller gets each ply: "copy" (its own) or "view" (overwritten)


def contenders(num_envs: int, seed: int = 0, threads: int | None = None) -> list[Contender]:
    """envfleet (numba: all usable cores and 1 thread, copy=True; and copy=False) and each
    installed peer (python-chess; OpenSpiel with its list mask and as NumPy)."""
    from envfleet.machine import usable_cores

    t = threads or usable_cores()
    out = []
    if chess_env_status() is None:
        out += [Contender(f"envfleet numba {k}t",
                          lambda k=k: NativeGames(num_envs, seed, num_threads=k), k, "copy")
                for k in dict.fromkeys((t, 1))]
        out += [Contender(f"envfleet numba {k}t copy=False",
                          lambda k=k: NativeGames(num_envs, seed, copy=False, num_threads=k),
                          k, "view")
                for k in dict.fromkeys((t, 1))]
    if _missing("chess") is None:
        out.append(Contender("python-chess", lambda: PythonChessGames(num_envs, seed), 1,
                             "copy"))
    if _missing("pyspiel") is None:
        out += [Contender("openspiel", lambda: OpenSpielGames(num_envs, seed), 1, "copy"),
                Contender("openspiel-numpy", lambda: OpenSpielGames(num_envs, seed, True), 1,
                          "copy")]
    return out


def compare(num_envs: int = 512, seconds: float = 0.5, rounds: int = 5, seed: int = 0,
            threads: int | None = None, names: list[str] | None = None) -> dict[str, Any]:
    """Plies/s of every contender on the same positions, in rounds that alternate them (the
    machine's load hits all alike); the median round of each, and envfleet's ratios to each
    peer as measured and per core used (envfleet's threads against the peer's one)."""
    import platform
    import statistics

    chosen = [c for c in contenders(num_envs, seed, threads) if not names or c.name in names]
    games = {}
    for c in chosen:  # build, reset and play a little: compile and warm up off the clock
        g = games[c.name] = c.build()
        g.reset()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.2:
            g.step()
    rates: dict[str, list[float]] = {c.name: [] for c in chosen}
    cpu_rates: dict[str, list[float]] = {c.name: [] for c in chosen}
    for _ in range(rounds):
        for c in chosen:
            g = games[c.name]
            calls, t0, cpu0 = 0, time.perf_counter(), time.process_time()
            while True:
                g.step()
                calls += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= seconds:
                    break
            rates[c.name].append(num_envs * calls / elapsed)
            # CPU seconds of every thread of this process (numba's included, spinning too)
            cpu_rates[c.name].append(num_envs * calls / max(time.process_time() - cpu0, 1e-9))
    for g in games.values():
        getattr(g, "close", lambda: None)()
    series = []
    for c in chosen:
        r = sorted(rates[c.name])
        series.append({"name": c.name, "threads": c.threads, "copy": c.copy,
                       "plies_per_s": statistics.median(r), "min": r[0], "max": r[-1],
                       "us_per_ply_per_core": 1e6 * c.threads / statistics.median(r),
                       "plies_per_cpu_s": statistics.median(cpu_rates[c.name])})
    ratios = []
    for ours in (s for s in series if s["name"].startswith("envfleet")):
        for peer in (s for s in series if not s["name"].startswith("envfleet")):
            measured = ours["plies_per_s"] / peer["plies_per_s"]
            ratios.append({"envfleet": ours["name"], "peer": peer["name"],
                           "measured": measured,
                           "per_core": measured * peer["threads"] / ours["threads"],
                           "per_cpu_s": ours["plies_per_cpu_s"] / peer["plies_per_cpu_s"]})
    return {"num_envs": num_envs, "seconds": seconds, "rounds": rounds,
            "threads_available": os.cpu_count(),
            "game_plies": GAME_PLIES, "positions": len(BENCH_POSITIONS),
            "load_before": os.getloadavg(), "cpu": platform.processor() or platform.machine(),
            "series": series, "ratios": ratios}


def _main() -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m envfleet.bench.chess",
                                     description="Chess-v0 against its peers on the same "
                                     "positions, alternating rounds in one process")
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    out = compare(args.num_envs, args.seconds, args.rounds, threads=args.threads,
                  names=args.only)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))
    for s in out["series"]:
        print(f"{s['name']:32s} {s['plies_per_s']:>12,.0f} plies/s "
              f"{s['plies_per_cpu_s']:>12,.0f} plies/cpu-s ({s['threads']}t, {s['copy']}, "
              f"{s['us_per_ply_per_core']:.3f} us/ply/core)")
    for r in out["ratios"]:
        print(f"{r['envfleet']:32s} / {r['peer']:16s} {r['measured']:8.1f}x measured "
              f"{r['per_core']:8.1f}x per core {r['per_cpu_s']:8.1f}x per CPU second")


if __name__ == "__main__":
    _main()
