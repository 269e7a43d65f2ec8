"""The native env families, one module each (a package for chess): each declares its
``NativeEnvSpec`` and kernels, and touches no engine internals. ``FAMILIES`` lists them, by
id; a new family is one module here and one entry below."""

from envfleet.envs import (
    acrobot,
    cartpole,
    mountain_car,
    mountain_car_continuous,
    pendulum,
)
from envfleet.envs.chess import env as chess
from envfleet.native.spec import NativeEnvSpec

FAMILIES: dict[str, NativeEnvSpec] = {spec.id: spec for spec in (
    cartpole.SPEC, acrobot.SPEC, mountain_car.SPEC, pendulum.SPEC, mountain_car_continuous.SPEC,
    chess.SPEC)}

__all__ = ["FAMILIES"]
