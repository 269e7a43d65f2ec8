"""Chess-v0's user-loop gap, profiled: tight loop vs user loop (a policy between steps,
outside the clock) at 512 boards, with the engine's spares (``copy=True`` outputs reusing the
caller's dropped arrays) and without (every copy a fresh array, as before), in alternating
rounds in one process. Per series: plies/s of the steps, the step's time split into the kernel
and the copies handed out, and the minor page faults inside the step. With spares, the mask's
copy is the step kernel's (``copy_info``: inside "kernel"); without, it is the serial copy
after the kernel into a fresh array, as before both.

    python -m benchmarks.scripts.chess_user_gap [--num-envs 512] [--threads 2] [--seconds 1]
        [--rounds 5]

Policies: "light" is the bench's (``random_legal_from_mask``: np.nonzero over the mask);
"heavy" draws with a (N, 4672) float64 temporary per step (``argmax(where(mask, random))``),
as a policy with large arrays does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.chess import build_games, random_legal_from_mask


def heavy(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random legal action per board through (N, 4672) float temporaries."""
    return np.argmax(np.where(mask, rng.random(mask.shape), -1.0), axis=1)


POLICIES = {"light": random_legal_from_mask, "heavy": heavy}


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Timed:
    """One env in one loop: the step's kernel and copies timed apart."""

    def __init__(self, num_envs: int, threads: int, loop: str, spares: bool) -> None:
        self.games = build_games("numba", num_envs, 0, threads)
        engine = self.games.env.unwrapped.engine
        self.parts = {"kernel": 0.0, "copy": 0.0}
        step, copy = engine.step, (engine.copy if spares else (lambda a: a.copy()))
        if not spares:  # the mask copied after the kernel (engine.copy), not by the kernel
            env = self.games.env.unwrapped
            env._copy_info, env._step_options = False, {}

        def timed(name: str, fn: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                out = fn(*args, **kwargs)
                self.parts[name] += time.perf_counter() - t0
                return out
            return call

        engine.step, engine.copy = timed("kernel", step), timed("copy", copy)
        self.loop, self.mask = loop, self.games.reset()
        self.rng = np.random.default_rng(0)

    def run(self, seconds: float) -> dict[str, float]:
        env, games, policy = self.games.env.unwrapped, self.games, POLICIES.get(self.loop)
        self.parts.update(kernel=0.0, copy=0.0)
        calls, step_s, faults, start = 0, 0.0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            actions = env.random_legal_actions() if policy is None else policy(self.mask,
                                                                                self.rng)
            f0, t0 = _faults(), time.perf_counter()
            self.mask = games.play(actions)
            step_s += time.perf_counter() - t0
            faults += _faults() - f0
            calls += 1
        n = games.num_envs if hasattr(games, "num_envs") else self.mask.shape[0]
        return {"plies_per_s": n * calls / step_s, "step_us": 1e6 * step_s / calls,
                "kernel_us": 1e6 * self.parts["kernel"] / calls,
                "copy_us": 1e6 * self.parts["copy"] / calls, "faults_per_step": faults / calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from envfleet.bench.report import cpu_model

    series = {(loop, spares): Timed(args.num_envs, args.threads, loop, spares)
              for loop in ("tight", "light", "heavy") for spares in (False, True)}
    for s in series.values():
        s.run(0.2)  # warm up
    samples: dict[Any, list[dict[str, float]]] = {key: [] for key in series}
    for _ in range(args.rounds):
        for key, s in series.items():
            samples[key].append(s.run(args.seconds))
    out = {"cpu": cpu_model(), "num_envs": args.num_envs, "threads": args.threads,
           "load": os.getloadavg(), "series": []}
    for (loop, spares), rows in samples.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        out["series"].append({"loop": loop, "spares": spares, **med})
        print(f"{loop:5s} spares={'on ' if spares else 'off'} {med['plies_per_s']:>12,.0f} "
              f"plies/s  step {med['step_us']:7.0f} us = kernel {med['kernel_us']:6.0f} + "
              f"copies {med['copy_us']:5.0f} (+ rest); {med['faults_per_step']:6.1f} "
              f"faults/step")
    tight = {s["spares"]: s["plies_per_s"] for s in out["series"] if s["loop"] == "tight"}
    for s in out["series"]:
        if s["loop"] != "tight":
            print(f"tight / {s['loop']} loop, spares {'on' if s['spares'] else 'off'}: "
                  f"{tight[s['spares']] / s['plies_per_s']:.2f}x")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
