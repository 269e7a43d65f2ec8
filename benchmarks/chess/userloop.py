"""The user loop: Chess-v0 and its peers stepped as a trainer steps them, a policy's NumPy work
between steps (``random_legal_from_mask`` on the mask each side hands back; python-chess, with
no action labels, draws an index into each board's legal-move list). Only the step is timed:
the policy's cost is left out on every side (the tight loop counts each side's own draw).

``measure_user_loop`` is the bench worker's command for a point whose options say
``"loop": "user"`` (``measure.LOOPS``); ``timed_user_loop`` is the loop itself, which
``compare`` runs too. Each row says what the step cost beyond the plies: the policy's time per
call and the minor page faults inside the step (a fresh mapping of a big output shows there).
"""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.chess.games import NATIVE, build_games, fairness

#: the series label suffix of a user-loop series (``numba`` -> ``numba user``)
USER_SUFFIX = "user"


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@dataclass
class UserLoop:
    """What one timed user loop measured."""

    calls: int
    step_s: float  # seconds inside the steps (``play``)
    policy_s: float  # seconds in the policy, between steps
    minor_faults: int  # minor page faults inside the steps

    def plies_per_s(self, num_envs: int) -> float:
        return num_envs * self.calls / self.step_s


def timed_user_loop(games: Any, mask: Any, rng: np.random.Generator, seconds: float,
                    min_calls: int = 1) -> tuple[UserLoop, Any]:
    """Policy then step, for ``seconds`` of wall time (and ``min_calls`` steps at least); only
    the steps are timed. Returns the loop's figures and the last mask (for the next loop)."""
    policy, play = games.policy, games.play
    calls, step_s, policy_s, faults = 0, 0.0, 0.0, 0
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        actions = policy(mask, rng)
        f0 = _minor_faults()
        t1 = time.perf_counter()
        mask = play(actions)
        t2 = time.perf_counter()
        faults += _minor_faults() - f0
        calls, step_s, policy_s = calls + 1, step_s + t2 - t1, policy_s + t1 - t0
        if t2 - start >= seconds and calls >= min_calls:
            return UserLoop(calls, step_s, policy_s, faults), mask


def measure_user_loop(spec: Any) -> dict[str, Any]:
    """A user-loop point (``spec.options["loop"] == "user"``): build the series' games, reset,
    warm up, then ``spec.repeats`` timed user loops; EnvPool without a thread count at each
    count from 1 to the usable cores, its best kept (as its tight loop)."""
    from dataclasses import replace

    from envfleet.machine import usable_cores

    if spec.backend == "envpool-chess" and spec.threads is None:
        tried = [measure_user_loop(replace(spec, threads=t))
                 for t in range(1, usable_cores() + 1)]
        best = max(tried, key=lambda r: r["steps_per_s"])
        return {**best, "threads_tried": {str(r["threads"]): r["steps_per_s"] for r in tried}}
    threads = spec.threads if spec.backend in NATIVE or spec.backend == "envpool-chess" \
        else None if spec.backend == "pgx" else 1
    result: dict[str, Any] = {"backend": spec.backend, "num_envs": spec.num_envs,
                              "threads": threads, "device": "cpu",
                              **fairness(spec.backend, spec.options)}
    t0 = time.perf_counter()
    games = build_games(spec.backend, spec.num_envs, spec.seed, spec.threads,
                        copy=spec.options.get("copy", True))
    construct_s = time.perf_counter() - t0
    rng = np.random.default_rng(spec.seed)
    t0 = time.perf_counter()
    mask = games.reset()
    reset_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mask = games.play(games.policy(mask, rng))  # compiles (numba, JAX): apart
    first_step_s = time.perf_counter() - t0
    _, mask = timed_user_loop(games, mask, rng, 0.1 * spec.seconds)  # untimed warm-up
    loops = []
    for _ in range(max(1, spec.repeats)):
        loop, mask = timed_user_loop(games, mask, rng, spec.seconds, spec.min_calls)
        loops.append(loop)
    getattr(games, "close", lambda: None)()
    samples = [loop.plies_per_s(spec.num_envs) for loop in loops]
    mid = loops[sorted(range(len(loops)), key=samples.__getitem__)[len(loops) // 2]]
    calls = sum(loop.calls for loop in loops)
    step_s = sum(loop.step_s for loop in loops)
    result.update(
        status="ok",
        steps_per_s=mid.plies_per_s(spec.num_envs),
        steps_per_s_samples=samples,
        seconds=step_s,
        calls=calls,
        steps=spec.num_envs * calls,
        us_per_call=1e6 * step_s / calls,
        us_per_call_median=1e6 * statistics.median(loop.step_s / loop.calls for loop in loops),
        policy_us_per_call=1e6 * sum(loop.policy_s for loop in loops) / calls,
        minor_faults_per_step=sum(loop.minor_faults for loop in loops) / calls,
        construct_s=construct_s,
        warmup_s=reset_s + first_step_s,
        first_reset_s=reset_s,
        first_step_s=first_step_s,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    return result
