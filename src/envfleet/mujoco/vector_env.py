"""``MujocoVectorEnv``: Gymnasium's MuJoCo v5 envs batched (one ``MjModel``, one
``MjData`` per env, ``kernels`` stepping them off the GIL), and ``make_mujoco``, what
``envfleet.make("HalfCheetah-v5", n)`` builds.

Env i is, bit for bit, ``gymnasium.make(id, **kwargs)`` reset with ``seed + i``: the same
model file, the same reset noise drawn from the same ``np_random`` stream in the same order,
the same MuJoCo calls (``mj_step`` x ``frame_skip``, ``mj_rnePostConstraint``) and the same
arithmetic for observations, rewards, termination, truncation (``TimeLimit``) and info
entries. Python runs per env only at resets (``resets``: the noise draws, the reset
observation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envfleet.contract import (
    WAIT,
    VectorContract,
    check_make_arguments,
    check_seed,
    dtype_kind,
    env_seeds,
    needs_reset_error,
    on_episode_end,
)
from envfleet.mujoco import kernels as k
from envfleet.mujoco.resets import reset_envs
from envfleet.native.driver import make_batch_driver, mask_rows
from envfleet.native.numba_backend import ThreadChoice, check_num_threads, default_threads
from envfleet.native.rollout import Rollout, rollout


@dataclass(frozen=True)
class Family:
    """A v5 env the engine runs: its defaults (Gymnasium's ``__init__``), its health check
    (``kernels.HEALTH_*``), its qvel clip, its reset noise (``"normal"``: qvel noise is
    ``scale * standard_normal``, else ``uniform(-scale, scale)``), the qpos entries
    ``exclude_current_positions_from_observation`` leaves out, the velocity's dimensions (1:
    x; 2: x and y) and its info entries (at a step; at a reset)."""

    defaults: dict[str, Any]
    health: int
    clip: float
    qvel_noise: str
    skip: int
    dimensions: int
    info: tuple[str, ...]
    reset_info: tuple[str, ...]
    #: ``kernels.arm_step``'s kind, or None: ``kernels.locomotion_step``
    arm: int | None = None
    max_episode_steps: int = 1000
    #: ``kernels.humanoid_step``'s families: 1 Humanoid, 2 HumanoidStandup
    humanoid: int = 0


_X_INFO = ("x_position", "x_velocity", "reward_forward", "reward_ctrl")
_HEALTHY_INFO = (*_X_INFO, "reward_survive", "z_distance_from_origin")
_XY_RESET_INFO = ("x_position", "y_position", "distance_from_origin")
_XY_INFO = (*_XY_RESET_INFO, "x_velocity", "y_velocity", "reward_forward", "reward_ctrl")
_COMMON = {"forward_reward_weight": 1.0, "exclude_current_positions_from_observation": True}

_HUMANOID = {"xml_file": "humanoid.xml", "frame_skip": 5, "ctrl_cost_weight": 0.1,
             "reset_noise_scale": 1e-2, "exclude_current_positions_from_observation": True,
             "include_cinert_in_observation": True, "include_cvel_in_observation": True,
             "include_qfrc_actuator_in_observation": True,
             "include_cfrc_ext_in_observation": True}

#: id -> family; the defaults are those of Gymnasium's ``<Family>Env.__init__`` (v5)
FAMILIES: dict[str, Family] = {
    "HalfCheetah-v5": Family(
        {**_COMMON, "xml_file": "half_cheetah.xml", "frame_skip": 5, "ctrl_cost_weight": 0.1,
         "reset_noise_scale": 0.1}, k.HEALTH_NONE, np.inf, "normal", 1, 1, _X_INFO,
        ("x_position",)),
    "Hopper-v5": Family(
        {**_COMMON, "xml_file": "hopper.xml", "frame_skip": 4, "ctrl_cost_weight": 1e-3,
         "healthy_reward": 1.0, "terminate_when_unhealthy": True,
         "healthy_state_range": (-100.0, 100.0), "healthy_z_range": (0.7, float("inf")),
         "healthy_angle_range": (-0.2, 0.2), "reset_noise_scale": 5e-3},
        k.HEALTH_HOPPER, 10.0, "uniform", 1, 1, _HEALTHY_INFO,
        ("x_position", "z_distance_from_origin")),
    "Walker2d-v5": Family(
        {**_COMMON, "xml_file": "walker2d_v5.xml", "frame_skip": 4, "ctrl_cost_weight": 1e-3,
         "healthy_reward": 1.0, "terminate_when_unhealthy": True,
         "healthy_z_range": (0.8, 2.0), "healthy_angle_range": (-1.0, 1.0),
         "reset_noise_scale": 5e-3}, k.HEALTH_WALKER, 10.0, "uniform", 1, 1, _HEALTHY_INFO,
        ("x_position", "z_distance_from_origin")),
    "Swimmer-v5": Family(
        {**_COMMON, "xml_file": "swimmer.xml", "frame_skip": 4, "ctrl_cost_weight": 1e-4,
         "reset_noise_scale": 0.1}, k.HEALTH_NONE, np.inf, "uniform", 2, 2, _XY_INFO,
        _XY_RESET_INFO),
    "Ant-v5": Family(
        {**_COMMON, "xml_file": "ant.xml", "frame_skip": 5, "ctrl_cost_weight": 0.5,
         "contact_cost_weight": 5e-4, "healthy_reward": 1.0, "main_body": 1,
         "terminate_when_unhealthy": True, "healthy_z_range": (0.2, 1.0),
         "contact_force_range": (-1.0, 1.0), "reset_noise_scale": 0.1,
         "include_cfrc_ext_in_observation": True}, k.HEALTH_ANT, np.inf, "normal", 2, 2,
        (*_XY_INFO, "reward_contact", "reward_survive"), _XY_RESET_INFO),
    "InvertedPendulum-v5": Family(
        {"xml_file": "inverted_pendulum.xml", "frame_skip": 2, "reset_noise_scale": 0.01},
        k.HEALTH_NONE, np.inf, "uniform", 0, 1, ("reward_survive",), (), k.PENDULUM),
    "InvertedDoublePendulum-v5": Family(
        {"xml_file": "inverted_double_pendulum.xml", "frame_skip": 5, "healthy_reward": 10.0,
         "reset_noise_scale": 0.1}, k.HEALTH_NONE, 10.0, "normal", 0, 1,
        ("reward_survive", "distance_penalty", "velocity_penalty"), (), k.DOUBLE_PENDULUM),
    "Reacher-v5": Family(
        {"xml_file": "reacher.xml", "frame_skip": 2, "reward_dist_weight": 1,
         "reward_control_weight": 1}, k.HEALTH_NONE, np.inf, "reacher", 0, 1,
        ("reward_dist", "reward_ctrl"), (), k.REACHER, 50),
    "Humanoid-v5": Family(
        {**_HUMANOID, "forward_reward_weight": 1.25, "contact_cost_weight": 5e-7,
         "contact_cost_range": (-np.inf, 10.0), "healthy_reward": 5.0,
         "terminate_when_unhealthy": True, "healthy_z_range": (1.0, 2.0)}, k.HEALTH_NONE,
        np.inf, "uniform", 2, 2,
        (*_XY_RESET_INFO, "tendon_length", "tendon_velocity", "x_velocity", "y_velocity",
         "reward_survive", "reward_forward", "reward_ctrl", "reward_contact"),
        (*_XY_RESET_INFO, "tendon_length", "tendon_velocity"), humanoid=1),
    "HumanoidStandup-v5": Family(
        {**_HUMANOID, "xml_file": "humanoidstandup.xml", "uph_cost_weight": 1,
         "impact_cost_weight": 0.5e-6, "impact_cost_range": (-np.inf, 10.0)}, k.HEALTH_NONE,
        np.inf, "uniform", 2, 1,
        ("x_position", "y_position", "z_distance_from_origin", "tendon_length",
         "tendon_velocity", "reward_linup", "reward_quadctrl", "reward_impact"),
        ("x_position", "y_position", "z_distance_from_origin", "tendon_length",
         "tendon_velocity"), humanoid=2),
    "Pusher-v5": Family(
        {"xml_file": "pusher_v5.xml", "frame_skip": 5, "reward_near_weight": 0.5,
         "reward_dist_weight": 1, "reward_control_weight": 0.1}, k.HEALTH_NONE, np.inf,
        "pusher", 0, 1, ("reward_dist", "reward_ctrl", "reward_near"), (), k.PUSHER, 100),
}

def is_mujoco_id(env_id: str) -> bool:
    """Whether the engine runs ``env_id`` (the v5 ids of ``FAMILIES``)."""
    return env_id in FAMILIES


def _load_model(xml_file: str) -> Any:
    """``MujocoEnv``'s model: the file Gymnasium's ``expand_model_path`` names, parsed; a bad
    file is a ``ValueError`` naming it with the parser's message."""
    import mujoco
    from gymnasium.envs.mujoco.mujoco_env import expand_model_path

    try:
        path = expand_model_path(xml_file)
    except OSError as error:
        raise ValueError(f"xml_file {xml_file!r}: {error}") from None
    try:
        return mujoco.MjModel.from_xml_path(path)
    except ValueError as error:
        raise ValueError(f"xml_file {path!r} could not be loaded: {error}") from None


def make_mujoco(env_id: str, num_envs: int, *,
                autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                seed: int | None = None, copy: bool = True,
                max_episode_steps: int | None = None, num_threads: int | None = None,
                model_params: dict[str, Any] | None = None,
                **options: Any) -> MujocoVectorEnv:
    """``num_envs`` envs of the v5 id ``env_id`` with Gymnasium's keyword arguments
    (``FAMILIES[env_id].defaults``); see ``MujocoVectorEnv``."""
    mode = check_make_arguments(num_envs, autoreset_mode, seed, None)
    try:
        import mujoco  # noqa: F401
    except ImportError:
        raise ImportError(f"{env_id} needs mujoco (as Gymnasium's env): pip install "
                          f"'gymnasium[mujoco]'") from None
    family = FAMILIES[env_id]
    unknown = sorted(set(options) - set(family.defaults))
    if unknown:
        raise TypeError(f"{env_id}: unknown options {unknown}; it takes "
                        f"{', '.join(family.defaults)}, max_episode_steps, num_threads")
    settings = {**family.defaults, **options}
    if max_episode_steps is None:
        max_episode_steps = family.max_episode_steps  # the id's registration
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or (
            max_episode_steps < 1):
        raise ValueError(f"max_episode_steps must be an int >= 1, got {max_episode_steps!r}")
    frame_skip = settings["frame_skip"]
    if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
        raise ValueError(f"frame_skip must be an int >= 1, got {frame_skip!r}")
    check_num_threads(num_threads)
    return MujocoVectorEnv(env_id, num_envs, family, settings, autoreset_mode=mode, seed=seed,
                           copy=copy, max_episode_steps=max_episode_steps,
                           num_threads=num_threads, model_params=model_params)


class MujocoVectorEnv(VectorContract):
    """A batch of one v5 MuJoCo env: env i is bit for bit ``gymnasium.make(env_id,
    **settings)`` reset with ``seed + i`` (observations, rewards, terminated, truncated and
    the info entries, across autoresets). Reset and step rules are the contract's."""

    def __init__(self, env_id: str, num_envs: int, family: Family, settings: dict[str, Any],
                 *, autoreset_mode: AutoresetMode, seed: int | None, copy: bool,
                 max_episode_steps: int, num_threads: int | None,
                 model_params: dict[str, Any] | None = None) -> None:
        import mujoco

        self.env_id, self.num_envs, self.family = env_id, num_envs, family
        self.settings, self.max_episode_steps = settings, max_episode_steps
        self.autoreset_mode, self.copy, self.backend = autoreset_mode, copy, "mujoco"
        self.num_threads = default_threads() if num_threads is None else num_threads
        #: default threads adapt (``ThreadChoice``, as the Atari engine's): one thread when
        #: it is measured faster (a loaded machine)
        self.threads = ThreadChoice(self.num_threads, adaptive=num_threads is None)
        self.metadata = {"autoreset_mode": autoreset_mode, "render_modes": []}
        self.render_mode = None
        self.mujoco = mujoco
        self.model = _load_model(settings["xml_file"])
        self.datas = [mujoco.MjData(self.model) for _ in range(num_envs)]
        m = self.model
        #: each env's model: its own copy when ``model_params`` gives it its own values
        self.models = _env_models(m, num_envs, model_params or {})
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.init_qpos = self.datas[0].qpos.ravel().copy()
        self.init_qvel = self.datas[0].qvel.ravel().copy()
        self.frame_skip = settings["frame_skip"]
        self.dt = m.opt.timestep * self.frame_skip
        self.skip = (family.skip if settings.get("exclude_current_positions_from_observation")
                     else 0)
        #: Ant's contact forces: 0 none, 1 in the cost, 2 in the cost and the observation
        self.contact = (0 if "contact_cost_weight" not in settings
                        else 2 if settings["include_cfrc_ext_in_observation"] else 1)
        self.nbody = m.nbody
        bounds = m.actuator_ctrlrange.copy().astype(np.float32)
        self.single_action_space = spaces.Box(bounds[:, 0], bounds[:, 1], dtype=np.float32)
        obs_size = self.nq + self.nv - self.skip + (6 * (m.nbody - 1) if self.contact == 2
                                                     else 0)
        if family.arm == k.DOUBLE_PENDULUM:
            obs_size = 2 * self.nq + self.nv
        elif family.arm == k.REACHER:
            obs_size = self.nq + 6
        elif family.arm == k.PUSHER:
            obs_size = 23
        if family.humanoid:
            self.contact = 0
            rest = m.nbody - 1
            self._included = [settings[f"include_{name}_in_observation"] is True
                              for name in ("cinert", "cvel", "qfrc_actuator", "cfrc_ext")]
            obs_size = (self.nq - self.skip + self.nv
                        + sum(size for size, on in zip(
                            (10 * rest, 6 * rest, self.nv - 6, 6 * rest), self._included,
                            strict=True) if on))
        self.single_observation_space = spaces.Box(-np.inf, np.inf, (obs_size,), np.float64)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._params = (self._make_humanoid_params() if family.humanoid
                        else self._make_params())
        self._ctrl_weight = float(settings.get("ctrl_cost_weight",
                                               settings.get("reward_control_weight", 0.0)))
        self._functions = k.function_addresses()
        self._step = (k.humanoid_step() if family.humanoid else k.locomotion_step()
                      if family.arm is None else k.arm_step())
        ant = family.dimensions == 2 and "main_body" in settings  # the main body's xpos
        self._at = k.env_addresses(self.models, self.datas,
                                   m.body(settings["main_body"]).id if ant else None)
        sizes = [self.nq, self.nv, m.nbody, m.ntendon, self.frame_skip, max_episode_steps]
        terminate = bool(settings.get("terminate_when_unhealthy", False))
        if family.humanoid:
            self._flags = np.array([*sizes, family.humanoid == 2, self.skip, terminate,
                                    *self._included], np.int64)
        elif family.arm is None:
            self._flags = np.array([*sizes, self.skip, family.dimensions, family.health,
                                    terminate, self.contact], np.int64)
        else:
            names = {k.REACHER: ("fingertip", "target", "target"),
                     k.PUSHER: ("tips_arm", "object", "goal")}.get(family.arm, ("world",) * 3)
            self._flags = np.array([*sizes, family.arm, *(m.body(b).id for b in names)],
                                   np.int64)
        #: ``ctrl_cost_weight`` in each action dtype (the cost is computed in the action's)
        self._weights = {dtype.char: np.array([self._ctrl_weight], dtype)
                         for dtype in (np.dtype(np.float32), np.dtype(np.float64))}
        self.obs = np.zeros((num_envs, obs_size), np.float64)
        self.rewards = np.zeros(num_envs, np.float64)
        self.terminated = np.zeros(num_envs, np.bool_)
        self.truncated = np.zeros(num_envs, np.bool_)
        self.elapsed = np.zeros(num_envs, np.int64)
        #: the step's info entries (``kernels.INFO_KEYS``), one row each
        self._info = np.zeros((len(k.INFO_KEYS), num_envs), np.float64)
        self.info = dict(zip(k.INFO_KEYS, self._info, strict=True))
        self.info["tendon_length"] = np.zeros((num_envs, m.ntendon), np.float64)
        self.info["tendon_velocity"] = np.zeros((num_envs, m.ntendon), np.float64)
        #: the loop's arguments after the actions (``_run``)
        self._outputs = (self.obs, self.rewards, self.terminated, self.truncated, self.elapsed,
                         self._info)
        if family.humanoid:
            self._outputs += (np.stack([model.body_mass for model in self.models]),
                              np.array([model.body_mass.sum() for model in self.models]),
                              self.info["tendon_length"], self.info["tendon_velocity"])
        self._active = np.zeros(num_envs, np.bool_)
        #: the reset states drawn for ``kernels.reset_physics`` (``resets.reset_envs``)
        self._reset_physics = k.reset_physics()
        self._reset_qpos = np.zeros((num_envs, self.nq), np.float64)
        self._reset_qvel = np.zeros((num_envs, self.nv), np.float64)
        #: ``_step_info``'s rows of ``kernels.INFO_KEYS``, whether a reset reports each, and
        #: the masks of a step that reset no env
        self._tendons = ("tendon_length", "tendon_velocity")
        keys = [key for key in family.info if key not in self._tendons]
        self._info_rows = (np.array([k.INFO_KEYS.index(key) for key in keys], np.int64),
                           np.array([[key in family.reset_info] for key in keys]),
                           np.ones((len(keys), num_envs), np.bool_))
        #: whether the last step reset envs (NEXT_STEP's pending ones) instead of stepping them
        self._resetting = False
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        self._initial_seed = (check_seed(seed, count=num_envs) if seed is not None
                              else int(np.random.SeedSequence().entropy) % 2**63)
        self.final_obs = np.zeros_like(self.obs)
        self._final_info: dict[str, np.ndarray] = {}
        #: NEXT_STEP: reset on the next step; DISABLED: must be reset before the next step
        self.pending = np.zeros(num_envs, np.bool_)
        self.was_reset = np.zeros(num_envs, np.bool_)
        #: the contract's autoreset rule, run around the compiled loop by the batched driver
        self.rule = on_episode_end(autoreset_mode)
        self._begin, self._end = make_batch_driver(
            self.rule, self.rewards, self.terminated, self.truncated,
            np.zeros(num_envs, np.bool_), self.pending, mask_rows, self._keep_final,
            self._reset_rows_now)
        self._has_reset = False

    def _make_humanoid_params(self) -> np.ndarray:
        """``kernels.humanoid_step``'s params (Humanoid's or HumanoidStandup's weights)."""
        s, standup = self.settings, self.family.humanoid == 2
        params = np.zeros(k.H_INIT_Z + 1, np.float64)
        params[k.H_FORWARD] = s.get("forward_reward_weight", 0.0)
        params[k.H_DT] = self.dt
        params[k.H_HEALTHY] = s.get("healthy_reward", 0.0)
        params[k.H_Z_LO], params[k.H_Z_HI] = s.get("healthy_z_range", (0.0, 0.0))
        params[k.H_CTRL_WEIGHT] = s["ctrl_cost_weight"]
        params[k.H_CONTACT_WEIGHT] = s["impact_cost_weight" if standup else "contact_cost_weight"]
        params[k.H_CONTACT_LO], params[k.H_CONTACT_HI] = s[
            "impact_cost_range" if standup else "contact_cost_range"]
        params[k.H_MASS] = self.model.body_mass.sum()  # (each env's: ``_totals``)
        params[k.H_TIMESTEP] = self.model.opt.timestep
        params[k.H_INIT_Z] = self.init_qpos[2]
        return params

    def _make_params(self) -> np.ndarray:
        s = self.settings
        params = np.zeros(k.CONTACT_WEIGHT + 1, np.float64)
        params[k.FORWARD] = s.get("forward_reward_weight", 0.0)
        params[k.DT] = self.dt
        params[k.HEALTHY] = s.get("healthy_reward", 0.0)
        params[k.STATE_LO], params[k.STATE_HI] = s.get("healthy_state_range", (0.0, 0.0))
        params[k.Z_LO], params[k.Z_HI] = s.get("healthy_z_range", (0.0, 0.0))
        params[k.ANGLE_LO], params[k.ANGLE_HI] = s.get("healthy_angle_range", (0.0, 0.0))
        params[k.CLIP] = self.family.clip
        params[k.INIT_Z] = self.init_qpos[1]
        params[k.CONTACT_LO], params[k.CONTACT_HI] = s.get("contact_force_range", (0.0, 0.0))
        params[k.CONTACT_WEIGHT] = s.get("contact_cost_weight", 0.0)
        if self.family.arm == k.PUSHER:  # arm_step's parameters
            params[0], params[1] = s["reward_near_weight"], s["reward_dist_weight"]
        elif self.family.arm is not None:
            params[0] = s.get("healthy_reward", s.get("reward_dist_weight", 0.0))
        return params

    def _reset_rows_now(self, rows: np.ndarray, seeds: list[int | None] | None = None) -> None:
        reset_envs(self, rows, seeds)

    # the engine interface ``native.rollout`` drives: ``step`` -> episodes ended, buffers
    @property
    def engine(self) -> _Engine:
        """The engine ``native.rollout`` steps (this env's buffers and ``step_batch``)."""
        return _Engine(self)

    def ended_mask(self) -> np.ndarray:
        """Envs whose episode ended in the last step."""
        return self.terminated | self.truncated

    def reset(self, *, seed: int | Sequence[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``); env i gets ``seed + i``
        (``np_random`` reseeded as ``Env.reset(seed=)``)."""
        self._check_open()
        seed, mask = self._mask_only(seed, options)
        rows = np.ones(self.num_envs, np.bool_) if mask is None else mask
        seeds = None if seed is None else env_seeds(seed, self.num_envs)
        self._reset_rows_now(rows, seeds)
        self.pending[rows] = False
        self._has_reset = True
        return self._out(self.obs), self._reset_info(rows)

    def check_actions(self, actions: Any) -> np.ndarray:
        """The batch as a C-contiguous float array, or a ``ValueError`` naming the first env
        whose action is refused (wrong shape, not floats, NaN/inf; an env that must be reset
        first, DISABLED): checked whole, before any env moves. The common batch (a contiguous
        native float32/float64 array of the right shape, all finite) passes at once; any other
        goes through every check, in order."""
        if (type(actions) is np.ndarray and actions.shape == self.action_space.shape
                and actions.dtype.char in "fd" and actions.dtype.isnative
                and actions.flags.c_contiguous
                and np.isfinite(actions).all()
                and not (self.rule == WAIT and self.pending.any())):
            return actions
        batch = np.asarray(actions)
        expected = (self.num_envs, self.nu)
        if batch.shape != expected:
            raise ValueError(f"{self.env_id}: actions must have shape {expected} (num_envs="
                             f"{self.num_envs}, action shape ({self.nu},)), got {batch.shape}")
        kind, name = dtype_kind(batch.dtype)
        if kind != "f" or batch.dtype not in (np.float32, np.float64):
            raise ValueError(f"{self.env_id}: actions must be float32 or float64 (the action "
                             f"space's Box), got dtype {name}")
        finite = np.isfinite(batch).all(axis=1)
        if not finite.all():
            i = int(np.flatnonzero(~finite)[0])
            raise ValueError(f"{self.env_id}: the action of env {i} is not finite: "
                             f"{batch[i].tolist()}")
        if self.rule == WAIT and self.pending.any():
            raise needs_reset_error(int(np.flatnonzero(self.pending)[0]))
        return np.ascontiguousarray(batch)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env; autoreset as ``metadata["autoreset_mode"]`` says."""
        self._check_open()
        self._check_has_reset("step")
        ended = self.step_batch(actions)
        out = self._step_info()
        if ended and self.autoreset_mode is AutoresetMode.SAME_STEP:
            done = self.ended_mask()
            for key in self.family.info:
                out["_" + key] = out["_" + key] & ~done
            for key, value in self._reset_info(done).items():
                out[key] = (out[key] | value) if key.startswith("_") else np.where(
                    done.reshape(-1, *(1,) * (value.ndim - 1)), value, out[key])
            self._add_final(out, self._out(self.final_obs), done, self._final_info)
        return (self._out(self.obs), self._out(self.rewards), self._out(self.terminated),
                self._out(self.truncated), out)

    def step_batch(self, actions: Any) -> int:
        """The engine's step (also ``rollout``'s): check the batch, then the batched driver
        around the compiled loop: the pending envs reset (NEXT_STEP) and skipped by the loop,
        the others stepped, then the ended envs pending, or (SAME_STEP) reset, the step's
        rewards and flags kept, ``final_obs`` and the final infos saved. Returns the number of
        episodes that ended."""
        batch = self.check_actions(actions)
        rows = self.was_reset
        np.copyto(rows, self.pending)  # NEXT_STEP's (DISABLED's were refused)
        self._resetting = bool(rows.any())
        self._begin(rows if self._resetting else None)
        threads, timed = self.threads.for_step()
        numba.set_num_threads(threads)
        start = time.perf_counter()
        ended = self._run(threads, batch, np.logical_not(rows, out=self._active))
        if timed:
            self.threads.record(threads, time.perf_counter() - start)
        self._end(ended)
        return int(ended)

    def _keep_final(self, done: np.ndarray) -> None:
        """SAME_STEP: the ended envs' final observations (the other rows zero) and infos."""
        self.final_obs.fill(0.0)
        np.copyto(self.final_obs, self.obs, where=done[:, None])
        self._final_info = {}
        for key in self.family.info:
            self._final_info[key] = _where(done, self.info[key])
            self._final_info["_" + key] = done.copy()

    def _run(self, threads: int, batch: np.ndarray, active: np.ndarray) -> int:
        """The family's compiled loop over the ``active`` envs on ``threads`` threads
        (Humanoid's costs ``data.ctrl`` with its float weight; the others the action, with the
        weight in its dtype)."""
        if self.family.humanoid:
            return self._step(threads, self._functions, self._at, self._flags, self._params,
                              batch, active, *self._outputs)
        return self._step(threads, self._functions, self._at, self._flags, self._params, batch,
                          self._weights[batch.dtype.char], active, *self._outputs)

    def _step_info(self) -> dict[str, Any]:
        """The step's info (fresh arrays): each family entry for the envs stepped; for the
        envs reset instead (NEXT_STEP), the reset info entries, the others masked out. The
        entries of ``kernels.INFO_KEYS`` take one call for their values and one for their
        masks, each entry a row of them."""
        rows, at_reset, every = self._info_rows
        if self._resetting:
            masks = at_reset | ~self.was_reset
            values = np.where(masks, self._info[rows], 0.0)
        else:
            masks = every.copy()
            values = self._info[rows]
        rows_of = zip(values, masks, strict=True)
        out: dict[str, Any] = {}
        for key in self.family.info:
            if key in self._tendons:  # at a step and at a reset: every env's
                out[key], out["_" + key] = self.info[key].copy(), np.ones(self.num_envs, bool)
            else:
                out[key], out["_" + key] = next(rows_of)
        return out

    def _reset_info(self, rows: np.ndarray) -> dict[str, Any]:
        """The reset info entries of ``rows`` (masked)."""
        out: dict[str, Any] = {}
        for key in self.family.reset_info:
            out[key] = _where(rows, self.info[key])
            out["_" + key] = rows.copy()
        return out

    def rollout(self, policy: Callable[[Any], Any] | Any, num_steps: int | None = None, *,
                record: bool = True) -> Rollout:
        """``num_steps`` steps with actions from ``policy(obs)`` or ``policy[t]``; as
        ``NativeVectorEnv.rollout``."""
        self._check_open()
        self._check_has_reset("rollout")
        return rollout(self, policy, num_steps, record)

    def close_extras(self, **kwargs: Any) -> None:
        """Release the simulations (idempotent)."""
        if not self._closed:
            self._closed = True
            self.datas = []
            self._at = self._at[:0]



#: model fields ``model_params`` refuses: they change what the engine computes once per batch
#: (dt, sizes), not just the physics
_FIXED_FIELDS = ("opt.timestep",)


def _env_models(model: Any, num_envs: int, params: dict[str, Any]) -> list[Any]:
    """One model per env: ``model`` itself for all without ``params``; else a copy each, whose
    fields named in ``params`` (``MjModel`` array attributes such as ``body_mass``,
    ``geom_friction``, ``actuator_gear``, or ``opt.<field>`` such as ``opt.gravity``) get row i
    of the given ``(num_envs, *field shape)`` values: env i steps as ``gymnasium.make``'s env
    with ``env.unwrapped.model.<field>[:] = values[i]``."""
    if not params:
        return [model] * num_envs
    import copy

    checked = {}
    for name, values in params.items():
        target = model.opt if name.startswith("opt.") else model
        field = name.removeprefix("opt.")
        current = getattr(target, field, None) if isinstance(name, str) else None
        if name in _FIXED_FIELDS or not isinstance(current, np.ndarray):
            raise ValueError(f"model_params: {name!r} is not a per-env MjModel field (an array "
                             f"attribute such as 'body_mass', 'geom_friction', "
                             f"'actuator_gear', or 'opt.gravity'; not {_FIXED_FIELDS})")
        array = np.asarray(values)
        expected = (num_envs, *current.shape)
        if array.shape != expected:
            raise ValueError(f"model_params[{name!r}] must have shape {expected} (num_envs, "
                             f"*{name}'s shape), got {array.shape}")
        if array.dtype.kind not in "iuf" or not np.isfinite(array).all():
            bad = np.flatnonzero(~np.isfinite(array.reshape(num_envs, -1)).all(axis=1)) if (
                array.dtype.kind in "iuf") else np.array([0])
            raise ValueError(f"model_params[{name!r}] must be finite numbers; env "
                             f"{int(bad[0])}'s are not")
        checked[name] = array
    models = []
    for i in range(num_envs):
        own = copy.copy(model)
        for name, array in checked.items():
            target = own.opt if name.startswith("opt.") else own
            getattr(target, name.removeprefix("opt."))[...] = array[i]
        models.append(own)
    return models


def _where(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (one row per env) where ``rows``, else zeros."""
    return np.where(rows.reshape(-1, *(1,) * (values.ndim - 1)), values, 0.0)


class _Engine:
    """A ``MujocoVectorEnv`` as the engine ``native.rollout`` drives: ``step`` returns the
    episodes that ended; ``obs``, ``rewards``, ``terminated``, ``truncated``, ``final_obs``
    are the env's own buffers."""

    def __init__(self, env: MujocoVectorEnv) -> None:
        self.step = env.step_batch
        self.obs, self.rewards, self.final_obs = env.obs, env.rewards, env.final_obs
        self.terminated, self.truncated = env.terminated, env.truncated

    @staticmethod
    def copy(array: np.ndarray) -> np.ndarray:
        """A copy of one of the engine's buffers."""
        return array.copy()
