"""perft (leaf counts of the legal move tree) against published counts and python-chess."""

from __future__ import annotations

import random

import pytest

from benchmarks.chess import python_chess_perft
from envfleet.envs.chess import STARTING_FEN, perft

chess = pytest.importorskip("chess")

KIWIPETE = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
# https://www.chessprogramming.org/Perft_Results (positions 1-6)
PUBLISHED = [
    (STARTING_FEN, [20, 400, 8902, 197281]),
    (KIWIPETE, [48, 2039, 97862]),
    ("8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1", [14, 191, 2812, 43238]),
    ("r3k2r/Pppp1ppp/1b3nbN/nP6/BBP1P3/q4N2/Pp1P2PP/R2Q1RK1 w kq - 0 1", [6, 264, 9467]),
    ("r2q1rk1/pP1p2pp/Q4n2/bbp1p3/Np6/1B3NBn/pPPP1PPP/R3K2R b KQ - 0 1", [6, 264, 9467]),
    ("rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8", [44, 1486, 62379]),
    ("r4rk1/1pp1qppp/p1np1n2/2b1p1B1/2B1P1b1/P1NP1N2/1PP1QPPP/R4RK1 w - - 0 10",
     [46, 2079, 89890]),
]


@pytest.mark.parametrize(("fen", "counts"), PUBLISHED)
def test_published_counts(fen, counts):
    for depth, expected in enumerate(counts, start=1):
        assert perft(fen, depth) == expected, (fen, depth)


@pytest.mark.slow
@pytest.mark.parametrize(("fen", "depth", "expected"), [
    (STARTING_FEN, 5, 4865609), (KIWIPETE, 4, 4085603),
    ("8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1", 6, 11030083),
])
def test_published_counts_deep(fen, depth, expected):
    assert perft(fen, depth) == expected


# positions aimed at the rules that movegen gets wrong
TRICKY = [
    "8/8/8/K2pP2r/8/8/8/7k w - d6 0 2",  # en passant exposing the king along the rank
    "8/8/8/r2pP2K/8/8/8/7k w - d6 0 2",
    "8/8/3k4/8/3pP3/8/8/3K1R2 b - e3 0 1",  # en passant while pinned? (no) and check
    "8/8/8/8/k2Pp2Q/8/8/3K4 b - d3 0 1",  # horizontal pin of the en-passant capturer
    "8/8/8/2k5/3Pp3/8/8/4K3 b - d3 0 1",  # en passant removes the checking pawn
    "4k3/8/8/8/8/8/8/R3K2R w KQ - 0 1",  # castling both sides
    "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1",
    "r3k2r/8/8/8/8/8/8/R3K1R1 w Qkq - 0 1",
    "1r2k2r/8/8/8/8/8/8/R3K2R w KQk - 0 1",  # b1/b8 attacked: queenside still legal
    "r3k2r/8/8/8/4r3/8/8/R3K2R w KQkq - 0 1",  # castling out of check
    "r3k2r/8/8/8/2r5/8/8/R3K2R w KQkq - 0 1",  # castling through / into check
    "4k3/1P6/8/8/8/8/6p1/4K3 w - - 0 1",  # promotions
    "n1n1k3/1P6/8/8/8/8/6p1/4KN1N b - - 0 1",  # capture promotions
    "4k3/8/8/3q4/8/3B4/8/3K4 w - - 0 1",  # pinned bishop on a file
    "4k3/4r3/8/8/8/8/4N3/4K3 w - - 0 1",  # pinned knight
    "4k3/8/8/8/7b/8/5P2/4K3 w - - 0 1",  # pinned pawn on a diagonal
    "4k3/8/8/8/8/2n5/8/r3K3 w - - 0 1",  # double check
    "rnb1kbnr/pppp1ppp/8/4p3/5PPq/8/PPPPP2P/RNBQKBNR w KQkq - 1 3",  # checkmate
    "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1",  # stalemate
    # pinned pawns (moved one by one, the others set-wise): along the pin line only
    "4k3/8/8/8/8/6b1/5P2/4K3 w - - 0 1",  # may capture its pinner
    "4k3/4r3/8/8/8/8/4P3/4K3 w - - 0 1",  # pinned on a file: pushes, single and double
    "2b1k3/1P6/K7/8/8/8/8/8 w - - 0 1",  # captures its pinner promoting (4 moves)
    "8/8/8/8/8/k7/1p6/2B1K3 b - - 0 1",  # the same for black
    "4k3/8/8/1b6/8/3P4/4K3/8 w - - 0 1",  # pinned pawn cannot push off the diagonal
    "8/8/8/8/k2Pp2Q/8/8/4K3 b - d3 0 1",  # en passant by a rank-pinned pawn: illegal
    "4k3/8/8/2Pp4/8/8/8/4K2b w - d6 0 1",  # en passant while pinned diagonally
    # check evasions by pawns: block with a push or a double push, capture the checker
    "4k3/8/8/b7/8/8/1PP5/4K3 w - - 0 1",
    "4k3/8/8/8/1b6/8/2P5/4K3 w - - 0 1",
    "4k3/8/8/8/8/3n4/4P3/4K3 w - - 0 1",
    "4k3/8/8/8/8/5n2/4P1P1/4K3 w - - 0 1",
]


@pytest.mark.parametrize("fen", TRICKY)
def test_tricky_positions_against_python_chess(fen):
    board = chess.Board(fen)
    for depth in (1, 2, 3):
        assert perft(fen, depth) == python_chess_perft(board, depth), (fen, depth)


def random_positions(count: int, seed: int) -> list[str]:
    """Positions from random games (python-chess), biased towards captures and promotions."""
    rng = random.Random(seed)
    fens = []
    while len(fens) < count:
        board = chess.Board()
        for _ in range(rng.randrange(10, 120)):
            moves = list(board.legal_moves)
            if not moves or board.is_game_over():
                break
            captures = [m for m in moves if board.is_capture(m) or m.promotion]
            board.push(rng.choice(captures if captures and rng.random() < 0.5 else moves))
        if not board.is_game_over():
            fens.append(board.fen())
    return fens


@pytest.mark.parametrize("fen", random_positions(24, seed=5))
def test_random_positions_against_python_chess(fen):
    board = chess.Board(fen)
    assert perft(fen, 2) == python_chess_perft(board, 2), fen


def test_perft_refuses_bad_input():
    with pytest.raises(ValueError, match="depth"):
        perft(STARTING_FEN, -1)
    with pytest.raises(ValueError, match="no white king"):
        perft("8/8/8/8/8/8/8/k7 w - - 0 1", 1)
    assert perft(STARTING_FEN, 0) == 1


def test_bench_positions_against_python_chess():
    """The 48 positions ``envfleet bench`` plays (openings, middlegames, endgames)."""
    from benchmarks.chess import BENCH_POSITIONS

    for _, fen in BENCH_POSITIONS:
        assert perft(fen, 2) == python_chess_perft(chess.Board(fen), 2), fen


def test_label_move_gives_the_listed_move_of_every_legal_action():
    """A step turns its action into a move word by ``label_move`` (a lookup and the position)
    instead of scanning the move list: the same word, on every position kind."""
    from numba import njit

    from envfleet.envs.chess import core
    from envfleet.envs.chess.env import _scratch_state
    from envfleet.envs.chess.fen import parse_fen

    @njit
    def mismatches(st):
        n = core.gen_moves(0, st)
        bad = 0
        for k in range(n):
            if core.label_move(0, st, st.moves[0, k] >> 16) != st.moves[0, k]:
                bad += 1
        return n, bad

    from benchmarks.chess import BENCH_POSITIONS

    fens = TRICKY + [fen for fen, _ in PUBLISHED] + [fen for _, fen in BENCH_POSITIONS]
    for fen in fens + random_positions(24, seed=5):
        n, bad = mismatches(_scratch_state(1, parse_fen(fen)))
        assert bad == 0 and n == chess.Board(fen).legal_moves.count(), fen
