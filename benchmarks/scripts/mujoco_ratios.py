"""Rough per-env-step cost of MuJoCo paths, alternating in one process (ratios, not times).

v5 ids (HalfCheetah by default; ``--env all``: every id the engine runs): envfleet's MuJoCo
engine; two floors: the same model's ctrl = action, ``mj_step`` x frame_skip and
``mj_rnePostConstraint`` per env from a compiled loop over the envs (numba ``prange``, the C
API, no observation, reward or reset: the simulator's own cost; the bench's ``mujoco-floor``,
``envfleet.bench.engines.MujocoFloor``), and ``mujoco.mj_step(m, d, nstep=frame_skip)`` from a
Python loop; Gymnasium's env in a ``SyncVectorEnv``; EnvPool's ``<Id>-v5`` with
``num_threads`` threads (its own MuJoCo build). Alternating rounds in one process
(``alternating.py``): the median steps/s over rounds is printed, with the process's CPU time
per env-step. ``--table``: one Markdown row per id and num_envs (envfleet against the floor and
EnvPool, the episodes ended per 1,000 env-steps, memory per env).

    python -m benchmarks.scripts.mujoco_ratios --env HalfCheetah-v5 --num-envs 16 \\
        --threads 1,2
    python -m benchmarks.scripts.mujoco_ratios --env all --num-envs 16,32,64 --threads 2 \\
        --only envfleet,floor,envpool --table
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import numpy as np

from benchmarks.scripts.alternating import Stepper, build, cycling, machine_line, time_rounds


def _actions(space: Any, n: int) -> np.ndarray:
    """64 batches of ``n`` uniform random actions within one env's action ``space``."""
    rng = np.random.default_rng(0)
    return rng.uniform(space.low, space.high, (64, n, *space.shape)).astype(np.float32)


def ours(env_id: str, n: int, threads: int) -> Stepper:
    """envfleet's engine on ``threads`` threads; the stepper keeps the env (``.env``) and
    counts the episodes that ended (``.ended``) and the env-steps (``.steps``)."""
    import envfleet

    env = envfleet.make(env_id, n, seed=0, num_threads=threads, copy=False)
    env.reset()

    def step(actions: np.ndarray) -> None:
        _, _, terminated, truncated, _ = env.step(actions)
        stepper.ended += int(np.count_nonzero(terminated | truncated))
        stepper.steps += n

    stepper = cycling(step, _actions(env.single_action_space, n))
    stepper.env, stepper.ended, stepper.steps = env, 0, 0
    return stepper


def compiled_floor(env_id: str, n: int, threads: int) -> Stepper:
    from envfleet.bench.engines import MujocoFloor

    floor = MujocoFloor(env_id, n, 0, threads)
    floor.reset()
    return cycling(floor.step, _actions(floor.env.single_action_space, n))


def python_floor(env_id: str, n: int, threads: int) -> Stepper:
    import gymnasium as gym
    import mujoco

    env = gym.make(env_id)
    model, skip = env.unwrapped.model, env.unwrapped.frame_skip
    datas = [mujoco.MjData(model) for _ in range(n)]

    def step() -> None:
        for d in datas:
            mujoco.mj_step(model, d, nstep=skip)
    return step


def gymnasium_sync(env_id: str, n: int, threads: int) -> Stepper:
    import gymnasium as gym

    env = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n)
    env.reset(seed=0)
    return cycling(env.step, _actions(env.single_action_space, n))


def envpool_(env_id: str, n: int, threads: int) -> Stepper:
    import envpool

    env = envpool.make(env_id, env_type="gymnasium", num_envs=n, num_threads=threads, seed=0)
    env.reset()
    return cycling(env.step, _actions(env.action_space, n))


CONTENDERS = {"envfleet": ours, "floor": compiled_floor, "mj_step from Python": python_floor,
              "gymnasium sync": gymnasium_sync, "envpool": envpool_}
SINGLE_THREAD_ONLY = {"mj_step from Python", "gymnasium sync"}


def memory_per_env(env: Any) -> tuple[int, int, int]:
    """Bytes per env: ``MjData``'s buffer + the arena's peak use so far, its buffer + the
    arena reserved (touched lazily), and the engine's own arrays (observations, rewards, flags,
    info rows, addresses: every array it allocates, divided by num_envs)."""
    datas = env.datas
    buffer = datas[0].nbuffer
    used = buffer + max(d.maxuse_arena for d in datas)
    reserved = buffer + datas[0].narena
    arrays = [v for v in vars(env).values() if isinstance(v, np.ndarray)]
    arrays += [env.info["tendon_length"], env.info["tendon_velocity"]]
    own = sum(a.nbytes for a in arrays if a.base is None) // env.num_envs
    return used, reserved, own


def _ids(text: str) -> list[str]:
    if text != "all":
        return text.split(",")
    from envfleet.mujoco.vector_env import FAMILIES

    return list(FAMILIES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v5", help="comma list of v5 ids, or all")
    parser.add_argument("--num-envs", default="16", help="comma list")
    parser.add_argument("--threads", default="1,2", help="comma list")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--only", default=",".join(CONTENDERS))
    parser.add_argument("--table", action="store_true",
                        help="also print one Markdown row per id and num_envs")
    args = parser.parse_args()
    names = args.only.split(",")
    rows = []
    print(machine_line())
    for env_id in _ids(args.env):
        for n in map(int, args.num_envs.split(",")):
            for threads in map(int, args.threads.split(",")):
                steppers = build({name: functools.partial(CONTENDERS[name], env_id, n, threads)
                                  for name in names
                                  if not (threads > 1 and name in SINGLE_THREAD_ONLY)})
                timings = time_rounds(steppers, n, args.rounds, args.seconds)
                base = timings.get("envfleet")
                print(f"{env_id}, {n} envs, {threads} thread(s): median env-steps/s "
                      f"(ratio to envfleet), CPU µs per env-step ({machine_line()})")
                for name, t in timings.items():
                    ratio = f"({t.steps_per_s / base.steps_per_s:4.2f}x)" if base else ""
                    print(f"  {name:22s} {t.steps_per_s:10.0f}  {ratio}  "
                          f"{t.cpu_us_per_step:7.1f} µs")
                if base and args.table:
                    rows.append(_row(env_id, n, threads, timings, steppers["envfleet"]))
    if rows:
        print(f"\n{machine_line()}; medians of {args.rounds} rounds of {args.seconds:g} s\n")
        print("| id | num_envs | threads | envfleet steps/s | × floor | × floor, CPU/step | "
              "× EnvPool | episodes ended / 1k steps | MjData KiB (touched / reserved) | "
              "engine arrays B |")
        print("|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(rows))


def _row(env_id: str, n: int, threads: int, timings: dict[str, Any], ours_: Any) -> str:
    """A ``--table`` row: envfleet's steps/s and its ratios (wall clock and CPU per env-step
    against the floor, wall clock against EnvPool), its episode ends, memory per env."""
    mine, floor, pool = timings["envfleet"], timings.get("floor"), timings.get("envpool")
    used, reserved, own = memory_per_env(ours_.env)
    cells = [env_id, f"{n}", f"{threads}", f"{mine.steps_per_s:,.0f}",
             f"{mine.steps_per_s / floor.steps_per_s:.2f}x" if floor else "–",
             f"{floor.cpu_us_per_step / mine.cpu_us_per_step:.2f}x" if floor else "–",
             f"{mine.steps_per_s / pool.steps_per_s:.2f}x" if pool else "–",
             f"{1000 * ours_.ended / max(ours_.steps, 1):.1f}",
             f"{used / 1024:,.0f} / {reserved / 1024:,.0f}", f"{own:,}"]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()
