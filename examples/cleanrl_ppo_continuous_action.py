"""CleanRL's ``ppo_continuous_action.py`` on envfleet's MuJoCo engine, with only the env
construction swapped: the script's ``gym.vector.SyncVectorEnv`` over its ``make_env`` thunks
becomes one envfleet batch (``make`` below) that processes what the thunks' wrappers process,
and the rest of CleanRL's script runs as CleanRL wrote it. CleanRL's file is not copied here:
pass your checkout's.

Run: python examples/cleanrl_ppo_continuous_action.py path/to/cleanrl/ppo_continuous_action.py \\
         --env-id HalfCheetah-v5 [CleanRL's options]
(CleanRL's requirements: tyro, tensorboard.) docs/CLIENTS.md#cleanrls-mujoco-script shows the
swap; ``make`` is also importable on its own, with ``examples/`` on ``sys.path``.
"""

from __future__ import annotations

import inspect
import runpy
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import vector
from gymnasium.wrappers.utils import RunningMeanStd

import envfleet

#: CleanRL clips normalised observations and rewards to +-this
CLIP = 10.0


class FinalEpisodeStatistics(gym.vector.VectorWrapper):
    """What a per-env ``RecordEpisodeStatistics`` reports under Gymnasium's ``SyncVectorEnv`` in
    SameStep mode, where CleanRL's script reads it: each finished episode's return (of the
    rewards under it: raw, below the normalisers), length and seconds in
    ``infos["final_info"]["episode"]`` (``"r"``, ``"l"``, ``"t"``: arrays over the envs), the
    envs that finished marked by ``infos["final_info"]["_episode"]``."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.returns = np.zeros(self.num_envs)
        self.lengths = np.zeros(self.num_envs, np.int64)
        self.starts = np.full(self.num_envs, time.perf_counter())

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.returns[:], self.lengths[:] = 0.0, 0
        self.starts[:] = time.perf_counter()
        return self.env.reset(**kwargs)

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, infos = self.env.step(actions)
        self.returns += reward
        self.lengths += 1
        ended = np.logical_or(terminated, truncated)
        if ended.any():
            final = infos.setdefault("final_info", {})
            final["episode"] = {"r": np.where(ended, self.returns, 0.0),
                                "l": np.where(ended, self.lengths, 0),
                                "t": np.where(ended, time.perf_counter() - self.starts, 0.0)}
            final["_episode"] = ended
            self.returns[ended], self.lengths[ended] = 0.0, 0
            self.starts[ended] = time.perf_counter()
        return obs, reward, terminated, truncated, infos


class NormalizeObservation(gym.vector.VectorWrapper):
    """Per-env ``NormalizeObservation`` then ``np.clip(obs, -10, 10)``, as CleanRL's thunks
    wrap each env, for a SameStep batch (Gymnasium's vector one refuses SameStep): every
    observation updates the running mean and variance, then is normalised with them and
    clipped, the final observation of an ended episode (``infos["final_obs"]``) before the
    next episode's first, as the per-env wrapper sees them."""

    def __init__(self, env: gym.vector.VectorEnv, clip: float, epsilon: float = 1e-8) -> None:
        super().__init__(env)
        self.stats = RunningMeanStd(shape=self.single_observation_space.shape)
        self.clip, self.epsilon = clip, epsilon

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Update the statistics with the rows ``obs``, then return them normalised."""
        self.stats.update(obs)
        normalized = (obs - self.stats.mean) / np.sqrt(self.stats.var + self.epsilon)
        return np.clip(normalized, -self.clip, self.clip).astype(np.float32)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, infos = self.env.reset(**kwargs)
        return self.normalize(obs), infos

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, infos = self.env.step(actions)
        if "final_obs" in infos:
            ended = infos["_final_obs"]
            final = np.array(infos["final_obs"])
            final[ended] = self.normalize(np.stack(final[ended]))
            infos["final_obs"] = final
        return self.normalize(obs), reward, terminated, truncated, infos


def make(env_fns: list[Callable[[], gym.Env]],
         autoreset_mode: gym.vector.AutoresetMode = gym.vector.AutoresetMode.SAME_STEP,
         **kwargs: Any) -> gym.vector.VectorEnv:
    """``gym.vector.SyncVectorEnv(env_fns, autoreset_mode=...)`` for CleanRL's
    ``ppo_continuous_action.py``: one envfleet batch of ``len(env_fns)`` envs of the id its
    ``make_env(env_id, idx, capture_video, run_name, gamma)`` thunks were given (read from
    their arguments; the thunks are not called), in Gymnasium's vector wrappers that do what
    the thunks' per-env ones do, in their order: the episode statistics of the raw rewards,
    actions clipped to the Box, observations normalised (running mean and variance) and
    clipped to +-10, rewards normalised (running std of the discounted return) and clipped to
    +-10. The vector normalisers keep one statistic over all the envs (the per-env ones one
    each: the same with CleanRL's one env)."""
    given = [inspect.getclosurevars(fn).nonlocals for fn in env_fns]
    if not given or any({"env_id", "gamma"} - set(g) for g in given):
        raise TypeError("make takes the thunks of CleanRL's make_env(env_id, idx, "
                        "capture_video, run_name, gamma)")
    if given[0].get("capture_video"):
        raise ValueError("envfleet's MuJoCo batch records no video: run without "
                         "--capture-video")
    env = envfleet.make(given[0]["env_id"], len(env_fns), autoreset_mode=autoreset_mode)
    env = FinalEpisodeStatistics(env)
    env = vector.ClipAction(env)
    env = NormalizeObservation(env, CLIP)
    env = vector.NormalizeReward(env, gamma=given[0]["gamma"])
    return vector.ClipReward(env, -CLIP, CLIP)


if __name__ == "__main__":
    # the one swap: the script's gym.vector.SyncVectorEnv gets envfleet's make
    gym.vector.SyncVectorEnv = make  # type: ignore[assignment,misc]
    script = sys.argv.pop(1)
    sys.argv[0] = script
    runpy.run_path(script, run_name="__main__")
