"""``subprocess``: one process per env, actions and results pickled through pipes.

The classic design (Gymnasium's ``AsyncVectorEnv``, SB3's ``SubprocVecEnv``): kept as the
baseline the ``pool`` is measured against, and for envs that must each have their own process.
``PipeTransport`` sends every buffer's rows through the workers' pipes; start-up, timeouts and
closing are the process transport's (``executors.processes``), faults and first-ready batches
the fleet's (``executors.fleet``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.executors.base import DEFAULT_STEP_TIMEOUT
from envfleet.executors.fleet import ShareFleet
from envfleet.executors.infos import InfoParts
from envfleet.executors.processes import ProcessTransport, Worker
from envfleet.executors.shared_memory import BufferLayout


class PipeTransport(ProcessTransport):
    """Worker processes whose buffers all travel through their pipes: each worker keeps its
    own rows, the parent its own batch."""

    def _open_sync(self, ctx: Any) -> None:
        """(The pipes are all the workers share with the parent.)"""

    def _make_buffers(self, layout: BufferLayout) -> dict[str, np.ndarray]:
        return layout.local()  # (the parent's own: the workers' rows come by pipe)

    def _started(self) -> None:
        """(Nothing more to watch than the workers' pipes.)"""

    def _buffers_of(self, w: Worker) -> tuple[BufferLayout, str | None, int]:
        rows = w.stop - w.start
        return BufferLayout.of({name: ((rows, *a.shape[1:]), a.dtype.str)
                                for name, a in self.arrays.items()}), None, 0

    def _piped_names(self) -> list[str]:
        return list(self.arrays)

    def begin_batch(self) -> None:
        """(Every worker answers on its own pipe: no batch is counted.)"""

    def _expect(self, count: int) -> None:
        """(Every worker answers on its own pipe: nothing is counted.)"""

    def _forget(self, w: Worker) -> None:
        """(Nothing of a lost worker is shared.)"""

    def _wait(self, workers: list[Worker], phase: str) -> list[bytes]:
        return self._gather(workers, phase, self.step_timeout)

    def _segment_part(self, w: Worker, reply: bytes) -> tuple[slice, dict] | None:
        return None

    def step(self) -> tuple[InfoParts, InfoParts]:
        """Each worker gets its rows of the actions, answers with its rows of the outputs."""
        for w in self.workers:
            self._send_step(w)
        return self._exchange(self.workers, "step")


class SubprocessVectorEnv(ShareFleet):
    """``num_envs`` Gymnasium envs, each in its own process, talking through pipes; with
    ``batch_size < num_envs``, first-ready ``send`` / ``recv`` as on the pool (the fleet's)."""

    backend = "subprocess"

    def __init__(self, factories: list[Callable[[], Any]], *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, restart_failed: bool = False,
                 batch_size: int | None = None) -> None:
        transport = PipeTransport(factories, len(factories), start_method=start_method)
        super().__init__(transport, len(factories), autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, restart_failed=restart_failed,
                         batch_size=batch_size)
