"""The Gaussian policy (Box actions): log-prob and entropy against torch.distributions.Normal,
sampling unclipped but stepping clipped into the Box, and spaces the trainer refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from envfleet.cli import main
from envfleet.train import envs, ppo
from tests.train.envs import MULTI_DISCRETE_TOY_ID

OBS = spaces.Box(-1, 1, (3,), dtype=np.float32)


def _gaussian_agent(low: float = -2.0, high: float = 2.0, dims: int = 2,
                    log_std: float = 0.0) -> ppo.Agent:
    torch.manual_seed(0)
    agent = ppo.Agent(OBS, spaces.Box(low, high, (dims,), dtype=np.float32))
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.linspace(-1.0, 0.5, dims) + log_std)
        agent.actor[-1].weight.normal_()  # a mean that depends on the state
    return agent


def test_log_prob_and_entropy_are_torch_normals():
    agent = _gaussian_agent()
    x = torch.randn(256, 3)
    actions = torch.randn(256, 2) * 3  # some outside the Box: the log-prob of unclipped samples
    logp, entropy, value = agent.get_action_and_value(x, actions, None)
    reference = torch.distributions.Normal(agent.actor(x), agent.actor_logstd.exp())
    torch.testing.assert_close(logp, reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))
    assert value.shape == (256,)
    # the gradient reaches the state-independent log-std
    logp.sum().backward()
    assert agent.actor_logstd.grad is not None and torch.isfinite(agent.actor_logstd.grad).all()


def test_samples_follow_the_normal_and_greedy_is_its_mean():
    agent = _gaussian_agent()
    x = torch.randn(1, 3).expand(40_000, 3)
    with torch.no_grad():
        samples, mean = agent.sample(x, None), agent.actor(x[:1])[0]
        std = agent.actor_logstd.exp()
        torch.testing.assert_close(agent.greedy(x[:2], None), agent.actor(x[:2]))
    torch.testing.assert_close(samples.mean(0), mean, atol=4 * std.max().item() / 200, rtol=0)
    torch.testing.assert_close(samples.std(0), std, atol=0.02, rtol=0.02)


def test_log_std_init_sets_the_initial_std():
    agent = ppo.Agent(OBS, spaces.Box(-1, 1, (1,), dtype=np.float32), log_std_init=-1.5)
    assert agent.actor_logstd.tolist() == [-1.5]


class RecordingEnv:
    """Records the actions it is stepped with (a one-dimensional Box env for ``collect``)."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.actions = num_envs, []

    def step(self, actions: np.ndarray):
        self.actions.append(np.array(actions))
        n = self.num_envs
        return (np.zeros((n, 3), np.float32), np.zeros(n, np.float32), np.zeros(n, bool),
                np.zeros(n, bool), {})


def test_actions_are_sampled_unclipped_and_stepped_clipped_into_the_box():
    agent = _gaussian_agent(low=-0.5, high=2.0, log_std=math.log(4))  # wide: many outside
    args = ppo.Args(num_envs=8, num_steps=16)
    device = torch.device("cpu")
    buf = ppo.make_rollout(args, agent, {}, device)
    env = RecordingEnv(8)
    bounds = ppo.box_bounds(spaces.Box(-0.5, 2.0, (2,), np.float32), device)
    ppo.collect(env, agent, buf, np.zeros((8, 3), np.float32), {}, ppo.Clock(), bounds, False)
    stepped = np.stack(env.actions)
    stored = buf.actions.numpy()
    assert ((stored < -0.5) | (stored > 2.0)).mean() > 0.3  # the buffer keeps the samples
    np.testing.assert_array_equal(stepped, np.clip(stored, -0.5, 2.0))  # the env gets them
    assert stepped.dtype == np.float32 and stepped.shape == (16, 8, 2)


@pytest.mark.parametrize("action_space", [
    spaces.MultiDiscrete([3, 3]),
    spaces.Box(-1, 1, (2, 2), dtype=np.float32),
    spaces.Box(-1, 1, (2,), dtype=np.int64),
    spaces.Discrete(3, start=1),
    spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))),
])
def test_an_action_space_without_a_policy_is_refused_naming_it(action_space):
    with pytest.raises(envs.UnsupportedSpaceError) as error:
        ppo.Agent(OBS, action_space)
    assert str(action_space) in str(error.value)


def test_an_observation_space_without_a_policy_is_refused_naming_it():
    obs = spaces.Dict({"a": spaces.Box(-1, 1, (2,))})
    with pytest.raises(envs.UnsupportedSpaceError, match="Box, MultiBinary or Discrete obs"):
        ppo.Agent(obs, spaces.Discrete(2))


def test_train_refuses_an_env_with_an_unsupported_space(capsys):
    assert main(["train", MULTI_DISCRETE_TOY_ID, "--backend", "serial", "--num-envs", "2",
                 "--num-steps", "4", "--total-steps", "8", "--eval-every", "0", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert MULTI_DISCRETE_TOY_ID in err and "MultiDiscrete([3 3])" in err
    assert "Traceback" not in err


def test_discrete_observations_are_one_hot():
    agent = ppo.Agent(spaces.Discrete(5, start=2), spaces.Discrete(3))
    x = agent.features(torch.tensor([2.0, 6.0, 4.0]))  # stored as floats in the rollout
    torch.testing.assert_close(x, torch.eye(5)[[0, 4, 2]])
    assert agent.actor(x).shape == (3, 3)
