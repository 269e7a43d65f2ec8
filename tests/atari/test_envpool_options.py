"""EnvPool's training options on the Atari engine: ``episodic_life`` (a lost life is
``terminated``, the game goes on) and ``reward_clip`` (rewards are their sign), off by default
(``test_exactness``: Gymnasium's env, bit for bit), and the ``info`` keys CleanRL's EnvPool
script reads."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet


def _actions(steps: int, n: int, actions: int = 4) -> np.ndarray:
    return np.random.default_rng(0).integers(0, actions, (steps, n))


def test_defaults_add_no_info_keys():
    env = envfleet.make("ALE/Breakout-v5", 2, seed=1)
    _, info = env.reset()
    assert set(info) == {"lives", "_lives"}
    env.close()


def test_reward_clip_gives_the_sign_of_the_unclipped_reward():
    plain = envfleet.make("ALE/SpaceInvaders-v5", 4, seed=3)  # rewards 5 to 200
    clipped = envfleet.make("ALE/SpaceInvaders-v5", 4, seed=3, reward_clip=True)
    plain.reset(), clipped.reset()
    rewards = []
    for action in _actions(200, 4, 6):
        obs, reward, term, trunc, _ = plain.step(action)
        c_obs, c_reward, c_term, c_trunc, c_info = clipped.step(action)
        np.testing.assert_array_equal(c_obs, obs)
        np.testing.assert_array_equal(c_reward, np.sign(reward))
        np.testing.assert_array_equal(c_info["reward"], reward)
        assert (c_term == term).all() and (c_trunc == trunc).all()
        rewards.append(reward)
    assert np.max(rewards) > 1  # a reward the clip changed
    plain.close(), clipped.close()


def test_episodic_life_ends_at_a_lost_life_and_the_game_goes_on():
    env = envfleet.make("ALE/Breakout-v5", 2, seed=7, episodic_life=True)
    ref = envfleet.make("ALE/Breakout-v5", 2, seed=7)
    obs, info = env.reset()
    ref.reset()
    actions = _actions(5000, 2)
    step, lost, over = 0, 0, 0
    while over == 0:
        lives = info["lives"].copy()
        obs, reward, term, trunc, info = env.step(actions[step])
        step += 1
        if lost == 0:  # the same game as Gymnasium's until the first life is lost
            r_obs, r_reward, r_term, _, r_info = ref.step(actions[step - 1])
            np.testing.assert_array_equal(obs, r_obs)
            np.testing.assert_array_equal(reward, r_reward)
            np.testing.assert_array_equal(info["lives"], r_info["lives"])
            assert not r_term.any()
        for i in np.flatnonzero(term):
            frames = env.engine.ales[i].getEpisodeFrameNumber()
            last = obs[i].copy()
            if info["lives"][i] > 0:  # a lost life: terminated, not a game over
                assert info["lives"][i] == lives[i] - 1 and not info["terminated"][i]
                lost += 1
            else:
                assert info["terminated"][i]
                over += 1
            # the reset step: the action is ignored, reward 0, flags down
            obs, reward, term, trunc, info = env.step(actions[step])
            step += 1
            assert reward[i] == 0 and not term[i] and not trunc[i]
            now = env.engine.ales[i].getEpisodeFrameNumber()
            if over:  # a game over restarts the game: the stack is the new first frame
                assert now <= 30 and (obs[i] == obs[i, :1]).all()
            else:  # the game goes on (the no-ops): the stack shifts by one frame
                assert now >= frames and info["lives"][i] == lives[i] - 1
                np.testing.assert_array_equal(obs[i, :3], last[1:])
            break
    assert lost >= 4  # Breakout's five lives: four lost before the game is over
    env.close(), ref.close()


@pytest.mark.parametrize(("options", "words"), [
    ({"episodic_life": 1}, "episodic_life must be a bool, got 1"),
    ({"reward_clip": "yes"}, "reward_clip must be a bool"),
    ({"episodic_life": True, "autoreset_mode": "SameStep"}, "episodic_life needs autoreset"),
    ({"episodic_life": True, "terminal_on_life_loss": True}, "pass one"),
])
def test_bad_options_are_refused(options, words):
    with pytest.raises(ValueError, match=words):
        envfleet.make("ALE/Breakout-v5", 2, seed=0, **options)
