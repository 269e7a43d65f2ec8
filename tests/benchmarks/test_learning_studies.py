"""``--study e2e`` and ``--study chess-learning`` on tiny budgets: their files, positive finite
figures, the ideal line bounding end-to-end (or the row saying it does not), and the python-chess
contender playing the same game and being judged by the same games as the native one."""

from __future__ import annotations

from benchmarks.__main__ import main
from tests.benchmarks.test_studies import outputs, positive


def test_e2e_study(tmp_path):
    assert main(["--study", "e2e", "--env", "CartPole-v1", "--num-envs", "4",
                 "--backends", "numba", "--repeats", "1", "--out", str(tmp_path)]) == 0
    header, rows, summary, md = outputs(tmp_path, "e2e")
    assert header["settings"]["iterations"] == 3
    assert [(r["series"], r["num_envs"]) for r in rows] == [("native numba", 4)]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["iterations"] == 3 and len(r["steps_per_s_samples"]) == 3
        assert r["ideal_iterations"] >= 7  # enough for a median and an IQR
        assert positive(r["sps_end_to_end"], r["sps_env"], r["sps_ideal"], r["steps_per_s"],
                        r["sps_ideal_q1"], r["sps_ideal_q3"], r["efficiency"])
        assert r["sps_ideal_q1"] <= r["sps_ideal"] <= r["sps_ideal_q3"]
        # the real iterations timed as the ideal's (like for like): iter/ideal in the table
        assert r["sps_iteration_q1"] <= r["sps_iteration"] <= r["sps_iteration_q3"]
        assert f"| {r['sps_iteration'] / r['sps_ideal']:.2f} |" in md
        assert positive(r["cpu_per_iteration"]["real"], r["cpu_per_iteration"]["ideal"],
                        r["ideal_seconds_per_update"]["learning"])
        t = r["seconds_per_update"]
        assert positive(t["env"], t["inference"], t["learning"]) and t["other"] >= 0
        # the whole loop is never faster than the ideal loop doing the same work: where the
        # measured end-to-end exceeds the ideal's IQR the row and the table say so
        assert r["above_ideal"] == (r["sps_end_to_end"] > r["sps_ideal_q3"])
        assert ("⚠ |" in md) == any(x["above_ideal"] for x in rows)
        # the env costs something: env-only steps/s exceed the whole loop's
        assert r["sps_env"] > r["sps_end_to_end"]
    assert [p["series"] for p in summary["points"]] == ["native numba"]
    assert "ideal (IQR)" in md and "| CartPole-v1 | native numba | 4 |" in md
    assert "PPO settings per point" in md


def test_e2e_study_refuses_other_envs(tmp_path):
    assert main(["--study", "e2e", "--env", "Acrobot-v1", "--out",
                 str(tmp_path)]) == 2


def test_chess_learning_study(tmp_path):
    import importlib.util

    from envfleet.train.presets import PRESETS

    assert main(["--study", "chess-learning", "--seconds", "1", "--num-envs", "32",
                 "--out", str(tmp_path)]) == 0
    header, rows, summary, md = outputs(tmp_path, "chess-learning")
    assert header["settings"]["seconds"] == 1 and header["settings"]["eval_games"] == 32
    openspiel = importlib.util.find_spec("pyspiel") is not None
    assert [r["series"] for r in rows if r["status"] == "ok"] == [
        "native Chess-v0", "python-chess pool", *(["OpenSpiel pool"] if openspiel else [])]
    if not openspiel:  # said, not measured
        assert [r["status"] for r in rows if r["series"] == "OpenSpiel pool"] == ["skipped"]
        assert "pip install open_spiel" in md
    rows = [r for r in rows if r["status"] == "ok"]
    for r in rows:
        assert r["status"] == "ok", r
        # the same learner: Chess-v0's preset
        assert r["num_envs"] == 32
        assert r["hidden_sizes"] == list(PRESETS["Chess-v0"]["hidden_sizes"])
        assert r["stop_reason"] == "time limit" and r["train_s"] >= 1
        assert positive(r["steps_per_s"], r["sps_env"], r["total_steps"])
        points = r["points"]
        assert points[0]["seconds"] == 0 and points[0]["steps"] == 0
        assert [p["steps"] for p in points] == sorted(p["steps"] for p in points)
        assert points[-1]["steps"] == r["total_steps"]
        for p in points:
            assert p["games"] == 32
            assert abs(p["win_rate"] + p["draw_rate"] + p["loss_rate"] - 1) < 1e-9
            assert p["score"] == p["win_rate"] + p["draw_rate"] / 2
        # the target (win rate 0.4) is not reached in a second: time to it is a lower bound
        assert r["target"] == 0.4 and r["target_s"] is None
        assert f"{r['series']}: win rate 0.4 after > " in md
    # the same initial policy, judged on the same games: the same first point
    assert rows[0]["points"][0] == rows[1]["points"][0]
    assert len(summary["curves"]) == len(rows)
    assert "| python-chess pool | 0 | 0 |" in md and "steps in the same time" in md


def test_chess_learning_time_to_target_and_ratios():
    # the first judgement at the target gives the time to it; a contender that never reaches
    # it gives a lower bound on the ratio
    from benchmarks.studies.chess_learning import markdown

    def row(series, target_s, train_s, sps):
        curve = [(0.0, 0.05), (train_s / 2, 0.25), (train_s, 0.45 if target_s else 0.1)]
        return {"series": series, "status": "ok", "target": 0.4, "target_s": target_s,
                "target_steps": None if target_s is None else int(target_s * sps),
                "train_s": train_s, "total_steps": int(train_s * sps), "steps_per_s": sps,
                "sps_env": 10 * sps, "stop_reason": "target" if target_s else "time limit",
                "points": [{"seconds": t, "steps": int(t * sps), "games": 200, "win_rate": w,
                            "draw_rate": 0.9 - w, "loss_rate": 0.1, "score": 0.45 + w / 2}
                           for t, w in curve]}

    md = markdown([row("native Chess-v0", 100.0, 100.0, 3000.0),
                   row("python-chess pool", 300.0, 300.0, 1000.0),
                   row("OpenSpiel pool", None, 900.0, 900.0)])
    assert "native Chess-v0: win rate 0.4 after 100 s (300,000 steps)" in md
    assert "python-chess pool / native Chess-v0: steps in the same time 3.0x; time to the " \
           "target 3.0x" in md
    assert "OpenSpiel pool: win rate 0.4 after > 900 s (not reached; 810,000 steps)" in md
    assert "time to the target > 9.0x (not reached in its budget)" in md
    # the milestones (win 0.2, 0.3) and the target: times, steps and ratios to native's
    assert "| native Chess-v0 | 50 s, 150,000 | 100 s, 300,000 | 100 s, 300,000 | 1x |" in md
    assert ("| python-chess pool | 150 s, 150,000 | 300 s, 300,000 | 300 s, 300,000 | 3.0x | "
            "3.0x | 3.0x |") in md
    assert ("| OpenSpiel pool | 450 s, 405,000 | > 900 s, > 810,000 | > 900 s, > 810,000 | "
            "9.0x | > 9.0x | > 9.0x |") in md


def test_chess_learning_seeds_train_on_disjoint_envs(monkeypatch):
    # seed s trains envs seeded s * num_envs onwards: two seeds never share a board or an
    # opponent stream, nor a judge's game (seed itself gave seeds 1 and 2 boards 1..8, 2..9)
    from benchmarks.studies import chess_learning
    from envfleet.train import ppo

    made: list[tuple[int, int]] = []
    real = ppo.make_envs

    def recording(args, num_envs, seed):
        made.append((num_envs, seed))
        return real(args, num_envs, seed)

    monkeypatch.setattr(ppo, "make_envs", recording)
    boards: dict[int, set[int]] = {}
    for seed in (1, 2):
        made.clear()
        row = chess_learning.learn("Chess-v0", "numba", 0.01, eval_games=4, num_envs=8,
                                   seed=seed)
        assert row["total_steps"] == 128  # one iteration: the budget ends it
        # the training envs (8 of them), the judge's games (4), train's unused evaluation (2)
        training = [s for n, s in made if n == 8]
        judge = [s for n, s in made if n == 4]
        assert len(training) == 1 and len(judge) == 1
        boards[seed] = set(range(training[0], training[0] + 8))
        boards[-seed] = set(range(judge[0], judge[0] + 4))
    assert sum(map(len, boards.values())) == len(set().union(*boards.values()))


def test_chess_learning_trains_to_a_common_step_count():
    # every contender trains the same steps (not to its first crossing of the target), at a
    # constant learning rate, unless its budget ends first
    from benchmarks.studies.chess_learning import env_seed, learn, plan

    row = learn("Chess-v0", "numba", 60.0, eval_games=4, num_envs=8, seed=3, steps=256,
                stop_at_target=False, eval_every=128)
    assert row["stop_reason"] == "steps" and row["total_steps"] == 256
    assert [p["steps"] for p in row["points"]] == [0, 128, 256]
    assert row["seed"] == 3 and row["env_seed"] == env_seed(3, 8) == 24
    jobs, _ = plan(30.0, 32, 8, seeds=2, steps=512)
    assert [[(t.kwargs["seed"], t.kwargs["steps"], t.kwargs["stop_at_target"]) for t in j.items]
            for j in jobs] == [[(1, 512, False)] * len(jobs[0].items),
                               [(2, 512, False)] * len(jobs[1].items)]
    assert [lab["seed"] for j in jobs for lab in j.labels] == [1] * len(jobs[0].labels) + [
        2] * len(jobs[1].labels)


def test_chess_learning_over_seeds():
    # the seeds together: win rates at equal steps (means), mean times to each win rate and
    # their ratio to native's, lower bounds where a seed did not get there
    from benchmarks.studies.chess_learning import markdown

    def row(series, seed, sps, wins, learner_us):
        steps = [0, 100_000, 200_000, 300_000]
        return {"series": series, "status": "ok", "seed": seed, "target": 0.4,
                "target_s": None, "target_steps": None, "steps_per_s": sps, "sps_env": 10 * sps,
                "train_s": 300_000 / sps, "total_steps": 300_000, "stop_reason": "steps",
                "times": {"env": 300_000 / sps - learner_us * 0.3, "inference": 0.0,
                          "learning": learner_us * 0.3, "evaluation": 5.0},
                "points": [{"seconds": s / sps, "steps": s, "games": 200, "win_rate": w,
                            "draw_rate": 0.9 - w, "loss_rate": 0.1, "score": 0.45 + w / 2}
                           for s, w in zip(steps, wins, strict=True)]}

    md = markdown([row("native Chess-v0", 1, 3000.0, [0.0, 0.2, 0.3, 0.45], 200.0),
                   row("python-chess pool", 1, 1000.0, [0.0, 0.1, 0.3, 0.4], 200.0),
                   row("native Chess-v0", 2, 3000.0, [0.0, 0.2, 0.3, 0.35], 200.0),
                   row("python-chess pool", 2, 1000.0, [0.0, 0.3, 0.3, 0.5], 200.0)])
    assert "| native Chess-v0 | 2 | 0.200 (0.20-0.20) | 0.300 (0.30-0.30) | 0.400 (0.35-0.45) |" \
        in md
    assert "| python-chess pool | 2 | 0.200 (0.10-0.30) | 0.300 (0.30-0.30) | 0.450 (0.40-0.50) |" \
        in md
    # win 0.2: both seeds (33 s, 100k); 0.3: both (67 s); 0.4: seed 2 never: > (100 + 100) / 2
    assert "| native Chess-v0 | 3.00k | 33 s, 100k (2/2) | 67 s, 200k (2/2) | > 100 s, 300k " \
           "(1/2) | 1x | 1x | 1x |" in md
    # python-chess: 0.2 and 0.3 at 200k (seed 1) and 100k (seed 2): mean 150 s; 0.4 at 300k
    # in both; native's mean to 0.4 is a lower bound, so the ratio is an upper one
    assert "| python-chess pool | 1.00k | 150 s, 150k (2/2) | 150 s, 150k (2/2) | 300 s, 300k " \
           "(2/2) | 4.5x | 2.2x | < 3.0x |" in md
    # each side's step cost and the Amdahl bound with native's learner (200 µs of 333)
    assert "| native Chess-v0 | 133.3 | 200.0 | 0.0 | 333.3 | 1.00x | 1.00x |" in md
    assert "| python-chess pool | 800.0 | 200.0 | 0.0 | 1000.0 | 3.00x | 3.00x |" in md
    # each run against native's run of the same seed
    assert "python-chess pool / native Chess-v0: steps in the same time 3.0x; seed 2" in md
