"""Small Gymnasium envs for the executor tests (importable by worker processes)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CountingEnv(gym.Env):
    """obs = [index, seed, episode, t]; an episode lasts ``length`` steps (terminated), or is
    truncated at ``truncate_at`` if that comes first; reward = 10 * t + action.

    Infos: reset gives ``{"index": index}``; a step gives ``{"t": t}`` on even t only (so the
    ``_t`` masks are not all True)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, index: int = 0, length: int = 3, truncate_at: int | None = None) -> None:
        self.index = index
        self.length = length
        self.truncate_at = truncate_at
        self.observation_space = spaces.Box(0, 2**40, (4,), dtype=np.int64)
        self.action_space = spaces.Discrete(5)
        self.seed_value, self.episode, self.t = -1, -1, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self.seed_value, self.episode, self.t], dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.seed_value, self.episode = seed, 0
        else:
            self.episode += 1
        self.t = 0
        return self._obs(), {"index": self.index}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        terminated = self.t >= self.length
        truncated = not terminated and self.truncate_at is not None and self.t >= self.truncate_at
        info = {"t": self.t} if self.t % 2 == 0 else {}
        return self._obs(), float(10 * self.t + int(action)), terminated, truncated, info


class FaultyEnv(CountingEnv):
    """A CountingEnv that misbehaves: ``fault`` in {"step", "reset", "kill", "hang"} at its
    ``at``-th step (reset: its ``at``-th reset), when it is env ``bad_index``."""

    def __init__(self, index: int = 0, fault: str = "step", bad_index: int = 0, at: int = 2,
                 length: int = 100) -> None:
        super().__init__(index, length)
        self.fault, self.bad_index, self.at = fault, bad_index, at
        self.steps = self.resets = 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        if self.index == self.bad_index and self.fault == "reset" and self.resets == self.at:
            raise ValueError(f"reset failure in env {self.index}")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.index == self.bad_index and self.steps == self.at:
            if self.fault == "step":
                raise RuntimeError(f"boom in env {self.index}")
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "hang":
                time.sleep(3600)
        return super().step(action)


class DictEnv(gym.Env):
    """Dict / Tuple observations of every leaf kind, a Box action; obs depend on seed and action."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict({
            "pos": spaces.Box(-10, 10, (3,), dtype=np.float32),
            "id": spaces.Discrete(7, start=1),
            "bits": spaces.MultiBinary(4),
            "nest": spaces.Tuple((spaces.MultiDiscrete([3, 5]),
                                  spaces.Box(0, 1, (2, 2), dtype=np.float64))),
        })
        self.action_space = spaces.Box(-1, 1, (2,), dtype=np.float32)

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        return {"pos": self.pos.astype(np.float32), "id": np.int64(rng.integers(1, 8)),
                "bits": rng.integers(0, 2, 4).astype(np.int8),
                "nest": (rng.integers(0, [3, 5]).astype(np.int64), rng.random((2, 2)))}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 3)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.pos = np.clip(self.pos + np.r_[action, 0.5 * action[0]], -10, 10)
        return self._obs(), float(self.pos.sum()), bool(self.t >= 4), False, {}


class TupleEnv(gym.Env):
    """Tuple observations and a MultiDiscrete action."""

    def __init__(self) -> None:
        self.observation_space = spaces.Tuple((spaces.Box(-5, 5, (2,), dtype=np.float32),
                                               spaces.Discrete(4)))
        self.action_space = spaces.MultiDiscrete([3, 4])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return (self.x.copy(), np.int64(0)), {}

    def step(self, action):
        self.x = np.clip(self.x + (np.asarray(action) - 1) * 0.1, -5, 5).astype(np.float32)
        k = int(action[1])
        return (self.x.copy(), np.int64(k)), float(k), k == 3, False, {}


class DictActionEnv(gym.Env):
    """A Dict action space (checked per env, with the space's own ``contains``)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-100, 100, (2,), dtype=np.float64)
        self.action_space = spaces.Dict({"move": spaces.Discrete(3),
                                         "push": spaces.Box(-1, 1, (2,), dtype=np.float32)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, 2)
        return self.x.copy(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.x = self.x + (int(action["move"]) - 1) + action["push"]
        return self.x.copy(), float(self.x[0]), False, False, {}


class UnpicklableInfoEnv(CountingEnv):
    """Returns an info value that cannot be pickled (a lock) from its steps."""

    def step(self, action):
        import threading

        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"lock": threading.Lock()}


class SlowEnv(CountingEnv):
    """A CountingEnv whose steps take ``delay`` seconds (sleeping, not computing)."""

    def __init__(self, index: int = 0, length: int = 3, delay: float = 0.0) -> None:
        super().__init__(index, length)
        self.delay = delay

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        return super().step(action)


class BadOutputEnv(CountingEnv):
    """A CountingEnv that, when it is env ``bad_index``, returns ``bad`` (replacements for
    ``obs``, ``reward``, ``terminated``, ``truncated``, ``info``) from its ``at``-th step, or
    from its first reset when ``at`` is 0."""

    def __init__(self, index: int = 0, bad_index: int = 0, at: int = 1, **bad: Any) -> None:
        super().__init__(index, length=100)
        self.bad_index, self.at, self.bad = bad_index, at, bad
        self.steps = self.resets = 0

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.resets += 1
        if self.index == self.bad_index and self.at == 0 and self.resets == 1:
            obs, info = self.bad.get("obs", obs), self.bad.get("info", info)
        return obs, info

    def step(self, action):
        out = super().step(action)
        self.steps += 1
        if self.index == self.bad_index and self.steps == self.at:
            names = ("obs", "reward", "terminated", "truncated", "info")
            out = tuple(self.bad.get(name, value) for name, value in zip(names, out, strict=True))
        return out


class BoolActionEnv(gym.Env):
    """A ``Box(dtype=bool)`` action; obs = the last action as 0/1, reward = its count."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 1, (3,), dtype=np.int8)
        self.action_space = spaces.Box(0, 1, (3,), dtype=bool)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, dtype=np.int8), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        return action.astype(np.int8), float(action.sum()), False, False, {}


class AnySpace(spaces.Space):
    """A user's own space (no fixed-size form): any str of up to 3 letters 'a'..'c'."""

    def sample(self, mask=None, probability=None) -> str:
        return "abc"[: int(self.np_random.integers(0, 4))]

    def contains(self, x) -> bool:
        return isinstance(x, str) and len(x) <= 3 and set(x) <= set("abc")

    def __eq__(self, other) -> bool:
        return isinstance(other, AnySpace)

    __hash__ = spaces.Space.__hash__


class EchoEnv(gym.Env):
    """Observation and action in the same ``space``: reset gives a seeded sample, a step gives
    back its action; episodes end (terminated) every ``length`` steps. Infos carry ``t``."""

    def __init__(self, space: spaces.Space, length: int = 3) -> None:
        import copy

        self.observation_space = self.action_space = copy.deepcopy(space)  # (its own RNG)
        self.length = length
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {"t": 0}

    def step(self, action):
        self.t += 1
        return action, float(self.t), self.t >= self.length, False, {"t": self.t}
