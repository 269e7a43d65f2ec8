"""Checks of what an env returns, made where ``EnvGroup`` writes it into the batch buffers.

An observation must have its space's shape and a dtype that the space's dtype holds under
NumPy's ``same_kind`` casting (Gymnasium's ``SyncVectorEnv`` batches with ``np.stack(...,
out=...)``, which refuses the same values); a reward must be a real number, ``terminated`` and
``truncated`` bools, and an info a dict. A bad value raises ``BadEnvOutput`` saying what was
wrong; ``EnvGroup`` adds the env's index. Each check costs a type test on the common path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from envfleet.executors.shared_memory import OBJECT, leaves


class BadEnvOutput(ValueError):
    """An env returned a value that its spaces or Gymnasium's API do not allow."""


def _show(value: Any) -> str:
    """``value`` for a message: its repr (shortened) and its type."""
    text = repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} ({type(value).__name__})"


def check_reward(reward: Any) -> float:
    """``reward`` as a float: a real number (a bool, or a 0-d numeric array, too)."""
    if isinstance(reward, int | float | np.integer | np.floating | np.bool_) or (
            isinstance(reward, np.ndarray) and reward.shape == ()
            and reward.dtype.kind in "biuf"):
        return float(reward)
    raise BadEnvOutput(f"returned reward {_show(reward)}: rewards must be real numbers")


def check_flag(value: Any, name: str) -> bool:
    """``terminated`` / ``truncated`` as a bool: a bool, or an integer 0 or 1."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if (isinstance(value, int | np.integer) or (
            isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "biu")) \
            and value in (0, 1):
        return bool(value)
    raise BadEnvOutput(f"returned {name} {_show(value)}: {name} must be a bool")


def check_info(info: Any) -> dict[str, Any]:
    """``info``, which must be a dict."""
    if isinstance(info, dict):
        return info
    raise BadEnvOutput(f"returned info {_show(info)}: info must be a dict")


def obs_writer(space: spaces.Space, path: str = "") -> Callable[[Any, int, Any], None]:
    """``write(batched, i, obs)``: check one env's observation and store it in row ``i``.

    Like ``shared_memory.row_writer``; ``path`` names the part of the observation being
    written (``['pos']``, ``[1]``) in messages.
    """
    what = f"observation{path}" if path else "an observation"
    where = f"the observation space{path}"
    if isinstance(space, spaces.Dict):
        parts = [(key, obs_writer(sub, f"{path}[{key!r}]")) for key, sub in space.spaces.items()]

        def write_dict(batched: Any, i: int, value: Any) -> None:
            if not isinstance(value, Mapping):
                raise BadEnvOutput(f"returned {what} {_show(value)} where {where} is a Dict")
            for key, write in parts:
                if key not in value:
                    raise BadEnvOutput(f"returned {what} without the key {key!r} of {where}")
                write(batched[key], i, value[key])

        return write_dict
    if isinstance(space, spaces.Tuple):
        parts_t = [obs_writer(sub, f"{path}[{k}]") for k, sub in enumerate(space.spaces)]

        def write_tuple(batched: Any, i: int, value: Any) -> None:
            if not isinstance(value, tuple | list) or len(value) != len(parts_t):
                raise BadEnvOutput(f"returned {what} {_show(value)} where {where} is a Tuple "
                                   f"of {len(parts_t)}")
            for k, write in enumerate(parts_t):
                write(batched[k], i, value[k])

        return write_tuple
    ((shape, dtype),) = leaves(space, "").values()
    if dtype == OBJECT:  # a space without a fixed-size form: the env's value as it is (Sync)

        def write_object(batched: np.ndarray, i: int, value: Any) -> None:
            batched[i] = value

        return write_object

    def write_leaf(batched: np.ndarray, i: int, value: Any) -> None:
        if type(value) is not np.ndarray or value.dtype is not dtype or value.shape != shape:
            value = _checked_leaf(value, shape, dtype, what, where)
        batched[i] = value

    return write_leaf


def _checked_leaf(value: Any, shape: tuple[int, ...], dtype: np.dtype, what: str,
                  where: str) -> np.ndarray:
    """``value`` as an array of ``shape`` that ``dtype`` holds, or ``BadEnvOutput``."""
    if value is None:
        raise BadEnvOutput(f"returned None as {what.replace('an ', 'its ', 1)}")
    try:
        array = np.asarray(value)
    except Exception as error:  # e.g. a ragged list
        raise BadEnvOutput(f"returned {what} {_show(value)} that is not an array: "
                           f"{error}") from None
    if array.shape != shape:
        raise BadEnvOutput(f"returned {what} of shape {array.shape} where {where} has shape "
                           f"{shape}")
    if not np.can_cast(array.dtype, dtype, "same_kind"):
        raise BadEnvOutput(f"returned {what} of dtype {array.dtype} where {where} has dtype "
                           f"{dtype} (NumPy cannot cast it 'same_kind')")
    return array
