"""``subprocess``: one process per env, actions and results pickled through pipes.

The classic design (Gymnasium's ``AsyncVectorEnv``, SB3's ``SubprocVecEnv``): kept as the
baseline the ``pool`` is measured against, and for envs that must each have their own process.
Start-up, timeouts and closing are the pool's (``executors.processes``), faults the core's
(``executors.fleet``); ``PipeBatch`` sends every buffer's rows through the pipes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium.vector import AutoresetMode

from envfleet.executors.base import DEFAULT_STEP_TIMEOUT
from envfleet.executors.processes import ProcessVectorEnv, Worker
from envfleet.executors.shared_memory import BufferLayout


class PipeBatch:
    """The batch hooks of a ``ProcessVectorEnv`` whose buffers all travel through the
    workers' pipes: each worker keeps its own rows, the parent its own batch."""

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


class SubprocessVectorEnv(PipeBatch, ProcessVectorEnv):
    """``num_envs`` Gymnasium envs, each in its own process, talking through pipes; with
    ``batch_size < num_envs``, first-ready ``send`` / ``recv`` as on the pool (the core's)."""

    backend = "subprocess"

    def __init__(self, factories: list[Callable[[], Any]], *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, restart_failed: bool = False,
                 batch_size: int | None = None) -> None:
        super().__init__(factories, len(factories), autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, start_method=start_method,
                         restart_failed=restart_failed, batch_size=batch_size)
