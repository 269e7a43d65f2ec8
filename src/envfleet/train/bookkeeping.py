"""What the training loops keep besides the policy: the clocks, each env's episode returns, the
running return scale of ``norm_reward``, and the run's records (its wall clock, the learning
curve, ``Progress`` after every iteration, ``Summary`` at the end, and the steps/s of timed
iterations)."""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch


class Clock:
    """Accumulated seconds per phase (env, inference, learning, evaluation)."""

    def __init__(self) -> None:
        self.seconds = {"env": 0.0, "inference": 0.0, "learning": 0.0, "evaluation": 0.0}

    def add(self, phase: str, since: float) -> float:
        """Count the seconds from ``since`` to now for ``phase``; return now."""
        now = time.perf_counter()
        self.seconds[phase] += now - since
        return now


class RewardScaler:
    """Running std of the discounted return, per env (as Gymnasium's NormalizeReward)."""

    def __init__(self, num_envs: int, gamma: float) -> None:
        self.gamma, self.ret = gamma, np.zeros(num_envs)
        self.count, self.mean, self.var = 1e-4, 0.0, 1.0

    def _fold(self, returns: np.ndarray) -> None:
        """Fold a step's discounted returns (one per env that stepped) into the statistics."""
        if returns.size:
            n, m, v = returns.size, returns.mean(), returns.var()
            delta, total = m - self.mean, self.count + n
            self.mean += delta * n / total
            self.var = (self.var * self.count + v * n + delta**2 * self.count * n / total) \
                / total
            self.count = total

    def observe(self, rewards: np.ndarray, ended: np.ndarray, valid: np.ndarray) -> float:
        """Feed a rollout's rewards; return the scale for them (1 / std)."""
        for t in range(rewards.shape[0]):
            self.ret = np.where(valid[t], self.ret * self.gamma + rewards[t], self.ret)
            self._fold(self.ret[valid[t]])
            self.ret[ended[t]] = 0.0
        return 1.0 / math.sqrt(self.var + 1e-8)

    def observe_each_step(self, rewards: np.ndarray, terminated: np.ndarray,
                          valid: np.ndarray) -> np.ndarray:
        """Feed a rollout's rewards; return each step's scale ``(num_steps, num_envs)``, the
        one Gymnasium's ``NormalizeReward`` divides that step's reward by: the return is
        discounted across truncations and restarts at a terminated step (with its reward),
        and folded in before the step is scaled. NEXT_STEP's reset steps (not ``valid``) are
        no steps of an env: they change nothing."""
        scales = np.empty(rewards.shape)
        for t in range(rewards.shape[0]):
            carried = self.gamma * (1.0 - terminated[t])
            self.ret = np.where(valid[t], self.ret * carried + rewards[t], self.ret)
            self._fold(self.ret[valid[t]])
            scales[t] = 1.0 / math.sqrt(self.var + 1e-8)
        return scales


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
    each_step: bool = False  # ``norm_each_step``: a reward scale per step

    @classmethod
    def new(cls, args: Any, device: torch.device | None = None) -> Bookkeeping:
        """For ``args`` (a ``ppo.Args``); ``device``: keep the running returns there (an env
        giving tensors on it)."""
        scaler = RewardScaler(args.num_envs, args.gamma) if args.norm_reward else None
        if device is None:
            ep_return: np.ndarray | torch.Tensor = np.zeros(args.num_envs)
        else:  # float64 as NumPy's, where the device has it (MPS does not)
            dtype = torch.float32 if device.type == "mps" else torch.float64
            ep_return = torch.zeros(args.num_envs, dtype=dtype, device=device)
        return cls(ep_return, deque(maxlen=100), scaler, args.norm_each_step)

    def observe(self, buf: Any) -> float | torch.Tensor:
        """Count the rollout's (a ``ppo.Rollout``) ended episodes; return the reward scale for
        ``update`` (``each_step``: each step's, a tensor on the rollout's device)."""
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
        if self.each_step:
            scales = self.reward_scaler.observe_each_step(
                rewards, buf.terminated.cpu().numpy(), buf.valid.cpu().numpy())
            return torch.as_tensor(scales, dtype=buf.rewards.dtype, device=buf.rewards.device)
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


def median_rate(seconds: list[float], batch: int) -> float:
    """Steps/s of the median of ``seconds`` (iterations of ``batch`` steps; nan if none)."""
    return batch / float(np.median(seconds)) if seconds else float("nan")


def iqr_rates(seconds: list[float], batch: int) -> tuple[float, float]:
    """Steps/s of the 75th and 25th percentile of ``seconds`` (nan, nan if none)."""
    if not seconds:
        return (float("nan"), float("nan"))
    q1, q3 = np.percentile(seconds, [25, 75])
    return (batch / q3, batch / q1)


def jsonable(x: Any) -> Any:
    """``x`` with tuples as lists and anything not JSON as its repr (a run's ``args``)."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    return x if isinstance(x, int | float | str | bool | type(None)) else repr(x)


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
    """A training run's record (``envfleet train --json`` writes it, with a few more fields)."""

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


@dataclass
class Records:
    """What the training loop records as it goes: its clock (``clock``: seconds per phase;
    ``elapsed()``: the wall seconds of training so far), the learning curve, the evaluations,
    each real iteration's wall and thread CPU seconds (timed as the ideal's), when the target
    was reached, the loop's wall clock once it ended; ``summary`` turns them into the run's
    ``Summary``."""

    clock: Clock = field(default_factory=Clock)
    curve: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    iteration_s: list[float] = field(default_factory=list)
    iteration_cpu: list[float] = field(default_factory=list)
    solved_at_s: float | None = None
    solved_at_steps: int | None = None
    start: float = field(default_factory=time.perf_counter)  # moved on by time kept off
    wall_s: float | None = None  # the loop's wall clock (set by end_loop)
    loop_eval_s: float = 0.0  # the evaluations within wall_s (not the final one)

    def elapsed(self) -> float:
        """Wall seconds of training so far, evaluations included (``pause``d time not)."""
        return time.perf_counter() - self.start

    def pause(self, seconds: float) -> None:
        """Keep ``seconds`` just spent (an ideal iteration) off the training clock."""
        self.start += seconds

    def end_loop(self) -> None:
        """Stop the loop's wall clock (the first call counts: later ones change nothing)."""
        if self.wall_s is None:
            self.wall_s, self.loop_eval_s = self.elapsed(), self.clock.seconds["evaluation"]

    @contextlib.contextmanager
    def timed_iteration(self) -> Iterator[None]:
        """Time the block as one real iteration (wall and thread CPU seconds, as the ideal
        loop times its own); an iteration interrupted by an exception is not kept."""
        t0, cpu0 = time.perf_counter(), time.thread_time()
        yield
        self.iteration_s.append(time.perf_counter() - t0)
        self.iteration_cpu.append(time.thread_time() - cpu0)

    def log(self, seconds: float, steps: int, recent: deque, result: Any,
            stats: dict[str, float], done: bool) -> Progress:
        """Add the point after ``steps`` (``seconds`` of training) to the learning curve: the
        mean return of the ``recent`` training episodes, and of the evaluation that just ran
        (``result``, an ``EvalResult``, or None); the ``Progress`` for ``train``'s caller,
        with steps/s env-only and end-to-end (the wall clock but evaluations)."""
        episodic_return = float(np.mean(recent)) if recent else None
        eval_return = None if result is None else result.mean_return
        self.curve.append({"steps": steps, "seconds": seconds,
                           "episodic_return": episodic_return, "eval_return": eval_return})
        times = self.clock.seconds
        return Progress(steps, seconds, episodic_return, eval_return,
                        steps / max(times["env"], 1e-9), steps / (seconds - times["evaluation"]),
                        dict(times), stats, done=done,
                        eval_complete=result is None or result.complete)

    def summary(self, args: Any, batch: int, steps: int, compile_s: float, ideal: Any,
                final: Any, stop_reason: str) -> Summary:
        """The run's summary (after ``end_loop``): ``args`` (a ``ppo.Args``), ``steps`` taken
        in iterations of ``batch``, the ``IdealLoop`` (or None), the final evaluation (an
        ``EvalResult``, or None) and why training stopped; end-to-end steps/s leave out the
        evaluations within the loop's wall clock."""
        clock, wall_s = self.clock, self.wall_s
        sps_e2e = steps / max(wall_s - self.loop_eval_s, 1e-9)
        ideal_s, ideal_cpu = (ideal.times, ideal.cpu_times) if ideal else ([], [])
        sps_ideal, ideal_iqr = median_rate(ideal_s, batch), iqr_rates(ideal_s, batch)
        return Summary(
            args=jsonable(asdict(args)), solved_at_s=self.solved_at_s,
            solved_at_steps=self.solved_at_steps, compile_s=compile_s, total_steps=steps,
            wall_s=wall_s, sps_env=steps / max(clock.seconds["env"], 1e-9), sps_ideal=sps_ideal,
            sps_ideal_iqr=ideal_iqr, ideal_iterations=len(ideal_s), sps_end_to_end=sps_e2e,
            efficiency=sps_e2e / sps_ideal, times=dict(clock.seconds),
            final_eval_return=None if final is None else final.mean_return,
            final_eval=None if final is None else {
                "mean_return": final.mean_return, "episodes": final.episodes,
                "returns": final.returns},
            curve=self.curve, evaluations=self.evaluations, stop_reason=stop_reason,
            sps_iteration=median_rate(self.iteration_s, batch),
            sps_iteration_iqr=iqr_rates(self.iteration_s, batch),
            cpu_per_iteration={"real": _median(self.iteration_cpu), "ideal": _median(ideal_cpu)},
            ideal_times={k: v / len(ideal_s) for k, v in ideal.clock.seconds.items()
                         if k != "evaluation"} if ideal_s else {},
            above_ideal=bool(sps_e2e > ideal_iqr[1]))


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")
