"""What makes Chess-v0's step slower after a policy: the time of ``env.step`` (512 boards,
``copy=True``, one thread by default: no threads to wake) after different work between steps,
in alternating rounds in one process. Work that passes time without touching memory (a
Python spin, a numba arithmetic loop, a sleep) against work that touches memory without
passing much time (streaming 3 MB), and the bench's own policy on the mask.

    python -m benchmarks.scripts.chess_step_decay [--threads 1] [--seconds 0.3] [--rounds 4]

Measured on the 2-vCPU AMD EPYC VM (load ~2, other engineers' work), 1 thread: the step's
median grew with the time since the last step whatever ran in between (255 us back to back;
264-277 us after 0.1 ms, 343-384 after 1 ms, 483-561 after 3.6 ms of a spin, an arithmetic
loop or a sleep), while streaming 3 MB of other memory cost +1 us: the step's working set is
evicted by other work on the machine while the caller's policy runs, not by the policy's own
memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from numba import njit

from benchmarks.chess import build_games, random_legal_from_mask


@njit(nogil=True)
def _arithmetic(n: int) -> int:
    """``n`` turns of a linear congruential generator: time passes, no memory is touched."""
    x = 1
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFF
    return x


def _python_spin(seconds: float) -> Callable[[], None]:
    def spin() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return spin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    from envfleet.bench.report import cpu_model

    games = build_games("numba", 512, 0, args.threads)
    env = games.env.unwrapped
    mask = [games.reset()]
    rng = np.random.default_rng(0)
    _arithmetic(10)
    t0 = time.perf_counter()
    _arithmetic(10_000_000)
    per_turn = (time.perf_counter() - t0) / 10_000_000
    other = np.zeros(3_000_000 // 8)
    between: dict[str, Callable[[], object]] = {
        "nothing": lambda: None, "stream 3 MB": other.sum,
        "policy on the mask": lambda: random_legal_from_mask(mask[0], rng)}
    for ms in (0.1, 1.0, 3.6):
        between[f"python spin {ms} ms"] = _python_spin(ms / 1e3)
        between[f"numba arithmetic {ms} ms"] = lambda n=int(ms / 1e3 / per_turn): _arithmetic(n)
        between[f"sleep {ms} ms"] = lambda s=ms / 1e3: time.sleep(s)
    medians: dict[str, list[float]] = {name: [] for name in between}
    for _ in range(args.rounds):
        for name, work in between.items():
            times = []
            end = time.perf_counter() + args.seconds
            while time.perf_counter() < end:
                actions = env.random_legal_actions()
                work()
                t0 = time.perf_counter()
                mask[0] = games.play(actions)
                times.append(time.perf_counter() - t0)
            medians[name].append(statistics.median(times))
    print(f"{cpu_model()}, {args.threads} thread(s), load {os.getloadavg()}")
    for name, values in medians.items():
        print(f"{name:28s} step median {1e6 * statistics.median(values):7.1f} us "
              f"(rounds {1e6 * min(values):.0f}-{1e6 * max(values):.0f})")


if __name__ == "__main__":
    main()
