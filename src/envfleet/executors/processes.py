"""Worker processes for the ``pool`` and ``subprocess`` executors: the process transport of
``fleet.ShareFleet`` (spawn, send, gather, kill, close; faults and restarts are the core's).

``ProcessVectorEnv`` runs each share in one worker process (started with ``forkserver`` where
available, else ``spawn``: a forked copy of a process that ran Numba's threads can die), ships
it its factories with cloudpickle, then drives the workers with one message each way per batch
(``executors.worker`` has the protocol; ``shared_batch.SharedBatch`` the pool's shared memory).
Waiting never spins and never blocks forever: the parent sleeps in ``poll(2)`` on the workers'
pipes with the deadline ``step_timeout`` (``_poll``: the one wait of every exchange, replies,
a batch's wake-up and first-ready reports alike); a worker that dies closes its pipe (seen at
once), one that does not answer in time is lost too (``ShareFleet._failed``).
"""

from __future__ import annotations

import os
import pickle
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.executors import pipes
from envfleet.executors import worker as protocol
from envfleet.executors.base import DEFAULT_STEP_TIMEOUT, failure_error
from envfleet.executors.fleet import (
    MIN_START_TIMEOUT,
    Share,
    ShareFleet,
    check_batch_size,
    check_count,
    check_number,
    check_timeout,
    split,
)
from envfleet.executors.group import Infos
from envfleet.executors.infos import InfoParts, entries
from envfleet.executors.serial import check_spaces
from envfleet.executors.shared_memory import SharedBuffers
from envfleet.machine import usable_core_ids


@dataclass
class Worker(Share):
    """A share run by a worker process, and the parent's end of its pipe."""

    process: Any = None
    conn: Any = None

    def describe(self) -> str:
        return f"worker {self.index} ({self.envs()}, pid {self.process.pid})"


class ProcessVectorEnv(ShareFleet):
    """Envs split over worker processes: the transport of ``ShareFleet`` (spawn, send,
    gather, kill, close). How a batch's buffers reach the workers is a mixin's: every buffer
    piped (``subprocess.PipeBatch``) or one shared segment (``shared_batch.SharedBatch``),
    each giving ``_open_sync``, ``_make_buffers``, ``_started``, ``_buffers_of``,
    ``_piped_names``, ``_expect``, ``_forget``, ``_wait`` and ``_segment_part``."""

    backend = "processes"

    def __init__(self, factories: list[Callable[[], Any]], num_workers: int, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, pin_workers: bool = False,
                 restart_failed: bool = False, spin_us: float = 0.0,
                 batch_size: int | None = None) -> None:
        protocol.exit_if_reimported()
        num_envs = len(factories)
        super().__init__(num_envs, autoreset_mode=autoreset_mode, seed=seed, copy=copy)
        self.batch_size = check_batch_size(batch_size, num_envs)
        self.num_workers = min(check_count("num_workers", num_workers), num_envs)
        self.step_timeout = check_timeout(step_timeout)
        self.pin_workers = bool(pin_workers)
        self.restart_failed = bool(restart_failed)
        self.spin_us = check_number("spin_us", spin_us, " of microseconds")
        self._workers: list[Worker] = []
        self._init_shares(self._workers)
        self._buffers: list[SharedBuffers] = []
        # runs at close(), at garbage collection and at interpreter exit, whichever comes first
        self._closers: list[Any] = []  # other connections to close at the end
        self._finalizer = weakref.finalize(self, pipes.stop_workers, self._workers,
                                           self._buffers, self._closers)
        try:
            self._start(factories, start_method)
        except BaseException:
            self._finalizer()
            raise

    # --- start-up ----------------------------------------------------------------------------

    def _start(self, factories: list[Callable[[], Any]], start_method: str | None) -> None:
        ctx = self._ctx = pipes.start_context(start_method)
        self._cores = usable_core_ids() if self.pin_workers else []
        self._lock = self._done_w = self._current = None  # (_current: read by _env_of)
        self._open_sync(ctx)
        self._payloads = {}
        for index, (start, stop) in enumerate(split(self.num_envs, self.num_workers)):
            payload = pipes.pickle_factories(factories, start, stop)
            if self.restart_failed:
                self._payloads[index] = payload
            self._workers.append(self._spawn(index, start, stop, payload))
        self._init_shares(self._workers)
        self._pipes = pipes.Pipes()
        for w in self._workers:
            self._pipes.watch(w)
        timeout = max(self.step_timeout, MIN_START_TIMEOUT)
        hellos = self._gather(self._workers, "make", timeout)
        hellos = [cloudpickle.loads(hello[1:]) for hello in hellos]
        obs_space, act_space, metadata, render_mode, _ = hellos[0]
        check_spaces([pair for hello in hellos for pair in hello[4]])  # (as serial's check)
        self._make_buffers(self._setup(obs_space, act_space, metadata, render_mode))
        for w in self._workers:
            w.conn.send_bytes(self._layout_message(w, False))
        self._gather(self._workers, "make", timeout)
        self._started()
        # the actions that go to the workers through their pipes
        self._piped_actions = [k for k in self._piped_names() if k.split(".")[0] == "act"]

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
            (layout, segment, self.autoreset_mode, row0, self.restart_failed, fresh))

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
                self._failed(silent, f"did not finish building its envs within {timeout:g} s"
                             if phase == "make" else self._silence(), phase)
                replies[silent.index] = protocol.LOST
                waiting.discard(silent.index)
        ordered = [replies[w.index] for w in workers]
        self._raise_errors(ordered)
        return ordered

    def _raise_errors(self, ordered: list[bytes]) -> None:
        """Raise the error of the lowest env index among the results, if any."""
        self._raise_first([pickle.loads(r[1:]) for r in ordered if r[:1] == protocol.ERROR])

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

    def _died(self, w: Worker, phase: str) -> None:
        """Worker ``w``'s pipe closed: it died (reaped, its exit named)."""
        w.process.join(0.5)
        self._failed(w, f"died unexpectedly ({pipes.exit_text(w.process.exitcode)})", phase)

    def _stop(self, w: Worker) -> None:
        pipes.kill(w.process)

    def _fatal(self, w: Worker, what: str, phase: str, tb: str | None = None) -> None:
        if phase == "make" and w.process.exitcode == protocol.MAIN_REIMPORTED:
            self._shutdown()
            raise RuntimeError(pipes.UNGUARDED_MAIN) from None
        super()._fatal(w, what, phase, tb)

    def _restarted_where(self, w: Worker) -> str:
        return f" as pid {w.process.pid}"

    def _replace(self, w: Worker, fresh: bool, what: str, phase: str) -> Infos:
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
            self._fatal(w, f"{what}, and could not be restarted ({why})", phase)
        infos = entries(self._infos([w], [reply])[0])
        if self._current is not None:
            self._current[w.index] = -1
        self._pipes.watch(w)
        return infos

    def _env_of(self, w: Worker, phase: str) -> int | None:
        """The env worker ``w`` was running (shared memory: its slot of ``current``)."""
        if self._current is not None and phase != "make":
            env = int(self._current[w.index])
            return env if w.start <= env < w.stop else None
        return super()._env_of(w, phase)

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

    # --- ShareFleet's transport hooks -------------------------------------------------------

    def _reset_shares(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                      options: dict[str, Any] | None) -> InfoParts:
        sent = [w for w in self._workers if mask is None or mask[w.start:w.stop].any()]
        self._expect(len(sent))
        for w in sent:
            m = None if mask is None else mask[w.start:w.stop]
            s = None if seeds is None else seeds[w.start:w.stop]
            self._send(w, protocol.RESET + pickle.dumps((m, s, options)), "reset")
        return self._exchange(sent, "reset")[0]

    def _step_shares(self) -> tuple[InfoParts, InfoParts]:
        self._expect(len(self._workers))
        for w in self._workers:
            if not self._piped_actions:  # (the actions are in the shared buffers)
                self._send(w, protocol.STEP_FRAME, "step", framed=True)
                continue
            self._send(w, protocol.STEP + pickle.dumps(
                {k: self.arrays[k][w.start:w.stop] for k in self._piped_actions},
                protocol=pickle.HIGHEST_PROTOCOL), "step")
        return self._exchange(self._workers, "step")

    def _call_shares(self, owners: dict[int, list[int]], name: Any, args: tuple,
                     kwargs: dict[str, Any]) -> dict[int, list[Any]]:
        replies = self._ask(protocol.CALL, {i: (rows, name, args, kwargs)
                                            for i, rows in owners.items()}, "call")
        return {index: pickle.loads(reply[1:]) for index, reply in replies.items()}

    def _set_attr_shares(self, owners: dict[int, list[int]], name: str,
                         values: dict[int, list[Any]]) -> None:
        self._ask(protocol.SET_ATTR, {i: (rows, name, values[i]) for i, rows in owners.items()},
                  "set_attr")

    def _ask(self, command: bytes, payloads: dict[int, tuple], phase: str) -> dict[int, bytes]:
        """Send worker ``index`` ``command`` with ``payloads[index]`` (cloudpickled); their
        replies, by worker index."""
        workers = [self._workers[index] for index in payloads]
        for w in workers:
            self._send(w, command + cloudpickle.dumps(payloads[w.index]), phase)
        return dict(zip(payloads, self._gather(workers, phase, self.step_timeout), strict=True))

    def _exchange(self, workers: list[Worker], phase: str) -> tuple[InfoParts, InfoParts]:
        workers = [w for w in workers if w.index not in self._lost]  # lost while sending
        if not workers:  # e.g. a reset_mask without any True
            return InfoParts(), InfoParts()
        return self._infos(workers, self._wait(workers, phase))

    def _resync(self) -> None:
        """After an interrupted call: every worker answers a fresh token once it has finished
        what it was given (an async worker drops its queue); what came before is dropped. A
        worker that does not answer within ``step_timeout`` failed (restart or shutdown)."""
        self._begin_batch()  # (a late wake-up of the interrupted batch is ignored by number)
        token = os.urandom(8)
        for w in self._workers:
            self._send(w, protocol.SYNC + token, "reset")
        waiting = {w.index for w in self._workers}
        deadline = time.monotonic() + self.step_timeout
        while waiting := waiting - set(self._lost):
            for w, message in self._poll(deadline - time.monotonic(), "reset", True, waiting):
                if w is not None and message == protocol.SYNCED + token:
                    waiting.discard(w.index)
            if waiting and time.monotonic() >= deadline:
                self._failed(self._workers[min(waiting)], self._silence(), "reset")

    # --- first-ready batches (``first_ready.FirstReady``'s transport hooks) ----------------

    def _hand(self, w: Worker, ids: np.ndarray) -> None:
        """One message to worker ``w`` with its envs ``ids`` (and their piped actions)."""
        message = protocol.SEND + ids.astype("<i8").tobytes() if not self._piped_actions \
            else protocol.SEND_VALUES + pickle.dumps(
                (ids.tolist(), {k: self.arrays[k][ids].tolist() for k in self._piped_actions}))
        if not self._send(w, message, "step"):
            self._async_lost()

    def _take_reports(self, timeout: float, phase: str) -> int:
        count = 0
        for w, message in self._poll(timeout, phase, drain=True):
            if message is None:  # w died (and was restarted)
                count += self._async_lost()
            elif w is not None:  # (the wake-up pipe is not used in async mode)
                count += self._report(message)
        return count

    def _report(self, message: bytes) -> int:
        """An async worker's report of one env: the env is ready (1), or its error raised."""
        e, info, final, values, failure = protocol.read_report(message)
        if failure is not None:
            self._arrived(e, ready=False)
            raise failure_error(*failure)
        for name, value in (values or {}).items():  # its piped outputs (object leaves)
            self.arrays[name][e] = value
        self._arrived(e, () if info is None else ((e, info, final),))
        return 1

    def _shutdown(self) -> None:
        """Stop every worker and release every shared resource (idempotent)."""
        self._lock = None  # the named semaphore is unlinked with its last reference
        self._finalizer()
