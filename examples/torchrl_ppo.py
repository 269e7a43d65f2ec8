"""TorchRL's PPO on envfleet's native CartPole-v1: one batched env (``GymWrapper`` over
``envfleet.make``, batch size ``[num_envs]``), TorchRL's collector, GAE and ``ClipPPOLoss``.

TorchRL resets envs itself: it takes a vector env whose autoreset mode is ``Disabled`` (its
preferred mode; resets go through ``options={"reset_mask": ...}``) or ``SameStep``, and refuses
Gymnasium 1.x's default ``NextStep``.

    pip install torchrl          # with torch==2.13.0 pinned
    python examples/torchrl_ppo.py                          # 50k frames: returns 500
    python examples/torchrl_ppo.py --total-frames 2048      # a smoke run
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.envs import GymWrapper, RewardSum, TransformedEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

import envfleet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-frames", type=int, default=50_000)
    parser.add_argument("--num-envs", type=int, default=8)
    args = parser.parse_args()
    frames_per_batch, minibatch, epochs = 32 * args.num_envs, 64, 10
    torch.manual_seed(0)

    # envfleet: one native kernel steps all envs; TorchRL asks for Disabled autoreset
    env = TransformedEnv(
        GymWrapper(envfleet.make("CartPole-v1", args.num_envs, autoreset_mode="Disabled",
                                 seed=0)),
        RewardSum())  # ("next", "episode_reward"): each episode's return so far
    n_obs, n_actions = env.observation_spec["observation"].shape[-1], env.action_spec.shape[-1]

    actor = ProbabilisticActor(
        TensorDictModule(MLP(in_features=n_obs, out_features=n_actions, num_cells=[64, 64],
                             activation_class=nn.Tanh), in_keys=["observation"],
                         out_keys=["logits"]),
        in_keys=["logits"], spec=env.action_spec, distribution_class=OneHotCategorical,
        return_log_prob=True)
    value = ValueOperator(MLP(in_features=n_obs, out_features=1, num_cells=[64, 64],
                              activation_class=nn.Tanh), in_keys=["observation"])
    collector = Collector(env, actor, frames_per_batch=frames_per_batch,
                          total_frames=args.total_frames, auto_register_policy_transforms=True)
    buffer = ReplayBuffer(storage=LazyTensorStorage(frames_per_batch),
                          sampler=SamplerWithoutReplacement(), batch_size=minibatch)
    advantage = GAE(gamma=0.98, lmbda=0.8, value_network=value, average_gae=True)
    loss = ClipPPOLoss(actor, value, clip_epsilon=0.2, entropy_coeff=0.0)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)

    frames = 0
    for batch in collector:
        frames += batch.numel()
        for _ in range(epochs):
            with torch.no_grad():
                advantage(batch)
            buffer.extend(batch.reshape(-1))
            for _ in range(frames_per_batch // minibatch):
                losses = loss(buffer.sample())
                total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                optim.zero_grad()
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
                optim.step()
        ended = batch["next", "done"].squeeze(-1)
        returns = batch["next", "episode_reward"].squeeze(-1)[ended]
        if len(returns):
            print(f"frames={frames}, episodes={len(returns)}, "
                  f"mean_return={returns.mean().item():.1f}")
    collector.shutdown()
    env.close()


if __name__ == "__main__":
    main()
