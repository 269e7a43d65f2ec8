"""What one native CartPole-v1 env-step costs on one numba thread, part by part.

Times variants side by side in one process (alternating rounds, thread CPU time, so other
processes' load does not count): the full ``env.step`` (copy=True and copy=False), the engine's
step alone, the driver's passes one by one, and hand-written loops with just the physics
(with and without ``sin``/``cos``) and with just the trig. Prints ns per env-step (median and
least over rounds)::

    PYTHONPATH=src python -m benchmarks.scripts.cartpole_floor [--envs 65536] [--rounds 15]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from numba import njit

import envfleet
from envfleet.native.driver import NEXT_STEP, make_driver
from envfleet.native.numba_backend import _RANGE_JIT

BLOCK = 256


def hand_kernels() -> dict[str, Callable[..., None]]:
    """Loops with CartPole's arithmetic and nothing else (no autoreset, no checks); the state is
    read from one set of columns and written to another, so every round steps the same states."""
    from envfleet.envs.cartpole import make_params

    p = make_params()
    g, mp_, tm, ln, pml, fm, tau = (p.gravity, p.masspole, p.total_mass, p.length,
                                    p.polemass_length, p.force_mag, p.tau)
    xt, tt = p.x_threshold, p.theta_threshold_radians

    itm, iln = 1.0 / tm, 1.0 / ln

    def build(trig: bool, divide: bool = True) -> Callable[..., None]:
        @njit(nogil=True, error_model="numpy")
        def physics(s, out, actions, obs, rewards, terminated):
            x_, xd_, th_, thd_ = s
            ox, oxd, oth, othd = out
            for i in range(actions.shape[0]):
                x, x_dot, theta, theta_dot = x_[i], xd_[i], th_[i], thd_[i]
                force = fm if actions[i] == 1 else -fm
                if trig:
                    costheta = math.cos(theta)
                    sintheta = math.sin(theta)
                else:  # same data flow, no libm call
                    costheta = 1.0 - theta * theta
                    sintheta = theta
                if divide:
                    temp = (force + pml * (theta_dot * theta_dot) * sintheta) / tm
                    thetaacc = (g * sintheta - costheta * temp) / (
                        ln * (4.0 / 3.0 - mp_ * (costheta * costheta) / tm))
                    xacc = temp - pml * thetaacc * costheta / tm
                else:  # the 4 divisions as products (not Gymnasium's rounding: timing only)
                    temp = (force + pml * (theta_dot * theta_dot) * sintheta) * itm
                    thetaacc = (g * sintheta - costheta * temp) * iln * (
                        4.0 / 3.0 - mp_ * (costheta * costheta) * itm)
                    xacc = temp - pml * thetaacc * costheta * itm
                x = x + tau * x_dot
                x_dot = x_dot + tau * xacc
                theta = theta + tau * theta_dot
                theta_dot = theta_dot + tau * thetaacc
                ox[i] = x
                oxd[i] = x_dot
                oth[i] = theta
                othd[i] = theta_dot
                obs[i, 0] = np.float32(x)
                obs[i, 1] = np.float32(x_dot)
                obs[i, 2] = np.float32(theta)
                obs[i, 3] = np.float32(theta_dot)
                terminated[i] = (x < -xt) | (x > xt) | (theta < -tt) | (theta > tt)
                rewards[i] = 1.0
        return physics

    @njit(nogil=True, error_model="numpy")
    def blocked(s, out, actions, obs, rewards, terminated, sins, coss, thetaaccs, xaccs):
        """Per block of envs: ``sin``/``cos`` into scratch arrays, then the accelerations in a
        pass without calls (LLVM vectorises it, the 4 float64 divisions included), then the
        updates and stores; the same bits as ``physics``."""
        x_, xd_, th_, thd_ = s
        ox, oxd, oth, othd = out
        n = actions.shape[0]
        for start in range(0, n, BLOCK):
            m = min(n, start + BLOCK) - start
            for j in range(m):
                theta = th_[start + j]
                sins[j] = math.sin(theta)
                coss[j] = math.cos(theta)
            for j in range(m):
                i = start + j
                sintheta, costheta, theta_dot = sins[j], coss[j], thd_[i]
                force = fm if actions[i] == 1 else -fm
                temp = (force + pml * (theta_dot * theta_dot) * sintheta) / tm
                thetaacc = (g * sintheta - costheta * temp) / (
                    ln * (4.0 / 3.0 - mp_ * (costheta * costheta) / tm))
                thetaaccs[j] = thetaacc
                xaccs[j] = temp - pml * thetaacc * costheta / tm
            for j in range(m):
                i = start + j
                x, x_dot, theta, theta_dot = x_[i], xd_[i], th_[i], thd_[i]
                x = x + tau * x_dot
                x_dot = x_dot + tau * xaccs[j]
                theta = theta + tau * theta_dot
                theta_dot = theta_dot + tau * thetaaccs[j]
                ox[i] = x
                oxd[i] = x_dot
                oth[i] = theta
                othd[i] = theta_dot
                obs[i, 0] = np.float32(x)
                obs[i, 1] = np.float32(x_dot)
                obs[i, 2] = np.float32(theta)
                obs[i, 3] = np.float32(theta_dot)
                terminated[i] = (x < -xt) | (x > xt) | (theta < -tt) | (theta > tt)
                rewards[i] = 1.0

    @njit(nogil=True, error_model="numpy")
    def trig_only(theta, out):
        for i in range(theta.shape[0]):
            out[i] = math.sin(theta[i]) + math.cos(theta[i])

    return {"physics": build(True), "physics_notrig": build(False),
            "physics_notrig_nodiv": build(False, False), "trig": trig_only,
            "blocked": blocked}


def driver_passes(engine) -> dict[str, Callable[[np.ndarray], None]]:
    """The numba step's passes (action check, NEXT_STEP begin, advance) as separate loops over
    ``engine``'s live buffers (the step = these three in this order)."""
    spec, params = engine.spec, engine.kernel_params
    refuse, begin, advance, _, _ = make_driver(spec, NEXT_STEP, (), type(params))

    @njit(**_RANGE_JIT)
    def refuse_pass(n, state, actions, bounds, pending):
        for i in range(n):
            if refuse(i, state, params, actions, bounds, pending):
                return i
        return -1

    @njit(**_RANGE_JIT)
    def begin_pass(n, state, rng, pending, obs, rewards, terminated, truncated):
        for i in range(n):
            begin(i, state, params, rng, pending, obs, rewards, terminated, truncated)

    @njit(**_RANGE_JIT)
    def advance_pass(n, state, actions, rng, max_steps, pending, obs, rewards, terminated,
                     truncated):
        ended = 0
        for i in range(n):
            if advance(i, state, params, actions, rng, max_steps, pending, obs, rewards,
                       terminated, truncated):
                ended += 1
        return ended

    e, n = engine, engine.num_envs
    passes = {
        "pass: refuse": lambda a: refuse_pass(n, e.state, a, e.bounds, e.pending),
        "pass: begin (resets)": lambda a: begin_pass(n, e.state, e.rng, e.pending,
                                                     e._obs_rows, e.rewards, e.terminated,
                                                     e.truncated),
        "pass: advance": lambda a: advance_pass(n, e.state, a, e.rng, e.max_episode_steps,
                                                e.pending, e._obs_rows, e.rewards,
                                                e.terminated, e.truncated),
    }
    return passes


def driver_fused(engine) -> Callable[[np.ndarray], None]:
    """begin and advance in one loop over ``engine``'s buffers (no action check)."""
    spec, params = engine.spec, engine.kernel_params
    _, begin, advance, _, _ = make_driver(spec, NEXT_STEP, (), type(params))

    @njit(**_RANGE_JIT)
    def fused_pass(n, state, actions, rng, max_steps, pending, obs, rewards, terminated,
                   truncated):
        ended = 0
        for i in range(n):
            begin(i, state, params, rng, pending, obs, rewards, terminated, truncated)
            if advance(i, state, params, actions, rng, max_steps, pending, obs, rewards,
                       terminated, truncated):
                ended += 1
        return ended

    e, n = engine, engine.num_envs
    return lambda a: fused_pass(n, e.state, a, e.rng, e.max_episode_steps, e.pending,
                                e._obs_rows, e.rewards, e.terminated, e.truncated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10, help="steps per variant per round")
    args = parser.parse_args()
    n = args.envs
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, n) for _ in range(8)]  # random play, ~22-step episodes

    envs = {copy: envfleet.make("CartPole-v1", n, backend="numba", num_threads=1, seed=0,
                                copy=copy) for copy in (True, False)}
    for env in envs.values():
        env.reset()
    engine = envs[False].engine
    variants: dict[str, Callable[[np.ndarray], object]] = {
        "env.step copy=True": envs[True].step,
        "env.step copy=False": envs[False].step,
        "engine.step": engine.step,
    }
    split_env = envfleet.make("CartPole-v1", n, backend="numba", num_threads=1, seed=0)
    split_env.reset()
    passes = driver_passes(split_env.engine)
    fused_env = envfleet.make("CartPole-v1", n, backend="numba", num_threads=1, seed=0)
    fused_env.reset()
    variants["begin+advance fused (1 pass)"] = driver_fused(fused_env.engine)
    part_times: dict[str, list[float]] = {name: [] for name in passes}

    def split_step(a: np.ndarray) -> None:
        """One step as its three passes, each timed on its own (into ``part_times``)."""
        for name, f in passes.items():
            t0 = time.thread_time()
            f(a)
            part_times[name][-1] += time.thread_time() - t0

    variants["engine.step as 3 passes"] = split_step
    hands = hand_kernels()
    s_in = tuple(np.array(c) for c in engine.state)  # the live states of a reset batch
    s_out = tuple(np.empty_like(c) for c in s_in)
    obs = np.empty((n, 4), np.float32)
    rewards, terminated = np.empty(n, np.float32), np.empty(n, np.bool_)
    trig_out = np.empty(n)
    variants["hand: physics + trig"] = lambda a: hands["physics"](s_in, s_out, a, obs,
                                                                  rewards, terminated)
    variants["hand: physics, no trig"] = lambda a: hands["physics_notrig"](
        s_in, s_out, a, obs, rewards, terminated)
    variants["hand: no trig, no divisions"] = lambda a: hands["physics_notrig_nodiv"](
        s_in, s_out, a, obs, rewards, terminated)
    scratch = tuple(np.empty(BLOCK) for _ in range(4))
    variants["hand: blocked trig | vector"] = lambda a: hands["blocked"](
        s_in, s_out, a, obs, rewards, terminated, *scratch)
    variants["hand: sin + cos only"] = lambda a: hands["trig"](s_in[2], trig_out)

    for f in variants.values():  # compile, and reach a steady mix of episode ages
        for part in part_times.values():
            part.append(0.0)
        for k in range(40):
            f(actions[k % len(actions)])
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            f = variants[name]
            if name == "engine.step as 3 passes":
                for part in part_times.values():
                    part.append(0.0)
            t0 = time.thread_time()
            for k in range(args.calls):
                f(actions[k % len(actions)])
            times[name].append((time.thread_time() - t0) / (args.calls * n))
    print(f"CartPole-v1, {n} envs, 1 thread; {os.uname().nodename}; "
          f"load average {os.getloadavg()[0]:.2f}; median of {args.rounds} rounds x "
          f"{args.calls} steps (thread CPU time)")
    for name in passes:
        times[name] = [t / (args.calls * n) for t in part_times[name][-args.rounds:]]
    names += list(passes)
    full = statistics.median(times["env.step copy=False"])
    print(f"  {'':28s} {'median':>6s}  {'least':>6s} ns/env-step; median M/s; of copy=False")
    for name in names:
        t = statistics.median(times[name])
        print(f"  {name:28s} {t * 1e9:6.2f}  {min(times[name]) * 1e9:6.2f}  "
              f"{1 / t / 1e6:6.1f} M/s  ({t / full:4.2f})")


if __name__ == "__main__":
    main()
