"""Registers the ``minatar`` package's own Gymnasium ids (``MinAtar/<Game>-v0`` / ``-v1``,
``minatar.gym.BaseEnv``) when imported: ``minatar.gym`` defines ``register_envs`` but does not
call it. ``registry.NAMESPACE_MODULES`` imports this module for a ``MinAtar/`` id run on the
executors; the bench's baselines do the same. Needs ``pip install minatar`` (``ImportError``
otherwise)."""

from __future__ import annotations

import logging

import gymnasium


def register() -> None:
    """``minatar.gym.register_envs()``, once (the reference's ids, if not registered yet)."""
    if "MinAtar/Breakout-v0" in gymnasium.registry:
        return
    # minatar logs a warning on the root logger when seaborn is missing (it draws rgb_array
    # frames with it); the games run without it
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        from minatar.gym import register_envs
    finally:
        root.setLevel(level)
    register_envs()


register()
