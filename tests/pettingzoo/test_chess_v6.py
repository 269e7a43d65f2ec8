"""envfleet.pettingzoo.chess_v6 against PettingZoo's own chess_v6: PettingZoo's api_test, games
in lock step (observations, masks, rewards, ends, infos, bit for bit), and what ``env()``'s
wrappers do with bad input and calls out of order."""

from __future__ import annotations

import copy
import os
import pickle
import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("chess")
pytest.importorskip("pygame")

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from pettingzoo.classic import chess_v6 as reference
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import api_test, seed_test
from pettingzoo.test.seed_test import seed_action_spaces, seed_observation_spaces
from pettingzoo.utils import wrappers
from pettingzoo.utils.env_logger import EnvLogger

from envfleet.pettingzoo import chess_v6


@pytest.fixture(autouse=True)
def _quiet_env_logger():
    """PettingZoo's EnvLogger warns on illegal moves and dead steps: keep the output clean."""
    EnvLogger.suppress_output()
    yield
    EnvLogger.unsuppress_output()


def same_observation(mine: dict, theirs: dict, where: str) -> None:
    assert mine.keys() == theirs.keys(), where
    for key in ("observation", "action_mask"):
        assert mine[key].dtype == theirs[key].dtype, (where, key)
        assert mine[key].shape == theirs[key].shape, (where, key)
        if not np.array_equal(mine[key], theirs[key]):
            diff = np.argwhere(mine[key] != theirs[key])
            raise AssertionError(f"{where}: {key} differs at {diff[:5].tolist()} "
                                 f"({len(diff)} entries)")


def same_bookkeeping(mine, theirs, where: str) -> None:
    assert mine.agents == theirs.agents, where
    assert mine.agent_selection == theirs.agent_selection, where
    assert mine.rewards == theirs.rewards, where
    assert mine._cumulative_rewards == theirs._cumulative_rewards, where
    assert mine.terminations == theirs.terminations, where
    assert mine.truncations == theirs.truncations, where
    assert mine.infos == theirs.infos, where


def play_lockstep(games: int, seed: int, other_every: int = 5) -> dict[str, int]:
    """Random legal games through both ``env()``s; every ``last()`` compared exactly, the
    other agent's ``observe`` every ``other_every`` plies. Returns how games ended."""
    theirs, mine = reference.env(), chess_v6.env()
    rng = np.random.default_rng(seed)
    ends = {"white": 0, "black": 0, "draw": 0}
    for game in range(games):
        theirs.reset(seed=game)
        mine.reset(seed=game)
        plies = 0
        for agent in theirs.agent_iter():
            where = f"game {game} ply {plies} ({agent})"
            assert mine.agents and mine.agent_selection == agent, where
            t_obs, t_rew, t_term, t_trunc, t_info = theirs.last()
            m_obs, m_rew, m_term, m_trunc, m_info = mine.last()
            same_observation(m_obs, t_obs, where)
            assert (m_rew, m_term, m_trunc, m_info) == (t_rew, t_term, t_trunc, t_info), where
            assert type(m_rew) is type(t_rew) and type(m_term) is bool, where
            if plies % other_every == 0 or t_term:
                other = "player_1" if agent == "player_0" else "player_0"
                same_observation(mine.observe(other), theirs.observe(other), where + " other")
            if t_term or t_trunc:
                action = None
            else:
                action = int(rng.choice(np.flatnonzero(t_obs["action_mask"])))
                plies += 1
            theirs.step(action)
            mine.step(action)
            same_bookkeeping(mine, theirs, where)
        assert not mine.agents
        outcome = theirs.unwrapped.board.outcome(claim_draw=True)
        ends["draw" if outcome.winner is None else ("white" if outcome.winner else "black")] += 1
        assert mine.unwrapped.fen() == theirs.unwrapped.board.fen()
    return ends


def test_api_test_passes():
    api_test(chess_v6.env(), num_cycles=300)
    api_test(chess_v6.raw_env(), num_cycles=100)


def test_random_games_match_pettingzoo_in_lock_step():
    ends = play_lockstep(games=8, seed=1)
    assert sum(ends.values()) == 8


@pytest.mark.slow
def test_many_random_games_match_pettingzoo_in_lock_step():
    """60 games (~1 min: PettingZoo's side costs ~1.5 ms a ply); thousands with
    ENVFLEET_PZ_LOCKSTEP_GAMES=2000 (and ENVFLEET_PZ_LOCKSTEP_SEED to vary the games)."""
    games = int(os.environ.get("ENVFLEET_PZ_LOCKSTEP_GAMES", "60"))
    seed = int(os.environ.get("ENVFLEET_PZ_LOCKSTEP_SEED", "2"))
    ends = play_lockstep(games=games, seed=seed, other_every=3)
    print(f"{games} games in lock step: {ends}")
    assert ends["white"] and ends["black"] and ends["draw"], ends


def claim_position_moves() -> list[str]:
    """Knights out and back: after 8 plies the start position has occurred twice more, so
    white's Nb1-c3 repeats a position for the third time: claimable before it is played."""
    return ["g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1"]


def test_a_claimable_threefold_repetition_ends_the_game_as_pettingzoo_does():
    import chess

    theirs, mine = reference.env(), chess_v6.env()
    theirs.reset()
    mine.reset()
    board = chess.Board()
    for uci in claim_position_moves():
        obs = theirs.observe(theirs.agent_selection)
        move = chess.Move.from_uci(uci)
        label = chess_v6._pz_label(board, move)
        assert obs["action_mask"][label] == 1
        board.push(move)
        theirs.step(label)
        mine.step(label)
        same_bookkeeping(mine, theirs, uci)
    assert all(theirs.terminations.values())  # black's f6g8 would repeat: claimable
    same_observation(mine.last()[0], theirs.last()[0], "end")


def test_illegal_move_loses_like_terminate_illegal_wrapper():
    theirs, mine = reference.env(), chess_v6.env()
    for illegal_after in (0, 1, 5):
        theirs.reset()
        mine.reset()
        rng = np.random.default_rng(illegal_after)
        for _ in range(illegal_after):
            mask = theirs.last()[0]["action_mask"]
            action = int(rng.choice(np.flatnonzero(mask)))
            theirs.step(action)
            mine.step(action)
        illegal = int(np.flatnonzero(theirs.last()[0]["action_mask"] == 0)[0])
        theirs.step(np.int64(illegal))
        mine.step(np.int64(illegal))
        same_bookkeeping(mine, theirs, f"illegal after {illegal_after}")
        for agent in theirs.agent_iter():
            assert mine.agent_selection == agent
            t, m = theirs.last(), mine.last()
            same_observation(m[0], t[0], agent)
            assert m[1:] == t[1:]
            theirs.step(None)
            mine.step(None)
            same_bookkeeping(mine, theirs, agent)
        assert not mine.agents


@pytest.mark.parametrize("action", [4672, -1, 3.0, "e2e4", np.float32(1.0),
                                    np.array([1])])
def test_actions_outside_the_space_are_refused_as_by_pettingzoo(action):
    for env in (reference.env(), chess_v6.env()):
        env.reset()
        with pytest.raises(AssertionError, match="action is not in action space"):
            env.step(action)
        assert env.agent_selection == "player_0" and not any(env.terminations.values())


def test_a_dead_agent_must_step_none():
    for env in (reference.env(), chess_v6.env()):
        env.reset()
        env.step(0)  # illegal: both done
        with pytest.raises(ValueError, match="only valid action is None"):
            env.step(1)


def test_calls_out_of_order_fail_as_with_order_enforcing_wrapper():
    for make in (reference.env, chess_v6.env):
        env = make()
        for name in ("rewards", "terminations", "truncations", "infos", "agent_selection",
                     "agents", "num_agents"):
            with pytest.raises(AttributeError, match=f"{name} cannot be accessed before reset"):
                getattr(env, name)
        for call, match in ((lambda e: e.step(0), "before step"),
                            (lambda e: e.observe("player_0"), "before observe"),
                            (lambda e: e.agent_iter(), "before agent_iter"),
                            (lambda e: e.render(), "before render")):
            with pytest.raises(AssertionError, match=match):
                call(env)
        env.reset()
        iterator = iter(env.agent_iter())
        next(iterator)
        with pytest.raises(AssertionError, match="need to call step"):
            next(iterator)
        assert str(env) == "chess_v6"


def test_a_step_after_the_game_warns_and_changes_nothing():
    mine = chess_v6.env()
    mine.reset()
    mine.step(0)
    mine.step(None)
    mine.step(None)
    assert mine.agents == []
    mine.step(None)  # OrderEnforcingWrapper: a warning, nothing else
    assert mine.agents == []


def test_raw_env_refuses_an_illegal_action_naming_it():
    env = chess_v6.raw_env()
    env.reset()
    with pytest.raises(ValueError, match="illegal action 0 for player_0 in rnbqkbnr/"):
        env.step(0)
    assert env.agent_selection == "player_0" and not any(env.terminations.values())


def test_spaces_metadata_and_board_match_pettingzoo():
    theirs, mine = reference.raw_env(), chess_v6.raw_env()
    assert mine.metadata == theirs.metadata
    assert mine.possible_agents == theirs.possible_agents
    for agent in mine.possible_agents:
        assert mine.observation_space(agent) == theirs.observation_space(agent)
        assert mine.action_space(agent) == theirs.action_space(agent)
    theirs.reset()
    mine.reset()
    rng = np.random.default_rng(3)
    for _ in range(40):
        mask = theirs.observe(theirs.agent_selection)["action_mask"]
        action = int(rng.choice(np.flatnonzero(mask)))
        theirs.step(action)
        mine.step(action)
    assert mine.board == theirs.board and mine.board.move_stack == theirs.board.move_stack
    assert np.array_equal(mine.board_history, theirs.board_history)


@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_render_matches_pettingzoo(mode, monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    theirs, mine = reference.env(render_mode=mode), chess_v6.env(render_mode=mode)
    theirs.reset()
    mine.reset()
    for action in (2421, 2421):  # e2e4, then e7e5 (black's label: its own view)
        theirs.step(action)
        mine.step(action)
    frame, expected = mine.render(), theirs.render()
    if mode == "ansi":
        assert frame == expected
    else:
        assert frame.shape == expected.shape and np.array_equal(frame, expected)
    mine.close()
    theirs.close()


PICKLED_FORMS = {
    "env": chess_v6.env,
    "raw_env": chess_v6.raw_env,
    "wrapped raw_env": lambda: wrappers.OrderEnforcingWrapper(
        wrappers.AssertOutOfBoundsWrapper(chess_v6.raw_env())),
    "rgb_array env": lambda: chess_v6.env(render_mode="rgb_array"),
}


@pytest.mark.parametrize("form", PICKLED_FORMS)
def test_pettingzoo_pickle_test_passes(form, monkeypatch):
    """PettingZoo's ``test/pickle_test.py`` (not in its wheel), run on each form: an env
    pickled before reset plays the same game as the original, step by step."""
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    env1 = PICKLED_FORMS[form]()
    env2 = pickle.loads(pickle.dumps(env1))
    env1.reset(seed=42)
    env2.reset(seed=42)
    for env in (env1, env2):
        seed_action_spaces(env)
        seed_observation_spaces(env)
    for plies, (agent1, agent2) in enumerate(
            zip(env1.agent_iter(), env2.agent_iter(), strict=True)):
        if plies > 10:
            break
        assert data_equivalence(agent1, agent2)
        last1, last2 = env1.last(), env2.last()
        assert data_equivalence(last1, last2), plies
        mask = last1[0]["action_mask"]
        action1 = env1.action_space(agent1).sample(mask=mask)
        action2 = env2.action_space(agent2).sample(mask=mask)
        assert data_equivalence(action1, action2)
        env1.step(action1)
        env2.step(action2)
    env1.close()
    env2.close()


def assert_same_game(mine, theirs, where: str) -> None:
    """Same position, history, moves, bookkeeping and views for both agents."""
    assert mine.unwrapped.fen() == theirs.unwrapped.fen(), where
    assert mine.unwrapped._moves == theirs.unwrapped._moves, where
    assert np.array_equal(mine.unwrapped.board_history, theirs.unwrapped.board_history), where
    same_bookkeeping(mine, theirs, where)
    for agent in mine.possible_agents:
        same_observation(mine.observe(agent), theirs.observe(agent), f"{where} {agent}")


@pytest.mark.parametrize("form", ["env", "raw_env", "wrapped raw_env"])
@pytest.mark.parametrize("round_trip", ["pickle", "deepcopy"])
def test_a_pickled_game_goes_on_from_the_same_position(form, round_trip):
    """Pickled mid-game (after a double push: en passant and the stacked history matter),
    the copy is the same game, and both play on identically to the end."""
    rng = np.random.default_rng(7)
    env = PICKLED_FORMS[form]()
    env.reset(seed=3)
    for action in (2421, 2421):  # e2e4, e7e5
        env.step(action)
    for _ in range(25):
        mask = env.observe(env.agent_selection)["action_mask"]
        env.step(int(rng.choice(np.flatnonzero(mask))))
    copied = (pickle.loads(pickle.dumps(env)) if round_trip == "pickle"
              else copy.deepcopy(env))
    assert copied.unwrapped._boards is not env.unwrapped._boards
    assert_same_game(copied, env, "after the round trip")
    for plies, agent in enumerate(env.agent_iter(max_iter=400), start=1):
        assert copied.agent_selection == agent
        last = env.last()
        assert data_equivalence(copied.last(), last), plies
        action = None if last[2] or last[3] else int(
            rng.choice(np.flatnonzero(last[0]["action_mask"])))
        env.step(action)
        copied.step(action)
        assert_same_game(copied, env, f"ply {plies} after the round trip")
    env.reset()
    copied.reset()
    assert_same_game(copied, env, "reset")


def test_a_pickled_env_keeps_its_place_in_the_call_order(monkeypatch):
    """env() pickled before reset still refuses what OrderEnforcingWrapper refuses; pickled
    after the game, it is over; pickled with a window, it renders the same frame."""
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    fresh = pickle.loads(pickle.dumps(chess_v6.env()))
    with pytest.raises(AttributeError, match="agents cannot be accessed before reset"):
        fresh.agents  # noqa: B018
    with pytest.raises(AssertionError, match="before step"):
        fresh.step(0)
    fresh.reset()
    assert fresh.agents == ["player_0", "player_1"]

    over = chess_v6.env()
    over.reset()
    over.step(0)  # illegal: the game ends
    over.step(None)
    copied = pickle.loads(pickle.dumps(over))
    assert copied.terminations == over.terminations and copied.rewards == over.rewards
    copied.step(None)
    assert copied.agents == [] and over.agents != []

    shown = chess_v6.env(render_mode="rgb_array")
    shown.reset()
    shown.step(2421)
    frame = shown.render()
    copied = pickle.loads(pickle.dumps(shown))
    assert copied.screen is None and np.array_equal(copied.render(), frame)
    shown.close()
    copied.close()


def test_seed_test_passes():
    seed_test(chess_v6.env, num_cycles=50)
