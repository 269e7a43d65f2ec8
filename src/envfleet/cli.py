"""The ``envfleet`` command line: one subcommand per job (``bench``, ``tune``, ``train``, ``eval``).

Each subcommand names a function ``add_arguments(parser)`` (``module`` or ``module:function``),
which sets ``func`` (taking the parsed arguments, returning the exit status) as the parser's
default.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import sys

from envfleet.command import CommandError, check_output

__all__ = ["COMMANDS", "REQUIRES", "CommandError", "build_parser", "check_output", "main",
           "missing_extra"]


#: subcommand -> (``module`` with ``add_arguments``, or ``module:function``; one-line help)
COMMANDS = {
    "bench": ("envfleet.bench.runner",
              "steps/s of every backend side by side with Gymnasium and SB3 baselines"),
    "tune": ("envfleet.tune",
             "find the backend, num_envs and workers / threads that run an env fastest here"),
    "train": ("envfleet.train.cli:add_train_arguments",
              "train PPO on an env; report time-to-target and env-only, ideal and "
              "end-to-end steps/s"),
    "eval": ("envfleet.train.cli:add_eval_arguments",
             "play a policy saved by train --save and report its mean return"),
}

#: subcommand -> {module it cannot run without: the extra that installs it}; checked after
#: parsing (``--help`` works without them), before the subcommand imports anything
REQUIRES: dict[str, dict[str, str]] = {
    "train": {"torch": "torch"},
    "eval": {"torch": "torch"},
}


def missing_extra(command: str) -> str | None:
    """Why ``command`` cannot run here (a module it needs is not installed), or None."""
    for module, extra in REQUIRES.get(command, {}).items():
        if importlib.util.find_spec(module) is None:
            return (f"needs {module}, which is not installed: "
                    f"pip install 'envfleet[{extra}]'")
    return None


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand registered."""
    import importlib

    from envfleet import __version__

    parser = argparse.ArgumentParser(
        prog="envfleet", description="Reinforcement-learning environments as fast as the "
                                     "hardware allows.")
    parser.add_argument("--version", action="version", version=f"envfleet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (target, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        module, _, function = target.partition(":")
        getattr(importlib.import_module(module), function or "add_arguments")(command)
    return parser


def command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``."""
    for action in parser._actions:
        if isinstance(action.choices, dict) and name in action.choices:
            return action.choices[name]
    raise KeyError(name)


#: options that moved out of the package, and where they are now
MOVED_OPTIONS = {
    "--study": "the studies run from a clone of the repository: python -m benchmarks --study NAME",
    "--perft-depth": "Chess-v0's peers and perft run from a clone of the repository: "
                     "python -m benchmarks --env Chess-v0",
}


def unrecognized(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """argparse's "unrecognized arguments" message, with the option each unknown one most
    likely meant (``--num_envs``: ``--num-envs``), or where it moved (``MOVED_OPTIONS``)."""
    options = [o for action in parser._actions for o in action.option_strings
               if o.startswith("--")]
    meant = []
    for arg in unknown:
        name = arg.partition("=")[0]
        if not name.startswith("-"):
            continue
        dashed = "--" + name.lstrip("-").replace("_", "-")
        if dashed in MOVED_OPTIONS:
            meant.append(f"{name}: {MOVED_OPTIONS[dashed]}")
            continue
        close = [dashed] if dashed in options else difflib.get_close_matches(
            dashed, options, n=1, cutoff=0.75)
        meant += [f"{name}: did you mean {close[0]}?" for _ in close[:1]]
    return f"unrecognized arguments: {' '.join(unknown)}" + (
        f" ({'; '.join(meant)})" if meant else "")


def find_env_module(env_id: str | None) -> None:
    """For ``module:Id``, let ``module`` be found in the current folder, as ``python -m`` finds
    it (the ``envfleet`` script's ``sys.path`` has no current folder): added at the end of
    ``sys.path`` (inherited by workers) only when that module is nowhere else and is here."""
    module = env_id.partition(":")[0].partition(".")[0] if env_id and ":" in env_id else ""
    here = os.getcwd()
    if not module or here in sys.path or "" in sys.path or importlib.util.find_spec(module):
        return
    if os.path.isfile(os.path.join(here, f"{module}.py")) or os.path.isdir(
            os.path.join(here, module)):
        sys.path.append(here)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments) and run the subcommand."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's usage and the option meant, not the top-level usage
        command = command_parser(parser, args.command)
        command.error(unrecognized(command, unknown))
    args.argv = argv
    find_env_module(getattr(args, "env", None))
    missing = missing_extra(args.command)
    if missing is not None:
        print(f"envfleet {args.command}: error: {missing}", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except CommandError as error:
        print(f"envfleet {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C where the subcommand has nothing to keep: no traceback
        print(f"envfleet {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
