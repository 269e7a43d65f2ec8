"""Resets of the MuJoCo engine, as Gymnasium's ``MujocoEnv.reset`` and the family's
``reset_model``: the noise drawn per env in Python from the env's ``np_random`` in Gymnasium's
order; ``mj_resetData``, ``set_state`` and ``mj_forward`` of all the reset envs in one compiled
call; then the reset observation and info entries per env. ``env`` is the
``MujocoVectorEnv`` whose buffers they write (typed ``Any``: that module imports this one)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.utils import seeding

from envfleet.mujoco import kernels as k


def reset_envs(env: Any, rows: np.ndarray, seeds: list[int | None] | None) -> None:
    """``env.reset(seed=seeds[i])`` of the envs ``rows`` (a mask): per env a new
    ``np_random`` when seeded and the noise drawn in Gymnasium's order; then the MuJoCo calls
    of them all in one compiled call (``kernels.reset_physics``); then per env the
    observation and the reset info entries."""
    indices = np.flatnonzero(rows)
    for i in indices:
        _draw_state(env, int(i), None if seeds is None else seeds[i])
    env._reset_physics(env._functions, env._at, indices, env._reset_qpos, env._reset_qvel)
    for i in indices:
        _reset_outputs(env, int(i), env.datas[i])


def _draw_state(env: Any, i: int, seed: int | None) -> None:
    """Env i's reset state (``reset_model``'s draws from its ``np_random``, reseeded when
    ``seed`` is given or it has none yet) into row i of ``env._reset_qpos``, ``_reset_qvel``."""
    if seed is not None or env.rngs[i] is None:
        env.rngs[i], _ = seeding.np_random(seed)
    rng = env.rngs[i]
    if env.family.qvel_noise == "reacher":
        qpos, qvel = _reacher_noise(env, rng)
    elif env.family.qvel_noise == "pusher":
        qpos, qvel = _pusher_noise(env, rng)
    else:
        scale = env.settings["reset_noise_scale"]
        qpos = env.init_qpos + rng.uniform(low=-scale, high=scale, size=env.nq)
        if env.family.qvel_noise == "normal":
            if env.family.arm == k.DOUBLE_PENDULUM:
                qvel = env.init_qvel + rng.standard_normal(env.nv) * scale
            else:
                qvel = env.init_qvel + scale * rng.standard_normal(env.nv)
        else:
            qvel = env.init_qvel + rng.uniform(low=-scale, high=scale, size=env.nv)
    env._reset_qpos[i] = qpos
    env._reset_qvel[i] = qvel


def _reset_outputs(env: Any, i: int, data: Any) -> None:
    """Env i's reset observation and info entries from its reset ``data``; its step count 0."""
    env.elapsed[i] = 0
    if env.family.arm is not None:
        env.obs[i] = _arm_obs(env, data)
        return
    if env.family.humanoid:
        _humanoid_reset(env, i, data)
        return
    velocity = data.qvel.flatten()
    if env.family.clip < np.inf:
        velocity = np.clip(velocity, -env.family.clip, env.family.clip)
    parts = [data.qpos.flatten()[env.skip:], velocity]
    if env.contact == 2:
        lo, hi = env.settings["contact_force_range"]
        parts.append(np.clip(data.cfrc_ext, lo, hi)[1:].flatten())
    env.obs[i] = np.concatenate(parts)
    env.info["x_position"][i] = data.qpos[0]
    env.info["y_position"][i] = data.qpos[1]
    env.info["distance_from_origin"][i] = _norm(data.qpos[0:2])
    env.info["z_distance_from_origin"][i] = data.qpos[1] - env.init_qpos[1]


def _norm(vector: np.ndarray) -> Any:
    """``np.linalg.norm(vector)`` of a 1-D float vector, by its own arithmetic (``sqrt`` of
    ``vector.dot(vector)``) without its argument handling (~1.5 µs a call)."""
    return np.sqrt(vector.dot(vector))


def _reacher_noise(env: Any, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``ReacherEnv.reset_model``'s draws: joint noise, a goal drawn until inside the
    0.2 disc, velocity noise; the goal's qpos set, its qvel zeroed."""
    qpos = rng.uniform(low=-0.1, high=0.1, size=env.nq) + env.init_qpos
    while True:
        goal = rng.uniform(low=-0.2, high=0.2, size=2)
        if _norm(goal) < 0.2:
            break
    qpos[-2:] = goal
    qvel = env.init_qvel + rng.uniform(low=-0.005, high=0.005, size=env.nv)
    qvel[-2:] = 0
    return qpos, qvel


def _humanoid_reset(env: Any, i: int, data: Any) -> None:
    """Humanoid's and HumanoidStandup's ``_get_obs`` and reset info of env i."""
    parts = [data.qpos.flatten()[env.skip:], data.qvel.flatten()]
    for on, value in zip(env._included, (data.cinert[1:], data.cvel[1:],
                                          data.qfrc_actuator[6:], data.cfrc_ext[1:]),
                         strict=True):
        if on:
            parts.append(value.flatten())
    env.obs[i] = np.concatenate(parts)
    info = env.info
    info["x_position"][i], info["y_position"][i] = data.qpos[0], data.qpos[1]
    info["distance_from_origin"][i] = _norm(data.qpos[0:2])
    info["z_distance_from_origin"][i] = data.qpos[2] - env.init_qpos[2]
    info["tendon_length"][i] = data.ten_length
    info["tendon_velocity"][i] = data.ten_velocity


def _pusher_noise(env: Any, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``PusherEnv.reset_model``'s draws: the object's position drawn until 0.17 from
    the goal (at the origin), velocity noise; the object's and goal's qvel zeroed. (It
    writes into its ``init_qpos``; only the entries every reset overwrites.)"""
    qpos = env.init_qpos
    goal = np.asarray([0, 0])
    while True:
        cylinder = np.concatenate([rng.uniform(low=-0.3, high=0, size=1),
                                   rng.uniform(low=-0.2, high=0.2, size=1)])
        if _norm(cylinder - goal) > 0.17:
            break
    qpos[-4:-2] = cylinder
    qpos[-2:] = goal
    qvel = env.init_qvel + rng.uniform(low=-0.005, high=0.005, size=env.nv)
    qvel[-4:] = 0
    return qpos, qvel


def _arm_obs(env: Any, data: Any) -> np.ndarray:
    """The reset observation of InvertedPendulum, InvertedDoublePendulum, Reacher (their
    ``_get_obs``)."""
    arm = env.family.arm
    if arm == k.PENDULUM:
        return np.concatenate([data.qpos, data.qvel]).ravel()
    if arm == k.DOUBLE_PENDULUM:
        return np.concatenate([data.qpos[:1], np.sin(data.qpos[1:]), np.cos(data.qpos[1:]),
                               np.clip(data.qvel, -10, 10),
                               np.clip(data.qfrc_constraint, -10, 10)[:1]]).ravel()
    # the bodies the rewards measure: Pusher's tips_arm, object, goal; Reacher's fingertip,
    # target (ids, not ``data.body(name)``: a name lookup a body)
    bodies = env._flags[k.BODY_A:k.BODY_C + 1]
    if arm == k.PUSHER:
        return np.concatenate([data.qpos.flatten()[:7], data.qvel.flatten()[:7],
                               *data.xpos[bodies]])
    theta = data.qpos.flatten()[:2]
    vec = data.xpos[bodies[0]] - data.xpos[bodies[1]]
    return np.concatenate([np.cos(theta), np.sin(theta), data.qpos.flatten()[2:],
                           data.qvel.flatten()[:2], vec[:2]])
