"""``EnvGroup``: a contiguous share of the envs, stepped in a loop into batch buffers.

The one place where executors step Gymnasium envs and apply the autoreset mode; the serial
executor runs one group in-process, every pool or subprocess worker runs one group on its own
share of the envs. Autoreset follows Gymnasium's ``SyncVectorEnv`` call for call (the same
``reset()`` / ``step()`` calls in the same order), so the same seeds give the same trajectories.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from envfleet.contract import PEND, RESET_NOW, WAIT, on_episode_end
from envfleet.executors.outputs import check_flag, check_info, check_reward, obs_writer
from envfleet.executors.shared_memory import copy_row, nest, row_reader

#: (global env index, info dict) for the envs whose info was not empty
Infos = list[tuple[int, dict[str, Any]]]
#: the info key that reports a restarted env (``restart_failed=True``): what went wrong
FAILURE_KEY = "env_failure"
#: (the autoreset rule is the contract's, re-exported here for the executors)
__all__ = ["FAILURE_KEY", "PEND", "RESET_NOW", "WAIT", "EnvFailure", "EnvGroup", "Infos",
           "end_lost_episodes", "on_episode_end"]


class EnvFailure(Exception):
    """An env's ``reset``/``step`` (or its factory) raised; carries what the parent reports."""

    def __init__(self, index: int, phase: str, error: BaseException) -> None:
        self.index = index
        self.phase = phase
        self.error_type = type(error).__name__
        self.error_text = str(error)
        self.traceback = "".join(traceback.format_exception(error))
        super().__init__(index, phase, self.error_type, self.error_text)

    def as_tuple(self) -> tuple[int, str, str, str, str]:
        return self.index, self.phase, self.error_type, self.error_text, self.traceback


class EnvGroup:
    """Envs ``first .. first + len(envs) - 1``, stored in buffer rows ``row0 ..``.

    ``arrays`` holds the leaves named by ``executors.shared_memory.leaves``: ``obs...``,
    ``act...``, ``final_obs...`` (SAME_STEP), and ``rewards``, ``terminated``, ``truncated``.
    ``current`` (an int64 array, slot ``slot``) is set to the env being run, so that a parent
    can name the env a dead or hung worker was on.

    With ``factories`` (``restart_failed=True``), an env whose ``step``/``reset`` raises is
    rebuilt from its factory instead: its episode ends as truncated (NEXT_STEP: the next step
    resets it; SAME_STEP: reset at once, the last observation as ``final_obs``; DISABLED: the
    caller resets it), ``info["env_failure"]`` says what happened, and the other envs step on.
    """

    def __init__(self, envs: list[Any], first: int, row0: int, mode: AutoresetMode,
                 observation_space: spaces.Space, action_space: spaces.Space,
                 arrays: dict[str, np.ndarray], current: np.ndarray | None = None,
                 slot: int = 0, factories: list[Any] | None = None) -> None:
        self.envs = envs
        self.factories = factories
        self.first = first
        self.row0 = row0
        self.mode = mode
        self.rule = on_episode_end(mode)
        self.obs = nest(observation_space, arrays, "obs")
        self.actions = nest(action_space, arrays, "act")
        self.final_obs = (nest(observation_space, arrays, "final_obs")
                          if mode is AutoresetMode.SAME_STEP else None)
        self.rewards = arrays["rewards"]
        self.terminated = arrays["terminated"]
        self.truncated = arrays["truncated"]
        self.write_obs = obs_writer(observation_space)  # checks what the env returned
        self.read_action = row_reader(action_space)
        self.pending = np.zeros(len(envs), dtype=bool)  # NEXT_STEP: reset on the next step
        if current is None:
            current = np.zeros(slot + 1, dtype=np.int64)
        self.current = memoryview(current).cast("B").cast("q")  # cheaper to set than NumPy
        self.slot = slot

    def reset(self, mask: np.ndarray | None, seeds: list[int | None] | None,
              options: dict[str, Any] | None) -> Infos:
        """Reset the masked envs (all when ``mask`` is None) with their seeds."""
        infos: Infos = []
        j = 0
        try:
            for j, env in enumerate(self.envs):
                if mask is not None and not mask[j]:
                    continue
                self.current[self.slot] = self.first + j
                seed = None if seeds is None else seeds[j]
                try:
                    obs, info = env.reset(seed=seed, options=options)
                except Exception as error:
                    if self.factories is None:
                        raise
                    failure = _describe(error)
                    env = self._rebuild(j, "reset")
                    obs, info = env.reset(seed=seed, options=options)
                    info = {**check_info(info), FAILURE_KEY: failure}
                r = self.row0 + j
                self.write_obs(self.obs, r, obs)
                if type(info) is not dict:
                    info = check_info(info)
                self.rewards[r] = 0.0
                self.terminated[r] = False
                self.truncated[r] = False
                self.pending[j] = False
                if info:
                    infos.append((self.first + j, info))
        except EnvFailure:
            raise
        except Exception as error:
            raise EnvFailure(self.first + j, "reset", error) from error
        self.current[self.slot] = -1  # idle
        return infos

    def step(self) -> tuple[Infos, Infos]:
        """Step every env with its action from the action buffer; (infos, final infos)."""
        infos: Infos = []
        finals: Infos = []
        n = len(self.envs)
        r0, first = self.row0, self.first
        rows = slice(r0, r0 + n)
        # leaf spaces: iterate over private copies of the rows (one NumPy call per batch)
        leaf_actions = isinstance(self.actions, np.ndarray)
        actions = self.actions[rows].copy() if leaf_actions else [
            self.read_action(self.actions, r) for r in range(r0, r0 + n)]
        obs_rows = self.obs[rows] if isinstance(self.obs, np.ndarray) else None
        if obs_rows is not None:  # (anything but an array of this shape and dtype is checked)
            obs_shape, obs_dtype = obs_rows.shape[1:], obs_rows.dtype
        write_obs, obs_buf = self.write_obs, self.obs
        pending, current, slot, envs = self.pending, self.current, self.slot, self.envs
        next_step = self.rule == PEND
        rewards: list[float] = [0.0] * n
        terminated: list[bool] = [False] * n
        truncated: list[bool] = [False] * n
        j = start = 0
        while start < n:
            try:
                for j in range(start, n):
                    env = envs[j]
                    current[slot] = first + j
                    if next_step and pending[j]:
                        obs, info = env.reset()
                        pending[j] = False
                    else:
                        obs, reward, term, trunc, info = env.step(actions[j])
                        # checked where they are written: a bad one names this env
                        rewards[j] = reward if type(reward) is float else check_reward(reward)
                        if type(term) is not bool:
                            term = check_flag(term, "terminated")
                        if type(trunc) is not bool:
                            trunc = check_flag(trunc, "truncated")
                        terminated[j] = term
                        truncated[j] = trunc
                        if term or trunc:
                            obs, info = self._episode_end(j, obs, info, finals)
                    if obs_rows is not None and type(obs) is np.ndarray \
                            and obs.dtype is obs_dtype and obs.shape == obs_shape:
                        obs_rows[j] = obs
                    else:
                        write_obs(obs_buf, r0 + j, obs)
                    if type(info) is not dict:
                        info = check_info(info)
                    if info:
                        infos.append((first + j, info))
                start = n
            except Exception as error:
                if self.factories is None:
                    self._flush(rows, rewards, terminated, truncated)
                    raise EnvFailure(first + j, "step", error) from error
                try:
                    info, final = self._restart(j, error)
                except EnvFailure:
                    self._flush(rows, rewards, terminated, truncated)
                    raise
                rewards[j], terminated[j], truncated[j] = 0.0, False, True
                infos.append((first + j, info))
                if final:
                    finals.append((first + j, final))
                start = j + 1
        self._flush(rows, rewards, terminated, truncated)
        current[slot] = -1  # idle
        return infos, finals

    def _episode_end(self, j: int, obs: Any, info: Any, finals: Infos) -> tuple[Any, Any]:
        """Apply the autoreset rule (``on_episode_end``) to local env ``j``, whose episode
        has just ended with ``obs`` (None: the one in its row) and ``info``; returns the
        observation and info its row gets (SAME_STEP: the reset's, the last ones kept as
        ``final_obs`` and, when not empty, in ``finals``)."""
        if self.rule == RESET_NOW:
            if obs is None:
                copy_row(self.obs, self.final_obs, self.row0 + j)
            else:
                self.write_obs(self.final_obs, self.row0 + j, obs)
            if type(info) is not dict:
                info = check_info(info)
            if info:
                finals.append((self.first + j, info))
            return self.envs[j].reset()
        if self.rule == PEND:
            self.pending[j] = True
        return obs, info

    def start_fresh(self) -> Infos:
        """These envs were built in place of a lost share's, whose episodes ended: apply the
        autoreset rule to each (NEXT_STEP: reset on the next step; SAME_STEP: reset now, the
        reset infos returned; DISABLED: nothing)."""
        if self.rule == PEND:
            self.pending[:] = True
        elif self.rule == RESET_NOW:
            return self.reset(None, None, None)
        return []

    def step_one(self, j: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Step local env ``j`` alone (async mode), with the same autoreset as ``step``;
        its results go to its buffer rows; returns (info, final info)."""
        r = self.row0 + j
        self.current[self.slot] = self.first + j
        finals: Infos = []
        try:
            env = self.envs[j]
            action = self.read_action(self.actions, r)
            reward, term, trunc = 0.0, False, False
            if self.rule == PEND and self.pending[j]:
                obs, info = env.reset()
                self.pending[j] = False
            else:
                obs, reward, term, trunc, info = env.step(action)
                reward = check_reward(reward)
                term, trunc = check_flag(term, "terminated"), check_flag(trunc, "truncated")
                if term or trunc:
                    obs, info = self._episode_end(j, obs, check_info(info), finals)
            self.write_obs(self.obs, r, obs)
            info = check_info(info)
            self.rewards[r] = reward
            self.terminated[r] = term
            self.truncated[r] = trunc
        except Exception as error:
            if self.factories is None:
                self.current[self.slot] = -1
                raise EnvFailure(self.first + j, "step", error) from error
            info, final = self._restart(j, error)
            self.rewards[r], self.terminated[r], self.truncated[r] = 0.0, False, True
            finals = [(j, final)] if final else []
        self.current[self.slot] = -1  # idle
        return info or {}, finals[0][1] if finals else {}

    def _restart(self, j: int, error: Exception) -> tuple[dict[str, Any], dict[str, Any]]:
        """Rebuild local env ``j`` after ``error`` in its step; its episode ends as truncated,
        under the autoreset rule (``_episode_end``) with its row's last observation.
        Returns (info, final info)."""
        failure = {FAILURE_KEY: _describe(error)}
        self._rebuild(j, "step")
        r = self.row0 + j
        if self.rule != RESET_NOW:
            self._episode_end(j, None, failure, [])
            return failure, {}
        finals: Infos = []
        try:
            obs, info = self._episode_end(j, None, failure, finals)
            self.write_obs(self.obs, r, obs)
            info = check_info(info)
        except Exception as again:
            raise EnvFailure(self.first + j, "reset", again) from again
        return {**info, **failure}, failure

    def _rebuild(self, j: int, phase: str) -> Any:
        """Close local env ``j`` and build it again from its factory."""
        with contextlib.suppress(Exception):
            self.envs[j].close()
        try:
            self.envs[j] = self.factories[j]()
        except Exception as error:
            raise EnvFailure(self.first + j, "make", error) from error
        return self.envs[j]

    def call(self, rows: list[int], name: str | Callable[..., Any], args: tuple,
             kwargs: dict[str, Any]) -> list[Any]:
        """Local envs ``rows``' attribute ``name``, called with the arguments when it is
        callable (Gymnasium's ``SyncVectorEnv.call``, through wrappers); a callable ``name`` is
        called as ``name(env, *args, **kwargs)``."""
        results = []
        for j in rows:
            env = self.envs[j]
            self.current[self.slot] = self.first + j
            try:
                if callable(name):
                    results.append(name(env, *args, **kwargs))
                    continue
                attr = env.get_wrapper_attr(name) if hasattr(env, "get_wrapper_attr") \
                    else getattr(env, name)
                results.append(attr(*args, **kwargs) if callable(attr) else attr)
            except Exception as error:
                self.current[self.slot] = -1
                raise EnvFailure(self.first + j, "call", error) from error
        self.current[self.slot] = -1
        return results

    def set_attr(self, rows: list[int], name: str, values: list[Any]) -> None:
        """Set attribute ``name`` of local env ``rows[k]`` to ``values[k]`` (through
        wrappers)."""
        for j, value in zip(rows, values, strict=True):
            env = self.envs[j]
            try:
                if hasattr(env, "set_wrapper_attr"):
                    env.set_wrapper_attr(name, value)
                else:
                    setattr(env, name, value)
            except Exception as error:
                raise EnvFailure(self.first + j, "set_attr", error) from error

    def _flush(self, rows: slice, rewards: list, terminated: list, truncated: list) -> None:
        self.rewards[rows] = rewards
        self.terminated[rows] = terminated
        self.truncated[rows] = truncated

    def close(self) -> None:
        """Close every env (errors ignored: closing must always finish)."""
        for env in self.envs:
            with contextlib.suppress(Exception):
                env.close()
        self.envs = []


def end_lost_episodes(mode: AutoresetMode, obs: Any, final_obs: Any,
                      arrays: dict[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
    """The autoreset rule (``on_episode_end``) for the envs ``rows`` of a share lost during a
    step, in the parent's batch (``obs``, ``final_obs``: its views of ``arrays``): SAME_STEP
    keeps their last observations as ``final_obs``, returned apart too (the new envs' reset
    answer may carry final_obs rows of its own); the other modes leave the rows as they are
    (NEXT_STEP's new envs reset on their next step: ``EnvGroup.start_fresh``)."""
    if on_episode_end(mode) != RESET_NOW:
        return {}
    copy_row(obs, final_obs, rows)
    return {k: a[rows].copy() for k, a in arrays.items() if k.split(".")[0] == "final_obs"}


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
