"""Action checks for executors: a whole batch is checked before any env moves.

What is refused follows Gymnasium's vector envs, which hand each env its action as given:
a batch that is not an array of numbers (``None``, a scalar, a string; for a ``Dict`` / ``Tuple``
space, not a dict / tuple) is a ``TypeError``, as ``SyncVectorEnv`` raises; a wrong shape or
dtype kind, a value the batch buffers cannot hold (NaN, inf, an integer outside the dtype) or an
action outside a discrete space is a ``ValueError`` naming the first offending env. ``Box``
values outside the bounds go to the env (``Pendulum`` clips them itself), as in Gymnasium.
The wording is the native envs' (``envfleet.native.driver``) where they refuse the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from envfleet.contract import check_action_batch, describe_bad_action, needs_reset_error
from envfleet.executors.shared_memory import LEAF_SPACES

#: (actions in the space's dtypes, the first refused env or None, that env's message)
Checked = tuple[Any, int | None, Callable[[], str] | None]


def _first(bad: np.ndarray) -> int | None:
    """The first True row of ``bad`` (any axis beyond the first), or None."""
    if bad.ndim > 1:
        bad = bad.reshape(bad.shape[0], -1).any(axis=1)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


def _show(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} ({type(value).__name__})"


def _check_shape_kind(actions: np.ndarray, expected: tuple[int, ...], kinds: str,
                      what: str, space: spaces.Space, num_envs: int) -> None:
    if actions.shape != expected:
        raise ValueError(
            f"actions must have shape {expected} (num_envs={num_envs}, action shape "
            f"{expected[1:]}), got {actions.shape}"
        )
    if actions.dtype.kind not in kinds:
        raise ValueError(f"actions for {space} must be {what}, got dtype {actions.dtype}")


def _refusal(space: spaces.Space, value: Any) -> str:
    """Why one env's action ``value`` (as a list) is refused for the leaf ``space``."""
    if isinstance(space, spaces.Discrete):  # (the native envs' words)
        return describe_bad_action(space, 0, value).split(": ", 1)[1]
    if isinstance(space, spaces.Box):
        kind = space.dtype.kind
        return (f"{value!r} is not 0/1" if kind == "b" else
                f"{value!r} is not finite (as {space.dtype})" if kind == "f" else
                f"{value!r} is not made of whole numbers that {space.dtype} holds")
    return f"{value!r} is not in {space}"


def _check_leaf(space: spaces.Space, actions: Any, num_envs: int, path: str) -> Checked:
    """A batch for a Box, Discrete, MultiDiscrete or MultiBinary space."""
    arr = None if isinstance(actions, str | bytes) else np.asarray(actions)
    if arr is None or arr.ndim == 0 or arr.dtype.kind in "OSUV":
        raise TypeError(f"actions{path} must be a batch of {num_envs} actions of {space} (an "
                        f"array of numbers), got {_show(actions)}")
    shape = (num_envs, *space.shape)
    out = arr
    if isinstance(space, spaces.Box) and space.dtype.kind == "b":
        _check_shape_kind(arr, shape, "iub", "bools (or 0/1 integers)", space, num_envs)
        bad = _first((arr != 0) & (arr != 1))
    elif isinstance(space, spaces.Box):  # any value the dtype holds (bounds are the env's)
        check_action_batch(arr, space, num_envs)
        with np.errstate(over="ignore", invalid="ignore"):
            out = arr.astype(space.dtype)
            bad = _first(~np.isfinite(out) if space.dtype.kind == "f" else out != arr)
    elif isinstance(space, spaces.Discrete):
        check_action_batch(arr, space, num_envs)
        lo = int(space.start)
        bad = _first(~((arr >= lo) & (arr < lo + int(space.n))))
    elif isinstance(space, spaces.MultiDiscrete):
        _check_shape_kind(arr, shape, "iu", "integers", space, num_envs)
        a = arr.astype(np.float64) if arr.dtype.kind == "u" else arr
        bad = _first(~((a >= space.start) & (a - space.start < space.nvec)))
    else:
        _check_shape_kind(arr, shape, "iub", "0/1 integers or bools", space, num_envs)
        bad = _first(~((arr == 0) | (arr == 1)))
    if out.dtype != space.dtype:
        out = out.astype(space.dtype)
    if bad is None:
        return out, None, None
    at = f" at actions{path}" if path else ""
    return out, bad, lambda: (f"invalid action for env {bad}{at}: "
                              f"{_refusal(space, arr[bad].tolist())}")


def _check_values(space: spaces.Space, actions: Any, num_envs: int, path: str) -> Checked:
    """A batch for a space without a fixed-size form (``Text``, ``Graph``, ``Sequence``,
    ``OneOf``, a user's own): ``num_envs`` values, as Gymnasium batches them (a tuple), each
    in ``space``."""
    if isinstance(actions, str | bytes | Mapping) or not isinstance(
            actions, tuple | list | np.ndarray):
        raise TypeError(f"actions{path} must be a batch of {num_envs} actions of {space} (a "
                        f"tuple), got {_show(actions)}")
    values = list(actions)
    if len(values) != num_envs:
        raise ValueError(f"actions{path} must hold num_envs={num_envs} actions of {space}, "
                         f"got {len(values)}")
    bad = next((i for i, v in enumerate(values) if not space.contains(v)), None)
    if bad is None:
        return tuple(values), None, None
    at = f" at actions{path}" if path else ""
    return tuple(values), bad, lambda: (f"invalid action for env {bad}{at}: "
                                        f"{_show(values[bad])} is not in {space}")


def _check(space: spaces.Space, actions: Any, num_envs: int, path: str = "") -> Checked:
    """Check a batch for ``space``; Dict and Tuple batches leaf by leaf."""
    if not isinstance(space, (spaces.Dict, spaces.Tuple, *LEAF_SPACES)):
        return _check_values(space, actions, num_envs, path)
    if not isinstance(space, spaces.Dict | spaces.Tuple):
        return _check_leaf(space, actions, num_envs, path)
    is_dict = isinstance(space, spaces.Dict)
    if not isinstance(actions, Mapping if is_dict else tuple | list):
        raise TypeError(f"actions{path} for {space} must be a {'dict' if is_dict else 'tuple'} "
                        f"of batches of {num_envs} actions, got {_show(actions)}")
    keys = list(space.spaces) if is_dict else list(range(len(space.spaces)))
    if is_dict and (missing := [k for k in keys if k not in actions]):
        raise ValueError(f"actions{path} must be a batch of {num_envs} actions of {space}: "
                         f"the key {missing[0]!r} is missing")
    if not is_dict and len(actions) != len(keys):
        raise ValueError(f"actions{path} must be a batch of {num_envs} actions of {space}: "
                         f"{len(keys)} parts, got {len(actions)}")
    parts = [_check(space[k], actions[k], num_envs, f"{path}[{k!r}]") for k in keys]
    out = (dict(zip(keys, [p[0] for p in parts], strict=True)) if is_dict else
           tuple(p[0] for p in parts))
    refused = [p for p in parts if p[1] is not None]
    first = min(refused, key=lambda p: p[1]) if refused else (None, None, None)
    return out, first[1], first[2]


def check_actions(space: spaces.Space, batched_space: spaces.Space, actions: Any,
                  num_envs: int, needs_reset: np.ndarray | None = None) -> Any:
    """Validate a batch of actions; return it as arrays of the space's dtypes.

    ``needs_reset`` (DISABLED mode): envs whose episode ended and that must be reset before
    they are stepped (``batched_space`` is unused: the checks follow ``space``). Raises
    ``TypeError`` for a batch that is not an array of numbers (or not a dict / tuple for such
    spaces), else ``ValueError`` naming the first refused env (the lowest index, whichever the
    reason), before anything is sent to any env.
    """
    if isinstance(space, spaces.Discrete) and type(actions) is np.ndarray \
            and actions.shape == (num_envs,) and actions.dtype.kind in "iu" \
            and (needs_reset is None or not needs_reset.any()):
        # the common case in two reductions; anything odd takes the careful path below
        lo = int(space.start)
        if int(actions.min()) >= lo and int(actions.max()) < lo + int(space.n):
            return actions if actions.dtype == space.dtype else actions.astype(space.dtype)
    if type(space) is spaces.Box and space.dtype.kind == "f" and type(actions) is np.ndarray \
            and actions.dtype.kind == "f" and actions.shape == (num_envs, *space.shape) \
            and (needs_reset is None or not needs_reset.any()):
        # a float Box batch of the right shape (MuJoCo, Box2D): one finiteness reduction
        out = actions
        if actions.dtype != space.dtype:
            with np.errstate(over="ignore"):  # (a value too large for the dtype: refused below)
                out = actions.astype(space.dtype)
        if np.isfinite(out).all():
            return out
    out, bad, message = _check(space, actions, num_envs)
    if needs_reset is not None and needs_reset.any():
        first_pending = int(np.flatnonzero(needs_reset)[0])
        if bad is None or first_pending <= bad:
            raise needs_reset_error(first_pending)
    if message is not None:
        raise ValueError(message())
    return out
