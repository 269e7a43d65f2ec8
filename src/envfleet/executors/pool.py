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
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.executors import worker as protocol
from envfleet.executors.base import DEFAULT_STEP_TIMEOUT, failure_error
from envfleet.executors.first_ready import FirstReady
from envfleet.executors.processes import ProcessVectorEnv
from envfleet.executors.shared_batch import SharedBatch
from envfleet.machine import usable_cores

#: how long a worker polls for the next batch before sleeping (``worker.CommandWaiter``):
#: measured on this project's 2-core VM, CartPole-v1 at 64 envs, pool / SyncVectorEnv went from
#: 1.18x (0) to 1.57x (200) in one interleaved run (/tmp-style A/B, 9 rounds)
DEFAULT_SPIN_US = 200.0


class PoolVectorEnv(FirstReady, SharedBatch, ProcessVectorEnv):
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
        if batch_size is None:
            batch_size = num_envs
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) \
                or not 1 <= batch_size <= num_envs:
            raise ValueError(f"batch_size must be an int with 1 <= batch_size <= num_envs="
                             f"{num_envs}, got {batch_size!r}")
        self.batch_size = int(batch_size)
        if num_workers is None:
            num_workers = usable_cores()
            if self.batch_size < num_envs:  # async: small shares isolate slow envs
                num_workers = 4 * num_workers
        super().__init__(factories, num_workers, autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, start_method=start_method,
                         pin_workers=pin_workers, restart_failed=restart_failed,
                         spin_us=spin_us)
        self._init_async()

    # --- first-ready async (EnvPool's send / recv) ----------------------------------------

    def _init_async(self) -> None:
        super()._init_async()
        # per worker: envs in flight, and when it last reported (or got work while idle):
        # a worker with envs in flight that stays silent for step_timeout is hung
        self._flying = np.zeros(self.num_workers, dtype=np.int64)
        self._heard = np.zeros(self.num_workers)

    def _drop_in_flight(self) -> None:
        self._flying[:] = 0

    def _send_to_owners(self, ids: np.ndarray) -> None:
        """One message per owning worker with its envs among ``ids``."""
        order = np.argsort(self._owner[ids], kind="stable")
        by_worker = self._owner[ids][order]
        cuts = np.flatnonzero(np.diff(by_worker)) + 1
        for part in np.split(ids[order], cuts):
            w = self._workers[int(self._owner[part[0]])]
            self._in_flight[part] = True
            if not self._flying[w.index]:
                self._heard[w.index] = time.monotonic()
            self._flying[w.index] += len(part)
            for e in part.tolist():
                self._ready.pop(e, None)
                self._ready_infos.pop(e, None)
            message = protocol.SEND + part.astype("<i8").tobytes() if not \
                self._piped_actions else protocol.SEND_VALUES + pickle.dumps(
                    (part.tolist(), {k: self.arrays[k][part].tolist()
                                     for k in self._piped_actions}))
            if not self._send(w, message, "step"):
                self._async_lost()

    def _collect(self, count: int, phase: str) -> None:
        """Sleep until ``count`` more envs have reported (or a fault: raised)."""
        poller, by_fd = self._poller, self._by_fd
        done_fd = self._done.fileno()
        while count > 0:
            count -= self._check_hung(phase)
            if count <= 0:
                break
            busy = self._flying > 0
            remaining = self._heard[busy].min() + self.step_timeout - time.monotonic()
            for fd, _ in poller.poll(max(remaining, 0.0) * 1000.0):
                if fd == done_fd:
                    continue  # (not used in async mode)
                w = by_fd[fd]
                try:
                    # every report of this worker that has arrived (the pipe keeps them apart)
                    while True:
                        count -= self._report(w.conn.recv_bytes())
                        if not w.conn.poll():
                            break
                except (EOFError, OSError):
                    self._died(w, phase)
                    count -= self._async_lost()
                    break  # the new worker may have the old one's fd: poll again

    def _busy_since(self, index: int) -> float | None:
        return float(self._heard[index]) if self._flying[index] > 0 else None

    def _share_lost(self, index: int) -> None:
        self._flying[index] = 0

    def _report(self, message: bytes) -> int:
        kind = message[:1]
        reports: tuple = ()
        if kind == protocol.DONE:
            e = int.from_bytes(message[1:9], "little", signed=True)
        elif kind == protocol.DONE_INFO:
            e, info, final, values = pickle.loads(message[1:])
            reports = ((e, info, final),)
            for name, value in (values or {}).items():  # its object leaves' values
                self.arrays[name][e] = value
        elif kind == protocol.ERROR:
            index, what, error_type, text, tb = pickle.loads(message[1:])
            self._in_flight[index] = False
            self._flying[self._owner[index]] -= 1
            raise failure_error(index, what, error_type, text, tb)
        else:
            raise AssertionError(f"unexpected report {kind!r}")
        w = self._owner[e]
        self._flying[w] -= 1
        self._heard[w] = time.monotonic()
        self._arrived(e, reports)
        return 1

