"""Random games in lock step with python-chess: masks, FENs, game ends, rewards, autoreset."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.envs.chess import STARTING_FEN

chess = pytest.importorskip("chess")

from tests.envs.chess.helpers import (  # noqa: E402
    find_reply,
    legal_ucis,
    mask_ucis,
    reference_outcome,
)

# start positions that reach every kind of game end quickly under random play
STARTS = [
    STARTING_FEN,
    "k7/8/8/8/8/8/8/KQ6 w - - 0 1",
    "4k3/8/8/8/8/8/8/4K2R w K - 88 60",
    "4k3/1P6/8/8/8/8/6p1/4K3 w - - 0 1",
    "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
    "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1",
    "6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1",
    "4k3/8/8/8/8/8/3n4/R3K2R w KQ - 0 1",
    "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",
    "8/8/8/4k3/8/8/4K3/4B2b w - - 0 1",
    "2kr4/8/8/8/8/8/8/1R2K2N w - - 0 1",
    "1n2k3/8/8/8/8/8/8/3QK3 b - - 0 1",
]


def starts(n):
    return [STARTS[i % len(STARTS)] for i in range(n)]


def test_two_player_random_games_match_python_chess():
    n, plies = 24, 320
    env = envfleet.make("Chess-v0", n, seed=3, max_plies=200)
    fens = starts(n)
    _, info = env.reset(options={"fen": fens})
    boards = [chess.Board(f) for f in fens]
    pending = np.zeros(n, dtype=bool)
    seen = set()
    for i in range(n):
        assert env.fen(i) == boards[i].fen()
        assert mask_ucis(env, i, info["action_mask"][i]) == legal_ucis(boards[i])
    for _ in range(plies):
        actions = env.random_legal_actions()
        assert actions.dtype == np.int64 and actions.shape == (n,)
        moves = [env.action_to_uci(i, int(actions[i])) if not pending[i] else None
                 for i in range(n)]
        movers = [b.turn for b in boards]
        _obs, rewards, terminated, truncated, info = env.step(actions)
        for i in range(n):
            board = boards[i]
            if pending[i]:  # the step after a game's end is its reset
                boards[i] = board = chess.Board(fens[i])
                pending[i] = False
                assert not terminated[i] and not truncated[i] and rewards[i] == 0
            else:
                board.push_uci(moves[i])
                outcome = reference_outcome(board)
                seen.add(outcome)
                assert env.outcome(i) == outcome, (board.fen(), env.outcome(i), outcome)
                assert terminated[i] == (outcome != "ongoing")
                assert rewards[i] == (1.0 if outcome == "checkmate" else 0.0)
                assert movers[i] != board.turn
                pending[i] = terminated[i] or truncated[i]
            assert env.fen(i) == board.fen()
            assert mask_ucis(env, i, info["action_mask"][i]) == legal_ucis(board)
    # the start positions were chosen to reach these ends
    assert {"checkmate", "stalemate", "insufficient_material", "fifty_moves"} <= seen, seen


@pytest.mark.parametrize("agent_color", ["white", "black", "alternate"])
def test_random_opponent_games_match_python_chess(agent_color):
    n, steps = 12, 120
    env = envfleet.make("Chess-v0", n, seed=11, opponent="random", agent_color=agent_color,
                        max_plies=160)
    fens = starts(n)
    env.reset(options={"fen": fens})
    rewards_seen = set()

    def start_board(i):
        board = chess.Board(fens[i])
        if env.fen(i) != board.fen():  # the opponent opened
            board.push(find_reply(board, env.fen(i)))
        return board

    boards = [start_board(i) for i in range(n)]
    agent = [b.turn for b in boards]
    if agent_color != "alternate":
        assert set(agent) == {agent_color == "white"}
    else:
        assert len(set(agent)) == 2
    pending = np.zeros(n, dtype=bool)
    for _ in range(steps):
        actions = env.random_legal_actions()
        over = [not pending[i] and reference_outcome(boards[i]) != "ongoing" for i in range(n)]
        moves = [None if pending[i] or over[i] else env.action_to_uci(i, int(actions[i]))
                 for i in range(n)]
        _obs, rewards, terminated, truncated, info = env.step(actions)
        for i in range(n):
            if pending[i]:
                boards[i] = start_board(i)
                agent[i] = boards[i].turn
                pending[i] = False
                assert rewards[i] == 0 and not terminated[i]
                continue
            board = boards[i]
            if over[i]:  # the opponent's opening reply ended the game: this step reports it
                outcome = reference_outcome(board)
                expected = -1.0 if outcome == "checkmate" else 0.0
            else:
                board.push_uci(moves[i])
                outcome = reference_outcome(board)
                expected = 1.0 if outcome == "checkmate" else 0.0
            if outcome == "ongoing":
                board.push(find_reply(board, env.fen(i)))
                outcome = reference_outcome(board)
                expected = -1.0 if outcome == "checkmate" else 0.0
            assert env.fen(i) == board.fen()
            assert env.outcome(i) == outcome
            assert terminated[i] == (outcome != "ongoing")
            assert rewards[i] == expected
            rewards_seen.add(float(rewards[i]))
            if outcome == "ongoing":
                assert board.turn == agent[i]
                assert mask_ucis(env, i, info["action_mask"][i]) == legal_ucis(board)
            pending[i] = terminated[i] or truncated[i]
    assert 0.0 in rewards_seen


def run(env, steps, fens=None):
    obs, _ = env.reset(seed=5, options={"fen": fens} if fens else None)
    out = [obs.copy()]
    for _ in range(steps):
        obs, rewards, terminated, _truncated, _info = env.step(env.random_legal_actions())
        out += [obs.copy(), rewards.copy(), terminated.copy()]
    return out


def test_opponent_mode_is_deterministic_per_seed():
    a = run(envfleet.make("Chess-v0", 8, opponent="random", agent_color="alternate"), 40)
    b = run(envfleet.make("Chess-v0", 8, opponent="random", agent_color="alternate"), 40)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    env = envfleet.make("Chess-v0", 8, opponent="random", agent_color="alternate")
    env.reset(seed=6)
    c = [env.step(env.random_legal_actions())[0].copy() for _ in range(5)]
    assert any((x != y).any() for x, y in zip(a[1::3], c, strict=False))


def test_truncation_at_max_plies():
    env = envfleet.make("Chess-v0", 2, seed=0, max_plies=7)
    env.reset()
    for step in range(7):
        _, _, _terminated, truncated, _ = env.step(env.random_legal_actions())
        assert truncated.all() == (step == 6)
    _, _, _, truncated, _ = env.step(env.random_legal_actions())  # the reset step
    assert env.fen(0) == STARTING_FEN and not truncated.any()
    env = envfleet.make("Chess-v0", 2, seed=0, max_plies=7, opponent="random")
    env.reset()
    truncs = [env.step(env.random_legal_actions())[3].all() for _ in range(4)]
    assert truncs == [False, False, False, True]  # 4 steps = 8 plies >= 7


@pytest.mark.slow
def test_many_long_random_games_match_python_chess():
    """64 boards, 1200 plies: every kind of game end, threefold repetition included."""
    n = 64
    env = envfleet.make("Chess-v0", n, seed=8)
    fens = starts(n)
    _, info = env.reset(options={"fen": fens})
    boards = [chess.Board(f) for f in fens]
    pending = np.zeros(n, dtype=bool)
    seen = set()
    for _ in range(1200):
        actions = env.random_legal_actions()
        moves = [None if pending[i] else env.action_to_uci(i, int(actions[i])) for i in range(n)]
        _, rewards, terminated, truncated, info = env.step(actions)
        for i in range(n):
            if pending[i]:
                boards[i] = chess.Board(fens[i])
                pending[i] = False
            else:
                boards[i].push_uci(moves[i])
                outcome = reference_outcome(boards[i])
                seen.add(outcome)
                assert env.outcome(i) == outcome
                assert rewards[i] == (1.0 if outcome == "checkmate" else 0.0)
                pending[i] = terminated[i] or truncated[i]
            assert env.fen(i) == boards[i].fen()
            assert mask_ucis(env, i, info["action_mask"][i]) == legal_ucis(boards[i])
    assert {"checkmate", "stalemate", "insufficient_material", "fifty_moves",
            "threefold_repetition"} <= seen, seen


@pytest.mark.slow
def test_thread_count_and_parallel_path_do_not_change_games():
    """512 boards take the parallel (prange) kernel with 2 threads: same games as 1 thread."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs NUMBA_NUM_THREADS >= 2")
    outs = []
    for threads in (1, 2):
        env = envfleet.make("Chess-v0", 512, seed=9, num_threads=threads,
                            opponent="random", agent_color="alternate")
        env.reset()
        run = []
        for _ in range(30):
            obs, rewards, terminated, _, _ = env.step(env.random_legal_actions())
            run += [obs.copy(), rewards.copy(), terminated.copy()]
        outs.append(run)
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)
