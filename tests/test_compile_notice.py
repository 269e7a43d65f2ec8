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


BIG_BATCH = """
import numpy as np
import envfleet

# 1024 envs: the first reset compiles the serial set, the first step the parallel step
env = envfleet.make("CartPole-v1", 1024, backend="numba", seed=0)
env.reset()
env.step(np.zeros(1024, np.int64))
env.close()
print("done")
"""


def test_a_big_batchs_first_reset_and_step_announce_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ENVFLEET_QUIET"}
    env.update(ENVFLEET_CACHE_DIR=str(tmp_path), ENVFLEET_CACHE="1")  # empty: it compiles
    proc = subprocess.run([sys.executable, "-c", BIG_BATCH], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("envfleet:")]
    assert lines == ["envfleet: compiling CartPole-v1 kernels for numba (~2 s, once: later "
                     "runs load them from the cache)..."]
