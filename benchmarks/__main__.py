"""``python -m benchmarks``: ``envfleet bench`` with the repository's measurements added.

The same options and sweep as ``envfleet bench``, plus ``--study NAME`` (the studies,
``benchmarks/studies``) and Chess-v0 against its peers with perft (``benchmarks/chess``,
``--perft-depth``). Run it from the repository's root (with ``PYTHONPATH=src`` or envfleet
installed).
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import chess, studies
from envfleet.bench import runner
from envfleet.command import CommandError, check_output

PROG = "python -m benchmarks"


def build_parser() -> argparse.ArgumentParser:
    """``envfleet bench``'s parser with the studies' and the chess bench's options."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="envfleet bench with the repository's measurements: the "
                               "studies (--study) and Chess-v0 against its peers")
    runner.add_arguments(parser)
    studies.add_arguments(parser)
    chess.add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """A study, or ``envfleet bench``'s sweep (Chess-v0 with its peers: ``chess`` registered
    them on import)."""
    check_output(args.out, "--out", directory=True)  # before any point is measured
    if args.study:
        return studies.run(args)
    chess.check_arguments(args)
    return runner.run(args)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments) and run; 2 on a usage error."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.command_line = " ".join([PROG, *argv])
    try:
        return run(args)
    except CommandError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
