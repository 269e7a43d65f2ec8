"""What every subcommand shares, below them all: ``CommandError`` (``envfleet CMD: error:
...``, exit status 2), ``check_output`` (an output path refused before the work) and the
argparse ``type=`` functions (a bad value named at parse time: ``positive_int``, ``seed``...).

``cli.py`` runs the subcommands and re-exports both; ``bench``, ``tune`` and ``train`` import
them from here, so that no subcommand imports the command line that imports it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


class CommandError(Exception):
    """A subcommand cannot start (bad option value, unknown env id or backend): exit status 2."""


def check_output(path: Path, option: str, directory: bool = False) -> None:
    """Refuse ``option``'s output ``path`` (a file, or a folder with ``directory``) when it
    cannot be written (a directory where a file goes or the reverse, under a file, in a place
    that takes no files), before the work whose results go there starts; a CommandError naming
    the option, the path and why. Leaves nothing behind (missing folders are made when written).
    """
    where = f"{option} {path}"
    if directory and path.exists() and not path.is_dir():
        raise CommandError(f"{where}: is a file, not a directory")
    if not directory and path.is_dir():
        raise CommandError(f"{where}: is a directory, not a file")
    folder = path if directory else path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # a path under a regular file does not exist either
    if existing.exists() and not existing.is_dir():
        raise CommandError(f"{where}: {existing} is a file, not a directory")
    try:
        if directory or existing != folder:  # files can be made there (and the folders)
            tempfile.NamedTemporaryFile(dir=existing).close()
        elif path.exists():
            open(path, "ab").close()  # appends nothing: the file is left as it is
        else:
            open(path, "xb").close()
            path.unlink()
    except OSError as error:
        raise CommandError(f"{where}: cannot write in {existing} ({error.strerror or error})"
                           ) from None


# --- argument types: argparse's ``type=``, each refusal a message argparse shows --------------


def positive_int(text: str) -> int:
    """An integer >= 1 (``1_000_000`` allowed)."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def seed(text: str) -> int:
    """A seed: an integer in [0, 2**64) (seeds are uint64)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    if value >= 2**64:
        raise argparse.ArgumentTypeError(f"must be below 2**64 (seeds are uint64), got {text}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def positive_float(text: str) -> float:
    """A number > 0."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A number >= 0."""
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def names(text: str) -> list[str]:
    """A comma list of names (blanks dropped), at least one."""
    listed = [t.strip() for t in text.split(",") if t.strip()]
    if not listed:
        raise argparse.ArgumentTypeError("must be a comma list of names")
    return listed


def ints(text: str) -> list[int]:
    """A comma list of integers >= 1, sorted, each once, at least one."""
    values = sorted({positive_int(t.strip()) for t in text.split(",") if t.strip()})
    if not values:
        raise argparse.ArgumentTypeError("must be a comma list of integers")
    return values
