"""The ideal loop: the real training loop's iteration again against an env that costs nothing,
timed as the real one is: what end-to-end training would reach if the env cost nothing (an
upper bound of ``envfleet train``'s end-to-end steps/s).

``ReplayEnv`` gives back the real rollout's observations, rewards, episode ends and action
masks, so the same transitions are kept and the same numbers go through the network.
``IdealLoop`` runs ``ppo.iterate`` (the real loop's own rollout, bookkeeping and update) on a
twin agent and optimizer loaded with the real ones' parameters and Adam state before each
iteration, with the real update's epoch count; ``ppo.ideal_loop`` builds it. One ideal
iteration runs right after each of the first ``IDEAL_MIN_ITERATIONS`` real ones, then after
every ``ideal_every`` (and the last), before any evaluation: the same machine load and cache
state. A run shorter than that tops up after training, for at most ``Args.ideal_top_up_s``
seconds. Its time is kept off the training clock; the ideal draws nothing from training's random
stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from envfleet.train.bookkeeping import Bookkeeping, Clock

#: timed ideal iterations at least, for the median and IQR of a short run
IDEAL_MIN_ITERATIONS = 7


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

    def load(self, buf: Any) -> None:
        """Replay ``buf`` (a ``ppo.Rollout``) from its first step on (copied into buffers kept
        between loads)."""
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
        """Step t's outputs of the replayed rollout (``actions`` are ignored)."""
        t = self.t
        self.t = (t + 1) % len(self.steps["rewards"])
        return (self.steps["obs"][t + 1], self.steps["rewards"][t], self.steps["terminated"][t],
                self.steps["truncated"][t], self._info(t + 1))


class IdealLoop:
    """The real loop's last iteration again, against ``ReplayEnv``, on an agent, optimizer,
    storage and bookkeeping of its own (``agent``, ``optimizer``, ``buf``, ``books``: built as
    the real ones are). ``run(env, agent, optimizer, buf, books, obs, info, clock, epochs=)``
    is the real loop's iteration (rollout, bookkeeping, update; returns the next obs, info
    and the update's stats); ``every``: ``Args.ideal_every``; ``torch_obs``: the env gives
    tensors (its replay does too).

    ``times``: the timed iterations' seconds (wall, and ``cpu_times`` thread CPU, of rollout,
    bookkeeping and update, as the real loop times its own); ``clock`` their time per phase;
    ``last_stats`` the last update's statistics.
    """

    def __init__(self, agent: torch.nn.Module, optimizer: torch.optim.Optimizer, buf: Any,
                 books: Bookkeeping, run: Callable[..., tuple[Any, Any, dict[str, float]]],
                 every: int, torch_obs: bool) -> None:
        self.agent, self.optimizer, self.buf, self.books = agent, optimizer, buf, books
        self.run, self.every = run, every
        self.env = ReplayEnv(torch_obs)
        self.times: list[float] = []
        self.cpu_times: list[float] = []
        self.clock = Clock()
        self.last_stats: dict[str, float] = {}

    def due(self, iteration: int, last: int) -> bool:
        """Whether an ideal iteration follows real iteration ``iteration`` (1-based) of
        ``last``: each of the first ``IDEAL_MIN_ITERATIONS``, every ``every``-th, the last."""
        return (iteration <= IDEAL_MIN_ITERATIONS or iteration == last
                or iteration % self.every == 0)

    def sync(self, agent: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
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

    def iterate(self, real: Any, epochs: int, agent: torch.nn.Module,
                optimizer: torch.optim.Optimizer) -> float:
        """One ideal iteration from ``agent``'s and ``optimizer``'s current state, replaying the
        real rollout ``real`` and updating for ``epochs`` epochs (the real update's); its timed
        part is kept; returns all the seconds it took, the copying included."""
        t_all = time.perf_counter()
        self.sync(agent, optimizer)
        self.env.load(real)
        torch.logical_not(real.valid[0], out=self.buf.prev_ended)  # the same first step kept
        device = self.buf.obs.device
        clock = Clock()
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            t0, cpu0 = time.perf_counter(), time.thread_time()  # training's stream untouched
            _, _, self.last_stats = self.run(self.env, self.agent, self.optimizer, self.buf,
                                             self.books, self.env.obs, self.env.info, clock,
                                             epochs=epochs)
            spent, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        self.times.append(spent)
        self.cpu_times.append(cpu)
        for phase, seconds in clock.seconds.items():
            self.clock.seconds[phase] += seconds
        return time.perf_counter() - t_all

    def top_up(self, real: Any, epochs: int, agent: torch.nn.Module,
               optimizer: torch.optim.Optimizer, seconds: float,
               on_iteration: Callable[[int, int], None] | None = None) -> None:
        """A short run: the last iteration again until ``IDEAL_MIN_ITERATIONS`` are timed
        (enough for a median and IQR), starting none that would end past ``seconds``.
        ``on_iteration(done, wanted)``: before the first and after each (a progress bar)."""
        wanted = IDEAL_MIN_ITERATIONS - len(self.times)
        if wanted <= 0:
            return
        t0, last = time.perf_counter(), max(self.times, default=0.0)
        for done in range(wanted):
            if on_iteration is not None:
                on_iteration(done, wanted)
            if time.perf_counter() - t0 + last > seconds:  # the next one would overrun
                return
            last = self.iterate(real, epochs, agent, optimizer)
        if on_iteration is not None:
            on_iteration(wanted, wanted)
