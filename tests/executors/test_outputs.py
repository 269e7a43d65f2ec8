"""What an env returns is checked where it is written: a bad observation, reward, flag or info
raises ``EnvWorkerError`` naming that env and what was wrong, on every backend (Gymnasium's
``SyncVectorEnv`` refuses the same observations, but not always with the env's index)."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet import EnvWorkerError
from tests.executors.envs import BadOutputEnv
from tests.executors.helpers import PROCESS_BACKENDS

N = 5
BAD = 3
# (replacement, whether Gymnasium's SyncVectorEnv refuses it too, the message after
# "env 3's step() returned")
CASES = [
    ({"obs": None}, True, r"None as its observation"),
    ({"obs": 7}, True, r"an observation of shape \(\) where the observation "
                       r"space has shape \(4,\)"),
    ({"obs": np.zeros(3, dtype=np.int64)}, True, r"an observation of shape \(3,\)"),
    ({"obs": np.zeros((1, 4), dtype=np.int64)}, True, r"an observation of shape \(1, 4\)"),
    ({"obs": np.full(4, 0.5)}, True, r"an observation of dtype float64 "
                                     r"where the observation space has dtype int64"),
    ({"obs": ["a", "b", "c", "d"]}, True, r"an observation of dtype <U1"),
    ({"reward": "abc"}, True, r"reward 'abc' \(str\): rewards must be real"),
    ({"reward": None}, False, r"reward None \(NoneType\)"),
    ({"reward": np.ones(2)}, False, r"reward array\(\[1., 1.\]\) \(ndarray\)"),
    ({"terminated": None}, False, r"terminated None \(NoneType\): terminated must be"),
    ({"truncated": "yes"}, False, r"truncated 'yes' \(str\): truncated must be a bool"),
    ({"terminated": 2}, False, r"terminated 2 \(int\)"),
    ({"info": None}, True, r"info None \(NoneType\): info must be a dict"),
    ({"info": [("t", 1)]}, True, r"info \[\('t', 1\)\] \(list\)"),
]
ACCEPTED = [{"obs": [1, 2, 3, 4]}, {"obs": np.arange(4, dtype=np.int32)},
            {"reward": 1}, {"reward": np.float32(2.5)}, {"reward": True},
            {"terminated": np.bool_(False)}, {"truncated": 0}]


def bad_envs(backend: str, num_envs: int = N, bad_index: int = BAD, at: int = 1, **bad):
    factories = [functools.partial(BadOutputEnv, index=i, bad_index=bad_index, at=at, **bad)
                 for i in range(num_envs)]
    if backend == "sync":
        return gym.vector.SyncVectorEnv(factories)
    options = {"num_workers": 2} if backend == "pool" else {}
    return envfleet.make(factories, num_envs, backend=backend, **options)


def check_refused(backend: str, bad: dict, message: str, num_envs: int = N,
                  bad_index: int = BAD, at: int = 1) -> None:
    env = bad_envs(backend, num_envs, bad_index, at, **bad)
    message = f"^env {bad_index}'s {'reset' if at == 0 else 'step'}\\(\\) returned {message}"
    try:
        if at == 0:
            with pytest.raises(EnvWorkerError, match=message) as caught:
                env.reset(seed=0)
        else:
            env.reset(seed=0)
            with pytest.raises(EnvWorkerError, match=message) as caught:
                env.step(np.zeros(num_envs, dtype=np.int64))
        assert caught.value.env_index == bad_index
        env.reset(seed=0)  # still usable
        env.step(np.zeros(num_envs, dtype=np.int64))
    finally:
        env.close()


@pytest.mark.parametrize(("bad", "sync_refuses", "message"), CASES)
def test_bad_step_outputs_are_refused(bad, sync_refuses, message) -> None:
    if sync_refuses:  # the reference refuses it too (in its own words)
        reference = bad_envs("sync", **bad)
        reference.reset(seed=0)
        with pytest.raises(Exception):  # noqa: B017
            reference.step(np.zeros(N, dtype=np.int64))
    check_refused("serial", bad, message)


@pytest.mark.parametrize("bad", ACCEPTED)
def test_outputs_gymnasium_accepts_are_accepted(bad) -> None:
    reference, env = bad_envs("sync", **bad), bad_envs("serial", **bad)
    for venv in (reference, env):
        venv.reset(seed=0)
    actions = np.zeros(N, dtype=np.int64)
    ours, theirs = env.step(actions), reference.step(actions)
    for a, b in zip(ours[:4], theirs[:4], strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_reset_outputs_are_refused() -> None:
    check_refused("serial", {"obs": None}, r"None as its observation", at=0)
    check_refused("serial", {"info": 3}, r"info 3 \(int\)", at=0)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize(("bad", "at", "message"), [
    ({"obs": None}, 1, r"None as its observation"),
    ({"obs": 7.0}, 1, r"an observation of shape \(\)"),
    ({"reward": "abc"}, 1, r"reward 'abc' \(str\)"),
    ({"info": None}, 1, r"info None"),
    ({"obs": None}, 0, r"None as its observation"),
])
def test_process_backends_blame_the_right_env(backend, bad, at, message) -> None:
    """Env 5 of 8, in the middle of the second of 2 pool workers (envs 4..7)."""
    check_refused(backend, bad, message, num_envs=8, bad_index=5, at=at)


@pytest.mark.parametrize("backend", ["serial", "pool"])
def test_dict_and_tuple_observations_are_checked(backend) -> None:
    from tests.executors.envs import DictEnv, TupleEnv

    class BadDict(DictEnv):
        def step(self, action):
            obs, *rest = super().step(action)
            return {**obs, "pos": None}, *rest

    class BadTuple(TupleEnv):
        def step(self, action):
            obs, *rest = super().step(action)
            return (obs[0], obs[1], 0), *rest

    options = {"num_workers": 2} if backend == "pool" else {}
    for cls, message, action in [
        (BadDict, r"env 0's step\(\) returned None as observation\['pos'\]", np.zeros((2, 2))),
        (BadTuple, r"env 0's step\(\) returned an observation .* is a Tuple of 2",
         np.zeros((2, 2), dtype=np.int64)),
    ]:
        env = envfleet.make(cls, 2, backend=backend, **options)
        env.reset(seed=0)
        with pytest.raises(EnvWorkerError, match=message):
            env.step(action)
        env.close()
