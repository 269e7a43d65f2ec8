"""MinAtar Breakout against the ``minatar`` package, step by step (tests/minatar/harness.py):
random and scripted play, v0 and v1, sticky actions on and off. The long runs are slow."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.minatar.harness import Game, check_against_reference, random_policy

COLUMNS = ("ball_x", "ball_y", "ball_dir", "pos", "last_x", "last_y")


def to_reference(env: Any, row: dict[str, np.ndarray]) -> None:
    for name in COLUMNS:
        setattr(env, name, int(row[name]))
    env.strike = bool(row["strike"])
    env.brick_map = row["bricks"].astype(float)
    env.terminal = False


def from_reference(env: Any) -> dict[str, Any]:
    return {**{name: getattr(env, name) for name in COLUMNS}, "strike": env.strike,
            "bricks": env.brick_map == 1}


BREAKOUT = Game("breakout", to_reference, from_reference)


def follow_the_ball(left: int, right: int, noop: int, miss: float = 0.1):
    """Moves the paddle under the ball (channel 1; the paddle is channel 0 of row 9), a random
    action with probability ``miss``: long episodes that clear the bricks and refill them."""
    def policy(obs: np.ndarray, rng: np.random.Generator, t: int) -> np.ndarray:
        ball = obs[:, :, :, 1].any(axis=1).argmax(axis=1)
        paddle = obs[:, 9, :, 0].argmax(axis=1)
        actions = np.where(ball < paddle, left, np.where(ball > paddle, right, noop))
        random = rng.random(len(obs)) < miss
        return np.where(random, rng.choice([left, right, noop], size=len(obs)), actions)
    return policy


@pytest.mark.parametrize(("env_id", "n"), [("MinAtar/Breakout-v0", 6), ("MinAtar/Breakout-v1", 3)])
def test_random_play_agrees_with_minatar(env_id: str, n: int) -> None:
    counts = check_against_reference(env_id, BREAKOUT, random_policy(n), steps=150, num_envs=4)
    assert counts.terminations > 3 and counts.resets > 3 and counts.reward > 0
    assert counts.sticky > 0  # sticky_action_prob=0.1 by default


def test_scripted_play_agrees_with_minatar_without_sticky_actions() -> None:
    counts = check_against_reference("MinAtar/Breakout-v1", BREAKOUT,
                                     follow_the_ball(1, 2, 0), steps=300, num_envs=3,
                                     sticky_action_prob=0.0, difficulty_ramping=False)
    assert counts.reward >= 20 and counts.sticky == 0


@pytest.mark.slow
@pytest.mark.parametrize("sticky", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("ramping", [True, False])
def test_long_play_agrees_with_minatar(sticky: float, ramping: bool) -> None:
    """Thousands of steps: scripted play that clears whole walls (the refill) and random play."""
    scripted = check_against_reference(
        "MinAtar/Breakout-v0", BREAKOUT, follow_the_ball(1, 3, 0, miss=0.02), steps=2500,
        num_envs=4, seed=1, sticky_action_prob=sticky, difficulty_ramping=ramping)
    if sticky <= 0.1:
        assert scripted.best_return > 30  # a wall cleared and refilled
    random = check_against_reference("MinAtar/Breakout-v1", BREAKOUT, random_policy(3),
                                     steps=1000, num_envs=4, seed=2,
                                     sticky_action_prob=sticky, difficulty_ramping=ramping)
    assert random.terminations > 50
