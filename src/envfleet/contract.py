"""The Gymnasium vector contract that every envfleet vector env keeps, native or executor.

Seeding (``seed + i``, uint64 seeds), ``options["reset_mask"]``, autoreset-mode names, the
checks of a batch of actions and the wording of their errors: one module, imported by
``native/``, ``executors/`` and ``sb3.py``, so that every backend refuses the same input with
the same words. ``VectorContract`` is the base class both ``NativeVectorEnv`` and
``ExecutorVectorEnv`` inherit: the reset and step rules, SAME_STEP's ``final_obs`` info and the
closed-env error, written once. ``on_episode_end`` is the autoreset rule that the torch engine
and the executors apply (the driver compiles the same rule into the numba and cuda kernels),
with ``begin_episodes`` / ``end_truncated``, the outputs it gives a batch's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode, VectorEnv


def parse_autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    """Accept the enum or its string value ("NextStep", "SameStep", "Disabled")."""
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        valid = ", ".join(repr(m.value) for m in AutoresetMode)
        raise ValueError(f"unknown autoreset_mode {mode!r}; use one of {valid}") from None


def check_make_arguments(num_envs: Any, autoreset_mode: AutoresetMode | str, seed: Any,
                         max_episode_steps: Any) -> AutoresetMode:
    """``make``'s arguments that every backend shares, checked once for all of them:
    ``num_envs`` an int >= 1, a known autoreset mode (returned as the enum), ``seed`` None or
    a uint64 seed for every env (``seed + i``), ``max_episode_steps`` None or an int >= 1."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    mode = parse_autoreset_mode(autoreset_mode)
    if seed is not None:
        check_seed(seed, count=num_envs)
    if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int)
            or max_episode_steps < 1):
        raise ValueError(f"max_episode_steps must be an int >= 1, got {max_episode_steps!r}")
    return mode


def check_seed(seed: Any, name: str = "seed", count: int = 1) -> int:
    """A seed is a non-negative integer (Gymnasium's rule) below 2**64 (seeds are uint64, on
    every backend alike); with ``count``, ``seed + count - 1`` (the last env's) is too."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"{name} must be a non-negative int or None, got {seed!r}")
    seed = int(seed)
    if seed >= 2**64:
        raise ValueError(f"{name} must be below 2**64 (seeds are uint64), got {seed}")
    if count > 2**64:  # no bound to suggest: the envs alone outnumber the seeds
        raise ValueError(f"{name} {seed} gives env i the seed {name} + i, but num_envs={count} "
                         f"passes 2**64 (seeds are uint64): no {name} fits; use fewer envs")
    if seed + count - 1 >= 2**64:
        raise ValueError(f"{name} {seed} gives env i the seed {name} + i, which passes 2**64 - 1 "
                         f"(seeds are uint64) for num_envs={count}: use at most "
                         f"2**64 - {count} = {2**64 - count}")
    return seed


def env_seeds(seed: int | Sequence[int | None], num_envs: int) -> list[int | None]:
    """Per-env seeds: ``seed + i`` for an int (Gymnasium's rule), or one per env (None: none)."""
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        base = check_seed(seed, count=num_envs)
        return [base + i for i in range(num_envs)]
    if not isinstance(seed, Sequence | np.ndarray) or isinstance(seed, str):
        raise ValueError(f"seed must be a non-negative int, a list of them or None, got {seed!r}")
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"seed list must have num_envs={num_envs} entries, got {len(seeds)}")
    return [None if s is None else check_seed(s, f"seed[{i}]") for i, s in enumerate(seeds)]


def check_reset_mask(mask: Any, num_envs: int) -> np.ndarray:
    """``options["reset_mask"]`` is a bool array with one entry per env."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (num_envs,):
        raise ValueError(
            f"options['reset_mask'] must be a bool array of shape ({num_envs},), "
            f"got dtype {mask.dtype} and shape {mask.shape}"
        )
    return mask


# --- autoreset: one rule ----------------------------------------------------------------------

#: what happens to an env whose episode ended (by its own step, or because its worker or actor
#: was lost and rebuilt): reset on its next step, reset now (its last observation kept as
#: ``final_obs``), or wait for ``reset(options={"reset_mask": ...})``
PEND, RESET_NOW, WAIT = "pend", "reset", "wait"


def on_episode_end(mode: AutoresetMode) -> str:
    """The one autoreset rule (Gymnasium 1.x): NEXT_STEP pends the reset to the env's next
    step, SAME_STEP resets at once, DISABLED leaves it to the caller. The driver runs it over
    a batch (``driver.make_batch_driver``: the torch, Atari and MuJoCo engines) and compiles it
    for numba and cuda; the executors apply it to each env (``EnvGroup``) and to every env of
    a lost share (``ShareFleet``)."""
    return {AutoresetMode.NEXT_STEP: PEND, AutoresetMode.SAME_STEP: RESET_NOW}.get(mode, WAIT)


def begin_episodes(rewards: Any, terminated: Any, truncated: Any, rows: Any) -> None:
    """The outputs of envs ``rows`` whose step was a reset (NEXT_STEP's reset step, a lost
    share's new envs): reward 0, both flags down. NumPy arrays and torch tensors alike; ``rows``
    may also be a bool tensor over the batch (filled through the mask: no index is read back,
    so a GPU step can be captured)."""
    if hasattr(rewards, "masked_fill_") and str(getattr(rows, "dtype", "")) == "torch.bool":
        rewards.masked_fill_(rows, 0)
        terminated.masked_fill_(rows, False)
        truncated.masked_fill_(rows, False)
        return
    rewards[rows] = 0
    terminated[rows] = False
    truncated[rows] = False


def end_truncated(rewards: Any, terminated: Any, truncated: Any, rows: Any) -> None:
    """The outputs of envs ``rows`` whose episode ends because their worker or actor was lost
    (``restart_failed``): truncated, reward 0. NumPy arrays and torch tensors alike."""
    rewards[rows] = 0
    terminated[rows] = False
    truncated[rows] = True


# --- actions ---------------------------------------------------------------------------------


def dtype_kind(dtype: Any) -> tuple[str, str]:
    """(NumPy kind letter, NumPy-style name) of a NumPy dtype or a torch dtype."""
    if isinstance(dtype, np.dtype):
        return dtype.kind, str(dtype)
    name = str(dtype).removeprefix("torch.")  # a torch dtype
    if name == "bool":
        return "b", name
    if dtype.is_complex:
        return "c", name
    if dtype.is_floating_point:
        return "f", name
    return ("u" if name.startswith("uint") else "i"), name


def check_action_batch(actions: Any, space: spaces.Discrete | spaces.Box, num_envs: int) -> None:
    """Refuse a batch (NumPy array or torch tensor) for a Discrete or Box space of the wrong
    shape or dtype kind (integers for Discrete; numbers for Box)."""
    integer = isinstance(space, spaces.Discrete)
    shape = () if integer else tuple(space.shape)
    expected = (num_envs, *shape)
    got = tuple(actions.shape)
    if got != expected:
        raise ValueError(
            f"actions must have shape {expected} (num_envs={num_envs}, action shape "
            f"{shape}), got {got}"
        )
    kind, name = dtype_kind(actions.dtype)
    if kind not in ("iu" if integer else "iuf"):
        what = "integers" if integer else "numbers (float or int)"
        raise ValueError(f"actions for {space} must be {what}, got dtype {name}")
    if integer and name == "uint64":
        _refuse_wrapping_uint64(actions, space)


def _refuse_wrapping_uint64(actions: Any, space: spaces.Discrete) -> None:
    """uint64 actions above int64's range would read as negative numbers once converted to
    int64: refuse the first with its real value."""
    values = actions.cpu().numpy() if hasattr(actions, "cpu") else np.asarray(actions)
    too_large = np.flatnonzero(values > np.iinfo(np.int64).max)  # Discrete: one per env
    if too_large.size:
        index = int(too_large[0])
        raise ValueError(describe_bad_action(space, index, values[index].tolist()))


def describe_bad_action(space: spaces.Space, index: int | None, value: Any) -> str:
    """The error message for env ``index``'s invalid action ``value`` (None: a single env's,
    ``check_single_action``)."""
    where = "" if index is None else f" for env {index}"
    if isinstance(space, spaces.Discrete):
        lo = int(space.start)
        return (f"invalid action{where}: {value!r} is not in {space} "
                f"(integers {lo}..{lo + int(space.n) - 1})")
    if isinstance(space, spaces.Box):  # any finite value: the env clips it to its bounds
        return f"invalid action{where}: {value!r} is not finite (as {space.dtype})"
    return f"invalid action{where}: {value!r} is not in {space}"


def check_single_action(action: Any, space: spaces.Discrete | spaces.Box) -> np.ndarray:
    """A single env's ``action`` (``gymnasium.make("envfleet/<id>")``) as an array, refused
    in single-env words (no batch, no env index) when its shape, dtype kind or value is
    wrong for ``space``: what ``check_action_batch`` and the engine check for a batch."""
    integer = isinstance(space, spaces.Discrete)
    a = np.asarray(action)
    shape = () if integer else tuple(space.shape)
    if a.shape != shape:
        raise ValueError(f"action must have shape {shape} for {space}, got shape {a.shape}")
    kind, name = dtype_kind(a.dtype)
    if kind not in ("iu" if integer else "iuf"):
        what = "an integer" if integer else "numbers (float or int)"
        raise ValueError(f"action for {space} must be {what}, got dtype {name}")
    if integer:
        lo = int(space.start)
        ok = lo <= int(a) < lo + int(space.n)
    else:
        with np.errstate(over="ignore"):  # too large for the space's dtype: inf, refused
            ok = bool(np.isfinite(a.astype(space.dtype)).all())
    if not ok:
        raise ValueError(describe_bad_action(space, None, a.tolist()))
    return a


def needs_reset_error(index: int) -> ValueError:
    """The error for stepping env ``index`` after its episode ended in DISABLED mode."""
    return ValueError(
        f"env {index} has finished its episode and autoreset_mode is DISABLED: reset it "
        f"with reset(options={{'reset_mask': mask}}) before stepping it"
    )


# --- the vector env contract, one base class -------------------------------------------------


class ClosedEnvError(ClosedEnvironmentError, RuntimeError):
    """A call on a closed vector env: Gymnasium's ``ClosedEnvironmentError`` (as its
    ``AsyncVectorEnv`` raises), and a ``RuntimeError`` as envfleet raised before; the same
    class and words on every backend, native or executor."""


class VectorContract(VectorEnv):
    """The rules every envfleet vector env keeps, native or executor, in one place.

    A subclass sets ``num_envs``, ``autoreset_mode``, ``_initial_seed`` (the first reset's seed
    when none is given), ``_has_reset = False`` and ``_failure = None`` (why a reset is needed
    again, if a call failed), ``_closed = True`` when its ``close_extras`` released it (it may
    add its own reasons in ``_is_closed``), and ``copy`` (whether outputs are copies, ``_out``).
    """

    _has_reset: bool = False
    _failure: str | None = None
    _initial_seed: int | None = None
    _closed: bool = False
    copy: bool = True

    def _is_closed(self) -> bool:
        """Whether ``close()`` ran (a subclass may add its own reasons)."""
        return self._closed or self.closed

    def _out(self, array: Any) -> Any:
        """An output buffer as the caller gets it: its copy, or itself with ``copy=False``."""
        return array.copy() if self.copy else array

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs})"

    def _check_open(self) -> None:
        """Refuse any call after ``close()`` (``ClosedEnvError``, worded alike everywhere)."""
        if self._is_closed():
            raise ClosedEnvError(f"Trying to operate on `{type(self).__name__}`, after a call "
                                 f"to `close()` (this env is closed)")

    def _check_has_reset(self, what: str = "step") -> None:
        """``what`` (step, rollout, send, recv) needs a reset first, and again after a failed
        call (which is named)."""
        if not self._has_reset:
            raise RuntimeError(
                f"call reset() before {what}()" if self._failure is None else
                f"a previous call failed ({self._failure}): call reset() before {what}()")

    def _mask_only(self, seed: Any, options: dict[str, Any] | None
                   ) -> tuple[Any, np.ndarray | None]:
        """``_reset_rules`` for an env whose only reset option is ``reset_mask`` (any other
        option refused)."""
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; supported: "
                             f"'reset_mask'")
        return self._reset_rules(seed, mask)

    def _reset_rules(self, seed: Any, mask: Any) -> tuple[Any, np.ndarray | None]:
        """(seed, mask) of a ``reset(seed=, options={"reset_mask": mask})`` after the rules:
        the mask is a bool array of one entry per env, the first reset (and the first after a
        failed call) resets every env, and a first reset without a seed takes the one given
        to ``make``."""
        if mask is not None:
            mask = check_reset_mask(mask, self.num_envs)
            if not self._has_reset and not mask.all():
                raise RuntimeError(
                    "the first reset() must reset every env (no reset_mask)"
                    if self._failure is None else
                    f"a previous call failed ({self._failure}): reset every env (no reset_mask)")
        if seed is None and not self._has_reset:
            seed = self._initial_seed
        return seed, mask

    @staticmethod
    def _add_final(info: dict[str, Any], final_obs: Any, ended: Any,
                   final_info: dict[str, Any], own_mask: bool = False) -> dict[str, Any]:
        """SAME_STEP's entries for the envs ``ended`` this step: ``final_obs`` (their last
        observations), ``final_info`` (their last infos), each with its ``_key`` mask
        (``own_mask``: ``_final_info`` gets a copy of the mask, not the same array)."""
        info["final_obs"] = final_obs
        info["_final_obs"] = ended
        info["final_info"] = final_info
        info["_final_info"] = ended.copy() if own_mask else ended
        return info
