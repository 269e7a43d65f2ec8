"""docs/NATIVE_ENVS.md's example runs as written: every ```python block, in order, as one script
in a fresh interpreter (the CUDA simulator standing in for a GPU when none is visible), and it
shows what the guide says: the same trajectories on numba, cuda and torch, Gymnasium's entry
points, tables, the reference check, both kinds of error and the second example, MiniBreakout-v0
(the same trajectories as MinAtar/Breakout-v1 and on cuda, and minatar's transplant check)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import envfleet

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "NATIVE_ENVS.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_guide_example_runs_and_shows_what_it_claims(tmp_path):
    blocks = BLOCK.findall(GUIDE.read_text())
    assert len(blocks) >= 5
    script = tmp_path / "native_envs_guide.py"
    script.write_text("\n\n".join(blocks))
    source_root = str(Path(envfleet.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [source_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # a GPU's absence is no reason to skip cuda
    env["ENVFLEET_QUIET"] = "1"
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    has = {name: importlib.util.find_spec(name) is not None for name in ("torch", "numba_cuda")}
    if has["torch"]:
        assert "torch: same trajectories as numba" in out
    if has["torch"] and has["numba_cuda"]:
        assert "cuda: same trajectories as numba" in out
    assert re.search(r"numba: [1-9]\d* episodes reached the goal", out), out
    assert "make_vec: NativeVectorEnv (4, 2)" in out
    assert "make: [" in out
    cuda = ", 'cuda'" if has["torch"] and has["numba_cuda"] else ""
    torch = ", 'torch'" if has["torch"] else ""
    assert f"GridWalk-v0: ['numba'{cuda}{torch}]" in out
    assert f"GridWalk-v1: ['numba'{cuda}]" in out
    assert re.search(r"agrees with the reference on \d{3,} steps \([1-9]\d* goals\)", out), out
    assert ("Broken-v0: NativeEnvSpec.step_one is not decorated: decorate it (and every helper "
            "it calls) with @envfleet.kernels.kernel_function") in out
    assert f"MiniBreakout-v0: ['numba'{cuda}]" in out
    assert re.search(r"numba: [1-9]\d* bricks, [1-9]\d* episodes ended", out), out
    assert "MinAtar/Breakout-v1: same trajectories as MiniBreakout-v0 on numba (200 steps)" in out
    if cuda:
        assert "cuda: same trajectories as MiniBreakout-v0 on numba (50 steps)" in out
    if importlib.util.find_spec("minatar") is not None:
        assert re.search(r"MiniBreakout-v0 agrees with minatar's Breakout on \d{4,} steps "
                         r"\([1-9]\d* bricks\)", out), out
    assert ("Allocating-v0: numba could not compile the env's kernels for the 'numba' backend "
            "(at native_envs_guide.py:") in out
