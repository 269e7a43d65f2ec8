"""The first compile of an env's kernels announces itself on stderr (nothing looks hung)."""

from __future__ import annotations

import os
import subprocess
import sys

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


def _run(quiet: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ENVFLEET_QUIET"}
    if quiet is not None:
        env["ENVFLEET_QUIET"] = quiet
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    return proc


def test_one_line_per_real_compile_on_stderr():
    lines = [line for line in _run(None).stderr.splitlines() if line.startswith("envfleet:")]
    # next_step compiles once (reset and step: one line); the repeat is a cache hit;
    # same_step is another compile
    notice = ("envfleet: compiling CartPole-v1 kernels for numba (first use in this process, "
              "~2 s)...")
    assert lines == [notice, notice]


def test_envfleet_quiet_silences_it():
    assert "envfleet:" not in _run("1").stderr
