"""Checks shared by the continuous-action families (Pendulum-v1, MountainCarContinuous-v0):
each family's test module calls them with its own id, policy and state transplant."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.registry import backend_status
from tests.reference import as_numpy

CUDA_UNAVAILABLE = backend_status("cuda")
needs_cuda = pytest.mark.skipif(
    CUDA_UNAVAILABLE is not None,
    reason=f"cuda backend unavailable ({CUDA_UNAVAILABLE}); run with NUMBA_ENABLE_CUDASIM=1")
needs_torch = pytest.mark.skipif("torch" not in envfleet.available_backends(),
                                 reason="torch is not installed")


def tensor(values: np.ndarray):
    """A torch tensor of ``values`` (float32 widened to float64, as the state columns are)."""
    import torch

    values = np.asarray(values)
    return torch.from_numpy(values.astype(np.float64) if values.dtype.kind == "f" else values)


def snapshot(env) -> list[np.ndarray]:
    """Every state column and the RNG counters, as NumPy copies."""
    return [as_numpy(c) for c in env.state] + [as_numpy(c) for c in env.engine.rng]


def rollout(env, policy, steps: int, seed: int = 0) -> list[np.ndarray]:
    """Observations, rewards and flags of ``steps`` steps from ``reset(seed=seed)``."""
    rng = np.random.default_rng(seed)
    obs = as_numpy(env.reset(seed=seed)[0])
    out = [obs]
    for _ in range(steps):
        obs, rew, term, trunc = (as_numpy(x) for x in env.step(policy(obs, rng))[:4])
        out += [obs, rew, term, trunc]
    return out


def assert_same_rollouts(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y, strict=True)


def check_bad_actions(env_id: str, backend: str, n: int = 6) -> None:
    """NaN / inf refused naming the first bad env, nothing moves; wrong shape or dtype kind
    refused; an out-of-range action is accepted (the env clips it)."""
    env = envfleet.make(env_id, n, backend=backend, seed=0)
    env.reset()
    env.step(np.zeros((n, 1), dtype=np.float32))
    before = snapshot(env)
    nan = np.zeros((n, 1), dtype=np.float32)
    nan[4, 0], nan[2, 0] = np.inf, np.nan
    cases = [
        (nan, r"invalid action for env 2: \[nan\] is not finite \(as float32\)"),
        (np.full((n, 1), -np.inf), r"invalid action for env 0: \[-inf\] is not finite"),
        (np.full((n, 1), 1e40), r"invalid action for env 0: \[inf\] is not finite"),
        (np.zeros(n, dtype=np.float32), rf"actions must have shape \({n}, 1\)"),
        (np.zeros((n, 2), dtype=np.float32), rf"actions must have shape \({n}, 1\)"),
        (np.zeros((n, 1), dtype=bool), "must be numbers .* got dtype bool"),
        (np.zeros((n, 1), dtype=np.complex64), "must be numbers .* got dtype complex64"),
    ]
    for actions, expected in cases:
        with pytest.raises(ValueError) as caught:
            env.step(actions)
        assert re.search(expected, str(caught.value)), (str(caught.value), expected)
        for x, y in zip(before, snapshot(env), strict=True):
            np.testing.assert_array_equal(x, y)  # nothing moved
    env.step(np.full((n, 1), 1e6, dtype=np.float64))  # out of range: clipped by the env
    env.close()


def check_out_of_range_is_clipped(env_id: str, backend: str, high: float) -> tuple:
    """Two twins, one given ``high`` and one ``10 * high``: the same next state (the env clips);
    returns both rewards (MountainCarContinuous charges the unclipped action)."""
    twins = [envfleet.make(env_id, 3, backend=backend, seed=5) for _ in range(2)]
    rewards = []
    for env, value in zip(twins, (high, 10 * high), strict=True):
        env.reset()
        rewards.append(as_numpy(env.step(np.full((3, 1), value, dtype=np.float32))[1]))
    for a, b in zip(twins[0].state, twins[1].state, strict=True):
        np.testing.assert_array_equal(as_numpy(a), as_numpy(b))
    return rewards


def check_deterministic(env_id: str, policy, steps: int) -> None:
    """The same seed gives the same trajectories on 1 and 2 numba threads (the parallel kernel
    at 1024 envs) and on torch."""
    runs = [rollout(envfleet.make(env_id, 1024, backend="numba", num_threads=t), policy,
                    steps, seed=11) for t in (1, 2)]
    assert_same_rollouts(*runs)
    if "torch" in envfleet.available_backends():
        assert_same_rollouts(runs[0], rollout(envfleet.make(env_id, 1024, backend="torch"),
                                              policy, steps, seed=11))


def check_cuda_matches_numba(env_id: str, policy, mode: str, steps: int, n: int = 8,
                             limit: int = 5) -> None:
    """cuda (the simulator here, or a GPU) against numba, buffer for buffer, with episode ends."""
    kw = dict(autoreset_mode=mode, seed=3, max_episode_steps=limit)
    cenv = envfleet.make(env_id, n, backend="cuda", threads_per_block=32, **kw)
    nenv = envfleet.make(env_id, n, backend="numba", **kw)
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(as_numpy(cenv.reset()[0]), nenv.reset()[0])
    obs = nenv.reset()[0]
    cenv.reset()
    for _ in range(steps):
        actions = policy(obs, rng)
        cout, nout = cenv.step(actions), nenv.step(actions)
        for c, r in zip(cout[:4], nout[:4], strict=True):
            np.testing.assert_array_equal(as_numpy(c), r, strict=True)
        if mode == "SameStep" and "final_obs" in nout[4]:
            np.testing.assert_array_equal(as_numpy(cout[4]["final_obs"]), nout[4]["final_obs"])
        for c, r in zip(cenv.state, nenv.state, strict=True):
            np.testing.assert_array_equal(as_numpy(c), r)
        obs = nout[0]
        if mode == "Disabled":
            done = nout[2] | nout[3]
            if done.any():
                obs = nenv.reset(options={"reset_mask": done})[0]
                cenv.reset(options={"reset_mask": done})


def check_gymnasium_integration(env_id: str, episode_length: int, policy) -> None:
    """Registered with Gymnasium (make_vec, make), listed, backend="auto", and Gymnasium's
    RecordEpisodeStatistics wrapper sees its episodes."""
    native = [b for b in ("numba", "cuda", "torch") if b in envfleet.available_backends()]
    assert envfleet.list_envs()[env_id] == native
    assert envfleet.make(env_id, 2).backend == "numba"
    env = gym.make_vec(f"envfleet/{env_id}", num_envs=4, vectorization_mode="vector_entry_point")
    env = gym.wrappers.vector.RecordEpisodeStatistics(env)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    lengths = []
    for _ in range(episode_length + 2):
        obs, _, _, _, info = env.step(policy(obs, rng))
        if "episode" in info:
            lengths += info["episode"]["l"][info["_episode"]].tolist()
    assert lengths and all(0 < length <= episode_length for length in lengths)
    single = gym.make(f"envfleet/{env_id}")
    reference = gym.make(env_id)
    assert single.observation_space == reference.observation_space
    assert single.action_space == reference.action_space
    obs, _ = single.reset(seed=0)
    assert single.observation_space.contains(obs)
