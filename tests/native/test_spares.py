"""numba ``copy=True`` outputs reuse the memory of arrays the caller let go (``Spares``): no
fresh mapping (page faults) per step, and never an array the caller still holds."""

from __future__ import annotations

import gc
import resource

import numpy as np
import pytest

import envfleet
from envfleet.native.numba_backend import SPARE_MIN_BYTES, SPARES_PER_SHAPE, Spares


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_a_spare_is_reused_only_once_nobody_holds_it() -> None:
    spares = Spares()
    a = spares.empty((4, 3), np.float32)
    a_data = a.ctypes.data
    view = a[1:]  # a view holds its base: a stays taken
    del a
    b = spares.empty((4, 3), np.float32)
    assert b.ctypes.data != a_data
    del view
    c = spares.empty((4, 3), np.float32)
    assert c.ctypes.data == a_data  # free again: written again
    held, c_data = memoryview(c), c.ctypes.data  # any other holder keeps it too
    del c
    d = spares.empty((4, 3), np.float32)
    assert d.ctypes.data not in (c_data, b.ctypes.data)
    del held
    assert spares.empty((4, 2), np.float32).shape == (4, 2)  # other shapes: their own


def test_spares_keep_a_few_arrays_per_shape() -> None:
    spares = Spares()
    taken = [spares.empty((8,), np.int64) for _ in range(SPARES_PER_SHAPE + 2)]
    assert len({t.ctypes.data for t in taken}) == len(taken)  # all held: all new
    del taken
    gc.collect()
    again = [spares.empty((8,), np.int64) for _ in range(SPARES_PER_SHAPE)]
    assert len({t.ctypes.data for t in again}) == SPARES_PER_SHAPE


def test_copy_true_masks_the_caller_holds_are_never_overwritten() -> None:
    """Masks kept whole, kept as a view of one row, or dropped: each step's mask as it was
    returned, compared with a copy=False twin's buffers copied at that step."""
    n = 64
    assert n * 4672 >= SPARE_MIN_BYTES  # the mask comes from the spares
    ours = envfleet.make("Chess-v0", n, backend="numba", num_threads=1, seed=5)
    twin = envfleet.make("Chess-v0", n, backend="numba", num_threads=1, seed=5, copy=False)
    ours.reset(seed=5)
    twin.reset(seed=5)
    kept, rows, expected = [], [], []
    for t in range(12):
        actions = ours.unwrapped.random_legal_actions()
        _, _, _, _, info = ours.step(actions)
        _, _, _, _, twin_info = twin.step(actions)
        mask = info["action_mask"]
        expected.append(twin_info["action_mask"].copy())
        if t % 3 == 0:
            kept.append((t, mask))
        elif t % 3 == 1:
            rows.append((t, mask[7]))
        del info, mask  # t % 3 == 2: dropped, its memory free for later steps
    for t, mask in kept:
        np.testing.assert_array_equal(mask, expected[t])
    for t, row in rows:
        np.testing.assert_array_equal(row, expected[t][7])


def test_a_policys_large_temporaries_cost_no_page_faults_in_step() -> None:
    """A policy allocating large temporaries between steps made malloc hand the 2.4 MB mask
    copy fresh pages every step (276 minor faults a step at 512 boards); spares are mapped."""
    rng = np.random.default_rng(0)
    env = envfleet.make("Chess-v0", 512, backend="numba", num_threads=1, seed=0)
    _, info = env.reset(seed=0)
    faults = 0
    for t in range(14):
        mask = info["action_mask"]
        actions = np.argmax(np.where(mask, rng.random(mask.shape), -1.0), axis=1)
        before = _minor_faults()
        _, _, _, _, info = env.step(actions)
        if t >= 4:  # after the first steps (kernels loaded, buffers touched)
            faults += _minor_faults() - before
    assert faults / 10 < 20, f"{faults / 10:.0f} minor page faults per step"


@pytest.mark.parametrize("observation", ["compact", "planes"])
def test_copy_true_outputs_match_copy_false_with_spares(observation: str) -> None:
    """Large obs (planes at 64 boards: 344 KB) and masks come from spares; every output
    equals the copy=False twin's, step after step, though the caller drops them."""
    n = 64
    envs = [envfleet.make("Chess-v0", n, backend="numba", num_threads=1, seed=2, copy=copy,
                          observation=observation, max_plies=20, autoreset_mode="SameStep")
            for copy in (True, False)]
    for env in envs:
        env.reset(seed=2)
    for _ in range(30):
        actions = envs[0].unwrapped.random_legal_actions()
        (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) = (e.step(actions) for e in envs)
        for a, b in ((o1, o2), (r1, r2), (te1, te2), (tr1, tr2),
                     (i1["action_mask"], i2["action_mask"])):
            np.testing.assert_array_equal(a, b)
