"""Compiling kernels: the ``kernel_function`` decorator and the first-compile notice.

``kernel_function`` marks code that runs inside a kernel, on every target. It compiles for
numba CPU and CUDA alike (``register_jitable``) and stays a plain Python function (the CUDA
simulator runs it as is). Not ``inline="always"``: numba-cuda's GPU target fails to type such
functions. On CPU the numba engine's loops are compiled with ``forceinline``, which every
kernel function they call inherits (``numba_backend``): LLVM alone kept large callees, such as
a MinAtar game's ``step_one``, out of line.

``announce_compile`` prints one line on stderr when an engine's kernels really compile (the
first use of an env takes seconds: it should not look hung); a kernel loaded from the on-disk
cache (``kernel_cache``) is not announced. ``KernelCompileError`` says what kernel code may
do, and ``_user_location`` finds the user's line in numba's message (``native/build.py``'s
``compile_checked`` raises it).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import linecache
import os
import re
import sys
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import numpy as np
from numba.core.typing.templates import builtin_registry
from numba.extending import register_jitable

_F = TypeVar("_F", bound=Callable[..., Any])


def kernel_function(fn: _F) -> _F:
    """Mark ``fn`` as kernel code: it compiles for numba CPU and CUDA device code from one source
    (numba's ``register_jitable``) and stays a plain Python function, returned unchanged.
    Decorate ``reset_one``, ``step_one``, an ``action_check`` and every helper they call."""
    return register_jitable(fn)


def is_kernel_function(fn: Any) -> bool:
    """Whether ``fn`` was decorated with ``kernel_function`` (``register_jitable`` registers it
    with numba's typing registry; the function itself is returned unchanged)."""
    return inspect.isfunction(fn) and any(value is fn for value, _ in builtin_registry.globals)


class KernelCompileError(TypeError):
    """numba could not compile a native env family's kernels (the cause is numba's message)."""


class KernelIndexError(IndexError):
    """A bounds-checked kernel (``ENVFLEET_BOUNDSCHECK=1``) indexed an array out of bounds:
    the message names the family, the env and, when it can, the kernel's line."""


#: the debug switch: the numba backend compiles every kernel with bounds checks
BOUNDSCHECK_VARIABLE = "ENVFLEET_BOUNDSCHECK"


def bounds_checked() -> bool:
    """Whether ``ENVFLEET_BOUNDSCHECK`` asks for bounds-checked kernels (read at each ``make``)."""
    return os.environ.get(BOUNDSCHECK_VARIABLE, "") not in ("", "0")


@contextlib.contextmanager
def numba_boundscheck() -> Iterator[None]:
    """numba's process-wide bounds checks on while kernels compile: numba's ``boundscheck``
    option checks only the decorated function's own body, not the kernel functions it calls."""
    from numba.core import config

    saved = config.BOUNDSCHECK
    config.BOUNDSCHECK = 1
    try:
        yield
    finally:
        config.BOUNDSCHECK = saved


def user_frame(error: BaseException) -> str | None:
    """Where ``error`` was raised in kernel code (frames outside numba, NumPy and envfleet's
    engines), as ``step_one > helper (file:line `code`)``: the calls, the innermost's line."""
    frames = [(frame, line) for frame, line in traceback_frames(error)
              if not any(part in frame.f_code.co_filename
                         for part in (*_OURS, f"{os.sep}numpy{os.sep}"))]
    if not frames:
        return None
    frame, line = frames[-1]
    path = frame.f_code.co_filename
    code = linecache.getline(path, line).split("#")[0].strip()
    where = f"{os.path.basename(path)}:{line}" + (f" `{code}`" if code else "")
    return f"{' > '.join(f.f_code.co_name for f, _ in frames)} ({where})"


def traceback_frames(error: BaseException) -> Iterator[tuple[Any, int]]:
    """(frame, line) of each level of ``error``'s traceback, outermost first."""
    tb = error.__traceback__
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


#: what kernel code may do, for the errors that point users at docs/NATIVE_ENVS.md
KERNEL_RULES = (
    "Kernel code (reset_one, step_one and every function they call, each decorated with "
    "envfleet.kernels.kernel_function) is compiled as numba nopython code and as CUDA device "
    "code: it may use numbers, bools, the arrays it is given (state columns, obs, actions, "
    "rewards, terminated; lookup tables from spec.tables()) by index, the params record's "
    "fields and math functions; it must not allocate (no np.zeros, lists, dicts, strings), "
    "call plain Python functions or objects, or read globals other than numeric constants. "
    "See docs/NATIVE_ENVS.md, \"Kernel rules\"."
)

#: where numba points: a typing error's ``File "path", line N:`` (the code follows, marked
#: with ``^``) and a lowering error's ``During: lowering "..." at path (N)`` (an allocation:
#: lists, array expressions and copies pass typing and fail when lowered without numba's runtime)
_LOCATION = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)'
                       r'|During: lowering ".*" at (?P<lfile>.+?) \((?P<lline>\d+)\)[ \t]*$',
                       re.MULTILINE)
#: terminal colour codes (numba-cuda's messages carry them)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: frames of numba itself and of envfleet's driver and engines (not the user's code)
_OURS = (f"{os.sep}envfleet{os.sep}native{os.sep}", f"{os.sep}numba{os.sep}")
#: what numba says when kernel code allocates: kernels compile without numba's runtime (NRT),
#: so an allocation fails to lower ("NRT required") or, for np.empty and what builds on it
#: (np.zeros, np.ones, np.array), to type
_ALLOCATION = ("NRT required but not enabled",
               "Only accept returning of array passed into the function as argument")
ALLOCATION_REASON = ("it allocates (a new array, list, dict, set or string; a slice's .copy() "
                     "or an array expression such as a + b), which kernel code may not do")


def _user_location(message: str) -> str | None:
    """The innermost place in numba's message outside numba and envfleet's engines (numba
    prints an inner function's error before its caller's), as ``file:line `code```, with the
    reason: an allocation, whatever its form, or the line numba gives just before it when it is
    one (e.g. "Untyped global name 'helper'")."""
    message = _ANSI.sub("", message)  # numba-cuda highlights its messages
    places = [m for m in _LOCATION.finditer(message)
              if not any(part in (m["file"] or m["lfile"]) for part in _OURS)]
    if not places:
        return None
    innermost = places[0]
    path, line = innermost["file"] or innermost["lfile"], innermost["line"] or innermost["lline"]
    where = f"{os.path.basename(path)}:{line}"
    after = message[innermost.end():].splitlines()
    code = next((line.strip() for line, mark in itertools.pairwise(after)
                 if mark.strip() == "^"), None) if innermost["file"] else None
    code = code or linecache.getline(path, int(line)).strip()
    if code:
        where += f" `{code}`"
    if any(text in message for text in _ALLOCATION):
        return f"{where}: {ALLOCATION_REASON}"
    before = [line.strip() for line in message[:innermost.start()].splitlines() if line.strip()]
    if before and not before[-1].startswith(("During:", "raised from")):
        where += f": {before[-1]}"
    return where


#: the kernel sets already announced in this process
_ANNOUNCED: set[Hashable] = set()


def host_loop(loop: Callable[..., None], key: Hashable, what: str, **options: Any) -> Any:
    """``loop`` (a plain loop over NumPy arrays) compiled by numba for the torch backend's host
    route, on the kernel cache; its first compile on a machine (~0.5 s) is announced as
    ``what``. ``options``: more ``numba.njit`` options."""
    import numba

    from envfleet.native.kernel_cache import disk_cached, is_disk_cached

    compiled = numba.njit(boundscheck=False, nogil=True, **options)(loop)
    return disk_cached(compiled, on_compile=lambda: announce_compile(
        key, what, "torch", 0.5, cached=is_disk_cached(compiled)))


def announce_compile(key: Hashable, env_id: str, backend: str, seconds: float,
                     cached: bool = False) -> None:
    """Say on stderr that ``env_id``'s kernels compile now, once per ``key`` and process.

    ``seconds``: the usual compile time, shown as a hint; ``cached``: the result goes to the
    on-disk cache (``kernel_cache``), so later processes skip it. ``ENVFLEET_QUIET=1``
    silences it.
    """
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    if os.environ.get("ENVFLEET_QUIET", "") not in ("", "0"):
        return
    when = "once: later runs load them from the cache" if cached else "first use in this process"
    print(f"envfleet: compiling {env_id} kernels for {backend} (~{seconds:g} s, {when})...",
          file=sys.stderr, flush=True)


def step_rows(step_one: Callable[..., None], params: tuple, env_id: str) -> Callable[..., None]:
    """``step_one`` over every row of a batch of NumPy arrays, compiled (``host_loop``, numba's
    ``error_model="numpy"`` as the numba backend's kernels): the torch backend's host route for
    a family whose whole-batch form costs more than its kernel (CartPole). The loop takes
    ``(state, params, actions, rng, obs, rewards, terminated)``; ``params`` fields that are
    arrays (per-env values, ``spec.per_env_params``) are read at env i's index, the others are
    compiled in as constants, as the numba backend does (one compile per distinct record):
    flags like CartPole's integrator then fold away instead of branching in every row, which
    kept the loop ~25% slower at 65,536 envs."""
    per_env = tuple(name for name, value in zip(params._fields, params, strict=True)
                    if isinstance(value, np.ndarray))
    constant = params._replace(**dict.fromkeys(per_env, 0.0)) if per_env else params
    return _step_rows(step_one, constant, per_env, env_id)


@functools.cache
def _step_rows(step_one: Callable[..., None], constant: tuple, per_env: tuple[str, ...],
               env_id: str) -> Callable[..., None]:
    fields = ", ".join(f"params[{j}][i]" if name in per_env else f"constant[{j}]"
                       for j, name in enumerate(constant._fields))
    scope: dict[str, Any] = {"Params": type(constant)}
    exec(f"def row(params, constant, i):\n    return Params({fields})\n", scope)  # no _replace
    row = kernel_function(scope["row"])

    def loop(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
             terminated: Any) -> None:
        for i in range(obs.shape[0]):  # ``constant``: a closure cell, frozen in by numba
            step_one(i, state, row(params, constant, i), actions, rng, obs, rewards, terminated)

    return host_loop(loop, ("rows", step_one, constant, per_env), f"the {env_id} step loop",
                     error_model="numpy")
