"""Saving and loading a trained policy: ``save`` writes the agent's weights with the settings
that rebuild it; ``read_checkpoint`` loads such a file safely (``weights_only``) and checks,
before anything is built from it, that its architecture fields match its weights."""

from __future__ import annotations

import os
import re
import reprlib
from dataclasses import asdict
from typing import Any

import torch

from envfleet.train.bookkeeping import jsonable
from envfleet.train.nets import ACTIVATIONS
from envfleet.train.ppo import Agent, Args


def save(agent: Agent, args: Args, path: str) -> None:
    """The agent's weights and the settings needed to rebuild it (an OSError naming ``path``
    and why, when it cannot be written)."""
    with open(path, "wb") as file:
        torch.save({"args": jsonable(asdict(args)), "state_dict": agent.state_dict()}, file)


def read_checkpoint(path: str, device: str = "cpu") -> dict[str, Any]:
    """What ``save`` wrote at ``path`` (its ``args`` and ``state_dict``, tensors loaded with
    ``weights_only``); a ValueError saying so for anything else, including architecture fields
    that do not match the weights (checked before anything is built from them)."""
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty, not a policy saved by envfleet train --save")
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # not a torch file, truncated, or pickled objects
        first = next(iter(str(error).splitlines()), "")
        raise ValueError(f"{path} is not a policy saved by envfleet train --save "
                         f"({type(error).__name__}{': ' + first if first else ''})") from None
    if not (isinstance(saved, dict) and isinstance(saved.get("args"), dict)
            and "env_id" in saved["args"] and isinstance(saved.get("state_dict"), dict)):
        raise ValueError(f"{path} is not a policy saved by envfleet train --save "
                         "(no args and state_dict in it)")
    why = architecture_problem(saved["args"], saved["state_dict"])
    if why is not None:
        raise ValueError(f"{path} is not a policy saved by envfleet train --save ({why})")
    return saved


def architecture_problem(args: dict[str, Any], weights: dict[Any, Any]) -> str | None:
    """Why a checkpoint's ``args`` and ``state_dict`` are not what ``save`` writes, or None:
    ``env_id`` a string, ``activation`` one of ``ACTIVATIONS``, ``norm_obs`` a bool, tensors
    only, and ``hidden_sizes`` the widths of the actor's and critic's hidden layers as they are
    in the weights, each layer taking the one before (so building the agent allocates no more
    than the file holds, but for its first layer's inputs: the env's observation size)."""
    short = reprlib.Repr()  # a crafted value is quoted briefly
    short.maxstring, short.maxother, short.maxlist = 60, 60, 8
    if not isinstance(args["env_id"], str):
        return f"env_id {short.repr(args['env_id'])} is not a string"
    activation = args.get("activation", "tanh")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        return (f"activation {short.repr(activation)} is not one of "
                f"{', '.join(map(repr, ACTIVATIONS))}")
    if not isinstance(args.get("norm_obs"), bool):
        return f"norm_obs {short.repr(args.get('norm_obs'))} is not true or false"
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
        return "its state_dict holds something other than named tensors"
    hidden = args.get("hidden_sizes")
    if not (isinstance(hidden, list | tuple)
            and all(type(h) is int and h >= 1 for h in hidden)):
        return f"hidden_sizes {short.repr(hidden)} is not a list of positive ints"
    for net in ("critic", "actor"):
        layers = sorted((int(m.group(1)), w) for k, w in weights.items()
                        if (m := re.fullmatch(rf"{net}\.(\d+)\.weight", k)))
        shapes = [tuple(w.shape) for _, w in layers]
        chained = all(len(shape) == 2 for shape in shapes) and all(
            shapes[i][1] == shapes[i - 1][0] for i in range(1, len(shapes)))
        if (not chained or len(shapes) != len(hidden) + 1
                or [shape[0] for shape in shapes[:-1]] != list(hidden)):
            return (f"hidden_sizes {short.repr(list(hidden))} do not match its {net}'s layers "
                    f"(weights {short.repr(shapes)})")
    return None


def agent_from(saved: dict[str, Any], env: Any, device: str = "cpu") -> Agent:
    """The agent of a checkpoint (``read_checkpoint``) for ``env``'s spaces; a ValueError
    naming both shapes when they do not fit."""
    saved_args = saved["args"]
    agent = Agent(env.single_observation_space, env.single_action_space,
                  tuple(saved_args["hidden_sizes"]), saved_args["norm_obs"],
                  saved_args.get("activation", "tanh"),
                  cnn=saved_args.get("cnn", False) is True).to(device)
    agent.legal_logits = bool(saved_args.get("legal_logits", False))  # the same policy, faster
    try:
        agent.load_state_dict(saved["state_dict"])
    except RuntimeError:
        weights = saved["state_dict"]
        critic = weights.get("critic.0.weight")
        actor = [w for k, w in weights.items() if k.startswith("actor.") and k.endswith("weight")]
        inputs = "?" if critic is None else critic.shape[1]
        outputs = actor[-1].shape[0] if actor else "?"
        raise ValueError(
            f"the policy does not fit this env: it was trained on {saved_args['env_id']} "
            f"({inputs} observation numbers in, {outputs} action outputs); this env has "
            f"observations {env.single_observation_space} and actions "
            f"{env.single_action_space} (another env, or other env options?)") from None
    return agent


def load(path: str, env: Any, device: str = "cpu") -> tuple[Agent, dict[str, Any]]:
    """An agent saved by ``save``, for ``env``'s spaces, and its saved settings."""
    saved = read_checkpoint(path, device)
    return agent_from(saved, env, device), saved["args"]
