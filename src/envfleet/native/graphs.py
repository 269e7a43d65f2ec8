"""Work replayed from a captured CUDA graph: what makes a GPU step cost one launch, not dozens.

A piece of work (stream operations only, on buffers that never move: a step, a rollout, a row
map) runs normally on its first two calls (the first may compile or allocate lazily) and is
captured into a ``torch.cuda.CUDAGraph`` on the third; later calls replay it with one launch.
The ``cuda`` and ``torch`` engines both keep one ``Replay``. Where graphs are off (no GPU, the
simulator, ``ENVFLEET_CUDA_GRAPHS=0``) or a capture fails (warned), the work just runs.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any


def graphs_wanted() -> bool:
    """Whether GPU work should replay captured graphs (``ENVFLEET_CUDA_GRAPHS=0`` turns it off,
    e.g. to compare)."""
    return os.environ.get("ENVFLEET_CUDA_GRAPHS", "1") != "0"


class Replay:
    """Each key's work: run on its first two calls, then captured once and replayed."""

    def __init__(self, enabled: bool) -> None:
        #: whether work is captured at all (a CUDA device, graphs wanted)
        self.enabled = enabled
        #: per key: calls so far, -1 (capture failed: always run) or the captured graph
        self.entries: dict[Any, Any] = {}

    def run(self, key: Any, work: Callable[[], None]) -> None:
        """Enqueue ``key``'s work, or replay its graph once it has one."""
        done = self.entries.get(key, 0)
        if not isinstance(done, int):
            done.replay()
            return
        work()
        if not self.enabled or done < 0:
            return
        if done == 0:
            self.entries[key] = 1
            return
        import torch

        torch.cuda.current_stream().synchronize()
        try:
            self.entries[key] = capture(work)
        except Exception as error:  # any capture failure: keep running it
            warnings.warn(f"envfleet: {key} is launched, not replayed (CUDA graph capture "
                          f"failed: {error})", RuntimeWarning, stacklevel=3)
            self.entries[key] = -1

    def captured(self, what: Any) -> bool:
        """Whether ``what`` (a key, or the first item of tuple keys) replays a graph."""
        return any(not isinstance(v, int) for k, v in self.entries.items()
                   if k == what or (isinstance(k, tuple) and k[0] == what))

    def forget(self, key: Any) -> None:
        """Drop ``key``'s graph (or count)."""
        self.entries.pop(key, None)

    def clear(self) -> None:
        self.entries = {}


def capture(work: Callable[[], None]) -> Any:
    """``work``'s stream operations captured into a ``torch.cuda.CUDAGraph`` (not run)."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        work()
    return graph
