"""``Args.norm_each_step`` normalises as CleanRL's Gymnasium wrappers do: each step's reward
scale is Gymnasium's vector ``NormalizeReward``'s (NEXT_STEP's reset steps skipped), each
step's observations update Gymnasium's running statistics before they are normalised and kept
so in the rollout, and the statistics are saved with the policy and frozen in evaluations."""

from __future__ import annotations

import math
from typing import ClassVar

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.wrappers.utils import RunningMeanStd
from gymnasium.wrappers.vector import NormalizeReward

from envfleet.train import checkpoint, ppo
from envfleet.train.bookkeeping import Bookkeeping, Clock, RewardScaler


class ScriptedRewards(gymnasium.vector.VectorEnv):
    """A NEXT_STEP batch whose step t gives the scripted rewards and episode ends; the step
    after an env's end is its reset step (reward 0, no end), as envfleet's envs step."""

    metadata: ClassVar[dict] = {"autoreset_mode": gymnasium.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray):
        self.num_envs = rewards.shape[1]
        self.single_observation_space = spaces.Box(-1, 1, (1,))
        self.single_action_space = spaces.Box(-1, 1, (1,))
        self.observation_space = spaces.Box(-1, 1, (self.num_envs, 1))
        self.action_space = spaces.Box(-1, 1, (self.num_envs, 1))
        self.script = (rewards, terminated, truncated)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros((self.num_envs, 1), np.float32), {}

    def step(self, actions):
        rewards, terminated, truncated = (a[self.t] for a in self.script)
        self.t += 1
        return np.zeros((self.num_envs, 1), np.float32), rewards, terminated, truncated, {}


def scripted_episodes(steps: int, num_envs: int, seed: int = 0):
    """Rewards, terminated, truncated and valid (not a reset step) arrays for a NEXT_STEP
    batch with a few terminations and truncations (a reset step has reward 0, no end)."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(1.0, 3.0, (steps, num_envs))
    terminated = rng.random((steps, num_envs)) < 0.05
    truncated = ~terminated & (rng.random((steps, num_envs)) < 0.05)
    valid = np.ones((steps, num_envs), bool)
    for t in range(1, steps):
        valid[t] = ~(terminated[t - 1] | truncated[t - 1])
        rewards[t, ~valid[t]], terminated[t, ~valid[t]], truncated[t, ~valid[t]] = 0, 0, 0
    return rewards, terminated, truncated, valid


def test_each_steps_reward_scale_is_gymnasiums_normalize_reward():
    """The same scaled rewards as Gymnasium's vector NormalizeReward on a NEXT_STEP batch
    (discounted across truncations, restarted at a termination, reset steps skipped), folded
    in over two rollouts."""
    rewards, terminated, truncated, valid = scripted_episodes(300, 4)
    theirs = NormalizeReward(ScriptedRewards(rewards, terminated, truncated), gamma=0.99)
    theirs.reset()
    expected = np.stack([theirs.step(np.zeros((4, 1)))[1] for _ in range(300)])
    scaler = RewardScaler(4, 0.99)
    scales = np.concatenate([scaler.observe_each_step(rewards[part], terminated[part],
                                                      valid[part])
                             for part in (slice(0, 128), slice(128, 300))])
    # (Gymnasium sums the discounted returns in float32, we in float64)
    np.testing.assert_allclose(rewards * scales, expected, rtol=1e-6, atol=1e-6)


def test_bookkeeping_scales_each_step_and_counts_raw_returns():
    """With ``norm_each_step`` the bookkeeping gives a scale per step (a tensor for
    ``update``) and still counts the episodes' raw returns."""
    args = ppo.Args(num_envs=2, num_steps=3, norm_reward=True, norm_each_step=True)
    books = Bookkeeping.new(args)
    buf = ppo.Rollout(3, 2, (1,), (1,), torch.float32, None, torch.device("cpu"))
    buf.rewards.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    buf.ended[1, 0] = buf.terminated[1, 0] = True
    buf.valid[2, 0] = False  # env 0's reset step
    scales = books.observe(buf)
    assert isinstance(scales, torch.Tensor) and scales.shape == (3, 2)
    assert list(books.recent) == [4.0]  # env 0's episode: 1 + 3, unscaled
    advantages = ppo.compute_advantages(buf, torch.zeros(4, 2), 0.99, 0.95, scales * 100, 10.0)
    assert advantages.abs().max() <= 10.0 * 3  # each reward clipped to +-10


class RecordedObs(gymnasium.vector.VectorWrapper):
    """Keeps a copy of every observation the batch returns (reset and steps)."""

    def __init__(self, env):
        super().__init__(env)
        self.seen: list[np.ndarray] = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.seen.append(np.array(obs))
        return obs, info

    def step(self, actions):
        obs, *rest = self.env.step(actions)
        self.seen.append(np.array(obs))
        return (obs, *rest)


def test_each_steps_observations_are_normalized_as_gymnasiums_wrapper_does():
    """The rollout keeps each step's observations as CleanRL's NormalizeObservation (then
    clipped to +-10) returns them: Gymnasium's running statistics updated with the batch, the
    reset observations too, before it is normalised; the update learns from those inputs."""
    args = ppo.Args(env_id="Pendulum-v1", backend="serial", num_envs=3, num_steps=250,
                    norm_obs=True, norm_reward=True, norm_each_step=True)
    env = RecordedObs(gymnasium.make_vec("Pendulum-v1", 3, vectorization_mode="sync"))
    torch.manual_seed(0)
    agent = ppo.build_agent(env, args)
    buf = ppo.make_rollout(args, agent, {}, torch.device("cpu"))
    assert buf.normalized and buf.obs.shape == (251, 3, 3)
    obs, info = env.reset(seed=0)
    agent.observe(torch.as_tensor(obs))  # what ppo.train does after its reset
    bounds = ppo.box_bounds(env.single_action_space, torch.device("cpu"))
    ppo.collect(env, agent, buf, obs, info, Clock(), bounds, False)
    stats = RunningMeanStd(shape=(3,))
    expected = []
    for batch in env.seen:  # 250 steps: a truncation at 200, its reset at step 201
        stats.update(batch)
        expected.append(np.clip((batch - stats.mean) / np.sqrt(stats.var + 1e-8), -10, 10))
    np.testing.assert_allclose(buf.obs.numpy(), np.stack(expected), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(agent.obs_rms.mean.numpy(), stats.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.obs_rms.var.numpy(), stats.var, rtol=1e-4)
    assert buf.ended[199].all() and not buf.valid[200].any()
    frozen = agent.obs_rms.mean.clone()
    books = Bookkeeping.new(args)
    stats_out = ppo.update(agent, ppo.make_optimizer(agent, args), buf, args, books.observe(buf),
                           torch.Generator().manual_seed(0))
    assert math.isfinite(stats_out["pg_loss"])
    torch.testing.assert_close(agent.obs_rms.mean, frozen)  # counted once, when stepped
    env.close()


@pytest.mark.parametrize("each_step", [False, True])
def test_statistics_are_saved_with_the_policy_and_frozen_in_evaluation(each_step, tmp_path):
    """The observation statistics travel in the checkpoint; the evaluations (during training
    and of a loaded policy) use them without updating them."""
    args = ppo.Args(env_id="Pendulum-v1", num_envs=2, num_steps=64, total_steps=256,
                    norm_obs=True, norm_reward=True, norm_each_step=each_step, eval_every=0,
                    eval_episodes=2, ideal_every=0)
    agent, summary = ppo.train(args)
    assert summary.total_steps == 256
    stats = {k: v.clone() for k, v in agent.obs_rms.state_dict().items()}
    assert stats["count"] > 256  # the steps counted (and, each step, the reset ones)
    path = tmp_path / "policy.pt"
    checkpoint.save(agent, args, str(path))
    env = ppo.make_envs(args, 2, 0)
    loaded, _ = checkpoint.load(str(path), env)
    for key, value in loaded.obs_rms.state_dict().items():
        torch.testing.assert_close(value, stats[key])
    from envfleet.train.evaluation import evaluate

    evaluate(env, loaded, 0, torch.device("cpu"), False,
             ppo.box_bounds(env.single_action_space, torch.device("cpu")))
    for key, value in loaded.obs_rms.state_dict().items():
        torch.testing.assert_close(value, stats[key])
    env.close()
