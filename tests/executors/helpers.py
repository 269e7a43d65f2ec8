"""Shared helpers for the executor tests: building each backend, leak checks."""

from __future__ import annotations

import functools
import multiprocessing
import os
import time

import pytest

import envfleet
from tests.executors.envs import FaultyEnv

BACKENDS = ["serial", "subprocess", "pool"]
PROCESS_BACKENDS = ["subprocess", "pool"]


def shm_names() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:  # not Linux
        pytest.skip("no /dev/shm here")


def our_names(env) -> set[str]:
    """The /dev/shm entries of a process executor: its segment and its semaphore (a pool)."""
    inner = env.unwrapped
    names = {b.name.lstrip("/") for b in inner.transport.buffers}
    names |= {"sem." + c._semlock.name.lstrip("/") for c in inner.transport.closers
              if hasattr(c, "_semlock")}
    assert names <= shm_names(), "the executor's entries should exist while it runs"
    return names


def pid_gone(pid: int) -> bool:
    """No process ``pid``, or only a zombie left for its parent to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def worker_pids(env) -> list[int]:
    return [w.process.pid for w in env.unwrapped.transport.workers]


def assert_nothing_left(pids: list[int], names: set[str], timeout: float = 5.0) -> None:
    """Every worker gone and reaped; none of the executor's /dev/shm ``names`` left.

    (Only the executor's own names: other test sessions may share this machine's /dev/shm.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(pid_gone(p) for p in pids):
        time.sleep(0.02)
    assert all(pid_gone(p) for p in pids), [p for p in pids if not pid_gone(p)]
    assert not [p for p in multiprocessing.active_children() if p.pid in pids]
    assert not names & shm_names()


def faulty(fault: str, bad_index: int, backend: str, num_envs: int = 5, **options):
    """``num_envs`` FaultyEnvs on ``backend`` (a pool: 2 workers unless told)."""
    factories = [functools.partial(FaultyEnv, index=i, fault=fault, bad_index=bad_index)
                 for i in range(num_envs)]
    if backend == "pool":
        options.setdefault("num_workers", 2)
    return envfleet.make(factories, num_envs, backend=backend, **options)
