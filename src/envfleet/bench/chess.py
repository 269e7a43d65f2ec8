"""``envfleet bench --env Chess-v0``: the chess peers, perft, and the chess report sections.

Chess is measured as random self-play plies/s over N boards, every ply producing the legal-action
mask of every board (what a masked policy needs), with finished games restarted:

- envfleet ``Chess-v0`` (native backends, measured by ``measure.py``):
  ``env.step(env.random_legal_actions())``, ``info["action_mask"]`` bool (N, 4672);
- ``python-chess``: N ``chess.Board`` objects; each ply pushes a random move of the board's
  legal-move list (its mask), then lists the new position's legal moves and checks the end of
  the game with Chess-v0's rules (mate or stalemate, insufficient material, half-move clock
  100, threefold repetition, 512 plies);
- ``openspiel``: N ``pyspiel`` chess states; each ply takes ``state.legal_actions_mask()`` (a
  Python list of 4672 ints), applies a random legal action (``state.legal_actions()``), and
  starts a new game at a terminal state; ``openspiel-numpy`` does the same with the mask turned
  into a NumPy bool array, as a network needs it;
- ``pgx``: ``pgx.make("chess")`` with JAX on CPU, one jitted function per ply (``jax.vmap`` of
  ``env.step``, a uniformly random legal action from ``state.legal_action_mask`` with
  ``jax.random``, finished boards replaced by an initial state); compile time is part of the
  first step (``warmup_s``), not of the plies/s.

A point times ``--seconds`` of play from the initial position: the Python-loop peers at 512
boards play some 20-100 plies a board in 1 s (openings and middlegames, the plies that cost
them most), a compiled env thousands (whole games); longer ``--seconds`` even this out.

Each peer is a ``Baseline`` (``baselines.py`` lists them) whose ``BaselineEnv`` plays its own
actions (``action_space=None``); a peer whose package is missing is reported as not installed.

Perft (``perft_points``): ``envfleet.envs.chess.perft(fen, depth)`` and a python-chess perft (bulk
counting at the last ply, as envfleet's) on the same positions, nodes/s each in a fresh process.
"""

from __future__ import annotations

import importlib.util
import os
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from envfleet.bench.baselines import Baseline, BaselineEnv

CHESS_ID = "Chess-v0"
NUM_ACTIONS = 4672  # AlphaZero's 8x8x73 labels (pgx, OpenSpiel)
#: games longer than this many plies are restarted (Chess-v0's default truncation)
MAX_PLIES = 512
#: envfleet's backends measured by default for Chess-v0 (cuda only where a GPU is visible)
NATIVE = ("numba", "cuda")
#: envfleet's default sweep for Chess-v0
DEFAULT_NUM_ENVS = (1, 64, 512, 4096)
#: the Python-loop peers (python-chess, OpenSpiel) are not measured above this many boards
#: by default (--baseline-max-envs): ~60 ms a call at 4096 boards, and the targets are at 512
PYTHON_PEER_MAX_ENVS = 512
#: the chess peers, in table-column order
PEERS = ("python-chess", "openspiel", "openspiel-numpy", "pgx")
#: what each peer needs installed (the import name)
REQUIRES = {"python-chess": "chess", "openspiel": "pyspiel", "openspiel-numpy": "pyspiel",
            "pgx": "pgx"}
#: the issue's performance targets: (peer, num_envs or None for the best N of each, ratio)
TARGETS = (("openspiel", 512, 25.0), ("openspiel-numpy", 512, 100.0),
           ("python-chess", 512, 300.0), ("pgx", None, 20.0))

START_FEN = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
KIWIPETE_FEN = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
#: (name, FEN, default depth, {depth: published node count}); the default depths take python-chess
#: a few seconds here
PERFT_POSITIONS = (
    ("start", START_FEN, 4, {1: 20, 2: 400, 3: 8_902, 4: 197_281, 5: 4_865_609}),
    ("kiwipete", KIWIPETE_FEN, 3, {1: 48, 2: 2_039, 3: 97_862, 4: 4_085_603}),
)
#: perft series: envfleet's, and the python-chess reference
PERFT_SERIES = ("envfleet-perft", "python-chess-perft")


def is_chess(env_id: str) -> bool:
    return env_id == CHESS_ID


def chess_env_status() -> str | None:
    """None when this envfleet has the native Chess-v0 env, else why not."""
    from envfleet.registry import NATIVE_ENVS

    if CHESS_ID in NATIVE_ENVS:
        return None
    return f"{CHESS_ID} is not available in this envfleet (envfleet.make does not know it yet)"


def _missing(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return f"not installed (pip install 'envfleet[chess-bench]' for {module})"
    return None


# --- python-chess -------------------------------------------------------------------------------


def game_over(board: Any, moves: list[Any], plies: int) -> bool:
    """Chess-v0's end of a game for a python-chess board whose legal moves are ``moves``."""
    return (not moves or plies >= MAX_PLIES or board.halfmove_clock >= 100
            or board.is_insufficient_material() or board.is_repetition(3))


class PythonChessGames:
    """N python-chess boards in random self-play; ``moves[i]`` is board i's mask (its legal
    moves), kept for the next ply."""

    def __init__(self, num_envs: int, seed: int) -> None:
        import chess

        self.seed = seed
        self.rng = random.Random(seed)
        self.boards = [chess.Board() for _ in range(num_envs)]
        self.moves: list[list[Any]] = [[] for _ in range(num_envs)]
        self.plies = [0] * num_envs

    def reset(self) -> list[list[Any]]:
        self.rng.seed(self.seed)
        for i, board in enumerate(self.boards):
            board.reset()
            self.moves[i] = list(board.legal_moves)
            self.plies[i] = 0
        return self.moves

    def step(self) -> list[list[Any]]:
        """One random legal ply on every board; finished games restart."""
        moves, plies, rng = self.moves, self.plies, self.rng
        for i, board in enumerate(self.boards):
            legal = moves[i]
            board.push(legal[rng.randrange(len(legal))])
            plies[i] += 1
            legal = moves[i] = list(board.legal_moves)  # the next ply's mask
            if game_over(board, legal, plies[i]):
                board.reset()
                moves[i] = list(board.legal_moves)
                plies[i] = 0
        return moves


def _python_chess(reference_id: str, num_envs: int, seed: int) -> BaselineEnv:
    from envfleet.bench.baselines import BaselineEnv

    games = PythonChessGames(num_envs, seed)
    return BaselineEnv(reset=games.reset, step=games.step, action_space=None,
                       close=lambda: None)


# --- OpenSpiel ----------------------------------------------------------------------------------


def _openspiel(as_numpy: bool):
    def build(reference_id: str, num_envs: int, seed: int) -> BaselineEnv:
        import pyspiel

        from envfleet.bench.baselines import BaselineEnv

        game = pyspiel.load_game("chess")
        rng = random.Random(seed)
        states = [game.new_initial_state() for _ in range(num_envs)]
        masks: list[Any] = [None] * num_envs

        def mask_of(state: Any) -> Any:
            mask = state.legal_actions_mask()
            return np.asarray(mask, dtype=bool) if as_numpy else mask

        def reset() -> list[Any]:
            rng.seed(seed)
            for i in range(num_envs):
                states[i] = game.new_initial_state()
                masks[i] = mask_of(states[i])
            return masks

        def step() -> list[Any]:
            for i, state in enumerate(states):
                legal = state.legal_actions()
                state.apply_action(legal[rng.randrange(len(legal))])
                if state.is_terminal():
                    state = states[i] = game.new_initial_state()
                masks[i] = mask_of(state)  # the next ply's mask
            return masks

        return BaselineEnv(reset=reset, step=step, action_space=None, close=lambda: None)

    return build


# --- pgx ----------------------------------------------------------------------------------------


def _pgx(reference_id: str, num_envs: int, seed: int) -> BaselineEnv:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported (the worker's own)
    import jax
    import jax.numpy as jnp
    import pgx

    from envfleet.bench.baselines import BaselineEnv

    env = pgx.make("chess")
    init = jax.jit(jax.vmap(env.init))
    step_env = jax.vmap(env.step)
    box: dict[str, Any] = {}

    def ply(state: Any, first: Any, key: Any) -> tuple[Any, Any]:
        key, sub = jax.random.split(key)
        mask = state.legal_action_mask
        # a uniformly random legal action: the k-th legal label, k uniform in [0, count)
        count = jnp.cumsum(mask, axis=1, dtype=jnp.int32)
        k = jnp.floor(jax.random.uniform(sub, (num_envs,)) * count[:, -1]).astype(jnp.int32)
        action = jnp.argmax(count > k[:, None], axis=1).astype(jnp.int32)
        state = step_env(state, action)
        done = state.terminated | state.truncated

        def restart(start: Any, now: Any) -> Any:
            return jnp.where(done.reshape(done.shape + (1,) * (now.ndim - 1)), start, now)

        # most plies end no game: copy initial states in only when one did
        state = jax.lax.cond(done.any(), lambda: jax.tree.map(restart, first, state),
                             lambda: state)
        return state, key

    ply_jit = jax.jit(ply, donate_argnums=(0, 2))

    def reset() -> Any:
        keys = jax.random.split(jax.random.PRNGKey(seed), num_envs + 1)
        box["first"] = init(keys[1:])
        box["state"] = init(keys[1:])
        box["key"] = keys[0]
        box["state"].legal_action_mask.block_until_ready()
        return box["state"]

    def step() -> Any:
        box["state"], box["key"] = ply_jit(box["state"], box["first"], box["key"])
        box["state"].legal_action_mask.block_until_ready()
        return box["state"]

    return BaselineEnv(reset=reset, step=step, action_space=None, close=box.clear)


def peer_baselines() -> list[Baseline]:
    """The chess peers as ``Baseline`` entries (they play ``CHESS_ID`` only)."""
    from envfleet.bench.baselines import Baseline

    return [
        Baseline("python-chess", "python-chess Boards in a Python loop, legal-move lists",
                 True, _python_chess, requires="chess", plays=CHESS_ID),
        Baseline("openspiel", "OpenSpiel chess from Python, legal_actions_mask() lists", True,
                 _openspiel(False), requires="pyspiel", plays=CHESS_ID),
        Baseline("openspiel-numpy", "OpenSpiel chess from Python, masks as NumPy bool arrays",
                 True, _openspiel(True), requires="pyspiel", plays=CHESS_ID),
        Baseline("pgx", "pgx chess, jax.jit(jax.vmap(env.step)) on CPU", False, _pgx,
                 requires="pgx", plays=CHESS_ID, threads=None),
    ]


# --- perft --------------------------------------------------------------------------------------


def python_chess_perft(board: Any, depth: int) -> int:
    """Leaf nodes at ``depth`` plies (python-chess; bulk counting at the last ply)."""
    if depth == 0:
        return 1
    if depth == 1:
        return board.legal_moves.count()
    nodes = 0
    for move in board.legal_moves:
        board.push(move)
        nodes += python_chess_perft(board, depth - 1)
        board.pop()
    return nodes


@dataclass(frozen=True)
class PerftCase:
    position: str
    fen: str
    depth: int
    expected: int | None


def perft_cases(max_depth: int | None = None) -> list[PerftCase]:
    """The perft positions at their default depths (at most ``max_depth``)."""
    cases = []
    for name, fen, depth, known in PERFT_POSITIONS:
        d = depth if max_depth is None else max(1, min(depth, max_depth))
        cases.append(PerftCase(name, fen, d, known.get(d)))
    return cases


def perft_status(series: str) -> str | None:
    """None when ``series`` can run here, else why not."""
    if series == "python-chess-perft":
        return _missing("chess")
    if importlib.util.find_spec("envfleet.envs.chess") is None:
        return "envfleet.envs.chess.perft is not available in this envfleet"
    return None


def measure_perft(spec: Any) -> dict[str, Any]:
    """Measure one perft point (``spec.options``: position, fen, depth) in this process."""
    from envfleet.bench.measure import timed_loop

    fen, depth = spec.options["fen"], int(spec.options["depth"])
    result: dict[str, Any] = {"backend": spec.backend, "num_envs": spec.num_envs,
                              "threads": 1, "device": "cpu", "kind": "perft",
                              "position": spec.options["position"], "depth": depth}
    t0 = time.perf_counter()
    if spec.backend == "python-chess-perft":
        import chess

        board = chess.Board(fen)

        def run() -> int:
            return python_chess_perft(board, depth)
    else:
        from envfleet.envs.chess import perft

        def run() -> int:
            return perft(fen, depth)
    result["import_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    nodes = run()  # the first call compiles (envfleet) and gives the count
    result["warmup_s"] = time.perf_counter() - t0
    box = {"nodes": nodes}

    def again() -> None:
        box["nodes"] = run()

    calls, elapsed, median = timed_loop(again, lambda: None, spec.seconds, spec.min_calls)
    if box["nodes"] != nodes:
        raise RuntimeError(f"perft gave {nodes:,} then {box['nodes']:,} nodes")
    expected = spec.options.get("expected")
    if expected is not None and nodes != expected:
        raise RuntimeError(f"perft gave {nodes:,} nodes, the published count is {expected:,}")
    result.update(status="ok", nodes=nodes, steps_per_s=nodes * calls / elapsed,
                  nodes_per_s=nodes * calls / elapsed, seconds=elapsed, calls=calls,
                  steps=nodes * calls, us_per_call=1e6 * elapsed / calls,
                  us_per_call_median=1e6 * median, construct_s=0.0)
    return result


def perft_specs(max_depth: int | None, seconds: float, series: tuple[str, ...] = PERFT_SERIES
                ) -> list[tuple[str, Any, str | None]]:
    """(series, PointSpec, why skipped or None) of every perft point, position by position."""
    from envfleet.bench.measure import PointSpec

    if max_depth is not None and max_depth < 1:
        return []
    points = []
    for case in perft_cases(max_depth):
        for name in series:
            spec = PointSpec(env_id=CHESS_ID, reference_id=CHESS_ID, backend=name, num_envs=1,
                             seconds=seconds, min_calls=1,
                             options={"position": case.position, "fen": case.fen,
                                      "depth": case.depth, "expected": case.expected})
            points.append((name, spec, perft_status(name)))
    return points


# --- the chess report sections --------------------------------------------------------------------


def perft_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the perft table: one row per (position, depth)."""
    from envfleet.bench.report import human, ratio

    cases = list(dict.fromkeys((r["position"], r["depth"]) for r in rows))
    by = {(r["position"], r["depth"], r["series"]): r for r in rows}
    names = [s.removesuffix("-perft") for s in PERFT_SERIES]
    header = ["position", "depth", "nodes", *(f"{name} nodes/s" for name in names),
              f"{names[0]} × {names[1]}"]
    body = []
    for position, depth in cases:
        got = [by.get((position, depth, s)) for s in PERFT_SERIES]
        ok = [r if r and r.get("status") == "ok" else None for r in got]
        nodes = next((r["nodes"] for r in ok if r), None)
        cells = [position, str(depth), f"{nodes:,}" if nodes else ""]
        for r, measured in zip(got, ok, strict=True):
            if measured:
                cells.append(human(measured["nodes_per_s"]))
            else:
                cells.append("–" if r is None or r.get("status") == "skipped"
                             else r.get("status", ""))
        cells.append(ratio(ok[0]["nodes_per_s"] / ok[1]["nodes_per_s"])
                     if ok[0] and ok[1] else "")
        body.append(cells)
    return header, body


def target_lines(results: Any) -> list[str]:
    """The issue's targets: measured ratio against each, or why it was not measured."""
    from envfleet.bench.report import human, ratio

    primary = results.primary
    lines = []
    if primary is None or not results.get_best(primary):
        return [f"not measured ({CHESS_ID} is not available here: peers only)"]
    for peer, n, target in TARGETS:
        if n is None:  # the best N of each
            ours, theirs = results.get_best(primary), results.get_best(peer)
            where = "at the best N of each"
        else:
            ours, theirs = results.get(primary, n), results.get(peer, n)
            ours = ours if ours and ours.get("status") == "ok" else None
            theirs = theirs if theirs and theirs.get("status") == "ok" else None
            where = f"at N={n:,}"
        if not (ours and theirs):
            lines.append(f"{primary} vs {peer} {where}: not measured (target >= {target:g}×)")
            continue
        r = ours["steps_per_s"] / theirs["steps_per_s"]
        verdict = "met" if r >= target else "NOT met"
        detail = (f"{human(ours['steps_per_s'])} @ {ours['num_envs']:,} vs "
                  f"{human(theirs['steps_per_s'])} @ {theirs['num_envs']:,}")
        lines.append(f"{primary} vs {peer} {where}: {ratio(r)} ({detail}); "
                     f"target >= {target:g}×: {verdict}")
    return lines


def summary(results: Any, perft_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON line after the points: ratios per num_envs, best N, targets, perft ratios."""
    ratios: dict[str, dict[str, float]] = {}
    for ours, peer in results.comparisons:
        by_n = {str(n): round(r, 3) for n in results.num_envs
                if (r := results.ratio(peer, n, ours)) is not None}
        ratios[f"{ours} / {peer}"] = by_n
    best = {s: {"num_envs": b["num_envs"], "plies_per_s": b["steps_per_s"]}
            for s in results.series if (b := results.get_best(s))}
    targets = []
    primary = results.primary
    for peer, n, target in TARGETS:
        entry: dict[str, Any] = {"peer": peer, "num_envs": n if n else "best", "target": target,
                                 "ratio": None, "met": None}
        if primary and n is None and primary in best and peer in best:
            entry["ratio"] = best[primary]["plies_per_s"] / best[peer]["plies_per_s"]
        elif primary and n is not None:
            entry["ratio"] = results.ratio(peer, n, primary)
        if entry["ratio"] is not None:
            entry["met"] = entry["ratio"] >= target
        targets.append(entry)
    perft = {}
    ok = {(r["position"], r["depth"], r["series"]): r for r in perft_rows
          if r.get("status") == "ok"}
    for position, depth in dict.fromkeys((r["position"], r["depth"]) for r in perft_rows):
        mine, ref = (ok.get((position, depth, s)) for s in PERFT_SERIES)
        perft[f"{position} depth {depth}"] = {
            "envfleet_nodes_per_s": mine and mine["nodes_per_s"],
            "python_chess_nodes_per_s": ref and ref["nodes_per_s"],
            "ratio": mine["nodes_per_s"] / ref["nodes_per_s"] if mine and ref else None}
    return {"type": "summary", "primary": primary, "unit": "plies", "ratios": ratios,
            "best": best, "targets": targets, "perft": perft}


def best_lines(results: Any) -> list[str]:
    """Each series' best plies/s and its N."""
    from envfleet.bench.report import human

    lines = []
    for s in results.series:
        best = results.get_best(s)
        if best:
            lines.append(f"{s}: {human(best['steps_per_s'])} plies/s at N={best['num_envs']:,}")
    return lines


def markdown_sections(results: Any, perft_rows: list[dict[str, Any]]) -> str:
    """The chess sections after the plies/s tables: best N, targets, perft."""
    from envfleet.bench.report import _md_table

    parts = ["", "Best plies/s of each series: " + "; ".join(best_lines(results)) + ".", "",
             "Targets (issue 4, one run on this machine):", ""]
    parts += [f"- {line}" for line in target_lines(results)]
    if perft_rows:
        header, body = perft_table(perft_rows)
        parts += ["", f"### {CHESS_ID}: perft nodes/s (bulk counting at the last ply)", "",
                  _md_table(header, body)]
        problems = [f"{r['series']} {r['position']} depth {r['depth']}: {r['status']}: "
                    f"{r.get('error', r.get('note', ''))}" for r in perft_rows
                    if r.get("status") != "ok"]
        if problems:
            parts += ["", *(f"- {p}" for p in problems)]
    return "\n".join(parts) + "\n"


def rich_sections(results: Any, perft_rows: list[dict[str, Any]]) -> list[Any]:
    """The same sections for the terminal: best N and targets as text, the perft table."""
    from rich.markup import escape
    from rich.table import Table

    out: list[Any] = ["best: " + escape("; ".join(best_lines(results)))]
    for line in target_lines(results):
        style = "green" if line.endswith(": met") else "yellow"
        out.append(f"[{style}]target: {escape(line)}[/]")
    if perft_rows:
        header, body = perft_table(perft_rows)
        table = Table(title=f"{CHESS_ID} perft nodes/s (bulk counting at the last ply)",
                      title_justify="left")
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i == 0 else "right")
        for cells in body:
            table.add_row(*cells)
        out.append(table)
    return out
