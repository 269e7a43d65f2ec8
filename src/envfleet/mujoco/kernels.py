"""The compiled step loop of the MuJoCo engine: a numba ``prange`` over envs that calls
MuJoCo's C API (``mj_step``, ``mj_rnePostConstraint``; ctypes functions passed in as an
argument) on each env's ``mjData`` with the GIL released, then computes Gymnasium's v5
observation, reward, termination and info entries from the env's ``qpos``/``qvel``.

Each env's arrays are read in place through their addresses (``_f64_at``): the ``mjData``
buffers MuJoCo's Python objects own, never copied. Nothing is allocated.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, NamedTuple

import numba
import numpy as np
from numba import prange, types
from numba.extending import intrinsic

#: the ``kind`` of a planar family's health check (``PLANAR`` families)
HEALTH_NONE, HEALTH_HOPPER, HEALTH_WALKER = 0, 1, 2
#: ``params`` of the planar step: forward weight, dt, healthy reward, state range (Hopper),
#: z range, angle range, the qvel clip of the observation, the initial qpos[1]
(FORWARD, DT, HEALTHY, STATE_LO, STATE_HI, Z_LO, Z_HI, ANGLE_LO, ANGLE_HI, CLIP,
 INIT_Z) = range(11)


class MujocoFunctions(NamedTuple):
    """ctypes functions of MuJoCo's C API (``libmujoco`` from the mujoco wheel)."""

    step: Any  # mj_step(const mjModel*, mjData*)
    rne_post_constraint: Any  # mj_rnePostConstraint(const mjModel*, mjData*)


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
    for name in ("mj_step", "mj_rnePostConstraint"):
        function = getattr(library, name)
        function.restype = None
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        functions.append(function)
    return MujocoFunctions(*functions)


@intrinsic
def _f64_at(typingctx: Any, address: Any) -> Any:
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


def _planar_step(mj: Any, model: int, datas: Any, qpos_at: Any, qvel_at: Any, ctrl_at: Any,
                 nq: int, nv: int, actions: Any, ctrl_weight: Any, active: Any,
                 frame_skip: int, skip: int, kind: int, terminate: bool, params: Any,
                 obs: Any, rewards: Any, terminated: Any, truncated: Any, elapsed: Any,
                 max_steps: int, x_position: Any, x_velocity: Any, reward_forward: Any,
                 reward_ctrl: Any, reward_survive: Any, z_distance: Any) -> int:
    """Step the ``active`` envs of a planar family (HalfCheetah, Hopper, Walker2d, Swimmer:
    observation ``qpos[skip:]``, ``clip(qvel)``), as their v5 ``step`` and ``TimeLimit``:
    ctrl = action, ``frame_skip`` ``mj_step``, ``mj_rnePostConstraint``, then the reward
    terms and health check. Returns the number of episodes that ended."""
    ended = 0
    for i in prange(datas.size):
        if not active[i]:
            continue
        data = datas[i]
        qpos = numba.carray(_f64_at(qpos_at[i]), nq)
        qvel = numba.carray(_f64_at(qvel_at[i]), nv)
        ctrl = numba.carray(_f64_at(ctrl_at[i]), actions.shape[1])
        action = actions[i]
        for k in range(action.size):
            ctrl[k] = action[k]
        before = qpos[0]
        for _ in range(frame_skip):
            mj.step(model, data)
        mj.rne_post_constraint(model, data)
        after = qpos[0]
        velocity = (after - before) / params[DT]
        forward = params[FORWARD] * velocity
        cost = ctrl_weight[0] * pairwise_sum_of_squares(action)
        row = obs[i]
        for k in range(skip, nq):
            row[k - skip] = qpos[k]
        clip = params[CLIP]
        for k in range(nv):
            v = qvel[k]
            row[nq - skip + k] = min(max(v, -clip), clip) if clip < np.inf else v
        healthy = True
        if kind == HEALTH_HOPPER:
            for k in range(2, nq + nv):
                s = qpos[k] if k < nq else qvel[k - nq]
                if not (params[STATE_LO] < s < params[STATE_HI]):
                    healthy = False
        if kind != HEALTH_NONE:
            healthy = (healthy and params[Z_LO] < qpos[1] < params[Z_HI]
                       and params[ANGLE_LO] < qpos[2] < params[ANGLE_HI])
            survive = params[HEALTHY] if healthy else 0.0
            rewards[i] = (forward + survive) - cost
            reward_survive[i] = survive
            z_distance[i] = qpos[1] - params[INIT_Z]
        else:
            rewards[i] = forward - cost
        x_position[i] = after
        x_velocity[i] = velocity
        reward_forward[i] = forward
        reward_ctrl[i] = -cost
        terminated[i] = terminate and not healthy
        elapsed[i] += 1
        truncated[i] = elapsed[i] >= max_steps
        if terminated[i] or truncated[i]:
            ended += 1
    return ended


@functools.cache
def planar_step() -> Any:
    """``_planar_step`` compiled (parallel, nogil) on envfleet's kernel cache; MuJoCo's entry
    points are an argument, so the machine code does not depend on where libmujoco loaded."""
    import mujoco

    from envfleet.native.jit import announce_compile
    from envfleet.native.kernel_cache import disk_cached, is_disk_cached

    compiled = numba.njit(nogil=True, error_model="numpy", parallel=True)(_planar_step)

    def announce() -> None:
        announce_compile("mujoco", "<MuJoCo>-v5", "numba", 10.0,
                         cached=is_disk_cached(compiled))
    return disk_cached(compiled, mujoco.__version__, on_compile=announce)


def addresses(arrays: list[np.ndarray]) -> np.ndarray:
    """The data addresses of ``arrays`` (one per env, float64, owned by their ``MjData``)."""
    return np.array([a.ctypes.data for a in arrays], dtype=np.int64)
