"""numba ``copy=True`` steps on 2+ threads write the caller's copies of the info columns
(Chess-v0's action mask) inside the threaded step kernel, as each env's step is done
(``NumbaEngine.step(copy_info=True)``), instead of a serial copy of the whole buffer after it;
one thread copies after the kernel. Either way every row is written and the copies stay the
caller's."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest
from gymnasium import spaces

import envfleet
from envfleet.kernels import NativeEnvSpec, kernel_function

MODES = ("NextStep", "SameStep", "Disabled")


def _poisoned_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """New arrays (the copies' memory) come back full of True / 77: a row the kernel skips
    shows."""
    real = np.empty

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        out.fill(True if out.dtype.kind == "b" else 77)
        return out

    monkeypatch.setattr(np, "empty", poisoned)


def test_the_step_kernel_copies_the_mask_no_copy_pass_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The 2.4 MB mask of 512 boards was copied by ``engine.copy`` after the kernel, on the
    calling thread alone; the kernel now writes the copy (on 2 threads, half each)."""
    n = 256
    env = envfleet.make("Chess-v0", n, backend="numba", num_threads=2, seed=0)
    env.reset(seed=0)
    engine, copied = env.unwrapped.engine, []
    real = engine.copy
    monkeypatch.setattr(engine, "copy", lambda a: copied.append(a.shape) or real(a))
    masks = [env.step(env.unwrapped.random_legal_actions())[4]["action_mask"]
             for _ in range(3)]
    assert (n, 4672) not in copied, "the mask was copied after the step kernel"
    assert all(m.shape == (n, 4672) and m.dtype == np.bool_ for m in masks)
    assert not np.shares_memory(masks[-1], engine.state.action_mask)


@pytest.mark.parametrize(("mode", "packed", "threads"),
                         [(mode, False, 2) for mode in MODES] + [("NextStep", True, 2),
                                                                 ("SameStep", False, 1)])
def test_every_row_of_every_copy_is_written(mode: str, packed: bool, threads: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies start as garbage; each step's mask equals a copy=False twin's, with games ending
    (short games: resets inside the step, or through ``reset_mask``) on 1 and 2 threads."""
    n = 128  # Chess-v0's parallel_min_envs: the threaded kernel on 2 threads
    envs = [envfleet.make("Chess-v0", n, backend="numba", num_threads=threads, seed=4,
                          copy=copy, autoreset_mode=mode, max_plies=6, packed=packed)
            for copy in (True, False)]
    assert envs[0].unwrapped.engine.active_threads == threads
    for env in envs:
        env.reset(seed=4)
    actions = envs[1].unwrapped.random_legal_actions()
    for env in envs:  # compiled (numba's parallel loops call np.empty) before the poisoning
        env.step(actions)
    _poisoned_empty(monkeypatch)
    for _ in range(14):
        if mode == "Disabled":
            ended = envs[1].unwrapped.engine.pending.copy()
            if ended.any():
                for env in envs:
                    env.reset(options={"reset_mask": ended})
        actions = envs[1].unwrapped.random_legal_actions()
        ours, twin = envs[0].step(actions), envs[1].step(actions)
        np.testing.assert_array_equal(ours[4]["action_mask"], twin[4]["action_mask"])
        np.testing.assert_array_equal(ours[4]["_action_mask"], twin[4]["_action_mask"])
        assert ours[4].keys() == twin[4].keys()
        for x, y in zip(ours[:4], twin[:4], strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_masks_the_caller_holds_never_change_on_two_threads(mode: str) -> None:
    """``copy=True``'s promise with the kernel writing the copies into reused memory
    (``Spares``): masks kept whole or as a view of a row stay as they were returned, through
    later steps, a refused step and a partial reset; dropped ones are written again."""
    n = 128
    kw = {"backend": "numba", "num_threads": 2, "seed": 5, "autoreset_mode": mode,
          "max_plies": 8}
    ours = envfleet.make("Chess-v0", n, **kw)
    twin = envfleet.make("Chess-v0", n, copy=False, **kw)
    ours.reset(seed=5)
    twin.reset(seed=5)
    kept, rows, expected, addresses = [], [], [], set()
    for t in range(24):
        actions = ours.unwrapped.random_legal_actions()
        mask = ours.step(actions)[4]["action_mask"]
        expected.append(twin.step(actions)[4]["action_mask"].copy())
        addresses.add(mask.ctypes.data)
        if t % 3 == 0:
            kept.append((t, mask))
        elif t % 3 == 1:
            rows.append((t, mask[7]))
        del mask  # t % 3 == 2: dropped, its memory free for later steps
        if t % 8 == 5:
            bad = ours.unwrapped.random_legal_actions()
            b = int(np.flatnonzero(~ours.unwrapped.engine.pending)[0])  # not reset by this step
            bad[b] = 0  # an underpromotion from the mover's first rank: never legal
            with pytest.raises(ValueError, match=f"board {b}:"):
                ours.step(bad)
            reset = np.arange(n) % 3 == 0
            for env in (ours, twin):
                env.reset(options={"reset_mask": reset})
    for t, mask in kept:
        np.testing.assert_array_equal(mask, expected[t])
    for t, row in rows:
        np.testing.assert_array_equal(row, expected[t][7])
    assert len(addresses) < 24  # dropped masks' memory was written again


class TallyParams(NamedTuple):
    start: int


@kernel_function
def _tally_reset(i, state, params, rng, obs):
    state.count[i] = params.start
    for a in range(2):
        for b in range(3):
            state.grid[i, a, b] = -1.0
    obs[i, 0] = 0.0


@kernel_function
def _tally_step(i, state, params, actions, rng, obs, rewards, terminated):
    count = state.count[i] + actions[i] + 1
    state.count[i] = count
    for a in range(2):
        for b in range(3):
            state.grid[i, a, b] = np.float32(count * (a + 1) + b + i)
    obs[i, 0] = np.float32(count)
    rewards[i] = 0.0
    terminated[i] = count >= 7 + i % 3


#: a user family whose info columns hold one value per env and a 2 x 3 block per env
TALLY = NativeEnvSpec(
    id="Tally-v0", observation_space=spaces.Box(0.0, 100.0, (1,), np.float32),
    action_space=spaces.Discrete(2),
    state={"count": (np.int64, ()), "grid": (np.float32, (2, 3))},
    make_params=lambda: TallyParams(0), max_episode_steps=50, reset_one=_tally_reset,
    step_one=_tally_step, info_columns=("count", "grid"))


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_info_columns_of_any_shape_are_copied_by_the_kernel(mode: str) -> None:
    """The generated copy covers a column of one value per env (1-D) and of a block per env
    (3-D), in order, on 2 threads: each step's info equals the copy=False twin's."""
    envfleet.register_native_env(TALLY)
    try:
        n = 512  # the parallel kernel on 2 threads
        envs = [envfleet.make("Tally-v0", n, backend="numba", num_threads=2, copy=copy,
                              autoreset_mode=mode, seed=0) for copy in (True, False)]
        assert envs[0].unwrapped.engine.active_threads == 2
        for env in envs:
            env.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(12):
            actions = rng.integers(0, 2, n)
            (*_, ours), (*_, twin) = (env.step(actions) for env in envs)
            assert list(ours) == list(twin)
            assert list(ours)[:4] == ["count", "_count", "grid", "_grid"]
            for name in ("count", "grid"):
                np.testing.assert_array_equal(ours[name], twin[name])
                assert not np.shares_memory(ours[name], twin[name])
    finally:
        envfleet.unregister_native_env("Tally-v0")
