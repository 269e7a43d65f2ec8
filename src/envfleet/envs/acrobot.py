"""Acrobot-v1, exactly as Gymnasium's ``AcrobotEnv`` (RK4 over float64, book dynamics).

The arithmetic repeats Gymnasium's ``_dsdt``, ``rk4``, ``wrap`` and ``bound`` expression by
expression, in the same order, so the numba backend reproduces its float64 trajectories bit for
bit. Two details make that so:

- Gymnasium squares NumPy float64 scalars (``dtheta2**2``, ``d2**2``), which calls libm's
  ``pow``; glibc's ``pow(x, 2.0)`` differs from ``x * x`` in the last bit for ~0.1% of inputs.
  ``_square`` returns what ``pow`` returns, calling it only where the two can differ; the torch
  twin runs the same scalar code through a small numba loop on CPU.
- Gymnasium's reset state is float32 (``uniform(...).astype(np.float32)``), and becomes float64
  at the first step (``np.append`` with the torque). The state columns are float64 holding the
  float32-rounded draws: the same numbers. The reset observation is the float64 cos/sin of
  those values rounded to float32; Gymnasium takes NumPy's float32 cos/sin there, which are not
  correctly rounded (1 float32 ulp apart on ~0.1% of reset observations). Steps are exact.
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
    dual,
    env_uniform,
    env_uniform_torch,
    kernel_function,
    on_host,
    one_value,
    sin,
    where,
)

# Gymnasium's class attributes (AcrobotEnv)
DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi
AVAIL_TORQUE = (-1.0, 0.0, 1.0)
#: the counter of the torque-noise draw (reset draws use 0..3)
NOISE_DRAW = 4


class AcrobotParams(NamedTuple):
    """Constants of ``AcrobotEnv._dsdt`` (products of Gymnasium's attributes, folded the way
    Python evaluates them left to right), torque noise and the dynamics variant."""

    m1_lc1_sq: float  # m1 * lc1**2
    l1_sq_lc2_sq: float  # l1**2 + lc2**2
    two_l1_lc2: float  # 2 * l1 * lc2
    i1: float
    i2: float
    m2: float
    lc2_sq: float  # lc2**2
    l1_lc2: float  # l1 * lc2
    m2_lc2_g: float  # m2 * lc2 * g
    neg_m2_l1_lc2: float  # -m2 * l1 * lc2
    two_m2_l1_lc2: float  # 2 * m2 * l1 * lc2
    m1lc1_m2l1_g: float  # (m1 * lc1 + m2 * l1) * g
    m2_l1_lc2: float  # m2 * l1 * lc2
    m2_lc2_sq: float  # m2 * lc2**2
    dt: float
    dt2: float  # dt / 2.0
    dt6: float  # dt / 6.0
    torque_noise_max: float
    book: bool  # book_or_nips == "book"
    reset_low: float
    reset_high: float


def make_params(*, torque_noise_max: float = 0.0, book_or_nips: str = "book") -> AcrobotParams:
    """Gymnasium's constants; ``torque_noise_max`` and ``book_or_nips`` are its class
    attributes of those names (uniform torque noise in [-max, max]; "book" or "nips" dynamics)."""
    if book_or_nips not in ("book", "nips"):
        raise ValueError(f"book_or_nips must be 'book' or 'nips', got {book_or_nips!r}")
    torque_noise_max = one_value(torque_noise_max)  # a 0-d array is one value
    if isinstance(torque_noise_max, bool) or not isinstance(torque_noise_max, (int, float,
                                                                               np.number)):
        raise ValueError(f"torque_noise_max must be a number >= 0, got {torque_noise_max!r}")
    if not (math.isfinite(as_float("torque_noise_max", torque_noise_max))
            and torque_noise_max >= 0):
        raise ValueError(f"torque_noise_max must be a finite number >= 0, got "
                         f"{torque_noise_max!r}")
    m1, m2, l1 = LINK_MASS_1, LINK_MASS_2, LINK_LENGTH_1
    lc1, lc2, g = LINK_COM_POS_1, LINK_COM_POS_2, 9.8
    return AcrobotParams(
        m1_lc1_sq=m1 * lc1**2,
        l1_sq_lc2_sq=l1**2 + lc2**2,
        two_l1_lc2=2 * l1 * lc2,
        i1=LINK_MOI,
        i2=LINK_MOI,
        m2=m2,
        lc2_sq=lc2**2,
        l1_lc2=l1 * lc2,
        m2_lc2_g=m2 * lc2 * g,
        neg_m2_l1_lc2=-m2 * l1 * lc2,
        two_m2_l1_lc2=2 * m2 * l1 * lc2,
        m1lc1_m2l1_g=(m1 * lc1 + m2 * l1) * g,
        m2_l1_lc2=m2 * l1 * lc2,
        m2_lc2_sq=m2 * lc2**2,
        dt=DT - 0,  # rk4: t[1] - t[0]
        dt2=(DT - 0) / 2.0,
        dt6=(DT - 0) / 6.0,
        torque_noise_max=float(torque_noise_max),
        book=book_or_nips == "book",
        reset_low=-0.1,
        reset_high=0.1,
    )


_HIGH = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)


@dual(lambda x: _square_batch(x))
def _square(x: float) -> float:
    """``x**2`` as NumPy computes it for a float64 scalar: libm's ``pow(x, 2.0)``.

    glibc's ``pow`` is within 0.54 ulp of the exact value (its source's bound), so it returns
    the correctly rounded ``x * x`` unless x² lies within 0.04 ulp of a rounding midpoint. The
    exact error of ``x * x`` (Dekker's product, Veltkamp's split) tells the ~17% of cases
    within 0.08 ulp of one, and only they call ``pow``, with the exponent kept opaque (LLVM
    turns ``pow(x, 2.0)`` into ``x * x``)."""
    p = x * x
    c = 134217729.0 * x  # 2**27 + 1
    hi = c - (c - x)
    lo = x - hi
    err = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo  # x² - p, exactly
    if p + err * 1.2 == p:  # |err| < 0.42 of the gap to p's neighbour on err's side
        return p
    return math.pow(x, 2.0 + 0.0 * x)


@kernel_function
def _dsdt(p: Any, a: Any, theta1: Any, theta2: Any, dtheta1: Any, dtheta2: Any) -> tuple:
    """``AcrobotEnv._dsdt``: (dtheta1, dtheta2, ddtheta1, ddtheta2) at a state, torque ``a``;
    one env's numbers in the kernels, whole batches in the torch form (``elementwise``)."""
    cos_theta2 = cos(theta2)
    sin_theta2 = sin(theta2)
    d1 = p.m1_lc1_sq + p.m2 * (p.l1_sq_lc2_sq + p.two_l1_lc2 * cos_theta2) + p.i1 + p.i2
    d2 = p.m2 * (p.lc2_sq + p.l1_lc2 * cos_theta2) + p.i2
    phi2 = p.m2_lc2_g * cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (
        p.neg_m2_l1_lc2 * _square(dtheta2) * sin_theta2
        - p.two_m2_l1_lc2 * dtheta2 * dtheta1 * sin_theta2
        + p.m1lc1_m2l1_g * cos(theta1 - math.pi / 2)
        + phi2
    )
    if p.book:
        ddtheta2 = (
            a + d2 / d1 * phi1 - p.m2_l1_lc2 * _square(dtheta1) * sin_theta2 - phi2
        ) / (p.m2_lc2_sq + p.i2 - _square(d2) / d1)
    else:
        ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (p.m2_lc2_sq + p.i2 - _square(d2) / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@dual(lambda x, m, big_m: _wrap_batch(x, m, big_m))
def _wrap(x: float, m: float, big_m: float) -> float:
    """Gymnasium's ``wrap``."""
    diff = big_m - m
    while x > big_m:
        x = x - diff
    while x < m:
        x = x + diff
    return x


@kernel_function
def _integrate(p: Any, torque: Any, y0: Any, y1: Any, y2: Any, y3: Any) -> tuple:
    """``AcrobotEnv.step``'s integration: RK4 over ``dt`` (the torque's derivative is 0.0:
    ``y4 + h * 0.0 == torque`` all along), then ``wrap`` and ``bound`` (``min(max(x, m), M)``:
    ``clip``); the new (theta1, theta2, dtheta1, dtheta2)."""
    h, h2 = p.dt, p.dt2
    a1, b1, c1, d1 = _dsdt(p, torque, y0, y1, y2, y3)
    a2, b2, c2, d2 = _dsdt(p, torque, y0 + h2 * a1, y1 + h2 * b1, y2 + h2 * c1, y3 + h2 * d1)
    a3, b3, c3, d3 = _dsdt(p, torque, y0 + h2 * a2, y1 + h2 * b2, y2 + h2 * c2, y3 + h2 * d2)
    a4, b4, c4, d4 = _dsdt(p, torque, y0 + h * a3, y1 + h * b3, y2 + h * c3, y3 + h * d3)
    return (_wrap(y0 + p.dt6 * (a1 + 2 * a2 + 2 * a3 + a4), -math.pi, math.pi),
            _wrap(y1 + p.dt6 * (b1 + 2 * b2 + 2 * b3 + b4), -math.pi, math.pi),
            clip(y2 + p.dt6 * (c1 + 2 * c2 + 2 * c3 + c4), -MAX_VEL_1, MAX_VEL_1),
            clip(y3 + p.dt6 * (d1 + 2 * d2 + 2 * d3 + d4), -MAX_VEL_2, MAX_VEL_2))


@kernel_function
def _outcome(cos_theta1: Any, theta1: Any, theta2: Any) -> tuple[Any, Any]:
    """``(terminated, reward)``: the tip above the line, reward 0 there and -1 elsewhere."""
    done = -cos_theta1 - cos(theta2 + theta1) > 1.0
    return done, where(done, 0.0, -1.0)


@kernel_function
def _write_obs(i: int, state: Any, obs: Any) -> None:
    theta1, theta2, dtheta1, dtheta2 = state
    obs[i, 0] = np.float32(math.cos(theta1[i]))
    obs[i, 1] = np.float32(math.sin(theta1[i]))
    obs[i, 2] = np.float32(math.cos(theta2[i]))
    obs[i, 3] = np.float32(math.sin(theta2[i]))
    obs[i, 4] = np.float32(dtheta1[i])
    obs[i, 5] = np.float32(dtheta2[i])


@kernel_function
def reset_one(i: int, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Uniform state in [-0.1, 0.1)^4 rounded to float32, as ``AcrobotEnv.reset``."""
    theta1, theta2, dtheta1, dtheta2 = state
    low, high = params.reset_low, params.reset_high
    theta1[i] = np.float64(np.float32(env_uniform(rng, i, 0, low, high)))
    theta2[i] = np.float64(np.float32(env_uniform(rng, i, 1, low, high)))
    dtheta1[i] = np.float64(np.float32(env_uniform(rng, i, 2, low, high)))
    dtheta2[i] = np.float64(np.float32(env_uniform(rng, i, 3, low, high)))
    _write_obs(i, state, obs)


@kernel_function
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """One step of ``AcrobotEnv.step`` for env i: RK4 over ``dt``, wrap, bound, goal test."""
    p = params
    theta1_, theta2_, dtheta1_, dtheta2_ = state
    a = actions[i]
    torque = -1.0 if a == 0 else (0.0 if a == 1 else 1.0)  # AVAIL_TORQUE[a]
    if p.torque_noise_max > 0:
        torque += env_uniform(rng, i, NOISE_DRAW, -p.torque_noise_max, p.torque_noise_max)
    theta1, theta2, dtheta1, dtheta2 = _integrate(p, torque, theta1_[i], theta2_[i],
                                                  dtheta1_[i], dtheta2_[i])
    theta1_[i] = theta1
    theta2_[i] = theta2
    dtheta1_[i] = dtheta1
    dtheta2_[i] = dtheta2
    cos_theta1 = math.cos(theta1)
    obs[i, 0] = np.float32(cos_theta1)
    obs[i, 1] = np.float32(math.sin(theta1))
    obs[i, 2] = np.float32(math.cos(theta2))
    obs[i, 3] = np.float32(math.sin(theta2))
    obs[i, 4] = np.float32(dtheta1)
    obs[i, 5] = np.float32(dtheta2)
    done, reward = _outcome(cos_theta1, theta1, theta2)
    terminated[i] = done
    rewards[i] = reward


# --- torch: the same dynamics over the whole batch ------------------------------------------


def _libm_square_loop() -> Any:
    """A numba loop of ``_square`` (libm's ``pow``) over a float64 array, built on first use."""
    from numba import njit

    @njit(cache=False)
    def square_all(x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        for k in range(x.size):
            out[k] = _square(x[k])
        return out

    return square_all


_SQUARE_LOOP: list[Any] = []


def _square_batch(x: Any) -> Any:
    """``_square`` over a float64 tensor or array: libm-exact on CPU, ``x * x`` elsewhere."""
    if not isinstance(x, np.ndarray) and x.device.type != "cpu":
        return x * x
    if not _SQUARE_LOOP:
        _SQUARE_LOOP.append(_libm_square_loop())
    if isinstance(x, np.ndarray):
        return _SQUARE_LOOP[0](np.ascontiguousarray(x))
    import torch

    return torch.from_numpy(_SQUARE_LOOP[0](x.contiguous().numpy()))


#: the passes each way of ``_wrap`` over a batch on a device: a step moves an angle by at most
#: ~9.3 pi (10^7 states sampled near both speed limits), i.e. 5 passes
DEVICE_WRAPS = 8


def _wrap_batch(x: Any, m: float, big_m: float) -> Any:
    """``_wrap`` over a tensor or array. On the host each loop runs while any env needs it; on
    a device (where that test would read a value back every pass, and a captured step can read
    none) ``DEVICE_WRAPS`` passes each way, a pass that finds nothing to wrap changing nothing."""
    diff = big_m - m
    if on_host(x):
        xp = np if isinstance(x, np.ndarray) else _torch()
        while bool((x > big_m).any()):
            x = xp.where(x > big_m, x - diff, x)
        while bool((x < m).any()):
            x = xp.where(x < m, x + diff, x)
        return x
    torch = _torch()
    for _ in range(DEVICE_WRAPS):
        x = torch.where(x > big_m, x - diff, x)
    for _ in range(DEVICE_WRAPS):
        x = torch.where(x < m, x + diff, x)
    return x


def _torch() -> Any:
    import torch

    return torch


def _write_obs_torch(state: Any, obs: Any) -> Any:
    """Write every env's observation; returns cos(theta1) (float64) for the goal test."""
    theta1, theta2, dtheta1, dtheta2 = state
    cos_theta1 = cos.batched(theta1)  # the batched form itself: no per-call dispatch
    obs[:, 0] = cos_theta1
    obs[:, 1] = sin.batched(theta1)
    obs[:, 2] = cos.batched(theta2)
    obs[:, 3] = sin.batched(theta2)
    obs[:, 4] = dtheta1
    obs[:, 5] = dtheta2
    return cos_theta1


def reset_torch(mask: Any, state: Any, params: Any, rng: Any, obs: Any) -> None:
    """Reset the envs where ``mask`` is set (``rng`` already advanced for them)."""
    import torch

    for k in range(4):
        fresh = env_uniform_torch(rng, k, params.reset_low, params.reset_high)
        state[k].copy_(torch.where(mask, fresh.float().double(), state[k]))
    _write_obs_torch(state, obs)


def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for every env at once: ``_integrate`` over the whole batch."""
    import torch

    p = params
    torque = (actions - 1).to(torch.float64)  # AVAIL_TORQUE[a] for a in 0, 1, 2
    if p.torque_noise_max > 0:
        torque = torque + env_uniform_torch(rng, NOISE_DRAW, -p.torque_noise_max,
                                            p.torque_noise_max)
    for column, values in zip(state, _integrate(p, torque, *state), strict=True):
        column.copy_(values)
    done, reward = _outcome(_write_obs_torch(state, obs), state.theta1, state.theta2)
    terminated.copy_(done)
    rewards.copy_(reward)


def _reference_env(params: AcrobotParams) -> Any:
    """Gymnasium's AcrobotEnv that draws the frames."""
    from gymnasium.envs.classic_control.acrobot import AcrobotEnv

    return AcrobotEnv(render_mode="rgb_array")


SPEC = NativeEnvSpec(
    writes_every_output=True,  # step_one writes every obs, reward and terminated row
    id="Acrobot-v1",
    observation_space=spaces.Box(-_HIGH, _HIGH, dtype=np.float32),
    action_space=spaces.Discrete(3),
    state={name: (np.float64, ()) for name in ("theta1", "theta2", "dtheta1", "dtheta2")},
    make_params=make_params,
    max_episode_steps=500,
    reset_one=reset_one,
    step_one=step_one,
    reset_torch=reset_torch,
    step_torch=step_torch,
    # torch on the CPU: peak resident bytes per env beyond the estimate's buffers, measured by
    # tests/test_memory.py (make + reset + 100 steps, every mode and copy;
    # RK4's stages: ~25 float64 columns alive at once)
    torch_temporaries=200,
    reference_id="Acrobot-v1",
    description="two-link swing-up (Gymnasium's AcrobotEnv, float64 RK4)",
    renderer=ReferenceRenderer(_reference_env, ("theta1", "theta2", "dtheta1", "dtheta2"), fps=15),
    # RK4: 4 x _dsdt (45: cos, sin, d1 6, d2 4, phi2 4, phi1 12, ddtheta2 13, ddtheta1 4)
    # + 52 to combine the stages, wrap 4, observation cos / sin 4, terminal test 5
    flops_per_step=245,
)
