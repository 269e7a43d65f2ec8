"""MountainCar-v0, exactly as Gymnasium's ``MountainCarEnv`` (float64 state, same clipping).

The arithmetic repeats Gymnasium's ``step`` expression by expression, in the same order, so the
numba backend reproduces its float64 trajectories bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.kernels import (
    NativeEnvSpec,
    ReferenceRenderer,
    as_float,
    clip,
    cos,
    env_uniform,
    env_uniform_torch,
    kernel_function,
    one_value,
    physics_param,
    where,
)

# MountainCarEnv.__init__'s constants
MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.5
FORCE = 0.001
GRAVITY = 0.0025


class MountainCarParams(NamedTuple):
    """Gymnasium's constants, the goal velocity and the reset bounds."""

    min_position: float
    max_position: float
    max_speed: float
    goal_position: float
    goal_velocity: float
    force: float
    gravity: float
    reset_low: float
    reset_high: float


def make_params(*, goal_velocity: float | np.ndarray = 0) -> MountainCarParams:
    """``MountainCarEnv(goal_velocity=...)``: the goal also needs velocity >= goal_velocity
    (one number or a 0-d array of one, or an array of one finite value per env)."""
    goal_velocity = one_value(goal_velocity)
    if isinstance(goal_velocity, np.ndarray | list | tuple):
        return make_params()._replace(
            goal_velocity=physics_param("goal_velocity", goal_velocity))
    if isinstance(goal_velocity, bool) or not isinstance(goal_velocity, (int, float,
                                                                         np.number)):
        raise ValueError(f"goal_velocity must be a real number, got {goal_velocity!r}")
    number = as_float("goal_velocity", goal_velocity)
    if math.isnan(number):
        raise ValueError(f"goal_velocity must be a real number, got {goal_velocity!r}")
    return MountainCarParams(
        min_position=MIN_POSITION,
        max_position=MAX_POSITION,
        max_speed=MAX_SPEED,
        goal_position=GOAL_POSITION,
        goal_velocity=number,
        force=FORCE,
        gravity=GRAVITY,
        reset_low=-0.6,
        reset_high=-0.4,
    )


@kernel_function
def reset_one(i: int, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Position uniform in [-0.6, -0.4), velocity 0, as ``MountainCarEnv.reset``."""
    position, velocity = state
    position[i] = env_uniform(rng, i, 0, params.reset_low, params.reset_high)
    velocity[i] = 0.0
    obs[i, 0] = np.float32(position[i])
    obs[i, 1] = np.float32(0.0)


@kernel_function
def dynamics(p: Any, position: Any, velocity: Any, direction: Any) -> tuple[Any, Any, Any]:
    """``MountainCarEnv.step``'s physics, pushed by ``direction`` (action - 1): the new
    (position, velocity, terminated). One env's numbers in the kernels, whole batches in the
    torch form (``elementwise``)."""
    velocity = velocity + (direction * p.force + cos(3 * position) * (-p.gravity))
    velocity = clip(velocity, -p.max_speed, p.max_speed)  # np.clip
    position = clip(position + velocity, p.min_position, p.max_position)
    velocity = where((position == p.min_position) & (velocity < 0), 0.0, velocity)
    done = (position >= p.goal_position) & (velocity >= p.goal_velocity)
    return position, velocity, done


@kernel_function
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """One step of ``MountainCarEnv.step`` for env i."""
    position_, velocity_ = state
    position, velocity, done = dynamics(params, position_[i], velocity_[i], actions[i] - 1)
    position_[i] = position
    velocity_[i] = velocity
    obs[i, 0] = np.float32(position)
    obs[i, 1] = np.float32(velocity)
    terminated[i] = done
    rewards[i] = -1.0


# --- torch: the same dynamics over the whole batch ------------------------------------------


def reset_torch(mask: Any, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Reset the envs where ``mask`` is set (``rng`` already advanced for them)."""
    import torch

    position, velocity = state
    fresh = env_uniform_torch(rng, 0, params.reset_low, params.reset_high)
    position.copy_(torch.where(mask, fresh, position))
    velocity.masked_fill_(mask, 0.0)
    obs[:, 0] = position
    obs[:, 1] = velocity


def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for every env at once: ``dynamics`` over the whole batch."""
    position, velocity = state
    x, v, done = dynamics(params, position, velocity, (actions - 1).to(position.dtype))
    position.copy_(x)
    velocity.copy_(v)
    obs[:, 0] = x
    obs[:, 1] = v
    terminated.copy_(done)
    rewards.fill_(-1.0)


def _reference_env(params: MountainCarParams) -> Any:
    """Gymnasium's MountainCarEnv that draws the frames (the same goal)."""
    from gymnasium.envs.classic_control.mountain_car import MountainCarEnv

    return MountainCarEnv(render_mode="rgb_array", goal_velocity=params.goal_velocity)


SPEC = NativeEnvSpec(
    writes_every_output=True,  # step_one writes every obs, reward and terminated row
    id="MountainCar-v0",
    observation_space=spaces.Box(np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32),
                                 np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32),
                                 dtype=np.float32),
    action_space=spaces.Discrete(3),
    state={name: (np.float64, ()) for name in ("position", "velocity")},
    make_params=make_params,
    per_env_params=("goal_velocity",),
    max_episode_steps=200,
    reset_one=reset_one,
    step_one=step_one,
    reset_torch=reset_torch,
    step_torch=step_torch,
    # torch on the CPU: peak resident bytes per env beyond the estimate's buffers, measured by
    # tests/test_memory.py (make + reset + 100 steps, every mode and copy; ~2.5 float64 columns)
    torch_temporaries=20,
    reference_id="MountainCar-v0",
    description="under-powered car up a hill (Gymnasium's MountainCarEnv, float64)",
    renderer=ReferenceRenderer(_reference_env, ("position", "velocity"), fps=30),
    # force 2, cos(3 x) 2, gravity term and sums 3, position 1
    flops_per_step=8,
)
