"""``--study chess-learning``: win rate against the random opponent by wall-clock second, PPO on
envfleet's native Chess-v0 against the same PPO on the python-chess env in envfleet's pool.

Seed 003's Figure 9. Both contenders train ``envfleet train Chess-v0``'s preset (the same
network, settings, seed and ``planes`` observation, against ``opponent="random"``) for the same
wall-clock budget (``--seconds``, per contender; build and JIT compile excluded, as ``envfleet
train`` reports them apart). The game is the same (``pychess_env``: observations, action
labels, masks, rewards and ends equal in lock step); only the env's implementation differs.

The policy is copied at ``CHECKPOINTS`` evenly spaced training times (plus the initial policy),
off nothing: a copy costs milliseconds, the same for both. After training every copy plays the
same greedy games (``eval_games_for``) (``envfleet train``'s evaluation) against the random opponent
on native Chess-v0 with the same seed, so both curves are scored by the same judge. Both
contenders run one after the other in one process (native first), on the same machine load.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from envfleet.bench.report import human
from envfleet.bench.studies.common import Job, StudyRun, Task, md_table, ok
from envfleet.bench.studies.pychess_env import PYCHESS_IMPORT_ID

DEFAULT_SECONDS = 180.0
#: evaluation games per checkpoint: 4 per budget second, 32 to 500 (the win rate's standard
#: error is at most 0.5 / sqrt(games))
EVAL_GAMES = 500


def eval_games_for(seconds: float) -> int:
    """Games per checkpoint for a budget of ``seconds``."""
    return min(EVAL_GAMES, max(32, int(4 * seconds)))
CHECKPOINTS = 6
CONTENDERS = (("native Chess-v0", "Chess-v0", "numba"),
              ("python-chess pool", PYCHESS_IMPORT_ID, "pool"))


def learn(env_id: str, backend: str, seconds: float, eval_games: int = EVAL_GAMES,
          checkpoints: int = CHECKPOINTS, num_envs: int | None = None, seed: int = 1
          ) -> dict[str, Any]:
    """Train Chess-v0's preset on ``env_id`` for ``seconds``, then score its checkpoints."""
    import torch

    from envfleet.bench.studies.e2e import train_args
    from envfleet.machine import background_load, cpu_seconds
    from envfleet.train import ppo
    from envfleet.train.cli import outcomes

    base = train_args("Chess-v0", env_id, backend, num_envs or 256, 1, 0, seed)
    args = dataclasses.replace(base, total_steps=10**12, time_limit=seconds, eval_every=1,
                               eval_episodes=2)
    # no ideal loop here (ideal_every=0): nor its end-of-run iterations (this worker only)
    ppo.IDEAL_MIN_ITERATIONS = 0
    holder: dict[str, Any] = {}
    snapshots: list[tuple[float, int, dict]] = []

    def keep_agent(env: Any, agent: Any, *rest: Any, **kwargs: Any) -> ppo.EvalResult:
        """The 'evaluation' called after every update: only hands over the agent."""
        holder["agent"] = agent
        return ppo.EvalResult(0.0, 0, True, [], 0.0)

    def on_progress(p: ppo.Progress) -> None:
        train_s = p.seconds - p.times["evaluation"]
        if p.done or train_s >= (len(snapshots) + 1) * seconds / checkpoints:
            snapshots.append((train_s, p.steps,
                              copy.deepcopy(holder["agent"].state_dict())))

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    _, summary = ppo.train(args, on_progress=on_progress, evaluate_fn=keep_agent)
    wall, cpu1 = time.perf_counter() - t0, cpu_seconds()

    # the judge: native Chess-v0, the same games for every checkpoint and contender
    judge_args = dataclasses.replace(args, env_id="Chess-v0", backend="numba")
    judge = ppo.make_envs(judge_args, eval_games, seed + 10_000)
    torch.manual_seed(seed)
    agent = ppo.build_agent(judge, args)  # the initial policy (train's first draw)
    points = []
    for train_s, steps, state in [(0.0, 0, copy.deepcopy(agent.state_dict())), *snapshots]:
        agent.load_state_dict(state)
        result = ppo.evaluate(judge, agent, seed + 10_000, torch.device("cpu"), False)
        rates = outcomes(result.returns)
        points.append({"seconds": train_s, "steps": steps, "games": result.episodes, **rates})
    judge.close()
    train_s = summary.total_steps / summary.sps_end_to_end
    return {"points": points, "steps_per_s": summary.sps_end_to_end, "sps_env": summary.sps_env,
            "total_steps": summary.total_steps, "train_s": train_s,
            "compile_s": summary.compile_s, "stop_reason": summary.stop_reason,
            "num_envs": args.num_envs, "hidden_sizes": list(args.hidden_sizes),
            "cores_used": round((cpu1[1] - cpu0[1]) / wall, 3) if cpu0 and cpu1 else None,
            "timed_background_load": background_load(cpu0, cpu1, wall)}


def plan(seconds: float, eval_games: int, num_envs: int | None) -> Job:
    """Both contenders in one job (one process: the judge's kernels compile once)."""
    items, labels = [], []
    for series, env_id, backend in CONTENDERS:
        items.append(Task(f"{__name__}:learn", {"env_id": env_id, "backend": backend,
                                                "seconds": seconds, "eval_games": eval_games,
                                                "num_envs": num_envs}))
        labels.append({"series": series, "backend": backend, "budget_s": seconds,
                       "label": f"{series}, {seconds:g} s"})
    return Job(items, labels)


def ci95(p: float, n: int) -> float:
    """Half the 95% normal-approximation interval of a rate ``p`` over ``n`` games."""
    return 1.96 * math.sqrt(max(p * (1 - p), 0.0) / n) if n else float("nan")


def markdown(rows: list[dict[str, Any]]) -> str:
    """Each contender's checkpoints, then the comparison at equal time."""
    body, lines = [], []
    for r in rows:
        if not ok(r):
            body.append([r["series"], f"{r.get('status')}: {r.get('error', '')[:70]}", "",
                         "", "", ""])
            continue
        for p in r["points"]:
            body.append([r["series"], f"{p['seconds']:.0f}", f"{p['steps']:,}",
                         f"{p['win_rate']:.3f} ± {ci95(p['win_rate'], p['games']):.3f}",
                         f"{p['draw_rate']:.3f}", f"{p['loss_rate']:.3f}"])
        last = r["points"][-1]
        lines.append(f"- {r['series']}: {human(r['steps_per_s'])} steps/s end to end "
                     f"({r['total_steps']:,} steps in {r['train_s']:.0f} s; env-only "
                     f"{human(r['sps_env'])}), final win rate {last['win_rate']:.3f}")
    measured = [r for r in rows if ok(r)]
    if len(measured) == 2:
        a, b = measured
        lines.append(f"- steps in the same time: {a['series']} / {b['series']} = "
                     f"{a['total_steps'] / max(b['total_steps'], 1):.1f}x")
    return "\n".join([
        "Win / draw / loss rates of greedy play against the random opponent (the same "
        "games on native Chess-v0 for every checkpoint; ± 95% interval) after each "
        "contender's training seconds (build and JIT compile excluded).", "",
        md_table(["contender", "training s", "env steps", "win", "draw", "loss"], body), "",
        *lines])


def plot(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """Win rate against training seconds, one line per contender, 95% band shaded."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    for r in rows:
        if not ok(r):
            continue
        x = [p["seconds"] for p in r["points"]]
        y = [p["win_rate"] for p in r["points"]]
        half = [ci95(p["win_rate"], p["games"]) for p in r["points"]]
        line = ax.plot(x, y, marker="o", label=f"{r['series']} "
                                               f"({human(r['steps_per_s'])} steps/s)")[0]
        ax.fill_between(x, [v - h for v, h in zip(y, half, strict=True)],
                        [v + h for v, h in zip(y, half, strict=True)],
                        color=line.get_color(), alpha=0.15)
    ax.set(xlabel="training wall-clock seconds", ylabel="win rate vs random opponent",
           title="PPO on Chess-v0: the same learner, native env vs python-chess in the pool")
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
            "s each)", "s of training each)").replace(
            "median and spread (± half the interquartile range) reported",
            "both contenders in one process, one after the other; win rates with 95% intervals")


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The chess-learning study (``envfleet bench --study chess-learning``)."""
    from envfleet.command import CommandError
    from envfleet.machine import usable_cores

    if envs and envs != ["Chess-v0"]:
        raise CommandError(f"--study chess-learning trains Chess-v0 only, not {', '.join(envs)}")
    seconds = args.seconds or DEFAULT_SECONDS
    eval_games = eval_games_for(seconds)
    num_envs = args.num_envs[0] if args.num_envs else None
    args.timeout = max(args.timeout, seconds + 300)  # per contender: budget, build, judging
    study = _LearningRun("chess-learning", args, {
        "seconds": seconds, "repeats": 1, "eval_games": eval_games, "num_envs": num_envs,
        "checkpoints": CHECKPOINTS, "contenders": [c[0] for c in CONTENDERS]})
    rows = study.run([plan(seconds, eval_games, num_envs)])
    title = (f"{study.info['cpu']}, {usable_cores()} usable cores, {seconds:g} s each, "
             f"{study.info['date'][:10]}")
    return study.finish(markdown(rows), lambda path: plot(rows, title, path),
                        {"curves": [{k: r.get(k) for k in ("series", "steps_per_s",
                                                           "total_steps", "points")}
                                    for r in rows if ok(r)]})
