"""Does PPO see the same game on native Chess-v0 and on python-chess? The chess-learning study's
audit of its two sides, with the trainer's own code (``envfleet train Chess-v0``'s preset).

1. ``--episodes``: one agent (the preset trained ``--agent-steps`` on native Chess-v0, or a
   random init with 0), frozen, collects ``--iterations`` rollouts of 256 boards x 16 steps
   through ``ppo.collect`` on each side (native numba; python-chess in the pool, as the study
   builds them), then GAE as ``ppo.update`` computes it. Under a frozen policy every episode
   starts from the start position with fresh replies, so episodes are independent draws:
   outcome rates (by kind, the draws told apart by their final observation), lengths and
   per-episode means (legal moves, entropy, log-prob of the action taken, value, advantage,
   return, men on the board) are compared with episodes as the unit (a z test, a chi-squared
   over the outcomes, a two-sample Kolmogorov-Smirnov statistic).
2. ``--lockstep``: the preset trained ``--lockstep-steps`` on native Chess-v0, then on
   python-chess boards whose opponent replays the native replies
   (``pychess_env.LockstepVectorEnv``): every output compared, and the parameters at the end.

    python -m benchmarks.scripts.chess_learning_gap --episodes --agent-steps 262144 --iterations 200
    python -m benchmarks.scripts.chess_learning_gap --lockstep --lockstep-steps 524288 --seed 2
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from typing import Any

import numpy as np
import torch

from benchmarks.studies.chess_learning import env_seed
from benchmarks.studies.e2e import train_args
from benchmarks.studies.pychess_env import PYCHESS_IMPORT_ID, LockstepVectorEnv
from envfleet.train import ppo
from envfleet.train.bookkeeping import Clock

SIDES = {"native": ("Chess-v0", "numba"), "python-chess": (PYCHESS_IMPORT_ID, "pool")}
KINDS = ("win", "loss", "stalemate", "threefold", "fifty", "insufficient", "truncated")
MEANS = ("legal", "entropy", "logprob", "value", "advantage", "return", "men")


def preset_args(env_id: str, backend: str, seed: int, steps: int = 4096) -> ppo.Args:
    """The study's settings (the preset, a constant learning rate, no evaluation but the last)
    for training seed ``seed`` (envs and torch seeded ``env_seed(seed, 256)``)."""
    first = env_seed(seed, 256)
    base = train_args("Chess-v0", env_id, backend, 256, max(1, steps // 4096), 0, first, None)
    return dataclasses.replace(base, anneal_lr=False, eval_every=0)


def end_kind(reward: float, terminated: bool, obs: np.ndarray, legal: int) -> str:
    """How an episode ended, from its last step (draws: from the final observation's planes:
    no legal move, the threefold plane, the half-move clock at 100, else insufficient)."""
    if not terminated:
        return "truncated"
    if reward != 0:
        return "win" if reward > 0 else "loss"
    if legal == 0:
        return "stalemate"
    if obs[0, 0, 13] == 1:
        return "threefold"
    return "fifty" if obs[0, 0, 19] >= 1.0 else "insufficient"


def episodes(side: str, state: dict[str, torch.Tensor], iterations: int, seed: int
             ) -> list[tuple]:
    """(length, end kind, *per-episode means) of every episode the frozen agent ends on
    ``side`` in ``iterations`` rollouts."""
    args = preset_args(*SIDES[side], seed)
    env = ppo.make_envs(args, args.num_envs, args.seed)
    agent = ppo.build_agent(env, args)
    agent.load_state_dict(state)
    obs, info = env.reset(seed=args.seed)
    buf = ppo.make_rollout(args, agent, info, torch.device("cpu"))
    torch.manual_seed(args.seed)
    n, clock, out = args.num_envs, Clock(), []
    sums, length = np.zeros((len(MEANS), n)), np.zeros(n)
    for _ in range(iterations):
        obs, info = ppo.collect(env, agent, buf, obs, info, clock, None, False)
        with torch.no_grad():
            t = buf.rewards.shape[0]
            x = agent.features(buf.obs.flatten(0, 1))
            values = agent.get_value(x).view(t + 1, n)
            logprob, entropy, _ = agent.get_action_and_value(
                x[: t * n], buf.actions.flatten(0, 1), buf.masks[:t].flatten(0, 1))
            adv = ppo.compute_advantages(buf, values, args.gamma, args.gae_lambda)
        per = np.stack([buf.masks[:t].sum(-1).numpy(), entropy.view(t, n).numpy(),
                        logprob.view(t, n).numpy(), values[:-1].numpy(), adv.numpy(),
                        (adv + values[:-1]).numpy(), buf.obs[:t, ..., :12].sum((2, 3, 4)).numpy()])
        valid, ended = buf.valid.numpy(), buf.ended.numpy()
        for step in range(t):
            sums += np.where(valid[step], per[:, step], 0.0)
            length += valid[step]
            for i in np.flatnonzero(ended[step]):
                kind = end_kind(float(buf.rewards[step, i]), bool(buf.terminated[step, i]),
                                buf.obs[step + 1, i].numpy(), int(buf.masks[step + 1, i].sum()))
                out.append((length[i], kind, *(sums[:, i] / length[i])))
                sums[:, i], length[i] = 0.0, 0.0
    env.close()
    return out


def ks(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value."""
    grid = np.sort(np.concatenate([a, b]))
    d = float(np.abs(np.searchsorted(np.sort(a), grid, side="right") / len(a)
                     - np.searchsorted(np.sort(b), grid, side="right") / len(b)).max())
    ne = len(a) * len(b) / (len(a) + len(b))
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    p = 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * lam * lam) for j in range(1, 101))
    return d, min(max(p, 0.0), 1.0)


def compare(found: dict[str, list[tuple]]) -> None:
    """Print the two sides' outcome rates and per-episode means, and the tests between them."""
    (na, a), (nb, b) = found.items()
    kinds = {s: np.array([e[1] for e in eps]) for s, eps in found.items()}
    count = {s: len(eps) for s, eps in found.items()}
    print(f"episodes: {na} {count[na]}, {nb} {count[nb]}")
    chi2 = 0.0
    for kind in KINDS:
        c = {s: int((kinds[s] == kind).sum()) for s in found}
        pooled = sum(c.values()) / sum(count.values())
        se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * sum(1 / count[s] for s in found))
        chi2 += sum((c[s] - pooled * count[s]) ** 2 / max(pooled * count[s], 1e-9) for s in found)
        ra, rb = c[na] / count[na], c[nb] / count[nb]
        print(f"  {kind:12s} {ra:.4f} ({c[na]:5d})  {rb:.4f} ({c[nb]:5d})  "
              f"z = {(ra - rb) / se:+.2f}")
    print(f"  chi-squared over the {len(KINDS)} outcomes: {chi2:.2f} (df {len(KINDS) - 1}, "
          f"5% critical value 12.59)")
    for k, name in enumerate(("length", *MEANS)):
        col = 0 if k == 0 else k + 1
        x, y = np.array([e[col] for e in a]), np.array([e[col] for e in b])
        z = (x.mean() - y.mean()) / math.sqrt(x.var() / len(x) + y.var() / len(y) + 1e-300)
        d, p = ks(x, y)
        print(f"  {name:10s} {x.mean():+10.5f}  {y.mean():+10.5f}  z = {z:+.2f}  "
              f"KS D = {d:.4f} p = {p:.3g}")


def lockstep(steps: int, seed: int) -> None:
    """Train on native Chess-v0, then in lock step on python-chess; print what differed."""
    args = preset_args("Chess-v0", "numba", seed, steps)
    made: dict[str, Any] = {}
    real_make_envs = ppo.make_envs

    def make_envs(a: ppo.Args, n: int, s: int) -> Any:
        if n == a.num_envs and made.get("lockstep"):
            made["env"] = LockstepVectorEnv(n, s, **a.env_kwargs)
            return made["env"]
        return real_make_envs(a, n, s)

    agents, seconds = [], []
    ppo.make_envs = make_envs  # train() builds its envs through this module's name
    try:
        for made["lockstep"] in (False, True):
            t0 = time.perf_counter()
            agents.append(ppo.train(args)[0].state_dict())
            seconds.append(time.perf_counter() - t0)
    finally:
        ppo.make_envs = real_make_envs
    env = made["env"]
    equal = all(torch.equal(agents[0][k], agents[1][k]) for k in agents[0])
    print(f"{steps:,} steps, seed {seed}: native {seconds[0]:.0f} s, lock step {seconds[1]:.0f} "
          f"s; {env.steps:,} lock-step batches, {len(env.mismatches)} with an output that "
          f"differed {env.mismatches[:5]}; parameters bit for bit equal: {equal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", action="store_true", help="the frozen-agent comparison")
    parser.add_argument("--lockstep", action="store_true", help="the lock-step training run")
    parser.add_argument("--agent-steps", type=int, default=262_144)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--lockstep-steps", type=int, default=524_288)
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    if opts.episodes:
        args = preset_args("Chess-v0", "numba", opts.seed, opts.agent_steps)
        if opts.agent_steps:
            state = ppo.train(args)[0].state_dict()
        else:
            env = ppo.make_envs(args, 2, args.seed)
            torch.manual_seed(args.seed)
            state = ppo.build_agent(env, args).state_dict()
            env.close()
        found = {}
        for side in SIDES:
            t0 = time.perf_counter()
            found[side] = episodes(side, state, opts.iterations, opts.seed)
            print(f"{side}: {time.perf_counter() - t0:.0f} s", flush=True)
        compare(found)
    if opts.lockstep:
        lockstep(opts.lockstep_steps, opts.seed)


if __name__ == "__main__":
    main()
