"""The numba backend's CartPole-v1 against Gymnasium's CartPoleEnv, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.envs import cartpole
from tests.reference import check_against_gymnasium


@pytest.mark.parametrize(("num_envs", "num_threads"), [(16, 1), (4096, 2)])
def test_matches_gymnasium_bit_for_bit(num_envs: int, num_threads: int) -> None:
    env = envfleet.make("CartPole-v1", num_envs, backend="numba", num_threads=num_threads)
    steps = 1200 if num_envs < 100 else 40
    counts = check_against_gymnasium(env, steps=steps, seed=3)
    assert counts["compared"] > 0.9 * steps * num_envs
    assert counts["terminated"] > 0
    if num_envs < 100:  # long enough for the balanced envs to reach the 500-step limit
        assert counts["truncated"] > 0


def test_sutton_barto_reward_matches_gymnasium() -> None:
    import gymnasium as gym

    env = envfleet.make("CartPole-v1", 8, sutton_barto_reward=True, seed=1)
    reference = gym.make("CartPole-v1", sutton_barto_reward=True).unwrapped
    reference.reset(seed=0)
    env.reset()
    saw_terminal = False
    for _ in range(200):
        before = np.stack([c.copy() for c in env.state])
        pending = env.engine.pending.copy()
        actions = np.ones(8, dtype=np.int64)
        _, rewards, terminated, _, _ = env.step(actions)
        for i in np.flatnonzero(~pending):
            reference.state = before[:, i].copy()
            reference.steps_beyond_terminated = None
            _, rr, rte, _, _ = reference.step(1)
            assert rr == rewards[i] and rte == terminated[i]
            saw_terminal |= rte
    assert saw_terminal


def test_reset_draws_within_gymnasium_bounds() -> None:
    env = envfleet.make("CartPole-v1", 10_000, seed=0)
    obs, info = env.reset()
    assert info == {}
    assert obs.dtype == np.float32 and obs.shape == (10_000, 4)
    state = np.stack(env.state)
    assert state.dtype == np.float64
    assert (state >= -0.05).all() and (state < 0.05).all()
    # spread like a uniform draw, not a constant
    assert 0.028 < state.std() < 0.030
    assert env.observation_space.contains(obs)


def test_envs_share_compiled_kernels() -> None:
    """A second env with the same params must not recompile: numba types the state NamedTuple
    by its class, and two classes once meant two compiles per kernel (and a 3-4x slower
    parallel step)."""
    from envfleet.native.driver import NEXT_STEP
    from envfleet.native.numba_backend import compile_kernels

    for _ in range(2):
        env = envfleet.make("CartPole-v1", 3, num_threads=1)
        env.reset(seed=0)
        env.step(np.zeros(3, dtype=np.int64))
    step_serial, _, reset = compile_kernels(cartpole.SPEC, NEXT_STEP, cartpole.make_params())
    assert len(step_serial.signatures) == 1
    assert len(reset.signatures) == 1
