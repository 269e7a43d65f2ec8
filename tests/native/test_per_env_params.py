"""Per-env physics parameters (domain randomisation): a batch whose parameter is an array of
``num_envs`` values steps each env exactly as a separate make with that env's value, and as
Gymnasium's own env with that attribute (state transplant), on every native backend; bad
arrays are refused naming the parameter; scalar parameters compile as before."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.native import numba_backend
from tests.envs import continuous
from tests.reference import as_numpy

BACKENDS = ["numba", pytest.param("torch", marks=continuous.needs_torch),
            pytest.param("cuda", marks=[continuous.needs_cuda, pytest.mark.slow])]


def pendulum_actions(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.normal(0.0, 2.0, (n, 1)).astype(np.float32)  # some beyond [-2, 2]: clipped


def cartpole_actions(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 2, n)


CASES = {
    # id, per-env keyword arguments, other keyword arguments, steps, actions (each distinct
    # scalar value compiles its own kernels: few envs)
    "Pendulum-v1": ({"g": np.array([1.6, 9.81, 24.8])}, {"max_episode_steps": 15}, 40,
                    pendulum_actions),
    "CartPole-v1": ({"masspole": np.array([0.05, 0.1, 1.0]),
                     "force_mag": np.array([10.3, 10.0, 5.0])},
                    {"length": 0.7}, 40, cartpole_actions),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("env_id", list(CASES))
def test_batch_equals_separate_makes(env_id: str, backend: str) -> None:
    """Env i of the batch = a 1-env make with env i's scalar values, seeded the same, through
    terminations, truncation and autoresets."""
    per_env, other, steps, actions_for = CASES[env_id]
    n = len(next(iter(per_env.values())))
    batch = envfleet.make(env_id, n, backend=backend, **per_env, **other)
    singles = [envfleet.make(env_id, 1, backend=backend, **other,
                             **{k: float(v[i]) for k, v in per_env.items()})
               for i in range(n)]
    obs, _ = batch.reset(seed=7)
    for i, single in enumerate(singles):
        np.testing.assert_array_equal(as_numpy(single.reset(seed=7 + i)[0])[0], as_numpy(obs)[i])
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(steps):
        actions = actions_for(n, rng)
        out = [as_numpy(x) for x in batch.step(actions)[:4]]
        ended += int((out[2] | out[3]).sum())
        for i, single in enumerate(singles):
            one = [as_numpy(x) for x in single.step(actions[i:i + 1])[:4]]
            for got, want in zip(out, one, strict=True):
                np.testing.assert_array_equal(got[i], want[0], err_msg=f"env {i}")
    assert ended > 0  # the comparison covered episode ends and autoresets


def _transplant(env: gym.Env, references: list[gym.Env], state_of, steps: int,
                actions_for) -> None:
    """Step ``env`` and, for each env i, ``references[i]`` (Gymnasium's env with env i's
    parameters) from env i's state with env i's action: equal observations and rewards."""
    rng = np.random.default_rng(1)
    env.reset(seed=3)
    for reference in references:
        reference.reset(seed=0)
    compared = 0
    for _ in range(steps):
        before = [as_numpy(c) for c in env.state]
        pending = as_numpy(env.engine.pending)
        actions = actions_for(env.num_envs, rng)
        obs, rewards, terminated, _ = (as_numpy(x) for x in env.step(actions)[:4])
        for i, reference in enumerate(references):
            if pending[i]:
                continue
            reference.unwrapped.state = state_of([c[i] for c in before])
            reference.unwrapped.steps_beyond_terminated = None  # CartPole: a fresh step
            ro, rr, rte, _, _ = reference.unwrapped.step(actions[i])
            assert np.array_equal(ro, obs[i]), (i, ro, obs[i])
            assert np.float32(rr) == rewards[i] and rte == terminated[i], i
            compared += 1
    assert compared > steps * len(references) // 2


@pytest.mark.parametrize("backend", ["numba", pytest.param("torch", marks=continuous.needs_torch)])
def test_pendulum_per_env_g_matches_gymnasium(backend: str) -> None:
    g = np.array([1.62, 3.71, 9.81, 24.79])  # Moon, Mars, Earth, Jupiter
    env = envfleet.make("Pendulum-v1", 4, backend=backend, g=g)
    references = [gym.make("Pendulum-v1", g=float(value)) for value in g]
    _transplant(env, references, np.array, 80, pendulum_actions)


@pytest.mark.parametrize("backend", ["numba", pytest.param("torch", marks=continuous.needs_torch)])
def test_cartpole_per_env_masspole_matches_gymnasium(backend: str) -> None:
    masspole = np.array([0.05, 0.1, 0.5, 1.0])
    env = envfleet.make("CartPole-v1", 4, backend=backend, masspole=masspole)
    references = []
    for m in masspole:
        reference = gym.make("CartPole-v1")
        cartpole = reference.unwrapped
        cartpole.masspole = float(m)  # and what CartPoleEnv.__init__ derives from it
        cartpole.total_mass = cartpole.masspole + cartpole.masscart
        cartpole.polemass_length = cartpole.masspole * cartpole.length
        references.append(reference)

    def state_of(row: list) -> np.ndarray:
        return np.array(row, dtype=np.float64)

    def actions_for(n: int, rng: np.random.Generator) -> np.ndarray:
        return [int(a) for a in rng.integers(0, 2, n)]

    _transplant(env, references, state_of, 80, lambda n, rng: np.array(actions_for(n, rng)))


@pytest.mark.parametrize(("env_id", "kwargs", "message"), [
    ("Pendulum-v1", {"g": np.ones(5)}, r"g must be one number or an array of num_envs=4 "
                                       r"numbers \(one per env\), got shape \(5,\)"),
    ("Pendulum-v1", {"g": np.ones((4, 1))}, r"g must be .* got shape \(4, 1\)"),
    ("Pendulum-v1", {"g": [1.0, 2.0, np.nan, 3.0]}, r"g\[2\] \(env 2\) must be finite, got nan"),
    ("Pendulum-v1", {"g": np.array([1.0, np.inf, 2.0, 3.0])}, r"g\[1\] \(env 1\) must be finite"),
    ("CartPole-v1", {"masspole": np.array([0.1, 0.1, 0.1, -0.1])},
     r"masspole\[3\] \(env 3\) must be finite and > 0, got -0.1"),
    ("CartPole-v1", {"length": np.zeros(4)}, r"length\[0\] \(env 0\) must be finite and > 0"),
    ("CartPole-v1", {"masscart": -1.0}, r"masscart must be > 0, got -1.0"),
    ("CartPole-v1", {"tau": np.full(4, 0.02)},
     r"CartPole-v1: tau takes one value; the parameters that may vary per env are gravity, "),
    ("CartPole-v1", {"gravity": np.array(["a", "b", "c", "d"])},
     r"gravity must be one real number or a 1-D array of real numbers"),
])
def test_bad_per_env_values_are_refused(env_id: str, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        envfleet.make(env_id, 4, **kwargs)


@pytest.mark.parametrize(("env_id", "name"), [
    ("Pendulum-v1", "g"), ("CartPole-v1", "gravity"), ("CartPole-v1", "masspole"),
    ("MountainCar-v0", "goal_velocity"), ("MountainCarContinuous-v0", "goal_velocity")])
def test_a_0d_array_is_one_value(env_id: str, name: str) -> None:
    """``g=np.array(9.8)`` is the number 9.8: the same params, and the same kernels, as
    ``g=9.8`` (not a per-env array, nor an error)."""
    value = 0.02 if "goal" in name else 9.8
    env = envfleet.make(env_id, 3, **{name: np.array(value)})
    assert type(getattr(env.engine.params, name)) is float
    assert env.engine.params == envfleet.make(env_id, 3, **{name: value}).engine.params


@pytest.mark.parametrize(("env_id", "name"), [
    ("Pendulum-v1", "g"), ("CartPole-v1", "force_mag"), ("CartPole-v1", "length"),
    ("CartPole-v1", "reset_high"), ("Acrobot-v1", "torque_noise_max"),
    ("MountainCar-v0", "goal_velocity"), ("MountainCarContinuous-v0", "goal_velocity")])
def test_a_number_beyond_float64_is_a_clear_error(env_id: str, name: str) -> None:
    """``g=10**400`` is a ValueError naming the parameter, not Python's OverflowError."""
    with pytest.raises(ValueError, match=rf"^{name} must be finite, got about 10\*\*400, "
                                         rf"beyond float64's range"):
        envfleet.make(env_id, 2, **{name: 10**400})


def test_scalar_params_compile_as_before() -> None:
    """No array: the kernels get the state itself and the params record compiled in, as a
    family without per-env params (the same kernels as an explicit scalar make)."""
    env = envfleet.make("CartPole-v1", 4, masspole=0.1)
    engine = env.engine
    assert engine._kernel_state is engine.state
    assert engine._kernels is numba_backend.compile_kernels(
        env.native_spec, engine.mode, engine.kernel_params)
    assert envfleet.make("CartPole-v1", 4).engine._kernels is engine._kernels
    varied = envfleet.make("CartPole-v1", 4, masspole=np.full(4, 0.1)).engine
    assert varied._kernels is not engine._kernels
    assert varied._kernel_state[-1].flags.writeable is False  # the masspole column


def test_the_users_array_is_copied() -> None:
    """Changing the array after make changes nothing (the env holds its own read-only copy)."""
    g = np.full(3, 10.0)
    env = envfleet.make("Pendulum-v1", 3, g=g)
    g[:] = 1.0
    assert (env.engine.params.g == 10.0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_cartpole_force_mag_stays_float64(backend: str) -> None:
    """A scalar force_mag that float32 cannot hold (10.3) steps as numba steps it: torch once
    rounded it to float32 in ``torch.where``."""
    envs = [envfleet.make("CartPole-v1", 4, backend=b, force_mag=10.3) for b in ("numba", backend)]
    outs = [as_numpy(env.reset(seed=5)[0]) for env in envs]
    for _ in range(20):
        outs = [as_numpy(env.step(np.array([1, 0, 1, 1]))[0]) for env in envs]
        np.testing.assert_array_equal(*outs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("env_id", "goal", "action"), [
    ("MountainCar-v0", 0.5, np.array([2, 2, 2])),
    ("MountainCarContinuous-v0", 0.45, np.ones((3, 1), np.float32)),
])
def test_goal_velocity_per_env(env_id: str, goal: float, action: np.ndarray,
                               backend: str) -> None:
    """From the same state just short of the goal, each env ends its episode as a separate make
    with its goal_velocity does: the slowest goal reached, the fastest not."""
    goal_velocity = np.array([0.0, 0.002, 0.02])
    batch = envfleet.make(env_id, 3, backend=backend, goal_velocity=goal_velocity)
    singles = [envfleet.make(env_id, 1, backend=backend, goal_velocity=float(v))
               for v in goal_velocity]
    terminated = []
    for i, env in enumerate([batch, *singles]):
        env.reset(seed=0)
        position, velocity = env.state[0], env.state[1]
        position[:] = goal - 0.004  # writable views of the state columns on every backend
        velocity[:] = 0.006
        rows = action if env is batch else action[i - 1:i]
        terminated.append(as_numpy(env.step(rows)[2]))
    np.testing.assert_array_equal(terminated[0], np.concatenate(terminated[1:]))
    assert terminated[0].tolist() == [True, True, False]


def test_parallel_kernel_reads_per_env_params() -> None:
    """The numba parallel kernel (>= 512 envs, 2 threads) steps per-env params as the serial one
    does (its loop takes the flat kernel state: numba's parallel loops refuse nested tuples)."""
    masspole = np.linspace(0.05, 1.0, 600)
    envs = [envfleet.make("CartPole-v1", 600, num_threads=t, masspole=masspole) for t in (2, 1)]
    assert envs[0].engine._parallel and not envs[1].engine._parallel
    outs = [env.reset(seed=2)[0] for env in envs]
    rng = np.random.default_rng(3)
    for _ in range(30):
        actions = rng.integers(0, 2, 600)
        outs = [env.step(actions)[:4] for env in envs]
        for got, want in zip(*outs, strict=True):
            np.testing.assert_array_equal(got, want)


def test_render_draws_each_pole_length() -> None:
    """CartPole's frames with per-env ``length``: env i drawn as Gymnasium's CartPoleEnv with
    that length draws the same state."""
    pytest.importorskip("pygame")
    length = np.array([0.25, 0.5, 1.0])
    env = envfleet.make("CartPole-v1", 3, length=length, render_mode="rgb_array")
    env.reset(seed=0)
    frames = env.render()
    for i, frame in enumerate(frames):
        reference = gym.make("CartPole-v1", render_mode="rgb_array").unwrapped
        reference.reset(seed=0)
        reference.length = float(length[i])
        reference.state = np.array([as_numpy(c)[i] for c in env.state])
        np.testing.assert_array_equal(frame, reference.render())
        reference.close()
    assert not np.array_equal(frames[0], frames[2])


def test_ray_refuses_per_env_arrays() -> None:
    """Ray actors each make their share from the same keyword arguments: a per-env array is
    refused up front rather than misread by every actor."""
    with pytest.raises(ValueError, match=r"per-env g .* not supported on backend 'ray'"):
        envfleet.make("Pendulum-v1", 4, backend="ray", g=np.ones(4))
