"""``pip install envfleet`` without extras: what works, and what names the extra it needs.

Each case runs in a fresh interpreter where the optional packages cannot be imported
(``sys.modules[name] = None``), as on a machine that installed envfleet alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

OPTIONAL = ("torch", "stable_baselines3", "matplotlib", "numba_cuda")


def run_without(modules: tuple[str, ...], code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where ``modules`` cannot be imported."""
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("argv", [["train", "CartPole-v1"],
                                  ["eval", "CartPole-v1", "--load", "policy.pt"]])
def test_train_and_eval_without_torch_name_the_extra(argv):
    proc = run_without(("torch",), f"""
        from envfleet.cli import main
        sys.exit(main({argv!r}))
    """)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"envfleet {argv[0]}: error: needs torch" in proc.stderr
    assert "pip install 'envfleet[torch]'" in proc.stderr


def test_train_help_works_without_torch():
    proc = run_without(("torch",), """
        from envfleet.cli import main
        sys.exit(main(["train", "--help"]))
    """)
    assert proc.returncode == 0, proc.stderr
    assert "--num-envs" in proc.stdout


@pytest.mark.parametrize(("argv", "shown"), [(["--help"], "train"),
                                              (["eval", "--help"], "--load")])
def test_help_works_without_torch(argv, shown):
    proc = run_without(("torch",), f"""
        from envfleet.cli import main
        sys.exit(main({argv!r}))
    """)
    assert proc.returncode == 0, proc.stderr
    assert shown in proc.stdout


def test_train_settings_and_args_without_torch():
    """A run's settings, its ``Args`` and its first lines come from torch-free modules: torch
    loads only when training starts."""
    proc = run_without(("torch",), """
        from envfleet.cli import build_parser
        from envfleet.train.cli import build_args
        from envfleet.train.report import header
        args = build_args(build_parser().parse_args(["train", "CartPole-v1", "--num-envs", "4"]))
        print(args.num_envs, args.gamma, header(args)[0].split()[2])
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["4", "0.98", "CartPole-v1"], proc.stdout


def test_make_and_step_without_any_extra():
    proc = run_without(OPTIONAL, """
        import numpy as np
        import envfleet
        env = envfleet.make("CartPole-v1", 4)
        env.reset(seed=0)
        env.step(np.zeros(4, dtype=np.int64))
        env.close()
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_torch_backend_without_torch_names_the_extra():
    proc = run_without(("torch",), """
        import envfleet
        try:
            envfleet.make("CartPole-v1", 4, backend="torch")
        except envfleet.BackendUnavailableError as error:
            print(error)
    """)
    assert "pip install 'envfleet[torch]'" in proc.stdout, proc.stdout + proc.stderr


def test_sb3_without_stable_baselines3_is_an_import_error_naming_it():
    proc = run_without(("stable_baselines3",), """
        import envfleet
        envfleet.sb3
    """)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError:"), proc.stderr
    assert "envfleet[sb3]" in last or "stable-baselines3" in last.lower(), last


def test_bench_without_matplotlib_names_the_extra(tmp_path):
    proc = run_without(("matplotlib",), f"""
        from envfleet.cli import main
        sys.exit(main(["bench", "--backends", "gym-numpy", "--num-envs", "1",
                       "--seconds", "0.02", "--out", {str(tmp_path)!r}]))
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "envfleet[bench]" in proc.stdout + proc.stderr
    assert list(tmp_path.glob("*.jsonl"))
    assert not list(tmp_path.glob("*.png"))


def test_submodules_load_on_first_use():
    """``envfleet.sb3`` works after ``import envfleet`` alone (the README's one-liner), and
    ``import envfleet`` does not import torch or SB3 for it."""
    pytest.importorskip("stable_baselines3")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        import envfleet
        assert "torch" not in sys.modules and "stable_baselines3" not in sys.modules
        vec_env = envfleet.sb3.to_sb3("CartPole-v1", 2, seed=0)
        vec_env.reset()
        vec_env.close()
        assert envfleet.bench.measure and envfleet.train and "sb3" in dir(envfleet)
        envfleet.no_such_thing
    """)], capture_output=True, text=True, timeout=300)
    assert proc.stderr.strip().splitlines()[-1] == (
        "AttributeError: module 'envfleet' has no attribute 'no_such_thing'"), proc.stderr


def test_cuda_with_a_numpy_numba_cuda_cannot_load_says_what_to_install():
    """numba-cuda 0.30.4 fails at its first kernel compile with numpy 2.5 (``np.row_stack``
    removed): the backend says so before anything compiles, naming the pin to install."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import numpy
        del numpy.row_stack  # as numpy 2.5 removed it
        from envfleet.registry import backend_status
        print(backend_status("cuda"))
    """)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0"})
    assert proc.returncode == 0, proc.stderr
    assert "does not work with numpy" in proc.stdout, proc.stdout
    assert "pip install 'numpy<2.5'" in proc.stdout, proc.stdout


def test_pettingzoo_chess_without_pettingzoo_names_the_extra():
    proc = run_without(("pettingzoo",), """
        from envfleet.pettingzoo import chess_v6
    """)
    assert proc.returncode == 1
    assert "pip install 'envfleet[pettingzoo]'" in proc.stderr.strip().splitlines()[-1], \
        proc.stderr
