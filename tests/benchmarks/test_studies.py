"""``python -m benchmarks --study NAME``: each study on a tiny budget writes its JSON lines,
Markdown table and PNG, with positive, finite figures; the study-only workload env changes
nothing."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.studies import common, roofline, tpb

PNG = b"\x89PNG\r\n\x1a\n"


def outputs(out: Path, study: str) -> tuple[dict, list[dict], dict, str]:
    """(header, point rows, summary, markdown) of a study's files; the PNG must exist."""
    stem = out / f"study-{study}"
    lines = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    header, summary = lines[0], lines[-1]
    assert header["type"] == "header" and summary["type"] == "summary"
    assert header["cpu"] and header["usable_cores"] >= 1 and header["versions"]["numpy"]
    assert header["settings"]["study"] == study
    assert "load_average_before" in header and "load_average_after" in summary
    assert stem.with_suffix(".png").read_bytes()[:8] == PNG
    md = stem.with_suffix(".md").read_text()
    assert md.startswith(f"## python -m benchmarks --study {study}") and "|---:" in md
    assert "Reproduce: `python -m benchmarks --study" in md
    return header, [x for x in lines[1:-1] if x["type"] == "point"], summary, md


def positive(*values: float) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in values)


def check_measured(row: dict) -> None:
    """A measured point: ok, its median and spread over the repeats, finite and positive."""
    assert row["status"] == "ok", row
    s = row["spread"]
    assert s["repeats"] == len(row["steps_per_s_samples"]) >= 2
    assert positive(row["steps_per_s"], row["us_per_call_median"], s["median"], s["min"])
    assert s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"]
    assert row["steps_per_s"] == s["median"]
    assert row["cores_used"] is None or row["cores_used"] >= 0


def test_spread_and_turning_point():
    s = common.spread([4.0, 1.0, 3.0, 2.0])
    assert s["median"] == 2.5 and s["min"] == 1.0 and s["max"] == 4.0 and s["repeats"] == 4
    assert s["q1"] == 1.75 and s["q3"] == 3.25 and s["iqr_pct"] == pytest.approx(60.0)
    # 100 us of overhead per call, then 1 us per env: linear (half the time) from 100 envs
    points = [(n, 100.0 + n) for n in (1, 10, 100, 1000, 10_000)]
    assert common.turning_point(points) == 100
    assert common.turning_point(points[:1]) is None


def test_threads_study(tmp_path):
    assert main(["--study", "threads", "--env", "CartPole-v1", "--num-envs", "256",
                 "--max-threads", "2", "--seconds", "0.02", "--repeats", "2",
                 "--out", str(tmp_path)]) == 0
    header, rows, summary, md = outputs(tmp_path, "threads")
    assert header["settings"]["max_threads"] == 2 and header["settings"]["repeats"] == 2
    assert sorted((r["kind"], r["num_envs"], r["threads"]) for r in rows) == [
        ("strong", 256, 1), ("strong", 256, 2), ("weak", 128, 1), ("weak", 256, 2)]
    for r in rows:
        check_measured(r)
    analysis = {(a["kind"], a["threads"]): a for a in summary["analysis"]}
    assert analysis["strong", 1]["speedup"] == 1.0
    assert positive(analysis["strong", 2]["speedup"], analysis["weak", 2]["weak_efficiency"])
    assert "Strong scaling" in md and "Weak scaling" in md and "| CartPole-v1 | 256 | 2 |" in md
    assert "per core used" in md  # the per-core column says which ratio it is


def test_workload_env_changes_nothing_but_the_cost():
    """CartPoleWork-v0 (k passes) steps exactly as CartPole-v1, on numba, torch and in Python
    (Gymnasium's CartPoleEnv)."""
    import gymnasium

    import envfleet
    from benchmarks.studies import workload

    actions = np.random.default_rng(0).integers(0, 2, (120, 8))
    for backend in ("numba", "torch"):
        ref = envfleet.make("CartPole-v1", 8, backend=backend, seed=5)
        work = envfleet.make(workload.NATIVE_ID, 8, backend=backend, seed=5, work=7)
        assert np.array_equal(np.asarray(ref.reset(seed=5)[0]),
                              np.asarray(work.reset(seed=5)[0]))
        for a in actions:
            for x, y in zip(ref.step(a)[:4], work.step(a)[:4], strict=True):
                assert np.array_equal(np.asarray(x), np.asarray(y)), backend
    ref, work = gymnasium.make("CartPole-v1"), gymnasium.make(workload.PYTHON_IMPORT_ID, work=7)
    assert np.array_equal(ref.reset(seed=1)[0], work.reset(seed=1)[0])
    for t, a in enumerate(actions[:, 0]):
        got, want = work.step(int(a)), ref.step(int(a))
        assert all(np.array_equal(x, y) for x, y in zip(got[:4], want[:4], strict=True))
        if want[2] or want[3]:
            ref.reset(seed=t)
            work.reset(seed=t)
    assert work.unwrapped.sink != 0.0  # the extra passes ran
    with pytest.raises(ValueError, match="work must be an int >= 1"):
        workload.make_params(work=0)


def test_workload_study(tmp_path):
    assert main(["--study", "workload", "--backends", "torch,serial", "--work", "1,3",
                 "--num-envs", "1,4", "--seconds", "0.02", "--repeats", "2",
                 "--out", str(tmp_path)]) == 0
    _header, rows, summary, md = outputs(tmp_path, "workload")
    assert sorted((r["backend"], r["work"], r["num_envs"]) for r in rows) == [
        (b, k, n) for b in ("serial", "torch") for k in (1, 3) for n in (1, 4)]
    for r in rows:
        check_measured(r)
    assert {(t["backend"], t["work"]) for t in summary["turning_points"]} == {
        (b, k) for b in ("serial", "torch") for k in (1, 3)}
    assert all(t["num_envs"] in (1, 4) for t in summary["turning_points"])
    assert "turning point" in md and "| torch | 3 |" in md


def test_roofline_counts():
    counts = roofline.step_counts("CartPole-v1")
    # 4 float64 columns read + written, obs 16 + reward 4 + 2 flags, the driver's 35,
    # the copy=True copy of the outputs
    assert counts["bytes_state"] == 64 and counts["bytes_outputs"] == 22
    assert counts["bytes"] == 64 + 22 + 35 + 44 and counts["flops"] == 28
    assert roofline.step_counts("Chess-v0")["flops"] is None
    for env in roofline.FLOPS:
        assert positive(roofline.step_counts(env)["intensity"])


def test_roofline_study(tmp_path):
    assert main(["--study", "roofline", "--env", "CartPole-v1", "--backends", "torch",
                 "--num-envs", "1024", "--max-threads", "1", "--seconds", "0.02",
                 "--repeats", "2", "--out", str(tmp_path)]) == 0
    _header, rows, summary, md = outputs(tmp_path, "roofline")
    roofs = summary["roofs"]
    assert positive(roofs["bandwidth_gbs"], roofs["peak_gflops"], roofs["scalar_fma_gflops"])
    (env,) = summary["envs"]
    assert env["env"] == "CartPole-v1" and env["backend"] == "torch"
    assert positive(env["achieved_gflops"], env["achieved_gbs"], env["pct_of_bound"])
    assert env["bound"] in ("memory", "compute")
    check_measured(next(r for r in rows if r.get("kind") == "env"))
    assert "STREAM triad" in md and "% of bound" in md


def test_tpb_without_a_gpu_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(tpb, "gpu_status", lambda: "no CUDA GPU is visible to numba-cuda")
    assert main(["--study", "tpb", "--out", str(tmp_path)]) == 0
    header, rows, summary, md = outputs_no_table(tmp_path)
    (row,) = rows
    assert row["status"] == "not measured" and row["note"].startswith("not measured: no GPU")
    assert summary["measured"] is False and header["settings"]["measured"] is False
    assert "not measured: no GPU" in md


def outputs_no_table(out: Path) -> tuple[dict, list[dict], dict, str]:
    stem = out / "study-tpb"
    lines = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    assert stem.with_suffix(".png").read_bytes()[:8] == PNG
    return lines[0], lines[1:-1], lines[-1], stem.with_suffix(".md").read_text()


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                    reason="the tpb sweep's structure runs under the CUDA simulator")
def test_tpb_sweep_structure_under_the_simulator(tmp_path):
    assert main(["--study", "tpb", "--block-sizes", "32", "--num-envs", "4,8",
                 "--seconds", "0.01", "--repeats", "2", "--out", str(tmp_path)]) == 0
    _header, rows, summary, md = outputs(tmp_path, "tpb")
    assert sorted((r["threads_per_block"], r["num_envs"]) for r in rows) == [(32, 4), (32, 8)]
    for r in rows:
        check_measured(r)
        assert r["backend"] == "cuda"
    assert summary["simulator"] is True and summary["turning_points"]["32"] in (4, 8)
    assert "CUDA simulator" in md and "not a measurement" in md


def test_executors_study(tmp_path, monkeypatch):
    from benchmarks.studies import executors

    # a namespace whose module is missing: its rows say so instead of failing
    monkeypatch.setitem(executors.NAMESPACE_MODULES, "ALE/", ("no_such_module_x", "atari"))
    assert main(["--study", "executors", "--env", "CartPole-v1,ALE/Breakout-v5",
                 "--backends", "serial,async,gym-sync", "--num-envs", "2",
                 "--num-workers", "1", "--seconds", "0.02", "--repeats", "2",
                 "--out", str(tmp_path)]) == 0
    _header, rows, summary, md = outputs(tmp_path, "executors")
    measured = {r["series"]: r for r in rows if r["env"] == "CartPole-v1"}
    assert set(measured) == {"serial", "async 1w", "gym-sync"}
    for r in measured.values():
        check_measured(r)
    assert measured["async 1w"]["batch_size"] == 1
    ratios = {r["series"]: r for r in summary["ratios"]}
    assert ratios["gym-sync"]["ratio_vs_gym_sync"] == 1.0
    assert positive(ratios["serial"]["ratio_vs_gym_sync"],
                    ratios["serial"]["ratio_vs_gym_sync_per_core"])
    atari = [r for r in rows if r["env"] == "ALE/Breakout-v5"]
    assert atari and all(r["status"] == "skipped" and "not installed" in r["note"]
                         for r in atari)
    assert "× gym-sync per core" in md and "not installed: needs no_such_module_x" in md


@pytest.mark.parametrize("study", ["threads", "roofline", "tpb"])
def test_native_studies_refuse_a_gymnasium_id(study, tmp_path, capsys):
    assert main(["--study", study, "--env", "HumanoidStandup-v5",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--study {study} steps native envs" in err and "'HumanoidStandup-v5'" in err


def test_workload_refuses_other_envs_and_backends(tmp_path, capsys):
    assert main(["--study", "workload", "--env", "Acrobot-v1",
                 "--out", str(tmp_path)]) == 2
    assert main(["--study", "workload", "--backends", "gym-sync",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "can only be CartPole-v1" in err and "not gym-sync" in err
