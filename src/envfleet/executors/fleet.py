"""``ShareFleet``: the executor that worker processes (``pool``, ``subprocess``) and Ray actors
(``ray``) share: envs in shares of contiguous indices, each share run by one remote owner over
a ``transport.Transport`` (spawn, send, gather, stop, replace, shutdown), every fault handled
here, once, and first-ready batching (``first_ready.FirstReady``, an object the fleet owns:
``send`` / ``recv`` with ``batch_size < num_envs``) for every transport.

Which ``step`` runs: ``ExecutorVectorEnv.step`` (base.py: the contract) calls ``_step_envs``
here, which asks the transport to ``step`` its shares (``pool.SharedMemoryTransport``,
``subprocess.PipeTransport``, ``ray.RayTransport``) and ends the lost shares' episodes.

Faults: an owner that dies or stays silent is reported by its transport through ``failed``.
Without ``restart_failed`` (or outside a step or reset) that is fatal: everything is shut down
and an ``EnvWorkerError`` names the owner, what happened and the env it was running (blame by
env index). With ``restart_failed`` the owner is built again over new envs (``_restart``): its
envs' episodes end as truncated with ``info["env_failure"]``, under the executors' one
autoreset rule (``contract.on_episode_end``: NEXT_STEP resets them on their next step,
SAME_STEP resets them now and keeps their last observations as ``final_obs``, DISABLED leaves
them to ``reset_mask``), and the other shares step on. A share lost during a reset is reset
again, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.contract import end_truncated
from envfleet.executors.base import (
    EnvWorkerError,
    ExecutorVectorEnv,
    RemoteTraceback,
    failure_error,
)
from envfleet.executors.first_ready import FirstReady
from envfleet.executors.group import FAILURE_KEY, Infos, end_lost_episodes
from envfleet.executors.infos import InfoParts, entries
from envfleet.executors.transport import Share, Transport

#: start-up (building the envs) may take longer than a step: at least this many seconds
MIN_START_TIMEOUT = 60.0


def split(num_envs: int, num_shares: int) -> list[tuple[int, int]]:
    """Contiguous shares ``[start, stop)``, sizes differing by one at most."""
    base, extra = divmod(num_envs, num_shares)
    shares, start = [], 0
    for w in range(num_shares):
        stop = start + base + (w < extra)
        shares.append((start, stop))
        start = stop
    return shares


def check_count(name: str, value: Any, low: int = 1) -> int:
    """An int option (``num_workers``...) of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def check_timeout(step_timeout: Any) -> float:
    """``step_timeout``: a number of seconds > 0."""
    if not (isinstance(step_timeout, int | float) and step_timeout > 0):
        raise ValueError(f"step_timeout must be a number of seconds > 0, got {step_timeout!r}")
    return float(step_timeout)


def check_number(name: str, value: Any, unit: str = "") -> float:
    """A real option (``num_cpus``, ``spin_us``...) of at least 0 (``unit``: " of seconds")."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name} must be a number{unit} >= 0, got {value!r}")
    return float(value)


def check_batch_size(batch_size: Any, num_envs: int) -> int:
    """``batch_size`` (first-ready: envs per ``recv``): None (``num_envs``, synchronous) or an
    int with 1 <= batch_size <= num_envs."""
    if batch_size is None:
        return num_envs
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) \
            or not 1 <= batch_size <= num_envs:
        raise ValueError(f"batch_size must be an int with 1 <= batch_size <= num_envs="
                         f"{num_envs}, got {batch_size!r}")
    return int(batch_size)


class ShareFleet(ExecutorVectorEnv):
    """N envs in shares run by remote owners over ``transport``: the shares, their owners'
    faults and restarts, and the first-ready queue (``first_ready``)."""

    def __init__(self, transport: Transport, num_envs: int, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True, step_timeout: float,
                 restart_failed: bool = False, batch_size: int | None = None) -> None:
        """Check the options, then start the owners (``transport.start``)."""
        super().__init__(num_envs, autoreset_mode=autoreset_mode, seed=seed, copy=copy)
        self.batch_size = check_batch_size(batch_size, num_envs)
        self.step_timeout = check_timeout(step_timeout)
        self.restart_failed = bool(restart_failed)
        self.lost: dict[int, str] = {}  # this batch's lost shares: index -> what happened
        self.restart_infos: Infos = []  # the infos of their new envs (SAME_STEP: reset)
        self.transport = transport
        try:
            self.shares = transport.start(self)
        except BaseException:
            transport.shutdown()
            raise
        self.num_workers = len(self.shares)
        self.owner = np.empty(self.num_envs, dtype=np.int64)  # env -> share index
        for s in self.shares:
            self.owner[s.start:s.stop] = s.index
        self.first_ready = FirstReady(self, transport)

    # --- the Gymnasium API, with the first-ready queue ------------------------------------

    def reset(self, *, seed: Any = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """As ``ExecutorVectorEnv.reset``; in async mode envs still stepping are waited for
        first (their results stay queued for ``recv``), and the reset envs then wait for
        actions with their reset observations queued for ``recv`` (EnvPool's async reset)."""
        self._check_usable()
        queue = self.first_ready
        if queue.in_flight.any() and not self._interrupted:  # (else reset drops them)
            self._run(lambda: queue.collect(int(queue.in_flight.sum()), "reset"), "reset()")
        mask = (options or {}).get("reset_mask")
        result = super().reset(seed=seed, options=options)
        queue.after_reset(mask)
        return result

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env (``batch_size == num_envs`` only; async envs use send / recv)."""
        if self.batch_size < self.num_envs:
            raise RuntimeError(
                f"this env is asynchronous (batch_size={self.batch_size} < num_envs="
                f"{self.num_envs}): use send(actions, env_ids) and recv() instead of step()")
        self._check_usable()
        in_flight = int(self.first_ready.in_flight.sum())
        if in_flight:
            raise RuntimeError(f"{in_flight} env(s) sent with send() are still stepping: "
                               f"recv() them before calling step()")
        result = super().step(actions)
        self.first_ready.clear(None)
        return result

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start stepping envs ``env_ids`` (all envs when None) with ``actions`` (one row per
        id, in that order); returns at once. Each id must be waiting for an action (returned
        by ``reset()`` or ``recv()``, not sent since). Nothing moves if anything is refused."""
        self.first_ready.send(actions, env_ids)

    def recv(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """The first ``batch_size`` envs to finish (those that have waited longest first):
        (obs, rewards, terminated, truncated, info), with ``info["env_id"]`` their ids."""
        return self.first_ready.recv()

    # --- ExecutorVectorEnv's hooks, over the transport ----------------------------------

    def _begin_batch(self) -> None:
        self.lost = {}
        self.restart_infos = []
        self.transport.begin_batch()

    def _reset_envs(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                    options: dict[str, Any] | None) -> InfoParts:
        self._begin_batch()
        infos = self.transport.reset(mask, seeds, options)
        if not self.lost:
            return infos
        lost = dict(self.lost)  # restarted owners: reset their new envs (once)
        only = np.zeros(self.num_envs, dtype=bool)
        for index in lost:
            rows = self.shares[index].rows
            only[rows] = True if mask is None else mask[rows]
        self._begin_batch()
        again = self.transport.reset(only, seeds, options)
        if self.lost:
            index = next(iter(self.lost))
            self.fatal(self.shares[index], f"was lost again while its envs were reset after "
                                           f"a restart ({self.lost[index]})", "reset")
        kept = [(i, info) for i, info in entries(infos) if not only[i]]
        return InfoParts([(None, kept + entries(again) + self._failure_infos(lost))])

    def _step_envs(self) -> tuple[InfoParts, InfoParts]:
        self._begin_batch()
        infos, finals = self.transport.step()
        if self.lost:  # their envs' episodes end here, truncated
            a = self.arrays
            for index in self.lost:
                end_truncated(a["rewards"], a["terminated"], a["truncated"],
                              self.shares[index].rows)
            failures = self._failure_infos(self.lost)
            infos.append((None, self.restart_infos + failures))
            if self.autoreset_mode is AutoresetMode.SAME_STEP:
                finals.append((None, failures))
        return infos, finals

    def _call_envs(self, rows: list[int], name: Any, args: tuple,
                   kwargs: dict[str, Any]) -> list[Any]:
        self.first_ready.check_idle(f"call {name!r}")
        results = self.transport.call(self._owners(rows), name, args, kwargs)
        found = {index: iter(values) for index, values in results.items()}
        return [next(found[int(self.owner[i])]) for i in rows]

    def _set_attr_envs(self, rows: list[int], name: str, values: list[Any]) -> None:
        self.first_ready.check_idle(f"set {name!r}")
        mine: dict[int, list[Any]] = {}
        for i, value in zip(rows, values, strict=True):
            mine.setdefault(int(self.owner[i]), []).append(value)
        self.transport.set_attr(self._owners(rows), name, mine)

    def _resync(self) -> None:
        self._begin_batch()  # (a late wake-up of the interrupted batch is ignored by number)
        self.transport.resync()

    def _close_executor(self) -> None:
        self.transport.shutdown()

    # --- faults, reported by the transport -------------------------------------------------

    def silence(self) -> str:
        """What an owner that did not answer in time did wrong."""
        return f"did not answer within step_timeout={self.step_timeout:g} s"

    def failed(self, share: Share, what: str, phase: str, tb: str | None = None) -> None:
        """``share``'s owner died or hung in ``phase``: restart it (``restart_failed``, in the
        transport's ``restart_phases``), or shut everything down and raise (``fatal``; ``tb``:
        the remote text of why, if any)."""
        if not (self.restart_failed and phase in self.transport.restart_phases):
            self.fatal(share, what, phase, tb)
        if phase == "step" and self.batch_size < self.num_envs and \
                self.transport.restart_later(share, what):
            return
        self._restart(share, what, phase)

    def blame(self, share: Share, what: str, phase: str) -> tuple[str, int | None]:
        """(The message naming the owner, what happened and the env it was running; the env
        blamed: that one, else the share's only env)."""
        env = self.transport.env_of(share, phase)
        on = f" while running env {env}'s {phase}()" if env is not None else \
            f" during {phase}()"
        if env is None and share.stop - share.start == 1:
            env = share.start
        return f"{share.describe()} {what}{on}", env

    def fatal(self, share: Share, what: str, phase: str, tb: str | None = None) -> NoReturn:
        """Shut everything down and raise ``EnvWorkerError`` naming the env and, as
        ``env_indices``, every env of the share (``tb``: the remote text, chained as cause)."""
        self.transport.stop(share)
        message, env = self.blame(share, what, phase)
        self._broken = message
        self.transport.shutdown()
        error = EnvWorkerError(message, env_index=env, worker_traceback=tb,
                               env_indices=range(share.start, share.stop))
        if tb is not None:
            raise error from RemoteTraceback(tb)
        raise error

    def break_down(self, why: str) -> None:
        """The executor cannot run any more (``why``): shut everything down."""
        self._broken = why
        self.transport.shutdown()

    def raise_first(self, failures: list[tuple]) -> None:
        """Raise the env failure (``EnvFailure.as_tuple()``) of the lowest env index, if any;
        an env that could not be built leaves the executor broken (shut down)."""
        if failures:
            index, what, error_type, text, tb = min(failures)
            if what == "make":
                self.break_down(f"env {index} could not be built")
            raise failure_error(index, what, error_type, text, tb)

    def _restart(self, share: Share, what: str, phase: str) -> None:
        """Replace lost ``share``'s owner by a new one over new envs (same rows): during a
        step they start under the autoreset rule (``renew``); during a reset the caller resets
        them again."""
        self.transport.stop(share)
        self.renew(share, what, phase,
                   lambda: self.transport.replace(share, phase == "step", what, phase))

    def renew(self, share: Share, what: str, phase: str, start: Callable[[], Infos]) -> None:
        """Lost ``share`` (``what`` happened in ``phase``) gets new envs: ``start`` (the
        transport's) starts its new owner and returns the new envs' infos. During a step the
        lost envs' episodes end under the autoreset rule, applied by the env group's module
        (``group.end_lost_episodes``: SAME_STEP keeps their last observations as
        ``final_obs``; the new envs' own start is ``EnvGroup.start_fresh``)."""
        message = self.blame(share, what, phase)[0].removesuffix(f" during {phase}()")
        self.lost[share.index] = message
        kept = end_lost_episodes(self.autoreset_mode, self._obs, self._final_obs, self.arrays,
                                 share.rows) if phase == "step" else {}
        self.restart_infos += start()
        for k, value in kept.items():  # (the new owner's answer may carry final_obs rows)
            self.arrays[k][share.rows] = value
        self.lost[share.index] = f"{message}; it was restarted" \
                                 f"{self.transport.restarted_where(share)}"

    def _failure_infos(self, lost: dict[int, str]) -> Infos:
        """``info["env_failure"]`` for every env of the ``lost`` shares."""
        return [(i, {FAILURE_KEY: what}) for index, what in lost.items()
                for i in range(self.shares[index].start, self.shares[index].stop)]

    def _owners(self, rows: list[int]) -> dict[int, list[int]]:
        """Share index -> its local rows among envs ``rows`` (in ``rows``' order)."""
        owners: dict[int, list[int]] = {}
        for i in rows:
            s = self.shares[int(self.owner[i])]
            owners.setdefault(s.index, []).append(i - s.start)
        return dict(sorted(owners.items()))
