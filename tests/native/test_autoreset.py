"""Autoreset conformance for the three Gymnasium modes (after Gymnasium's
``tests/vector/test_autoreset_mode.py``), checked on every available native backend that is
cheap enough here; the three modes must tell the same story for the same seed and actions."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import envfleet
from tests.reference import as_numpy

N, T, LIMIT = 6, 90, 25
BACKENDS = [b for b in ("numba", "torch") if b in envfleet.available_backends()]


def policy(obs: np.ndarray) -> np.ndarray:
    """Envs 0-1 always push right (terminate fast); the others balance (reach the time limit).
    A function of the observation only, so every mode plays the same episodes."""
    a = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    a[:2] = 1
    return a


def torque_policy(obs: np.ndarray) -> np.ndarray:
    """Pendulum-v1 / MountainCarContinuous-v0: a torque from the observation (some beyond the
    action bounds), so every mode plays the same episodes; they end by the time limit."""
    return (3.0 * obs[:, -1:] - obs[:, :1]).astype(np.float32)


POLICIES = {"CartPole-v1": policy, "Pendulum-v1": torque_policy,
            "MountainCarContinuous-v0": lambda obs: 30 * torque_policy(obs)}


def run(mode: AutoresetMode, backend: str, env_id: str = "CartPole-v1") -> list[tuple]:
    """[(obs, rewards, terminated, truncated, info)] per call; a DISABLED-mode reset of the
    finished envs appears as (obs, "reset", mask, None, {})."""
    env = envfleet.make(env_id, N, backend=backend, autoreset_mode=mode, seed=7,
                        max_episode_steps=LIMIT)
    policy = POLICIES[env_id]
    assert env.metadata["autoreset_mode"] is mode
    obs, _ = env.reset()
    out = [(as_numpy(obs), None, None, None, {})]
    done = np.zeros(N, dtype=bool)
    for _ in range(T):
        if mode is AutoresetMode.DISABLED and done.any():
            obs, info = env.reset(options={"reset_mask": done})
            assert info == {}
            out.append((as_numpy(obs), "reset", done, None, {}))
            done = np.zeros(N, dtype=bool)
            continue
        obs, rew, term, trunc, info = env.step(policy(out[-1][0]))
        info = {k: (as_numpy(v) if not isinstance(v, dict) else v) for k, v in info.items()}
        out.append((as_numpy(obs), as_numpy(rew), as_numpy(term), as_numpy(trunc), info))
        done = out[-1][2] | out[-1][3]
    env.close()
    return out


def transitions(steps: list[tuple], i: int, mode: AutoresetMode) -> list[tuple]:
    """Env i's (obs, next obs, reward, terminated, truncated), reset steps left out."""
    result, ended = [], False
    for (prev, *_), (obs, rew, term, trunc, info) in itertools.pairwise(steps):
        if isinstance(rew, str):  # a DISABLED-mode reset call
            continue
        if mode is AutoresetMode.NEXT_STEP and ended:  # the reset step after an episode end
            ended = False
            continue
        final = "final_obs" in info and info["_final_obs"][i]
        nxt = info["final_obs"][i] if final else obs[i]
        result.append((prev[i].tolist(), nxt.tolist(), float(rew[i]), bool(term[i]),
                       bool(trunc[i])))
        ended = bool(term[i] or trunc[i])
    return result


@pytest.mark.parametrize("backend", BACKENDS)
def test_next_step(backend: str) -> None:
    steps = run(AutoresetMode.NEXT_STEP, backend)
    ended_any = False
    for (_, _, term, trunc, _), (obs, rew, term2, trunc2, info) in itertools.pairwise(
            steps[1:]):
        assert info == {}
        done = term | trunc
        ended_any |= done.any()
        # the step after an episode ends is the reset: reward 0, flags down
        assert (rew[done] == 0).all()
        assert not term2[done].any() and not trunc2[done].any()
        assert (np.abs(obs[done]) < 0.05).all()
    assert ended_any
    truncated = np.array([s[3] for s in steps[1:]])
    terminated = np.array([s[2] for s in steps[1:]])
    assert truncated[:, 2:].any() and terminated[:, :2].any()


@pytest.mark.parametrize(("backend", "env_id"), [
    *((b, "CartPole-v1") for b in BACKENDS), *((b, "Pendulum-v1") for b in BACKENDS),
    # the driver is shared: one more family on torch only (each numba mode is a compile)
    *((b, "MountainCarContinuous-v0") for b in BACKENDS if b == "torch")])
def test_modes_agree(backend: str, env_id: str) -> None:
    """The three modes play the same episodes: same transitions per env, and SAME_STEP's
    ``final_obs`` is the terminal observation the other modes return."""
    runs = {mode: run(mode, backend, env_id) for mode in AutoresetMode}
    for i in range(N):
        per_mode = {mode: transitions(steps, i, mode) for mode, steps in runs.items()}
        k = min(len(t) for t in per_mode.values())
        episode_ends = sum(t[3] or t[4] for t in per_mode[AutoresetMode.NEXT_STEP][:k])
        assert episode_ends >= 2, (i, episode_ends)
        reference = per_mode[AutoresetMode.NEXT_STEP][:k]
        assert per_mode[AutoresetMode.SAME_STEP][:k] == reference
        assert per_mode[AutoresetMode.DISABLED][:k] == reference
    # SAME_STEP's info only carries final_obs when an episode ended, with Gymnasium's masks
    for _, _, term, trunc, info in runs[AutoresetMode.SAME_STEP][1:]:
        done = term | trunc
        if done.any():
            assert info["_final_obs"].tolist() == done.tolist()
            assert not info["final_obs"][~done].any()  # rows of envs that did not end: zero
            assert info["_final_info"].tolist() == done.tolist()
            assert info["final_info"] == {}
        else:
            assert info == {}


def test_disabled_refuses_finished_env_until_reset() -> None:
    env = envfleet.make("CartPole-v1", 3, autoreset_mode="Disabled", seed=0)
    env.reset()
    ones = np.ones(3, dtype=np.int64)
    for _ in range(100):
        _, _, term, trunc, _ = env.step(ones)
        if (term | trunc).any():
            break
    done = term | trunc
    first = int(np.flatnonzero(done)[0])
    state = np.stack(env.state).copy()
    with pytest.raises(ValueError, match=f"env {first} has finished its episode"):
        env.step(ones)
    np.testing.assert_array_equal(np.stack(env.state), state)  # nothing moved
    env.reset(options={"reset_mask": done})
    env.step(ones)  # accepted again


def test_reset_mask_resets_only_masked_envs() -> None:
    env = envfleet.make("CartPole-v1", 4, seed=0)
    obs0 = env.reset()[0].copy()
    obs1 = env.step(np.zeros(4, dtype=np.int64))[0].copy()
    mask = np.array([True, False, True, False])
    obs2, _ = env.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(obs2[~mask], obs1[~mask])
    assert not np.array_equal(obs2[mask], obs1[mask])
    assert not np.array_equal(obs2[mask], obs0[mask])  # a new episode, new draw
    env.reset(seed=0, options={"reset_mask": np.ones(4, bool)})
    np.testing.assert_array_equal(env.step(np.zeros(4, dtype=np.int64))[0], obs1)
    # masks that are views (strided, read-only) work as well
    strided = np.array([True, False] * 4)[::2]
    readonly = np.ones(4, dtype=bool)
    readonly.flags.writeable = False
    env.reset(options={"reset_mask": strided})
    env.reset(seed=0, options={"reset_mask": readonly})
    np.testing.assert_array_equal(env.step(np.zeros(4, dtype=np.int64))[0], obs1)


def test_wrappers_see_episodes() -> None:
    env = envfleet.make("CartPole-v1", 8, seed=0)
    env = gym.wrappers.vector.RecordEpisodeStatistics(env)
    env = gym.wrappers.vector.NormalizeObservation(env)
    env.reset(seed=0)
    finished = 0
    for _ in range(300):
        obs, _, _, _, info = env.step(np.random.default_rng(0).integers(0, 2, 8))
        assert obs.shape == (8, 4)
        if "episode" in info:
            mask = info["_episode"]
            finished += int(mask.sum())
            assert (info["episode"]["r"][mask] >= 8).all()
            assert (info["episode"]["r"][mask] == info["episode"]["l"][mask]).all()
    assert finished > 10
