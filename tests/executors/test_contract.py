"""Executors follow the Gymnasium vector contract and give Gymnasium's trajectories."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

import envfleet
from envfleet.executors import PoolVectorEnv, SerialVectorEnv, SubprocessVectorEnv
from tests.executors.envs import CountingEnv, DictEnv, TupleEnv
from tests.executors.helpers import BACKENDS

N = 7


def trajectory(env, steps: int, seed: int = 0) -> list:
    obs, info = env.reset(seed=seed)
    out = [obs, info]
    env.action_space.seed(seed)
    for _ in range(steps):
        out.append(env.step(env.action_space.sample()))
    env.close()
    return out


@pytest.fixture(scope="module")
def cartpole_reference() -> list:
    reference = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * N)
    return trajectory(reference, 120, seed=3)


@pytest.mark.parametrize(("backend", "options"), [
    ("serial", {}), ("subprocess", {}), ("pool", {"num_workers": 1}),
    ("pool", {"num_workers": 2}), ("pool", {"num_workers": 3}),
    ("pool", {"num_workers": 2, "spin_us": 0}), ("pool", {"num_workers": 2, "spin_us": 500})])
def test_same_trajectories_as_gymnasium(backend, options, cartpole_reference) -> None:
    env = envfleet.make("CartPole-v1", N, backend=backend, **options)
    assert env.unwrapped.backend == backend
    assert data_equivalence(trajectory(env, 120, seed=3), cartpole_reference)


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_i_is_env_i(backend) -> None:
    factories = [functools.partial(CountingEnv, index=i) for i in range(N)]
    options = {"num_workers": 3} if backend == "pool" else {}
    env = envfleet.make(factories, N, backend=backend, **options)
    obs, info = env.reset(seed=100)
    np.testing.assert_array_equal(obs[:, 0], np.arange(N))  # env i is factory i
    np.testing.assert_array_equal(obs[:, 1], 100 + np.arange(N))  # seed + i
    np.testing.assert_array_equal(info["index"], np.arange(N))
    assert info["_index"].all()
    obs, info = env.reset(seed=[5, 4, 3, 2, 1, 0, None])
    np.testing.assert_array_equal(obs[:6, 1], [5, 4, 3, 2, 1, 0])
    np.testing.assert_array_equal(obs[6, 1:3], [100 + 6, 1])  # not reseeded: next episode
    obs, rewards, _, _, info = env.step(np.arange(N) % 5)
    np.testing.assert_array_equal(rewards, 10 + np.arange(N) % 5)
    assert rewards.dtype == np.float64
    assert info == {}  # t = 1: odd steps give empty infos
    _, _, _, _, info = env.step(np.zeros(N, dtype=np.int64))
    np.testing.assert_array_equal(info["t"], np.full(N, 2))
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_make_seed_and_copy(backend) -> None:
    env = envfleet.make(CountingEnv, 3, backend=backend, seed=7)
    first, _ = env.reset()
    np.testing.assert_array_equal(first[:, 1], [7, 8, 9])
    second = env.step(np.zeros(3, dtype=np.int64))[0]
    assert not np.shares_memory(first, second) and first[0, 3] == 0  # copies by default
    env.close()
    env = envfleet.make(CountingEnv, 3, backend=backend, copy=False)
    obs, _ = env.reset(seed=0)
    assert env.step(np.zeros(3, dtype=np.int64))[0] is obs  # the executor's own buffer
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("env_cls", [DictEnv, TupleEnv])
def test_dict_and_tuple_spaces(backend, env_cls) -> None:
    n = 5
    reference = gym.vector.SyncVectorEnv([env_cls] * n)
    env = envfleet.make(env_cls, n, backend=backend,
                        **({"num_workers": 2} if backend == "pool" else {}))
    assert env.single_observation_space == reference.single_observation_space
    assert env.observation_space == reference.observation_space
    assert env.action_space == reference.action_space
    ours, theirs = trajectory(env, 12, seed=1), trajectory(reference, 12, seed=1)
    assert data_equivalence(ours, theirs)
    assert all(env.observation_space.contains(step[0]) for step in ours[2:])


def test_spaces_metadata_and_repr() -> None:
    env = envfleet.make("Taxi-v4", 3)  # (a Gymnasium id without a native family: the pool)
    assert isinstance(env, PoolVectorEnv)
    reference = gym.make("Taxi-v4")
    assert env.single_observation_space == reference.observation_space
    assert env.single_action_space == reference.action_space
    assert env.action_space == gym.spaces.MultiDiscrete([6] * 3)
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert "pool" in repr(env)
    env.close()
    assert isinstance(envfleet.make(CountingEnv, 2, backend="serial"), SerialVectorEnv)
    assert isinstance(envfleet.make([CountingEnv] * 2, 2, backend="subprocess"),
                      SubprocessVectorEnv)


def test_wrappers_see_episodes() -> None:
    env = envfleet.make("CartPole-v1", 4, backend="pool", num_workers=2)
    env = gym.wrappers.vector.RecordEpisodeStatistics(env)
    env.reset(seed=0)
    finished = 0
    for _ in range(100):
        _, _, _, _, info = env.step(np.ones(4, dtype=np.int64))
        if "episode" in info:
            finished += int(info["_episode"].sum())
    assert finished >= 4
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("env_cls", [DictEnv, TupleEnv])
def test_same_step_final_obs_of_dict_and_tuple_spaces(backend, env_cls) -> None:
    """``info["final_obs"][i]`` is env i's final observation, as SyncVectorEnv gives it."""
    n, same_step = 4, AutoresetMode.SAME_STEP
    reference = gym.vector.SyncVectorEnv([env_cls] * n, autoreset_mode=same_step)
    env = envfleet.make(env_cls, n, backend=backend, autoreset_mode=same_step,
                        **({"num_workers": 2} if backend == "pool" else {}))
    ours, theirs = trajectory(env, 12, seed=2), trajectory(reference, 12, seed=2)
    assert any("final_obs" in step[4] for step in theirs[2:])
    assert data_equivalence(ours, theirs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_np_random_seed_as_in_gymnasium(backend) -> None:
    reference = gym.vector.SyncVectorEnv([CountingEnv] * 3)
    env = envfleet.make(CountingEnv, 3, backend=backend)
    for seed in (5, [7, None, 9]):
        reference.reset(seed=seed)
        env.reset(seed=seed)
        assert env.np_random_seed == reference.np_random_seed
    assert env.np_random_seed[:3:2] == (7, 9)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_closed_env_raises_gymnasiums_error(backend) -> None:
    env = envfleet.make(CountingEnv, 2, backend=backend)
    env.reset(seed=0)
    env.close()
    for call in (lambda: env.reset(), lambda: env.step(np.zeros(2, dtype=np.int64)),
                 lambda: env.get_attr("index")):
        with pytest.raises(gym.error.ClosedEnvironmentError, match="after a call to `close"):
            call()
        with pytest.raises(RuntimeError, match="closed"):  # as envfleet raised before
            call()


MISMATCHES = [  # (factories, the env refused, which space)
    ([CountingEnv, CountingEnv, TupleEnv], 2, "observation_space"),  # its own pool worker
    ([CountingEnv, TupleEnv, CountingEnv, CountingEnv], 1, "observation_space"),  # in a worker
    ([CountingEnv, functools.partial(CountingEnv, length=9), DictEnv], 2, "observation_space"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("factories", "index", "what"), MISMATCHES)
def test_different_spaces_raise_gymnasiums_error_on_every_backend(backend, factories, index,
                                                                  what) -> None:
    """SyncVectorEnv raises RuntimeError; every backend raises one error, worded alike."""
    with pytest.raises(RuntimeError):
        gym.vector.SyncVectorEnv(factories)
    expected = (f"env {index}'s {what} {getattr(factories[index](), what)} differs from env 0's "
                f"{CountingEnv().observation_space}: every env must have the same spaces")
    options = {"num_workers": 2} if backend == "pool" else {}
    with pytest.raises(envfleet.executors.SpacesMismatchError) as caught:
        envfleet.make(factories, len(factories), backend=backend, **options)
    assert str(caught.value) == expected
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, ValueError)
