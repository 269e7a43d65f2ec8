"""CartPole-v1 on numba at 65,536 envs: steps/s of two source trees, interleaved.

Per-env parameters must not slow down the scalar path: this times the same step loop with
``envfleet`` imported from each tree in turn (each round a fresh process per tree, so both see
the same machine load), and prints the per-round ratio. ``--masspole-array`` also times the
per-env variant (masspole given as an array) in the tree that has it.

    python -m benchmarks.scripts.bench_per_env_params --trees /tmp/before/src src --rounds 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

NUM_ENVS = 65_536


def measure(steps: int, per_env: bool) -> float:
    """Steps/s of CartPole-v1 (numba, default threads) over ``steps`` batch steps."""
    import numpy as np

    import envfleet

    kwargs = {"masspole": np.full(NUM_ENVS, 0.1)} if per_env else {}
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", copy=False, **kwargs)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, (64, NUM_ENVS))
    for k in range(20):  # compile and warm up
        env.step(actions[k % 64])
    start = time.perf_counter()
    for k in range(steps):
        env.step(actions[k % 64])
    return steps * NUM_ENVS / (time.perf_counter() - start)


def run_tree(src: str, steps: int, per_env: bool) -> float:
    """``measure`` in a fresh process importing envfleet from ``src``."""
    env = dict(os.environ, PYTHONPATH=src, ENVFLEET_QUIET="1")
    out = subprocess.run([sys.executable, __file__, "--child", str(steps), str(int(per_env))],
                         env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, metavar=("BEFORE", "AFTER"), required=True,
                        help="two src/ directories to import envfleet from")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--masspole-array", action="store_true",
                        help="also time AFTER with masspole as a per-env array")
    args = parser.parse_args()
    before, after = args.trees
    ratios, rows = [], []
    for r in range(args.rounds):
        order = [before, after] if r % 2 == 0 else [after, before]  # alternate who goes first
        result = {tree: run_tree(tree, args.steps, False) for tree in order}
        if args.masspole_array:
            result["per-env"] = run_tree(after, args.steps, True)
        ratio = result[after] / result[before]
        ratios.append(ratio)
        rows.append(result)
        extra = f", per-env masspole {result['per-env'] / 1e6:.1f}M" if args.masspole_array \
            else ""
        print(f"round {r}: before {result[before] / 1e6:.1f}M steps/s, after "
              f"{result[after] / 1e6:.1f}M, ratio after/before {ratio:.3f}{extra}", flush=True)
    print(f"median ratio after/before: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {args.rounds} rounds")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(measure(int(sys.argv[2]), bool(int(sys.argv[3])))))
    else:
        main()
