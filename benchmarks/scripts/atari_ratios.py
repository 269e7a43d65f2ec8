"""Rough per-env-step cost of Atari paths, alternating in one process (ratios, not times).

Breakout, standard preprocessing where the path has it: envfleet's Atari engine, EnvPool's
``Breakout-v5``, ale-py's ``AtariVectorEnv`` (C++ threads), Gymnasium's wrapper stack in a
``SyncVectorEnv`` (1 thread) / ``AsyncVectorEnv`` (2 workers); and two floors: ale-py's
``ALEInterface`` driven from Python (4 x ``act`` + one grayscale read per agent step) and the
same calls from a compiled loop (numba, ALE's C++ entry points: the emulator's own cost).
Alternating rounds in one process (``alternating.py``): the median steps/s over rounds is
printed, with the CPU time per env-step of all the process's threads (on a loaded machine, the
steadier figure: wall-clock shares there follow the scheduler, e.g. numba's ``omp`` threading
layer spinning at its barriers; compare ``NUMBA_THREADING_LAYER=workqueue``).

    .venv/bin/python -m benchmarks.scripts.atari_ratios --num-envs 16 --threads 1,2 --rounds 5
"""

from __future__ import annotations

import argparse
import functools

import numpy as np

from benchmarks.scripts.alternating import Stepper, build, cycling, machine_line, time_rounds


def _actions(n: int, count: int = 4) -> np.ndarray:
    """64 batches of random actions (Breakout's minimal set: 4)."""
    return np.random.default_rng(0).integers(count, size=(64, n))


def ours(n: int, threads: int | None) -> Stepper:
    import envfleet

    env = envfleet.make("ALE/Breakout-v5", n, seed=0, num_threads=threads, copy=False)
    env.reset()
    return cycling(env.step, _actions(n))


def envpool_(n: int, threads: int) -> Stepper:
    import envpool

    env = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=n, num_threads=threads,
                       seed=0)
    env.reset()
    return cycling(env.step, _actions(n))


def ale_vector(n: int, threads: int) -> Stepper:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv("breakout", n, num_threads=threads, repeat_action_probability=0.25)
    env.reset(seed=0)
    return cycling(env.step, _actions(n))


def gymnasium_stack(n: int, threads: int) -> Stepper:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)

    def one() -> gym.Env:
        e = gym.make("ALE/Breakout-v5", frameskip=1)
        return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(e), 4)
    cls = gym.vector.SyncVectorEnv if threads == 1 else gym.vector.AsyncVectorEnv
    env = cls([one] * n)
    env.reset(seed=0)
    return cycling(env.step, _actions(n))


def _emulators(n: int) -> list:
    from envfleet.bench.engines import emulators

    return emulators("breakout", n)


def ale_python(n: int, threads: int) -> Stepper:
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


def ale_compiled(n: int, threads: int) -> Stepper:
    """The bench's floor (``envfleet.bench.engines.AleFloor``): the same loop as ale-floor."""
    from envfleet.bench.engines import AleFloor

    floor = AleFloor("breakout", n, 0, threads)
    return cycling(floor.step, _actions(n, floor.codes.size))


def ours_adaptive(n: int, threads: int) -> Stepper:
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
        makers = {name: functools.partial(CONTENDERS[name], n, threads) for name in names
                  if not ((threads > 1 and name in SINGLE_THREAD_ONLY)
                          or (threads == 1 and name == "envfleet default"))}  # (all cores)
        steppers = build(makers)
        timings = time_rounds(steppers, n, args.rounds, args.seconds)
        rates = {name: t.steps_per_s for name, t in timings.items()}
        cpu = {name: t.cpu_us_per_step for name, t in timings.items()}
        base, base_cpu = rates.get("envfleet"), cpu.get("envfleet")
        import numba

        layer = numba.threading_layer() if "envfleet" in steppers else "?"
        print(f"threads={threads}, num_envs={n}, numba layer {layer} (medians of "
              f"{args.rounds} rounds; {machine_line()}): steps/s, "
              f"envfleet's steps/s / its; CPU us per env-step (all threads), its / envfleet's")
        for name, median in rates.items():
            work = cpu[name]
            ratio = f"{base / median:5.2f}x" if base else ""
            work_ratio = f"{work / base_cpu:5.2f}x" if base_cpu else ""
            print(f"  {name:18s} {median:7.0f}/s {ratio}   {work:6.0f} us CPU {work_ratio}")


if __name__ == "__main__":
    main()
