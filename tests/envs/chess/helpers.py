"""Shared helpers of the chess tests: python-chess as the reference.

Chess-v0's rules and observations computed from python-chess live in one place,
``benchmarks.studies.pychess_env`` (the bench's python-chess env plays by them); the
lock-step tests check them against the native env ply by ply.
"""

from __future__ import annotations

import chess
import numpy as np

from benchmarks.studies.pychess_env import compact_obs as reference_compact
from benchmarks.studies.pychess_env import ep_square as reference_ep_square
from benchmarks.studies.pychess_env import outcome as reference_outcome
from benchmarks.studies.pychess_env import planes_obs as reference_planes

__all__ = ["reference_compact", "reference_ep_square", "reference_outcome", "reference_planes"]


def mask_ucis(env, i: int, mask_row) -> set[str]:
    return {env.action_to_uci(i, int(a)) for a in np.nonzero(np.asarray(mask_row))[0]}


def legal_ucis(board: chess.Board) -> set[str]:
    return {m.uci() for m in board.legal_moves}


def find_reply(board: chess.Board, fen: str) -> chess.Move:
    """The legal move of ``board`` that leads to ``fen`` (the opponent's reply)."""
    for move in board.legal_moves:
        board.push(move)
        reached = board.fen()
        board.pop()
        if reached == fen:
            return move
    raise AssertionError(f"no legal move of {board.fen()} reaches {fen}")


# each observation field: its slice of the last axis (compact: (72,), planes: (8, 8, 21))
COMPACT_FIELDS = {
    "pieces": slice(0, 64), "own king-side castling": slice(64, 65),
    "own queen-side castling": slice(65, 66), "opponent's king-side castling": slice(66, 67),
    "opponent's queen-side castling": slice(67, 68), "en-passant file": slice(68, 69),
    "repetition count": slice(69, 70), "half-move clock": slice(70, 71),
    "side to move": slice(71, 72),
}
PLANES_FIELDS = {
    "pieces": slice(0, 12), "repetition >= 1": slice(12, 13), "repetition >= 2": slice(13, 14),
    "side to move": slice(14, 15), "own king-side castling": slice(15, 16),
    "own queen-side castling": slice(16, 17), "opponent's king-side castling": slice(17, 18),
    "opponent's queen-side castling": slice(18, 19), "half-move clock": slice(19, 20),
    "en-passant square": slice(20, 21),
}
