"""Physics written once: math that runs on one env's numbers in a kernel and on whole batches.

A family's pure dynamics (CartPole's ``dynamics``, Acrobot's ``_dsdt``...) is kernel code
(``kernel_function``) that uses arithmetic, comparisons joined with ``&`` / ``|``, params fields,
and the functions here instead of ``math.sin``, ``a if c else b``, ``min(max(...))`` or
``np.float32(...)``. Compiled in a kernel (numba CPU, CUDA device code), each of these is its
scalar form; called from Python with a tensor or a NumPy array, its batched form: the same
source then runs elementwise in the numba and cuda kernels and vectorised over a batch in the
torch form, the same operations in the same order (so the same bits on CPU: the batched trig is
libm's, ``tensor_math``). Under the CUDA simulator and ``NUMBA_DISABLE_JIT`` the kernels run as
Python on NumPy scalars: the scalar forms again.

``dual(batched)`` makes more such functions: the decorated function is the scalar form (kernel
code), ``batched`` takes the same arguments when one of them is a tensor or an array.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from numba.extending import overload

from envfleet.native import tensor_math

_F = TypeVar("_F", bound=Callable[..., Any])
#: one env's numbers (Python's and NumPy's scalars: ``np.float64`` is a ``float``)
_NUMBERS = (float, int, np.generic)


def is_batch(value: Any) -> bool:
    """Whether ``value`` is a whole batch (a NumPy array or a torch tensor), not one number."""
    if isinstance(value, _NUMBERS):  # the kernels' numbers, run as Python: decided at once
        return False
    if isinstance(value, np.ndarray):
        return True
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    return torch is not None and isinstance(value, torch.Tensor)


def dual(batched: Callable[..., Any]) -> Callable[[_F], _F]:
    """Decorator: the decorated function is the scalar form (kernel code: numba compiles it for
    CPU and CUDA, as ``kernel_function``); called from Python, the function runs ``batched``
    instead when any argument is a batch (``is_batch``). Both forms stay reachable as the
    result's ``scalar`` and ``batched`` (code that only ever holds batches skips the check)."""

    def decorate(scalar: _F) -> _F:
        @functools.wraps(scalar)
        def dispatch(*args: Any) -> Any:
            for value in args:
                if is_batch(value):
                    return batched(*args)
            return scalar(*args)

        # what kernels compile: the scalar form (as ``register_jitable`` registers a function)
        overload(dispatch, jit_options={}, inline="never", strict=False)(
            lambda *args, **kwargs: scalar)
        dispatch.scalar, dispatch.batched = scalar, batched  # type: ignore[attr-defined]
        return dispatch  # type: ignore[return-value]

    return decorate


def _torch() -> Any:
    import torch

    return torch


def _where_batched(condition: Any, a: Any, b: Any) -> Any:
    """``np.where`` / ``torch.where``; two Python floats give float64 (torch would make
    float32)."""
    if isinstance(condition, np.ndarray):
        return np.where(condition, a, b)
    torch = _torch()
    if isinstance(a, float) and isinstance(b, float):
        a = torch.tensor(a, dtype=torch.float64, device=condition.device)
    return torch.where(condition, a, b)


@dual(_where_batched)
def where(condition: Any, a: Any, b: Any) -> Any:
    """``a if condition else b`` per env (both sides are computed in a batch)."""
    return a if condition else b


def _clip_batched(x: Any, low: Any, high: Any) -> Any:
    """The scalar form's two comparisons over a batch. ``np.maximum``/``np.minimum`` and
    ``torch.clamp`` with per-env bounds give a tie between zeros the bound's sign (-0.0 vs
    0.0) where the scalar form keeps ``x``; ``torch.clamp`` with number bounds keeps ``x``."""
    if isinstance(x, np.ndarray):
        y = np.where(low > x, low, x)
        return np.where(high < y, high, y)
    torch = _torch()
    if isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor):
        y = torch.where(low > x, low, x)
        return torch.where(high < y, high, y)
    return torch.clamp(x, low, high)


@dual(_clip_batched)
def clip(x: Any, low: Any, high: Any) -> Any:
    """Python's ``min(max(x, low), high)`` (Gymnasium's ``bound``; ``np.clip`` on a number):
    written as its comparisons, so NaN stays NaN and ties keep ``x``."""
    y = low if low > x else x
    return high if high < y else y


@dual(tensor_math.sin)
def sin(x: float) -> float:
    """Sine (libm's on CPU, in kernels and batches alike; the device's on a GPU)."""
    return math.sin(x)


@dual(tensor_math.cos)
def cos(x: float) -> float:
    """Cosine (libm's on CPU, in kernels and batches alike; the device's on a GPU)."""
    return math.cos(x)


def _as32_batched(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.astype(np.float32).astype(np.float64)
    return x.float().double()


@dual(_as32_batched)
def as32(x: float) -> float:
    """``x`` rounded to float32 and held as a float64 (a float32 value meeting a Python
    float)."""
    return np.float64(np.float32(x))


def _angle_normalize_batched(x: Any) -> Any:
    """Python's float modulo over a batch: C ``fmod``, then the divisor added to a negative
    remainder."""
    two_pi = 2 * np.pi
    if isinstance(x, np.ndarray):
        mod = np.fmod(x + np.pi, two_pi)
        return np.where(mod < 0, mod + two_pi, mod) - np.pi
    torch = _torch()
    mod = torch.fmod(x + np.pi, two_pi)
    return torch.where(mod < 0, mod + two_pi, mod) - np.pi


@dual(_angle_normalize_batched)
def angle_normalize(x: float) -> float:
    """Gymnasium's ``angle_normalize``: ``((x + pi) % (2 pi)) - pi`` with Python's modulo."""
    return ((x + np.pi) % (2 * np.pi)) - np.pi


def _mul32_batched(c: float, u: Any) -> Any:
    if isinstance(u, np.ndarray):
        return (np.float32(c) * u).astype(np.float64)
    torch = _torch()
    return (torch.tensor(c, dtype=torch.float32, device=u.device) * u).double()


@dual(_mul32_batched)
def mul32(c: float, u: Any) -> Any:
    """``c * u`` for a Python float ``c`` and a float32 ``u``, as NumPy computes it (NEP 50: a
    float32 product), then widened to float64."""
    return np.float64(np.float32(c) * u)
