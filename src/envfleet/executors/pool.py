"""``pool``: W worker processes, each stepping a contiguous share of the envs in a loop.

Observations, rewards and flags are written by the workers straight into shared-memory batch
buffers, and the actions are read from them: per batch, the parent writes the actions, sends
each worker one byte and sleeps until each answers with one byte (``b"k"``; only non-empty
infos are pickled). W defaults to the usable cores, never more than ``num_envs``; any
``num_envs`` works (shares differ by one env at most). ``pin_workers=True`` keeps worker w on
usable core ``w mod cores`` (faster on an otherwise idle machine: no migrations; slower when
other processes want those cores, hence off by default).

First-ready async (EnvPool's ``send`` / ``recv``): with ``batch_size`` B < N, ``send(actions,
env_ids)`` writes those envs' actions into the shared buffers and sends each owning worker one
message with their ids; a worker keeps a queue of envs to step, steps them one at a time and
reports each env on its pipe as soon as it has written its row (8 bytes, or its pickled infos),
so a fast env is never held back by a slow env's batch. ``recv()`` sleeps in ``poll(2)`` until
B envs have reported and returns the B that have waited longest (a FIFO: no env starves), with
``info["env_id"]``. A worker still runs its own envs one after another, so a slow env delays
the envs that share its worker: async pools therefore default to small shares
(``num_workers = min(num_envs, 4 * cores)``). ``reset()`` returns every env's observation as
usual and also queues them for ``recv()`` (EnvPool's async reset: ``reset(); recv(); send()``
works, and so does ``reset(); send(all)``); ``step()`` refuses to run when B < N.

The shared-memory batch (``SharedMemoryTransport``): one segment holds the batch buffers; the
parent writes the actions, sends each worker one byte and sleeps until the last worker to
finish wakes it. Each worker counts itself finished in the shared ``sync`` counter (under a
lock; its ``finished`` flag says whether it also sent a result, so the parent reads only those
pipes) and the last one writes the batch's number to the parent's one ``done`` pipe: a batch
without infos costs one byte each way per worker and one wake-up. A worker whose step infos
keep one layout writes them into an info segment of its own (``worker.InfoPublisher``), which
the parent attaches by name and merges by row slices (``infos.ConcatPlan``). A worker that does
not count itself finished within ``step_timeout`` is the one that failed, whether it was
running an env or never started; a lost worker is counted out of the batch (``_forget``).

Which ``step`` runs: ``ExecutorVectorEnv.step`` (base.py) -> ``ShareFleet._step_envs``
(fleet.py) -> ``SharedMemoryTransport.step`` (here).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.executors import worker as protocol
from envfleet.executors.base import DEFAULT_STEP_TIMEOUT, EnvWorkerError
from envfleet.executors.fleet import ShareFleet, check_batch_size
from envfleet.executors.infos import ConcatPlan, InfoParts, attach_infos, unlink_info_segments
from envfleet.executors.processes import ProcessTransport, Worker
from envfleet.executors.shared_memory import BufferLayout, SharedBuffers
from envfleet.machine import usable_cores

#: room for the name of a worker's info segment (``worker.InfoPublisher``)
INFO_NAME_BYTES = 64


class SharedMemoryTransport(ProcessTransport):
    """Worker processes over one shared-memory batch (see the module doc)."""

    def _open_sync(self, ctx: Any) -> None:
        """The lock of the batch counter and the parent's wake-up pipe."""
        self._lock = ctx.Lock()  # a named semaphore: unlinked when the last reference goes
        self.closers.append(self._lock)
        self._done, self._done_w = ctx.Pipe(duplex=False)
        self.closers += [self._done, self._done_w]  # (the write end: for restarts)
        self._info_state = None
        # per worker: (its info segment's number, the segment, its tree of arrays)
        self._info_trees: dict[int, tuple[int, SharedBuffers, dict]] = {}
        self._info_plan: tuple[tuple[int, ...], ConcatPlan | None] | None = None

    def _make_buffers(self, layout: BufferLayout) -> dict[str, np.ndarray]:
        """The batch buffers in one segment, with the batch's bookkeeping."""
        fields = {name: (shape, dtype) for name, shape, dtype, _ in layout.fields}
        fields["current"] = ((self.num_workers,), np.int64)
        # [workers finished, workers expected, batch number]
        fields["sync"] = ((3,), np.int64)
        fields["finished"] = ((self.num_workers,), np.int64)  # this batch, per worker
        # per worker: which of its info segments holds this step's infos (0: none), and
        # that segment's name (worker.InfoPublisher)
        fields["infostate"] = ((self.num_workers,), np.int64)
        fields["infonames"] = ((self.num_workers, INFO_NAME_BYTES), np.uint8)
        self._layout = BufferLayout.of(fields)
        shared = SharedBuffers.create(self._layout)
        self.buffers.append(shared)
        self._current = shared.arrays["current"]
        self._sync = shared.arrays["sync"]
        self._finished = shared.arrays["finished"]
        # (read every batch: a memoryview's items are cheaper to read than NumPy's)
        self._info_state = memoryview(shared.arrays["infostate"]).cast("B").cast("q")
        self._info_names = shared.arrays["infonames"]
        return shared.arrays

    def _started(self) -> None:
        self._pipes.watch_done(self._done)

    def _buffers_of(self, w: Worker) -> tuple[BufferLayout, str | None, int]:
        return self._layout, self.buffers[0].name, w.start

    def _piped_names(self) -> list[str]:
        return self._layout.objects  # (the object leaves: Text, Graph...)

    def _expect(self, count: int) -> None:
        self._sync[1] = count

    def begin_batch(self) -> None:
        self._sync[0] = 0
        self._sync[2] += 1
        self._finished[:] = 0

    def _forget(self, w: Worker) -> None:
        """Count lost ``w`` out of this batch unless it already counted itself; drop its info
        segments."""
        with self._counter_lock():
            if not self._finished[w.index]:
                self._sync[1] -= 1
        self._drop_infos(w.index, lost=True)

    def _wait(self, workers: list[Worker], phase: str) -> list[bytes]:
        return self._wait_done(workers, phase)

    def _segment_part(self, w: Worker, reply: bytes) -> tuple[slice, dict] | None:
        state = self._info_state
        if state is not None and state[w.index] and reply[:1] != protocol.LOST:
            return (slice(w.start, w.stop), self._shared_infos(w))
        return None

    def _infos(self, workers: list[Worker], replies: list[bytes]) -> tuple[InfoParts, InfoParts]:
        infos, finals = super()._infos(workers, replies)
        state = self._info_state
        if len(infos) == len(self.workers) and all(
                state is not None and state[w.index] and reply[:1] == protocol.OK
                for w, reply in zip(workers, replies, strict=True)):
            infos.plan = self._plan(infos)  # (every worker's infos in its segment, only)
        return infos, finals

    def shutdown(self) -> None:
        self._info_plan = None  # (it holds views of the info segments)
        super().shutdown()

    def _plan(self, infos: InfoParts) -> ConcatPlan | None:
        """The merge plan of the workers' info segments (made again when one changes)."""
        key = tuple(self._info_state[w.index] for w in self.workers)
        if self._info_plan is None or self._info_plan[0] != key:
            self._info_plan = (key, ConcatPlan.of([tree for _, tree in infos]))
        return self._info_plan[1]

    def _shared_infos(self, w: Worker) -> dict:
        """The tree of worker ``w``'s step infos in its info segment (attached on first sight
        of a new segment: the worker writes its name before its number)."""
        number = self._info_state[w.index]
        known = self._info_trees.get(w.index)
        if known is None or known[0] != number:
            self._drop_infos(w.index)
            name = bytes(self._info_names[w.index]).rstrip(b"\0").decode()
            shared, tree = attach_infos(name, w.stop - w.start)
            self.buffers.append(shared)
            known = self._info_trees[w.index] = (number, shared, tree)
        return known[2]

    def _drop_infos(self, index: int, lost: bool = False) -> None:
        """Unmap and unlink worker ``index``'s info segment, if any; when the worker is
        ``lost``, also the one it may have made last without the parent seeing it used."""
        self._info_plan = None  # (it holds the segments' arrays; a new worker counts from 1)
        known = self._info_trees.pop(index, None)
        if known is not None:
            shared = known[1]
            del known
            shared.close()
            shared.unlink()
            self.buffers.remove(shared)
        if lost and self._info_state is not None:
            unlink_info_segments(self._info_names[index:index + 1])
            self._info_state[index] = 0

    def step(self) -> tuple[InfoParts, InfoParts]:
        """Each worker gets one byte (its actions are in the segment); the last to finish
        wakes the parent (``_wait_done``)."""
        self._sync[1] = len(self.workers)
        for w in self.workers:
            self._send_step(w)
        return self._exchange(self.workers, "step")

    def _wait_done(self, workers: list[Worker], phase: str) -> list[bytes]:
        """Shared memory: sleep until the last worker's ``done`` message for this batch (or a
        fault); the results of workers with something to say, ``b"k"`` for the others
        (``LOST`` for lost ones). A worker that does not finish within ``step_timeout`` is the
        one that failed, whether it was running an env or never started (stopped, stuck)."""
        replies = {w.index: protocol.OK for w in workers}
        said: set[int] = set()
        batch = int(self._sync[2])
        deadline = time.monotonic() + self.step_timeout
        finished = False
        # lost workers were counted out: the others may all have finished already, and the
        # last of them saw nothing left to wake the parent for
        while not finished and not (self.fleet.lost and self._batch_complete()):
            for w, message in self._poll(deadline - time.monotonic(), phase):
                if w is None:  # (a late wake-up of an earlier batch carries its number)
                    finished |= int.from_bytes(message, "little") == batch
                elif message is not None and not self._took(w, message, replies, said):
                    self._died(w, phase)  # (anything but its one result is its death)
                    break  # a worker was restarted (its fd may be reused): poll again
            if not finished and time.monotonic() >= deadline:
                for w in self._unfinished(workers):
                    self.fleet.failed(w, self.fleet.silence(), phase)
                deadline = time.monotonic() + self.step_timeout
        # results were written before their workers counted themselves finished (and said so)
        for w in workers:
            if self._finished[w.index] == protocol.FINISHED_SENT and w.index not in said \
                    and w.index not in self.fleet.lost:
                try:
                    self._took(w, w.conn.recv_bytes(), replies, said)
                except (EOFError, OSError):
                    self._died(w, phase)
        for index in self.fleet.lost:
            replies[index] = protocol.LOST
        ordered = [replies[w.index] for w in workers]
        self._raise_errors(ordered)
        return ordered

    def _unfinished(self, workers: list[Worker]) -> list[Worker]:
        """The ``workers`` (not lost) that have not counted themselves finished this batch."""
        with self._counter_lock():
            return [w for w in workers
                    if w.index not in self.fleet.lost and not self._finished[w.index]]

    def _batch_complete(self) -> bool:
        """Every worker still expected has finished (after lost ones were counted out)."""
        with self._counter_lock():
            return bool(self._sync[0] >= self._sync[1])

    @contextlib.contextmanager
    def _counter_lock(self) -> Iterator[None]:
        """The lock of the shared batch counter, never waited on forever: a worker killed
        while holding it would hold it for good, and the pool cannot go on."""
        if not self._lock.acquire(timeout=self.step_timeout):
            why = (f"the batch counter's lock was not released within step_timeout="
                   f"{self.step_timeout:g} s (a worker died holding it)")
            self.fleet.break_down(why)
            raise EnvWorkerError(why)
        try:
            yield
        finally:
            self._lock.release()

    def _took(self, w: Worker, message: bytes, replies: dict[int, bytes],
              said: set[int]) -> bool:
        """Take ``message`` as ``w``'s one result of this batch (False: ``w`` owes none, or
        sent it already)."""
        if w.index in self.fleet.lost:
            return True
        if w.index not in replies or w.index in said:
            return False
        replies[w.index] = message
        said.add(w.index)
        return True


#: how long a worker polls for the next batch before sleeping (``worker.CommandWaiter``):
#: measured on this project's 2-core VM, CartPole-v1 at 64 envs, pool / SyncVectorEnv went from
#: 1.18x (0) to 1.57x (200) in one interleaved run (/tmp-style A/B, 9 rounds)
DEFAULT_SPIN_US = 200.0


class PoolVectorEnv(ShareFleet):
    """``num_envs`` Gymnasium envs over ``num_workers`` processes and shared memory."""

    backend = "pool"

    def __init__(self, factories: list[Callable[[], Any]], num_workers: int | None = None, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, pin_workers: bool = False,
                 batch_size: int | None = None, restart_failed: bool = False,
                 spin_us: float = DEFAULT_SPIN_US) -> None:
        num_envs = len(factories)
        if num_workers is None:
            num_workers = usable_cores()
            if check_batch_size(batch_size, num_envs) < num_envs:  # async: small shares
                num_workers = 4 * num_workers  # isolate slow envs
        transport = SharedMemoryTransport(factories, num_workers, start_method=start_method,
                                          pin_workers=pin_workers, spin_us=spin_us)
        super().__init__(transport, num_envs, autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, restart_failed=restart_failed,
                         batch_size=batch_size)
