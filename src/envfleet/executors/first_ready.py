"""First-ready async batches (EnvPool's ``send`` / ``recv``): ``FirstReady``, the queue that
``fleet.ShareFleet`` owns, written once for every transport (``pool``, ``subprocess``, ``ray``).

``send(actions, env_ids)`` checks the ids and actions (nothing moves if anything is refused),
writes the actions into the batch buffers and has the transport hand each owner its envs
(``Transport.hand``); ``recv()`` waits (``collect``) until ``batch_size`` envs are ready and
returns those that have waited longest (a FIFO: no env starves), with ``info["env_id"]``. A
share whose envs are in flight and that stays silent for ``step_timeout`` failed
(``check_hung``); a share lost while envs are in flight (its worker or actor died or hung, and
was restarted) ends its envs' episodes as truncated with ``info["env_failure"]``
(``end_lost``).

The bookkeeping is kept here: ``in_flight`` (sent, not reported), ``ready`` (reported, not
returned yet, in order), ``ready_infos``, and per share ``flying`` (envs in flight) and
``heard`` (when it last reported, or got work while idle). A transport hands envs to their
owner (``hand``), takes the reports that came (``take_reports``: each through ``arrived``)
and forgets its requests in flight (``drop_in_flight``).
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envfleet.contract import end_truncated
from envfleet.executors.actions import check_actions
from envfleet.executors.group import FAILURE_KEY
from envfleet.executors.infos import adder
from envfleet.executors.shared_memory import assign_rows, export, final_obs_info, take_rows

if TYPE_CHECKING:
    from envfleet.executors.transport import Transport


class FirstReady:
    """The ``send`` / ``recv`` queue of ``fleet`` (the ``fleet.ShareFleet`` that owns it, not
    imported here: it imports this module; its shares, ``owner``: env -> share index, and
    faults) over its ``transport`` (see the module doc)."""

    def __init__(self, fleet: Any, transport: Transport) -> None:
        self.fleet = weakref.proxy(fleet)  # (the fleet owns this queue: no cycle)
        self.transport = transport
        self.batch_size = fleet.batch_size  # envs recv returns at a time
        self.in_flight = np.zeros(fleet.num_envs, dtype=bool)  # sent, not reported yet
        self.ready: dict[int, None] = {}  # finished, not returned by recv yet (oldest first)
        self.ready_infos: dict[int, tuple[dict, dict]] = {}  # their (info, final info)
        self._action_batch_spaces: dict[int, Any] = {}
        # per share: envs in flight, and when it last reported (or got work while idle): a
        # share with envs in flight that stays silent for step_timeout is hung
        self.flying = np.zeros(len(fleet.shares), dtype=np.int64)
        self.heard = np.zeros(len(fleet.shares))

    def after_reset(self, mask: Any) -> None:
        """The reset envs (``mask``: reset_mask, None: all) wait for actions, their reset
        observations queued for ``recv``."""
        if mask is None or np.asarray(mask).all():
            self.clear(list(range(len(self.in_flight))))
            return
        ids = np.flatnonzero(np.asarray(mask)).tolist()
        for e in ids:
            self.ready.pop(e, None)
            self.ready_infos.pop(e, None)
        self.ready.update(dict.fromkeys(ids))

    def check_idle(self, what: str) -> None:
        """Refuse ``what`` (a call, a set) while envs sent with ``send`` are stepping."""
        if self.in_flight.any():
            raise RuntimeError(f"cannot {what} while {int(self.in_flight.sum())} env(s) sent "
                               f"with send() are stepping: recv() them first")

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """``ShareFleet.send``: check, write the actions, hand the envs to their owners."""
        fleet = self.fleet
        fleet._check_usable()
        fleet._check_has_reset("send")
        num_envs = len(self.in_flight)
        if env_ids is None:
            ids = np.arange(num_envs)
        else:
            raw = np.asarray(env_ids)
            if raw.ndim != 1 or raw.size == 0 or raw.dtype.kind not in "iu":
                raise ValueError(f"env_ids must be a non-empty 1-D array of ints, got "
                                 f"{env_ids!r}")
            ids = raw.astype(np.int64)
        for e in ids.tolist():
            if not 0 <= e < num_envs:
                raise ValueError(f"env_ids: no env {e} (num_envs={num_envs})")
        if len(np.unique(ids)) != len(ids):
            seen: set[int] = set()
            dup = next(e for e in ids.tolist() if e in seen or seen.add(e))
            raise ValueError(f"env_ids: env {dup} is given more than once")
        busy = ids[self.in_flight[ids]]
        if busy.size:
            raise ValueError(f"env_ids: env {int(busy[0])} is not waiting for an action (it was "
                             f"sent one and has not been returned by recv() yet)")
        k = len(ids)
        batch = self._action_batch_spaces.get(k)
        if batch is None:
            batch = self._action_batch_spaces[k] = batch_space(fleet.single_action_space, k)
        disabled = fleet.autoreset_mode is AutoresetMode.DISABLED
        try:
            actions = check_actions(fleet.single_action_space, batch, actions, k,
                                    fleet._needs_reset[ids] if disabled else None)
        except ValueError as error:
            raise ValueError(f"{error} (env k of this send is env_ids[k]: "
                             f"env_ids={ids.tolist()})") from None
        assign_rows(fleet._actions, actions, ids)
        with fleet._guard("send()"):
            owners = fleet.owner[ids]
            for index in np.unique(owners).tolist():
                part = ids[owners == index]
                self.in_flight[part] = True
                if not self.flying[index]:
                    self.heard[index] = time.monotonic()
                self.flying[index] += len(part)
                for e in part.tolist():
                    self.ready.pop(e, None)
                    self.ready_infos.pop(e, None)
                self.transport.hand(fleet.shares[index], part)

    def recv(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """``ShareFleet.recv``: the first ``batch_size`` envs to finish, oldest first."""
        fleet = self.fleet
        fleet._check_usable()
        fleet._check_has_reset("recv")
        self.check_hung("step")
        b = self.batch_size
        missing = b - len(self.ready)
        if missing > 0:
            flying = int(self.in_flight.sum())
            if flying < missing:
                raise RuntimeError(
                    f"recv() needs batch_size={b} envs but only {len(self.ready)} are ready "
                    f"and {flying} are stepping: send() actions to more envs first")
            fleet._run(lambda: self.collect(missing, "step"), "recv()")
        ready = iter(self.ready)
        ids_list = [next(ready) for _ in range(b)]
        for e in ids_list:
            del self.ready[e]
        ids = np.array(ids_list, dtype=np.int64)
        a = fleet.arrays
        obs = export(take_rows(fleet._obs, ids), copy=False)  # (fresh rows already)
        rewards, terminated, truncated = a["rewards"][ids], a["terminated"][ids], \
            a["truncated"][ids]
        if fleet.autoreset_mode is AutoresetMode.DISABLED:
            fleet._needs_reset[ids] = terminated | truncated
        view = adder(b)
        infos: dict[str, Any] = {}
        ended = terminated | truncated
        if fleet.autoreset_mode is AutoresetMode.SAME_STEP and ended.any():
            final_info: dict[str, Any] = {}
            for k, e in enumerate(ids_list):
                final = self.ready_infos.get(e, ({}, {}))[1]
                if final:
                    final_info = view._add_info(final_info, final, k)
            fleet._add_final(infos, final_obs_info(fleet.single_observation_space,
                                                   take_rows(fleet._final_obs, ids), ended),
                             ended, final_info, own_mask=True)
        for k, e in enumerate(ids_list):
            info = self.ready_infos.pop(e, ({}, {}))[0]
            if info:
                infos = view._add_info(infos, info, k)
        infos["env_id"] = ids
        return obs, rewards, terminated, truncated, infos

    def clear(self, ready: list[int] | None) -> None:
        """Nothing in flight; ``ready`` (in order) waits for ``recv``."""
        self.in_flight[:] = False
        self.flying[:] = 0
        self.ready = dict.fromkeys(ready or ())
        self.ready_infos = {}
        self.transport.drop_in_flight()

    def arrived(self, ids: int | list[int], reports: Any = (), ready: bool = True) -> None:
        """Envs ``ids`` (of one share) reported (their rows are written): ready for ``recv``,
        after those already waiting; ``reports``: (env, info, final info) of those with infos;
        not ``ready``: they failed (the caller raises their error)."""
        for e, info, final in reports:
            self.ready_infos[e] = (info, final)
        self.in_flight[ids] = False
        one = type(ids) is int
        index = int(self.fleet.owner[ids if one else ids[0]])
        self.flying[index] -= 1 if one else len(ids)
        self.heard[index] = time.monotonic()
        if not ready:
            return
        if one:
            self.ready[ids] = None
        else:
            self.ready.update(dict.fromkeys(ids))

    def collect(self, count: int, phase: str) -> None:
        """Wait until ``count`` more envs have reported (or a fault: raised), failing the
        shares silent for ``step_timeout``."""
        step_timeout = self.fleet.step_timeout
        while count > 0:
            count -= self.check_hung(phase)
            if count <= 0:
                break
            since = self.heard[self.flying > 0].min()
            count -= self.transport.take_reports(
                max(since + step_timeout - time.monotonic(), 0.0), phase)

    def end_lost(self) -> int:
        """Envs of shares lost (and restarted) in async mode end as truncated and are ready
        for ``recv``; returns how many of them were in flight."""
        fleet = self.fleet
        a = fleet.arrays
        recovered = 0
        restarted = dict(fleet.restart_infos)
        same_step = fleet.autoreset_mode is AutoresetMode.SAME_STEP
        for index, what in fleet.lost.items():
            rows = fleet.shares[index].rows
            end_truncated(a["rewards"], a["terminated"], a["truncated"], rows)
            recovered += int(self.in_flight[rows].sum())
            self.in_flight[rows] = False
            self.flying[index] = 0
            for e in range(rows.start, rows.stop):
                self.ready.pop(e, None)
                self.ready[e] = None
                failure = {FAILURE_KEY: what}
                self.ready_infos[e] = ({**restarted.get(e, {}), **failure},
                                       failure if same_step else {})
        fleet.lost = {}
        fleet.restart_infos = []
        return recovered

    def check_hung(self, phase: str) -> int:
        """Fail the shares that have had envs in flight but said nothing for
        ``step_timeout``; returns how many in-flight envs came back (as truncated) through
        restarts."""
        fleet = self.fleet
        recovered = 0
        now = time.monotonic()
        for share in list(fleet.shares):
            if self.flying[share.index] > 0 and \
                    self.heard[share.index] + fleet.step_timeout <= now:
                fleet.failed(share, fleet.silence(), phase)
                recovered += self.end_lost()
        return recovered
