#!/usr/bin/env python
"""First-ready async pool vs the synchronous pool on envs of uneven latency, in one run.

    .venv/bin/python -m benchmarks.scripts.bench_async [--envs 20] [--fast-ms 1] [--seconds 2]
        [--rounds 3]

A tenth of the envs (every tenth index) sleep 10x longer per step than the others
(``time.sleep``: latency, not CPU). Series, interleaved round by round, median shown:

- ``sync, W=cores``: ``make(..., backend="pool")``, ``step()`` on every env (the default pool);
- ``sync, W=async's``: the same with as many workers as the async pool;
- ``async, B=N/2``: ``make(..., backend="pool", batch_size=N // 2)`` (default workers), a
  ``recv()`` / ``send()`` loop.

Steps/s counts env steps (a sync step of N envs counts N). Not a test.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import envfleet


class UnevenEnv(gym.Env):
    """Steps take ``delay`` seconds; episodes of 100 steps."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.observation_space = spaces.Box(-1, 1, (4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, dtype=np.float32), {}

    def step(self, action):
        time.sleep(self.delay)
        self.t += 1
        return np.full(4, self.t / 100, dtype=np.float32), 1.0, self.t >= 100, False, {}


def run_sync(env, seconds: float) -> float:
    actions = np.zeros(env.num_envs, dtype=np.int64)
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        env.step(actions)
        steps += env.num_envs
    return steps / elapsed


def run_async(env, seconds: float) -> float:
    actions = np.zeros(env.batch_size, dtype=np.int64)
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        info = env.recv()[4]
        env.send(actions, info["env_id"])
        steps += env.batch_size
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=20)
    parser.add_argument("--fast-ms", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n, fast = args.envs, args.fast_ms / 1000
    factories = [functools.partial(UnevenEnv, fast * (10 if i % 10 == 0 else 1))
                 for i in range(n)]
    async_env = envfleet.make(factories, n, backend="pool", batch_size=n // 2, seed=0)
    w = async_env.num_workers
    sync_default = envfleet.make(factories, n, backend="pool", seed=0)
    sync_same = envfleet.make(factories, n, backend="pool", seed=0, num_workers=w)
    series = {f"sync, W={sync_default.num_workers} (cores)": (sync_default, run_sync),
              f"sync, W={w}": (sync_same, run_sync),
              f"async, B={n // 2}, W={w}": (async_env, run_async)}
    results: dict[str, list[float]] = {name: [] for name in series}
    try:
        for env, _ in series.values():
            env.reset()
        for _ in range(args.rounds):
            for name, (env, run) in series.items():
                results[name].append(run(env, args.seconds))
    finally:
        for env, _ in series.values():
            env.close()
    slow = sum(i % 10 == 0 for i in range(n))
    print(f"{n} envs ({slow} at {10 * args.fast_ms:g} ms/step, the rest at {args.fast_ms:g} ms), "
          f"{args.rounds} rounds of {args.seconds:g} s, median steps/s:")
    best_sync = max(statistics.median(v) for k, v in results.items() if k.startswith("sync"))
    for name, values in results.items():
        med = statistics.median(values)
        print(f"  {name:24s} {med:10.0f}   x{med / best_sync:.2f} vs the best sync")


if __name__ == "__main__":
    main()
