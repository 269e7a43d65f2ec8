"""The compiled step loop of the MuJoCo engine: a numba ``prange`` over envs that calls
MuJoCo's C API (``mj_step``, ``mj_rnePostConstraint``; their addresses passed in as an
argument) on each env's ``mjData`` with the GIL released, then computes Gymnasium's v5
observation, reward, termination and info entries from the env's ``mjData`` arrays
(``locomotion_step``: HalfCheetah, Hopper, Walker2d, Swimmer, Ant; ``arm_step``: the
pendulums, Reacher, Pusher; ``humanoid_step``: Humanoid, HumanoidStandup).

The loops run ``threads`` workers (numba's thread count, set by the caller), each taking the
next env from a shared counter (``native.handout``): a slow env or a descheduled thread holds up
one env, not a block of the batch.

Each env's arrays are read in place through their addresses (``f64_at``): the ``mjData``
buffers MuJoCo's Python objects own, never copied. Per env and step only tiny scratch arrays
(Ant's clipped contact forces, Humanoid's centres of mass) are allocated.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any, NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from envfleet.native.handout import next_index

#: the health check of a family (``step``'s ``health``)
HEALTH_NONE, HEALTH_HOPPER, HEALTH_WALKER, HEALTH_ANT = 0, 1, 2, 3
#: the C entry points ``functions`` holds (``function_addresses``)
MJ_STEP, MJ_RNE_POST_CONSTRAINT, POW, MJ_RESET_DATA, MJ_FORWARD = range(5)
#: columns of ``at``, each env's addresses (``env_addresses``): its model (its own with per-env
#: model parameters, else the batch's), its ``mjData`` and the data arrays the loops read
(AT_MODEL, AT_DATA, AT_QPOS, AT_QVEL, AT_CTRL, AT_XY, AT_CFRC_EXT, AT_XPOS, AT_SITE_XPOS,
 AT_QFRC_CONSTRAINT, AT_XIPOS, AT_CINERT, AT_CVEL, AT_QFRC_ACTUATOR, AT_TEN_LENGTH,
 AT_TEN_VELOCITY) = range(16)
#: ``flags`` every loop reads first: the model's sizes, ``frame_skip``, the time limit
NQ, NV, NBODY, NTENDON, FRAME_SKIP, MAX_STEPS = range(6)
#: ``params`` of the step: forward weight, dt, healthy reward, state range (Hopper), z range,
#: angle range, the qvel clip of the observation, the initial qpos[1], the contact force range,
#: the contact cost weight
(FORWARD, DT, HEALTHY, STATE_LO, STATE_HI, Z_LO, Z_HI, ANGLE_LO, ANGLE_HI, CLIP, INIT_Z,
 CONTACT_LO, CONTACT_HI, CONTACT_WEIGHT) = range(14)
#: ``locomotion_step``'s ``flags`` after the sizes: qpos entries left out of the observation,
#: velocity dimensions (1: x, 2: x and y), health check, terminate when unhealthy, contact
#: forces: 0 none, 1 in the cost, 2 in the cost and the observation
SKIP, DIMENSIONS, HEALTH, TERMINATE, CONTACT = range(MAX_STEPS + 1, MAX_STEPS + 6)
#: rows of the step's ``info`` (one per info entry, one column per env)
INFO_KEYS = ("x_position", "y_position", "distance_from_origin", "x_velocity", "y_velocity",
             "reward_forward", "reward_ctrl", "reward_contact", "reward_survive",
             "z_distance_from_origin", "distance_penalty", "velocity_penalty", "reward_dist",
             "reward_near", "reward_linup", "reward_quadctrl", "reward_impact")
(X_POSITION, Y_POSITION, DISTANCE, X_VELOCITY, Y_VELOCITY, REWARD_FORWARD, REWARD_CTRL,
 REWARD_CONTACT, REWARD_SURVIVE, Z_DISTANCE, DISTANCE_PENALTY, VELOCITY_PENALTY,
 REWARD_DIST, REWARD_NEAR, REWARD_LINUP, REWARD_QUADCTRL, REWARD_IMPACT) = range(len(INFO_KEYS))
#: ``humanoid_step``'s ``params`` and ``flags`` (after the sizes)
(H_FORWARD, H_DT, H_HEALTHY, H_Z_LO, H_Z_HI, H_CTRL_WEIGHT, H_CONTACT_WEIGHT, H_CONTACT_LO,
 H_CONTACT_HI, H_MASS, H_TIMESTEP, H_INIT_Z) = range(12)
(H_STANDUP, H_SKIP, H_TERMINATE, H_CINERT, H_CVEL, H_QFRC, H_CFRC) = range(
    MAX_STEPS + 1, MAX_STEPS + 8)
#: the families of ``arm_step``
PENDULUM, DOUBLE_PENDULUM, REACHER, PUSHER = 0, 1, 2, 3
#: ``arm_step``'s ``flags`` after the sizes: the family, the three bodies its rewards measure
ARM_KIND, BODY_A, BODY_B, BODY_C = range(MAX_STEPS + 1, MAX_STEPS + 5)


class MujocoFunctions(NamedTuple):
    """ctypes functions of MuJoCo's C API (``libmujoco`` from the mujoco wheel)."""

    step: Any  # mj_step(const mjModel*, mjData*)
    rne_post_constraint: Any  # mj_rnePostConstraint(const mjModel*, mjData*)
    #: libm's pow(double, double): NumPy's scalar ``v**2`` (not always ``v * v``), which
    #: LLVM would turn back into ``v * v`` if ``** 2.0`` were written in the loop
    pow: Any
    reset_data: Any  # mj_resetData(const mjModel*, mjData*)
    forward: Any  # mj_forward(const mjModel*, mjData*)


@functools.cache
def mujoco_functions() -> MujocoFunctions:
    """MuJoCo's entry points, from the ``libmujoco`` the Python bindings load (one per
    process): the same library, so the same physics as ``mujoco.mj_step``."""
    import glob
    import os

    import mujoco

    folder = os.path.dirname(mujoco.__file__)
    paths = sorted(glob.glob(os.path.join(folder, "libmujoco.so*")))
    if not paths:
        raise ImportError(f"mujoco {mujoco.__version__}: no libmujoco.so in {folder}; the "
                          f"MuJoCo engine needs the wheel's shared library")
    library = ctypes.CDLL(paths[0])
    functions = []
    for name in ("mj_step", "mj_rnePostConstraint", "mj_resetData", "mj_forward"):
        function = getattr(library, name)
        function.restype = None
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        functions.append(function)
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    power = libm.pow
    power.restype = ctypes.c_double
    power.argtypes = [ctypes.c_double, ctypes.c_double]
    return MujocoFunctions(*functions[:2], power, *functions[2:])


@functools.cache
def function_addresses() -> np.ndarray:
    """``mujoco_functions``' entry points as addresses (indexed by ``MJ_STEP``,
    ``MJ_RNE_POST_CONSTRAINT``, ``POW``, ``MJ_RESET_DATA``, ``MJ_FORWARD``): an int64 array
    is an argument numba's dispatch types in a fraction of a microsecond (a tuple of ctypes
    functions costs ~3 µs a call)."""
    return np.array([ctypes.cast(function, ctypes.c_void_p).value
                     for function in mujoco_functions()], np.int64)


@intrinsic
def call_model_data(typingctx: Any, function: Any, model: Any, data: Any) -> Any:
    """Call the C function ``void f(const mjModel*, mjData*)`` at address ``function`` (an
    entry of ``function_addresses``) on the model and data at their addresses."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = ir.IntType(8).as_pointer()
        callee = builder.inttoptr(
            args[0], ir.FunctionType(ir.VoidType(), [pointer, pointer]).as_pointer())
        builder.call(callee, [builder.inttoptr(args[1], pointer),
                              builder.inttoptr(args[2], pointer)])
        return context.get_dummy_value()
    return types.none(types.int64, types.int64, types.int64), codegen


@intrinsic
def call_pow(typingctx: Any, function: Any, x: Any, y: Any) -> Any:
    """``pow(x, y)`` through libm's function at address ``function`` (``POW``)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        double = ir.DoubleType()
        callee = builder.inttoptr(
            args[0], ir.FunctionType(double, [double, double]).as_pointer())
        return builder.call(callee, [args[1], args[2]])
    return types.float64(types.int64, types.float64, types.float64), codegen


@intrinsic
def f64_at(typingctx: Any, address: Any) -> Any:
    """The ``float64*`` at an integer address (an ``mjData`` array's ``ctypes.data``)."""
    pointer = types.CPointer(types.float64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(pointer))
    return pointer(types.int64), codegen


@numba.njit(nogil=True, error_model="numpy")
def pairwise_sum_of_squares(values: Any) -> Any:
    """``np.sum(np.square(values))`` bit for bit, in ``values``' dtype: NumPy's pairwise sum
    (below 8 values one by one from zero; up to 128, eight running sums combined pairwise)."""
    n = values.size
    zero = values[0] - values[0]
    if n < 8:
        total = zero
        for k in range(n):
            total += values[k] * values[k]
        return total
    r0, r1, r2, r3 = (values[0] * values[0], values[1] * values[1], values[2] * values[2],
                      values[3] * values[3])
    r4, r5, r6, r7 = (values[4] * values[4], values[5] * values[5], values[6] * values[6],
                      values[7] * values[7])
    k = 8
    while k < n - n % 8:
        r0 += values[k] * values[k]
        r1 += values[k + 1] * values[k + 1]
        r2 += values[k + 2] * values[k + 2]
        r3 += values[k + 3] * values[k + 3]
        r4 += values[k + 4] * values[k + 4]
        r5 += values[k + 5] * values[k + 5]
        r6 += values[k + 6] * values[k + 6]
        r7 += values[k + 7] * values[k + 7]
        k += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while k < n:
        total += values[k] * values[k]
        k += 1
    return total


@numba.njit(nogil=True, error_model="numpy")
def _set_ctrl(row_at: Any, action: Any) -> Any:
    """``data.ctrl[:] = action`` (``do_simulation``) of the env whose addresses are
    ``row_at``; returns that ``ctrl``."""
    ctrl = numba.carray(f64_at(row_at[AT_CTRL]), action.size)
    for k in range(action.size):
        ctrl[k] = action[k]
    return ctrl


@numba.njit(nogil=True, error_model="numpy")
def _physics(functions: Any, row_at: Any, frame_skip: int) -> None:
    """One env-step of the env whose addresses are ``row_at``: ``frame_skip`` x ``mj_step``,
    then ``mj_rnePostConstraint`` (``cfrc_ext``), as ``MujocoEnv.do_simulation``."""
    model, data = row_at[AT_MODEL], row_at[AT_DATA]
    for _ in range(frame_skip):
        call_model_data(functions[MJ_STEP], model, data)
    call_model_data(functions[MJ_RNE_POST_CONSTRAINT], model, data)


@numba.njit(nogil=True, error_model="numpy")
def _clipped_sum_of_squares(values: Any, lo: float, hi: float) -> float:
    """``np.sum(np.square(np.clip(values, lo, hi)))`` bit for bit (``pairwise_sum_of_squares``
    of the clipped values; ``values`` at most 128 float64)."""
    clipped = np.empty(values.size)
    for k in range(values.size):
        clipped[k] = min(max(values[k], lo), hi)
    return pairwise_sum_of_squares(clipped)


def _locomotion_step(threads: int, functions: Any, at: Any, flags: Any, params: Any, actions: Any,
                     ctrl_weight: Any, active: Any, obs: Any, rewards: Any, terminated: Any,
                     truncated: Any, elapsed: Any, info: Any) -> int:
    """Step the ``active`` envs of a locomotion family (HalfCheetah, Hopper, Walker2d,
    Swimmer, Ant) as its v5 ``step`` and ``TimeLimit``: ctrl = action, ``frame_skip``
    ``mj_step``, ``mj_rnePostConstraint``; the velocity from ``xy_at`` (qpos, or Ant's main
    body's xpos), the observation ``qpos[skip:]``, ``clip(qvel)`` (and Ant's clipped
    ``cfrc_ext[1:]``), the reward terms, the health check, ``info``. Returns the number of
    episodes that ended."""
    nq, nv, nbody = flags[NQ], flags[NV], flags[NBODY]
    skip, dims, health = flags[SKIP], flags[DIMENSIONS], flags[HEALTH]
    contact = flags[CONTACT]
    counter = np.zeros(1, np.int64)  # envs handed out one at a time (handout)
    for _worker in prange(threads):
        while True:
            i = next_index(counter)
            if i >= at.shape[0]:
                break
            if not active[i]:
                continue
            row_at = at[i]
            qpos = numba.carray(f64_at(row_at[AT_QPOS]), nq)
            qvel = numba.carray(f64_at(row_at[AT_QVEL]), nv)
            xy = numba.carray(f64_at(row_at[AT_XY]), dims)
            action = actions[i]
            _set_ctrl(row_at, action)
            x_before = xy[0]
            y_before = xy[1] if dims == 2 else 0.0
            _physics(functions, row_at, flags[FRAME_SKIP])
            x_velocity = (xy[0] - x_before) / params[DT]
            forward = params[FORWARD] * x_velocity
            cost = ctrl_weight[0] * pairwise_sum_of_squares(action)
            row = obs[i]
            for k in range(skip, nq):
                row[k - skip] = qpos[k]
            clip = params[CLIP]
            for k in range(nv):
                v = qvel[k]
                row[nq - skip + k] = min(max(v, -clip), clip) if clip < np.inf else v
            contact_cost = 0.0
            if contact:
                cfrc = numba.carray(f64_at(row_at[AT_CFRC_EXT]), nbody * 6)
                lo, hi = params[CONTACT_LO], params[CONTACT_HI]
                contact_cost = params[CONTACT_WEIGHT] * _clipped_sum_of_squares(cfrc, lo, hi)
                if contact == 2:
                    base = nq - skip + nv - 6
                    for k in range(6, nbody * 6):
                        row[base + k] = min(max(cfrc[k], lo), hi)
            healthy = True
            if health == HEALTH_HOPPER:
                for k in range(2, nq + nv):
                    s = qpos[k] if k < nq else qvel[k - nq]
                    if not (params[STATE_LO] < s < params[STATE_HI]):
                        healthy = False
            if HEALTH_HOPPER <= health <= HEALTH_WALKER:
                healthy = (healthy and params[Z_LO] < qpos[1] < params[Z_HI]
                           and params[ANGLE_LO] < qpos[2] < params[ANGLE_HI])
            elif health == HEALTH_ANT:
                for k in range(nq + nv):
                    s = qpos[k] if k < nq else qvel[k - nq]
                    if not np.isfinite(s):
                        healthy = False
                healthy = healthy and params[Z_LO] <= qpos[2] <= params[Z_HI]
            if health != HEALTH_NONE:
                survive = params[HEALTHY] if healthy else 0.0
                if contact:
                    rewards[i] = (forward + survive) - (cost + contact_cost)
                else:
                    rewards[i] = (forward + survive) - cost
                info[REWARD_SURVIVE, i] = survive
            else:
                rewards[i] = forward - cost
            info[X_POSITION, i] = qpos[0]
            info[X_VELOCITY, i] = x_velocity
            if dims == 2:
                info[Y_POSITION, i] = qpos[1]
                info[DISTANCE, i] = np.sqrt(qpos[0] * qpos[0] + qpos[1] * qpos[1])
                info[Y_VELOCITY, i] = (xy[1] - y_before) / params[DT]
            else:
                info[Z_DISTANCE, i] = qpos[1] - params[INIT_Z]
            info[REWARD_FORWARD, i] = forward
            info[REWARD_CTRL, i] = -cost
            info[REWARD_CONTACT, i] = -contact_cost
            terminated[i] = flags[TERMINATE] and not healthy
            elapsed[i] += 1
            truncated[i] = elapsed[i] >= flags[MAX_STEPS]
    return ended_count(active, terminated, truncated)


def _arm_step(threads: int, functions: Any, at: Any, flags: Any, params: Any, actions: Any,
              ctrl_weight: Any, active: Any, obs: Any, rewards: Any, terminated: Any,
              truncated: Any, elapsed: Any, info: Any) -> int:
    """Step the ``active`` envs of InvertedPendulum, InvertedDoublePendulum, Reacher or
    Pusher (``flags[ARM_KIND]``) as their v5 ``step`` and ``TimeLimit`` (``params``: the
    survive reward, or the distance weights; ``flags[BODY_A:]``: the bodies the rewards
    measure). Returns the number of episodes that ended."""
    nq, nv, nbody, kind = flags[NQ], flags[NV], flags[NBODY], flags[ARM_KIND]
    power = functions[POW]
    counter = np.zeros(1, np.int64)  # envs handed out one at a time (handout)
    for _worker in prange(threads):
        while True:
            i = next_index(counter)
            if i >= at.shape[0]:
                break
            if not active[i]:
                continue
            row_at = at[i]
            qpos = numba.carray(f64_at(row_at[AT_QPOS]), nq)
            qvel = numba.carray(f64_at(row_at[AT_QVEL]), nv)
            action = actions[i]
            _set_ctrl(row_at, action)
            _physics(functions, row_at, flags[FRAME_SKIP])
            row = obs[i]
            done = False
            if kind == PENDULUM:
                finite = True
                for k in range(nq):
                    row[k] = qpos[k]
                    finite = finite and np.isfinite(qpos[k])
                for k in range(nv):
                    row[nq + k] = qvel[k]
                    finite = finite and np.isfinite(qvel[k])
                done = not finite or abs(row[1]) > 0.2
                rewards[i] = 0.0 if done else 1.0
                info[REWARD_SURVIVE, i] = rewards[i]
            elif kind == DOUBLE_PENDULUM:
                site = numba.carray(f64_at(row_at[AT_SITE_XPOS]), 3)
                qfrc = numba.carray(f64_at(row_at[AT_QFRC_CONSTRAINT]), nv)
                row[0] = qpos[0]
                for k in range(1, nq):
                    row[k] = np.sin(qpos[k])
                    row[nq - 1 + k] = np.cos(qpos[k])
                for k in range(nv):
                    row[2 * nq - 1 + k] = min(max(qvel[k], -10.0), 10.0)
                row[2 * nq - 1 + nv] = min(max(qfrc[0], -10.0), 10.0)
                x, y = site[0], site[2]
                done = y <= 1
                distance = 0.01 * call_pow(power, x, 2.0) + call_pow(power, y - 2.0, 2.0)
                velocity = (1e-3 * call_pow(power, qvel[1], 2.0)
                            + 5e-3 * call_pow(power, qvel[2], 2.0))
                alive = params[0] * (0.0 if done else 1.0)
                rewards[i] = (alive - distance) - velocity
                info[REWARD_SURVIVE, i] = alive
                info[DISTANCE_PENALTY, i] = -distance
                info[VELOCITY_PENALTY, i] = -velocity
            elif kind == PUSHER:
                xpos = numba.carray(f64_at(row_at[AT_XPOS]), 3 * nbody)
                tips, thing, goal = 3 * flags[BODY_A], 3 * flags[BODY_B], 3 * flags[BODY_C]
                a = np.empty(3)  # small fixed arrays: numba keeps them on the stack
                b = np.empty(3)
                for j in range(3):
                    a[j] = xpos[thing + j] - xpos[tips + j]
                    b[j] = xpos[thing + j] - xpos[goal + j]
                near = -np.sqrt((a[0] * a[0] + a[1] * a[1]) + a[2] * a[2]) * params[0]
                dist = -np.sqrt((b[0] * b[0] + b[1] * b[1]) + b[2] * b[2]) * params[1]
                cost = -pairwise_sum_of_squares(action) * ctrl_weight[0]
                rewards[i] = (dist + cost) + near
                info[REWARD_DIST, i] = dist
                info[REWARD_CTRL, i] = cost
                info[REWARD_NEAR, i] = near
                for k in range(7):
                    row[k] = qpos[k]
                    row[7 + k] = qvel[k]
                for j in range(3):
                    row[14 + j] = xpos[tips + j]
                    row[17 + j] = xpos[thing + j]
                    row[20 + j] = xpos[goal + j]
            else:
                xpos = numba.carray(f64_at(row_at[AT_XPOS]), 3 * nbody)
                f, t = 3 * flags[BODY_A], 3 * flags[BODY_B]
                dx, dy, dz = xpos[f] - xpos[t], xpos[f + 1] - xpos[t + 1], xpos[f + 2] - xpos[t + 2]
                dist = -np.sqrt((dx * dx + dy * dy) + dz * dz) * params[0]
                cost = -pairwise_sum_of_squares(action) * ctrl_weight[0]
                rewards[i] = dist + cost
                info[REWARD_DIST, i] = dist
                info[REWARD_CTRL, i] = cost
                row[0], row[1] = np.cos(qpos[0]), np.cos(qpos[1])
                row[2], row[3] = np.sin(qpos[0]), np.sin(qpos[1])
                for k in range(2, nq):
                    row[2 + k] = qpos[k]
                row[2 + nq], row[3 + nq] = qvel[0], qvel[1]
                row[4 + nq], row[5 + nq] = dx, dy
            terminated[i] = done
            elapsed[i] += 1
            truncated[i] = elapsed[i] >= flags[MAX_STEPS]
    return ended_count(active, terminated, truncated)


@numba.njit(nogil=True, error_model="numpy")
def _mass_center(xipos: Any, mass: Any, total: float, out: Any) -> None:
    """Humanoid's ``mass_center``: ``np.einsum("b,bj->j", mass, xipos)`` (a running sum over
    the bodies, as NumPy's einsum does it) over ``mass.sum()``, x and y."""
    for j in range(2):
        acc = 0.0
        for b in range(mass.size):
            acc += mass[b] * xipos[3 * b + j]
        out[j] = (0.0 + acc) / total


def _humanoid_step(threads: int, functions: Any, at: Any, flags: Any, params: Any, actions: Any,
                   active: Any, obs: Any, rewards: Any, terminated: Any, truncated: Any,
                   elapsed: Any, info: Any, mass: Any, totals: Any, tendon_length: Any,
                   tendon_velocity: Any) -> int:
    """Step the ``active`` envs of Humanoid or HumanoidStandup (``flags[H_STANDUP]``) as
    their v5 ``step`` and ``TimeLimit``: the observation (``qpos[skip:]``, ``qvel``, and as
    included ``cinert[1:]``, ``cvel[1:]``, ``qfrc_actuator[6:]``, ``cfrc_ext[1:]``), the
    costs of ``data.ctrl`` and ``cfrc_ext`` (clipped), Humanoid's centre-of-mass velocity and
    health (``mass``, ``totals``: each env's body masses and their sum), the tendons. Returns
    the number of episodes that ended."""
    nq, nv, nbody, ntendon = flags[NQ], flags[NV], flags[NBODY], flags[NTENDON]
    standup, skip = flags[H_STANDUP], flags[H_SKIP]
    counter = np.zeros(1, np.int64)  # envs handed out one at a time (handout)
    for _worker in prange(threads):
        while True:
            i = next_index(counter)
            if i >= at.shape[0]:
                break
            if not active[i]:
                continue
            row_at = at[i]
            qpos = numba.carray(f64_at(row_at[AT_QPOS]), nq)
            qvel = numba.carray(f64_at(row_at[AT_QVEL]), nv)
            xipos = numba.carray(f64_at(row_at[AT_XIPOS]), 3 * nbody)
            cfrc = numba.carray(f64_at(row_at[AT_CFRC_EXT]), 6 * nbody)
            ctrl = _set_ctrl(row_at, actions[i])
            before = np.empty(2)
            after = np.empty(2)
            if not standup:
                _mass_center(xipos, mass[i], totals[i], before)
            _physics(functions, row_at, flags[FRAME_SKIP])
            ctrl_cost = params[H_CTRL_WEIGHT] * pairwise_sum_of_squares(ctrl)
            contact = min(max(params[H_CONTACT_WEIGHT] * pairwise_sum_of_squares(cfrc),
                              params[H_CONTACT_LO]), params[H_CONTACT_HI])
            healthy = True
            if standup:
                linup = (qpos[2] - 0.0) / params[H_TIMESTEP]
                rewards[i] = ((linup - ctrl_cost) - contact) + 1.0
                info[REWARD_LINUP, i] = linup
                info[REWARD_QUADCTRL, i] = -ctrl_cost
                info[REWARD_IMPACT, i] = -contact
                info[Z_DISTANCE, i] = qpos[2] - params[H_INIT_Z]
            else:
                _mass_center(xipos, mass[i], totals[i], after)
                x_velocity = (after[0] - before[0]) / params[H_DT]
                y_velocity = (after[1] - before[1]) / params[H_DT]
                forward = params[H_FORWARD] * x_velocity
                healthy = params[H_Z_LO] < qpos[2] < params[H_Z_HI]
                survive = params[H_HEALTHY] if healthy else 0.0
                rewards[i] = (forward + survive) - (ctrl_cost + contact)
                info[X_VELOCITY, i] = x_velocity
                info[Y_VELOCITY, i] = y_velocity
                info[DISTANCE, i] = np.sqrt(qpos[0] * qpos[0] + qpos[1] * qpos[1])
                info[REWARD_SURVIVE, i] = survive
                info[REWARD_FORWARD, i] = forward
                info[REWARD_CTRL, i] = -ctrl_cost
                info[REWARD_CONTACT, i] = -contact
            info[X_POSITION, i] = qpos[0]
            info[Y_POSITION, i] = qpos[1]
            lengths = numba.carray(f64_at(row_at[AT_TEN_LENGTH]), ntendon)
            speeds = numba.carray(f64_at(row_at[AT_TEN_VELOCITY]), ntendon)
            for k in range(ntendon):
                tendon_length[i, k] = lengths[k]
                tendon_velocity[i, k] = speeds[k]
            row = obs[i]
            n = 0
            for k in range(skip, nq):
                row[n] = qpos[k]
                n += 1
            for k in range(nv):
                row[n] = qvel[k]
                n += 1
            if flags[H_CINERT]:
                cinert = numba.carray(f64_at(row_at[AT_CINERT]), 10 * nbody)
                for k in range(10, 10 * nbody):
                    row[n] = cinert[k]
                    n += 1
            if flags[H_CVEL]:
                cvel = numba.carray(f64_at(row_at[AT_CVEL]), 6 * nbody)
                for k in range(6, 6 * nbody):
                    row[n] = cvel[k]
                    n += 1
            if flags[H_QFRC]:
                qfrc = numba.carray(f64_at(row_at[AT_QFRC_ACTUATOR]), nv)
                for k in range(6, nv):
                    row[n] = qfrc[k]
                    n += 1
            if flags[H_CFRC]:
                for k in range(6, 6 * nbody):
                    row[n] = cfrc[k]
                    n += 1
            terminated[i] = flags[H_TERMINATE] and not healthy
            elapsed[i] += 1
            truncated[i] = elapsed[i] >= flags[MAX_STEPS]
    return ended_count(active, terminated, truncated)


@numba.njit(nogil=True, error_model="numpy")
def ended_count(active: Any, terminated: Any, truncated: Any) -> int:
    """The episodes the step loop ended: its ``active`` envs terminated or truncated."""
    ended = 0
    for i in range(active.size):
        if active[i] and (terminated[i] or truncated[i]):
            ended += 1
    return ended


def _reset_physics(functions: Any, at: Any, rows: Any, qpos: Any, qvel: Any) -> None:
    """The MuJoCo calls of ``MujocoEnv.reset`` for the envs ``rows``: ``mj_resetData``, then
    ``set_state`` (qpos and qvel from the rows of ``qpos``, ``qvel``: the drawn reset state)
    and ``mj_forward``."""
    for r in range(rows.size):
        i = rows[r]
        model, data = at[i, AT_MODEL], at[i, AT_DATA]
        call_model_data(functions[MJ_RESET_DATA], model, data)
        target = numba.carray(f64_at(at[i, AT_QPOS]), qpos.shape[1])
        for k in range(qpos.shape[1]):
            target[k] = qpos[i, k]
        target = numba.carray(f64_at(at[i, AT_QVEL]), qvel.shape[1])
        for k in range(qvel.shape[1]):
            target[k] = qvel[i, k]
        call_model_data(functions[MJ_FORWARD], model, data)


@functools.cache
def _compiled(loop: Any) -> Any:
    """``loop`` compiled (parallel, nogil) on envfleet's kernel cache; MuJoCo's entry points
    are an argument, so the machine code does not depend on where libmujoco loaded."""
    import mujoco

    from envfleet.native.jit import announce_compile
    from envfleet.native.kernel_cache import disk_cached, is_disk_cached

    compiled = numba.njit(nogil=True, error_model="numpy", parallel=True)(loop)

    def announce() -> None:
        announce_compile(("mujoco", loop.__name__), "<MuJoCo>-v5", "numba", 10.0,
                         cached=is_disk_cached(compiled))
    return disk_cached(compiled, mujoco.__version__, on_compile=announce)


def locomotion_step() -> Any:
    """``_locomotion_step``, compiled (``_compiled``)."""
    return _compiled(_locomotion_step)


def humanoid_step() -> Any:
    """``_humanoid_step``, compiled (``_compiled``)."""
    return _compiled(_humanoid_step)


def arm_step() -> Any:
    """``_arm_step``, compiled (``_compiled``)."""
    return _compiled(_arm_step)


def reset_physics() -> Any:
    """``_reset_physics``, compiled (``_compiled``)."""
    return _compiled(_reset_physics)


def addresses(arrays: list[np.ndarray]) -> np.ndarray:
    """The data addresses of ``arrays`` (one per env, float64, owned by their ``MjData``)."""
    return np.array([a.ctypes.data for a in arrays], dtype=np.int64)


def env_addresses(models: list[Any], datas: list[Any], xy_body: int | None) -> np.ndarray:
    """The loops' ``at``: row i the addresses of env i's model, ``mjData`` and data arrays
    (columns ``AT_*``); ``AT_XY`` is ``qpos`` or, with ``xy_body``, that body's ``xpos``
    (Ant's main body)."""
    columns = [np.array([model._address for model in models], np.int64),
               np.array([data._address for data in datas], np.int64)]
    for name in ("qpos", "qvel", "ctrl", "xy", "cfrc_ext", "xpos", "site_xpos",
                 "qfrc_constraint", "xipos", "cinert", "cvel", "qfrc_actuator", "ten_length",
                 "ten_velocity"):
        if name == "xy":
            columns.append(addresses([data.qpos if xy_body is None else data.xpos[xy_body]
                                      for data in datas]))
        else:
            columns.append(addresses([getattr(data, name) for data in datas]))
    return np.stack(columns, axis=1)
