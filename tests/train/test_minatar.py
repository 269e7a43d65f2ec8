"""``envfleet train`` / ``envfleet eval`` on MinAtar's native games: their presets (the MinAtar
paper's baselines as targets), a tiny run end to end, a video of a game in the reference
colours, and (slow) Breakout trained to the paper's best baseline."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

import envfleet
from envfleet.cli import main
from envfleet.train import ppo
from envfleet.train.play import MIN_VIDEO_SIDE, video_frame
from envfleet.train.presets import preset

GAMES = ["MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1"]
TINY = ["--num-envs", "4", "--num-steps", "16", "--total-steps", "128", "--eval-every", "64",
        "--eval-episodes", "2", "--quiet"]


def test_presets_are_purejaxrls_with_the_papers_targets():
    for env_id, target in zip(GAMES, (17.0, 180.0), strict=True):
        p = preset(env_id)
        assert (p["num_envs"], p["num_steps"], p["num_minibatches"], p["update_epochs"],
                p["learning_rate"], p["gamma"], p["gae_lambda"], p["ent_coef"],
                p["hidden_sizes"], p["activation"]) == (
            64, 128, 8, 4, 5e-3, 0.99, 0.95, 0.01, (64, 64), "relu")
        assert p["target_return"] == target and p["total_steps"] == 5_000_000
        assert p["torch_threads"] == 2  # the update's matmuls on both cores (the env idles)
        # the Gymnasium form of the id gets the same preset
        assert preset("envfleet/" + env_id.replace("/", "-")) == p


@pytest.mark.parametrize("env_id", GAMES)
def test_train_and_eval_a_minatar_game(env_id, tmp_path, capsys):
    out, policy = tmp_path / "run.json", tmp_path / "policy.pt"
    assert main(["train", env_id, *TINY, "--json", str(out), "--save", str(policy)]) == 0
    summary = json.loads(out.read_text())
    assert summary["backend"] == "numba" and summary["total_steps"] == 128
    assert summary["args"]["hidden_sizes"] == [64, 64] and summary["evaluations"]
    assert math.isfinite(summary["final_eval_return"])
    capsys.readouterr()
    assert main(["eval", env_id, "--load", str(policy), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out


def test_eval_video_shows_the_game_in_the_reference_colours_at_a_visible_size(tmp_path, capsys):
    import imageio.v2 as imageio

    env_id, policy, video = GAMES[0], tmp_path / "policy.pt", tmp_path / "game.gif"
    assert main(["train", env_id, *TINY, "--save", str(policy)]) == 0
    assert main(["eval", env_id, "--load", str(policy), "--episodes", "2", "--seed", "3",
                 "--video", str(video)]) == 0
    assert f"video: {video}" in capsys.readouterr().out
    frames = [frame for frame in imageio.get_reader(video)]
    env = envfleet.make(env_id, 1, seed=3)
    env.reset(seed=3)
    reference = np.asarray(env.render()[0])  # (10, 10, 3) floats: the reference's colours
    env.close()
    side = reference.shape[0] * math.ceil(MIN_VIDEO_SIDE / reference.shape[0])
    assert frames[0].shape[:2] == (side, side) >= (MIN_VIDEO_SIDE, MIN_VIDEO_SIDE)
    np.testing.assert_array_equal(frames[0][..., :3], video_frame(reference))
    # each grid cell is a block of one colour: the reference's, as 8-bit RGB
    block = side // reference.shape[0]
    np.testing.assert_array_equal(frames[0][::block, ::block, :3],
                                  np.rint(reference * 255).astype(np.uint8))


def test_video_frame_leaves_large_uint8_frames_alone():
    frame = np.arange(400 * 600 * 3, dtype=np.uint8).reshape(400, 600, 3)
    assert np.array_equal(video_frame(frame), frame)
    assert video_frame(np.ones((10, 20, 3))).shape == (160, 320, 3)


def test_torch_threads_are_at_most_the_usable_cores(monkeypatch):
    """More spinning torch threads than cores would starve the loop: train caps them."""
    import envfleet.machine

    monkeypatch.setattr(envfleet.machine, "usable_cores", lambda: 1)
    before = torch.get_num_threads()
    try:
        ppo.train(ppo.Args(env_id=GAMES[0], num_envs=2, num_steps=8, total_steps=16,
                           eval_every=0, eval_episodes=1, ideal_every=0, torch_threads=2))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads, passive", [(None, False), ("1", True)])
def test_the_cli_lets_torchs_own_threads_spin(threads, passive, monkeypatch, tmp_path):
    """``envfleet train`` asks OpenMP for passive waiting only when torch runs one thread: woken
    per op, the preset's 2 threads ran MinAtar's learner slower than 1."""
    import envfleet.machine

    monkeypatch.setenv("OMP_WAIT_POLICY", "")  # restored (or removed) after the test
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr(envfleet.machine, "usable_cores", lambda: 2)
    flags = [] if threads is None else ["--torch-threads", threads]
    before = torch.get_num_threads()
    try:
        assert main(["train", GAMES[0], *TINY, *flags]) == 0
    finally:
        torch.set_num_threads(before)
    assert (os.environ.get("OMP_WAIT_POLICY") == "PASSIVE") == passive


def test_rows_is_indexing():
    """``ppo.rows``, the update's minibatch gather: the same rows as ``t[index]``."""
    t = torch.arange(24.0).reshape(8, 3)
    index = torch.tensor([5, 0, 7, 5])
    assert torch.equal(ppo.rows(t, index), t[index])
    assert ppo.rows(t, None) is t and ppo.rows(None, index) is None


def test_the_races_sb3_ppo_has_envfleets_settings_on_the_reference_env():
    """``benchmarks/scripts/bench_train.py``'s ``sb3`` contender: SB3 PPO with the preset, one for
    one."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("minatar")
    from stable_baselines3.common.env_util import make_vec_env

    import envfleet.envs.minatar.reference  # noqa: F401 (registers MinAtar/<Game>-vN)
    from benchmarks.scripts import bench_train as bench

    for env_id in GAMES:
        p = preset(env_id)
        race = bench.BENCHES[env_id]
        assert (race.target, race.eval_every, race.zoo_timesteps) == (
            p["target_return"], p["eval_every"], p["total_steps"])
        venv = make_vec_env(env_id, n_envs=bench.ZOO_NUM_ENVS[env_id], seed=1)
        model = bench.same_ppo(env_id, venv, 1)
        assert type(venv.envs[0].unwrapped).__module__ == "minatar.gym"  # the reference
        assert (venv.num_envs, model.n_steps, model.batch_size, model.n_epochs, model.gamma,
                model.gae_lambda, model.ent_coef, model.vf_coef, model.max_grad_norm) == (
            p["num_envs"], p["num_steps"], p["num_envs"] * p["num_steps"] // p["num_minibatches"],
            p["update_epochs"], p["gamma"], p["gae_lambda"], p["ent_coef"], 0.25, 0.5)
        assert model.learning_rate(1.0) == p["learning_rate"] and model.learning_rate(0.5) == (
            p["learning_rate"] / 2)  # annealed linearly, as envfleet's
        layers = [m for m in model.policy.mlp_extractor.policy_net if hasattr(m, "weight")]
        planes = int(np.prod(venv.observation_space.shape))  # 10 x 10 x C, flattened
        assert [tuple(m.weight.shape) for m in layers] == [(64, planes), (64, 64)]
        venv.close()


@pytest.mark.slow
def test_breakout_reaches_the_papers_best_baseline():
    """The preset, seed 1: a greedy 100-episode mean of 17 (AC(lambda)'s, the MinAtar paper's
    best baseline at 5M frames) within 1.5M steps (589,824 measured with the preset's 2 torch
    threads; ~17 s on 2 quiet cores)."""
    settings = {**preset(GAMES[0]), "env_id": GAMES[0], "total_steps": 1_572_864,
                "ideal_every": 0}
    _, summary = ppo.train(ppo.Args(**settings))
    assert summary.solved_at_steps is not None, summary.evaluations
