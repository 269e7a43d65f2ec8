"""MountainCarContinuous-v0, exactly as Gymnasium's ``Continuous_MountainCarEnv``.

Gymnasium's arithmetic here mixes precisions, and the kernels follow it value by value:

- its state is a float64 array right after ``reset`` (``np.array([uniform, 0])``) and a float32
  array after every step (``np.array([position, velocity], dtype=np.float32)``), so the first
  step of an episode computes in float64 and the others in float32. The state columns hold
  float64 values; ``fresh`` says which case applies (set by ``reset_one``, cleared by a step);
- ``force = min(max(action[0], min_action), max_action)`` is the float32 action when it is in
  range, else the Python float bound, so ``force * power`` is a float32 or a float64 product;
- a float32 combined with a Python float (``velocity += ...``, ``position > max_position``)
  computes in float32 (NumPy's NEP 50: Python numbers are weak), a float64 with anything in
  float64; a clamp assigns the Python float (``velocity = max_speed``), which later combines
  as a Python float.

The reward uses the unclipped action: ``100`` on reaching the goal, minus ``0.1 * action**2``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.kernels import (
    NativeEnvSpec,
    ReferenceRenderer,
    as32,
    clip,
    cos,
    env_uniform,
    env_uniform_torch,
    kernel_function,
    physics_param,
    where,
)


class MountainCarContinuousParams(NamedTuple):
    """Gymnasium's constants (``goal_velocity`` is the one the env takes as an argument)."""

    goal_velocity: float
    min_action: float
    max_action: float
    min_position: float
    max_position: float
    max_speed: float
    goal_position: float
    power: float


def make_params(*, goal_velocity: float | np.ndarray = 0.0) -> MountainCarContinuousParams:
    """``Continuous_MountainCarEnv(goal_velocity=...)``'s constants (a finite real number, or
    an array of one per env, compared with the velocity as Gymnasium compares a Python
    number)."""
    return MountainCarContinuousParams(
        goal_velocity=physics_param("goal_velocity", goal_velocity), min_action=-1.0,
        max_action=1.0, min_position=-1.2, max_position=0.6, max_speed=0.07,
        goal_position=0.45, power=0.0015)


_LOW = np.array([-1.2, -0.07], dtype=np.float32)
_HIGH = np.array([0.6, 0.07], dtype=np.float32)


@kernel_function
def reset_one(i: int, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Position uniform in [-0.6, -0.4), velocity 0 (a float64 state, as Gymnasium's)."""
    position, velocity, fresh = state
    position[i] = env_uniform(rng, i, 0, -0.6, -0.4)
    velocity[i] = 0.0
    fresh[i] = True
    obs[i, 0] = np.float32(position[i])
    obs[i, 1] = np.float32(0.0)


@kernel_function
def dynamics(p: Any, position: Any, velocity: Any, wide: Any,
             action: Any) -> tuple[Any, Any, Any, Any]:
    """``Continuous_MountainCarEnv.step``'s physics under ``action`` (the float32 action's
    value, as a float64): the new (position, velocity, terminated, reward). ``wide``: the
    state is float64 (the first step after a reset), else float32. Each float32 operation is
    the float64 one rounded (``as32``: exact for a product or sum of two float32 values), a
    float32 meeting a Python float rounds the float first (NEP 50). One env's numbers in the
    kernels, whole batches in the torch form (``elementwise``)."""
    angle = where(wide, 3 * position, as32(3 * position))  # np.float32(3) * float32 position
    c = 0.0025 * cos(angle)
    clipped = (action < p.min_action) | (action > p.max_action)
    # force: the Python float bound (float64 arithmetic) or the float32 action (float32)
    term = where(clipped, clip(action, p.min_action, p.max_action) * p.power - c,
                 as32(as32(action * as32(p.power)) - as32(c)))
    velocity = where(wide, velocity + term, as32(velocity + as32(term)))
    # a clamp assigns the Python float: *_py says the value combines as one from then on
    v_hi = velocity > where(wide, p.max_speed, as32(p.max_speed))
    v_lo = velocity < where(wide, -p.max_speed, as32(-p.max_speed))
    velocity = where(v_hi, p.max_speed, where(v_lo, -p.max_speed, velocity))
    velocity_py = v_hi | v_lo
    position = where(wide, position + velocity, as32(position + as32(velocity)))
    x_hi = position > where(wide, p.max_position, as32(p.max_position))
    x_lo = position < where(wide, p.min_position, as32(p.min_position))
    position = where(x_hi, p.max_position, where(x_lo, p.min_position, position))
    exact = wide | x_hi | x_lo  # the position is a float64 or a Python float
    stop = (position == where(exact, p.min_position, as32(p.min_position))) & (velocity < 0)
    velocity = where(stop, 0.0, velocity)
    velocity_py = velocity_py | stop
    done = (position >= where(exact, p.goal_position, as32(p.goal_position))) & (
        velocity >= where(wide | velocity_py, p.goal_velocity, as32(p.goal_velocity)))
    reward = where(done, 100.0, 0.0) - action * action * 0.1  # math.pow(action[0], 2) * 0.1
    return position, velocity, done, reward


@kernel_function
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """One step of ``Continuous_MountainCarEnv.step`` for env i."""
    position_, velocity_, fresh_ = state
    a = np.float64(actions[i, 0])
    if fresh_[i]:  # each case compiled apart (the selects on ``wide`` fold away)
        position, velocity, done, reward = dynamics(params, position_[i], velocity_[i], True, a)
    else:
        position, velocity, done, reward = dynamics(params, position_[i], velocity_[i], False, a)
    position_[i] = as32(position)
    velocity_[i] = as32(velocity)
    fresh_[i] = False
    obs[i, 0] = np.float32(position)
    obs[i, 1] = np.float32(velocity)
    rewards[i] = reward
    terminated[i] = done


# --- torch: the same dynamics over the whole batch ------------------------------------------


def reset_torch(mask: Any, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Reset the envs where ``mask`` is set (``rng`` already advanced for them)."""
    import torch

    position, velocity, fresh = state
    position.copy_(torch.where(mask, env_uniform_torch(rng, 0, -0.6, -0.4), position))
    velocity.masked_fill_(mask, 0.0)
    fresh.logical_or_(mask)
    obs[:, 0] = position
    obs[:, 1] = velocity


def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for every env at once: ``dynamics`` over the whole batch."""
    position, velocity, fresh = state
    x, v, done, reward = dynamics(params, position, velocity, fresh, actions[:, 0].double())
    position.copy_(as32(x))
    velocity.copy_(as32(v))
    fresh.fill_(False)
    obs[:, 0] = x
    obs[:, 1] = v
    rewards.copy_(reward)
    terminated.copy_(done)


def _reference_env(params: MountainCarContinuousParams) -> Any:
    """Gymnasium's Continuous_MountainCarEnv that draws the frames (the car at the row's
    position; the goal velocity is not drawn)."""
    from gymnasium.envs.classic_control.continuous_mountain_car import Continuous_MountainCarEnv

    return Continuous_MountainCarEnv(render_mode="rgb_array")


def _reference_dtype(row: dict[str, Any]) -> type:
    """Gymnasium's state is float64 right after a reset and float32 after a step."""
    return np.float64 if row["fresh"] else np.float32


SPEC = NativeEnvSpec(
    writes_every_output=True,  # step_one writes every obs, reward and terminated row
    id="MountainCarContinuous-v0",
    observation_space=spaces.Box(_LOW, _HIGH, dtype=np.float32),
    action_space=spaces.Box(-1.0, 1.0, (1,), dtype=np.float32),
    state={"position": (np.float64, ()), "velocity": (np.float64, ()),
           "fresh": (np.bool_, ())},
    make_params=make_params,
    per_env_params=("goal_velocity",),
    max_episode_steps=999,
    reset_one=reset_one,
    step_one=step_one,
    reset_torch=reset_torch,
    step_torch=step_torch,
    # torch on the CPU: peak resident bytes per env beyond the estimate's buffers, measured by
    # tests/test_memory.py (make + reset + 100 steps, every mode and copy; ~9 float64 columns:
    # 48 measured 0.89x in NextStep and SameStep without copies on a quiet AMD EPYC)
    torch_temporaries=72,
    reference_id="MountainCarContinuous-v0",
    description="car up a hill, continuous force (Gymnasium's Continuous_MountainCarEnv)",
    renderer=ReferenceRenderer(_reference_env, ("position", "velocity"), fps=30,
                               state_dtype=_reference_dtype),
    # cos(3 x) 3 with its factor, force x power 1, sum 2, position 1, reward 3
    flops_per_step=10,
)
