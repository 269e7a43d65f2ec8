"""``python -m benchmarks --env Chess-v0``: the chess peers, perft, the chess run and its report
sections (moved from tests/test_bench.py with the chess bench)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from envfleet.bench.measure import PointSpec, run_point
from envfleet.bench.report import Results

ROOT = Path(__file__).resolve().parents[2]


# --- Chess-v0: the peers, perft, and the chess run ---------------------------------------------

CHESS_PEER_MODULES = {"python-chess": "chess", "openspiel": "pyspiel",
                      "openspiel-numpy": "pyspiel", "pgx": "pgx"}


def _chess_available() -> bool:
    from benchmarks.chess import chess_env_status

    return chess_env_status() is None


@pytest.mark.parametrize("peer", list(CHESS_PEER_MODULES))
def test_each_installed_chess_peer_measures_plies(peer):
    pytest.importorskip(CHESS_PEER_MODULES[peer])
    # the worker learns the peers from benchmarks.chess, as a bench run's workers do
    spec = PointSpec(env_id="Chess-v0", reference_id="Chess-v0", backend=peer, num_envs=3,
                     seconds=0.05, imports=("benchmarks.chess",))
    row = run_point(spec, timeout=240)
    assert row["status"] == "ok", row
    assert row["steps_per_s"] > 0 and row["calls"] >= 3 and row["steps"] == 3 * row["calls"]


def test_python_chess_peer_plays_legal_moves_and_restarts_finished_games():
    chess = pytest.importorskip("chess")
    from benchmarks.chess import GAME_PLIES, PythonChessGames, game_over, start_fens

    games = PythonChessGames(4, seed=1)
    masks = games.reset()
    starts = start_fens(4)
    assert [b.fen() for b in games.boards] == starts
    assert masks == [list(chess.Board(fen).legal_moves) for fen in starts]
    restarts = 0
    for _ in range(100):
        fens = [b.fen() for b in games.boards]
        masks = games.step()
        for i, (fen, board, mask) in enumerate(zip(fens, games.boards, masks, strict=True)):
            assert mask == list(board.legal_moves)  # the mask: the position's legal moves
            if board.move_stack:  # one legal move played from the previous position
                previous = board.copy()
                move = previous.pop()
                assert previous.fen() == fen and move in chess.Board(fen).legal_moves
            else:  # a finished game restarted from its bench position
                restarts += 1
                assert board.fen() == starts[i]
    assert restarts >= 4  # 100 plies: every board reached the ply limit at least once
    assert max(games.plies) < GAME_PLIES

    # Chess-v0's endings on scripted positions
    def over(fen: str, plies: int = 0, pushes: tuple[str, ...] = ()) -> bool:
        board = chess.Board(fen)
        for uci in pushes:
            board.push_uci(uci)
        return game_over(board, list(board.legal_moves), plies)

    start = chess.STARTING_FEN
    assert over(start, pushes=("f2f3", "e7e5", "g2g4", "d8h4"))  # mate
    assert over("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1")  # stalemate
    assert over("8/8/8/4k3/8/8/8/4K3 w - - 0 1")  # insufficient material
    assert over("8/8/8/4k3/8/8/8/R3K3 w - - 100 80")  # fifty-move rule
    assert not over("8/8/8/4k3/8/8/8/R3K3 w - - 99 80")
    assert over(start, pushes=("g1f3", "g8f6", "f3g1", "f6g8") * 2)  # threefold
    assert not over(start, pushes=("g1f3", "g8f6", "f3g1", "f6g8"))
    assert over(start, GAME_PLIES) and not over(start, GAME_PLIES - 1)


def test_chess_bench_positions_are_reproducible_and_span_the_game():
    pytest.importorskip("chess")
    from benchmarks.chess import BENCH_POSITIONS, generate_positions

    assert tuple(generate_positions()) == BENCH_POSITIONS  # stored = regenerated
    phases = [phase for phase, _ in BENCH_POSITIONS]
    assert {p: phases.count(p) for p in set(phases)} == {"opening": 16, "middlegame": 16,
                                                        "endgame": 16}


def test_every_chess_contender_plays_the_same_positions():
    """The like-for-like rule: envfleet and each installed peer start board i at the same
    FEN and restart there; copy semantics are recorded per series."""
    chess = pytest.importorskip("chess")
    from benchmarks.chess import (
        NativeGames,
        OpenSpielGames,
        PythonChessGames,
        contenders,
        fairness,
        start_fens,
    )

    n = 5
    starts = start_fens(n)
    assert len(set(starts)) == n
    assert [b.fen() for b in PythonChessGames(n, 0).starts] == starts
    if importlib.util.find_spec("pyspiel") is not None:
        spiel = OpenSpielGames(n, 0)
        spiel.reset()
        for state, fen in zip(spiel.states, starts, strict=True):
            legal = {state.action_to_string(a) for a in state.legal_actions()}
            assert len(legal) == chess.Board(fen).legal_moves.count()
    if _chess_available():
        games = NativeGames(n, 0, num_threads=1)
        games.reset()
        assert [games.env.unwrapped.fen(i) for i in range(n)] == starts
        names = {c.name: c for c in contenders(n, threads=1)}
        assert names["envfleet numba 1t copy=False"].copy == "view"
        assert names["envfleet numba 1t"].copy == "copy"
        games.close()
    assert fairness("numba", {})["copy"] == "copy"
    assert fairness("numba", {"copy": False})["copy"] == "view"
    assert fairness("python-chess", {})["positions"] == "bench"
    assert fairness("pgx", {})["positions"] == "initial"


def _chess_run(tmp_path, backends: str, kind: str):
    cmd = [sys.executable, "-m", "benchmarks", "--env", "Chess-v0", "--backends",
           backends, "--num-envs", "1,4", "--seconds", "0.05", "--perft-depth", "1",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stem = tmp_path / f"bench-Chess-v0-{kind}"
    lines = [json.loads(x) for x in stem.with_suffix(".jsonl").read_text().splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["settings"]["unit"] == "plies"
    assert stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return proc, lines[1:], stem.with_suffix(".md").read_text()


def test_chess_run_with_peers_writes_plies_and_perft(tmp_path):
    pytest.importorskip("chess")
    _, rows, md = _chess_run(tmp_path, "python-chess", "baselines")
    points = [r for r in rows if r["type"] == "point"]
    assert [(p["series"], p["num_envs"]) for p in points] == [("python-chess", 1),
                                                              ("python-chess", 4)]
    assert all(p["status"] == "ok" and p["steps_per_s"] > 0 for p in points)
    perft = [r for r in rows if r["type"] == "perft"]
    assert rows[-1]["type"] == "summary" and rows[-1]["primary"] is None
    by = {(r["series"], r["position"]): r for r in perft}
    assert by["python-chess-perft", "start"]["nodes"] == 20
    assert by["python-chess-perft", "kiwipete"]["nodes"] == 48
    assert "Chess-v0: plies/s by num_envs" in md and "perft nodes/s" in md
    assert "| start | 1 | 20 |" in md


def test_chess_run_envfleet_side_by_side_with_a_peer(tmp_path):
    if not _chess_available():
        pytest.skip("Chess-v0 not available in this envfleet yet")
    pytest.importorskip("chess")
    proc, rows, md = _chess_run(tmp_path, "numba,python-chess", "native")
    points = [r for r in rows if r["type"] == "point"]
    assert {(p["series"], p["num_envs"]) for p in points} == {
        (s, n) for s in ("numba", "python-chess") for n in (1, 4)}
    for p in points:
        assert p["status"] == "ok" and p["steps_per_s"] > 0, p
    numba = [p for p in points if p["series"] == "numba"]
    assert all(p["action_mask_shape"] == [p["num_envs"], 4672] for p in numba)
    # like for like: the same positions, envfleet's default copy=True, recorded per series
    assert all(p["copy"] == "copy" and p["positions"] == "bench" for p in points), points
    assert "numba × python-chess" in md and "numba × python-chess" in proc.stdout
    summary = rows[-1]
    assert summary["type"] == "summary" and summary["primary"] == "numba"
    assert set(summary["ratios"]["numba / python-chess"]) == {"1", "4"}
    assert summary["perft"]["start depth 1"]["ratio"] > 0
    perft = {(r["series"], r["position"]): r for r in rows if r["type"] == "perft"}
    assert perft["envfleet-perft", "start"]["status"] == "ok"
    assert perft["envfleet-perft", "kiwipete"]["nodes"] == 48


def test_chess_defaults_peers_and_envfleet_guarded(capsys, tmp_path):
    from benchmarks.chess import PEERS, chess_env_status
    from envfleet.bench.runner import choose_backends

    missing = "Chess-v0 is not available"
    chosen, notes = choose_backends(None, "Chess-v0", native=True, native_missing=missing)
    assert not {"numba", "cuda", "torch", "gym-sync", "gym-numpy", "sb3-dummy"} & set(chosen)
    assert set(chosen) <= set(PEERS)
    assert any(n.startswith("numba: Chess-v0 is not available") for n in notes)
    # every peer is either measured or reported as not installed
    for peer in PEERS:
        assert peer in chosen or any(n.startswith(f"{peer}: not installed") for n in notes)
    if chess_env_status() is not None:  # the envfleet side is guarded, not an error
        with pytest.raises(Exception, match="Chess-v0 is not available"):
            choose_backends(["numba"], "Chess-v0", native=True,
                            native_missing=chess_env_status())
    # the peers play chess only; CartPole's defaults do not include them
    cartpole, _ = choose_backends(None, "CartPole-v1", native=True)
    assert not set(PEERS) & set(cartpole)
    assert main(["--backends", "python-chess", "--out", str(tmp_path)]) == 2
    assert "plays Chess-v0 only" in capsys.readouterr().err
    assert main(["--perft-depth", "2", "--out", str(tmp_path)]) == 2
    assert "Chess-v0 only" in capsys.readouterr().err


def test_chess_targets_and_perft_tables():
    from benchmarks.chess import perft_table, target_lines

    def point(series, n, sps):
        return {"type": "point", "series": series, "backend": series, "num_envs": n,
                "status": "ok", "steps_per_s": sps, "us_per_call": 1e6 * n / sps,
                "warmup_s": 0.5, "construct_s": 0.1}

    rows = [point("numba", 512, 5e7), point("numba", 4096, 9e7),
            point("openspiel", 512, 6e4), point("openspiel-numpy", 512, 1.5e4),
            point("python-chess", 512, 2e5), point("pgx", 512, 4e3), point("pgx", 4096, 6e3)]
    results = Results(rows, ["numba", "python-chess", "openspiel", "openspiel-numpy", "pgx"],
                      primary="numba", unit="plies")
    lines = target_lines(results)
    assert lines[0].startswith("numba vs openspiel at N=512: 833×") and lines[0].endswith("met")
    assert "NOT met" in lines[2]  # 250x python-chess < 300x
    assert "at the best N of each: 15,000×" in lines[3]  # 90M @ 4096 / 6k @ 4096
    header, body = perft_table([
        {"series": "envfleet-perft", "position": "start", "depth": 4, "status": "ok",
         "nodes": 197281, "nodes_per_s": 5e7},
        {"series": "python-chess-perft", "position": "start", "depth": 4, "status": "ok",
         "nodes": 197281, "nodes_per_s": 5e5}])
    assert header[-1] == "envfleet × python-chess"
    assert body == [["start", "4", "197,281", "50.0M", "500k", "100×"]]


def test_the_chess_report_shows_ratios_not_the_projects_targets():
    """``python -m benchmarks --env Chess-v0`` shows its user envfleet's ratio to each peer, not the
    issues' targets ("target >= 300×: NOT met"): those stay in the summary JSON line."""
    from benchmarks.chess import markdown_sections, rich_sections, summary

    point = {"type": "point", "status": "ok", "warmup_s": 0.5, "construct_s": 0.1}
    rows = [{**point, "series": s, "backend": s, "num_envs": 512, "steps_per_s": sps,
             "us_per_call": 1e6 * 512 / sps} for s, sps in (("numba", 5e7), ("python-chess", 2e5))]
    results = Results(rows, ["numba", "python-chess"], primary="numba", unit="plies")
    shown = [str(x) for x in rich_sections(results, [])] + [markdown_sections(results, [])]
    for text in shown:
        assert "target" not in text.lower() and "met" not in text.split()
    line = "numba vs python-chess at N=512: 250× as measured (50.0M @ 512 vs 200k @ 512)"
    assert f"ratio: {line}" in shown and f"- {line}" in shown[-1]
    assert "openspiel" not in shown[-1]  # not measured here: left out, not "not measured"
    judged = [t for t in summary(results, [])["targets"] if t["peer"] == "python-chess"]
    assert judged[0]["met"] is False  # the project's record keeps its targets


def test_a_missing_chess_peer_is_reported_not_installed(monkeypatch, tmp_path, capsys):
    import importlib.util

    from envfleet.bench import baselines
    from envfleet.bench.runner import choose_backends

    real = importlib.util.find_spec
    monkeypatch.setattr(baselines.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("pgx", "pyspiel") else real(name, *a))
    chosen, notes = choose_backends(None, "Chess-v0", native=True)
    assert not {"pgx", "openspiel", "openspiel-numpy"} & set(chosen)
    for peer, module in (("pgx", "pgx"), ("openspiel", "pyspiel")):
        assert f"{peer}: not installed: needs {module} (pip install 'envfleet[chess-bench]')" \
            in notes
    assert main(["--env", "Chess-v0", "--backends", "pgx", "--out", str(tmp_path)]) == 2
    assert "'pgx' cannot run here: not installed" in capsys.readouterr().err
