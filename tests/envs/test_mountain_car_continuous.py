"""MountainCarContinuous-v0 on every native backend against Gymnasium's
Continuous_MountainCarEnv, bit for bit on CPU (its float64 first step and float32 steps)."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from tests.envs import continuous
from tests.reference import check_transplant

ID = "MountainCarContinuous-v0"


def reference_state(row: dict, fresh: bool) -> np.ndarray:
    """Gymnasium's state: float64 right after reset, float32 after a step."""
    return np.array([row["position"], row["velocity"]],
                    dtype=np.float64 if fresh else np.float32)


def policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Two envs in three pump energy (push with the velocity, often beyond [-1, 1]: clipped)
    and reach the goal; every third env dithers and is truncated at 999 steps."""
    push = np.where(obs[:, 1:2] >= 0, 1.0, -1.0) * rng.uniform(0.3, 1.6, (len(obs), 1))
    lazy = rng.normal(0.0, 0.3, (len(obs), 1))
    return np.where(np.arange(len(obs))[:, None] % 3 == 0, lazy, push).astype(np.float32)


class Recorder:
    """``policy``, keeping every observation and action it saw."""

    def __init__(self) -> None:
        self.obs: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        actions = policy(obs, rng)
        self.obs.append(obs)
        self.actions.append(actions)
        return actions


@pytest.mark.parametrize(("backend", "num_envs", "threads", "steps", "kwargs"), [
    ("numba", 6, 1, 1010, {}),
    ("numba", 512, 2, 3, {}),  # the parallel kernel
    pytest.param("torch", 6, None, 1010, {}, marks=continuous.needs_torch),
    pytest.param("torch", 4, None, 300, {"goal_velocity": 0.01},
                 marks=continuous.needs_torch),
])
def test_matches_gymnasium_bit_for_bit(backend: str, num_envs: int, threads: int | None,
                                       steps: int, kwargs: dict) -> None:
    options = {"num_threads": threads} if threads else {}
    env = envfleet.make(ID, num_envs, backend=backend, **options, **kwargs)
    recorder = Recorder()
    counts = check_transplant(env, steps, recorder, reference_state, seed=2, **kwargs)
    assert counts["compared"] >= num_envs * (steps - 30)
    if steps < 300:
        return
    assert counts["terminated"] > 0
    obs, actions = np.concatenate(recorder.obs), np.concatenate(recorder.actions)
    assert (np.abs(actions) > 1).any() and (np.abs(actions) < 1).any()  # clipped forces too
    assert (obs[:, 0] > 0.45).any()  # the goal (velocity and wall limits: the test below)
    if steps > 999:
        assert counts["truncated"] > 0


@pytest.mark.parametrize(("backend", "goal_velocity"), [
    ("numba", 0.0), pytest.param("torch", 0.03, marks=continuous.needs_torch)])
@pytest.mark.parametrize("fresh", [False, True])
def test_edge_states_match_gymnasium(backend: str, goal_velocity: float, fresh: bool) -> None:
    """States at Gymnasium's limits (speed +-0.07, the walls at -1.2 and 0.6, the goal at 0.45
    with goal_velocity) and actions at and beyond the force limits, one step each, against
    Gymnasium from the same state: the branches a random walk rarely takes."""
    import gymnasium as gym

    n = 2000
    rng = np.random.default_rng(9)
    near = np.array([0.07, -0.07, -1.2, 0.6, 0.45, goal_velocity, 0.0])
    position = rng.choice(near[2:5], n) + rng.choice([0, 1, -1, 3, -3], n) * 6e-8 \
        + rng.normal(0, 0.02, n) * (rng.random(n) < 0.3)
    velocity = rng.choice(near[[0, 1, 5, 6]], n) + rng.choice([0, 1, -1, 2, -2], n) * 3.7e-9 \
        + rng.normal(0, 0.004, n) * (rng.random(n) < 0.3)
    if not fresh:  # Gymnasium holds float32 values after a step
        position, velocity = position.astype(np.float32), velocity.astype(np.float32)
    actions = rng.choice([-1.0, 1.0, 0.0, 1.0000001, -1.0000001, 1.7, -3.0, 0.3], (n, 1))
    actions = actions.astype(np.float32)
    env = envfleet.make(ID, n, backend=backend, goal_velocity=goal_velocity)
    env.reset(seed=0)
    for column, values in zip(env.state, (position, velocity, np.full(n, fresh)), strict=True):
        column[:] = values if isinstance(column, np.ndarray) else continuous.tensor(values)
    obs, rewards, terminated, _, _ = (np.asarray(x) for x in env.step(actions))
    reference = gym.make(ID, goal_velocity=goal_velocity).unwrapped
    reference.reset(seed=0)
    for i in range(n):
        reference.state = np.array([position[i], velocity[i]],
                                   dtype=np.float64 if fresh else np.float32)
        ro, rr, rte, _, _ = reference.step(actions[i])
        assert np.array_equal(ro, obs[i]) and np.float32(rr) == rewards[i], (i, ro, obs[i])
        assert rte == terminated[i], i
    assert terminated.any() and not terminated.all()
    assert (obs[:, 1] == np.float32(0.07)).any() and (obs[:, 1] == np.float32(-0.07)).any()
    assert (obs[:, 0] == np.float32(-1.2)).any() and (obs[:, 0] == np.float32(0.6)).any()


def test_reset_draws_as_gymnasium() -> None:
    env = envfleet.make(ID, 20_000, seed=0)
    obs, _ = env.reset()
    position = np.asarray(env.state.position)
    assert (position >= -0.6).all() and (position < -0.4).all()
    assert 0.056 < position.std() < 0.059  # uniform over 0.2
    assert (obs[:, 1] == 0).all() and env.observation_space.contains(obs)
    assert obs.dtype == np.float32 and np.asarray(env.state.fresh).all()


def test_out_of_range_force_is_clipped_and_charged() -> None:
    low, high = continuous.check_out_of_range_is_clipped(ID, "numba", 1.0)
    np.testing.assert_array_equal(low, np.float32(-0.1))  # -0.1 * 1.0**2
    np.testing.assert_array_equal(high, np.float32(-10.0))  # the unclipped action is charged


@pytest.mark.parametrize("backend", ["numba", pytest.param("torch", marks=continuous.needs_torch)])
def test_bad_actions(backend: str) -> None:
    continuous.check_bad_actions(ID, backend)


def test_deterministic_across_threads_and_backends() -> None:
    continuous.check_deterministic(ID, policy, 30)


@continuous.needs_cuda
@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_cuda_matches_numba(mode: str) -> None:
    continuous.check_cuda_matches_numba(ID, policy, mode, steps=12)


def test_constructor_arguments() -> None:
    assert envfleet.make(ID, 1, goal_velocity=0.02).engine.params.goal_velocity == 0.02
    with pytest.raises(TypeError, match=r"MountainCarContinuous-v0: .*unexpected keyword"):
        envfleet.make(ID, 1, power=0.1)
    with pytest.raises(TypeError, match="goal_velocity must be a real number"):
        envfleet.make(ID, 1, goal_velocity=None)
    with pytest.raises(ValueError, match="goal_velocity must be finite, got inf"):
        envfleet.make(ID, 1, goal_velocity=float("inf"))


def test_gymnasium_integration() -> None:
    continuous.check_gymnasium_integration(ID, 999, policy)
