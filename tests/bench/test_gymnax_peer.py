"""gymnax's MinAtar games as ``envfleet bench``'s peer of ``MinAtar/<Game>-vN``: in the default
sweep of the ids gymnax has, reported as not installed when it is missing (CI does not install
it), and measured per call (``gymnax``) and as a scan of 128 steps per call
(``gymnax-scan128``) where it is installed (``scripts/install_gymnax.sh``)."""

from __future__ import annotations

import importlib.util

import pytest

from envfleet.bench.baselines import BASELINES, GYMNAX_SCAN_STEPS, gymnax_ids, native_default
from envfleet.bench.measure import PointSpec, run_point
from envfleet.cli import main

PEERS = ("gymnax", "gymnax-scan128")


def test_gymnax_plays_the_minatar_ids_it_has() -> None:
    assert {"MinAtar/Breakout-v1", "MinAtar/Breakout-v0", "MinAtar/SpaceInvaders-v1",
            "MinAtar/Asterix-v1", "MinAtar/Freeway-v1", "MinAtar/Seaquest-v1"} <= gymnax_ids()
    for peer in PEERS:
        assert BASELINES[peer].status("CartPole-v1") == f"{peer} has no CartPole-v1 env"
        assert peer not in native_default("CartPole-v1")
    # the scan (128 steps of every env per call) is measured when asked for
    assert "gymnax" in native_default("MinAtar/Breakout-v1")
    assert "gymnax-scan128" not in native_default("MinAtar/Breakout-v1")


def test_a_missing_gymnax_is_reported_not_installed(monkeypatch, tmp_path, capsys) -> None:
    from envfleet.bench import baselines
    from envfleet.bench.runner import choose_backends

    real = importlib.util.find_spec
    monkeypatch.setattr(baselines.importlib.util, "find_spec",
                        lambda name, *a: None if name == "gymnax" else real(name, *a))
    chosen, notes = choose_backends(None, "MinAtar/Breakout-v1", native=True)
    assert "numba" in chosen and "gymnax" not in chosen
    assert ("gymnax: not installed: needs gymnax (scripts/install_gymnax.sh: pip install "
            "'envfleet[minatar-bench]', then gymnax==1.0.1 with --no-deps)") in notes
    chosen, notes = choose_backends(["numba", *PEERS], "MinAtar/Breakout-v1", native=True)
    assert chosen == ["numba"]
    for peer in PEERS:
        assert (f"{peer}: not installed: needs gymnax (scripts/install_gymnax.sh: pip install "
                "'envfleet[minatar-bench]', then gymnax==1.0.1 with --no-deps)") in notes
    # asked for alone: an error
    assert main(["bench", "--env", "MinAtar/Breakout-v1", "--backends", "gymnax",
                 "--out", str(tmp_path)]) == 2
    assert "'gymnax' cannot run here: not installed" in capsys.readouterr().err


@pytest.mark.slow  # JAX's import and compile: ~8 s a point (skipped where gymnax is missing)
@pytest.mark.parametrize(("peer", "steps_per_env"), [("gymnax", 1),
                                                     ("gymnax-scan128", GYMNAX_SCAN_STEPS)])
def test_gymnax_point_counts_every_step(peer: str, steps_per_env: int) -> None:
    pytest.importorskip("gymnax")
    spec = PointSpec(env_id="MinAtar/Breakout-v1", reference_id="MinAtar/Breakout-v1",
                     backend=peer, num_envs=8, seconds=0.05)
    row = run_point(spec, timeout=240)
    assert row["status"] == "ok", row
    assert row["steps"] == 8 * steps_per_env * row["calls"] and row["threads"] is None
    assert row.get("steps_per_env_per_call", 1) == steps_per_env
