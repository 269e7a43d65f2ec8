"""Every ```python block of the README and of its topic pages under docs/ runs as written, each as
a script in a fresh interpreter (pool examples need ``if __name__ == "__main__":`` and a file their
workers can import); the README stays a newcomer's page, and the relative links of the README and
docs/ point at files and headings that exist."""

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

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: the pages the README's reference material moved to (docs/NATIVE_ENVS.md's blocks run as one
#: script in tests/native/test_native_envs_guide.py; SCALING.md's ```py blocks need a Ray)
TOPIC_PAGES = [ROOT / "docs" / name for name in (
    "USAGE.md", "CHESS.md", "MINATAR.md", "BENCHMARKS.md", "TRAINING.md", "SCALING.md",
    "SECURITY.md", "ATARI.md", "MUJOCO.md")]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(pages: list[Path] | None = None) -> list[tuple[str, int, str]]:
    """(page, line number, source) of each ```python block of the README and its topic pages."""
    blocks = []
    for page in pages or [README, *TOPIC_PAGES]:
        text = page.read_text()
        blocks += [(page.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1,
                    m.group(1)) for m in BLOCK.finditer(text)]
    return blocks


def missing_modules(source: str) -> list[str]:
    """The top-level modules ``source`` imports that are not installed here."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if importlib.util.find_spec(n) is None)


def test_the_readme_and_its_topic_pages_have_python_blocks():
    # the README keeps one example; the 8 blocks it had before its reference material moved to
    # docs/ still run from their new pages
    assert len(python_blocks([README])) >= 1
    assert len(python_blocks()) >= 8


def test_the_readme_stays_a_newcomers_page():
    """The house rule: what envfleet is, the two commands, a short example, the benchmark table
    with the command that made it, and where to go next; reference material lives in docs/."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250, "README.md: over 250 lines; move reference to docs/"
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings == ["Two commands", "Install", "Example", "Benchmark", "Where to go next"]
    linked = set(re.findall(r"\]\((docs/[A-Z_]+\.md)\)", text))
    assert {page.relative_to(ROOT).as_posix() for page in TOPIC_PAGES} <= linked


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces -."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page (outside code blocks), GitHub's duplicates too."""
    slugs, counts = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", strip_code(page.read_text()), re.MULTILINE):
        slug = github_slug(heading)
        slugs.add(f"{slug}-{counts[slug]}" if slug in counts else slug)
        counts[slug] = counts.get(slug, 0) + 1
    return slugs


def strip_code(text: str) -> str:
    """``text`` without its fenced code blocks and inline code (links there are not links)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.M))


LINKED_PAGES = [README, *sorted((ROOT / "docs").glob("*.md")),
                *sorted((ROOT / "docs" / "api").glob("*.md")),
                *sorted((ROOT / "docs").glob("*/README.md")),
                *sorted((ROOT / "docs" / "studies").glob("*/README.md"))]


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in re.findall(r"\]\(([^()\s]+)\)", strip_code(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


@pytest.mark.parametrize(("page", "line", "source"), python_blocks(),
                         ids=[f"{page}:{line}" for page, line, _ in python_blocks()])
def test_readme_block_runs(page, line, source, tmp_path):
    missing = missing_modules(source)
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (an extra that is not installed)")
    script = tmp_path / f"{Path(page).stem.lower()}_line_{line}.py"
    script.write_text(source)
    # the scripts run elsewhere: they import the envfleet under test, wherever it comes from
    source_root = str(Path(envfleet.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [source_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{page} line {line}:\n{proc.stdout}\n{proc.stderr}"
