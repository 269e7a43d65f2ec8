"""First-ready async batches (EnvPool's ``send`` / ``recv``), the front end that the ``pool``
and ``ray`` executors share.

``send(actions, env_ids)`` checks the ids and actions (nothing moves if anything is refused),
writes the actions into the batch buffers and hands the envs to their owners
(``_send_to_owners``); ``recv()`` waits (``_collect``) until ``batch_size`` envs are ready and
returns those that have waited longest (a FIFO: no env starves), with ``info["env_id"]``. A
share lost while envs are in flight (its worker or actor died or hung, and was restarted) ends
its envs' episodes as truncated with ``info["env_failure"]`` (``_async_lost``).

An executor using it is a ``fleet.ShareFleet`` (shares, ``_owner``: env -> share index,
faults) that calls ``_init_async`` once started, ``_arrived`` as envs report, and implements
``_send_to_owners``, ``_collect``, ``_busy_since``, ``_drop_in_flight`` and ``_share_lost``;
``_check_hung`` fails the silent shares. It keeps ``_in_flight`` (sent, not reported),
``_ready`` (reported, not returned yet, in order) and ``_ready_infos``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envfleet.executors.actions import check_actions
from envfleet.executors.group import FAILURE_KEY
from envfleet.executors.infos import adder
from envfleet.executors.shared_memory import assign_rows, export, final_obs_info, take_rows


class FirstReady:
    """The ``send`` / ``recv`` front end over an executor's hooks (see the module doc)."""

    def reset(self, *, seed: Any = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """As ``ExecutorVectorEnv.reset``; in async mode envs still stepping are waited for
        first (their results stay queued for ``recv``), and the reset envs then wait for
        actions with their reset observations queued for ``recv`` (EnvPool's async reset)."""
        self._check_usable()
        if self._in_flight.any() and not self._interrupted:  # (else reset drops them)
            self._run(lambda: self._collect(int(self._in_flight.sum()), "reset"), "reset()")
        mask = (options or {}).get("reset_mask")
        result = super().reset(seed=seed, options=options)
        if mask is None or np.asarray(mask).all():
            self._clear_async(list(range(self.num_envs)))
        else:
            ids = np.flatnonzero(np.asarray(mask)).tolist()
            for e in ids:
                self._ready.pop(e, None)
                self._ready_infos.pop(e, None)
            self._ready.update(dict.fromkeys(ids))
        return result

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env (``batch_size == num_envs`` only; async envs use send / recv)."""
        if self.batch_size < self.num_envs:
            raise RuntimeError(
                f"this env is asynchronous (batch_size={self.batch_size} < num_envs="
                f"{self.num_envs}): use send(actions, env_ids) and recv() instead of step()")
        self._check_usable()
        if self._in_flight.any():
            raise RuntimeError(f"{int(self._in_flight.sum())} env(s) sent with send() are still "
                               f"stepping: recv() them before calling step()")
        result = super().step(actions)
        self._clear_async(None)
        return result

    def _check_idle(self, what: str) -> None:
        if self._in_flight.any():
            raise RuntimeError(f"cannot {what} while {int(self._in_flight.sum())} env(s) sent "
                               f"with send() are stepping: recv() them first")

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start stepping envs ``env_ids`` (all envs when None) with ``actions`` (one row per
        id, in that order); returns at once. Each id must be waiting for an action (returned
        by ``reset()`` or ``recv()``, not sent since). Nothing moves if anything is refused."""
        self._check_usable()
        self._check_has_reset("send")
        if env_ids is None:
            ids = np.arange(self.num_envs)
        else:
            raw = np.asarray(env_ids)
            if raw.ndim != 1 or raw.size == 0 or raw.dtype.kind not in "iu":
                raise ValueError(f"env_ids must be a non-empty 1-D array of ints, got "
                                 f"{env_ids!r}")
            ids = raw.astype(np.int64)
        for e in ids.tolist():
            if not 0 <= e < self.num_envs:
                raise ValueError(f"env_ids: no env {e} (num_envs={self.num_envs})")
        if len(np.unique(ids)) != len(ids):
            seen: set[int] = set()
            dup = next(e for e in ids.tolist() if e in seen or seen.add(e))
            raise ValueError(f"env_ids: env {dup} is given more than once")
        busy = ids[self._in_flight[ids]]
        if busy.size:
            raise ValueError(f"env_ids: env {int(busy[0])} is not waiting for an action (it was "
                             f"sent one and has not been returned by recv() yet)")
        k = len(ids)
        batch = self._action_batch_spaces.get(k)
        if batch is None:
            batch = self._action_batch_spaces[k] = batch_space(self.single_action_space, k)
        disabled = self.autoreset_mode is AutoresetMode.DISABLED
        try:
            actions = check_actions(self.single_action_space, batch, actions, k,
                                    self._needs_reset[ids] if disabled else None)
        except ValueError as error:
            raise ValueError(f"{error} (env k of this send is env_ids[k]: "
                             f"env_ids={ids.tolist()})") from None
        assign_rows(self._actions, actions, ids)
        with self._guard("send()"):
            self._send_to_owners(ids)

    def recv(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """The first ``batch_size`` envs to finish (those that have waited longest first):
        (obs, rewards, terminated, truncated, info), with ``info["env_id"]`` their ids."""
        self._check_usable()
        self._check_has_reset("recv")
        self._check_hung("step")
        b = self.batch_size
        missing = b - len(self._ready)
        if missing > 0:
            flying = int(self._in_flight.sum())
            if flying < missing:
                raise RuntimeError(
                    f"recv() needs batch_size={b} envs but only {len(self._ready)} are ready "
                    f"and {flying} are stepping: send() actions to more envs first")
            self._run(lambda: self._collect(missing, "step"), "recv()")
        ready = iter(self._ready)
        ids_list = [next(ready) for _ in range(b)]
        for e in ids_list:
            del self._ready[e]
        ids = np.array(ids_list, dtype=np.int64)
        a = self.arrays
        obs = export(take_rows(self._obs, ids), copy=False)  # (fresh rows already)
        rewards, terminated, truncated = a["rewards"][ids], a["terminated"][ids], \
            a["truncated"][ids]
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._needs_reset[ids] = terminated | truncated
        view = adder(b)
        infos: dict[str, Any] = {}
        ended = terminated | truncated
        if self.autoreset_mode is AutoresetMode.SAME_STEP and ended.any():
            final_info: dict[str, Any] = {}
            for k, e in enumerate(ids_list):
                final = self._ready_infos.get(e, ({}, {}))[1]
                if final:
                    final_info = view._add_info(final_info, final, k)
            self._add_final(infos, final_obs_info(self.single_observation_space,
                                                  take_rows(self._final_obs, ids), ended),
                            ended, final_info, own_mask=True)
        for k, e in enumerate(ids_list):
            info = self._ready_infos.pop(e, ({}, {}))[0]
            if info:
                infos = view._add_info(infos, info, k)
        infos["env_id"] = ids
        return obs, rewards, terminated, truncated, infos

    def _init_async(self) -> None:
        """The async bookkeeping (a transport adds its own)."""
        self._in_flight = np.zeros(self.num_envs, dtype=bool)  # sent, not reported yet
        self._ready: dict[int, None] = {}  # finished, not returned by recv yet (oldest first)
        self._ready_infos: dict[int, tuple[dict, dict]] = {}  # their (info, final info)
        self._action_batch_spaces: dict[int, Any] = {}

    def _clear_async(self, ready: list[int] | None) -> None:
        """Nothing in flight; ``ready`` (in order) waits for ``recv``."""
        self._in_flight[:] = False
        self._ready = dict.fromkeys(ready or ())
        self._ready_infos = {}
        self._drop_in_flight()

    def _arrived(self, ids: int | list[int], reports: Any = ()) -> None:
        """Envs ``ids`` reported (their rows are written): ready for ``recv``, after those
        already waiting; ``reports``: (env, info, final info) of those with infos."""
        for e, info, final in reports:
            self._ready_infos[e] = (info, final)
        self._in_flight[ids] = False
        if type(ids) is int:
            self._ready[ids] = None
        else:
            self._ready.update(dict.fromkeys(ids))

    def _async_lost(self) -> int:
        """Envs of workers lost (and restarted) in async mode end as truncated and are ready
        for ``recv``; returns how many of them were in flight."""
        a = self.arrays
        recovered = 0
        restarted = dict(self._restart_infos)
        for index, what in self._lost.items():
            rows = self._share_rows(index)
            a["rewards"][rows] = 0.0
            a["terminated"][rows] = False
            a["truncated"][rows] = True
            recovered += int(self._in_flight[rows].sum())
            self._in_flight[rows] = False
            self._share_lost(index)
            same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
            for e in range(rows.start, rows.stop):
                self._ready.pop(e, None)
                self._ready[e] = None
                failure = {FAILURE_KEY: what}
                self._ready_infos[e] = ({**restarted.get(e, {}), **failure},
                                        failure if same_step else {})
        self._lost = {}
        self._restart_infos = []
        return recovered

    def _drop_in_flight(self) -> None:
        """Forget the transport's requests in flight (after a reset or a step)."""
        raise NotImplementedError

    def _send_to_owners(self, ids: np.ndarray) -> None:
        """Hand the envs ``ids`` (their actions are in the buffers) to their owners."""
        raise NotImplementedError

    def _collect(self, count: int, phase: str) -> None:
        """Wait until ``count`` more envs have reported (or a fault: raised)."""
        raise NotImplementedError

    def _check_hung(self, phase: str) -> int:
        """Fail the shares that have had envs in flight but said nothing for
        ``step_timeout``; returns how many in-flight envs came back (as truncated) through
        restarts."""
        recovered = 0
        now = time.monotonic()
        for share in list(self._shares):
            since = self._busy_since(share.index)
            if since is not None and since + self.step_timeout <= now:
                self._failed(share, f"did not answer within step_timeout="
                                    f"{self.step_timeout:g} s", phase)
                recovered += self._async_lost()
        return recovered

    def _busy_since(self, index: int) -> float | None:
        """When share ``index`` last reported (or got work while idle), if it has envs in
        flight; None when it has none."""
        raise NotImplementedError

    def _share_lost(self, index: int) -> None:
        """Forget share ``index``'s in-flight bookkeeping (it was lost and restarted)."""
