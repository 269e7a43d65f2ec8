"""Random games in lock step with python-chess: masks, FENs, game ends, rewards, autoreset."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.envs.chess import STARTING_FEN

chess = pytest.importorskip("chess")

from tests.envs.chess.helpers import (  # noqa: E402
    COMPACT_FIELDS,
    PLANES_FIELDS,
    find_reply,
    legal_ucis,
    mask_ucis,
    reference_compact,
    reference_ep_square,
    reference_outcome,
    reference_planes,
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


# (start, opening, cycle): scripted games that repeat positions until threefold repetition
SCRIPTS = [
    (STARTING_FEN, [], ["g1f3", "g8f6", "f3g1", "f6g8"]),
    # after 1.e4 the en-passant square has no legal capture: the position recurs (ply 5, 9)
    (STARTING_FEN, ["e2e4"], ["g8f6", "g1f3", "f6g8", "f3g1"]),
    # the start has a legal en-passant capture, so it never recurs (threefold at ply 12)
    ("rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3", [],
     ["g1f3", "g8f6", "f3g1", "f6g8"]),
    # king moves drop the castling rights: the shuffled position differs from the start
    ("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1", ["e1f1", "e8f8"], ["f1e1", "f8e8", "e1f1", "e8f8"]),
]


@pytest.mark.parametrize("observation", ["compact", "planes"])
def test_observation_fields_match_python_chess(observation):
    """Every observation field of every board, every ply (resets included), against the one
    built from python-chess's position: random games plus scripted repetitions."""
    fields = COMPACT_FIELDS if observation == "compact" else PLANES_FIELDS
    reference = reference_compact if observation == "compact" else reference_planes
    fens = STARTS + [fen for fen, _, _ in SCRIPTS]
    n, plies = len(fens), 200
    env = envfleet.make("Chess-v0", n, seed=4, backend="numba", observation=observation,
                        max_plies=120)
    obs, _ = env.reset(options={"fen": fens})
    boards = [chess.Board(f) for f in fens]
    played = np.zeros(n, dtype=np.int64)  # plies of each board's current game
    pending = np.zeros(n, dtype=bool)
    seen = {name: set() for name in fields}
    ep_kinds = set()

    def check(i):
        board = boards[i]
        expected = reference(board)
        assert obs[i].dtype == expected.dtype and obs[i].shape == expected.shape
        for name, part in fields.items():
            got, want = obs[i][..., part], expected[..., part]
            wrong = np.flatnonzero(got != want)[:8]
            assert not wrong.size, \
                (f"board {i}: {name} of the {observation} observation differs from python-chess "
                 f"at {board.fen()}: flat entries {wrong} are {got.ravel()[wrong]}, expected "
                 f"{want.ravel()[wrong]}")
            seen[name].add(got.tobytes())
        ep_kinds.add((board.ep_square is not None, reference_ep_square(board) is not None))

    for i in range(n):
        check(i)
    for _ in range(plies):
        actions = np.asarray(env.random_legal_actions()).copy()
        for s, (_fen, opening, cycle) in enumerate(SCRIPTS):
            i = len(STARTS) + s
            if not pending[i]:
                k = played[i]
                move = opening[k] if k < len(opening) else cycle[(k - len(opening)) % len(cycle)]
                actions[i] = env.uci_to_action(i, move)
        moves = [None if pending[i] else env.action_to_uci(i, int(actions[i])) for i in range(n)]
        obs, _rewards, terminated, truncated, _info = env.step(actions)
        for i in range(n):
            if pending[i]:  # the step after a game's end is its reset
                boards[i] = chess.Board(fens[i])
                played[i] = 0
                pending[i] = False
            else:
                boards[i].push_uci(moves[i])
                played[i] += 1
                pending[i] = terminated[i] or truncated[i]
            assert env.fen(i) == boards[i].fen()
            check(i)
    # every comparison could fail: each field took more than one value
    assert all(len(values) > 1 for values in seen.values()), \
        {name: len(values) for name, values in seen.items()}
    if observation == "compact":
        values = {name: {np.frombuffer(v, np.int8)[0] for v in seen[name]}
                  for name in ("repetition count", "en-passant file", "half-move clock")}
        assert values["repetition count"] == {0, 1, 2}
        assert len(values["en-passant file"]) > 2 and 100 in values["half-move clock"], values
    # python-chess's ep_square without a legal capture (kept as none) and with one
    assert {(True, False), (True, True), (False, False)} <= ep_kinds, ep_kinds


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
