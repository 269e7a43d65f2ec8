"""Stable-Baselines3's PPO on envfleet's native CartPole-v1 (the ``sb3`` extra).

``envfleet.sb3.to_sb3`` is a real SB3 ``VecEnv`` (SAME_STEP autoreset, ``terminal_observation``
in infos); ``VecMonitor`` gives SB3 its episode statistics (``rollout/ep_rew_mean``, and
``evaluate_policy``'s returns), as ``Monitor`` does inside ``make_vec_env``.

    python examples/sb3_ppo.py                          # 100k steps: evaluates at 500
    python examples/sb3_ppo.py --total-timesteps 2048   # a smoke run
"""

from __future__ import annotations

import argparse

from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

import envfleet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=8)
    args = parser.parse_args()

    env = VecMonitor(envfleet.sb3.to_sb3("CartPole-v1", args.num_envs, seed=0))
    # rl-zoo's CartPole-v1 hyperparameters (n_envs=8), as docs/TRAINING.md's comparison uses
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                n_epochs=20, ent_coef=0.0, learning_rate=0.001, clip_range=0.2, seed=0,
                verbose=1)
    model.learn(total_timesteps=args.total_timesteps)
    mean, std = evaluate_policy(model, env, n_eval_episodes=10)
    print(f"evaluation: mean_return={mean:.1f} +/- {std:.1f} over 10 episodes")
    env.close()


if __name__ == "__main__":
    main()
