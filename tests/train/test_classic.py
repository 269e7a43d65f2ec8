"""``envfleet train`` on the native classic-control envs (numba): Acrobot-v1 (categorical) and
Pendulum-v1 (Gaussian), each for a tiny budget: their presets, finite losses, a saved policy."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from envfleet.cli import main
from envfleet.train import checkpoint, evaluation, ppo
from envfleet.train.presets import preset

TINY = ["--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "2",
        "--total-steps", "256", "--eval-every", "128", "--eval-episodes", "2", "--quiet"]


@pytest.mark.parametrize(("env_id", "num_envs", "continuous"), [
    ("Acrobot-v1", 16, False), ("Pendulum-v1", 4, True)])
def test_train_on_numba_with_the_preset(env_id, num_envs, continuous, tmp_path, capsys):
    out, policy = tmp_path / "run.json", tmp_path / "policy.pt"
    assert main(["train", env_id, *TINY, "--json", str(out), "--save", str(policy)]) == 0
    summary = json.loads(out.read_text())
    assert summary["backend"] == "numba" and summary["num_envs"] == num_envs
    assert summary["total_steps"] == 256  # whole rollouts (Acrobot-v1's shrunk to 16 steps)
    assert math.isfinite(summary["final_eval_return"]) and summary["evaluations"]
    capsys.readouterr()
    assert main(["eval", env_id, "--load", str(policy), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out
    saved = checkpoint.read_checkpoint(str(policy))
    assert ("actor_logstd" in saved["state_dict"]) == continuous


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_losses_are_finite(env_id):
    settings = {**preset(env_id), "env_id": env_id, "backend": "numba", "num_steps": 32,
                "num_minibatches": 2, "update_epochs": 2, "eval_every": 0, "eval_episodes": 2}
    settings["total_steps"] = 2 * settings["num_envs"] * 32
    stats: list[dict[str, float]] = []
    agent, summary = ppo.train(ppo.Args(**settings), lambda p: stats.append(p.stats))
    assert len(stats) == 2
    for s in stats:
        for key in ("pg_loss", "v_loss", "approx_kl", "clipfrac"):
            assert math.isfinite(s[key]), (key, s)
    assert all(p.isfinite().all() for p in agent.parameters())
    assert math.isfinite(summary.final_eval_return)


def test_presets_are_rl_zoos():
    acrobot, pendulum = preset("Acrobot-v1"), preset("Pendulum-v1")
    # rl-zoo's hyperparams/ppo.yml (SB3's defaults for what it leaves out: batch 64, lr 3e-4)
    assert (acrobot["num_envs"], acrobot["num_steps"], acrobot["update_epochs"],
            acrobot["gamma"], acrobot["gae_lambda"], acrobot["ent_coef"],
            acrobot["learning_rate"]) == (16, 256, 4, 0.99, 0.94, 0.0, 3e-4)
    assert acrobot["num_envs"] * acrobot["num_steps"] // acrobot["num_minibatches"] == 64
    assert acrobot["norm_obs"] and acrobot["target_return"] == -100
    assert (pendulum["num_envs"], pendulum["num_steps"], pendulum["update_epochs"],
            pendulum["gamma"], pendulum["gae_lambda"], pendulum["ent_coef"],
            pendulum["learning_rate"]) == (4, 1024, 10, 0.9, 0.95, 0.0, 1e-3)
    assert pendulum["num_envs"] * pendulum["num_steps"] // pendulum["num_minibatches"] == 64
    mcc = preset("MountainCarContinuous-v0")  # zoo's, but gSDE and its batch shape
    assert (mcc["gamma"], mcc["gae_lambda"], mcc["learning_rate"], mcc["ent_coef"],
            mcc["clip_coef"], mcc["update_epochs"], mcc["max_grad_norm"], mcc["vf_coef"]) == (
        0.9999, 0.9, 7.77e-5, 0.00429, 0.1, 10, 5.0, 0.19)


def test_best_total_bounds_what_episodes_can_still_reach():
    totals, done = np.array([-50.0, -120.0, -30.0]), np.array([True, False, False])
    assert evaluation.best_total(totals, done, None, None) == np.inf
    assert evaluation.best_total(totals, done, 0.0, None) == -50.0
    # no step rewards more than 0: unfinished episodes end no higher than where they are
    assert evaluation.best_total(totals, done, None, 0.0) == -200.0
    assert evaluation.best_total(totals, done, -100.0, 0.0) == -50.0 - 120.0 - 100.0
    assert evaluation.best_total(totals, done, None, 1.0) == np.inf


def test_a_failing_acrobot_evaluation_stops_early():
    import envfleet

    env = envfleet.make("Acrobot-v1", 20, backend="numba", num_threads=1)
    agent = ppo.Agent(env.single_observation_space, env.single_action_space)
    with torch.no_grad():  # always torque 0: never swings up, every episode runs to 500 steps
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 50.0, 0.0]))
    full = ppo.evaluate(env, agent, 0, torch.device("cpu"), False)
    assert full.complete and full.mean_return == -500.0
    early = ppo.evaluate(env, agent, 0, torch.device("cpu"), False, target=-100.0,
                         max_step_reward=0.0)
    assert not early.complete and early.mean_return == -101.0  # stopped after 101 steps
    env.close()


class _EndsAtSteps:
    """Two envs paying 1 a step whose first episodes end after 1 and 3 steps."""

    num_envs = 2

    def reset(self, seed=None):
        self.t = 0
        return np.zeros((2, 1), np.float32), {}

    def step(self, action):
        self.t += 1
        return (np.zeros((2, 1), np.float32), np.ones(2), np.array([self.t == 1, self.t == 3]),
                np.zeros(2, bool), {})


class _ZeroAgent:
    def features(self, x):
        return x

    def greedy(self, x, mask):
        return torch.zeros(len(x), dtype=torch.int64)


def test_an_evaluation_whose_last_episode_ends_below_the_target_is_complete():
    """Every episode was played: the mean (2) is a true one, not a stop once out of reach."""
    result = ppo.evaluate(_EndsAtSteps(), _ZeroAgent(), 0, torch.device("cpu"), False,
                          target=10.0, max_step_reward=1.0)
    assert result.complete and result.episodes == 2 and result.mean_return == 2.0
    assert result.returns == [1.0, 3.0]


def test_an_evaluation_stopped_below_the_target_is_shown_so_and_the_final_one_plays_out(
        tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["train", "Acrobot-v1", *[a for a in TINY if a != "--quiet"],
                 "--json", str(out)]) == 0
    log = capsys.readouterr().out
    # an untrained policy: the evaluation stopped once -100 was out of reach
    assert re.search(r"eval +<-100 \|", log)
    summary = json.loads(out.read_text())
    assert not summary["evaluations"][0]["complete"]
    # the final evaluation plays every episode out: a true mean, not a partial one
    assert summary["final_eval"]["episodes"] == 2 == len(summary["final_eval"]["returns"])
    assert summary["final_eval_return"] == np.mean(summary["final_eval"]["returns"])
    assert f"final greedy eval {summary['final_eval_return']:.1f} over 2 episodes" in log
