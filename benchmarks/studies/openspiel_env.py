"""OpenSpiel's chess as a Gymnasium env with Chess-v0's game setting: the ``e2e`` study's third
chess contender (``pip install open_spiel``).

The agent plays white against a uniformly random legal reply (``opponent="random"``), reward
+1 / -1 / 0 at the end (OpenSpiel's returns), truncated after ``(max_plies + 1) // 2`` agent
steps, ``info["action_mask"]`` from ``legal_actions_mask``. Not the same encoding as
Chess-v0: OpenSpiel's own observation (20 x 8 x 8 planes) and action ids (4674), so the
network's input and output layers differ by a few percent (1280 vs 1344 inputs, 4674 vs 4672
outputs); the rules are the same game. Registered as ``OPENSPIEL_ID``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

OPENSPIEL_ID = "OpenSpielChess-v0"
OPENSPIEL_IMPORT_ID = f"{__name__}:{OPENSPIEL_ID}"


class OpenSpielChessEnv(gymnasium.Env):
    """One OpenSpiel chess game, the agent white against a random opponent."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, max_plies: int = 512) -> None:
        import pyspiel

        self.game = pyspiel.load_game("chess")
        self.agent = 1  # OpenSpiel's white
        shape = tuple(self.game.observation_tensor_shape())
        self.observation_space = spaces.Box(0.0, 1.0, shape, np.float32)
        self.action_space = spaces.Discrete(self.game.num_distinct_actions())
        self.max_steps = (max_plies + 1) // 2
        self.state = self.game.new_initial_state()
        self.steps = 0

    def _observe(self) -> tuple[np.ndarray, dict[str, Any]]:
        obs = np.asarray(self.state.observation_tensor(self.agent), dtype=np.float32)
        mask = np.zeros(self.action_space.n, dtype=bool)
        if not self.state.is_terminal():
            mask[:] = self.state.legal_actions_mask(self.agent)
        return obs.reshape(self.observation_space.shape), {"action_mask": mask}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = self.game.new_initial_state()
        self.steps = 0
        return self._observe()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        self.state.apply_action(int(action))
        if not self.state.is_terminal():
            moves = self.state.legal_actions()
            self.state.apply_action(moves[int(self.np_random.integers(len(moves)))])
        terminated = self.state.is_terminal()
        reward = float(self.state.returns()[self.agent]) if terminated else 0.0
        obs, info = self._observe()
        return obs, reward, terminated, self.steps >= self.max_steps, info


if OPENSPIEL_ID not in gymnasium.registry:
    gymnasium.register(OPENSPIEL_ID, entry_point=f"{__name__}:OpenSpielChessEnv")
