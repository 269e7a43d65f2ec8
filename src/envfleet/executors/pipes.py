"""The parent's side of the worker processes of ``pool`` and ``subprocess``: starting one
(``start_worker``), waiting on all their pipes at once (``Pipes.wait``: the one ``poll(2)``
of every exchange), stopping one (``kill``, ``reap``) or all of them (``stop_workers``).

``executors.worker`` is the other side (the worker process and its protocol);
``processes.ProcessTransport`` puts the two together as ``ShareFleet``'s process transport.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from envfleet.executors.infos import unlink_info_segments
from envfleet.executors.shared_memory import SharedBuffers
from envfleet.executors.worker import CLOSE, worker_main


class Pipes:
    """The parent's end of the workers' pipes (and the pool's wake-up pipe, ``done``), waited
    on together with one ``poll(2)``: replies, a batch's wake-up and first-ready reports."""

    def __init__(self) -> None:
        self.poller = select.poll()
        self.by_fd: dict[int, Any] = {}  # fd -> its worker (``w.conn``, ``w.index``)
        self.done: Any = None

    def watch(self, w: Any) -> None:
        """Wait on worker ``w``'s pipe too."""
        self.poller.register(w.conn.fileno(), select.POLLIN | select.POLLHUP)
        self.by_fd[w.conn.fileno()] = w

    def unwatch(self, w: Any) -> None:
        """Stop waiting on worker ``w``'s pipe (before it is closed)."""
        fd = w.conn.fileno()
        self.poller.unregister(fd)
        del self.by_fd[fd]

    def watch_done(self, done: Any) -> None:
        """Wait on the pool's wake-up pipe ``done`` too."""
        self.done = done
        self.poller.register(done.fileno(), select.POLLIN | select.POLLHUP)

    def wait(self, timeout: float, drain: bool = False, only: set[int] | None = None
             ) -> Iterator[tuple[Any, bytes | None]]:
        """One wait of at most ``timeout`` s, then what came, read as it is taken: (worker,
        its message), (None, the wake-up's batch number); nothing when the time ran out.
        ``drain``: every message a worker has sent, else one; ``only``: read only these
        workers' pipes (the others are left as they are). A worker whose pipe closed is given
        as (worker, None), and the round ends there (a new process may take its fd)."""
        for fd, _ in self.poller.poll(max(timeout, 0.0) * 1000.0):
            w = self.by_fd.get(fd)
            if w is None:
                yield None, self.done.recv_bytes()
                continue
            if only is not None and w.index not in only:
                continue
            try:
                while True:
                    yield w, w.conn.recv_bytes()
                    if not (drain and w.conn.poll()):
                        break
            except (EOFError, OSError):
                yield w, None
                return


#: how long a worker asked to close may take before it is killed
CLOSE_GRACE = 1.0


def default_start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def start_context(start_method: str | None) -> Any:
    """The multiprocessing context workers start in (default: ``forkserver`` where available,
    else ``spawn``); a forkserver imports the worker module once, before forking workers."""
    ctx = multiprocessing.get_context(start_method or default_start_method())
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["envfleet.executors.worker"])
    return ctx


#: what a worker's start-up failure means when it re-imported an unguarded main script
UNGUARDED_MAIN = (
    "envfleet's worker processes import your main script again, and its top-level code "
    "builds worker processes itself: put the code that makes the env under\n"
    '    if __name__ == "__main__":\n'
    "(Python's multiprocessing needs this guard with the forkserver and spawn start methods; "
    "see https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-"
    "start-methods)")


def pickle_factories(factories: list[Callable[[], Any]], start: int, stop: int) -> bytes:
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


def exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def start_worker(ctx: Any, index: int, first: int, payload: bytes, *args: Any) -> tuple[Any, Any]:
    """Start worker process ``index`` over the envs from ``first`` (the factories in
    ``payload``; ``args``: ``worker_main``'s core, lock, done and spin_us); returns (the
    process, the parent's end of its pipe)."""
    parent_conn, child_conn = ctx.Pipe(duplex=True)
    process = ctx.Process(target=worker_main, name=f"envfleet-worker-{index}", daemon=True,
                          args=(child_conn, payload, first, index, os.getpid(), *args))
    process.start()
    child_conn.close()
    return process, parent_conn


def kill(process: Any) -> None:
    """SIGKILL ``process`` at once (a stopped or stuck process cannot close itself)."""
    with contextlib.suppress(ProcessLookupError, TypeError):
        os.kill(process.pid, signal.SIGKILL)


def reap(process: Any, conn: Any) -> None:
    """Wait (2 s at most) for a killed worker ``process`` to exit, then release it and its
    pipe ``conn``."""
    process.join(2.0)
    with contextlib.suppress(OSError):
        conn.close()
    with contextlib.suppress(ValueError):
        process.close()


def next_message(conn: Any, timeout: float) -> bytes:
    """The next message on ``conn``, or b"" if its worker dies or stays silent for
    ``timeout`` s (a worker that is starting: not yet polled with the others)."""
    try:
        if conn.poll(timeout):
            return conn.recv_bytes()
    except (EOFError, OSError):
        pass
    return b""


def stopped(pid: int | None) -> bool:
    """Process ``pid`` is stopped (SIGSTOP, or traced); False when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def stop_workers(workers: list[Any], buffers: list[SharedBuffers],
                 closers: list[Any] | None = None) -> None:
    """Stop every worker (ask, then terminate, then kill), reap it, unlink every segment."""
    for w in workers:
        if stopped(w.process.pid):  # (SIGSTOP: it could neither close nor handle SIGTERM)
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(w.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError, ValueError):
            w.conn.send_bytes(CLOSE)
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
