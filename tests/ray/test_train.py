"""``envfleet train --backend ray`` on the local 2-node cluster (6 CPUs): the training env may
hold every CPU of the cluster, so the evaluation env runs in this process; ``--num-workers``
and ``--cpus-per-worker`` reach the actors."""

from __future__ import annotations

import json
import time

import pytest

from envfleet.cli import main
from envfleet.native.vector_env import NativeVectorEnv
from envfleet.train import ppo

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("cluster")

TINY = ["--total-steps", "64", "--eval-every", "0", "--eval-episodes", "8", "--quiet"]


def spy_on_envs(monkeypatch) -> list[dict]:
    """Record each env ``ppo.train`` builds: its class, actors and CPUs asked, and the CPUs
    the cluster had free right after it was built."""
    made: list[dict] = []
    real = ppo.make_envs

    def make_envs(args, num_envs, seed):
        env = real(args, num_envs, seed)
        made.append({"backend": args.backend, "env": env.unwrapped,
                     "workers": getattr(env.unwrapped, "num_workers", None),
                     "asks": getattr(getattr(env.unwrapped, "transport", None), "_asks", None),
                     "free_cpus": ray.available_resources().get("CPU", 0.0)})
        return env

    monkeypatch.setattr(ppo, "make_envs", make_envs)
    return made


def test_train_on_ray_with_the_default_evaluation(tmp_path):
    """The default 100 evaluation episodes would ask Ray for 6 actors while 2 train: refused
    before (exit 2); the evaluation runs here, on the native kernel, and training completes."""
    out = tmp_path / "run.json"
    assert main(["train", "CartPole-v1", "--backend", "ray", "--num-envs", "2",
                 "--total-steps", "64", "--eval-every", "0", "--quiet",
                 "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["backend"] == "ray" and summary["total_steps"] == 64
    assert summary["final_eval"]["episodes"] == 100


def test_train_env_takes_every_cpu_and_evaluation_runs_here(monkeypatch, tmp_path):
    made = spy_on_envs(monkeypatch)
    out = tmp_path / "run.json"
    assert main(["train", "CartPole-v1", "--backend", "ray", "--num-envs", "3",
                 "--num-workers", "3", "--cpus-per-worker", "2", *TINY,
                 "--json", str(out)]) == 0
    training, evaluation = made  # built in this order
    assert training["backend"] == "ray" and evaluation["backend"] == "numba"
    assert training["workers"] == 3 and training["asks"] == {"CPU": 2.0}
    assert training["free_cpus"] == 0  # every CPU of the cluster is the training env's
    assert isinstance(evaluation["env"], NativeVectorEnv)  # numba, in this process
    summary = json.loads(out.read_text())
    assert summary["total_steps"] == 63  # 3 envs x 21 steps: the 64-step budget kept
    assert summary["args"]["num_workers"] == 3 and summary["args"]["cpus_per_worker"] == 2.0
    assert free_cpus_become(6)  # closed: every actor gone


def free_cpus_become(cpus: float, within: float = 20.0) -> bool:
    """Whether the cluster's free CPUs reach ``cpus`` within ``within`` seconds (Ray frees a
    killed actor's resources a moment later)."""
    deadline = time.monotonic() + within
    while ray.available_resources().get("CPU", 0.0) != cpus:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
