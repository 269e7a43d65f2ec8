"""Compiling kernels: the ``kernel_function`` decorator and the first-compile notice.

``kernel_function`` marks code that runs inside a kernel, on every target. It compiles for
numba CPU and CUDA alike (``register_jitable``) and stays a plain Python function (the CUDA
simulator runs it as is). Not ``inline="always"``: numba-cuda's GPU target fails to type such
functions, and on CPU LLVM inlines them anyway (measured: same speed).

``announce_compile`` prints one line on stderr when an engine's kernels really compile (the
first use of an env in a process takes seconds: it should not look hung).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Hashable

from numba.extending import register_jitable

kernel_function = register_jitable

#: the kernel sets already announced in this process
_ANNOUNCED: set[Hashable] = set()


def announce_compile(key: Hashable, env_id: str, backend: str, seconds: float) -> None:
    """Say on stderr that ``env_id``'s kernels compile now, once per ``key`` and process.

    ``seconds``: the usual compile time, shown as a hint. ``ENVFLEET_QUIET=1`` silences it.
    """
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    if os.environ.get("ENVFLEET_QUIET", "") not in ("", "0"):
        return
    print(f"envfleet: compiling {env_id} kernels for {backend} (first use in this process, "
          f"~{seconds:g} s)...", file=sys.stderr, flush=True)
