"""The native env families, one module each (a package for chess): each declares its
``NativeEnvSpec`` and kernels, and touches no engine internals. ``FAMILIES`` lists them, by
id; a new family is one module here and one entry below. ``NATIVE_ENVS`` is every family
``make`` knows: these, then users' (``registry.register_native_env`` adds them); it lives here,
below the executors, so that a Ray actor finds a family by id without the registry."""

from envfleet.envs import (
    acrobot,
    cartpole,
    mountain_car,
    mountain_car_continuous,
    pendulum,
)
from envfleet.envs.chess import env as chess
from envfleet.envs.minatar import SPECS as MINATAR
from envfleet.kernels import NativeEnvSpec

FAMILIES: dict[str, NativeEnvSpec] = {spec.id: spec for spec in (
    cartpole.SPEC, acrobot.SPEC, mountain_car.SPEC, pendulum.SPEC, mountain_car_continuous.SPEC,
    chess.SPEC, *MINATAR)}

#: every native family by id: envfleet's own (``FAMILIES``), then users' (register_native_env)
NATIVE_ENVS: dict[str, NativeEnvSpec] = dict(FAMILIES)

__all__ = ["FAMILIES", "NATIVE_ENVS"]
