#!/usr/bin/env python
"""The torch backend on CPU next to Gymnasium's NumPy CartPole, in one run: steps/s at a large
batch (rounds alternate between the two, each row the median round), the per-call time at one
env, and the tensor ops a step issues (counted with ``TorchDispatchMode``).

    .venv/bin/python -m benchmarks.scripts.bench_torch [--num-envs 65536] [--rounds 5]
        [--threads 1,2]

Random actions (pre-drawn), autoreset on, ``copy=True`` (the default) for both. Each figure is
given by wall clock and by the stepping thread's CPU time (``time.thread_time``: what a loaded
machine's other processes do not add). Not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import envfleet


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def stepper(env, num_envs: int, as_tensor: bool, seed: int = 0) -> Callable[[int], None]:
    """``run(k)``: k steps of a vector env with pre-drawn random actions."""
    env.reset(seed=seed)
    batches = np.random.default_rng(seed).integers(0, 2, (16, num_envs))
    if as_tensor:
        batches = torch.from_numpy(batches)

    def run(k: int) -> None:
        for t in range(k):
            env.step(batches[t % 16])

    return run


def timed(run: Callable[[int], None], steps: int) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds) of ``run(steps)``."""
    t0, c0 = time.perf_counter(), time.thread_time()
    run(steps)
    return time.perf_counter() - t0, time.thread_time() - c0


def ops_per_step(num_envs: int, mode: str, steps: int = 200) -> float:
    """Mean aten ops per ``step`` of torch CartPole (random actions, autoreset ``mode``)."""
    env = envfleet.make("CartPole-v1", num_envs, backend="torch", seed=0, autoreset_mode=mode)
    run = stepper(env, num_envs, True)
    run(20)
    with OpCounter() as counter:
        run(steps)
    return counter.count / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="per round and series")
    parser.add_argument("--threads", default="1,2", help="torch intra-op thread counts")
    args = parser.parse_args()
    with open("/proc/cpuinfo") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info
                    if line.startswith("model name")), platform.processor())
    print(f"CPU: {cpu}, {os.cpu_count()} cores; torch {torch.__version__}; "
          f"load average before: {os.getloadavg()}")
    for mode in ("NextStep", "SameStep"):
        print(f"torch ops per step, {mode}: 1 env {ops_per_step(1, mode):.1f}, "
              f"1024 envs {ops_per_step(1024, mode):.1f}")

    n = args.num_envs
    series = {"gym-numpy": stepper(gym.make_vec("CartPole-v1", n,
                                                vectorization_mode="vector_entry_point"), n,
                                   False)}
    threads = [int(t) for t in args.threads.split(",")]
    torch_env = envfleet.make("CartPole-v1", n, backend="torch", seed=0)
    torch_run = stepper(torch_env, n, True)
    for t in threads:
        def run(k: int, t: int = t) -> None:
            torch.set_num_threads(t)
            torch_run(k)
        series[f"torch ({t} thr)"] = run
    steps = {name: 3 for name in series}
    for name, run in series.items():  # warm up, then size each round to ~seconds
        run(2)
        steps[name] = max(3, int(args.seconds / (timed(run, 3)[0] / 3)))
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in series}
    for _ in range(args.rounds):
        for name, run in series.items():
            rates[name].append(tuple(steps[name] * n / t for t in timed(run, steps[name])))
    print(f"\nCartPole-v1 at {n} envs, median of {args.rounds} rounds (load average after: "
          f"{os.getloadavg()}); wall clock | thread CPU time")
    base = [statistics.median(r[k] for r in rates["gym-numpy"]) for k in (0, 1)]
    for name, values in rates.items():
        wall, cpu = (statistics.median(r[k] for r in values) for k in (0, 1))
        print(f"  {name:16s} {wall / 1e6:8.2f} M steps/s  {wall / base[0]:5.2f}x gym-numpy | "
              f"{cpu / 1e6:8.2f} M steps/s per thread-second  {cpu / base[1]:5.2f}x")

    print("\nper call at 1 env (median of rounds): wall clock, thread CPU time")
    single = {"gym-numpy": stepper(gym.make_vec("CartPole-v1", 1,
                                                vectorization_mode="vector_entry_point"), 1,
                                   False),
              "torch": stepper(envfleet.make("CartPole-v1", 1, backend="torch", seed=0), 1, True)}
    torch.set_num_threads(threads[0])
    calls: dict[str, list[tuple[float, float]]] = {name: [] for name in single}
    for _ in range(args.rounds):
        for name, run in single.items():
            calls[name].append(tuple(t / 2000 for t in timed(run, 2000)))
    for name, values in calls.items():
        wall, cpu = (statistics.median(r[k] for r in values) for k in (0, 1))
        print(f"  {name:16s} {wall * 1e6:8.1f} us wall  {cpu * 1e6:8.1f} us thread CPU")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
