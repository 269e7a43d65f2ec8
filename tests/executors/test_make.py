"""``envfleet.make`` with executor backends: ids, factories, kwargs, errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.native.vector_env import NativeVectorEnv
from tests.executors.envs import CountingEnv


def test_native_ids_keep_native_backends() -> None:
    assert isinstance(envfleet.make("CartPole-v1", 4), NativeVectorEnv)
    env = envfleet.make("CartPole-v1", 4, backend="serial")  # Gymnasium's own CartPole
    assert isinstance(env.unwrapped.envs[0].unwrapped, gym.envs.classic_control.CartPoleEnv)
    env = envfleet.make("envfleet/CartPole-v1", 2, backend="serial")
    env.reset(seed=0)


def test_gymnasium_kwargs_and_max_episode_steps() -> None:
    env = envfleet.make("CartPole-v1", 2, backend="serial", max_episode_steps=5,
                        sutton_barto_reward=True)
    env.reset(seed=0)
    for _ in range(5):
        _, rewards, _, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
    assert truncated.all() or (rewards == -1).any()
    env = envfleet.make(CountingEnv, 2, backend="serial", max_episode_steps=2)
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.int64))
    assert env.step(np.zeros(2, dtype=np.int64))[3].all()


def test_unknown_ids_name_the_closest_from_both_registries() -> None:
    with pytest.raises(envfleet.UnknownEnvError, match="Acrobot-v1"):
        envfleet.make("Acrobt-v1", 2)
    with pytest.raises(envfleet.UnknownEnvError, match="CartPole-v1"):
        envfleet.make("CartPol-v1", 2, backend="pool")
    with pytest.raises(envfleet.UnknownEnvError, match="unknown env id"):
        envfleet.make("NoSuchEnv-v0", 2, backend="serial")


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="native envs"):
        envfleet.make("Taxi-v4", 2, backend="numba")
    with pytest.raises(ValueError, match="native envs"):
        envfleet.make(CountingEnv, 2, backend="torch")
    with pytest.raises(ValueError, match="valid backends: auto, numba, cuda, torch, serial"):
        envfleet.make("Taxi-v4", 2, backend="rya")
    with pytest.raises(TypeError, match="num_workers"):
        envfleet.make("Acrobot-v1", 2, backend="serial", num_workers=2)
    with pytest.raises(TypeError, match="only apply to env ids"):
        envfleet.make(CountingEnv, 2, backend="serial", length=4)
    with pytest.raises(ValueError, match="3 factories"):
        envfleet.make([CountingEnv] * 3, 2, backend="serial")
    with pytest.raises(TypeError, match="env must be"):
        envfleet.make(42, 2)
    with pytest.raises(ValueError, match="num_envs"):
        envfleet.make(CountingEnv, 0, backend="serial")
    with pytest.raises(ValueError, match="num_workers"):
        envfleet.make(CountingEnv, 2, backend="pool", num_workers=0)
    with pytest.raises(ValueError, match="step_timeout"):
        envfleet.make(CountingEnv, 2, backend="pool", step_timeout=0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        envfleet.make(CountingEnv, 2, backend="serial", autoreset_mode="sometimes")


def test_reset_arguments_and_lifecycle() -> None:
    env = envfleet.make(CountingEnv, 3, backend="serial")
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(RuntimeError, match="first reset"):
        env.reset(options={"reset_mask": np.array([True, False, True])})
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(2, dtype=bool)})
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="3 entries"):
        env.reset(seed=[1, 2])
    env.reset(seed=0)
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros(3, dtype=np.int64))
