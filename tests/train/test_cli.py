"""Smoke runs of every CLI path with tiny budgets (CleanRL's habit), and a short CartPole run
whose return improves."""

from __future__ import annotations

import dataclasses
import json

import pytest

from envfleet.cli import main
from envfleet.command import CommandError
from envfleet.train import checkpoint, ppo
from tests.train.envs import MASKED_TOY_ID

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


def test_train_warns_when_end_to_end_is_above_the_ideal(monkeypatch, tmp_path, capsys):
    """End-to-end above the ideal's IQR (the same work with an instant env) is flagged in the
    output and the JSON, never shown as a plain efficiency above 1."""
    train = ppo.train

    def above(*args, **kwargs):
        agent, summary = train(*args, **kwargs)
        summary.sps_end_to_end = 2 * summary.sps_ideal_iqr[1]
        summary.above_ideal = True
        return agent, summary

    monkeypatch.setattr(ppo, "train", above)
    out = tmp_path / "run.json"
    assert main(["train", "CartPole-v1", *TINY, "--json", str(out)]) == 0
    assert "above the ideal loop's IQR" in capsys.readouterr().err  # even with --quiet
    summary = json.loads(out.read_text())
    assert summary["above_ideal"] is True
    assert summary["sps_iteration"] > 0 and summary["cpu_per_iteration"]["ideal"] > 0


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
    from envfleet.train.presets import preset

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


# --- options, presets, header and ending --------------------------------------------------------


def _args(*argv: str) -> ppo.Args:
    from envfleet.cli import build_parser
    from envfleet.train.cli import build_args

    return build_args(build_parser().parse_args(["train", *argv]))


def test_help_shows_each_presets_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for option in ("--num-steps", "--num-minibatches", "--update-epochs", "--gamma",
                   "--gae-lambda", "--ent-coef", "--lr", "--clip-coef"):
        assert option in text
    minatar = "MinAtar/Breakout-v1 {0}, MinAtar/SpaceInvaders-v1 {0}, "
    mujoco = "HalfCheetah-v5 {0}, Hopper-v5 {0}, "
    assert ("steps per env per rollout (default: CartPole-v1 32, Acrobot-v1 256, Pendulum-v1 "
            "1,024, MountainCarContinuous-v0 256, " + minatar.format(128)
            + "Chess-v0 16, ALE/Breakout-v5 128, " + mujoco.format("2,048")
            + "other ids 128)") in text
    assert ("discount (default: CartPole-v1 0.98, Acrobot-v1 0.99, Pendulum-v1 0.9, "
            "MountainCarContinuous-v0 0.9999, " + minatar.format(0.99)
            + "Chess-v0 0.99, ALE/Breakout-v5 0.99, " + mujoco.format(0.99)
            + "other ids 0.99)") in text
    assert ("(CartPole-v1 256, Acrobot-v1 64, Pendulum-v1 64, MountainCarContinuous-v0 256, "
            + minatar.format(1024)
            + "Chess-v0 2048, ALE/Breakout-v5 256, " + mujoco.format(64)
            + "other ids 256 samples)") in text
    assert "Box actions get a Gaussian policy" in text


def test_generic_defaults_are_ppo_args_defaults():
    """``--help`` shows ``ppo.Args``'s own defaults for ids without a preset (``train.args``,
    torch not imported), every one of them."""
    from envfleet.train.args import args_defaults

    defaults, shown = ppo.Args(), args_defaults()
    assert {k: getattr(defaults, k) for k in shown} == shown
    assert set(shown) == {f.name for f in dataclasses.fields(ppo.Args)} - {"env_kwargs"}


def test_ppo_options_override_the_preset():
    args = _args("CartPole-v1", "--num-steps", "64", "--num-minibatches", "3",
                 "--update-epochs", "5", "--gamma", "0.9", "--gae-lambda", "0.7",
                 "--ent-coef", "0.02", "--lr", "3e-4", "--clip-coef", "0.1")
    assert (args.num_steps, args.num_minibatches, args.update_epochs, args.gamma,
            args.gae_lambda, args.ent_coef, args.learning_rate, args.clip_coef) == (
        64, 3, 5, 0.9, 0.7, 0.02, 3e-4, 0.1)
    assert _args("CartPole-v1", "--learning-rate", "2e-3").learning_rate == 2e-3


def test_more_envs_keep_the_presets_minibatch_size():
    default = _args("CartPole-v1")
    assert (default.num_envs, default.num_minibatches, default.update_epochs) == (8, 1, 20)
    wide = _args("CartPole-v1", "--num-envs", "256")
    assert wide.num_envs * wide.num_steps / wide.num_minibatches == 256
    assert (wide.num_minibatches, wide.update_epochs) == (32, 2)
    assert _args("CartPole-v1", "--num-envs", "32").update_epochs == 5  # 4 x 5 = 20 steps
    chess = _args("Chess-v0", "--num-envs", "512")
    assert (chess.num_minibatches, chess.update_epochs) == (4, 2)
    given = _args("CartPole-v1", "--num-envs", "256", "--num-minibatches", "2",
                  "--update-epochs", "7")
    assert (given.num_minibatches, given.update_epochs) == (2, 7)


def test_header_names_the_backend_used_and_the_budget(capsys):
    from envfleet.train.report import header

    assert main(["train", "CartPole-v1", "--total-steps", "512", "--eval-every", "0"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "backend=numba" in first and "auto" not in first
    assert "budget 512 steps;" in first and "target 475" in first
    assert _args("Taxi-v4").backend == "pool"  # (a Gymnasium id without a native family)
    chess = " ".join(header(_args("Chess-v0")))
    assert "budget 20,000,000 steps or 1,200 s (time limit)" in chess and "target none" in chess


def test_solved_at_only_with_a_target_and_the_reason_to_stop(capsys):
    # (a Gymnasium id without a reward_threshold, so no target)
    assert main(["train", MASKED_TOY_ID, "--backend", "serial", "--num-envs", "2",
                 "--num-steps", "64", "--total-steps", "128", "--eval-every", "0",
                 "--eval-episodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "solved at" not in text and "stopped after the 128-step budget" in text
    assert main(["train", "CartPole-v1", "--total-steps", "100000", "--time-limit", "0.01",
                 "--eval-every", "0"]) == 0
    text = capsys.readouterr().out
    assert "stopped at the time limit (0.01 s)" in text and "solved at never" in text


def test_eval_of_a_policy_for_another_env_is_a_clean_error(tmp_path, capsys):
    policy = tmp_path / "cartpole.pt"
    assert main(["train", "CartPole-v1", *TINY, "--save", str(policy)]) == 0
    capsys.readouterr()
    assert main(["eval", "Acrobot-v1", "--backend", "serial", "--load", str(policy)]) == 2
    err = capsys.readouterr().err
    assert "trained on CartPole-v1, not Acrobot-v1" in err and "Traceback" not in err

    # the same id with other spaces (another observation kind, say): both shapes named
    import envfleet

    env = envfleet.make("CartPole-v1", 1)
    mislabelled = tmp_path / "mislabelled.pt"
    checkpoint.save(ppo.Agent(env.single_observation_space, env.single_action_space),
             ppo.Args(env_id="Acrobot-v1"), str(mislabelled))
    env.close()
    assert main(["eval", "Acrobot-v1", "--backend", "serial", "--load", str(mislabelled),
                 "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert "does not fit" in err and "4 observation numbers in, 2 action outputs" in err
    assert "(6,)" in err and "Discrete(3)" in err

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    assert main(["eval", "CartPole-v1", "--load", str(garbage)]) == 2
    assert "is not a policy saved by envfleet train --save" in capsys.readouterr().err


@pytest.mark.parametrize(("env_id", "backend", "suffix"), [("CartPole-v1", "auto", ".mp4"),
                                                           ("Acrobot-v1", "serial", ".gif")])
def test_eval_records_a_playable_video(env_id, backend, suffix, tmp_path, capsys):
    import imageio.v2 as imageio

    policy, video = tmp_path / "policy.pt", tmp_path / f"episode{suffix}"
    assert main(["train", env_id, "--backend", backend, "--num-envs", "2", "--num-steps", "16",
                 "--total-steps", "32", "--eval-every", "0", "--eval-episodes", "2", "--quiet",
                 "--save", str(policy)]) == 0
    capsys.readouterr()
    assert main(["eval", env_id, "--backend", backend, "--load", str(policy), "--episodes",
                 "2", "--video", str(video), "--json", str(tmp_path / "eval.json")]) == 0
    recorded = json.loads((tmp_path / "eval.json").read_text())["video"]
    assert recorded["path"] == str(video) and f"video: {video}" in capsys.readouterr().out
    frames = [frame for frame in imageio.get_reader(video)]  # decodes: a playable file
    # (a comprehension: list() asks the mp4 reader its length, which is unknown: inf)
    assert len(frames) == recorded["steps"] + 1 >= 2  # the reset frame, then one per step
    assert frames[0].ndim == 3 and frames[0].shape[2] in (3, 4) and frames[0].std() > 0


def test_eval_video_of_an_env_without_renderer_is_refused_up_front(tmp_path, capsys):
    policy = tmp_path / "chess.pt"
    import envfleet

    env = envfleet.make("Chess-v0", 1)
    checkpoint.save(ppo.Agent(env.single_observation_space, env.single_action_space),
             ppo.Args(env_id="Chess-v0"), str(policy))
    env.close()
    assert main(["eval", "Chess-v0", "--load", str(policy), "--video",
                 str(tmp_path / "v.mp4")]) == 2
    assert "Chess-v0 has no renderer yet" in capsys.readouterr().err


# --- the budget, the ideal loop, the executor's workers ------------------------------------------


def test_a_budget_below_one_rollout_shrinks_it_and_says_so_once(tmp_path, capsys):
    """CartPole-v1's preset rollout is 8 envs x 32 steps; a 100-step budget runs 8 x 12 once
    (not 256 steps), said once at the start, and the ending says how many steps ran."""
    out = tmp_path / "run.json"
    assert main(["train", "CartPole-v1", "--total-steps", "100", "--eval-every", "0",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("rollouts shrunk to 12 steps x 8 envs") == 1
    assert "ppo: 12 steps x 8 envs per rollout" in text and "evaluated at the end" in text
    assert "stopped after the 100-step budget (96 steps, in whole rollouts of 96)" in text
    assert json.loads(out.read_text())["total_steps"] == 96


def test_a_budget_below_one_step_of_each_env():
    """Fewer envs than the preset's when the budget is below one step of each; envs asked for
    with --num-envs are never dropped: refused, naming both."""
    args = _args("Chess-v0", "--total-steps", "100")
    assert (args.num_envs, args.num_steps, args.num_minibatches) == (100, 1, 1)
    assert _args("CartPole-v1", "--total-steps", "256").num_steps == 32  # one rollout fits
    with pytest.raises(CommandError, match=r"--total-steps 100 is less than one step of each "
                                           r"of the 256 envs \(--num-envs 256\)"):
        _args("CartPole-v1", "--num-envs", "256", "--total-steps", "100")


def test_no_ideal_skips_the_ideal_loop(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["train", "CartPole-v1", "--total-steps", "256", "--eval-every", "0",
                 "--no-ideal", "--json", str(out)]) == 0
    assert "ideal not measured (--no-ideal)" in capsys.readouterr().out
    summary = json.loads(out.read_text(), parse_constant=pytest.fail)  # strict JSON: no NaN
    assert summary["ideal_iterations"] == 0 and summary["args"]["ideal_every"] == 0
    assert summary["sps_ideal"] is None and summary["efficiency"] is None
    assert summary["sps_end_to_end"] > 0


def test_worker_options_reach_the_training_env_only(monkeypatch):
    """--num-workers / --cpus-per-worker are the training env's make() options (pool: its
    processes; ray: actors, CPUs each); its evaluation env gets neither (local for ray)."""
    import envfleet
    from envfleet.train.args import evaluation_args
    from envfleet.train.envs import make_envs

    made, real_make = [], envfleet.make

    def fake_make(env_id, num_envs, *, backend, **kwargs):
        made.append((backend, kwargs))
        return real_make("CartPole-v1", num_envs, seed=kwargs.get("seed"))

    monkeypatch.setattr(envfleet, "make", fake_make)
    args = _args("CartPole-v1", "--backend", "ray", "--num-workers", "3",
                 "--cpus-per-worker", "0.5")
    make_envs(args, 8, 1).close()
    make_envs(evaluation_args(args), 100, 2).close()
    (train_backend, train_kwargs), (eval_backend, eval_kwargs) = made
    assert train_backend == "ray" and (train_kwargs["num_workers"], train_kwargs["num_cpus"]) \
        == (3, 0.5)
    assert eval_backend == "numba" and "num_workers" not in eval_kwargs
    made.clear()
    make_envs(_args("Taxi-v3", "--backend", "pool", "--num-workers", "2"), 4, 1)
    assert made[0][0] == "pool" and made[0][1]["num_workers"] == 2
    assert "num_cpus" not in made[0][1]


@pytest.mark.parametrize(("env_id", "backend", "evaluated_on"), [
    ("CartPole-v1", "ray", "numba"), ("Taxi-v3", "ray", "serial"),
    ("Taxi-v3", "subprocess", "serial"), ("Taxi-v3", "pool", "pool"),
    ("CartPole-v1", "torch", "torch"), ("envfleet/MinAtar-Breakout-v1", "ray", "numba")])
def test_the_evaluation_env_of_ray_and_subprocess_runs_here(env_id, backend, evaluated_on):
    from envfleet.train.args import eval_backend

    assert eval_backend(env_id, backend) == evaluated_on


@pytest.mark.parametrize(("argv", "words"), [
    (["--num-workers", "2"], "--num-workers applies to backend pool or ray, not numba"),
    (["--backend", "pool", "--cpus-per-worker", "2"],
     "--cpus-per-worker applies to backend ray, not pool")])
def test_worker_options_on_a_backend_without_workers_are_refused(argv, words, capsys):
    assert main(["train", "CartPole-v1", *argv, *TINY]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
