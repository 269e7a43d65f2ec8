"""``AtariVectorEnv``: Gymnasium's vector API over ``AtariEngine`` (every ALE game with the
standard preprocessing), and ``make_atari``, what ``envfleet.make("ALE/<Game>-v5", n)`` builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envfleet.atari.engine import AtariEngine
from envfleet.contract import VectorContract, check_make_arguments, check_seed, env_seeds
from envfleet.native.rollout import Rollout, rollout

#: the namespace and version of the ids the engine runs: ``ALE/<Game>-v5``
ATARI_PREFIX, ATARI_SUFFIX = "ALE/", "-v5"

#: the preprocessing's options and Gymnasium's defaults (``AtariPreprocessing``,
#: ``FrameStackObservation``); the emulator's (``repeat_action_probability``,
#: ``full_action_space``, ``max_num_frames_per_episode``, ``mode``, ``difficulty``) default to
#: the id's registration
PREPROCESSING_DEFAULTS: dict[str, Any] = {"noop_max": 30, "frame_skip": 4, "screen_size": 84,
                                          "terminal_on_life_loss": False, "stack_size": 4}
#: EnvPool's training options (off: Gymnasium's env, bit for bit): ``episodic_life``, a lost
#: life is ``terminated`` but the game goes on (NEXT_STEP's reset step only does the no-ops);
#: ``reward_clip``, rewards are their sign (``info["reward"]``: unclipped)
ENVPOOL_DEFAULTS: dict[str, Any] = {"episodic_life": False, "reward_clip": False}
EMULATOR_OPTIONS = ("repeat_action_probability", "full_action_space",
                    "max_num_frames_per_episode", "mode", "difficulty")

_MODES = {AutoresetMode.NEXT_STEP: 0, AutoresetMode.SAME_STEP: 1, AutoresetMode.DISABLED: 2}


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` names an id the engine runs (``ALE/<Game>-v5``)."""
    return (env_id.startswith(ATARI_PREFIX) and env_id.endswith(ATARI_SUFFIX)
            and "-ram-" not in env_id)


def installed_games() -> list[str]:
    """The ``ALE/<Game>-v5`` ids of the ROMs ale-py ships."""
    import ale_py

    gymnasium.register_envs(ale_py)
    return sorted(i for i in gymnasium.registry
                  if is_atari_id(i) and "game" in gymnasium.registry[i].kwargs)


def _game(env_id: str) -> tuple[str, dict[str, Any]]:
    """The ROM name of ``env_id`` and its registered emulator options, or an error that lists
    the installed games."""
    try:
        import ale_py
    except ImportError:
        raise ImportError(f"{env_id} needs ale-py (the ROMs ship in its wheel): pip install "
                          f"ale-py opencv-python-headless") from None
    gymnasium.register_envs(ale_py)
    spec = gymnasium.registry.get(env_id)
    from ale_py import roms

    game = None if spec is None else spec.kwargs.get("game")
    if game is None or game not in roms.get_all_rom_ids() or spec.kwargs.get("obs_type",
                                                                            "rgb") != "rgb":
        games = [i.removeprefix(ATARI_PREFIX).removesuffix(ATARI_SUFFIX)
                 for i in installed_games()]
        raise ValueError(f"unknown Atari game {env_id!r}; ale-py {ale_py.__version__} "
                         f"installs {len(games)}: {', '.join(games)} (as ALE/<Game>-v5)")
    return game, dict(spec.kwargs)


def _screen(size: Any) -> tuple[int, int]:
    """``screen_size`` as (width, height): an int or a (width, height) tuple, as the wrapper."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size, size
    if (isinstance(size, tuple) and len(size) == 2
            and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size)):
        return size
    raise ValueError(f"screen_size must be a positive int or a (width, height) tuple of "
                     f"them, got {size!r}")


def _positive_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def make_atari(env_id: str, num_envs: int, *,
               autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
               seed: int | None = None, copy: bool = True, max_episode_steps: int | None = None,
               num_threads: int | None = None, **options: Any) -> AtariVectorEnv:
    """``num_envs`` envs of ``ALE/<Game>-v5`` with the standard preprocessing (options:
    ``PREPROCESSING_DEFAULTS`` and ``EMULATOR_OPTIONS``); see ``AtariVectorEnv``."""
    mode = check_make_arguments(num_envs, autoreset_mode, seed, None)
    if max_episode_steps is not None:
        raise ValueError(f"{env_id}: episodes end as ALE/<Game>-v5's do, at "
                         f"max_num_frames_per_episode emulated frames (108000 by default); pass "
                         f"max_num_frames_per_episode instead of max_episode_steps")
    unknown = sorted(set(options) - set(PREPROCESSING_DEFAULTS) - set(ENVPOOL_DEFAULTS)
                     - set(EMULATOR_OPTIONS))
    if unknown:
        raise TypeError(f"{env_id}: unknown options {unknown}; the Atari engine takes "
                        f"{', '.join([*PREPROCESSING_DEFAULTS, *ENVPOOL_DEFAULTS])}, "
                        f"{', '.join(EMULATOR_OPTIONS)}, num_threads")
    game, registered = _game(env_id)
    settings = {**PREPROCESSING_DEFAULTS, **ENVPOOL_DEFAULTS, **options}
    for name in ENVPOOL_DEFAULTS:
        if not isinstance(settings[name], bool | np.bool_):
            raise ValueError(f"{name} must be a bool, got {settings[name]!r}")
    if settings["episodic_life"] and mode is not AutoresetMode.NEXT_STEP:
        raise ValueError(f"{env_id}: episodic_life needs autoreset_mode NEXT_STEP (EnvPool's: "
                         f"the step after a lost life continues the game), got {mode}")
    if settings["episodic_life"] and settings["terminal_on_life_loss"]:
        raise ValueError(f"{env_id}: episodic_life and terminal_on_life_loss both end an "
                         f"episode at a lost life (EnvPool's way and Gymnasium's): pass one")
    frame_skip = _positive_int("frame_skip", settings["frame_skip"], 1)
    noop_max = _positive_int("noop_max", settings["noop_max"], 0)
    stack_size = _positive_int("stack_size", settings["stack_size"], 1)
    sticky = float(settings.get("repeat_action_probability",
                                registered.get("repeat_action_probability", 0.25)))
    if not 0.0 <= sticky <= 1.0:
        raise ValueError(f"repeat_action_probability must be in [0, 1], got {sticky!r}")
    max_frames = settings.get("max_num_frames_per_episode",
                              registered.get("max_num_frames_per_episode"))
    if max_frames is not None:
        max_frames = _positive_int("max_num_frames_per_episode", max_frames, 1)
    from envfleet.native.numba_backend import check_num_threads

    check_num_threads(num_threads)
    engine = AtariEngine(
        game, num_envs, mode=_MODES[mode], noop_max=noop_max, frame_skip=frame_skip,
        screen_size=_screen(settings["screen_size"]),
        terminal_on_life_loss=bool(settings["terminal_on_life_loss"]), stack_size=stack_size,
        episodic_life=bool(settings["episodic_life"]), reward_clip=bool(settings["reward_clip"]),
        repeat_action_probability=sticky,
        full_action_space=bool(settings.get("full_action_space",
                                            registered.get("full_action_space", False))),
        max_num_frames_per_episode=max_frames, game_mode=settings.get("mode"),
        difficulty=settings.get("difficulty"), num_threads=num_threads)
    return AtariVectorEnv(env_id, engine, autoreset_mode=mode, seed=seed, copy=copy)


class AtariVectorEnv(VectorContract):
    """A batch of ALE emulators with Gymnasium's standard Atari preprocessing.

    Env i is, bit for bit (frames, rewards, terminated, truncated, across autoresets),
    ``FrameStackObservation(AtariPreprocessing(gym.make(env_id, frameskip=1, ...), ...),
    stack_size)`` reset with ``seed + i``. Observations ``(stack_size, height, width)`` uint8;
    ``info["lives"]``. The reset and step rules, SAME_STEP's ``final_obs`` and the closed-env
    error are the contract's (``contract.VectorContract``).
    """

    def __init__(self, env_id: str, engine: AtariEngine, *, autoreset_mode: AutoresetMode,
                 seed: int | None, copy: bool) -> None:
        self.env_id, self.engine, self.num_envs = env_id, engine, engine.num_envs
        self.autoreset_mode, self.copy = autoreset_mode, copy
        self.backend = "ale"
        self.metadata = {"autoreset_mode": autoreset_mode, "render_modes": []}
        self.render_mode = None
        self.single_observation_space = spaces.Box(0, 255, engine.obs.shape[1:], np.uint8)
        self.single_action_space = engine.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._initial_seed = (check_seed(seed, count=self.num_envs) if seed is not None
                              else int(np.random.SeedSequence().entropy) % 2**63)
        self._has_reset = False
        self._info_true = np.ones(self.num_envs, dtype=np.bool_)

    def reset(self, *, seed: int | Sequence[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``); env i gets ``seed + i``
        (as ``AtariEnv.reset(seed=)``: the emulator reloaded and reseeded)."""
        self._check_open()
        seed, mask = self._mask_only(seed, options)
        seeds = None
        if seed is not None:
            seeds = env_seeds(seed, self.num_envs)
            if None in seeds:
                raise ValueError(f"seed[{seeds.index(None)}] is None: give every env a seed "
                                 f"(or seed=None for all)")
        self.engine.reset(mask, None if seeds is None else np.array(seeds, dtype=np.uint64))
        self._has_reset = True
        return self._out(self.engine.obs), self._info()

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env; autoreset as ``metadata["autoreset_mode"]`` says."""
        self._check_open()
        self._check_has_reset("step")
        e = self.engine
        ended = e.step(actions)
        info = self._info()
        if self.autoreset_mode is AutoresetMode.SAME_STEP and ended:
            self._add_final(info, self._out(e.final_obs), e.ended_mask(), {})
        return (self._out(e.obs), self._out(e.rewards), self._out(e.terminated),
                self._out(e.truncated), info)

    def rollout(self, policy: Callable[[Any], Any] | Any, num_steps: int | None = None, *,
                record: bool = True) -> Rollout:
        """``num_steps`` steps with actions from ``policy(obs)`` or ``policy[t]``; as
        ``NativeVectorEnv.rollout`` (a refused step raises ``ValueError("rollout step t:
        ...")``, the envs left as they were at step t)."""
        self._check_open()
        self._check_has_reset("rollout")
        return rollout(self, policy, num_steps, record)

    def _info(self) -> dict[str, Any]:
        """``lives``; with EnvPool's options, EnvPool's keys: ``terminated`` (the game is
        over, ``episodic_life``) and ``reward`` (unclipped, ``reward_clip``)."""
        e = self.engine
        info = {"lives": self._out(e.lives), "_lives": self._info_true}
        if e.episodic_life:
            info["terminated"], info["_terminated"] = self._out(e.game_over), self._info_true
        if e.reward_clip:
            info["reward"], info["_reward"] = self._out(e.raw_rewards), self._info_true
        return info

    def close_extras(self, **kwargs: Any) -> None:
        """Release the emulators (idempotent)."""
        if not self._closed:
            self._closed = True
            self.engine.close()
