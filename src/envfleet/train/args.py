"""PPO's settings, torch-free: ``Args`` (what ``ppo.train`` takes; ``envfleet train`` fills it
from a preset and its flags, and ``--help`` shows its defaults without importing torch) and
``evaluation_args`` (the settings of a run's evaluation env)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Args:
    """PPO's settings (``envfleet train`` fills them from per-env presets and its flags)."""

    env_id: str = "CartPole-v1"
    """the env id (native id or any Gymnasium id)"""
    backend: str = "auto"
    """envfleet backend: numba, torch, cuda (native ids) or serial, subprocess, pool, ray (any
    id; the evaluation env of subprocess and ray runs in this process: ``evaluation_args``)"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra keyword arguments for envfleet.make (e.g. opponent for Chess-v0)"""
    num_envs: int = 8
    """parallel envs in the training batch"""
    num_steps: int = 128
    """steps per env per rollout (a rollout is num_envs * num_steps samples)"""
    total_steps: int = 500_000
    """env steps budget (training stops earlier at the target or the time limit)"""
    seed: int = 1
    """seed of the envs, torch and the evaluations"""
    learning_rate: float = 2.5e-4
    """Adam's step size"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over total_steps"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE's lambda"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """passes over each rollout"""
    clip_coef: float = 0.2
    """policy ratio clip"""
    clip_vloss: bool = False
    """clip the value loss as PPO's reference code does"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    ent_coef: float = 0.01
    """entropy bonus"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """gradient norm clip (0: off)"""
    target_kl: float | None = None
    """stop an update's epochs early when the approximate KL exceeds this"""
    norm_obs: bool = False
    """normalise observations with running mean/std (kept in the saved model)"""
    norm_reward: bool = False
    """scale rewards by the running std of the discounted return"""
    norm_each_step: bool = False
    """normalise step by step as CleanRL's Gymnasium wrappers do (``NormalizeObservation``,
    ``NormalizeReward``, then clipping to +-10): every step's observations update the
    statistics before the policy sees them, the rollout keeps them as the policy saw them, and
    each reward is scaled by its step's return std (off: statistics once per rollout, one scale
    for its rewards, unclipped)"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layers of the actor and of the critic"""
    legal_logits: bool = False
    """policy logits of the legal actions only (``info["action_mask"]``): the same policy, the
    softmax, sampling and entropy over ~30 entries instead of all (Chess-v0's 4672)"""
    cnn: bool = False
    """the Nature CNN (shared, frames / 255) before the actor and critic (image observations:
    CleanRL's ppo_atari; hidden_sizes () for its linear heads)"""
    activation: str = "tanh"
    """hidden activation: tanh or relu (relu: ~10x cheaper than torch's CPU tanh here)"""
    log_std_init: float = 0.0
    """initial log-std of the Gaussian policy (Box actions; 0: std 1, as CleanRL and SB3)"""
    torch_threads: int = 1
    """torch intra-op threads, at most the usable cores (small MLPs on CPU: 1 avoids thread
    hand-offs; more spinning threads than cores would starve the loop)"""
    num_workers: int | None = None
    """worker processes (pool) or Ray actors (ray) of the training env (None: the backend's
    default: pool one per usable core, ray one per CPU of the cluster over cpus_per_worker)"""
    cpus_per_worker: float | None = None
    """CPUs each Ray actor of the training env asks Ray for (None: ray's default, 1)"""
    env_threads: int | None = 1
    """numba threads of a numba env (None: numba's; more spin idle and starve torch's core)"""
    device: str = "cpu"
    """torch device of the agent"""
    target_return: float | None = None
    """stop when a greedy evaluation's mean return reaches this (None: never)"""
    eval_every: int = 10_000
    """env steps between greedy evaluations (0: only at the end)"""
    eval_episodes: int = 100
    """episodes per evaluation, played at once on a batched env"""
    max_episode_return: float | None = None
    """an episode's highest return: a failing evaluation stops once the target is out of reach"""
    max_step_reward: float | None = None
    """a step's highest reward; <= 0: an unfinished episode ends no higher than it is now"""
    stop_at_target: bool = True
    """stop once an evaluation reaches target_return (False: use the whole budget)"""
    time_limit: float | None = None
    """wall-clock seconds of training (evaluations included) before stopping"""
    ideal_every: int = 4
    """time an ideal iteration after every this many real ones (1: each, the e2e study; 0: off)"""
    ideal_top_up_s: float = 10.0
    """seconds at most spent after a short run timing more ideal iterations (for a median and
    IQR of ``ideal.IDEAL_MIN_ITERATIONS``); none starts that would end past them"""


def args_defaults() -> dict[str, Any]:
    """``Args``'s defaults (CleanRL's PPO: the settings of ids without a preset), but for the
    fields whose default is built per instance (``env_kwargs``)."""
    return {f.name: f.default for f in dataclasses.fields(Args)
            if f.default is not dataclasses.MISSING}


def is_native(env_id: Any) -> bool:
    """Whether ``env_id`` names one of envfleet's native envs (``make``'s own lookup)."""
    from envfleet.registry import _native_name

    return isinstance(env_id, str) and _native_name(env_id) is not None


def eval_backend(env_id: Any, backend: str) -> str:
    """The evaluation env's backend for a training env on ``backend``: the same, but for
    ``subprocess`` (no 100 processes for 100 episodes) and ``ray`` (the training env may hold
    every CPU of the cluster: Ray would refuse a second env), whose evaluation runs in this
    process: ``numba`` for native ids, else ``serial``."""
    if backend == "subprocess" or (backend == "ray" and not is_native(env_id)):
        return "serial"
    return "numba" if backend == "ray" else backend


#: env options that shape what the learner sees, not the game: evaluations play without them
#: (Atari's ``episodic_life``, ``reward_clip``: the score is the whole game's, unclipped)
TRAINING_ONLY_OPTIONS = ("episodic_life", "reward_clip")


def evaluation_args(args: Args) -> Args:
    """``args`` for the evaluation env: on ``eval_backend``, with the backend's own workers
    (``num_workers`` and ``cpus_per_worker`` are the training env's), without
    ``TRAINING_ONLY_OPTIONS``."""
    kwargs = {k: v for k, v in args.env_kwargs.items() if k not in TRAINING_ONLY_OPTIONS}
    return dataclasses.replace(args, backend=eval_backend(args.env_id, args.backend),
                               num_workers=None, cpus_per_worker=None, env_kwargs=kwargs)
