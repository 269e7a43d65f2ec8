"""The API reference builds from the docstrings with warnings as errors (``mkdocs build --strict``),
as CI runs it; every page documents what it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")

ROOT = Path(__file__).resolve().parents[1]


def test_api_reference_builds_strict(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    pages = {page: (site / "api" / page / "index.html").read_text()
             for page in ("make", "native", "executors", "chess", "sb3", "cli")}
    # each page carries its objects' docstrings (not just their names)
    assert "copies of" in pages["make"] and "NativeEnv" in pages["make"]
    assert "PoolVectorEnv" in pages["executors"] and "EnvWorkerError" in pages["executors"]
    assert "random_legal_actions" in pages["chess"] and "perft" in pages["chess"]
    assert "to_sb3" in pages["sb3"] and "NativeVectorEnv" in pages["native"]
    assert "run_train" in pages["cli"]
    assert "register_native_env" in pages["native"] and "kernel_function" in pages["native"]
    guide = (site / "NATIVE_ENVS" / "index.html").read_text()  # the guide, in the site too
    assert "GridWalk-v0" in guide and "Kernel rules" in guide
