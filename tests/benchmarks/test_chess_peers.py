"""Issue 22's chess bench additions: EnvPool's Chess-v1 as a peer, and the user loop (a
policy's NumPy work between steps, outside the clock) next to the tight loop on every side."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import chess as bench_chess
from benchmarks.chess import (
    PEERS,
    REQUIRES,
    USER_SUFFIX,
    build_games,
    fairness,
    random_legal_from_mask,
    target_lines,
    timed_user_loop,
)
from envfleet.bench.measure import PointSpec, measure_one
from envfleet.bench.report import Results
from envfleet.bench.runner import comparisons, plan

ROOT = Path(__file__).resolve().parents[2]


def _chess_available() -> bool:
    return bench_chess.chess_env_status() is None


def test_the_user_loops_policy_draws_uniformly_among_the_legal_labels() -> None:
    mask = np.zeros((3, 4672), dtype=bool)
    mask[0, [5, 77, 4671]] = True
    mask[2, 300] = True  # row 1: no legal action
    rng = np.random.default_rng(0)
    draws = np.array([random_legal_from_mask(mask, rng) for _ in range(3000)])
    assert draws.dtype == np.int64 and draws.shape == (3000, 3)
    counts = {label: int((draws[:, 0] == label).sum()) for label in (5, 77, 4671)}
    assert sum(counts.values()) == 3000 and min(counts.values()) > 900, counts
    assert (draws[:, 1] == 0).all() and (draws[:, 2] == 300).all()
    # OpenSpiel's masks: a list of lists of ints
    lists = [[int(x) for x in row] for row in mask]
    assert random_legal_from_mask(lists, np.random.default_rng(1))[2] == 300
    assert (random_legal_from_mask(np.zeros((2, 4672), bool), rng) == 0).all()


def test_the_policy_plays_legal_moves_on_chess_v0_as_python_chess_sees_them() -> None:
    chess = pytest.importorskip("chess")
    if not _chess_available():
        pytest.skip("this envfleet has no Chess-v0")
    games = build_games("numba", 8, seed=3, threads=1)
    mask = games.reset()
    env = games.env.unwrapped
    rng = np.random.default_rng(3)
    for _ in range(20):
        actions = games.policy(mask, rng)
        for i, a in enumerate(actions):
            board = chess.Board(env.fen(i))
            assert chess.Move.from_uci(env.action_to_uci(i, int(a))) in board.legal_moves
        mask = games.play(actions)
    games.close()


def test_envpool_chess_is_a_chess_peer_and_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    from envfleet.bench import baselines
    from envfleet.bench.runner import choose_backends

    assert "envpool-chess" in PEERS and REQUIRES["envpool-chess"] == "envpool"
    peer = baselines.BASELINES["envpool-chess"]
    assert peer.plays == "Chess-v0" and peer.thread_sweep and peer.extra == "envpool"
    assert fairness("envpool-chess", {})["positions"] == "initial"
    assert fairness("envpool-chess", {"loop": "user"})["loop"] == "user"
    real = importlib.util.find_spec
    monkeypatch.setattr(baselines.importlib.util, "find_spec",
                        lambda name, *a: None if name == "envpool" else real(name, *a))
    chosen, notes = choose_backends(None, "Chess-v0", native=True)
    assert "envpool-chess" not in chosen
    assert ("envpool-chess: not installed: needs envpool (pip install 'envfleet[envpool]')"
            in notes)


def test_envpool_chess_plays_legal_moves_from_its_mask() -> None:
    pytest.importorskip("envpool")
    games = build_games("envpool-chess", 4, seed=0, threads=1)
    mask = games.reset()
    assert mask.shape == (4, 4672) and mask.dtype == bool
    assert (mask.sum(axis=1) == 20).all()  # the initial position
    rng = np.random.default_rng(0)
    for _ in range(10):
        actions = games.policy(mask, rng)
        assert mask[np.arange(4), actions].all()
        mask = games.play(actions)
    assert games.step().shape == (4, 4672)  # the tight loop: its own draws from the mask
    games.close()


def test_timed_user_loop_times_the_steps_not_the_policy() -> None:
    class Slow:
        """Steps take ~2 ms, the policy ~20 ms: the loop's plies/s is the steps'."""

        def play(self, actions):
            import time

            time.sleep(0.002)
            return np.ones((2, 4672), bool)

        @staticmethod
        def policy(mask, rng):
            import time

            time.sleep(0.02)
            return random_legal_from_mask(mask, rng)

    loop, mask = timed_user_loop(Slow(), np.ones((2, 4672), bool),
                                 np.random.default_rng(0), 0.1, min_calls=3)
    assert loop.calls >= 3 and mask.shape == (2, 4672)
    assert loop.policy_s > 5 * loop.step_s
    assert 1.5e-3 * loop.calls <= loop.step_s < 0.01 * loop.calls
    assert loop.plies_per_s(2) == 2 * loop.calls / loop.step_s


@pytest.mark.parametrize("backend", ["numba", "python-chess", "openspiel", "envpool-chess",
                                     pytest.param("pgx", marks=pytest.mark.slow)])
def test_a_user_loop_point_measures_each_installed_side(backend: str) -> None:
    if backend == "numba" and not _chess_available():
        pytest.skip("this envfleet has no Chess-v0")
    if backend != "numba":
        pytest.importorskip(REQUIRES[backend])
    spec = PointSpec(env_id="Chess-v0", reference_id="Chess-v0", backend=backend, num_envs=3,
                     threads=1 if backend in ("numba", "envpool-chess") else None,
                     seconds=0.05, options={"loop": "user"})
    row = measure_one(spec)
    assert row["status"] == "ok", row
    assert row["loop"] == "user" and row["steps_per_s"] > 0 and row["steps"] == 3 * row["calls"]
    assert row["policy_us_per_call"] > 0 and row["minor_faults_per_step"] >= 0
    assert row["threads"] == (None if backend == "pgx" else 1)  # pgx: XLA's own threads


def test_a_point_naming_an_unknown_loop_fails_with_its_name() -> None:
    spec = PointSpec(env_id="Chess-v0", reference_id="Chess-v0", backend="python-chess",
                     num_envs=1, options={"loop": "lazy"})
    row = measure_one(spec)
    assert row["status"] == "failed" and "loop 'lazy'" in row["error"] and "user" in row["error"]


def test_the_chess_plan_twins_every_series_with_its_user_loop() -> None:
    args = argparse.Namespace(seconds=0.1, torch_device=None, threads_per_block=None,
                              num_workers=None, baseline_max_envs=512, process_max_envs=256)
    points, columns = plan("Chess-v0", "Chess-v0", ["numba", "python-chess", "pgx"], [4],
                           [2], args)
    assert [label for label, _ in columns] == [
        "numba", "python-chess", "pgx", "numba user", "python-chess user", "pgx user"]
    loops = {p.series: p.spec.options.get("loop") for p in points}
    assert loops == {"numba": None, "python-chess": None, "pgx": None, "numba user": "user",
                     "python-chess user": "user", "pgx user": "user"}
    user_numba = next(p.spec for p in points if p.series == "numba user")
    assert user_numba.threads == 2 and user_numba.options["max_plies"] == 32
    # the ratio columns compare tight loops; the user loops have their own table
    primary, pairs = comparisons(columns)
    assert primary == "numba" and pairs == [("numba", "python-chess"), ("numba", "pgx")]
    _, cartpole = plan("CartPole-v1", "CartPole-v1", ["numba"], [4], [2], args)
    assert cartpole == [("numba", "numba")]  # other envs: no user loop


def test_the_user_loop_targets_read_the_primarys_two_loops() -> None:
    def point(series: str, n: int, rate: float) -> dict:
        return {"type": "point", "series": series, "num_envs": n, "status": "ok",
                "steps_per_s": rate, "threads": 2 if series.startswith("numba") else 1}

    rows = [point("numba", 512, 1.2e6), point("numba user", 512, 1.0e6),
            point("openspiel", 512, 3e4), point("openspiel user", 512, 3e4)]
    results = Results(rows, ["numba", "openspiel", "numba user", "openspiel user"], "numba",
                      [("numba", "openspiel"), ("numba user", "openspiel user")])
    lines = [line for line in target_lines(results) if USER_SUFFIX in line or "tight" in line]
    assert lines[0].startswith("numba tight loop / user loop at N=512: 1.20×")
    assert lines[0].endswith("target <= 1.3×: met")
    assert lines[1].startswith("numba user / openspiel user at N=512: 33.3× as measured, "
                               "16.7× per core used")
    assert lines[1].endswith("target >= 40×: NOT met")
    summary = bench_chess.summary(results, [])
    assert [t["met"] for t in summary["user_loop_targets"]] == [True, False]


def test_the_chess_run_writes_the_user_loop_beside_the_tight_loop(tmp_path) -> None:
    pytest.importorskip("chess")
    cmd = [sys.executable, "-m", "benchmarks", "--env", "Chess-v0", "--backends",
           "python-chess", "--num-envs", "2", "--seconds", "0.05", "--perft-depth", "0",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stem = tmp_path / "bench-Chess-v0-baselines"
    rows = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    kinds = {(r["type"], r.get("series")) for r in rows[1:-1]}
    assert kinds == {("point", "python-chess"), ("user", "python-chess user")}
    user = next(r for r in rows if r["type"] == "user")
    assert user["loop"] == "user" and user["status"] == "ok" and "policy_us_per_call" in user
    md = stem.with_suffix(".md").read_text()
    assert "### Chess-v0: plies/s in the user loop" in md and "python-chess user" in md
