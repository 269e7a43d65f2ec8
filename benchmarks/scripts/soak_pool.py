"""Soak run: a 64-env CartPole pool stepped 5M steps; resident memory of the parent and of every
worker at the start and at the end (it must stay flat).

Run: .venv/bin/python -m benchmarks.scripts.soak_pool
"""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

import envfleet

NUM_ENVS, TOTAL_STEPS = 64, 5_000_000


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> None:
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="pool", seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 2, NUM_ENVS) for _ in range(16)]
    for k in range(2000):  # warm up: buffers touched, allocators settled
        env.step(batches[k % 16])
    pids = [os.getpid()] + [child.pid for child in multiprocessing.active_children()]
    start = {pid: rss_mb(pid) for pid in pids}
    began, steps = time.perf_counter(), 0
    while steps < TOTAL_STEPS:
        env.step(batches[(steps // NUM_ENVS) % 16])
        steps += NUM_ENVS
    elapsed = time.perf_counter() - began
    end = {pid: rss_mb(pid) for pid in pids}
    print(f"{steps} steps in {elapsed:.1f} s ({steps / elapsed / 1e3:.0f}k steps/s)")
    for pid in pids:
        role = "parent" if pid == os.getpid() else "worker"
        print(f"{role} {pid}: RSS {start[pid]:.1f} MB -> {end[pid]:.1f} MB")
    env.close()


if __name__ == "__main__":
    main()
