"""Envs handed to a compiled loop's threads one at a time, whatever numba's threading layer.

The engines over C simulators (Atari, MuJoCo) step envs whose cost varies (a reset, a body
with more contacts) on threads the OS may deschedule. Numba's ``omp`` and ``workqueue`` layers
split a ``prange``'s iterations into static blocks (``parallel_chunksize`` or not: it sets the
blocks' size, not who takes them), so one slow env or thread holds up the whole step. Here each
of ``threads`` workers takes the next env from one shared counter instead::

    counter = np.zeros(1, np.int64)
    for _worker in prange(threads):
        while True:
            i = next_index(counter)
            if i >= num_envs:
                break
            ...  # env i

(A ``+=`` reduction inside the ``while`` is not seen by numba's parfor pass: count after the
loop instead.)
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic


@intrinsic
def next_index(typingctx: Any, counter: Any) -> Any:
    """``counter[0]``, incremented atomically (an int64 array's first entry): each caller
    gets a different value, in order."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", array.data, ir.Constant(ir.IntType(64), 1),
                                  "monotonic")
    return types.int64(counter), codegen
