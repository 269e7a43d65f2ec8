"""FEN parsing, validation and printing (as python-chess prints it)."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.envs.chess import STARTING_FEN
from envfleet.envs.chess.fen import format_fen, parse_fen

chess = pytest.importorskip("chess")


@pytest.fixture(scope="module")
def env():
    e = envfleet.make("Chess-v0", 4, seed=0)
    yield e
    e.close()


ROUND_TRIP = [
    STARTING_FEN,
    "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
    "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",  # legal ep: printed
    "rnbqkbnr/pppp1ppp/8/8/4p3/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    "8/8/8/8/8/8/8/K6k b - - 57 88",
]


@pytest.mark.parametrize("fen", ROUND_TRIP)
def test_parse_and_format_round_trip(fen):
    p = parse_fen(fen)
    assert format_fen(p.pieces, p.colors, p.turn, p.castling, p.ep, p.halfmove,
                      p.fullmove) == chess.Board(fen).fen()


@pytest.mark.parametrize(("given", "reason"), [
    ("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1", "no legal ep capture"),
    ("rnbqkbnr/ppp1pppp/8/8/3pP3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1", "legal ep capture"),
    ("4k3/8/8/8/8/8/8/4K2R w KQkq - 0 1", "rights without rooks are cleaned"),
    ("r3k2r/8/8/8/8/8/8/R2K3R w KQkq - 3 40", "white king off e1"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w HAha - 0 1", "Shredder-FEN letters"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w", "missing fields take defaults"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 0", "full-move 0 prints 1"),
    ("8/8/8/K2pP2r/8/8/8/7k w - d6 0 2", "ep pinned along the rank: not printed"),
])
def test_env_fen_matches_python_chess(env, given, reason):
    env.reset(options={"fen": [given] * 4})
    for i in range(4):
        assert env.fen(i) == chess.Board(given).fen(), reason


@pytest.mark.parametrize(("fen", "message"), [
    ("", "empty FEN"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP w KQkq - 0 1", "8 rows"),
    ("rnbqkbnr/pppppppp/9/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "invalid character"),
    ("rnbqkbnr/pppppppp/44/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "two subsequent digits"),
    ("rnbqkbnr/ppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "7 squares"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR x KQkq - 0 1", "'w' or 'b'"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQxq - 0 1", "castling"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq e9 0 1", "en-passant"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - x 1", "half-move"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - -1 1", "negative"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 extra", "fields"),
    ("rnbq1bnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "no black king"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQ1BNR w KQkq - 0 1", "no white king"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBKKBNR w KQkq - 0 1", "2 white kings"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNP w kq - 0 1", "first or last rank"),
    ("Pnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "first or last rank"),
    ("4k3/8/8/8/8/8/8/4K2R w - - 0 1".replace("4K2R", "4K2R").replace("4k3", "4k2R"),
     "not to move"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq e6 0 1", "en-passant"),
    ("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", "already over"),
    ("8/8/8/8/8/8/8/K6k w - - 0 1", "insufficient"),
    ("4k3/8/8/8/8/8/8/R3K3 w - - 100 80", "half-move clock"),
    ("4k3/8/8/8/8/8/8/R3K3 w - - 2147483648 80", "half-move clock 2147483648 is too large"),
    ("4k3/8/8/8/8/8/8/R3K3 w - - 0 2147483648", "full-move number 2147483648 is too large"),
    ("4k3/8/8/8/8/8/8/R3K3 w - - 0 99999999999999999999", "full-move number .* too large"),
])
def test_bad_fens_are_refused_and_change_nothing(env, fen, message):
    env.reset(seed=1)
    a = env.random_legal_actions()
    env.step(a)
    before = [env.fen(i) for i in range(4)]
    fens = [STARTING_FEN] * 4
    fens[2] = fen
    with pytest.raises(ValueError, match=message) as info:
        env.reset(options={"fen": fens})
    assert "board 2" in str(info.value)
    assert [env.fen(i) for i in range(4)] == before
    env.step(env.random_legal_actions())  # still working


def test_the_largest_full_move_number_counts_on_as_python_chess(env):
    """Clocks up to MAX_CLOCK load and count on without wrapping (int32 columns); larger ones
    are refused by name everywhere a FEN is read (perft too), not a raw OverflowError."""
    from envfleet.envs.chess.env import perft
    from envfleet.envs.chess.fen import MAX_CLOCK

    fen = f"4k3/8/8/8/8/8/8/R3K3 b - - 7 {MAX_CLOCK}"
    env.reset(options={"fen": [fen] * 4})
    board = chess.Board(fen)
    board.push_uci("e8d7")
    env.step(np.array([env.uci_to_action(0, "e8d7")] * 4))
    assert env.fen(0) == board.fen()
    with pytest.raises(ValueError, match="full-move number 2147483648 is too large"):
        perft(f"4k3/8/8/8/8/8/8/R3K3 b - - 7 {2**31}", 1)


def test_fen_option_shapes(env):
    with pytest.raises(ValueError, match="num_envs=4"):
        env.reset(options={"fen": [STARTING_FEN] * 3})
    with pytest.raises(ValueError, match="list of 4"):
        env.reset(options={"fen": 3})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"fenn": [STARTING_FEN] * 4})
    env.reset(options={"fen": "4k3/8/8/8/8/8/8/R3K3 w Q - 0 1"})  # one FEN for every board
    assert env.fen(3) == "4k3/8/8/8/8/8/8/R3K3 w Q - 0 1"
    env.reset(options={"fen": [None, "4k3/8/8/8/8/8/8/R3K3 w Q - 0 1", None, None]})
    assert env.fen(0) == STARTING_FEN and env.fen(1).startswith("4k3/")
    env.reset()  # no fen: the initial position again
    assert env.fen(1) == STARTING_FEN


def random_positions(count: int, seed: int) -> list[str]:
    """Positions of random games, every fourth right after a double pawn step."""
    import random

    rng = random.Random(seed)
    fens = []
    while len(fens) < count:
        board = chess.Board()
        for _ in range(rng.randrange(2, 90)):
            moves = list(board.legal_moves)
            if not moves or board.is_game_over():
                break
            doubles = [m for m in moves if board.piece_type_at(m.from_square) == chess.PAWN
                       and abs(m.to_square - m.from_square) == 16]
            board.push(rng.choice(doubles if doubles and len(fens) % 4 == 0 else moves))
        if not board.is_game_over() and board.halfmove_clock < 100:
            fens.append(board.fen(en_passant="fen"))  # the FEN names every ep square
    return fens


def test_random_positions_load_print_and_move_as_python_chess():
    fens = random_positions(16, seed=21)
    env = envfleet.make("Chess-v0", 16, seed=0)
    _, info = env.reset(options={"fen": fens})
    for i, fen in enumerate(fens):
        board = chess.Board(fen)
        assert env.fen(i) == board.fen()
        legal = {m.uci() for m in board.legal_moves}
        assert {env.action_to_uci(i, int(a)) for a in info["action_mask"][i].nonzero()[0]} \
            == legal
        assert all(env.action_to_uci(i, env.uci_to_action(i, u)) == u for u in legal)
