"""envfleet: reinforcement-learning environments as fast as the hardware allows.

``envfleet.make(env_id, num_envs, backend=...)`` returns a ``gymnasium.vector.VectorEnv``.
``envfleet.register_native_env(spec)`` adds a native env family written by a user (a
``NativeEnvSpec`` with ``kernel_function`` kernels, both from ``envfleet.kernels``, the kernel
contract; docs/NATIVE_ENVS.md).
The submodules with optional dependencies (``envfleet.sb3``: Stable-Baselines3; ``bench``,
``train``: the command line's jobs) are imported on first use, so ``import envfleet`` stays
light and works without the extras.
"""

import importlib
from types import ModuleType

from gymnasium.vector import AutoresetMode

from envfleet.executors import EnvWorkerError
from envfleet.native.jit import KernelCompileError, KernelIndexError
from envfleet.native.memory import InsufficientMemoryError
from envfleet.native.spec import InvalidSpecError
from envfleet.registry import (
    BackendUnavailableError,
    UnknownEnvError,
    available_backends,
    list_envs,
    make,
    register_native_env,
    register_with_gymnasium,
    unregister_native_env,
)

__version__ = "0.1.0"
__all__ = [
    "AutoresetMode",
    "BackendUnavailableError",
    "EnvWorkerError",
    "InsufficientMemoryError",
    "InvalidSpecError",
    "KernelCompileError",
    "KernelIndexError",
    "UnknownEnvError",
    "available_backends",
    "list_envs",
    "make",
    "register_native_env",
    "unregister_native_env",
]

#: submodules imported when first used as ``envfleet.<name>`` (optional dependencies, or heavy)
_LAZY_SUBMODULES = frozenset({"sb3", "bench", "train", "cli", "chess"})


def __getattr__(name: str) -> ModuleType:
    """``envfleet.sb3`` (and the other lazy submodules) without an explicit import."""
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"envfleet.{name}")
    raise AttributeError(f"module 'envfleet' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_SUBMODULES})


register_with_gymnasium()
