"""Where a training sample's wall-clock goes in ``--study chess-learning``: the learner
(collection forward pass + PPO update) against the env step and the rest, per side and per
learner preset, in one process, alternating short runs (the same machine load for all).

    python -m benchmarks.scripts.chess_learning_costs --rounds 2 --iterations 8 --json costs.json

Each run is ``ppo.train`` for ``--iterations`` iterations of the preset's batch (no judge, no
target); its clocks give µs per sample: ``env`` (the env's step), ``inference`` (the policy's
forward pass while collecting), ``learning`` (the PPO update), ``other`` (the rest of the
loop: bookkeeping, copies). The Amdahl bound of a side's time ratio to native with the same
learner (the same steps to the target) is ``(L + E_side + O_side) / (L + E_native + O_native)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

#: learner variants timed on native Chess-v0 (the preset's, then cheaper ones)
VARIANTS: dict[str, dict[str, Any]] = {
    "preset": {},
    "1 epoch, 1 minibatch": {"update_epochs": 1, "num_minibatches": 1},
    "64x64": {"hidden_sizes": (64, 64)},
    "64x64, 1 epoch, 1 minibatch": {"hidden_sizes": (64, 64), "update_epochs": 1,
                                    "num_minibatches": 1},
    "64x64, 1 epoch, 4 minibatches": {"hidden_sizes": (64, 64), "update_epochs": 1,
                                      "num_minibatches": 4},
    "2 torch threads": {"torch_threads": 2},
}


def one_run(env_id: str, backend: str, iterations: int, env_kwargs: dict | None,
            changes: dict[str, Any]) -> dict[str, float]:
    """µs per sample of each phase of a short ``ppo.train`` run of Chess-v0's preset."""
    from benchmarks.studies.e2e import train_args
    from envfleet.train import ppo

    args = train_args("Chess-v0", env_id, backend, 256, iterations, 0, 1, env_kwargs)
    args = dataclasses.replace(args, anneal_lr=False, **changes)
    _, summary = ppo.train(args)
    steps = summary.total_steps
    train_s = steps / summary.sps_end_to_end
    us = {k: 1e6 * summary.times[k] / steps for k in ("env", "inference", "learning")}
    us["other"] = max(1e6 * train_s / steps - sum(us.values()), 0.0)
    us["total"] = 1e6 * train_s / steps
    return us


def main() -> None:
    """Alternate the sides and variants ``--rounds`` times; print and save the medians."""
    from benchmarks.studies.chess_learning import CONTENDERS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    runs = [(series, env_id, backend, kwargs, {}) for series, env_id, backend, kwargs
            in CONTENDERS]
    runs[1:1] = [(f"native Chess-v0, {name}", "Chess-v0", "numba", None, changes)
                 for name, changes in VARIANTS.items() if changes]
    samples: dict[str, list[dict[str, float]]] = {r[0]: [] for r in runs}
    loads = [os.getloadavg()]
    t0 = time.time()
    for _ in range(options.rounds):
        for name, env_id, backend, kwargs, changes in runs:
            samples[name].append(one_run(env_id, backend, options.iterations, kwargs, changes))
            print(name, {k: round(v, 1) for k, v in samples[name][-1].items()}, flush=True)
        loads.append(os.getloadavg())
    medians = {name: {k: statistics.median(s[k] for s in runs_)
                      for k in runs_[0]} for name, runs_ in samples.items()}
    print(f"\n{platform.processor() or platform.machine()}, load averages {loads}, "
          f"{time.time() - t0:.0f} s")
    print(f"{'series':40s} {'env':>7s} {'infer':>7s} {'learn':>7s} {'other':>7s} {'total':>7s}"
          "  (µs per sample, median)")
    for name, m in medians.items():
        print(f"{name:40s} {m['env']:7.1f} {m['inference']:7.1f} {m['learning']:7.1f} "
              f"{m['other']:7.1f} {m['total']:7.1f}")
    for name, m in medians.items():
        if not name.startswith(CONTENDERS[0][0]):
            continue
        learner = m["inference"] + m["learning"]
        for series, *_ in CONTENDERS[1:]:
            side = medians[series]
            bound = (learner + side["env"] + side["other"]) / (learner + m["env"] + m["other"])
            print(f"Amdahl bound {series} / {name} (learner {learner:.0f} µs): {bound:.2f}x"
                  + (f"; measured {side['total'] / m['total']:.2f}x" if name == CONTENDERS[0][0]
                     else ""))
    if options.json:
        options.json.write_text(json.dumps({"medians": medians, "samples": samples,
                                            "load_averages": loads}, indent=1))


if __name__ == "__main__":
    main()
