"""First-ready batching is the core's (``ShareFleet`` owns a ``FirstReady``), for every
transport: ``subprocess`` gets EnvPool's ``send`` / ``recv`` as the pool and Ray have it,
checked against the model of what each env must show (``test_async.Model``)."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest

import envfleet
from envfleet.executors.base import EnvWorkerError
from envfleet.executors.first_ready import FirstReady
from envfleet.executors.fleet import ShareFleet
from envfleet.executors.pool import PoolVectorEnv, SharedMemoryTransport
from envfleet.executors.ray import RayTransport, RayVectorEnv
from envfleet.executors.subprocess import PipeTransport, SubprocessVectorEnv
from tests.executors.envs import FaultyEnv
from tests.executors.test_async import check_round_trips, counting


def test_first_ready_is_written_once_in_the_core_for_every_transport() -> None:
    """No transport has a send / recv / wait loop of its own: the fleet owns one
    ``FirstReady`` queue, and a transport only hands envs to an owner (``hand``) and takes
    what came (``take_reports``)."""
    for cls in (PoolVectorEnv, SubprocessVectorEnv, RayVectorEnv):
        assert issubclass(cls, ShareFleet)
        for name in ("send", "recv", "reset", "step"):
            assert getattr(cls, name) is getattr(ShareFleet, name), (cls, name)
    for cls in (SharedMemoryTransport, PipeTransport, RayTransport):
        for name in ("send", "recv", "collect", "arrived", "check_hung", "end_lost"):
            assert not hasattr(cls, name), (cls, name)
        for hook in ("hand", "take_reports", "drop_in_flight"):
            assert callable(getattr(cls, hook)), (cls, hook)
    env = envfleet.make(counting(4), 4, backend="pool", batch_size=2, num_workers=2)
    try:
        assert type(env.unwrapped.first_ready) is FirstReady
    finally:
        env.close()


def test_subprocess_round_trips_give_each_env_its_next_obs() -> None:
    n, batch_size = 4, 2
    env = envfleet.make(counting(n), n, backend="subprocess", batch_size=batch_size, seed=10)
    try:
        assert env.batch_size == batch_size
        check_round_trips(env, n, batch_size, trips=20)
        with pytest.raises(RuntimeError, match="send\\(actions, env_ids\\) and recv"):
            env.step(np.zeros(n, dtype=np.int64))
    finally:
        env.close()


def test_subprocess_recv_reports_env_errors_and_same_step_final_obs() -> None:
    factories = [functools.partial(FaultyEnv, i, "step", 1, 2) for i in range(3)]
    env = envfleet.make(factories, 3, backend="subprocess", batch_size=3, seed=0)
    try:
        env.reset()
        env.send(np.zeros(3, dtype=np.int64))
        env.recv()
        env.send(np.zeros(3, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match="env 1 raised RuntimeError") as caught:
            env.recv()
        assert caught.value.env_index == 1
    finally:
        env.close()
    env = envfleet.make(counting(2, length=1), 2, backend="subprocess", batch_size=1, seed=0,
                        autoreset_mode="SameStep")
    try:
        env.reset()
        for _ in range(2):
            i = int(env.recv()[4]["env_id"][0])
            env.send(np.array([0]), np.array([i]))
        obs, _, terminated, _, info = env.recv()
        i = int(info["env_id"][0])
        assert terminated.tolist() == [True] and info["_final_obs"].tolist() == [True]
        assert info["final_obs"][0].tolist() == [i, i, 0, 1]
        assert obs[0].tolist() == [i, i, 1, 0]
    finally:
        env.close()


def test_subprocess_recv_restarts_a_killed_worker() -> None:
    factories = [functools.partial(FaultyEnv, i, "kill", 1, 2) for i in range(3)]
    env = envfleet.make(factories, 3, backend="subprocess", batch_size=1, seed=0,
                        restart_failed=True, step_timeout=2.0)
    try:
        env.reset()
        env.send(np.zeros(3, dtype=np.int64))
        failed: dict[int, str] = {}
        deadline = time.monotonic() + 10
        while 1 not in failed and time.monotonic() < deadline:
            _, _, _, truncated, info = env.recv()
            e = int(info["env_id"][0])
            if truncated[0]:
                failed[e] = info["env_failure"][0]
            env.send(np.zeros(1, dtype=np.int64), np.array([e]))
        assert list(failed) == [1] and "died unexpectedly" in failed[1]
    finally:
        env.close()
