"""Time and steps to the chess-learning target (greedy win rate 0.4 vs random, 200 games) on
native Chess-v0 for learner presets, over disjoint training seeds (``chess_learning.env_seed``).

    python -m benchmarks.scripts.chess_learning_presets --variant preset --seeds 1,2,3
        --out runs.jsonl
    python -m benchmarks.scripts.chess_learning_presets --variant "64x64, 1 epoch, 1 minibatch" ...

One JSON line per run (``chess_learning.learn``'s row without its curve, plus the load
averages). Steps to the target do not depend on the machine's load; seconds do (compare them
only for runs made side by side, or multiply steps by ``chess_learning_costs.py``'s µs/step).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks.scripts.chess_learning_costs import VARIANTS


def main() -> None:
    """Train each seed of ``--variant`` to the target or ``--steps``; one JSON line each."""
    from benchmarks.studies.chess_learning import learn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, default="preset")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=1_638_400)
    parser.add_argument("--seconds", type=float, default=900.0)
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    for seed in map(int, options.seeds.split(",")):
        load0 = os.getloadavg()
        row = learn("Chess-v0", "numba", options.seconds, seed=seed, steps=options.steps,
                    changes=VARIANTS[options.variant])
        record = {"variant": options.variant, "load_before": load0,
                  "load_after": os.getloadavg(),
                  **{k: v for k, v in row.items() if k != "points"},
                  "curve": [(p["steps"], p["seconds"], p["win_rate"]) for p in row["points"]]}
        with options.out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(options.variant, seed, record["target_steps"], record["target_s"], flush=True)


if __name__ == "__main__":
    main()
