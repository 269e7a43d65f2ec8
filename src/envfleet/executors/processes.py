"""Worker processes for the ``pool`` and ``subprocess`` executors: start, talk, watch, stop.

``ProcessVectorEnv`` splits the envs into contiguous shares, one per worker process (started
with ``forkserver`` where available, else ``spawn``: a forked copy of a process that ran
Numba's threads can die), ships each worker its factories with cloudpickle, then drives the
workers with one message each way per batch (``executors.worker`` has the protocol).

Waiting never spins and never blocks forever: the parent sleeps in ``poll(2)`` on the workers'
pipes with the deadline ``step_timeout``; a worker that dies closes its pipe (seen at once);
one that does not answer in time is killed. Either is reported as ``EnvWorkerError`` naming
the env it was on, after which every worker is stopped and every segment unlinked.
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
from envfleet.executors.base import (
    DEFAULT_STEP_TIMEOUT,
    EnvWorkerError,
    ExecutorVectorEnv,
    failure_error,
)
from envfleet.executors.group import Infos
from envfleet.executors.shared_memory import BufferLayout, SharedBuffers
from envfleet.machine import usable_core_ids

#: start-up (building the envs) may take longer than a step: at least this many seconds
MIN_START_TIMEOUT = 60.0
#: how long a worker asked to close may take before it is killed
CLOSE_GRACE = 1.0


def default_start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def split(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous shares ``[start, stop)``, sizes differing by one at most."""
    base, extra = divmod(num_envs, num_workers)
    shares, start = [], 0
    for w in range(num_workers):
        stop = start + base + (w < extra)
        shares.append((start, stop))
        start = stop
    return shares


@dataclass
class Worker:
    index: int
    start: int
    stop: int
    process: Any
    conn: Any

    def describe(self) -> str:
        envs = f"env {self.start}" if self.stop - self.start == 1 else \
            f"envs {self.start}..{self.stop - 1}"
        return f"worker {self.index} ({envs}, pid {self.process.pid})"


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _shutdown(workers: list[Worker], buffers: list[SharedBuffers],
              closers: list[Any] | None = None) -> None:
    """Stop every worker (ask, then terminate, then kill), reap it, unlink every segment."""
    for w in workers:
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
        for w in alive:
            w.process.join(2.0)
    for w in workers:
        with contextlib.suppress(OSError):
            w.conn.close()
        with contextlib.suppress(ValueError):  # still running after SIGKILL + 2 s: the OS's
            w.process.close()
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


class ProcessVectorEnv(ExecutorVectorEnv):
    """Envs split over worker processes; subclasses choose the shares and the transport."""

    backend = "processes"
    shared_memory = True

    def __init__(self, factories: list[Callable[[], Any]], num_workers: int, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, pin_workers: bool = False) -> None:
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
        self._workers: list[Worker] = []
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
        ctx = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # workers fork from a server that has imported what they need
            ctx.set_forkserver_preload(["envfleet.executors.worker"])
        cores = usable_core_ids() if self.pin_workers else []
        lock = done_w = None
        if self.shared_memory:  # the last worker to finish a batch wakes the parent
            lock = ctx.Lock()  # a named semaphore: unlinked when the last reference goes
            self._closers.append(lock)
            self._done, done_w = ctx.Pipe(duplex=False)
        for index, (start, stop) in enumerate(split(self.num_envs, self.num_workers)):
            core = cores[index % len(cores)] if cores else None
            payload = cloudpickle.dumps(factories[start:stop])
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            process = ctx.Process(
                target=protocol.worker_main, name=f"envfleet-worker-{index}", daemon=True,
                args=(child_conn, payload, start, index, os.getpid(), core, lock, done_w))
            process.start()
            child_conn.close()
            self._workers.append(Worker(index, start, stop, process, parent_conn))
        if done_w is not None:
            done_w.close()  # the workers hold it now
            self._closers.append(self._done)
        self._poller = select.poll()
        self._by_fd = {}
        for w in self._workers:
            self._poller.register(w.conn.fileno(), select.POLLIN | select.POLLHUP)
            self._by_fd[w.conn.fileno()] = w

        self._current = None  # set once the shared buffers exist; read by _fatal before that
        timeout = max(self.step_timeout, MIN_START_TIMEOUT)
        hellos = self._gather(self._workers, "make", timeout)
        obs_space, act_space, metadata, render_mode = cloudpickle.loads(hellos[0][1:])
        for w in self._workers[1:]:
            other = cloudpickle.loads(hellos[w.index][1:])
            for what, mine, theirs in (("observation_space", obs_space, other[0]),
                                       ("action_space", act_space, other[1])):
                if mine != theirs:
                    raise ValueError(f"env {w.start}'s {what} {theirs} differs from env 0's "
                                     f"{mine}: every env must have the same spaces")
        layout = self._setup(obs_space, act_space, metadata, render_mode)
        if self.shared_memory:
            fields = {name: (shape, dtype) for name, shape, dtype, _ in layout.fields}
            fields["current"] = ((self.num_workers,), np.int64)
            fields["sync"] = ((2,), np.int64)  # [workers finished, workers expected]
            layout = BufferLayout.of(fields)
            shared = SharedBuffers.create(layout)
            self._buffers.append(shared)
            self._bind(shared.arrays)
            self._current = shared.arrays["current"]
            self._sync = shared.arrays["sync"]
            for w in self._workers:
                w.conn.send_bytes(protocol.LAYOUT + pickle.dumps(
                    (layout, shared.name, self.autoreset_mode, w.start)))
        else:
            self._bind(layout.local())
            self._current = None
            for w in self._workers:
                local = self._setup_local_layout(w)
                w.conn.send_bytes(protocol.LAYOUT + pickle.dumps(
                    (local, None, self.autoreset_mode, 0)))
        self._gather(self._workers, "make", timeout)
        if self.shared_memory:
            self._poller.register(self._done.fileno(), select.POLLIN | select.POLLHUP)
        self._action_names = [k for k in self.arrays if k.split(".")[0] == "act"]

    def _setup_local_layout(self, w: Worker) -> BufferLayout:
        rows = w.stop - w.start
        return BufferLayout.of({name: ((rows, *shape[1:]), dtype)
                                for name, shape, dtype, _ in
                                self._layout_fields()})

    def _layout_fields(self) -> list[tuple[str, tuple[int, ...], str, int]]:
        return [(name, a.shape, a.dtype.str, 0) for name, a in self.arrays.items()]

    # --- talking to the workers -------------------------------------------------------------

    def _gather(self, workers: list[Worker], phase: str, timeout: float) -> list[bytes]:
        """The replies of ``workers`` (in order), or an EnvWorkerError (after shutting down on
        a dead or silent worker). An env's exception is raised once every worker answered."""
        replies: dict[int, bytes] = {}
        waiting = {w.index for w in workers}
        deadline = time.monotonic() + timeout
        poller, by_fd = self._poller, self._by_fd
        while waiting:
            remaining = deadline - time.monotonic()
            events = poller.poll(remaining * 1000.0) if remaining > 0 else []
            if not events:
                silent = next(w for w in workers if w.index in waiting)
                self._fatal(silent, f"did not answer within step_timeout={self.step_timeout:g} s"
                            if phase != "make" else
                            f"did not finish building its envs within {timeout:g} s", phase)
            for fd, _ in events:
                w = by_fd[fd]
                if w.index not in waiting:
                    continue  # (cannot happen: one reply per command)
                try:
                    reply = w.conn.recv_bytes()
                except (EOFError, OSError):
                    w.process.join(0.5)
                    self._fatal(w, f"died unexpectedly ({_exit_text(w.process.exitcode)})",
                                phase)
                replies[w.index] = reply
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
                _shutdown(self._workers, self._buffers, self._closers)
            raise failure_error(index, what, error_type, text, tb)

    def _send(self, w: Worker, message: bytes, phase: str) -> None:
        try:
            w.conn.send_bytes(message)
        except OSError:  # the worker is gone (its end of the pipe closed)
            w.process.join(0.5)
            self._fatal(w, f"died unexpectedly ({_exit_text(w.process.exitcode)})", phase)

    def _fatal(self, w: Worker, what: str, phase: str) -> None:
        env = None
        if self._current is not None and phase != "make":
            env = int(self._current[w.index])
            if not w.start <= env < w.stop:
                env = None
        elif w.stop - w.start == 1:
            env = w.start
        on = f" while running env {env}'s {phase}()" if env is not None else f" during {phase}"
        message = f"{w.describe()} {what}{on}"
        self._broken = message
        _shutdown(self._workers, self._buffers, self._closers)
        raise EnvWorkerError(message, env_index=env)

    def _infos(self, workers: list[Worker], replies: list[bytes]) -> tuple[Infos, Infos]:
        infos: Infos = []
        finals: Infos = []
        for w, reply in zip(workers, replies, strict=True):
            if reply[:1] == protocol.INFO:
                step_infos, final_infos, outputs = pickle.loads(reply[1:])
                infos += step_infos
                finals += final_infos
                if outputs is not None:
                    for name, value in outputs.items():
                        self.arrays[name][w.start:w.stop] = value
        return infos, finals

    # --- executor hooks ------------------------------------------------------------------------

    def _reset_envs(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                    options: dict[str, Any] | None) -> Infos:
        sent = []
        if self.shared_memory:
            self._sync[0] = 0
            self._sync[1] = self.num_workers if mask is None else sum(
                bool(mask[w.start:w.stop].any()) for w in self._workers)
        for w in self._workers:
            m = None if mask is None else mask[w.start:w.stop]
            if m is not None and not m.any():
                continue
            s = None if seeds is None else seeds[w.start:w.stop]
            self._send(w, protocol.RESET + pickle.dumps((m, s, options)), "reset")
            sent.append(w)
        return self._exchange(sent, "reset")[0]

    def _step_envs(self) -> tuple[Infos, Infos]:
        if self.shared_memory:
            self._sync[0] = 0
            self._sync[1] = len(self._workers)
            for w in self._workers:
                self._send(w, protocol.STEP, "step")
        else:
            for w in self._workers:
                self._send(w, protocol.STEP + pickle.dumps(
                    {k: self.arrays[k][w.start:w.stop] for k in self._action_names},
                    protocol=pickle.HIGHEST_PROTOCOL), "step")
        return self._exchange(self._workers, "step")

    def _exchange(self, workers: list[Worker], phase: str) -> tuple[Infos, Infos]:
        if not workers:  # e.g. a reset_mask without any True
            return [], []
        if not self.shared_memory:
            return self._infos(workers, self._gather(workers, phase, self.step_timeout))
        return self._infos(workers, self._wait_done(workers, phase))

    def _wait_done(self, workers: list[Worker], phase: str) -> list[bytes]:
        """Shared memory: sleep until the last worker's ``done`` byte (or a fault); the results
        of workers with something to say, ``b"k"`` for the others."""
        replies = {w.index: protocol.OK for w in workers}
        said: set[int] = set()
        done_fd = self._done.fileno()
        deadline = time.monotonic() + self.step_timeout
        finished = False
        while not finished:
            remaining = deadline - time.monotonic()
            events = self._poller.poll(remaining * 1000.0) if remaining > 0 else []
            if not events:
                busy = [w for w in workers if int(self._current[w.index]) >= 0]
                self._fatal((busy or workers)[0], f"did not answer within step_timeout="
                                                  f"{self.step_timeout:g} s", phase)
            for fd, _ in events:
                if fd == done_fd:
                    self._done.recv_bytes()
                    finished = True
                else:
                    self._read_result(self._by_fd[fd], phase, replies, said)
        # results were written before their workers counted themselves finished
        for fd, _ in self._poller.poll(0):
            if fd != done_fd:
                self._read_result(self._by_fd[fd], phase, replies, said)
        ordered = [replies[w.index] for w in workers]
        self._raise_errors(ordered)
        return ordered

    def _read_result(self, w: Worker, phase: str, replies: dict[int, bytes],
                     said: set[int]) -> None:
        """Read ``w``'s one result of this batch; anything else on its pipe is its death."""
        if w.index in replies and w.index not in said:
            try:
                replies[w.index] = w.conn.recv_bytes()
                said.add(w.index)
                return
            except (EOFError, OSError):
                pass
        w.process.join(0.5)
        self._fatal(w, f"died unexpectedly ({_exit_text(w.process.exitcode)})", phase)

    def _close_executor(self) -> None:
        self._finalizer()
