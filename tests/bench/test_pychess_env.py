"""The python-chess baseline of the e2e and chess-learning studies plays Chess-v0's game: in
lock step with the native env on the same moves (and the same random replies), observations,
action masks, rewards, terminations and truncations are equal."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet

chess = pytest.importorskip("chess")

from envfleet.bench.studies import pychess_env  # noqa: E402


def replay_reply(target: dict[str, str]):
    """An opponent that plays the legal move reaching ``target["fen"]`` (the native reply)."""

    def reply(board: chess.Board) -> chess.Move:
        for move in board.legal_moves:
            board.push(move)
            reached = board.fen()
            board.pop()
            if reached == target["fen"]:
                return move
        raise AssertionError(f"no legal move of {board.fen()} reaches {target['fen']}")

    return reply


def test_lockstep_with_native_chess(opponent="random", observation="planes", max_plies=60):
    """The setting the studies train on (the random opponent, planes)."""
    n, steps = 6, 70
    native = envfleet.make("Chess-v0", n, seed=4, opponent=opponent, observation=observation,
                           max_plies=max_plies)
    targets = [{"fen": ""} for _ in range(n)]
    envs = []
    for i in range(n):
        env = pychess_env.PyChessEnv(opponent=opponent, observation=observation,
                                     max_plies=max_plies)
        env.reply = replay_reply(targets[i])
        envs.append(env)
    obs, info = native.reset(seed=4)
    for i, env in enumerate(envs):
        o, inf = env.reset(seed=i)
        assert np.array_equal(o, obs[i]) and np.array_equal(inf["action_mask"],
                                                            info["action_mask"][i])
    pending = np.zeros(n, dtype=bool)
    ends = {"terminated": 0, "truncated": 0, "win": 0, "loss": 0}
    for _ in range(steps):
        actions = native.random_legal_actions()
        obs, rewards, terminated, truncated, info = native.step(actions)
        for i, env in enumerate(envs):
            if pending[i]:  # NEXT_STEP: this step only reset the native board
                o, inf = env.reset()
                r, term, trunc = 0.0, False, False
            else:
                targets[i]["fen"] = native.fen(i)
                o, r, term, trunc, inf = env.step(int(actions[i]))
                assert env.board.fen() == native.fen(i)
            assert o.dtype == obs.dtype and np.array_equal(o, obs[i]), i
            assert np.array_equal(inf["action_mask"], info["action_mask"][i]), i
            assert (r, term, trunc) == (rewards[i], terminated[i], truncated[i]), i
            ends["terminated"] += term
            ends["truncated"] += trunc
            ends["win"] += r > 0
            ends["loss"] += r < 0
        pending = terminated | truncated
    native.close()
    assert ends["truncated"] > 0  # the budget's end was reached in lock step too
    assert n * steps >= 400  # a few hundred plies (twice that against the opponent)


def test_wins_and_losses_and_illegal_actions():
    """Mate in one for the agent (+1), the random opponent mating (-1), an illegal action."""
    env = pychess_env.PyChessEnv(opponent="random")
    _, info = env.reset(options={"fen": "6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1"})
    mate = pychess_env.label(env.board, chess.Move.from_uci("a1a8"))
    assert info["action_mask"][mate]
    assert env.step(mate)[1:4] == (1.0, True, False)
    env.reset(options={"fen": "r6k/8/8/8/8/8/1P3PPP/6K1 w - - 0 1"})
    env.reply = lambda board: chess.Move.from_uci("a8a1")  # back-rank mate
    move = pychess_env.label(env.board, chess.Move.from_uci("b2b3"))
    _, reward, term, _, _ = env.step(move)
    assert (reward, term) == (-1.0, True)
    env.reset()
    with pytest.raises(ValueError, match="not a legal move"):
        env.step(0)
    lose = pychess_env.PyChessEnv(illegal_action="lose")
    lose.reset()
    assert lose.step(0)[1:3] == (-1.0, True)


def test_pool_runs_the_python_chess_env():
    env = envfleet.make(pychess_env.PYCHESS_IMPORT_ID, 3, backend="pool", num_workers=2,
                        seed=1, opponent="random", observation="planes")
    obs, info = env.reset(seed=1)
    assert obs.shape == (3, 8, 8, 21) and info["action_mask"].shape == (3, 4672)
    for _ in range(5):
        legal = [np.flatnonzero(m) for m in info["action_mask"]]
        obs, _, _, _, info = env.step(np.array([a[0] for a in legal]))
    env.close()


def test_openspiel_env_plays_chess_against_the_random_opponent():
    """The OpenSpiel contender: the agent (white) moves, the opponent replies, the game ends
    with OpenSpiel's returns or is truncated at Chess-v0's step budget."""
    pytest.importorskip("pyspiel")
    from envfleet.bench.studies.openspiel_env import OpenSpielChessEnv

    env = OpenSpielChessEnv(max_plies=40)
    obs, info = env.reset(seed=0)
    assert obs.shape == (20, 8, 8) and info["action_mask"].sum() == 20  # 20 opening moves
    rng = np.random.default_rng(0)
    for _ in range(20):
        legal = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(rng.choice(legal)))
        assert str(env.state).split()[1] == "w" or terminated  # the opponent replied
        if terminated or truncated:
            break
    assert truncated or (terminated and reward in (-1.0, 0.0, 1.0))
    assert env.steps <= 20
