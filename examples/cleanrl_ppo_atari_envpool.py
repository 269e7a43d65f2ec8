"""CleanRL's ``ppo_atari_envpool.py`` on envfleet's Atari engine, with only the env construction
swapped: ``envpool.make`` becomes envfleet's (``make`` below), and the rest of CleanRL's script
runs as CleanRL wrote it. CleanRL's file is not copied here: pass your checkout's.

Run: python examples/cleanrl_ppo_atari_envpool.py path/to/cleanrl/ppo_atari_envpool.py \\
         --env-id Breakout-v5 [CleanRL's options]
(CleanRL's requirements: gym, tensorboard; envpool itself is not needed.) docs/CLIENTS.md#cleanrl
shows the swap; ``make`` is also importable on its own, as EnvPool's ``make`` is.
"""

from __future__ import annotations

import runpy
import sys
import types
from typing import Any

import numpy as np

import envfleet


class EnvPoolStyle:
    """An envfleet Atari batch with EnvPool's gym-style face: single-env ``observation_space``
    and ``action_space``, ``reset()`` -> obs (``env_type="gym"``) or (obs, info), ``step`` ->
    (obs, reward, done, info) (gym) or the five-tuple, and EnvPool's info keys (``lives``,
    ``reward``: unclipped, ``terminated``: the game is over, ``elapsed_step``, ``env_id``)."""

    def __init__(self, env: Any, env_type: str) -> None:
        self.env, self.gym = env, env_type == "gym"
        self.num_envs = env.num_envs
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self.metadata, self.reward_range, self.spec = {}, (-float("inf"), float("inf")), None
        self.elapsed = np.zeros(env.num_envs, np.int32)

    def _info(self, info: dict[str, Any], reward: np.ndarray) -> dict[str, Any]:
        engine = self.env.engine
        return {"lives": info["lives"], "reward": info.get("reward", reward),
                "terminated": info.get("terminated", engine.game_over).astype(np.int32),
                "elapsed_step": self.elapsed.copy(), "env_id": np.arange(self.num_envs)}

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset()
        self.elapsed[:] = 0
        info = self._info(info, np.zeros(self.num_envs))
        return obs if self.gym else (obs, info)

    def step(self, action: Any) -> tuple[Any, ...]:
        was_reset = self.env.engine.pending.copy()  # this step resets them (EnvPool's too)
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(action))
        self.elapsed = np.where(was_reset, 0, self.elapsed + 1)
        info = self._info(info, reward)
        if self.gym:
            return obs, reward, terminated | truncated, info
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.env.close()


def make(task_id: str, env_type: str = "gym", num_envs: int = 1, seed: int = 42,
         episodic_life: bool = False, reward_clip: bool = False, **kwargs: Any) -> EnvPoolStyle:
    """EnvPool's ``envpool.make`` for Atari ids (``Breakout-v5``: ``ALE/Breakout-v5``), on
    envfleet's engine (its defaults: Gymnasium's v5 env, sticky actions 0.25; EnvPool's
    ``repeat_action_probability``, ``noop_max``, ``stack_num``, ``frame_skip``, ``img_height``
    and ``max_episode_steps`` options map to envfleet's). envfleet has no FIRE reset
    (EnvPool's ``use_fire_reset``, on by default there)."""
    names = {"stack_num": "stack_size", "repeat_action_probability": "repeat_action_probability",
             "noop_max": "noop_max", "frame_skip": "frame_skip"}
    options = {names[k]: v for k, v in kwargs.items() if k in names}
    if "img_height" in kwargs or "img_width" in kwargs:
        options["screen_size"] = (kwargs.get("img_width", 84), kwargs.get("img_height", 84))
    if "max_episode_steps" in kwargs:  # EnvPool counts steps, ALE frames
        options["max_num_frames_per_episode"] = kwargs["max_episode_steps"] * options.get(
            "frame_skip", 4)
    unknown = sorted(set(kwargs) - set(names) - {"img_height", "img_width",
                                                 "max_episode_steps"})
    if unknown:
        raise TypeError(f"envpool.make({task_id!r}): envfleet does not take {unknown}")
    env_id = task_id if task_id.startswith("ALE/") else f"ALE/{task_id}"
    env = envfleet.make(env_id, num_envs, seed=seed, episodic_life=episodic_life,
                        reward_clip=reward_clip, **options)
    return EnvPoolStyle(env, env_type)


if __name__ == "__main__":
    # the one swap: CleanRL's `import envpool` gets envfleet's make
    sys.modules["envpool"] = types.SimpleNamespace(make=make)  # type: ignore[assignment]
    script = sys.argv.pop(1)
    sys.argv[0] = script
    runpy.run_path(script, run_name="__main__")
