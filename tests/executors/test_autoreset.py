"""The three autoreset modes on every executor, with counting envs (after Gymnasium's
``tests/vector/test_autoreset_mode.py``): env i's episodes last ``2 + i % 3`` steps, env 4's are
truncated at 2 steps; obs = [index, seed, episode, t]."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

import envfleet
from tests.executors.envs import CountingEnv
from tests.executors.helpers import BACKENDS

N, STEPS = 5, 9
LENGTHS = [2 + i % 3 for i in range(N)]


def factories() -> list:
    return [functools.partial(CountingEnv, index=i, length=LENGTHS[i],
                              truncate_at=2 if i == 4 else None) for i in range(N)]


def make(backend: str, mode: AutoresetMode):
    options = {"num_workers": 2} if backend == "pool" else {}
    return envfleet.make(factories(), N, backend=backend, autoreset_mode=mode, **options)


def actions(t: int) -> np.ndarray:
    return (np.arange(N) + t) % 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_next_step(backend) -> None:
    env = make(backend, AutoresetMode.NEXT_STEP)
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    obs, _ = env.reset(seed=0)
    t = np.zeros(N, dtype=int)
    episode = np.zeros(N, dtype=int)
    ended = np.zeros(N, dtype=bool)
    for k in range(STEPS):
        obs, rewards, terminated, truncated, info = env.step(actions(k))
        # envs that ended last step are reset: reward 0, flags down, a new episode at t 0
        episode[ended] += 1
        t = np.where(ended, 0, t + 1)
        np.testing.assert_array_equal(obs[:, 2], episode)
        np.testing.assert_array_equal(obs[:, 3], t)
        np.testing.assert_array_equal(rewards, np.where(ended, 0, 10 * t + actions(k)))
        assert not (terminated | truncated)[ended].any()
        np.testing.assert_array_equal(terminated, [t[i] >= LENGTHS[i] and i != 4
                                                   for i in range(N)])
        np.testing.assert_array_equal(truncated, [i == 4 and t[i] >= 2 for i in range(N)])
        # the reset infos of the reset envs, the step infos of the others (masks per env)
        if "index" in info:
            np.testing.assert_array_equal(info["_index"], ended)
        else:
            assert not ended.any()
        ended = terminated | truncated
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_step(backend) -> None:
    env = make(backend, AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    t = np.zeros(N, dtype=int)
    episode = np.zeros(N, dtype=int)
    saw_end = False
    for k in range(STEPS):
        obs, rewards, terminated, truncated, info = env.step(actions(k))
        t += 1
        ended = terminated | truncated
        np.testing.assert_array_equal(rewards, 10 * t + actions(k))
        if ended.any():
            saw_end = True
            np.testing.assert_array_equal(info["_final_obs"], ended)
            np.testing.assert_array_equal(info["_final_info"], ended)
            final = info["final_obs"]
            np.testing.assert_array_equal(final[ended, 3], t[ended])  # the terminal obs
            np.testing.assert_array_equal(final[ended, 2], episode[ended])
            assert not final[~ended].any()  # rows of envs that did not end are zero
            # final infos: step infos of the ended envs (t even) with their own masks
            even = ended & (t % 2 == 0)
            if even.any():
                np.testing.assert_array_equal(info["final_info"]["_t"], even)
            np.testing.assert_array_equal(info["_index"], ended)  # the reset's info
        else:
            assert "final_obs" not in info
        episode[ended] += 1
        t[ended] = 0
        np.testing.assert_array_equal(obs[:, 2], episode)  # obs is already the new episode's
        np.testing.assert_array_equal(obs[:, 3], t)
    assert saw_end
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_disabled(backend) -> None:
    env = make(backend, AutoresetMode.DISABLED)
    env.reset(seed=0)
    for k in range(2):
        obs, _, terminated, truncated, info = env.step(actions(k))
    ended = terminated | truncated
    np.testing.assert_array_equal(ended, [True, False, False, True, True])
    with pytest.raises(ValueError, match="env 0 has finished its episode"):
        env.step(actions(2))
    state = env.reset(options={"reset_mask": np.array([False, True, False, False, False])})[0]
    with pytest.raises(ValueError, match="env 0 has finished its episode"):
        env.step(actions(2))
    np.testing.assert_array_equal(state[1, 2:], [1, 0])  # env 1 was reset: episode 1, t 0
    np.testing.assert_array_equal(state[2, 2:], [0, 2])  # env 2 was not
    obs, info = env.reset(options={"reset_mask": ended})
    np.testing.assert_array_equal(info["_index"], ended)
    np.testing.assert_array_equal(obs[:, 2:], [[1, 0], [1, 0], [0, 2], [1, 0], [1, 0]])
    obs = env.step(actions(2))[0]  # accepted again
    np.testing.assert_array_equal(obs[:, 3], [1, 1, 3, 1, 1])
    same, info = env.reset(options={"reset_mask": np.zeros(N, dtype=bool)})  # resets nothing
    np.testing.assert_array_equal(same, obs)
    assert info == {}
    env.close()


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_modes_match_gymnasium_sync(mode) -> None:
    """Pool and Gymnasium's SyncVectorEnv agree step for step, infos included."""
    reference = gym.vector.SyncVectorEnv(factories(), autoreset_mode=mode)
    env = make("pool", mode)
    results = []
    for venv in (env, reference):
        out = [venv.reset(seed=0)]
        for k in range(STEPS):
            step = venv.step(actions(k))
            if mode is AutoresetMode.SAME_STEP and "final_obs" in step[4]:
                info = dict(step[4])  # Gymnasium: object array; envfleet: batched, zero rows
                mask = info["_final_obs"]
                final = np.stack([o if m else np.zeros(4, np.int64)
                                  for o, m in zip(info.pop("final_obs"), mask, strict=True)])
                step = (*step[:4], {**info, "final_obs": final})
            out.append(step)
            if mode is AutoresetMode.DISABLED and (step[2] | step[3]).any():
                out.append(venv.reset(options={"reset_mask": step[2] | step[3]}))
        venv.close()
        results.append(out)
    assert data_equivalence(results[0], results[1])
