"""``envfleet train``'s outputs are never lost: every path is checked before training, a path
that fails at the end anyway sends the output next to it, and Ctrl-C keeps what was trained."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from envfleet.cli import main
from envfleet.train import checkpoint, ppo
from tests.unwritable import FILE_KINDS, unwritable_file

TINY = ["--total-steps", "512", "--eval-every", "256", "--quiet"]


def _no_training(*args, **kwargs):
    raise AssertionError("training started although an output path cannot be written")


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize(("option", "name"), [("--save", "policy.pt"), ("--json", "run.json"),
                                              ("--plot", "curve.png")])
def test_unwritable_output_is_refused_before_training(option, name, kind, tmp_path,
                                                      monkeypatch, capsys):
    monkeypatch.setattr(ppo, "train", _no_training)
    path = unwritable_file(tmp_path, kind, name)
    assert main(["train", "CartPole-v1", *TINY, option, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"envfleet train: error: {option} {path}: "), err


def test_plot_next_to_json_is_checked_too(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ppo, "train", _no_training)
    (tmp_path / "run.png").mkdir()  # the plot goes next to --json: run.png
    assert main(["train", "CartPole-v1", *TINY, "--json", str(tmp_path / "run.json")]) == 2
    assert "--plot (next to --json)" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))  # the check leaves nothing behind


def test_a_path_that_fails_at_the_end_keeps_the_output_next_to_it(tmp_path, monkeypatch,
                                                                  capsys):
    """The paths pass the check, then turn into directories while training runs: the policy
    and the summary go to new files next to them, said on stderr; exit status 1."""
    policy, summary = tmp_path / "policy.pt", tmp_path / "run.json"
    train = ppo.train

    def train_then_break_the_paths(*args, **kwargs):
        result = train(*args, **kwargs)
        policy.mkdir()
        summary.mkdir()
        return result

    monkeypatch.setattr(ppo, "train", train_then_break_the_paths)
    assert main(["train", "CartPole-v1", *TINY, "--save", str(policy), "--json",
                 str(summary)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for option, path, label in (("--save", policy, "policy"), ("--json", summary, "summary")):
        line = next(x for x in err.splitlines() if f"could not write {option} {path}" in x)
        where = tmp_path / line.rsplit(f"the {label} is at ", 1)[1]
        assert where.parent == tmp_path and where.suffix == path.suffix and where.is_file()
    saved = [p for p in tmp_path.glob("policy-*.pt")]
    assert len(saved) == 1 and checkpoint.read_checkpoint(str(saved[0]))["args"]["env_id"] == \
        "CartPole-v1"
    assert json.loads(next(tmp_path.glob("run-*.json")).read_text())["total_steps"] == 512


def test_interrupted_training_returns_what_it_trained():
    """KeyboardInterrupt inside the loop: train returns at once, the agent and the summary as
    far as they got, with no final evaluation."""
    seen = []

    def interrupt_at_the_second(progress: ppo.Progress) -> None:
        seen.append(progress.steps)
        if len(seen) == 2:
            raise KeyboardInterrupt

    args = ppo.Args(num_envs=4, num_steps=16, total_steps=10_000, eval_every=0)
    try:
        agent, summary = ppo.train(args, interrupt_at_the_second)
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped train(): what it trained is lost")
    assert summary.stop_reason == "interrupted" and summary.total_steps == 128 == seen[-1]
    assert summary.final_eval is None and summary.final_eval_return is None
    assert len(summary.curve) == 2 and summary.sps_end_to_end > 0
    assert isinstance(agent, ppo.Agent)


def test_records_time_whole_iterations_and_the_first_end_of_the_loop():
    """An iteration interrupted (Ctrl-C) is not timed; the loop's wall clock is the first
    ``end_loop``'s (the final evaluation after it is no training time)."""
    records = ppo.Records()
    with records.timed_iteration():
        pass
    with pytest.raises(KeyboardInterrupt), records.timed_iteration():
        raise KeyboardInterrupt
    assert len(records.iteration_s) == len(records.iteration_cpu) == 1
    records.end_loop()
    wall_s = records.wall_s
    time.sleep(0.01)
    records.end_loop()
    assert records.wall_s == wall_s > 0


def test_ctrl_c_saves_the_policy_and_summary_and_exits_130(tmp_path):
    """A real SIGINT once training has started: no traceback, exit status 130, the policy at
    --save and the summary (no --json given) in a new file in the current directory, both
    named on stderr."""
    policy = tmp_path / "out" / "policy.pt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "envfleet", "train", "CartPole-v1", "--num-envs", "4",
         "--num-steps", "16", "--total-steps", "100000000", "--keep-going", "--eval-every",
         "0", "--save", str(policy)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # Ctrl-C handled as in a terminal, even where this suite runs with SIGINT ignored (a
        # shell's background job): a child inherits an ignored signal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout:  # the first progress line: training has started
            if line.startswith("steps"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "envfleet train: interrupted (Ctrl-C) at" in err
    assert f"policy so far: {policy}" in err
    assert checkpoint.read_checkpoint(str(policy))["args"]["env_id"] == "CartPole-v1"
    where = next(x for x in err.splitlines() if x.startswith("summary so far: "))
    summary_path = tmp_path / where.removeprefix("summary so far: ")
    assert summary_path.parent == tmp_path
    summary = json.loads(summary_path.read_text())
    assert summary["stop_reason"] == "interrupted" and summary["total_steps"] > 0
    assert "stopped when interrupted (Ctrl-C)" in out
