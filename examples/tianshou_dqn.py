"""Tianshou's DQN on envfleet's native CartPole-v1: Tianshou's own discrete_dqn.py example
(Tianshou 2.0) with ``import envfleet`` and the task ``envfleet/CartPole-v1``.

Tianshou steps each env in its own worker (``DummyVectorEnv``, ``SubprocVectorEnv``) and resets
finished envs itself, so it takes single envs: ``gymnasium.make("envfleet/CartPole-v1")`` is one
native env (envfleet's dynamics and seeding, Gymnasium's ``TimeLimit``, CartPole-v1's
``reward_threshold`` for ``stop_fn``), not a batch.

    pip install tianshou          # with torch==2.13.0 pinned
    python examples/tianshou_dqn.py                      # 10 epochs of 10k steps, or 475
    python examples/tianshou_dqn.py --task CartPole-v1   # the same on Gymnasium's CartPole
    python examples/tianshou_dqn.py --epochs 1 --epoch-num-steps 500   # a smoke run
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import tianshou as ts
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import CollectStats
from tianshou.trainer import OffPolicyTrainerParams
from tianshou.utils.net.common import Net
from tianshou.utils.space_info import SpaceInfo

import envfleet  # noqa: F401 (registers envfleet/CartPole-v1, ...)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="envfleet/CartPole-v1")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--epoch-num-steps", type=int, default=10_000)
    parser.add_argument("--num-test-envs", type=int, default=100)
    args = parser.parse_args()
    lr, batch_size, num_training_envs = 1e-3, 64, 10
    gamma, n_step, target_freq, buffer_size = 0.9, 3, 320, 20_000
    eps_train, eps_test, collection_step_num_env_steps = 0.1, 0.05, 10

    training_envs = ts.env.DummyVectorEnv([lambda: gym.make(args.task)] * num_training_envs)
    test_envs = ts.env.DummyVectorEnv([lambda: gym.make(args.task)] * args.num_test_envs)
    training_envs.seed(0)
    test_envs.seed(10_000)

    env = gym.make(args.task)
    space_info = SpaceInfo.from_env(env)
    net = Net(state_shape=space_info.observation_info.obs_shape,
              action_shape=space_info.action_info.action_shape, hidden_sizes=[128, 128, 128])
    policy = DiscreteQLearningPolicy(model=net, action_space=env.action_space,
                                     eps_training=eps_train, eps_inference=eps_test)
    algorithm = ts.algorithm.DQN(policy=policy, optim=AdamOptimizerFactory(lr=lr), gamma=gamma,
                                 n_step_return_horizon=n_step, target_update_freq=target_freq)
    training_collector = ts.data.Collector[CollectStats](
        algorithm, training_envs, ts.data.VectorReplayBuffer(buffer_size, num_training_envs),
        exploration_noise=True)
    test_collector = ts.data.Collector[CollectStats](algorithm, test_envs, exploration_noise=True)

    def stop_fn(mean_rewards: float) -> bool:
        threshold = env.spec.reward_threshold  # "solved": 475 for envfleet/CartPole-v1
        return threshold is not None and mean_rewards >= threshold

    result = algorithm.run_training(OffPolicyTrainerParams(
        training_collector=training_collector, test_collector=test_collector,
        max_epochs=args.epochs, epoch_num_steps=args.epoch_num_steps,
        collection_step_num_env_steps=collection_step_num_env_steps,
        test_step_num_episodes=args.num_test_envs, batch_size=batch_size,
        update_step_num_gradient_steps_per_sample=1 / collection_step_num_env_steps,
        stop_fn=stop_fn, test_in_training=True))
    test = test_collector.collect(n_episode=args.num_test_envs, reset_before_collect=True)
    print(f"trained {result.timing.total_time:.1f} s; "
          f"test: mean_return={test.returns_stat.mean:.1f} over {args.num_test_envs} episodes")
    training_envs.close()
    test_envs.close()


if __name__ == "__main__":
    main()
