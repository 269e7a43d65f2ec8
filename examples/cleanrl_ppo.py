"""PPO for discrete actions on an envfleet batch, in one file, written for envfleet.

It is laid out as CleanRL's ``ppo.py`` is (a dataclass of arguments, an ``Agent`` with
``get_value`` and ``get_action_and_value``, (num_steps, num_envs) storage, one loop of rollout,
GAE and clipped updates) so that a CleanRL user finds their way around. The two places that
differ from a Gymnasium 0.29 script are marked ``envfleet:`` (docs/CLIENTS.md#cleanrl):

1. the envs: one native kernel steps all of them, in SameStep autoreset mode, inside Gymnasium
   1.x's vector ``RecordEpisodeStatistics``;
2. the episode logging: Gymnasium 1.x reports finished episodes in ``info["episode"]``, arrays
   over the envs, with the mask ``info["_episode"]``.

    python examples/cleanrl_ppo.py                                  # 500k steps of CartPole-v1
    python examples/cleanrl_ppo.py --total-timesteps 1024 --num-steps 64   # a smoke run

TensorBoard logging (``runs/``) is on where ``tensorboard`` is installed (``--no-tensorboard``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

import envfleet


@dataclass
class Args:
    env_id: str = "CartPole-v1"  # a native envfleet id (envfleet.list_envs())
    seed: int = 1
    cuda: bool = True  # use a GPU when torch sees one
    tensorboard: bool = importlib.util.find_spec("tensorboard") is not None
    total_timesteps: int = 500_000
    num_envs: int = 4
    num_steps: int = 128  # steps per env per rollout
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True  # linearly down to 0 over the run
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


def parse_args() -> Args:
    """``--kebab-case`` flags for the fields of ``Args`` (``--no-cuda`` for a boolean)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Args):
        flag = "--" + field.name.replace("_", "-")
        if isinstance(field.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default)
        else:
            parser.add_argument(flag, type=type(field.default), default=field.default)
    return Args(**vars(parser.parse_args()))


def mlp(inputs: int, outputs: int, last_gain: float) -> nn.Sequential:
    """Two tanh layers of 64, orthogonally initialised; ``last_gain`` scales the output layer."""
    layers = [nn.Linear(inputs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
              nn.Linear(64, outputs)]
    for layer in layers:
        if isinstance(layer, nn.Linear):
            gain = last_gain if layer is layers[-1] else np.sqrt(2)
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


class Agent(nn.Module):
    """Separate policy and value networks over the flattened observation."""

    def __init__(self, obs_size: int, num_actions: int) -> None:
        super().__init__()
        self.actor = mlp(obs_size, num_actions, last_gain=0.01)  # near-uniform at the start
        self.critic = mlp(obs_size, 1, last_gain=1.0)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """(action, its log-probability, the policy's entropy, the value) for a batch of obs;
        samples the action unless one is given (the update re-scores stored actions)."""
        dist = Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.get_value(obs)


def main() -> None:
    args = parse_args()
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    log = lambda tag, value, step: None  # noqa: E731 (TensorBoard's add_scalar, or nothing)
    if args.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        log = SummaryWriter(f"runs/{args.env_id}__ppo__{args.seed}__{int(time.time())}").add_scalar

    # envfleet: (1) SameStep autoreset, so that an episode's last step already returns the next
    # episode's first observation (Gymnasium 0.29's behaviour, which the GAE below assumes);
    # under 1.x's default, NextStep, the step after `done` would be a reset step with reward 0
    # and an ignored action, trained on as if it were a real transition
    envs = gym.wrappers.vector.RecordEpisodeStatistics(
        envfleet.make(args.env_id, args.num_envs, autoreset_mode="SameStep"))
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "discrete actions only"
    obs_shape = envs.single_observation_space.shape
    agent = Agent(int(np.prod(obs_shape)), int(envs.single_action_space.n)).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # one rollout: row t holds what was seen, chosen and got at step t of every env;
    # ends[t] says that step t ended the env's episode (obs[t + 1] is then a new episode's)
    shape = (args.num_steps, args.num_envs)
    obs = torch.zeros(shape + obs_shape, device=device)
    actions = torch.zeros(shape, dtype=torch.long, device=device)
    logprobs, rewards, ends, values = (torch.zeros(shape, device=device) for _ in range(4))

    global_step, start = 0, time.time()
    next_obs = torch.as_tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32, device=device)
    for iteration in range(num_iterations):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1 - iteration / num_iterations)

        for t in range(args.num_steps):
            obs[t] = next_obs
            with torch.no_grad():
                actions[t], logprobs[t], _, values[t] = agent.get_action_and_value(next_obs)
            next_obs, reward, terminated, truncated, infos = envs.step(actions[t].cpu().numpy())
            global_step += args.num_envs
            next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
            rewards[t] = torch.as_tensor(reward, device=device)
            ends[t] = torch.as_tensor(terminated | truncated, device=device)

            # envfleet: (2) one dict of arrays over the envs; "_episode" marks those that ended
            # (Gymnasium 0.29 gave a list of per-env dicts in infos["final_info"] instead)
            if "episode" in infos:
                for i in np.flatnonzero(infos["_episode"]):
                    print(f"global_step={global_step}, episodic_return={infos['episode']['r'][i]}")
                    log("charts/episodic_return", infos["episode"]["r"][i], global_step)
                    log("charts/episodic_length", infos["episode"]["l"][i], global_step)

        # generalised advantage estimation, from the last step back; an episode's end cuts
        # the bootstrap (truncations too, as CleanRL does)
        with torch.no_grad():
            advantages = torch.zeros_like(rewards)
            following_value = agent.get_value(next_obs)
            carried = torch.zeros(args.num_envs, device=device)
            for t in reversed(range(args.num_steps)):
                alive = 1.0 - ends[t]
                delta = rewards[t] + args.gamma * following_value * alive - values[t]
                carried = delta + args.gamma * args.gae_lambda * alive * carried
                advantages[t] = carried
                following_value = values[t]
            returns = advantages + values

        flat = {"obs": obs.reshape((batch_size, -1)), "actions": actions.reshape(-1),
                "logprobs": logprobs.reshape(-1), "advantages": advantages.reshape(-1),
                "returns": returns.reshape(-1)}
        clipped = []
        for _ in range(args.update_epochs):
            for idx in torch.randperm(batch_size, device=device).split(minibatch_size):
                mb = {key: value[idx] for key, value in flat.items()}
                _, logprob, entropy, value = agent.get_action_and_value(mb["obs"], mb["actions"])
                log_ratio = logprob - mb["logprobs"]
                ratio = log_ratio.exp()
                adv = (mb["advantages"] - mb["advantages"].mean()) / (mb["advantages"].std() + 1e-8)
                # the clipped surrogate: the pessimistic one of the two objectives
                policy_loss = -torch.min(
                    ratio * adv, ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef) * adv).mean()
                value_loss = 0.5 * (value - mb["returns"]).pow(2).mean()
                loss = policy_loss + args.vf_coef * value_loss - args.ent_coef * entropy.mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean()  # k3 estimator of KL(old||new)
                    clipped.append(((ratio - 1).abs() > args.clip_coef).float().mean().item())

        sps = int(global_step / (time.time() - start))
        print(f"SPS: {sps}")
        for tag, value in (("charts/SPS", sps), ("charts/learning_rate",
                                                 optimizer.param_groups[0]["lr"]),
                           ("losses/policy_loss", policy_loss.item()),
                           ("losses/value_loss", value_loss.item()),
                           ("losses/entropy", entropy.mean().item()),
                           ("losses/approx_kl", approx_kl.item()),
                           ("losses/clipfrac", float(np.mean(clipped)))):
            log(tag, value, global_step)
    envs.close()


if __name__ == "__main__":
    main()
