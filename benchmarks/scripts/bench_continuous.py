"""Pendulum-v1 and MountainCarContinuous-v0: the numba backend vs Gymnasium's SyncVectorEnv of
the same env at 4096 envs (steps/s; numba on 1 or 2 threads, whichever is faster in a round;
interleaved rounds, so that a busy machine's noise hits both alike), and the numba backend's
time per call at num_envs=1.

    python -m benchmarks.scripts.bench_continuous [--num-envs 4096] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import envfleet


def steps_per_second(env, actions: np.ndarray, seconds: float) -> float:
    """Env steps per second of ``env.step(actions)`` over about ``seconds``."""
    env.step(actions)
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        env.step(actions)
        calls += 1
    return calls * env.num_envs / elapsed


def per_call_us(env, actions: np.ndarray, calls: int = 20_000) -> float:
    """Median over 5 runs of the time per ``step`` call, in microseconds."""
    env.step(actions)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            env.step(actions)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.num_envs
    for env_id in ("Pendulum-v1", "MountainCarContinuous-v0"):
        natives = [envfleet.make(env_id, n, backend="numba", seed=0, num_threads=threads)
                   for threads in (1, 2)]
        sync = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync")
        for env in natives:
            env.reset()
        sync.reset(seed=0)
        actions = np.random.default_rng(0).uniform(-1, 1, (n, 1)).astype(np.float32)
        ratios, fast, slow = [], [], []
        for _ in range(args.rounds):  # numba: its better thread count (1 or 2) this round
            fast.append(max(steps_per_second(env, actions, 0.5) for env in natives))
            slow.append(steps_per_second(sync, actions, 1.0))
            ratios.append(fast[-1] / slow[-1])
        one = envfleet.make(env_id, 1, backend="numba", seed=0)
        one.reset()
        us = per_call_us(one, np.zeros((1, 1), dtype=np.float32))
        print(f"{env_id}: numba {np.median(fast):,.0f} steps/s, SyncVectorEnv "
              f"{np.median(slow):,.0f} steps/s at {n} envs: ratio {np.median(ratios):,.0f}x "
              f"(rounds: {', '.join(f'{r:,.0f}' for r in ratios)}); numba at num_envs=1: "
              f"{us:.2f} us per step call")


if __name__ == "__main__":
    main()
