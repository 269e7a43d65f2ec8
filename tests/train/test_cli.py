"""Smoke runs of every CLI path with tiny budgets (CleanRL's habit), and a short CartPole run
whose return improves."""

from __future__ import annotations

import json

import pytest

from envfleet.cli import main
from envfleet.train import ppo

TINY = ["--total-steps", "512", "--eval-every", "256", "--quiet"]


def test_train_json_save_plot_then_eval(tmp_path, capsys):
    out, policy = tmp_path / "run.json", tmp_path / "policy.pt"
    assert main(["train", "CartPole-v1", *TINY, "--json", str(out), "--save", str(policy)]) == 0
    summary = json.loads(out.read_text())
    for key in ("solved_at_s", "compile_s", "sps_env", "sps_ideal", "sps_end_to_end",
                "total_steps", "final_eval_return", "times", "curve", "evaluations"):
        assert key in summary
    assert summary["total_steps"] == 512
    assert summary["sps_env"] > 0 and summary["sps_ideal"] > 0 and summary["sps_end_to_end"] > 0
    assert out.with_suffix(".png").stat().st_size > 0 and policy.stat().st_size > 0
    capsys.readouterr()
    assert main(["eval", "CartPole-v1", "--load", str(policy), "--episodes", "4"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert main(["eval", "CartPole-v1", "--load", str(policy), "--episodes", "4",
                 "--sample"]) == 0
    assert "(sampled)" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["torch", "serial"])
def test_train_on_other_backends(backend, tmp_path):
    out = tmp_path / "run.json"
    assert main(["train", "CartPole-v1", "--backend", backend, "--num-envs", "4", *TINY,
                 "--json", str(out), "--plot", str(tmp_path / "curve.png")]) == 0
    assert json.loads(out.read_text())["total_steps"] == 512


def test_train_prints_progress_and_summary(capsys):
    assert main(["train", "CartPole-v1", "--total-steps", "512", "--eval-every", "0"]) == 0
    text = capsys.readouterr().out
    assert "steps/s env" in text and "ideal" in text and "end-to-end" in text


def test_continuous_actions_on_an_executor(tmp_path):
    assert main(["train", "Pendulum-v1", "--backend", "serial", "--num-envs", "2",
                 "--num-steps", "64", "--total-steps", "256", "--eval-every", "0", "--quiet",
                 "--save", str(tmp_path / "p.pt")]) == 0
    assert main(["eval", "Pendulum-v1", "--backend", "serial", "--load", str(tmp_path / "p.pt"),
                 "--episodes", "2"]) == 0


def test_bad_input_is_a_clean_error(capsys, tmp_path):
    assert main(["train", "CartPol-v1", *TINY]) == 2
    assert "unknown env id" in capsys.readouterr().err
    assert main(["train", "CartPole-v1", "--backend", "nope", *TINY]) == 2
    assert main(["eval", "CartPole-v1", "--load", str(tmp_path / "missing.pt")]) == 2


def test_cartpole_return_improves():
    args = ppo.Args(**{**_cartpole_preset(), "seed": 3, "total_steps": 6144, "eval_every": 0})
    _, summary = ppo.train(args)
    first = next(c["episodic_return"] for c in summary.curve if c["episodic_return"])
    assert summary.curve[-1]["episodic_return"] > first + 20
    assert summary.final_eval_return > 100


def _cartpole_preset():
    from envfleet.train.cli import preset

    return {**preset("CartPole-v1"), "env_id": "CartPole-v1", "target_return": None}


def test_chess_train_and_eval_report_outcomes(tmp_path, capsys):
    out, policy = tmp_path / "chess.json", tmp_path / "chess.pt"
    assert main(["train", "Chess-v0", "--opponent", "random", "--num-envs", "4",
                 "--num-steps", "8", "--total-steps", "64", "--eval-every", "0",
                 "--eval-episodes", "4", "--quiet", "--json", str(out),
                 "--save", str(policy)]) == 0
    outcomes = json.loads(out.read_text())["final_outcomes"]
    assert sum(outcomes.values()) == pytest.approx(1.0)
    capsys.readouterr()
    assert main(["eval", "Chess-v0", "--load", str(policy), "--episodes", "4"]) == 0
    assert "win" in capsys.readouterr().out
