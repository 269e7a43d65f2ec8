"""Perft points: envfleet's ``perft`` and python-chess's on the same positions, nodes/s each
in a fresh process (the bench worker runs the two series: ``SERIES``)."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.chess.games import CHESS_ID, PERFT_POSITIONS, PERFT_SERIES, _missing
from envfleet.bench.measure import PointSpec, timed_loop

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
