"""Scripted rule cases, actions/labels, observations and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.envs.chess import STARTING_FEN

chess = pytest.importorskip("chess")


@pytest.fixture(scope="module")
def env():
    e = envfleet.make("Chess-v0", 3, seed=0)
    yield e
    e.close()


def play(env, fen, ucis, board=0):
    """Play ``ucis`` on ``board`` (the others play random legal moves); the last step's output."""
    env.reset(options={"fen": [fen] * env.num_envs})
    out = None
    for uci in ucis:
        actions = env.random_legal_actions()
        actions[board] = env.uci_to_action(board, uci)
        out = env.step(actions)
    return out


def test_pgx_labels_of_the_initial_position(env):
    _, info = env.reset()
    expected = [89, 90, 652, 656, 673, 674, 1257, 1258, 1841, 1842, 2425, 2426, 3009, 3010,
                3572, 3576, 3593, 3594, 4177, 4178]
    assert np.nonzero(info["action_mask"][0])[0].tolist() == expected
    assert env.uci_to_action(0, "e2e4") == (4 * 8 + 1) * 73 + 17  # pgx square e2, up 2
    assert env.action_to_uci(0, 89) == "a2a3" and env.action_to_uci(0, 656) == "b1c3"


def test_black_sees_the_board_flipped(env):
    env.reset()
    env.step(np.full(3, env.uci_to_action(0, "e2e4")))
    # black's e7e5 has the label white's e2e4 has (pgx flips ranks for black)
    assert env.uci_to_action(0, "e7e5") == env.uci_to_action(1, "e7e5")
    play(env, STARTING_FEN, ["e2e4"])
    assert env.uci_to_action(0, "e7e5") == (4 * 8 + 1) * 73 + 17
    obs, _ = env.reset()
    assert obs[0, 4] == 6 and obs[0, 60] == -6 and obs[0, 71] == 0  # own king e1, theirs e8
    obs = env.step(np.full(3, env.uci_to_action(0, "e2e4")))[0]
    assert obs[0, 4] == 6 and obs[0, 60] == -6 and obs[0, 71] == 1  # black's king at "e1"
    assert obs[0, 36] == -1  # white's e4 pawn, seen from black (ranks mirrored): "e5"


@pytest.mark.parametrize(("fen", "ucis", "mover"), [
    (STARTING_FEN, ["f2f3", "e7e5", "g2g4", "d8h4"], "black"),  # fool's mate
    (STARTING_FEN, ["e2e4", "e7e5", "d1h5", "b8c6", "f1c4", "g8f6", "h5f7"], "white"),
    ("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1", ["a1a8"], "white"),
    ("r5k1/5ppp/8/8/8/8/5PPP/6K1 b - - 0 1", ["a8a1"], "black"),
])
def test_checkmate_rewards_the_mover(env, fen, ucis, mover):
    _, rewards, terminated, _, info = play(env, fen, ucis)
    assert terminated[0] and rewards[0] == 1.0 and env.outcome(0) == "checkmate"
    assert not info["action_mask"][0].any()
    _obs, rewards, terminated, _, _ = env.step(env.random_legal_actions())  # autoreset
    assert not terminated[0] and rewards[0] == 0 and env.fen(0) == fen


@pytest.mark.parametrize(("fen", "ucis", "outcome"), [
    ("7k/5Q2/8/6K1/8/8/8/8 w - - 0 1", ["g5g6"], "stalemate"),
    ("4k3/8/8/8/8/8/3r4/4K3 w - - 0 1", ["e1d2"], "insufficient_material"),  # K vs K
    ("4k3/8/8/8/8/8/3r4/4KN2 w - - 0 1", ["e1d2"], "insufficient_material"),  # K+N vs K
    ("4k3/1b6/8/8/8/8/3r4/4KB2 w - - 0 1", ["e1d2"], "insufficient_material"),  # same colour
    ("4k3/8/8/8/8/8/6r1/4K2R w K - 99 70", ["h1h2"], "fifty_moves"),
    ("4k3/8/8/8/8/8/8/R3K3 w - - 0 1",
     ["a1a2", "e8d8", "a2a1", "d8e8", "a1a2", "e8d8", "a2a1", "d8e8"], "threefold_repetition"),
])
def test_draws(env, fen, ucis, outcome):
    _, rewards, terminated, _, _ = play(env, fen, ucis)
    assert terminated[0] and rewards[0] == 0 and env.outcome(0) == outcome


def test_not_insufficient_with_opposite_bishops_or_two_knights(env):
    _, _, terminated, _, _ = play(env, "4k3/2b5/8/8/8/8/3r4/4KB2 w - - 0 1", ["e1d2"])
    assert not terminated[0]
    _, _, terminated, _, _ = play(env, "4k3/8/8/8/8/8/3r4/4KNN1 w - - 0 1", ["e1d2"])
    assert not terminated[0]


def test_threefold_needs_the_same_castling_rights(env):
    # the king walks out and back: castling rights are lost, so the first position differs
    fen = "4k3/8/8/8/8/8/8/R3K3 w Q - 0 1"
    _, _, terminated, _, _ = play(env, fen, ["e1d1", "e8d8", "d1e1", "d8e8", "e1d1", "e8d8",
                                             "d1e1", "d8e8"])
    assert not terminated[0]
    board = chess.Board(fen)
    for uci in ["e1d1", "e8d8", "d1e1", "d8e8", "e1d1", "e8d8", "d1e1", "d8e8"]:
        board.push_uci(uci)
    assert not board.is_repetition(3) and env.fen(0) == board.fen()


def test_en_passant_and_castling(env):
    fen = "r3k2r/ppp1pppp/8/8/3p4/8/PPPPPPPP/R3K2R w KQkq - 0 1"
    play(env, fen, ["e2e4"])
    assert env.fen(0).split()[3] == "e3"
    _, _, _, _, _info = play(env, fen, ["e2e4", "d4e3"])
    assert env.fen(0) == "r3k2r/ppp1pppp/8/8/8/4p3/PPPP1PPP/R3K2R w KQkq - 0 2"
    play(env, fen, ["e1g1"])
    assert env.fen(0) == "r3k2r/ppp1pppp/8/8/3p4/8/PPPPPPPP/R4RK1 b kq - 1 1"
    play(env, fen, ["h1g1", "a8b8"])
    assert env.fen(0).split()[2] == "Qk"
    play(env, fen, ["e1f1"])
    assert env.fen(0).split()[2] == "kq"


def test_underpromotion(env):
    fen = "1n2k3/P7/8/8/8/8/8/4K3 w - - 0 1"
    env.reset(options={"fen": [fen] * 3})
    labels = {u: env.uci_to_action(0, u) for u in ("a7a8q", "a7a8r", "a7a8b", "a7a8n",
                                                   "a7b8q", "a7b8n")}
    assert len(set(labels.values())) == 6
    assert labels["a7a8r"] == 6 * 73 + 0 and labels["a7a8n"] == 6 * 73 + 6
    assert labels["a7b8n"] == 6 * 73 + 7  # knight, towards file + 1
    for uci, label in labels.items():
        assert env.action_to_uci(0, label) == uci
    play(env, fen, ["a7b8n"])
    assert env.fen(0) == "1N2k3/8/8/8/8/8/8/4K3 b - - 0 1"


def test_illegal_action_is_refused_and_changes_nothing(env):
    env.reset(seed=2)
    env.step(env.random_legal_actions())
    before = [env.fen(i) for i in range(3)]
    state = [np.array(c).copy() for c in env.state]
    actions = env.random_legal_actions()
    actions[1] = int(np.nonzero(~env.state.action_mask[1])[0][0])
    with pytest.raises(ValueError, match=rf"illegal action {actions[1]} for board 1"):
        env.step(actions)
    for a, b in zip(state, env.state, strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))
    assert [env.fen(i) for i in range(3)] == before
    with pytest.raises(ValueError, match="env 2"):
        env.step(np.concatenate([env.random_legal_actions()[:2], [4672]]))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="must be integers"):
        env.step(np.zeros(3, np.float32))
    assert [env.fen(i) for i in range(3)] == before
    env.step(env.random_legal_actions())  # still working


def test_illegal_action_loses_when_asked():
    env = envfleet.make("Chess-v0", 2, seed=0, illegal_action="lose")
    env.reset()
    fen = env.fen(0)
    _, rewards, terminated, _, _ = env.step(np.array([0, 89]))
    assert terminated.tolist() == [True, False] and rewards.tolist() == [-1.0, 0.0]
    assert env.outcome(0) == "illegal_move" and env.fen(0) == fen
    env = envfleet.make("Chess-v0", 1, seed=0, illegal_action="lose", opponent="random")
    env.reset()
    _, rewards, terminated, _, _ = env.step(np.array([5]))
    assert terminated[0] and rewards[0] == -1.0


def test_bad_board_index_and_translation_errors(env):
    env.reset()
    for bad in (-1, 3, 1.0, "0", None, True):
        for call in (lambda i: env.fen(i), lambda i: env.action_to_uci(i, 89),
                     lambda i: env.uci_to_action(i, "e2e4")):
            with pytest.raises(ValueError, match="board index"):
                call(bad)
    with pytest.raises(ValueError, match="actions are ints"):
        env.action_to_uci(0, 4672)
    with pytest.raises(ValueError, match="not a legal move on board 0"):
        env.uci_to_action(0, "e2e5")
    with pytest.raises(ValueError, match="not a legal move"):
        env.uci_to_action(0, "e2e4q")
    with pytest.raises(ValueError, match="invalid UCI"):
        env.uci_to_action(0, "e2")
    assert env.fen(0) == STARTING_FEN


def test_info_mask_on_reset_and_step(env):
    obs, info = env.reset()
    assert info["action_mask"].dtype == np.bool_ and info["action_mask"].shape == (3, 4672)
    assert info["_action_mask"].all()
    obs, *_, info = env.step(env.random_legal_actions())
    assert info["action_mask"].sum(1).tolist() == [20, 20, 20]
    assert env.observation_space.contains(obs)


def test_planes_observation():
    env = envfleet.make("Chess-v0", 2, seed=0, observation="planes")
    obs, _ = env.reset()
    assert obs.shape == (2, 8, 8, 21) and obs.dtype == np.float32
    assert obs[0, 0, 4, 5] == 1 and obs[0, 7, 4, 11] == 1  # own king e1, theirs e8
    assert obs[0, :, :, 0].sum() == 8 and obs[0, :, :, 15:19].all()
    obs, *_ = env.step(np.array([env.uci_to_action(0, "e2e4")] * 2))
    assert obs[0, 0, 4, 5] == 1 and obs[0, :, :, 14].all()  # black to move, king at "e1"
    assert env.single_observation_space.contains(obs[0])


def test_registration_and_backends():
    assert "Chess-v0" in envfleet.list_envs()
    assert "torch" not in envfleet.list_envs()["Chess-v0"]
    with pytest.raises(envfleet.BackendUnavailableError, match="Chess-v0 has no 'torch'"):
        envfleet.make("Chess-v0", 2, backend="torch")
    with pytest.raises(ValueError, match="opponent"):
        envfleet.make("Chess-v0", 2, opponent="stockfish")
    import gymnasium

    env = gymnasium.make_vec("envfleet/Chess-v0", num_envs=2,
                             vectorization_mode="vector_entry_point")
    assert env.unwrapped.num_envs == 2


@pytest.mark.slow
def test_same_step_and_disabled_autoreset():
    mate = "6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1"
    env = envfleet.make("Chess-v0", 2, seed=0, autoreset_mode="SameStep")
    env.reset(options={"fen": [mate, STARTING_FEN]})
    actions = env.random_legal_actions()
    actions[0] = env.uci_to_action(0, "a1a8")
    obs, rewards, terminated, _, info = env.step(actions)
    assert terminated.tolist() == [True, False] and rewards[0] == 1.0
    assert info["_final_obs"].tolist() == [True, False]
    final = info["final_obs"][0]  # the mated position, seen from black (ranks mirrored)
    assert final[62 ^ 56] == 6 and final[56 ^ 56] == -4 and final[71] == 1
    assert env.fen(0) == mate and info["action_mask"][0].sum() == 20  # reset in the step
    assert obs[0, 71] == 0
    env = envfleet.make("Chess-v0", 2, seed=0, autoreset_mode="Disabled")
    env.reset(options={"fen": [mate, STARTING_FEN]})
    actions = env.random_legal_actions()
    actions[0] = env.uci_to_action(0, "a1a8")
    env.step(actions)
    with pytest.raises(ValueError, match="env 0 has finished"):
        env.step(env.random_legal_actions())
    env.reset(options={"reset_mask": np.array([True, False])})
    assert env.fen(0) == STARTING_FEN  # no fen option: the initial position
    env.step(env.random_legal_actions())
