"""The MuJoCo engine as an envfleet env: the backend choice, refusals that move nothing, bad
model files, ``copy=False``, ``rollout``, SB3, thread counts, close."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("mujoco")

import gymnasium as gym

import envfleet
from envfleet.mujoco import MujocoVectorEnv


@pytest.fixture
def env():
    env = envfleet.make("Hopper-v5", 3, seed=0)
    env.reset()
    yield env
    env.close()


def test_make_picks_the_engine_with_gymnasium_spaces(env):
    ref = gym.make("Hopper-v5")
    assert isinstance(env, MujocoVectorEnv)
    assert env.single_observation_space == ref.observation_space
    assert env.single_action_space == ref.action_space
    assert env.observation_space.shape == (3, 11) and env.action_space.shape == (3, 3)


def test_executors_keep_gymnasiums_env():
    pool = envfleet.make("HalfCheetah-v5", 2, backend="serial", seed=0)
    try:
        assert not isinstance(pool, MujocoVectorEnv)
        assert pool.reset()[0].shape == (2, 17)
    finally:
        pool.close()


@pytest.mark.parametrize(("actions", "words"), [
    (np.zeros((3, 2), np.float32), r"shape \(3, 3\)"),
    (np.zeros((2, 3), np.float32), r"shape \(3, 3\)"),
    (np.zeros((3, 3), np.int64), "must be float32 or float64"),
    (np.array([[0, 0, 0], [0, np.nan, 0], [0, 0, 0]], np.float32), "env 1 is not finite"),
    (np.array([[0, 0, 0], [0, 0, 0], [np.inf, 0, 0]]), "env 2 is not finite"),
    (np.zeros((3, 3), ">f8"), "must be float32 or float64"),  # not the native byte order
    (np.array([[np.inf, 0, 0], [-np.inf, 0, 0], [0, 0, 0]]), "env 0 is not finite"),
])
def test_bad_actions_are_refused_and_nothing_moves(env, actions, words):
    before = [d.qpos.copy() for d in env.datas], env.elapsed.copy()
    with pytest.raises(ValueError, match=words):
        env.step(actions)
    for data, qpos in zip(env.datas, before[0], strict=True):
        np.testing.assert_array_equal(data.qpos, qpos)
    np.testing.assert_array_equal(env.elapsed, before[1])


def test_finite_actions_however_large_are_taken_without_warnings(env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.step(np.full((3, 3), 3e38, np.float32))  # their sum would overflow
    assert (env.elapsed == 1).all()


def test_bad_action_in_a_rollout_names_the_step(env):
    actions = np.zeros((4, 3, 3), np.float32)
    actions[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"rollout step 2: .*env 1 is not finite"):
        env.rollout(actions)


def test_bad_model_files_name_the_file_and_the_parser_message(tmp_path):
    with pytest.raises(ValueError, match=r"nowhere\.xml"):
        envfleet.make("HalfCheetah-v5", 2, xml_file=str(tmp_path / "nowhere.xml"))
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><geom type='nonsense'/></worldbody></mujoco>")
    with pytest.raises(ValueError, match=r"bad\.xml.*(nonsense|type)"):
        envfleet.make("HalfCheetah-v5", 2, xml_file=str(bad))


def test_unknown_options_and_bad_settings_are_refused():
    with pytest.raises(TypeError, match="unknown options \\['healthy_reward'\\]"):
        envfleet.make("HalfCheetah-v5", 2, healthy_reward=1.0)
    with pytest.raises(ValueError, match="frame_skip must be an int >= 1"):
        envfleet.make("Hopper-v5", 2, frame_skip=0)
    with pytest.raises(ValueError, match="max_episode_steps must be an int >= 1"):
        envfleet.make("Hopper-v5", 2, max_episode_steps=0)


def test_copy_false_hands_out_the_engine_buffers():
    env = envfleet.make("Walker2d-v5", 2, seed=0, copy=False)
    try:
        obs, _ = env.reset()
        obs2, rewards, *_ = env.step(np.zeros((2, 6), np.float32))
        assert obs is obs2 is env.obs and rewards is env.rewards
    finally:
        env.close()


def test_rollout_equals_stepping():
    actions = np.random.default_rng(0).uniform(-1, 1, (20, 2, 6)).astype(np.float32)
    stepped = envfleet.make("HalfCheetah-v5", 2, seed=4, max_episode_steps=7)
    rolled = envfleet.make("HalfCheetah-v5", 2, seed=4, max_episode_steps=7)
    try:
        first, _ = stepped.reset()
        rolled.reset()
        expected = [stepped.step(a)[:4] for a in actions]
        result = rolled.rollout(actions)
        seen = np.stack([first, *(e[0] for e in expected[:-1])])  # each action's observation
        np.testing.assert_array_equal(result.obs, seen)
        np.testing.assert_array_equal(result.next_obs, expected[-1][0])
        np.testing.assert_array_equal(result.rewards, np.stack([e[1] for e in expected]))
        np.testing.assert_array_equal(result.truncated, np.stack([e[3] for e in expected]))
    finally:
        stepped.close()
        rolled.close()


def test_sb3_facade():
    pytest.importorskip("stable_baselines3")
    from envfleet.sb3 import to_sb3

    venv = to_sb3("Hopper-v5", 2, seed=0, max_episode_steps=10)
    try:
        assert venv.reset().shape == (2, 11)
        ended = 0
        for _ in range(12):
            _, _, dones, infos = venv.step(np.zeros((2, 3), np.float32))
            for i in np.flatnonzero(dones):
                assert infos[i]["terminal_observation"].shape == (11,)
                ended += 1
        assert ended == 2
    finally:
        venv.close()


def test_closed_env_refuses_calls(env):
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros((3, 3), np.float32))


def test_disabled_mode_refuses_an_ended_env_until_it_is_reset():
    env = envfleet.make("HalfCheetah-v5", 2, seed=0, autoreset_mode="Disabled",
                        max_episode_steps=2)
    try:
        env.reset()
        env.step(np.zeros((2, 6), np.float32))
        assert env.step(np.zeros((2, 6), np.float32))[3].all()
        with pytest.raises(ValueError, match="env 0"):
            env.step(np.zeros((2, 6), np.float32))
        env.reset(options={"reset_mask": np.array([True, True])})
        env.step(np.zeros((2, 6), np.float32))
    finally:
        env.close()


def test_thread_counts_give_the_same_trajectories():
    import numba

    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    actions = np.random.default_rng(1).uniform(-1, 1, (15, 4, 3)).astype(np.float32)
    results = []
    for count in (1, threads):
        env = envfleet.make("Hopper-v5", 4, seed=2, num_threads=count, max_episode_steps=6)
        env.reset()
        results.append(env.rollout(actions).obs)
        env.close()
    np.testing.assert_array_equal(results[0], results[1])


def test_default_threads_move_to_one_thread_when_it_is_faster():
    """Default threads adapt (``ThreadChoice``, shared with the Atari engine): recent
    one-thread steps clearly faster make the next probe switch; explicit threads stay."""
    import numba

    from envfleet.native.numba_backend import PROBE_EVERY

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads")
    env = envfleet.make("HalfCheetah-v5", 2, seed=0)
    fixed = envfleet.make("HalfCheetah-v5", 2, seed=0, num_threads=2)
    try:
        env.reset()
        fixed.reset()
        assert env.threads.adaptive and not fixed.threads.adaptive
        env.threads.times[1].extend([1e-6] * 3)  # as if one thread had been much faster
        env.threads.times[2].extend([1.0] * 3)
        for _ in range(PROBE_EVERY):
            env.step(np.zeros((2, 6), np.float32))
            fixed.step(np.zeros((2, 6), np.float32))
        assert env.threads.active_threads == 1 and fixed.threads.active_threads == 2
        np.testing.assert_array_equal(env.obs, fixed.obs)
    finally:
        env.close()
        fixed.close()


def test_a_missing_mujoco_is_named():
    import subprocess
    import sys

    code = ("import sys; sys.modules['mujoco'] = None\n"
            "import envfleet\n"
            "try:\n"
            "    envfleet.make('Hopper-v5', 1)\n"
            "except ImportError as error:\n"
            "    print(error)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert "Hopper-v5 needs mujoco" in proc.stdout, proc.stdout + proc.stderr
