"""``envfleet.sb3``: the Stable-Baselines3 ``VecEnv`` facade. Conformance against the wrapped
env's SAME_STEP info and against SB3's own ``DummyVecEnv`` (over Gymnasium's SyncVectorEnv and
envfleet's executors); SB3's checker and wrappers; PPO and
DQN smoke runs; seeds, options, attributes, action masks; bad input."""

from __future__ import annotations

from contextlib import closing
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

import envfleet
from tests.reference import as_numpy

pytest.importorskip("stable_baselines3")
from stable_baselines3 import DQN, PPO
from stable_baselines3.common import env_checker
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecCheckNan,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)

from envfleet.sb3 import SB3VecEnv, to_sb3

N, LIMIT, T = 6, 12, 40
SAME_STEP = AutoresetMode.SAME_STEP
BACKENDS = envfleet.available_backends()  # numba, torch; cuda under the simulator in tests


def policy(obs: np.ndarray) -> np.ndarray:
    """Envs 0-1 push right (they terminate); the others balance (they reach the time limit)."""
    a = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    a[:2] = 1
    return a


@pytest.mark.parametrize(("backend", "copy"), [(b, True) for b in BACKENDS] + [("numba", False)])
def test_matches_the_envs_same_step_info(backend: str, copy: bool) -> None:
    """obs, rewards, dones, terminal_observation and TimeLimit.truncated are the underlying
    env's, step for step, through terminations and truncations."""
    kwargs = dict(backend=backend, seed=3, autoreset_mode="SameStep", max_episode_steps=LIMIT)
    vec = to_sb3(envfleet.make("CartPole-v1", N, copy=copy, **kwargs))
    ref = envfleet.make("CartPole-v1", N, **kwargs)
    assert isinstance(vec, VecEnv) and vec.num_envs == N
    assert vec.observation_space == ref.single_observation_space
    assert vec.action_space == ref.single_action_space
    obs = vec.reset()
    assert type(obs) is np.ndarray and np.array_equal(obs, as_numpy(ref.reset()[0]))
    assert vec.reset_infos == [{}] * N
    kept = []  # (terminal_observation as returned, a copy of it): must not change later
    counts = {"terminated": 0, "truncated": 0}
    for _ in range(T):
        actions = policy(obs)
        obs, rewards, dones, infos = vec.step(actions)
        r_obs, r_rew, term, trunc, info = (
            as_numpy(x) if not isinstance(x, dict) else x for x in ref.step(actions))
        assert type(obs) is np.ndarray and obs.dtype == np.float32
        assert type(rewards) is np.ndarray and rewards.dtype == np.float32
        assert dones.dtype == np.bool_ and dones.shape == (N,)
        assert np.array_equal(obs, r_obs) and np.array_equal(rewards, r_rew)
        assert np.array_equal(dones, term | trunc)
        assert isinstance(infos, list) and len(infos) == N
        for i in range(N):
            assert infos[i]["TimeLimit.truncated"] is bool(trunc[i] and not term[i])
            if dones[i]:
                assert as_numpy(info["_final_obs"])[i]
                final = infos[i]["terminal_observation"]
                assert type(final) is np.ndarray
                assert np.array_equal(final, as_numpy(info["final_obs"])[i])
                kept.append((final, final.copy()))
            else:
                assert "terminal_observation" not in infos[i]
        counts["terminated"] += int(term.sum())
        counts["truncated"] += int((trunc & ~term).sum())
    assert counts["terminated"] >= 4 and counts["truncated"] >= 4, counts
    assert all(np.array_equal(a, b) for a, b in kept)
    vec.close()
    ref.close()


def make_cartpole(limit: int = 15):
    return lambda: gym.wrappers.RecordEpisodeStatistics(
        gym.make("CartPole-v1", max_episode_steps=limit))


def without_time(info: dict) -> dict:
    """An info dict minus the wall-clock episode time, which differs between two runs."""
    info = dict(info)
    if "episode" in info:
        info["episode"] = {k: v for k, v in info["episode"].items() if k != "t"}
    return info


@pytest.mark.parametrize("source", ["gymnasium-sync", "serial", "pool"])
def test_matches_dummy_vec_env_on_gymnasium_envs(source: str) -> None:
    """Over Gymnasium's own SyncVectorEnv or an envfleet executor (SAME_STEP), the facade gives
    what SB3's DummyVecEnv gives for the same envs: the step info of an ended env (here
    ``episode``, from ``final_info``) with its terminal observation, and the reset info in
    ``reset_infos``."""
    n = 3
    if source == "gymnasium-sync":
        vec = to_sb3(SyncVectorEnv([make_cartpole()] * n, autoreset_mode=SAME_STEP))
    else:
        vec = to_sb3(make_cartpole(), n, backend=source)
    dummy = DummyVecEnv([make_cartpole()] * n)
    with closing(vec), closing(dummy):  # a pool must not outlive a failed test
        assert vec.seed(11) == dummy.seed(11) == [11, 12, 13]
        assert np.array_equal(vec.reset(), dummy.reset())
        rng = np.random.default_rng(0)
        episodes = 0
        for _ in range(50):
            actions = rng.integers(0, 2, n)
            obs, rewards, dones, infos = vec.step(actions)
            d_obs, d_rewards, d_dones, d_infos = dummy.step(actions)
            assert np.array_equal(obs, d_obs) and np.array_equal(rewards, d_rewards)
            assert np.array_equal(dones, d_dones)
            for info, d_info in zip(infos, d_infos, strict=True):
                assert info.keys() == d_info.keys()
                final = info.pop("terminal_observation", None)
                d_final = d_info.pop("terminal_observation", None)
                assert (final is None and d_final is None) or np.array_equal(final, d_final)
                assert without_time(info) == without_time(d_info)
                episodes += "episode" in info
            assert vec.reset_infos == dummy.reset_infos
        assert episodes >= 6


def test_env_checker_and_vec_env_wrappers() -> None:
    """VecMonitor, VecFrameStack, VecNormalize and VecCheckNan run over the facade."""
    raw = to_sb3("CartPole-v1", N, seed=0, max_episode_steps=LIMIT)
    wrapped = VecCheckNan(VecNormalize(VecFrameStack(VecMonitor(raw), n_stack=2)),
                          raise_exception=True)
    obs = wrapped.reset()
    assert obs.shape == (N, 8)
    lengths = np.zeros(N, dtype=int)
    episodes = 0
    for _ in range(3 * LIMIT):
        obs, _, dones, infos = wrapped.step(np.ones(N, dtype=np.int64))
        assert obs.shape == (N, 8) and np.isfinite(obs).all()
        lengths += 1
        for i in np.flatnonzero(dones):
            assert infos[i]["episode"]["l"] == lengths[i]  # from VecMonitor
            assert infos[i]["terminal_observation"].shape == (8,)  # stacked and normalised
            lengths[i] = 0
            episodes += 1
    assert episodes >= N
    assert wrapped.venv.obs_rms.count > 3 * LIMIT * N  # VecNormalize saw every step
    wrapped.close()


def test_env_checker_accepts_every_row() -> None:
    """SB3's checks of spaces and observations (its check_env itself takes single envs only)
    pass for every row of reset, step and terminal observations."""
    vec = to_sb3("CartPole-v1", N, seed=1, max_episode_steps=LIMIT)
    space = vec.observation_space
    assert not env_checker._check_unsupported_spaces(vec, space, vec.action_space)
    for row in vec.reset():
        env_checker._check_obs(row, space, "reset")
    for _ in range(LIMIT):
        obs, _, dones, infos = vec.step(np.zeros(N, dtype=np.int64))
        for i, row in enumerate(obs):
            env_checker._check_obs(row, space, "step")
            if dones[i]:
                env_checker._check_obs(infos[i]["terminal_observation"], space, "step")
    vec.close()


@pytest.fixture
def one_torch_thread():
    """Tiny MLPs train faster on one torch thread, and far faster when the cores are busy
    (PPO's learn(2048) here: 2.6 s vs 4.5 s with 2 threads; beside two busy processes 7.9 s vs
    19 s; beside a benchmark this test once took 60 s)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_ppo_and_dqn_learn() -> None:
    env = to_sb3(envfleet.make("CartPole-v1", 8, seed=0, autoreset_mode="SameStep"))
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, seed=0)
    model.learn(2048)
    assert model.num_timesteps == 2048
    eval_env = VecMonitor(to_sb3("CartPole-v1", 4, seed=1, max_episode_steps=30))
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=4)
    assert 0 < mean <= 30
    env.close()
    eval_env.close()
    # off-policy: the replay buffer takes next observations from terminal_observation
    env = to_sb3("CartPole-v1", 4, seed=0, max_episode_steps=20)
    dqn = DQN("MlpPolicy", env, learning_starts=64, buffer_size=1000, seed=0)
    dqn.learn(256)
    assert dqn.replay_buffer.size() > 0
    env.close()


def test_seeds_are_used_at_the_next_reset_only() -> None:
    vec = to_sb3("CartPole-v1", N)
    assert vec.seed(5) == [5 + i for i in range(N)]
    first = vec.reset()
    expected, _ = envfleet.make("CartPole-v1", N, autoreset_mode="SameStep").reset(seed=5)
    assert np.array_equal(first, expected)
    assert not np.array_equal(vec.reset(), first)  # no seed now: the episodes go on
    vec.seed(5)
    assert np.array_equal(vec.reset(), first)
    vec.close()


def test_options_reach_the_envs_reset_once() -> None:
    vec = to_sb3(SyncVectorEnv([make_cartpole()] * 3, autoreset_mode=SAME_STEP))
    vec.seed(0)
    vec.set_options({"low": -0.001, "high": 0.001})  # Gymnasium CartPole's reset bounds
    assert np.abs(vec.reset()).max() <= 0.001
    assert np.abs(vec.reset()).max() > 0.001  # options are used once, as in SB3
    vec.set_options([{"low": -0.1}, {}, {}])
    with pytest.raises(ValueError, match="one options dict"):
        vec.reset()
    vec.close()
    native = to_sb3("CartPole-v1", 2)
    native.set_options({"bogus": 1})
    with pytest.raises(ValueError, match="unknown reset options"):  # the env's own error
        native.reset()


def test_attributes_and_methods_of_a_native_batch() -> None:
    vec = to_sb3("CartPole-v1", N)
    # native envs draw from their state on demand: always rgb_array
    assert vec.render_mode == "rgb_array" and vec.get_attr("render_mode") == ["rgb_array"] * N
    assert vec.get_attr("backend", indices=[1, 3]) == ["numba", "numba"]
    assert vec.get_attr("num_envs", indices=2) == [N]
    assert not vec.has_attr("no_such_attribute")
    vec.set_attr("note", 7)
    assert vec.get_attr("note") == [7] * N
    with pytest.raises(ValueError, match="one batch object"):
        vec.set_attr("note", 8, indices=[0])
    assert vec.env_method("__repr__") == [repr(vec.vector_env)] * N
    with pytest.raises(ValueError, match="use indices=None"):
        vec.env_method("__repr__", indices=[0])
    with pytest.raises(AttributeError, match="action_masks"):  # CartPole has no masks
        vec.env_method("action_masks")
    with pytest.raises(IndexError):
        vec.get_attr("backend", indices=[N])
    assert vec.env_is_wrapped(Monitor) == [False] * N
    assert vec.env_is_wrapped(Monitor, indices=[0]) == [False]
    vec.close()


def test_attributes_and_methods_of_sub_envs() -> None:
    vec = to_sb3(SyncVectorEnv([make_cartpole()] * 3, autoreset_mode=SAME_STEP))
    assert [s.id for s in vec.get_attr("spec", indices=[0, 2])] == ["CartPole-v1"] * 2
    vec.set_attr("note", 0)
    vec.set_attr("note", 5, indices=[1])
    assert vec.get_attr("note") == [0, 5, 0]
    assert vec.env_method("get_wrapper_attr", "note", indices=[1, 2]) == [5, 0]
    vec.close()


class MaskedCounter(VectorEnv):
    """A SAME_STEP vector env with action masks: env i counts its steps and ends after
    ``length + i`` of them; its legal actions follow the count."""

    metadata: ClassVar[dict] = {"autoreset_mode": SAME_STEP}

    def __init__(self, num_envs: int = 3, length: int = 2) -> None:
        self.num_envs, self.length = num_envs, length
        self.single_observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.count = np.zeros(num_envs, dtype=np.int64)

    def masks(self) -> np.ndarray:
        return (self.count[:, None] + np.arange(3)) % 3 != 0

    def obs(self) -> np.ndarray:
        return self.count[:, None].astype(np.float32)

    def reset(self, *, seed=None, options=None):
        self.count[:] = 0
        return self.obs(), {"action_mask": self.masks(), "_action_mask": np.ones(3, bool)}

    def step(self, actions):
        assert actions.shape == (self.num_envs,)
        self.count += 1
        ended = self.count >= self.length + np.arange(self.num_envs)
        info = {}
        if ended.any():
            info = {"final_obs": self.obs(), "_final_obs": ended,
                    "final_info": {"action_mask": self.masks(), "_action_mask": ended},
                    "_final_info": ended}
            self.count[ended] = 0
        # a partial mask: env 0's row is not reported (the facade keeps its last one)
        present = np.arange(self.num_envs) > 0
        info |= {"action_mask": self.masks(), "_action_mask": present}
        zeros = np.zeros(self.num_envs, dtype=bool)
        return self.obs(), np.ones(self.num_envs), ended, zeros, info


def test_action_masks_come_from_the_batched_info() -> None:
    env = MaskedCounter()
    vec = to_sb3(env)
    vec.reset()
    assert vec.reset_infos[1]["action_mask"].tolist() == [False, True, True]
    stacked = np.stack(vec.env_method("action_masks"))  # what sb3-contrib's MaskablePPO does
    assert np.array_equal(stacked, env.masks())
    first_rows = vec.env_method("action_masks")
    assert all(callable(f) for f in vec.get_attr("action_masks"))  # is_masking_supported
    env0 = env.masks()[0]
    ends = np.zeros(3, dtype=int)
    for _ in range(5):
        obs, _, dones, infos = vec.step(np.zeros(3, dtype=np.int64))
        masks = vec.env_method("action_masks")
        assert np.array_equal(masks[0], env0)  # env 0 never reported again: its last row
        assert np.array_equal(np.stack(masks[1:]), env.masks()[1:])
        assert [m.tolist() for m in vec.env_method("action_masks", indices=[2])] == \
            [env.masks()[2].tolist()]
        assert np.array_equal(vec.get_attr("action_masks", indices=1)[0](), env.masks()[1])
        for i in np.flatnonzero(dones):
            # the step info of the ended env (its final mask), its final obs; reset info apart
            length = env.length + i
            assert infos[i]["terminal_observation"].tolist() == [length]
            assert np.array_equal(infos[i]["action_mask"], (length + np.arange(3)) % 3 != 0)
            if i > 0:
                assert np.array_equal(vec.reset_infos[i]["action_mask"], [False, True, True])
        assert obs[:, 0].tolist() == env.count.tolist()
        ends += dones
    assert ends.tolist() == [2, 1, 1]  # env i ends every 2 + i steps
    assert np.array_equal(np.stack(first_rows), np.stack([env0, *first_rows[1:]]))


def test_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(TypeError, match=r"single gymnasium\.Env"):
        to_sb3(gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="already a Stable-Baselines3 VecEnv"):
        to_sb3(DummyVecEnv([make_cartpole()]))
    with pytest.raises(TypeError, match="VectorEnv, an env id or env factories"):
        to_sb3(42)
    with pytest.raises(TypeError, match="needs num_envs"):
        to_sb3("CartPole-v1")
    native = envfleet.make("CartPole-v1", 2, autoreset_mode="SameStep")
    with pytest.raises(TypeError, match="only when to_sb3 builds the env"):
        to_sb3(native, 2)
    for mode in ("NextStep", "Disabled"):
        env = envfleet.make("CartPole-v1", 2, autoreset_mode=mode)
        with pytest.raises(ValueError, match=f"{mode} autoreset mode.*autoreset_mode='SameStep'"):
            to_sb3(env)
        with pytest.raises(ValueError, match="SAME_STEP"):
            SB3VecEnv(env)
    with pytest.raises(ValueError, match="SAME_STEP mode"):
        to_sb3("CartPole-v1", 2, autoreset_mode="NextStep")
    with pytest.raises(ValueError, match="unknown env id"):  # make()'s own errors pass through
        to_sb3("CartPol-v1", 2)


def test_bad_actions_are_refused_by_the_env() -> None:
    vec = to_sb3("CartPole-v1", 4, seed=0)
    with pytest.raises(RuntimeError, match="before step_wait"):
        vec.step_wait()
    obs = vec.reset()
    with pytest.raises(ValueError, match=r"actions must have shape \(4,\)"):
        vec.step(np.zeros((3,), dtype=np.int64))
    with pytest.raises(ValueError, match="invalid action for env 2"):
        vec.step(np.array([0, 1, 5, 0]))
    with pytest.raises(ValueError, match="must be integers"):
        vec.step(np.zeros(4, dtype=np.float32))
    ref = envfleet.make("CartPole-v1", 4, seed=0, autoreset_mode="SameStep")
    assert np.array_equal(obs, ref.reset()[0])
    # a refused step moved nothing; a plain list of actions works too
    assert np.array_equal(vec.step([0, 1, 1, 0])[0], ref.step(np.array([0, 1, 1, 0]))[0])
    vec.close()
