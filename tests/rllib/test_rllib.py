"""RLlib's PPO (new API stack) on envfleet's native CartPole: each env runner builds its envs
with ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``, i.e. one numba
kernel stepping ``num_envs_per_env_runner`` envs.

Needs the ``rllib`` extra (ray[rllib] pins gymnasium 1.2.2), so it runs in its own venv:
``scripts/test_rllib.sh``. Skipped where RLlib is not installed.
"""

from __future__ import annotations

import os
import runpy

import pytest

pytest.importorskip("ray.rllib", exc_type=ImportError)  # ray without its rllib deps
import ray
from ray.rllib.algorithms.ppo import PPOConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the "module:id" form makes every env runner process import envfleet (which registers the id)
ENV_ID = "envfleet:envfleet/CartPole-v1"
NUM_ENVS = 64


@pytest.fixture(scope="module", autouse=True)
def local_ray(tmp_path_factory):
    """A private local Ray instance for this module (no token auth, small object store)."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
             log_to_driver=False, _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield
    ray.shutdown()


def ppo_config(num_env_runners: int, batch: int) -> PPOConfig:
    """PPO on envfleet's native CartPole, NUM_ENVS envs per runner in one kernel."""
    return (
        PPOConfig()
        .environment(ENV_ID)
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=NUM_ENVS,
                     gym_env_vectorize_mode="vector_entry_point")
        .training(train_batch_size_per_learner=batch, minibatch_size=512, num_epochs=6,
                  lr=3e-4)
        .debugging(seed=0)
    )


def describe_env(runner) -> tuple[str, str, int]:
    """(class, backend, num_envs) of an env runner's vector env, unwrapped."""
    env = runner.env.unwrapped
    return type(env).__name__, getattr(env, "backend", "?"), env.num_envs


def test_remote_env_runner_steps_one_native_kernel():
    """A remote env runner builds envfleet's NativeVectorEnv (numba) with all its envs."""
    algo = ppo_config(num_env_runners=1, batch=1024).build_algo()
    try:
        result = algo.train()
        described = algo.env_runner_group.foreach_env_runner(describe_env, local_env_runner=False)
        assert described == [("NativeVectorEnv", "numba", NUM_ENVS)]
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 1024
    finally:
        algo.stop()


def test_ppo_learns_native_cartpole():
    """RLlib's PPO reaches a mean episode return of 150 on native CartPole within 16 x 4096
    steps (random play scores ~22; measured: ~170 after 7 iterations)."""
    algo = ppo_config(num_env_runners=0, batch=4096).build_algo()
    try:
        returns = []
        for _ in range(16):
            returns.append(algo.train()["env_runners"].get("episode_return_mean", 0.0))
            if returns[-1] >= 150:
                break
        assert describe_env(algo.env_runner) == ("NativeVectorEnv", "numba", NUM_ENVS)
        assert returns[-1] >= 150, returns
        assert returns[0] < 50, returns  # it did learn: the first iteration plays ~randomly
    finally:
        algo.stop()


def test_the_example_trains(capsys):
    """examples/rllib_ppo.py (docs/CLIENTS.md) runs as a user runs it: one iteration on the
    local env runner logs a mean return of native CartPole's episodes."""
    example = runpy.run_path(os.path.join(ROOT, "examples", "rllib_ppo.py"))
    returns = example["main"](["--iterations", "1", "--num-env-runners", "0",
                               "--train-batch", "2048"])
    assert len(returns) == 1 and 1 <= returns[0] <= 500, returns
    assert "iteration=1, steps=" in capsys.readouterr().out
