"""DQN from Tianshou 2.0 on envfleet's native CartPole-v1, with Tianshou's own vector envs.

Tianshou steps each env in a worker of its own (``DummyVectorEnv``, ``SubprocVectorEnv``) and
resets finished envs itself, so it takes single envs: ``gymnasium.make("envfleet/CartPole-v1")``
is one native env (envfleet's dynamics and seeding, Gymnasium's ``TimeLimit`` and CartPole-v1's
``reward_threshold``, which stops training here once the greedy policy reaches it), not a batch.

    pip install tianshou                                  # with torch==2.13.0 pinned
    python examples/tianshou_dqn.py                       # up to 10 epochs of 10k steps
    python examples/tianshou_dqn.py --task CartPole-v1    # the same on Gymnasium's CartPole
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

import envfleet  # noqa: F401 (registers envfleet/CartPole-v1 and the other native ids)


def vector_env(task: str, count: int, seed: int) -> ts.env.DummyVectorEnv:
    """``count`` single envs of ``task``, stepped one after another by Tianshou."""
    envs = ts.env.DummyVectorEnv([lambda: gym.make(task) for _ in range(count)])
    envs.seed(seed)
    return envs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="envfleet/CartPole-v1")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--epoch-num-steps", type=int, default=10_000)
    parser.add_argument("--num-train-envs", type=int, default=8)
    parser.add_argument("--num-test-envs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    train_envs = vector_env(args.task, args.num_train_envs, args.seed)
    test_envs = vector_env(args.task, args.num_test_envs, args.seed + 10_000)
    spec = gym.spec(args.task)
    probe = gym.make(args.task)  # for its spaces
    q_net = Net(state_shape=probe.observation_space.shape, action_shape=probe.action_space.n,
                hidden_sizes=[128, 128])
    policy = DiscreteQLearningPolicy(model=q_net, action_space=probe.action_space,
                                     eps_training=1.0, eps_inference=0.0)
    dqn = ts.algorithm.DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.99,
                           n_step_return_horizon=3, target_update_freq=500)
    train_collector = ts.data.Collector[CollectStats](
        dqn, train_envs, ts.data.VectorReplayBuffer(50_000, args.num_train_envs),
        exploration_noise=True)
    test_collector = ts.data.Collector[CollectStats](dqn, test_envs)  # greedy

    total_steps = args.epochs * args.epoch_num_steps

    def decay_epsilon(epoch: int, env_step: int) -> None:
        """Epsilon from 1 down to 0.05 over the first half of the steps, then kept there."""
        policy.set_eps_training(max(0.05, 1.0 - 0.95 * env_step / (0.5 * total_steps)))

    def solved(mean_return: float) -> bool:
        return spec.reward_threshold is not None and mean_return >= spec.reward_threshold

    result = dqn.run_training(OffPolicyTrainerParams(
        training_collector=train_collector, test_collector=test_collector,
        max_epochs=args.epochs, epoch_num_steps=args.epoch_num_steps,
        collection_step_num_env_steps=16, update_step_num_gradient_steps_per_sample=0.25,
        batch_size=64, test_step_num_episodes=args.num_test_envs, training_fn=decay_epsilon,
        stop_fn=solved, show_progress=False))
    test = test_collector.collect(n_episode=args.num_test_envs, reset_before_collect=True)
    print(f"trained {result.timing.total_time:.1f} s; "
          f"test: mean_return={test.returns_stat.mean:.1f} over {args.num_test_envs} episodes")
    train_envs.close()
    test_envs.close()


if __name__ == "__main__":
    main()
