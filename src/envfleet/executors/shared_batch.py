"""The pool's shared-memory batch (``SharedBatch``, mixed into ``PoolVectorEnv`` over
``processes.ProcessVectorEnv``): one segment holds the batch buffers; the parent writes the
actions, sends each worker one byte and sleeps until the last worker to finish wakes it.

Each worker counts itself finished in the shared ``sync`` counter (under a lock; its
``finished`` flag says whether it also sent a result, so the parent reads only those pipes) and
the last one writes the batch's number to the parent's one ``done`` pipe: a batch without infos
costs one byte each way per worker and one wake-up. A worker whose step infos keep one layout
writes them into an info segment of its own (``worker.InfoPublisher``), which the parent
attaches by name and merges by row slices (``infos.ConcatPlan``). A worker that does not count
itself finished within ``step_timeout`` is the one that failed, whether it was running an env
or never started; a lost worker is counted out of the batch (``_forget``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from envfleet.executors import worker as protocol
from envfleet.executors.base import EnvWorkerError
from envfleet.executors.infos import ConcatPlan, InfoParts, attach_infos, unlink_info_segments
from envfleet.executors.shared_memory import BufferLayout, SharedBuffers

if TYPE_CHECKING:
    from envfleet.executors.processes import Worker

#: room for the name of a worker's info segment (``worker.InfoPublisher``)
INFO_NAME_BYTES = 64


class SharedBatch:
    """The shared-memory hooks of a ``ProcessVectorEnv`` (see the module doc)."""

    def _open_sync(self, ctx: Any) -> None:
        """The lock of the batch counter and the parent's wake-up pipe."""
        self._lock = ctx.Lock()  # a named semaphore: unlinked when the last reference goes
        self._closers.append(self._lock)
        self._done, self._done_w = ctx.Pipe(duplex=False)
        self._closers += [self._done, self._done_w]  # (the write end: for restarts)
        self._info_state = None
        # per worker: (its info segment's number, the segment, its tree of arrays)
        self._info_trees: dict[int, tuple[int, SharedBuffers, dict]] = {}
        self._info_plan: tuple[tuple[int, ...], ConcatPlan | None] | None = None

    def _make_buffers(self, layout: BufferLayout) -> None:
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
        self._buffers.append(shared)
        self._bind(shared.arrays)
        self._current = shared.arrays["current"]
        self._sync = shared.arrays["sync"]
        self._finished = shared.arrays["finished"]
        # (read every batch: a memoryview's items are cheaper to read than NumPy's)
        self._info_state = memoryview(shared.arrays["infostate"]).cast("B").cast("q")
        self._info_names = shared.arrays["infonames"]

    def _started(self) -> None:
        self._pipes.watch_done(self._done)

    def _buffers_of(self, w: Worker) -> tuple[BufferLayout, str | None, int]:
        return self._layout, self._buffers[0].name, w.start

    def _piped_names(self) -> list[str]:
        return self._layout.objects  # (the object leaves: Text, Graph...)

    def _expect(self, count: int) -> None:
        self._sync[1] = count

    def _begin_batch(self) -> None:
        super()._begin_batch()
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
        if len(infos) == len(self._workers) and all(
                state is not None and state[w.index] and reply[:1] == protocol.OK
                for w, reply in zip(workers, replies, strict=True)):
            infos.plan = self._plan(infos)  # (every worker's infos in its segment, only)
        return infos, finals

    def _shutdown(self) -> None:
        self._info_plan = None  # (it holds views of the info segments)
        super()._shutdown()

    def _plan(self, infos: InfoParts) -> ConcatPlan | None:
        """The merge plan of the workers' info segments (made again when one changes)."""
        key = tuple(self._info_state[w.index] for w in self._workers)
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
            self._buffers.append(shared)
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
            self._buffers.remove(shared)
        if lost and self._info_state is not None:
            unlink_info_segments(self._info_names[index:index + 1])
            self._info_state[index] = 0

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
        while not finished and not (self._lost and self._batch_complete()):
            for w, message in self._poll(deadline - time.monotonic(), phase):
                if w is None:  # (a late wake-up of an earlier batch carries its number)
                    finished |= int.from_bytes(message, "little") == batch
                elif message is not None and not self._took(w, message, replies, said):
                    self._died(w, phase)  # (anything but its one result is its death)
                    break  # a worker was restarted (its fd may be reused): poll again
            if not finished and time.monotonic() >= deadline:
                for w in self._unfinished(workers):
                    self._failed(w, self._silence(), phase)
                deadline = time.monotonic() + self.step_timeout
        # results were written before their workers counted themselves finished (and said so)
        for w in workers:
            if self._finished[w.index] == protocol.FINISHED_SENT and w.index not in said \
                    and w.index not in self._lost:
                try:
                    self._took(w, w.conn.recv_bytes(), replies, said)
                except (EOFError, OSError):
                    self._died(w, phase)
        for index in self._lost:
            replies[index] = protocol.LOST
        ordered = [replies[w.index] for w in workers]
        self._raise_errors(ordered)
        return ordered

    def _unfinished(self, workers: list[Worker]) -> list[Worker]:
        """The ``workers`` (not lost) that have not counted themselves finished this batch."""
        with self._counter_lock():
            return [w for w in workers
                    if w.index not in self._lost and not self._finished[w.index]]

    def _batch_complete(self) -> bool:
        """Every worker still expected has finished (after lost ones were counted out)."""
        with self._counter_lock():
            return bool(self._sync[0] >= self._sync[1])

    @contextlib.contextmanager
    def _counter_lock(self) -> Iterator[None]:
        """The lock of the shared batch counter, never waited on forever: a worker killed
        while holding it would hold it for good, and the pool cannot go on."""
        if not self._lock.acquire(timeout=self.step_timeout):
            self._broken = (f"the batch counter's lock was not released within step_timeout="
                            f"{self.step_timeout:g} s (a worker died holding it)")
            self._shutdown()
            raise EnvWorkerError(self._broken)
        try:
            yield
        finally:
            self._lock.release()

    def _took(self, w: Worker, message: bytes, replies: dict[int, bytes],
              said: set[int]) -> bool:
        """Take ``message`` as ``w``'s one result of this batch (False: ``w`` owes none, or
        sent it already)."""
        if w.index in self._lost:
            return True
        if w.index not in replies or w.index in said:
            return False
        replies[w.index] = message
        said.add(w.index)
        return True
