"""``native/elementwise``: each function gives the same bits in its three homes.

A family's physics is written once with these functions and runs as their scalar form in the
kernels (compiled by numba; run as Python on NumPy scalars under the CUDA simulator) and as
their batched form over NumPy arrays and torch tensors. Each case below computes one function
on the same inputs four ways (a compiled kernel over the rows, the rows in Python, one call on
arrays, one call on tensors) and asks for identical bits: a form that rounds, clips, wraps or
picks differently from the others fails here, whatever its tolerance elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np
import pytest

from envfleet.native import elementwise
from envfleet.native.elementwise import angle_normalize, as32, clip, cos, dual, mul32, sin, where
from tests.envs import continuous

N = 4000


def _inputs() -> dict[str, tuple[Callable, tuple]]:
    """name -> (function, its arguments): arrays are per-env values, Python floats constants
    (as a family passes params' fields). Edge values are mixed with random ones."""
    rng = np.random.default_rng(21)
    x = rng.uniform(-25.0, 25.0, N)
    x[:8] = [0.0, -0.0, np.pi, -np.pi, 3 * np.pi, -5 * np.pi, 1e5 + 0.1, -7.3e4]
    cond = rng.random(N) < 0.5
    # ties at both bounds, NaN, beyond and within the bounds
    near = rng.choice([-0.07, 0.07, np.nan, -0.2, 0.2, 0.0], N) + rng.choice(
        [0.0, 0.0, 1e-17, -1e-17, 0.01], N) * (rng.random(N) < 0.5)
    # float32 rounding: halfway cases, subnormals, values float32 holds exactly
    fine = x * (1 + rng.choice([0.0, 2.0**-24, -(2.0**-24), 3 * 2.0**-25], N))
    fine[:6] = [1.0 + 2.0**-24, 1.0 + 3 * 2.0**-24, 1e-40, -3e-45, 0.1, np.float32(0.1)]
    u32 = rng.uniform(-3.0, 3.0, N).astype(np.float32)
    zeros = rng.choice([0.0, -0.0], N)  # a tie keeps x, whatever the signs of the zeros
    zeros[:2] = [0.0, -0.0]
    signed = rng.choice([0.0, -0.0], (2, N))
    return {
        "where": (where, (cond, x, -x)),
        "where_constants": (where, (cond, 0.1, -0.7)),  # torch would make float32 of these
        "where_constant_and_array": (where, (cond, 0.1, x)),
        "clip": (clip, (near, -0.07, 0.07)),
        "clip_per_env_bounds": (clip, (x, -np.abs(fine), np.abs(fine) + 1.0)),
        "clip_zero_bounds": (clip, (zeros, 0.0, -0.0)),
        "clip_zero_per_env_bounds": (clip, (zeros, *signed)),
        "sin": (sin, (x,)),
        "cos": (cos, (x,)),
        "as32": (as32, (fine,)),
        "angle_normalize": (angle_normalize, (x,)),
        "mul32": (mul32, (0.001, u32)),
        "mul32_inexact_constant": (mul32, (3.0 / 1.1, u32)),
    }


CASES = _inputs()

_KERNELS: dict[tuple[Callable, int], Callable] = {}


def _kernel(fn: Callable, arity: int) -> Callable:
    """A compiled loop calling ``fn`` on row i of each argument (what a family's kernel does):
    ``fn`` compiles to its scalar form."""
    key = (fn, arity)
    if key not in _KERNELS:
        if arity == 1:
            def rows(out, a):
                for i in range(len(out)):
                    out[i] = fn(a[i])
        elif arity == 2:
            def rows(out, a, b):
                for i in range(len(out)):
                    out[i] = fn(a[i], b[i])
        else:
            def rows(out, a, b, c):
                for i in range(len(out)):
                    out[i] = fn(a[i], b[i], c[i])
        _KERNELS[key] = numba.njit(rows)
    return _KERNELS[key]


def _columns(args: tuple) -> tuple:
    """Each argument as an array of one value per row (a constant repeated, in its type)."""
    return tuple(a if isinstance(a, np.ndarray) else np.full(N, a) for a in args)


def in_kernel(fn: Callable, args: tuple) -> np.ndarray:
    out = np.empty(N)
    _kernel(fn, len(args))(out, *_columns(args))
    return out


def in_python(fn: Callable, args: tuple) -> np.ndarray:
    """The scalar form row by row on NumPy scalars and Python floats (the kernels under the
    CUDA simulator and ``NUMBA_DISABLE_JIT``)."""
    return np.array([fn(*(a[i] if isinstance(a, np.ndarray) else a for a in args))
                     for i in range(N)], dtype=np.float64)


def on_arrays(fn: Callable, args: tuple) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        out = fn(*args)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64, (type(out), out.dtype)
    return out


def on_tensors(fn: Callable, args: tuple) -> np.ndarray:
    import torch

    out = fn(*(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64, (type(out), out.dtype)
    return out.numpy()


def assert_same_bits(got: np.ndarray, expected: np.ndarray, form: str) -> None:
    """Identical values, NaN where NaN, and the same sign of zero."""
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    same &= np.signbit(got) == np.signbit(expected)
    bad = np.flatnonzero(~same)
    assert not len(bad), (f"{form} differs from the kernel in {len(bad)} rows, e.g. row "
                          f"{bad[0]}: {got[bad[0]]!r} != {expected[bad[0]]!r}")


@pytest.mark.parametrize("form", ["python", "numpy",
                                  pytest.param("torch", marks=continuous.needs_torch)])
@pytest.mark.parametrize("case", list(CASES))
def test_every_form_gives_the_kernels_bits(case: str, form: str) -> None:
    fn, args = CASES[case]
    expected = in_kernel(fn, args)
    got = {"python": in_python, "numpy": on_arrays, "torch": on_tensors}[form](fn, args)
    assert_same_bits(got, expected, form)


def test_the_inputs_reach_the_edge_cases() -> None:
    """The cases above exercise what the forms could disagree on."""
    _, (near, low, high) = CASES["clip"]
    assert np.isnan(near).any() and (near == low).any() and (near == high).any()
    _, (fine,) = CASES["as32"]
    assert (fine.astype(np.float32) != fine).any() and (fine.astype(np.float32) == fine).any()
    assert (np.abs(fine.astype(np.float32)) < np.finfo(np.float32).tiny).any()  # subnormals
    _, (x,) = CASES["angle_normalize"]
    assert (np.fmod(x + np.pi, 2 * np.pi) < 0).any() and (x > 100).any()
    assert as32(0.1) == float(np.float32(0.1)) and as32(0.1) != 0.1  # float32 rounding, kept
    assert mul32(3.0, np.float32(0.1)) == float(np.float32(3) * np.float32(0.1))


# --- dual: the scalar form in kernels and for numbers, the batched form for batches ---------


def _batched_marker(x: object, y: object) -> object:
    return x * y + 1000.0


@dual(_batched_marker)
def _marked(x: float, y: float) -> float:
    """A dual whose two forms differ, to see which one runs."""
    return x * y


@numba.njit
def _marked_in_kernel(x: float, y: float) -> float:
    return _marked(x, y)


def test_dual_picks_the_scalar_form_in_kernels_and_for_numbers() -> None:
    assert _marked_in_kernel(2.0, 3.0) == 6.0  # compiled: the scalar form
    assert _marked(2.0, 3.0) == 6.0 and _marked(np.float64(2.0), 3) == 6.0
    assert _marked(np.float32(2.0), np.bool_(True)) == 2.0
    assert _marked.scalar(2.0, 3.0) == 6.0 and _marked.batched is _batched_marker
    assert _marked.__name__ == "_marked" and "see which one runs" in _marked.__doc__


def test_dual_picks_the_batched_form_for_arrays_and_tensors() -> None:
    np.testing.assert_array_equal(_marked(np.array([2.0]), 3.0), [1006.0])
    np.testing.assert_array_equal(_marked(2.0, np.array([3.0])), [1006.0])  # any argument
    np.testing.assert_array_equal(_marked(np.array(2.0), 3.0), 1006.0)  # a 0-d array too
    assert not elementwise.is_batch(np.float64(1.0)) and elementwise.is_batch(np.zeros(0))


@continuous.needs_torch
def test_dual_picks_the_batched_form_for_tensors() -> None:
    import torch

    assert _marked(torch.tensor([2.0]), 3.0).tolist() == [1006.0]
    assert _marked(3.0, torch.tensor(2.0)).item() == 1006.0
    assert elementwise.is_batch(torch.zeros(0))


def test_each_function_is_a_dual() -> None:
    """Every function a family calls has both forms (``dual``), the trig libm's on the host."""
    for fn in (where, clip, sin, cos, as32, angle_normalize, mul32):
        assert callable(fn.scalar) and callable(fn.batched), fn.__name__
    assert sin.scalar(1.0) == math.sin(1.0) and cos.scalar(1.0) == math.cos(1.0)
