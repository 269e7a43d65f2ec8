"""numba ``copy=True`` steps write into new arrays (``NativeEnvSpec.writes_every_output``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import envfleet
from envfleet.native import numba_backend

MODES = ("NextStep", "SameStep", "Disabled")


def _fresh_from_one_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every copy=True env built after this writes into new arrays, whatever its size."""
    monkeypatch.setattr(numba_backend, "FRESH_MIN_ENVS", 1)


def _poisoned_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """New arrays come back full of NaN / True: a row the kernel skips shows."""
    real = np.empty

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        out.fill(np.nan if out.dtype.kind in "fc" else True if out.dtype.kind == "b" else 77)
        return out

    monkeypatch.setattr(np, "empty", poisoned)


def _actions(steps: int, num_envs: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.integers(0, 2, num_envs) for _ in range(steps)]


#: the families that declare ``writes_every_output`` (Chess-v0 must not: a finished game's
#: step returns early without rewriting its row)
FRESH_FAMILIES = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0",
                  "MountainCarContinuous-v0", "MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1",
                  "MinAtar/Freeway-v1", "MinAtar/Breakout-v0", "MinAtar/SpaceInvaders-v0",
                  "MinAtar/Freeway-v0")


def test_the_families_that_write_every_output() -> None:
    fresh = {i for i in envfleet.list_envs()
             if envfleet.make(i, 1, backend="numba").engine.spec.writes_every_output}
    assert fresh == set(FRESH_FAMILIES)


@pytest.mark.parametrize("env_id", FRESH_FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_copy_true_matches_copy_false_when_new_arrays_start_as_garbage(
        env_id: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output row is written every step (resets included), so nothing of the
    uninitialised new arrays reaches the caller."""
    _fresh_from_one_env(monkeypatch)
    _poisoned_empty(monkeypatch)
    n = 8
    envs = [envfleet.make(env_id, n, backend="numba", num_threads=1, seed=3,
                          autoreset_mode=mode, copy=copy, max_episode_steps=30)
            for copy in (True, False)]
    assert envs[0]._fresh and not envs[1]._fresh
    for env in envs:
        env.reset(seed=3)
    envs[1].action_space.seed(1)
    for a in [envs[1].action_space.sample() for _ in range(120)]:
        if mode == "Disabled":
            ended = envs[1].engine.pending.copy()
            if ended.any():
                for env in envs:
                    env.reset(options={"reset_mask": ended})
        fresh, kept = envs[0].step(a), envs[1].step(a)
        for x, y in zip(fresh[:4], kept[:4], strict=True):
            np.testing.assert_array_equal(x, y)
        assert fresh[4].keys() == kept[4].keys()
        for key in fresh[4]:
            if key != "final_info":
                np.testing.assert_array_equal(fresh[4][key], kept[4][key])


def test_copy_true_outputs_are_the_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A later step, a partial reset or a refused step leaves earlier results untouched."""
    _fresh_from_one_env(monkeypatch)
    n = 6
    env = envfleet.make("CartPole-v1", n, backend="numba", num_threads=1, seed=0)
    assert env._fresh
    env.reset(seed=0)
    kept, snapshots = [], []
    for t, a in enumerate(_actions(40, n)):
        out = env.step(a)
        kept.append(out[:4])
        snapshots.append(tuple(np.copy(x) for x in out[:4]))
        if t % 7 == 3:
            obs, _ = env.reset(options={"reset_mask": np.arange(n) % 2 == 0})
            assert not np.shares_memory(obs, out[0])
        if t % 11 == 5:
            with pytest.raises(ValueError, match="env 2"):
                env.step(np.array([0, 1, 2, 0, 1, 0]))
    for out, snap in zip(kept, snapshots, strict=True):
        for x, y in zip(out, snap, strict=True):
            np.testing.assert_array_equal(x, y)
    assert not any(np.shares_memory(a[0], b[0]) for a, b in itertools.pairwise(kept))


def test_small_batches_copy() -> None:
    """Below ``FRESH_MIN_ENVS`` copying the buffers is cheaper than allocating new ones."""
    small = envfleet.make("CartPole-v1", numba_backend.FRESH_MIN_ENVS - 1, backend="numba")
    large = envfleet.make("CartPole-v1", numba_backend.FRESH_MIN_ENVS, backend="numba")
    assert not small._fresh and large._fresh
