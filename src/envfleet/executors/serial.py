"""``serial``: every env in this process, stepped in one loop (no processes, no copies)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from envfleet.executors.base import (
    ExecutorVectorEnv,
    failure_error,
    spaces_mismatch,
)
from envfleet.executors.group import EnvFailure, EnvGroup, Infos


def check_spaces(pairs: Sequence[tuple[spaces.Space, spaces.Space]], first: int = 0) -> None:
    """Envs ``first, first + 1, ..`` with these (observation, action) spaces must all have
    env ``first``'s (batching needs one layout); raises ``SpacesMismatchError``."""
    for k, pair in enumerate(pairs[1:], 1):
        for what, theirs, mine in zip(("observation_space", "action_space"), pair, pairs[0],
                                      strict=True):
            if theirs != mine:
                raise spaces_mismatch(first + k, what, theirs, first, mine)


def check_same_spaces(envs: list[Any], first: int = 0) -> None:
    """``check_spaces`` for envs ``first, first + 1, ..``."""
    check_spaces([(env.observation_space, env.action_space) for env in envs], first)


class SerialVectorEnv(ExecutorVectorEnv):
    """``num_envs`` Gymnasium envs built by ``factories`` and stepped in a loop, in-process."""

    backend = "serial"

    def __init__(self, factories: list[Callable[[], Any]], *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 restart_failed: bool = False) -> None:
        super().__init__(len(factories), autoreset_mode=autoreset_mode, seed=seed, copy=copy)
        envs: list[Any] = []
        try:
            for i, factory in enumerate(factories):
                try:
                    envs.append(factory())
                except Exception as error:
                    raise _error(EnvFailure(i, "make", error)) from error
            check_same_spaces(envs)
            first = envs[0]
            layout = self._setup(first.observation_space, first.action_space,
                                 getattr(first, "metadata", None),
                                 getattr(first, "render_mode", None))
        except BaseException:
            for env in envs:
                env.close()
            raise
        self.envs = envs
        self._bind(layout.local())
        self.restart_failed = bool(restart_failed)
        self._group = EnvGroup(envs, 0, 0, autoreset_mode, self.single_observation_space,
                               self.single_action_space, self.arrays,
                               factories=list(factories) if restart_failed else None)

    def _reset_envs(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                    options: dict[str, Any] | None) -> Infos:
        try:
            return self._group.reset(mask, seeds, options)
        except EnvFailure as failure:
            raise _error(failure) from failure.__cause__

    def _step_envs(self) -> tuple[Infos, Infos]:
        try:
            return self._group.step()
        except EnvFailure as failure:
            raise _error(failure) from failure.__cause__

    def _call_envs(self, rows: list[int], name: str | Callable[..., Any], args: tuple,
                   kwargs: dict[str, Any]) -> list[Any]:
        try:
            return self._group.call(rows, name, args, kwargs)
        except EnvFailure as failure:
            raise _error(failure) from failure.__cause__

    def _set_attr_envs(self, rows: list[int], name: str, values: list[Any]) -> None:
        try:
            self._group.set_attr(rows, name, values)
        except EnvFailure as failure:
            raise _error(failure) from failure.__cause__

    def _close_executor(self) -> None:
        self._group.close() if hasattr(self, "_group") else None


def _error(failure: EnvFailure) -> Exception:
    """The error a process executor would raise (chained to the env's own exception)."""
    return failure_error(*failure.as_tuple())
