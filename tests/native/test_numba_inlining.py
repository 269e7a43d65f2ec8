"""The numba backend's step loop inlines every kernel function it reaches (``forceinline``).

Left to LLVM, a large callee such as a MinAtar game's ``step_one`` stayed out of line, and each
call passed the whole state tuple on the stack (every array exploded into its fields): a
Breakout env-step took ~220 ns on one thread instead of ~40 ns.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import envfleet


def test_step_kernel_inlines_the_family(monkeypatch: pytest.MonkeyPatch) -> None:
    # compiled in memory (a kernel loaded from the disk cache has no IR to inspect); params of
    # its own, so no other test's compile of the same kernels is reused (compile_kernels caches)
    monkeypatch.setenv("ENVFLEET_CACHE", "0")
    env = envfleet.make("MinAtar/Breakout-v1", 4, backend="numba", num_threads=1, seed=0,
                        sticky_action_prob=0.37)
    env.reset()
    env.step(np.zeros(4, dtype=np.int64))
    step_serial = env.engine._kernels[0]
    (ir,) = step_serial.inspect_llvm().values()
    defined = re.findall(r"^define [^@]*@(\S+?)\(", ir, re.MULTILINE)
    parts = ("step_one", "3act", "advance", "observe")
    out_of_line = sorted({part for name in defined for part in parts if part in name})
    assert not out_of_line, f"the step loop calls these out of line: {out_of_line}"
    env.close()
