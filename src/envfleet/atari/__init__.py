"""Atari: every ALE game ale-py ships, batched, with Gymnasium's standard preprocessing computed
bit for bit by compiled loops over ALE's own C++ (``envfleet.make("ALE/<Game>-v5", n)``)."""

from envfleet.atari.vector_env import (
    AtariVectorEnv,
    installed_games,
    is_atari_id,
    make_atari,
)

__all__ = ["AtariVectorEnv", "installed_games", "is_atari_id", "make_atari"]
