"""The declaration of a native env family: spaces, per-env state, params and kernels.

One ``NativeEnvSpec`` per family (EnvPool's habit): the engines allocate every buffer from it and
lift its scalar kernels; nothing else about the family is special-cased anywhere.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces


@dataclass(frozen=True, eq=False)
class NativeEnvSpec:
    """One native env family.

    ``reset_one(i, state, params, rng, obs)`` and
    ``step_one(i, state, params, actions, rng, obs, rewards, terminated)`` are scalar functions of
    env ``i``'s row, compiled for numba CPU and CUDA (``register_jitable``). ``reset_torch`` /
    ``step_torch`` are the same dynamics as whole-batch tensor ops. Truncation (the episode step
    limit) and autoreset belong to the shared driver, not to the family.
    """

    id: str
    observation_space: spaces.Box
    action_space: spaces.Space
    #: per-env state columns: name -> (dtype, per-env shape)
    state: dict[str, tuple[type, tuple[int, ...]]]
    #: builds the params record (a NamedTuple) from the env's keyword arguments
    make_params: Callable[..., tuple]
    max_episode_steps: int
    reset_one: Callable[..., None]
    step_one: Callable[..., None]
    reset_torch: Callable[..., None]
    step_torch: Callable[..., None]
    #: the Gymnasium id of the reference implementation (bench baselines, agreement tests)
    reference_id: str
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def state_type(self) -> type:
        """The NamedTuple class of the per-env state arrays, one per family: numba types a
        NamedTuple by its class, so a class per env would recompile every kernel per env."""
        return namedtuple(f"{self.id.split('-')[0]}State", list(self.state))

    def allocate_state(self, num_envs: int) -> dict[str, np.ndarray]:
        """Zeroed NumPy arrays for every state column."""
        return {
            name: np.zeros((num_envs, *shape), dtype=dtype)
            for name, (dtype, shape) in self.state.items()
        }
