"""The state-transplant check every MinAtar game shares (issue 23): our env against the
``minatar`` package, step by step.

At every step of a run (numba backend, several envs, NEXT_STEP autoreset) and for every env,
a fresh reference ``minatar.Environment(<game>, sticky_action_prob, difficulty_ramping)`` is
put into the state our row held before the step (``Game.to_reference``), its ``last_action``
set from ours, its ``random`` (the wrapper's and the game's) replaced by ``Draws``: the numbers
our counter RNG gives env i this step, in draw order (``envs/minatar/common.py``: draw 0 the
sticky test, then the game's). It acts with the same full action; its observation, reward,
terminal flag, ``last_action`` and state (``Game.from_reference``) must equal ours. A step that
was a reset (the episode ended the step before) is checked against a fresh reference game
reset with our reset draws, and so is the first reset.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from numba import njit

import envfleet
from envfleet.envs.minatar.common import RESET_DRAW
from envfleet.native.rng import uniform
from tests.reference import as_numpy

#: the reference (scripts/setup.sh installs it without its plotting dependencies)
minatar = pytest.importorskip("minatar")

Policy = Callable[[np.ndarray, np.random.Generator, int], np.ndarray]
#: how many draws a reference step or reset may take (more raises IndexError in ``Draws``)
DRAWS = 64


@njit(cache=False)
def unit_draws(seed, episode, step, first, count):  # pragma: no cover - compiled
    """Draws ``first .. first + count - 1`` of (seed, episode, step) as floats in [0, 1):
    ``env_uniform``'s numbers, from the counters it reads."""
    out = np.empty(count)
    for j in range(count):
        counter = (np.uint64(step) << np.uint64(16)) | np.uint64(first + j)
        out[j] = uniform(np.uint64(seed), np.uint64(episode), counter, 0.0, 1.0)
    return out


class Draws:
    """Stands in for the reference's ``random`` (a ``np.random.RandomState``): each number it
    asks for is the next of ``units``, turned into what it asked for as envfleet's kernels do
    (``common.draw_unit`` / ``draw_int``)."""

    def __init__(self, units: np.ndarray) -> None:
        self.units = units
        self.used = 0

    def _next(self) -> float:
        u = float(self.units[self.used])
        self.used += 1
        return u

    def rand(self, *size: int) -> Any:
        if not size:
            return self._next()
        return np.array([self._next() for _ in range(math.prod(size))]).reshape(size)

    def randint(self, low: int, high: int | None = None, size: int | None = None) -> Any:
        if high is None:
            low, high = 0, low
        if size is None:
            return low + int(self._next() * (high - low))
        return np.array([low + int(self._next() * (high - low)) for _ in range(size)])


@dataclass
class Game:
    """How a game's row and the reference game's attributes map onto each other."""

    module: str  # minatar.environments.<module>
    #: writes our row (column -> value) into the reference game ``env`` (every attribute)
    to_reference: Callable[[Any, dict[str, np.ndarray]], None]
    #: the reference game's state as our columns (last_action aside)
    from_reference: Callable[[Any], dict[str, Any]]


@dataclass
class Counts:
    """What a run covered: env-steps compared, resets, terminations, rewards, sticky repeats."""

    steps: int = 0
    resets: int = 0
    terminations: int = 0
    reward: float = 0.0
    sticky: int = 0
    draws: int = 0
    best_return: float = 0.0  # the highest episode return seen (episodes that ended)
    extra: dict[str, int] = field(default_factory=dict)


def _rows(env: Any) -> list[dict[str, np.ndarray]]:
    columns = {name: as_numpy(c) for name, c in zip(env.state._fields, env.state, strict=True)}
    return [{name: c[i].copy() for name, c in columns.items()} for i in range(env.num_envs)]


def _counters(env: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    seeds, episodes, steps = (as_numpy(x) for x in env.engine.rng)
    return seeds.view(np.uint64).copy(), episodes.view(np.uint64).copy(), steps.copy()


def _assert_state(game: Game, reference: Any, row: dict[str, np.ndarray], what: str) -> None:
    for name, value in game.from_reference(reference).items():
        assert np.array_equal(np.asarray(value), row[name]), (what, name, value, row[name])


def _check_reset(game: Game, i: int, obs: np.ndarray, row: dict[str, np.ndarray],
                 counters: tuple, ramping: bool, what: str) -> None:
    seeds, episodes, _ = counters
    reference = importlib.import_module(f"minatar.environments.{game.module}").Env(
        ramping=ramping)
    reference.random = Draws(unit_draws(seeds[i], episodes[i], 0, RESET_DRAW, DRAWS))
    reference.reset()
    assert np.array_equal(reference.state(), obs[i]), (what, i)
    _assert_state(game, reference, row, f"{what}: env {i}")


def check_against_reference(env_id: str, game: Game, policy: Policy, steps: int, num_envs: int,
                            seed: int = 0, **kwargs: Any) -> Counts:
    """Step ``env_id`` (numba, ``num_envs`` envs, ``make`` keywords ``kwargs``) ``steps`` times
    with ``policy``'s actions, checking every env at every step against the reference."""
    sticky = kwargs.get("sticky_action_prob", 0.1)
    ramping = kwargs.get("difficulty_ramping", True)
    env = envfleet.make(env_id, num_envs, backend="numba", seed=seed, **kwargs)
    full_actions = (list(range(6)) if env_id.endswith("-v0") else
                    importlib.import_module(f"minatar.environments.{game.module}").Env()
                    .minimal_action_set())
    counts = Counts()
    try:
        obs, _ = env.reset()
        obs, rows, counters = as_numpy(obs), _rows(env), _counters(env)
        for i in range(num_envs):
            _check_reset(game, i, obs, rows[i], counters, ramping, "first reset")
        rng = np.random.default_rng(seed)
        returns = np.zeros(num_envs)
        for t in range(steps):
            actions = np.asarray(policy(obs, rng, t), dtype=np.int64)
            before, pending = rows, as_numpy(env.engine.pending).copy()
            seeds, episodes, elapsed = _counters(env)
            obs, rewards, terminated, truncated, _ = env.step(actions)
            obs, rewards = as_numpy(obs), as_numpy(rewards)
            terminated, truncated = as_numpy(terminated), as_numpy(truncated)
            rows, counters = _rows(env), _counters(env)
            assert not truncated.any(), "MinAtar's episodes are never truncated"
            for i in range(num_envs):
                if pending[i]:  # NEXT_STEP: this step was env i's reset
                    _check_reset(game, i, obs, rows[i], counters, ramping, f"reset at step {t}")
                    counts.resets += 1
                    continue
                draws = Draws(unit_draws(seeds[i], episodes[i], elapsed[i], 0, DRAWS))
                reference = minatar.Environment(game.module, sticky_action_prob=sticky,
                                                difficulty_ramping=ramping)
                game.to_reference(reference.env, before[i])
                reference.last_action = int(before[i]["last_action"])
                reference.random = reference.env.random = draws
                action = full_actions[actions[i]]
                reward, terminal = reference.act(action)
                what = f"env {i} at step {t} (action {action})"
                assert np.array_equal(reference.state(), obs[i]), what
                assert (float(reward), bool(terminal)) == (float(rewards[i]),
                                                           bool(terminated[i])), what
                assert reference.last_action == rows[i]["last_action"], what
                _assert_state(game, reference.env, rows[i], what)
                counts.steps += 1
                counts.terminations += int(terminal)
                counts.reward += float(reward)
                returns[i] += float(reward)
                if terminal:
                    counts.best_return = max(counts.best_return, returns[i])
                    returns[i] = 0.0
                counts.sticky += int(reference.last_action != action)
                counts.draws += draws.used - 1
    finally:
        env.close()
    return counts


def random_policy(n: int) -> Policy:
    """Uniform actions of an ``n``-action set."""
    return lambda obs, rng, t: rng.integers(0, n, size=len(obs))


def cuda_agrees_with_numba(env_id: str, num_envs: int, steps: int, seed: int,
                           rows: dict[str, Callable[[int], Any]] | None = None,
                           **kwargs: Any) -> Iterator[tuple]:
    """Step ``env_id`` on cuda and numba side by side (same seed and random actions, SameStep
    autoreset), optionally from a starting state (``rows``: column name -> env i's value),
    asserting obs, reward, ends and every state column equal at every step; yields numba's
    step outputs and state so a caller can count what the run saw."""
    import torch

    from tests.cuda_helpers import assert_same

    common = dict(seed=seed, autoreset_mode="SameStep", **kwargs)
    cenv = envfleet.make(env_id, num_envs, backend="cuda", threads_per_block=32, **common)
    nenv = envfleet.make(env_id, num_envs, backend="numba", **common)
    try:
        assert_same(cenv.reset()[0], nenv.reset()[0], "reset obs")
        for name, make_row in (rows or {}).items():
            column = np.stack([np.asarray(make_row(i)) for i in range(num_envs)])
            getattr(nenv.state, name)[:] = column
            target = getattr(cenv.state, name)
            target.copy_(torch.as_tensor(column).to(target.device, target.dtype))
        rng = np.random.default_rng(0)
        for t in range(steps):
            actions = rng.integers(0, nenv.single_action_space.n, num_envs)
            out_c, out_n = cenv.step(actions), nenv.step(actions)
            for what, c, r in zip(("obs", "reward", "terminated", "truncated"), out_c, out_n,
                                  strict=False):
                assert_same(c, r, f"{what} at step {t}")
            for name, c, r in zip(nenv.state._fields, cenv.state, nenv.state, strict=True):
                assert_same(c, r, f"state.{name} at step {t}")
            yield out_n, nenv.state
    finally:
        cenv.close()
        nenv.close()
