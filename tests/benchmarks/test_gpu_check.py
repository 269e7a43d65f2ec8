"""The GPU check's helpers that run without a GPU (``benchmarks.gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.gpu import _kind, max_ulp


def test_max_ulp_counts_as_numpy_does():
    """max_ulp is the largest gap in ulps, across zero too, and agrees with NumPy's check."""
    one_up = np.nextafter(1.0, 2.0)
    assert max_ulp(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0
    assert max_ulp(np.array([1.0, 2.0]), np.array([one_up, 2.0])) == 1
    assert max_ulp(np.array([-0.0]), np.array([0.0])) == 0
    tiny = np.nextafter(0.0, 1.0)
    assert max_ulp(np.array([tiny]), np.array([-tiny])) == 2
    rng = np.random.default_rng(0)
    a = rng.normal(size=100)
    b = a + a * rng.integers(-40, 41, 100) * np.finfo(np.float64).eps / 2
    ulps = max_ulp(a, b)
    assert ulps > 0
    np.testing.assert_array_max_ulp(a, b, maxulp=ulps)
    with pytest.raises(AssertionError):
        np.testing.assert_array_max_ulp(a, b, maxulp=ulps - 1)


def test_fma_rows_have_a_kind_of_their_own():
    """The fma part's per-call rows do not collide with the cartpole part's in the tables."""
    row = dict(backend="cuda", graphs=True, copy=False)
    assert _kind(row) == "cuda graphs"
    assert _kind({**row, "fma": True}) == "cuda graphs fma on"
    assert _kind({**row, "fma": False}) == "cuda graphs fma off"
