"""PPO in one file (CleanRL's shape, our own code): clipped objective, GAE, minibatch epochs.

Read it top to bottom: ``Args`` (every knob, one line each), ``Agent`` (an MLP actor-critic with
``get_value`` / ``get_action_and_value``), ``collect`` (one rollout), ``update`` (GAE + epochs),
``evaluate`` (a greedy batched evaluation) and ``train`` (the loop, its clocks and its log).

Autoreset is Gymnasium's NEXT_STEP (envfleet's default): the step after an episode ends only
resets that env (reward 0, its action ignored), so that step is not a transition: ``valid``
masks it out of GAE and out of the loss. On the step an episode ends the observation returned
is the final observation, so a truncated episode bootstraps from ``V(final obs)`` with no
``info["final_obs"]`` needed. Illegal actions (``info["action_mask"]`` False) get the lowest
logit: they are never sampled and carry no probability in the loss.

Timing: ``env`` is the time inside ``env.step``; ``inference`` the rest of a rollout (policy
forward, sampling, buffer writes; on a CUDA device waited for before each ``env.step``, so the
env's clock does not hold the policy's queued kernels); ``learning`` GAE and the gradient
epochs. Evaluations have
their own clock. End-to-end steps/s is over the loop's whole wall clock minus evaluations.
The ideal loop (``IdealLoop``) does the real loop's last iteration again against an env that
costs nothing (``ReplayEnv``: the real rollout's observations, rewards, episode ends and masks
read back, so the same transitions are kept and the same numbers go through the network),
from the real agent's parameters and optimizer state, with the same bookkeeping and the same
number of update epochs: what end-to-end training would reach if the env cost nothing, an
upper bound. One ideal iteration runs right after each real one (the same machine load, the
same cache state), both timed the same way (wall and thread CPU of rollout, bookkeeping and
update); the ideal's time is kept off the training clock and reported as the median iteration
with its interquartile range, next to the real iterations' (``Summary.sps_iteration``).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import reprlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from envfleet.executors.base import EnvWorkerError


@dataclass
class Args:
    """PPO's settings (``envfleet train`` fills them from per-env presets and its flags)."""

    env_id: str = "CartPole-v1"
    """the env id (native id or any Gymnasium id)"""
    backend: str = "auto"
    """envfleet backend: numba, torch, cuda (native ids) or serial, subprocess, pool"""
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
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layers of the actor and of the critic"""
    activation: str = "tanh"
    """hidden activation: tanh or relu (relu: ~10x cheaper than torch's CPU tanh here)"""
    log_std_init: float = 0.0
    """initial log-std of the Gaussian policy (Box actions; 0: std 1, as CleanRL and SB3)"""
    torch_threads: int = 1
    """torch intra-op threads (small MLPs on CPU: 1 avoids thread hand-offs)"""
    env_threads: int | None = 1
    """numba threads of a numba env (None: numba's default). 1: the env steps in microseconds,
    and numba's OpenMP threads spin after each parallel step, stealing the cores torch learns
    on (measured 20x slower learning at 512 envs on 2 cores)"""
    device: str = "cpu"
    """torch device of the agent"""
    target_return: float | None = None
    """stop when a greedy evaluation's mean return reaches this (None: never)"""
    eval_every: int = 10_000
    """env steps between greedy evaluations (0: only at the end)"""
    eval_episodes: int = 100
    """episodes per evaluation, played at once on a batched env"""
    max_episode_return: float | None = None
    """upper bound of one episode's return: lets an evaluation stop once the target is
    out of reach (None: play every episode out)"""
    max_step_reward: float | None = None
    """upper bound of one step's reward; <= 0 (Acrobot, Pendulum): an unfinished episode
    ends no higher than its return so far, so a failing evaluation stops within a few steps"""
    stop_at_target: bool = True
    """stop once an evaluation reaches target_return (False: use the whole budget)"""
    time_limit: float | None = None
    """wall-clock seconds of training (evaluations included) before stopping"""
    ideal_every: int = 4
    """after each of the first IDEAL_MIN_ITERATIONS real iterations, then after every this
    many, time one ideal iteration (the same work with an env that costs nothing; off the
    training clock, but it adds ~1/ideal_every to the wall time: the learner is most of an
    iteration). 1: every iteration (the e2e study); 0: no ideal loop"""


# --- the agent --------------------------------------------------------------------------------


class Tanh(nn.Module):
    """tanh(x) as 2 sigmoid(2x) - 1: the same function, ~3x faster forward than torch's CPU
    ``tanh`` on this project's machine (measured 14 vs 38 us for 256 x 64)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(2 * x) * 2 - 1


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU}


def mlp(sizes: list[int], out_std: float, activation: str = "tanh") -> nn.Sequential:
    """An MLP with orthogonal init (sqrt 2 gain hidden, ``out_std`` output)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        last = i == len(sizes) - 2
        layer = nn.Linear(a, b)
        nn.init.orthogonal_(layer.weight, out_std if last else math.sqrt(2))
        nn.init.zeros_(layer.bias)
        layers.append(layer)
        if not last:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class RunningMeanStd(nn.Module):
    """Running mean and variance of a stream of batches (buffers: saved with the model)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(1e-4))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        n = x.shape[0]
        if n == 0:
            return
        mean, var = x.mean(0), x.var(0, unbiased=False)
        delta, total = mean - self.mean, self.count + n
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + var * n + delta**2 * self.count * n / total)
                       / total)
        self.count.fill_(total)


class UnsupportedSpaceError(ValueError):
    """A space this trainer has no policy for (the message names it)."""


def check_spaces(obs_space: spaces.Space, action_space: spaces.Space) -> None:
    """Refuse spaces the agent cannot handle, naming them: observations must be a Box or
    MultiBinary (flattened) or Discrete (one-hot), actions Discrete (categorical policy) or a
    1-D float Box (Gaussian policy)."""
    if not isinstance(obs_space, spaces.Box | spaces.MultiBinary | spaces.Discrete):
        raise UnsupportedSpaceError(
            f"envfleet train takes Box, MultiBinary or Discrete observations, not {obs_space}")
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise UnsupportedSpaceError(
                f"envfleet train takes Discrete actions starting at 0, not {action_space}")
        return
    if isinstance(action_space, spaces.Box):
        if len(action_space.shape) != 1 or not np.issubdtype(action_space.dtype, np.floating):
            raise UnsupportedSpaceError(
                f"envfleet train's Gaussian policy takes a 1-D float Box of actions, not "
                f"{action_space}")
        return
    raise UnsupportedSpaceError(
        f"envfleet train takes Discrete actions (categorical policy) or a 1-D float Box "
        f"(Gaussian policy), not {action_space}")


class Agent(nn.Module):
    """Actor and critic MLPs; a categorical head (Discrete) or a Gaussian one (Box)."""

    def __init__(self, obs_space: spaces.Space, action_space: spaces.Space,
                 hidden_sizes: tuple[int, ...] = (64, 64), norm_obs: bool = False,
                 activation: str = "tanh", log_std_init: float = 0.0) -> None:
        super().__init__()
        check_spaces(obs_space, action_space)
        self.spaces = (obs_space, action_space)  # to build a twin (the ideal loop's agent)
        # a Discrete observation is one-hot encoded; a Box one flattened
        self.obs_onehot = (int(obs_space.start), int(obs_space.n)) if isinstance(
            obs_space, spaces.Discrete) else None
        obs_size = self.obs_onehot[1] if self.obs_onehot else int(np.prod(obs_space.shape))
        self.obs_shape = tuple(obs_space.shape)
        self.action_shape = tuple(getattr(action_space, "shape", None) or ())
        self.discrete = isinstance(action_space, spaces.Discrete)
        if self.discrete:
            out = int(action_space.n)
        else:  # a diagonal Gaussian, its log-std a parameter of its own (not of the state)
            out = int(action_space.shape[0])
            self.actor_logstd = nn.Parameter(torch.full((out,), float(log_std_init)))
        hidden = list(hidden_sizes)
        self.critic = mlp([obs_size, *hidden, 1], 1.0, activation)
        self.actor = mlp([obs_size, *hidden, out], 0.01, activation)
        self.obs_rms = RunningMeanStd((obs_size,)) if norm_obs else None

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Flat float observations (one-hot for a Discrete space)."""
        if self.obs_onehot is not None:
            start, n = self.obs_onehot
            return nn.functional.one_hot(obs.reshape(-1).long() - start, n).float()
        return obs.reshape(obs.shape[0], -1).float()

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Encoded observations, normalised when asked."""
        x = self.encode(obs)
        if self.obs_rms is not None:
            x = ((x - self.obs_rms.mean) / torch.sqrt(self.obs_rms.var + 1e-8)).clamp(-10, 10)
        return x

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def masked_logits(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Actor logits; illegal actions get the lowest float (never sampled, probability 0)."""
        logits = self.actor(x)
        if mask is not None:
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        return logits

    def sample(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Actions drawn from the policy (Gumbel-max for categorical: a few cheap ops)."""
        if self.discrete:
            logits = self.masked_logits(x, mask)
            return (logits - torch.empty_like(logits).exponential_().log_()).argmax(-1)
        mean = self.actor(x)
        return mean + self.actor_logstd.exp() * torch.randn_like(mean)

    def greedy(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The most likely action (the mean for a Gaussian)."""
        return self.masked_logits(x, mask).argmax(-1) if self.discrete else self.actor(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor,
                             mask: torch.Tensor | None, with_entropy: bool = True
                             ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(log-prob of ``action``, entropy or None, value) under the current parameters."""
        entropy = None
        if self.discrete:
            logp_all = self.masked_logits(x, mask).log_softmax(-1)
            logprob = logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
            if with_entropy:
                entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            mean, logstd = self.actor(x), self.actor_logstd.expand(x.shape[0], -1)
            logprob = (-0.5 * ((action - mean) / logstd.exp()) ** 2 - logstd
                       - 0.5 * math.log(2 * math.pi)).sum(-1)
            if with_entropy:
                entropy = (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1)
        return logprob, entropy, self.get_value(x)


# --- rollout storage and collection ---------------------------------------------------------


def as_tensor(x: Any, device: torch.device) -> torch.Tensor:
    """A tensor over ``x`` (NumPy: shares memory on CPU; a tensor on ``device``: itself)."""
    return x if isinstance(x, torch.Tensor) and x.device == device else torch.as_tensor(
        x, device=device)


class Rollout:
    """Preallocated ``(num_steps, num_envs, ...)`` storage, plus the carried-over env state."""

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple[int, ...],
                 action_shape: tuple[int, ...], action_dtype: torch.dtype,
                 mask_size: int | None, device: torch.device) -> None:
        t, n = num_steps, num_envs
        self.obs = torch.zeros((t + 1, n, *obs_shape), device=device)  # [t] = obs before step t
        self.actions = torch.zeros((t, n, *action_shape), dtype=action_dtype, device=device)
        self.rewards = torch.zeros((t, n), device=device)
        self.terminated = torch.zeros((t, n), dtype=torch.bool, device=device)
        self.ended = torch.zeros((t, n), dtype=torch.bool, device=device)  # term | trunc
        # valid[t]: step t is a transition (not NEXT_STEP's reset step after an ended episode)
        self.valid = torch.ones((t, n), dtype=torch.bool, device=device)
        self.masks = (None if mask_size is None else
                      torch.ones((t + 1, n, mask_size), dtype=torch.bool, device=device))
        self.prev_ended = torch.zeros(n, dtype=torch.bool, device=device)


class Clock:
    """Accumulated seconds per phase (env, inference, learning, evaluation)."""

    def __init__(self) -> None:
        self.seconds = {"env": 0.0, "inference": 0.0, "learning": 0.0, "evaluation": 0.0}

    def add(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[phase] += now - since
        return now


def action_mask(info: dict[str, Any], device: torch.device) -> torch.Tensor | None:
    """``info["action_mask"]`` as a bool tensor (Gymnasium's Taxi gives int8 0/1), or None."""
    mask = info.get("action_mask")
    if mask is None:
        return None
    mask = as_tensor(mask, device)
    return mask if mask.dtype == torch.bool else mask != 0


@torch.inference_mode()
def collect(env: Any, agent: Agent, buf: Rollout, next_obs: Any, next_info: dict[str, Any],
            clock: Clock, action_bounds: tuple[torch.Tensor, torch.Tensor] | None,
            torch_actions: bool) -> tuple[Any, dict[str, Any]]:
    """Step ``env`` ``num_steps`` times with sampled actions, filling ``buf``.

    ``next_obs`` / ``next_info`` are what the last step (or reset) returned; the ones after this
    rollout are returned. ``torch_actions``: the env takes tensors (torch / cuda backends).
    """
    device = buf.obs.device
    cuda = device.type == "cuda"
    num_steps = buf.actions.shape[0]
    t0 = time.perf_counter()
    buf.obs[0].copy_(as_tensor(next_obs, device))
    if buf.masks is not None:
        buf.masks[0].copy_(action_mask(next_info, device))
    for step in range(num_steps):
        mask = None if buf.masks is None else buf.masks[step]
        action = agent.sample(agent.features(buf.obs[step]), mask)
        buf.actions[step] = action
        if action_bounds is not None:  # the env gets the action clipped into its box
            action = torch.clamp(action, *action_bounds)
        buf.valid[step] = ~buf.prev_ended
        if not torch_actions:
            action = action.cpu().numpy()
        elif cuda:  # the policy's queued work is inference's, not the env's
            torch.cuda.synchronize(device)
        t0 = clock.add("inference", t0)
        obs, reward, terminated, truncated, info = env.step(action)
        t0 = clock.add("env", t0)
        buf.obs[step + 1].copy_(as_tensor(obs, device))
        buf.rewards[step].copy_(as_tensor(reward, device))
        term = as_tensor(terminated, device)
        buf.terminated[step] = term
        torch.logical_or(term, as_tensor(truncated, device), out=buf.ended[step])
        buf.prev_ended.copy_(buf.ended[step])
        if buf.masks is not None:
            buf.masks[step + 1].copy_(action_mask(info, device))
    clock.add("inference", t0)
    return obs, info


# --- learning ---------------------------------------------------------------------------------


def compute_advantages(buf: Rollout, values: torch.Tensor, gamma: float, gae_lambda: float,
                       reward_scale: float = 1.0) -> torch.Tensor:
    """GAE advantages ``(num_steps, num_envs)``; ``values`` holds V of ``buf.obs`` (T + 1 rows).

    After an ended step t, step t+1 is NEXT_STEP's reset step: (1 - ended[t]) cuts the
    recursion there (the reset step's own entry is never used: it is masked out of the loss).
    A terminated step does not bootstrap; a truncated one does, from values[t + 1] = V(final
    obs), the observation NEXT_STEP returns on the step an episode ends.
    """
    num_steps, num_envs = buf.rewards.shape
    rewards = buf.rewards * reward_scale
    not_term = (~buf.terminated).float()
    not_ended = (~buf.ended).float()
    deltas = rewards + gamma * values[1:] * not_term - values[:-1]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros(num_envs, device=rewards.device)
    for t in reversed(range(num_steps)):
        last = deltas[t] + gamma * gae_lambda * not_ended[t] * last
        advantages[t] = last
    return advantages


def update(agent: Agent, optimizer: torch.optim.Optimizer, buf: Rollout, args: Args,
           reward_scale: float, generator: torch.Generator, epochs: int | None = None
           ) -> dict[str, float]:
    """GAE over the rollout, then ``update_epochs`` passes of clipped-PPO minibatch steps
    (fewer when ``target_kl`` stops them; exactly ``epochs`` when given: the ideal loop
    repeats the real update's count). ``stats["minibatch_steps"]``: gradient steps taken."""
    num_steps, num_envs = buf.rewards.shape
    with torch.no_grad():
        x_all = agent.features(buf.obs.flatten(0, 1))
        if agent.obs_rms is not None:  # update the statistics, then use them for the update
            seen = buf.obs[:num_steps].flatten(0, 1)[buf.valid.flatten()]
            agent.obs_rms.update(agent.encode(seen))
            x_all = agent.features(buf.obs.flatten(0, 1))
        values = agent.get_value(x_all).view(num_steps + 1, num_envs)
        x = x_all[: num_steps * num_envs]
        actions = buf.actions.flatten(0, 1)
        masks = None if buf.masks is None else buf.masks[:num_steps].flatten(0, 1)
        old_logprobs, _, _ = agent.get_action_and_value(x, actions, masks)

        advantages = compute_advantages(buf, values, args.gamma, args.gae_lambda, reward_scale)
        returns = advantages + values[:-1]

        # keep transitions only: the reset steps never enter the loss
        keep = buf.valid.flatten().nonzero().squeeze(1)
        b_x, b_actions = x[keep], actions[keep]
        b_masks = None if masks is None else masks[keep]
        b_logprobs, b_adv = old_logprobs[keep], advantages.flatten()[keep]
        b_returns, b_values = returns.flatten()[keep], values[:-1].flatten()[keep]

    size = keep.shape[0]
    mb_size = max(1, math.ceil(size / args.num_minibatches))
    stats = {"approx_kl": 0.0, "clipfrac": 0.0, "pg_loss": 0.0, "v_loss": 0.0, "entropy": 0.0}
    whole = slice(None)  # one minibatch: the whole batch, no shuffling or gathering needed
    minibatch_steps = 0
    for _epoch in range(args.update_epochs if epochs is None else epochs):
        if args.num_minibatches > 1:
            order = torch.randperm(size, generator=generator).to(b_x.device)
            minibatches = [order[i:i + mb_size] for i in range(0, size, mb_size)]
        else:
            minibatches = [whole]
        for mb in minibatches:
            newlogprob, entropy, newvalue = agent.get_action_and_value(
                b_x[mb], b_actions[mb], None if b_masks is None else b_masks[mb],
                with_entropy=args.ent_coef != 0)
            logratio = newlogprob - b_logprobs[mb]
            ratio = logratio.exp()
            adv = b_adv[mb]
            if args.norm_adv and adv.numel() > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio,
                                -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
            if args.clip_vloss:
                v_clipped = b_values[mb] + (newvalue - b_values[mb]).clamp(-args.clip_coef,
                                                                           args.clip_coef)
                v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2,
                                         (v_clipped - b_returns[mb]) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
            loss = pg_loss + args.vf_coef * v_loss
            if entropy is not None:
                entropy_loss = entropy.mean()
                loss = loss - args.ent_coef * entropy_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if args.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
            optimizer.step()
            minibatch_steps += 1
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
        if epochs is None and args.target_kl is not None and approx_kl.item() > args.target_kl:
            break
    with torch.no_grad():
        stats.update(approx_kl=approx_kl.item(), pg_loss=pg_loss.item(), v_loss=v_loss.item(),
                     entropy=entropy_loss.item() if entropy is not None else float("nan"),
                     clipfrac=((ratio - 1).abs() > args.clip_coef).float().mean().item(),
                     minibatch_steps=minibatch_steps, epochs=_epoch + 1)
    return stats


class RewardScaler:
    """Running std of the discounted return, per env (as Gymnasium's NormalizeReward)."""

    def __init__(self, num_envs: int, gamma: float) -> None:
        self.gamma, self.ret = gamma, np.zeros(num_envs)
        self.count, self.mean, self.var = 1e-4, 0.0, 1.0

    def observe(self, rewards: np.ndarray, ended: np.ndarray, valid: np.ndarray) -> float:
        """Feed a rollout's rewards; return the scale for them (1 / std)."""
        for t in range(rewards.shape[0]):
            self.ret = np.where(valid[t], self.ret * self.gamma + rewards[t], self.ret)
            x = self.ret[valid[t]]
            if x.size:
                n, m, v = x.size, x.mean(), x.var()
                delta, total = m - self.mean, self.count + x.size
                self.mean += delta * n / total
                self.var = (self.var * self.count + v * n + delta**2 * self.count * n / total) \
                    / total
                self.count = total
            self.ret[ended[t]] = 0.0
        return 1.0 / math.sqrt(self.var + 1e-8)


# --- evaluation -------------------------------------------------------------------------------


@dataclass
class EvalResult:
    mean_return: float
    episodes: int  # episodes played out (fewer when stopped early)
    complete: bool  # False: stopped once the target was out of reach
    returns: list[float]
    seconds: float


@torch.inference_mode()
def evaluate(env: Any, agent: Agent, seed: int, device: torch.device, torch_actions: bool,
             action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
             target: float | None = None, max_episode_return: float | None = None,
             greedy: bool = True, max_step_reward: float | None = None) -> EvalResult:
    """Greedy returns of the first episode of each of ``env.num_envs`` envs, played at once
    (``greedy=False``: actions sampled from the policy).

    With ``target`` and a bound (``max_episode_return``, ``max_step_reward``), stop as soon as
    even perfect remaining episodes could not lift the mean to ``target`` (a failing
    evaluation then costs a few steps).
    """
    t0 = time.perf_counter()
    n = env.num_envs
    obs, info = env.reset(seed=seed)
    totals = np.zeros(n)
    done = np.zeros(n, dtype=bool)
    complete = True
    while not done.all():
        mask = action_mask(info, device)
        x = agent.features(as_tensor(obs, device))
        action = agent.greedy(x, mask) if greedy else agent.sample(x, mask)
        if action_bounds is not None:
            action = torch.clamp(action, *action_bounds)
        obs, reward, terminated, truncated, info = env.step(
            action if torch_actions else action.cpu().numpy())
        if torch_actions:  # one read back per step (the loop must know when to stop)
            reward = torch.as_tensor(reward)
            reward = reward.to(torch.promote_types(reward.dtype, torch.float32))
            ended = torch.logical_or(torch.as_tensor(terminated), torch.as_tensor(truncated))
            reward, ended = torch.stack((reward, ended.to(reward.dtype))).cpu().numpy()
            ended = ended != 0
        else:
            reward = np.asarray(reward)
            ended = np.asarray(terminated) | np.asarray(truncated)
        totals += np.where(done, 0.0, reward)
        done |= ended
        if target is not None and best_total(totals, done, max_episode_return,
                                             max_step_reward) < target * n:
            complete = False
            break
    returns = totals[done].tolist()
    mean = float(totals[done].mean()) if complete else float(totals.mean())
    return EvalResult(mean, int(done.sum()), complete, returns, time.perf_counter() - t0)


def best_total(totals: np.ndarray, done: np.ndarray, max_episode_return: float | None,
               max_step_reward: float | None) -> float:
    """The highest sum of returns the episodes can still end with: finished ones keep theirs,
    an unfinished one ends at ``max_episode_return`` at most, and no higher than its return so
    far when no step rewards more than 0 (inf: no bound known)."""
    upper = np.full(totals.shape, np.inf if max_episode_return is None else max_episode_return)
    if max_step_reward is not None and max_step_reward <= 0:
        upper = np.minimum(upper, totals)
    return float(np.where(done, totals, upper).sum())


#: the evaluation envs' seed is the run's seed plus this (the training envs get the seed itself)
EVAL_SEED_OFFSET = 10_000

#: timed ideal iterations at least, for the median and IQR of a short run
IDEAL_MIN_ITERATIONS = 7


# --- the ideal loop ---------------------------------------------------------------------------


class ReplayEnv:
    """An env that costs nothing: step t returns what the real env returned at step t of the
    real loop's last rollout (its observations, rewards, episode ends and action masks, read
    back from the rollout), so the ideal loop keeps exactly the real loop's transitions and
    feeds the same numbers through the network."""

    def __init__(self, torch_obs: bool) -> None:
        self.torch = torch_obs
        self.t = 0
        self.rows: dict[str, torch.Tensor] = {}
        self.steps: dict[str, Any] = {}  # the rows as the env gives them (tensors or arrays)
        self.obs: Any = None  # the observation before the first step, and its info
        self.info: dict[str, Any] = {}

    def load(self, buf: Rollout) -> None:
        """Replay ``buf`` from its first step on (copied into buffers kept between loads)."""
        rows = {"obs": buf.obs, "rewards": buf.rewards, "terminated": buf.terminated,
                "truncated": buf.ended & ~buf.terminated}
        if buf.masks is not None:
            rows["masks"] = buf.masks
        for key, row in rows.items():
            if key not in self.rows:
                self.rows[key] = row.clone()
                self.steps[key] = self.rows[key] if self.torch else self.rows[key].cpu().numpy()
            else:
                self.rows[key].copy_(row)
        self.obs, self.info = self.steps["obs"][0], self._info(0)
        self.t = 0

    def _info(self, t: int) -> dict[str, Any]:
        return {"action_mask": self.steps["masks"][t]} if "masks" in self.steps else {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        t = self.t
        self.t = (t + 1) % len(self.steps["rewards"])
        return (self.steps["obs"][t + 1], self.steps["rewards"][t], self.steps["terminated"][t],
                self.steps["truncated"][t], self._info(t + 1))


@dataclass
class Bookkeeping:
    """The work after each rollout that both loops do: episode returns of the training envs
    and the running return scale of ``norm_reward``. ``ep_return`` (each env's running return)
    is a NumPy array for envs that give NumPy arrays, a tensor on the rollout's device for envs
    that give tensors: then the returns are summed where the rewards are and only the ended
    episodes' returns come back to the host, once per rollout."""

    ep_return: np.ndarray | torch.Tensor
    recent: deque
    reward_scaler: RewardScaler | None

    @classmethod
    def new(cls, args: Args, device: torch.device | None = None) -> Bookkeeping:
        """``device``: keep the running returns there (an env giving tensors on it)."""
        scaler = RewardScaler(args.num_envs, args.gamma) if args.norm_reward else None
        if device is None:
            ep_return: np.ndarray | torch.Tensor = np.zeros(args.num_envs)
        else:  # float64 as NumPy's, where the device has it (MPS does not)
            dtype = torch.float32 if device.type == "mps" else torch.float64
            ep_return = torch.zeros(args.num_envs, dtype=dtype, device=device)
        return cls(ep_return, deque(maxlen=100), scaler)

    def observe(self, buf: Rollout) -> float:
        """Count the rollout's ended episodes; return the reward scale for ``update``."""
        if isinstance(self.ep_return, torch.Tensor):
            ended_returns, self.ep_return = episode_returns(buf.rewards, buf.ended,
                                                            self.ep_return)
            self.recent.extend(ended_returns.tolist())  # the rollout's one read back
            if self.reward_scaler is None:
                return 1.0
            rewards, ended = buf.rewards.cpu().numpy(), buf.ended.cpu().numpy()
        else:
            rewards = buf.rewards.cpu().numpy()
            ended = buf.ended.cpu().numpy()
            for t in range(rewards.shape[0]):  # rewards of reset steps are 0; valid masks them
                self.ep_return += rewards[t]
                if ended[t].any():
                    self.recent.extend(self.ep_return[ended[t]].tolist())
                    self.ep_return[ended[t]] = 0.0
            if self.reward_scaler is None:
                return 1.0
        return self.reward_scaler.observe(rewards, ended, buf.valid.cpu().numpy())


def episode_returns(rewards: torch.Tensor, ended: torch.Tensor, running: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The returns of the episodes that end in a rollout, in (step, env) order, and each env's
    running return after it, from ``rewards`` and ``ended`` ``(T, num_envs)`` and ``running``
    (each env's return before the rollout): a fixed number of tensor ops on their device (a
    cumulative sum; an episode's return is the sum since the previous end), not a loop over
    steps. What ``Bookkeeping`` computes step by step on the host, in ``running``'s dtype."""
    num_steps = rewards.shape[0]
    sums = rewards.to(running.dtype).cumsum(0)
    steps = torch.arange(num_steps, device=rewards.device).unsqueeze(1).expand_as(ended)
    last_end = torch.where(ended, steps, -1).cummax(0).values  # last end at or before t
    before = torch.cat((last_end.new_full((1, ended.shape[1]), -1), last_end[:-1]))
    # the sum before step t's episode began: at the previous end, or minus the carried return
    base = torch.where(before >= 0, sums.gather(0, before.clamp(min=0)), -running)
    so_far = sums - base  # each env's episode return up to step t
    return so_far[ended], torch.where(ended[-1], 0.0, so_far[-1])


class IdealLoop:
    """The real loop's last iteration again, against ``ReplayEnv``, on an agent and optimizer
    of its own: the same rollout (inference, buffer writes, the same observations and
    transitions), the same bookkeeping and an update with the same number of epochs, starting
    from the real agent's parameters and optimizer state (copied in before each iteration,
    off the clock). What end-to-end training would reach with an env that costs nothing: an
    upper bound of the real loop.

    ``train`` runs one ideal iteration after each of the first ``IDEAL_MIN_ITERATIONS`` real
    ones, then after every ``args.ideal_every``, each timed exactly as a real iteration is
    (wall and thread CPU of rollout, bookkeeping and update), so both see the same machine
    load and the same cache state; their time is kept off the training clock. ``times``: the
    timed iterations' seconds; ``steps_per_s`` is the median's rate, with its IQR; ``clock``
    their time per phase.
    """

    def __init__(self, agent: Agent, optimizer: torch.optim.Optimizer, args: Args,
                 info: dict[str, Any], action_bounds: Any, torch_actions: bool) -> None:
        # built as the real agent and optimizer are (not deep copies): the same layout; its
        # initial draw leaves training's random stream alone (its values are overwritten)
        with torch.random.fork_rng(devices=[]):
            self.agent = new_agent(*agent.spaces, args)
        self.optimizer = make_optimizer(self.agent, args)
        self.args, self.bounds, self.torch_actions = args, action_bounds, torch_actions
        self.env = ReplayEnv(torch_actions)
        self.buf = make_rollout(args, self.agent, info, torch.device(args.device))
        self.books = Bookkeeping.new(args, self.buf.obs.device if torch_actions else None)
        self.generator = torch.Generator().manual_seed(0)
        self.times: list[float] = []
        self.cpu_times: list[float] = []
        self.clock = Clock()
        self.last_stats: dict[str, float] = {}

    def sync(self, agent: Agent, optimizer: torch.optim.Optimizer) -> None:
        """Copy ``agent``'s parameters and ``optimizer``'s state (Adam's moments, step, lr) into
        this loop's own tensors."""
        self.agent.load_state_dict(agent.state_dict())
        for mine, theirs in zip(self.optimizer.param_groups, optimizer.param_groups,
                                strict=True):
            mine["lr"] = theirs["lr"]
            for p, q in zip(mine["params"], theirs["params"], strict=True):
                for key, value in optimizer.state[q].items():
                    state = self.optimizer.state[p]
                    if key in state and isinstance(value, torch.Tensor):
                        state[key].copy_(value)
                    else:
                        state[key] = value.clone() if isinstance(value, torch.Tensor) else value

    def iterate(self, real: Rollout, epochs: int, agent: Agent,
                optimizer: torch.optim.Optimizer) -> float:
        """One ideal iteration from ``agent``'s and ``optimizer``'s current state, replaying the
        real rollout ``real`` and updating for ``epochs`` epochs (the real update's); its timed
        part is kept; returns all the seconds it took, the copying included."""
        t_all = time.perf_counter()
        self.sync(agent, optimizer)
        self.env.load(real)
        torch.logical_not(real.valid[0], out=self.buf.prev_ended)  # the same first step kept
        device = torch.device(self.args.device)
        devices = [device] if device.type == "cuda" else []
        clock = Clock()
        with torch.random.fork_rng(devices=devices):  # training's random stream is untouched
            t0, cpu0 = time.perf_counter(), time.thread_time()
            collect(self.env, self.agent, self.buf, self.env.obs, self.env.info, clock,
                    self.bounds, self.torch_actions)
            t1 = time.perf_counter()
            scale = self.books.observe(self.buf)
            self.last_stats = update(self.agent, self.optimizer, self.buf, self.args, scale,
                                     self.generator, epochs=epochs)
            clock.add("learning", t1)
            spent, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        self.times.append(spent)
        self.cpu_times.append(cpu)
        for phase, seconds in clock.seconds.items():
            self.clock.seconds[phase] += seconds
        return time.perf_counter() - t_all

    @property
    def steps_per_s(self) -> float:
        """Steps/s of the median timed iteration (nan before any)."""
        return median_rate(self.times, self.args.num_steps * self.args.num_envs)

    @property
    def steps_per_s_iqr(self) -> tuple[float, float]:
        """Steps/s of the 75th and 25th percentile iteration times (the spread)."""
        return iqr_rates(self.times, self.args.num_steps * self.args.num_envs)


def median_rate(seconds: list[float], batch: int) -> float:
    """Steps/s of the median of ``seconds`` (iterations of ``batch`` steps; nan if none)."""
    return batch / float(np.median(seconds)) if seconds else float("nan")


def iqr_rates(seconds: list[float], batch: int) -> tuple[float, float]:
    """Steps/s of the 75th and 25th percentile of ``seconds`` (nan, nan if none)."""
    if not seconds:
        return (float("nan"), float("nan"))
    q1, q3 = np.percentile(seconds, [25, 75])
    return (batch / q3, batch / q1)


# --- training ---------------------------------------------------------------------------------


def make_rollout(args: Args, agent: Agent, info: dict[str, Any], device: torch.device
                 ) -> Rollout:
    obs_shape = tuple(agent.obs_shape)
    if agent.discrete:
        action_shape, action_dtype = (), torch.long
    else:
        action_shape, action_dtype = tuple(agent.action_shape), torch.float32
    mask = info.get("action_mask")
    mask_size = None if mask is None else int(np.prod(mask.shape[1:]))
    return Rollout(args.num_steps, args.num_envs, obs_shape, action_shape, action_dtype,
                   mask_size, device)


def build_agent(env: Any, args: Args) -> Agent:
    return new_agent(env.single_observation_space, env.single_action_space, args)


def new_agent(obs_space: spaces.Space, action_space: spaces.Space, args: Args) -> Agent:
    """A freshly initialised agent for these spaces and ``args`` (on ``args.device``)."""
    return Agent(obs_space, action_space, args.hidden_sizes, args.norm_obs, args.activation,
                 args.log_std_init).to(args.device)


def make_optimizer(agent: Agent, args: Args) -> torch.optim.Optimizer:
    # fused Adam: one kernel for all parameters (per-parameter ops cost ~25% of a small step)
    fused = torch.device(args.device).type in ("cpu", "cuda")
    return torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5,
                            fused=fused or None)


def box_bounds(space: spaces.Space, device: torch.device) -> tuple[torch.Tensor, ...] | None:
    if not isinstance(space, spaces.Box):
        return None
    return (torch.as_tensor(space.low, dtype=torch.float32, device=device),
            torch.as_tensor(space.high, dtype=torch.float32, device=device))


def make_envs(args: Args, num_envs: int, seed: int) -> Any:
    """``num_envs`` envs for ``args`` (NEXT_STEP; zero-copy outputs where the env offers it)."""
    import envfleet

    backend, kwargs = args.backend, dict(args.env_kwargs)
    if num_envs != args.num_envs and backend == "subprocess":
        backend = "serial"  # evaluation: no 100 processes for 100 episodes
    numba_env = backend == "numba" or (backend == "auto" and isinstance(args.env_id, str)
                                       and args.env_id.removeprefix("envfleet/")
                                       in envfleet.list_envs())
    if numba_env and args.env_threads is not None:
        kwargs.setdefault("num_threads", args.env_threads)
    try:
        return envfleet.make(args.env_id, num_envs, backend=backend, seed=seed, copy=False,
                             **kwargs)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError):
        raise
    except (ValueError, TypeError, ImportError, gymnasium.error.Error, EnvWorkerError) as error:
        raise EnvBuildError(f"cannot build {args.env_id} ({backend} backend): {error}") from error


class EnvBuildError(ValueError):
    """The env cannot be built with these settings (an option it refuses, a package its
    maker needs): the message names the env and why."""


@dataclass
class Progress:
    """What ``train`` reports to its caller after every iteration (the CLI prints it)."""

    steps: int
    seconds: float  # wall clock since training started, evaluations included
    episodic_return: float | None  # mean over recent training episodes (stochastic policy)
    eval_return: float | None  # a greedy evaluation's mean return, when one just ran
    sps_env: float
    sps_end_to_end: float
    times: dict[str, float]
    stats: dict[str, float]
    done: bool  # the last report of the run
    eval_complete: bool = True  # False: the evaluation stopped once the target was out of
    # reach, and eval_return is the partial mean then


@dataclass
class Summary:
    args: dict[str, Any]
    solved_at_s: float | None
    solved_at_steps: int | None
    compile_s: float
    total_steps: int
    wall_s: float
    sps_env: float
    sps_ideal: float  # the ideal loop's median iteration
    sps_ideal_iqr: tuple[float, float]  # its 25th-75th percentile iterations, as steps/s
    ideal_iterations: int  # timed ideal iterations
    sps_end_to_end: float
    efficiency: float
    times: dict[str, float]
    final_eval_return: float | None
    final_eval: dict[str, Any] | None
    curve: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]
    stop_reason: str  # "target", "time limit", "steps" (the budget used up) or "interrupted"
    # (Ctrl-C: stopped at once; no final evaluation unless it had finished)
    # the real loop's iterations timed as the ideal's (rollout, bookkeeping, update): median
    # and 25th-75th percentile as steps/s, like for like with sps_ideal
    sps_iteration: float = float("nan")
    sps_iteration_iqr: tuple[float, float] = (float("nan"), float("nan"))
    # median thread CPU seconds of an iteration, real and ideal (less noisy than wall under load)
    cpu_per_iteration: dict[str, float] = field(default_factory=dict)
    # seconds per phase of a timed ideal iteration (env, inference, learning)
    ideal_times: dict[str, float] = field(default_factory=dict)
    above_ideal: bool = False  # end-to-end above the ideal's IQR: a bug (or a burst of load)


def train(args: Args, on_progress: Callable[[Progress], None] | None = None,
          evaluate_fn: Callable[..., EvalResult] = evaluate) -> tuple[Agent, Summary]:
    """Train PPO on ``args.env_id``; returns the agent and the run's summary.

    Ctrl-C (KeyboardInterrupt) once training has started stops it at once and returns the agent
    and the summary as far as they got (``stop_reason`` "interrupted"); before that (building
    the envs, JIT compiling) it propagates.
    """
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(args.seed)

    # -- build and warm up (JIT compile, first touches): reported apart as compile_s
    t_build = time.perf_counter()
    env = make_envs(args, args.num_envs, args.seed)
    try:  # an env the agent has no policy for: refused before anything else starts
        check_spaces(env.single_observation_space, env.single_action_space)
    except UnsupportedSpaceError as error:
        env.close()
        raise UnsupportedSpaceError(f"{args.env_id}: {error}") from None
    eval_env = make_envs(args, args.eval_episodes, args.seed + EVAL_SEED_OFFSET)
    agent = build_agent(env, args)
    optimizer = make_optimizer(agent, args)
    bounds = box_bounds(env.single_action_space, device)
    next_obs, next_info = env.reset(seed=args.seed)
    torch_actions = isinstance(next_obs, torch.Tensor)
    buf = make_rollout(args, agent, next_info, device)
    with torch.inference_mode():  # one step of each env with legal actions: JIT compiles
        for e, (obs, info) in ((env, (next_obs, next_info)), (eval_env, eval_env.reset())):
            action = agent.sample(agent.features(as_tensor(obs, device)),
                                  action_mask(info, device))
            if bounds is not None:
                action = torch.clamp(action, *bounds)
            e.step(action if torch_actions else action.cpu().numpy())
    next_obs, next_info = env.reset(seed=args.seed)
    ideal = (IdealLoop(agent, optimizer, args, next_info, bounds, torch_actions)
             if args.ideal_every else None)
    compile_s = time.perf_counter() - t_build

    # -- train
    clock = Clock()
    books = Bookkeeping.new(args, device if torch_actions else None)
    recent = books.recent
    batch = args.num_envs * args.num_steps
    iterations = max(1, args.total_steps // batch)
    curve: list[dict[str, Any]] = []
    evaluations: list[dict[str, Any]] = []
    solved_at_s = solved_at_steps = None
    stop_reason = "steps"
    last_eval_step, steps, stats = 0, 0, {}
    last_eval: EvalResult | None = None
    iteration_s: list[float] = []  # each real iteration, timed as the ideal's
    iteration_cpu: list[float] = []
    start = time.perf_counter()  # moved forward by the ideal iterations: off the clock

    def elapsed() -> float:
        return time.perf_counter() - start

    def run_eval(steps: int, play_out: bool = False) -> EvalResult:
        """An evaluation; ``play_out``: every episode to its end (no stop below the target)."""
        t0 = time.perf_counter()
        result = evaluate_fn(eval_env, agent, args.seed + EVAL_SEED_OFFSET, device,
                             torch_actions, bounds,
                             None if play_out else args.target_return, args.max_episode_return,
                             max_step_reward=args.max_step_reward)
        clock.add("evaluation", t0)
        evaluations.append({"steps": steps, "seconds": elapsed(),
                            "mean_return": result.mean_return, "complete": result.complete,
                            "episodes": result.episodes, "eval_s": result.seconds})
        return result

    wall_s: float | None = None
    loop_eval_s = 0.0  # the evaluations' seconds within wall_s (not the final play-out's)
    final: EvalResult | None = None
    try:  # Ctrl-C: stop at once, with the agent and the summary as far as they got
        for iteration in range(1, iterations + 1):
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = args.learning_rate * (1 - (iteration - 1)
                                                                        / iterations)
            t_iteration, cpu_iteration = time.perf_counter(), time.thread_time()
            next_obs, next_info = collect(env, agent, buf, next_obs, next_info, clock, bounds,
                                          torch_actions)
            steps += batch
            t0 = time.perf_counter()
            scale = books.observe(buf)
            stats = update(agent, optimizer, buf, args, scale, generator)
            iteration_s.append(clock.add("learning", t0) - t_iteration)
            iteration_cpu.append(time.thread_time() - cpu_iteration)
            if ideal is not None and (iteration <= IDEAL_MIN_ITERATIONS
                                      or iteration == iterations
                                      or iteration % args.ideal_every == 0):
                # this iteration again with an instant env, right after it (the same load),
                # before the evaluation (after one, its learning measured 3% more CPU at 256
                # envs)
                start += ideal.iterate(buf, int(stats["epochs"]), agent, optimizer)

            eval_return = None
            due = args.eval_every > 0 and steps - last_eval_step >= args.eval_every
            if due or iteration == iterations:
                last_eval_step = steps
                last_eval = run_eval(steps)
                eval_return = last_eval.mean_return
                if (args.target_return is not None and last_eval.complete
                        and last_eval.mean_return >= args.target_return
                        and solved_at_s is None):
                    solved_at_s, solved_at_steps = elapsed(), steps
            now = elapsed()
            # end-to-end: the loop's whole wall clock (bookkeeping, logging) but evaluations
            train_s = now - clock.seconds["evaluation"]
            point = {"steps": steps, "seconds": now,
                     "episodic_return": float(np.mean(recent)) if recent else None,
                     "eval_return": eval_return}
            curve.append(point)
            if solved_at_s is not None and args.stop_at_target:
                stop_reason = "target"
            elif args.time_limit is not None and now >= args.time_limit:
                stop_reason = "time limit"
            stop = stop_reason != "steps"
            if on_progress is not None:
                on_progress(Progress(steps, now, point["episodic_return"], eval_return,
                                     steps / max(clock.seconds["env"], 1e-9), steps / train_s,
                                     dict(clock.seconds), stats,
                                     done=stop or iteration == iterations,
                                     eval_complete=eval_return is None or last_eval.complete))
            if stop:
                break
        wall_s, loop_eval_s = elapsed(), clock.seconds["evaluation"]

        # -- the final evaluation (the last one, when it ran on the final parameters and
        # finished)
        if last_eval is None or not last_eval.complete or last_eval_step != steps:
            last_eval = run_eval(steps, play_out=True)
        final = last_eval
        while ideal is not None and len(ideal.times) < IDEAL_MIN_ITERATIONS:
            # a short run: enough for a median and IQR (the last iteration again)
            ideal.iterate(buf, int(stats["epochs"]), agent, optimizer)
    except KeyboardInterrupt:
        stop_reason = "interrupted"
    if wall_s is None:
        wall_s, loop_eval_s = elapsed(), clock.seconds["evaluation"]
    train_s = max(wall_s - loop_eval_s, 1e-9)
    final_eval = None if final is None else {
        "mean_return": final.mean_return, "episodes": final.episodes, "returns": final.returns}
    ideal_s, ideal_cpu = (ideal.times, ideal.cpu_times) if ideal else ([], [])
    sps_ideal, ideal_iqr = median_rate(ideal_s, batch), iqr_rates(ideal_s, batch)
    env.close()
    eval_env.close()
    sps_e2e = steps / train_s
    summary = Summary(
        args=_jsonable(asdict(args)), solved_at_s=solved_at_s, solved_at_steps=solved_at_steps,
        compile_s=compile_s, total_steps=steps, wall_s=wall_s,
        sps_env=steps / max(clock.seconds["env"], 1e-9), sps_ideal=sps_ideal,
        sps_ideal_iqr=ideal_iqr, ideal_iterations=len(ideal_s),
        sps_end_to_end=sps_e2e, efficiency=sps_e2e / sps_ideal, times=dict(clock.seconds),
        final_eval_return=None if final is None else final.mean_return, final_eval=final_eval,
        curve=curve,
        evaluations=evaluations, stop_reason=stop_reason,
        sps_iteration=median_rate(iteration_s, batch),
        sps_iteration_iqr=iqr_rates(iteration_s, batch),
        cpu_per_iteration={"real": float(np.median(iteration_cpu)) if iteration_cpu
                           else float("nan"),
                           "ideal": float(np.median(ideal_cpu)) if ideal_cpu else float("nan")},
        ideal_times={k: v / len(ideal_s) for k, v in ideal.clock.seconds.items()
                     if k != "evaluation"} if ideal_s else {},
        above_ideal=bool(sps_e2e > ideal_iqr[1]))
    return agent, summary


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x if isinstance(x, int | float | str | bool | type(None)) else repr(x)


# --- saving and loading -----------------------------------------------------------------------


def save(agent: Agent, args: Args, path: str) -> None:
    """The agent's weights and the settings needed to rebuild it (an OSError naming ``path``
    and why, when it cannot be written)."""
    with open(path, "wb") as file:
        torch.save({"args": _jsonable(asdict(args)), "state_dict": agent.state_dict()}, file)


def read_checkpoint(path: str, device: str = "cpu") -> dict[str, Any]:
    """What ``save`` wrote at ``path`` (its ``args`` and ``state_dict``, tensors loaded with
    ``weights_only``); a ValueError saying so for anything else, including architecture fields
    that do not match the weights (checked before anything is built from them)."""
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty, not a policy saved by envfleet train --save")
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # not a torch file, truncated, or pickled objects
        first = next(iter(str(error).splitlines()), "")
        raise ValueError(f"{path} is not a policy saved by envfleet train --save "
                         f"({type(error).__name__}{': ' + first if first else ''})") from None
    if not (isinstance(saved, dict) and isinstance(saved.get("args"), dict)
            and "env_id" in saved["args"] and isinstance(saved.get("state_dict"), dict)):
        raise ValueError(f"{path} is not a policy saved by envfleet train --save "
                         "(no args and state_dict in it)")
    why = architecture_problem(saved["args"], saved["state_dict"])
    if why is not None:
        raise ValueError(f"{path} is not a policy saved by envfleet train --save ({why})")
    return saved


def architecture_problem(args: dict[str, Any], weights: dict[Any, Any]) -> str | None:
    """Why a checkpoint's ``args`` and ``state_dict`` are not what ``save`` writes, or None:
    ``env_id`` a string, ``activation`` one of ``ACTIVATIONS``, ``norm_obs`` a bool, tensors
    only, and ``hidden_sizes`` the widths of the actor's and critic's hidden layers as they are
    in the weights, each layer taking the one before (so building the agent allocates no more
    than the file holds, but for its first layer's inputs: the env's observation size)."""
    short = reprlib.Repr()  # a crafted value is quoted briefly
    short.maxstring, short.maxother, short.maxlist = 60, 60, 8
    if not isinstance(args["env_id"], str):
        return f"env_id {short.repr(args['env_id'])} is not a string"
    activation = args.get("activation", "tanh")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        return (f"activation {short.repr(activation)} is not one of "
                f"{', '.join(map(repr, ACTIVATIONS))}")
    if not isinstance(args.get("norm_obs"), bool):
        return f"norm_obs {short.repr(args.get('norm_obs'))} is not true or false"
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
        return "its state_dict holds something other than named tensors"
    hidden = args.get("hidden_sizes")
    if not (isinstance(hidden, list | tuple)
            and all(type(h) is int and h >= 1 for h in hidden)):
        return f"hidden_sizes {short.repr(hidden)} is not a list of positive ints"
    for net in ("critic", "actor"):
        layers = sorted((int(m.group(1)), w) for k, w in weights.items()
                        if (m := re.fullmatch(rf"{net}\.(\d+)\.weight", k)))
        shapes = [tuple(w.shape) for _, w in layers]
        chained = all(len(shape) == 2 for shape in shapes) and all(
            shapes[i][1] == shapes[i - 1][0] for i in range(1, len(shapes)))
        if (not chained or len(shapes) != len(hidden) + 1
                or [shape[0] for shape in shapes[:-1]] != list(hidden)):
            return (f"hidden_sizes {short.repr(list(hidden))} do not match its {net}'s layers "
                    f"(weights {short.repr(shapes)})")
    return None


def agent_from(saved: dict[str, Any], env: Any, device: str = "cpu") -> Agent:
    """The agent of a checkpoint (``read_checkpoint``) for ``env``'s spaces; a ValueError
    naming both shapes when they do not fit."""
    saved_args = saved["args"]
    agent = Agent(env.single_observation_space, env.single_action_space,
                  tuple(saved_args["hidden_sizes"]), saved_args["norm_obs"],
                  saved_args.get("activation", "tanh")).to(device)
    try:
        agent.load_state_dict(saved["state_dict"])
    except RuntimeError:
        weights = saved["state_dict"]
        critic = weights.get("critic.0.weight")
        actor = [w for k, w in weights.items() if k.startswith("actor.") and k.endswith("weight")]
        inputs = "?" if critic is None else critic.shape[1]
        outputs = actor[-1].shape[0] if actor else "?"
        raise ValueError(
            f"the policy does not fit this env: it was trained on {saved_args['env_id']} "
            f"({inputs} observation numbers in, {outputs} action outputs); this env has "
            f"observations {env.single_observation_space} and actions "
            f"{env.single_action_space} (another env, or other env options?)") from None
    return agent


def load(path: str, env: Any, device: str = "cpu") -> tuple[Agent, dict[str, Any]]:
    """An agent saved by ``save``, for ``env``'s spaces, and its saved settings."""
    saved = read_checkpoint(path, device)
    return agent_from(saved, env, device), saved["args"]
