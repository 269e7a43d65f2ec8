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


def lockstep(env_id: str, num_envs: int, steps: int, *, seed: int = 7,
             autoreset_mode: str = "NextStep", action_seed: int = 0,
             **options: Any) -> int:
    """Step ``envfleet.make(env_id, num_envs, seed=seed, ...)`` and one reference env per
    index with the same random actions, asserting equal frames, rewards and flags at every
    step (and ``final_obs`` in SAME_STEP; DISABLED resets the ended envs with a mask).
    Returns how many episodes ended."""
    env = envfleet.make(env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, **options)
    refs = [reference(env_id, **options) for _ in range(num_envs)]
    try:
        obs, _ = env.reset()
        for i, ref in enumerate(refs):
            expected, _ = ref.reset(seed=seed + i)
            np.testing.assert_array_equal(obs[i], expected, err_msg=f"reset, env {i}")
        rng = np.random.default_rng(action_seed)
        pending = np.zeros(num_envs, bool)
        ended = 0
        for t in range(steps):
            actions = rng.integers(env.single_action_space.n, size=num_envs)
            obs, rewards, terminated, truncated, info = env.step(actions)
            done = np.zeros(num_envs, bool)
            for i, ref in enumerate(refs):
                if pending[i]:
                    expected, (r, te, tr) = ref.reset()[0], (0.0, False, False)
                    pending[i] = False
                else:
                    expected, r, te, tr, _ = ref.step(int(actions[i]))
                where = f"step {t}, env {i}"
                assert (rewards[i], terminated[i], truncated[i]) == (r, te, tr), where
                if (te or tr) and autoreset_mode == "SameStep":
                    assert info["_final_obs"][i], where
                    np.testing.assert_array_equal(info["final_obs"][i], expected,
                                                  err_msg=f"final obs, {where}")
                    expected, _ = ref.reset()
                elif te or tr:
                    pending[i] = autoreset_mode == "NextStep"
                    done[i] = True
                elif autoreset_mode == "SameStep" and "final_obs" in info:
                    assert not info["_final_obs"][i] and not info["final_obs"][i].any(), where
                np.testing.assert_array_equal(obs[i], expected, err_msg=where)
                assert info["lives"][i] == ref.unwrapped.ale.lives(), where
                ended += bool(te or tr)
            if autoreset_mode == "Disabled" and done.any():
                obs, _ = env.reset(options={"reset_mask": done})
                for i in np.flatnonzero(done):
                    expected, _ = refs[i].reset()
                    np.testing.assert_array_equal(obs[i], expected,
                                                  err_msg=f"masked reset after step {t}, env {i}")
        return ended
    finally:
        env.close()
        for ref in refs:
            ref.close()
