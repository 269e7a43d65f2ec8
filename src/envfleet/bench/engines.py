"""``envfleet bench --env <id>`` for the ids of envfleet's engines (``envfleet.make``'s default
backend picks them): the engine next to the peers a user would pick and the simulator's floor.

An engine family (``EngineFamily``, one per engine in ``FAMILIES``) names its series (the
engine's own name, at its default threads and at each ``--threads`` count asked for: ``atari``,
``atari <T>t``), its ids, its peers and default num_envs; the runner plans, measures and reports
every family alike. Every series plays the same env with the bench's fixed random actions.

``ALE/<Game>-v5`` (``atari``): the standard preprocessing (grayscale 84x84, frame skip 4 with
the last two frames max-pooled, up to 30 no-ops at reset, 4 frames stacked, sticky actions
0.25, no reward clipping, no FIRE at reset, no life-loss termination):

- ``envpool``: EnvPool's ``<Game>-v5`` (sync mode) with the same settings
  (``repeat_action_probability=0.25``, ``use_fire_reset=False``; its other defaults match),
  measured at 1 .. usable cores threads, its best kept;
- ``ale-vector``: ale-py's C++ ``AtariVectorEnv`` (Gymnasium's ``vector_entry_point`` for these
  ids) at the usable cores' threads, ``reward_clipping=False, use_fire_reset=False``;
- ``gym-sync`` / ``gym-async`` / ``sb3-dummy`` / ``sb3-subproc``: the reference wrapper stack
  ``FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)), 4)`` (``reference_env``)
  in Gymnasium's Sync/Async vector envs and SB3's DummyVecEnv/SubprocVecEnv;
- ``ale-floor``: the emulator's own cost, from a compiled loop (numba ``prange``, no GIL) over
  ALE's C++ entry points: per env and step, ``frame_skip`` x ``act`` and one grayscale read,
  nothing else (``atari_ratios`` uses the same loop), at its best thread count.

Gymnasium's MuJoCo ``<Id>-v5`` (``mujoco``): ``gymnasium.make(id)`` with its defaults:

- ``envpool``: EnvPool's ``<Id>-v5`` (sync mode; its own MuJoCo build), its best thread count;
- ``gym-sync`` / ``gym-async`` / ``sb3-subproc``: ``gymnasium.make(id)`` in Gymnasium's
  Sync/Async vector envs and SB3's SubprocVecEnv; ``pool``: envfleet's pool executor of it;
- ``mujoco-floor``: the simulator's own cost, from a compiled loop (numba ``prange``, no GIL)
  over MuJoCo's C API on the same model: per env and step, ctrl = the action, ``frame_skip`` x
  ``mj_step`` and one ``mj_rnePostConstraint`` (what the v5 step asks of MuJoCo), no
  observation, reward or reset (``mujoco_ratios`` uses the same loop), at its best
  thread count.

Importing this module registers the peers into ``baselines.BASELINES`` and Atari's reference
stack into ``baselines.REFERENCE_STACKS`` / ``ENVPOOL_IDS``; ``envfleet.bench`` imports it.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from envfleet.bench.baselines import (
    BASELINES,
    ENVPOOL_IDS,
    REFERENCE_STACKS,
    Baseline,
    BaselineEnv,
)


@dataclass(frozen=True)
class EngineFamily:
    """An envfleet engine as the bench measures it: its series (``name``, also the backend
    ``measure`` builds with ``envfleet.make(id, n, num_threads=T)``), its ids, the peers of
    its default sweep (each only where it can run here) and its default num_envs."""

    name: str
    #: its ids, in words (``ALE/<Game>-v5``)
    ids: str
    is_id: Callable[[str], bool]
    #: (module, pip package) the engine needs beyond envfleet
    needs: tuple[tuple[str, str], ...]
    peers: tuple[str, ...]
    default_num_envs: tuple[int, ...]

    def status(self, env_id: str) -> str | None:
        """None when the engine can run ``env_id`` here, else the reason."""
        if not self.is_id(env_id):
            return f"the {self.name} series runs {self.ids} ids, not {env_id!r}"
        for module, package in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"not installed: needs {module} (pip install {package})"
        return None


def _is_atari(env_id: str) -> bool:
    from envfleet.atari import is_atari_id

    return is_atari_id(env_id)


def _is_mujoco(env_id: str) -> bool:
    from envfleet.mujoco.vector_env import is_mujoco_id

    return is_mujoco_id(env_id)


#: Atari: the standard preprocessing's settings every series plays (Gymnasium's defaults)
FRAME_SKIP, STACK = 4, 4
STICKY = 0.25

#: the default sweeps: an Atari env holds ~7 MB and loads its ROM in ~0.1 s; a MuJoCo env
#: touches well under 1 MiB (docs/MUJOCO.md#speed-per-family)
ATARI = EngineFamily(
    "atari", "ALE/<Game>-v5", _is_atari,
    (("ale_py", "ale-py"), ("cv2", "opencv-python-headless")),
    ("envpool", "ale-vector", "gym-sync", "gym-async", "sb3-subproc", "ale-floor"),
    (8, 16, 32, 64))
MUJOCO = EngineFamily(
    "mujoco", "Gymnasium's MuJoCo <Id>-v5", _is_mujoco, (("mujoco", "'gymnasium[mujoco]'"),),
    ("envpool", "gym-sync", "gym-async", "sb3-subproc", "pool", "mujoco-floor"),
    (16, 32, 64))
#: engine name -> family, in ``measure.ENGINE_BACKENDS``' order
FAMILIES: dict[str, EngineFamily] = {f.name: f for f in (ATARI, MUJOCO)}


def family_of(env_id: str) -> EngineFamily | None:
    """The engine family whose ids include ``env_id``, if any."""
    return next((f for f in FAMILIES.values() if f.is_id(env_id)), None)


# --- Atari's peers ------------------------------------------------------------------------------


@functools.cache
def atari_ids() -> frozenset[str]:
    """The ``ALE/<Game>-v5`` ids of the installed ROMs (empty without ale-py)."""
    try:
        from envfleet.atari import installed_games

        return frozenset(installed_games())
    except ImportError:
        return frozenset()


def reference_env(env_id: str) -> gymnasium.Env:
    """One env of Gymnasium's reference stack for ``env_id`` (what the engine's env i equals
    bit for bit): ``FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)), 4)``."""
    import ale_py

    gymnasium.register_envs(ale_py)
    env = gymnasium.make(env_id, frameskip=1)
    return gymnasium.wrappers.FrameStackObservation(
        gymnasium.wrappers.AtariPreprocessing(env, frame_skip=FRAME_SKIP), STACK)


def envpool_id(env_id: str) -> tuple[str, dict[str, Any]]:
    """EnvPool's id of ``ALE/<Game>-v5`` and the options that give it the same preprocessing."""
    return (env_id.removeprefix("ALE/"),
            {"repeat_action_probability": STICKY, "use_fire_reset": False})


def _ale_vector(env_id: str, num_envs: int, seed: int, num_threads: int | None = None
                ) -> BaselineEnv:
    """ale-py's ``AtariVectorEnv`` through Gymnasium's ``vector_entry_point`` of the id."""
    import ale_py

    from envfleet.machine import usable_cores

    gymnasium.register_envs(ale_py)
    env = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                             num_threads=num_threads or usable_cores(), reward_clipping=False,
                             use_fire_reset=False)
    return BaselineEnv(reset=lambda: env.reset(seed=seed)[0], step=env.step,
                       action_space=env.action_space, close=env.close)


# --- the floor: ALE's own cost, from a compiled loop ------------------------------------------


def emulators(game: str, num_envs: int, seed: int = 0) -> list[Any]:
    """``num_envs`` ALE emulators of ``game`` (a ROM name), sticky actions 0.25, seeded
    ``seed + i``, reset."""
    import ale_py
    from ale_py import roms

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ales = []
    for i in range(num_envs):
        ale = ale_py.ALEInterface()
        ale.setFloat("repeat_action_probability", STICKY)
        ale.setInt("random_seed", seed + i)
        ale.loadROM(roms.get_rom_path(game))
        ale.reset_game()
        ales.append(ale)
    return ales


@functools.cache
def floor_loop() -> Callable[..., None]:
    """The compiled floor step: each env acts ``frame_skip`` times, reads one grayscale frame,
    and restarts at the end of its game, envs handed to the threads one at a time as the
    engine's loop hands them (``native.handout``; compiled once per process)."""
    import numba

    from envfleet.atari.ale import ale_functions
    from envfleet.native.handout import next_index

    f = ale_functions()
    act, grayscale, over, reset = f.act, f.grayscale, f.game_over, f.reset_game

    @numba.njit(nogil=True, parallel=True)
    def loop(threads: int, pointers: np.ndarray, targets: np.ndarray, codes: np.ndarray,
             actions: np.ndarray, frame_skip: int) -> None:
        counter = np.zeros(1, np.int64)
        for _worker in numba.prange(threads):
            while True:
                i = next_index(counter)
                if i >= pointers.size:
                    break
                for _ in range(frame_skip):
                    act(pointers[i], codes[actions[i]], np.float32(1.0))
                grayscale(pointers[i], targets[i])
                if over(pointers[i], True):
                    reset(pointers[i])

    return loop


class AleFloor:
    """N emulators stepped by ``floor_loop`` on ``num_threads`` numba threads."""

    def __init__(self, game: str, num_envs: int, seed: int, num_threads: int) -> None:
        from envfleet.atari.ale import GrayscaleTarget, instance_pointer

        self.ales = emulators(game, num_envs, seed)  # the pointers point into them
        self.pointers = np.array([instance_pointer(a) for a in self.ales], np.int64)
        height, width = self.ales[0].getScreenDims()
        self.frames = np.zeros((num_envs, height, width), np.uint8)
        self.target = GrayscaleTarget(self.frames)  # kept alive with the frames
        self.targets = self.target.addresses()
        self.codes = np.array([a.value for a in self.ales[0].getMinimalActionSet()], np.int32)
        self.num_threads = num_threads
        self.loop = floor_loop()

    def step(self, actions: np.ndarray) -> np.ndarray:
        """One agent step of every emulator; returns the frames read."""
        import numba

        numba.set_num_threads(self.num_threads)
        self.loop(self.num_threads, self.pointers, self.targets, self.codes, actions,
                  FRAME_SKIP)
        return self.frames

    def reset(self) -> np.ndarray:
        for ale in self.ales:
            ale.reset_game()
        return self.frames


def _ale_floor(env_id: str, num_envs: int, seed: int, num_threads: int = 1) -> BaselineEnv:
    import ale_py

    gymnasium.register_envs(ale_py)
    game = gymnasium.spec(env_id).kwargs["game"]
    floor = AleFloor(game, num_envs, seed, num_threads)
    space = gymnasium.vector.utils.batch_space(gymnasium.spaces.Discrete(floor.codes.size),
                                               num_envs)
    return BaselineEnv(reset=floor.reset, step=floor.step, action_space=space,
                       close=lambda: None)


# --- MuJoCo's floor: the simulator's own cost, from a compiled loop -----------------------------


def mujoco_ids() -> frozenset[str]:
    """The v5 ids the MuJoCo engine runs."""
    from envfleet.mujoco.vector_env import FAMILIES as MUJOCO_FAMILIES

    return frozenset(MUJOCO_FAMILIES)


@functools.cache
def mujoco_floor_loop() -> Callable[..., None]:
    """The compiled floor step: each env's ctrl set to its action, ``frame_skip`` x ``mj_step``
    and one ``mj_rnePostConstraint``, envs handed to the threads one at a time as the engine's
    loop hands them (``native.handout``; compiled once per process)."""
    import numba

    from envfleet.mujoco.kernels import f64_at, mujoco_functions
    from envfleet.native.handout import next_index

    f = mujoco_functions()
    step, rne = f.step, f.rne_post_constraint

    @numba.njit(nogil=True, parallel=True)
    def loop(threads: int, model: int, datas: np.ndarray, ctrl_at: np.ndarray,
             actions: np.ndarray, frame_skip: int) -> None:
        counter = np.zeros(1, np.int64)
        for _worker in numba.prange(threads):
            while True:
                i = next_index(counter)
                if i >= datas.size:
                    break
                ctrl = numba.carray(f64_at(ctrl_at[i]), actions.shape[1])
                for k in range(actions.shape[1]):
                    ctrl[k] = actions[i, k]
                for _ in range(frame_skip):
                    step(model, datas[i])
                rne(model, datas[i])

    return loop


class MujocoFloor:
    """N simulations of ``env_id``'s model (with its v5 defaults) stepped by
    ``mujoco_floor_loop`` on ``num_threads`` numba threads, from the engine's own reset
    states (``envfleet.make(env_id, n, seed=seed)``: the same model, the same reset noise)."""

    def __init__(self, env_id: str, num_envs: int, seed: int, num_threads: int) -> None:
        import envfleet

        self.env = envfleet.make(env_id, num_envs, seed=seed, num_threads=num_threads)
        self.seed, self.num_threads = seed, num_threads
        self.model = self.env.model._address
        self.datas = np.array([d._address for d in self.env.datas], np.int64)
        self.ctrl = np.array([d.ctrl.ctypes.data for d in self.env.datas], np.int64)
        self.frame_skip = self.env.frame_skip
        self.action_space = self.env.action_space
        self.loop = mujoco_floor_loop()

    def step(self, actions: np.ndarray) -> None:
        """One env-step of every simulation."""
        import numba

        numba.set_num_threads(self.num_threads)
        self.loop(self.num_threads, self.model, self.datas, self.ctrl,
                  np.asarray(actions, np.float64), self.frame_skip)

    def reset(self) -> np.ndarray:
        """The engine's reset (Gymnasium's states for ``seed + i``); the first observations."""
        return self.env.reset(seed=self.seed)[0]

    def close(self) -> None:
        self.env.close()


def _mujoco_floor(env_id: str, num_envs: int, seed: int, num_threads: int = 1) -> BaselineEnv:
    floor = MujocoFloor(env_id, num_envs, seed, num_threads)
    return BaselineEnv(reset=floor.reset, step=floor.step, action_space=floor.action_space,
                       close=floor.close)


PEER_BASELINES = (
    Baseline("ale-vector", "ale-py's C++ AtariVectorEnv (vector_entry_point), threads = the "
             "usable cores, no reward clipping or FIRE reset", False, _ale_vector,
             requires="ale_py", threads=None, executor_default=False, env_ids=atari_ids),
    Baseline("ale-floor", "ALE's own cost: frame_skip x act + one grayscale read per step from "
             "a compiled loop (numba prange), its best thread count", False, _ale_floor,
             requires="ale_py", thread_sweep=True, executor_default=False, env_ids=atari_ids),
    Baseline("mujoco-floor", "MuJoCo's own cost: ctrl = action, frame_skip x mj_step + "
             "mj_rnePostConstraint per step from a compiled loop (numba prange), its best "
             "thread count", False, _mujoco_floor, requires="mujoco", thread_sweep=True,
             executor_default=False, env_ids=mujoco_ids),
)
for _peer in PEER_BASELINES:
    BASELINES[_peer.name] = _peer
REFERENCE_STACKS["ALE"] = reference_env
ENVPOOL_IDS["ALE"] = envpool_id
