"""``python -m benchmarks --env Chess-v0``: the chess peers, perft, and the chess report sections.

Chess is measured as random self-play plies/s over N boards, every ply producing the legal-action
mask of every board (what a masked policy needs). Every series plays the same work (issue 12's
like-for-like rule; ``fairness()`` records it in each JSON row): board i starts at
``BENCH_POSITIONS[i % 48]`` (16 openings, 16 middlegames, 16 endgames from seeded random play,
stored as FENs), plays uniformly random legal moves and restarts at that position after
``GAME_PLIES`` plies or at the end of its game (Chess-v0's rules); the caller gets a mask of its
own each ply (envfleet's default ``copy=True``; a ``copy=False`` series is labelled "view"):

- envfleet ``Chess-v0`` (native backends, measured by ``measure.py``):
  ``env.step(env.random_legal_actions())`` with ``native_options()`` (``max_plies=GAME_PLIES``,
  same-step autoreset: every step is one ply on every board, as the peers' steps),
  ``info["action_mask"]`` bool (N, 4672);
- ``python-chess``: N ``chess.Board`` objects; each ply pushes a random move of the board's
  legal-move list (its mask), then lists the new position's legal moves and checks the end of
  the game with Chess-v0's rules (mate or stalemate, insufficient material, half-move clock
  100, threefold repetition) and the ply limit;
- ``openspiel``: N ``pyspiel`` chess states (``new_initial_state(fen)``); each ply takes
  ``state.legal_actions_mask()`` (a Python list of 4672 ints), applies a random legal action
  (``state.legal_actions()``), and restarts at a terminal state or the ply limit;
  ``openspiel-numpy`` does the same with the mask turned into a NumPy bool array;
- ``pgx``: ``pgx.make("chess")`` with JAX on CPU, one jitted function per ply (``jax.vmap`` of
  ``env.step``, a uniformly random legal action from ``state.legal_action_mask`` with
  ``jax.random``, finished boards replaced by an initial state); compile time is part of the
  first step (``warmup_s``), not of the plies/s. pgx cannot start from a FEN: it plays whole
  games from the initial position (``positions: "initial"`` in its rows);
- ``envpool-chess``: EnvPool's C++ ``Chess-v1`` (a port of pgx's chess), sync mode, measured
  at 1 .. usable cores threads and reported at its best; it has no random-legal-action call,
  so its tight loop draws each ply's actions from its ``legal_action_mask`` with
  ``random_legal_from_mask`` (NumPy, inside the clock); whole games from the initial position.

Each series is measured twice: in its tight loop (above: each side draws its random legal
moves its own way, inside the clock) and in the user loop (``userloop``: a trainer's loop,
step then a policy's NumPy work on the mask, the same ``random_legal_from_mask`` on every side
but python-chess, and only the steps timed: the policy's cost is left out on every side). The
user loop's points are "<series> user" rows (``type: "user"`` in the JSON lines), with the
policy's time per call and the minor page faults inside the step.

``compare()`` (``python -m benchmarks.chess``) measures envfleet and the peers in one process,
in alternating rounds (a loaded machine slows all alike), and reports ratios as measured and
per core used (envfleet's threads against a peer's one).

Each peer is a ``Baseline`` (``baselines.py`` lists them) whose ``BaselineEnv`` plays its own
actions (``action_space=None``); a peer whose package is missing is reported as not installed.

Perft (``perft_points``): ``envfleet.envs.chess.perft(fen, depth)`` and a python-chess perft (bulk
counting at the last ply, as envfleet's) on the same positions, nodes/s each in a fresh process.

The package: ``games`` (constants, positions, the peers, envfleet's games, the user loop's
policy), ``userloop``, ``perft``, ``sections`` (the report's chess sections), ``compare``
(``__main__``). Importing it registers the peers into ``baselines.BASELINES``, Chess-v0's rows,
reset positions and perft series into the bench worker (``measure.ROW_FIELDS``,
``RESET_OPTIONS``, ``SERIES``), the user loop into ``measure.LOOPS``, and Chess-v0's
``runner.GameBench`` (its unit, defaults, twin loop, perft points and sections); every point's
worker imports it too (``GameBench.module``). envfleet's package never imports it.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.chess.compare import (
    Contender,
    compare,
    contenders,
)
from benchmarks.chess.games import (
    BENCH_POSITIONS,
    CHESS_ID,
    DEFAULT_NUM_ENVS,
    ENVPOOL_CHESS_ID,
    GAME_PLIES,
    INITIAL_ONLY,
    KIWIPETE_FEN,
    NATIVE,
    NUM_ACTIONS,
    PEERS,
    PERFT_POSITIONS,
    PERFT_SERIES,
    PYTHON_PEER_MAX_ENVS,
    REQUIRES,
    START_FEN,
    TARGETS,
    EnvPoolGames,
    NativeGames,
    OpenSpielGames,
    PgxGames,
    PythonChessGames,
    build_games,
    chess_env_status,
    fairness,
    game_over,
    generate_positions,
    is_chess,
    native_options,
    native_reset_options,
    peer_baselines,
    random_legal_from_mask,
    start_fens,
)
from benchmarks.chess.perft import (
    PerftCase,
    measure_perft,
    perft_cases,
    perft_specs,
    perft_status,
    python_chess_perft,
)
from benchmarks.chess.sections import (
    best_lines,
    markdown_sections,
    peer_lines,
    per_core,
    perft_table,
    rich_sections,
    summary,
    target_lines,
)
from benchmarks.chess.userloop import (
    USER_SUFFIX,
    UserLoop,
    measure_user_loop,
    timed_user_loop,
)
from envfleet.bench.baselines import register_peers
from envfleet.bench.measure import LOOPS, RESET_OPTIONS, ROW_FIELDS, SERIES
from envfleet.bench.runner import GameBench, Planned, register_game
from envfleet.command import CommandError

__all__ = [
    "BENCH_POSITIONS",
    "CHESS_ID",
    "DEFAULT_NUM_ENVS",
    "ENVPOOL_CHESS_ID",
    "GAME_PLIES",
    "INITIAL_ONLY",
    "KIWIPETE_FEN",
    "NATIVE",
    "NUM_ACTIONS",
    "PEERS",
    "PERFT_POSITIONS",
    "PERFT_SERIES",
    "PYTHON_PEER_MAX_ENVS",
    "REQUIRES",
    "START_FEN",
    "TARGETS",
    "USER_SUFFIX",
    "Contender",
    "EnvPoolGames",
    "NativeGames",
    "OpenSpielGames",
    "PerftCase",
    "PgxGames",
    "PythonChessGames",
    "UserLoop",
    "add_arguments",
    "best_lines",
    "build_games",
    "check_arguments",
    "chess_env_status",
    "compare",
    "contenders",
    "fairness",
    "game_over",
    "generate_positions",
    "is_chess",
    "markdown_sections",
    "measure_perft",
    "measure_user_loop",
    "native_options",
    "native_reset_options",
    "peer_baselines",
    "peer_lines",
    "per_core",
    "perft_cases",
    "perft_points",
    "perft_specs",
    "perft_status",
    "perft_table",
    "python_chess_perft",
    "random_legal_from_mask",
    "rich_sections",
    "sections",
    "start_fens",
    "summary",
    "target_lines",
    "timed_user_loop",
]



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The chess bench's own option (``python -m benchmarks``)."""
    parser.add_argument(
        "--perft-depth", type=int, metavar="D",
        help=f"{CHESS_ID} only: perft at most D plies deep on each position (default: "
             + ", ".join(f"{name} {depth}" for name, _, depth, _ in PERFT_POSITIONS)
             + "; 0: no perft)")


def perft_points(args: argparse.Namespace) -> list[Planned]:
    """The perft points after the plies/s sweep, position by position (envfleet's and
    python-chess's), in nodes/s."""
    return [Planned(name, spec, skip, kind="perft",
                    fields={"position": spec.options["position"],
                            "depth": spec.options["depth"]},
                    detail=f"{spec.options['position']} depth {spec.options['depth']}",
                    unit="nodes")
            for name, spec, skip in perft_specs(getattr(args, "perft_depth", None),
                                                args.seconds)]


def sections(results: Any, perft_rows: list[dict[str, Any]], user: Any
             ) -> tuple[dict[str, Any], str, list[Any]]:
    """(the summary JSON line, the Markdown sections, the terminal's) after the tables."""
    return (summary(results, perft_rows), markdown_sections(results, perft_rows, user),
            rich_sections(results, perft_rows, user))


def check_arguments(args: argparse.Namespace) -> None:
    """``--perft-depth`` is for Chess-v0 only."""
    if getattr(args, "perft_depth", None) is not None and \
            (args.env or "").rpartition(":")[2] != CHESS_ID:
        raise CommandError(f"--perft-depth is for {CHESS_ID} only")


# the chess peers join the baselines, and the bench worker learns Chess-v0's rows, its reset
# positions and the perft series: envfleet's bench never imports this package
register_peers(CHESS_ID, peer_baselines())
register_game(GameBench(
    env_id=CHESS_ID, unit="plies", native=NATIVE, num_envs=DEFAULT_NUM_ENVS,
    python_max_envs=PYTHON_PEER_MAX_ENVS, module=__name__, native_status=chess_env_status,
    native_options=native_options, twin_loop=USER_SUFFIX, extra_points=perft_points,
    settings=lambda args: {"perft_depth": getattr(args, "perft_depth", None)},
    sections=sections))
ROW_FIELDS[CHESS_ID] = fairness
RESET_OPTIONS[CHESS_ID] = lambda num_envs: native_reset_options(CHESS_ID, num_envs)
SERIES.update(dict.fromkeys(PERFT_SERIES, measure_perft))
LOOPS["user"] = measure_user_loop
