"""The Atari engine's oracle: Gymnasium's own wrapper stack, env by env, stepped in lockstep with
the engine's batch (same seeds ``seed + i``, same actions), every output compared bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")

import gymnasium as gym  # noqa: E402

import envfleet  # noqa: E402
from tests.reference import lockstep_batch  # noqa: E402

gym.register_envs(ale_py)

#: the emulator's options (``gym.make``'s) among ``envfleet.make``'s keyword arguments
EMULATOR = ("repeat_action_probability", "full_action_space", "max_num_frames_per_episode")
PREPROCESSING = ("noop_max", "frame_skip", "screen_size", "terminal_on_life_loss")


def reference(env_id: str, **options: Any) -> gym.Env:
    """``FrameStackObservation(AtariPreprocessing(gym.make(env_id, frameskip=1, ...)))`` with
    ``options`` split between the three as ``envfleet.make`` takes them."""
    env = gym.make(env_id, frameskip=1, **{k: v for k, v in options.items() if k in EMULATOR})
    env = gym.wrappers.AtariPreprocessing(
        env, grayscale_obs=True, **{k: v for k, v in options.items() if k in PREPROCESSING})
    return gym.wrappers.FrameStackObservation(env, stack_size=options.get("stack_size", 4))


def _same_lives(info: dict[str, Any], ref: gym.Env, i: int, where: str) -> None:
    assert info["lives"][i] == ref.unwrapped.ale.lives(), where


def lockstep(env_id: str, num_envs: int, steps: int, *, seed: int = 7,
             autoreset_mode: str = "NextStep", action_seed: int = 0,
             **options: Any) -> int:
    """Step ``envfleet.make(env_id, num_envs, seed=seed, ...)`` and one reference env per
    index with the same random actions (``tests.reference.lockstep_batch``), asserting equal
    frames, rewards, flags and lives at every step (and ``final_obs`` in SAME_STEP; DISABLED
    resets the ended envs with a mask). Returns how many episodes ended."""
    env = envfleet.make(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, **options)
    refs = [reference(env_id, **options) for _ in range(num_envs)]
    rng = np.random.default_rng(action_seed)
    return lockstep_batch(
        env, refs, steps, seed=seed, autoreset_mode=autoreset_mode,
        draw_actions=lambda: rng.integers(env.single_action_space.n, size=num_envs),
        to_single=int, step_check=_same_lives)
