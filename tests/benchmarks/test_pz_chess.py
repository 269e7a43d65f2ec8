"""``python -m benchmarks.chess.pz_chess``: every series measured, ratios and the plot."""

from __future__ import annotations

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("chess")
pytest.importorskip("pygame")
pytest.importorskip("matplotlib")


def test_compare_measures_every_series_and_plots(tmp_path):
    from benchmarks.chess import pz_chess

    result = pz_chess.compare(seconds=0.05, rounds=1, batched_envs=8, pin=False)
    names = [s["name"] for s in result["series"]]
    assert names == ["pettingzoo env()", "pettingzoo raw_env()", "envfleet env()",
                     "envfleet raw_env()", "Chess-v0 batched"]
    assert all(s["steps_per_s"] > 0 for s in result["series"])
    assert result["ratios"]["envfleet env() / pettingzoo env()"]["loop"] > 1
    pz_chess.plot(result, str(tmp_path / "pz.png"))
    assert (tmp_path / "pz.png").stat().st_size > 1000
