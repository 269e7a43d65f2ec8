"""Alternating rounds in one process, the timing ``atari_ratios.py`` and ``mujoco_ratios.py``
share: each contender is built and called once (compile, warm-up), then every round runs each
one for ``seconds`` in turn; the medians over rounds are kept. On a loaded machine only such
side-by-side ratios mean anything; the CPU time per env-step (all the process's threads) is the
steadier figure there, wall-clock shares following the scheduler.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: one call of a contender: every env steps once
Stepper = Callable[[], Any]


def cycling(step: Callable[[Any], Any], actions: np.ndarray) -> Stepper:
    """A stepper calling ``step`` with ``actions[0]``, ``actions[1]``, ... round and round (a
    fixed batch of random actions per call, drawn before the clock starts)."""
    calls = 0

    def call() -> Any:
        nonlocal calls
        out = step(actions[calls % len(actions)])
        calls += 1
        return out
    return call


def build(makers: dict[str, Callable[[], Stepper]]) -> dict[str, Stepper]:
    """Each contender built and called once; one that cannot run here (a peer not installed)
    is left out, with the reason printed."""
    steppers = {}
    for name, make in makers.items():
        try:
            stepper = make()
            stepper()  # compile / warm up
        except Exception as error:  # any failure: reported, the others run
            print(f"  {name}: skipped ({type(error).__name__}: {error})")
            continue
        steppers[name] = stepper
    return steppers


@dataclass(frozen=True)
class Timing:
    """A contender's medians over the rounds."""

    steps_per_s: float
    cpu_us_per_step: float  # process CPU time (all threads) per env-step


def time_rounds(steppers: dict[str, Stepper], num_envs: int, rounds: int, seconds: float
                ) -> dict[str, Timing]:
    """``rounds`` rounds, each running every stepper for ``seconds`` in turn; each call steps
    ``num_envs`` envs."""
    rates: dict[str, list[float]] = {name: [] for name in steppers}
    cpu: dict[str, list[float]] = {name: [] for name in steppers}
    for _ in range(rounds):
        for name, step in steppers.items():
            count, start, cpu0 = 0, time.perf_counter(), time.process_time()
            while (elapsed := time.perf_counter() - start) < seconds:
                step()
                count += 1
            rates[name].append(count * num_envs / elapsed)
            cpu[name].append((time.process_time() - cpu0) / (count * num_envs) * 1e6)
    return {name: Timing(statistics.median(rates[name]), statistics.median(cpu[name]))
            for name in steppers}


def machine_line() -> str:
    """The CPU, usable cores and load average, to print next to every figure."""
    import os

    from envfleet.bench.report import cpu_model
    from envfleet.machine import usable_cores

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu_model()}, {usable_cores()} usable cores, load average {load}"
