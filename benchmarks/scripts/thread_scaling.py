"""Strong scaling of native CartPole-v1 on numba threads, next to two controls.

For each batch size, steps on 1 thread and on N threads alternate (wall time per step); the
controls are prange loops of the same work per element on every thread count: independent
FMA chains (throughput-bound arithmetic) and libm ``sin`` + ``cos``. A loaded machine shows as
controls far below N: read the CartPole column against them. Prints the median and the best
(least disturbed) speed-up over rounds, and the CPU time the work takes on 1 thread over
what it takes on all threads together (1.0: the threads' work costs no more than on one)::

    PYTHONPATH=src python -m benchmarks.scripts.thread_scaling [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import statistics
import time
from collections.abc import Callable

import numba
import numpy as np
from numba import njit, prange

import envfleet
from envfleet.native.driver import NEXT_STEP, make_driver
from envfleet.native.numba_backend import _RANGE_JIT

_libc = ctypes.CDLL(None)
_clock_gettime = _libc.clock_gettime
_clock_gettime.argtypes = [ctypes.c_int, ctypes.c_void_p]
_clock_gettime.restype = ctypes.c_int
_THREAD_CPU = 3  # CLOCK_THREAD_CPUTIME_ID


@njit(parallel=True, nogil=True)
def fma_wide(out: np.ndarray, iters: int) -> None:
    """8 independent multiply-add chains per element: arithmetic throughput."""
    for i in prange(out.size):
        a = float(i)
        b, c, d, e, f, g, h = a + 1, a + 2, a + 3, a + 4, a + 5, a + 6, a + 7
        for _ in range(iters):
            a = a * 1.0000001 + 1e-9
            b = b * 1.0000001 + 1e-9
            c = c * 1.0000001 + 1e-9
            d = d * 1.0000001 + 1e-9
            e = e * 1.0000001 + 1e-9
            f = f * 1.0000001 + 1e-9
            g = g * 1.0000001 + 1e-9
            h = h * 1.0000001 + 1e-9
        out[i] = a + b + c + d + e + f + g + h


@njit(parallel=True, nogil=True)
def sin_cos(theta: np.ndarray, out: np.ndarray) -> None:
    """libm sin + cos of each element (CartPole's trig, alone)."""
    for i in prange(theta.size):
        out[i] = math.sin(theta[i]) + math.cos(theta[i])


def chunk_timed_step(engine) -> Callable[[int], np.ndarray]:
    """``run(chunks)``: one CartPole step of ``engine`` as the numba backend's parallel kernel
    runs it (begin + advance per chunk, chunks over the threads), each chunk's thread CPU time
    taken inside the worker thread; returns (ns of work per chunk, thread id per chunk).
    The sum over chunks is the work without the barriers' waits and spins."""
    params = engine.kernel_params
    _, begin, advance, _, _ = make_driver(engine.spec, NEXT_STEP, (), type(params))

    @njit(**_RANGE_JIT)
    def step_range(start, stop, state, actions, rng, max_steps, pending, obs, rewards,
                   terminated, truncated):
        for i in range(start, stop):
            begin(i, state, params, rng, pending, obs, rewards, terminated, truncated)
            advance(i, state, params, actions, rng, max_steps, pending, obs, rewards,
                    terminated, truncated)

    @njit(parallel=True, nogil=True)
    def step(chunks, n, state, actions, rng, max_steps, pending, obs, rewards, terminated,
             truncated, clock):
        size = (n + chunks - 1) // chunks
        for c in prange(chunks):
            _clock_gettime(_THREAD_CPU, clock[c, 0:2].ctypes.data)
            step_range(c * size, min(n, (c + 1) * size), state, actions, rng, max_steps,
                       pending, obs, rewards, terminated, truncated)
            _clock_gettime(_THREAD_CPU, clock[c, 2:4].ctypes.data)
            clock[c, 4] = numba.get_thread_id()

    e = engine

    def run(chunks: int, actions: np.ndarray) -> np.ndarray:
        clock = np.zeros((chunks, 5), np.int64)
        step(chunks, e.num_envs, e.state, actions, e.rng, e.max_episode_steps, e.pending,
             e._obs_rows, e.rewards, e.terminated, e.truncated, clock)
        work = (clock[:, 2] - clock[:, 0]) * 10**9 + clock[:, 3] - clock[:, 1]
        return np.stack([work, clock[:, 4]])

    return run


def work_costs(n: int, threads: int, rounds: int, calls: int = 20) -> dict[str, float]:
    """CartPole at ``n`` envs: work ns per env-step on 1 thread and on ``threads`` threads
    (thread CPU time inside the workers), and the busiest thread's share of the work."""
    env = envfleet.make("CartPole-v1", n, backend="numba", num_threads=1, seed=0, copy=False)
    env.reset()
    run = chunk_timed_step(env.engine)
    actions = np.random.default_rng(0).integers(0, 2, n)
    one, many, busiest = [], [], []
    for r in range(rounds + 1):
        for t, out in ((1, one), (threads, many)):
            numba.set_num_threads(t)
            work = np.zeros(t)
            for _ in range(calls):
                w = run(4 * threads, actions)
                np.add.at(work, w[1], w[0])
            if r:  # round 0: compile and warm up
                out.append(work.sum() / (calls * n))
                if t == threads:
                    busiest.append(work.max() / work.sum())
    return {"1 thread": statistics.median(one), f"{threads} threads": statistics.median(many),
            "least ratio": min(many) / min(one), "busiest share": statistics.median(busiest)}


def timed(f: Callable[[], object], threads: int, calls: int) -> tuple[float, float]:
    """(wall, CPU) seconds per call of ``f`` on ``threads`` numba threads; CPU time is the
    process's, every thread's together."""
    numba.set_num_threads(threads)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(calls):
        f()
    return (time.perf_counter() - t0) / calls, (time.process_time() - c0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sizes", default="4096,16384,65536,262144")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    jobs: dict[str, tuple[Callable[[int], Callable[[], object]], int]] = {}
    for n in sizes:
        actions = rng.integers(0, 2, n)
        envs = {t: envfleet.make("CartPole-v1", n, backend="numba", num_threads=t, seed=0,
                                 copy=False) for t in (1, args.threads)}
        for env in envs.values():
            env.reset()
        jobs[f"CartPole {n}"] = ((lambda t, envs=envs, a=actions: lambda: envs[t].step(a)),
                                 max(2, 2**20 // n))
    theta = rng.uniform(-0.2, 0.2, 65536)
    trig_out = np.empty_like(theta)
    fma_out = np.empty(16384)
    jobs["control: sin+cos 65536"] = (lambda t: lambda: sin_cos(theta, trig_out), 16)
    jobs["control: FMA x8 16384"] = (lambda t: lambda: fma_wide(fma_out, 200), 4)
    speedups: dict[str, list[float]] = {name: [] for name in jobs}
    #: CPU time on 1 thread / CPU time of all threads: 1.0 when the split work costs what it
    #: costs on one thread (nothing shared slows it); the wall-time gap is then waiting
    cpu_ratios: dict[str, list[float]] = {name: [] for name in jobs}
    for make_call, calls in jobs.values():  # compile, warm up
        for t in (1, args.threads):
            timed(make_call(t), t, calls)
    for _ in range(args.rounds):
        for name, (make_call, calls) in jobs.items():
            one = timed(make_call(1), 1, calls)
            many = timed(make_call(args.threads), args.threads, calls)
            speedups[name].append(one[0] / many[0])
            cpu_ratios[name].append(one[1] / many[1])
    print("CartPole work per env-step (thread CPU time inside the workers, no waits), "
          f"ns: 1 thread vs {args.threads} threads")
    for n in sizes:
        w = work_costs(n, args.threads, max(3, args.rounds // 3))
        print(f"  {n:7d} envs  {w['1 thread']:6.2f} vs {w[f'{args.threads} threads']:6.2f}  "
              f"(x{w[f'{args.threads} threads'] / w['1 thread']:4.2f} median, "
              f"x{w['least ratio']:4.2f} least; busiest thread's share "
              f"{w['busiest share']:4.2f})")
    print(f"speed-up on {args.threads} threads over 1 (wall time, {args.rounds} rounds); "
          f"threading layer {numba.threading_layer()}; GOMP_SPINCOUNT="
          f"{os.environ.get('GOMP_SPINCOUNT')}; load average {os.getloadavg()[0]:.2f}")
    for name, s in speedups.items():
        print(f"  {name:24s} median {statistics.median(s):4.2f}  best {max(s):4.2f}  "
              f"(efficiency {statistics.median(s) / args.threads:4.2f} / "
              f"{max(s) / args.threads:4.2f});  CPU time 1 thread / all threads "
              f"{statistics.median(cpu_ratios[name]):4.2f}")


if __name__ == "__main__":
    main()
