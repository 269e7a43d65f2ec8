"""The trainer's side of an env: build it for ``Args``, refuse spaces the agent has no head for,
turn what it gives (NumPy arrays or tensors, action masks, Box bounds) into tensors and the
policy's actions into what it takes, and warm it up before the clocks start."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces

from envfleet.executors.base import EnvWorkerError
from envfleet.train.args import is_native


class EnvBuildError(ValueError):
    """The env cannot be built with these settings (an option it refuses, a package its
    maker needs): the message names the env and why."""


class UnsupportedSpaceError(ValueError):
    """A space this trainer has no policy for (the message names it)."""


def make_envs(args: Any, num_envs: int, seed: int) -> Any:
    """``num_envs`` envs for ``args`` (a ``ppo.Args``; NEXT_STEP; zero-copy outputs where the
    env offers it; the executor's workers and their CPUs where given); an env whose spaces the
    agent has no head for is closed and refused (``UnsupportedSpaceError`` naming the env and
    the space). The evaluation env: ``make_envs(evaluation_args(args), ...)``
    (``train.args``)."""
    import envfleet

    backend, kwargs = args.backend, dict(args.env_kwargs)
    if num_envs != args.num_envs and backend == "subprocess":
        backend = "serial"  # evaluation: no 100 processes for 100 episodes
    for key, option in (("num_workers", "num_workers"), ("cpus_per_worker", "num_cpus")):
        if getattr(args, key, None) is not None:
            kwargs[option] = getattr(args, key)
    numba_env = backend == "numba" or (backend == "auto" and is_native(args.env_id))
    if numba_env and args.env_threads is not None:
        kwargs.setdefault("num_threads", args.env_threads)
    try:
        env = envfleet.make(args.env_id, num_envs, backend=backend, seed=seed, copy=False,
                            **kwargs)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError):
        raise
    except (ValueError, TypeError, ImportError, gymnasium.error.Error, EnvWorkerError) as error:
        raise EnvBuildError(f"cannot build {args.env_id} ({backend} backend): {error}") from error
    try:  # refused before anything else starts
        check_spaces(env.single_observation_space, env.single_action_space)
    except UnsupportedSpaceError as error:
        env.close()
        raise UnsupportedSpaceError(f"{args.env_id}: {error}") from None
    return env


def check_spaces(obs_space: spaces.Space, action_space: spaces.Space) -> None:
    """Refuse spaces the agent cannot handle, naming them: observations must be a Box or
    MultiBinary (flattened) or Discrete (one-hot), actions Discrete (categorical policy) or a
    1-D float Box (Gaussian policy)."""
    if not isinstance(obs_space, spaces.Box | spaces.MultiBinary | spaces.Discrete):
        raise UnsupportedSpaceError(
            f"envfleet train takes Box, MultiBinary or Discrete observations, not {obs_space}")
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise UnsupportedSpaceError(
                f"envfleet train takes Discrete actions starting at 0, not {action_space}")
        return
    if isinstance(action_space, spaces.Box):
        if len(action_space.shape) != 1 or not np.issubdtype(action_space.dtype, np.floating):
            raise UnsupportedSpaceError(
                f"envfleet train's Gaussian policy takes a 1-D float Box of actions, not "
                f"{action_space}")
        return
    raise UnsupportedSpaceError(
        f"envfleet train takes Discrete actions (categorical policy) or a 1-D float Box "
        f"(Gaussian policy), not {action_space}")


def as_tensor(x: Any, device: torch.device) -> torch.Tensor:
    """A tensor over ``x`` (NumPy: shares memory on CPU; a tensor on ``device``: itself)."""
    return x if isinstance(x, torch.Tensor) and x.device == device else torch.as_tensor(
        x, device=device)


def action_mask(info: dict[str, Any], device: torch.device) -> torch.Tensor | None:
    """``info["action_mask"]`` as a bool tensor (Gymnasium's Taxi gives int8 0/1), or None."""
    mask = info.get("action_mask")
    if mask is None:
        return None
    mask = as_tensor(mask, device)
    return mask if mask.dtype == torch.bool else mask != 0


def box_bounds(space: spaces.Space, device: torch.device) -> tuple[torch.Tensor, ...] | None:
    """A Box's low and high as tensors on ``device`` (actions are clipped into them when
    stepping), or None for any other space."""
    if not isinstance(space, spaces.Box):
        return None
    return (torch.as_tensor(space.low, dtype=torch.float32, device=device),
            torch.as_tensor(space.high, dtype=torch.float32, device=device))


def env_actions(action: torch.Tensor, bounds: tuple[torch.Tensor, ...] | None,
                torch_actions: bool) -> Any:
    """The policy's ``action`` as the env takes it: clipped into its Box (``bounds``, from
    ``box_bounds``), and a NumPy array unless the env takes tensors (``torch_actions``; on a
    CUDA device, once the policy's queued work is done: a clock started next times the env's
    work, not the policy's)."""
    if bounds is not None:
        action = torch.clamp(action, *bounds)
    if not torch_actions:
        return action.cpu().numpy()
    if action.is_cuda:
        torch.cuda.synchronize(action.device)
    return action


@torch.inference_mode()
def warm_up(agent: Any, device: torch.device, bounds: tuple[torch.Tensor, ...] | None,
            torch_actions: bool, *envs: tuple[Any, Any, dict[str, Any]]) -> None:
    """One step of each of ``envs`` (each given as ``(env, obs, info)``, what its reset
    returned) with ``agent``'s sampled, legal actions: JIT compiling and first touches happen
    here, before training's clocks start."""
    for env, obs, info in envs:
        action = agent.sample(agent.features(as_tensor(obs, device)), action_mask(info, device))
        env.step(env_actions(action, bounds, torch_actions))
