"""``serial``: every env in this process, stepped in one loop (no processes, no copies)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.executors.base import EnvWorkerError, ExecutorVectorEnv, failure_error
from envfleet.executors.group import EnvFailure, EnvGroup, Infos


def check_same_spaces(envs: list[Any], first: int = 0) -> None:
    """Every env must have env ``first``'s spaces (batching needs one layout)."""
    for k, env in enumerate(envs[1:], 1):
        for what in ("observation_space", "action_space"):
            if getattr(env, what) != getattr(envs[0], what):
                raise ValueError(
                    f"env {first + k}'s {what} {getattr(env, what)} differs from env "
                    f"{first}'s {getattr(envs[0], what)}: every env must have the same spaces"
                )


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

    def _call_envs(self, name: str, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        try:
            return self._group.call(name, args, kwargs)
        except EnvFailure as failure:
            raise _error(failure) from failure.__cause__

    def _set_attr_envs(self, name: str, values: list[Any]) -> None:
        try:
            self._group.set_attr(name, values)
        except EnvFailure as failure:
            raise _error(failure) from failure.__cause__

    def _close_executor(self) -> None:
        self._group.close() if hasattr(self, "_group") else None


def _error(failure: EnvFailure) -> EnvWorkerError:
    """The error for ``failure`` (chained by the caller to the env's own exception)."""
    error = failure_error(failure.index, failure.phase, failure.error_type, failure.error_text,
                          None)
    error.worker_traceback = failure.traceback
    return error
