"""MinAtar Asterix against the ``minatar`` package, step by step (tests/minatar/harness.py):
random play and a scripted dodger that lives through the difficulty ramp, v0 and v1, sticky
actions and ramping on and off. The long runs are slow."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import envfleet
from envfleet.envs.minatar.asterix import SLOTS
from envfleet.registry import backend_status
from tests.minatar.harness import (
    DRAWS,
    Draws,
    Game,
    check_against_reference,
    cuda_agrees_with_numba,
    minatar,
    random_policy,
    unit_draws,
)
from tests.reference import as_numpy

COLUMNS = ("player_x", "player_y", "spawn_speed", "spawn_timer", "move_speed", "move_timer",
           "ramp_timer", "ramp_index")


def to_reference(env: Any, row: dict[str, np.ndarray]) -> None:
    for name in COLUMNS:
        setattr(env, name, int(row[name]))
    env.entities = [[int(row["entity_x"][j]), j + 1, bool(row["entity_right"][j]),
                     bool(row["entity_gold"][j])] if row["entity_alive"][j] else None
                    for j in range(SLOTS)]
    env.shot_timer = 0  # set by the reference's reset, read nowhere
    env.terminal = False


def from_reference(env: Any) -> dict[str, Any]:
    entities = [e if e is not None else [0, j + 1, False, False]
                for j, e in enumerate(env.entities)]
    assert all(e[1] == j + 1 for j, e in enumerate(entities))  # slot j lives in row j + 1
    return {**{name: getattr(env, name) for name in COLUMNS},
            "entity_alive": [e is not None for e in env.entities],
            "entity_x": [e[0] for e in entities], "entity_right": [e[2] for e in entities],
            "entity_gold": [e[3] for e in entities]}


class Recorder:
    """The harness's ``Game`` for Asterix, noting what the compared steps started from: the
    highest ramp index, and how many spawned with every slot taken (so a test can say the run
    reached the ramp and the reference's "no free row" branch)."""

    def __init__(self) -> None:
        self.ramp_index = 0
        self.full_spawns = 0
        self.game = Game("asterix", self._to_reference, from_reference)

    def _to_reference(self, env: Any, row: dict[str, np.ndarray]) -> None:
        self.ramp_index = max(self.ramp_index, int(row["ramp_index"]))
        self.full_spawns += int(row["spawn_timer"] == 0 and row["entity_alive"].all())
        to_reference(env, row)


def dodge(noop: int, left: int, up: int, right: int, down: int, miss: float = 0.05):
    """Walks towards gold and away from enemies, seen in the observation only (an entity's
    direction from its trail; one on an edge without a trail is entering): each move is scored
    by the enemies that could reach its cell within two moves of theirs and the distance to
    the nearest gold; the edge columns (where entities spawn) are avoided. A random action with
    probability ``miss``. Long episodes: it lives through several steps of the ramp."""
    moves = ((noop, 0, 0), (left, -1, 0), (up, 0, -1), (right, 1, 0), (down, 0, 1))

    def policy(obs: np.ndarray, rng: np.random.Generator, t: int) -> np.ndarray:
        actions = np.empty(len(obs), dtype=np.int64)
        for n, grid in enumerate(obs):
            py, px = np.argwhere(grid[:, :, 0])[0]
            enemies = []
            for y, x in np.argwhere(grid[:, :, 1]):
                if x > 0 and grid[y, x - 1, 2]:
                    step = 1
                elif x < 9 and grid[y, x + 1, 2]:
                    step = -1
                else:
                    step = 1 if x == 0 else -1
                enemies.append((y, x, step))
            golds = np.argwhere(grid[:, :, 3])
            best, choice = None, noop
            for action, dx, dy in moves:
                x, y = min(9, max(0, px + dx)), min(8, max(1, py + dy))
                danger = sum(1 for ey, ex, s in enemies
                             if ey == y and any(ex + s * k == x for k in range(3)))
                edge = x in (0, 9)
                far = min((abs(gy - y) + abs(gx - x) for gy, gx in golds), default=0)
                score = (danger, edge, far, rng.random())
                if best is None or score < best:
                    best, choice = score, action
            actions[n] = choice
        random = rng.random(len(obs)) < miss
        return np.where(random, rng.choice([noop, left, up, right, down], size=len(obs)),
                        actions)
    return policy


@pytest.mark.parametrize(("env_id", "n"), [("MinAtar/Asterix-v0", 6), ("MinAtar/Asterix-v1", 5)])
def test_random_play_agrees_with_minatar(env_id: str, n: int) -> None:
    counts = check_against_reference(env_id, Recorder().game, random_policy(n), steps=200,
                                     num_envs=4)
    assert counts.terminations > 3 and counts.resets > 3 and counts.reward > 0
    assert counts.sticky > 0 and counts.draws > 0  # sticky_action_prob=0.1 by default


def test_scripted_play_agrees_with_minatar_through_the_ramp() -> None:
    recorder = Recorder()
    counts = check_against_reference("MinAtar/Asterix-v1", recorder.game, dodge(0, 1, 2, 3, 4),
                                     steps=300, num_envs=3)
    assert recorder.ramp_index >= 2 and counts.reward >= 10


def test_a_spawn_with_every_row_taken_agrees_with_minatar() -> None:
    """Rows full when the spawn timer is up: the reference draws side and kind, then returns
    (no slot draw, nothing spawned); the same step env 0's player walks into an enemy (the step
    goes on: the entities still move) and env 1's gold walks into the player."""
    env = envfleet.make("MinAtar/Asterix-v1", 2, backend="numba", seed=0,
                        sticky_action_prob=0.0)
    env.reset()
    env.step(np.zeros(2, dtype=np.int64))
    state = env.state
    state.entity_alive[:] = True
    state.entity_x[:] = [[0, 3, 9, 4, 4, 7, 1, 8], [5, 2, 9, 6, 7, 0, 3, 3]]
    state.entity_right[:] = [[True, False, False, True, True, False, True, False],
                             [False, True, False, False, False, True, True, False]]
    state.entity_gold[:, 4] = [False, True]
    state.spawn_timer[:] = 0
    state.move_timer[:] = 0
    before = [{name: as_numpy(c)[i] for name, c in zip(state._fields, state, strict=True)}
              for i in range(2)]
    seeds, episodes, elapsed = (as_numpy(x) for x in env.engine.rng)
    actions = np.array([1, 3])  # left into the enemy at (5, 4); right, gold at (5, 7) comes
    obs, rewards, terminated, _, _ = env.step(actions)
    assert terminated.tolist() == [True, False] and rewards.tolist() == [0, 1]
    for i in range(2):
        reference = minatar.Environment("asterix", sticky_action_prob=0.0)
        to_reference(reference.env, before[i])
        draws = Draws(unit_draws(seeds.view(np.uint64)[i], episodes.view(np.uint64)[i],
                                 elapsed[i], 0, DRAWS))
        reference.random = reference.env.random = draws
        assert reference.act(actions[i]) == (rewards[i], terminated[i])
        assert draws.used == 3  # sticky, side, kind: no slot drawn
        assert np.array_equal(reference.state(), obs[i])
        row = {name: as_numpy(c)[i] for name, c in zip(state._fields, state, strict=True)}
        for name, value in from_reference(reference.env).items():
            assert np.array_equal(np.asarray(value), row[name]), (i, name)
    env.close()


def test_actions_outside_the_minimal_set_are_refused() -> None:
    """v1 has the five moves (no fire): action 5 is refused and no env moves."""
    env = envfleet.make("MinAtar/Asterix-v1", 2, seed=0)
    env.reset()
    before = [as_numpy(c) for c in env.state]
    with pytest.raises(ValueError, match="env 1: 5 is not in Discrete"):
        env.step(np.array([0, 5]))
    assert all(np.array_equal(a, as_numpy(b)) for a, b in zip(before, env.state, strict=True))
    env.close()


_CUDA = backend_status("cuda")


#: a crowded mid-game row (every slot taken, fast speeds, the ramp 2 steps away) for env i
BUSY = {"entity_alive": lambda i: np.ones(SLOTS, bool),
        "entity_x": lambda i: np.roll(np.arange(1, 9), i),
        "entity_right": lambda i: np.arange(SLOTS) % 2 == i % 2,
        "entity_gold": lambda i: np.arange(SLOTS) % 3 == i % 3,
        "spawn_speed": lambda i: 3, "spawn_timer": lambda i: 1, "move_speed": lambda i: 2,
        "move_timer": lambda i: i % 2, "ramp_timer": lambda i: 1, "ramp_index": lambda i: 5}


@pytest.mark.skipif(_CUDA is not None, reason=f"cuda backend unavailable ({_CUDA})")
def test_cuda_plays_numbas_trajectories_in_a_crowded_game() -> None:
    """The shared 12-step check (test_common) ends before Asterix's entities move twice:
    here both backends start from a crowded, fast row (``BUSY``), so 40 steps see spawns in
    the free rows, moves, gold, enemies, ends and the ramp, from one source."""
    ended, reward, ramped = 0, 0.0, 0
    for (_, rew, term, _, _), state in cuda_agrees_with_numba(
            "MinAtar/Asterix-v0", num_envs=4, steps=40, seed=7, rows=BUSY,
            sticky_action_prob=0.3):
        ended += int(term.sum())
        reward += float(rew.sum())
        ramped = max(ramped, int(as_numpy(state.ramp_index).max()))
    assert ended > 0 and reward > 0 and ramped == 6


@pytest.mark.slow
@pytest.mark.parametrize("sticky", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("ramping", [True, False])
def test_long_play_agrees_with_minatar(sticky: float, ramping: bool) -> None:
    """Thousands of steps: the dodger deep into the ramp (or long without it), and random play."""
    recorder = Recorder()
    scripted = check_against_reference(
        "MinAtar/Asterix-v0", recorder.game, dodge(0, 1, 2, 3, 4), steps=2500, num_envs=4,
        seed=1, sticky_action_prob=sticky, difficulty_ramping=ramping)
    assert scripted.reward > 200
    assert recorder.ramp_index >= (4 if ramping else 0)
    if ramping and sticky == 0.0:  # the whole ramp, and rows too full to spawn in
        assert recorder.ramp_index == 9 and recorder.full_spawns > 0
    random = check_against_reference("MinAtar/Asterix-v1", Recorder().game, random_policy(5),
                                     steps=1000, num_envs=4, seed=2,
                                     sticky_action_prob=sticky, difficulty_ramping=ramping)
    assert random.terminations > 50
