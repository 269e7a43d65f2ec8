"""The MuJoCo engine's oracle: Gymnasium's own v5 env, one per index, stepped in lockstep with the
engine's batch (seeds ``seed + i``, the same actions), every output compared bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("mujoco")

import gymnasium as gym

import envfleet
from envfleet.mujoco import MujocoVectorEnv
from tests.reference import lockstep_batch


def _same_info(info: dict[str, Any], expected: dict[str, Any], i: int, where: str) -> None:
    """Every entry of env i's own info is in the batch's, with its mask up, bit for bit."""
    for key, value in expected.items():
        assert info[f"_{key}"][i], f"{key} missing, {where}"
        np.testing.assert_array_equal(info[key][i], value, err_msg=f"{key}, {where}")


def lockstep(env_id: str, num_envs: int, steps: int, *, seed: int = 3,
             autoreset_mode: str = "NextStep", action_seed: int = 0, scale: float = 1.0,
             dtype: Any = np.float32, **kwargs: Any) -> int:
    """Step ``envfleet.make(env_id, num_envs, seed=seed, **kwargs)`` and one
    ``gym.make(env_id, **kwargs)`` per index with the same uniform random actions (``scale``
    times the action bounds: above 1, out of range; ``tests.reference.lockstep_batch``),
    asserting equal observations, rewards, flags and info entries at every step
    (``final_obs``/``final_info`` in SAME_STEP; DISABLED resets the ended envs with a mask).
    ``model_params``: reference env i's model fields set to row i. Returns how many episodes
    ended."""
    model_params = kwargs.pop("model_params", None)
    env = envfleet.make(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode,
                        model_params=model_params, **kwargs)
    assert isinstance(env, MujocoVectorEnv)  # the engine, not Gymnasium's env on the pool
    refs = [gym.make(env_id, **kwargs) for _ in range(num_envs)]
    for i, ref in enumerate(refs):  # env i's model with its own values (domain randomisation)
        for name, values in (model_params or {}).items():
            model = ref.unwrapped.model
            target = model.opt if name.startswith("opt.") else model
            getattr(target, name.removeprefix("opt."))[...] = values[i]
    rng = np.random.default_rng(action_seed)
    space = env.single_action_space
    return lockstep_batch(
        env, refs, steps, seed=seed, autoreset_mode=autoreset_mode,
        draw_actions=lambda: (scale * rng.uniform(space.low, space.high,
                                                  (num_envs, *space.shape))).astype(dtype),
        same_info=_same_info)
