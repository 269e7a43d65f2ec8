"""MinAtar Seaquest against the ``minatar`` package, step by step (tests/minatar/harness.py):
random play, a scripted diver-rescuing policy that surfaces (difficulty ramping), v0 and v1,
sticky actions on and off, and crafted states for the reference's list quirks (twin entries,
a sub shot while it fires, surfacing with six divers). The long runs are slow."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import envfleet
from envfleet.envs.minatar import seaquest
from envfleet.registry import backend_status
from tests.cuda_helpers import assert_same
from tests.minatar.harness import (
    DRAWS,
    Draws,
    Game,
    _counters,
    _rows,
    check_against_reference,
    random_policy,
    unit_draws,
)
from tests.reference import as_numpy

minatar = pytest.importorskip("minatar")

SCALARS = ("oxygen", "diver_count", "sub_x", "sub_y", "e_spawn_speed", "e_spawn_timer",
           "d_spawn_timer", "move_speed", "ramp_index", "shot_timer")
FLAGS = ("sub_or", "surface")
#: table column -> its count column
TABLES = {"f_bullets": "n_f_bullets", "e_bullets": "n_e_bullets", "e_fish": "n_e_fish",
          "e_subs": "n_e_subs", "divers": "n_divers"}


def to_reference(env: Any, row: dict[str, np.ndarray]) -> None:
    """Our row as the reference's attributes: lists of ``[x, y, dir (bool), timers...]``."""
    for name in SCALARS:
        setattr(env, name, int(row[name]))
    for name in FLAGS:
        setattr(env, name, bool(row[name]))
    for name, count in TABLES.items():
        entries = [[int(v) for v in entry] for entry in row[name][: int(row[count])]]
        for entry in entries:
            entry[seaquest.DIR] = bool(entry[seaquest.DIR])
        setattr(env, name, entries)
    env.terminal = False


def from_reference(env: Any) -> dict[str, Any]:
    """The reference's state as our columns (tables padded with zeros)."""
    out: dict[str, Any] = {name: getattr(env, name) for name in (*SCALARS, *FLAGS)}
    for name, count in TABLES.items():
        shape = seaquest.STATE[name][1]
        table = np.zeros(shape, dtype=np.int64)
        entries = getattr(env, name)
        for k, entry in enumerate(entries):
            table[k] = [int(v) for v in entry]
        out[name], out[count] = table, len(entries)
    return out


SEAQUEST = Game("seaquest", to_reference, from_reference)


def watching(seen: dict[str, int]) -> Game:
    """``SEAQUEST``, recording the extremes of what the reference states held (coverage)."""
    def observed(env: Any) -> dict[str, Any]:
        seen["ramp_index"] = max(seen.get("ramp_index", 0), env.ramp_index)
        seen["diver_count"] = max(seen.get("diver_count", 0), env.diver_count)
        seen["below_zero"] = min(seen.get("below_zero", 0), env.diver_count)
        seen["enemies"] = max(seen.get("enemies", 0), len(env.e_fish) + len(env.e_subs))
        seen["e_bullets"] = max(seen.get("e_bullets", 0), len(env.e_bullets))
        return from_reference(env)
    return Game("seaquest", to_reference, observed)


def rescuer(carry: int, miss: float = 0.05):
    """Full-action policy (n l u r d f): fetch the nearest diver, dodge enemies in the sub's
    row, shoot those ahead, surface once ``carry`` divers are on board (or oxygen runs low with
    one); a random action with probability ``miss``. Long episodes that ramp the difficulty.

    After surfacing with six divers (the reference leaves ``diver_count`` at -1, so surfacing
    never ends the episode again) it bobs between rows 0 and 1 while row 1 is clear: a
    surfacing, hence a ramp, every other step, up to an enemy spawned every step."""
    bobbing: dict[int, bool] = {}

    def policy(obs: np.ndarray, rng: np.random.Generator, t: int) -> np.ndarray:
        actions = np.zeros(len(obs), dtype=np.int64)
        for i, grid in enumerate(obs):
            front = np.argwhere(grid[:, :, 0])
            back = np.argwhere(grid[:, :, 1])
            y, x = front[0]
            facing_right = len(back) > 0 and back[0][1] < x
            on_board = int(grid[9, :, 8].sum())
            oxygen = int(grid[9, :, 7].sum())
            enemies = np.argwhere(grid[:, :, 5] | grid[:, :, 6] | grid[:, :, 4])
            row = [ex for ey, ex in enemies if ey == y]
            near = [ex for ex in row if abs(ex - x) <= 2]
            divers = np.argwhere(grid[:, :, 9])
            if (y, x) == (0, 5) and not grid[:, :, 2:7].any() and not len(divers):
                bobbing[i] = False  # a fresh episode
            if bobbing.get(i):
                clear = not any(ey == 1 and abs(ex - x) <= 2 for ey, ex in enemies)
                action = (3 if x < 4 else 1 if x > 5 else 4 if clear else 0) if y == 0 else 2
            elif on_board and (on_board >= carry or oxygen <= 3):
                action = 2
                bobbing[i] = on_board == 6 and y == 1
            elif near:
                ahead = [ex for ex in near if (ex > x) == facing_right and ex != x]
                action = 5 if ahead else (4 if y < 8 else 2) if y > 1 or on_board else 4
            elif row and any((ex > x) == facing_right for ex in row):
                action = 5
            elif len(divers):
                dy, dx = divers[np.abs(divers - [y, x]).sum(axis=1).argmin()]
                action = (4 if dy > y else 2) if dy != y else (3 if dx > x else 1)
            else:
                action = 4 if y < 4 else rng.choice([1, 3, 5])
            actions[i] = action
        random = rng.random(len(obs)) < miss
        return np.where(random, rng.integers(0, 6, len(obs)), actions)
    return policy


@pytest.mark.parametrize("env_id", ["MinAtar/Seaquest-v0", "MinAtar/Seaquest-v1"])
def test_random_play_agrees_with_minatar(env_id: str) -> None:
    counts = check_against_reference(env_id, SEAQUEST, random_policy(6), steps=150, num_envs=4)
    assert counts.terminations > 3 and counts.resets > 3 and counts.reward > 0
    assert counts.sticky > 0 and counts.draws > 0


def test_scripted_play_agrees_with_minatar_through_ramping() -> None:
    seen: dict[str, int] = {}
    counts = check_against_reference("MinAtar/Seaquest-v0", watching(seen), rescuer(carry=1),
                                     steps=300, num_envs=4, sticky_action_prob=0.0)
    assert counts.reward > 0 and counts.sticky == 0
    assert seen["ramp_index"] >= 2, seen  # surfaced with divers: spawns and moves sped up


@pytest.mark.slow
@pytest.mark.parametrize("sticky", [0.0, 0.1])
@pytest.mark.parametrize("ramping", [True, False])
def test_long_play_agrees_with_minatar(sticky: float, ramping: bool) -> None:
    """Thousands of steps: a rescuer that surfaces with six divers and then bobs (with ramping:
    up to an enemy spawned every step and ~25 alive), and random play."""
    seen: dict[str, int] = {}
    scripted = check_against_reference(
        "MinAtar/Seaquest-v0", watching(seen), rescuer(carry=6, miss=0.01), steps=2500,
        num_envs=4, seed=6, sticky_action_prob=sticky, difficulty_ramping=ramping)
    assert scripted.best_return >= 5 and seen["diver_count"] == 6 and seen["below_zero"] < -50
    assert seen["ramp_index"] == (19 if ramping else 0), seen  # spawn speed down to 1
    if ramping:
        assert seen["enemies"] >= 15 and seen["e_bullets"] >= 4, seen
    random = check_against_reference("MinAtar/Seaquest-v1", SEAQUEST, random_policy(6),
                                     steps=1000, num_envs=4, seed=2,
                                     sticky_action_prob=sticky, difficulty_ramping=ramping)
    assert random.terminations > 50


# --- crafted states: the reference's list idioms -------------------------------------------


def entries(name: str, *rows: list[int]) -> dict[str, np.ndarray]:
    """Columns ``name`` (the rows, zero-padded) and its count."""
    dtype, shape = seaquest.STATE[name]
    table = np.zeros(shape, dtype=dtype)
    table[: len(rows)] = rows
    return {name: table, TABLES[name]: np.array(len(rows))}


def step_from(columns: dict[str, Any], action: int) -> Any:
    """One env (v0, no sticky actions) reset, then put into ``columns``, stepped with
    ``action``; the reference game put into the same state and stepped with the same draws
    must give the same observation, reward, terminal flag and state. Returns that game."""
    env = envfleet.make("MinAtar/Seaquest-v0", 1, backend="numba", seed=0,
                        sticky_action_prob=0.0)
    env.reset()
    for name, value in columns.items():
        getattr(env.state, name)[0] = value
    before = _rows(env)[0]
    seeds, episodes, elapsed = _counters(env)
    obs, rewards, terminated, _, _ = env.step(np.array([action]))
    reference = minatar.Environment("seaquest", sticky_action_prob=0.0)
    to_reference(reference.env, before)
    reference.random = reference.env.random = Draws(
        unit_draws(seeds[0], episodes[0], elapsed[0], 0, DRAWS))
    reward, terminal = reference.act(action)
    assert np.array_equal(reference.state(), as_numpy(obs)[0])
    assert (float(reward), bool(terminal)) == (float(rewards[0]), bool(terminated[0]))
    after = _rows(env)[0]
    for name, value in from_reference(reference.env).items():
        assert np.array_equal(np.asarray(value), after[name]), (name, value, after[name])
    env.close()
    return reference.env


def test_a_removal_takes_the_first_equal_entry_and_the_loop_visits_the_survivor_again() -> None:
    """``self.f_bullets.remove(bullet)`` removes the first bullet *equal* to the one processed:
    a bullet that moves onto a fish, into the values of a bullet ahead of it in the list,
    removes that one; reversed() then meets the survivor a second time (it moves twice), and
    the list's order is not the one removing the bullet itself would give. (Play never reaches
    this: bullets and enemies do not share a cell between steps; the transplant holds for any
    state.)"""
    game = step_from({**entries("f_bullets", [4, 4, 1], [1, 7, 0], [3, 4, 1]),
                      **entries("e_fish", [4, 4, 0, 3])}, action=0)
    assert game.f_bullets == [[0, 7, False], [5, 4, True]] and game.e_fish == []


def test_a_sub_shot_as_it_moves_still_fires() -> None:
    """The reference goes on with a sub it removed: its shot timer runs out and it fires."""
    game = step_from({**entries("e_subs", [3, 3, 1, 0, 0]), **entries("f_bullets", [5, 3, 0]),
                      "sub_y": 1}, action=0)
    assert game.e_subs == [] and game.f_bullets == [] and game.e_bullets == [[5, 3, True]]


def test_surfacing_with_six_divers_pays_the_oxygen_and_leaves_minus_one_diver() -> None:
    game = step_from({"sub_y": 1, "diver_count": 6, "oxygen": 150, "surface": False}, action=2)
    assert (game.diver_count, game.oxygen, game.ramp_index) == (-1, 200, 1)
    again = step_from({"sub_y": 1, "diver_count": -1, "surface": False}, action=2)
    assert not again.terminal and again.diver_count == -2
    empty = step_from({"sub_y": 1, "diver_count": 0, "surface": False}, action=2)
    assert empty.terminal


def test_spawns_take_their_draws_in_order_and_respect_rows() -> None:
    """A step spawning an enemy and a diver takes draws 1-5; an enemy is not spawned in a row
    where one goes the other way (every row blocked here, both sides)."""
    game = step_from({"e_spawn_timer": 0, "d_spawn_timer": 0}, action=4)
    assert len(game.e_fish) + len(game.e_subs) == 1 and len(game.divers) == 1
    left = [[9, y, 0, 3] for y in range(1, 9)]
    blocked = step_from({**entries("e_fish", *left), "e_spawn_timer": 0}, action=0)
    assert len(blocked.e_fish) == 8 and blocked.e_subs == []


def test_render_is_the_references_rgb_array() -> None:
    """Seaquest's ten channels in the reference's colours (seaborn stood in by its formula on
    matplotlib, as in test_common)."""
    matplotlib = pytest.importorskip("matplotlib")
    import types

    import minatar.gym

    def color_palette(name: str, n: int) -> list:
        return list(map(tuple, matplotlib.colormaps[name](np.linspace(0, 1, n + 2)[1:-1])[:, :3]))

    env = envfleet.make("MinAtar/Seaquest-v0", 1, seed=0, sticky_action_prob=0.0)
    env.reset()
    for name, value in {**entries("e_fish", [2, 3, 1, 2]), **entries("e_subs", [7, 5, 0, 1, 4]),
                        **entries("divers", [4, 6, 1, 1]), **entries("e_bullets", [1, 5, 0]),
                        **entries("f_bullets", [6, 2, 1]), "sub_y": 2, "sub_x": 5,
                        "diver_count": 3}.items():
        getattr(env.state, name)[0] = value
    frame = env.render()[0]
    reference = minatar.gym.BaseEnv("seaquest", render_mode="rgb_array")
    saved = getattr(minatar.gym, "sns", None)
    minatar.gym.sns = types.SimpleNamespace(color_palette=color_palette)
    try:
        to_reference(reference.game.env, _rows(env)[0])
        expected = reference.render()
    finally:
        if saved is None:
            del minatar.gym.sns
        else:
            minatar.gym.sns = saved
    assert frame.shape == (10, 10, 3) and np.array_equal(frame, expected)
    assert len({tuple(c) for c in frame.reshape(-1, 3)}) == 10  # black and nine channels
    env.close()


_CUDA = backend_status("cuda")


@pytest.mark.skipif(_CUDA is not None, reason=f"cuda backend unavailable ({_CUDA})")
def test_cuda_plays_numbas_trajectories_through_spawns_and_shots() -> None:
    """test_common's check from a busy state (enemies, divers, bullets of both sides, spawns
    due, ramped speeds), so every rule runs on both targets within a few steps."""
    torch = pytest.importorskip("torch")  # the cuda backend's state columns are tensors
    n, steps = 3, 24
    common = dict(seed=5, autoreset_mode="SameStep", sticky_action_prob=0.2)
    cenv = envfleet.make("MinAtar/Seaquest-v1", n, backend="cuda", threads_per_block=32,
                         **common)
    nenv = envfleet.make("MinAtar/Seaquest-v1", n, backend="numba", **common)
    assert_same(cenv.reset()[0], nenv.reset()[0], "reset obs")
    busy = {**entries("e_fish", [2, 4, 1, 0], [8, 6, 0, 1], [0, 2, 1, 2]),
            **entries("e_subs", [9, 3, 0, 0, 0], [1, 7, 1, 1, 2]),
            **entries("divers", [3, 5, 1, 0]), **entries("f_bullets", [6, 4, 1]),
            **entries("e_bullets", [7, 3, 0], [3, 7, 1]), "sub_x": 5, "sub_y": 4,
            "sub_or": True, "diver_count": 5, "e_spawn_timer": 0, "d_spawn_timer": 0,
            "e_spawn_speed": 2, "move_speed": 2, "ramp_index": 17, "surface": False}
    for name, value in busy.items():
        getattr(nenv.state, name)[:] = value
        getattr(cenv.state, name)[:] = torch.as_tensor(np.asarray(value))
    rng = np.random.default_rng(0)
    rewards = terminations = 0
    for t in range(steps):
        actions = rng.integers(0, 6, n)
        out_c, out_n = cenv.step(actions), nenv.step(actions)
        for what, c, r in zip(("obs", "reward", "terminated"), out_c, out_n, strict=False):
            assert_same(c, r, f"{what} at step {t}")
        for name, c, r in zip(nenv.state._fields, cenv.state, nenv.state, strict=True):
            assert_same(c, r, f"state.{name} at step {t}")
        rewards += int(out_n[1].sum())
        terminations += int(out_n[2].sum())
    assert rewards > 0 and terminations > 0
    cenv.close()
    nenv.close()
