"""A user's module that registers a Gymnasium env (not a native one) when imported:
``MyCartPole-v0``, Gymnasium's CartPole under the user's own id (``tests/test_cli_ids.py``)."""

from __future__ import annotations

import gymnasium
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class MyCartPole(CartPoleEnv):
    """Gymnasium's CartPole, defined outside any package Gymnasium knows."""


gymnasium.register("MyCartPole-v0", entry_point=MyCartPole, max_episode_steps=50)
