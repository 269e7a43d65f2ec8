"""Helpers that compare an envfleet env with Gymnasium's own env, step by step: native families
by state transplant, the engines (Atari, MuJoCo) by stepping one reference env per index in lock
step with the batch (``lockstep_batch``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np


def as_numpy(x):
    """A NumPy copy of an array or tensor (any device)."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy().copy()
    return np.array(x, copy=True)


def balancing_actions(obs: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """A controller that keeps most poles up (episodes reach truncation), with random flips."""
    greedy = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    flip = rng.random(len(obs)) < noise
    return np.where(flip, rng.integers(0, 2, len(obs)), greedy)


def check_against_gymnasium(env, steps: int, seed: int = 0, atol: float = 0.0) -> dict:
    """Step ``env`` (NEXT_STEP) and Gymnasium's CartPole-v1 from the same state with the same
    actions; assert equal observations, state, rewards, terminated and truncated for every env
    that was stepped (not reset) this step. Returns counts of what was covered."""
    n = env.num_envs
    reference = gym.make("CartPole-v1")  # TimeLimit(OrderEnforcing(PassiveEnvChecker(env)))
    reference.reset(seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    counts = {"compared": 0, "terminated": 0, "truncated": 0}
    noise = np.where(np.arange(n) % 2 == 0, 0.02, 0.5)  # half balance long, half end early
    for _ in range(steps):
        actions = balancing_actions(as_numpy(obs), rng, noise)
        before = np.stack([as_numpy(c) for c in env.state])  # (4, n) float64
        elapsed = as_numpy(env.engine.rng[2])
        pending = as_numpy(env.engine.pending)
        obs, rewards, terminated, truncated, _ = env.step(actions)
        after = np.stack([as_numpy(c) for c in env.state])
        o, r = as_numpy(obs), as_numpy(rewards)
        te, tr = as_numpy(terminated), as_numpy(truncated)
        for i in np.flatnonzero(~pending):
            reference.unwrapped.state = before[:, i].copy()
            reference.unwrapped.steps_beyond_terminated = None
            reference._elapsed_steps = int(elapsed[i])
            ro, rr, rte, rtr, _ = reference.step(int(actions[i]))
            if atol == 0.0:
                assert np.array_equal(ro, o[i]), (i, ro, o[i])
                assert np.array_equal(reference.unwrapped.state, after[:, i]), i
            else:
                np.testing.assert_allclose(ro, o[i], atol=atol, rtol=0)
                np.testing.assert_allclose(reference.unwrapped.state, after[:, i], atol=atol,
                                           rtol=0)
            assert rr == r[i] and rte == te[i] and rtr == tr[i], (i, rr, r[i], rte, rtr)
            counts["compared"] += 1
            counts["terminated"] += int(rte)
            counts["truncated"] += int(rtr)
    return counts


def check_transplant(env, steps: int, policy, reference_state, seed: int = 0,
                     atol: float = 0.0, **reference_kwargs) -> dict:
    """Any native family against Gymnasium's own env of the same id (``NEXT_STEP``): before each
    step, the reference env's state is set from env i's state row (``reference_state(row,
    fresh)``: ``row`` maps column name -> value, ``fresh`` is True on the first step of an
    episode), then both take the same action. Observations and the state after the step must be
    equal (within ``atol``), rewards equal as float32 (the native reward buffer's dtype),
    terminated and truncated equal. ``policy(obs, rng)`` gives the actions. Returns counts."""
    n = env.num_envs
    reference = gym.make(env.native_spec.reference_id, **reference_kwargs)
    reference.reset(seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    names = list(env.native_spec.state)
    fresh = np.ones(n, dtype=bool)  # the next step is an episode's first
    counts = {"compared": 0, "terminated": 0, "truncated": 0}
    for _ in range(steps):
        actions = policy(as_numpy(obs), rng)
        before = {name: as_numpy(c) for name, c in zip(names, env.state, strict=False)}
        elapsed = as_numpy(env.engine.rng[2])
        pending = as_numpy(env.engine.pending)
        obs, rewards, terminated, truncated, _ = env.step(actions)
        after = {name: as_numpy(c) for name, c in zip(names, env.state, strict=False)}
        o, r = as_numpy(obs), as_numpy(rewards)
        te, tr = as_numpy(terminated), as_numpy(truncated)
        for i in np.flatnonzero(~pending):
            reference.unwrapped.state = reference_state(
                {k: v[i] for k, v in before.items()}, bool(fresh[i]))
            reference._elapsed_steps = int(elapsed[i])
            ro, rr, rte, rtr, _ = reference.step(actions[i])
            expected_state = reference_state({k: v[i] for k, v in after.items()}, False)
            if atol == 0.0:
                assert np.array_equal(ro, o[i]), (i, ro, o[i])
                assert np.array_equal(reference.unwrapped.state, expected_state), (
                    i, reference.unwrapped.state, expected_state)
                assert np.float32(rr) == r[i], (i, rr, r[i])
            else:
                np.testing.assert_allclose(ro, o[i], atol=atol, rtol=0)
                np.testing.assert_allclose(reference.unwrapped.state, expected_state,
                                           atol=atol, rtol=0)
                np.testing.assert_allclose(np.float32(rr), r[i], atol=atol, rtol=1e-6)
            assert rte == te[i] and rtr == tr[i], (i, rte, te[i], rtr, tr[i])
            counts["compared"] += 1
            counts["terminated"] += int(rte)
            counts["truncated"] += int(rtr)
        fresh = pending.copy()  # a reset step (NEXT_STEP) starts an episode
    return counts


def lockstep_batch(env: Any, refs: list[gym.Env], steps: int, *, seed: int,
                   autoreset_mode: str, draw_actions: Callable[[], np.ndarray],
                   to_single: Callable[[Any], Any] = lambda action: action,
                   same_info: Callable[[dict, dict, int, str], None] | None = None,
                   step_check: Callable[[dict, gym.Env, int, str], None] | None = None) -> int:
    """Step the batch ``env`` and ``refs`` (env i's reference, reset with ``seed + i``) with
    the same actions (``draw_actions()`` a batch, ``to_single`` one env's share as the
    reference takes it), asserting equal observations, rewards and flags at every step;
    ``final_obs`` in SAME_STEP (zeros, unmasked, for the envs that did not end); DISABLED
    resets the ended envs with a mask. ``same_info(info, expected, i, where)`` compares info
    entries at resets, steps and final infos; ``step_check(info, ref, i, where)`` checks each
    step further. Closes every env; returns how many episodes ended."""
    num_envs = len(refs)
    try:
        obs, info = env.reset()
        for i, ref in enumerate(refs):
            expected, expected_info = ref.reset(seed=seed + i)
            np.testing.assert_array_equal(obs[i], expected, err_msg=f"reset, env {i}")
            if same_info:
                same_info(info, expected_info, i, f"reset, env {i}")
        pending = np.zeros(num_envs, bool)
        ended = 0
        for t in range(steps):
            actions = draw_actions()
            obs, rewards, terminated, truncated, info = env.step(actions)
            done = np.zeros(num_envs, bool)
            for i, ref in enumerate(refs):
                where = f"step {t}, env {i}"
                if pending[i]:
                    expected, expected_info = ref.reset()
                    r, te, tr = 0.0, False, False
                    pending[i] = False
                else:
                    expected, r, te, tr, expected_info = ref.step(to_single(actions[i]))
                assert (rewards[i], terminated[i], truncated[i]) == (r, te, tr), where
                if (te or tr) and autoreset_mode == "SameStep":
                    assert info["_final_obs"][i], where
                    np.testing.assert_array_equal(info["final_obs"][i], expected,
                                                  err_msg=f"final obs, {where}")
                    if same_info:
                        same_info(info["final_info"], expected_info, i, f"final info, {where}")
                    expected, expected_info = ref.reset()
                elif te or tr:
                    pending[i] = autoreset_mode == "NextStep"
                    done[i] = True
                elif autoreset_mode == "SameStep" and "final_obs" in info:
                    assert not info["_final_obs"][i] and not info["final_obs"][i].any(), where
                np.testing.assert_array_equal(obs[i], expected, err_msg=where)
                if same_info:
                    same_info(info, expected_info, i, where)
                if step_check:
                    step_check(info, ref, i, where)
                ended += bool(te or tr)
            if autoreset_mode == "Disabled" and done.any():
                obs, info = env.reset(options={"reset_mask": done})
                for i in np.flatnonzero(done):
                    expected, expected_info = refs[i].reset()
                    np.testing.assert_array_equal(obs[i], expected,
                                                  err_msg=f"masked reset after step {t}, env {i}")
                    if same_info:
                        same_info(info, expected_info, i, f"masked reset, env {i}")
        return ended
    finally:
        env.close()
        for ref in refs:
            ref.close()
