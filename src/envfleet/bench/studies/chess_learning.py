"""``--study chess-learning``: how soon the same PPO learns to beat the random opponent, by
wall-clock second, on envfleet's native Chess-v0, on the same game in python-chess run in
envfleet's pool, and on OpenSpiel's chess in the pool.

Seed 003's Figure 9. Every contender trains ``envfleet train Chess-v0``'s preset (the same
network, settings and seed, against ``opponent="random"``) until its greedy policy wins
``TARGET_WIN_RATE`` of ``EVAL_GAMES`` games against the random opponent, or for ``--seconds``
of training (build and JIT compile excluded, as ``envfleet train`` reports them apart). The
python-chess game is Chess-v0's (``pychess_env``: observations, action labels, masks, rewards
and ends equal in lock step); OpenSpiel's is the same game in its own encoding
(``openspiel_env``: 20x8x8 planes, 4674 action ids, so the network's first and last layers
differ by ~5%).

The judge: every ``EVAL_EVERY`` training steps (and at the end) the policy plays the same
greedy games against the random opponent: on native Chess-v0 (the same games for the native
and python-chess policies), on OpenSpiel's env for OpenSpiel's policy (its own encoding). The
judge's time is kept off the training clock and the budget. Contenders run one after the other
in one process (native first), on the same machine load.

Why a win rate and not a score: against the random opponent most games of random play end
drawn (the 512-ply limit, insufficient material), so random play already scores ~0.49 (win 1,
draw 0.5); winning 40% of the games takes learning (random play wins ~0.07, always capturing
the most valuable piece ~0.15, always mating in one when it can ~0.49; python-chess, 200 games).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import time
from pathlib import Path
from typing import Any

from envfleet.bench.report import human
from envfleet.bench.studies.common import Job, StudyRun, Task, md_table, ok
from envfleet.bench.studies.openspiel_env import OPENSPIEL_IMPORT_ID
from envfleet.bench.studies.pychess_env import PYCHESS_IMPORT_ID

DEFAULT_SECONDS = 600.0
#: the target: this win rate of the greedy policy against the random opponent
TARGET_WIN_RATE = 0.4
#: lower win rates whose times are reported too (the curve's steep part: less noise than the
#: target's crossing, where the curve flattens)
MILESTONES = (0.2, 0.3)
#: games per judgement (a win rate's 95% interval is at most +-0.07 over 200 games), fewer for
#: budgets under 50 s (4 per budget second, 32 at least: the smoke tests)
EVAL_GAMES = 200
#: training steps between judgements (8 iterations of the preset's 256 envs x 16 steps)
EVAL_EVERY = 32_768


def eval_games_for(seconds: float) -> int:
    """Games per judgement for a budget of ``seconds``."""
    return min(EVAL_GAMES, max(32, int(4 * seconds)))


#: (series, env id, backend, env kwargs: None = the preset's)
CONTENDERS = (("native Chess-v0", "Chess-v0", "numba", None),
              ("python-chess pool", PYCHESS_IMPORT_ID, "pool", None),
              ("OpenSpiel pool", OPENSPIEL_IMPORT_ID, "pool", {}))
#: contenders that need a package: (module, pip name)
REQUIRES = {"OpenSpiel pool": ("pyspiel", "open_spiel")}


def learn(env_id: str, backend: str, seconds: float, eval_games: int = EVAL_GAMES,
          num_envs: int | None = None, seed: int = 1, env_kwargs: dict | None = None,
          target: float = TARGET_WIN_RATE, eval_every: int = EVAL_EVERY) -> dict[str, Any]:
    """Train Chess-v0's preset on ``env_id`` until the judge's win rate reaches ``target`` or
    for ``seconds`` of training; the judge's points (training seconds, steps, outcomes)."""
    import torch

    from envfleet.bench.studies.e2e import train_args
    from envfleet.machine import background_load, cpu_seconds
    from envfleet.train import ppo
    from envfleet.train.cli import outcomes

    base = train_args("Chess-v0", env_id, backend, num_envs or 256, 1, 0, seed, env_kwargs)
    args = dataclasses.replace(base, total_steps=10**12, time_limit=seconds,
                               eval_every=eval_every, eval_episodes=2, target_return=target,
                               stop_at_target=True)
    # the judge: Chess-v0's games for Chess-v0's encoding, else the contender's own env
    own = env_id == OPENSPIEL_IMPORT_ID
    judge_args = args if own else dataclasses.replace(args, env_id="Chess-v0", backend="numba")
    judge = ppo.make_envs(judge_args, eval_games, seed + 10_000)
    torch.manual_seed(seed)
    initial = ppo.build_agent(judge, args)  # the initial policy (train's first draw)
    judged: list[dict[str, Any]] = []

    def judge_fn(env: Any, agent: Any, *rest: Any, **kwargs: Any) -> ppo.EvalResult:
        """The trainer's evaluation: the judge's games; its time extends the budget."""
        t0 = time.perf_counter()
        result = ppo.evaluate(judge, agent, seed + 10_000, torch.device("cpu"), False)
        rates = outcomes(result.returns)
        judged.append({"games": result.episodes, **rates,
                       "score": rates["win_rate"] + rates["draw_rate"] / 2})
        args.time_limit += time.perf_counter() - t0  # (train's loop reads it each iteration)
        return ppo.EvalResult(rates["win_rate"], result.episodes, True, result.returns,
                              result.seconds)

    points: list[dict[str, Any]] = []

    def on_progress(p: ppo.Progress) -> None:
        if p.eval_return is not None:  # judged after this iteration
            points.append({"seconds": p.seconds - p.times["evaluation"], "steps": p.steps,
                           **judged[-1]})

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    _, summary = ppo.train(args, on_progress=on_progress, evaluate_fn=judge_fn)
    wall, cpu1 = time.perf_counter() - t0, cpu_seconds()
    train_s = summary.total_steps / summary.sps_end_to_end  # the wall clock but the judge's
    if not points or points[-1]["steps"] != summary.total_steps:  # the final judgement
        points.append({"seconds": train_s, "steps": summary.total_steps, **judged[-1]})
    judge_fn(None, initial)  # the initial policy, on the same games
    points.insert(0, {"seconds": 0.0, "steps": 0, **judged[-1]})
    judge.close()
    reached = next((p for p in points if p["win_rate"] >= target), None)
    return {"points": points, "steps_per_s": summary.sps_end_to_end, "sps_env": summary.sps_env,
            "total_steps": summary.total_steps, "train_s": train_s, "target": target,
            "target_s": None if reached is None else reached["seconds"],
            "target_steps": None if reached is None else reached["steps"],
            "compile_s": summary.compile_s, "stop_reason": summary.stop_reason,
            "num_envs": args.num_envs, "hidden_sizes": list(args.hidden_sizes),
            "times": summary.times,
            "cores_used": round((cpu1[1] - cpu0[1]) / wall, 3) if cpu0 and cpu1 else None,
            "timed_background_load": background_load(cpu0, cpu1, wall)}


def plan(seconds: float, eval_games: int, num_envs: int | None
         ) -> tuple[list[Job], list[dict[str, Any]]]:
    """Every contender in one job (one process, one after the other: the judge's kernels
    compile once), and the rows of the contenders whose package is not installed."""
    items, labels, skipped = [], [], []
    for series, env_id, backend, env_kwargs in CONTENDERS:
        label = {"series": series, "backend": backend, "budget_s": seconds,
                 "label": f"{series}, {seconds:g} s"}
        missing = REQUIRES.get(series)
        if missing and importlib.util.find_spec(missing[0]) is None:
            skipped.append({**label, "status": "skipped",
                            "note": f"not measured: not installed (pip install {missing[1]})"})
            continue
        items.append(Task(f"{__name__}:learn", {
            "env_id": env_id, "backend": backend, "seconds": seconds, "eval_games": eval_games,
            "num_envs": num_envs, "env_kwargs": env_kwargs}))
        labels.append(label)
    return [Job(items, labels)], skipped


def ci95(p: float, n: int) -> float:
    """Half the 95% normal-approximation interval of a rate ``p`` over ``n`` games."""
    return 1.96 * math.sqrt(max(p * (1 - p), 0.0) / n) if n else float("nan")


def first_at(row: dict[str, Any], rate: float) -> dict[str, Any] | None:
    """The first judgement of ``row`` with a win rate of ``rate`` or more, or None."""
    return next((p for p in row["points"] if p["win_rate"] >= rate), None)


def ratio_text(row: dict[str, Any], native: dict[str, Any], rate: float) -> str:
    """``row``'s time to win rate ``rate`` over ``native``'s: ``2.6x``, ``> 2.0x`` (``row``
    did not reach it: its budget as a lower bound), or ``-`` (native did not)."""
    mine, theirs = first_at(row, rate), first_at(native, rate)
    if theirs is None or theirs["seconds"] <= 0:
        return "-"
    if mine is None:
        return f"> {row['train_s'] / theirs['seconds']:.1f}x"
    return f"{mine['seconds'] / theirs['seconds']:.1f}x"


def time_to_target(row: dict[str, Any]) -> str:
    """``123 s (456,789 steps)``, or ``> 900 s`` (not reached in the budget: a lower bound)."""
    if row.get("target_s") is None:
        return f"> {row['train_s']:.0f} s (not reached; {row['total_steps']:,} steps)"
    return f"{row['target_s']:.0f} s ({row['target_steps']:,} steps)"


def markdown(rows: list[dict[str, Any]]) -> str:
    """Each contender's judgements, its time to the target, then the ratios to native."""
    body, lines = [], []
    for r in rows:
        if not ok(r):
            note = r.get("note") or r.get("error", "")
            body.append([r["series"], f"{r.get('status')}: {note[:70]}", "", "", "", "", ""])
            continue
        for p in r["points"]:
            body.append([r["series"], f"{p['seconds']:.0f}", f"{p['steps']:,}",
                         f"{p['win_rate']:.3f} ± {ci95(p['win_rate'], p['games']):.3f}",
                         f"{p['draw_rate']:.3f}", f"{p['loss_rate']:.3f}", f"{p['score']:.3f}"])
        lines.append(f"- {r['series']}: win rate {r['target']:g} after {time_to_target(r)}; "
                     f"{human(r['steps_per_s'])} steps/s end to end ({r['total_steps']:,} steps "
                     f"in {r['train_s']:.0f} s; env-only {human(r['sps_env'])}; stopped: "
                     f"{r['stop_reason']})")
    measured = [r for r in rows if ok(r)]
    native = next((r for r in measured if r["series"] == CONTENDERS[0][0]), None)
    for r in measured:
        if native is None or r is native:
            continue
        line = (f"- {r['series']} / {native['series']}: steps in the same time "
                f"{native['steps_per_s'] / r['steps_per_s']:.1f}x")
        if native.get("target_s"):
            if r.get("target_s") is not None:
                line += f"; time to the target {r['target_s'] / native['target_s']:.1f}x"
            else:
                line += (f"; time to the target > {r['train_s'] / native['target_s']:.1f}x "
                         f"(not reached in its budget)")
        lines.append(line)
    target = measured[0]["target"] if measured else TARGET_WIN_RATE
    rates = (*MILESTONES, target)
    times = []
    for r in measured:
        cells = []
        for rate in rates:
            p = first_at(r, rate)
            cells.append(f"{p['seconds']:.0f} s, {p['steps']:,}" if p else
                         f"> {r['train_s']:.0f} s, > {r['total_steps']:,}")
        ratios = [ratio_text(r, native, rate) for rate in rates] if native else []
        times.append([r["series"], *cells, *(ratios if r is not native else ["1x"] * len(rates))])
    if times:
        header = ["contender", *(f"win {x:g}: s, steps" for x in rates),
                  *(f"time / native's, win {x:g}" for x in rates)]
        lines += ["", "Training seconds and steps to the first judgement at each win rate "
                  "(> : not reached in the budget, a lower bound):", "", md_table(header, times)]
    return "\n".join([
        f"Target: the greedy policy wins {target:g} of the judge's games against the random "
        "opponent. Win / draw / loss rates and score (win 1, draw 0.5) of greedy play against "
        "the random opponent (± 95% interval), judged every "
        f"{EVAL_EVERY:,} training steps and at the end, against each contender's training "
        "seconds (build, JIT compile and the judge's games excluded).", "",
        md_table(["contender", "training s", "env steps", "win", "draw", "loss", "score"], body),
        "", *lines])


def plot(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """Win rate against training seconds, one line per contender, 95% band shaded; the
    target as a dashed line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    target = None
    for r in rows:
        if not ok(r):
            continue
        target = r["target"]
        x = [p["seconds"] for p in r["points"]]
        y = [p["win_rate"] for p in r["points"]]
        half = [ci95(p["win_rate"], p["games"]) for p in r["points"]]
        reached = (f"target at {r['target_s']:.0f} s" if r.get("target_s") is not None
                   else f"target not reached in {r['train_s']:.0f} s")
        line = ax.plot(x, y, marker="o", markersize=3,
                       label=f"{r['series']} ({human(r['steps_per_s'])} steps/s; "
                             f"{reached})")[0]
        ax.fill_between(x, [v - h for v, h in zip(y, half, strict=True)],
                        [v + h for v, h in zip(y, half, strict=True)],
                        color=line.get_color(), alpha=0.15)
    if target is not None:
        ax.axhline(target, color="gray", linestyle="--", linewidth=1)
        for rate in MILESTONES:
            ax.axhline(rate, color="gray", linestyle=":", linewidth=0.8)
    ax.set(xlabel="training wall-clock seconds", ylabel="greedy win rate vs random opponent",
           title="PPO on chess against the random opponent: the same learner on three envs")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.4)
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


class _LearningRun(StudyRun):
    def footer(self, load_after: list[float] | None) -> str:
        """The common footer, saying what a point is here."""
        return super().footer(load_after).replace(
            " timed 1 times", " one training run").replace(
            "s each)", "s of training at most each)").replace(
            "median and spread (± half the interquartile range) reported",
            "contenders one after the other; win rates with 95% intervals")


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The chess-learning study (``envfleet bench --study chess-learning``)."""
    from envfleet.command import CommandError
    from envfleet.machine import usable_cores

    if envs and envs != ["Chess-v0"]:
        raise CommandError(f"--study chess-learning trains Chess-v0 only, not {', '.join(envs)}")
    seconds = args.seconds or DEFAULT_SECONDS
    eval_games = eval_games_for(seconds)
    num_envs = args.num_envs[0] if args.num_envs else None
    # per contender: budget, build, the judge's games (~2 s native, ~30 s OpenSpiel a time)
    args.timeout = max(args.timeout, 2 * seconds + 600)
    study = _LearningRun("chess-learning", args, {
        "seconds": seconds, "repeats": 1, "eval_games": eval_games, "num_envs": num_envs,
        "eval_every": EVAL_EVERY, "target_win_rate": TARGET_WIN_RATE,
        "contenders": [c[0] for c in CONTENDERS]})
    jobs, skipped = plan(seconds, eval_games, num_envs)
    rows = study.run(jobs, skipped)
    title = (f"{study.info['cpu']}, {usable_cores()} usable cores, {seconds:g} s at most each, "
             f"{study.info['date'][:10]}")
    keys = ("series", "steps_per_s", "total_steps", "target", "target_s", "target_steps",
            "points")
    return study.finish(markdown(rows), lambda path: plot(rows, title, path),
                        {"curves": [{k: r.get(k) for k in keys} for r in rows if ok(r)]})
