"""The command line's ids and options: a user's native env named by its module (``module:Id``)
trains, evaluates and benches; every form of an id gives the same env and preset; a mistyped
id is refused before anything is printed or torch imported; a mistyped option names the one
meant, under its subcommand's usage."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import envfleet
from envfleet.cli import build_parser, main
from tests.native.user_env import ENV_ID, MODULE, MODULE_ID, forget


@pytest.fixture
def fresh():
    """MyGrid-v0 unknown here until an id names its module, as in a new ``envfleet`` process."""
    forget()
    yield
    forget()


def test_train_eval_and_bench_a_user_env_named_by_its_module(fresh, tmp_path, capsys) -> None:
    policy, summary = tmp_path / "p.pt", tmp_path / "run.json"
    assert main(["train", MODULE_ID, "--num-envs", "4", "--num-steps", "32", "--total-steps",
                 "128", "--eval-every", "0", "--eval-episodes", "2", "--quiet",
                 "--save", str(policy), "--json", str(summary)]) == 0
    assert json.loads(summary.read_text())["total_steps"] == 128
    forget()  # eval in a "new process": the id imports the module again
    capsys.readouterr()
    for form, backend in ((MODULE_ID, "numba"), (f"{MODULE}:envfleet/{ENV_ID}", "pool")):
        assert main(["eval", form, "--backend", backend, "--load", str(policy),
                     "--episodes", "2"]) == 0
        assert "mean return" in capsys.readouterr().out
    forget()
    out = tmp_path / "bench"
    assert main(["bench", "--env", MODULE_ID, "--backends", "numba,pool", "--num-envs", "2",
                 "--seconds", "0.02", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in
            (out / "bench-MyGrid-v0-native-executors.jsonl").read_text().splitlines()[1:]]
    assert sorted(r["backend"] for r in rows) == ["numba", "pool"]  # each in a fresh process
    assert all(r["status"] == "ok" for r in rows), rows


def test_bench_says_why_a_user_env_has_no_baselines(fresh, tmp_path, capsys) -> None:
    why = "MyGrid-v0 names no Gymnasium env it re-implements (NativeEnvSpec.reference_id)"
    assert main(["bench", "--env", MODULE_ID, "--backends", "numba,gym-sync", "--num-envs", "2",
                 "--out", str(tmp_path)]) == 2
    assert f"backend 'gym-sync' cannot run here: {why}" in capsys.readouterr().err
    assert main(["bench", "--env", MODULE_ID, "--num-envs", "2", "--seconds", "0.02",
                 "--out", str(tmp_path)]) == 0
    assert f"not measured: gym-sync: {why}" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("form", ["envfleet/MinAtar-Breakout-v1", MODULE_ID])
def test_tune_profiles_every_form_of_a_native_id(form, fresh) -> None:
    from envfleet.tune import profile_env

    assert profile_env(form, seconds=0.02).native


def test_tune_names_the_right_forms_of_a_mistyped_id(capsys) -> None:
    assert main(["tune", "MinAtar-Breakout-v1"]) == 2
    assert "did you mean 'MinAtar/Breakout-v1' (envfleet's id) or 'envfleet/MinAtar-Breakout-v1'" \
        in capsys.readouterr().err


def test_bench_a_gymnasium_id_named_by_its_module_on_executors_and_baselines(tmp_path) -> None:
    """Each point's fresh process imports the module, the baselines included."""
    sys.modules.pop("tests.native.mygym", None)
    out = tmp_path / "bench"
    assert main(["bench", "--env", "tests.native.mygym:MyCartPole-v0", "--backends",
                 "serial,gym-sync", "--num-envs", "2", "--seconds", "0.02",
                 "--out", str(out)]) == 0
    rows = [json.loads(line) for line in
            (out / "bench-MyCartPole-v0-executors.jsonl").read_text().splitlines()[1:]]
    assert sorted((r["backend"], r["status"]) for r in rows) == [("gym-sync", "ok"),
                                                                 ("serial", "ok")], rows


def _settings(env_id: str) -> dict:
    from envfleet.train.presets import build_settings

    return build_settings(build_parser().parse_args(["train", env_id]))


@pytest.mark.parametrize("form", ["MinAtar/Breakout-v1", "envfleet/MinAtar-Breakout-v1",
                                  "envfleet:MinAtar/Breakout-v1"])
def test_every_form_of_an_id_gets_its_preset(form) -> None:
    settings = _settings(form)
    assert settings["backend"] == "numba"
    assert (settings["num_envs"], settings["target_return"]) == (64, 17.0)


@pytest.mark.parametrize("command", [["train"], ["eval", "--load", "missing.pt"]])
def test_a_mistyped_id_is_refused_before_anything_is_printed_or_imported(command) -> None:
    """No header of another preset, no torch, no seconds of start-up: the closest ids at once."""
    code = ("import sys\n"
            "from envfleet.cli import main\n"
            f"status = main({[command[0], 'MinAtar-Breakout-v1', *command[1:]]!r})\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "sys.exit(status)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(f"envfleet {command[0]}: error: unknown env id "
                                  "'MinAtar-Breakout-v1'; did you mean 'MinAtar/Breakout-v1' "
                                  "(envfleet's id) or 'envfleet/MinAtar-Breakout-v1'"), done.stderr


def test_a_gymnasium_id_on_a_native_backend_is_refused_before_the_header(capsys) -> None:
    assert main(["train", "Blackjack-v1", "--backend", "numba"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "backend 'numba' runs envfleet's native envs" in err and "'pool'" in err


def test_a_backend_the_family_lacks_is_refused_before_the_header(fresh, capsys) -> None:
    assert main(["train", MODULE_ID, "--backend", "torch"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "MyGrid-v0 has no 'torch' backend; its backends: numba" in err


@pytest.mark.parametrize("command", [["train", "CartPole-v1"], ["bench"],
                                     ["eval", "CartPole-v1", "--load", "p.pt"]])
def test_a_mistyped_option_names_the_option_meant(command, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--num_envs", "8"] if command[0] != "eval" else
             [*command, "--num_episodes", "8"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: envfleet {command[0]} "), err  # its own usage
    meant = "--episodes" if command[0] == "eval" else "--num-envs"
    assert "did you mean " + meant + "?" in err, err
    with pytest.raises(SystemExit):
        main([*command, "--frobnicate", "3"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --frobnicate 3" in err and "did you mean" not in err


ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "NATIVE_ENVS.md"
#: what each of the guide's commands gets on top of its own options: a tiny run
TINY = {"train": ["--total-steps", "128", "--num-envs", "4", "--num-steps", "32",
                  "--eval-every", "0", "--eval-episodes", "2", "--quiet"],
        "eval": ["--episodes", "2"],
        "bench": ["--backends", "numba", "--num-envs", "2", "--seconds", "0.02",
                  "--out", "bench-results"]}


def test_the_guides_command_line_recipe_runs_as_written(tmp_path) -> None:
    """docs/NATIVE_ENVS.md's ``module:Id`` recipe as a user follows it: the guide's first block
    saved as ``mygrid.py``, then its ``envfleet`` commands (with tiny budgets) from that folder,
    as the console script runs them (the current folder not on ``sys.path``)."""
    text = GUIDE.read_text(encoding="utf-8")
    (tmp_path / "mygrid.py").write_text(re.findall(r"^```python\n(.*?)^```", text,
                                                   re.DOTALL | re.MULTILINE)[0])
    recipe = text[text.index("### From the command line and other processes"):]
    lines = re.search(r"^```bash\n(.*?)^```", recipe, re.DOTALL | re.MULTILINE)[1]
    commands = [shlex.split(line)[1:] for line in lines.splitlines()]
    assert [c[0] for c in commands] == ["train", "eval", "bench"], commands
    commands = [c + TINY[c[0]] for c in commands]
    code = ("import sys\n"
            "sys.path.remove('')  # as the envfleet console script starts\n"
            "from envfleet.cli import main\n"
            f"for argv in {commands!r}:\n"
            "    status = main(argv)\n"
            "    assert status == 0, (argv, status)\n")
    source = str(Path(envfleet.__file__).resolve().parents[1])
    env = {**os.environ, "ENVFLEET_QUIET": "1", "PYTHONPATH": os.pathsep.join(
        [source, *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GridWalk-v0 (greedy): mean return" in done.stdout
    rows = (tmp_path / "bench-results").glob("bench-GridWalk-v0-*.jsonl")
    points = [json.loads(line) for path in rows for line in path.read_text().splitlines()[1:]]
    assert points and all(p["status"] == "ok" for p in points), points
