"""Native envs written by users (docs/NATIVE_ENVS.md): a family defined here, registered with
``envfleet.register_native_env``, runs on numba, cuda (the simulator on small sizes) and torch
with the same trajectories; the driver's autoreset modes, seeding and time limit agree with
Gymnasium's ``SyncVectorEnv`` over a plain-Python reference env; a spec that breaks the rules is
refused with an error naming the field, and a kernel numba cannot type with an explanation."""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import NamedTuple

import gymnasium as gym
import numba
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import envfleet
from envfleet.kernels import NativeEnvSpec, env_uniform, env_uniform_torch, kernel_function
from envfleet.registry import NATIVE_ENVS
from tests.reference import as_numpy

# --- Bounce-v0: a ball kicked up or down under gravity, with random wind ------------------


class BounceParams(NamedTuple):
    gravity: float
    kick: float  # velocity added by action 1, removed by action 2
    wind: float  # each step adds a uniform draw in [-wind, wind) to the velocity
    restitution: float  # the fraction of speed kept by a bounce on the floor
    ceiling: float  # the ball flying above it ends the episode (terminated, reward -1)
    dt: float


def make_params(gravity: float = 9.8, kick: float = 2.0, wind: float = 0.3,
                restitution: float = 0.8, ceiling: float = 2.0) -> BounceParams:
    if not 0.0 <= restitution <= 1.0:
        raise ValueError(f"restitution must be in [0, 1], got {restitution!r}")
    return BounceParams(float(gravity), float(kick), float(wind), float(restitution),
                        float(ceiling), 0.1)


@kernel_function
def reset_one(i, state, params, rng, obs):
    state.h[i] = env_uniform(rng, i, 0, 0.5, 1.0)
    state.v[i] = env_uniform(rng, i, 1, -0.1, 0.1)
    obs[i, 0] = np.float32(state.h[i])
    obs[i, 1] = np.float32(state.v[i])


@kernel_function
def step_one(i, state, params, actions, rng, obs, rewards, terminated):
    p = params
    h = state.h[i]
    v = state.v[i]
    wind = env_uniform(rng, i, 2, -p.wind, p.wind)  # k 0, 1: reset's draws
    if actions[i] == 1:
        v = v + p.kick
    elif actions[i] == 2:
        v = v - p.kick
    v = v - p.gravity * p.dt + wind
    h = h + v * p.dt
    if h < 0.0:
        h = -h
        v = -v * p.restitution
    state.h[i] = h
    state.v[i] = v
    obs[i, 0] = np.float32(h)
    obs[i, 1] = np.float32(v)
    out = h > p.ceiling
    terminated[i] = out
    rewards[i] = -1.0 if out else h


def reset_torch(mask, state, params, rng, obs):
    import torch

    state.h.copy_(torch.where(mask, env_uniform_torch(rng, 0, 0.5, 1.0), state.h))
    state.v.copy_(torch.where(mask, env_uniform_torch(rng, 1, -0.1, 0.1), state.v))
    obs[:, 0] = state.h
    obs[:, 1] = state.v


def step_torch(state, params, actions, rng, obs, rewards, terminated):
    import torch

    p = params
    h, v = state.h, state.v
    wind = env_uniform_torch(rng, 2, -p.wind, p.wind)
    v = torch.where(actions == 1, v + p.kick, torch.where(actions == 2, v - p.kick, v))
    v = v - p.gravity * p.dt + wind
    h = h + v * p.dt
    below = h < 0.0
    v = torch.where(below, -v * p.restitution, v)
    h = torch.where(below, -h, h)
    state.h.copy_(h)
    state.v.copy_(v)
    obs[:, 0] = h
    obs[:, 1] = v
    out = h > p.ceiling
    terminated.copy_(out)
    rewards.copy_(torch.where(out, -1.0, h))


SPEC = NativeEnvSpec(
    id="Bounce-v0",
    observation_space=spaces.Box(np.array([0.0, -np.inf], np.float32),
                                 np.array([np.inf, np.inf], np.float32), dtype=np.float32),
    action_space=spaces.Discrete(3),
    state={"h": (np.float64, ()), "v": (np.float64, ())},
    make_params=make_params,
    max_episode_steps=50,
    reset_one=reset_one,
    step_one=step_one,
    reset_torch=reset_torch,
    step_torch=step_torch,
)


class BounceReference(gym.Env):
    """Bounce-v0 in plain Python, for Gymnasium's own ``SyncVectorEnv``: the same arithmetic
    and the same counter-based draws (seed, episode, step), computed one env at a time."""

    observation_space = SPEC.observation_space
    action_space = SPEC.action_space

    def __init__(self) -> None:
        self.p = make_params()
        self.seed_, self.episode, self.steps = 0, 0, 0

    def _draw(self, k: int, low: float, high: float) -> float:
        rng = (np.array([self.seed_], np.uint64), np.array([self.episode], np.uint64),
               np.array([self.steps], np.int64))
        with np.errstate(over="ignore"):  # the hash's uint64 arithmetic wraps, as intended
            return float(env_uniform(rng, 0, k, low, high))

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.seed_, self.episode = seed, 0
        else:
            self.episode += 1
        self.steps = 0
        self.h, self.v = self._draw(0, 0.5, 1.0), self._draw(1, -0.1, 0.1)
        return np.array([self.h, self.v], np.float32), {}

    def step(self, action):
        p, h, v = self.p, self.h, self.v
        wind = self._draw(2, -p.wind, p.wind)
        v = v + p.kick if action == 1 else v - p.kick if action == 2 else v
        v = v - p.gravity * p.dt + wind
        h = h + v * p.dt
        if h < 0.0:
            h, v = -h, -v * p.restitution
        self.h, self.v = h, v
        self.steps += 1
        out = h > p.ceiling
        return np.array([h, v], np.float32), -1.0 if out else h, out, False, {}


# --- Ladder-v0: lookup tables reach the kernels (numba and cuda) --------------------------


class LadderParams(NamedTuple):
    rungs: int


def ladder_params() -> LadderParams:
    return LadderParams(8)


def ladder_tables() -> dict[str, np.ndarray]:
    return {"jump": np.array([1, 2, 1, 3, 1, 1, 2, 1], dtype=np.int64),
            "prize": np.linspace(0.0, 0.7, 8)}


@kernel_function
def ladder_reset(i, state, params, rng, obs):
    state.rung[i] = 0
    obs[i, 0] = 0.0


@kernel_function
def ladder_step(i, state, params, actions, rng, obs, rewards, terminated):
    rung = state.rung[i] + (state.jump[state.rung[i]] if actions[i] == 1 else 1)
    rung = min(rung, params.rungs - 1)
    state.rung[i] = rung
    obs[i, 0] = np.float32(rung)
    rewards[i] = state.prize[rung]
    terminated[i] = rung == params.rungs - 1


LADDER = NativeEnvSpec(
    id="Ladder-v0",
    observation_space=spaces.Box(0.0, 7.0, (1,), np.float32),
    action_space=spaces.Discrete(2),
    state={"rung": (np.int64, ())},
    make_params=ladder_params,
    max_episode_steps=20,
    reset_one=ladder_reset,
    step_one=ladder_step,
    tables=ladder_tables,
)


@pytest.fixture
def registered():
    """Bounce-v0 and Ladder-v0 registered for the test, unregistered after it."""
    envfleet.register_native_env(SPEC)
    envfleet.register_native_env(LADDER)
    yield
    for env_id in ("Bounce-v0", "Ladder-v0"):
        if env_id in NATIVE_ENVS:
            envfleet.unregister_native_env(env_id)


N, LIMIT = 6, 12


def actions_at(t: int, n: int) -> np.ndarray:
    """Even envs kick up (they fly out: terminated); odd envs kick up every fourth step and
    down every fifth (they bounce until the time limit: truncated)."""
    i = np.arange(n)
    odd = np.where((t + i) % 4 == 0, 1, np.where((t + i) % 5 == 0, 2, 0))
    return np.where(i % 2 == 0, 1, odd).astype(np.int64)


def trajectory(env, steps: int, *, seed: int = 7) -> list[list[np.ndarray]]:
    """[obs, reward, terminated, truncated (, final_obs masked)] per call, as NumPy arrays;
    DISABLED mode resets the ended envs with a reset_mask before the next step."""
    obs, _ = env.reset(seed=seed)
    out = [[as_numpy(obs)]]
    done = np.zeros(env.num_envs, dtype=bool)
    for t in range(steps):
        if env.metadata["autoreset_mode"] is AutoresetMode.DISABLED and done.any():
            obs, _ = env.reset(options={"reset_mask": done})
            out.append([as_numpy(obs), done.copy()])
        actions = actions_at(t, env.num_envs) % env.single_action_space.n
        obs, rew, term, trunc, info = env.step(actions)
        row = [as_numpy(obs), as_numpy(rew).astype(np.float32), as_numpy(term),
               as_numpy(trunc)]
        if "final_obs" in info:
            mask = as_numpy(info["_final_obs"])
            row += [mask, np.stack([np.asarray(info["final_obs"][i], np.float32)
                                    for i in np.flatnonzero(mask)])]
        out.append(row)
        done = row[2] | row[3]
    return out


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        assert len(x) == len(y), t
        for u, w in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, w, err_msg=f"call {t}")


def test_registered_everywhere(registered):
    assert envfleet.list_envs()["Bounce-v0"] == [b for b in ("numba", "cuda", "torch")
                                                 if b in envfleet.available_backends()]
    assert envfleet.list_envs()["Ladder-v0"] == [b for b in ("numba", "cuda")
                                                 if b in envfleet.available_backends()]
    assert "envfleet/Bounce-v0" in gym.registry
    venv = gym.make_vec("envfleet/Bounce-v0", num_envs=3, vectorization_mode="vector_entry_point",
                        seed=1)
    assert venv.num_envs == 3 and venv.reset(seed=1)[0].shape == (3, 2)
    env = gym.make("envfleet/Bounce-v0", max_episode_steps=4)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (2,) and env.step(0)[0].shape == (2,)
    assert [env.step(0)[3] for _ in range(3)] == [False, False, True]  # TimeLimit


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_driver_agrees_with_gymnasium_sync_vector_env(registered, mode):
    """Seeding (seed + i, episode counters), the time limit and each autoreset mode, on numba
    and torch, against Gymnasium's SyncVectorEnv over the plain-Python reference."""
    reference = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(BounceReference(), LIMIT)] * N, autoreset_mode=mode)
    expected = trajectory(reference, 40)
    ended = np.array([row[2] | row[3] for row in expected[1:] if len(row) > 2])
    terminated = np.array([row[2] for row in expected[1:] if len(row) > 2])
    assert terminated[:, ::2].any() and (ended & ~terminated)[:, 1::2].any()  # both endings
    for backend in ("numba", "torch"):
        if backend in envfleet.available_backends():
            env = envfleet.make("Bounce-v0", N, backend=backend, autoreset_mode=mode,
                                max_episode_steps=LIMIT)
            assert_same(trajectory(env, 40), expected)


@pytest.mark.skipif("cuda" not in envfleet.available_backends(),
                    reason="cuda backend unavailable (set NUMBA_ENABLE_CUDASIM=1 to simulate)")
def test_cuda_same_trajectories_as_numba(registered):
    for env_id, steps in (("Bounce-v0", 16), ("Ladder-v0", 10)):
        kw = dict(autoreset_mode="SameStep", max_episode_steps=LIMIT)
        numba_env = envfleet.make(env_id, N, backend="numba", **kw)
        cuda_env = envfleet.make(env_id, N, backend="cuda", threads_per_block=32, **kw)
        assert_same(trajectory(cuda_env, steps), trajectory(numba_env, steps))


def test_tables_reach_the_kernels(registered):
    env = envfleet.make("Ladder-v0", 2, seed=0, autoreset_mode="SameStep")  # compiled above
    env.reset()
    obs, rew, _, _, _ = env.step(np.array([1, 0]))
    assert obs[:, 0].tolist() == [1.0, 1.0]  # jump[0] = 1 either way
    obs, rew, _, _, _ = env.step(np.array([1, 0]))
    assert obs[:, 0].tolist() == [3.0, 2.0]  # jump[1] = 2 for action 1
    np.testing.assert_array_equal(rew, np.float32([0.3, 0.2]))  # prize[3], prize[2]


def test_kwargs_and_backends_refused_clearly(registered):
    with pytest.raises(ValueError, match=r"restitution must be in \[0, 1\]"):
        envfleet.make("Bounce-v0", 2, restitution=2.0)
    with pytest.raises(TypeError, match=r"Bounce-v0: .*unexpected keyword argument 'gravty'"):
        envfleet.make("Bounce-v0", 2, gravty=1.0)
    with pytest.raises(envfleet.BackendUnavailableError,
                       match=r"Ladder-v0 has no 'torch' backend.*reset_torch and step_torch"):
        envfleet.make("Ladder-v0", 2, backend="torch")
    with pytest.raises(ValueError, match=r"invalid action for env 1: 3 is not in Discrete\(3\)"):
        env = envfleet.make("Bounce-v0", 2, seed=0)
        env.reset()
        env.step(np.array([0, 3]))


# --- registration rules ---------------------------------------------------------------------


def test_register_replace_unregister():
    envfleet.register_native_env(SPEC)
    try:
        with pytest.raises(ValueError, match="Bounce-v0 is already registered; pass "
                                             "replace=True"):
            envfleet.register_native_env(SPEC)
        other = dataclasses.replace(SPEC, max_episode_steps=7)
        envfleet.register_native_env(other, replace=True)
        assert NATIVE_ENVS["Bounce-v0"] is other
        assert gym.spec("envfleet/Bounce-v0").max_episode_steps == 7
    finally:
        envfleet.unregister_native_env("Bounce-v0")
    assert "Bounce-v0" not in envfleet.list_envs() and "envfleet/Bounce-v0" not in gym.registry
    with pytest.raises(envfleet.UnknownEnvError, match="unknown env id 'Bounce-v0'"):
        envfleet.make("Bounce-v0", 2)
    with pytest.raises(envfleet.UnknownEnvError, match="not a registered native env"):
        envfleet.unregister_native_env("Bounce-v0")
    with pytest.raises(ValueError, match="CartPole-v1 is one of envfleet's own envs"):
        envfleet.register_native_env(dataclasses.replace(SPEC, id="CartPole-v1"), replace=True)
    with pytest.raises(ValueError, match="CartPole-v1 is one of envfleet's own envs"):
        envfleet.unregister_native_env("envfleet/CartPole-v1")


def test_a_gymnasium_id_needs_an_explicit_override():
    """``CartPole-v0`` is Gymnasium's: registered silently, ``make`` would run the native family
    while the executors kept building Gymnasium's env. Refused, unless asked for."""
    spec = dataclasses.replace(SPEC, id="CartPole-v0")
    with pytest.raises(ValueError, match=r"CartPole-v0 is a Gymnasium id \(gymnasium.make\("
                                         r"'CartPole-v0'\) builds gymnasium.envs.classic_control"
                                         r".cartpole:CartPoleEnv\).*override_gymnasium=True"):
        envfleet.register_native_env(spec)
    assert "CartPole-v0" not in NATIVE_ENVS and "envfleet/CartPole-v0" not in gym.registry
    envfleet.register_native_env(spec, override_gymnasium=True)
    try:
        native = envfleet.make("CartPole-v0", 2)
        executor = envfleet.make("CartPole-v0", 2, backend="serial")
        assert native.native_spec is spec  # the user's kernels on the native backends
        assert executor.single_observation_space.shape == (4,)  # Gymnasium's CartPole
        native.close()
        executor.close()
        with pytest.raises(ValueError, match="CartPole-v0 is a Gymnasium id"):
            envfleet.register_native_env(spec, replace=True)  # each registration says so
    finally:
        envfleet.unregister_native_env("CartPole-v0")
    assert gym.spec("CartPole-v0").entry_point.endswith("CartPoleEnv")  # Gymnasium's, intact


def test_builtin_families_follow_the_rules():
    from envfleet.envs import FAMILIES
    from envfleet.native.spec import check_spec

    for spec in FAMILIES.values():
        check_spec(spec)


def plain_step(i, state, params, actions, rng, obs, rewards, terminated):
    rewards[i] = 0.0


@kernel_function
def short_step(i, state, params, actions, rng, obs):
    obs[i, 0] = 0.0


class BadParams(NamedTuple):
    name: str


BAD_SPECS = {
    "id without version": (dict(id="Bounce"), r"NativeEnvSpec.id must be a Gymnasium id "
                                              r"'Name-vN' .*got 'Bounce'"),
    "id with namespace": (dict(id="me/Bounce-v0"), r"got 'me/Bounce-v0'"),
    "id not a str": (dict(id=3), "NativeEnvSpec.id must be"),
    "observation space": (dict(observation_space=spaces.Discrete(4)),
                          r"Bounce-v0: NativeEnvSpec.observation_space must be a "
                          r"gymnasium.spaces.Box of numbers.*got Discrete\(4\)"),
    "action space": (dict(action_space=spaces.MultiBinary(2)),
                     r"NativeEnvSpec.action_space must be a gymnasium.spaces.Discrete or Box, "
                     r"got MultiBinary"),
    "state not a dict": (dict(state=[("h", np.float64)]), r"NativeEnvSpec.state must be a dict"),
    "state column not a pair": (dict(state={"h": np.float64, "v": (np.float64, ())}),
                                r"column 'h' must be a \(dtype, shape\) pair"),
    "state dtype": (dict(state={"h": (object, ()), "v": (np.float64, ())}),
                    r"column 'h' has dtype <class 'object'>; use a NumPy number or bool dtype"),
    "state dtype unknown": (dict(state={"h": ("double-ish", ()), "v": (np.float64, ())}),
                            r"column 'h' has dtype 'double-ish'"),
    "state shape": (dict(state={"h": (np.float64, 3), "v": (np.float64, ())}),
                    r"column 'h' has shape 3; use a tuple of ints"),
    "state name": (dict(state={"_h": (np.float64, ()), "v": (np.float64, ())}),
                   r"column name '_h' must be a Python identifier"),
    "missing reset_one": (dict(reset_one=None), r"NativeEnvSpec.reset_one is missing"),
    "plain step_one": (dict(step_one=plain_step),
                       r"NativeEnvSpec.step_one is not decorated: decorate it .* with "
                       r"@envfleet.kernels.kernel_function"),
    "njit step_one": (dict(step_one=numba.njit(plain_step)),
                      r"step_one is a numba.njit dispatcher, which CUDA device code cannot call"),
    "step_one arguments": (dict(step_one=short_step),
                           r"step_one must take 8 arguments \(i, state, params, actions, rng, "
                           r"obs, rewards, terminated\), its signature is \(i, state, params, "
                           r"actions, rng, obs\)"),
    "max_episode_steps zero": (dict(max_episode_steps=0),
                               r"NativeEnvSpec.max_episode_steps must be an int >= 1.*got 0"),
    "max_episode_steps float": (dict(max_episode_steps=10.5), r"got 10.5"),
    "max_episode_steps bool": (dict(max_episode_steps=True), r"got True"),
    "make_params without defaults": (dict(make_params=lambda size: BounceParams(*[size] * 6)),
                                     r"NativeEnvSpec.make_params\(\) raised TypeError: .*every "
                                     r"param needs a "
                                     r"default"),
    "make_params not a NamedTuple": (dict(make_params=lambda: {"g": 9.8}),
                                     r"make_params must return a NamedTuple .*returned dict"),
    "params field": (dict(make_params=lambda: BadParams("x")),
                     r"returned params.name = 'x' \(str\); kernels take numbers"),
    "torch form alone": (dict(step_torch=None, backends=("numba",)),
                         r"reset_torch is given alone"),
    "backends": (dict(backends=("numba", "gpu")), r"NativeEnvSpec.backends must be a "
                                                  r"non-empty tuple"),
    "torch without forms": (dict(reset_torch=None, step_torch=None,
                                 backends=("numba", "torch")),
                            r"backends lists 'torch' but reset_torch / step_torch .* not given"),
    "tables and torch": (dict(tables=ladder_tables),
                         r"the torch backend does not take lookup tables"),
    "tables clash": (dict(tables=lambda: {"h": np.zeros(2)}, backends=("numba",)),
                     r"table name 'h' must be an identifier .*not a state column"),
    "info_columns": (dict(info_columns=("height",)),
                     r"info_columns names 'height', which is not a state column \(h, v\)"),
    "info_columns a str": (dict(info_columns="hv"),
                           r"info_columns must be a tuple of state column names, got str 'hv' "
                           r"\(one column: write \('hv',\)\)"),
    "tables raise": (dict(tables=lambda: {"jump": np.full(3, 1 / len(()))},
                          backends=("numba",)),
                     r"Bounce-v0: NativeEnvSpec.tables\(\) raised ZeroDivisionError: "
                     r"division by zero"),
    "kernel_params raise": (dict(kernel_params=lambda params: params.missing),
                            r"NativeEnvSpec.kernel_params\(\) raised AttributeError: "
                            r"'BounceParams' object has no attribute 'missing'"),
    "single_env_defaults": (dict(single_env_defaults={"gravty": 1.0}),
                            r"NativeEnvSpec.single_env_defaults \{'gravty': 1.0\} do not "
                            r"make params: make_params raised TypeError: .*'gravty'"),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_bad_spec_refused_at_registration(case):
    changes, message = BAD_SPECS[case]
    spec = dataclasses.replace(SPEC, **changes)
    with pytest.raises(envfleet.InvalidSpecError, match=message):
        envfleet.register_native_env(spec)
    assert "Bounce-v0" not in NATIVE_ENVS and "envfleet/Bounce-v0" not in gym.registry


def test_not_a_spec_refused():
    with pytest.raises(envfleet.InvalidSpecError, match="expected a NativeEnvSpec, got dict"):
        envfleet.register_native_env({"id": "Bounce-v0"})


def helper(x):  # a plain Python function: kernels cannot call it
    return math.sqrt(x)


@kernel_function
def untypable_step(i, state, params, actions, rng, obs, rewards, terminated):
    state.h[i] = helper(state.h[i])
    terminated[i] = False


def test_kernel_numba_cannot_type_is_explained():
    spec = dataclasses.replace(SPEC, id="Untypable-v0", step_one=untypable_step,
                               reset_torch=None, step_torch=None, backends=None)
    envfleet.register_native_env(spec)
    try:
        with pytest.raises(envfleet.KernelCompileError) as caught:
            envfleet.make("Untypable-v0", 2, backend="numba")
    finally:
        envfleet.unregister_native_env("Untypable-v0")
    message = str(caught.value)
    assert message.startswith("Untypable-v0: numba could not compile the env's kernels for the "
                              "'numba' backend (at test_user_envs.py:")
    assert "`state.h[i] = helper(state.h[i])`: Untyped global name 'helper'" in message
    assert "must not allocate" in message and "spec.tables()" in message
    assert "docs/NATIVE_ENVS.md" in message
    assert isinstance(caught.value.__cause__, numba.core.errors.TypingError)


@kernel_function
def zeros_step(i, state, params, actions, rng, obs, rewards, terminated):
    scratch = np.zeros(2)  # allocates
    state.h[i] = scratch[0]
    terminated[i] = False


@kernel_function
def empty_step(i, state, params, actions, rng, obs, rewards, terminated):
    scratch = np.empty(2)  # allocates
    scratch[0] = 1.0
    state.h[i] = scratch[0]
    terminated[i] = False


@kernel_function
def list_step(i, state, params, actions, rng, obs, rewards, terminated):
    kicks = [1.0, 2.0]  # allocates
    state.h[i] = kicks[0]
    terminated[i] = False


@kernel_function
def comprehension_step(i, state, params, actions, rng, obs, rewards, terminated):
    kicks = [k * 1.0 for k in range(3)]  # allocates
    state.h[i] = kicks[0]
    terminated[i] = False


@kernel_function
def copy_step(i, state, params, actions, rng, obs, rewards, terminated):
    row = obs[i, :].copy()  # allocates
    state.h[i] = row[0]
    terminated[i] = False


@kernel_function
def expression_step(i, state, params, actions, rng, obs, rewards, terminated):
    row = obs[i, :] * 2.0  # allocates
    state.h[i] = row[0]
    terminated[i] = False


@kernel_function
def allocating_helper(x):
    scratch = np.zeros(3)  # allocates
    scratch[0] = x
    return scratch[0]


@kernel_function
def helper_step(i, state, params, actions, rng, obs, rewards, terminated):
    state.h[i] = allocating_helper(state.h[i])
    terminated[i] = False


@kernel_function
def allocating_reset(i, state, params, rng, obs):
    start = np.array([0.5, 0.0])  # allocates
    state.h[i] = start[0]
    state.v[i] = start[1]
    obs[i, 0] = np.float32(start[0])
    obs[i, 1] = np.float32(0.0)


#: every allocation form, each in the function whose marked line allocates
ALLOCATING = {"np.zeros": zeros_step, "np.empty": empty_step, "list": list_step,
              "list comprehension": comprehension_step, "slice copy": copy_step,
              "array expression": expression_step, "helper's np.zeros": helper_step,
              "reset's np.array": allocating_reset}


def allocating_line(fn) -> tuple[int, str]:
    """The line number and code of ``fn``'s line marked ``# allocates`` (or its helper's)."""
    fn = allocating_helper if fn is helper_step else fn
    lines, first = inspect.getsourcelines(fn)
    k = next(k for k, line in enumerate(lines) if line.rstrip().endswith("# allocates"))
    return first + k, lines[k].strip()


@pytest.mark.parametrize("form", list(ALLOCATING))
def test_an_allocating_kernel_is_named_at_its_line(form: str) -> None:
    """Whatever the form of the allocation (numba fails to type some and to lower others,
    and reports a helper's failure inside its caller's), the error names the allocating line of
    the user's code and says that it allocates."""
    fn = ALLOCATING[form]
    field = "reset_one" if fn is allocating_reset else "step_one"
    spec = dataclasses.replace(SPEC, id="Allocating-v0", reset_torch=None, step_torch=None,
                               backends=None, **{field: fn})
    envfleet.register_native_env(spec)
    try:
        with pytest.raises(envfleet.KernelCompileError) as caught:
            envfleet.make("Allocating-v0", 2, backend="numba")
    finally:
        envfleet.unregister_native_env("Allocating-v0")
    line, code = allocating_line(fn)
    assert (f"for the 'numba' backend (at test_user_envs.py:{line} `{code}`: it allocates (a new "
            f"array, list, dict, set or string;") in str(caught.value)


def test_cuda_errors_name_the_line_numba_cpu_names() -> None:
    """numba-cuda's messages carry no line of the user's code for most allocations (seen on an
    H200 with numba-cuda 0.30.4) and colour what they print: on cuda, ``compile_checked`` asks
    numba CPU, which compiles the same source under the same rules, for the line."""
    from types import SimpleNamespace

    from envfleet.native import build, jit
    from envfleet.native.driver import MODE_CODES

    spec = dataclasses.replace(SPEC, id="Allocating-v0", step_one=copy_step, reset_torch=None,
                               step_torch=None, backends=None)

    def compile_on_gpu() -> None:  # what numba-cuda raised for .copy(): no file, no line
        raise numba.core.errors.TypingError("\x1b[1mNRT required but not enabled\x1b[0m")

    engine = SimpleNamespace(spec=spec, mode=MODE_CODES[AutoresetMode.NEXT_STEP],
                             params=spec.make_params(), max_episode_steps=10,
                             compile=compile_on_gpu)
    with pytest.raises(envfleet.KernelCompileError) as caught:
        build.compile_checked(engine, spec.id, "cuda")
    line, code = allocating_line(copy_step)
    assert (f"for the 'cuda' backend (at test_user_envs.py:{line} `{code}`: it allocates"
            in str(caught.value))
    coloured = ('\x1b[1mUntyped global name \x1b[1m\x1b[1m\'helper\'\x1b[0m\x1b[0m\x1b[0m\n'
                '\x1b[1m\nFile "kernels.py", line 12:\x1b[0m\n\x1b[1m    x = helper(y)\n'
                '    ^\x1b[0m\n')
    assert jit._user_location(coloured) == "kernels.py:12 `x = helper(y)`: Untyped global " \
                                           "name 'helper'"


# --- debugging kernels as plain Python ------------------------------------------------------

DEBUG_RUN = """
import json, sys
import numpy as np
import envfleet

env = envfleet.make("CartPole-v1", 3, backend="numba", seed=0, autoreset_mode=sys.argv[1],
                    max_episode_steps=10)
obs, _ = env.reset(seed=5)
seen = [obs.tolist()]
for t in range(25):
    obs, rewards, terminated, truncated, _ = env.step(np.array([t % 2, 1, 0]))
    seen.append([obs.tolist(), rewards.tolist(), terminated.tolist(), truncated.tolist()])
print(json.dumps(seen))
"""


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_numba_disable_jit_runs_the_kernels_as_python_with_the_same_results(mode: str) -> None:
    """``NUMBA_DISABLE_JIT=1`` (to step through a family in a debugger) runs the same
    trajectories as the compiled kernels."""
    import json
    import os
    import subprocess
    import sys

    def run(disable: str) -> list:
        env = {**os.environ, "NUMBA_DISABLE_JIT": disable, "ENVFLEET_QUIET": "1"}
        done = subprocess.run([sys.executable, "-c", DEBUG_RUN, mode], capture_output=True,
                              text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run("1") == run("0")
