"""The declaration of a native env family: spaces, per-env state, params and kernels.

One ``NativeEnvSpec`` per family (EnvPool's habit): the engines allocate every buffer from it and
lift its scalar kernels; nothing else about the family is special-cased anywhere.
"""

from __future__ import annotations

import functools
import math
import numbers
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
    # --- optional family extensions (all default to "none"; CartPole uses none of them) ---
    #: shared constant arrays (lookup tables): name -> array, appended to the state NamedTuple
    #: after the per-env columns, so they reach every kernel as arguments (never as captured
    #: globals); built once per process by the family, copied to the device once per engine
    tables: Callable[[], dict[str, np.ndarray]] | None = None
    #: state columns returned in ``info`` on every reset and step (e.g. ``action_mask``)
    info_columns: tuple[str, ...] = ()
    #: per-env action check that sees the state: ``action_check(i, state, params, actions)``
    #: -> bool (kernel code); a step with any env failing it is refused before any env moves
    action_check: Callable[..., bool] | None = None
    #: the error text for an in-range action refused by ``action_check``:
    #: ``describe_refusal(index, value, engine) -> str``
    describe_refusal: Callable[[int, Any, Any], str] | None = None
    #: the part of the params record the kernels see (compiled in on numba: one compile per
    #: distinct value); the rest stays on the engine (``engine.params``) for the family's env
    kernel_params: Callable[[tuple], tuple] | None = None
    #: the spec to use for a params record (e.g. a different observation space)
    specialize: Callable[[tuple], NativeEnvSpec] | None = None
    #: the default episode limit (in steps) for a params record
    default_max_steps: Callable[[tuple], int] | None = None
    #: returns the ``NativeVectorEnv`` subclass to build (family methods and reset options)
    vector_env_class: Callable[[], type] | None = None
    #: the native backends that can run this family
    backends: tuple[str, ...] = ("numba", "cuda", "torch")
    #: numba: the fewest envs stepped by the parallel kernel (None: the backend's default,
    #: tuned for cheap steps; an env family with microsecond steps gains from threads sooner)
    parallel_min_envs: int | None = None
    #: seconds a first compile usually takes (numba, 2 cores): the first-compile notice's hint
    compile_seconds: float = 2.0
    #: draws an env from its state with the reference env's own renderer:
    #: ``renderer(params)`` -> an object with ``fps``, ``draw(row) -> RGB array`` (``row``:
    #: state column name -> that env's value) and ``close()``; None: the family cannot render
    renderer: Callable[[tuple], Any] | None = None

    @functools.cached_property
    def state_type(self) -> type:
        """The NamedTuple class of the per-env state arrays (and shared tables), one per family:
        numba types a NamedTuple by its class, so a class per env would recompile every kernel
        per env."""
        return namedtuple(f"{self.id.split('-')[0]}State",
                          [*self.state, *self.table_names])

    @functools.cached_property
    def table_names(self) -> tuple[str, ...]:
        return tuple(self.tables()) if self.tables is not None else ()

    def allocate_state(self, num_envs: int) -> dict[str, np.ndarray]:
        """Zeroed NumPy arrays for every state column, then the shared tables (not copied)."""
        columns = {
            name: np.zeros((num_envs, *shape), dtype=dtype)
            for name, (dtype, shape) in self.state.items()
        }
        if self.tables is not None:
            columns.update(self.tables())
        return columns


def finite_param(name: str, value: Any) -> float:
    """A family's real-valued constructor argument as a float: a real number (``TypeError``
    otherwise) that is finite (``ValueError`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)
