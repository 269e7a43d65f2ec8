#!/usr/bin/env python
"""The pool's targets (issue 10), side by side in one process: Gymnasium's SyncVectorEnv, the
envfleet pool (2 workers) and, when installed, PufferLib's Multiprocessing vector env, in
alternating rounds on each env; the median round's steps/s and each round's ratio to Sync.

    .venv/bin/python -m benchmarks.scripts.bench_pool [--rounds 6] [--seconds 1.5]
        [--out docs/bench]
        [--only HumanoidStandup-v5:8 CartPole-v1:128]

Random actions (8 pre-drawn batches, cycled); every contender steps the same Gymnasium envs.
Writes pool.json and prints a Markdown table (with the pool parent's CPU time per batch, which
load disturbs less than the rates, and the load average). Not a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import envfleet
from envfleet.bench.baselines import BASELINES, BaselineEnv

#: (env id, num_envs, target pool / Sync) from issue 10
CASES = (("HumanoidStandup-v5", 8, 1.8), ("HumanoidStandup-v5", 32, 1.9),
         ("CartPole-v1", 128, 1.7), ("Acrobot-v1", 64, 1.5), ("ALE/Breakout-v5", 16, 1.7))


def gymnasium_id(env_id: str) -> str:
    """The id every contender builds: ALE ids import ale-py first (Gymnasium's "module:id")."""
    return f"ale_py:{env_id}" if env_id.startswith("ALE/") else env_id


def contenders(env_id: str, n: int, actions: list[np.ndarray]) -> dict[str, Any]:
    """name -> (step(k), close()) for each contender, reset and warmed up: the bench's own
    gym-sync and pufferlib baselines (PufferLib with 2 workers, when installed) and the pool."""
    gym_id = gymnasium_id(env_id)
    pool = envfleet.make(gym_id, n, backend="pool", num_workers=2, seed=0)
    built = {"sync": BASELINES["gym-sync"].build(gym_id, n, 0),
             "pool": BaselineEnv(reset=lambda: pool.reset(seed=0)[0], step=pool.step,
                                 action_space=pool.action_space, close=pool.close)}
    if importlib.util.find_spec("pufferlib") is not None:
        built["pufferlib"] = BASELINES["pufferlib"].build(gym_id, n, 0, num_workers=2)
    out = {}
    for name, env in built.items():
        env.reset()
        out[name] = (lambda k, e=env: e.step(actions[k % len(actions)]), env.close)
        for k in range(5):
            out[name][0](k)
    return out


def measure(env_id: str, n: int, rounds: int, seconds: float) -> dict[str, Any]:
    """Alternating rounds of every contender; steps/s per round."""
    space = gym.vector.utils.batch_space(gym.make(gymnasium_id(env_id)).action_space, n)
    space.seed(0)
    actions = [space.sample() for _ in range(8)]
    runners = contenders(env_id, n, actions)
    rates: dict[str, list[float]] = {name: [] for name in runners}
    # this process's CPU per batch: the pool's parent (less sensitive to load than its rate)
    cpu: dict[str, list[float]] = {name: [] for name in runners}
    load = os.getloadavg()[0]
    for r in range(rounds):
        for name in (list(runners) if r % 2 == 0 else list(reversed(runners))):
            step, calls, t0, c0 = runners[name][0], 0, time.perf_counter(), time.process_time()
            while (elapsed := time.perf_counter() - t0) < seconds or calls < 3:
                step(calls)
                calls += 1
            rates[name].append(n * calls / elapsed)
            cpu[name].append(1e6 * (time.process_time() - c0) / calls)
    for _, close in runners.values():
        close()
    ratios = {name: [a / b for a, b in zip(rs, rates["sync"], strict=True)]
              for name, rs in rates.items() if name != "sync"}
    return {"env": env_id, "num_envs": n, "steps_per_s": rates, "ratio_to_sync": ratios,
            "parent_cpu_us_per_batch": cpu, "load_average": [load, os.getloadavg()[0]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--out", default="docs/bench")
    parser.add_argument("--only", nargs="*", default=None,
                        help="cases to run, as ENV_ID:NUM_ENVS (default: all)")
    args = parser.parse_args()
    rows = []
    print("| env | num_envs | Sync | pool | pool / Sync (rounds) | PufferLib / Sync | target | "
          "pool parent CPU / batch | load |")
    print("|:---|---:|---:|---:|:---|---:|---:|---:|---:|")
    for env_id, n, target in CASES:
        if args.only is not None and f"{env_id}:{n}" not in args.only:
            continue
        try:
            row = measure(env_id, n, args.rounds, args.seconds)
        except Exception as error:  # an env whose package is missing
            print(f"| {env_id} | {n} | not measured: {type(error).__name__}: {error} |")
            continue
        row["target"] = target
        rows.append(row)
        med = {k: statistics.median(v) for k, v in row["steps_per_s"].items()}
        pool = row["ratio_to_sync"]["pool"]
        puffer = row["ratio_to_sync"].get("pufferlib")
        print(f"| {env_id} | {n} | {med['sync']:,.0f} | {med['pool']:,.0f} | "
              f"**{statistics.median(pool):.2f}x** ({' '.join(f'{x:.2f}' for x in pool)}) | "
              f"{f'{statistics.median(puffer):.2f}x' if puffer else '-'} | {target}x | "
              f"{statistics.median(row['parent_cpu_us_per_batch']['pool']):,.0f} µs | "
              f"{row['load_average'][0]:.2f}-{row['load_average'][1]:.2f} |", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pool.json").write_text(json.dumps(
        {"machine": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
         "command": "python -m benchmarks.scripts.bench_pool", "rounds": args.rounds,
         "seconds": args.seconds,
         "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
