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


def reference_repetitions(board: chess.Board) -> int:
    """Occurrences of the position (1..3), as python-chess's ``is_repetition`` counts them."""
    return next(k for k in (4, 3, 2, 1) if board.is_repetition(k))


def reference_ep_square(board: chess.Board) -> int | None:
    """The en-passant square as Chess-v0 keeps it: only when a legal capture exists."""
    return board.ep_square if board.has_legal_en_passant() else None


def _rights(board: chess.Board) -> list[bool]:
    """Own king-side, own queen-side, opponent's king-side, opponent's queen-side rights."""
    us, them = board.turn, not board.turn
    return [board.has_kingside_castling_rights(us), board.has_queenside_castling_rights(us),
            board.has_kingside_castling_rights(them), board.has_queenside_castling_rights(them)]


def _view(board: chess.Board, square: int) -> int:
    """``square`` seen from the side to move (ranks mirrored for black)."""
    return square if board.turn == chess.WHITE else chess.square_mirror(square)


def reference_compact(board: chess.Board) -> np.ndarray:
    """Chess-v0's compact observation of ``board`` built from python-chess (README layout)."""
    obs = np.zeros(72, dtype=np.int8)
    for square, piece in board.piece_map().items():
        code = piece.piece_type  # python-chess numbers P..K as 1..6
        obs[_view(board, square)] = code if piece.color == board.turn else -code
    obs[64:68] = _rights(board)
    ep = reference_ep_square(board)
    obs[68] = -1 if ep is None else chess.square_file(ep)
    obs[69] = reference_repetitions(board) - 1
    obs[70] = min(board.halfmove_clock, 100)
    obs[71] = 0 if board.turn == chess.WHITE else 1
    return obs


def reference_planes(board: chess.Board) -> np.ndarray:
    """Chess-v0's (8, 8, 21) planes observation of ``board`` built from python-chess."""
    obs = np.zeros((8, 8, 21), dtype=np.float32)
    for square, piece in board.piece_map().items():
        view = _view(board, square)
        plane = piece.piece_type - 1 + (0 if piece.color == board.turn else 6)
        obs[chess.square_rank(view), chess.square_file(view), plane] = 1
    repetitions = reference_repetitions(board)
    obs[:, :, 12] = repetitions >= 2
    obs[:, :, 13] = repetitions >= 3
    obs[:, :, 14] = board.turn == chess.BLACK
    obs[:, :, 15:19] = _rights(board)
    obs[:, :, 19] = np.float32(min(board.halfmove_clock, 100)) / np.float32(100)
    ep = reference_ep_square(board)
    if ep is not None:
        view = _view(board, ep)
        obs[chess.square_rank(view), chess.square_file(view), 20] = 1
    return obs


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
