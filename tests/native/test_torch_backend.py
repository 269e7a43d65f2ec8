"""The ``torch`` backend: Gymnasium agreement, same trajectories as numba for the same seed (all
three autoreset modes), refused steps that change nothing, outputs on the requested device, and
the counter RNG's torch twin bit for bit.

A toy family with Box actions, a 2-D state column and 2-D observations (``Drift-v0``, defined
here for numba and torch) checks that the torch driver is generic, not CartPole-shaped.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from numba import njit

import envfleet
from envfleet.envs.cartpole import SPEC as CARTPOLE
from envfleet.native import rng as rng_module
from envfleet.native import tensor_math
from envfleet.native.driver import DISABLED, NEXT_STEP, SAME_STEP
from envfleet.native.jit import kernel_function
from envfleet.native.numba_backend import NumbaEngine
from envfleet.native.rng import (
    env_uniform,
    env_uniform_torch,
    env_uniforms_torch,
    random_u64,
    random_u64_torch,
)
from envfleet.native.spec import NativeEnvSpec

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from envfleet.native.torch_backend import TorchEngine, torch_engine  # noqa: E402
from tests.cuda_helpers import StepOps, reads_back  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
MODES = ["NextStep", "SameStep", "Disabled"]


@pytest.fixture(autouse=True, params=["host-numpy", "torch-ops"])
def arithmetic_route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: CPU arithmetic through NumPy views of the tensors (the default),
    and through torch ops, the route every other device takes."""
    monkeypatch.setattr(tensor_math, "HOST_NUMPY", request.param == "host-numpy", raising=False)
    return request.param


def host(x) -> np.ndarray:
    """A NumPy copy of a tensor (any device) or array."""
    return x.detach().cpu().numpy().copy() if isinstance(x, torch.Tensor) else np.array(x)


def snapshot(engine) -> dict[str, np.ndarray]:
    """Every buffer of an engine, copied to the host."""
    out = {f"state.{k}": host(v) for k, v in engine.state._asdict().items()}
    out |= {f"rng{i}": host(v).view(np.int64) for i, v in enumerate(engine.rng)}
    for name in ("obs", "final_obs", "rewards", "terminated", "truncated", "pending"):
        out[name] = host(getattr(engine, name))
    return out


def assert_same_buffers(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key, strict=True)


def policy(obs: np.ndarray, rng: np.random.Generator, noise: np.ndarray) -> np.ndarray:
    """Balance the pole, with per-env random flips: low noise reaches the time limit, high
    noise drops the pole early."""
    greedy = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    flip = rng.random(len(obs)) < noise
    return np.where(flip, rng.integers(0, 2, len(obs)), greedy)


# --- (1) Gymnasium's CartPoleEnv, by state transplant -----------------------------------------


@pytest.mark.parametrize(("n", "steps", "limit", "options"), [
    (32, 2000, 500, {}),
    (32, 300, 100, {"sutton_barto_reward": True, "kinematics_integrator": "semi-implicit euler"}),
    (3, 3000, 500, {}),  # a few envs: CartPole steps them row by row on the host
    (3, 1500, 100, {"sutton_barto_reward": True, "kinematics_integrator": "semi-implicit euler"}),
])
def test_cartpole_matches_gymnasium(n: int, steps: int, limit: int, options: dict) -> None:
    env = envfleet.make("CartPole-v1", n, backend="torch", seed=11, copy=False,
                        max_episode_steps=limit, **options)
    engine = env.engine
    reference = CartPoleEnv(sutton_barto_reward=options.get("sutton_barto_reward", False))
    reference.kinematics_integrator = options.get("kinematics_integrator", "euler")
    reference.reset(seed=0)
    rng = np.random.default_rng(5)
    noise = np.where(np.arange(n) % 2 == 0, 0.01, 0.5)
    obs, _ = env.reset()
    compared = terminations = truncations = 0
    for _ in range(steps):
        actions = policy(host(obs), rng, noise)
        before = np.stack([host(c) for c in engine.state], axis=1)  # (n, 4)
        elapsed, pending = host(engine.rng[2]), host(engine.pending)
        obs, rewards, terminated, truncated, _ = env.step(torch.from_numpy(actions))
        after = np.stack([host(c) for c in engine.state], axis=1)
        o, r, te, tr = host(obs), host(rewards), host(terminated), host(truncated)
        for i in np.flatnonzero(~pending):  # pending envs were reset by this step
            reference.state = before[i].copy()
            reference.steps_beyond_terminated = None
            ro, rr, rte, _, _ = reference.step(int(actions[i]))
            expected = reference.state
            np.testing.assert_array_equal(after[i], expected)  # bit for bit on CPU
            np.testing.assert_array_equal(o[i], ro)
            assert (np.float32(rr), bool(rte)) == (r[i], te[i]), i
            assert tr[i] == (elapsed[i] + 1 >= limit), i
            compared += 1
            terminations += int(te[i])
            truncations += int(tr[i])
    assert compared > 0.9 * steps * n
    assert terminations > 5 and truncations > 5, (terminations, truncations)


# --- (2) same seed, same trajectories as the numba backend --------------------------------------


def assert_close_state(a: np.ndarray, b: np.ndarray) -> None:
    """float64 state: bit for bit on CPU (``tensor_math`` takes libm's sin/cos there)."""
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n", [32, 5000])  # 5000: a batch large enough for libm's sincos
@pytest.mark.parametrize("mode", MODES)
def test_cartpole_same_trajectories_as_numba(mode: str, n: int) -> None:
    limit, steps = 20, 300
    kwargs = {"autoreset_mode": mode, "max_episode_steps": limit, "seed": 2024}
    a = envfleet.make("CartPole-v1", n, backend="numba", **kwargs)
    b = envfleet.make("CartPole-v1", n, backend="torch", **kwargs)
    oa, _ = a.reset()
    ob, _ = b.reset()
    np.testing.assert_array_equal(oa, host(ob), strict=True)  # resets are bit-identical
    rng = np.random.default_rng(9)
    noise = np.where(np.arange(n) % 2 == 0, 0.05, 0.6)
    ends = {"terminated": 0, "truncated": 0, "final_obs": 0}
    for t in range(steps):
        if t == 150:  # a reset without a seed: every env starts its next episode
            oa, _ = a.reset()
            ob, _ = b.reset()
            np.testing.assert_array_equal(oa, host(ob), strict=True)
        if t == 200 and mode != "Disabled":  # a masked reset in the middle of episodes
            mask = np.arange(n) % 3 == 0
            oa, _ = a.reset(options={"reset_mask": mask})
            ob, _ = b.reset(options={"reset_mask": mask})
        actions = policy(oa, rng, noise)
        oa, ra, ta, tra, ia = a.step(actions)
        ob, rb, tb, trb, ib = b.step(actions)
        np.testing.assert_array_equal(ta, host(tb), strict=True)
        np.testing.assert_array_equal(tra, host(trb), strict=True)
        np.testing.assert_array_equal(ra, host(rb), strict=True)
        np.testing.assert_array_equal(oa, host(ob))
        assert_close_state(np.stack(a.state), np.stack([host(c) for c in b.state]))
        for x, y in zip(a.engine.rng, b.engine.rng, strict=True):
            np.testing.assert_array_equal(x.view(np.int64), host(y))
        np.testing.assert_array_equal(a.engine.pending, host(b.engine.pending))
        assert ia.keys() == ib.keys()
        if ia:
            np.testing.assert_array_equal(ia["_final_obs"], host(ib["_final_obs"]))
            m = ia["_final_obs"]
            np.testing.assert_array_equal(ia["final_obs"][m], host(ib["final_obs"])[m])
            ends["final_obs"] += int(m.sum())
        ends["terminated"] += int(ta.sum())
        ends["truncated"] += int(tra.sum())
        if mode == "Disabled" and (ta | tra).any():
            done = ta | tra
            oa, _ = a.reset(options={"reset_mask": done})
            ob, _ = b.reset(options={"reset_mask": done})
            np.testing.assert_array_equal(oa[done], host(ob)[done], strict=True)
    assert ends["terminated"] > 20 and ends["truncated"] > 20, ends
    assert (ends["final_obs"] > 0) == (mode == "SameStep")


# A toy family: Box actions, a 2-D state column and 2-D observations, randomness in the step.


class DriftParams(NamedTuple):
    gain: float
    spread: float
    limit: float


def drift_params(gain: float = 0.3, spread: float = 0.5, limit: float = 1.0) -> DriftParams:
    return DriftParams(float(gain), float(spread), float(limit))


@kernel_function
def _drift_obs(i, state, obs):
    pos = state[0]
    obs[i, 0] = np.float32(pos[i, 0])
    obs[i, 1] = np.float32(pos[i, 1])
    obs[i, 2] = np.float32(2.0 * pos[i, 0])
    obs[i, 3] = np.float32(2.0 * pos[i, 1])


@kernel_function
def drift_reset_one(i, state, params, rng, obs):
    pos = state[0]
    pos[i, 0] = env_uniform(rng, i, 0, -params.spread, params.spread)
    pos[i, 1] = env_uniform(rng, i, 1, -params.spread, params.spread)
    _drift_obs(i, state, obs)


@kernel_function
def drift_step_one(i, state, params, actions, rng, obs, rewards, terminated):
    pos = state[0]
    pos[i, 0] = pos[i, 0] + (params.gain * actions[i, 0] + env_uniform(rng, i, 0, -0.1, 0.1))
    pos[i, 1] = pos[i, 1] + (params.gain * actions[i, 1] + env_uniform(rng, i, 1, -0.1, 0.1))
    terminated[i] = abs(pos[i, 0]) > params.limit
    rewards[i] = pos[i, 0] + pos[i, 1]
    _drift_obs(i, state, obs)


def _drift_obs_torch(state, obs):
    pos = state[0]
    obs[:, 0:2] = pos
    obs[:, 2:4] = 2.0 * pos


def drift_reset_torch(mask, state, params, rng, obs):
    pos = state[0]
    for k in range(2):
        fresh = env_uniform_torch(rng, k, -params.spread, params.spread)
        pos[:, k] = torch.where(mask, fresh, pos[:, k])
    _drift_obs_torch(state, obs)


def drift_step_torch(state, params, actions, rng, obs, rewards, terminated):
    pos = state[0]
    for k in range(2):
        # float32 actions times a float64 constant: float64 in numba, so float64 here too
        pos[:, k] = pos[:, k] + (params.gain * actions[:, k].double()
                                 + env_uniform_torch(rng, k, -0.1, 0.1))
    terminated.copy_(pos[:, 0].abs() > params.limit)
    rewards.copy_(pos[:, 0] + pos[:, 1])
    _drift_obs_torch(state, obs)


DRIFT = NativeEnvSpec(
    id="Drift-v0",
    observation_space=spaces.Box(-np.inf, np.inf, (2, 2), dtype=np.float32),
    action_space=spaces.Box(-1.0, 1.0, (2,), dtype=np.float32),
    state={"pos": (np.float64, (2,))},
    make_params=drift_params,
    max_episode_steps=15,
    reset_one=drift_reset_one,
    step_one=drift_step_one,
    reset_torch=drift_reset_torch,
    step_torch=drift_step_torch,
    reference_id="",
    description="test-only: a noisy point pushed by a 2-D force",
)
MODE_CODES = {"NextStep": NEXT_STEP, "SameStep": SAME_STEP, "Disabled": DISABLED}


def drift_engines(mode: str, n: int = 16) -> tuple[NumbaEngine, TorchEngine]:
    args = (DRIFT, n, MODE_CODES[mode], drift_params(), DRIFT.max_episode_steps)
    a, b = NumbaEngine(*args, num_threads=1), torch_engine(*args)
    seeds = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # high bits set
    a.reset(None, seeds)
    b.reset(None, seeds)
    return a, b


@pytest.mark.parametrize("mode", MODES)
def test_generic_driver_matches_numba_bit_for_bit(mode: str) -> None:
    """No transcendental functions in Drift: numba and torch must agree exactly, buffer for
    buffer, whatever the autoreset mode."""
    n = 16
    a, b = drift_engines(mode, n)
    assert_same_buffers(snapshot(a), snapshot(b))
    rng = np.random.default_rng(1)
    ended_total = 0
    for _ in range(120):
        actions = rng.uniform(-1, 1, (n, 2)) + 0.6  # drift right: episodes terminate
        actions = np.clip(actions, -1, 1).astype(np.float32)
        ended = a.step(actions)
        assert b.step(actions) == ended
        assert_same_buffers(snapshot(a), snapshot(b))
        ended_total += ended
        if mode == "Disabled" and ended:
            mask = a.terminated | a.truncated
            a.reset(mask, None)
            b.reset(mask, None)
            assert_same_buffers(snapshot(a), snapshot(b))
    assert ended_total > 2 * n
    assert b.obs.shape == (n, 2, 2) and b.final_obs.shape == (n, 2, 2)


# --- (3) bad input: refused, named, and nothing moves -------------------------------------------


def refused_message(engine, actions) -> str:
    with pytest.raises(ValueError) as caught:
        engine.step(actions)
    return str(caught.value)


def cartpole_engines(mode: int = NEXT_STEP, n: int = 8):
    args = (CARTPOLE, n, mode, CARTPOLE.make_params(), 30)
    a, b = NumbaEngine(*args, num_threads=1), torch_engine(*args)
    for engine in (a, b):
        engine.reset(None, np.arange(n, dtype=np.uint64))
    return a, b


def bad_discrete_batches(n: int) -> list[tuple[object, str]]:
    """(actions, what the message must say) for a batch of 8 CartPole envs."""
    out_of_range = np.ones(n, dtype=np.int64)
    out_of_range[5], out_of_range[6] = 2, -1
    negative = np.zeros(n, dtype=np.int32)
    negative[3] = -7
    listed = [0] * n
    listed[2] = 3
    return [
        (np.zeros(n + 1, dtype=np.int64), r"must have shape \(8,\)"),
        (np.zeros((n, 1), dtype=np.int64), r"must have shape \(8,\).*got \(8, 1\)"),
        (torch.zeros(n, 1, dtype=torch.int64), r"must have shape \(8,\).*got \(8, 1\)"),
        (np.zeros(n, dtype=np.float32), "must be integers, got dtype float32"),
        (torch.zeros(n), "must be integers, got dtype float32"),
        (np.zeros(n, dtype=np.float64), "must be integers, got dtype float64"),
        (np.ones(n, dtype=bool), "must be integers, got dtype bool"),
        (out_of_range, r"invalid action for env 5: 2 is not in Discrete\(2\)"),
        (torch.from_numpy(out_of_range).int(), r"invalid action for env 5: 2 "),
        (torch.from_numpy(negative), r"invalid action for env 3: -7 "),
        (listed, r"invalid action for env 2: 3 is not in Discrete\(2\) \(integers 0..1\)"),
    ]


@pytest.mark.parametrize("bad", [-1, 2, -(2**62), 2**62])
def test_out_of_range_actions_refused_in_a_larger_batch(bad: int) -> None:
    """Past 8 envs the host checks the batch with reductions, not per value: still refused,
    named, and nothing moves."""
    n = 20
    a, b = cartpole_engines(NEXT_STEP, n)
    actions = np.ones(n, dtype=np.int64)
    actions[13] = bad
    before = snapshot(b)
    message = refused_message(b, actions)
    assert message == refused_message(a, actions)
    assert re.search(rf"invalid action for env 13: {bad} is not in Discrete\(2\)", message)
    assert_same_buffers(snapshot(b), before)


@pytest.mark.parametrize("mode", [NEXT_STEP, SAME_STEP, DISABLED])
def test_bad_discrete_actions_are_refused_and_change_nothing(mode: int) -> None:
    n = 8
    a, b = cartpole_engines(mode, n)
    twin = cartpole_engines(mode, n)[1]
    ones = np.ones(n, dtype=np.int64)
    for t in range(40):  # NEXT_STEP: stop with envs pending, so the rollback covers resets
        if t >= 12 and (mode != NEXT_STEP or a.pending.any()):
            break
        for engine in (a, b, twin):
            engine.step(ones)
        if mode == DISABLED and a.pending.any():
            mask = a.pending.copy()
            for engine in (a, b, twin):
                engine.reset(mask, None)
    assert a.pending.any() == (mode == NEXT_STEP)
    for actions, expected in bad_discrete_batches(n):
        before = snapshot(b)
        message = refused_message(b, actions)
        assert message == refused_message(a, actions)  # same words as the numba backend
        assert re.search(expected, message), (message, expected)
        assert_same_buffers(snapshot(b), before)
    # the env keeps working, exactly as a twin that never saw the bad input
    for _ in range(30):
        b.step(ones)
        twin.step(ones)
        assert_same_buffers(snapshot(b), snapshot(twin))
        if mode == DISABLED and b.pending.any():
            mask = host(b.pending)
            b.reset(mask, None)
            twin.reset(mask, None)


def test_disabled_refuses_a_finished_env_until_it_is_reset() -> None:
    n = 6
    a, b = cartpole_engines(DISABLED, n)
    ones = np.ones(n, dtype=np.int64)
    while not a.pending.any():
        assert a.step(ones) == b.step(ones)
    first = int(np.flatnonzero(a.pending)[0])
    before = snapshot(b)
    message = refused_message(b, ones)
    assert f"env {first} has finished its episode" in message
    assert message == refused_message(a, ones)
    assert_same_buffers(snapshot(b), before)
    bad = ones.copy()
    bad[first] = 5  # a finished env with a bad action: the reset is what it needs
    assert refused_message(b, bad) == refused_message(a, bad)
    mask = host(b.pending)
    a.reset(mask, None)
    b.reset(mask, None)
    assert a.step(ones) == b.step(ones)
    assert not (host(b.terminated | b.truncated) & mask).any()


@pytest.mark.parametrize("mode", ["SameStep"])
def test_bad_box_actions_are_refused_and_change_nothing(mode: str) -> None:
    """A Box action must be finite (NaN, inf, or a float64 beyond float32's range are refused,
    naming the env); values outside the bounds are the env's to clip, as in Gymnasium."""
    n = 16
    a, b = drift_engines(mode, n)
    good = np.zeros((n, 2), dtype=np.float32)
    nan = good.copy()
    nan[3, 1] = np.nan
    nan[9, 0] = np.inf
    high = good.copy()
    high[7, 0] = 1.5  # outside Box(-1, 1): accepted
    high[11, 1] = -np.inf
    huge = np.zeros((n, 2))
    huge[5, 0] = 1e300  # float64, not a float32
    cases = [
        (np.zeros((n, 3)), r"must have shape \(16, 2\)"),
        (torch.zeros(n, 2, dtype=torch.complex64), "must be numbers"),
        (np.zeros((n, 2), dtype=bool), "must be numbers .* got dtype bool"),
        (nan, r"invalid action for env 3: \[0.0, nan\] is not finite \(as float32\)"),
        (torch.from_numpy(high), r"invalid action for env 11: \[0.0, -inf\] is not finite"),
        (huge, r"invalid action for env 5: \[inf, 0.0\] is not finite \(as float32\)"),
    ]
    for actions, expected in cases:
        before = snapshot(b)
        message = refused_message(b, actions)
        assert message == refused_message(a, actions)  # same words as the numba backend
        assert re.search(expected, message), (message, expected)
        assert_same_buffers(snapshot(b), before)
    ints = np.ones((n, 2), dtype=np.int64)  # integers are valid Box actions
    assert a.step(ints) == b.step(ints)
    assert b.step(torch.ones(n, 2, dtype=torch.float16)) == a.step(ints)
    outside = np.full((n, 2), 3.5, dtype=np.float32)  # out of bounds: the kernel sees it
    assert a.step(outside) == b.step(outside)
    assert_same_buffers(snapshot(a), snapshot(b))


# --- (4) outputs: torch tensors, on the requested device, in buffers allocated once -------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_outputs_are_tensors_on_the_device(device: str, mode: str) -> None:
    n = 8
    env = envfleet.make("CartPole-v1", n, backend="torch", device=device, seed=0,
                        autoreset_mode=mode, copy=False, max_episode_steps=12)
    engine = env.engine
    expected = torch.empty(0, device=device).device
    assert engine.device == expected
    obs, info = env.reset()
    assert obs is engine.obs and info == {}
    buffers = {name: getattr(engine, name).data_ptr()
               for name in ("obs", "rewards", "terminated", "truncated", "final_obs")}
    batches = [np.ones(n, dtype=np.int64), torch.zeros(n, dtype=torch.int64),
               torch.ones(n, dtype=torch.int32, device=device), [0, 1] * (n // 2)]
    saw_final = False
    for t in range(40):
        obs, rewards, terminated, truncated, info = env.step(batches[t % len(batches)])
        for x, dtype, shape in ((obs, torch.float32, (n, 4)), (rewards, torch.float32, (n,)),
                                (terminated, torch.bool, (n,)), (truncated, torch.bool, (n,))):
            assert isinstance(x, torch.Tensor) and x.device == expected
            assert x.dtype == dtype and tuple(x.shape) == shape
        for column in (*engine.state, *engine.rng, engine.pending):
            assert column.device == expected
        if info:
            saw_final = True
            assert info["final_obs"].device == expected and info["_final_obs"].dtype == torch.bool
        if mode == "Disabled" and (terminated | truncated).any():
            env.reset(options={"reset_mask": host(terminated | truncated)})
    assert saw_final == (mode == "SameStep")
    assert buffers == {name: getattr(engine, name).data_ptr() for name in buffers}
    copied = envfleet.make("CartPole-v1", n, backend="torch", device=device, seed=0)
    obs, _ = copied.reset()  # copy=True: a fresh tensor, on the same device
    assert obs.device == expected and obs.data_ptr() != copied.engine.obs.data_ptr()
    env.close()
    env.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", MODES)
def test_on_a_gpu_steps_replay_captured_graphs_with_cpu_dynamics(mode: str) -> None:
    """On a GPU the third step on replays captured graphs (no silent fallback), and the
    trajectories stay numba's: flags and rewards exactly, float64 state within the GPU's ulp
    bound (torch's own trig and FMA on the device), observations within float32 rounding."""
    from tests.cuda_helpers import GPU_FLOAT64_MAX_ULP

    n = 64
    args = (CARTPOLE, n, MODE_CODES[mode], CARTPOLE.make_params(), 12)
    a, b = NumbaEngine(*args, num_threads=1), torch_engine(*args, device="cuda")
    seeds = np.arange(n, dtype=np.uint64)
    a.reset(None, seeds)
    b.reset(None, seeds)
    rng = np.random.default_rng(0)
    for t in range(30):
        actions = rng.integers(0, 2, n)
        assert b.step(torch.from_numpy(actions).cuda()) == a.step(actions), t
        for name in ("rewards", "terminated", "truncated", "pending"):
            np.testing.assert_array_equal(host(getattr(b, name)), getattr(a, name), name)
        for column, expected in zip(b.state, a.state, strict=True):
            np.testing.assert_array_max_ulp(host(column), expected, GPU_FLOAT64_MAX_ULP)
        np.testing.assert_allclose(host(b.obs), a.obs, rtol=1e-6, atol=1e-6)
        if mode == "Disabled" and a.pending.any():
            mask = a.pending.copy()
            a.reset(mask, None)
            b.reset(mask, None)
    graphs = [v for v in b.replay.entries.values() if isinstance(v, torch.cuda.CUDAGraph)]
    assert b.replay.captured("validate") and b.replay.captured("step"), b.replay.entries
    assert len(graphs) == len(b.replay.entries)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0",
                                    "MountainCarContinuous-v0", "Pendulum-v1"])
@pytest.mark.parametrize("mode", MODES)
def test_on_a_gpu_every_family_steps_and_rolls_out_from_graphs(env_id: str, mode: str) -> None:
    """Every classic family's torch forms capture on a GPU (a failed capture warns, and warnings
    are errors here): its steps and its rollouts replay graphs."""
    import warnings

    n = 256
    env = envfleet.make(env_id, n, backend="torch", device="cuda", seed=0, copy=False,
                        autoreset_mode=mode, max_episode_steps=5)
    env.reset(seed=0)
    space = env.single_action_space
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(20):
            actions = torch.from_numpy(np.stack([space.sample() for _ in range(n)])).cuda()
            _, _, terminated, truncated, _ = env.step(actions)
            if mode == "Disabled":
                env.reset(options={"reset_mask": host(terminated | truncated)})
        if mode != "Disabled":  # (a DISABLED rollout is refused once an episode ends)
            batch = torch.from_numpy(np.stack([[space.sample() for _ in range(n)]
                                               for _ in range(4)])).cuda()
            for _ in range(3):
                env.rollout(batch)
    replay = env.engine.replay
    assert replay.captured("validate") and replay.captured("step"), replay.entries
    assert mode == "Disabled" or replay.captured("rollout"), replay.entries
    assert -1 not in replay.entries.values(), replay.entries  # no capture failed


def test_device_argument() -> None:
    engine = torch_engine(CARTPOLE, 2, NEXT_STEP, CARTPOLE.make_params(), 10,
                         device=torch.device("cpu"))
    assert engine.obs.device == torch.device("cpu")
    assert torch_engine(CARTPOLE, 2, NEXT_STEP, CARTPOLE.make_params(), 10).device.type == "cpu"
    for bad in ("gpu", "cpu:x", 3.5, True, ["cpu"]):
        with pytest.raises(ValueError, match="device"):
            envfleet.make("CartPole-v1", 2, backend="torch", device=bad)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not usable here"):
            envfleet.make("CartPole-v1", 2, backend="torch", device="cuda")
    else:
        with pytest.raises(ValueError, match="not usable here"):
            envfleet.make("CartPole-v1", 2, backend="torch", device="cuda:999")


def test_through_gymnasium_make_vec() -> None:
    env = gym.make_vec("envfleet/CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point",
                       backend="torch", device="cpu")
    obs, _ = env.reset(seed=1)
    assert isinstance(obs, torch.Tensor) and obs.shape == (4, 4)
    obs, *_ = env.step(np.zeros(4, dtype=np.int64))
    assert isinstance(obs, torch.Tensor)
    env.close()


# --- (5) the counter RNG's torch twin, bit for bit ----------------------------------------------


@njit
def _numba_draws(seeds, episodes, steps, k, low, high):
    out = np.empty(seeds.size)
    bits = np.empty(seeds.size, dtype=np.uint64)
    rng = (seeds, episodes, steps)
    for i in range(seeds.size):
        out[i] = env_uniform(rng, i, k, low, high)
        bits[i] = random_u64(seeds[i], episodes[i], np.uint64(steps[i]))
    return out, bits


def test_rng_torch_twin_is_bit_identical() -> None:
    r = np.random.default_rng(0)
    size = 20_000
    edges = np.array([0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)
    seeds = r.integers(0, 2**64, size, dtype=np.uint64, endpoint=False)
    episodes = r.integers(0, 2**64, size, dtype=np.uint64, endpoint=False)
    episodes[: size // 2] %= np.uint64(1000)  # the common case: small episode counters
    steps = r.integers(0, 2**47, size, dtype=np.int64)
    steps[: size // 2] %= 600
    seeds[: edges.size], episodes[-edges.size:] = edges, edges
    rng_torch = tuple(torch.from_numpy(x.view(np.int64)) for x in (seeds, episodes, steps))
    for k, low, high in ((0, -0.05, 0.05), (3, -0.05, 0.05), (65535, -1.0, 3.0),
                         (17, 0.0, 1.0), (2, -math.pi, math.pi)):
        expected, expected_bits = _numba_draws(seeds, episodes, steps, k, low, high)
        got = env_uniform_torch(rng_torch, k, low, high)
        assert got.dtype == torch.float64
        np.testing.assert_array_equal(got.numpy().view(np.uint64), expected.view(np.uint64))
        assert ((expected >= low) & (expected < high)).all()
    bits = random_u64_torch(*rng_torch).numpy().view(np.uint64)
    np.testing.assert_array_equal(bits, expected_bits)
    # the batched draws (one hash of seed and episode per env): column k is draw k
    per_env_low = torch.from_numpy(r.uniform(-2.0, 0.0, size))
    for count, low, high in ((4, -0.05, 0.05), (3, per_env_low, 1.0), (1, -1.0, 3.0)):
        batch = env_uniforms_torch(rng_torch, count, low, high)
        assert batch.shape == (size, count) and batch.dtype == torch.float64
        for k in range(count):
            host_low = low.numpy() if isinstance(low, torch.Tensor) else low
            with np.errstate(over="ignore"):  # the kernel in Python: NumPy scalars wrap
                expected = np.array([env_uniform((seeds, episodes, steps), i, k,
                                                 float(np.broadcast_to(host_low, size)[i]), high)
                                     for i in range(0, size, 97)])
            np.testing.assert_array_equal(batch[::97, k].numpy().view(np.uint64),
                                          expected.view(np.uint64))
        # the host's compiled loop, for a single env too, as the kernel draws
        arrays = (*(x.numpy()[:1] for x in rng_torch), count,
                  *(b.numpy()[:1] if isinstance(b, torch.Tensor) else b for b in (low, high)))
        np.testing.assert_array_equal(rng_module._uniforms_loop(*arrays)[0].view(np.uint64),
                                      batch[0].numpy().view(np.uint64))


class OpCounter(TorchDispatchMode):
    """Records every aten op dispatched while active: its name and its output's size."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append((str(func), out.numel() if isinstance(out, torch.Tensor) else 0))
        return out


@pytest.mark.parametrize("mode", MODES)
def test_a_cartpole_step_on_the_host_is_a_handful_of_ops(mode: str, arithmetic_route: str
                                                         ) -> None:
    """The host route: whole-batch ops only, no per-step copy of the buffers, and random draws
    only for the envs that reset (the old driver: ~280 ops a step at 1,024 envs, its draws over
    every env, and a backup copy of every buffer)."""
    if arithmetic_route != "host-numpy":
        pytest.skip("the device route draws for every env, masked (see the next test)")
    n = 1024
    env = envfleet.make("CartPole-v1", n, backend="torch", seed=3, autoreset_mode=mode,
                        copy=False)
    env.reset()
    rng = np.random.default_rng(0)
    per_step, resets, before = [], 0, 0
    for _ in range(60):
        actions = torch.from_numpy(rng.integers(0, 2, n))
        with OpCounter() as counter:
            _, _, terminated, truncated, _ = env.step(actions)
        ended = host(terminated | truncated)
        per_step.append(len(counter.ops))
        hashed = [size for name, size in counter.ops if "bitwise_xor" in name]
        reset_now = int(ended.sum()) if mode == "SameStep" else before  # NEXT_STEP: last step's
        assert max(hashed, default=0) <= 4 * reset_now, "draws for every env"
        before = int(ended.sum())
        copied = [size for name, size in counter.ops if "copy" in name or "clone" in name]
        assert max(copied, default=0) <= 4 * n, "a copy of a whole buffer"
        resets += bool(ended.any())
        if mode == "Disabled" and ended.any():
            env.reset(options={"reset_mask": ended})
    assert resets > 10
    assert max(per_step) <= 12, per_step


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0",
                                    "MountainCarContinuous-v0", "Pendulum-v1"])
@pytest.mark.parametrize("mode", MODES)
def test_a_device_step_reads_nothing_back_and_repeats_its_ops(
        env_id: str, mode: str, arithmetic_route: str) -> None:
    """What a GPU captures into a CUDA graph must be the same ops on the same shapes every step,
    none reading a value back (no ``.item()``, ``nonzero``, boolean indexing): checked on the
    device route, run here on CPU tensors. A step's two answers come back through the engine's
    pinned buffers, outside the ops. The family's draws then run for every env (masked)."""
    if arithmetic_route != "torch-ops":
        pytest.skip("the host route reads back the envs that reset (NumPy, no GPU)")
    n = 256
    env = envfleet.make(env_id, n, backend="torch", seed=3, autoreset_mode=mode, copy=False,
                        max_episode_steps=5)
    env.reset(seed=3)
    replay = env.engine.replay
    pieces: dict = {}  # key -> the op sequence of each of its runs

    def run(key, work) -> None:  # as Replay.run, recording the ops of the piece of work
        with StepOps() as seen:
            work()
        pieces.setdefault(key, []).append(seen.ops)

    replay.run = run
    space = env.single_action_space
    rng = np.random.default_rng(0)
    ended_steps = 0
    for _ in range(40):
        if isinstance(space, spaces.Discrete):
            actions = torch.from_numpy(rng.integers(0, int(space.n), n))
        else:
            actions = torch.from_numpy(rng.uniform(space.low, space.high,
                                                   (n, *space.shape)).astype(np.float32))
        _, _, terminated, truncated, _ = env.step(actions)
        ended = host(terminated | truncated)
        ended_steps += bool(ended.any())
        if mode == "Disabled" and ended.any():
            env.reset(options={"reset_mask": ended})
    assert ended_steps > 2
    keys = {"NextStep": {("step", False), ("step", True)}, "SameStep": {("step", True)},
            "Disabled": {("step", False)}}[mode]
    assert pieces.keys() == {"validate", *keys}
    for key, runs in pieces.items():
        assert len(runs) > 3, key
        for t, ops in enumerate(runs[2:], 2):  # the first two runs may initialise things
            assert not reads_back(ops), f"{key} run {t} reads back: {reads_back(ops)}"
            assert ops == runs[2], f"{key} run {t}: another op sequence"
        assert len(runs[2]) <= 1000


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_per_env_params_step_and_reset_as_numba(mode: str) -> None:
    """Per-env physics (and the per-env rows a reset gathers) give numba's trajectories."""
    n = 24
    per_env = {"masspole": np.linspace(0.05, 0.4, n), "force_mag": np.linspace(5.0, 15.0, n)}
    kwargs = {"autoreset_mode": mode, "max_episode_steps": 25, "seed": 7, **per_env}
    a = envfleet.make("CartPole-v1", n, backend="numba", **kwargs)
    b = envfleet.make("CartPole-v1", n, backend="torch", **kwargs)
    np.testing.assert_array_equal(a.reset()[0], host(b.reset()[0]))
    rng = np.random.default_rng(4)
    ended = 0
    for _ in range(120):
        actions = rng.integers(0, 2, n)
        oa, ra, ta, tra, _ = a.step(actions)
        ob, rb, tb, trb, _ = b.step(actions)
        for x, y in ((oa, ob), (ra, rb), (ta, tb), (tra, trb)):
            np.testing.assert_array_equal(x, host(y), strict=True)
        np.testing.assert_array_equal(np.stack(a.state), np.stack([host(c) for c in b.state]))
        ended += int((ta | tra).sum())
    assert ended > n


def test_the_host_step_loop_compiles_the_params_in() -> None:
    """CartPole's host step loop (``jit.step_rows``) compiles a params record's scalar fields in
    as constants, as the numba backend does: flags such as the integrator fold away (read from
    the record passed in, they branched in every row and the host step took ~25% longer at
    65,536 envs). A record with another scalar gets a loop of its own; per-env arrays are read
    row by row, so other values in them compile nothing new."""
    from envfleet.envs import cartpole
    from envfleet.native.jit import step_rows

    def loop(**options):
        return step_rows(cartpole.step_one, cartpole.make_params(**options), CARTPOLE.id)

    assert loop() is loop()
    assert loop() is not loop(kinematics_integrator="semi-implicit euler")
    assert loop() is not loop(force_mag=11.0)
    assert loop(gravity=np.full(8, 9.8)) is loop(gravity=np.linspace(1.0, 20.0, 8))


@pytest.mark.parametrize("n", [3, 5000])
def test_a_dropped_env_frees_its_buffers(n: int) -> None:
    """What the host route keeps per buffer (work arrays, views) does not keep the engine's
    buffers alive once the env is gone."""
    import gc
    import weakref

    env = envfleet.make("CartPole-v1", n, backend="torch", seed=0)
    env.reset()
    for _ in range(30):
        env.step(torch.ones(n, dtype=torch.int64))
    e = env.engine
    buffers = [weakref.ref(x) for x in (  # with the host route's NumPy views
        e.obs, e._obs_rows, *((e._b.obs_rows, *e._b.state) if hasattr(e, "_b") else ()))]
    del e
    del env
    gc.collect()
    assert [ref() for ref in buffers] == [None] * len(buffers)


def test_sin_cos_takes_libm_values() -> None:
    """sin_cos of a CPU tensor: NumPy's (libm's) values, tensors in, tensors out; of a large
    array (libm's ``sincos``, one argument reduction for both), the same bits, written into
    ``out``, over small, CartPole-sized, large and huge angles."""
    x = np.random.default_rng(0).uniform(-4, 4, 1000)
    s, c = tensor_math.sin_cos(torch.from_numpy(x))
    assert isinstance(s, torch.Tensor) and isinstance(c, torch.Tensor)
    np.testing.assert_array_equal(s.numpy(), np.sin(x))
    np.testing.assert_array_equal(c.numpy(), np.cos(x))
    rng = np.random.default_rng(1)
    for scale in (1e-9, 0.25, 4.0, 1e3, 1e22):
        x = rng.uniform(-scale, scale, 2 * tensor_math._SINCOS_MIN)
        out = (np.empty_like(x), np.empty_like(x))
        s, c = tensor_math.sin_cos(x, out=out)
        assert s is out[0] and c is out[1]
        np.testing.assert_array_equal(s.view(np.uint64), np.sin(x).view(np.uint64), err_msg=scale)
        np.testing.assert_array_equal(c.view(np.uint64), np.cos(x).view(np.uint64), err_msg=scale)


def test_per_env_params_move_to_the_device() -> None:
    from envfleet.native.torch_backend import params_to_device

    params = drift_params()._replace(gain=np.linspace(0.1, 0.4, 4))
    moved = params_to_device(params, torch.device("cpu"))
    assert isinstance(moved.gain, torch.Tensor) and moved.gain.dtype == torch.float64
    assert moved.spread == params.spread and type(moved) is DriftParams


def test_a_step_failing_part_way_refuses_steps_until_a_full_reset() -> None:
    """No backup copy per step: a step that raises part-way leaves the envs half-stepped, so the
    engine refuses to step (naming the first failure) until every env is reset; then it steps
    exactly as a twin that never failed."""
    def exploding_step(state, params, actions, rng, obs, rewards, terminated):
        CARTPOLE.step_torch(state, params, actions, rng, obs, rewards, terminated)
        if explode:
            raise RuntimeError("boom")

    import dataclasses

    spec = dataclasses.replace(CARTPOLE, step_torch=exploding_step)
    engine = torch_engine(spec, 4, NEXT_STEP, spec.make_params(), 10)
    twin = torch_engine(CARTPOLE, 4, NEXT_STEP, spec.make_params(), 10)
    ones = np.ones(4, dtype=np.int64)
    explode = True
    for e in (engine, twin):
        e.reset(None, np.arange(4, dtype=np.uint64))
    with pytest.raises(RuntimeError, match="boom"):
        engine.step(ones)
    explode = False
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"failed part-way \(RuntimeError: boom\)"):
            engine.step(ones)
    with pytest.raises(RuntimeError, match="failed part-way"):
        engine.reset(np.array([True, False, True, True]), None)  # not every env
        engine.step(ones)
    for e in (engine, twin):
        e.reset(None, np.arange(4, dtype=np.uint64))
    for _ in range(25):
        assert engine.step(ones) == twin.step(ones)
        assert_same_buffers(snapshot(engine), snapshot(twin))
    engine.close()
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.step(np.ones(4, dtype=np.int64))


def test_wide_unsigned_state_columns_are_held_as_signed_bits() -> None:
    import dataclasses

    state = {"pos": (np.float64, (2,)), "bits": (np.uint64, ()), "small": (np.uint8, (3,)),
             "half": (np.uint32, ())}
    spec = dataclasses.replace(DRIFT, state=state)
    engine = torch_engine(spec, 3, SAME_STEP, drift_params(), 5)
    dtypes = {name: column.dtype for name, column in engine.state._asdict().items()}
    assert dtypes == {"pos": torch.float64, "bits": torch.int64, "small": torch.uint8,
                      "half": torch.int32}
    assert engine.state.small.shape == (3, 3)
