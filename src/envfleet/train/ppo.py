"""PPO in one file (CleanRL's shape, our own code): clipped objective, GAE, minibatch epochs.

Read it top to bottom: ``Agent``, ``Rollout`` storage, ``collect`` (a rollout),
``update`` (GAE and the epochs), ``iterate`` (the two, and the bookkeeping between them) and
``train`` (the loop). Autoreset is Gymnasium's NEXT_STEP: the step after an episode ends only
resets that env, so it is no transition (``valid`` masks it out of GAE and the loss), and the
observation of the step an episode ends is the final one (a truncated episode bootstraps from
it). Illegal actions (``info["action_mask"]``) get the lowest logit. What the loop uses but
PPO is not (its settings ``Args``, clocks and records, evaluations, the ideal loop, envs,
networks) lives beside it.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from envfleet.machine import capped_threads
from envfleet.train.args import Args, evaluation_args
from envfleet.train.bookkeeping import Bookkeeping, Clock, Progress, Records, Summary
from envfleet.train.envs import (
    action_mask,
    as_tensor,
    box_bounds,
    env_actions,
    make_envs,
    warm_up,
)
from envfleet.train.evaluation import EVAL_SEED_OFFSET, EvalResult, Evaluations, evaluate
from envfleet.train.ideal import IdealLoop
from envfleet.train.nets import ActorCritic

# --- the agent --------------------------------------------------------------------------------


def legal_actions(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's legal action ids, in increasing order, padded to the most any row has:
    ``(ids, legal)``, both ``(rows, k)``; a padding slot holds id 0 with ``legal`` False."""
    counts = mask.sum(1)
    k = max(int(counts.max()), 1) if counts.numel() else 1
    rows, cols = mask.nonzero(as_tuple=True)
    slots = torch.arange(rows.shape[0], device=mask.device) - (counts.cumsum(0) - counts)[rows]
    ids = torch.zeros((mask.shape[0], k), dtype=torch.long, device=mask.device)
    ids[rows, slots] = cols
    return ids, torch.arange(k, device=mask.device) < counts.unsqueeze(1)


class Agent(ActorCritic):
    """PPO's policy and value on the actor and critic MLPs (``nets.ActorCritic``: built for
    the env's spaces, observations one-hot encoded or flattened, normalised when asked): a
    categorical head (Discrete actions) or a diagonal Gaussian one (Box actions).

    ``legal_logits`` (``Args.legal_logits``): with a mask, the categorical head computes the
    legal actions' logits only (the output layer's rows for them, in increasing action order):
    the same distribution as the masked full one, without the work on the illegal actions."""

    legal_logits: bool = False

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """The critic's value of features ``x``."""
        return self.critic(x).squeeze(-1)

    def masked_logits(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Actor logits; illegal actions get the lowest float (never sampled, probability 0)."""
        logits = self.actor(x)
        if mask is not None:
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        return logits

    def policy_logits(self, x: torch.Tensor, mask: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The categorical head's logits and the action id of each column: ``masked_logits``
        and None (the column is the id), or with ``legal_logits`` and a mask, the legal
        actions' logits and their ids (``legal_actions``; padding gets the lowest float)."""
        if not self.legal_logits or mask is None:
            return self.masked_logits(x, mask), None
        ids, legal = legal_actions(mask)
        rows, slots = legal.nonzero(as_tuple=True)
        hidden, out = self.actor[:-1](x), self.actor[-1]
        actions = ids[rows, slots]  # the output layer's rows for the legal actions only
        legal_logits = (hidden[rows] * out.weight[actions]).sum(-1) + out.bias[actions]
        logits = torch.full(ids.shape, torch.finfo(legal_logits.dtype).min,
                            dtype=legal_logits.dtype, device=legal_logits.device)
        return logits.index_put((rows, slots), legal_logits), ids

    def sample(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Actions drawn from the policy (Gumbel-max for categorical: a few cheap ops)."""
        if self.discrete:
            logits, ids = self.policy_logits(x, mask)
            column = (logits - torch.empty_like(logits).exponential_().log_()).argmax(-1)
            return column if ids is None else ids.gather(-1, column.unsqueeze(-1)).squeeze(-1)
        mean = self.actor(x)
        return mean + self.actor_logstd.exp() * torch.randn_like(mean)

    def greedy(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The most likely action (the mean for a Gaussian; ties: the lowest action id)."""
        if not self.discrete:
            return self.actor(x)
        logits, ids = self.policy_logits(x, mask)
        column = logits.argmax(-1)
        return column if ids is None else ids.gather(-1, column.unsqueeze(-1)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor,
                             mask: torch.Tensor | None, with_entropy: bool = True
                             ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(log-prob of ``action``, entropy or None, value) under the current parameters."""
        entropy = None
        if self.discrete:
            logits, ids = self.policy_logits(x, mask)
            logp_all = logits.log_softmax(-1)
            column = action if ids is None else (ids == action.unsqueeze(-1)).int().argmax(-1)
            logprob = logp_all.gather(-1, column.unsqueeze(-1)).squeeze(-1)
            if with_entropy:
                entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            mean, logstd = self.actor(x), self.actor_logstd.expand(x.shape[0], -1)
            logprob = (-0.5 * ((action - mean) / logstd.exp()) ** 2 - logstd
                       - 0.5 * math.log(2 * math.pi)).sum(-1)
            if with_entropy:
                entropy = (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1)
        return logprob, entropy, self.get_value(x)


def build_agent(env: Any, args: Args) -> Agent:
    """A freshly initialised agent for ``env``'s spaces and ``args`` (on ``args.device``)."""
    agent = Agent(env.single_observation_space, env.single_action_space, args.hidden_sizes,
                  args.norm_obs, args.activation, args.log_std_init, args.cnn).to(args.device)
    agent.legal_logits = args.legal_logits
    return agent


def make_optimizer(agent: Agent, args: Args) -> torch.optim.Optimizer:
    """Adam, fused where the device has it (one kernel for all parameters: per-parameter ops
    cost ~25% of a small step)."""
    fused = torch.device(args.device).type in ("cpu", "cuda")
    return torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5,
                            fused=fused or None)


# --- rollout storage and collection ---------------------------------------------------------


class Rollout:
    """Preallocated ``(num_steps, num_envs, ...)`` storage, plus the carried-over env state.
    ``normalized``: ``obs`` holds the policy's inputs, normalised as they were when it acted
    (``Args.norm_each_step``), not the env's observations."""

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple[int, ...],
                 action_shape: tuple[int, ...], action_dtype: torch.dtype,
                 mask_size: int | None, device: torch.device, normalized: bool = False) -> None:
        t, n = num_steps, num_envs
        self.normalized = normalized
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


def make_rollout(args: Args, agent: Agent, info: dict[str, Any], device: torch.device
                 ) -> Rollout:
    """Storage on ``device`` for ``agent``'s observations (normalised ones:
    ``normalizes_each_step``), actions and (``info`` has them) masks."""
    mask = info.get("action_mask")
    normalized = normalizes_each_step(agent, args)
    return Rollout(args.num_steps, args.num_envs,
                   tuple(agent.obs_rms.mean.shape) if normalized else agent.obs_shape,
                   agent.action_shape, torch.long if agent.discrete else torch.float32,
                   None if mask is None else int(np.prod(mask.shape[1:])), device, normalized)


def normalizes_each_step(agent: Agent, args: Args) -> bool:
    """Whether the rollout normalises observations step by step (``Args.norm_each_step`` with
    running statistics on an MLP's inputs) and keeps them normalised."""
    return args.norm_each_step and agent.obs_rms is not None and agent.network is None


@torch.inference_mode()
def collect(env: Any, agent: Agent, buf: Rollout, next_obs: Any, next_info: dict[str, Any],
            clock: Clock, action_bounds: tuple[torch.Tensor, torch.Tensor] | None,
            torch_actions: bool) -> tuple[Any, dict[str, Any]]:
    """Step ``env`` ``num_steps`` times with sampled actions, filling ``buf``.

    ``next_obs`` / ``next_info`` are what the last step (or reset) returned; the ones after this
    rollout are returned. ``torch_actions``: the env takes tensors (torch / cuda backends).
    ``buf.normalized``: each step's observations update the agent's statistics and are kept
    normalised (``next_obs`` are already counted in them).
    """
    device = buf.obs.device
    t0 = time.perf_counter()
    if buf.normalized:
        buf.obs[0].copy_(agent.normalize(agent.encode(as_tensor(next_obs, device))))
    else:
        buf.obs[0].copy_(as_tensor(next_obs, device))
    if buf.masks is not None:
        buf.masks[0].copy_(action_mask(next_info, device))
    for step in range(buf.actions.shape[0]):
        mask = None if buf.masks is None else buf.masks[step]
        x = buf.obs[step] if buf.normalized else agent.features(buf.obs[step])
        action = agent.sample(x, mask)
        buf.actions[step] = action  # unclipped; the env gets it clipped into its Box
        buf.valid[step] = ~buf.prev_ended
        action = env_actions(action, action_bounds, torch_actions)  # (CUDA: synchronised)
        t0 = clock.add("inference", t0)
        obs, reward, terminated, truncated, info = env.step(action)
        t0 = clock.add("env", t0)
        obs_t = as_tensor(obs, device)
        buf.obs[step + 1].copy_(agent.observe(obs_t) if buf.normalized else obs_t)
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
                       reward_scale: float | torch.Tensor = 1.0,
                       reward_clip: float | None = None) -> torch.Tensor:
    """GAE advantages ``(num_steps, num_envs)``; ``values`` holds V of ``buf.obs`` (T + 1 rows).
    The rewards learnt from: ``buf.rewards`` times ``reward_scale`` (one factor, or each step's:
    ``(num_steps, num_envs)``), clipped to +-``reward_clip`` when given.

    After an ended step t, step t+1 is NEXT_STEP's reset step: (1 - ended[t]) cuts the
    recursion there (the reset step's own entry is never used: it is masked out of the loss).
    A terminated step does not bootstrap; a truncated one does, from values[t + 1] = V(final
    obs), the observation NEXT_STEP returns on the step an episode ends.
    """
    num_steps, num_envs = buf.rewards.shape
    rewards = buf.rewards * reward_scale
    if reward_clip is not None:
        rewards = rewards.clamp(-reward_clip, reward_clip)
    not_term = (~buf.terminated).float()
    not_ended = (~buf.ended).float()
    deltas = rewards + gamma * values[1:] * not_term - values[:-1]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros(num_envs, device=rewards.device)
    for t in reversed(range(num_steps)):
        advantages[t] = last = deltas[t] + gamma * gae_lambda * not_ended[t] * last
    return advantages


#: normalised rewards are clipped to +-this with ``Args.norm_each_step`` (CleanRL's 10)
REWARD_CLIP = 10.0


def rows(t: torch.Tensor | None, index: torch.Tensor | None) -> torch.Tensor | None:
    """``t``'s rows at ``index`` (all of them for None; None for no ``t``): ``index_select``,
    ~4x faster on CPU than ``t[index]`` for a minibatch of observations."""
    return t if t is None or index is None else t.index_select(0, index)


def update(agent: Agent, optimizer: torch.optim.Optimizer, buf: Rollout, args: Args,
           reward_scale: float | torch.Tensor, generator: torch.Generator,
           epochs: int | None = None) -> dict[str, float]:
    """GAE over the rollout, then ``update_epochs`` passes of clipped-PPO minibatch steps
    (fewer when ``target_kl`` stops them; exactly ``epochs`` when given: the ideal loop
    repeats the real update's count). ``stats["minibatch_steps"]``: gradient steps taken."""
    num_steps, num_envs = buf.rewards.shape
    with torch.no_grad():
        if agent.obs_rms is not None and not buf.normalized:  # update, then use them
            seen = buf.obs[:num_steps].flatten(0, 1)[buf.valid.flatten()]
            agent.obs_rms.update(agent.encode(seen))
        x_all = buf.obs.flatten(0, 1) if buf.normalized else agent.features(
            buf.obs.flatten(0, 1))
        values = agent.get_value(x_all).view(num_steps + 1, num_envs)
        x = x_all[: num_steps * num_envs]
        actions = buf.actions.flatten(0, 1)
        masks = None if buf.masks is None else buf.masks[:num_steps].flatten(0, 1)
        old_logprobs, _, _ = agent.get_action_and_value(x, actions, masks)

        reward_clip = REWARD_CLIP if args.norm_reward and args.norm_each_step else None
        advantages = compute_advantages(buf, values, args.gamma, args.gae_lambda, reward_scale,
                                        reward_clip)
        returns = advantages + values[:-1]

        # keep transitions only: the reset steps never enter the loss
        keep = buf.valid.flatten().nonzero().squeeze(1)
        # the CNN learns: its minibatches start from the frames (x is its output, no grad)
        inputs = x if agent.network is None else buf.obs[:num_steps].flatten(0, 1)
        b_x, b_actions, b_masks = rows(inputs, keep), rows(actions, keep), rows(masks, keep)
        b_logprobs, b_adv = rows(old_logprobs, keep), rows(advantages.flatten(), keep)
        b_returns, b_values = rows(returns.flatten(), keep), rows(values[:-1].flatten(), keep)

    size = keep.shape[0]
    mb_size = max(1, math.ceil(size / args.num_minibatches))
    minibatch_steps = 0
    for _epoch in range(args.update_epochs if epochs is None else epochs):
        minibatches = [None]  # one minibatch: the whole batch, no shuffle nor gather
        if args.num_minibatches > 1:
            order = torch.randperm(size, generator=generator).to(b_x.device)
            minibatches = [order[i:i + mb_size] for i in range(0, size, mb_size)]
        for mb in minibatches:
            mb_x = rows(b_x, mb)
            if agent.network is not None:
                mb_x = agent.features(mb_x)
            newlogprob, entropy, newvalue = agent.get_action_and_value(
                mb_x, rows(b_actions, mb), rows(b_masks, mb),
                with_entropy=args.ent_coef != 0)
            logratio = newlogprob - rows(b_logprobs, mb)
            ratio = logratio.exp()
            adv = rows(b_adv, mb)
            if args.norm_adv and adv.numel() > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio,
                                -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
            mb_returns = rows(b_returns, mb)
            if args.clip_vloss:
                mb_values = rows(b_values, mb)
                v_clipped = mb_values + (newvalue - mb_values).clamp(-args.clip_coef,
                                                                     args.clip_coef)
                v_loss = 0.5 * torch.max((newvalue - mb_returns) ** 2,
                                         (v_clipped - mb_returns) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - mb_returns) ** 2).mean()
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
        return {"approx_kl": approx_kl.item(),
                "clipfrac": ((ratio - 1).abs() > args.clip_coef).float().mean().item(),
                "pg_loss": pg_loss.item(), "v_loss": v_loss.item(),
                "entropy": entropy_loss.item() if entropy is not None else float("nan"),
                "minibatch_steps": minibatch_steps, "epochs": _epoch + 1}


def iterate(env: Any, agent: Agent, optimizer: torch.optim.Optimizer, buf: Rollout,
            books: Bookkeeping, obs: Any, info: dict[str, Any], clock: Clock, *, args: Args,
            generator: torch.Generator, bounds: tuple[torch.Tensor, ...] | None,
            torch_actions: bool, epochs: int | None = None
            ) -> tuple[Any, dict[str, Any], dict[str, float]]:
    """One iteration, the real loop's and the ideal's: a rollout, its bookkeeping (episode
    returns, reward scale) and an update; the env's next obs and info, and the update's stats."""
    obs, info = collect(env, agent, buf, obs, info, clock, bounds, torch_actions)
    t0 = time.perf_counter()
    stats = update(agent, optimizer, buf, args, books.observe(buf), generator, epochs)
    clock.add("learning", t0)
    return obs, info, stats


def ideal_loop(agent: Agent, args: Args, info: dict[str, Any],
               bounds: tuple[torch.Tensor, ...] | None, torch_actions: bool) -> IdealLoop:
    """The ideal loop (``ideal.py``): ``iterate`` against a replayed env, on a copy of ``agent``
    (loaded from it each time) and an optimizer, storage and bookkeeping built as the real ones."""
    twin = copy.deepcopy(agent)  # no draw from training's random stream
    buf = make_rollout(args, twin, info, torch.device(args.device))
    books = Bookkeeping.new(args, buf.obs.device if torch_actions else None)
    run = functools.partial(iterate, args=args, generator=torch.Generator().manual_seed(0),
                            bounds=bounds, torch_actions=torch_actions)
    return IdealLoop(twin, make_optimizer(twin, args), buf, books, run, args.ideal_every,
                     torch_actions)


# --- training ---------------------------------------------------------------------------------


def train(args: Args, on_progress: Callable[[Progress], None] | None = None,
          evaluate_fn: Callable[..., EvalResult] = evaluate,
          on_top_up: Callable[[int, int], None] | None = None) -> tuple[Agent, Summary]:
    """Train PPO on ``args.env_id``; returns the agent and the run's summary.
    ``on_progress``: after every iteration; ``on_top_up(done, wanted)``: while a short run's
    ideal loop tops up after training (``IdealLoop.top_up``).

    Ctrl-C (KeyboardInterrupt) once training has started stops it at once and returns the agent
    and the summary as far as they got (``stop_reason`` "interrupted"); before that (building
    the envs, JIT compiling) it propagates.
    """
    torch.set_num_threads(capped_threads(args.torch_threads))
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(args.seed)

    # -- build and warm up (JIT compile, first touches): reported apart as compile_s
    t_build = time.perf_counter()
    env = make_envs(args, args.num_envs, args.seed)  # spaces the agent has no head for: refused
    eval_env = make_envs(evaluation_args(args), args.eval_episodes,
                         args.seed + EVAL_SEED_OFFSET)  # (ray, subprocess: in this process)
    agent = build_agent(env, args)
    optimizer = make_optimizer(agent, args)
    bounds = box_bounds(env.single_action_space, device)
    next_obs, next_info = env.reset(seed=args.seed)
    torch_actions = isinstance(next_obs, torch.Tensor)
    buf = make_rollout(args, agent, next_info, device)
    warm_up(agent, device, bounds, torch_actions, (env, next_obs, next_info),
            (eval_env, *eval_env.reset()))
    next_obs, next_info = env.reset(seed=args.seed)
    if buf.normalized:  # the reset observations count, as NormalizeObservation's reset does
        agent.observe(as_tensor(next_obs, device))
    ideal = ideal_loop(agent, args, next_info, bounds, torch_actions) if args.ideal_every else None
    compile_s = time.perf_counter() - t_build

    # -- the loop's state (``records``: its clocks, from here on, the curve, the evaluations)
    books = Bookkeeping.new(args, device if torch_actions else None)
    batch = args.num_envs * args.num_steps
    iterations = max(1, args.total_steps // batch)
    stop_reason, steps, stats, final = "steps", 0, {}, None
    records = Records()
    evals = Evaluations(eval_env, agent, args, device, torch_actions, bounds, evaluate_fn, records)
    try:  # Ctrl-C: stop at once, with the agent and the summary as far as they got
        for iteration in range(1, iterations + 1):
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = args.learning_rate * (1 - (iteration - 1)
                                                                        / iterations)
            # -- rollout, bookkeeping, update (timed as the ideal's iterations are)
            with records.timed_iteration():
                next_obs, next_info, stats = iterate(
                    env, agent, optimizer, buf, books, next_obs, next_info, records.clock,
                    args=args, generator=generator, bounds=bounds, torch_actions=torch_actions)
            steps += batch
            # -- the ideal iteration (this one again, the env free): right after it (the same
            # load), before any evaluation (after one, learning took 3% more CPU), off the clock
            if ideal is not None and ideal.due(iteration, iterations):
                records.pause(ideal.iterate(buf, int(stats["epochs"]), agent, optimizer))

            # -- a greedy evaluation, when due (the first complete one at the target: solved)
            result = evals.run(steps) if evals.due(steps, iteration == iterations) else None

            # -- stop at the target or the time limit; log the curve and the progress
            now = records.elapsed()
            if records.solved_at_s is not None and args.stop_at_target:
                stop_reason = "target"
            elif args.time_limit is not None and now >= args.time_limit:
                stop_reason = "time limit"
            progress = records.log(now, steps, books.recent, result, stats,
                                   done=stop_reason != "steps" or iteration == iterations)
            if on_progress is not None:
                on_progress(progress)
            if stop_reason != "steps":
                break
        records.end_loop()

        # -- the final evaluation (the last one, when it ran on the final parameters and
        # finished), and enough ideal iterations for a median and IQR
        final = evals.final(steps)
        if ideal is not None:
            ideal.top_up(buf, int(stats["epochs"]), agent, optimizer, args.ideal_top_up_s,
                         on_top_up)
    except KeyboardInterrupt:
        stop_reason = "interrupted"
    records.end_loop()  # (interrupted within the loop: now)
    env.close()
    eval_env.close()
    return agent, records.summary(args, batch, steps, compile_s, ideal, final, stop_reason)
