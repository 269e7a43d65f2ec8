"""Toy envs for the trainer tests: a masked-action env and a counting env."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

MASKED_TOY_ID = "envfleet_test/MaskedToy-v0"


class MaskedToyEnv(gym.Env):
    """Discrete(6) actions, a random legal subset per step in ``info["action_mask"]``; an
    illegal action raises. Reward 1 for the lowest legal action; episodes last 8 steps."""

    metadata: ClassVar[dict] = {"render_modes": []}
    illegal_actions = 0  # across instances (the serial executor runs them in this process)

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1, 1, (6,), dtype=np.float32)
        self.action_space = spaces.Discrete(6)
        self.t = 0
        self.mask = np.ones(6, dtype=bool)

    def _next(self) -> tuple[np.ndarray, dict[str, Any]]:
        self.mask = self.np_random.random(6) < 0.4
        self.mask[self.np_random.integers(6)] = True  # at least one legal action
        obs = np.where(self.mask, 1.0, -1.0).astype(np.float32)  # the policy can see the mask
        return obs, {"action_mask": self.mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._next()

    def step(self, action):
        if not self.mask[int(action)]:
            type(self).illegal_actions += 1
            raise AssertionError(f"illegal action {action} for mask {self.mask}")
        reward = float(int(action) == int(np.flatnonzero(self.mask)[0]))
        self.t += 1
        obs, info = self._next()
        return obs, reward, self.t >= 8, False, info


class CountingEnv(gym.Env):
    """obs = [t]; reward 1 per step; terminated at ``length`` (None: never)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, length: int | None = 3) -> None:
        self.length = length
        self.observation_space = spaces.Box(0, 1e6, (1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.length is not None and self.t >= self.length
        return np.array([self.t], np.float32), 1.0, terminated, False, {}


if MASKED_TOY_ID not in gym.registry:
    gym.register(MASKED_TOY_ID, entry_point=MaskedToyEnv)


MULTI_DISCRETE_TOY_ID = "envfleet_test/MultiDiscreteToy-v0"


class MultiDiscreteToyEnv(gym.Env):
    """MultiDiscrete([3, 3]) actions: a space the trainer has no policy for."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1, 1, (2,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete([3, 3])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


if MULTI_DISCRETE_TOY_ID not in gym.registry:
    gym.register(MULTI_DISCRETE_TOY_ID, entry_point=MultiDiscreteToyEnv)
