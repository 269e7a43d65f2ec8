"""``envfleet bench --env <Id>-v5``: the MuJoCo engine's series next to its peers (the same
``gymnasium.make(id)``), missing peers noted, the floor, and a tiny run's files."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("mujoco")

from envfleet.bench.engines import MUJOCO, MujocoFloor, family_of
from envfleet.bench.runner import choose_backends, study_name

CHEETAH = "HalfCheetah-v5"


def test_tiny_mujoco_bench_writes_the_series_and_files(tmp_path):
    cmd = [sys.executable, "-m", "envfleet", "bench", "--env", CHEETAH, "--backends",
           "mujoco,gym-sync,mujoco-floor", "--threads", "1", "--num-envs", "2",
           "--seconds", "0.05", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    stem = tmp_path / "bench-HalfCheetah-v5-mujoco"
    lines = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    points = lines[1:]
    assert [p["series"] for p in points] == ["mujoco", "mujoco 1t", "gym-sync", "mujoco-floor"]
    for p in points:
        assert p["status"] == "ok", p
        assert p["num_envs"] == 2 and p["steps"] == 2 * p["calls"] > 0
    md = stem.with_suffix(".md").read_text()
    assert "mujoco × gym-sync" in md and "mujoco × mujoco-floor" in md
    assert stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mujoco_defaults_and_missing_peers_are_noted(monkeypatch):
    assert family_of(CHEETAH) is MUJOCO and family_of("ALE/Pong-v5").name == "atari"
    assert family_of("CartPole-v1") is None
    chosen, notes = choose_backends(None, CHEETAH, native=False)
    expected = [b for b in (MUJOCO.name, *MUJOCO.peers)
                if not any(n.startswith(f"{b}:") for n in notes)]
    assert chosen == expected and chosen[0] == "mujoco" and "pool" in chosen

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in (
        "envpool", "stable_baselines3") else real(name, *a))
    chosen, notes = choose_backends(None, CHEETAH, native=False)
    assert "envpool" not in chosen and "sb3-subproc" not in chosen
    assert "envpool: not installed: needs envpool (pip install 'envfleet[envpool]')" in notes
    assert {"mujoco", "gym-sync", "gym-async", "pool", "mujoco-floor"} <= set(chosen)
    with pytest.raises(Exception, match="runs Gymnasium's MuJoCo <Id>-v5 ids"):
        choose_backends(["mujoco"], "CartPole-v1", native=True)
    assert study_name(CHEETAH, ["mujoco", "pool", "envpool"], [2], None) == (
        "bench-HalfCheetah-v5-mujoco")


def test_the_floor_steps_every_simulation_from_the_engines_reset():
    floor = MujocoFloor(CHEETAH, 2, 3, num_threads=1)
    try:
        obs = floor.reset()
        times = [d.time for d in floor.env.datas]
        floor.step(np.full((2, 6), 0.5, np.float32))
        assert [d.time - t for d, t in zip(floor.env.datas, times, strict=True)] == \
            pytest.approx([5 * 0.01] * 2)
        assert all((d.ctrl == 0.5).all() for d in floor.env.datas)
        import envfleet

        ours = envfleet.make(CHEETAH, 2, seed=3)
        np.testing.assert_array_equal(obs, ours.reset()[0])  # the same reset states
        ours.close()
    finally:
        floor.close()
