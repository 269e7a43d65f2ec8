"""Shared helpers of the chess tests: python-chess as the reference."""

from __future__ import annotations

import chess
import numpy as np


def reference_outcome(board: chess.Board) -> str:
    """The game end as Chess-v0 decides it (checkmate first), or 'ongoing'."""
    if not any(board.legal_moves):
        return "checkmate" if board.is_check() else "stalemate"
    if board.is_insufficient_material():
        return "insufficient_material"
    if board.halfmove_clock >= 100:
        return "fifty_moves"
    if board.is_repetition(3):
        return "threefold_repetition"
    return "ongoing"


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
