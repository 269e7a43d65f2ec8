"""``subprocess``: one process per env, actions and results pickled through pipes.

The classic design (Gymnasium's ``AsyncVectorEnv``, SB3's ``SubprocVecEnv``): kept as the
baseline the ``pool`` is measured against, and for envs that must each have their own process.
Start-up, faults, timeouts and closing are the pool's (``executors.processes``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium.vector import AutoresetMode

from envfleet.executors.base import DEFAULT_STEP_TIMEOUT
from envfleet.executors.processes import ProcessVectorEnv


class SubprocessVectorEnv(ProcessVectorEnv):
    """``num_envs`` Gymnasium envs, each in its own process, talking through pipes."""

    backend = "subprocess"

    def __init__(self, factories: list[Callable[[], Any]], *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, restart_failed: bool = False) -> None:
        super().__init__(factories, len(factories), autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, start_method=start_method,
                         restart_failed=restart_failed)
