"""The settings of a run: per-env presets (``PRESETS``: tuned settings per env id; adding one is
an entry there) over ``Args``'s defaults, then the flags given (``build_settings``), as
``Args`` (``args_from``); and each preset's values for ``--help``. Torch-free: ``envfleet
train --help`` reads it.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from envfleet.command import CommandError
from envfleet.train.args import Args, args_defaults

#: tuned settings per env id (anything not given: ``Args``'s defaults)
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
    # seeds 1-3, disjoint envs, loaded 2-vCPU EPYC
    # (benchmarks/scripts/chess_learning_presets.py). One epoch per rollout (1 or 4
    # minibatches) was cheaper still but stalled under 0.2 in 1.6M steps on some seeds
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


def env_name(env_id: str) -> str:
    """The env ``env_id`` names, one name per env: a native id in envfleet's form
    (``envfleet/MinAtar-Breakout-v1``, ``mygrid:MyGrid-v0``: ``MinAtar/Breakout-v1``,
    ``MyGrid-v0``), else the Gymnasium id without its ``module:``."""
    from envfleet.registry import _native_name  # make()'s own lookup

    return _native_name(env_id) or env_id.rpartition(":")[2]


def preset(env_id: str) -> dict[str, Any]:
    """The tuned settings for ``env_id``, else generic ones with Gymnasium's target."""
    from envfleet.registry import _native_name, gym_id  # make()'s own lookup

    native = _native_name(env_id)
    name = native or env_name(env_id)
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


def args_from(settings: dict[str, Any]) -> Args:
    """``Args`` of ``build_settings``' settings (the ones it has a field for)."""
    known = {f.name for f in fields(Args)}
    return Args(**{k: v for k, v in settings.items() if k in known})


def build_settings(options: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the preset of ``options.env``, then the flags given (without
    importing torch: ``run_train`` sets OpenMP's wait policy from them first)."""
    settings = {**args_defaults(), **preset(options.env)}
    preset_minibatch = minibatch_size(settings)
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
        settings["num_minibatches"] = max(1, round(batch / preset_minibatch))
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


def minibatch_size(settings: dict[str, Any]) -> int:
    """Samples per gradient step of ``settings``."""
    return settings["num_envs"] * settings["num_steps"] // settings["num_minibatches"]


# --- each preset's value of a setting, for ``--help`` -----------------------------------------


def show(value: Any) -> str:
    """A setting's value as ``--help`` shows it (``none``, ``1,024``, ``0.98``)."""
    if value is None:
        return "none"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{value:g}"


def preset_defaults(key: str) -> str:
    """``key``'s default in each preset and for other ids, for ``--help``."""
    generic = args_defaults()[key]
    shown = [f"{name} {show(values.get(key, generic))}" for name, values in PRESETS.items()]
    return "default: " + ", ".join([*shown, f"other ids {show(generic)}"])


def minibatch_sizes() -> str:
    """Each preset's minibatch size (samples per gradient step), for ``--help``."""
    sizes = [f"{name} {minibatch_size({**args_defaults(), **values})}"
             for name, values in PRESETS.items()]
    return ", ".join([*sizes, f"other ids {minibatch_size(args_defaults())}"])
