"""MinAtar Freeway against the ``minatar`` package, step by step (tests/minatar/harness.py):
random and scripted play, v0 and v1, sticky actions on and off, whole 2,500-frame episodes in
the slow run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.minatar.harness import Game, check_against_reference, random_policy


def to_reference(env: Any, row: dict[str, np.ndarray]) -> None:
    env.pos = int(row["pos"])
    env.move_timer = int(row["move_timer"])
    env.terminate_timer = int(row["terminate_timer"])
    env.cars = [[int(row["car_x"][j]), j + 1, int(row["car_timer"][j]), int(row["car_speed"][j])]
                for j in range(8)]
    env.terminal = False


def from_reference(env: Any) -> dict[str, Any]:
    assert [car[1] for car in env.cars] == list(range(1, 9))  # car j in row j + 1
    return {"pos": env.pos, "move_timer": env.move_timer,
            "terminate_timer": env.terminate_timer,
            "car_x": [car[0] for car in env.cars], "car_timer": [car[2] for car in env.cars],
            "car_speed": [car[3] for car in env.cars]}


FREEWAY = Game("freeway", to_reference, from_reference)


def cross(up: int, noop: int, miss: float = 0.1):
    """Up whenever the lane above is clear of cars near column 4: many crossings, each
    drawing new car speeds."""
    def policy(obs: np.ndarray, rng: np.random.Generator, t: int) -> np.ndarray:
        chicken = obs[:, :, 4, 0].argmax(axis=1)
        above = np.maximum(chicken - 1, 0)
        cars = obs[np.arange(len(obs)), above, 3:6, 1].any(axis=1)
        actions = np.where(cars, noop, up)
        random = rng.random(len(obs)) < miss
        return np.where(random, rng.choice([up, noop], size=len(obs)), actions)
    return policy


@pytest.mark.parametrize(("env_id", "n"), [("MinAtar/Freeway-v0", 6), ("MinAtar/Freeway-v1", 3)])
def test_random_play_agrees_with_minatar(env_id: str, n: int) -> None:
    counts = check_against_reference(env_id, FREEWAY, random_policy(n), steps=150, num_envs=3)
    assert counts.sticky > 0


def test_scripted_play_agrees_with_minatar() -> None:
    counts = check_against_reference("MinAtar/Freeway-v1", FREEWAY, cross(1, 0), steps=300,
                                     num_envs=3, sticky_action_prob=0.0)
    assert counts.reward >= 3 and counts.draws >= 16 * 3  # crossings draw new speeds


@pytest.mark.slow
@pytest.mark.parametrize("sticky", [0.0, 0.1])
def test_whole_episodes_agree_with_minatar(sticky: float) -> None:
    """Two whole episodes per env (2,501 steps each, the last one terminal) of scripted play,
    and random play; ramping off makes no difference to Freeway (checked as well)."""
    scripted = check_against_reference("MinAtar/Freeway-v0", FREEWAY, cross(2, 0), steps=5010,
                                       num_envs=3, seed=1, sticky_action_prob=sticky)
    assert scripted.terminations == 6 and scripted.reward > 100
    random = check_against_reference("MinAtar/Freeway-v1", FREEWAY, random_policy(3),
                                     steps=1000, num_envs=3, seed=2, sticky_action_prob=sticky,
                                     difficulty_ramping=False)
    assert random.steps == 3000
