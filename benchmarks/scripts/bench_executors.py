#!/usr/bin/env python
"""Steps/s of envfleet's executors next to what users pick instead, in one run.

    .venv/bin/python -m benchmarks.scripts.bench_executors [--env CartPole-v1] [--seconds 1]
        [--rounds 3]

Rows: envfleet ``pool`` (and ``subprocess``) vs Gymnasium's ``SyncVectorEnv`` at 64 and 128
envs, and vs Stable-Baselines3's ``SubprocVecEnv`` at 32 envs; the same Gymnasium env
(``gymnasium.make(env)``) everywhere, one fixed batch of random actions, autoreset on. Each env
is built once; the rounds interleave the series (baseline, ours, baseline, ours, ...) so that a
burst of other work hits every series alike; the table shows the median round and the cores
other processes kept busy meanwhile (``load``: above ~0.25, the numbers are not clean).

Not a test. ``envfleet bench --backends pool,gym-sync,gym-async,sb3-subproc`` measures the same
series (for any Gymnasium id, with a --num-workers sweep), one fresh process per point, one
point at a time; this script is kept for its interleaved rounds over envs built once, which
give steadier ratios when other processes load the machine in bursts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import envfleet
from envfleet.bench.measure import background_load, cpu_seconds

PLAN = [(64, "gym-sync", ("pool", "subprocess")), (128, "gym-sync", ("pool",)),
        (32, "sb3-subproc", ("pool", "subprocess"))]


def proc_cpu(pids: list[int]) -> float:
    """CPU seconds used so far by processes ``pids`` (workers that are not our children)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def build(name: str, env_id: str, n: int
          ) -> tuple[Callable[[Any], Any], Any, Callable[[], None], list[int]]:
    """(step, one fixed batch of actions, close, worker pids) for series ``name``."""
    pids: list[int] = []
    if name == "gym-sync":
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync")
        env.reset(seed=0)
        space = env.action_space
    elif name == "sb3-subproc":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        env = SubprocVecEnv([lambda: gym.make(env_id)] * n, start_method="forkserver")
        pids = [p.pid for p in env.processes]
        env.seed(0)
        env.reset()
        space = gym.vector.utils.batch_space(env.action_space, n)
    else:
        env = envfleet.make(env_id, n, backend=name, seed=0)
        pids = [w.process.pid for w in env.unwrapped._workers]
        env.reset()
        space = env.action_space
    space.seed(0)
    return env.step, np.asarray(space.sample()), env.close, pids


def rate(step: Callable[[Any], Any], actions: Any, n: int, seconds: float,
         pids: list[int]) -> tuple[float, float]:
    """(steps/s, cores kept busy by other processes) over ``seconds`` of stepping."""
    for _ in range(10):  # warm-up
        step(actions)
    calls, cpu0, start = 0, cpu_seconds(), time.perf_counter()
    workers0 = proc_cpu(pids)
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(10):
            step(actions)
        calls += 10
    cpu1, workers = cpu_seconds(), proc_cpu(pids) - workers0
    if cpu0 is None or cpu1 is None:
        return n * calls / elapsed, float("nan")
    load = background_load(cpu0, (cpu1[0] - workers, cpu1[1]), elapsed)
    return n * calls / elapsed, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seconds", type=float, default=1.0, help="per round and series")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.env}, {len(os.sched_getaffinity(0))} usable cores, {args.rounds} rounds x "
          f"{args.seconds:g} s per series (median round shown)")
    print(f"{'num_envs':>8}  {'series':<12} {'steps/s':>10} {'load':>5}  vs baseline")
    for n, baseline, ours in PLAN:
        series = (baseline, *ours)
        built = {name: build(name, args.env, n) for name in series}
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in series}
        try:
            for _ in range(args.rounds):
                for name in series:
                    step, actions, _, pids = built[name]
                    runs[name].append(rate(step, actions, n, args.seconds, pids))
        finally:
            for _, _, close, _ in built.values():
                close()
        medians = {name: statistics.median(r for r, _ in runs[name]) for name in series}
        for name in series:
            load = max(ld for _, ld in runs[name])
            ratio = "" if name == baseline else f"{medians[name] / medians[baseline]:.2f}x"
            print(f"{n:>8}  {name:<12} {medians[name]:>10,.0f} {load:>5.2f}  {ratio}")


if __name__ == "__main__":
    main()
