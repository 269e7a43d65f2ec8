"""``envfleet train`` on Gymnasium's MuJoCo v5 ids: CleanRL's ``ppo_continuous_action``
presets run on envfleet's MuJoCo engine with tiny budgets, save their observation statistics
with the policy, and ``envfleet eval`` plays it."""

from __future__ import annotations

import json

import pytest
import torch

from envfleet.cli import main
from envfleet.mujoco import MujocoVectorEnv
from envfleet.train import checkpoint, envs, ppo, presets

pytest.importorskip("mujoco")


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5"])
def test_presets_are_cleanrls_ppo_continuous_action(env_id):
    settings = presets.preset(env_id)
    assert settings | {"num_envs": 1, "num_steps": 2048, "num_minibatches": 32,
                       "update_epochs": 10, "learning_rate": 3e-4, "gamma": 0.99,
                       "gae_lambda": 0.95, "clip_coef": 0.2, "clip_vloss": True,
                       "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5,
                       "norm_obs": True, "norm_reward": True, "norm_each_step": True,
                       "total_steps": 1_000_000} == settings
    args = ppo.Args(**{k: v for k, v in settings.items() if k != "env_id"})
    assert args.anneal_lr and args.norm_adv and args.hidden_sizes == (64, 64)
    assert args.activation == "tanh" and args.log_std_init == 0.0


def test_mujoco_ids_train_on_the_mujoco_engine():
    assert presets.resolve_backend("HalfCheetah-v5", "auto") == "auto"
    args = ppo.Args(env_id="Hopper-v5", num_envs=1, env_kwargs={"num_threads": 1})
    env = envs.make_envs(args, 1, 0)
    assert isinstance(env, MujocoVectorEnv)
    env.close()


def test_train_save_then_eval(tmp_path, capsys):
    out, policy = tmp_path / "run.json", tmp_path / "policy.pt"
    assert main(["train", "Hopper-v5", "--total-steps", "512", "--eval-episodes", "2",
                 "--quiet", "--no-ideal", "--json", str(out), "--save", str(policy)]) == 0
    summary = json.loads(out.read_text())
    assert summary["total_steps"] == 512 and summary["sps_env"] > 0
    saved = checkpoint.read_checkpoint(str(policy))
    assert saved["args"]["norm_each_step"] is True
    count = saved["state_dict"]["obs_rms.count"]
    assert count >= 513  # the reset observation and every step's
    assert torch.isfinite(saved["state_dict"]["obs_rms.var"]).all()
    capsys.readouterr()
    assert main(["eval", "Hopper-v5", "--load", str(policy), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out
