"""Faults are reported, never waited on: an env's exception, a killed or hung worker, a failing
factory; afterwards no worker process and no shared-memory segment is left."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
import traceback

import numpy as np
import pytest

import envfleet
from envfleet.executors import EnvWorkerError
from tests.executors.envs import CountingEnv
from tests.executors.helpers import (
    BACKENDS,
    PROCESS_BACKENDS,
    assert_nothing_left,
    faulty,
    our_names,
    pid_gone,
    worker_pids,
)

N = 5
ZEROS = np.zeros(N, dtype=np.int64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_in_step(backend) -> None:
    env = faulty("step", 3, backend)
    pids, shm = (worker_pids(env), our_names(env)) if backend != "serial" else ([], set())
    env.reset(seed=0)
    env.step(ZEROS)
    with pytest.raises(EnvWorkerError, match="env 3 raised RuntimeError in step") as caught:
        env.step(ZEROS)
    error = caught.value
    assert isinstance(error, RuntimeError) and error.env_index == 3
    assert "boom in env 3" in error.worker_traceback
    assert "FaultyEnv" in error.worker_traceback or "envs.py" in error.worker_traceback
    assert "boom in env 3" in "".join(traceback.format_exception(error))  # chained
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(ZEROS)
    env.reset(seed=0)  # the workers are alive: a reset recovers
    env.step(ZEROS)
    env.close()
    env.close()
    assert_nothing_left(pids, shm)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_in_reset(backend) -> None:
    env = faulty("reset", 1, backend)
    pids, shm = (worker_pids(env), our_names(env)) if backend != "serial" else ([], set())
    env.reset(seed=0)
    with pytest.raises(EnvWorkerError, match="env 1 raised ValueError in reset") as caught:
        env.reset(seed=0)
    assert caught.value.env_index == 1
    assert "reset failure in env 1" in caught.value.worker_traceback
    env.close()
    assert_nothing_left(pids, shm)


@pytest.mark.parametrize("backend", BACKENDS)
def test_factory_failure(backend) -> None:
    factories = [CountingEnv] * 2 + [functools.partial(CountingEnv, nonsense=1)] + \
        [CountingEnv] * 2
    with pytest.raises(EnvWorkerError, match="env 2 raised TypeError in make") as caught:
        envfleet.make(factories, N, backend=backend)
    assert "nonsense" in caught.value.worker_traceback
    assert not [p for p in __import__("multiprocessing").active_children()
                if p.name.startswith("envfleet")]


def _exit_in_factory() -> None:
    os._exit(3)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_worker_dying_while_building_its_envs(backend) -> None:
    """A worker that dies inside an env factory is reported, not an AttributeError."""
    factories = [CountingEnv] * 3 + [_exit_in_factory] + [CountingEnv]
    with pytest.raises(EnvWorkerError, match="died unexpectedly"):
        envfleet.make(factories, N, backend=backend, **(
            {"num_workers": 2} if backend == "pool" else {}))
    assert not [p for p in __import__("multiprocessing").active_children()
                if p.name.startswith("envfleet")]


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_worker_killed_while_stepping(backend) -> None:
    env = faulty("kill", 3, backend)
    pids, shm = worker_pids(env), our_names(env)
    env.reset(seed=0)
    env.step(ZEROS)
    t0 = time.monotonic()
    with pytest.raises(EnvWorkerError, match="killed by SIGKILL") as caught:
        env.step(ZEROS)
    assert time.monotonic() - t0 < 5
    assert caught.value.env_index == 3 and "env 3" in str(caught.value)
    assert_nothing_left(pids, shm)  # the other workers were stopped at once
    with pytest.raises(EnvWorkerError, match="failed and was shut down"):
        env.step(ZEROS)
    env.close()
    env.close()


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_worker_killed_while_idle(backend) -> None:
    env = envfleet.make(CountingEnv, N, backend=backend)
    pids, shm = worker_pids(env), our_names(env)
    env.reset(seed=0)
    os.kill(pids[-1], signal.SIGKILL)
    with pytest.raises(EnvWorkerError, match=r"died unexpectedly \(killed by SIGKILL\)"):
        env.step(ZEROS)
    env.close()
    assert_nothing_left(pids, shm)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_hanging_step_times_out(backend) -> None:
    env = faulty("hang", 4, backend, step_timeout=0.5)
    pids, shm = worker_pids(env), our_names(env)
    env.reset(seed=0)
    env.step(ZEROS)
    t0 = time.monotonic()
    with pytest.raises(EnvWorkerError, match=r"did not answer within step_timeout=0\.5 s") \
            as caught:
        env.step(ZEROS)
    assert time.monotonic() - t0 < 4
    assert caught.value.env_index == 4 and "env 4's step()" in str(caught.value)
    env.close()
    assert_nothing_left(pids, shm)


def test_close_is_idempotent_and_unlinks_with_copy_false_outputs() -> None:
    env = envfleet.make(CountingEnv, N, backend="pool", copy=False)
    pids, shm = worker_pids(env), our_names(env)
    assert len(shm) == 2  # the buffers' segment and the finish-counter's semaphore
    obs, _ = env.reset(seed=0)  # a view of the shared buffers, still held
    env.close()
    env.close()
    assert_nothing_left(pids, shm)
    assert obs.shape == (N, 4)  # still readable: the mapping lives as long as the view
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_garbage_collected_env_leaves_nothing() -> None:
    env = envfleet.make(CountingEnv, 3, backend="pool")
    pids, shm = worker_pids(env), our_names(env)
    del env
    import gc

    gc.collect()
    assert_nothing_left(pids, shm)


PARENT = """
import os, sys, envfleet
from tests.executors.envs import FaultyEnv
import functools
env = envfleet.make([functools.partial(FaultyEnv, index=i, fault="hang", bad_index=1, at=1)
                     for i in range(2)], 2, backend="pool", num_workers=2)
env.reset(seed=0)
print(*[w.process.pid for w in env.unwrapped.transport.workers], flush=True)
if sys.argv[1] == "hang":
    env.step([0, 0])  # worker 1 hangs in its env
"""


@pytest.mark.parametrize("how", ["idle", "hang"])
def test_workers_exit_when_the_parent_dies(how) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how], stdout=subprocess.PIPE,
                              text=True, cwd=os.getcwd())
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2
        time.sleep(0.2)
        parent.kill()
        parent.wait(5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(map(pid_gone, pids)):
            time.sleep(0.05)
        assert all(map(pid_gone, pids))
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_unpicklable_info_is_reported(backend) -> None:
    from tests.executors.envs import UnpicklableInfoEnv

    env = envfleet.make(UnpicklableInfoEnv, 3, backend=backend)
    env.reset(seed=0)
    with pytest.raises(EnvWorkerError, match="info could not be sent"):
        env.step(np.zeros(3, dtype=np.int64))
    env.reset(seed=0)  # the worker is alive
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_envs_with_different_spaces_are_refused(backend) -> None:
    from tests.executors.envs import TupleEnv

    with pytest.raises((ValueError, EnvWorkerError), match="same spaces"):
        envfleet.make([CountingEnv, CountingEnv, TupleEnv], 3, backend=backend)
    assert not [p for p in __import__("multiprocessing").active_children()
                if p.name.startswith("envfleet")]
