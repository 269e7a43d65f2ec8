"""Executors: N copies of any Gymnasium env behind Gymnasium's ``VectorEnv`` interface.

- ``serial``: one in-process loop (``SerialVectorEnv``);
- ``subprocess``: one process per env, pipes and pickles (``SubprocessVectorEnv``);
- ``pool``: W worker processes, each stepping a contiguous share of the envs straight into
  shared-memory batch buffers (``PoolVectorEnv``).

``envfleet.make(env, num_envs, backend="serial" | "subprocess" | "pool")`` builds them from a
Gymnasium id, one factory or a list of factories.
"""

from envfleet.executors.base import (
    ClosedExecutorError,
    EnvAttributeError,
    EnvWorkerError,
    ExecutorVectorEnv,
    SpacesMismatchError,
)
from envfleet.executors.pool import PoolVectorEnv
from envfleet.executors.serial import SerialVectorEnv
from envfleet.executors.subprocess import SubprocessVectorEnv

__all__ = [
    "ClosedExecutorError",
    "EnvAttributeError",
    "EnvWorkerError",
    "ExecutorVectorEnv",
    "PoolVectorEnv",
    "SerialVectorEnv",
    "SpacesMismatchError",
    "SubprocessVectorEnv",
]
