"""A user's module that registers a native env when imported: ``MyGrid-v0``, a corridor of 5
cells walked towards its right end (action 1 right, 0 left; reward 1 at the end, else -0.1).

Used by ``tests/native/test_env_ids.py`` as ``tests.native.mygrid:MyGrid-v0``: the form that
imports the module first, in this process and in every worker process and Ray actor.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from gymnasium import spaces

import envfleet
from envfleet.kernels import NativeEnvSpec, env_uniform, kernel_function

ENV_ID = "MyGrid-v0"


class MyGridParams(NamedTuple):
    size: int


def make_params(size: int = 5) -> MyGridParams:
    return MyGridParams(int(size))


@kernel_function
def reset_one(i, state, params, rng, obs):
    state.pos[i] = int(env_uniform(rng, i, 0, 0.0, 2.0))
    obs[i, 0] = np.float32(state.pos[i])


@kernel_function
def step_one(i, state, params, actions, rng, obs, rewards, terminated):
    pos = state.pos[i] + (1 if actions[i] == 1 else -1)
    pos = min(max(pos, 0), params.size - 1)
    state.pos[i] = pos
    obs[i, 0] = np.float32(pos)
    terminated[i] = pos == params.size - 1
    rewards[i] = 1.0 if pos == params.size - 1 else -0.1


SPEC = NativeEnvSpec(
    id=ENV_ID,
    observation_space=spaces.Box(np.float32([0]), np.float32([4]), dtype=np.float32),
    action_space=spaces.Discrete(2),
    state={"pos": (np.int64, ())},
    make_params=make_params,
    max_episode_steps=20,
    reset_one=reset_one,
    step_one=step_one,
)
envfleet.register_native_env(SPEC)
