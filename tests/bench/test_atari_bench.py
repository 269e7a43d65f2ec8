"""``envfleet bench --env ALE/<Game>-v5``: the Atari engine's series, its peers playing the same
preprocessed env, missing peers noted, and a tiny run's files."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from envfleet.bench.baselines import BASELINES
from envfleet.bench.engines import ATARI, AleFloor
from envfleet.bench.runner import choose_backends, comparisons, plan, study_name

BREAKOUT = "ALE/Breakout-v5"


def test_tiny_atari_bench_writes_the_series_and_files(tmp_path):
    cmd = [sys.executable, "-m", "envfleet", "bench", "--env", BREAKOUT, "--backends",
           "atari,gym-sync,ale-floor", "--threads", "1", "--num-envs", "2",
           "--seconds", "0.05", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    stem = tmp_path / "bench-ALE_Breakout-v5-atari"
    lines = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    points = lines[1:]
    assert lines[0]["settings"]["env"] == BREAKOUT
    assert [p["series"] for p in points] == ["atari", "atari 1t", "gym-sync", "ale-floor"]
    for p in points:
        assert p["status"] == "ok", p
        assert p["num_envs"] == 2 and p["steps"] == 2 * p["calls"] > 0
    by_series = {p["series"]: p for p in points}
    assert by_series["atari 1t"]["threads"] == 1 and by_series["atari"]["threads"] is None
    md = stem.with_suffix(".md").read_text()
    assert "atari × gym-sync" in md and "atari × ale-floor" in md
    assert stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_atari_defaults_and_missing_peers_are_noted(monkeypatch):
    chosen, notes = choose_backends(None, BREAKOUT, native=False)
    expected = [b for b in (ATARI.name, *ATARI.peers)
                if not any(n.startswith(f"{b}:") for n in notes)]
    assert chosen == expected and chosen[0] == "atari"
    assert not {"serial", "subprocess", "pool", "numba"} & set(chosen)  # raw envs: asked for

    real = importlib.util.find_spec
    hidden = {"envpool", "stable_baselines3"}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in hidden else real(name, *a))
    chosen, notes = choose_backends(None, BREAKOUT, native=False)
    assert "envpool" not in chosen and "sb3-subproc" not in chosen
    assert "envpool: not installed: needs envpool (pip install 'envfleet[envpool]')" in notes
    assert any(n.startswith("sb3-subproc: not installed") for n in notes)
    assert {"atari", "gym-sync", "gym-async", "ale-floor"} <= set(chosen)

    hidden.add("cv2")  # the engine itself: noted, its peers still run
    chosen, notes = choose_backends(None, BREAKOUT, native=False)
    assert "atari" not in chosen and "gym-sync" in chosen
    assert any(n.startswith("atari: not installed: needs cv2") for n in notes)


def test_atari_defaults_in_a_fresh_process_see_the_ale_ids():
    """choose_backends registers the ALE ids itself (ale-py not imported yet): no peer is left
    out as "Gymnasium has no ALE/Pong-v5 env"."""
    code = ("from envfleet.bench.runner import choose_backends\n"
            "print(choose_backends(None, 'ALE/Pong-v5', native=False)[1])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Gymnasium has no" not in proc.stdout, proc.stdout


def test_atari_series_plan_and_comparisons():
    args = argparse.Namespace(threads=[1, 2], seconds=0.1, torch_device=None,
                              threads_per_block=None, baseline_max_envs=None)
    points, columns = plan(BREAKOUT, BREAKOUT, ["atari", "envpool", "gym-async"], [8, 16],
                           [1, 2], args)
    assert [label for label, _ in columns] == ["atari", "atari 2t", "atari 1t", "envpool",
                                               "gym-async"]
    assert [(p.series, p.spec.num_envs, p.spec.threads) for p in points[:3]] == [
        ("atari", 8, None), ("atari 2t", 8, 2), ("atari 1t", 8, 1)]
    primary, pairs = comparisons(columns)
    assert primary == "atari" and pairs == [("atari", "envpool"), ("atari", "gym-async")]
    assert study_name(BREAKOUT, ["atari", "envpool"], [1], None) == "bench-ALE_Breakout-v5-atari"
    with pytest.raises(Exception, match="runs ALE/<Game>-v5 ids"):
        choose_backends(["atari"], "CartPole-v1", native=True)


@pytest.mark.parametrize("peer", ["gym-sync", "sb3-dummy", "envpool", "ale-vector"])
def test_atari_peers_play_the_preprocessed_env(peer):
    """Each peer's observations are the reference stack's (4, 84, 84) uint8 frames; Gymnasium's
    and SB3's vector envs of the stack reset bit for bit as envfleet's engine does."""
    baseline = BASELINES[peer]
    if baseline.status(BREAKOUT):
        pytest.skip(baseline.status(BREAKOUT))
    import envfleet

    built = baseline.build(BREAKOUT, 2, 3)
    try:
        obs = np.asarray(built.reset())
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        step = built.step(built.action_space.sample())
        assert np.asarray(step[0]).shape == (2, 4, 84, 84)
    finally:
        built.close()
    if peer in ("gym-sync", "sb3-dummy"):
        ours = envfleet.make(BREAKOUT, 2, seed=3)
        np.testing.assert_array_equal(obs, ours.reset()[0])
        ours.close()


def test_envpool_gets_the_same_preprocessing():
    from envfleet.bench.baselines import envpool_id

    assert envpool_id(BREAKOUT) == ("Breakout-v5", {"repeat_action_probability": 0.25,
                                                    "use_fire_reset": False})
    assert envpool_id("CartPole-v1") == ("CartPole-v1", {})
    if importlib.util.find_spec("envpool") is not None:
        assert BASELINES["envpool"].status(BREAKOUT) is None


def test_the_floor_steps_every_emulator():
    floor = AleFloor("breakout", 2, 0, num_threads=1)
    before = [ale.getEpisodeFrameNumber() for ale in floor.ales]
    frames = floor.step(np.zeros(2, np.int64))
    after = [ale.getEpisodeFrameNumber() for ale in floor.ales]
    assert [a - b for a, b in zip(after, before, strict=True)] == [4, 4]
    assert frames.shape == (2, 210, 160) and frames.any()
