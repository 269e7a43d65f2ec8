#!/usr/bin/env python
"""``backend="ray"`` against the single-machine engines, ratios measured side by side in one run.

    PYTHONPATH=src .venv/bin/python -m benchmarks.scripts.bench_ray [--seconds 2] [--rounds 3]
        [--native-envs 65536] [--out docs/bench]

Starts its own local 2-node Ray cluster (``ray.cluster_utils.Cluster``, ``--cpus-per-node``
logical CPUs each, its own ``RAY_TMPDIR``) and stops it at the end. Cases (each pair
interleaved round by round, the median ratio kept):

- ``latency``: 64 envs whose step sleeps 1 ms (a remote simulator's wait): ray with 8 actors
  (engine ``serial``) vs ``serial`` (target >= 6x);
- ``humanoid``: HumanoidStandup-v5, 16 envs: ray with 2 actors each running a local pool of
  one worker vs one ``pool`` of 2 workers (target >= 0.8x; skipped without MuJoCo);
- ``native``: CartPole-v1, ray with 2 actors of ``--native-envs`` envs each (numba, one
  thread per actor) vs one numba env of twice as many (target >= 0.7x).

Also measures the round trip of an empty actor call (the per-RPC cost in docs/SCALING.md).
Writes ``ray.json`` and ``ray.png`` into ``--out``. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import envfleet


class SleepEnv(gym.Env):
    """Each step sleeps ``delay`` seconds (no CPU); episodes of 200 steps."""

    def __init__(self, delay: float = 0.001) -> None:
        self.delay = delay
        self.observation_space = spaces.Box(-1, 1, (4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, dtype=np.float32), {}

    def step(self, action):
        time.sleep(self.delay)
        self.t += 1
        return np.zeros(4, dtype=np.float32), 1.0, self.t >= 200, False, {}


def steps_per_second(env, seconds: float) -> float:
    """Env steps per second of ``env.step`` with random actions, for about ``seconds``."""
    n = env.num_envs
    rng = np.random.default_rng(0)
    actions = [env.action_space.sample() if not isinstance(env.single_action_space,
                                                           spaces.Discrete)
               else rng.integers(0, env.single_action_space.n, n) for _ in range(8)]
    env.reset(seed=0)
    for k in range(3):
        env.step(actions[k % 8])
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[count % 8])
        count += 1
    return count * n / (time.perf_counter() - start)


def compare(name: str, make_mine, make_ref, seconds: float, rounds: int) -> dict:
    """Interleaved rounds of ray (``make_mine``) and the reference; the median ratio."""
    mine, ref = make_mine(), make_ref()
    try:
        rows = []
        for r in range(rounds):
            a = steps_per_second(mine, seconds)
            b = steps_per_second(ref, seconds)
            rows.append((a, b))
            print(f"  {name} round {r}: ray {a:,.0f} steps/s, reference {b:,.0f} steps/s, "
                  f"ratio {a / b:.2f}", flush=True)
    finally:
        mine.close()
        ref.close()
    ratios = [a / b for a, b in rows]
    return {"ray_steps_per_s": statistics.median(a for a, _ in rows),
            "reference_steps_per_s": statistics.median(b for _, b in rows),
            "ratio": statistics.median(ratios), "ratios": ratios}


def rpc_round_trip(samples: int = 300) -> float:
    """Seconds per call of an empty method on an actor (driver -> actor -> driver)."""
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self, x):
            return x

    actor = Echo.remote()
    ray.get(actor.echo.remote(0))
    start = time.perf_counter()
    for _ in range(samples):
        ray.get(actor.echo.remote(0))
    elapsed = (time.perf_counter() - start) / samples
    ray.kill(actor)
    return elapsed


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k in ("latency", "humanoid", "native") if k in results["cases"]]
    ratios = [results["cases"][k]["ratio"] for k in names]
    targets = [results["cases"][k]["target"] for k in names]
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    x = np.arange(len(names))
    ax.bar(x, ratios, color="tab:blue", label="ray / reference (median)")
    ax.scatter(x, targets, color="tab:red", marker="_", s=900, linewidths=2, label="target")
    ax.set_xticks(x, [results["cases"][k]["label"] for k in names], fontsize=8)
    ax.set_ylabel("throughput ratio")
    ax.set_title(f"backend='ray' on a local 2-node cluster ({results['cpu_count']} cores, "
                 f"{results['cpu_model']})", fontsize=9)
    for xi, r in zip(x, ratios, strict=True):
        ax.text(xi, r, f"{r:.2f}x", ha="center", va="bottom", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--native-envs", type=int, default=65536)
    parser.add_argument("--cpus-per-node", type=int, default=4)
    parser.add_argument("--cases", default="latency,humanoid,native")
    parser.add_argument("--out", default="docs/bench")
    args = parser.parse_args()
    cases = args.cases.split(",")

    import ray
    from ray.cluster_utils import Cluster

    tmp = tempfile.TemporaryDirectory(prefix="envfleet-bench-ray-")
    os.environ["RAY_TMPDIR"] = tmp.name
    os.environ["RAY_AUTH_MODE"] = "disabled"
    src = str(Path(envfleet.__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [src,
                                                             os.environ.get("PYTHONPATH")]))
    store = 200 * 2**20
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": args.cpus_per_node, "object_store_memory": store,
        "include_dashboard": False})
    cluster.add_node(num_cpus=args.cpus_per_node, object_store_memory=store)
    ray.init(address=cluster.address, log_to_driver=False)
    results = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
               "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
               "ray_version": ray.__version__, "nodes": 2,
               "cpus_per_node": args.cpus_per_node, "cases": {}}
    try:
        results["rpc_round_trip_s"] = rpc_round_trip()
        print(f"empty actor call round trip: {results['rpc_round_trip_s'] * 1e3:.2f} ms")
        if "latency" in cases:
            res = compare(
                "latency",
                lambda: envfleet.make(SleepEnv, 64, backend="ray", num_workers=8,
                                      num_cpus=0.5),
                lambda: envfleet.make(SleepEnv, 64, backend="serial"),
                args.seconds, args.rounds)
            results["cases"]["latency"] = {**res, "target": 6.0,
                                           "label": "1 ms/step, 64 envs\n8 actors vs serial"}
        if "humanoid" in cases:
            try:
                gym.make("HumanoidStandup-v5").close()
            except Exception as error:  # no MuJoCo
                print(f"  humanoid skipped: {error}")
            else:
                res = compare(
                    "humanoid",
                    lambda: envfleet.make("HumanoidStandup-v5", 16, backend="ray",
                                          num_workers=2, engine="pool",
                                          engine_options={"num_workers": 1}),
                    lambda: envfleet.make("HumanoidStandup-v5", 16, backend="pool",
                                          num_workers=2),
                    args.seconds, args.rounds)
                results["cases"]["humanoid"] = {
                    **res, "target": 0.8,
                    "label": "HumanoidStandup, 16 envs\n2 actors x pool(1) vs pool(2)"}
        if "native" in cases:
            k = args.native_envs
            res = compare(
                "native",
                lambda: envfleet.make("CartPole-v1", 2 * k, backend="ray", num_workers=2,
                                      engine_options={"num_threads": 1}),
                lambda: envfleet.make("CartPole-v1", 2 * k, backend="numba", num_threads=2),
                args.seconds, args.rounds)
            results["cases"]["native"] = {
                **res, "target": 0.7,
                "label": f"native CartPole\n2 actors x {k} vs numba {2 * k}"}
    finally:
        ray.shutdown()
        cluster.shutdown()
        tmp.cleanup()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ray.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(results, out / "ray.png")
    for name, case in results["cases"].items():
        print(f"{name}: ray / reference = {case['ratio']:.2f}x (target {case['target']}x)")


if __name__ == "__main__":
    main()
