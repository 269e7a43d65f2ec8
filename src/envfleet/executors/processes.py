"""Worker processes for the ``pool`` and ``subprocess`` executors: start, talk, watch, stop.

``ProcessVectorEnv`` splits the envs into contiguous shares, one per worker process (started
with ``forkserver`` where available, else ``spawn``: a forked copy of a process that ran
Numba's threads can die), ships each worker its factories with cloudpickle, then drives the
workers with one message each way per batch (``executors.worker`` has the protocol).

Waiting never spins and never blocks forever: the parent sleeps in ``poll(2)`` on the workers'
pipes with the deadline ``step_timeout``; a worker that dies closes its pipe (seen at once);
one that does not answer in time is killed. Either is reported as ``EnvWorkerError`` naming
the env it was on, after which every worker is stopped and every segment unlinked.

With ``restart_failed=True`` a lost worker (dead, or killed after ``step_timeout``) is started
again in its place instead, and every env it ran ends its episode as truncated, with
``info["env_failure"]`` saying why; an env that raises is rebuilt inside its worker
(``EnvGroup``). The other workers' envs step on untouched.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import select
import signal
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.executors import worker as protocol
from envfleet.executors.base import DEFAULT_STEP_TIMEOUT, failure_error
from envfleet.executors.fleet import MIN_START_TIMEOUT, Share, ShareFleet, split
from envfleet.executors.group import Infos
from envfleet.executors.infos import InfoParts, entries
from envfleet.executors.serial import check_spaces
from envfleet.executors.shared_batch import LOST, unlink_info_segments
from envfleet.executors.shared_memory import BufferLayout, SharedBuffers
from envfleet.machine import usable_core_ids

#: how long a worker asked to close may take before it is killed
CLOSE_GRACE = 1.0
#: the step command as ``Connection.send_bytes`` sends it (a 4-byte length, then the bytes)
STEP_FRAME = len(protocol.STEP).to_bytes(4, "big", signed=True) + protocol.STEP


def default_start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


#: what a worker's start-up failure means when it re-imported an unguarded main script
UNGUARDED_MAIN = (
    "envfleet's worker processes import your main script again, and its top-level code "
    "builds worker processes itself: put the code that makes the env under\n"
    '    if __name__ == "__main__":\n'
    "(Python's multiprocessing needs this guard with the forkserver and spawn start methods; "
    "see https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-"
    "start-methods)")


def _pickle_factories(factories: list[Callable[[], Any]], start: int, stop: int) -> bytes:
    """The factories of envs ``start .. stop - 1``, cloudpickled for their worker; a factory
    that cannot be pickled is named (TypeError)."""
    try:
        return cloudpickle.dumps(factories[start:stop])
    except Exception:
        for i in range(start, stop):
            try:
                cloudpickle.dumps(factories[i])
            except Exception as error:
                raise TypeError(
                    f"env {i}'s factory {factories[i]!r} cannot be sent to a worker process "
                    f"({type(error).__name__}: {error}); factories must be picklable (with "
                    f"cloudpickle): create unpicklable objects (locks, open files, "
                    f"connections) inside the factory, not before") from error
        raise


@dataclass
class Worker(Share):
    """A share run by a worker process, and the parent's end of its pipe."""

    process: Any = None
    conn: Any = None

    def describe(self) -> str:
        return f"worker {self.index} ({self.envs()}, pid {self.process.pid})"


def exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _stopped(pid: int | None) -> bool:
    """Process ``pid`` is stopped (SIGSTOP, or traced); False when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _shutdown(workers: list[Worker], buffers: list[SharedBuffers],
              closers: list[Any] | None = None) -> None:
    """Stop every worker (ask, then terminate, then kill), reap it, unlink every segment."""
    for w in workers:
        if _stopped(w.process.pid):  # (SIGSTOP: it could neither close nor handle SIGTERM)
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(w.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError, ValueError):
            w.conn.send_bytes(protocol.CLOSE)
    deadline = time.monotonic() + CLOSE_GRACE
    for w in workers:
        w.process.join(max(deadline - time.monotonic(), 0.0))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [w for w in workers if w.process.is_alive()]
        for w in alive:
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(w.process.pid, sig)
                if sig == signal.SIGTERM:  # a stopped process acts on SIGTERM once continued
                    os.kill(w.process.pid, signal.SIGCONT)
        for w in alive:
            w.process.join(2.0)
    for w in workers:
        with contextlib.suppress(OSError):
            w.conn.close()
        with contextlib.suppress(ValueError):  # still running after SIGKILL + 2 s: the OS's
            w.process.close()
    if buffers and buffers[0].arrays is not None and "infonames" in buffers[0].arrays:
        unlink_info_segments(buffers[0].arrays["infonames"])
    for b in buffers:
        b.close()
        b.unlink()
    for c in closers or ():
        if hasattr(c, "close"):
            with contextlib.suppress(OSError):
                c.close()
    workers.clear()
    buffers.clear()
    if closers:
        closers.clear()


class ProcessVectorEnv(ShareFleet):
    """Envs split over worker processes: the transport of ``ShareFleet`` (spawn, send,
    gather, kill, close), every buffer piped; the pool mixes in ``SharedBatch``."""

    backend = "processes"

    def __init__(self, factories: list[Callable[[], Any]], num_workers: int, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, pin_workers: bool = False,
                 restart_failed: bool = False, spin_us: float = 0.0) -> None:
        if getattr(multiprocessing.current_process(), "_inheriting", False):
            # this is a worker starting up, and importing the user's main script again built
            # an executor: there is no guard; exit quietly, the parent explains (one error
            # instead of one traceback per worker)
            os._exit(protocol.MAIN_REIMPORTED)
        num_envs = len(factories)
        super().__init__(num_envs, autoreset_mode=autoreset_mode, seed=seed, copy=copy)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) \
                or not num_workers >= 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        if not (isinstance(step_timeout, int | float) and step_timeout > 0):
            raise ValueError(f"step_timeout must be a number of seconds > 0, got "
                             f"{step_timeout!r}")
        self.step_timeout = float(step_timeout)
        self.num_workers = min(num_workers, num_envs)
        self.pin_workers = bool(pin_workers)
        self.restart_failed = bool(restart_failed)
        if isinstance(spin_us, bool) or not isinstance(spin_us, int | float) or spin_us < 0:
            raise ValueError(f"spin_us must be a number of microseconds >= 0, got {spin_us!r}")
        self.spin_us = float(spin_us)
        self._workers: list[Worker] = []
        self._init_shares(self._workers)
        self._buffers: list[SharedBuffers] = []
        # runs at close(), at garbage collection and at interpreter exit, whichever comes first
        self._closers: list[Any] = []  # other connections to close at the end
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._buffers,
                                           self._closers)
        try:
            self._start(factories, start_method or default_start_method())
        except BaseException:
            self._finalizer()
            raise

    # --- start-up ----------------------------------------------------------------------------

    def _start(self, factories: list[Callable[[], Any]], start_method: str) -> None:
        ctx = self._ctx = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # workers fork from a server that has imported what they need
            ctx.set_forkserver_preload(["envfleet.executors.worker"])
        self._cores = usable_core_ids() if self.pin_workers else []
        self._lock = self._done_w = self._current = None  # (_current: read by _env_of)
        self._open_sync(ctx)
        self._payloads = {}
        for index, (start, stop) in enumerate(split(self.num_envs, self.num_workers)):
            payload = _pickle_factories(factories, start, stop)
            if self.restart_failed:
                self._payloads[index] = payload
            self._workers.append(self._spawn(index, start, stop, payload))
        self._init_shares(self._workers)
        self._poller = select.poll()
        self._by_fd = {}
        for w in self._workers:
            self._watch(w)
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

    # --- the transport's own hooks: everything piped (``SharedBatch``: shared memory) -----

    def _open_sync(self, ctx: Any) -> None:
        """Before the workers start: what they share with the parent besides their pipes."""

    def _make_buffers(self, layout: BufferLayout) -> None:
        """The parent's batch buffers (here its own: the workers' rows come by pipe)."""
        self._bind(layout.local())

    def _started(self) -> None:
        """Every worker has its buffers."""

    def _buffers_of(self, w: Worker) -> tuple[BufferLayout, str | None, int]:
        """(Layout, shared segment or None, first row) of worker ``w``'s buffers."""
        rows = w.stop - w.start
        return BufferLayout.of({name: ((rows, *a.shape[1:]), a.dtype.str)
                                for name, a in self.arrays.items()}), None, 0

    def _piped_names(self) -> list[str]:
        """The buffers whose rows travel through the workers' pipes."""
        return list(self.arrays)

    def _expect(self, count: int) -> None:
        """``count`` workers take part in this batch."""

    def _forget(self, w: Worker) -> None:
        """Lost ``w`` is out of the batch under way."""

    def _wait(self, workers: list[Worker], phase: str) -> list[bytes]:
        """The workers' results of this batch."""
        return self._gather(workers, phase, self.step_timeout)

    def _segment_part(self, w: Worker, reply: bytes) -> tuple[slice, dict] | None:
        """Worker ``w``'s step infos held outside its reply, as a part (None: none)."""
        return None

    def _spawn(self, index: int, start: int, stop: int, payload: bytes) -> Worker:
        """Start the process of worker ``index`` (envs ``start .. stop - 1``)."""
        core = self._cores[index % len(self._cores)] if self._cores else None
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=protocol.worker_main, name=f"envfleet-worker-{index}", daemon=True,
            args=(child_conn, payload, start, index, os.getpid(), core, self._lock,
                  self._done_w, self.spin_us))
        process.start()
        child_conn.close()
        return Worker(index, start, stop, process=process, conn=parent_conn)

    def _watch(self, w: Worker) -> None:
        self._poller.register(w.conn.fileno(), select.POLLIN | select.POLLHUP)
        self._by_fd[w.conn.fileno()] = w

    def _layout_message(self, w: Worker, fresh: bool) -> bytes:
        """The start-up message that hands worker ``w`` its buffers (``fresh``: see worker)."""
        layout, segment, row0 = self._buffers_of(w)
        return protocol.LAYOUT + pickle.dumps(
            (layout, segment, self.autoreset_mode, row0, self.restart_failed, fresh))

    # --- talking to the workers -------------------------------------------------------------

    def _gather(self, workers: list[Worker], phase: str, timeout: float) -> list[bytes]:
        """The replies of ``workers`` (in order), or an EnvWorkerError (after shutting down on
        a dead or silent worker; with ``restart_failed`` its reply is ``LOST`` instead). An
        env's exception is raised once every worker answered."""
        replies: dict[int, bytes] = {}
        waiting = {w.index for w in workers}
        deadline = time.monotonic() + timeout
        poller, by_fd = self._poller, self._by_fd
        while waiting:
            remaining = deadline - time.monotonic()
            events = poller.poll(max(remaining, 0.0) * 1000.0)  # (overdue: what has come)
            if not events:
                silent = next(w for w in workers if w.index in waiting)
                self._failed(silent, f"did not answer within step_timeout="
                             f"{self.step_timeout:g} s" if phase != "make" else
                             f"did not finish building its envs within {timeout:g} s", phase)
                replies[silent.index] = LOST
                waiting.discard(silent.index)
                continue
            for fd, _ in events:
                w = by_fd.get(fd)
                if w is None or w.index not in waiting:
                    continue  # (cannot happen: one reply per command)
                try:
                    replies[w.index] = w.conn.recv_bytes()
                except (EOFError, OSError):
                    self._died(w, phase)
                    replies[w.index] = LOST
                    waiting.discard(w.index)
                    break  # the new worker may have the old one's fd: poll again
                waiting.discard(w.index)
        ordered = [replies[w.index] for w in workers]
        self._raise_errors(ordered)
        return ordered

    def _raise_errors(self, ordered: list[bytes]) -> None:
        """Raise the error of the lowest env index among the results, if any."""
        errors = [r for r in ordered if r[:1] == protocol.ERROR]
        if errors:
            failures = sorted(pickle.loads(r[1:]) for r in errors)
            index, what, error_type, text, tb = failures[0]
            if what == "make":
                self._broken = f"env {index} could not be built"
                self._shutdown()
            raise failure_error(index, what, error_type, text, tb)

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
        self._failed(w, f"died unexpectedly ({exit_text(w.process.exitcode)})", phase)

    def _stop(self, w: Worker) -> None:
        with contextlib.suppress(ProcessLookupError, TypeError):  # (stopped or stuck: no
            os.kill(w.process.pid, signal.SIGKILL)  # use asking it to close first)

    def _fatal(self, w: Worker, what: str, phase: str) -> None:
        if phase == "make" and w.process.exitcode == protocol.MAIN_REIMPORTED:
            self._shutdown()
            raise RuntimeError(UNGUARDED_MAIN) from None
        super()._fatal(w, what, phase)

    def _restarted_where(self, w: Worker) -> str:
        return f" as pid {w.process.pid}"

    def _replace(self, w: Worker, fresh: bool, what: str, phase: str) -> Infos:
        """Forget lost worker ``w`` (counted out of a shared-memory batch, reaped, its info
        segments unlinked) and start a new process over new envs in its place."""
        self._forget(w)
        fd = w.conn.fileno()
        self._poller.unregister(fd)
        del self._by_fd[fd]
        w.process.join(2.0)
        with contextlib.suppress(OSError):
            w.conn.close()
        with contextlib.suppress(ValueError):
            w.process.close()
        new = self._spawn(w.index, w.start, w.stop, self._payloads[w.index])
        w.process, w.conn = new.process, new.conn
        timeout = max(self.step_timeout, MIN_START_TIMEOUT)
        hello = self._await(w, timeout)
        if hello[:1] == protocol.HELLO:
            w.conn.send_bytes(self._layout_message(w, fresh))
            reply = self._await(w, timeout)
        else:
            reply = hello
        if reply[:1] not in (protocol.OK, protocol.INFO):
            why = (f"env {pickle.loads(reply[1:])[0]} raised while being rebuilt"
                   if reply[:1] == protocol.ERROR else "its new process did not start")
            self._fatal(w, f"{what}, and could not be restarted ({why})", phase)
        infos = entries(self._infos([w], [reply])[0])
        if self._current is not None:
            self._current[w.index] = -1
        self._watch(w)
        return infos

    def _await(self, w: Worker, timeout: float) -> bytes:
        """``w``'s next message, or b"" if it dies or stays silent for ``timeout`` s."""
        try:
            if w.conn.poll(timeout):
                return w.conn.recv_bytes()
        except (EOFError, OSError):
            pass
        return b""

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
                self._send(w, STEP_FRAME, "step", framed=True)
                continue
            self._send(w, protocol.STEP + pickle.dumps(
                {k: self.arrays[k][w.start:w.stop] for k in self._piped_actions},
                protocol=pickle.HIGHEST_PROTOCOL), "step")
        return self._exchange(self._workers, "step")

    def _call_shares(self, owners: dict[int, list[int]], name: Any, args: tuple,
                     kwargs: dict[str, Any]) -> dict[int, list[Any]]:
        workers = [self._workers[index] for index in owners]
        for w in workers:
            self._send(w, protocol.CALL + cloudpickle.dumps((owners[w.index], name, args,
                                                              kwargs)), "call")
        replies = self._gather(workers, "call", self.step_timeout)
        return {w.index: pickle.loads(reply[1:])
                for w, reply in zip(workers, replies, strict=True)}

    def _set_attr_shares(self, owners: dict[int, list[int]], name: str,
                         values: dict[int, list[Any]]) -> None:
        workers = [self._workers[index] for index in owners]
        for w in workers:
            self._send(w, protocol.SET_ATTR + cloudpickle.dumps(
                (owners[w.index], name, values[w.index])), "set_attr")
        self._gather(workers, "set_attr", self.step_timeout)

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
        for w in self._workers:
            deadline = time.monotonic() + self.step_timeout
            while w.index not in self._lost:
                try:
                    if not w.conn.poll(max(deadline - time.monotonic(), 0.0)):
                        self._failed(w, f"did not answer within step_timeout="
                                        f"{self.step_timeout:g} s", "reset")
                    elif w.conn.recv_bytes() == protocol.SYNCED + token:
                        break
                except (EOFError, OSError):
                    self._died(w, "reset")

    def _shutdown(self) -> None:
        """Stop every worker and release every shared resource (idempotent)."""
        self._lock = None  # the named semaphore is unlinked with its last reference
        self._finalizer()
