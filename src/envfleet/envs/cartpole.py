"""CartPole-v1, exactly as Gymnasium's ``CartPoleEnv`` (float64 state, Euler, same thresholds).

The arithmetic repeats Gymnasium's expression by expression, in the same order, so the numba
backend reproduces its float64 trajectories bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.native import tensor_math
from envfleet.native.jit import kernel_function
from envfleet.native.render import ReferenceRenderer
from envfleet.native.rng import env_uniform, env_uniforms_torch
from envfleet.native.spec import NativeEnvSpec, finite_param, physics_param


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
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """One step of ``CartPoleEnv.step`` for env i."""
    x_, x_dot_, theta_, theta_dot_ = state
    p = params
    x = x_[i]
    x_dot = x_dot_[i]
    theta = theta_[i]
    theta_dot = theta_dot_[i]
    force = p.force_mag if actions[i] == 1 else -p.force_mag
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + p.polemass_length * (theta_dot * theta_dot) * sintheta) / p.total_mass
    thetaacc = (p.gravity * sintheta - costheta * temp) / (
        p.length * (4.0 / 3.0 - p.masspole * (costheta * costheta) / p.total_mass)
    )
    xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
    if p.euler:
        x = x + p.tau * x_dot
        x_dot = x_dot + p.tau * xacc
        theta = theta + p.tau * theta_dot
        theta_dot = theta_dot + p.tau * thetaacc
    else:
        x_dot = x_dot + p.tau * xacc
        x = x + p.tau * x_dot
        theta_dot = theta_dot + p.tau * thetaacc
        theta = theta + p.tau * theta_dot
    x_[i] = x
    x_dot_[i] = x_dot
    theta_[i] = theta
    theta_dot_[i] = theta_dot
    obs[i, 0] = np.float32(x)
    obs[i, 1] = np.float32(x_dot)
    obs[i, 2] = np.float32(theta)
    obs[i, 3] = np.float32(theta_dot)
    done = (
        (x < -p.x_threshold)
        | (x > p.x_threshold)
        | (theta < -p.theta_threshold_radians)
        | (theta > p.theta_threshold_radians)
    )
    terminated[i] = done
    if p.sutton_barto_reward:
        rewards[i] = -1.0 if done else 0.0
    else:
        rewards[i] = 1.0


# --- torch: the same dynamics over the whole batch ------------------------------------------
# One body for CPU tensors (run on NumPy views of them: ``tensor_math.host_arrays``) and other
# devices (torch ops): in-place operators on as few temporaries as possible, each in Gymnasium's
# order (a * b and b * a round alike, as do a - b and -(b - a)).


@tensor_math.takes_arrays
def reset_torch(mask: Any, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Reset the envs where ``mask`` is set (``rng`` already advanced for them); the torch
    engine hands over only those envs, so each draws its 4 numbers and nothing else does."""
    fresh = env_uniforms_torch(rng, 4, params.reset_low, params.reset_high)  # (m, 4)
    if tensor_math.on_host(fresh):
        if not isinstance(obs, np.ndarray):
            fresh, mask, state, obs = tensor_math.host_arrays((fresh, mask, state, obs))
        if not mask.all():
            fresh = np.where(mask[:, None], fresh, np.stack(state, axis=1))
    elif not bool(mask.all()):
        import torch

        fresh = torch.where(mask.unsqueeze(1), fresh, torch.stack(tuple(state), dim=1))
    for k, column in enumerate(state):
        column[...] = fresh[:, k]
    obs[...] = fresh


def _signed_force(force_mag: Any, actions: Any) -> Any:
    """``force_mag if action == 1 else -force_mag`` per env, a float64 tensor (Discrete(2)
    actions are checked to be 0 or 1): a lookup in a 2-entry table, ~5x faster than ``where``."""
    torch = _torch()
    if not isinstance(force_mag, float):  # one per env
        return torch.where(actions == 1, force_mag, -force_mag)
    return _force_table(force_mag, actions.device).index_select(0, actions)


def _force_table(force_mag: float, device: Any = None) -> Any:
    """``[-force_mag, force_mag]`` (indexed by the action): an array, or a tensor on
    ``device``."""
    table = _FORCES.get((force_mag, device))
    if table is None:
        table = np.array([-force_mag, force_mag])
        if device is not None:
            table = _torch().from_numpy(table).to(device)
        _FORCES[(force_mag, device)] = table
    return table


_FORCES: dict[tuple, Any] = {}


def _torch() -> Any:
    import torch

    return torch


@tensor_math.takes_arrays
def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for every env at once."""
    if tensor_math.on_host(obs):
        if not isinstance(obs, np.ndarray):
            state, params, actions, obs, rewards, terminated = tensor_math.host_arrays(
                (state, params, actions, obs, rewards, terminated))
        _step_host(state, params, actions, obs, rewards, terminated)
        return
    torch = _torch()
    p = params
    x, x_dot, theta, theta_dot = state
    force = _signed_force(p.force_mag, actions)
    sintheta, costheta = tensor_math.sin_cos(theta)
    # temp = (force + polemass_length * theta_dot ** 2 * sintheta) / total_mass
    temp = theta_dot * theta_dot
    temp *= p.polemass_length
    temp *= sintheta
    temp += force
    temp /= p.total_mass
    # thetaacc = (gravity * sintheta - costheta * temp)
    #            / (length * (4 / 3 - masspole * costheta ** 2 / total_mass))
    denominator = costheta * costheta
    denominator *= p.masspole
    denominator /= p.total_mass
    denominator = 4.0 / 3.0 - denominator
    denominator *= p.length
    thetaacc = sintheta
    thetaacc *= p.gravity
    thetaacc -= costheta * temp
    thetaacc /= denominator
    # xacc = temp - polemass_length * thetaacc * costheta / total_mass
    xacc = thetaacc * p.polemass_length
    xacc *= costheta
    xacc /= p.total_mass
    xacc = torch.subtract(temp, xacc, out=temp)
    if p.euler:
        x += x_dot * p.tau
        xacc *= p.tau
        x_dot += xacc
        theta += theta_dot * p.tau
        thetaacc *= p.tau
        theta_dot += thetaacc
    else:
        xacc *= p.tau
        x_dot += xacc
        x += x_dot * p.tau
        thetaacc *= p.tau
        theta_dot += thetaacc
        theta += theta_dot * p.tau
    for k, column in enumerate(state):
        obs[:, k] = column
    # |x| > t is (x < -t) | (x > t), NaN included
    torch.logical_or(torch.abs(x) > p.x_threshold, torch.abs(theta) > p.theta_threshold_radians,
                     out=terminated)
    if p.sutton_barto_reward:
        rewards[...] = -1.0
        rewards[~terminated] = 0.0
    else:
        rewards[...] = 1.0


#: the largest batch ``_step_host`` steps row by row
_SCALAR_ROWS = 6


def _shared_params(p: CartPoleParams) -> bool:
    """Whether every env has the same physics (no per-env arrays: ``step_one`` can read ``p``;
    ``masspole`` and ``masscart`` are in ``total_mass``, ``length`` in ``polemass_length``)."""
    return all(isinstance(v, float) for v in (p.gravity, p.total_mass, p.polemass_length,
                                              p.force_mag))


def _step_host(state: tuple, p: CartPoleParams, actions: np.ndarray, obs: np.ndarray,
               rewards: np.ndarray, terminated: np.ndarray) -> None:
    """``step_torch`` on NumPy arrays: every op writes into the state or into work arrays kept
    with ``obs`` (no temporaries), each in Gymnasium's order. A few envs run ``step_one`` in
    Python instead (its NumPy scalars round as the arrays do): ~40 array calls cost ~30 us
    whatever the batch, a row ~4 us."""
    if len(obs) <= _SCALAR_ROWS and _shared_params(p):
        for i in range(len(obs)):
            step_one(i, state, p, actions, None, obs, rewards, terminated)
        return
    x, x_dot, theta, theta_dot = state
    s, c, temp, d, f, h = tensor_math.scratch(obs, 6)
    flag = tensor_math.scratch(obs, 1, np.bool_)[0]
    if isinstance(p.force_mag, float):  # force_mag if action == 1 else -force_mag
        np.take(_force_table(p.force_mag), actions, out=f, mode="clip")  # 0 or 1
    else:  # one per env
        np.copyto(f, np.where(actions == 1, p.force_mag, -p.force_mag))
    tensor_math.sin_cos(theta, out=(s, c))
    # temp = (force + polemass_length * theta_dot ** 2 * sintheta) / total_mass
    np.square(theta_dot, out=temp)
    temp *= p.polemass_length
    temp *= s
    temp += f
    temp /= p.total_mass
    # thetaacc = (gravity * sintheta - costheta * temp)
    #            / (length * (4 / 3 - masspole * costheta ** 2 / total_mass))
    np.square(c, out=d)
    d *= p.masspole
    d /= p.total_mass
    np.subtract(4.0 / 3.0, d, out=d)
    d *= p.length
    np.multiply(s, p.gravity, out=h)
    np.multiply(c, temp, out=f)  # (force is spent)
    h -= f
    h /= d
    # xacc = temp - polemass_length * thetaacc * costheta / total_mass
    np.multiply(h, p.polemass_length, out=f)
    f *= c
    f /= p.total_mass
    np.subtract(temp, f, out=f)
    if p.euler:
        np.multiply(x_dot, p.tau, out=temp)
        x += temp
        f *= p.tau
        x_dot += f
        np.multiply(theta_dot, p.tau, out=temp)
        theta += temp
        h *= p.tau
        theta_dot += h
    else:
        f *= p.tau
        x_dot += f
        np.multiply(x_dot, p.tau, out=temp)
        x += temp
        h *= p.tau
        theta_dot += h
        np.multiply(theta_dot, p.tau, out=temp)
        theta += temp
    for column, values in zip(obs.T, state, strict=True):  # 3x quicker than obs[...] = S.T
        column[...] = values
    # |x| > t is (x < -t) | (x > t), NaN included
    np.greater(np.abs(x, out=temp), p.x_threshold, out=terminated)
    terminated |= np.greater(np.abs(theta, out=temp), p.theta_threshold_radians, out=flag)
    if p.sutton_barto_reward:  # -1.0 if terminated else 0.0
        np.subtract(0.0, terminated, out=rewards)
    else:
        rewards.fill(1.0)


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
)
