"""``ShareFleet``: the executor core that worker processes (``pool``, ``subprocess``) and Ray
actors (``ray``) share: envs in shares of contiguous indices, each share run by one remote
owner, every fault handled here, once, and first-ready batching (``first_ready.FirstReady``:
``send`` / ``recv`` with ``batch_size < num_envs``) for every transport.

A transport (``processes.ProcessVectorEnv``, ``ray.RayVectorEnv``) only moves data: it starts
an owner (``_replace``), sends it work and gathers the answers (``_reset_shares``,
``_step_shares``, ``_call_shares``, ``_set_attr_shares``), stops one (``_stop``, ``_kill``) and
closes them all (``_shutdown``); for first-ready batches it hands envs to their owner
(``_hand``) and takes the reports that come (``_take_reports``). Its answers come back as
``InfoParts`` (``executors.infos``): one merge for every transport.

Faults: an owner that dies or stays silent is reported through ``_failed``. Without
``restart_failed`` (or outside a step or reset) that is fatal: everything is shut down and an
``EnvWorkerError`` names the owner, what happened and the env it was running (``_env_of``:
blame by env index). With ``restart_failed`` the owner is built again over new envs
(``_restart``): its envs' episodes end as truncated with ``info["env_failure"]``, under the
executors' one autoreset rule (``contract.on_episode_end``: NEXT_STEP resets them on their next
step, SAME_STEP resets them now and keeps their last observations as ``final_obs``, DISABLED
leaves them to ``reset_mask``), and the other shares step on. A share lost during a reset is
reset again, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.contract import RESET_NOW, end_truncated, on_episode_end
from envfleet.executors.base import (
    EnvWorkerError,
    ExecutorVectorEnv,
    RemoteTraceback,
    failure_error,
)
from envfleet.executors.first_ready import FirstReady
from envfleet.executors.group import FAILURE_KEY, Infos
from envfleet.executors.infos import InfoParts, entries
from envfleet.executors.shared_memory import copy_row

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


@dataclass
class Share:
    """Envs ``start .. stop - 1``, run by owner ``index`` (a worker process, a Ray actor)."""

    index: int
    start: int
    stop: int

    @property
    def rows(self) -> slice:
        return slice(self.start, self.stop)

    def envs(self) -> str:
        """"env 3" or "envs 0..3"."""
        return f"env {self.start}" if self.stop - self.start == 1 else \
            f"envs {self.start}..{self.stop - 1}"

    def describe(self) -> str:
        return f"share {self.index} ({self.envs()})"


class ShareFleet(FirstReady, ExecutorVectorEnv):
    """The shares, their owners' faults and restarts, first-ready batches; a transport
    subclass moves the data."""

    #: the phases in which a lost owner is restarted (``restart_failed``); in any other it is
    #: fatal
    restart_phases: tuple[str, ...] = ("step", "reset")
    restart_failed: bool = False
    step_timeout: float

    def _init_shares(self, shares: list[Share]) -> None:
        """Record the shares (in env order) and which share owns each env."""
        self._shares = shares
        self._owner = np.empty(self.num_envs, dtype=np.int64)  # env -> share index
        for s in shares:
            self._owner[s.start:s.stop] = s.index
        self._lost: dict[int, str] = {}  # this batch's lost shares: index -> what happened
        self._restart_infos: Infos = []  # the infos of their new envs (SAME_STEP: reset)
        self._init_async()

    # --- transport hooks ------------------------------------------------------------------

    def _reset_shares(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                      options: dict[str, Any] | None) -> InfoParts:
        """Reset the masked envs (their shares only); lost shares are skipped."""
        raise NotImplementedError

    def _step_shares(self) -> tuple[InfoParts, InfoParts]:
        """Step every share with the actions in the buffers; (infos, final infos)."""
        raise NotImplementedError

    def _call_shares(self, owners: dict[int, list[int]], name: Any, args: tuple,
                     kwargs: dict[str, Any]) -> dict[int, list[Any]]:
        """Share index -> the results of ``name`` on its local rows ``owners[index]``."""
        raise NotImplementedError

    def _set_attr_shares(self, owners: dict[int, list[int]], name: str,
                         values: dict[int, list[Any]]) -> None:
        """Set ``name`` on each share's local rows ``owners[index]`` to ``values[index]``."""
        raise NotImplementedError

    def _stop(self, share: Share) -> None:
        """Kill ``share``'s owner at once (it is lost: nothing it holds is needed)."""
        raise NotImplementedError

    def _replace(self, share: Share, fresh: bool, what: str, phase: str) -> Infos:
        """Start a new owner for ``share`` over new envs (the old one is stopped and
        forgotten); ``fresh``: its envs replace envs whose episodes ended, and start under the
        autoreset rule (``EnvGroup.start_fresh``); returns their infos. ``what`` and ``phase``
        name the loss, for ``_fatal`` when the new owner cannot start."""
        raise NotImplementedError

    def _restart_later(self, share: Share, what: str) -> bool:
        """First-ready steps: start ``share``'s new owner without waiting for it, if the
        transport can (True: its envs stay in flight until it answers, then end as
        ``_restart`` ends them); False: ``_restart`` now."""
        return False

    def _silence(self) -> str:
        """What an owner that did not answer in time did wrong."""
        return f"did not answer within step_timeout={self.step_timeout:g} s"

    def _restarted_where(self, share: Share) -> str:
        """Where ``share``'s new owner runs, for the failure info (" as pid 7")."""
        return ""

    def _shutdown(self) -> None:
        """Stop every owner and release every resource (idempotent)."""
        raise NotImplementedError

    # --- the executor hooks, once for every transport --------------------------------------

    def _begin_batch(self) -> None:
        self._lost = {}
        self._restart_infos = []

    def _reset_envs(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                    options: dict[str, Any] | None) -> InfoParts:
        self._begin_batch()
        infos = self._reset_shares(mask, seeds, options)
        if not self._lost:
            return infos
        lost = dict(self._lost)  # restarted owners: reset their new envs (once)
        only = np.zeros(self.num_envs, dtype=bool)
        for index in lost:
            rows = self._shares[index].rows
            only[rows] = True if mask is None else mask[rows]
        self._begin_batch()
        again = self._reset_shares(only, seeds, options)
        if self._lost:
            index = next(iter(self._lost))
            self._fatal(self._shares[index], f"was lost again while its envs were reset after "
                                             f"a restart ({self._lost[index]})", "reset")
        kept = [(i, info) for i, info in entries(infos) if not only[i]]
        return InfoParts([(None, kept + entries(again) + self._failure_infos(lost))])

    def _step_envs(self) -> tuple[InfoParts, InfoParts]:
        self._begin_batch()
        infos, finals = self._step_shares()
        if self._lost:  # their envs' episodes end here, truncated
            a = self.arrays
            for index in self._lost:
                end_truncated(a["rewards"], a["terminated"], a["truncated"],
                              self._shares[index].rows)
            failures = self._failure_infos(self._lost)
            infos.append((None, self._restart_infos + failures))
            if self.autoreset_mode is AutoresetMode.SAME_STEP:
                finals.append((None, failures))
        return infos, finals

    def _call_envs(self, rows: list[int], name: Any, args: tuple,
                   kwargs: dict[str, Any]) -> list[Any]:
        self._check_idle(f"call {name!r}")
        results = self._call_shares(self._owners(rows), name, args, kwargs)
        found = {index: iter(values) for index, values in results.items()}
        return [next(found[int(self._owner[i])]) for i in rows]

    def _set_attr_envs(self, rows: list[int], name: str, values: list[Any]) -> None:
        self._check_idle(f"set {name!r}")
        mine: dict[int, list[Any]] = {}
        for i, value in zip(rows, values, strict=True):
            mine.setdefault(int(self._owner[i]), []).append(value)
        self._set_attr_shares(self._owners(rows), name, mine)

    def _close_executor(self) -> None:
        self._shutdown()

    # --- faults ------------------------------------------------------------------------------

    def _failed(self, share: Share, what: str, phase: str, tb: str | None = None) -> None:
        """``share``'s owner died or hung in ``phase``: restart it (``restart_failed``, in
        ``restart_phases``), or shut everything down and raise (``_fatal``; ``tb``: the
        remote text of why, if any)."""
        if not (self.restart_failed and phase in self.restart_phases):
            self._fatal(share, what, phase, tb)
        if phase == "step" and self.batch_size < self.num_envs and \
                self._restart_later(share, what):
            return
        self._restart(share, what, phase)

    def _env_of(self, share: Share, phase: str) -> int | None:
        """The env ``share``'s owner was running (None when unknown): its one env, unless the
        transport knows better."""
        return share.start if share.stop - share.start == 1 else None

    def _blame(self, share: Share, what: str, phase: str) -> tuple[str, int | None]:
        """(The message naming the owner, what happened and the env it was running; the env
        blamed: that one, else the share's only env)."""
        env = self._env_of(share, phase)
        on = f" while running env {env}'s {phase}()" if env is not None else \
            f" during {phase}()"
        if env is None and share.stop - share.start == 1:
            env = share.start
        return f"{share.describe()} {what}{on}", env

    def _fatal(self, share: Share, what: str, phase: str, tb: str | None = None) -> NoReturn:
        """Shut everything down and raise ``EnvWorkerError`` naming the env and, as
        ``env_indices``, every env of the share (``tb``: the remote text, chained as cause)."""
        self._stop(share)
        message, env = self._blame(share, what, phase)
        self._broken = message
        self._shutdown()
        error = EnvWorkerError(message, env_index=env, worker_traceback=tb,
                               env_indices=range(share.start, share.stop))
        if tb is not None:
            raise error from RemoteTraceback(tb)
        raise error

    def _restart(self, share: Share, what: str, phase: str) -> None:
        """Replace lost ``share``'s owner by a new one over new envs (same rows). During a
        step its envs' episodes end under the autoreset rule (SAME_STEP: their last
        observations become ``final_obs`` and the new envs are reset now); during a reset the
        caller resets them again."""
        message = self._blame(share, what, phase)[0].removesuffix(f" during {phase}()")
        self._lost[share.index] = message
        self._stop(share)
        fresh = phase == "step"
        rows = share.rows
        kept: dict[str, np.ndarray] = {}
        if fresh and on_episode_end(self.autoreset_mode) == RESET_NOW:
            copy_row(self._obs, self._final_obs, rows)
            # (kept apart: the new owner's reset answer may carry final_obs rows of its own)
            kept = {k: a[rows].copy() for k, a in self.arrays.items()
                    if k.split(".")[0] == "final_obs"}
        self._restart_infos += self._replace(share, fresh, what, phase)
        for k, value in kept.items():
            self.arrays[k][rows] = value
        self._lost[share.index] = f"{message}; it was restarted{self._restarted_where(share)}"

    def _raise_first(self, failures: list[tuple]) -> None:
        """Raise the env failure (``EnvFailure.as_tuple()``) of the lowest env index, if any;
        an env that could not be built leaves the executor broken (shut down)."""
        if failures:
            index, what, error_type, text, tb = min(failures)
            if what == "make":
                self._broken = f"env {index} could not be built"
                self._shutdown()
            raise failure_error(index, what, error_type, text, tb)

    def _failure_infos(self, lost: dict[int, str]) -> Infos:
        """``info["env_failure"]`` for every env of the ``lost`` shares."""
        return [(i, {FAILURE_KEY: what}) for index, what in lost.items()
                for i in range(self._shares[index].start, self._shares[index].stop)]

    def _owners(self, rows: list[int]) -> dict[int, list[int]]:
        """Share index -> its local rows among envs ``rows`` (in ``rows``' order)."""
        owners: dict[int, list[int]] = {}
        for i in rows:
            s = self._shares[int(self._owner[i])]
            owners.setdefault(s.index, []).append(i - s.start)
        return dict(sorted(owners.items()))
