"""The ideal loop is an upper bound of the same work: it keeps exactly the transitions the
real loop kept, does the same bookkeeping and as many gradient steps (issue: end-to-end /
ideal > 1 must be a bug, not a different amount of work)."""

from __future__ import annotations

import functools

import numpy as np
import torch

import envfleet
from envfleet.train import ppo
from tests.train.envs import CountingEnv

LENGTH, NUM_ENVS, NUM_STEPS = 3, 4, 10


def real_iteration(target_kl: float | None = None):
    """One real rollout + update on an env whose episodes end every LENGTH steps."""
    env = envfleet.make(functools.partial(CountingEnv, LENGTH), NUM_ENVS, backend="serial")
    args = ppo.Args(num_envs=NUM_ENVS, num_steps=NUM_STEPS, num_minibatches=2,
                    update_epochs=4, target_kl=target_kl)
    agent = ppo.Agent(env.single_observation_space, env.single_action_space)
    optimizer = ppo.make_optimizer(agent, args)
    obs, info = env.reset(seed=0)
    buf = ppo.make_rollout(args, agent, info, torch.device("cpu"))
    # two rollouts: the second starts right after episodes ended (its first step is dropped)
    for _ in range(2):
        obs, info = ppo.collect(env, agent, buf, obs, info, ppo.Clock(), None, False)
    stats = ppo.update(agent, optimizer, buf, args, 1.0, torch.Generator().manual_seed(0))
    env.close()
    return args, agent, optimizer, buf, obs, info, stats


def test_ideal_keeps_the_real_transitions_and_gradient_steps():
    args, agent, optimizer, buf, obs, info, stats = real_iteration()
    assert not buf.valid.all()  # reset steps were dropped from the real rollout
    ideal = ppo.IdealLoop(agent, optimizer, args, obs, info, None, False)
    ideal.iterate(buf, int(stats["epochs"]))
    assert torch.equal(ideal.buf.valid, buf.valid)
    assert torch.equal(ideal.buf.ended, buf.ended)
    assert torch.equal(ideal.buf.rewards, buf.rewards)
    assert ideal.last_stats["minibatch_steps"] == stats["minibatch_steps"]
    # the same bookkeeping: the real loop's episodes, counted again
    books = ppo.Bookkeeping.new(args)
    books.observe(buf)
    assert list(ideal.books.recent) == list(books.recent) and len(books.recent) > 0


def test_ideal_repeats_an_update_stopped_early_by_target_kl():
    """target_kl may stop the real update early; the ideal one runs the same epochs."""
    args, agent, optimizer, buf, obs, info, stats = real_iteration(target_kl=-1.0)
    assert stats["epochs"] == 1  # stopped after the first epoch
    ideal = ppo.IdealLoop(agent, optimizer, args, obs, info, None, False)
    ideal.iterate(buf, int(stats["epochs"]))
    assert ideal.last_stats["minibatch_steps"] == stats["minibatch_steps"]


def test_train_reports_the_ideal_median_and_its_spread():
    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                    total_steps=8 * 16 * 4, eval_every=0, ideal_every=2, seed=1)
    _, summary = ppo.train(args)
    low, high = summary.sps_ideal_iqr
    assert summary.ideal_iterations >= ppo.IDEAL_MIN_ITERATIONS
    assert np.isfinite([low, summary.sps_ideal, high]).all()
    assert 0 < low <= summary.sps_ideal <= high
