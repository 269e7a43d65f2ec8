"""The Atari engine behind ``envfleet.make("ALE/<Game>-v5", n)``: spaces, the registry's
choice, refusals that move nothing, unknown games, ``copy=False``, ``rollout``, SB3, close."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.atari import AtariVectorEnv
from tests.atari.reference import reference


@pytest.fixture
def env():
    env = envfleet.make("ALE/Breakout-v5", 3, seed=5)
    env.reset()
    yield env
    env.close()


def test_make_picks_the_engine_with_gymnasium_spaces(env):
    assert isinstance(env, AtariVectorEnv)
    assert env.single_observation_space.shape == (4, 84, 84)
    assert env.single_observation_space.dtype == np.uint8
    assert env.observation_space.shape == (3, 4, 84, 84)
    assert env.single_action_space.n == 4  # Breakout's minimal action set
    ref = reference("ALE/Breakout-v5")
    assert env.single_observation_space == ref.observation_space
    assert env.single_action_space == ref.action_space
    ref.close()


def test_executors_keep_the_raw_env():
    raw = envfleet.make("ALE/Breakout-v5", 2, backend="serial", seed=0)
    try:
        assert raw.single_observation_space.shape == (210, 160, 3)
    finally:
        raw.close()


def _state(env):
    e = env.engine
    return (env.engine.obs.copy(), [a.getEpisodeFrameNumber() for a in e.ales],
            e.lives.copy(), e.rewards.copy())


@pytest.mark.parametrize(("actions", "words"), [
    (np.array([0, 4, 1]), "invalid action for env 1: 4 is not in Discrete(4)"),
    (np.array([0, 1, -1]), "invalid action for env 2: -1 is not in Discrete(4)"),
    (np.array([0, 1]), "actions must have shape (3,)"),
    (np.array([0.0, 1.0, 2.0]), "must be integers, got dtype float64"),
    (np.array([0.0, np.nan, 1.0]), "must be integers, got dtype float64"),
])
def test_bad_actions_are_refused_and_nothing_moves(env, actions, words):
    env.step(np.array([1, 1, 1]))
    before = _state(env)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        env.step(actions)
    after = _state(env)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_action_in_a_rollout_names_the_step(env):
    policy = np.zeros((3, 3), dtype=np.int64)
    policy[2, 0] = 9
    with pytest.raises(ValueError, match="rollout step 2: invalid action for env 0: 9"):
        env.rollout(policy)


def test_unknown_game_names_the_installed_ones():
    with pytest.raises(ValueError, match=r"unknown Atari game 'ALE/NoSuchGame-v5'.*Breakout, "):
        envfleet.make("ALE/NoSuchGame-v5", 1)


def test_unknown_options_and_time_limits_are_refused():
    with pytest.raises(TypeError, match=r"unknown options \['frameskip'\]"):
        envfleet.make("ALE/Breakout-v5", 1, frameskip=4)
    with pytest.raises(ValueError, match="max_num_frames_per_episode instead"):
        envfleet.make("ALE/Breakout-v5", 1, max_episode_steps=10)
    with pytest.raises(ValueError, match="screen_size must be"):
        envfleet.make("ALE/Breakout-v5", 1, screen_size=0)


def test_copy_false_hands_out_the_engine_buffers():
    env = envfleet.make("ALE/Breakout-v5", 2, seed=1, copy=False)
    try:
        obs, _ = env.reset()
        assert obs is env.engine.obs
        obs2, rewards, *_ = env.step(np.array([1, 1]))
        assert obs2 is env.engine.obs and rewards is env.engine.rewards
    finally:
        env.close()


def test_rollout_equals_stepping():
    actions = np.random.default_rng(3).integers(4, size=(20, 2))
    stepped, rolled = (envfleet.make("ALE/Breakout-v5", 2, seed=4, terminal_on_life_loss=True)
                       for _ in range(2))
    try:
        stepped.reset()
        rolled.reset()
        rewards = []
        for a in actions:
            obs, r, *_ = stepped.step(a)
            rewards.append(r)
        result = rolled.rollout(actions)
        np.testing.assert_array_equal(result.next_obs, obs)
        np.testing.assert_array_equal(result.rewards, np.stack(rewards))
    finally:
        stepped.close()
        rolled.close()


def test_sb3_facade():
    pytest.importorskip("stable_baselines3")
    from envfleet.sb3 import to_sb3

    venv = to_sb3("ALE/Breakout-v5", 2, seed=0, max_num_frames_per_episode=100)
    try:
        obs = venv.reset()
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        ended = 0
        for _ in range(30):  # truncated at 100 frames (25 steps, less the no-ops)
            obs, _, dones, infos = venv.step(np.array([1, 2]))
            for i in np.flatnonzero(dones):
                assert infos[i]["terminal_observation"].shape == (4, 84, 84)
                ended += 1
        assert ended == 2
    finally:
        venv.close()


def test_closed_env_refuses_calls():
    env = envfleet.make("ALE/Pong-v5", 1, seed=0)
    env.reset()
    env.close()
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.array([0]))


def test_disabled_mode_refuses_an_ended_env_until_it_is_reset():
    env = envfleet.make("ALE/Pong-v5", 2, seed=0, autoreset_mode="Disabled",
                        max_num_frames_per_episode=60)
    try:
        env.reset()
        for _ in range(20):  # truncated within 15 steps (60 frames, less the no-ops)
            *_, truncated, _ = env.step(np.array([0, 1]))
            if truncated.any():
                break
        ended = int(np.flatnonzero(truncated)[0])
        before = _state(env)
        with pytest.raises(ValueError, match=f"env {ended} has finished its episode and "
                                             f"autoreset_mode is DISABLED"):
            env.step(np.array([0, 0]))
        for a, b in zip(before, _state(env), strict=True):
            np.testing.assert_array_equal(a, b)
        env.reset(options={"reset_mask": np.array([True, True])})
        env.step(np.array([0, 0]))
    finally:
        env.close()


def test_thread_counts_give_the_same_trajectories():
    """Envs are independent emulators: the step loop's threads change nothing."""
    import numba

    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    envs = [envfleet.make("ALE/Breakout-v5", 3, seed=9, num_threads=t,
                          terminal_on_life_loss=True) for t in (1, threads)]
    try:
        for env in envs:
            env.reset()
        for a in np.random.default_rng(1).integers(4, size=(40, 3)):
            one, other = (env.step(a) for env in envs)
            for x, y in zip(one[:4], other[:4], strict=True):
                np.testing.assert_array_equal(x, y)
    finally:
        for env in envs:
            env.close()


@pytest.mark.parametrize(("blocked", "words"), [
    ("ale_py", "ALE/Breakout-v5 needs ale-py"),
    ("cv2", "pip install opencv-python-headless"),
])
def test_a_missing_package_is_named(blocked, words):
    """Without ale-py (the ROMs) or OpenCV (the resize's reference), make says what to
    install."""
    import subprocess
    import sys

    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "import envfleet\n"
            "try:\n"
            "    envfleet.make('ALE/Breakout-v5', 1)\n"
            "except ImportError as error:\n"
            "    print(error)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert words in proc.stdout, proc.stdout + proc.stderr


def test_default_threads_move_to_one_thread_when_it_is_faster():
    """Default threads adapt (as the numba engine's): recent one-thread steps clearly faster
    than threaded ones make the next probe switch to one thread; explicit threads stay."""
    import numba

    from envfleet.native.numba_backend import PROBE_EVERY

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads")
    env = envfleet.make("ALE/Pong-v5", 2, seed=0, num_threads=None)
    fixed = envfleet.make("ALE/Pong-v5", 2, seed=0, num_threads=2)
    try:
        env.reset()
        fixed.reset()
        engine = env.engine
        assert engine.adaptive and not fixed.engine.adaptive
        engine._times[1].extend([1e-6] * 3)  # as if one thread had been much faster
        engine._times[engine.num_threads].extend([1.0] * 3)  # (real steps push these out)
        for _ in range(PROBE_EVERY):
            env.step(np.array([0, 1]))
            fixed.step(np.array([0, 1]))
        assert engine.active_threads == 1
        assert fixed.engine.active_threads == 2
        np.testing.assert_array_equal(env.engine.obs, fixed.engine.obs)
    finally:
        env.close()
        fixed.close()
