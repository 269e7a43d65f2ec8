"""``restart_failed=True``: a failed env (it raised, its worker died or hung) is rebuilt, its
episode ends as truncated with ``info["env_failure"]``, and every other env steps on."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest

import envfleet
from tests.executors.envs import FaultyEnv
from tests.executors.helpers import (
    BACKENDS,
    PROCESS_BACKENDS,
    assert_nothing_left,
    faulty,
    our_names,
    worker_pids,
)

N = 5
ZEROS = np.zeros(N, dtype=np.int64)
# (backend, fault): exceptions on every executor; deaths and hangs where there are processes
CASES = [(b, "step") for b in BACKENDS] + [(b, f) for b in PROCESS_BACKENDS
                                           for f in ("kill", "hang")]


def restarting(fault: str, backend: str, bad_index: int = 3, **options):
    if backend != "serial":
        options.setdefault("step_timeout", 1.0)
    return faulty(fault, bad_index, backend, N, restart_failed=True, **options)


def lost_envs(backend: str, fault: str) -> list[int]:
    """The envs whose episode a fault in env 3 ends: its worker's share when a worker is lost."""
    return [3, 4] if backend == "pool" and fault != "step" else [3]


@pytest.mark.parametrize(("backend", "fault"), CASES)
def test_failed_env_is_rebuilt_and_truncated_next_step(backend, fault) -> None:
    env = restarting(fault, backend)
    pids, shm = (worker_pids(env), our_names(env)) if backend != "serial" else ([], set())
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(ZEROS)
    before = obs.copy()
    obs, rewards, terminated, truncated, info = env.step(ZEROS)
    lost = lost_envs(backend, fault)
    kept = [i for i in range(N) if i not in lost]
    assert truncated[lost].all() and not terminated.any() and not truncated[kept].any()
    assert (rewards[lost] == 0).all() and (obs[kept, 3] == 2).all()  # the others stepped on
    np.testing.assert_array_equal(obs[lost], before[lost])  # the last observation is final
    assert info["_env_failure"].tolist() == [i in lost for i in range(N)]
    text = str(info["env_failure"][3])
    assert {"step": "RuntimeError: boom in env 3", "kill": "killed by SIGKILL",
            "hang": "did not answer within step_timeout=1 s"}[fault] in text
    obs, rewards, terminated, truncated, info = env.step(ZEROS)  # NEXT_STEP: the reset step
    assert (obs[lost, 3] == 0).all() and (rewards[lost] == 0).all()
    assert (obs[kept, 3] == 3).all() and not (terminated | truncated).any()
    assert "env_failure" not in info
    obs, *_ = env.step(ZEROS)
    assert (obs[lost, 3] == 1).all() and (obs[kept, 3] == 4).all()
    if backend != "serial":
        new_pids = worker_pids(env)
        assert (new_pids != pids) == (fault != "step")
        pids = set(pids) | set(new_pids)
    env.close()
    assert_nothing_left(list(pids), shm)


@pytest.mark.parametrize(("backend", "fault"), CASES)
def test_same_step_restart_reports_the_final_observation(backend, fault) -> None:
    env = restarting(fault, backend, autoreset_mode="SameStep")
    env.reset(seed=0)
    before, *_ = env.step(ZEROS)
    obs, _, _, truncated, info = env.step(ZEROS)
    lost = lost_envs(backend, fault)
    assert truncated[lost].all() and info["_final_obs"].tolist() == [i in lost
                                                                     for i in range(N)]
    np.testing.assert_array_equal(info["final_obs"][lost], before[lost])
    assert (obs[lost, 3] == 0).all()  # reset at once
    assert info["final_info"]["_env_failure"][lost].all()
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_failing_reset_is_retried_on_a_rebuilt_env(backend) -> None:
    env = restarting("reset", backend, bad_index=1)
    env.reset(seed=0)
    obs, info = env.reset(seed=7)
    assert obs[:, 1].tolist() == [7 + i for i in range(N)]  # env 1 too, rebuilt and seeded
    assert info["_env_failure"].tolist() == [i == 1 for i in range(N)]
    assert "reset failure in env 1" in str(info["env_failure"][1])
    env.step(ZEROS)
    env.close()


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_async_pool_restarts_a_lost_worker(fault) -> None:
    env = restarting(fault, "pool", bad_index=3, batch_size=2, num_workers=3)  # 0-1 2-3 4
    env.reset(seed=0)
    env.send(ZEROS)
    seen: dict[int, bool] = {}
    deadline = time.monotonic() + 10
    while not (seen.get(2) and seen.get(3)) and time.monotonic() < deadline:
        _, _, _, truncated, info = env.recv()
        for k, e in enumerate(info["env_id"].tolist()):
            if truncated[k]:
                assert e in (2, 3) and "env_failure" in info
            seen[e] = seen.get(e, False) or bool(truncated[k])
        time.sleep(0.01)
        env.send(np.zeros(2, dtype=np.int64), info["env_id"])
    assert seen.get(3) and seen.get(2)  # the lost worker's envs ended, truncated
    assert not any(seen.get(e) for e in (0, 1, 4))
    env.close()


def test_restart_failed_is_off_by_default() -> None:
    env = envfleet.make(functools.partial(FaultyEnv, fault="step", bad_index=0), 2,
                        backend="serial")
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(envfleet.EnvWorkerError, match="env 0 raised RuntimeError"):
        env.step(np.zeros(2, dtype=np.int64))
    env.close()
