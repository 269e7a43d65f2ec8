"""Helpers that compare a native env with Gymnasium's own env, step by step (state transplant)."""

from __future__ import annotations

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
