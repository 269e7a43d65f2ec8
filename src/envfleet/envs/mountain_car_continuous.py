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

import math
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.native import tensor_math
from envfleet.native.jit import kernel_function
from envfleet.native.render import ReferenceRenderer
from envfleet.native.rng import env_uniform, env_uniform_torch
from envfleet.native.spec import NativeEnvSpec, physics_param


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
def _as32(x: float) -> float:
    """``x`` rounded to float32, as a float64 (how a float32 meets a Python float)."""
    return np.float64(np.float32(x))


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
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """One step of ``Continuous_MountainCarEnv.step`` for env i."""
    position_, velocity_, fresh_ = state
    p = params
    wide = fresh_[i]  # float64 state (first step after a reset), else float32
    position = position_[i]
    velocity = velocity_[i]
    a = actions[i, 0]  # float32
    if a < p.min_action or a > p.max_action:  # force is the Python float bound
        force = min(max(np.float64(a), p.min_action), p.max_action)
        term = force * p.power - 0.0025 * math.cos(
            3 * position if wide else np.float64(np.float32(3) * np.float32(position)))
    else:  # force is the float32 action: float32 arithmetic with the Python floats
        c = 0.0025 * math.cos(
            3 * position if wide else np.float64(np.float32(3) * np.float32(position)))
        term = np.float64(a * np.float32(p.power) - np.float32(c))
    velocity = velocity + term if wide else _as32(velocity + _as32(term))
    # velocity_py / position_py: the value is a Python float (a clamp's constant)
    velocity_py = False
    if velocity > (p.max_speed if wide else _as32(p.max_speed)):
        velocity = p.max_speed
        velocity_py = True
    elif velocity < (-p.max_speed if wide else _as32(-p.max_speed)):
        velocity = -p.max_speed
        velocity_py = True
    position = position + velocity if wide else _as32(position + _as32(velocity))
    position_py = False
    if position > (p.max_position if wide else _as32(p.max_position)):
        position = p.max_position
        position_py = True
    elif position < (p.min_position if wide else _as32(p.min_position)):
        position = p.min_position
        position_py = True
    exact = wide or position_py
    if (position == (p.min_position if exact else _as32(p.min_position))) and velocity < 0:
        velocity = 0.0
        velocity_py = True
    done = (position >= (p.goal_position if exact else _as32(p.goal_position))) and (
        velocity >= (p.goal_velocity if wide or velocity_py else _as32(p.goal_velocity)))
    a64 = np.float64(a)
    reward = 100.0 if done else 0.0
    reward = reward - a64 * a64 * 0.1  # math.pow(action[0], 2) * 0.1
    position_[i] = _as32(position)
    velocity_[i] = _as32(velocity)
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


def _as32_torch(x: Any) -> Any:
    return x.float().double()


def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for every env at once, each precision case selected by mask."""
    import torch

    p = params
    position, velocity, fresh = state
    wide = fresh
    a = actions[:, 0]  # float32
    a64 = a.double()
    clipped = (a64 < p.min_action) | (a64 > p.max_action)
    three = torch.tensor(3.0, dtype=torch.float32, device=a.device)
    power = torch.tensor(p.power, dtype=torch.float32, device=a.device)
    angle = torch.where(wide, 3 * position, (three * position.float()).double())
    c = 0.0025 * tensor_math.cos(angle)
    term = torch.where(clipped, a64.clamp(p.min_action, p.max_action) * p.power - c,
                       (a * power - c.float()).double())
    v = torch.where(wide, velocity + term, _as32_torch(velocity + _as32_torch(term)))

    def limit(value: float, exact: Any) -> Any:
        """A Python constant as the comparison sees it: itself, or rounded to float32."""
        if isinstance(value, torch.Tensor):  # a per-env parameter
            return torch.where(exact, value, _as32_torch(value))
        return torch.full_like(position, float(np.float32(value))).masked_fill_(exact, value)

    hi = v > limit(p.max_speed, wide)
    lo = ~hi & (v < limit(-p.max_speed, wide))
    v = torch.where(hi, p.max_speed, torch.where(lo, -p.max_speed, v))
    v_py = hi | lo
    x = torch.where(wide, position + v, _as32_torch(position + _as32_torch(v)))
    hi = x > limit(p.max_position, wide)
    lo = ~hi & (x < limit(p.min_position, wide))
    x = torch.where(hi, p.max_position, torch.where(lo, p.min_position, x))
    exact = wide | hi | lo
    stop = (x == limit(p.min_position, exact)) & (v < 0)
    v = torch.where(stop, 0.0, v)
    v_py = v_py | stop
    done = (x >= limit(p.goal_position, exact)) & (v >= limit(p.goal_velocity, wide | v_py))
    reward = done.double() * 100.0 - a64 * a64 * 0.1
    position.copy_(_as32_torch(x))
    velocity.copy_(_as32_torch(v))
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
    reference_id="MountainCarContinuous-v0",
    description="car up a hill, continuous force (Gymnasium's Continuous_MountainCarEnv)",
    renderer=ReferenceRenderer(_reference_env, ("position", "velocity"), fps=30,
                               state_dtype=_reference_dtype),
    # cos(3 x) 3 with its factor, force x power 1, sum 2, position 1, reward 3
    flops_per_step=10,
)
