"""The transport interface of ``fleet.ShareFleet``: how the owners of its shares (worker
processes, Ray actors) are started, given work, heard from, stopped and replaced.

A ``Share`` is envs ``start .. stop - 1`` run by one owner. ``ShareFleet`` keeps everything
else once for every transport (the Gymnasium contract, faults and restarts, first-ready
batches); a ``Transport`` only moves data. Three implement it: ``subprocess.PipeTransport``
(every buffer piped), ``pool.SharedMemoryTransport`` (one shared-memory batch), both over
``processes.ProcessTransport``, and ``ray.RayTransport``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from envfleet.executors.group import Infos
    from envfleet.executors.infos import InfoParts


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


class Transport(Protocol):
    """What ``ShareFleet`` asks of a transport. It reports faults back to the fleet it was
    started for (``ShareFleet.failed``: an owner that died or stayed silent; an env's error is
    raised once every owner answered) and first-ready reports to its queue
    (``ShareFleet.first_ready``)."""

    #: the phases in which a lost owner is restarted (``restart_failed``); fatal in any other
    restart_phases: tuple[str, ...]

    def start(self, fleet: Any) -> list[Share]:
        """Spawn the owners of ``fleet``'s envs (the ``fleet.ShareFleet`` starting this
        transport: not imported here, it imports this module), learn their spaces
        (``fleet._setup``) and give the fleet its batch buffers (``fleet._bind``); the shares,
        in env order."""

    def begin_batch(self) -> None:
        """A new exchange (reset, step) begins."""

    def reset(self, mask: np.ndarray | None, seeds: list[int | None] | None,
              options: dict[str, Any] | None) -> InfoParts:
        """Reset the masked envs (their shares only; lost shares are skipped)."""

    def step(self) -> tuple[InfoParts, InfoParts]:
        """Step every share with the actions in the buffers; (infos, final infos)."""

    def call(self, owners: dict[int, list[int]], name: Any, args: tuple,
             kwargs: dict[str, Any]) -> dict[int, list[Any]]:
        """Share index -> the results of ``name`` on its local rows ``owners[index]``."""

    def set_attr(self, owners: dict[int, list[int]], name: str,
                 values: dict[int, list[Any]]) -> None:
        """Set ``name`` on each share's local rows ``owners[index]`` to ``values[index]``."""

    def resync(self) -> None:
        """After an interrupted call: wait until every owner has finished what it was given,
        dropping its answers."""

    def hand(self, share: Share, ids: np.ndarray) -> None:
        """First-ready: send ``share``'s owner its envs ``ids`` to step (their actions are in
        the buffers)."""

    def take_reports(self, timeout: float, phase: str) -> int:
        """First-ready: wait up to ``timeout`` s for reports and take those that came
        (``FirstReady.arrived``; an env's error raised); how many envs became ready."""

    def drop_in_flight(self) -> None:
        """First-ready: forget the requests in flight (after a reset or a step)."""

    def env_of(self, share: Share, phase: str) -> int | None:
        """The env ``share``'s owner was running in ``phase`` (None when unknown)."""

    def stop(self, share: Share) -> None:
        """Kill ``share``'s owner at once (it is lost: nothing it holds is needed)."""

    def replace(self, share: Share, fresh: bool, what: str, phase: str) -> Infos:
        """Start a new owner for ``share`` over new envs (the old one is stopped and
        forgotten); ``fresh``: its envs replace envs whose episodes ended and start under the
        autoreset rule (``EnvGroup.start_fresh``); their infos. ``what`` and ``phase`` name the
        loss, for ``ShareFleet.fatal`` when the new owner cannot start."""

    def restart_later(self, share: Share, what: str) -> bool:
        """First-ready steps: start ``share``'s new owner without waiting for it, if the
        transport can (True: its envs stay in flight until it answers); False: restart now."""

    def restarted_where(self, share: Share) -> str:
        """Where ``share``'s new owner runs, for the failure info (" as pid 7")."""

    def shutdown(self) -> None:
        """Stop every owner and release every resource (idempotent)."""
