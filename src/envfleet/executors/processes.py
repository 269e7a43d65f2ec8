"""Worker processes for the ``pool`` and ``subprocess`` executors: ``ProcessTransport``, the
part of ``fleet.ShareFleet``'s transport (``transport.Transport``) both share: spawn, send,
gather, stop, replace, shutdown; faults and restarts are the fleet's.

Each share runs in one worker process (started with ``forkserver`` where available, else
``spawn``: a forked copy of a process that ran Numba's threads can die), shipped its factories
with cloudpickle, then driven with one message each way per batch (``executors.worker`` has
the protocol). How a batch's buffers reach the workers is the subclass's, through the hooks
declared here: every buffer piped (``subprocess.PipeTransport``) or one shared segment
(``pool.SharedMemoryTransport``). Waiting never spins and never blocks forever: the parent
sleeps in ``poll(2)`` on the workers' pipes with the deadline ``step_timeout`` (``_poll``: the
one wait of every exchange, replies, a batch's wake-up and first-ready reports alike); a
worker that dies closes its pipe (seen at once), one that does not answer in time is lost too
(``ShareFleet.failed``).
"""

from __future__ import annotations

import os
import pickle
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np

from envfleet.executors import pipes
from envfleet.executors import worker as protocol
from envfleet.executors.base import failure_error
from envfleet.executors.fleet import MIN_START_TIMEOUT, check_count, check_number, split
from envfleet.executors.group import Infos
from envfleet.executors.infos import InfoParts, entries
from envfleet.executors.serial import check_spaces
from envfleet.executors.shared_memory import BufferLayout, SharedBuffers
from envfleet.executors.transport import Share
from envfleet.machine import usable_core_ids

if TYPE_CHECKING:
    from envfleet.executors.fleet import ShareFleet


@dataclass
class Worker(Share):
    """A share run by a worker process, and the parent's end of its pipe."""

    process: Any = None
    conn: Any = None

    def describe(self) -> str:
        return f"worker {self.index} ({self.envs()}, pid {self.process.pid})"


class ProcessTransport(ABC):
    """Envs split over ``num_workers`` worker processes (see the module doc); a subclass
    says how the batch buffers reach them (the abstract methods) and steps them (``step``)."""

    restart_phases = ("step", "reset")

    def __init__(self, factories: list[Callable[[], Any]], num_workers: int, *,
                 start_method: str | None = None, pin_workers: bool = False,
                 spin_us: float = 0.0) -> None:
        protocol.exit_if_reimported()
        self.factories = factories
        self.num_workers = min(check_count("num_workers", num_workers), len(factories))
        self.start_method = start_method
        self.pin_workers = bool(pin_workers)
        self.spin_us = check_number("spin_us", spin_us, " of microseconds")
        self.workers: list[Worker] = []
        self.buffers: list[SharedBuffers] = []
        self.closers: list[Any] = []  # other connections to close at the end
        self._finalizer: Any = None
        self._lock = self._done_w = self._current = None  # (_current: read by env_of)

    # --- how the batch buffers reach the workers (the subclass's) ----------------------------

    @abstractmethod
    def _open_sync(self, ctx: Any) -> None:
        """Before the workers start: what they share with the parent besides their pipes."""

    @abstractmethod
    def _make_buffers(self, layout: BufferLayout) -> dict[str, np.ndarray]:
        """The parent's batch buffers for ``layout``."""

    @abstractmethod
    def _started(self) -> None:
        """Every worker has its buffers."""

    @abstractmethod
    def _buffers_of(self, w: Worker) -> tuple[BufferLayout, str | None, int]:
        """(Layout, shared segment or None, first row) of worker ``w``'s buffers."""

    @abstractmethod
    def _piped_names(self) -> list[str]:
        """The buffers whose rows travel through the workers' pipes."""

    @abstractmethod
    def _expect(self, count: int) -> None:
        """``count`` workers take part in this batch."""

    @abstractmethod
    def _forget(self, w: Worker) -> None:
        """Lost ``w`` is out of the batch under way."""

    @abstractmethod
    def _wait(self, workers: list[Worker], phase: str) -> list[bytes]:
        """The workers' results of this batch."""

    @abstractmethod
    def _segment_part(self, w: Worker, reply: bytes) -> tuple[slice, dict] | None:
        """Worker ``w``'s step infos held outside its reply, as a part (None: none)."""

    @abstractmethod
    def step(self) -> tuple[InfoParts, InfoParts]:
        """Step every share with the actions in the buffers; (infos, final infos)."""

    # --- start-up ----------------------------------------------------------------------------

    def start(self, fleet: ShareFleet) -> list[Worker]:
        """Spawn the workers, learn the spaces, hand every worker its buffers."""
        self.fleet = weakref.proxy(fleet)  # (the fleet owns its transport: no cycle)
        # runs at close(), at garbage collection and at interpreter exit, whichever comes first
        self._finalizer = weakref.finalize(fleet, pipes.stop_workers, self.workers,
                                           self.buffers, self.closers)
        self.step_timeout = fleet.step_timeout
        self.restart_failed = fleet.restart_failed
        ctx = self._ctx = pipes.start_context(self.start_method)
        self._cores = usable_core_ids() if self.pin_workers else []
        self._open_sync(ctx)
        self._payloads = {}
        for index, (start, stop) in enumerate(split(fleet.num_envs, self.num_workers)):
            payload = pipes.pickle_factories(self.factories, start, stop)
            if self.restart_failed:
                self._payloads[index] = payload
            self.workers.append(self._spawn(index, start, stop, payload))
        self.factories = []
        self._pipes = pipes.Pipes()
        for w in self.workers:
            self._pipes.watch(w)
        timeout = max(self.step_timeout, MIN_START_TIMEOUT)
        hellos = self._gather(self.workers, "make", timeout)
        hellos = [cloudpickle.loads(hello[1:]) for hello in hellos]
        obs_space, act_space, metadata, render_mode, _ = hellos[0]
        check_spaces([pair for hello in hellos for pair in hello[4]])  # (as serial's check)
        self.arrays = self._make_buffers(fleet._setup(obs_space, act_space, metadata,
                                                      render_mode))
        fleet._bind(self.arrays)
        for w in self.workers:
            w.conn.send_bytes(self._layout_message(w, False))
        self._gather(self.workers, "make", timeout)
        self._started()
        # the actions that go to the workers through their pipes
        self._piped_actions = [k for k in self._piped_names() if k.split(".")[0] == "act"]
        return self.workers

    def _spawn(self, index: int, start: int, stop: int, payload: bytes) -> Worker:
        """Start the process of worker ``index`` (envs ``start .. stop - 1``)."""
        core = self._cores[index % len(self._cores)] if self._cores else None
        process, conn = pipes.start_worker(self._ctx, index, start, payload, core,
                                           self._lock, self._done_w, self.spin_us)
        return Worker(index, start, stop, process=process, conn=conn)

    def _layout_message(self, w: Worker, fresh: bool) -> bytes:
        """The start-up message that hands worker ``w`` its buffers (``fresh``: see worker)."""
        layout, segment, row0 = self._buffers_of(w)
        return protocol.LAYOUT + pickle.dumps(
            (layout, segment, self.fleet.autoreset_mode, row0, self.restart_failed, fresh))

    # --- talking to the workers -------------------------------------------------------------

    def _poll(self, timeout: float, phase: str, drain: bool = False,
              only: set[int] | None = None) -> Iterator[tuple[Worker | None, bytes | None]]:
        """``Pipes.wait``, a worker found dead handled first (``_died``: restarted, or
        fatal)."""
        for w, message in self._pipes.wait(timeout, drain, only):
            if w is not None and message is None:
                self._died(w, phase)
            yield w, message

    def _gather(self, workers: list[Worker], phase: str, timeout: float) -> list[bytes]:
        """The replies of ``workers`` (in order), or an EnvWorkerError (after shutting down on
        a dead or silent worker; with ``restart_failed`` its reply is ``protocol.LOST``
        instead). An env's exception is raised once every worker answered."""
        replies: dict[int, bytes] = {}
        waiting = {w.index for w in workers}
        deadline = time.monotonic() + timeout
        while waiting:
            for w, message in self._poll(deadline - time.monotonic(), phase, only=waiting):
                if w is not None:
                    replies[w.index] = protocol.LOST if message is None else message
                    waiting.discard(w.index)
            if waiting and time.monotonic() >= deadline:
                silent = next(w for w in workers if w.index in waiting)
                self.fleet.failed(silent, f"did not finish building its envs within "
                                          f"{timeout:g} s" if phase == "make" else
                                  self.fleet.silence(), phase)
                replies[silent.index] = protocol.LOST
                waiting.discard(silent.index)
        ordered = [replies[w.index] for w in workers]
        self._raise_errors(ordered)
        return ordered

    def _raise_errors(self, ordered: list[bytes]) -> None:
        """Raise the error of the lowest env index among the results, if any."""
        self.fleet.raise_first([pickle.loads(r[1:]) for r in ordered
                                if r[:1] == protocol.ERROR])

    def _send(self, w: Worker, message: bytes, phase: str, framed: bool = False) -> bool:
        """Send ``message`` to ``w`` (``framed``: already framed as ``Connection.send_bytes``
        frames it, one ``write``: the step command, every batch); False if ``w`` was found dead
        (and restarted)."""
        try:
            if framed:  # (a few bytes: a pipe writes them whole)
                os.write(w.conn.fileno(), message)
            else:
                w.conn.send_bytes(message)
            return True
        except OSError:  # the worker is gone (its end of the pipe closed)
            self._died(w, phase)
            return False

    def _send_step(self, w: Worker) -> None:
        """The step command to ``w``: one framed byte, or with its piped actions."""
        if not self._piped_actions:  # (the actions are in the shared buffers)
            self._send(w, protocol.STEP_FRAME, "step", framed=True)
            return
        self._send(w, protocol.STEP + pickle.dumps(
            {k: self.arrays[k][w.start:w.stop] for k in self._piped_actions},
            protocol=pickle.HIGHEST_PROTOCOL), "step")

    def _died(self, w: Worker, phase: str) -> None:
        """Worker ``w``'s pipe closed: it died (reaped, its exit named). One that exited at
        start-up because it re-imported an unguarded main script is explained instead."""
        w.process.join(0.5)
        if phase == "make" and w.process.exitcode == protocol.MAIN_REIMPORTED:
            self.shutdown()
            raise RuntimeError(pipes.UNGUARDED_MAIN) from None
        self.fleet.failed(w, f"died unexpectedly ({pipes.exit_text(w.process.exitcode)})",
                          phase)

    def _infos(self, workers: list[Worker],
               replies: list[bytes]) -> tuple[InfoParts, InfoParts]:
        """The workers' batched infos and final infos (their piped outputs stored)."""
        infos, finals = InfoParts(), InfoParts()
        for w, reply in zip(workers, replies, strict=True):
            part = self._segment_part(w, reply)
            if part is not None:
                infos.append(part)
            if reply[:1] == protocol.INFO:
                step_infos, final_infos, outputs = pickle.loads(reply[1:])
                for parts, part in ((infos, step_infos), (finals, final_infos)):
                    if part is not None:  # a tree over the share's rows, or the infos as a list
                        parts.append((slice(w.start, w.stop) if type(part) is dict else None,
                                      part))
                if outputs is not None:
                    for name, value in outputs.items():
                        self.arrays[name][w.start:w.stop] = value
        return infos, finals

    def _exchange(self, workers: list[Worker], phase: str) -> tuple[InfoParts, InfoParts]:
        """The results of the batch sent to ``workers`` (those still there)."""
        workers = [w for w in workers if w.index not in self.fleet.lost]  # lost while sending
        if not workers:  # e.g. a reset_mask without any True
            return InfoParts(), InfoParts()
        return self._infos(workers, self._wait(workers, phase))

    # --- the transport ------------------------------------------------------------------------

    @abstractmethod
    def begin_batch(self) -> None:
        """A new exchange begins (shared memory: its batch counted)."""

    def reset(self, mask: np.ndarray | None, seeds: list[int | None] | None,
              options: dict[str, Any] | None) -> InfoParts:
        sent = [w for w in self.workers if mask is None or mask[w.start:w.stop].any()]
        self._expect(len(sent))
        for w in sent:
            m = None if mask is None else mask[w.start:w.stop]
            s = None if seeds is None else seeds[w.start:w.stop]
            self._send(w, protocol.RESET + pickle.dumps((m, s, options)), "reset")
        return self._exchange(sent, "reset")[0]

    def call(self, owners: dict[int, list[int]], name: Any, args: tuple,
             kwargs: dict[str, Any]) -> dict[int, list[Any]]:
        replies = self._ask(protocol.CALL, {i: (rows, name, args, kwargs)
                                            for i, rows in owners.items()}, "call")
        return {index: pickle.loads(reply[1:]) for index, reply in replies.items()}

    def set_attr(self, owners: dict[int, list[int]], name: str,
                 values: dict[int, list[Any]]) -> None:
        self._ask(protocol.SET_ATTR, {i: (rows, name, values[i]) for i, rows in owners.items()},
                  "set_attr")

    def _ask(self, command: bytes, payloads: dict[int, tuple], phase: str) -> dict[int, bytes]:
        """Send worker ``index`` ``command`` with ``payloads[index]`` (cloudpickled); their
        replies, by worker index."""
        workers = [self.workers[index] for index in payloads]
        for w in workers:
            self._send(w, command + cloudpickle.dumps(payloads[w.index]), phase)
        return dict(zip(payloads, self._gather(workers, phase, self.step_timeout), strict=True))

    def resync(self) -> None:
        """Every worker answers a fresh token once it has finished what it was given (an
        async worker drops its queue); what came before is dropped. A worker that does not
        answer within ``step_timeout`` failed (restart or shutdown)."""
        token = os.urandom(8)
        for w in self.workers:
            self._send(w, protocol.SYNC + token, "reset")
        waiting = {w.index for w in self.workers}
        deadline = time.monotonic() + self.step_timeout
        while waiting := waiting - set(self.fleet.lost):
            for w, message in self._poll(deadline - time.monotonic(), "reset", True, waiting):
                if w is not None and message == protocol.SYNCED + token:
                    waiting.discard(w.index)
            if waiting and time.monotonic() >= deadline:
                self.fleet.failed(self.workers[min(waiting)], self.fleet.silence(), "reset")

    def hand(self, w: Worker, ids: np.ndarray) -> None:
        """One message to worker ``w`` with its envs ``ids`` (and their piped actions)."""
        message = protocol.SEND + ids.astype("<i8").tobytes() if not self._piped_actions \
            else protocol.SEND_VALUES + pickle.dumps(
                (ids.tolist(), {k: self.arrays[k][ids].tolist() for k in self._piped_actions}))
        if not self._send(w, message, "step"):
            self.fleet.first_ready.end_lost()

    def take_reports(self, timeout: float, phase: str) -> int:
        count = 0
        for w, message in self._poll(timeout, phase, drain=True):
            if message is None:  # w died (and was restarted)
                count += self.fleet.first_ready.end_lost()
            elif w is not None:  # (the wake-up pipe is not used in async mode)
                count += self._report(message)
        return count

    def _report(self, message: bytes) -> int:
        """An async worker's report of one env: the env is ready (1), or its error raised."""
        e, info, final, values, failure = protocol.read_report(message)
        queue = self.fleet.first_ready
        if failure is not None:
            queue.arrived(e, ready=False)
            raise failure_error(*failure)
        for name, value in (values or {}).items():  # its piped outputs (object leaves)
            self.arrays[name][e] = value
        queue.arrived(e, () if info is None else ((e, info, final),))
        return 1

    def drop_in_flight(self) -> None:
        """Nothing to forget: a worker's queue ends with its batch, or ``resync`` drops it."""
        return

    def env_of(self, w: Worker, phase: str) -> int | None:
        """The env worker ``w`` was running (shared memory: its slot of ``current``; else its
        one env)."""
        if self._current is not None and phase != "make":
            env = int(self._current[w.index])
            return env if w.start <= env < w.stop else None
        return w.start if w.stop - w.start == 1 else None

    def stop(self, w: Worker) -> None:
        pipes.kill(w.process)

    def replace(self, w: Worker, fresh: bool, what: str, phase: str) -> Infos:
        """Forget lost worker ``w`` (counted out of a shared-memory batch, reaped, its info
        segments unlinked) and start a new process over new envs in its place."""
        self._forget(w)
        self._pipes.unwatch(w)
        pipes.reap(w.process, w.conn)
        new = self._spawn(w.index, w.start, w.stop, self._payloads[w.index])
        w.process, w.conn = new.process, new.conn
        timeout = max(self.step_timeout, MIN_START_TIMEOUT)
        reply = pipes.next_message(w.conn, timeout)
        if reply[:1] == protocol.HELLO:
            w.conn.send_bytes(self._layout_message(w, fresh))
            reply = pipes.next_message(w.conn, timeout)
        if reply[:1] not in (protocol.OK, protocol.INFO):
            why = (f"env {pickle.loads(reply[1:])[0]} raised while being rebuilt"
                   if reply[:1] == protocol.ERROR else "its new process did not start")
            self.fleet.fatal(w, f"{what}, and could not be restarted ({why})", phase)
        infos = entries(self._infos([w], [reply])[0])
        if self._current is not None:
            self._current[w.index] = -1
        self._pipes.watch(w)
        return infos

    def restart_later(self, share: Share, what: str) -> bool:
        return False  # (a new process starts in well under a step_timeout)

    def restarted_where(self, w: Worker) -> str:
        return f" as pid {w.process.pid}"

    def shutdown(self) -> None:
        """Stop every worker and release every shared resource (idempotent)."""
        self._lock = None  # the named semaphore is unlinked with its last reference
        if self._finalizer is not None:
            self._finalizer()
        else:
            pipes.stop_workers(self.workers, self.buffers, self.closers)
