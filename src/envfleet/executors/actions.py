"""Action checks for executors: a whole batch is checked before any env moves.

The wording is the native envs' (``envfleet.native.driver``): a wrong shape or dtype kind names
the expected layout, an invalid action names the first offending env index.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import iterate

from envfleet.native.driver import check_action_batch, describe_bad_action, refused_step_error


def _first(bad: np.ndarray) -> int | None:
    """The first True row of ``bad`` (any axis beyond the first), or None."""
    if bad.ndim > 1:
        bad = bad.reshape(bad.shape[0], -1).any(axis=1)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


def _check_shape_kind(actions: np.ndarray, expected: tuple[int, ...], kinds: str,
                      what: str, space: spaces.Space, num_envs: int) -> None:
    if actions.shape != expected:
        raise ValueError(
            f"actions must have shape {expected} (num_envs={num_envs}, action shape "
            f"{expected[1:]}), got {actions.shape}"
        )
    if actions.dtype.kind not in kinds:
        raise ValueError(f"actions for {space} must be {what}, got dtype {actions.dtype}")


def _bad_index(space: spaces.Space, actions: np.ndarray) -> int | None:
    """First env whose (shape- and kind-checked) action is outside ``space``."""
    if isinstance(space, spaces.Discrete):
        lo = int(space.start)
        return _first(~((actions >= lo) & (actions < lo + int(space.n))))
    if isinstance(space, spaces.Box):
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(actions) & (actions >= space.low) & (actions <= space.high)
        return _first(~ok)
    if isinstance(space, spaces.MultiDiscrete):
        a = actions.astype(np.float64) if actions.dtype.kind == "u" else actions
        return _first(~((a >= space.start) & (a - space.start < space.nvec)))
    if isinstance(space, spaces.MultiBinary):
        return _first(~((actions == 0) | (actions == 1)))
    raise AssertionError(space)


def check_actions(space: spaces.Space, batched_space: spaces.Space, actions: Any,
                  num_envs: int, needs_reset: np.ndarray | None = None) -> Any:
    """Validate a batch of actions; return it as arrays of the space's dtype.

    ``needs_reset`` (DISABLED mode): envs whose episode ended and that must be reset before
    they are stepped. Raises ``ValueError`` naming the first refused env (the lowest index,
    whichever the reason), before anything is sent to any env.
    """
    if isinstance(space, spaces.Discrete) and type(actions) is np.ndarray \
            and actions.shape == (num_envs,) and actions.dtype.kind in "iu" \
            and (needs_reset is None or not needs_reset.any()):
        # the common case in two reductions; anything odd takes the careful path below
        lo = int(space.start)
        if int(actions.min()) >= lo and int(actions.max()) < lo + int(space.n):
            return actions if actions.dtype == space.dtype else actions.astype(space.dtype)
    if isinstance(space, spaces.Discrete | spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        arr = np.asarray(actions)
        if isinstance(space, spaces.Discrete | spaces.Box):
            check_action_batch(arr, space, num_envs)
        elif isinstance(space, spaces.MultiDiscrete):
            _check_shape_kind(arr, (num_envs, *space.nvec.shape), "iu", "integers", space,
                              num_envs)
        else:
            _check_shape_kind(arr, (num_envs, *space.shape), "iub", "0/1 integers or bools",
                              space, num_envs)
        bad = _bad_index(space, arr)
        out = arr
    else:  # Dict, Tuple, ...: per env, with the space's own ``contains``
        try:
            rows = list(iterate(batched_space, actions))
        except Exception as error:
            raise ValueError(f"actions must be a batch of {num_envs} actions of {space}: "
                             f"{error}") from None
        if len(rows) != num_envs:
            raise ValueError(f"actions must hold num_envs={num_envs} actions, got {len(rows)}")
        bad = next((i for i, a in enumerate(rows) if not space.contains(a)), None)
        out = actions
        arr = rows
    if needs_reset is not None and needs_reset.any():
        first_pending = int(np.flatnonzero(needs_reset)[0])
        if bad is None or first_pending <= bad:
            raise refused_step_error(SimpleNamespace(action_space=space), first_pending, arr,
                                     True)
    if bad is not None:
        value = arr[bad]
        value = value.tolist() if hasattr(value, "tolist") else value
        if isinstance(space, spaces.Discrete | spaces.Box):
            raise ValueError(describe_bad_action(space, bad, value))
        raise ValueError(f"invalid action for env {bad}: {value!r} is not in {space}")
    if isinstance(out, np.ndarray) and out.dtype != space.dtype:
        out = out.astype(space.dtype)
    return out
