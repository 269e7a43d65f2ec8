"""Pendulum-v1 on every native backend against Gymnasium's PendulumEnv (bit for bit on CPU)."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from tests.envs import continuous
from tests.reference import check_transplant

ID = "Pendulum-v1"


def reference_state(row: dict, fresh: bool) -> np.ndarray:
    """PendulumEnv keeps a float64 (theta, theta_dot) array."""
    return np.array([row["theta"], row["theta_dot"]])


def policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random torques, a third of them outside [-2, 2] (clipped by the env), some exactly at
    the bounds."""
    u = rng.normal(0.0, 2.0, (len(obs), 1))
    u[rng.random(len(obs)) < 0.05] = 2.0
    return u.astype(np.float32)


@pytest.mark.parametrize(("backend", "num_envs", "threads", "steps", "kwargs"), [
    ("numba", 8, 1, 420, {}),
    ("numba", 512, 2, 3, {}),  # the parallel kernel
    pytest.param("torch", 8, None, 205, {}, marks=continuous.needs_torch),
    pytest.param("torch", 4, None, 60, {"g": 9.81}, marks=continuous.needs_torch),
])
def test_matches_gymnasium_bit_for_bit(backend: str, num_envs: int, threads: int | None,
                                       steps: int, kwargs: dict) -> None:
    options = {"num_threads": threads} if threads else {}
    env = envfleet.make(ID, num_envs, backend=backend, **options, **kwargs)
    counts = check_transplant(env, steps, policy, reference_state, seed=1, **kwargs)
    assert counts["compared"] >= num_envs * (steps - 2)
    assert counts["terminated"] == 0  # Pendulum never terminates
    if steps > 200:
        assert counts["truncated"] == num_envs * (steps // 201)  # at 200 steps


def test_reset_draws_as_gymnasium() -> None:
    env = envfleet.make(ID, 20_000, seed=0)
    obs, _ = env.reset()
    theta, theta_dot = (np.asarray(c) for c in env.state)
    assert (np.abs(theta) <= np.pi).all() and (np.abs(theta_dot) <= 1).all()
    assert 1.75 < theta.std() < 1.87 and 0.56 < theta_dot.std() < 0.60  # uniform spreads
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    np.testing.assert_array_equal(obs[:, 0], np.cos(theta).astype(np.float32))


def test_out_of_range_torque_is_clipped() -> None:
    low, high = continuous.check_out_of_range_is_clipped(ID, "numba", 2.0)
    np.testing.assert_array_equal(low, high)  # the cost uses the clipped torque


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
    assert envfleet.make(ID, 1, g=9.81).engine.params.g == 9.81
    with pytest.raises(TypeError, match=r"Pendulum-v1: .*unexpected keyword argument 'gravity'"):
        envfleet.make(ID, 1, gravity=9.81)
    with pytest.raises(TypeError, match="g must be a real number, got 'x'"):
        envfleet.make(ID, 1, g="x")
    with pytest.raises(ValueError, match="g must be finite, got nan"):
        envfleet.make(ID, 1, g=float("nan"))


def test_gymnasium_integration() -> None:
    continuous.check_gymnasium_integration(ID, 200, policy)
