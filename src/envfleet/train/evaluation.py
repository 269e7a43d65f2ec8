"""Greedy evaluation: the first episode of every env of a batched env, played at once, stopped
as soon as the target is out of reach; and a run's evaluations (when they are due, their
records, when the target was reached)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from envfleet.train.bookkeeping import Records
from envfleet.train.envs import action_mask, as_tensor, env_actions

#: the evaluation envs' seed is the run's seed plus this (the training envs get the seed itself)
EVAL_SEED_OFFSET = 10_000


@dataclass
class EvalResult:
    """One evaluation's outcome."""

    mean_return: float
    episodes: int  # episodes played out (fewer when stopped early)
    complete: bool  # False: stopped once the target was out of reach
    returns: list[float]
    seconds: float


@torch.inference_mode()
def evaluate(env: Any, agent: Any, seed: int, device: torch.device, torch_actions: bool,
             action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
             target: float | None = None, max_episode_return: float | None = None,
             greedy: bool = True, max_step_reward: float | None = None) -> EvalResult:
    """Greedy returns of ``agent`` (a ``ppo.Agent``) over the first episode of each of
    ``env.num_envs`` envs, played at once (``greedy=False``: actions sampled from the policy).

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
        obs, reward, terminated, truncated, info = env.step(
            env_actions(action, action_bounds, torch_actions))
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
        if target is not None and not done.all() and best_total(
                totals, done, max_episode_return, max_step_reward) < target * n:
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


class Evaluations:
    """A run's greedy evaluations of ``agent`` on ``env`` (``args.eval_episodes`` envs, seeded
    ``args.seed + EVAL_SEED_OFFSET``) with ``evaluate_fn``: due every ``args.eval_every``
    steps and after the last iteration, each timed on the run's clock ("evaluation") and
    recorded in its ``records`` at ``records.elapsed()`` seconds of training; the first
    complete one at ``args.target_return`` or above marks the run solved."""

    def __init__(self, env: Any, agent: Any, args: Any, device: torch.device,
                 torch_actions: bool, bounds: tuple[torch.Tensor, ...] | None,
                 evaluate_fn: Callable[..., EvalResult], records: Records) -> None:
        self.env, self.agent, self.args, self.device = env, agent, args, device
        self.torch_actions, self.bounds, self.evaluate_fn = torch_actions, bounds, evaluate_fn
        self.records = records
        self.last: EvalResult | None = None
        self.last_step = 0

    def due(self, steps: int, last_iteration: bool) -> bool:
        """Whether an evaluation follows the iteration that reached ``steps``."""
        every = self.args.eval_every
        return (every > 0 and steps - self.last_step >= every) or last_iteration

    def run(self, steps: int) -> EvalResult:
        """An evaluation after ``steps`` (stopped once the target is out of reach)."""
        args, records = self.args, self.records
        self.last_step, self.last = steps, self._evaluate(steps, args.target_return)
        if (args.target_return is not None and self.last.complete
                and self.last.mean_return >= args.target_return and records.solved_at_s is None):
            records.solved_at_s, records.solved_at_steps = records.elapsed(), steps
        return self.last

    def final(self, steps: int) -> EvalResult:
        """The last evaluation, when it ran on the final parameters (at ``steps``) and
        finished; else one that plays every episode out."""
        if self.last is None or not self.last.complete or self.last_step != steps:
            self.last = self._evaluate(steps, None)
        return self.last

    def _evaluate(self, steps: int, target: float | None) -> EvalResult:
        args = self.args
        t0 = time.perf_counter()
        result = self.evaluate_fn(self.env, self.agent, args.seed + EVAL_SEED_OFFSET,
                                  self.device, self.torch_actions, self.bounds, target,
                                  args.max_episode_return, max_step_reward=args.max_step_reward)
        self.records.clock.add("evaluation", t0)
        self.records.evaluations.append({
            "steps": steps, "seconds": self.records.elapsed(), "mean_return": result.mean_return,
            "complete": result.complete, "episodes": result.episodes, "eval_s": result.seconds})
        return result
