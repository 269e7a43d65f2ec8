"""Rough per-env-step cost of Atari paths, alternating in one process (ratios, not times).

Breakout, standard preprocessing where the path has it: envfleet's Atari engine, EnvPool's
``Breakout-v5``, ale-py's ``AtariVectorEnv`` (C++ threads), Gymnasium's wrapper stack in a
``SyncVectorEnv`` (1 thread) / ``AsyncVectorEnv`` (2 workers); and two floors: ale-py's
``ALEInterface`` driven from Python (4 x ``act`` + one grayscale read per agent step) and the
same calls from a compiled loop (numba, ALE's C++ entry points: the emulator's own cost).
Each round runs every contender for ``--seconds`` in turn; the median over rounds is printed,
with the CPU time per env-step of all the process's threads (on a loaded machine, the steadier
figure: wall-clock shares there follow the scheduler, e.g. numba's ``omp`` threading layer
spinning at its barriers; compare ``NUMBA_THREADING_LAYER=workqueue``).

    .venv/bin/python scripts/atari_ratios.py --num-envs 16 --threads 1,2 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np


def ours(n: int, threads: int | None) -> Callable[[], None]:
    import envfleet

    env = envfleet.make("ALE/Breakout-v5", n, seed=0, num_threads=threads, copy=False)
    env.reset()
    rng = np.random.default_rng(0)
    actions = rng.integers(4, size=(64, n))
    k = [0]

    def step() -> None:
        env.step(actions[k[0] % 64])
        k[0] += 1
    return step


def envpool_(n: int, threads: int) -> Callable[[], None]:
    import envpool

    env = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=n, num_threads=threads,
                       seed=0)
    env.reset()
    actions = np.random.default_rng(0).integers(4, size=(64, n))
    k = [0]

    def step() -> None:
        env.step(actions[k[0] % 64])
        k[0] += 1
    return step


def ale_vector(n: int, threads: int) -> Callable[[], None]:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv("breakout", n, num_threads=threads, repeat_action_probability=0.25)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(4, size=(64, n))
    k = [0]

    def step() -> None:
        env.step(actions[k[0] % 64])
        k[0] += 1
    return step


def gymnasium_stack(n: int, threads: int) -> Callable[[], None]:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)

    def one() -> gym.Env:
        e = gym.make("ALE/Breakout-v5", frameskip=1)
        return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(e), 4)
    cls = gym.vector.SyncVectorEnv if threads == 1 else gym.vector.AsyncVectorEnv
    env = cls([one] * n)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(4, size=(64, n))
    k = [0]

    def step() -> None:
        env.step(actions[k[0] % 64])
        k[0] += 1
    return step


def _emulators(n: int) -> list:
    from envfleet.bench.atari import emulators

    return emulators("breakout", n)


def ale_python(n: int, threads: int) -> Callable[[], None]:
    ales = _emulators(n)
    acts = ales[0].getMinimalActionSet()
    frame = np.empty((210, 160), np.uint8)
    k = [0]

    def step() -> None:
        for a in ales:
            action = acts[k[0] % len(acts)]
            for _ in range(4):
                a.act(action, 1.0)
            a.getScreenGrayscale(frame)
            if a.game_over():
                a.reset_game()
        k[0] += 1
    return step


def ale_compiled(n: int, threads: int) -> Callable[[], None]:
    """The bench's floor (``envfleet.bench.atari.AleFloor``): the same loop as ale-floor."""
    from envfleet.bench.atari import AleFloor

    floor = AleFloor("breakout", n, 0, threads)
    actions = np.random.default_rng(0).integers(floor.codes.size, size=(64, n))
    k = [0]

    def step() -> None:
        floor.step(actions[k[0] % 64])
        k[0] += 1
    return step


def ours_adaptive(n: int, threads: int) -> Callable[[], None]:
    """envfleet with its default threads (every usable core, or one when that is faster)."""
    return ours(n, None)


CONTENDERS = {"envfleet": ours, "envfleet default": ours_adaptive, "envpool": envpool_,
              "ale-py vector": ale_vector, "ALE compiled loop": ale_compiled,
              "ALE from Python": ale_python, "gymnasium stack": gymnasium_stack}
SINGLE_THREAD_ONLY = {"ALE from Python"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--only", default=",".join(CONTENDERS))
    args = parser.parse_args()
    names = args.only.split(",")
    n = args.num_envs
    for threads in map(int, args.threads.split(",")):
        steppers = {}
        for name in names:
            if ((threads > 1 and name in SINGLE_THREAD_ONLY)
                    or (threads == 1 and name == "envfleet default")):  # (default: all cores)
                continue
            try:
                steppers[name] = CONTENDERS[name](n, threads)
                steppers[name]()  # compile / warm up
            except Exception as error:  # a peer that is not installed: skipped, said
                print(f"  {name}: skipped ({type(error).__name__}: {error})")
        rates: dict[str, list[float]] = {name: [] for name in steppers}
        cpu: dict[str, list[float]] = {name: [] for name in steppers}
        for _ in range(args.rounds):
            for name, step in steppers.items():
                count, start, cpu0 = 0, time.perf_counter(), time.process_time()
                while (elapsed := time.perf_counter() - start) < args.seconds:
                    step()
                    count += 1
                rates[name].append(count * n / elapsed)
                cpu[name].append((time.process_time() - cpu0) / (count * n) * 1e6)
        base = statistics.median(rates["envfleet"]) if "envfleet" in rates else None
        base_cpu = statistics.median(cpu["envfleet"]) if "envfleet" in cpu else None
        import numba

        layer = numba.threading_layer() if "envfleet" in steppers else "?"
        print(f"threads={threads}, num_envs={n}, numba layer {layer} (medians of "
              f"{args.rounds} rounds): steps/s, "
              f"envfleet's steps/s / its; CPU us per env-step (all threads), its / envfleet's")
        for name, values in rates.items():
            median, work = statistics.median(values), statistics.median(cpu[name])
            ratio = f"{base / median:5.2f}x" if base else ""
            work_ratio = f"{work / base_cpu:5.2f}x" if base_cpu else ""
            print(f"  {name:18s} {median:7.0f}/s {ratio}   {work:6.0f} us CPU {work_ratio}")


if __name__ == "__main__":
    main()
