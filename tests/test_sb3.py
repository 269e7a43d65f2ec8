"""``envfleet.sb3``: the Stable-Baselines3 ``VecEnv`` facade. Conformance against the wrapped
env's SAME_STEP info and against SB3's own ``DummyVecEnv`` (over Gymnasium's SyncVectorEnv and
envfleet's executors); SB3's checker and wrappers; PPO and
DQN smoke runs; seeds, options, attributes, action masks; bad input."""

from __future__ import annotations

import warnings
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
#: numba, torch; cuda under the simulator in tests (slow there: marked so)
BACKENDS = envfleet.available_backends()


def policy(obs: np.ndarray) -> np.ndarray:
    """Envs 0-1 push right (they terminate); the others balance (they reach the time limit)."""
    a = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    a[:2] = 1
    return a


@pytest.mark.parametrize(("backend", "copy"),
                         [pytest.param(b, True, marks=[pytest.mark.slow] if b == "cuda" else [])
                          for b in BACKENDS] + [("numba", False)])
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


class CountedResets(MaskedCounter):
    """MaskedCounter that counts its resets."""

    resets = 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        return super().reset(seed=seed, options=options)


def test_masks_before_the_first_reset_come_from_a_reset_on_demand() -> None:
    """sb3-contrib asks a fresh eval env has_attr("action_masks") before resetting it: the
    facade resets then, and the next reset() is that reset (same observations, no second
    reset), as sb3-contrib's own masked envs, reset when built, would answer."""
    env = CountedResets()
    env.count[:] = 5  # a stale state that a reset clears
    vec = to_sb3(env)
    assert vec.has_attr("action_masks") and env.resets == 1
    assert np.array_equal(np.stack(vec.env_method("action_masks")), env.masks())
    assert vec.reset().tolist() == [[0], [0], [0]] and env.resets == 1  # that reset's
    vec.reset()
    assert env.resets == 2  # later resets reset
    for between in (lambda v: v.seed(0), lambda v: v.set_options({"x": 1}),
                    lambda v: v.step(np.zeros(3, dtype=np.int64))):
        env = CountedResets()
        vec = to_sb3(env)
        assert np.stack(vec.env_method("action_masks")).shape == (3, 3) and env.resets == 1
        between(vec)  # new seeds or options, or a step: the next reset() resets
        vec.reset()
        assert env.resets == 2
    # the reset on demand is the first reset, seeds included: same observations as without it
    vec = to_sb3("CartPole-v1", N, seed=3)
    assert not vec.has_attr("action_masks")  # (CartPole has none; the envs were reset)
    expected, _ = envfleet.make("CartPole-v1", N, seed=3, autoreset_mode="SameStep").reset()
    assert np.array_equal(vec.reset(), expected)
    vec.close()


@pytest.mark.usefixtures("one_torch_thread")
def test_maskable_ppo_evaluates_on_a_fresh_eval_env(tmp_path) -> None:
    """sb3-contrib's MaskablePPO with a MaskableEvalCallback on Chess-v0 runs evaluations (the
    eval env is asked for masks before its first reset)."""
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback

    env = to_sb3("Chess-v0", 2, seed=0, max_episode_steps=6)
    eval_env = to_sb3("Chess-v0", 2, seed=1, max_episode_steps=6)
    callback = MaskableEvalCallback(eval_env, eval_freq=4, n_eval_episodes=2, warn=False,
                                    log_path=str(tmp_path))
    model = MaskablePPO("MlpPolicy", env, n_steps=8, batch_size=16, n_epochs=1, seed=0)
    model.learn(16, callback=callback)
    assert callback.evaluations_timesteps == [8, 16]
    assert [len(lengths) for lengths in callback.evaluations_length] == [2, 2]
    env.close()
    eval_env.close()


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


# --- SB3's own vec-env tests (stable-baselines3 tests/test_vec_envs.py), run on the facade ----


class CustomGymEnv(gym.Env):
    """SB3's test env (test_vec_envs.py): random obs in ``space``, 4-step episodes, a frame."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"]}

    def __init__(self, space: gym.Space, render_mode: str = "rgb_array") -> None:
        self.action_space = space
        self.observation_space = space
        self.current_step = 0
        self.ep_length = 4
        self.render_mode = render_mode
        self.current_options: dict | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.current_step = 0
        self.current_options = options
        self.state = self.observation_space.sample()
        return self.state, {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.state = self.observation_space.sample()
        self.current_step += 1
        return self.state, 0.5, False, self.current_step >= self.ep_length, {}

    def render(self):
        return np.full((4, 4, 3), self.current_step, dtype=np.uint8)

    @staticmethod
    def custom_method(dim_0: int = 1, dim_1: int = 1) -> np.ndarray:
        return np.ones((dim_0, dim_1))


def box_env() -> gym.Env:
    return CustomGymEnv(gym.spaces.Box(low=np.zeros(2), high=np.ones(2)))


def monitored_box_env() -> gym.Env:
    return Monitor(box_env())


#: the facade over each executor, and SB3's own DummyVecEnv (the reference)
SOURCES = ["dummy", "gymnasium-sync", "serial", "subprocess", "pool"]
IN_PROCESS = ("dummy", "gymnasium-sync", "serial")


def vec_env_of(source: str, factories: list) -> VecEnv:
    if source == "dummy":
        return DummyVecEnv(factories)
    if source == "gymnasium-sync":
        return to_sb3(SyncVectorEnv(factories, autoreset_mode=SAME_STEP))
    options = {"num_workers": 2} if source == "pool" else {}
    return to_sb3(factories, len(factories), backend=source, **options)


@pytest.mark.parametrize("source", SOURCES)
def test_sb3_custom_calls(source: str) -> None:
    """SB3's test_vecenv_custom_calls: attributes, methods, indices, per-env options, render;
    on every backend as on DummyVecEnv (executors run methods and set attributes on the envs
    given by ``indices`` only)."""
    n = 3
    with closing(vec_env_of(source, [monitored_box_env] * n)) as vec:
        vec.seed(0)
        frame = vec.render(mode="rgb_array")
        assert np.array_equal(vec.render(), frame) and frame.shape[-1] == 3
        with pytest.warns(UserWarning):
            vec.render(mode="something_else")
        assert not vec.has_attr("dummy")
        vec.set_attr("dummy", 12)
        assert vec.get_attr("dummy") == [12] * n
        assert not vec.has_attr("dummy2")
        vec.env_method("set_wrapper_attr", "dummy2", 2)
        assert vec.get_attr("dummy2") == [2] * n
        results = vec.env_method("custom_method", 1, indices=None, dim_1=2)
        assert all(np.array_equal(r, np.ones((1, 2))) for r in results) and len(results) == n
        for i in range(n):  # a new attribute, one env at a time
            assert vec.set_attr("dummy1", i, indices=i) is None
            assert vec.has_attr("dummy1") == (i == n - 1)
        assert vec.has_attr("dummy1") and vec.get_attr("dummy1") == [0, 1, 2]
        assert vec.get_attr("dummy1", indices=[2, 0]) == [2, 0]
        vec.set_attr("dummy1", 42, indices=None)
        assert vec.get_attr("dummy1") == [42] * n
        vec.reset()
        subset = vec.env_method("custom_method", 1, indices=[0, 2], dim_1=3)
        assert len(subset) == 2 and all(np.array_equal(r, np.ones((1, 3))) for r in subset)
        assert vec.env_method("set_wrapper_attr", "current_step", 12, indices=[0, -1]) \
            == [True, True]
        assert vec.get_attr("current_step") == [12, 0, 12]  # env 1 untouched
        # options: used at the next reset only; one dict for all, or one per env
        assert vec.get_attr("current_options")[0] is None
        vec.set_options({"hello": 1})
        vec.reset()
        assert vec.get_attr("current_options") == [{"hello": 1}] * n
        vec.reset()
        assert vec.get_attr("current_options")[0] is None
        options = [{"other_option": 2}, {"hello": 1}, {"hello": 1}]
        vec.set_options(options)
        vec.reset()
        assert vec.get_attr("current_options") == options


@pytest.mark.parametrize("source", SOURCES)
def test_has_attr_of_a_missing_attribute_is_false(source: str) -> None:
    """sb3-contrib's MaskablePPO asks has_attr("action_masks"): False, not an error."""
    with closing(vec_env_of(source, [box_env] * 2)) as vec:
        assert not vec.has_attr("action_masks")
        assert vec.has_attr("custom_method") and vec.has_attr("current_step")
    native = to_sb3("CartPole-v1", 2)
    assert not native.has_attr("action_masks") and native.has_attr("backend")
    native.close()


@pytest.mark.parametrize("source", SOURCES)
def test_env_is_wrapped_answers_per_env(source: str) -> None:
    """SB3's test_vec_env_is_wrapped: one env with a Monitor, one without; evaluate_policy
    then uses the Monitor's episode returns without warning."""
    with closing(vec_env_of(source, [box_env, monitored_box_env])) as vec:
        assert vec.env_is_wrapped(Monitor) == [False, True]
        assert vec.env_is_wrapped(Monitor, indices=[1]) == [True]
        assert VecFrameStack(vec, n_stack=2).env_is_wrapped(Monitor) == [False, True]
        assert vec.env_is_wrapped(gym.wrappers.TimeLimit) == [False, False]
    with closing(vec_env_of(source, [monitored_box_env] * 2)) as vec:
        model = PPO("MlpPolicy", vec, n_steps=16, batch_size=16, seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "not wrapped with a Monitor" would be a warning
            mean, _ = evaluate_policy(model, vec, n_eval_episodes=2)
        assert mean == pytest.approx(2.0)  # 4 steps of 0.5


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind", ["dict", "tuple"])
def test_dict_and_tuple_spaces_as_sb3_gives_them(source: str, kind: str) -> None:
    """SB3's test_vecenv_dict_spaces / test_vecenv_tuple_spaces: one action per env, as a list
    of dicts or tuples (how SB3 gives them), batched for the vector env."""
    leaves = {
        "discrete": gym.spaces.Discrete(2),
        "multidiscrete": gym.spaces.MultiDiscrete([2, 3]),
        "multibinary": gym.spaces.MultiBinary(3),
        "continuous": gym.spaces.Box(np.zeros(2, np.float32), np.ones(2, np.float32)),
    }
    space = gym.spaces.Dict(leaves) if kind == "dict" else gym.spaces.Tuple(leaves.values())
    n = 3
    with closing(vec_env_of(source, [lambda: CustomGymEnv(space)] * n)) as vec:
        obs = vec.reset()
        dones = np.zeros(n, dtype=bool)
        steps = 0
        while not dones.any():
            actions = [vec.action_space.sample() for _ in range(n)]
            obs, _, dones, _ = vec.step(actions)
            columns = [obs[k] for k in leaves] if kind == "dict" else obs
            for column, sub_space in zip(columns, leaves.values(), strict=True):
                assert len(column) == n and all(sub_space.contains(v) for v in column)
            steps += 1
        assert steps == 4


@pytest.mark.parametrize("source", SOURCES)
def test_get_images_gives_each_envs_frame(source: str) -> None:
    with closing(vec_env_of(source, [box_env] * 2)) as vec:
        vec.reset()
        vec.env_method("set_wrapper_attr", "current_step", 7) if source in IN_PROCESS else \
            vec.set_attr("current_step", 7)
        frames = vec.get_images()
        assert len(frames) == 2 and all(np.array_equal(f, np.full((4, 4, 3), 7)) for f in frames)


def test_import_error_names_the_extra() -> None:
    """Without SB3 installed, importing envfleet.sb3 says which extra to install."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['stable_baselines3'] = None\n"
            "try:\n    import envfleet.sb3\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert 'pip install "envfleet[sb3]"' in out


def test_packed_chess_is_refused_with_the_reason() -> None:
    """Chess-v0's packed masks (bits) are not what MaskablePPO reads: refused when the env is
    native (before anything runs), else at the first masks (Chess-v0 in an executor)."""
    reason = r"masks are bits .*Chess-v0's packed=True.*build it without packed=True for SB3"
    with pytest.raises(ValueError, match=reason):
        to_sb3("Chess-v0", 2, packed=True)
    env = envfleet.make("Chess-v0", 2, autoreset_mode="SameStep", packed=True)
    with pytest.raises(ValueError, match=reason):
        to_sb3(env)
    with pytest.raises(ValueError, match=reason):
        SB3VecEnv(gym.wrappers.vector.RecordEpisodeStatistics(env))
    env.close()
    vec = to_sb3("envfleet/Chess-v0", 2, backend="serial", packed=True)
    with pytest.raises(ValueError, match=reason):
        vec.reset()
    vec.close()
    plain = to_sb3("Chess-v0", 2, seed=0)  # unpacked: one bool per action
    plain.reset()
    assert plain.env_method("action_masks")[0].shape == (4672,)
    plain.close()
