#!/usr/bin/env python
"""Time to solve an env: envfleet PPO vs Stable-Baselines3 PPO (rl-zoo settings), in one run.

    .venv/bin/python -m benchmarks.scripts.bench_train [--env CartPole-v1] [--seeds 1,2,3,4,5]
                                            [--sweep 8,32,128,512] [--out docs/bench]
    .venv/bin/python -m benchmarks.scripts.bench_train --env Acrobot-v1      # 5 seeds, ~10 min here
    .venv/bin/python -m benchmarks.scripts.bench_train --env MinAtar/Breakout-v1

Envs (``BENCHES``): CartPole-v1 (target 475, evaluated every 1024 steps), Acrobot-v1
(target -100, evaluated every 4096 steps: one rollout of zoo's 16 x 256), and MinAtar's
Breakout-v1 and SpaceInvaders-v1 (targets: the MinAtar paper's best baseline, evaluated every
``MINATAR_EVAL_EVERY`` steps; see ``MINATAR_TARGETS``). Contenders, seeds outermost and
contenders alternating within a seed (a burst of other work hits them alike), each run in a
fresh process (no shared JIT, thread pools or warm caches):

- ``envfleet``: ``envfleet train ENV`` with its preset (numba backend). Time = wall clock from
  the start of training until a greedy 100-episode evaluation (on a batched 100-env envfleet
  env, every ``eval_every`` steps) has a mean return >= the target, **evaluations included**;
  JIT compile and env/agent construction are reported apart (``compile_s``).
- ``sb3-zoo``: SB3 PPO with rl-zoo's tuned hyperparameters on Gymnasium's env (DummyVecEnv;
  CartPole: 8 envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, gae_lambda 0.8, linear lr
  1e-3 and clip 0.2 over zoo's 1e5 steps, ent_coef 0; Acrobot: VecNormalize (observations and
  rewards, as zoo's ``normalize: true``), 16 envs, n_steps 256, batch 64, 4 epochs, gamma 0.99,
  gae_lambda 0.94, lr 3e-4, ent_coef 0). Every ``eval_every`` steps, when a rollout starts
  (after the gradient steps on the previous one, as envfleet evaluates), the training clock
  pauses and ``sb3_evaluate`` applies envfleet's rule (``ppo.evaluate``) to the SB3 model: 100
  greedy episodes at once on a 100-env DummyVecEnv of Gymnasium's env (observations normalised
  with the training statistics), seeded alike each time, stopped once the target is out of
  reach; time = training time **excluding** those evaluations (reported apart, ``eval_s``).
  Model construction is excluded too.
- ``sb3`` (MinAtar; rl-zoo has no MinAtar settings): SB3 PPO with envfleet's preset for the
  game, setting for setting (``same_ppo``: 64 envs x 128 steps, 1024-sample minibatches x 4
  epochs, lr 5e-3 annealed linearly, gamma 0.99, lambda 0.95, clip 0.2, ent_coef 0.01, the
  value loss weighted alike (SB3's vf_coef 0.25: its loss is the mean squared error, envfleet's
  half of it), separate 64-64 ReLU actor and critic MLPs on the flattened planes, orthogonal
  init with the same gains, Adam eps 1e-5, advantages normalised per minibatch, the preset's
  torch threads) on the reference env
  (``minatar.gym.BaseEnv``: ``MinAtar/<Game>-v1``, the ``minatar`` package's Gymnasium id, in
  a DummyVecEnv), measured as ``sb3-zoo`` is (its evaluations: 100 greedy episodes on 100
  reference envs).
- ``sb3-zoo-facade``: the same SB3 PPO on envfleet's SB3 facade
  (``envfleet.sb3.to_sb3(ENV, n, backend="numba")``), measured the same way (its JIT compile
  happens before training: one reset and step, reported in ``compile_s``).

Then (CartPole) the num_envs sweep (envfleet, seed 1..k): the same recipe with more envs,
keeping one 256-sample minibatch per gradient step and about 20 gradient steps per rollout
(fewer epochs as the rollout grows): steps/s (env-only, ideal, end-to-end) and time/steps to
475 as num_envs grows. Writes ``<out>/train-ENV.{json,md,png}`` and the envfleet learning
curves ``<out>/train-ENV-curve.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULT_TAG = "BENCH_TRAIN_RESULT "


@dataclass(frozen=True)
class Bench:
    """One env's race: its target, evaluation interval and the defaults of the command."""

    target: float
    eval_every: int  # env steps between evaluations, for every contender
    zoo_timesteps: int  # rl-zoo's n_timesteps: SB3's budget and the span of its schedules
    contenders: str
    sweep: str
    time_limit: float  # seconds of training per run before giving up


#: the MinAtar paper's best baseline at 5M frames (Young & Tian 2019, arXiv:1903.03176, the
#: step-size sensitivity figure, "average return over final 100 episodes", as the MinAtar
#: README's img/sensitivity_curves.gif shows it): AC(lambda=0.8) Breakout ~17, Space
#: Invaders ~180 (DQN: ~10 and ~45). Read off the plot (the paper lists no numbers).
MINATAR_TARGETS = {"MinAtar/Breakout-v1": 17.0, "MinAtar/SpaceInvaders-v1": 180.0}
#: env steps between evaluations of a MinAtar race (every 8th rollout of 64 x 128)
MINATAR_EVAL_EVERY = 65_536
#: the step budget of a MinAtar race: the paper's 5M frames (one frame per step)
MINATAR_STEPS = 5_000_000

BENCHES = {
    "CartPole-v1": Bench(475.0, 1024, 100_000, "envfleet,sb3-zoo,sb3-zoo-facade",
                         "8,32,128,512", 120.0),
    "Acrobot-v1": Bench(-100.0, 4096, 1_000_000, "envfleet,sb3-zoo", "", 90.0),
    **{env_id: Bench(target, MINATAR_EVAL_EVERY, MINATAR_STEPS, "envfleet,sb3", "", 1800.0)
       for env_id, target in MINATAR_TARGETS.items()},
}
EVAL_EPISODES = 100


def zoo_ppo(env_id: str, venv: Any, seed: int) -> tuple[Any, Any]:
    """rl-zoo's PPO for ``env_id`` on ``venv`` (VecNormalize'd where zoo normalises): (model,
    the training env the model steps)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    common = dict(seed=seed, verbose=0, device="cpu")
    if env_id == "CartPole-v1":
        return PPO("MlpPolicy", venv, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98,
                   gae_lambda=0.8, learning_rate=linear(1e-3), clip_range=linear(0.2),
                   ent_coef=0.0, **common), venv
    if env_id == "Acrobot-v1":  # zoo's normalize: true = VecNormalize's defaults, zoo's gamma
        venv = VecNormalize(venv, gamma=0.99)
        return PPO("MlpPolicy", venv, n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4,
                   ent_coef=0.0, **common), venv
    raise ValueError(f"no rl-zoo settings here for {env_id}")


def same_ppo(env_id: str, venv: Any, seed: int) -> Any:
    """SB3 PPO with envfleet's preset for ``env_id`` (``envfleet train``'s settings, one for
    one: rollout shape, minibatch size, epochs, annealed lr, gamma, lambda, clip, entropy,
    separate actor and critic MLPs of the preset's widths and activation)."""
    from stable_baselines3 import PPO
    from torch import nn

    from envfleet.train.args import args_defaults
    from envfleet.train.presets import preset

    p = {**args_defaults(), **preset(env_id)}
    assert p["anneal_lr"] and p["clip_coef"] == 0.2 and p["vf_coef"] == 0.5
    assert p["max_grad_norm"] == 0.5 and p["norm_adv"] and not p["clip_vloss"]
    assert p["anneal_lr"] and not p["norm_obs"] and not p["norm_reward"], p
    lr = p["learning_rate"]
    hidden = list(p["hidden_sizes"])
    return PPO("MlpPolicy", venv, n_steps=p["num_steps"],
               batch_size=p["num_envs"] * p["num_steps"] // p["num_minibatches"],
               n_epochs=p["update_epochs"], gamma=p["gamma"], gae_lambda=p["gae_lambda"],
               learning_rate=lambda progress_remaining: progress_remaining * lr,
               # SB3's value loss is the mean squared error, envfleet's (CleanRL's) half of it
               clip_range=0.2, ent_coef=p["ent_coef"], vf_coef=p["vf_coef"] / 2,
               max_grad_norm=0.5,
               policy_kwargs=dict(net_arch=dict(pi=hidden, vf=hidden),
                                  activation_fn={"relu": nn.ReLU, "tanh": nn.Tanh}[
                                      p["activation"]]),
               seed=seed, verbose=0, device="cpu")


ZOO_NUM_ENVS = {"CartPole-v1": 8, "Acrobot-v1": 16,
                **{env_id: 64 for env_id in MINATAR_TARGETS}}


# --- one run (in its own process) -------------------------------------------------------


def run_envfleet(env_id: str, seed: int, num_envs: int | None, time_limit: float
                 ) -> dict[str, Any]:
    from envfleet.train import ppo
    from envfleet.train.presets import preset

    settings = {**preset(env_id), "env_id": env_id, "backend": "numba", "seed": seed,
                "time_limit": time_limit}
    assert settings["eval_every"] == BENCHES[env_id].eval_every  # the same rule as SB3's
    if env_id in MINATAR_TARGETS:  # the same budget (and lr schedule) as SB3's
        assert settings["total_steps"] == BENCHES[env_id].zoo_timesteps
    if num_envs is not None and num_envs != settings["num_envs"]:
        settings.update(sweep_settings(num_envs))
    args = ppo.Args(**settings)
    _, s = ppo.train(args)
    return {"solved_at_s": s.solved_at_s, "solved_at_steps": s.solved_at_steps,
            "compile_s": s.compile_s, "eval_s": s.times["evaluation"], "total_steps": s.total_steps,
            "sps_env": s.sps_env, "sps_ideal": s.sps_ideal, "sps_ideal_iqr": s.sps_ideal_iqr,
            "ideal_iterations": s.ideal_iterations, "sps_end_to_end": s.sps_end_to_end,
            "efficiency": s.efficiency, "times": s.times, "final_eval_return": s.final_eval_return,
            "curve": s.curve, "evaluations": s.evaluations, "stop_reason": s.stop_reason,
            "settings": {k: settings[k] for k in ("num_envs", "num_steps", "num_minibatches",
                                                   "update_epochs")}}


def sweep_settings(num_envs: int) -> dict[str, Any]:
    """More envs: rollouts of max(8, 256 / N) steps, 256-sample minibatches, epochs
    round(20 / minibatches) but 2 at least: ~20 gradient steps per rollout up to 2,560
    samples, then 2 epochs (256 envs: 16 steps, 512: 32, 1024: 64)."""
    num_steps = max(8, 256 // num_envs)
    batch = num_envs * num_steps
    minibatches = max(1, batch // 256)
    return {"num_envs": num_envs, "num_steps": num_steps, "num_minibatches": minibatches,
            "update_epochs": max(2, round(20 / minibatches))}


def run_sb3(env_id: str, seed: int, facade: bool, time_limit: float) -> dict[str, Any]:
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize, sync_envs_normalization

    from envfleet.train.presets import preset

    bench = BENCHES[env_id]
    num_envs = ZOO_NUM_ENVS[env_id]
    # envfleet's preset's torch threads: 1 for the classic envs (SB3's small minibatches are no
    # faster with 2), 2 for MinAtar (SB3's step 32 -> 25-29 us with 2, its 1024-sample matmuls)
    torch.set_num_threads(preset(env_id).get("torch_threads", 1))
    minatar = env_id in MINATAR_TARGETS
    if minatar:  # the reference's MinAtar/<Game>-vN ids (minatar.gym.register_envs)
        import envfleet.envs.minatar.reference  # noqa: F401
    t0 = time.perf_counter()
    if facade:
        from envfleet.sb3 import to_sb3

        env = to_sb3(env_id, num_envs, backend="numba", seed=seed)
        env.reset()  # JIT-compile the kernels now, outside the timed training
        env.step(np.zeros(num_envs, dtype=np.int64))
    else:
        env = make_vec_env(env_id, n_envs=num_envs, seed=seed)
    model, env = (same_ppo(env_id, env, seed), env) if minatar else zoo_ppo(env_id, env, seed)
    eval_env = make_vec_env(env_id, n_envs=EVAL_EPISODES)
    if isinstance(env, VecNormalize):  # the training statistics, frozen; true returns
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    bounds = {k: preset(env_id).get(k) for k in ("max_episode_return", "max_step_reward")}
    build_s = time.perf_counter() - t0

    class Evaluate(BaseCallback):
        """Every ``eval_every`` steps, as a rollout starts (the previous one trained on):
        pause the training clock, play 100 greedy episodes; stop at the next step once solved
        or past the time limit."""

        def __init__(self) -> None:
            super().__init__()
            self.eval_s, self.last, self.solved_steps, self.evals = 0.0, 0, None, []
            self.start, self.solved_s, self.stop = 0.0, None, False

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_rollout_start(self) -> None:
            if self.num_timesteps - self.last < bench.eval_every:
                return
            self.last = self.num_timesteps
            t = time.perf_counter()
            train_s = t - self.start - self.eval_s
            sync_envs_normalization(env, eval_env)
            mean = sb3_evaluate(self.model, eval_env, seed + 10_000, bench.target, **bounds)
            self.eval_s += time.perf_counter() - t
            self.evals.append({"steps": self.num_timesteps, "train_s": train_s,
                               "mean_return": float(mean)})
            if mean >= bench.target:
                self.solved_steps, self.solved_s, self.stop = self.num_timesteps, train_s, True
            self.stop |= train_s + self.eval_s >= time_limit

        def _on_step(self) -> bool:
            return not self.stop

    callback = Evaluate()
    t0 = time.perf_counter()
    model.learn(total_timesteps=bench.zoo_timesteps, callback=callback)
    wall = time.perf_counter() - t0
    return {"solved_at_s": callback.solved_s,
            "solved_at_steps": callback.solved_steps, "compile_s": build_s,
            "eval_s": callback.eval_s, "total_steps": model.num_timesteps,
            "sps_end_to_end": model.num_timesteps / (wall - callback.eval_s),
            "evaluations": callback.evals,
            "final_eval_return": callback.evals[-1]["mean_return"] if callback.evals else None}


def sb3_evaluate(model: Any, env: Any, seed: int, target: float,
                 max_episode_return: float | None, max_step_reward: float | None) -> float:
    """envfleet's evaluation rule (``ppo.evaluate``) for an SB3 model: the first episode of each
    of the ``env.num_envs`` envs, greedy, played at once, seeded alike every time; stopped as
    soon as even perfect remaining episodes could not lift the mean to ``target``."""
    import numpy as np

    from envfleet.train.evaluation import best_total

    env.seed(seed)
    obs = env.reset()
    totals, done = np.zeros(env.num_envs), np.zeros(env.num_envs, dtype=bool)
    while not done.all():
        actions, _ = model.predict(obs, deterministic=True)
        obs, rewards, dones, _ = env.step(actions)
        totals += np.where(done, 0.0, rewards)
        done |= dones
        if best_total(totals, done, max_episode_return, max_step_reward) < target * env.num_envs:
            return float(totals.mean())
    return float(totals.mean())


def worker(spec: dict[str, Any]) -> None:
    if spec["kind"] == "envfleet":
        result = run_envfleet(spec["env"], spec["seed"], spec.get("num_envs"),
                              spec["time_limit"])
    else:
        result = run_sb3(spec["env"], spec["seed"], spec["kind"] == "sb3-zoo-facade",
                         spec["time_limit"])
    print(RESULT_TAG + json.dumps({**spec, **result}), flush=True)


# --- the parent -------------------------------------------------------------------------


def run(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    from envfleet.bench.measure import background_load, cpu_seconds

    before, t0 = cpu_seconds(), time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {**spec, "status": "timeout"}
    wall = time.perf_counter() - t0
    load = background_load(before, cpu_seconds(), wall)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return {**json.loads(line[len(RESULT_TAG):]), "status": "ok",
                    "process_wall_s": wall, "background_load": load}
    return {**spec, "status": "failed", "error": (proc.stderr or proc.stdout)[-2000:]}


def _median(values: list[float | None]) -> float | None:
    """Median over seeds; an unsolved seed counts as infinitely slow."""
    if not values:
        return None
    m = statistics.median([v if v is not None else float("inf") for v in values])
    return None if m == float("inf") else m


def per_1k_steps(runs: list[dict[str, Any]]) -> list[float]:
    """Seconds per 1000 env steps of the solved runs (the cost of a step, seed luck aside)."""
    return [1000 * r["solved_at_s"] / r["solved_at_steps"] for r in runs
            if r.get("solved_at_s") is not None and r.get("solved_at_steps")]


def ratio_key(baseline: str) -> str:
    """The results' key of the median speed-up over ``baseline`` (``sb3-zoo``:
    ``ratio_sb3_zoo_over_envfleet``)."""
    return f"ratio_{baseline.replace('-', '_')}_over_envfleet"


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(results: dict[str, Any]) -> str:
    contenders = results["contenders"]
    seeds = results["seeds"]
    lines = [f"# Time to solve {results['env']} (greedy 100-episode mean >= "
             f"{results['target']:g}, evaluated every {results['eval_every']:,} steps)", "",
             f"Machine: {results['machine']['cpu']}, {results['machine']['usable_cores']} "
             f"cores, {results['machine']['date']}. Command: `{results['command']}`.", "",
             "Seconds of training to the first passing evaluation (envfleet: evaluations "
             "included; SB3: evaluations excluded, their cost in the eval column) and env steps "
             "then. `load`: cores other processes kept busy during the run (2 cores here).", "",
             "| contender | " + " | ".join(f"seed {s}" for s in seeds)
             + " | median s | median steps | median s per 1k steps | median eval s (apart) "
               "| median load |",
             "|:---|" + "---:|" * (len(seeds) + 5)]
    for name, runs in contenders.items():
        cells = [f"{_f(r.get('solved_at_s'))} s / {r.get('solved_at_steps') or '–'}"
                 for r in runs]
        lines.append(f"| {name} | " + " | ".join(cells) + " | "
                     f"{_f(_median([r.get('solved_at_s') for r in runs]))} | "
                     f"{_f(_median([r.get('solved_at_steps') for r in runs]), 0)} | "
                     f"{_f(_median(per_1k_steps(runs)), 3)} | "
                     f"{_f(statistics.median([r.get('eval_s') or 0 for r in runs]))} | "
                     f"{_f(statistics.median([r.get('background_load') or 0 for r in runs]))} |")
    baseline = results.get("baseline", "sb3-zoo")
    ratio = results.get(ratio_key(baseline))
    lines += ["", f"Median speed-up of envfleet over {baseline}: **{_f(ratio)}x** (solved "
              + ", ".join(f"{name} {sum(r.get('solved_at_s') is not None for r in runs)}/"
                          f"{len(runs)}" for name, runs in contenders.items()) + ").", ""]
    if results["sweep"]:
        lines += ["## num_envs sweep (envfleet)", "",
                  "Ideal: the median of its timed iterations (their interquartile range in "
                  "brackets); an end-to-end rate above the range's top would be a bug. Gradient "
                  "steps per rollout: minibatches x epochs. Stop: why the run ended (target, "
                  "steps: the step budget, time limit).", "",
                  "| num_envs | steps x envs, minibatches, epochs | solved s | solved steps | "
                  "stop | steps/s env | ideal (IQR) | end-to-end | end-to-end / ideal |",
                  "|---:|:---|---:|---:|:---|---:|---:|---:|---:|"]
        for r in results["sweep"]:
            if r.get("status") != "ok":
                lines.append(f"| {r['num_envs']} | {r.get('status')} | | | | | | | |")
                continue
            st = r["settings"]
            low, high = r.get("sps_ideal_iqr", (float("nan"), float("nan")))
            lines.append(f"| {r['num_envs']} | {st['num_steps']} x {st['num_envs']}, "
                         f"{st['num_minibatches']}, {st['update_epochs']} | "
                         f"{_f(r['solved_at_s'])} | {r['solved_at_steps'] or '–'} | "
                         f"{r.get('stop_reason', '?')} at {r['total_steps']:,} steps | "
                         f"{r['sps_env']:,.0f} | {r['sps_ideal']:,.0f} ({low:,.0f}-{high:,.0f}) | "
                         f"{r['sps_end_to_end']:,.0f} | {r['efficiency']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), layout="constrained")
    names = list(results["contenders"])
    for i, name in enumerate(names):
        runs = results["contenders"][name]
        for ax, key in zip(axes[:2], ("solved_at_s", "solved_at_steps"), strict=True):
            ys = [r.get(key) for r in runs if r.get(key) is not None]
            ax.scatter([i] * len(ys), ys, color=f"C{i}", alpha=0.8)
            m = _median([r.get(key) for r in runs])
            if m is not None:
                ax.hlines(m, i - 0.3, i + 0.3, color=f"C{i}", linewidth=2)
    for ax, label in zip(axes[:2], ("seconds to solve (envfleet: evals included; "
                                    "SB3: evals excluded)", "env steps to solve"), strict=True):
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(label, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", alpha=0.3)
    sweep = [r for r in results["sweep"] if r.get("status") == "ok"]
    if sweep:
        ax = axes[2]
        ns = [r["num_envs"] for r in sweep]
        for key, style in (("sps_env", ":"), ("sps_ideal", "--"), ("sps_end_to_end", "-")):
            ax.plot(ns, [r[key] for r in sweep], linestyle=style, marker="o", label=key[4:])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("num_envs")
        ax.set_ylabel("steps/s")
        twin = ax.twinx()
        twin.plot(ns, [r["solved_at_s"] if r["solved_at_s"] is not None else float("nan")
                       for r in sweep], color="k", marker="s", label="seconds to solve")
        twin.set_ylabel("seconds to solve (seed 1)")
        twin.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=8)
        twin.legend(loc="lower right", fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"PPO on {results['env']} to a greedy mean of {results['target']:g}: "
                 f"{results['machine']['cpu']}, {results['machine']['usable_cores']} cores, "
                 f"{results['machine']['date'][:10]}", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--env", default="CartPole-v1", choices=sorted(BENCHES))
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--contenders",
                        help="comma-separated (default: CartPole-v1 envfleet,sb3-zoo,"
                             "sb3-zoo-facade; Acrobot-v1 envfleet,sb3-zoo; MinAtar "
                             "envfleet,sb3)")
    parser.add_argument("--sweep", help="num_envs values for the envfleet sweep, CartPole-v1 "
                                        "only (default: 8,32,128,512; empty: none)")
    parser.add_argument("--time-limit", type=float,
                        help="seconds of training per run before giving up (default: "
                             "CartPole-v1 120, Acrobot-v1 90, MinAtar 1800)")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    options = parser.parse_args()
    if options.worker:
        worker(json.loads(options.worker))
        return 0
    bench = BENCHES[options.env]
    contenders = options.contenders or bench.contenders
    sweep = bench.sweep if options.sweep is None else options.sweep
    time_limit = options.time_limit or bench.time_limit
    if sweep and options.env != "CartPole-v1":
        parser.error("--sweep: the num_envs sweep's recipe is CartPole-v1's")

    from rich.console import Console

    from envfleet.bench.report import machine_info
    from envfleet.train.report import plot_curve

    console = Console(highlight=False)
    seeds = [int(s) for s in options.seeds.split(",")]
    results: dict[str, Any] = {
        "command": "python -m benchmarks.scripts.bench_train " + " ".join(sys.argv[1:]),
        "machine": machine_info(), "env": options.env, "seeds": seeds, "target": bench.target,
        "eval_every": bench.eval_every, "time_limit": time_limit, "contenders": {},
        "sweep": []}
    timeout = time_limit * 3 + 120
    # seeds outermost: a burst of other work hits every contender alike
    for name in contenders.split(","):
        results["contenders"][name] = []
    for seed in seeds:
        for name in results["contenders"]:
            r = run({"kind": name, "env": options.env, "seed": seed, "time_limit": time_limit},
                    timeout)
            results["contenders"][name].append(r)
            console.print(f"{name:15s} seed {seed}: solved {_f(r.get('solved_at_s'))} s at "
                          f"{r.get('solved_at_steps')} steps; compile/build "
                          f"{_f(r.get('compile_s'))} s, eval {_f(r.get('eval_s'))} s; load "
                          f"{r.get('background_load')} {r.get('status')} {r.get('error', '')}")
    runs = results["contenders"]
    baseline = next((name for name in ("sb3-zoo", "sb3") if name in runs), None)
    if "envfleet" in runs and baseline is not None:
        ours = _median([r.get("solved_at_s") for r in runs["envfleet"]])
        theirs = _median([r.get("solved_at_s") for r in runs[baseline]])
        results["baseline"] = baseline
        results[ratio_key(baseline)] = theirs / ours if ours and theirs else None
    for n in [int(x) for x in sweep.split(",") if x]:
        r = run({"kind": "envfleet", "env": options.env, "seed": seeds[0], "num_envs": n,
                 "time_limit": time_limit}, timeout)
        r.setdefault("num_envs", n)
        results["sweep"].append(r)
        console.print(f"sweep num_envs {n}: solved {_f(r.get('solved_at_s'))} s at "
                      f"{r.get('solved_at_steps')} steps; steps/s env {r.get('sps_env', 0):,.0f}"
                      f" ideal {r.get('sps_ideal', 0):,.0f} end-to-end "
                      f"{r.get('sps_end_to_end', 0):,.0f}; load {r.get('background_load')}")

    options.out.mkdir(parents=True, exist_ok=True)
    stem = options.out / f"train-{options.env.replace('/', '-')}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    stem.with_suffix(".md").write_text(text)
    plot(results, stem.with_suffix(".png"))
    curves = [{**r, "env": options.env, "backend": "numba",
               "num_envs": r["settings"]["num_envs"]}
              for r in runs.get("envfleet", []) if r.get("status") == "ok"]
    if curves:
        plot_curve(curves, stem.with_name(stem.name + "-curve.png"), bench.target,
                   f"envfleet train {options.env} (numba, {curves[0]['num_envs']} envs, "
                   f"defaults): {len(curves)} seeds")
    console.print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
