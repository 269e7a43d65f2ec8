"""Every ```python block of the README runs as written, each as a script in a fresh interpreter
(pool examples need ``if __name__ == "__main__":`` and a file their workers can import)."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import envfleet

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[tuple[int, str]]:
    """(line number, source) of each ```python block of the README."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def missing_modules(source: str) -> list[str]:
    """The top-level modules ``source`` imports that are not installed here."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if importlib.util.find_spec(n) is None)


def test_the_readme_has_python_blocks():
    assert len(python_blocks()) >= 4


@pytest.mark.parametrize(("line", "source"), python_blocks(),
                         ids=[f"README.md:{line}" for line, _ in python_blocks()])
def test_readme_block_runs(line, source, tmp_path):
    missing = missing_modules(source)
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (an extra that is not installed)")
    script = tmp_path / f"readme_line_{line}.py"
    script.write_text(source)
    # the scripts run elsewhere: they import the envfleet under test, wherever it comes from
    source_root = str(Path(envfleet.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [source_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README.md line {line}:\n{proc.stdout}\n{proc.stderr}"
