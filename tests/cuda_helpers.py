"""What the cuda tests share: how results compare on a real GPU, and the simulator-only check
that kernels type and lower for a real GPU.

The simulator runs kernels as Python, so it cannot catch code the CUDA target rejects:
``cuda_backend.lower_kernels`` types and lowers them to LLVM IR for sm_90 in a fresh process
with the simulator off (no GPU or NVVM needed; a check that compiles PTX calls ``need_nvvm()``
and skips where libNVVM is not installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

#: float64 state on a real GPU differs from the CPU's by a few ulp per step (FMA contraction and
#: libdevice's rounding), growing along an episode: 9-47 ulp after the 30 steps of the tests on
#: an H200. Observations (float32), rewards, flags and integer state agree exactly, and
#: everything agrees bit for bit under the simulator.
GPU_FLOAT64_MAX_ULP = 256


def host(x):
    """A NumPy copy of a backend output (torch tensor on any device, or NumPy array)."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.array(x)


def assert_same(device_value, cpu_value, what: str) -> None:
    """``device_value`` (cuda) equals ``cpu_value`` (numba): bit for bit, except float64 on a
    real GPU, within ``GPU_FLOAT64_MAX_ULP``."""
    c, r = host(device_value), np.asarray(cpu_value)
    assert c.dtype == r.dtype, (what, c.dtype, r.dtype)
    if not SIMULATOR and c.dtype == np.float64:
        np.testing.assert_array_max_ulp(c, r, maxulp=GPU_FLOAT64_MAX_ULP)
    else:
        np.testing.assert_array_equal(c, r, err_msg=what)

_PRELUDE = textwrap.dedent("""
    import sys, types
    import numba.cuda.dispatcher as dispatcher
    if not hasattr(dispatcher, "get_current_device"):
        sys.exit(3)
    # Device functions ask the current GPU for its compute capability: pretend one (sm_90).
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    from envfleet.native.cuda_backend import lower_kernels
    from envfleet.native.driver import NEXT_STEP, SAME_STEP, DISABLED
    MODES = (NEXT_STEP, SAME_STEP, DISABLED)

    def need_nvvm():
        # exit 4 (the test skips) where libNVVM or NVRTC, which PTX generation needs, is missing
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib
            for name in ("nvvm", "nvrtc"):
                load_nvidia_dynamic_lib(name)
        except Exception as error:
            print(error)
            sys.exit(4)
""")

only_under_simulator = pytest.mark.skipif(
    not SIMULATOR, reason="a simulator-only check (on a GPU the other tests compile the kernels "
    "for real)")


def assert_kernels_lower(script: str, timeout: float = 600) -> None:
    """Run ``script`` (which calls ``lower_kernels``; ``MODES``, the mode codes and
    ``need_nvvm()`` are defined) in a fresh process without the simulator; fail with its
    traceback, skip where ``need_nvvm()`` finds no libNVVM."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode == 3:
        pytest.skip("numba-cuda internals changed (dispatcher.get_current_device)")
    if done.returncode == 4:
        pytest.skip(f"no libNVVM / NVRTC to compile PTX with: {done.stdout.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-4000:]


# --- what a GPU can capture: no value read back ------------------------------------------------

#: aten ops that read a device's values back to the host or give a shape that depends on them:
#: a GPU cannot capture them into a CUDA graph
HOST_READS = ("_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal",
              "unique", "repeat_interleave")


class StepOps(TorchDispatchMode):
    """Every aten op dispatched while active, with the shapes and dtypes of its tensors
    (``ops``: (name, indexed by a bool tensor, ((shape, dtype), ...)))."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [x for x in (*args, *(kwargs or {}).values(), out)
                   if isinstance(x, torch.Tensor)]
        bool_index = func.__name__.startswith("index") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool
            for x in args if isinstance(x, list | tuple) for i in x)
        self.ops.append((func.__name__, bool_index,
                         tuple((tuple(t.shape), t.dtype) for t in tensors)))
        return out


def reads_back(ops: list[tuple]) -> list[tuple]:
    """The ops of ``StepOps.ops`` that read a value back to the host."""
    return [op for op in ops if op[0].split(".")[0] in HOST_READS or op[1]]
