"""Math for the torch twins of the kernels, exact where it can be, cheap where it can be.

torch's vectorised CPU ``sin``/``cos`` differ from the C library's by one ulp on ~0.1% of
inputs, so CPU trajectories would drift from Gymnasium's (and from the numba backend's) in the
last bits. On CPU these take NumPy's, which agree with libm here; elsewhere, torch's.

Host arithmetic: a CPU tensor and a NumPy view of it share memory, and NumPy's per-call cost on a
small array is about a third of torch's (~0.5 us against ~1.5 us), while a large one costs the
same single-threaded (torch's intra-op threads, besides, stall when other processes hold the
cores). So a torch form may run its arithmetic through NumPy views of CPU tensors
(``host_arrays``): the same ops in the same order, the same bits, outputs still the tensors.
``HOST_NUMPY = False`` keeps every op in torch (what runs on other devices; tests check both).
A form that takes NumPy arrays outright (``takes_arrays``) gets the engine's views, made once,
and keeps its work arrays with them (``scratch``, ``kept``): a large batch then allocates
nothing per step.
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

#: run host (CPU) arithmetic of the batched forms through NumPy views (False: torch ops)
HOST_NUMPY = True


def on_host(x: Any) -> bool:
    """Whether ``x`` (a tensor or array) should be computed on through NumPy views: a NumPy
    array, or a CPU tensor while ``HOST_NUMPY`` is on."""
    if isinstance(x, np.ndarray):
        return True
    return HOST_NUMPY and x.device.type == "cpu"


def namespace(x: Any) -> Any:
    """The module whose functions compute on ``x``: NumPy for an array, torch for a tensor
    (both spell ``logical_or(a, b, out=)``, ``greater_equal``...)."""
    if isinstance(x, np.ndarray):
        return np
    return sys.modules["torch"]  # ``x`` is a tensor: torch is imported


def host_arrays(values: tuple) -> tuple:
    """``values`` with each CPU tensor, and each CPU tensor field of a (Named)tuple in it,
    replaced by a NumPy view of its memory (writes through); everything else unchanged. An
    engine hands the same buffers every step: their views are kept (``_VIEWS``)."""
    return tuple(_host_tuple(v) if isinstance(v, tuple) else _host_array(v) for v in values)


def _host_array(value: Any) -> Any:
    return value.numpy() if getattr(value, "is_cpu", False) else value


def _host_tuple(values: tuple) -> tuple:
    cached = _VIEWS.get(id(values))
    if cached is not None and cached[0] is values:
        return cached[1]
    items = [_host_array(v) for v in values]
    view = type(values)(*items) if hasattr(values, "_fields") else tuple(items)
    if sum(getattr(v, "size", 0) for v in items) <= _CACHED_SIZE:
        if len(_VIEWS) >= 64:  # a few engines' state and params records, no more
            _VIEWS.pop(next(iter(_VIEWS)))
        _VIEWS[id(values)] = (values, view)  # holds ``values``: its id is not reused meanwhile
    return view


#: the most elements a cached record holds: small batches, where the conversion shows (a large
#: one's buffers are not kept alive by the cache)
_CACHED_SIZE = 1 << 14
#: id(tuple) -> (the tuple, its NumPy views): the records an engine passes every step
_VIEWS: dict[int, tuple[tuple, tuple]] = {}


def takes_arrays(form: Callable) -> Callable:
    """Mark a family's ``reset_torch`` / ``step_torch`` as taking NumPy arrays too: on the host
    the torch engine then hands it NumPy views of its buffers, kept from step to step (no
    ``host_arrays`` conversion per call)."""
    form.takes_arrays = True
    return form


def kept(owner: Any, what: Any, make: Callable[[Any], Any]) -> Any:
    """``make(owner)``, made once and kept while ``owner`` (an engine's buffer, the same array
    every step) lives, without keeping it alive: work arrays a form needs each step. What
    ``make`` returns must not refer to ``owner`` (no views of it): that would keep it alive."""
    key = (id(owner), what)
    entry = _KEPT.get(key)
    if entry is not None and entry[0]() is owner:
        return entry[1]
    value = make(owner)
    forget = lambda _, key=key, table=_KEPT: table.pop(key, None)  # noqa: E731
    _KEPT[key] = (weakref.ref(owner, forget), value)
    return value


#: (id(owner), what) -> (a weak reference to the owner, what was made of it)
_KEPT: dict[tuple, tuple[weakref.ref, Any]] = {}


def scratch(owner: np.ndarray, rows: int, dtype: Any = np.float64) -> list[np.ndarray]:
    """``rows`` work arrays of ``owner``'s length, kept with it (``kept``): a large batch's
    temporaries cost a page fault per 4 KiB each time they are allocated, several times the
    arithmetic on them."""
    return kept(owner, (rows, dtype), lambda o: list(np.zeros((rows, len(o)), dtype=dtype)))


def cos(x: Any) -> Any:
    """Elementwise cosine of a float64 tensor (or array), libm-exact on CPU."""
    if isinstance(x, np.ndarray):
        return np.cos(x)
    import torch

    if x.device.type == "cpu":
        return torch.from_numpy(np.cos(x.numpy()))
    return torch.cos(x)


def sin(x: Any) -> Any:
    """Elementwise sine of a float64 tensor (or array), libm-exact on CPU."""
    if isinstance(x, np.ndarray):
        return np.sin(x)
    import torch

    if x.device.type == "cpu":
        return torch.from_numpy(np.sin(x.numpy()))
    return torch.sin(x)


def sin_cos(x: Any, out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Any, Any]:
    """``(sin(x), cos(x))`` of a float64 tensor (or array), libm-exact on CPU; an array ``x``
    may write them into ``out``. A large array takes libm's ``sincos`` (``_sincos_loop``)."""
    if not isinstance(x, np.ndarray):
        return sin(x), cos(x)
    s, c = out if out is not None else (np.empty_like(x), np.empty_like(x))
    if x.size >= _SINCOS_MIN and x.ndim == 1:
        _sincos_loop()(x, s, c)
    else:
        np.sin(x, out=s)
        np.cos(x, out=c)
    return s, c


#: the smallest array ``sin_cos`` hands to libm's ``sincos`` (smaller ones never pay its
#: compile, and gain little)
_SINCOS_MIN = 4096


@functools.cache
def _sincos_loop() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """A compiled loop writing ``sin`` and ``cos`` of each element: LLVM turns the pair into
    one call of libm's ``sincos``, which reduces the argument once and returns the bits ``sin``
    and ``cos`` return (~35% less time than ``np.sin`` + ``np.cos``, each a pass through libm).
    On the kernel cache: compiled once per machine (~0.5 s)."""
    from envfleet.native.jit import host_loop

    def loop(x: np.ndarray, s: np.ndarray, c: np.ndarray) -> None:
        for i in range(x.shape[0]):
            s[i] = math.sin(x[i])
            c[i] = math.cos(x[i])

    return host_loop(loop, "sincos", "the sin/cos loop")
