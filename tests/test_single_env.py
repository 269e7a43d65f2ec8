"""``gymnasium.make("envfleet/<id>")``: one native env as a ``gymnasium.Env``, for every native id,
checked by Gymnasium's env checker and against the reference env (state transplant)."""

from __future__ import annotations

import importlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envfleet
from envfleet.envs import FAMILIES
from envfleet.registry import NAMESPACE_MODULES, NativeEnv, gym_id
from tests.reference import balancing_actions

#: what each native id is made with to pass ``check_env``: its defaults, and rgb_array where
#: the family renders (Chess-v0's single env plays random unmasked actions by its own default)
RGB = {"render_mode": "rgb_array"}
CHECK_KWARGS = {"CartPole-v1": RGB, "Acrobot-v1": RGB, "MountainCar-v0": RGB,
                "Pendulum-v1": RGB, "MountainCarContinuous-v0": RGB, "Chess-v0": {},
                **{f"MinAtar/{game}-v{v}": RGB for game in ("Breakout", "SpaceInvaders", "Freeway",
                                                            "Asterix", "Seaquest")
                   for v in (0, 1)}}


def test_every_native_family_is_covered():
    """Every family envfleet ships (users' and the bench's own registrations aside), with
    rgb_array exactly where it renders."""
    assert set(CHECK_KWARGS) == set(FAMILIES)
    assert {i for i, kw in CHECK_KWARGS.items() if kw} == {
        i for i, spec in FAMILIES.items() if spec.renderer is not None}


@pytest.mark.parametrize("env_id", sorted(CHECK_KWARGS))
def test_gymnasium_make_passes_the_env_checker(env_id):
    env = gym.make(gym_id(env_id), **CHECK_KWARGS[env_id])
    assert isinstance(env.unwrapped, NativeEnv)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*infinity.*")  # CartPole's own Box bounds
        check_env(env.unwrapped)
    if CHECK_KWARGS[env_id]:
        env.reset(seed=0)
        frame = env.render()
        if env_id.startswith("MinAtar/"):  # the reference's rgb_array: float colours, 10 x 10
            assert frame.dtype == np.float64 and frame.shape == (10, 10, 3)
        else:
            assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    env.close()


@pytest.mark.parametrize("env_id", sorted(CHECK_KWARGS))
def test_gymnasium_spec_has_the_reference_ids_solved_bar_and_limit(env_id):
    """``gymnasium.spec("envfleet/<id>")`` carries the reference id's ``reward_threshold`` (what
    Tianshou and rl-zoo call solved) and ``max_episode_steps``; Chess-v0 has no reference."""
    spec = gym.spec(gym_id(env_id))
    reference_id = FAMILIES[env_id].reference_id
    if reference_id.startswith("MinAtar/"):  # minatar.gym's ids, registered when asked
        pytest.importorskip("minatar")
        importlib.import_module(NAMESPACE_MODULES["MinAtar"])
    if not reference_id:
        assert spec.reward_threshold is None and spec.max_episode_steps is None  # max_plies
        return
    reference = gym.spec(reference_id)
    assert spec.reward_threshold == reference.reward_threshold
    assert spec.max_episode_steps == reference.max_episode_steps
    assert gym.make(gym_id(env_id)).spec.reward_threshold == reference.reward_threshold


def test_chess_single_env_illegal_move_loses_as_in_pettingzoo():
    """``gymnasium.make("envfleet/Chess-v0")``: an illegal move ends the game, reward -1 to the
    mover (PettingZoo's chess_v6: TerminateIllegalWrapper, illegal_reward=-1);
    ``illegal_action="raise"`` restores the refusal; the vector API refuses by default."""
    env = gym.make("envfleet/Chess-v0")
    _, info = env.reset(seed=0)
    illegal = int(np.flatnonzero(~info["action_mask"])[0])
    _, reward, terminated, truncated, info = env.step(illegal)
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert env.unwrapped.vector_env.outcome(0) == "illegal_move"
    env.close()
    strict = gym.make("envfleet/Chess-v0", illegal_action="raise")
    strict.reset(seed=0)
    with pytest.raises(ValueError, match=rf"illegal action {illegal} for board 0"):
        strict.step(illegal)
    strict.close()
    for vector in (envfleet.make("Chess-v0", 2),
                   gym.make_vec("envfleet/Chess-v0", 2,
                                vectorization_mode="vector_entry_point")):
        vector.reset(seed=0)
        with pytest.raises(ValueError, match=rf"illegal action {illegal} for board 1"):
            vector.step(np.array([int(vector.random_legal_actions()[0]), illegal]))
        vector.close()


def test_cartpole_steps_as_gymnasium_cartpole_with_its_time_limit():
    """Each step of ``gymnasium.make("envfleet/CartPole-v1")`` equals Gymnasium's CartPole-v1
    stepped from the same state, TimeLimit included (600 steps, as the user asked)."""
    env = gym.make("envfleet/CartPole-v1", max_episode_steps=600)
    reference = gym.make("CartPole-v1", max_episode_steps=600)
    assert env.observation_space == reference.observation_space
    assert env.action_space == reference.action_space
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for episode in range(6):
        obs, _ = env.reset(seed=episode)
        reference.reset(seed=episode)
        reference.unwrapped.state = np.array(env.unwrapped.vector_env.state).T[0].copy()
        noise = 0.01 if episode % 2 == 0 else 0.3  # half balance to the limit, half fall
        for _ in range(700):
            action = int(balancing_actions(obs[None], rng, noise)[0])
            obs, reward, terminated, truncated, info = env.step(action)
            ref_obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(action)
            assert np.array_equal(obs, ref_obs) and obs.dtype == ref_obs.dtype
            assert np.array_equal(env.unwrapped.vector_env.state, np.array(
                reference.unwrapped.state)[:, None])
            assert (reward, terminated, truncated) == (ref_reward, ref_terminated, ref_truncated)
            assert type(reward) is float and info == {}
            if terminated or truncated:
                ends["terminated" if terminated else "truncated"] += 1
                break
    assert ends["terminated"] and ends["truncated"], ends


def test_seeding_matches_the_vector_env_and_sync_vectorization():
    single = gym.make("envfleet/CartPole-v1")
    vector = envfleet.make("CartPole-v1", 3)
    sync = gym.make_vec("envfleet/CartPole-v1", 3, vectorization_mode="sync")
    first, _ = vector.reset(seed=7)
    assert np.array_equal(single.reset(seed=7)[0], first[0])
    assert np.array_equal(sync.reset(seed=7)[0], first)
    for env in (single, vector, sync):
        env.close()


def test_chess_plays_as_python_chess():
    """Random legal games from ``info["action_mask"]``: every position equals python-chess's."""
    chess = pytest.importorskip("chess")
    env = gym.make("envfleet/Chess-v0")
    native = env.unwrapped.vector_env
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    board = chess.Board()
    games = 0
    for _ in range(600):
        legal = np.flatnonzero(info["action_mask"])
        assert sorted(native.action_to_uci(0, a) for a in legal) == sorted(
            m.uci() for m in board.legal_moves)
        action = int(rng.choice(legal))
        board.push_uci(native.action_to_uci(0, action))
        _, reward, terminated, truncated, info = env.step(action)
        assert native.fen(0) == board.fen()
        assert reward == (1.0 if board.is_checkmate() else 0.0)  # to the player who moved
        assert terminated == (board.is_checkmate() or board.is_stalemate()
                              or board.is_insufficient_material()
                              or board.halfmove_clock >= 100 or board.is_repetition(3))
        games += terminated
        if terminated or truncated:
            _, info = env.reset()
            board = chess.Board()
    assert games >= 1


def test_unknown_kwargs_and_backend_options_are_refused():
    with pytest.raises(TypeError, match="CartPole-v1"):
        gym.make("envfleet/CartPole-v1", no_such_param=1)
    with pytest.raises(TypeError, match="backend"):
        gym.make("envfleet/CartPole-v1", backend="torch")


def test_make_vec_keeps_chess_episode_limit_of_its_params():
    """Chess-v0's limit is ``max_plies`` (a step is two plies against the opponent): Gymnasium's
    registry passes no step limit of its own that would override it."""
    env = gym.make_vec("envfleet/Chess-v0", 2, vectorization_mode="vector_entry_point",
                       opponent="random", max_plies=40)
    assert env.unwrapped.engine.max_episode_steps == 20
    env.close()


@pytest.mark.parametrize(("env_id", "action", "words"), [
    ("CartPole-v1", np.array([0, 1]), "action must have shape () for Discrete(2), got shape (2,)"),
    ("CartPole-v1", np.array([1]), "action must have shape () for Discrete(2), got shape (1,)"),
    ("CartPole-v1", 5, "invalid action: 5 is not in Discrete(2) (integers 0..1)"),
    ("CartPole-v1", 1.0, "action for Discrete(2) must be an integer, got dtype float64"),
    ("Pendulum-v1", np.zeros(3), "action must have shape (1,) for Box(-2.0, 2.0, (1,), "
                                 "float32), got shape (3,)"),
    ("Pendulum-v1", np.array([np.nan]), "invalid action: [nan] is not finite (as float32)"),
    ("MinAtar/Breakout-v1", 3, "invalid action: 3 is not in Discrete(3) (integers 0..2)")])
def test_a_wrong_action_is_refused_in_single_env_words(env_id, action, words):
    """``gymnasium.make("envfleet/<id>")`` is one env: its errors name no batch (num_envs=1)
    and no env index (env 0), and a refused action changes nothing."""
    env = gym.make(gym_id(env_id))
    env.reset(seed=0)
    with pytest.raises(ValueError) as error:
        env.step(action)
    assert str(error.value) == words
    assert "num_envs" not in words and "env 0" not in words
    legal = env.action_space.sample()  # the refused one moved nothing: as a fresh env's
    np.testing.assert_array_equal(env.step(legal)[0], _step_fresh(env_id, legal))
    env.close()


def _step_fresh(env_id, action):
    """The observation of a fresh env's first step with ``action`` (seed 0)."""
    env = gym.make(gym_id(env_id))
    env.reset(seed=0)
    obs = env.step(action)[0]
    env.close()
    return obs


def test_a_step_after_the_end_asks_for_reset_in_single_env_words():
    env = gym.make("envfleet/CartPole-v1")
    env.reset(seed=0)
    while not any(env.step(1)[2:4]):
        pass
    with pytest.raises(ValueError, match=r"^the episode has ended \(terminated or truncated\): "
                                         r"call reset\(\) before stepping again$"):
        env.step(1)
    env.reset(seed=1)
    env.step(1)  # a reset starts the next episode
    env.close()
