#!/usr/bin/env python
"""Acrobot-v1 and MountainCar-v0 on numba next to Gymnasium's SyncVectorEnv (and EnvPool's C++
envs when ``import envpool`` works), the per-call time at one env, and CartPole-v1 at 65,536
envs, in one run.

    .venv/bin/python -m benchmarks.scripts.bench_classic [--envs Acrobot-v1,MountainCar-v0]
        [--rounds 5]

Every series is built once and the rounds interleave them (a burst of other work on a shared
machine hits every series alike); each row shows the median round. Random actions, autoreset
on. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

import envfleet


def stepper(env, num_envs: int, seed: int = 0) -> Callable[[int], None]:
    """``run(k)``: k steps of a vector env with pre-drawn random actions."""
    env.reset(seed=seed)
    batches = np.random.default_rng(seed).integers(0, env.single_action_space.n, (16, num_envs))

    def run(k: int) -> None:
        for t in range(k):
            env.step(batches[t % 16])

    return run


def envpool_stepper(env_id: str, num_envs: int) -> Callable[[int], None] | None:
    """EnvPool's own env in sync mode (its default thread count), or None if not installed."""
    try:
        import envpool
    except ImportError:
        return None
    env = envpool.make_gymnasium(env_id, num_envs=num_envs)
    return stepper(env, num_envs)


def rate(run: Callable[[int], None], steps: int, num_envs: int) -> float:
    """Env steps per second of one timed round."""
    start = time.perf_counter()
    run(steps)
    return steps * num_envs / (time.perf_counter() - start)


def per_call_us(run: Callable[[int], None], calls: int = 20_000) -> float:
    """Microseconds per ``step`` call."""
    return 1e6 / rate(run, calls, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="Acrobot-v1,MountainCar-v0")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.num_envs
    series: dict[str, tuple[Callable[[int], None], int, int]] = {}  # name -> (run, steps, n)
    singles: dict[str, Callable[[int], None]] = {}
    for env_id in [*args.envs.split(","), "CartPole-v1"]:
        series[f"{env_id} numba {n}"] = (stepper(envfleet.make(env_id, n, backend="numba"), n),
                                         200, n)
        one = envfleet.make(env_id, n, backend="numba", num_threads=1)
        series[f"{env_id} numba {n} 1-thread"] = (stepper(one, n), 100, n)
        singles[env_id] = stepper(envfleet.make(env_id, 1, backend="numba"), 1)
        if env_id == "CartPole-v1":
            continue
        sync = gym.vector.SyncVectorEnv([lambda e=env_id: gym.make(e)] * n)
        series[f"{env_id} gym-sync {n}"] = (stepper(sync, n), 3, n)
        pool = envpool_stepper(env_id, n)
        if pool is not None:
            series[f"{env_id} envpool {n}"] = (pool, 50, n)
    big = 65_536
    series[f"CartPole-v1 numba {big}"] = (
        stepper(envfleet.make("CartPole-v1", big, backend="numba"), big), 40, big)
    for run, steps, _ in series.values():  # compile, warm caches
        run(max(1, steps // 10))
    for run in singles.values():
        run(1000)
    rates: dict[str, list[float]] = {name: [] for name in series}
    calls: dict[str, list[float]] = {name: [] for name in singles}
    for _ in range(args.rounds):
        for name, (run, steps, num) in series.items():
            rates[name].append(rate(run, steps, num))
        for name, run in singles.items():
            calls[name].append(per_call_us(run))
    median = {name: statistics.median(r) for name, r in rates.items()}
    print(f"{'series':<34} {'steps/s':>14}  ratio")
    for name, value in median.items():
        env_id = name.split()[0]
        ours = median[f"{env_id} numba {n}"] if "CartPole" not in name else value
        ratio = "" if "numba" in name else f"numba / this = {ours / value:,.0f}x"
        print(f"{name:<34} {value:>14,.0f}  {ratio}")
    for name, us in calls.items():
        print(f"{name} numba num_envs=1: {statistics.median(us):.2f} us per step call "
              f"(best {min(us):.2f})")


if __name__ == "__main__":
    main()
