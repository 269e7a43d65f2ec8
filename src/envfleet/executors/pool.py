"""``pool``: W worker processes, each stepping a contiguous share of the envs in a loop.

Observations, rewards and flags are written by the workers straight into shared-memory batch
buffers, and the actions are read from them: per batch, the parent writes the actions, sends
each worker one byte and sleeps until each answers with one byte (``b"k"``; only non-empty
infos are pickled). W defaults to the usable cores, never more than ``num_envs``; any
``num_envs`` works (shares differ by one env at most). ``pin_workers=True`` keeps worker w on
usable core ``w mod cores`` (faster on an otherwise idle machine: no migrations; slower when
other processes want those cores, hence off by default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium.vector import AutoresetMode

from envfleet.executors.base import DEFAULT_STEP_TIMEOUT
from envfleet.executors.processes import ProcessVectorEnv, usable_cores


class PoolVectorEnv(ProcessVectorEnv):
    """``num_envs`` Gymnasium envs over ``num_workers`` processes and shared memory."""

    backend = "pool"
    shared_memory = True

    def __init__(self, factories: list[Callable[[], Any]], num_workers: int | None = None, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, pin_workers: bool = False) -> None:
        if num_workers is None:
            num_workers = usable_cores()
        super().__init__(factories, num_workers, autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, start_method=start_method,
                         pin_workers=pin_workers)
