"""MinAtar SpaceInvaders against the ``minatar`` package, step by step (tests/minatar/harness.py):
random and scripted play, v0 and v1, sticky actions and difficulty ramping on and off."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.minatar.harness import Game, check_against_reference, random_policy

SCALARS = ("pos", "alien_dir", "enemy_move_interval", "alien_move_timer", "alien_shot_timer",
           "ramp_index", "shot_timer")
GRIDS = {"f_bullets": "f_bullet_map", "e_bullets": "e_bullet_map", "aliens": "alien_map"}


def to_reference(env: Any, row: dict[str, np.ndarray]) -> None:
    for name in SCALARS:
        setattr(env, name, int(row[name]))
    for ours, theirs in GRIDS.items():
        setattr(env, theirs, row[ours].astype(float))
    env.terminal = False


def from_reference(env: Any) -> dict[str, Any]:
    return {**{name: getattr(env, name) for name in SCALARS},
            **{ours: getattr(env, theirs) == 1 for ours, theirs in GRIDS.items()}}


SPACE_INVADERS = Game("space_invaders", to_reference, from_reference)


def hunt(left: int, right: int, fire: int, miss: float = 0.1):
    """Fires from under the nearest alien column, stepping out of the way of enemy bullets
    (channel 5) and low aliens: long episodes that clear waves (and ramp the speed)."""
    def policy(obs: np.ndarray, rng: np.random.Generator, t: int) -> np.ndarray:
        n = len(obs)
        aliens = obs[:, :, :, 1].any(axis=1)  # (n, 10): columns holding an alien
        cannon = obs[:, 9, :, 0].argmax(axis=1)
        danger = obs[:, 5:9, :, 5].any(axis=1) | obs[:, 7:10, :, 1].any(axis=1)
        actions = np.full(n, fire)
        for i in range(n):
            c, safe = cannon[i], ~danger[i]
            if not safe[c]:
                escape = [x for x in (c - 1, c + 1) if 0 <= x < 10 and safe[x]]
                if escape:
                    actions[i] = left if escape[0] < c else right
                continue
            distance = np.where(aliens[i] & safe, np.abs(np.arange(10) - c), 99)
            target = distance.argmin()
            if distance[target] < 99 and target != c and safe[c + np.sign(target - c)]:
                actions[i] = left if target < c else right
        random = rng.random(n) < miss
        return np.where(random, rng.choice([left, right, fire], size=n), actions)
    return policy


@pytest.mark.parametrize(("env_id", "n"), [("MinAtar/SpaceInvaders-v0", 6),
                                           ("MinAtar/SpaceInvaders-v1", 4)])
def test_random_play_agrees_with_minatar(env_id: str, n: int) -> None:
    counts = check_against_reference(env_id, SPACE_INVADERS, random_policy(n), steps=200,
                                     num_envs=4)
    assert counts.terminations > 0 and counts.reward > 0 and counts.sticky > 0


def test_scripted_play_agrees_with_minatar() -> None:
    counts = check_against_reference("MinAtar/SpaceInvaders-v1", SPACE_INVADERS,
                                     hunt(1, 2, 3), steps=300, num_envs=3)
    assert counts.best_return > 24  # a wave cleared, the next one faster


@pytest.mark.slow
@pytest.mark.parametrize("sticky", [0.0, 0.1])
@pytest.mark.parametrize("ramping", [True, False])
def test_long_play_agrees_with_minatar(sticky: float, ramping: bool) -> None:
    """Thousands of steps: scripted play clearing waves (ramping speeds them up) and random."""
    scripted = check_against_reference(
        "MinAtar/SpaceInvaders-v0", SPACE_INVADERS, hunt(1, 3, 5, miss=0.05), steps=2500,
        num_envs=4, seed=1, sticky_action_prob=sticky, difficulty_ramping=ramping)
    assert scripted.best_return > 48  # three waves
    random = check_against_reference("MinAtar/SpaceInvaders-v1", SPACE_INVADERS,
                                     random_policy(4), steps=1000, num_envs=4, seed=2,
                                     sticky_action_prob=sticky, difficulty_ramping=ramping)
    assert random.terminations > 10
