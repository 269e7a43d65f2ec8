"""The debug switch ``ENVFLEET_BOUNDSCHECK=1`` (docs/NATIVE_ENVS.md, "Kernel rules"): the numba
backend compiles every kernel with bounds checks, so a user's kernel that writes past its row
raises a ``KernelIndexError`` naming the family, the env, the kernel functions and the line, and
moves no env, instead of corrupting the heap. Checked and unchecked kernels never share compiled
code (in a process or on disk). The corrupting kernels here only ever run under the switch."""

from __future__ import annotations

import dataclasses
import inspect
from typing import NamedTuple

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import envfleet
from envfleet.kernels import NativeEnvSpec, kernel_function
from envfleet.native.jit import BOUNDSCHECK_VARIABLE, KernelIndexError

NUM_ENVS = 6
BAD_ENV = 3


class Params(NamedTuple):
    columns: int


def make_params(columns: int = 5) -> Params:
    return Params(columns)


@kernel_function
def reset_one(i, state, params, rng, obs):
    state.t[i] = 0
    for k in range(obs.shape[1]):
        obs[i, k] = np.float32(0.0)


@kernel_function
def write_past_the_row(i, obs, value):
    obs[i, 5] = value  # obs has 5 columns


@kernel_function
def step_one(i, state, params, actions, rng, obs, rewards, terminated):
    """Action 1 writes one past env i's row, on the env's second step."""
    state.t[i] += 1
    obs[i, 0] = np.float32(state.t[i])
    if actions[i] == 1 and state.t[i] >= 2:
        write_past_the_row(i, obs, np.float32(7.0))
    rewards[i] = np.float32(state.t[i])
    terminated[i] = False


@kernel_function
def reset_past_the_row(i, state, params, rng, obs):
    """Env 2's reset writes past its row."""
    state.t[i] = 0
    for k in range(params.columns + (1 if i == 2 else 0)):
        obs[i, k] = np.float32(1.0)


@kernel_function
def read_past_the_row(i, state, params, actions, rng, obs, rewards, terminated):
    """Action 1 makes env 0 read ``obs[0, 5]``: inside the buffer (env 1's first column), so
    harmless unchecked; a bounds-checked kernel refuses it."""
    state.t[i] += 1
    obs[i, 0] = np.float32(state.t[i] * 10 + i)
    rewards[i] = obs[i, 5] if actions[i] == 1 and i == 0 else np.float32(0.0)
    terminated[i] = False


SPEC = NativeEnvSpec(
    id="PastTheRow-v0",
    observation_space=spaces.Box(-np.inf, np.inf, (5,), np.float32),
    action_space=spaces.Discrete(2),
    state={"t": (np.int64, ())},
    make_params=make_params,
    max_episode_steps=100,
    reset_one=reset_one,
    step_one=step_one,
    backends=("numba",),
)
RESET_SPEC = dataclasses.replace(SPEC, id="ResetPastTheRow-v0", reset_one=reset_past_the_row)
READ_SPEC = dataclasses.replace(SPEC, id="ReadPastTheRow-v0", step_one=read_past_the_row)


@pytest.fixture
def families():
    for spec in (SPEC, RESET_SPEC, READ_SPEC):
        envfleet.register_native_env(spec)
    yield
    for spec in (SPEC, RESET_SPEC, READ_SPEC):
        envfleet.unregister_native_env(spec.id)


def line_of(fn, text: str) -> int:
    """The line number of ``text`` in ``fn``'s source."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def engine_arrays(env) -> list[np.ndarray]:
    e = env.engine
    return [a.copy() for a in (e.state.t, e.obs, e.rewards, e.terminated, e.truncated,
                               e.pending, *e.rng)]


@pytest.mark.parametrize(("mode", "copy"), [(AutoresetMode.NEXT_STEP, True),
                                            (AutoresetMode.SAME_STEP, False),
                                            (AutoresetMode.DISABLED, True)])
def test_a_write_past_the_row_names_the_env_and_the_line(families, monkeypatch, mode, copy):
    monkeypatch.setenv(BOUNDSCHECK_VARIABLE, "1")
    env = envfleet.make("PastTheRow-v0", NUM_ENVS, autoreset_mode=mode, copy=copy,
                        num_threads=2)
    env.reset(seed=0)
    actions = np.zeros(NUM_ENVS, np.int64)
    actions[BAD_ENV] = 1
    env.step(actions)  # every env's first step: in bounds
    before = engine_arrays(env)
    with pytest.raises(KernelIndexError) as caught:
        env.step(actions)
    message = str(caught.value)
    assert isinstance(caught.value, IndexError)
    assert message.startswith(f"PastTheRow-v0: env {BAD_ENV}'s step indexed an array out of "
                              "bounds in step_one > write_past_the_row (test_boundscheck.py:"
                              f"{line_of(write_past_the_row, 'obs[i, 5]')} "
                              "`obs[i, 5] = value`): index 5 is out of bounds for axis 1 with "
                              "size 5; no env moved"), message
    assert BOUNDSCHECK_VARIABLE in message
    assert all(np.array_equal(a, b) for a, b in zip(before, engine_arrays(env), strict=True))
    actions[BAD_ENV] = 0  # the env goes on from where it was
    obs, rewards, *_ = env.step(actions)
    assert rewards.tolist() == [2.0] * NUM_ENVS and obs[:, 0].tolist() == [2.0] * NUM_ENVS
    env.close()


def test_a_reset_past_the_row_names_the_env(families, monkeypatch):
    monkeypatch.setenv(BOUNDSCHECK_VARIABLE, "1")
    env = envfleet.make("ResetPastTheRow-v0", NUM_ENVS)
    with pytest.raises(KernelIndexError, match=(
            r"ResetPastTheRow-v0: env 2's reset indexed an array out of bounds in "
            rf"reset_past_the_row \(test_boundscheck.py:"
            rf"{line_of(reset_past_the_row, 'obs[i, k]')} `obs\[i, k\] = np.float32\(1.0\)`\): "
            r"index 5 is out of bounds for axis 1 with size 5; no env moved")):
        env.reset(seed=0)
    env.close()


def test_checked_and_unchecked_kernels_never_share_code(families, monkeypatch):
    """Unchecked, checked, unchecked again, in one process: only the checked kernels refuse
    the read past the row (numba reuses a called function's code between callers with the same
    options: the checked kernels' are kept apart); their on-disk cache keys differ too."""
    actions = np.array([1, 0, 0, 0, 0, 0])

    def play() -> tuple:
        env = envfleet.make("ReadPastTheRow-v0", NUM_ENVS)
        env.reset(seed=0)
        env.step(actions)
        rewards = env.step(actions)[1]  # env 0 reads env 1's last obs[1, 0]: 11
        return env.engine, rewards

    engine, rewards = play()
    assert rewards[0] == 11.0  # read past env 0's row, unchecked
    monkeypatch.setenv(BOUNDSCHECK_VARIABLE, "1")
    with pytest.raises(KernelIndexError, match="env 0's step indexed an array out of bounds"):
        play()
    checked = envfleet.make("ReadPastTheRow-v0", NUM_ENVS).engine
    monkeypatch.delenv(BOUNDSCHECK_VARIABLE)
    again, rewards = play()
    assert rewards[0] == 11.0 and not again.checked and checked.checked
    assert again._kernels is engine._kernels and checked._kernels is not engine._kernels
    for plain, safe in zip(engine._kernels, checked._kernels, strict=True):
        if getattr(plain, "_cache", None) is not None and plain._cache._enabled:
            assert plain._cache._key != safe._cache._key


def test_other_backends_warn_that_they_run_unchecked(monkeypatch):
    monkeypatch.setenv(BOUNDSCHECK_VARIABLE, "1")
    pytest.importorskip("torch")
    with pytest.warns(UserWarning, match="the 'torch' backend runs CartPole-v1 unchecked"):
        envfleet.make("CartPole-v1", 2, backend="torch").close()
