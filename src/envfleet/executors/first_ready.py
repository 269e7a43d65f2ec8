"""First-ready async batches (EnvPool's ``send`` / ``recv``), written once for every
transport of ``fleet.ShareFleet`` (``pool``, ``subprocess``, ``ray``).

``send(actions, env_ids)`` checks the ids and actions (nothing moves if anything is refused),
writes the actions into the batch buffers and hands each owner its envs (``_hand``); ``recv()``
waits (``_collect``) until ``batch_size`` envs are ready and returns those that have waited
longest (a FIFO: no env starves), with ``info["env_id"]``. A share whose envs are in flight and
that stays silent for ``step_timeout`` failed (``_check_hung``); a share lost while envs are in
flight (its worker or actor died or hung, and was restarted) ends its envs' episodes as
truncated with ``info["env_failure"]`` (``_async_lost``).

The bookkeeping is kept here: ``_in_flight`` (sent, not reported), ``_ready`` (reported, not
returned yet, in order), ``_ready_infos``, and per share ``_flying`` (envs in flight) and
``_heard`` (when it last reported, or got work while idle). A transport only implements
``_hand`` (send envs to their owner), ``_take_reports`` (wait up to a timeout, take the reports
that came: ``_arrived``) and ``_drop_in_flight`` (forget its requests in flight).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envfleet.contract import end_truncated
from envfleet.executors.actions import check_actions
from envfleet.executors.group import FAILURE_KEY
from envfleet.executors.infos import adder
from envfleet.executors.shared_memory import assign_rows, export, final_obs_info, take_rows


class FirstReady:
    """The ``send`` / ``recv`` front end over a transport's hooks (see the module doc); mixed
    into ``fleet.ShareFleet`` (its shares, ``_owner``: env -> share index, and faults)."""

    #: envs ``recv`` returns at a time (``num_envs``: synchronous, ``step`` works)
    batch_size: int

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
            owners = self._owner[ids]
            for index in np.unique(owners).tolist():
                part = ids[owners == index]
                self._in_flight[part] = True
                if not self._flying[index]:
                    self._heard[index] = time.monotonic()
                self._flying[index] += len(part)
                for e in part.tolist():
                    self._ready.pop(e, None)
                    self._ready_infos.pop(e, None)
                self._hand(self._shares[index], part)

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
        """The async bookkeeping (once the shares are known)."""
        self._in_flight = np.zeros(self.num_envs, dtype=bool)  # sent, not reported yet
        self._ready: dict[int, None] = {}  # finished, not returned by recv yet (oldest first)
        self._ready_infos: dict[int, tuple[dict, dict]] = {}  # their (info, final info)
        self._action_batch_spaces: dict[int, Any] = {}
        # per share: envs in flight, and when it last reported (or got work while idle): a
        # share with envs in flight that stays silent for step_timeout is hung
        self._flying = np.zeros(len(self._shares), dtype=np.int64)
        self._heard = np.zeros(len(self._shares))

    def _clear_async(self, ready: list[int] | None) -> None:
        """Nothing in flight; ``ready`` (in order) waits for ``recv``."""
        self._in_flight[:] = False
        self._flying[:] = 0
        self._ready = dict.fromkeys(ready or ())
        self._ready_infos = {}
        self._drop_in_flight()

    def _arrived(self, ids: int | list[int], reports: Any = (), ready: bool = True) -> None:
        """Envs ``ids`` (of one share) reported (their rows are written): ready for ``recv``,
        after those already waiting; ``reports``: (env, info, final info) of those with infos;
        not ``ready``: they failed (the caller raises their error)."""
        for e, info, final in reports:
            self._ready_infos[e] = (info, final)
        self._in_flight[ids] = False
        one = type(ids) is int
        index = int(self._owner[ids if one else ids[0]])
        self._flying[index] -= 1 if one else len(ids)
        self._heard[index] = time.monotonic()
        if not ready:
            return
        if one:
            self._ready[ids] = None
        else:
            self._ready.update(dict.fromkeys(ids))

    def _collect(self, count: int, phase: str) -> None:
        """Wait until ``count`` more envs have reported (or a fault: raised), failing the
        shares silent for ``step_timeout``."""
        while count > 0:
            count -= self._check_hung(phase)
            if count <= 0:
                break
            since = self._heard[self._flying > 0].min()
            count -= self._take_reports(max(since + self.step_timeout - time.monotonic(), 0.0),
                                        phase)

    def _async_lost(self) -> int:
        """Envs of shares lost (and restarted) in async mode end as truncated and are ready
        for ``recv``; returns how many of them were in flight."""
        a = self.arrays
        recovered = 0
        restarted = dict(self._restart_infos)
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        for index, what in self._lost.items():
            rows = self._shares[index].rows
            end_truncated(a["rewards"], a["terminated"], a["truncated"], rows)
            recovered += int(self._in_flight[rows].sum())
            self._in_flight[rows] = False
            self._flying[index] = 0
            for e in range(rows.start, rows.stop):
                self._ready.pop(e, None)
                self._ready[e] = None
                failure = {FAILURE_KEY: what}
                self._ready_infos[e] = ({**restarted.get(e, {}), **failure},
                                        failure if same_step else {})
        self._lost = {}
        self._restart_infos = []
        return recovered

    def _check_hung(self, phase: str) -> int:
        """Fail the shares that have had envs in flight but said nothing for
        ``step_timeout``; returns how many in-flight envs came back (as truncated) through
        restarts."""
        recovered = 0
        now = time.monotonic()
        for share in list(self._shares):
            if self._flying[share.index] > 0 and \
                    self._heard[share.index] + self.step_timeout <= now:
                self._failed(share, self._silence(), phase)
                recovered += self._async_lost()
        return recovered

    # --- the transport's hooks ------------------------------------------------------------

    def _hand(self, share: Any, ids: np.ndarray) -> None:
        """Send ``share``'s owner its envs ``ids`` to step (their actions are in the
        buffers)."""
        raise NotImplementedError

    def _take_reports(self, timeout: float, phase: str) -> int:
        """Wait up to ``timeout`` s for reports and take those that came (``_arrived``; an
        env's error raised); returns how many envs became ready."""
        raise NotImplementedError

    def _drop_in_flight(self) -> None:
        """Forget the transport's requests in flight (after a reset or a step)."""
