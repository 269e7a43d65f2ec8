"""Gymnasium's ``call`` / ``get_attr`` / ``set_attr`` on every executor: per env, in env order,
through wrappers; a failing call names the env and leaves the envs working."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.executors import EnvWorkerError
from tests.executors.envs import CountingEnv
from tests.executors.helpers import BACKENDS

N = 5


def counting(backend: str, **options):
    factories = [functools.partial(CountingEnv, index=i) for i in range(N)]
    if backend == "pool":
        options.setdefault("num_workers", 2)
    return envfleet.make(factories, N, backend=backend, **options)


@pytest.mark.parametrize("backend", BACKENDS)
def test_get_attr_and_call_answer_per_env_in_order(backend) -> None:
    env = counting(backend)
    env.reset(seed=3)
    assert env.get_attr("index") == tuple(range(N))
    observations = env.call("_obs")  # a method: called
    assert [int(o[1]) for o in observations] == [3 + i for i in range(N)]  # seed + i
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_attr_one_value_or_one_per_env(backend) -> None:
    env = counting(backend)
    env.reset(seed=0)
    env.set_attr("length", 1)
    _, _, terminated, _, _ = env.step(np.zeros(N, dtype=np.int64))
    assert terminated.all()
    env.set_attr("index", [10 * i for i in range(N)])
    assert env.get_attr("index") == tuple(10 * i for i in range(N))
    with pytest.raises(ValueError, match="one value per env"):
        env.set_attr("index", [1, 2])
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_attributes_reach_through_gymnasium_wrappers(backend) -> None:
    env = envfleet.make("CartPole-v1", 3, backend=backend)
    assert env.get_attr("gravity") == (9.8, 9.8, 9.8)  # CartPoleEnv under TimeLimit etc.
    env.set_attr("gravity", [1.0, 2.0, 3.0])
    assert env.get_attr("gravity") == (1.0, 2.0, 3.0)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_call_names_the_env_and_the_envs_keep_working(backend) -> None:
    env = counting(backend)
    env.reset(seed=0)
    with pytest.raises(EnvWorkerError, match="env 0 raised AttributeError in call") as caught:
        env.get_attr("no_such_attribute")
    assert caught.value.env_index == 0
    obs, *_ = env.step(np.zeros(N, dtype=np.int64))  # no reset needed: nothing moved
    assert (obs[:, 3] == 1).all()
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_attribute_is_an_attribute_error_as_in_sync(backend) -> None:
    """SyncVectorEnv raises AttributeError for a missing attribute (hasattr-style checks such
    as SB3's VecEnv.has_attr rely on it); so does every executor, still naming the env."""
    factories = [functools.partial(CountingEnv, index=i) for i in range(N)]
    with pytest.raises(AttributeError):
        gym.vector.SyncVectorEnv(factories).get_attr("no_such_attribute")
    env = counting(backend)
    env.reset(seed=0)
    for call in (lambda: env.get_attr("no_such_attribute"), lambda: env.call("no_such", 1)):
        with pytest.raises(AttributeError, match="env 0 raised AttributeError") as caught:
            call()
        assert isinstance(caught.value, EnvWorkerError) and caught.value.env_index == 0
        assert "no_such" in caught.value.worker_traceback
    env.close()


def test_async_pool_refuses_calls_while_envs_are_stepping() -> None:
    env = counting("pool", batch_size=2)
    env.reset(seed=0)
    env.send(np.zeros(N, dtype=np.int64))
    with pytest.raises(RuntimeError, match="recv"):
        env.get_attr("index")
    env.close()


def test_sb3_facade_answers_per_index_through_them() -> None:
    from envfleet.sb3 import to_sb3

    venv = to_sb3(counting("pool", autoreset_mode="SameStep"))
    assert venv.get_attr("index", indices=[1, 3]) == [1, 3]
    venv.set_attr("index", 7, indices=[2])
    assert venv.get_attr("index") == [0, 1, 7, 3, 4]
    venv.close()


def _index_times(env, k: int) -> int:
    return env.unwrapped.index * k


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_at_and_set_attr_at_touch_only_the_given_envs(backend) -> None:
    """What SB3's ``indices`` need: the envs given, in the order given, the others untouched;
    a function runs on the env in its own process."""
    env = counting(backend)
    env.reset(seed=0)
    assert env.call_at([4, 0, 3], "_obs")[0][0] == 4
    assert env.call_at([3, 1], _index_times, 10) == (30, 10)
    env.set_attr_at([1, 4], "note", ["b", "e"])  # a new attribute, on two envs only
    assert env.call_at([1, 4], "get_wrapper_attr", "note") == ("b", "e")
    assert env.call(gym.Env.has_wrapper_attr, "note") == (False, True, False, False, True)
    env.set_attr_at([2], "length", 9)
    assert env.get_attr("length") == (3, 3, 9, 3, 3)
    with pytest.raises(IndexError, match="no env 5"):
        env.call_at([5], "index")
    with pytest.raises(ValueError, match="one value per env"):
        env.set_attr_at([0, 1], "note", ["a"])
    assert env.call_at([], "index") == ()
    env.close()
