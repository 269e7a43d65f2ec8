"""Pendulum-v1, exactly as Gymnasium's ``PendulumEnv`` (float64 state, float32 torque).

The arithmetic repeats Gymnasium's expression by expression, in the same order and the same
precision: the state is float64; the torque is the float32 action clipped to
[-max_torque, max_torque] (``np.clip`` keeps float32), so NumPy's promotion rules (NEP 50) make
``0.001 * u**2`` and ``3.0 / (m * l**2) * u`` float32 products that are then added to float64
terms. The numba backend reproduces Gymnasium's float64 trajectories bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.kernels import (
    NativeEnvSpec,
    ReferenceRenderer,
    angle_normalize,
    clip,
    cos,
    env_uniform,
    env_uniform_torch,
    kernel_function,
    mul32,
    physics_param,
    sin,
)


class PendulumParams(NamedTuple):
    """Gymnasium's constants (``g`` is the one ``PendulumEnv`` takes as an argument)."""

    g: float
    max_speed: float
    max_torque: float
    dt: float
    m: float
    l: float  # noqa: E741 (Gymnasium's name)


def make_params(*, g: float | np.ndarray = 10.0) -> PendulumParams:
    """``PendulumEnv(g=...)``'s constants; ``g`` is one finite real number or an array of one
    per env (``physics_param``)."""
    return PendulumParams(g=physics_param("g", g), max_speed=8.0, max_torque=2.0, dt=0.05,
                          m=1.0, l=1.0)


_HIGH = np.array([1.0, 1.0, 8.0], dtype=np.float32)


@kernel_function
def _write_obs(i: int, th: float, thdot: float, obs: Any) -> None:
    obs[i, 0] = np.float32(math.cos(th))
    obs[i, 1] = np.float32(math.sin(th))
    obs[i, 2] = np.float32(thdot)


@kernel_function
def reset_one(i: int, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Angle uniform in [-pi, pi), speed in [-1, 1), as ``np_random.uniform(-high, high)``."""
    theta, theta_dot = state
    theta[i] = env_uniform(rng, i, 0, -np.pi, np.pi)
    theta_dot[i] = env_uniform(rng, i, 1, -1.0, 1.0)
    _write_obs(i, theta[i], theta_dot[i], obs)


@kernel_function
def dynamics(p: Any, th: Any, thdot: Any, u: Any) -> tuple[Any, Any, Any]:
    """``PendulumEnv.step``'s physics under the clipped float32 torque ``u``: the new
    (theta, theta_dot) and the cost. One env's numbers in the kernels, whole batches in the
    torch form (``elementwise``); the float32 products widened explicitly (``mul32``)."""
    normalized = angle_normalize(th)
    costs = normalized * normalized + 0.1 * (thdot * thdot) + mul32(0.001, u * u)
    newthdot = thdot + (3 * p.g / (2 * p.l) * sin(th) + mul32(3.0 / (p.m * p.l * p.l), u)) * p.dt
    newthdot = clip(newthdot, -p.max_speed, p.max_speed)
    return th + newthdot * p.dt, newthdot, costs


@kernel_function
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """One step of ``PendulumEnv.step`` for env i."""
    theta, theta_dot = state
    p = params
    u = actions[i, 0]  # float32, as np.clip(u, -max_torque, max_torque)[0] keeps it
    if u < -p.max_torque:
        u = np.float32(-p.max_torque)
    elif u > p.max_torque:
        u = np.float32(p.max_torque)
    newth, newthdot, costs = dynamics(p, theta[i], theta_dot[i], u)
    theta[i] = newth
    theta_dot[i] = newthdot
    _write_obs(i, newth, newthdot, obs)
    rewards[i] = -costs
    terminated[i] = False


# --- torch: the same dynamics over the whole batch ------------------------------------------


def _write_obs_torch(state: Any, obs: Any) -> None:
    theta, theta_dot = state
    obs[:, 0] = cos.batched(theta)  # the batched form itself: no per-call dispatch
    obs[:, 1] = sin.batched(theta)
    obs[:, 2] = theta_dot


def reset_torch(mask: Any, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Reset the envs where ``mask`` is set (``rng`` already advanced for them)."""
    import torch

    for k, high in enumerate((np.pi, 1.0)):
        fresh = env_uniform_torch(rng, k, -high, high)
        state[k].copy_(torch.where(mask, fresh, state[k]))
    _write_obs_torch(state, obs)


def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for every env at once: ``dynamics`` over the whole batch."""
    p = params
    theta, theta_dot = state
    u = actions[:, 0].clamp(-p.max_torque, p.max_torque)  # float32
    newth, newthdot, costs = dynamics(p, theta, theta_dot, u)
    theta.copy_(newth)
    theta_dot.copy_(newthdot)
    rewards.copy_(-costs)
    terminated.fill_(False)
    _write_obs_torch(state, obs)


def _reference_env(params: PendulumParams) -> Any:
    """Gymnasium's PendulumEnv that draws the frames: the pendulum at the row's angle, without
    the torque arrow (Gymnasium draws its last action, which the state does not keep; its own
    frames right after a reset have no arrow either)."""
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    env = PendulumEnv(render_mode="rgb_array")
    env.last_u = None  # set by PendulumEnv.reset, read by render
    return env


SPEC = NativeEnvSpec(
    writes_every_output=True,  # step_one writes every obs, reward and terminated row
    id="Pendulum-v1",
    observation_space=spaces.Box(-_HIGH, _HIGH, dtype=np.float32),
    action_space=spaces.Box(-2.0, 2.0, (1,), dtype=np.float32),
    state={name: (np.float64, ()) for name in ("theta", "theta_dot")},
    make_params=make_params,
    max_episode_steps=200,
    reset_one=reset_one,
    step_one=step_one,
    reset_torch=reset_torch,
    step_torch=step_torch,
    # torch on the CPU: peak resident bytes per env beyond the estimate's buffers, measured by
    # tests/test_memory.py (make + reset + 100 steps, every mode and copy; ~3 float64 columns)
    torch_temporaries=24,
    reference_id="Pendulum-v1",
    description="pendulum swing-up, continuous torque (Gymnasium's PendulumEnv, float64)",
    per_env_params=("g",),
    renderer=ReferenceRenderer(_reference_env, ("theta", "theta_dot"), fps=30),
    # angle_normalize 3, costs 7, newthdot 12, newth 2, observation cos / sin 2, reward 1
    flops_per_step=27,
)
