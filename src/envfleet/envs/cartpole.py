"""CartPole-v1, exactly as Gymnasium's ``CartPoleEnv`` (float64 state, Euler, same thresholds).

The arithmetic repeats Gymnasium's expression by expression, in the same order, so the numba
backend reproduces its float64 trajectories bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.kernels import (
    NativeEnvSpec,
    ReferenceRenderer,
    cos,
    env_uniform,
    env_uniforms_torch,
    finite_param,
    host_arrays,
    kernel_function,
    on_host,
    physics_param,
    sin,
    step_rows,
    takes_arrays,
    where,
)


class CartPoleParams(NamedTuple):
    """Physics constants and reset bounds (Gymnasium's values by default)."""

    gravity: float
    masscart: float
    masspole: float
    total_mass: float
    length: float  # half the pole's length
    polemass_length: float
    force_mag: float
    tau: float
    theta_threshold_radians: float
    x_threshold: float
    reset_low: float
    reset_high: float
    euler: bool  # Euler (Gymnasium's default) or semi-implicit Euler
    sutton_barto_reward: bool


def make_params(
    *,
    sutton_barto_reward: bool = False,
    gravity: float | np.ndarray = 9.8,
    masscart: float | np.ndarray = 1.0,
    masspole: float | np.ndarray = 0.1,
    length: float | np.ndarray = 0.5,
    force_mag: float | np.ndarray = 10.0,
    tau: float = 0.02,
    kinematics_integrator: str = "euler",
    reset_low: float = -0.05,
    reset_high: float = 0.05,
) -> CartPoleParams:
    """Gymnasium's constants, derived the way ``CartPoleEnv.__init__`` derives them.

    ``gravity``, ``masscart``, ``masspole``, ``length`` and ``force_mag`` (``CartPoleEnv``'s
    attributes) are each one value or an array of one value per env (``physics_param``);
    masses and length must be > 0."""
    if kinematics_integrator not in ("euler", "semi-implicit euler"):
        raise ValueError(
            f"kinematics_integrator must be 'euler' or 'semi-implicit euler', "
            f"got {kinematics_integrator!r}"
        )
    reset_low, reset_high = finite_param("reset_low", reset_low), finite_param("reset_high",
                                                                               reset_high)
    if not reset_low < reset_high:
        raise ValueError(f"reset_low ({reset_low}) must be below reset_high ({reset_high})")
    gravity = physics_param("gravity", gravity)
    masscart = physics_param("masscart", masscart, positive=True)
    masspole = physics_param("masspole", masspole, positive=True)
    length = physics_param("length", length, positive=True)
    if not finite_param("tau", tau) > 0:
        raise ValueError(f"tau must be > 0 (the time step, seconds), got {tau!r}")
    return CartPoleParams(
        gravity=gravity,
        masscart=masscart,
        masspole=masspole,
        total_mass=masspole + masscart,  # per env: the same float64 sum, element by element
        length=length,
        polemass_length=masspole * length,
        force_mag=physics_param("force_mag", force_mag),
        tau=float(tau),
        theta_threshold_radians=12 * 2 * math.pi / 360,
        x_threshold=2.4,
        reset_low=reset_low,
        reset_high=reset_high,
        euler=kinematics_integrator == "euler",
        sutton_barto_reward=bool(sutton_barto_reward),
    )


_HIGH = np.array(
    [2.4 * 2, np.inf, 12 * 2 * math.pi / 360 * 2, np.inf], dtype=np.float32
)


@kernel_function
def reset_one(i: int, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Uniform state in [reset_low, reset_high)^4, as ``np_random.uniform(size=(4,))``."""
    x, x_dot, theta, theta_dot = state
    low, high = params.reset_low, params.reset_high
    # all four drawn before any store: the compiler then shares their common hashing
    x0 = env_uniform(rng, i, 0, low, high)
    x1 = env_uniform(rng, i, 1, low, high)
    x2 = env_uniform(rng, i, 2, low, high)
    x3 = env_uniform(rng, i, 3, low, high)
    x[i], x_dot[i], theta[i], theta_dot[i] = x0, x1, x2, x3
    obs[i, 0] = np.float32(x0)
    obs[i, 1] = np.float32(x1)
    obs[i, 2] = np.float32(x2)
    obs[i, 3] = np.float32(x3)


@kernel_function
def dynamics(p: Any, x: Any, x_dot: Any, theta: Any, theta_dot: Any,
             force: Any) -> tuple[Any, Any, Any, Any]:
    """``CartPoleEnv.step``'s physics: the state after one step under ``force``, in
    Gymnasium's order. Written once (``elementwise``): env i's numbers in the kernels, whole
    batches in the torch form, chained passes in the workload study."""
    costheta = cos(theta)
    sintheta = sin(theta)
    temp = (force + p.polemass_length * (theta_dot * theta_dot) * sintheta) / p.total_mass
    thetaacc = (p.gravity * sintheta - costheta * temp) / (
        p.length * (4.0 / 3.0 - p.masspole * (costheta * costheta) / p.total_mass)
    )
    xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
    if p.euler:
        return (x + p.tau * x_dot, x_dot + p.tau * xacc, theta + p.tau * theta_dot,
                theta_dot + p.tau * thetaacc)
    x_dot = x_dot + p.tau * xacc
    theta_dot = theta_dot + p.tau * thetaacc
    return x + p.tau * x_dot, x_dot, theta + p.tau * theta_dot, theta_dot


@kernel_function
def outcome(p: Any, x: Any, theta: Any) -> tuple[Any, Any]:
    """``(terminated, reward)`` at the new state: out of bounds (NaN included); reward 1, or
    with ``sutton_barto_reward`` -1 on termination and 0 otherwise."""
    done = (
        (x < -p.x_threshold)
        | (x > p.x_threshold)
        | (theta < -p.theta_threshold_radians)
        | (theta > p.theta_threshold_radians)
    )
    return done, where(done, -1.0, 0.0) if p.sutton_barto_reward else 1.0


@kernel_function
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """One step of ``CartPoleEnv.step`` for env i."""
    x_, x_dot_, theta_, theta_dot_ = state
    p = params
    force = p.force_mag if actions[i] == 1 else -p.force_mag
    x, x_dot, theta, theta_dot = dynamics(p, x_[i], x_dot_[i], theta_[i], theta_dot_[i], force)
    x_[i] = x
    x_dot_[i] = x_dot
    theta_[i] = theta
    theta_dot_[i] = theta_dot
    obs[i, 0] = np.float32(x)
    obs[i, 1] = np.float32(x_dot)
    obs[i, 2] = np.float32(theta)
    obs[i, 3] = np.float32(theta_dot)
    done, reward = outcome(p, x, theta)
    terminated[i] = done
    rewards[i] = reward


# --- torch: the same dynamics over the whole batch ------------------------------------------
# CPU tensors run as NumPy views of them (``host_arrays``); the step there is the kernel
# itself, compiled over the rows (``_step_host``); other devices run ``dynamics`` on tensors.


@takes_arrays
def reset_torch(mask: Any, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Reset the envs where ``mask`` is set (``rng`` already advanced for them); on the host
    the torch engine hands over only those envs, so each draws its 4 numbers and nothing else
    does. On a device the mask is applied without reading it back (capturable)."""
    fresh = env_uniforms_torch(rng, 4, params.reset_low, params.reset_high)  # (m, 4)
    if on_host(fresh):
        if not isinstance(obs, np.ndarray):
            fresh, mask, state, obs = host_arrays((fresh, mask, state, obs))
        if not mask.all():
            fresh = np.where(mask[:, None], fresh, np.stack(state, axis=1))
    else:
        import torch

        fresh = torch.where(mask.unsqueeze(1), fresh, torch.stack(tuple(state), dim=1))
    for k, column in enumerate(state):
        column[...] = fresh[:, k]
    obs[...] = fresh


def _signed_force(force_mag: Any, actions: Any) -> Any:
    """``force_mag if action == 1 else -force_mag`` per env, a float64 tensor (Discrete(2)
    actions are checked to be 0 or 1): a lookup in a 2-entry table, ~5x faster than ``where``."""
    import torch

    if not isinstance(force_mag, float):  # one per env
        return torch.where(actions == 1, force_mag, -force_mag)
    table = _FORCES.get((force_mag, actions.device))
    if table is None:
        table = torch.tensor([-force_mag, force_mag], dtype=torch.float64, device=actions.device)
        _FORCES[(force_mag, actions.device)] = table
    return table.index_select(0, actions)


#: (force_mag, device) -> ``[-force_mag, force_mag]``, indexed by the action
_FORCES: dict[tuple, Any] = {}


@takes_arrays
def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for every env at once: ``dynamics`` over the whole batch; on the host,
    ``step_one`` itself, compiled over the rows (``_step_host``)."""
    if on_host(obs):
        if not isinstance(obs, np.ndarray):
            state, params, actions, obs, rewards, terminated = host_arrays(
                (state, params, actions, obs, rewards, terminated))
        _step_host(state, params, actions, obs, rewards, terminated)
        return
    p = params
    force = _signed_force(p.force_mag, actions)
    new = dynamics(p, *state, force)
    for k, (column, values) in enumerate(zip(state, new, strict=True)):
        column.copy_(values)
        obs[:, k] = values
    done, reward = outcome(p, state[0], state[2])
    terminated.copy_(done)
    rewards[...] = reward


#: the largest batch ``_step_host`` steps row by row in Python
_SCALAR_ROWS = 6


def _step_host(state: tuple, p: CartPoleParams, actions: np.ndarray, obs: np.ndarray,
               rewards: np.ndarray, terminated: np.ndarray) -> None:
    """``step_torch`` on NumPy arrays: ``step_one`` over the rows, compiled (``step_rows``;
    ``dynamics`` over whole arrays, each op a pass through memory with its temporary, took ~3x
    as long at 65,536 envs). A few envs run ``step_one`` in Python instead (its NumPy scalars
    round as the compiled code does): ~4 us a row, and no compile for tiny batches."""
    if len(obs) <= _SCALAR_ROWS and all(isinstance(v, float) for v in (
            p.gravity, p.total_mass, p.polemass_length, p.force_mag)):  # one physics for all
        for i in range(len(obs)):
            step_one(i, state, p, actions, None, obs, rewards, terminated)
        return
    step_rows(step_one, p, SPEC.id)(state, p, actions, None, obs, rewards, terminated)


def _reference_env(params: CartPoleParams) -> Any:
    """Gymnasium's CartPoleEnv that draws the frames (the pole as long as ours)."""
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    env = CartPoleEnv(render_mode="rgb_array")
    if np.ndim(params.length) == 0:  # (per-env lengths come with each row)
        env.length = float(params.length)  # the pole as drawn (x_threshold: 2.4)
    return env


SPEC = NativeEnvSpec(
    id="CartPole-v1",
    observation_space=spaces.Box(-_HIGH, _HIGH, dtype=np.float32),
    action_space=spaces.Discrete(2),
    state={name: (np.float64, ()) for name in ("x", "x_dot", "theta", "theta_dot")},
    make_params=make_params,
    max_episode_steps=500,
    reset_one=reset_one,
    step_one=step_one,
    reset_torch=reset_torch,
    step_torch=step_torch,
    reference_id="CartPole-v1",
    description="cart-pole balancing (Gymnasium's CartPoleEnv, float64 Euler)",
    renderer=ReferenceRenderer(_reference_env, ("x", "x_dot", "theta", "theta_dot"), fps=50,
                               attributes=("length",)),
    per_env_params=("gravity", "masscart", "masspole", "total_mass", "length",
                    "polemass_length", "force_mag"),
    writes_every_output=True,
    # temp 5, thetaacc 9, xacc 4, Euler 8, sin + cos 2
    flops_per_step=28,
)
