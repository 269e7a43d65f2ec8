"""Action masking: illegal actions are never sampled, never chosen greedily, carry no
probability; the whole train() path on an executor with ``info["action_mask"]``."""

from __future__ import annotations

import numpy as np
import torch

import envfleet
from envfleet.train import ppo
from tests.train.envs import MASKED_TOY_ID, MaskedToyEnv


def test_sampling_and_greedy_never_pick_illegal_actions():
    torch.manual_seed(0)
    env = envfleet.make(MASKED_TOY_ID, 4, backend="serial", seed=0)
    agent = ppo.Agent(env.single_observation_space, env.single_action_space)
    with torch.no_grad():  # make an action the policy would always pick, were it legal
        agent.actor[-1].bias.copy_(torch.tensor([50.0, 0, 0, 0, 0, 0]))
    masks = torch.rand(5000, 6) < 0.3
    masks[torch.arange(5000), torch.randint(0, 6, (5000,))] = True
    x = torch.randn(5000, 6)
    actions = agent.sample(x, masks)
    assert masks[torch.arange(5000), actions].all()
    assert masks[torch.arange(5000), agent.greedy(x, masks)].all()
    # illegal actions have probability 0 and the entropy stays finite
    logp, entropy, _ = agent.get_action_and_value(x, actions, masks)
    all_logp = agent.masked_logits(x, masks).log_softmax(-1)
    assert (all_logp.exp()[~masks] == 0).all()
    assert torch.isfinite(logp).all() and torch.isfinite(entropy).all()
    env.close()


def test_training_on_a_masked_env_never_steps_an_illegal_action():
    MaskedToyEnv.illegal_actions = 0
    args = ppo.Args(env_id=MASKED_TOY_ID, backend="serial", num_envs=4, num_steps=16,
                    total_steps=2048, eval_every=1024, eval_episodes=8, seed=3,
                    learning_rate=3e-3)
    _agent, summary = ppo.train(args)  # the env raises on an illegal action
    assert MaskedToyEnv.illegal_actions == 0
    assert summary.total_steps == 2048
    assert len(summary.evaluations) >= 2


def test_gymnasiums_taxi_int8_action_masks_and_discrete_observations():
    # Taxi-v4: Discrete(500) observations (one-hot) and info["action_mask"] as int8 0/1
    args = ppo.Args(env_id="Taxi-v4", backend="serial", num_envs=2, num_steps=16,
                    total_steps=64, eval_every=0, eval_episodes=2)
    agent, summary = ppo.train(args)
    assert summary.total_steps == 64 and agent.actor[0].in_features == 500
    mask = ppo.action_mask({"action_mask": np.array([[1, 0, 1]], np.int8)}, torch.device("cpu"))
    assert mask.dtype == torch.bool and mask.tolist() == [[True, False, True]]


def test_legal_logits_is_the_masked_policy():
    # Args.legal_logits: the head works on the legal actions' logits only; the policy (log-probs,
    # entropy, greedy and sampled actions, gradients) is the masked full head's
    from gymnasium import spaces

    ids, legal = ppo.legal_actions(torch.tensor([[False, True, False, True],
                                                 [True, False, False, False]]))
    assert ids.tolist() == [[1, 3], [0, 0]] and legal.tolist() == [[True, True], [True, False]]

    torch.manual_seed(0)
    agent = ppo.Agent(spaces.Box(-1.0, 1.0, (12,)), spaces.Discrete(400), (32,))
    with torch.no_grad():  # logits far from uniform
        agent.actor[-1].weight.normal_()
        agent.actor[-1].bias.normal_()
    masks = torch.rand(500, 400) < 0.05
    masks[torch.arange(500), torch.randint(0, 400, (500,))] = True
    masks[0] = False
    masks[0, 399] = True  # one legal action: the last id
    x = torch.randn(500, 12)
    actions = agent.sample(x, masks)
    results = []
    for legal_only in (False, True):
        agent.legal_logits = legal_only
        agent.zero_grad()
        logp, entropy, _ = agent.get_action_and_value(x, actions, masks)
        (logp.sum() + entropy.sum()).backward()
        grads = [p.grad.clone() for p in agent.actor.parameters()]
        results.append((logp.detach(), entropy.detach(), agent.greedy(x, masks), grads))
    (dense_logp, dense_h, dense_greedy, dense_grads), (logp, h, greedy, grads) = results
    torch.testing.assert_close(logp, dense_logp)
    torch.testing.assert_close(h, dense_h)
    assert torch.equal(greedy, dense_greedy) and greedy[0] == 399
    for g, dense_g in zip(grads, dense_grads, strict=True):
        torch.testing.assert_close(g, dense_g, atol=1e-5, rtol=1e-4)
    # sampled actions: legal, and as frequent as the masked head's probabilities say
    row = masks[1:2].expand(20_000, -1)
    sampled = agent.sample(x[1:2].expand(20_000, -1), row)
    probs = agent.masked_logits(x[1:2], masks[1:2]).softmax(-1)[0]
    assert masks[1, sampled].all()
    freq = torch.bincount(sampled, minlength=400).float() / 20_000
    assert (freq - probs).abs().max() < 0.015


def test_chess_preset_trains_with_legal_logits():
    # Chess-v0's preset turns it on, and a checkpoint's agent keeps it
    from envfleet.train.checkpoint import agent_from
    from envfleet.train.presets import PRESETS

    assert PRESETS["Chess-v0"]["legal_logits"] is True
    env = envfleet.make(MASKED_TOY_ID, 2, backend="serial", seed=0)
    agent = ppo.Agent(env.single_observation_space, env.single_action_space)
    saved = {"args": {"env_id": MASKED_TOY_ID, "hidden_sizes": [64, 64], "norm_obs": False,
                      "legal_logits": True}, "state_dict": agent.state_dict()}
    assert agent_from(saved, env).legal_logits
    env.close()
