"""``envfleet bench --env ALE/<Game>-v5``: envfleet's Atari engine next to the Atari peers.

Every series plays the standard preprocessing (grayscale 84x84, frame skip 4 with the last two
frames max-pooled, up to 30 no-ops at reset, 4 frames stacked, sticky actions 0.25, no reward
clipping, no FIRE at reset, no life-loss termination), N envs, the bench's fixed random actions:

- ``atari``: envfleet's engine (``envfleet.make(id, n, seed=s)``, ``envfleet.atari``) at its
  default threads (``atari``) and at each ``--threads`` count asked for (``atari <T>t``);
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
  nothing else (``scripts/atari_ratios.py`` uses the same loop), at its best thread count.

Importing this module registers the Atari peers into ``baselines.BASELINES`` and the reference
stack into ``baselines.REFERENCE_STACKS`` / ``ENVPOOL_IDS``; ``envfleet.bench`` imports it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
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

#: the series of envfleet's Atari engine (an ``envfleet.make`` of the id, default backend)
ATARI = "atari"
#: the default num_envs sweep (an env holds ~7 MB and loads its ROM in ~0.1 s)
DEFAULT_NUM_ENVS = (8, 16, 32, 64)
#: the peers of the default sweep, in table order (each only where it can run here)
PEERS = ("envpool", "ale-vector", "gym-sync", "gym-async", "sb3-subproc", "ale-floor")
#: the preprocessing's settings every series plays (Gymnasium's defaults)
FRAME_SKIP, STACK = 4, 4
STICKY = 0.25


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` is one the Atari engine runs (``ALE/<Game>-v5``)."""
    from envfleet.atari import is_atari_id

    return is_atari_id(env_id)


def engine_status(env_id: str) -> str | None:
    """None when envfleet's Atari engine can run ``env_id`` here, else the reason."""
    import importlib.util

    if not is_atari(env_id):
        return f"the atari series runs ALE/<Game>-v5 ids, not {env_id!r}"
    for module, package in (("ale_py", "ale-py"), ("cv2", "opencv-python-headless")):
        if importlib.util.find_spec(module) is None:
            return f"not installed: needs {module} (pip install {package})"
    return None


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
    and restarts at the end of its game (compiled once per process)."""
    import numba

    from envfleet.atari.ale import ale_functions

    f = ale_functions()
    act, grayscale, over, reset = f.act, f.grayscale, f.game_over, f.reset_game

    @numba.njit(nogil=True, parallel=True)
    def loop(pointers: np.ndarray, targets: np.ndarray, codes: np.ndarray,
             actions: np.ndarray, frame_skip: int) -> None:
        for i in numba.prange(pointers.size):
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
        self.loop(self.pointers, self.targets, self.codes, actions, FRAME_SKIP)
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


PEER_BASELINES = (
    Baseline("ale-vector", "ale-py's C++ AtariVectorEnv (vector_entry_point), threads = the "
             "usable cores, no reward clipping or FIRE reset", False, _ale_vector,
             requires="ale_py", threads=None, executor_default=False, env_ids=atari_ids),
    Baseline("ale-floor", "ALE's own cost: frame_skip x act + one grayscale read per step from "
             "a compiled loop (numba prange), its best thread count", False, _ale_floor,
             requires="ale_py", thread_sweep=True, executor_default=False, env_ids=atari_ids),
)
for _peer in PEER_BASELINES:
    BASELINES[_peer.name] = _peer
REFERENCE_STACKS["ALE"] = reference_env
ENVPOOL_IDS["ALE"] = envpool_id
