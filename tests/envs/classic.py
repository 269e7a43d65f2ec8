"""Shared checks for the classic-control families (Acrobot, MountainCar): state transplant into
Gymnasium's own env, the three autoreset modes, same trajectories across backends."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from numba import njit

import envfleet
from envfleet.native.rng import env_uniform
from tests.native.test_autoreset import transitions
from tests.reference import as_numpy

Policy = Callable[[np.ndarray, np.random.Generator], np.ndarray]


@njit(cache=False)
def draws(seeds, episodes, steps, k, low, high):  # pragma: no cover - compiled
    """``env_uniform`` draw ``k`` of every env, from host copies of the rng counters."""
    out = np.empty(seeds.size)
    rng = (seeds, episodes, steps)
    for i in range(seeds.size):
        out[i] = env_uniform(rng, i, k, low, high)
    return out


def rng_counters(env: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host copies of the engine's (seeds, episodes, steps), as numba's dtypes."""
    seeds, episodes, steps = (as_numpy(x) for x in env.engine.rng)
    return seeds.view(np.uint64), episodes.view(np.uint64), steps.astype(np.int64)


class FixedDraw:
    """Stands in for a Gymnasium env's ``np_random``: ``uniform`` returns the given value."""

    def __init__(self, value: float) -> None:
        self.value = value

    def uniform(self, low: float, high: float) -> float:
        assert low <= self.value < high
        return self.value


def compare_with_gymnasium(env: Any, reference: gym.Env, policy: Policy, steps: int,
                           seed: int = 0, noise: Callable[[Any], np.ndarray] | None = None,
                           atol: float = 0.0) -> dict[str, int]:
    """Step ``env`` (NEXT_STEP) and ``reference`` (Gymnasium's env with its TimeLimit) from the
    same state with the same actions; assert equal observations, state, rewards, terminated and
    truncated for every env stepped (not reset) this step. ``noise(env)``: the draw each env
    takes this step, handed to the reference through its ``np_random``."""
    reference.reset(seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    counts = {"compared": 0, "terminated": 0, "truncated": 0}
    for _ in range(steps):
        actions = policy(as_numpy(obs), rng)
        before = np.stack([as_numpy(c) for c in env.state])
        elapsed, pending = as_numpy(env.engine.rng[2]), as_numpy(env.engine.pending)
        drawn = noise(env) if noise is not None else None
        obs, rewards, terminated, truncated, _ = env.step(actions)
        after = np.stack([as_numpy(c) for c in env.state])
        o, r = as_numpy(obs), as_numpy(rewards)
        te, tr = as_numpy(terminated), as_numpy(truncated)
        for i in np.flatnonzero(~pending):
            reference.unwrapped.state = before[:, i].copy()
            reference._elapsed_steps = int(elapsed[i])
            if drawn is not None:
                reference.unwrapped.np_random = FixedDraw(float(drawn[i]))
            ro, rr, rte, rtr, _ = reference.step(int(actions[i]))
            state = np.asarray(reference.unwrapped.state, dtype=np.float64)
            if atol == 0.0:
                assert np.array_equal(ro, o[i]), (i, ro, o[i])
                assert np.array_equal(state, after[:, i]), (i, state, after[:, i])
            else:
                np.testing.assert_allclose(ro, o[i], atol=atol, rtol=0)
                np.testing.assert_allclose(state, after[:, i], atol=atol, rtol=0)
            assert (rr, rte, rtr) == (r[i], te[i], tr[i]), (i, rr, r[i], rte, rtr)
            counts["compared"] += 1
            counts["terminated"] += int(rte)
            counts["truncated"] += int(rtr)
    return counts


def run_modes(env_id: str, backend: str, policy: Policy, n: int, steps: int, limit: int,
              **kwargs: Any) -> dict[AutoresetMode, list[tuple]]:
    """Each autoreset mode's record of a run (as ``tests/native/test_autoreset.run``)."""
    runs = {}
    for mode in AutoresetMode:
        env = envfleet.make(env_id, n, backend=backend, autoreset_mode=mode, seed=7,
                            max_episode_steps=limit, **kwargs)
        obs, _ = env.reset()
        out = [(as_numpy(obs), None, None, None, {})]
        done = np.zeros(n, dtype=bool)
        for _ in range(steps):
            if mode is AutoresetMode.DISABLED and done.any():
                obs, _ = env.reset(options={"reset_mask": done})
                out.append((as_numpy(obs), "reset", done, None, {}))
                done = np.zeros(n, dtype=bool)
                continue
            rng = np.random.default_rng(0)  # the policy sees only the observation
            obs, rew, term, trunc, info = env.step(policy(out[-1][0], rng))
            info = {k: (as_numpy(v) if not isinstance(v, dict) else v) for k, v in info.items()}
            out.append((as_numpy(obs), as_numpy(rew), as_numpy(term), as_numpy(trunc), info))
            done = out[-1][2] | out[-1][3]
        env.close()
        runs[mode] = out
    return runs


def assert_modes_agree(runs: dict[AutoresetMode, list[tuple]], n: int) -> tuple[int, int]:
    """The three modes play the same episodes (same transitions per env, SAME_STEP's
    ``final_obs`` the terminal observation); returns (terminations, truncations) seen."""
    for i in range(n):
        per_mode = {mode: transitions(steps, i, mode) for mode, steps in runs.items()}
        k = min(len(t) for t in per_mode.values())
        reference = per_mode[AutoresetMode.NEXT_STEP][:k]
        assert sum(t[3] or t[4] for t in reference) >= 2, i
        assert per_mode[AutoresetMode.SAME_STEP][:k] == reference
        assert per_mode[AutoresetMode.DISABLED][:k] == reference
    ends = np.array([(s[2], s[3]) for s in runs[AutoresetMode.NEXT_STEP][1:]])
    for (_, _, term, trunc, _), (_, rew, _, _, info) in itertools.pairwise(
            runs[AutoresetMode.NEXT_STEP][1:]):
        assert info == {} and (rew[term | trunc] == 0).all()  # the reset step: reward 0
    return int(ends[:, 0].sum()), int(ends[:, 1].sum())


def assert_same_run(a: Any, b: Any, policy: Policy, steps: int, seed: int = 3) -> int:
    """Two envs (backends or thread counts) play identical trajectories, bit for bit; returns
    the episodes ended."""
    oa, _ = a.reset(seed=seed)
    ob, _ = b.reset(seed=seed)
    np.testing.assert_array_equal(as_numpy(oa), as_numpy(ob), strict=True)
    rng = np.random.default_rng(seed)
    ended = 0
    for _ in range(steps):
        actions = policy(as_numpy(oa), rng)
        oa, ra, ta, tra, _ = a.step(actions)
        ob, rb, tb, trb, _ = b.step(actions)
        for x, y in ((oa, ob), (ra, rb), (ta, tb), (tra, trb)):
            np.testing.assert_array_equal(as_numpy(x), as_numpy(y), strict=True)
        for x, y in zip(a.state, b.state, strict=True):
            np.testing.assert_array_equal(as_numpy(x), as_numpy(y), strict=True)
        ended += int((as_numpy(ta) | as_numpy(tra)).sum())
    return ended
