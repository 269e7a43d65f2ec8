"""What every subcommand shares, below them all: ``CommandError`` (``envfleet CMD: error:
...``, exit status 2) and ``check_output`` (an output path refused before the work).

``cli.py`` runs the subcommands and re-exports both; ``bench``, ``tune`` and ``train`` import
them from here, so that no subcommand imports the command line that imports it.
"""

from __future__ import annotations

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
