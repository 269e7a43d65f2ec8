"""NEXT_STEP autoreset in the trainer: the reset step is no transition and never enters the
loss; a truncated episode bootstraps from V(final obs); a terminated one does not."""

from __future__ import annotations

import functools

import pytest
import torch

import envfleet
from envfleet.train import ppo
from tests.train.envs import CountingEnv

LENGTH, NUM_ENVS, NUM_STEPS = 3, 2, 10


def _collect(env, args):
    agent = ppo.Agent(env.single_observation_space, env.single_action_space)
    obs, info = env.reset(seed=0)
    buf = ppo.make_rollout(args, agent, info, torch.device("cpu"))
    ppo.collect(env, agent, buf, obs, info, ppo.Clock(), None, False)
    return agent, buf


def test_the_reset_step_never_enters_the_loss():
    env = envfleet.make(functools.partial(CountingEnv, LENGTH), NUM_ENVS, backend="serial")
    args = ppo.Args(num_envs=NUM_ENVS, num_steps=NUM_STEPS, num_minibatches=2,
                    update_epochs=3)
    agent, buf = _collect(env, args)
    # t counts 0, 1, 2, then 3 (the final obs: the episode ended), then the reset step
    t = buf.obs[:NUM_STEPS, 0, 0].tolist()
    assert t == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert buf.valid[:, 0].tolist() == [True, True, True, False] * 2 + [True, True]
    assert (buf.rewards[~buf.valid] == 0).all()

    seen = []
    original = agent.get_action_and_value

    def recording(x, action, mask, **kwargs):
        if torch.is_grad_enabled():  # the minibatch steps (not the no-grad old log-probs)
            seen.append(x.detach().clone())
        return original(x, action, mask, **kwargs)

    agent.get_action_and_value = recording
    optimizer = ppo.make_optimizer(agent, args)
    ppo.update(agent, optimizer, buf, args, 1.0, torch.Generator().manual_seed(0))
    rows = torch.cat(seen)
    transitions = int(buf.valid.sum())
    assert transitions == NUM_ENVS * (NUM_STEPS - 2)
    assert rows.shape[0] == args.update_epochs * transitions
    assert rows[:, 0].max() < LENGTH  # no final obs (t == LENGTH) as the obs of a transition
    env.close()


@pytest.mark.parametrize("truncate", [True, False])
def test_truncation_bootstraps_from_the_final_obs(truncate):
    if truncate:  # never terminates; truncated at LENGTH steps
        env = envfleet.make(functools.partial(CountingEnv, None), 1, backend="serial",
                            max_episode_steps=LENGTH)
    else:
        env = envfleet.make(functools.partial(CountingEnv, LENGTH), 1, backend="serial")
    args = ppo.Args(num_envs=1, num_steps=NUM_STEPS)
    _, buf = _collect(env, args)
    last = LENGTH - 1  # the step on which the first episode ends
    assert bool(buf.ended[last, 0]) and bool(buf.terminated[last, 0]) is not truncate
    assert buf.obs[last + 1, 0, 0] == LENGTH  # NEXT_STEP: the final obs, not a reset obs
    values = 100.0 + buf.obs[:, :, 0]  # V(obs) = 100 + t: V(final obs) = 100 + LENGTH
    gamma = 0.9
    for lam in (0.0, 1.0):  # lambda 1: the reset step's entry must not leak in either
        adv = ppo.compute_advantages(buf, values, gamma, lam)
        bootstrap = gamma * (100.0 + LENGTH) if truncate else 0.0
        expected = 1.0 + bootstrap - (100.0 + last)
        assert adv[last, 0].item() == pytest.approx(expected)
    env.close()
