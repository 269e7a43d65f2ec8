"""``envfleet bench``: a tiny end-to-end run, the reports it writes, and its error paths."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from envfleet.bench.measure import PointSpec, run_point
from envfleet.bench.report import Results, envs_label, human, ratio
from envfleet.cli import main
from tests.unwritable import DIR_KINDS, unwritable_dir


def test_tiny_run_writes_jsonl_markdown_and_plot(tmp_path):
    cmd = [sys.executable, "-m", "envfleet", "bench", "--backends", "numba,gym-numpy,gym-sync",
           "--num-envs", "1,64", "--seconds", "0.05", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    stem = tmp_path / "bench-CartPole-v1-native"
    lines = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    header, points = lines[0], lines[1:]
    assert header["type"] == "header"
    assert header["cpu_count"] >= 1 and header["versions"]["gymnasium"]
    assert header["settings"]["num_envs"] == [1, 64]
    assert sorted((p["series"], p["num_envs"]) for p in points) == [
        (s, n) for s in ("gym-numpy", "gym-sync", "numba") for n in (1, 64)]
    for p in points:
        assert p["type"] == "point" and p["status"] == "ok", p
        assert p["steps_per_s"] > 0 and p["calls"] >= 3 and p["seconds"] > 0
        assert p["steps"] == p["num_envs"] * p["calls"]
        assert p["warmup_s"] >= 0 and p["construct_s"] >= 0
    numba = [p for p in points if p["backend"] == "numba"]
    assert all(p["threads"] >= 1 and p["device"] == "cpu" for p in numba)

    md = stem.with_suffix(".md").read_text()
    assert "numba × gym-numpy" in md and "numba × gym-sync" in md
    assert "| 64 |" in md
    assert stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "numba × gym-numpy" in proc.stdout  # the rich table


def test_unknown_backend_is_a_clear_error(tmp_path, capsys):
    assert main(["bench", "--backends", "numba,warp-drive", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown backend" in err and "'warp-drive'" in err and "gym-numpy" in err


def test_the_options_that_moved_to_benchmarks_say_where(tmp_path, capsys):
    """``--study`` and ``--perft-depth`` live in the repository's ``python -m benchmarks``."""
    with pytest.raises(SystemExit):
        main(["bench", "--study", "threads", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "--study: the studies run from a clone of the repository: python -m benchmarks " \
           "--study NAME" in err
    with pytest.raises(SystemExit):
        main(["bench", "--env", "Chess-v0", "--perft-depth", "1", "--out", str(tmp_path)])
    assert "python -m benchmarks --env Chess-v0" in capsys.readouterr().err


def test_unknown_env_is_envfleets_error(tmp_path, capsys):
    assert main(["bench", "--env", "CartPol-v1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown env id 'CartPol-v1'" in err and "CartPole-v1" in err


@pytest.mark.parametrize("kind", DIR_KINDS)
def test_unwritable_out_is_refused_before_measuring(kind, tmp_path, monkeypatch, capsys):
    from envfleet.bench import runner

    def no_points(*args, **kwargs):
        raise AssertionError("points were planned although --out cannot be written")

    monkeypatch.setattr(runner, "plan", no_points)
    out = unwritable_dir(tmp_path, kind)
    assert main(["bench", "--backends", "numba", "--num-envs", "1", "--seconds", "0.01",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"envfleet bench: error: --out {out}: ") and "Traceback" not in err


@pytest.mark.parametrize("option", [["--num-envs", "0,64"], ["--seconds", "-1"],
                                    ["--threads", "two"]])
def test_bad_option_values_exit_2(option, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", *option])
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_timeout_gives_a_failure_row_not_a_hang():
    spec = PointSpec(env_id="CartPole-v1", reference_id="CartPole-v1", backend="gym-numpy",
                     num_envs=1, seconds=0.05)
    row = run_point(spec, timeout=0.01)
    assert row["status"] == "timeout" and "timeout" in row["error"]


def test_worker_error_gives_a_failure_row():
    spec = PointSpec(env_id="CartPole-v1", reference_id="CartPole-v1", backend="numba",
                     num_envs=4, threads=10_000, seconds=0.05)
    row = run_point(spec, timeout=120)
    assert row["status"] == "failed" and "num_threads" in row["error"]


def test_ratio_columns_compare_the_same_num_envs():
    def point(series, n, sps, **extra):
        return {"type": "point", "series": series, "backend": series, "num_envs": n,
                "status": "ok", "steps_per_s": sps, "us_per_call": 1e6 * n / sps,
                "warmup_s": 0.5, "construct_s": 0.1, **extra}

    rows = [point("numba", 1, 2e5), point("gym-numpy", 1, 4e4), point("gym-sync", 1, 1e5),
            point("numba", 65536, 8e7), point("gym-numpy", 65536, 2e7),
            point("gym-sync", 65536, 1e5, background_load=1.0),
            {"type": "point", "series": "gym-sync", "backend": "gym-sync",
             "num_envs": 262144, "status": "skipped", "note": "too big"}]
    results = Results(rows, ["numba", "gym-numpy", "gym-sync"], primary="numba")
    assert results.ratio("gym-numpy", 65536) == pytest.approx(4.0)
    assert results.ratio("gym-sync", 65536) == pytest.approx(800.0)
    assert results.ratio("gym-sync", 262144) is None
    header, body = results.throughput_table()
    assert header == ["num_envs", "numba", "gym-numpy", "gym-sync", "numba × gym-numpy",
                      "numba × gym-sync", "numba per call"]
    texts = {row[0][0]: [t for t, _ in row] for row in body}
    assert texts["65,536"][1:6] == ["80.0M", "20.0M", "100k*", "4.00×", "800×"]
    assert texts["1"][-1] == "5.00 µs"
    assert texts["262,144"][3] == "–"
    assert any("skipped" in line for line in results.problems())


def test_formatting():
    assert [human(x) for x in (950, 4380, 82.1e6, 999_999, 1.5e9)] == [
        "950", "4.38k", "82.1M", "1.00M", "1.50G"]
    assert [ratio(x) for x in (0.523, 2.741, 31.24, 1234, 0.000263)] == [
        "0.52×", "2.74×", "31.2×", "1,234×", "0.00026×"]
    assert [envs_label(n) for n in (1, 64, 1024, 65536, 1 << 20, 1000)] == [
        "1", "64", "1k", "64k", "1M", "1000"]


def test_executors_and_process_baselines_side_by_side(tmp_path):
    cmd = [sys.executable, "-m", "envfleet", "bench", "--backends",
           "serial,subprocess,pool,gym-sync,gym-async", "--num-envs", "4",
           "--num-workers", "1,2", "--seconds", "0.05", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    stem = tmp_path / "bench-CartPole-v1-executors-workers-sweep"
    lines = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    header, points = lines[0], lines[1:]
    assert header["settings"]["num_workers"] == [1, 2]
    assert [p["series"] for p in points] == [
        "serial", "subprocess", "pool 2w", "pool 1w", "gym-sync", "gym-async"]
    for p in points:
        assert p["status"] == "ok" and p["steps_per_s"] > 0 and p["num_envs"] == 4, p
    workers = {p["series"]: p.get("num_workers") for p in points}
    assert workers["pool 2w"] == 2 and workers["pool 1w"] == 1 and workers["subprocess"] == 4

    md = stem.with_suffix(".md").read_text()
    assert "pool 2w × gym-sync" in md and "pool 2w × gym-async" in md
    assert "pool 2w per call" in md


def test_two_studies_in_one_folder_keep_their_own_files(tmp_path):
    for backends in ("gym-numpy", "serial"):  # a baseline-only study, then an executor one
        cmd = [sys.executable, "-m", "envfleet", "bench", "--backends", backends,
               "--num-envs", "2", "--seconds", "0.02", "--out", str(tmp_path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    for kind, series in (("baselines", "gym-numpy"), ("executors", "serial")):
        stem = tmp_path / f"bench-CartPole-v1-{kind}"
        lines = stem.with_suffix(".jsonl").read_text().splitlines()
        assert [json.loads(x)["series"] for x in lines[1:]] == [series]
        assert f"| {series} |" in stem.with_suffix(".md").read_text()


def test_study_names_tell_studies_apart():
    from envfleet.bench.runner import study_name

    names = {study_name("CartPole-v1", ["numba", "torch", "gym-numpy"], [2], None),
             study_name("CartPole-v1", ["numba", "gym-numpy"], [1, 2], None),
             study_name("CartPole-v1", ["pool", "gym-sync"], [2], [2]),
             study_name("CartPole-v1", ["pool", "gym-sync"], [2], [1, 2]),
             study_name("CartPole-v1", ["gym-sync"], [2], None),
             study_name("Acrobot-v1", ["pool"], [2], None),
             study_name("Chess-v0", ["numba", "python-chess"], [2], None)}
    assert names == {"bench-CartPole-v1-native", "bench-CartPole-v1-native-threads-sweep",
                     "bench-CartPole-v1-executors", "bench-CartPole-v1-executors-workers-sweep",
                     "bench-CartPole-v1-baselines", "bench-Acrobot-v1-executors",
                     "bench-Chess-v0-native"}
    assert study_name("ALE/Pong-v5", ["pool"], [2], None) == "bench-ALE_Pong-v5-executors"


def test_defaults_native_id_unchanged_other_ids_get_executors():
    from envfleet.bench.runner import choose_backends

    native, _ = choose_backends(None, "CartPole-v1", native=True)
    assert not {"serial", "subprocess", "pool", "gym-async", "sb3-subproc"} & set(native)
    assert {"numba", "gym-numpy", "gym-sync", "sb3-dummy"} <= set(native)
    other, notes = choose_backends(None, "FrozenLake-v1", native=False)
    assert other[:3] == ["serial", "subprocess", "pool"]
    assert {"gym-sync", "gym-async", "sb3-dummy", "sb3-subproc"} <= set(other)
    assert not {"numba", "torch", "cuda"} & set(other)
    assert "gym-numpy" not in other and any(n.startswith("gym-numpy") for n in notes)
    assert "ray" not in native + other and "envpool" not in other  # only when asked for


def test_native_defaults_are_the_familys_backends(tmp_path, monkeypatch, capsys):
    """A family without a torch form (MinAtar's games) is not measured on torch by default, as
    CartPole is: the run would fail that series; asked for, torch is refused up front."""
    import envfleet.registry
    from envfleet.bench import runner

    class Planned(Exception):
        """Stops the run once the backends are chosen: nothing is measured."""

    def planned(env_id, reference_id, backends, *args):
        raise Planned(backends)

    monkeypatch.setattr(runner, "plan", planned)
    with pytest.raises(Planned) as chosen:
        main(["bench", "--env", "MinAtar/Breakout-v1", "--num-envs", "1", "--out", str(tmp_path)])
    assert "torch" not in chosen.value.args[0] and "numba" in chosen.value.args[0]
    assert "gym-sync" in chosen.value.args[0]  # the reference's SyncVectorEnv, its baseline
    spec = envfleet.registry.NATIVE_ENVS["MinAtar/Breakout-v1"]
    _, notes = runner.choose_backends(None, spec.id, native=True, family=spec)
    assert any(n.startswith("torch: MinAtar/Breakout-v1 has no 'torch' backend; its backends: "
                            "numba, cuda") for n in notes), notes
    if importlib.util.find_spec("torch") is not None:
        with pytest.raises(Planned) as chosen:
            main(["bench", "--env", "CartPole-v1", "--num-envs", "1", "--out", str(tmp_path)])
        assert "torch" in chosen.value.args[0]  # a family with a torch form keeps it
    assert main(["bench", "--env", "MinAtar/Breakout-v1", "--backends", "numba,torch",
                 "--out", str(tmp_path)]) == 2
    assert ("backend 'torch' cannot run here: MinAtar/Breakout-v1 has no 'torch' backend"
            in capsys.readouterr().err)


def test_comparisons_and_process_cap():
    import argparse

    from envfleet.bench.runner import comparisons, plan

    columns = [("numba", "numba"), ("pool 2w", "pool"), ("pool 1w", "pool"),
               ("gym-numpy", "gym-numpy"), ("gym-sync", "gym-sync"),
               ("gym-async", "gym-async"), ("sb3-subproc", "sb3-subproc")]
    primary, pairs = comparisons(columns)
    assert primary == "numba"
    assert [p for p in pairs if p[0] == "pool 2w"] == [
        ("pool 2w", "gym-sync"), ("pool 2w", "gym-async"), ("pool 2w", "sb3-subproc")]
    assert comparisons([("serial", "serial"), ("gym-sync", "gym-sync")]) == (
        "serial", [("serial", "gym-sync")])

    args = argparse.Namespace(seconds=0.1, torch_device=None, threads_per_block=None,
                              num_workers=[3], baseline_max_envs=1000, process_max_envs=8)
    points, _ = plan("Acrobot-v1", "Acrobot-v1", ["subprocess", "pool", "gym-async"], [8, 16],
                     [2], args)
    skipped = {(p.series, p.spec.num_envs) for p in points if p.skip}
    assert skipped == {("subprocess", 16), ("gym-async", 16)}
    assert all(p.spec.options == {"num_workers": 3} for p in points if p.series == "pool")


def test_bad_env_for_the_backends_is_a_clear_error(tmp_path, capsys):
    assert main(["bench", "--env", "NoSuchThing-v0", "--out", str(tmp_path)]) == 2
    assert "unknown env id 'NoSuchThing-v0'" in capsys.readouterr().err
    assert main(["bench", "--env", "FrozenLake-v1", "--backends", "numba,pool",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "'numba' cannot run here" in err and "pool" in err


# --- the classic-control rows: continuous actions, EnvPool, ray ------------------------------


def test_continuous_action_env_row(tmp_path):
    cmd = [sys.executable, "-m", "envfleet", "bench", "--env", "Pendulum-v1", "--backends",
           "numba,gym-sync", "--num-envs", "4", "--threads", "1", "--seconds", "0.05",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stem = tmp_path / "bench-Pendulum-v1-native"
    points = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()[1:]]
    assert [(p["series"], p["status"]) for p in points] == [("numba", "ok"), ("gym-sync", "ok")]
    assert "| 4 |" in stem.with_suffix(".md").read_text()
    assert "numba × gym-sync" in stem.with_suffix(".md").read_text()


def test_every_contender_gets_the_same_continuous_actions(monkeypatch):
    """Box actions: the same seed, the same batched space, the same action batch."""
    import gymnasium
    import numpy as np

    import envfleet
    from envfleet.bench import baselines

    seen = []
    for space in (envfleet.make("MountainCarContinuous-v0", 6, backend="numba").action_space,
                  baselines.BASELINES["gym-sync"].build("MountainCarContinuous-v0", 6, 0)
                  .action_space,
                  gymnasium.vector.utils.batch_space(gymnasium.spaces.Box(-1, 1, (1,)), 6)):
        space.seed(0)
        seen.append(space.sample())
    assert all(a.shape == (6, 1) and a.dtype == np.float32 for a in seen)
    assert all(np.array_equal(seen[0], a) for a in seen[1:])


def test_missing_envpool_is_reported_not_installed(monkeypatch, tmp_path, capsys):
    import importlib.util

    from envfleet.bench import baselines
    from envfleet.bench.runner import choose_backends

    real = importlib.util.find_spec
    monkeypatch.setattr(baselines.importlib.util, "find_spec",
                        lambda name, *a: None if name == "envpool" else real(name, *a))
    chosen, notes = choose_backends(None, "Acrobot-v1", native=True)
    assert "envpool" not in chosen and {"numba", "gym-sync"} <= set(chosen)
    assert "envpool: not installed: needs envpool (pip install 'envfleet[envpool]')" in notes
    assert "gym-numpy: Gymnasium has no NumPy vector env for Acrobot-v1" in notes
    # asked for next to others: left out with the reason; alone: an error
    chosen, notes = choose_backends(["numba", "envpool"], "Acrobot-v1", native=True)
    assert chosen == ["numba"] and notes[0].startswith("envpool: not installed")
    assert main(["bench", "--env", "Acrobot-v1", "--backends", "envpool",
                 "--out", str(tmp_path)]) == 2
    assert "'envpool' cannot run here: not installed" in capsys.readouterr().err


def test_envpool_measured_at_its_best_thread_count():
    pytest.importorskip("envpool")
    from envfleet.bench.baselines import BASELINES
    from envfleet.machine import usable_cores

    assert BASELINES["envpool"].status("NoSuchEnv-v0") == "EnvPool has no NoSuchEnv-v0 env"
    spec = PointSpec(env_id="Pendulum-v1", reference_id="Pendulum-v1", backend="envpool",
                     num_envs=4, seconds=0.05)
    row = run_point(spec, timeout=240)
    assert row["status"] == "ok", row
    assert row["steps"] == 4 * row["calls"]
    tried = row["threads_tried"]
    assert sorted(map(int, tried)) == list(range(1, usable_cores() + 1))
    assert row["steps_per_s"] == max(tried.values()) == tried[str(row["threads"])]


def test_ray_comparisons_and_missing_ray(monkeypatch):
    from envfleet import registry
    from envfleet.bench.runner import choose_backends, comparisons

    columns = [("numba", "numba"), ("ray", "ray"), ("pool", "pool"), ("gym-sync", "gym-sync")]
    assert comparisons(columns)[1] == [("numba", "gym-sync"), ("pool", "gym-sync"),
                                       ("ray", "pool"), ("ray", "numba"), ("ray", "gym-sync")]
    assert comparisons([("ray", "ray"), ("gym-sync", "gym-sync")]) == (
        "ray", [("ray", "gym-sync")])
    monkeypatch.setattr(registry, "_has", lambda module: module != "ray")
    chosen, notes = choose_backends(["ray", "pool"], "FrozenLake-v1", native=False)
    assert chosen == ["pool"] and notes == ["ray: needs ray: pip install 'envfleet[ray]'"]


def test_ray_in_backends_measured_with_its_ratio(tmp_path):
    pytest.importorskip("ray")
    cmd = [sys.executable, "-m", "envfleet", "bench", "--env", "FrozenLake-v1", "--backends",
           "ray,pool", "--num-envs", "4", "--num-workers", "1", "--seconds", "0.05",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stem = tmp_path / "bench-FrozenLake-v1-executors"
    points = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()[1:]]
    ray_row = next(p for p in points if p["series"] == "ray")
    assert ray_row["status"] == "ok" and ray_row["num_workers"] >= 1, ray_row
    assert "ray × pool" in stem.with_suffix(".md").read_text()


def test_masked_native_env_is_stepped_with_fresh_legal_actions(monkeypatch):
    """The envfleet side of the chess bench, on a stand-in with Chess-v0's API: every step
    gets ``random_legal_actions()`` (legal for the current masks) and the mask is checked."""
    import gymnasium
    import numpy as np

    import envfleet
    from envfleet.bench.measure import measure

    class MaskedStandIn:
        def __init__(self, num_envs, **kwargs):
            self.num_envs, self.kwargs, self.steps = num_envs, kwargs, 0
            self.rng = np.random.default_rng(0)
            self.unwrapped = self
            self.action_space = gymnasium.spaces.MultiDiscrete([4672] * num_envs)

        def _info(self):
            self.mask = self.rng.random((self.num_envs, 4672)) < 0.01
            self.mask[:, 7] = True
            return {"action_mask": self.mask}

        def reset(self, seed=None, options=None):
            return np.zeros((self.num_envs, 3)), self._info()

        def random_legal_actions(self):
            return np.array([self.rng.choice(np.flatnonzero(m)) for m in self.mask])

        def step(self, actions):
            assert actions.shape == (self.num_envs,) and self.mask[
                np.arange(self.num_envs), actions].all(), "an illegal action was played"
            self.steps += 1
            zeros = np.zeros(self.num_envs, dtype=bool)
            return (np.zeros((self.num_envs, 3)), np.zeros(self.num_envs), zeros, zeros,
                    self._info())

        def close(self):
            pass

    made = []

    def fake_make(env_id, num_envs, **kwargs):
        made.append((env_id, kwargs))
        return MaskedStandIn(num_envs, **kwargs)

    monkeypatch.setattr(envfleet, "make", fake_make)
    spec = PointSpec(env_id="Chess-v0", reference_id="Chess-v0", backend="numba", num_envs=5,
                     threads=1, seconds=0.05, options={"copy": False})
    row = measure(spec)
    assert row["status"] == "ok" and row["steps_per_s"] > 0
    assert row["action_mask_shape"] == [5, 4672]
    assert made == [("Chess-v0", {"backend": "numba", "seed": 0, "copy": False,
                                  "num_threads": 1})]
