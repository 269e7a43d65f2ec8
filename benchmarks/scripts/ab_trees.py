"""Before/after speed of two source trees, in alternating fresh processes on one machine.

``python -m benchmarks.scripts.ab_trees --before /tmp/old/src --after src [--rounds 5] [--json F]``

Each round runs one child process per tree (``PYTHONPATH`` set to the tree, the order swapped
every round) that measures the bench ratios a refactor must leave unchanged: CartPole-v1 on
``numba`` against ``torch`` (4,096 envs), the ``pool`` executor against Gymnasium's
``SyncVectorEnv`` (Gymnasium's CartPole-v1, 64 envs, 2 workers) and Chess-v0 on ``numba`` (512
boards, random legal moves drawn outside the clock). Prints the median of each figure per tree
and the after/before ratio, so a change is judged against the spread of alternating runs, not
against a number taken on another day. Make the old tree with ``git archive <commit> src | tar
-x -C /tmp/old``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, time
import numpy as np
import gymnasium as gym
import envfleet

def rate(env, actions, seconds, per_step):
    env.reset(seed=0)
    for _ in range(3):
        env.step(actions())
    steps, spent = 0, 0.0
    while spent < seconds:
        a = actions()
        t = time.perf_counter()
        env.step(a)
        spent += time.perf_counter() - t
        steps += 1
    env.close()
    return steps * per_step / spent

out = {}
rng = np.random.default_rng(0)
for backend in ("numba", "torch"):
    env = envfleet.make("CartPole-v1", 4096, backend=backend, seed=0)
    acts = lambda: rng.integers(0, 2, 4096)
    if backend == "torch":
        import torch
        acts = lambda: torch.from_numpy(rng.integers(0, 2, 4096))
    out[f"cartpole_{backend}"] = rate(env, acts, SECONDS, 4096)
out["cartpole_numba_over_torch"] = out["cartpole_numba"] / out["cartpole_torch"]

pool = envfleet.make("CartPole-v1", 64, backend="pool", num_workers=2, seed=0)
out["pool"] = rate(pool, lambda: rng.integers(0, 2, 64), SECONDS, 64)
sync = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 64)
out["gym_sync"] = rate(sync, lambda: rng.integers(0, 2, 64), SECONDS, 64)
out["pool_over_sync"] = out["pool"] / out["gym_sync"]

chess = envfleet.make("Chess-v0", 512, backend="numba", seed=0)
_, info = chess.reset(seed=0)
state = {"mask": info["action_mask"]}
def legal():
    keys = rng.random(state["mask"].shape) * state["mask"]
    return keys.argmax(axis=1)
step = chess.step
def stepping(a):
    state["mask"] = step(a)[4]["action_mask"]
chess.step = stepping
out["chess_numba"] = rate(chess, legal, SECONDS, 512)
print("RESULT " + json.dumps(out))
"""


def child(tree: str, seconds: float) -> dict[str, float]:
    """One fresh process measuring every figure on ``tree``."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    code = CHILD.replace("SECONDS", repr(seconds))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"the child on {tree} failed:\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the old tree's src directory")
    parser.add_argument("--after", default="src", help="the new tree's src directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5, help="clocked time per figure")
    parser.add_argument("--json", help="write every round's figures here")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for side in order:
            runs[side].append(child(getattr(args, side), args.seconds))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    keys = list(runs["before"][0])
    print(f"{'figure':28} {'before':>12} {'after':>12} {'after/before':>12}")
    for key in keys:
        b = statistics.median(run[key] for run in runs["before"])
        a = statistics.median(run[key] for run in runs["after"])
        print(f"{key:28} {b:12.4g} {a:12.4g} {a / b:12.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
