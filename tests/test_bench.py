"""``envfleet bench``: a tiny end-to-end run, the reports it writes, and its error paths."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envfleet.bench.measure import PointSpec, run_point
from envfleet.bench.report import Results, envs_label, human, ratio
from envfleet.cli import main


def test_tiny_run_writes_jsonl_markdown_and_plot(tmp_path):
    cmd = [sys.executable, "-m", "envfleet", "bench", "--backends", "numba,gym-numpy,gym-sync",
           "--num-envs", "1,64", "--seconds", "0.05", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    lines = [json.loads(x) for x in (tmp_path / "CartPole-v1.jsonl").read_text().splitlines()]
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

    md = (tmp_path / "CartPole-v1.md").read_text()
    assert "numba × gym-numpy" in md and "numba × gym-sync" in md
    assert "| 64 |" in md
    assert (tmp_path / "CartPole-v1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "numba × gym-numpy" in proc.stdout  # the rich table


def test_unknown_backend_is_a_clear_error(tmp_path, capsys):
    assert main(["bench", "--backends", "numba,warp-drive", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown backend" in err and "'warp-drive'" in err and "gym-numpy" in err


def test_unknown_env_is_envfleets_error(tmp_path, capsys):
    assert main(["bench", "--env", "CartPol-v1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown env id 'CartPol-v1'" in err and "CartPole-v1" in err


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

    lines = [json.loads(x) for x in (tmp_path / "CartPole-v1.jsonl").read_text().splitlines()]
    header, points = lines[0], lines[1:]
    assert header["settings"]["num_workers"] == [1, 2]
    assert [p["series"] for p in points] == [
        "serial", "subprocess", "pool 2w", "pool 1w", "gym-sync", "gym-async"]
    for p in points:
        assert p["status"] == "ok" and p["steps_per_s"] > 0 and p["num_envs"] == 4, p
    workers = {p["series"]: p.get("num_workers") for p in points}
    assert workers["pool 2w"] == 2 and workers["pool 1w"] == 1 and workers["subprocess"] == 4

    md = (tmp_path / "CartPole-v1.md").read_text()
    assert "pool 2w × gym-sync" in md and "pool 2w × gym-async" in md
    assert "pool 2w per call" in md


def test_defaults_native_id_unchanged_other_ids_get_executors():
    from envfleet.bench.runner import choose_backends

    native, _ = choose_backends(None, "CartPole-v1", native=True)
    assert not {"serial", "subprocess", "pool", "gym-async", "sb3-subproc"} & set(native)
    assert {"numba", "gym-numpy", "gym-sync", "sb3-dummy"} <= set(native)
    other, notes = choose_backends(None, "Acrobot-v1", native=False)
    assert other[:3] == ["serial", "subprocess", "pool"]
    assert {"gym-sync", "gym-async", "sb3-dummy", "sb3-subproc"} <= set(other)
    assert not {"numba", "torch", "cuda"} & set(other)
    assert "gym-numpy" not in other and any(n.startswith("gym-numpy") for n in notes)


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
    assert main(["bench", "--env", "Acrobot-v1", "--backends", "numba,pool",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "'numba' cannot run here" in err and "pool" in err
