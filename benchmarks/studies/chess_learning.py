"""``--study chess-learning``: how soon the same PPO learns to beat the random opponent, by
wall-clock second, on envfleet's native Chess-v0, on the same game in python-chess run in
envfleet's pool, and on OpenSpiel's chess in the pool.

Seed 003's Figure 9. Every contender trains ``envfleet train Chess-v0``'s preset (the same
network, settings and seed, against ``opponent="random"``, a constant learning rate) for the
same ``--steps`` env steps, or ``--seconds`` of training if that ends first (build and JIT
compile excluded, as ``envfleet train`` reports them apart), and reports when its greedy policy
first won ``MILESTONES`` and ``TARGET_WIN_RATE`` of ``EVAL_GAMES`` games against the random
opponent, and its win rates at equal steps. ``--seeds K`` trains each contender K times, seed s
on envs seeded ``s * num_envs`` onwards (``env_seed``: no board or opponent stream shared
between seeds) and judged on its own games. The
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
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.studies.common import Job, StudyRun, Task, md_table, ok
from benchmarks.studies.openspiel_env import OPENSPIEL_IMPORT_ID
from benchmarks.studies.pychess_env import PYCHESS_IMPORT_ID
from envfleet.bench.report import human

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


#: env steps every contender trains each seed (256 iterations of the preset's 4,096), unless
#: its budget ends first: a common count, so the win rates compare at equal steps
DEFAULT_STEPS = 1_048_576
#: the judge's first game seed (seed s plays games JUDGE_SEED + s * games ...: its own games,
#: far from any training seed's)
JUDGE_SEED = 1_000_000


def env_seed(seed: int, num_envs: int) -> int:
    """The env seed of training seed ``seed``: ``seed * num_envs``. Env i gets ``env_seed + i``
    (Gymnasium's rule), so seeds 1, 2, 3... train on disjoint boards and opponent streams
    (``seed`` itself gave seeds 1 and 2 boards 1..256 and 2..257: 255 of 256 shared)."""
    if seed < 1 or num_envs < 1:
        raise ValueError(f"chess-learning: seed and num_envs must be >= 1, not {seed} and "
                         f"{num_envs}")
    return seed * num_envs


def judge_seed(seed: int, games: int) -> int:
    """The first seed of training seed ``seed``'s judge games (``games`` of them, disjoint from
    other seeds' judges and from every training env seed below ``JUDGE_SEED``)."""
    return JUDGE_SEED + seed * games


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
          target: float = TARGET_WIN_RATE, eval_every: int = EVAL_EVERY,
          steps: int | None = None, stop_at_target: bool = True,
          changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train Chess-v0's preset on ``env_id`` for ``steps`` env steps (None: no limit) or
    ``seconds`` of training, whichever ends first, and, with ``stop_at_target``, until the
    judge's win rate reaches ``target``; the judge's points (training seconds, steps,
    outcomes). Training seed ``seed`` seeds the envs ``env_seed(seed, num_envs)`` onwards and
    torch with the same number; ``changes`` overrides preset settings (``hidden_sizes``...)."""
    import torch

    from benchmarks.studies.e2e import train_args
    from envfleet.machine import background_load, cpu_seconds
    from envfleet.train import ppo
    from envfleet.train.report import outcomes

    n = num_envs or 256
    first = env_seed(seed, n)
    base = train_args("Chess-v0", env_id, backend, n, 1, 0, first, env_kwargs)
    # the learning rate stays constant (no annealing: it would depend on the step count)
    args = dataclasses.replace(base, total_steps=steps or 10**12, anneal_lr=False,
                               time_limit=seconds, eval_every=eval_every, eval_episodes=2,
                               target_return=target, stop_at_target=stop_at_target,
                               **(changes or {}))
    # the judge: Chess-v0's games for Chess-v0's encoding, else the contender's own env
    own = env_id == OPENSPIEL_IMPORT_ID
    judge_args = args if own else dataclasses.replace(args, env_id="Chess-v0", backend="numba")
    games_seed = judge_seed(seed, eval_games)
    judge = ppo.make_envs(judge_args, eval_games, games_seed)
    torch.manual_seed(first)
    initial = ppo.build_agent(judge, args)  # the initial policy (train's first draw)
    judged: list[dict[str, Any]] = []

    def judge_fn(env: Any, agent: Any, *rest: Any, **kwargs: Any) -> ppo.EvalResult:
        """The trainer's evaluation: the judge's games; its time extends the budget."""
        t0 = time.perf_counter()
        result = ppo.evaluate(judge, agent, games_seed, torch.device("cpu"), False)
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
            "update_epochs": args.update_epochs, "num_minibatches": args.num_minibatches,
            "seed": seed, "env_seed": first, "judge_seed": games_seed,
            "steps_limit": steps,
            "times": summary.times,
            "cores_used": round((cpu1[1] - cpu0[1]) / wall, 3) if cpu0 and cpu1 else None,
            "timed_background_load": background_load(cpu0, cpu1, wall)}


def plan(seconds: float, eval_games: int, num_envs: int | None, seeds: int = 1,
         steps: int = DEFAULT_STEPS) -> tuple[list[Job], list[dict[str, Any]]]:
    """One job per training seed with every contender in it (one process, one after the other:
    the judge's kernels compile once), and the rows of the contenders whose package is not
    installed (once, not per seed)."""
    jobs, skipped = [], []
    for seed in range(1, seeds + 1):
        items, labels = [], []
        for series, env_id, backend, env_kwargs in CONTENDERS:
            label = {"series": series, "backend": backend, "budget_s": seconds, "seed": seed,
                     "label": f"{series}, seed {seed}, {steps:,} steps or {seconds:g} s"}
            missing = REQUIRES.get(series)
            if missing and importlib.util.find_spec(missing[0]) is None:
                if seed == 1:
                    skipped.append({**label, "status": "skipped", "note": (
                        f"not measured: not installed (pip install {missing[1]})")})
                continue
            items.append(Task(f"{__name__}:learn", {
                "env_id": env_id, "backend": backend, "seconds": seconds,
                "eval_games": eval_games, "num_envs": num_envs, "env_kwargs": env_kwargs,
                "seed": seed, "steps": steps, "stop_at_target": False}))
            labels.append(label)
        jobs.append(Job(items, labels))
    return jobs, skipped


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


def us_per_step(row: dict[str, Any]) -> dict[str, float]:
    """``row``'s training wall-clock per env step, in µs: ``env`` (the env's step),
    ``learner`` (the policy's forward pass while collecting, the loop's copies and the PPO
    update) and ``total`` (the judge's games excluded)."""
    times, steps = row.get("times") or {}, row["total_steps"]
    env = 1e6 * times.get("env", 0.0) / steps
    return {"env": env, "learner": 1e6 * (times.get("inference", 0.0)
                                          + times.get("learning", 0.0)) / steps,
            "total": 1e6 * row["train_s"] / steps}


def mean_time_to(runs: list[dict[str, Any]], rate: float, key: str = "seconds"
                 ) -> tuple[float, bool]:
    """The mean over ``runs`` of the training seconds (``key="steps"``: steps) to the first
    judgement at win rate ``rate``, and whether every run reached it (if not, the runs that
    did not count with their whole training: the mean is a lower bound)."""
    values, all_reached = [], True
    for r in runs:
        p = first_at(r, rate)
        if p is None:
            all_reached = False
            values.append(r["train_s"] if key == "seconds" else r["total_steps"])
        else:
            values.append(p[key])
    return statistics.fmean(values), all_reached


def mean_ratio_text(runs: list[dict[str, Any]], native: list[dict[str, Any]],
                    rate: float) -> str:
    """The ratio of ``runs``' mean time to ``rate`` to native's: ``2.6x``; ``> 2.0x`` (some
    of ``runs`` did not reach it), ``< 2.0x`` (some of native's did not), ``?`` (both)."""
    mine, mine_all = mean_time_to(runs, rate)
    theirs, theirs_all = mean_time_to(native, rate)
    if theirs <= 0:
        return "-"
    prefix = {(True, True): "", (False, True): "> ", (True, False): "< "}.get(
        (mine_all, theirs_all))
    return "?" if prefix is None else f"{prefix}{mine / theirs:.1f}x"


def equal_steps(runs: list[dict[str, Any]], most: int = 8) -> list[int]:
    """Up to ``most`` step counts, evenly spread, at which every one of ``runs`` was judged
    (the last common one included): where the contenders' win rates compare like for like."""
    common = sorted(set.intersection(*({p["steps"] for p in r["points"]} for r in runs))
                    - {0}) if runs else []
    if len(common) <= most:
        return common
    stride = math.ceil(len(common) / most)
    return sorted({*common[len(common) - 1::-stride]})


def win_at(row: dict[str, Any], steps: int) -> float:
    """``row``'s win rate at the judgement after ``steps`` steps."""
    return next(p["win_rate"] for p in row["points"] if p["steps"] == steps)


def by_series(measured: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The measured rows grouped by contender, in the contenders' order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in measured:
        groups.setdefault(r["series"], []).append(r)
    return groups


def over_seeds(measured: list[dict[str, Any]], rates: tuple[float, ...]) -> list[str]:
    """The seeds together: each contender's win rate at equal steps (mean over its seeds,
    lowest-highest), its mean time and steps to each win rate with the ratio of mean times to
    native's, and where a training step's time goes (the Amdahl bound of each ratio)."""
    groups = by_series(measured)
    native = groups.get(CONTENDERS[0][0])
    checkpoints = equal_steps(measured)
    lines: list[str] = []
    if checkpoints:
        body = []
        for series, runs in groups.items():
            cells = []
            for steps in checkpoints:
                rates_ = [win_at(r, steps) for r in runs]
                cells.append(f"{statistics.fmean(rates_):.3f}" + (
                    f" ({min(rates_):.2f}-{max(rates_):.2f})" if len(rates_) > 1 else ""))
            body.append([series, str(len(runs)), *cells])
        lines += ["", "Win rate at equal steps (mean over the seeds, lowest-highest in "
                  "brackets; every contender judged after the same steps):", "",
                  md_table(["contender", "seeds", *(f"{s:,} steps" for s in checkpoints)],
                           body)]
    body = []
    for series, runs in groups.items():
        cells = []
        for rate in rates:
            secs, every = mean_time_to(runs, rate)
            steps, _ = mean_time_to(runs, rate, "steps")
            reached = sum(first_at(r, rate) is not None for r in runs)
            cells.append(f"{'' if every else '> '}{secs:.0f} s, {steps / 1e3:,.0f}k "
                         f"({reached}/{len(runs)})")
        ratios = ([mean_ratio_text(runs, native, rate) for rate in rates]
                  if native and runs is not native else ["1x"] * len(rates))
        body.append([series, f"{human(statistics.median(r['steps_per_s'] for r in runs))}",
                     *cells, *ratios])
    lines += ["", "Over the seeds: mean training seconds and steps to the first judgement at "
              "each win rate (seeds that reached it / seeds; > : some did not, their whole "
              "training counted, a lower bound) and the ratio of mean times to native's:", "",
              md_table(["contender", "steps/s (median)",
                        *(f"win {x:g}: mean s, steps" for x in rates),
                        *(f"time / native's, win {x:g}" for x in rates)], body)]
    if native:
        cost = {series: {k: statistics.median(us_per_step(r)[k] for r in runs)
                         for k in ("env", "learner", "total")} for series, runs in groups.items()}
        mine = cost[CONTENDERS[0][0]]
        body = []
        for series, c in cost.items():
            other = max(c["total"] - c["env"] - c["learner"], 0.0)
            bound = (mine["learner"] + c["total"] - c["learner"]) / mine["total"]
            body.append([series, f"{c['env']:.1f}", f"{c['learner']:.1f}", f"{other:.1f}",
                         f"{c['total']:.1f}", f"{c['total'] / mine['total']:.2f}x",
                         f"{bound:.2f}x"])
        lines += ["", "Where a training step's wall-clock goes (µs per env step, median over "
                  "the seeds; learner: the policy's forward pass while collecting, the loop's "
                  "copies and the PPO update), the step-time ratio to native's and its Amdahl "
                  "bound with native's learner ((native's learner + this env + other) / "
                  "native's total: what the same steps to the target would give):", "",
                  md_table(["contender", "env", "learner", "other", "total",
                            "total / native's", "bound"], body)]
    return lines


def markdown(rows: list[dict[str, Any]]) -> str:
    """Each run's judgements and time to the target, the ratios to native's run of the same
    seed, then the seeds together (win rates at equal steps, mean times, the step's cost)."""
    body, lines = [], []
    for r in rows:
        if not ok(r):
            note = r.get("note") or r.get("error", "")
            body.append([r["series"], f"{r.get('status')}: {note[:70]}", "", "", "", "", "",
                         str(r.get("seed", ""))])
            continue
        for p in r["points"]:
            body.append([r["series"], f"{p['seconds']:.0f}", f"{p['steps']:,}",
                         f"{p['win_rate']:.3f} ± {ci95(p['win_rate'], p['games']):.3f}",
                         f"{p['draw_rate']:.3f}", f"{p['loss_rate']:.3f}", f"{p['score']:.3f}",
                         str(r.get("seed", 1))])
        lines.append(f"- {r['series']}: win rate {r['target']:g} after {time_to_target(r)}; "
                     f"{human(r['steps_per_s'])} steps/s end to end ({r['total_steps']:,} steps "
                     f"in {r['train_s']:.0f} s; env-only {human(r['sps_env'])}; stopped: "
                     f"{r['stop_reason']}); seed {r.get('seed', 1)}")
    measured = [r for r in rows if ok(r)]
    natives = {r.get("seed", 1): r for r in measured if r["series"] == CONTENDERS[0][0]}
    for r in measured:
        native = natives.get(r.get("seed", 1))
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
        lines.append(f"{line}; seed {r.get('seed', 1)}")
    target = measured[0]["target"] if measured else TARGET_WIN_RATE
    rates = (*MILESTONES, target)
    times = []
    for r in measured:
        native = natives.get(r.get("seed", 1))
        cells = []
        for rate in rates:
            p = first_at(r, rate)
            cells.append(f"{p['seconds']:.0f} s, {p['steps']:,}" if p else
                         f"> {r['train_s']:.0f} s, > {r['total_steps']:,}")
        ratios = ([ratio_text(r, native, rate) for rate in rates] if r is not native else
                  ["1x"] * len(rates)) if native else ["-"] * len(rates)
        times.append([r["series"], *cells, *ratios, str(r.get("seed", 1))])
    if times:
        header = ["contender", *(f"win {x:g}: s, steps" for x in rates),
                  *(f"time / native's, win {x:g}" for x in rates), "seed"]
        lines += ["", "Training seconds and steps to the first judgement at each win rate "
                  "(> : not reached in the budget, a lower bound), the ratios to native's run "
                  "of the same seed:", "", md_table(header, times)]
    if measured:
        lines += over_seeds(measured, rates)
    return "\n".join([
        f"Target: the greedy policy wins {target:g} of the judge's games against the random "
        "opponent. Win / draw / loss rates and score (win 1, draw 0.5) of greedy play against "
        "the random opponent (± 95% interval), judged every "
        f"{EVAL_EVERY:,} training steps and at the end, against each contender's training "
        "seconds (build, JIT compile and the judge's games excluded).", "",
        md_table(["contender", "training s", "env steps", "win", "draw", "loss", "score",
                  "seed"], body),
        "", *lines])


def plot(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """Win rate against training seconds (every run; with one seed, its 95% band shaded) and
    against env steps (the mean over the seeds, lowest-highest shaded), one colour per
    contender; the target as a dashed line, the milestones dotted."""
    import matplotlib.pyplot as plt

    measured = [r for r in rows if ok(r)]
    groups = by_series(measured)
    fig, (by_time, by_steps) = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained")
    for i, (series, runs) in enumerate(groups.items()):
        color = f"C{i}"
        for j, r in enumerate(runs):
            x = [p["seconds"] for p in r["points"]]
            y = [p["win_rate"] for p in r["points"]]
            reached = (f"target at {r['target_s']:.0f} s" if r.get("target_s") is not None
                       else f"target not reached in {r['train_s']:.0f} s")
            label = (f"{series} ({human(r['steps_per_s'])} steps/s; {reached})"
                     if len(runs) == 1 else f"{series}, {len(runs)} seeds" if j == 0 else None)
            by_time.plot(x, y, marker="o", markersize=2, color=color, linewidth=1,
                         alpha=1.0 if len(runs) == 1 else 0.7, label=label)
            if len(runs) == 1:
                half = [ci95(p["win_rate"], p["games"]) for p in r["points"]]
                by_time.fill_between(x, [v - h for v, h in zip(y, half, strict=True)],
                                     [v + h for v, h in zip(y, half, strict=True)],
                                     color=color, alpha=0.15)
        steps = sorted(set.intersection(*({p["steps"] for p in r["points"]} for r in runs)))
        rates = [[win_at(r, s) for r in runs] for s in steps]
        by_steps.plot(steps, [statistics.fmean(v) for v in rates], marker="o", markersize=2,
                      color=color, label=f"{series} (mean of {len(runs)} seed"
                                         f"{'s' if len(runs) > 1 else ''})")
        if len(runs) > 1:
            by_steps.fill_between(steps, [min(v) for v in rates], [max(v) for v in rates],
                                  color=color, alpha=0.15)
    target = measured[0]["target"] if measured else None
    for ax in (by_time, by_steps):
        if target is not None:
            ax.axhline(target, color="gray", linestyle="--", linewidth=1)
            for rate in MILESTONES:
                ax.axhline(rate, color="gray", linestyle=":", linewidth=0.8)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.4)
        ax.legend(fontsize=7)
    by_time.set(xlabel="training wall-clock seconds", ylabel="greedy win rate vs random opponent",
                title="by training second (every seed)")
    by_steps.set(xlabel="env steps", title="by env step (mean over the seeds)")
    fig.suptitle("PPO on chess against the random opponent, the same learner on three envs: "
                 + title, fontsize=10)
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
    """The chess-learning study (``python -m benchmarks --study chess-learning``)."""
    from envfleet.command import CommandError
    from envfleet.machine import usable_cores

    if envs and envs != ["Chess-v0"]:
        raise CommandError(f"--study chess-learning trains Chess-v0 only, not {', '.join(envs)}")
    seconds = args.seconds or DEFAULT_SECONDS
    seeds = getattr(args, "seeds", None) or 1
    steps = getattr(args, "steps", None) or DEFAULT_STEPS
    eval_games = eval_games_for(seconds)
    num_envs = args.num_envs[0] if args.num_envs else None
    # per contender: budget, build, the judge's games (~2 s native, ~30 s OpenSpiel a time)
    args.timeout = max(args.timeout, 2 * seconds + 600)
    study = _LearningRun("chess-learning", args, {
        "seconds": seconds, "repeats": 1, "eval_games": eval_games, "num_envs": num_envs,
        "eval_every": EVAL_EVERY, "target_win_rate": TARGET_WIN_RATE, "seeds": seeds,
        "steps": steps, "env_seeds": [env_seed(s, num_envs or 256) for s in range(1, seeds + 1)],
        "contenders": [c[0] for c in CONTENDERS]})
    jobs, skipped = plan(seconds, eval_games, num_envs, seeds, steps)
    rows = study.run(jobs, skipped)
    title = (f"{study.info['cpu']}, {usable_cores()} usable cores, {steps:,} steps or "
             f"{seconds:g} s at most each, {seeds} seed{'s' if seeds > 1 else ''}, "
             f"{study.info['date'][:10]}")
    keys = ("series", "seed", "steps_per_s", "total_steps", "target", "target_s",
            "target_steps", "points")
    return study.finish(markdown(rows), lambda path: plot(rows, title, path),
                        {"curves": [{k: r.get(k) for k in keys} for r in rows if ok(r)]})
