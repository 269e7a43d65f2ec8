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
