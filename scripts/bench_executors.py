#!/usr/bin/env python
"""Steps/s of envfleet's executors next to what users pick instead, in one run.

    .venv/bin/python scripts/bench_executors.py [--env CartPole-v1] [--seconds 2]

Rows: envfleet ``pool`` (and ``subprocess`` / ``serial``) vs Gymnasium's ``SyncVectorEnv`` at 64
and 128 envs, and vs Stable-Baselines3's ``SubprocVecEnv`` at 32 envs; the same Gymnasium env
(``gymnasium.make(env)``) everywhere, one fixed batch of random actions, autoreset on. Not a
test: numbers depend on the machine (and on what else runs on it).

It is not part of ``envfleet bench`` (``src/envfleet/bench``): that command compares native
kernels with baselines per native env id, one fresh process per point.
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np

import envfleet


def rate(step, actions, num_envs: int, seconds: float) -> float:
    for _ in range(20):  # warm-up
        step(actions)
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(10):
            step(actions)
        calls += 10
    return num_envs * calls / elapsed


def measure(name: str, env_id: str, n: int, seconds: float) -> float:
    if name == "gym-sync":
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync")
        env.reset(seed=0)
        step, space, close = env.step, env.action_space, env.close
    elif name == "sb3-subproc":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        env = SubprocVecEnv([lambda: gym.make(env_id)] * n, start_method="forkserver")
        env.seed(0)
        env.reset()
        step = env.step
        space = gym.vector.utils.batch_space(env.action_space, n)
        close = env.close
    else:
        env = envfleet.make(env_id, n, backend=name, seed=0)
        env.reset()
        step, space, close = env.step, env.action_space, env.close
    space.seed(0)
    actions = np.asarray(space.sample())
    try:
        return rate(step, actions, n, seconds)
    finally:
        close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    print(f"{args.env}, {len(os.sched_getaffinity(0))} usable cores, "
          f"{args.seconds:g} s per point")
    plan = [(64, "gym-sync", ("pool", "subprocess")), (128, "gym-sync", ("pool",)),
            (32, "sb3-subproc", ("pool", "subprocess"))]
    print(f"{'num_envs':>8}  {'backend':<12} {'steps/s':>10}  vs baseline")
    for n, baseline, ours in plan:
        base = measure(baseline, args.env, n, args.seconds)
        print(f"{n:>8}  {baseline:<12} {base:>10,.0f}")
        for name in ours:
            r = measure(name, args.env, n, args.seconds)
            print(f"{n:>8}  {name:<12} {r:>10,.0f}  {r / base:.2f}x {baseline}")


if __name__ == "__main__":
    main()
