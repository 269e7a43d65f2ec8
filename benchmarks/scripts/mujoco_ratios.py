"""Rough per-env-step cost of MuJoCo paths, alternating in one process (ratios, not times).

One v5 id (HalfCheetah by default): envfleet's MuJoCo engine; two floors: the same model's
``mj_step`` x frame_skip (+ ``mj_rnePostConstraint``) per env from a compiled loop over the
envs (numba ``prange``, the C API, no observation or reward: the simulator's own cost), and
``mujoco.mj_step(m, d, nstep=frame_skip)`` from a Python loop; Gymnasium's env in a
``SyncVectorEnv``; EnvPool's ``<Id>`` with ``num_threads`` threads (its own MuJoCo build, v4
ids). Each round runs every contender for ``--seconds`` in turn; the median over rounds is
printed, with the process's CPU time per env-step.

    .venv/bin/python scripts/mujoco_ratios.py --env HalfCheetah-v5 --num-envs 16 --threads 1,2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np


def _actions(n: int, dims: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, (64, n, dims)).astype(np.float32)


def ours(env_id: str, n: int, threads: int) -> Callable[[], None]:
    import envfleet

    env = envfleet.make(env_id, n, seed=0, num_threads=threads, copy=False)
    env.reset()
    actions = _actions(n, env.single_action_space.shape[0])
    k = [0]

    def step() -> None:
        env.step(actions[k[0] % 64])
        k[0] += 1
    return step


def compiled_floor(env_id: str, n: int, threads: int) -> Callable[[], None]:
    import numba

    import envfleet

    env = envfleet.make(env_id, n, seed=0, num_threads=threads)
    env.reset()
    mj, model = env._functions, env.model._address
    datas, skip = env._datas, env.frame_skip
    step_, rne = mj.step, mj.rne_post_constraint

    @numba.njit(nogil=True, parallel=True)
    def loop(model: int, datas: np.ndarray, skip: int) -> None:
        for i in numba.prange(datas.size):
            for _ in range(skip):
                step_(model, datas[i])
            rne(model, datas[i])

    def step() -> None:
        numba.set_num_threads(threads)
        loop(model, datas, skip)
    step.keep = env  # the MjData the addresses point into
    return step


def python_floor(env_id: str, n: int, threads: int) -> Callable[[], None]:
    import gymnasium as gym
    import mujoco

    env = gym.make(env_id)
    model, skip = env.unwrapped.model, env.unwrapped.frame_skip
    datas = [mujoco.MjData(model) for _ in range(n)]

    def step() -> None:
        for d in datas:
            mujoco.mj_step(model, d, nstep=skip)
    return step


def gymnasium_sync(env_id: str, n: int, threads: int) -> Callable[[], None]:
    import gymnasium as gym

    env = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n)
    env.reset(seed=0)
    actions = _actions(n, env.single_action_space.shape[0])
    k = [0]

    def step() -> None:
        env.step(actions[k[0] % 64])
        k[0] += 1
    return step


def envpool_(env_id: str, n: int, threads: int) -> Callable[[], None]:
    import envpool

    env = envpool.make(env_id.replace("-v5", "-v4"), env_type="gymnasium", num_envs=n,
                       num_threads=threads, seed=0)
    env.reset()
    actions = _actions(n, env.action_space.shape[0])
    k = [0]

    def step() -> None:
        env.step(actions[k[0] % 64])
        k[0] += 1
    return step


CONTENDERS = {"envfleet": ours, "floor (compiled mj_step)": compiled_floor,
              "mj_step from Python": python_floor, "gymnasium sync": gymnasium_sync,
              "envpool": envpool_}
SINGLE_THREAD_ONLY = {"mj_step from Python", "gymnasium sync"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    n = args.num_envs
    for threads in map(int, args.threads.split(",")):
        steppers = {}
        for name, make in CONTENDERS.items():
            if threads > 1 and name in SINGLE_THREAD_ONLY:
                continue
            try:
                steppers[name] = make(args.env, n, threads)
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
        base = statistics.median(rates["envfleet"])
        print(f"{args.env}, {n} envs, {threads} thread(s): median env-steps/s "
              f"(ratio to envfleet), CPU µs per env-step")
        for name in steppers:
            rate = statistics.median(rates[name])
            print(f"  {name:26s} {rate:10.0f}  ({rate / base:4.2f}x)  "
                  f"{statistics.median(cpu[name]):7.1f} µs")


if __name__ == "__main__":
    main()
