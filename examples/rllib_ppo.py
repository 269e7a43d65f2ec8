"""RLlib's PPO on envfleet's native CartPole-v1 (the ``rllib`` extra, in its own venv: RLlib
2.60 pins Gymnasium 1.2.2; ``scripts/test_rllib.sh`` makes ``.venv-rllib``).

Each env runner builds its envs with ``gymnasium.make_vec(..., vectorization_mode=
"vector_entry_point")``: one numba kernel steps all ``--num-envs`` envs of a runner.

    .venv-rllib/bin/python examples/rllib_ppo.py                  # 30 iterations, or 475
    .venv-rllib/bin/python examples/rllib_ppo.py --iterations 1 --num-env-runners 0   # smoke run
"""

from __future__ import annotations

import argparse

from ray.rllib.algorithms.ppo import PPOConfig

#: "module:id": every env runner process imports envfleet, which registers the id
ENV_ID = "envfleet:envfleet/CartPole-v1"


def main(argv: list[str] | None = None) -> list[float]:
    """Train until CartPole-v1's reward threshold or ``--iterations``; the mean returns."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--num-env-runners", type=int, default=1)
    parser.add_argument("--num-envs", type=int, default=64, help="envs per env runner")
    parser.add_argument("--train-batch", type=int, default=4096)
    args = parser.parse_args(argv)

    config = (
        PPOConfig()
        .environment(ENV_ID)
        .env_runners(num_env_runners=args.num_env_runners, num_envs_per_env_runner=args.num_envs,
                     gym_env_vectorize_mode="vector_entry_point")
        .training(train_batch_size_per_learner=args.train_batch, minibatch_size=512,
                  num_epochs=6, lr=3e-4)
        .debugging(seed=0)
    )
    algo = config.build_algo()  # starts a local Ray unless one is running (or RAY_ADDRESS)
    returns = []
    try:
        for iteration in range(1, args.iterations + 1):
            runners = algo.train()["env_runners"]
            returns.append(runners.get("episode_return_mean", float("nan")))
            print(f"iteration={iteration}, steps={runners['num_env_steps_sampled_lifetime']:.0f}, "
                  f"episode_return_mean={returns[-1]:.1f}")
            if returns[-1] >= 475:  # CartPole-v1's reward_threshold
                break
    finally:
        algo.stop()
    return returns


if __name__ == "__main__":
    main()
