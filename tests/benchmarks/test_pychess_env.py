"""The python-chess baseline of the e2e and chess-learning studies plays Chess-v0's game: in
lock step with the native env on the same moves (and the same random replies), observations,
action masks, rewards, terminations and truncations are equal."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet

chess = pytest.importorskip("chess")

from benchmarks.studies import pychess_env  # noqa: E402


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


def test_pool_gives_the_boards_outputs_with_next_step_autoreset():
    """The study's python-chess side as the trainer builds it (``make_envs``: the pool, NEXT_STEP,
    zero-copy outputs) gives what the same boards (same seeds: same replies) give stepped by
    hand, resets included: the pool adds nothing to the lock step above."""
    from benchmarks.studies.e2e import train_args
    from envfleet.train.envs import make_envs

    n, seed, kwargs = 4, 3, {"opponent": "random", "observation": "planes", "max_plies": 30}
    env = make_envs(train_args("Chess-v0", pychess_env.PYCHESS_IMPORT_ID, "pool", n, 1, 0,
                               seed, kwargs), n, seed)
    boards = [pychess_env.PyChessEnv(**kwargs) for _ in range(n)]
    obs, info = env.reset(seed=seed)
    outs = [b.reset(seed=seed + i) for i, b in enumerate(boards)]
    assert np.array_equal(obs, np.stack([o for o, _ in outs]))
    rng, pending, ends = np.random.default_rng(0), np.zeros(n, dtype=bool), 0
    for _ in range(120):
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in info["action_mask"]])
        obs, rewards, terminated, truncated, info = env.step(actions)
        for i, board in enumerate(boards):
            if pending[i]:
                o, inf = board.reset()
                r, term, trunc = 0.0, False, False
            else:
                o, r, term, trunc, inf = board.step(int(actions[i]))
            assert np.array_equal(o, obs[i]), i
            assert np.array_equal(inf["action_mask"], info["action_mask"][i]), i
            assert (r, term, trunc) == (rewards[i], terminated[i], truncated[i]), i
        pending = terminated | truncated
        ends += pending.sum()
    env.close()
    assert ends >= 2 * n  # episodes ended and the boards were reset


def test_openspiel_env_plays_chess_against_the_random_opponent():
    """The OpenSpiel contender: the agent (white) moves, the opponent replies, the game ends
    with OpenSpiel's returns or is truncated at Chess-v0's step budget."""
    pytest.importorskip("pyspiel")
    from benchmarks.studies.openspiel_env import OpenSpielChessEnv

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


def _train_a_little(env, args, iterations: int):
    """``iterations`` of ``envfleet train``'s loop (collect, bookkeeping, update) on ``env``
    from torch seed 0, on one torch thread as ``envfleet train`` runs (with more, the sums of
    the legal-logits head's backward pass may add up in another order): the agent, the
    episodes that ended and the steps that won or lost."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_loop(env, args, iterations)
    finally:
        torch.set_num_threads(threads)
        env.close()


def _train_loop(env, args, iterations: int):
    """``_train_a_little``'s loop (``ppo.train``'s iterations, without its clocks and records)."""
    import torch

    from envfleet.train import ppo
    from envfleet.train.bookkeeping import Bookkeeping, Clock

    torch.manual_seed(0)
    agent = ppo.build_agent(env, args)
    optimizer = ppo.make_optimizer(agent, args)
    obs, info = env.reset(seed=args.seed)
    buf = ppo.make_rollout(args, agent, info, torch.device("cpu"))
    books, clock = Bookkeeping.new(args), Clock()
    generator = torch.Generator().manual_seed(0)
    ended = decided = 0
    for _ in range(iterations):
        obs, info, _ = ppo.iterate(env, agent, optimizer, buf, books, obs, info, clock,
                                   args=args, generator=generator, bounds=None,
                                   torch_actions=False)
        ended += int(buf.ended.sum())
        decided += int((buf.rewards != 0).sum())
    return agent, ended, decided


def test_ppo_on_python_chess_in_lock_step_learns_bit_for_bit_as_on_native():
    """What the trainer gets from python-chess is native Chess-v0's, in training: PPO's preset
    (legal logits, planes, the random opponent) trained on python-chess boards whose opponent
    replays the native replies ends with the parameters it gets on native Chess-v0, bit for
    bit, and no observation, mask, reward or end differed on the way (the learning audit of
    the chess-learning study; its 524k-step run: benchmarks/scripts/chess_learning_gap.py)."""
    import torch

    from benchmarks.studies.e2e import train_args
    from envfleet.train import ppo

    kwargs = {"opponent": "random", "observation": "planes", "max_plies": 60}
    args = train_args("Chess-v0", "Chess-v0", "numba", 32, 1, 0, 7, kwargs)
    native, ended, decided = _train_a_little(ppo.make_envs(args, 32, args.seed), args, 8)
    lockstep = pychess_env.LockstepVectorEnv(32, args.seed, **kwargs)
    twin, *counts = _train_a_little(lockstep, args, 8)
    assert lockstep.mismatches == []
    assert counts == [ended, decided]  # (129 ended, 3 of them won or lost)
    assert ended > 100 and decided > 0
    ours, theirs = native.state_dict(), twin.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
