"""The first compile of an env's kernels announces itself on stderr (nothing looks hung); with
the on-disk cache, only a real compile does (tests/native/test_cache.py: a cached start is
silent)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import numpy as np
import envfleet

for mode in ("NextStep", "NextStep", "SameStep"):  # the second: compiled already
    env = envfleet.make("CartPole-v1", 4, backend="numba", autoreset_mode=mode, seed=0)
    env.reset()
    env.step(np.zeros(4, np.int64))
    env.close()
print("done")
"""


def _run(quiet: str | None, cache: Path, enabled: str = "1") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ENVFLEET_QUIET"}
    env.update(ENVFLEET_CACHE_DIR=str(cache), ENVFLEET_CACHE=enabled)  # empty: it compiles
    if quiet is not None:
        env["ENVFLEET_QUIET"] = quiet
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    return proc


@pytest.mark.parametrize(("enabled", "when"), [
    ("1", "once: later runs load them from the cache"), ("0", "first use in this process")])
def test_one_line_per_real_compile_on_stderr(tmp_path, enabled, when):
    proc = _run(None, tmp_path, enabled)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("envfleet:")]
    # next_step compiles once (reset and step: one line); the repeat is a cache hit;
    # same_step is another compile
    notice = f"envfleet: compiling CartPole-v1 kernels for numba (~2 s, {when})..."
    assert lines == [notice, notice]


def test_envfleet_quiet_silences_it(tmp_path):
    assert "envfleet:" not in _run("1", tmp_path).stderr
