"""envfleet: reinforcement-learning environments as fast as the hardware allows.

``envfleet.make(env_id, num_envs, backend=...)`` returns a ``gymnasium.vector.VectorEnv``.
"""

from gymnasium.vector import AutoresetMode

from envfleet.executors import EnvWorkerError
from envfleet.memory import InsufficientMemoryError
from envfleet.registry import (
    BackendUnavailableError,
    UnknownEnvError,
    available_backends,
    list_envs,
    make,
    register_with_gymnasium,
)

__version__ = "0.1.0"
__all__ = [
    "AutoresetMode",
    "BackendUnavailableError",
    "EnvWorkerError",
    "InsufficientMemoryError",
    "UnknownEnvError",
    "available_backends",
    "list_envs",
    "make",
]

register_with_gymnasium()
