"""Output paths that cannot be written, even by root (the tests run as root, whom file
permissions do not stop): a path under a regular file, a directory where a file goes (or the
reverse), a place in /proc."""

from __future__ import annotations

from pathlib import Path

FILE_KINDS = ("under a file", "a directory", "in /proc")
DIR_KINDS = ("under a file", "a file", "in /proc")


def unwritable_file(tmp_path: Path, kind: str, name: str) -> Path:
    """A file path called ``name`` that ``kind`` (one of ``FILE_KINDS``) makes unwritable."""
    if kind == "under a file":
        (tmp_path / "plain").write_text("")
        return tmp_path / "plain" / name
    if kind == "a directory":
        (tmp_path / name).mkdir()
        return tmp_path / name
    return Path("/proc/envfleet-no-such-dir") / name


def unwritable_dir(tmp_path: Path, kind: str) -> Path:
    """A directory path that ``kind`` (one of ``DIR_KINDS``) makes unwritable."""
    if kind == "under a file":
        (tmp_path / "plain").write_text("")
        return tmp_path / "plain" / "out"
    if kind == "a file":
        (tmp_path / "out").write_text("")
        return tmp_path / "out"
    return Path("/proc/envfleet-no-such-dir/out")
