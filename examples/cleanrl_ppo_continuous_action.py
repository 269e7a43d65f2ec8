"""CleanRL's ``ppo_continuous_action.py`` on envfleet's MuJoCo engine, with only the env
construction swapped: the script's ``gym.vector.SyncVectorEnv`` over its ``make_env`` thunks
becomes one envfleet batch (``make`` below) that processes what the thunks' wrappers process,
and the rest of CleanRL's script runs as CleanRL wrote it. CleanRL's file is not copied here:
pass your checkout's (its Gymnasium 1.x version, CleanRL's pull request #516).

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
import warnings
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
    next episode's first, as the per-env wrapper sees them. The statistics start as float32
    arrays, as the per-env wrapper's do (its observation space's dtype), so the rounding of
    their first update is the same."""

    def __init__(self, env: gym.vector.VectorEnv, clip: float, epsilon: float = 1e-8) -> None:
        super().__init__(env)
        self.stats = RunningMeanStd(shape=self.single_observation_space.shape, dtype=np.float32)
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


class NormalizeReward(gym.vector.VectorWrapper):
    """Per-env ``NormalizeReward(gamma=...)``, as CleanRL's thunks wrap each env: each env's
    discounted return (float64) is zeroed only by a termination, before that step's reward is
    added, and carries on through truncations and resets; the running variance of those returns
    scales the rewards. Gymnasium's vector ``NormalizeReward`` differs on a SameStep batch: it
    sums in float32 and zeroes the return at every episode's end."""

    def __init__(self, env: gym.vector.VectorEnv, gamma: float, epsilon: float = 1e-8) -> None:
        super().__init__(env)
        self.stats = RunningMeanStd(shape=())
        self.discounted = np.zeros(self.num_envs)
        self.gamma, self.epsilon = gamma, epsilon

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, infos = self.env.step(actions)
        self.discounted = self.discounted * self.gamma * (1 - terminated) + reward
        self.stats.update(self.discounted)
        return (obs, reward / np.sqrt(self.stats.var + self.epsilon), terminated, truncated,
                infos)


def make(env_fns: list[Callable[[], gym.Env]],
         autoreset_mode: gym.vector.AutoresetMode = gym.vector.AutoresetMode.NEXT_STEP,
         **kwargs: Any) -> gym.vector.VectorEnv:
    """``gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)``
    for CleanRL's ``ppo_continuous_action.py``: one envfleet batch of ``len(env_fns)`` envs of
    the id its ``make_env(env_id, idx, capture_video, run_name, gamma)`` thunks were given
    (read from their arguments; the thunks are not called), in vector wrappers that do what the
    thunks' per-env ones do, in their order: the episode statistics of the raw rewards,
    actions clipped to the Box, observations normalised (running mean and variance) and
    clipped to +-10, rewards normalised (running std of the discounted return) and clipped to
    +-10. The normalisers keep one statistic over all the envs (the per-env ones one each: the
    same with CleanRL's one env, where the processed observations and rewards are bit for bit
    those of the script's own envs). Thunks that record video (``capture_video``, as CleanRL's
    evaluation after ``--save-model`` asks) get Gymnasium's own ``SyncVectorEnv``: envfleet's
    batch renders no frames. The default mode is ``SyncVectorEnv``'s, which is refused:
    CleanRL's Gymnasium 1.x script asks for SameStep; one that does not is its Gymnasium 0.29
    version, whose ``infos["final_info"]`` loop (a list of per-env dicts) 1.x no longer fills."""
    if gym.vector.AutoresetMode(autoreset_mode) is not gym.vector.AutoresetMode.SAME_STEP:
        raise ValueError("make builds CleanRL's SameStep SyncVectorEnv; this script asks for "
                         f"{autoreset_mode}: it is CleanRL's Gymnasium 0.29 version (its master "
                         "branch), use its Gymnasium 1.x version (docs/CLIENTS.md)")
    given = [inspect.getclosurevars(fn).nonlocals for fn in env_fns]
    if not given or any({"env_id", "gamma"} - set(g) for g in given):
        raise TypeError("make takes the thunks of CleanRL's make_env(env_id, idx, "
                        "capture_video, run_name, gamma)")
    if given[0].get("capture_video"):
        warnings.warn("envfleet's MuJoCo batch renders no frames: the envs that record video "
                      "are Gymnasium's SyncVectorEnv over the thunks", stacklevel=2)
        return gym.vector.sync_vector_env.SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode,
                                                        **kwargs)
    env = envfleet.make(given[0]["env_id"], len(env_fns), autoreset_mode="SameStep")
    env = FinalEpisodeStatistics(env)
    env = vector.ClipAction(env)
    env = NormalizeObservation(env, CLIP)
    env = NormalizeReward(env, given[0]["gamma"])
    return vector.ClipReward(env, -CLIP, CLIP)


if __name__ == "__main__":
    # the one swap: the script's gym.vector.SyncVectorEnv gets envfleet's make
    gym.vector.SyncVectorEnv = make  # type: ignore[assignment,misc]
    script = sys.argv.pop(1)
    sys.argv[0] = script
    runpy.run_path(script, run_name="__main__")
