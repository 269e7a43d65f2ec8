"""``envfleet train ENV`` and ``envfleet eval ENV --load PATH``: PPO from the command line.

Per-env presets (``PRESETS``) make ``envfleet train CartPole-v1`` solve with no flags; any other
id gets CleanRL's PPO defaults and Gymnasium's ``reward_threshold`` as its target. Torch is
imported only when a command runs (``envfleet --help`` and ``envfleet bench`` stay light).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib.util
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from envfleet.command import CommandError, check_output

#: tuned settings per env id (anything not given: ``ppo.Args``'s defaults)
PRESETS: dict[str, dict[str, Any]] = {
    # rl-zoo's CartPole shape (8 envs x 32 steps, one 256-sample minibatch, 20 epochs, gamma
    # 0.98, lambda 0.8, lr 1e-3, no entropy bonus): the fewest gradient steps to a solved policy
    # we found; small batches keep each step cheap on CPU. A cheap batched evaluation every
    # 1024 steps (a failing one stops as soon as 475 is out of reach).
    # The budget is a cap (8 envs solve in ~13-22k steps; 256 envs in 115-197k).
    "CartPole-v1": dict(num_envs=8, num_steps=32, num_minibatches=1, update_epochs=20,
                        learning_rate=1e-3, anneal_lr=False, gamma=0.98, gae_lambda=0.8,
                        ent_coef=0.0, total_steps=500_000, eval_every=1024,
                        target_return=475.0, max_episode_return=500.0),
    # rl-zoo's Acrobot-v1 settings (16 envs x 256 steps, 64-sample minibatches x 4 epochs,
    # gamma 0.99, lambda 0.94, constant lr 3e-4, no entropy bonus, VecNormalize: observations
    # and rewards); zoo's 1M-step budget. Target -100: a greedy 100-episode mean, evaluated
    # every rollout (no reward is positive: a failing evaluation stops after ~100 steps).
    "Acrobot-v1": dict(num_envs=16, num_steps=256, num_minibatches=64, update_epochs=4,
                       learning_rate=3e-4, anneal_lr=False, gamma=0.99, gae_lambda=0.94,
                       ent_coef=0.0, norm_obs=True, norm_reward=True, total_steps=1_000_000,
                       eval_every=4096, target_return=-100.0, max_step_reward=0.0),
    # rl-zoo's Pendulum-v1 settings without gSDE (4 envs x 1024 steps, 64-sample minibatches
    # x 10 epochs, gamma 0.9, lambda 0.95, lr 1e-3, no entropy bonus): a Gaussian policy
    # (state-independent log-std), actions clipped to [-2, 2] when stepping. Zoo's 100k-step
    # budget; target -200 (greedy mean; random play scores about -1200).
    "Pendulum-v1": dict(num_envs=4, num_steps=1024, num_minibatches=64, update_epochs=10,
                        learning_rate=1e-3, anneal_lr=False, gamma=0.9, gae_lambda=0.95,
                        ent_coef=0.0, total_steps=100_000, eval_every=4096,
                        target_return=-200.0, max_step_reward=0.0),
    # rl-zoo's MountainCarContinuous-v0 settings without gSDE (and without its log_std_init
    # -3.29, made for gSDE's exploration): gamma 0.9999, lambda 0.9, lr 7.77e-5, ent_coef
    # 0.00429, clip 0.1, 10 epochs, max_grad_norm 5, vf_coef 0.19, obs+reward normalisation;
    # zoo's 1 env x 8 steps is ours 16 x 256 with 256-sample minibatches. Seeds 1-3 reached
    # Gymnasium's 90 in 32-49k steps. A greedy episode scores at most 100.
    "MountainCarContinuous-v0": dict(
        num_envs=16, num_steps=256, num_minibatches=16, update_epochs=10,
        learning_rate=7.77e-5, anneal_lr=False, gamma=0.9999, gae_lambda=0.9,
        ent_coef=0.00429, clip_coef=0.1, max_grad_norm=5.0, vf_coef=0.19, norm_obs=True,
        norm_reward=True, total_steps=300_000, eval_every=8192, target_return=90.0,
        max_episode_return=100.0),
    # MinAtar (the minimal action sets, sticky actions 0.1 as the reference): PureJaxRL's
    # MinAtar PPO (64 envs x 128 steps, 1024-sample minibatches x 4 epochs, lr 5e-3 annealed,
    # gamma 0.99, lambda 0.95, ent_coef 0.01, separate 64-64 ReLU MLPs on the flattened
    # planes: ~10x cheaper a step here than MinAtar's conv and faster to the target). Targets:
    # the MinAtar paper's best baseline at 5M frames (Young & Tian 2019, AC(lambda=0.8), its
    # final-100-episode average as plotted: Breakout ~17, Space Invaders ~180; DQN ~10, ~45),
    # as greedy 100-episode means, evaluated every 8 rollouts; the paper's 5M-step budget. Two
    # torch threads: the update's 1024 x 400 matmuls are most of a step, the env idles during it
    # (an update 130 -> 88 ms, AMD EPYC 2 vCPUs; SB3's step 32 -> 25-29 us alike)
    **{f"MinAtar/{game}-v1": dict(
        num_envs=64, num_steps=128, num_minibatches=8, update_epochs=4, learning_rate=5e-3,
        gamma=0.99, gae_lambda=0.95, ent_coef=0.01, hidden_sizes=(64, 64), activation="relu",
        torch_threads=2, total_steps=5_000_000, eval_every=65_536, target_return=target)
       for game, target in (("Breakout", 17.0), ("SpaceInvaders", 180.0))},
    # masked policy against the random opponent: reward +1 win, 0 draw, -1 loss at the end
    # the learner dominates the cost (the env ~2 us a step): few epochs, the softmax, sampling
    # and entropy over the ~30 legal moves only (legal_logits: the same policy, ~3x less
    # learner CPU per sample than over all 4672: 604 -> 206 us at 256 envs), and a 64-wide MLP:
    # the learner 214 -> 124 us a step, and greedy win rate 0.4 against random (200 games) in
    # 655k-1.31M steps (mean 1.08M, 305 s) against 128-wide's 688k-1.08M (0.90M, 366 s);
    # seeds 1-3, disjoint envs, loaded 2-vCPU EPYC (scripts/chess_learning_presets.py). One
    # epoch per rollout (1 or 4 minibatches) was cheaper still but stalled under 0.2 in 1.6M
    # steps on some seeds
    "Chess-v0": dict(num_envs=256, num_steps=16, num_minibatches=2, update_epochs=2,
                     learning_rate=1e-3, gamma=0.99, gae_lambda=0.95, ent_coef=0.01,
                     hidden_sizes=(64, 64), activation="relu", legal_logits=True,
                     total_steps=20_000_000,
                     eval_every=1_000_000, eval_episodes=1000, target_return=None,
                     time_limit=1200.0,
                     env_kwargs={"opponent": "random", "observation": "planes"}),
    # CleanRL's ppo_atari (and ppo_atari_envpool): 8 envs x 128 steps, 4 minibatches x 4
    # epochs, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip 0.1, ent 0.01, vf 0.5, grad
    # norm 0.5, the Nature CNN on frames / 255 with linear heads; EnvPool's training options
    # (a lost life ends the learner's episode, rewards clipped to their sign; the evaluations
    # score whole games, unclipped: envs.TRAINING_ONLY_OPTIONS); CleanRL's 10M steps. Greedy
    # evaluations of 8 games every 1M steps (a policy that never serves plays 27k steps)
    "ALE/Breakout-v5": dict(num_envs=8, num_steps=128, num_minibatches=4, update_epochs=4,
                            learning_rate=2.5e-4, gamma=0.99, gae_lambda=0.95, clip_coef=0.1,
                            ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, cnn=True,
                            hidden_sizes=(), activation="relu", torch_threads=2,
                            total_steps=10_000_000,
                            eval_every=1_000_000, eval_episodes=8, target_return=None,
                            env_kwargs={"episodic_life": True, "reward_clip": True}),
    # CleanRL's ppo_continuous_action: 2048 steps a rollout, 32 minibatches x 10 epochs, lr
    # 3e-4 annealed, gamma 0.99, lambda 0.95, clip 0.2 with value clipping, ent 0, vf 0.5,
    # grad norm 0.5, 64-64 tanh MLPs, a state-independent log-std, actions clipped to the Box,
    # observations and rewards normalised step by step as its Gymnasium wrappers do (clipped
    # to +-10); its 1M steps. One env, as CleanRL: more at 2048 steps each would multiply the
    # batch, and so divide the gradient steps per env step (at 1M steps, fewer updates learn
    # less). One MuJoCo thread (one env: a second thread only hands it off; 714 vs 1354 us a
    # step on the loaded 2-core EPYC). Greedy evaluations of 10 episodes (the frozen
    # statistics) every 10 rollouts
    **{f"{name}-v5": dict(num_envs=1, num_steps=2048, num_minibatches=32, update_epochs=10,
                          learning_rate=3e-4, gamma=0.99, gae_lambda=0.95, clip_coef=0.2,
                          clip_vloss=True, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
                          norm_obs=True, norm_reward=True, norm_each_step=True,
                          total_steps=1_000_000, eval_every=20_480, eval_episodes=10,
                          target_return=None, env_kwargs={"num_threads": 1})
       for name in ("HalfCheetah", "Hopper")},
}
LOG_EVERY_S = 1.0


@functools.cache
def args_defaults() -> dict[str, Any]:
    """``ppo.Args``'s defaults (CleanRL's PPO: the settings of ids without a preset), read from
    ppo.py's source: the one place they are written, and ``--help`` must not import torch."""
    path = importlib.util.find_spec("envfleet.train.ppo").origin
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    body = next(node.body for node in tree.body
                if isinstance(node, ast.ClassDef) and node.name == "Args")
    return {node.target.id: ast.literal_eval(node.value) for node in body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and node.value is not None and not isinstance(node.value, ast.Call)}


def _env_name(env_id: str) -> str:
    """The env ``env_id`` names, one name per env: a native id in envfleet's form
    (``envfleet/MinAtar-Breakout-v1``, ``mygrid:MyGrid-v0``: ``MinAtar/Breakout-v1``,
    ``MyGrid-v0``), else the Gymnasium id without its ``module:``."""
    from envfleet.registry import _native_name  # make()'s own lookup

    return _native_name(env_id) or env_id.rpartition(":")[2]


def preset(env_id: str) -> dict[str, Any]:
    """The tuned settings for ``env_id``, else generic ones with Gymnasium's target."""
    from envfleet.registry import _native_name, gym_id  # make()'s own lookup

    native = _native_name(env_id)
    name = native or _env_name(env_id)
    if name in PRESETS:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in PRESETS[name].items()}
    target = None
    try:
        import gymnasium

        # a user's native family: its envfleet/<id> carries its reference's reward_threshold
        target = gymnasium.spec(gym_id(native) if native else name).reward_threshold
    except Exception:  # an id Gymnasium does not know: make() will say so
        pass
    return {"target_return": target}


# --- argument parsing ---------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _seed(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    if value >= 2**64:
        raise argparse.ArgumentTypeError(f"must be below 2**64 (seeds are uint64), got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _show(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{value:g}"


def preset_defaults(key: str) -> str:
    """``key``'s default in each preset and for other ids, for ``--help``."""
    generic = args_defaults()[key]
    shown = [f"{name} {_show(values.get(key, generic))}" for name, values in PRESETS.items()]
    return "default: " + ", ".join([*shown, f"other ids {_show(generic)}"])


def minibatch_sizes() -> str:
    """Each preset's minibatch size (samples per gradient step), for ``--help``."""
    sizes = [f"{name} {_minibatch_size({**args_defaults(), **values})}"
             for name, values in PRESETS.items()]
    return ", ".join([*sizes, f"other ids {_minibatch_size(args_defaults())}"])


def _minibatch_size(settings: dict[str, Any]) -> int:
    return settings["num_envs"] * settings["num_steps"] // settings["num_minibatches"]


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``train`` subcommand's options (defaults: the env's preset, shown per preset)."""
    parser.epilog = ("Each env id has a preset (" + ", ".join(PRESETS) + ": tuned, rl-zoo's "
                     "where it has them; other ids: CleanRL's PPO defaults with Gymnasium's "
                     "reward_threshold as the target). Box actions get a Gaussian policy "
                     "(clipped into the Box when stepping), Discrete ones a categorical; "
                     "an option given overrides it. Minibatches keep the preset's size as "
                     "--num-envs or --num-steps change (" + minibatch_sizes() + " samples), "
                     "so more envs mean more minibatches, not larger ones; then epochs drop "
                     "(to 2 at least) to keep about the preset's gradient steps per rollout.")
    parser.add_argument("env", metavar="ENV", help="env id (native, e.g. CartPole-v1, or any "
                                                  "Gymnasium id with an executor backend)")
    parser.add_argument("--backend", default="auto",
                        help="numba, torch, cuda (native ids); serial, subprocess, pool, ray "
                             "(any id; ray: the evaluation env runs in this process). Default: "
                             "numba for native ids, pool otherwise")
    parser.add_argument("--num-workers", type=_positive_int, metavar="N",
                        help="pool, ray: worker processes or Ray actors of the training env "
                             "(default: pool one per usable core; ray the cluster's CPUs / "
                             "--cpus-per-worker)")
    parser.add_argument("--cpus-per-worker", type=_positive_float, metavar="CPUS",
                        help="ray: CPUs each actor asks Ray for (default: 1; 0.5 shares a "
                             "CPU between two actors)")
    parser.add_argument("--num-envs", type=_positive_int,
                        help=f"envs in the training batch ({preset_defaults('num_envs')})")
    parser.add_argument("--num-steps", type=_positive_int,
                        help=f"steps per env per rollout ({preset_defaults('num_steps')})")
    parser.add_argument("--num-minibatches", type=_positive_int,
                        help="minibatches per epoch (default: num_envs x num_steps / the "
                             "preset's minibatch size, see below: "
                             + preset_defaults("num_minibatches").removeprefix("default: ")
                             + " at the preset's num_envs and num_steps)")
    parser.add_argument("--update-epochs", type=_positive_int,
                        help="passes over each rollout (default: fewer as minibatches grow, "
                             "see below: "
                             + preset_defaults("update_epochs").removeprefix("default: ")
                             + " at the preset's num_envs and num_steps)")
    parser.add_argument("--lr", "--learning-rate", dest="learning_rate", type=_positive_float,
                        help=f"Adam's step size ({preset_defaults('learning_rate')})")
    parser.add_argument("--gamma", type=_fraction,
                        help=f"discount ({preset_defaults('gamma')})")
    parser.add_argument("--gae-lambda", type=_fraction,
                        help=f"GAE's lambda ({preset_defaults('gae_lambda')})")
    parser.add_argument("--ent-coef", type=_non_negative_float,
                        help=f"entropy bonus ({preset_defaults('ent_coef')})")
    parser.add_argument("--clip-coef", type=_positive_float,
                        help=f"policy ratio clip ({preset_defaults('clip_coef')})")
    parser.add_argument("--total-steps", type=_positive_int,
                        help=f"env steps budget ({preset_defaults('total_steps')})")
    parser.add_argument("--seed", type=_seed, default=1, help="seed (default: %(default)s)")
    parser.add_argument("--target-return", type=float,
                        help="stop once a greedy evaluation reaches this mean return ("
                             + ", ".join(f"{name} {_show(values.get('target_return'))}"
                                         for name, values in PRESETS.items())
                             + ", other ids Gymnasium's reward_threshold)")
    parser.add_argument("--keep-going", action="store_true",
                        help="keep training after the target is reached")
    parser.add_argument("--time-limit", type=_positive_float, metavar="SEC",
                        help="stop after SEC seconds of training, evaluations included "
                             f"({preset_defaults('time_limit')})")
    parser.add_argument("--eval-every", type=int, metavar="STEPS",
                        help="env steps between greedy evaluations, 0: only at the end "
                             f"({preset_defaults('eval_every')})")
    parser.add_argument("--eval-episodes", type=_positive_int,
                        help="episodes per evaluation, played at once "
                             f"({preset_defaults('eval_episodes')})")
    parser.add_argument("--torch-threads", type=_positive_int,
                        help="torch intra-op threads, at most the usable cores "
                             f"({preset_defaults('torch_threads')})")
    parser.add_argument("--device", help="torch device of the agent (default: cpu)")
    parser.add_argument("--opponent", help="Chess-v0's opponent (default: random)")
    parser.add_argument("--agent-color", choices=("white", "black", "alternate"),
                        help="Chess-v0: the colour the agent plays (default: white)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the run's summary here")
    parser.add_argument("--plot", type=Path, metavar="PATH",
                        help="learning-curve PNG (default: next to --json, if given)")
    parser.add_argument("--save", type=Path, metavar="PATH", help="save the trained policy here")
    parser.add_argument("--no-ideal", action="store_true",
                        help="skip the ideal loop (the same work with an env that costs "
                             "nothing, timed beside the real iterations; a short run tops it "
                             "up after training for at most "
                             f"{args_defaults()['ideal_top_up_s']:g} s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    parser.set_defaults(func=run_train)


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``eval`` subcommand's options."""
    parser.add_argument("env", metavar="ENV", help="env id the policy was trained on")
    parser.add_argument("--load", type=Path, required=True, metavar="PATH",
                        help="a policy saved by envfleet train --save")
    parser.add_argument("--backend", default="auto", help="envfleet backend (default: auto)")
    parser.add_argument("--episodes", type=_positive_int, default=None,
                        help="episodes, played at once (default: 100; Chess-v0: 1000)")
    parser.add_argument("--seed", type=_seed, default=0, help="seed (default: %(default)s)")
    parser.add_argument("--sample", action="store_true",
                        help="sample actions from the policy instead of playing greedily")
    parser.add_argument("--opponent", help="Chess-v0's opponent (default: random)")
    parser.add_argument("--agent-color", choices=("white", "black", "alternate"),
                        help="Chess-v0: the colour the agent plays (default: white)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the result here")
    parser.add_argument("--video", type=Path, metavar="PATH",
                        help="also record one episode (env 0, seeded --seed) to PATH: .mp4 "
                             "(or any format ffmpeg writes) or .gif; needs envfleet[video]")
    parser.set_defaults(func=run_eval)


def build_args(options: argparse.Namespace) -> Any:
    """``ppo.Args`` from the preset of ``options.env`` and the flags given."""
    return args_from(build_settings(options))


def args_from(settings: dict[str, Any]) -> Any:
    """``ppo.Args`` of ``build_settings``' settings (the ones it has a field for)."""
    from envfleet.train.ppo import Args

    known = {f.name for f in fields(Args)}
    return Args(**{k: v for k, v in settings.items() if k in known})


def build_settings(options: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the preset of ``options.env``, then the flags given (without
    importing torch: ``run_train`` sets OpenMP's wait policy from them first)."""
    settings = {**args_defaults(), **preset(options.env)}
    minibatch_size = _minibatch_size(settings)
    epochs, gradient_steps = (settings["update_epochs"],
                              settings["update_epochs"] * settings["num_minibatches"])
    settings.update(env_id=options.env, backend=resolve_backend(options.env, options.backend),
                    seed=options.seed)
    flags = {key: getattr(options, key, None) for key in (
        "num_envs", "num_steps", "num_minibatches", "update_epochs", "learning_rate", "gamma",
        "gae_lambda", "ent_coef", "clip_coef", "total_steps", "target_return", "time_limit",
        "eval_every", "eval_episodes", "torch_threads", "device", "num_workers",
        "cpus_per_worker")}
    settings.update({k: v for k, v in flags.items() if v is not None})
    note = fit_budget(settings, flags["num_envs"] is not None)
    if note is not None:
        settings["notes"] = [note]
    # more envs: more minibatches of the preset's size, and fewer epochs (2 at least) to keep
    # about the preset's gradient steps per rollout (CartPole at 256 envs: 20 epochs over 32
    # minibatches did not solve in 200k steps, 2 epochs solved in 115-197k; seeds 1-3)
    if flags["num_minibatches"] is None:
        batch = settings["num_envs"] * settings["num_steps"]
        settings["num_minibatches"] = max(1, round(batch / minibatch_size))
    if flags["update_epochs"] is None:
        settings["update_epochs"] = min(epochs, max(2, round(gradient_steps
                                                             / settings["num_minibatches"])))
    if options.keep_going:
        settings["stop_at_target"] = False
    if getattr(options, "no_ideal", False):
        settings["ideal_every"] = 0
    for key in ("opponent", "agent_color"):
        if getattr(options, key, None) is not None:
            settings.setdefault("env_kwargs", {})[key] = getattr(options, key)
    return settings


def fit_budget(settings: dict[str, Any], num_envs_given: bool) -> str | None:
    """Shrink the rollout of ``settings`` to a ``total_steps`` budget below one rollout (fewer
    steps per env; fewer envs too where the preset chose them, else refused): the note that
    says so, or None when a rollout fits (training runs whole rollouts, never past the budget)."""
    budget, envs, steps = settings["total_steps"], settings["num_envs"], settings["num_steps"]
    if envs * steps <= budget:
        return None
    if envs > budget:
        if num_envs_given:
            raise CommandError(f"--total-steps {budget:,} is less than one step of each of the "
                               f"{envs:,} envs (--num-envs {envs:,}): give a budget of at "
                               f"least {envs:,} steps, or fewer envs")
        settings["num_envs"] = budget
    settings["num_steps"] = budget // settings["num_envs"]
    return (f"the {budget:,}-step budget is less than one rollout ({steps:,} steps x {envs:,} "
            f"envs = {steps * envs:,}): rollouts shrunk to {settings['num_steps']:,} steps x "
            f"{settings['num_envs']:,} envs")


def resolve_backend(env_id: str, backend: str) -> str:
    """The backend ``make`` runs for ``backend`` ("auto": numba for native ids, the Atari
    engine for ``ALE/<Game>-v5`` and the MuJoCo engine for Gymnasium's MuJoCo v5 ids, which
    stay "auto" as ``make`` picks them, else pool)."""
    from envfleet.atari import is_atari_id
    from envfleet.mujoco import is_mujoco_id
    from envfleet.registry import _native_name  # make()'s own lookup

    if backend != "auto":
        return backend
    if _native_name(env_id) is not None:
        return "numba"
    return "auto" if is_atari_id(env_id) or is_mujoco_id(env_id) else "pool"


def _check_env(env_id: str, backend: str) -> None:
    """Refuse an env this branch cannot build, before anything is printed and before torch and
    the envs start: an id neither envfleet nor Gymnasium knows (naming the closest ones), an
    unknown backend, a Gymnasium env whose package is missing."""
    import envfleet
    from envfleet.native.build import missing_backend
    from envfleet.registry import NATIVE_ENVS, _gym_spec, _native_name

    try:
        name = _native_name(env_id)  # "module:Id" imports the module first
        native = name is not None
        if not native:
            _gym_spec(env_id)
    except envfleet.UnknownEnvError as error:
        if env_id.rpartition(":")[2].removeprefix("envfleet/") == "Chess-v0" \
                and "Chess-v0" not in NATIVE_ENVS:
            raise CommandError("Chess-v0 is not available in this build of envfleet yet (it "
                               "lands with the Chess-v0 issue); train CartPole-v1 or a "
                               "Gymnasium id meanwhile") from None
        raise CommandError(str(error)) from None
    if backend != "auto" and backend not in envfleet.registry.ALL_BACKENDS:
        raise CommandError(f"unknown backend {backend!r}; valid backends: "
                           f"{', '.join(envfleet.registry.ALL_BACKENDS)}")
    if not native and backend in envfleet.registry.NATIVE_BACKENDS:
        raise CommandError(f"backend {backend!r} runs envfleet's native envs ("
                           f"{', '.join(NATIVE_ENVS)}); run {env_id} with backend 'serial', "
                           f"'subprocess' or 'pool'")
    if native and backend in envfleet.registry.NATIVE_BACKENDS:  # make()'s own refusals
        why = missing_backend(NATIVE_ENVS[name], backend)
        reason = envfleet.registry.backend_status(backend)
        if why is not None or reason is not None:
            raise CommandError(why or f"backend {backend!r} cannot run here: {reason}")
    if resolve_backend(env_id, backend) in envfleet.registry.EXECUTOR_BACKENDS:
        missing = missing_dependency(env_id)
        if missing is not None:
            raise CommandError(missing)


#: the backends each executor option of ``train`` applies to
WORKER_OPTIONS = {"--num-workers": ("num_workers", ("pool", "ray")),
                  "--cpus-per-worker": ("cpus_per_worker", ("ray",))}


def _check_workers(options: argparse.Namespace) -> None:
    """Refuse ``--num-workers`` / ``--cpus-per-worker`` on a backend without such workers."""
    backend = resolve_backend(options.env, options.backend)
    for option, (key, backends) in WORKER_OPTIONS.items():
        if getattr(options, key, None) is not None and backend not in backends:
            raise CommandError(f"{option} applies to backend {' or '.join(backends)}, not "
                               f"{backend}")


def missing_dependency(env_id: str) -> str | None:
    """Why Gymnasium's ``env_id`` cannot be built here (its entry point imports a package that
    is not installed), found in this process before any worker starts; None when it imports
    (an unknown id is left to ``make``, which names the closest ones)."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    from envfleet.registry import _gym_spec  # make()'s own lookup

    try:
        spec = _gym_spec(env_id)
    except Exception:
        return None
    if not isinstance(spec.entry_point, str):
        return None
    try:
        load_env_creator(spec.entry_point)
    except gymnasium.error.DependencyNotInstalled as error:  # Gymnasium's names the extra
        return f"{env_id} needs a package that is not installed: {error}"
    except ModuleNotFoundError as error:
        return (f"{env_id} needs the module {error.name!r}, which is not installed (its entry "
                f"point {spec.entry_point} imports it): install the package that provides it")
    return None


def _check_device(device: str | None) -> None:
    """Refuse a torch device this machine does not have, naming the ones it has."""
    if device is None:
        return
    import torch

    available = ["cpu"]
    if torch.cuda.is_available():
        available += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        available.append("mps")
    try:
        wanted = torch.device(device)
    except (RuntimeError, ValueError) as error:
        first = next(iter(str(error).splitlines()), "")
        raise CommandError(f"--device {device!r} is not a torch device ({first}); available "
                           f"here: {', '.join(available)}") from None
    if wanted.type == "cpu":
        return
    if wanted.type == "mps":
        present = torch.backends.mps.is_available()
    else:  # torch.cuda, torch.xpu, ...: is_available() and device_count()
        module = getattr(torch, wanted.type, None)
        present = (hasattr(module, "is_available") and module.is_available()
                   and (wanted.index is None or wanted.index < module.device_count()))
    if not present:
        raise CommandError(f"--device {device} is not available here; available: "
                           f"{', '.join(available)}")


# --- train --------------------------------------------------------------------------------


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _rate(x: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _breakdown(times: dict[str, float]) -> str:
    total = sum(times.values()) or 1.0
    short = {"inference": "infer", "learning": "learn", "evaluation": "eval"}
    return " ".join(f"{short.get(k, k)} {100 * v / total:.0f}%" for k, v in times.items())


def run_train(options: argparse.Namespace) -> int:
    """Train, print progress and the summary; write JSON, plot and policy when asked.

    Every output path is checked before training starts. Where one fails at the end anyway, the
    output goes to a new file next to it (else in the current or the temp directory), said on
    stderr, and the exit status is 1. Ctrl-C stops training at once: the policy and the summary
    so far are written (to the asked paths, else new files in the current directory), said on
    stderr, and the exit status is 130.
    """
    _check_env(options.env, options.backend)
    _check_workers(options)
    plot_path = options.plot or (options.json.with_suffix(".png") if options.json else None)
    for option, path in (("--save", options.save), ("--json", options.json),
                         ("--plot" if options.plot else "--plot (next to --json)", plot_path)):
        if path is not None:
            check_output(path, option)
    if options.plot is not None:
        _check_plot_format(options.plot)
    # numba's OpenMP threads (an env with num_threads > 1) spin after each parallel step and
    # starve torch on a small machine; passive waiting costs a one-thread torch nothing (set
    # before torch loads). Torch's own threads must spin: woken per op, 2 of them made MinAtar's
    # learner 1.3x slower than 1 thread instead of 1.6x faster
    from envfleet.machine import background_load, capped_threads, cpu_seconds

    settings = build_settings(options)
    if capped_threads(settings["torch_threads"]) == 1:  # what ppo.train sets
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import envfleet
    from envfleet.train import ppo
    from envfleet.train.envs import EnvBuildError, UnsupportedSpaceError

    _check_device(options.device)
    args = args_from(settings)
    highest = max(args.num_envs, ppo.EVAL_SEED_OFFSET + args.eval_episodes)  # seeds: seed + i
    if args.seed + highest > 2**64:
        raise CommandError(f"--seed {args.seed} is too large: the training envs are seeded seed + "
                           f"i and the evaluation envs seed + {ppo.EVAL_SEED_OFFSET} + i, which "
                           f"must stay below 2**64 (seeds are uint64); use at most "
                           f"{2**64 - highest}")
    console = Console(quiet=options.quiet, highlight=False)
    for line in [*header(args), *(f"note: {note}" for note in settings.get("notes", ()))]:
        console.print(line, soft_wrap=True)
    bar = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                   console=console, auto_refresh=False, disable=options.quiet, transient=True)
    batch = args.num_envs * args.num_steps  # whole rollouts: the steps the budget runs
    task = bar.add_task("training", total=max(1, args.total_steps // batch) * batch, info="")
    state = {"last_log": -math.inf, "last_refresh": -math.inf, "eval": "-"}

    def on_progress(p: ppo.Progress) -> None:
        if p.eval_return is not None:  # "<target": stopped once the target was out of reach
            state["eval"] = (_fmt(p.eval_return) if p.eval_complete
                             else f"<{args.target_return:g}")
        info = f"return {_fmt(p.episodic_return)} eval {state['eval']}"
        bar.update(task, completed=p.steps, info=info)
        if p.seconds - state["last_refresh"] >= 0.25 or p.done:
            state["last_refresh"] = p.seconds
            bar.refresh()
        if p.seconds - state["last_log"] >= LOG_EVERY_S or p.done:
            state["last_log"] = p.seconds
            bar.console.print(
                f"steps {p.steps:>9,} | {p.seconds:6.1f} s | return {_fmt(p.episodic_return):>6}"
                f" | eval {state['eval']:>6} | steps/s env {_rate(p.sps_env):>6} "
                f"end-to-end {_rate(p.sps_end_to_end):>6} | {_breakdown(p.times)}",
                soft_wrap=True)

    def on_top_up(done: int, wanted: int) -> None:  # the ideal loop after a short run
        if "ideal" not in state:
            bar.update(task, visible=False)
            state["ideal"] = bar.add_task("ideal loop", total=wanted, info=(
                f"at most {args.ideal_top_up_s:g} s (--no-ideal skips it)"))
        bar.update(state["ideal"], completed=done)
        bar.refresh()

    cpu_before = cpu_seconds()
    t0 = time.perf_counter()
    try:
        with bar:
            agent, summary = ppo.train(args, on_progress, on_top_up=on_top_up)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError,
            UnsupportedSpaceError, EnvBuildError) as error:
        raise CommandError(str(error)) from None
    except (ValueError, TypeError) as error:
        if "make" in str(error) or "backend" in str(error) or "option" in str(error):
            raise CommandError(str(error)) from None
        raise
    except KeyboardInterrupt:  # ppo.train keeps what it trained; before that, nothing to keep
        print("envfleet train: interrupted before training started: nothing to save",
              file=sys.stderr)
        return 130
    with _no_interrupt():  # a second Ctrl-C must not lose what the first one kept
        return _report_and_write(options, args, agent, summary, console, plot_path,
                                 background_load(cpu_before, cpu_seconds(),
                                                 time.perf_counter() - t0))


def _report_and_write(options: argparse.Namespace, args: Any, agent: Any, summary: Any,
                      console: Any, plot_path: Path | None, load: float) -> int:
    """The run's last lines, then its outputs (policy first: the costliest to lose); the exit
    status: 130 when interrupted, 1 when an asked path failed (the output is elsewhere)."""
    from rich.console import Console

    from envfleet.train.checkpoint import save

    interrupted = summary.stop_reason == "interrupted"
    console.print(ending(args, summary), soft_wrap=True)
    low, high = summary.sps_ideal_iqr
    if summary.ideal_iterations:
        ideal = (f"ideal {_rate(summary.sps_ideal)} (IQR {_rate(low)}-{_rate(high)}, "
                 f"{summary.ideal_iterations} iterations), end-to-end "
                 f"{_rate(summary.sps_end_to_end)} (efficiency {summary.efficiency:.2f})")
    else:
        ideal = (f"ideal not measured ({'--no-ideal' if args.ideal_every == 0 else 'stopped first'}"
                 f"), end-to-end {_rate(summary.sps_end_to_end)}")
    console.print(f"steps/s: env-only {_rate(summary.sps_env)}, {ideal}; time: "
                  f"{_breakdown(summary.times)}; other processes' load {_fmt(load, 2)} cores",
                  soft_wrap=True)
    if summary.above_ideal:  # on stderr, --quiet or not
        warn = Console(stderr=True, highlight=False)
        warn.print(f"[yellow]warning: end-to-end {_rate(summary.sps_end_to_end)} steps/s is "
                   f"above the ideal loop's IQR ({_rate(high)}): the ideal does the same work "
                   f"with an env that costs nothing, so the machine's load changed during the "
                   f"run (real iterations timed alike: median {_rate(summary.sps_iteration)}), "
                   f"or this is a bug[/yellow]", soft_wrap=True)
    result = finite({"env": args.env_id, "backend": args.backend, "num_envs": args.num_envs,
                     "seed": args.seed, **asdict(summary), "background_load": load})
    if _env_name(args.env_id) == "Chess-v0" and summary.final_eval is not None:
        result["final_outcomes"] = outcomes(summary.final_eval["returns"])
        o = result["final_outcomes"]
        console.print(f"final evaluation over {summary.final_eval['episodes']} games: win "
                      f"{o['win_rate']:.3f} draw {o['draw_rate']:.3f} loss {o['loss_rate']:.3f} "
                      f"(win - loss {o['win_rate'] - o['loss_rate']:+.3f})", soft_wrap=True)

    no_plot: list[str] = []  # why plot_curve drew nothing (matplotlib missing)

    def write_plot(path: Path) -> None:
        why = plot_curve([result], path, args.target_return)
        if why:
            no_plot.append(why)

    # (label, option, the asked path, writer); interrupted: policy and summary even unasked
    outputs: list[tuple[str, str, Path | None, Callable[[Path], None]]] = [
        ("policy", "--save", options.save, lambda path: save(agent, args, str(path))),
        ("summary", "--json", options.json,
         lambda path: path.write_text(json.dumps(result, indent=1) + "\n")),
        ("learning curve", "--plot", plot_path, write_plot)]
    stamp = time.strftime("%Y%m%d-%H%M%S")  # one per run: its fallback files pair up
    stem = "envfleet-train-" + re.sub(r"[^\w.-]", "_", _env_name(args.env_id))
    status = 0
    if interrupted:
        print(f"envfleet train: interrupted (Ctrl-C) at {summary.total_steps:,} steps, "
              f"{summary.wall_s:.1f} s into training", file=sys.stderr)
    for label, option, asked, write in outputs:
        if asked is None and not (interrupted and label != "learning curve"):
            continue
        fallback = (f"{asked.stem}-{stamp}{asked.suffix}" if asked is not None else
                    f"{stem}-{stamp}{'.pt' if label == 'policy' else '.json'}")
        try:
            where, why = write_somewhere(asked, write, fallback)
        except OSError as error:
            print(f"envfleet train: error: the {label} could not be written anywhere: {error}",
                  file=sys.stderr)
            status = 1
            continue
        if no_plot and label == "learning curve":
            console.print(no_plot[0])
        elif why is not None:
            print(f"envfleet train: error: could not write {option} {asked} ({why}): the "
                  f"{label} is at {where}", file=sys.stderr)
            status = 1
        elif interrupted and label != "learning curve":
            print(f"{label} so far: {where}", file=sys.stderr)
        else:
            console.print(f"{label}: {where}")
    return 130 if interrupted else status


def finite(x: Any) -> Any:
    """``x`` with NaN and infinities as None (JSON's null: ``--no-ideal``'s ideal steps/s):
    the summary stays strict JSON."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _check_plot_format(path: Path) -> None:
    """Refuse ``--plot`` in a format matplotlib cannot write (without matplotlib: no plot, as
    the end of the run says)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().removeprefix(".")
    if suffix and suffix not in formats:
        raise CommandError(f"--plot {path}: matplotlib cannot write .{suffix} files (it "
                           f"writes {', '.join(sorted(formats))})")


def write_somewhere(path: Path | None, write: Callable[[Path], None], fallback: str
                    ) -> tuple[Path, str | None]:
    """Write an output with ``write`` at ``path`` (its folders made); where that fails, or
    with no path, at a new file named ``fallback`` (``-1``, ``-2``... added if taken) next to
    it, else in the current directory, else in the temp directory. Returns where it went and
    why ``path`` failed (None: it did not); an OSError when no place takes it."""
    why = None
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            return path, None
        except (OSError, RuntimeError) as error:  # torch.save: RuntimeError for an open()
            why = getattr(error, "strerror", None) or next(iter(str(error).splitlines()), "")
    folders = ([path.parent] if path is not None else []) + [Path("."),
                                                             Path(tempfile.gettempdir())]
    for folder in dict.fromkeys(folders):
        target = _new_file(folder, Path(fallback))
        if target is None:
            continue
        try:
            write(target)
        except (OSError, RuntimeError):
            target.unlink(missing_ok=True)
            continue
        return Path(os.path.abspath(target)), why
    raise OSError(f"no place took it ({', '.join(map(str, dict.fromkeys(folders)))})")


def _new_file(folder: Path, name: Path) -> Path | None:
    """A new empty file ``name`` in ``folder`` (``-1``, ``-2``... added while taken: nothing
    of anyone's is overwritten), or None where the folder takes no file."""
    for n in range(100):
        target = folder / (name.name if n == 0 else f"{name.stem}-{n}{name.suffix}")
        try:
            open(target, "xb").close()
            return target
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Ctrl-C ignored inside (only the main thread can set signal handlers; elsewhere, as is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def header(args: Any) -> list[str]:
    """The run's first lines: env, the backend actually used, budget, target, PPO's knobs."""
    budget = f"{args.total_steps:,} steps"
    if args.time_limit is not None:
        budget += f" or {args.time_limit:,g} s (time limit), whichever comes first"
    minibatch = math.ceil(args.num_envs * args.num_steps / args.num_minibatches)
    from envfleet.train.envs import eval_backend

    backend = args.backend + "".join(
        f" {key}={getattr(args, key):g}" for key in ("num_workers", "cpus_per_worker")
        if getattr(args, key) is not None)
    if eval_backend(args.env_id, args.backend) != args.backend:
        backend += f" (evaluation: {eval_backend(args.env_id, args.backend)}, in this process)"
    return [f"[bold]envfleet train[/bold] {args.env_id} backend={backend} "
            f"num_envs={args.num_envs} seed={args.seed}; budget {budget}; target "
            + ("none" if args.target_return is None else f"{args.target_return:g} (greedy "
               f"{args.eval_episodes}-episode mean, evaluated "
               + (f"every {args.eval_every:,} steps)" if args.eval_every > 0 else "at the end)")),
            f"ppo: {args.num_steps} steps x {args.num_envs} envs per rollout, "
            f"{args.num_minibatches} minibatch{'es' if args.num_minibatches > 1 else ''} of "
            f"{minibatch} x {args.update_epochs} epochs, lr {args.learning_rate:g}"
            f"{' (annealed)' if args.anneal_lr else ''}, gamma {args.gamma:g}, gae_lambda "
            f"{args.gae_lambda:g}, ent_coef {args.ent_coef:g}, clip_coef {args.clip_coef:g}"]


def ending(args: Any, summary: Any) -> str:
    """Why training stopped, when it reached the target (if it has one), the final eval."""
    if summary.stop_reason == "target":
        stopped = "at the target"
    elif summary.stop_reason == "time limit":
        stopped = f"at the time limit ({args.time_limit:,g} s)"
    elif summary.stop_reason == "interrupted":
        stopped = f"when interrupted (Ctrl-C) at {summary.total_steps:,} steps"
    else:
        stopped = f"after the {args.total_steps:,}-step budget"
        if summary.total_steps != args.total_steps:  # whole rollouts, never past it
            stopped += (f" ({summary.total_steps:,} steps, in whole rollouts of "
                        f"{args.num_envs * args.num_steps:,})")
    text = f"[bold]stopped[/bold] {stopped} in {summary.wall_s:.2f} s"
    if args.target_return is not None:
        solved = ("never (within the budget)" if summary.solved_at_s is None else
                  f"{summary.solved_at_s:.2f} s ({summary.solved_at_steps:,} steps)")
        text += f"; [bold]solved at[/bold] {solved}"
    text += f"; compile {summary.compile_s:.2f} s (apart); "
    if summary.final_eval is None:
        return text + "no final evaluation"
    return (text + f"final greedy eval {_fmt(summary.final_eval_return)} over "
            f"{summary.final_eval['episodes']} episodes")


def plot_curve(runs: list[dict[str, Any]], path: Path, target: float | None,
               title: str | None = None) -> str | None:
    """Return vs wall-clock seconds and vs steps for one or more runs; why not, if it can't."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install 'envfleet[bench]'): no plot"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained", sharey=True)
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        label = run.get("label") or f"seed {run['seed']}"
        train_pts = [c for c in run["curve"] if c["episodic_return"] is not None]
        evals = run["evaluations"]
        for ax, key in zip(axes, ("seconds", "steps"), strict=True):
            ax.plot([c[key] for c in train_pts], [c["episodic_return"] for c in train_pts],
                    color=color, alpha=0.45, linewidth=1)
            ax.plot([e[key] for e in evals if e["complete"]],
                    [e["mean_return"] for e in evals if e["complete"]], color=color, marker="o",
                    markersize=4, linestyle="none", label=label if key == "seconds" else None)
            # evaluations stopped once the target was out of reach: their partial mean
            ax.plot([e[key] for e in evals if not e["complete"]],
                    [e["mean_return"] for e in evals if not e["complete"]], color=color,
                    marker="o", markersize=3, markerfacecolor="none", linestyle="none")
            if run.get("solved_at_s") is not None:
                x = run["solved_at_s"] if key == "seconds" else run["solved_at_steps"]
                ax.axvline(x, color=color, linestyle=":", linewidth=1)
    for ax, label in zip(axes, ("wall-clock seconds of training (evaluations included)",
                                "env steps"), strict=True):
        if target is not None:
            ax.axhline(target, color="gray", linestyle="--", linewidth=1)
        ax.set_xlabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("return")
    episodes = runs[0].get("args", {}).get("eval_episodes", 100)
    axes[0].legend(fontsize=8, title="line: training episodes (last 100)\n"
                   f"dot: greedy eval ({episodes} episodes)\nopen: eval stopped below target",
                   title_fontsize=7)
    env = runs[0]["env"]
    fig.suptitle(title or f"envfleet train {env} ({runs[0]['backend']}, "
                 f"{runs[0]['num_envs']} envs)", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --- eval ---------------------------------------------------------------------------------


def run_eval(options: argparse.Namespace) -> int:
    """Play a saved policy greedily on a batched env; print the mean return."""
    _check_env(options.env, options.backend)
    if not options.load.exists():
        raise CommandError(f"no saved policy at {options.load}")
    for option, path in (("--json", options.json), ("--video", options.video)):
        if path is not None:  # before the episodes are played
            check_output(path, option)
    import numpy as np
    import torch

    import envfleet
    from envfleet.train.checkpoint import agent_from, read_checkpoint
    from envfleet.train.envs import box_bounds
    from envfleet.train.evaluation import evaluate

    name = _env_name(options.env)
    try:  # the checkpoint first: a policy of another env is refused before anything runs
        saved = read_checkpoint(str(options.load))
    except ValueError as error:
        raise CommandError(str(error)) from None
    if _env_name(saved["args"]["env_id"]) != name:
        raise CommandError(f"{options.load} was trained on {saved['args']['env_id']}, not "
                           f"{options.env}: evaluate it with envfleet eval "
                           f"{saved['args']['env_id']} --load {options.load}")
    if options.video:
        _check_video(options.env, options.video)
    episodes = options.episodes or (1000 if name == "Chess-v0" else 100)
    kwargs = dict(preset(options.env).get("env_kwargs", {}))
    for key in ("opponent", "agent_color"):
        if getattr(options, key) is not None:
            kwargs[key] = getattr(options, key)
    torch.set_num_threads(1)
    try:
        env = envfleet.make(options.env, episodes, backend=options.backend, seed=options.seed,
                            copy=False, **kwargs)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError, ValueError) as error:
        raise CommandError(str(error)) from None
    try:
        agent = agent_from(saved, env)
    except ValueError as error:
        env.close()
        raise CommandError(f"{options.load}: {error}") from None
    obs, _ = env.reset(seed=options.seed)
    result = evaluate(env, agent, options.seed, torch.device("cpu"),
                          isinstance(obs, torch.Tensor),
                          box_bounds(env.single_action_space, torch.device("cpu")),
                          greedy=not options.sample)
    env.close()
    returns = np.asarray(result.returns)
    out = {"env": options.env, "policy": "sampled" if options.sample else "greedy",
           "episodes": len(returns), "mean_return": float(returns.mean()),
           "std_return": float(returns.std()), "min_return": float(returns.min()),
           "max_return": float(returns.max()), "eval_s": result.seconds}
    line = (f"{options.env} ({out['policy']}): mean return {out['mean_return']:.2f} ± "
            f"{out['std_return']:.2f} over {out['episodes']} episodes (min "
            f"{out['min_return']:g}, max {out['max_return']:g})")
    if name == "Chess-v0":
        out.update(outcomes(returns))
        line += (f"; win {out['win_rate']:.3f} draw {out['draw_rate']:.3f} "
                 f"loss {out['loss_rate']:.3f}")
    print(line)
    if options.video:
        steps, total = record_episode(options, agent, kwargs)
        out["video"] = {"path": str(options.video), "steps": steps, "return": total}
        print(f"video: {options.video} ({steps} steps, return {total:g})")
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


VIDEO_EXTRA = "pip install 'envfleet[video]'"


def _check_video(env_id: str, path: Path) -> None:
    """Refuse ``--video`` up front when the env cannot render or the writer is missing."""
    from envfleet.registry import NATIVE_ENVS, _native_name

    native = _native_name(env_id)
    if native is not None and NATIVE_ENVS[native].renderer is None:
        raise CommandError(f"{native} has no renderer yet: --video is not available for it")
    try:
        import imageio  # noqa: F401
        if path.suffix.lower() != ".gif":
            import imageio_ffmpeg  # noqa: F401
    except ImportError as error:
        raise CommandError(f"--video needs {error.name} ({VIDEO_EXTRA})") from None


def record_episode(options: argparse.Namespace, agent: Any, env_kwargs: dict[str, Any]
                   ) -> tuple[int, float]:
    """Play one episode on env 0 (greedy unless ``--sample``), writing each frame to
    ``options.video`` as it is drawn; (steps, return)."""
    import imageio.v2 as imageio
    import torch

    import envfleet
    from envfleet.train.envs import action_mask, as_tensor, box_bounds, env_actions

    backend = resolve_backend(options.env, options.backend)
    kwargs = dict(env_kwargs)
    if backend in envfleet.registry.EXECUTOR_BACKENDS:
        backend = "serial"  # one env: no worker process needed
        kwargs["render_mode"] = "rgb_array"  # Gymnasium's envs draw only when asked to
    device = torch.device("cpu")
    env = envfleet.make(options.env, 1, backend=backend, seed=options.seed, **kwargs)
    fps = env.metadata.get("render_fps") or 30
    options.video.parent.mkdir(parents=True, exist_ok=True)
    if options.video.suffix.lower() == ".gif":
        writer = imageio.get_writer(options.video, mode="I", duration=1000 / fps, loop=0)
    else:  # even frame sizes for H.264's 4:2:0 (imageio resizes odd ones)
        writer = imageio.get_writer(options.video, fps=fps, macro_block_size=2)
    bounds = box_bounds(env.single_action_space, device)
    steps, total = 0, 0.0
    try:
        obs, info = env.reset(seed=options.seed)
        torch_actions = isinstance(obs, torch.Tensor)
        writer.append_data(video_frame(env.render()[0]))
        with torch.inference_mode():
            while True:
                x = agent.features(as_tensor(obs, device))
                mask = action_mask(info, device)
                action = agent.sample(x, mask) if options.sample else agent.greedy(x, mask)
                obs, reward, terminated, truncated, info = env.step(
                    env_actions(action, bounds, torch_actions))
                steps += 1
                total += float(reward[0])
                writer.append_data(video_frame(env.render()[0]))  # NEXT_STEP: the final state
                if bool(terminated[0]) or bool(truncated[0]):
                    break
    finally:
        writer.close()
        env.close()
    return steps, total


#: a video frame's shortest side at least (smaller frames are scaled up, whole cells)
MIN_VIDEO_SIDE = 160


def video_frame(frame: Any) -> Any:
    """An ``rgb_array`` frame as a video takes it: uint8 (floats in [0, 1], as MinAtar's
    reference colours are, times 255), and a small one (MinAtar's 10 x 10 grid) scaled up by a
    whole factor, each cell a block of pixels, to ``MIN_VIDEO_SIDE`` or more."""
    import numpy as np

    frame = np.asarray(frame)
    if np.issubdtype(frame.dtype, np.floating):
        frame = np.rint(np.clip(frame, 0.0, 1.0) * 255)
    frame = frame.astype(np.uint8, copy=False)
    scale = -(-MIN_VIDEO_SIDE // min(frame.shape[:2]))  # ceil
    if scale > 1:
        frame = frame.repeat(scale, axis=0).repeat(scale, axis=1)
    return frame


def outcomes(returns: Any) -> dict[str, float]:
    """Win / draw / loss rates of games scored +1 / 0 / -1."""
    import numpy as np

    r = np.asarray(returns)
    return {"win_rate": float((r > 0).mean()), "draw_rate": float((r == 0).mean()),
            "loss_rate": float((r < 0).mean())}
