"""``envfleet train ALE/Breakout-v5``: CleanRL's ppo_atari preset (the Nature CNN, EnvPool's
training options), the CNN learning, evaluations on whole games, and a tiny run end to end."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

import envfleet
from envfleet.cli import main
from envfleet.train import checkpoint, ppo
from envfleet.train.args import evaluation_args
from envfleet.train.nets import ActorCritic
from envfleet.train.presets import PRESETS, args_from, preset

pytest.importorskip("ale_py")
pytest.importorskip("cv2")
ENV = "ALE/Breakout-v5"


def test_preset_is_cleanrls_ppo_atari():
    p = preset(ENV)
    assert (p["num_envs"], p["num_steps"], p["num_minibatches"], p["update_epochs"],
            p["learning_rate"], p["gamma"], p["gae_lambda"], p["clip_coef"], p["ent_coef"],
            p["vf_coef"], p["max_grad_norm"], p["total_steps"]) == (
        8, 128, 4, 4, 2.5e-4, 0.99, 0.95, 0.1, 0.01, 0.5, 0.5, 10_000_000)
    assert p["cnn"] and p["hidden_sizes"] == () and p.get("anneal_lr", True)
    assert p["env_kwargs"] == {"episodic_life": True, "reward_clip": True}


def test_the_cnn_is_natures_and_learns():
    env = envfleet.make(ENV, 2, seed=0)
    args = dataclasses.replace(args_from({**preset(ENV), "env_id": ENV}), num_envs=2,
                               num_steps=8, num_minibatches=2, update_epochs=1)
    agent = ppo.build_agent(env, args)
    assert [tuple(p.shape) for p in agent.network.parameters()] == [
        (32, 4, 8, 8), (32,), (64, 32, 4, 4), (64,), (64, 64, 3, 3), (64,), (512, 3136), (512,)]
    assert agent.actor[0].weight.shape == (4, 512) and agent.critic[0].weight.shape == (1, 512)
    obs, info = env.reset(seed=0)
    buf = ppo.make_rollout(args, agent, info, torch.device("cpu"))
    books = ppo.Bookkeeping.new(args)
    before = [p.detach().clone() for p in agent.network.parameters()]
    ppo.iterate(env, agent, ppo.make_optimizer(agent, args), buf, books, obs, info,
                ppo.Clock(), args=args, generator=torch.Generator().manual_seed(0), bounds=None,
                torch_actions=False)
    # the CNN gets the gradients (its minibatches start from the frames)
    assert all(not torch.equal(a, b) for a, b in zip(before, agent.network.parameters(),
                                                     strict=True))
    env.close()


def test_the_cnn_refuses_flat_observations():
    from gymnasium import spaces

    with pytest.raises(ValueError, match=r"CNN takes \(channels, height, width\) image"):
        ActorCritic(spaces.Box(0, 1, (4,)), spaces.Discrete(2), (), cnn=True)


def test_evaluations_play_whole_unclipped_games():
    args = args_from({**preset(ENV), "env_id": ENV})
    assert evaluation_args(args).env_kwargs == {}
    assert args.env_kwargs == {"episodic_life": True, "reward_clip": True}


def test_train_breakout_tiny_then_load(monkeypatch, tmp_path):
    # games of 400 frames (100 steps): the evaluations of an untrained policy end quickly
    kwargs = {**PRESETS[ENV]["env_kwargs"], "max_num_frames_per_episode": 400}
    monkeypatch.setitem(PRESETS[ENV], "env_kwargs", kwargs)
    out, policy = tmp_path / "run.json", tmp_path / "policy.pt"
    assert main(["train", ENV, "--num-envs", "2", "--num-steps", "32", "--total-steps", "128",
                 "--eval-episodes", "2", "--no-ideal", "--quiet", "--json", str(out),
                 "--save", str(policy)]) == 0
    summary = json.loads(out.read_text())
    assert summary["total_steps"] == 128 and summary["args"]["cnn"] is True
    assert math.isfinite(summary["final_eval_return"]) and summary["sps_env"] > 0
    env = envfleet.make(ENV, 2, seed=0)
    agent, saved = checkpoint.load(str(policy), env)  # the CNN comes back from the file
    assert saved["cnn"] is True and agent.network is not None
    # trained on the engine's stacked frames (backend "auto"; "pool" would be raw RGB frames)
    assert agent.network[0].weight.shape == (32, 4, 8, 8) and saved["backend"] == "auto"
    obs, _ = env.reset()
    assert agent.greedy(agent.features(torch.as_tensor(obs)), None).shape == (2,)
    env.close()
