"""MountainCar-v0 on every native backend against Gymnasium's MountainCarEnv (state transplant,
bit for bit on CPU), the three autoreset modes, determinism across threads and backends, bad
input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from tests.envs.classic import (
    assert_modes_agree,
    assert_same_run,
    compare_with_gymnasium,
    run_modes,
)
from tests.reference import as_numpy

BACKENDS = [b for b in ("numba", "torch") if b in envfleet.available_backends()]


def policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Even envs push along their velocity (they reach the flag, terminated; some hit the left
    wall on the way), odd envs act at random (truncated at 200)."""
    greedy = np.where(obs[:, 1] >= 0, 2, 0)
    random = rng.integers(0, 3, len(obs))
    flip = (np.arange(len(obs)) % 2 == 1) | (rng.random(len(obs)) < 0.1)
    return np.where(flip, random, greedy)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("goal_velocity", [0, 0.01])
def test_matches_gymnasium_bit_for_bit(backend: str, goal_velocity: float) -> None:
    n, steps = 8, 450
    env = envfleet.make("MountainCar-v0", n, backend=backend, goal_velocity=goal_velocity)
    reference = gym.make("MountainCar-v0", goal_velocity=goal_velocity)
    counts = compare_with_gymnasium(env, reference, policy, steps, seed=3)
    assert counts["compared"] > 0.97 * n * steps
    assert counts["terminated"] > 8 and counts["truncated"] >= 4, counts


def test_left_wall_stops_the_car() -> None:
    """At the left bound with negative velocity the velocity is reset to 0, as Gymnasium."""
    env = envfleet.make("MountainCar-v0", 2, seed=0)
    env.reset()
    env.state.position[:] = -1.19
    env.state.velocity[:] = -0.05
    obs, *_ = env.step(np.zeros(2, dtype=np.int64))
    reference = gym.make("MountainCar-v0").unwrapped
    reference.reset(seed=0)
    reference.state = np.array([-1.19, -0.05])
    np.testing.assert_array_equal(obs[0], reference.step(0)[0])
    assert obs[0, 0] == np.float32(-1.2) and obs[0, 1] == 0.0


def test_large_batch_on_two_threads() -> None:
    env = envfleet.make("MountainCar-v0", 2048, backend="numba", num_threads=2)
    counts = compare_with_gymnasium(env, gym.make("MountainCar-v0"), policy, 6, seed=1)
    assert counts["compared"] == 2048 * 6


def test_reset_draws_within_gymnasium_bounds() -> None:
    env = envfleet.make("MountainCar-v0", 10_000, seed=0)
    obs, info = env.reset()
    assert info == {} and obs.dtype == np.float32 and obs.shape == (10_000, 2)
    position, velocity = env.state
    assert position.dtype == velocity.dtype == np.float64
    assert (position >= -0.6).all() and (position < -0.4).all() and (velocity == 0).all()
    assert 0.056 < position.std() < 0.060  # uniform over a width of 0.2: 0.0577
    np.testing.assert_array_equal(obs[:, 0], position.astype(np.float32))
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autoreset_modes_agree(backend: str) -> None:
    def steady(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Even envs swing up (terminated), odd envs coast (truncated)."""
        return np.where(np.arange(len(obs)) % 2 == 0, np.where(obs[:, 1] >= 0, 2, 0), 1)

    n = 4
    runs = run_modes("MountainCar-v0", backend, steady, n, steps=330, limit=140)
    terminations, truncations = assert_modes_agree(runs, n)
    assert terminations > 0 and truncations > 0


def test_same_trajectories_on_threads_and_backends() -> None:
    one = envfleet.make("MountainCar-v0", 300, backend="numba", num_threads=1)
    two = envfleet.make("MountainCar-v0", 300, backend="numba", num_threads=2)
    assert assert_same_run(one, two, policy, 250) > 300
    if "torch" in BACKENDS:
        torch_env = envfleet.make("MountainCar-v0", 300, backend="torch")
        assert assert_same_run(one, torch_env, policy, 250) > 300


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"goal_velocity": "fast"}, ValueError, "goal_velocity must be a real number"),
    ({"goal_velocity": float("nan")}, ValueError, "goal_velocity must be a real number"),
    ({"goal_velocity": None}, ValueError, "goal_velocity"),
    ({"goal_position": 0.4}, TypeError, "MountainCar-v0: .*goal_position"),
])
def test_bad_arguments_are_refused(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        envfleet.make("MountainCar-v0", 2, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_actions_are_refused_and_change_nothing(backend: str) -> None:
    env = envfleet.make("MountainCar-v0", 4, backend=backend, seed=0)
    env.reset()
    before = np.stack([as_numpy(c) for c in env.state])
    with pytest.raises(ValueError, match=r"invalid action for env 1: -1 is not in Discrete\(3\)"):
        env.step(np.array([0, -1, 3, 2]))
    np.testing.assert_array_equal(np.stack([as_numpy(c) for c in env.state]), before)


def test_registered_listed_and_auto() -> None:
    assert "MountainCar-v0" in envfleet.list_envs()
    assert type(envfleet.make("MountainCar-v0", 2).engine).__name__ == "NumbaEngine"
    vec = gym.make_vec("envfleet/MountainCar-v0", num_envs=4,
                       vectorization_mode="vector_entry_point", goal_velocity=0.0)
    vec = gym.wrappers.vector.RecordEpisodeStatistics(vec)
    vec.reset(seed=0)
    lengths = []
    for _ in range(210):
        _, _, _, _, info = vec.step(np.ones(4, dtype=np.int64))
        if "episode" in info:
            lengths += info["episode"]["l"][info["_episode"]].tolist()
    assert lengths == [200] * 4  # coasting never reaches the flag: truncated at 200
    single = gym.make("envfleet/MountainCar-v0", render_mode="rgb_array")
    single.reset(seed=0)
    reference = gym.make("MountainCar-v0", render_mode="rgb_array").unwrapped
    reference.reset(seed=0)
    reference.state = np.stack(single.unwrapped.vector_env.state)[:, 0]
    np.testing.assert_array_equal(single.render(), reference.render())
