"""The MuJoCo engine's physics loop runs with the GIL released: a Python thread keeps running
while one long ``step`` is inside the compiled loop."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("mujoco")

import envfleet


def test_a_python_thread_runs_during_the_compiled_step():
    """A thread that stamps the clock every millisecond (it needs the GIL for each stamp) must
    stamp inside the middle half of a step lasting a few tenths of a second: were the GIL held
    through the loop, no stamp could fall there, whatever the machine's load."""
    env = envfleet.make("HalfCheetah-v5", 2, seed=0, num_threads=1, frame_skip=20_000)
    env.reset()
    actions = np.zeros((2, 6), np.float32)
    env.step(actions)  # compiled / loaded from the cache before the timed step
    stamps: list[float] = []
    running = threading.Event()
    stop = threading.Event()

    def stamp() -> None:
        running.set()
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=stamp, daemon=True)
    thread.start()
    running.wait()
    try:
        start = time.perf_counter()
        env.step(actions)
        end = time.perf_counter()
    finally:
        stop.set()
        thread.join()
        env.close()
    assert end - start > 0.05, "the step is too short to tell"
    quarter = (end - start) / 4
    inside = [s for s in stamps if start + quarter < s < end - quarter]
    assert inside, (f"no Python thread ran during the middle half of a {end - start:.3f} s "
                    f"step: the GIL was held")
