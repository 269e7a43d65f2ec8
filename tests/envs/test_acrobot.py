"""Acrobot-v1 on every native backend against Gymnasium's AcrobotEnv (state transplant, bit for
bit on CPU), the three autoreset modes, determinism across threads and backends, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.envs import acrobot
from tests.envs.classic import (
    assert_modes_agree,
    assert_same_run,
    compare_with_gymnasium,
    draws,
    rng_counters,
    run_modes,
)
from tests.reference import as_numpy

BACKENDS = [b for b in ("numba", "torch") if b in envfleet.available_backends()]


def policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Even envs pump energy (torque along dtheta2: they reach the goal, terminated), odd envs
    act at random (most reach the 500-step limit, truncated)."""
    greedy = 1 + np.sign(obs[:, 5]).astype(np.int64)
    random = rng.integers(0, 3, len(obs))
    flip = (np.arange(len(obs)) % 2 == 1) | (rng.random(len(obs)) < 0.1)
    return np.where(flip, random, greedy)


def noise_of(env) -> np.ndarray:
    """The torque noise each env draws this step (the kernels' counter RNG)."""
    tnm = env.engine.params.torque_noise_max
    return draws(*rng_counters(env), acrobot.NOISE_DRAW, -tnm, tnm)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_gymnasium_bit_for_bit(backend: str) -> None:
    n, steps = 8, 650
    env = envfleet.make("Acrobot-v1", n, backend=backend)
    counts = compare_with_gymnasium(env, gym.make("Acrobot-v1"), policy, steps, seed=3)
    assert counts["compared"] > 0.95 * n * steps
    assert counts["terminated"] > 10 and counts["truncated"] >= 2, counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_torque_noise_and_nips_match_gymnasium(backend: str) -> None:
    n, steps = 8, 300
    env = envfleet.make("Acrobot-v1", n, backend=backend, torque_noise_max=0.3,
                        book_or_nips="nips", max_episode_steps=120)
    reference = gym.make("Acrobot-v1", max_episode_steps=120)
    reference.unwrapped.torque_noise_max = 0.3
    reference.unwrapped.book_or_nips = "nips"
    counts = compare_with_gymnasium(env, reference, policy, steps, seed=5, noise=noise_of)
    assert counts["terminated"] > 0 and counts["truncated"] > 0, counts


def test_large_batch_on_two_threads() -> None:
    env = envfleet.make("Acrobot-v1", 2048, backend="numba", num_threads=2)
    counts = compare_with_gymnasium(env, gym.make("Acrobot-v1"), policy, 6, seed=1)
    assert counts["compared"] == 2048 * 6


def test_reset_state_as_gymnasium_keeps_it() -> None:
    env = envfleet.make("Acrobot-v1", 10_000, seed=0)
    obs, info = env.reset()
    assert info == {} and obs.dtype == np.float32 and obs.shape == (10_000, 6)
    state = np.stack(env.state)
    assert state.dtype == np.float64
    assert (np.abs(state) <= np.float32(0.1)).all() and 0.056 < state.std() < 0.060
    # float32 values, as AcrobotEnv.reset's .astype(np.float32)
    np.testing.assert_array_equal(state.astype(np.float32).astype(np.float64), state)
    # Gymnasium's observation of that state: NumPy's float32 cos/sin, within one float32 ulp
    reference = acrobot_env()
    for i in range(200):
        reference.state = state[:, i].astype(np.float32)
        np.testing.assert_array_max_ulp(reference._get_ob(), obs[i], maxulp=1)
    assert env.observation_space.contains(obs)


def acrobot_env():
    from gymnasium.envs.classic_control.acrobot import AcrobotEnv

    return AcrobotEnv()


def steady_policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Even envs pump energy (terminated), odd envs apply no torque (truncated): a function
    of the observation alone, so every autoreset mode plays the same episodes."""
    greedy = 1 + np.sign(obs[:, 5]).astype(np.int64)
    return np.where(np.arange(len(obs)) % 2 == 0, greedy, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autoreset_modes_agree(backend: str) -> None:
    n = 4
    runs = run_modes("Acrobot-v1", backend, steady_policy, n, steps=330, limit=100)
    terminations, truncations = assert_modes_agree(runs, n)
    assert terminations > 0 and truncations > 0


def test_same_trajectories_on_threads_and_backends() -> None:
    kwargs = {"max_episode_steps": 50, "torque_noise_max": 0.2}
    one = envfleet.make("Acrobot-v1", 300, backend="numba", num_threads=1, **kwargs)
    two = envfleet.make("Acrobot-v1", 300, backend="numba", num_threads=2, **kwargs)
    assert assert_same_run(one, two, policy, 120) > 300
    if "torch" in BACKENDS:
        torch_env = envfleet.make("Acrobot-v1", 300, backend="torch", **kwargs)
        assert assert_same_run(one, torch_env, policy, 120) > 300


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"book_or_nips": "paper"}, ValueError, "book_or_nips must be 'book' or 'nips'"),
    ({"torque_noise_max": -0.1}, ValueError, "torque_noise_max must be a finite number >= 0"),
    ({"torque_noise_max": float("nan")}, ValueError, "torque_noise_max"),
    ({"torque_noise_max": "0.1"}, ValueError, "torque_noise_max must be a number"),
    ({"link_mass": 2.0}, TypeError, "Acrobot-v1: .*link_mass"),
    ({"render_mode": "human"}, ValueError, "renders in"),
])
def test_bad_arguments_are_refused(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        envfleet.make("Acrobot-v1", 2, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_actions_are_refused_and_change_nothing(backend: str) -> None:
    env = envfleet.make("Acrobot-v1", 4, backend=backend, seed=0)
    env.reset()
    before = np.stack([as_numpy(c) for c in env.state])
    with pytest.raises(ValueError, match=r"invalid action for env 2: 3 is not in Discrete\(3\)"):
        env.step(np.array([0, 1, 3, 2]))
    with pytest.raises(ValueError, match="must be integers"):
        env.step(np.zeros(4, dtype=np.float32))
    np.testing.assert_array_equal(np.stack([as_numpy(c) for c in env.state]), before)


def test_registered_listed_and_auto() -> None:
    assert "Acrobot-v1" in envfleet.list_envs()
    assert type(envfleet.make("Acrobot-v1", 2).engine).__name__ == "NumbaEngine"
    vec = gym.make_vec("envfleet/Acrobot-v1", num_envs=4, vectorization_mode="vector_entry_point",
                       torque_noise_max=0.1)
    vec = gym.wrappers.vector.RecordEpisodeStatistics(vec)
    vec.reset(seed=0)
    ended = 0
    for _ in range(520):
        _, _, _, _, info = vec.step(np.full(4, 2))
        ended += int(info.get("_episode", np.zeros(4, bool)).sum())
    assert ended >= 4
    single = gym.make("envfleet/Acrobot-v1", render_mode="rgb_array")
    single.reset(seed=0)
    frame = single.render()
    reference = acrobot_env()
    reference.render_mode = "rgb_array"
    reference.state = np.stack(single.unwrapped.vector_env.state)[:, 0]
    np.testing.assert_array_equal(frame, reference.render())


def test_square_is_libm_pow() -> None:
    """Gymnasium squares NumPy float64 scalars with libm's ``pow``, which differs from
    ``x * x`` in the last bit for ~0.1% of inputs; the kernels' ``_square`` must not."""
    import math

    from numba import njit

    @njit(cache=False)
    def squares(x):
        out = np.empty_like(x)
        for k in range(x.size):
            out[k] = acrobot._square(x[k])
        return out

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-30, 30, 100_000), rng.normal(0, 1e-3, 50_000),
                        [0.0, -0.0, 1.0, 2.0**-600, 2.0**500, 1e-310]])
    expected = np.array([math.pow(v, 2.0) for v in x])
    assert (x * x != expected).sum() > 20  # the cases that matter are there
    np.testing.assert_array_equal(squares(x), expected)
