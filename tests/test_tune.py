"""``envfleet tune``: a measured search that ends in a make() line that really builds the env."""

from __future__ import annotations

import json

import numpy as np
import pytest

import envfleet
from envfleet.bench.measure import PointSpec, measure
from envfleet.cli import main
from envfleet.tune import Candidate, async_candidates, make_line, profile_env, tune


def step_twice(kwargs: dict) -> None:
    """Build the recommended env with ``envfleet.make(**kwargs)`` and step it."""
    env = envfleet.make(**kwargs, seed=0)
    try:
        env.reset(seed=0)
        for _ in range(2):
            env.step(env.action_space.sample())
    finally:
        env.close()


def test_native_recommendation_builds_and_respects_the_memory_cap():
    per_env = profile_env("CartPole-v1", seconds=0.05).env_bytes
    cap = 1024 * per_env  # room for 256 and 1024 envs, not 4096
    rec = tune("CartPole-v1", budget_s=6, backends=["numba"], memory_cap=cap)
    assert rec.measured and all(c.num_envs <= 1024 for c in rec.measured)
    assert all(np.isfinite(c.steps_per_s) and c.steps_per_s > 0 for c in rec.measured)
    assert rec.best.steps_per_s == max(c.steps_per_s for c in rec.measured)
    assert rec.make_kwargs["backend"] == "numba"
    step_twice(rec.make_kwargs)
    assert make_line("CartPole-v1", rec.best).startswith("envfleet.make('CartPole-v1', ")


def test_memory_cap_below_one_rung_is_refused():
    with pytest.raises(ValueError, match="memory cap"):
        tune("CartPole-v1", budget_s=1, backends=["numba"], memory_cap=1000)


def test_executor_recommendation_for_a_gymnasium_id(tmp_path):
    out = tmp_path / "tune.json"
    assert main(["tune", "FrozenLake-v1", "--budget", "6", "--max-envs", "4",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["profile"]["step_us_median"] > 0
    assert report["profile"]["obs_bytes"] > 0
    assert {m["backend"] for m in report["measured"]} <= {"serial", "pool"}
    best = report["best"]
    assert best["steps_per_s"] > 0 and best["make"].startswith("envfleet.make('FrozenLake-v1'")
    step_twice(best["kwargs"])


def test_first_ready_points_count_the_batch_not_every_env():
    """A pool with batch_size < num_envs is stepped through send / recv: each call yields
    batch_size steps."""
    row = measure(PointSpec(env_id="FrozenLake-v1", reference_id="FrozenLake-v1",
                            backend="pool", num_envs=4, seconds=0.2,
                            options={"num_workers": 2, "batch_size": 2}))
    assert row["status"] == "ok" and row["batch_size"] == 2
    assert row["steps"] == 2 * row["calls"]


def test_async_candidates_halve_and_quarter_the_best_pool():
    best = Candidate("pool", 16, {"num_workers": 2})
    assert [c.options["batch_size"] for c in async_candidates(best)] == [8, 4]
    assert async_candidates(Candidate("serial", 16)) == []


@pytest.mark.parametrize(("argv", "message"), [
    (["tune", "NoSuchEnv-v0"], "unknown env id 'NoSuchEnv-v0'"),
    (["tune", "FrozenLake-v1", "--backends", "cuda"], "cannot consider backend(s) cuda"),
])
def test_bad_requests_exit_2_with_the_reason(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
