"""First-ready async ``send`` / ``recv`` on the pool (EnvPool's ``batch_size`` semantics)."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest

import envfleet
from envfleet.executors.base import EnvWorkerError
from tests.executors.envs import CountingEnv, FaultyEnv, SlowEnv


def counting(n: int, length: int = 4, **kwargs):
    return [functools.partial(CountingEnv, i, length, **kwargs) for i in range(n)]


class Model:
    """What each CountingEnv (NEXT_STEP autoreset) must show: [index, seed, episode, t]."""

    def __init__(self, n: int, length: int, seed: int) -> None:
        self.length = length
        self.state = [[i, seed + i, 0, 0] for i in range(n)]
        self.pending = [False] * n
        self.reward = [0.0] * n

    def step(self, i: int, action: int) -> None:
        s = self.state[i]
        if self.pending[i]:
            s[2] += 1
            s[3] = 0
            self.pending[i] = False
            self.reward[i] = 0.0
        else:
            s[3] += 1
            self.reward[i] = 10.0 * s[3] + action
            self.pending[i] = s[3] >= self.length


def check_round_trips(env, n: int, batch_size: int, trips: int) -> None:
    """``trips`` send / recv round trips on ``env`` (``n`` counting envs from ``seed=10``), each
    served env's obs, reward and flags checked against ``Model``; then more until every env
    has been served: on a loaded machine a worker the OS keeps off the CPU reports late, and
    first-ready serves the others first."""
    obs, _ = env.reset()
    model = Model(n, 4, 10)
    np.testing.assert_array_equal(obs, np.array(model.state))
    served = np.zeros(n, dtype=int)
    rng = np.random.default_rng(0)
    enough = trips * batch_size // n // 3
    for trip in range(2000):
        if trip >= trips and served.min() >= enough:
            break
        obs, rewards, terminated, truncated, info = env.recv()
        ids = info["env_id"]
        assert ids.dtype.kind == "i" and len(ids) == batch_size
        assert len(set(ids.tolist())) == batch_size
        for k, i in enumerate(ids.tolist()):
            np.testing.assert_array_equal(obs[k], model.state[i])
            assert rewards[k] == model.reward[i]
            assert terminated[k] == (model.state[i][3] == 4 and model.pending[i])
            assert not truncated[k]
            if "_t" in info and info["_t"][k]:
                assert info["t"][k] == model.state[i][3]
        served[ids] += 1
        actions = rng.integers(0, 5, batch_size)
        for i, a in zip(ids.tolist(), actions.tolist(), strict=True):
            model.step(i, a)
        env.send(actions, ids)
    assert served.min() >= enough  # everyone served (first-ready)


@pytest.mark.parametrize("batch_size", [2, 3])
def test_round_trips_give_each_env_its_next_obs(batch_size) -> None:
    n = 6
    env = envfleet.make(counting(n), n, backend="pool", batch_size=batch_size, num_workers=3,
                        seed=10)
    try:
        check_round_trips(env, n, batch_size, trips=40)
    finally:
        env.close()


def test_reset_queues_every_env_oldest_first_and_recv_needs_enough_in_flight() -> None:
    env = envfleet.make(counting(4), 4, backend="pool", batch_size=2, num_workers=2, seed=0)
    try:
        env.reset()
        assert env.recv()[4]["env_id"].tolist() == [0, 1]
        assert env.recv()[4]["env_id"].tolist() == [2, 3]
        with pytest.raises(RuntimeError, match="send"):
            env.recv()
        with pytest.raises(RuntimeError, match="send\\(actions, env_ids\\) and recv"):
            env.step(np.zeros(4, dtype=np.int64))
        # send() straight after reset() (without recv) is allowed: every env waits for actions
        env.reset()
        env.send(np.ones(4, dtype=np.int64), np.arange(4))
        got = set()
        for _ in range(2):
            obs, _, _, _, info = env.recv()
            assert (obs[:, 3] == 1).all()
            got |= set(info["env_id"].tolist())
        assert got == {0, 1, 2, 3}
    finally:
        env.close()


def test_a_slow_env_does_not_hold_back_the_others_nor_starve() -> None:
    n = 4
    factories = [functools.partial(SlowEnv, i, 1000, 0.15 if i == 0 else 0.0) for i in range(n)]
    env = envfleet.make(factories, n, backend="pool", batch_size=2, num_workers=n, seed=0)
    try:
        env.reset()
        served = np.zeros(n, dtype=int)
        start = time.monotonic()
        while time.monotonic() - start < 1.0:
            _, _, _, _, info = env.recv()
            served[info["env_id"]] += 1
            env.send(np.zeros(2, dtype=np.int64), info["env_id"])
        assert served[0] >= 3  # the slow env is served whenever it is ready
        assert served[1:].min() > 3 * served[0]  # and the fast ones did not wait for it
    finally:
        env.close()


def test_bad_sends_are_refused_and_nothing_moves() -> None:
    env = envfleet.make(counting(4), 4, backend="pool", batch_size=2, num_workers=2, seed=0)
    try:
        env.reset()
        env.recv()
        env.send(np.array([1]), np.array([0]))
        a2 = np.ones(2, dtype=np.int64)
        with pytest.raises(ValueError, match="no env 7"):
            env.send(a2, np.array([1, 7]))
        with pytest.raises(ValueError, match="no env -1"):
            env.send(a2, np.array([-1, 1]))
        with pytest.raises(ValueError, match="env 1 is given more than once"):
            env.send(a2, np.array([1, 1]))
        with pytest.raises(ValueError, match="env 0 is not waiting"):
            env.send(a2, np.array([1, 0]))
        with pytest.raises(ValueError, match=r"2 actions|num_envs=2|shape"):
            env.send(np.ones(3, dtype=np.int64), np.array([1, 2]))
        with pytest.raises(ValueError, match="env_ids"):
            env.send(np.array([1, 9]), np.array([1, 2]))  # action 9 is not in Discrete(5)
        with pytest.raises(ValueError, match="1-D array of ints"):
            env.send(a2, np.array([0.5, 1.0]))
        assert env.unwrapped.first_ready.in_flight.tolist() == [True, False, False, False]
        env.send(np.array([2, 3]), np.array([1, 2]))
        results = {}
        for _ in range(2):
            obs, rewards, _, _, info = env.recv()
            for k, i in enumerate(info["env_id"].tolist()):
                results[i] = (obs[k].tolist(), rewards[k])
        # env 3 (queued by reset) comes first, then the first two of 0, 1, 2 to finish
        assert 3 in results and results[3][0] == [3, 3, 0, 0]
        for i, action in ((0, 1), (1, 2), (2, 3)):
            if i in results:
                assert results[i] == ([i, i, 0, 1], 10.0 + action)
    finally:
        env.close()


def test_validation_and_synchronous_default() -> None:
    for bad in (0, 5, 1.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            envfleet.make(counting(4), 4, backend="pool", batch_size=bad)
    env = envfleet.make(counting(4), 4, backend="pool", num_workers=2, seed=0)
    try:
        assert env.batch_size == 4
        obs, _ = env.reset()
        obs, *_ = env.step(np.ones(4, dtype=np.int64))
        assert (obs[:, 3] == 1).all()
        env.send(np.ones(4, dtype=np.int64))  # all envs
        with pytest.raises(RuntimeError, match="recv"):
            env.step(np.ones(4, dtype=np.int64))
        obs, _, _, _, info = env.recv()
        assert sorted(info["env_id"].tolist()) == [0, 1, 2, 3]
        assert (obs[:, 3] == 2).all()
        obs, *_ = env.step(np.ones(4, dtype=np.int64))
        assert (obs[:, 3] == 3).all()
    finally:
        env.close()


def test_same_step_final_obs_in_recv() -> None:
    env = envfleet.make(counting(2, length=1), 2, backend="pool", batch_size=1, num_workers=2,
                        seed=0, autoreset_mode="SameStep")
    try:
        env.reset()
        for _ in range(2):
            i = int(env.recv()[4]["env_id"][0])
            env.send(np.array([0]), np.array([i]))
        obs, _, terminated, _, info = env.recv()
        i = int(info["env_id"][0])
        assert terminated.tolist() == [True]
        assert info["_final_obs"].tolist() == [True]
        assert info["final_obs"][0].tolist() == [i, i, 0, 1]
        assert obs[0].tolist() == [i, i, 1, 0]
    finally:
        env.close()


def faulty(n: int, fault: str, bad: int = 1):
    return [functools.partial(FaultyEnv, i, fault, bad, 2) for i in range(n)]


def test_env_exception_during_recv_is_reported_then_reset_recovers() -> None:
    env = envfleet.make(faulty(4, "step"), 4, backend="pool", batch_size=2, num_workers=2,
                        seed=0)
    try:
        env.reset()
        env.send(np.zeros(4, dtype=np.int64), np.arange(4))
        env.recv(), env.recv()
        env.send(np.zeros(4, dtype=np.int64), np.arange(4))
        with pytest.raises(EnvWorkerError, match="env 1 raised RuntimeError") as caught:
            env.recv()
            env.recv()
        assert caught.value.env_index == 1
        with pytest.raises(RuntimeError, match="reset"):
            env.recv()
        obs, _ = env.reset()
        assert obs[:, 3].tolist() == [0, 0, 0, 0]
        assert env.recv()[4]["env_id"].tolist() == [0, 1]
    finally:
        env.close()


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_dead_or_hung_worker_during_recv_is_reported(fault) -> None:
    env = envfleet.make(faulty(4, fault, bad=2), 4, backend="pool", batch_size=2, num_workers=2,
                        seed=0, step_timeout=1.0)
    try:
        env.reset()
        env.send(np.zeros(4, dtype=np.int64), np.arange(4))
        env.recv(), env.recv()
        env.send(np.zeros(4, dtype=np.int64), np.arange(4))
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match=r"died unexpectedly|did not answer") as caught:
            for _ in range(2):
                env.recv()
        assert caught.value.env_index == 2
        assert time.monotonic() - start < 10
        with pytest.raises(EnvWorkerError, match="shut down"):
            env.recv()
    finally:
        env.close()


def test_recv_final_obs_of_tuple_observations_is_indexable_per_env() -> None:
    """As ``step()``'s (and SyncVectorEnv's): ``final_obs[k]`` is the k-th returned env's."""
    from gymnasium.utils.env_checker import data_equivalence
    from gymnasium.vector import AutoresetMode

    from tests.executors.envs import TupleEnv

    same_step = AutoresetMode.SAME_STEP
    actions = np.array([[0, 3], [1, 0], [2, 3], [0, 3]])  # a second part of 3 ends the episode
    serial = envfleet.make(TupleEnv, 4, backend="serial", autoreset_mode=same_step)
    serial.reset(seed=0)
    expected = serial.step(actions)[4]["final_obs"]
    env = envfleet.make(TupleEnv, 4, backend="pool", num_workers=2, batch_size=2,
                        autoreset_mode=same_step)
    env.reset(seed=0)
    env.send(actions)
    for _ in range(2):
        info = env.recv()[4]
        final = info["final_obs"]
        assert final.dtype == object and final.shape == (2,)
        for k, e in enumerate(info["env_id"].tolist()):
            assert data_equivalence(final[k], expected[e])
    env.close()
    serial.close()
