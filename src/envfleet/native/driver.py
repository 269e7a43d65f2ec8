"""The shared driver: autoreset, time limits and action checks, written once, in two forms.

``make_driver`` wraps a family's ``reset_one`` / ``step_one`` into per-env functions that every
compiled backend lifts unchanged (numba: a ``prange`` loop; CUDA: one thread per env). The
autoreset mode is a compile-time constant, so each mode compiles to straight-line code.
``make_batch_driver`` is the same rule over a whole batch (NumPy arrays or torch tensors, rows
as indices or a bool mask): the torch engine's host and device routes and the MuJoCo engine
run it around their batched steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from envfleet.contract import (
    PEND,
    RESET_NOW,
    begin_episodes,
    describe_bad_action,
    needs_reset_error,
    on_episode_end,
)
from envfleet.native import tensor_math
from envfleet.native.jit import kernel_function
from envfleet.native.spec import NativeEnvSpec

NEXT_STEP, SAME_STEP, DISABLED = 0, 1, 2
MODE_CODES = {AutoresetMode.NEXT_STEP: NEXT_STEP, AutoresetMode.SAME_STEP: SAME_STEP,
              AutoresetMode.DISABLED: DISABLED}
#: the contract's one autoreset rule (``on_episode_end``) per mode code
RULES = {code: on_episode_end(mode) for mode, code in MODE_CODES.items()}

# The 4-int device counter of a GPU step or rollout (armed to ``[num_envs, 0, -1, 0]``):
# REFUSED, the smallest env index whose step was refused (``num_envs``: none; the cuda engine's);
# ENDED, the episodes that ended; REFUSED_AT, the step (counted from the arming) at which the
# first refusal happened (-1: none); STEPS, the steps run since the arming. A refusal is sticky:
# from the refused step on, no env moves (cuda) or the rollout is rewound to it (torch).
REFUSED, ENDED, REFUSED_AT, STEPS = 0, 1, 2, 3


# --- action checks, one per action-space kind -------------------------------------------------


@kernel_function
def discrete_action_ok(i: int, actions: Any, bounds: Any) -> bool:
    """Env i's action is an integer in [start, start + n)."""
    a = actions[i]
    return bounds[0] <= a < bounds[1]


@kernel_function
def box_action_ok(i: int, actions: Any, bounds: Any) -> bool:
    """Every component of env i's action (a row of 2-D ``actions``) is finite. The bounds are
    the env's business: Gymnasium's envs clip (Pendulum, MountainCarContinuous), so the
    family's ``step_one`` clips where Gymnasium's ``step`` does."""
    ok = True
    for k in range(actions.shape[1]):  # math.isfinite: CUDA device code has no np.isfinite
        ok = ok and math.isfinite(actions[i, k])
    return ok


class ActionFormat(NamedTuple):
    """How a batch of actions must look for one action space."""

    shape: tuple[int, ...]  # per env
    integer: bool  # integer kind (Discrete) or floating kind (Box)
    dtype: type  # the dtype the kernels take: int64 (Discrete), the space's own (Box)
    #: the check's constants: (start, start + n), or the Box's (low, high) flattened (not
    #: checked: a Box action only has to be finite)
    bounds: tuple
    check: Callable[..., bool]


def action_format(space: spaces.Space) -> ActionFormat:
    """The action layout and check for a single env's action space."""
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return ActionFormat((), True, np.int64, (start, start + int(space.n)),
                            discrete_action_ok)
    if isinstance(space, spaces.Box) and space.dtype.kind == "f":
        low = np.asarray(space.low, dtype=np.float64).ravel()
        high = np.asarray(space.high, dtype=np.float64).ravel()
        return ActionFormat(tuple(space.shape), False, space.dtype.type, (low, high),
                            box_action_ok)
    raise NotImplementedError(
        f"native envs support Discrete and floating-point Box actions, not {space}")


def valid_actions(space: spaces.Space, num_envs: int) -> np.ndarray:
    """A batch of valid actions (the lowest one per env), e.g. to compile kernels ahead."""
    fmt = action_format(space)
    if fmt.integer:
        return np.full(num_envs, fmt.bounds[0], dtype=fmt.dtype)
    low, high = fmt.bounds
    row = np.clip(np.zeros(low.shape), low, high).reshape(fmt.shape)
    return np.broadcast_to(row, (num_envs, *fmt.shape)).astype(fmt.dtype)


def refused_step_error(spec: NativeEnvSpec, index: int, action: Any,
                       needs_reset: bool, engine: Any = None) -> ValueError:
    """The error for a step refused at env ``index`` (whose action was ``action``): it needs a
    reset, its action is out of the action space (Discrete) or not finite (Box), or the
    family's ``action_check`` refused it."""
    if needs_reset:
        return needs_reset_error(index)
    value = action.tolist() if hasattr(action, "tolist") else action
    if spec.describe_refusal is not None and _in_space(spec.action_space, value):
        return ValueError(spec.describe_refusal(index, value, engine))
    return ValueError(describe_bad_action(spec.action_space, index, value))


def _in_space(space: spaces.Space, value: Any) -> bool:
    fmt = action_format(space)
    if fmt.integer:
        return fmt.bounds[0] <= value < fmt.bounds[1]
    return bool(np.all(np.isfinite(np.asarray(value, dtype=np.float64))))


# --- the per-env driver ---------------------------------------------------------------------


class Driver(NamedTuple):
    """Per-env functions every compiled backend lifts.

    A step is three phases per env, in order: ``begin`` (NEXT_STEP: reset the envs whose episode
    ended last step), ``advance`` (step the others, apply the time limit) and ``finish``
    (SAME_STEP: keep the final observation, reset). CPU backends run ``begin`` and ``advance``
    in one pass over a chunk of envs (a separate ``begin`` pass touched each reset env's rows
    twice: CartPole 12% slower) and ``finish`` as a second pass, only when an episode ended.
    A GPU thread runs the three for its env.
    """

    refuse: Callable[..., bool]  # (i, state, params, actions, bounds, pending) -> refused
    begin: Callable[..., None]
    advance: Callable[..., bool]  # returns "episode ended"
    finish: Callable[..., None]
    reset: Callable[..., None]  # resets env i if masked, reseeding it when asked


def _generated(name: str, arguments: str, result: str, **names: Any) -> Callable[..., Any]:
    """A kernel function ``name(arguments)`` returning ``result`` (numba builds a NamedTuple
    field by field: no ``_replace`` nor ``*args`` into a record in kernel code)."""
    exec(f"def {name}({arguments}):\n    return {result}\n", names)
    return kernel_function(names[name])


def per_env_views(spec: NativeEnvSpec, per_env: tuple[str, ...],
                  params_type: type) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(state_of, row)`` for a flat kernel state ``(*state, *columns)`` (the state columns
    and tables, then one array per ``per_env`` field; flat: numba's parallel loops take tuples
    of arrays, not nested tuples): ``state_of(kstate)`` is the family's state NamedTuple and
    ``row(params, kstate, i)`` env i's ``params_type`` record, the ``per_env`` fields read
    from their columns, the others from ``params`` (compiled in as constants on numba)."""
    k = len(spec.state_type._fields)
    state_of = _generated("state_of", "kstate",
                          f"State({', '.join(f'kstate[{j}]' for j in range(k))})",
                          State=spec.state_type)
    values = ", ".join(f"kstate[{k + per_env.index(name)}][i]" if name in per_env
                       else f"params[{j}]" for j, name in enumerate(params_type._fields))
    row = _generated("row", "params, kstate, i", f"Params({values})", Params=params_type)
    return state_of, row


def make_driver(spec: NativeEnvSpec, mode: int, per_env: tuple[str, ...] = (),
                params_type: type | None = None) -> Driver:
    """Wrap ``spec``'s scalar kernels with autoreset ``mode`` (a ``*_STEP``/``DISABLED`` code).

    Kernels see observations as rows: ``obs`` is (num_envs, obs_size) whatever the obs shape.
    With ``per_env`` fields (``spec.split_params``), the driver's ``state`` argument is the
    flat tuple ``(*state, *columns)`` and the family's kernels get ``state`` and env i's own
    params record (``per_env_views``): the family's code is the same in both cases.
    """
    reset_one, step_one = spec.reset_one, spec.step_one
    action_ok = action_format(spec.action_space).check
    check = spec.action_check
    if per_env:
        reset_one, step_one, check = _per_env_kernels(spec, *per_env_views(spec, per_env,
                                                                           params_type))
    one = np.uint64(1)

    if check is None:
        @kernel_function
        def refuse(i, state, params, actions, bounds, pending):
            if mode == DISABLED and pending[i]:
                return True
            return not action_ok(i, actions, bounds)
    else:
        @kernel_function
        def refuse(i, state, params, actions, bounds, pending):
            if mode == DISABLED and pending[i]:
                return True
            if not action_ok(i, actions, bounds):
                return True
            if pending[i]:  # NEXT_STEP: this step resets env i and ignores its action
                return False
            return not check(i, state, params, actions)

    @kernel_function
    def new_episode(i, state, params, rng, obs):
        _, episodes, steps = rng
        episodes[i] += one
        steps[i] = 0
        reset_one(i, state, params, rng, obs)

    @kernel_function
    def begin(i, state, params, rng, pending, obs, rewards, terminated, truncated):
        if mode == NEXT_STEP and pending[i]:
            new_episode(i, state, params, rng, obs)
            rewards[i] = 0.0
            terminated[i] = False
            truncated[i] = False

    @kernel_function
    def advance(i, state, params, actions, rng, max_steps, pending, obs, rewards, terminated,
                truncated):
        if mode == NEXT_STEP and pending[i]:  # reset by ``begin``: this step is the reset
            pending[i] = False
            return False
        step_one(i, state, params, actions, rng, obs, rewards, terminated)
        steps = rng[2]
        steps[i] += 1
        truncated[i] = steps[i] >= max_steps
        done = terminated[i] or truncated[i]
        if mode != SAME_STEP:
            pending[i] = done
        return done

    @kernel_function
    def finish(i, state, params, rng, obs, terminated, truncated, final_obs):
        # final_obs rows of envs that did not end are zero (as Gymnasium's tests expect)
        if mode == SAME_STEP:
            if terminated[i] or truncated[i]:
                for k in range(obs.shape[1]):
                    final_obs[i, k] = obs[i, k]
                new_episode(i, state, params, rng, obs)
            else:
                for k in range(obs.shape[1]):
                    final_obs[i, k] = 0

    @kernel_function
    def reset(i, mask, new_seeds, reseed, state, params, rng, pending, obs):
        if mask[i]:
            seeds, episodes, steps = rng
            if reseed:
                seeds[i] = new_seeds[i]
                episodes[i] = 0
            else:
                episodes[i] += one
            steps[i] = 0
            reset_one(i, state, params, rng, obs)
            pending[i] = False

    return Driver(refuse, begin, advance, finish, reset)


def _per_env_kernels(spec: NativeEnvSpec, state_of: Callable[..., Any],
                     row: Callable[..., Any]) -> tuple:
    """``spec``'s reset_one, step_one and action_check taking the flat kernel state
    (``per_env_views``) and handing the family its state and env i's params record."""
    family_reset, family_step, family_check = spec.reset_one, spec.step_one, spec.action_check

    @kernel_function
    def reset_one(i, state, params, rng, obs):
        family_reset(i, state_of(state), row(params, state, i), rng, obs)

    @kernel_function
    def step_one(i, state, params, actions, rng, obs, rewards, terminated):
        family_step(i, state_of(state), row(params, state, i), actions, rng, obs, rewards,
                    terminated)

    check = None
    if family_check is not None:
        @kernel_function
        def check(i, state, params, actions):
            return family_check(i, state_of(state), row(params, state, i), actions)

    return reset_one, step_one, check


# --- the batched driver: the same rule over a whole batch ---------------------------------------


class BatchDriver(NamedTuple):
    """The driver's rule over a whole batch (``make_batch_driver``), around an engine's
    batched step: ``begin(due)`` (``Driver.begin``: NEXT_STEP's pending envs ``due``, None for
    none, start their next episode; before the step, which skips them, or after it, written
    over) and ``end(count=None)`` (``Driver.advance``'s end and ``Driver.finish``), which
    returns the envs that ended (None: none). ``count``, the engine's own count of the envs
    that ended, may spare the masks: with 0, and no env reset by ``begin`` this step, the rule
    has nothing to do (every env pending at the step's start was reset, by ``begin`` or by
    the engine's loop)."""

    begin: Callable[[Any], None]
    end: Callable[..., Any]


def make_batch_driver(rule: str, rewards: Any, terminated: Any, truncated: Any, done: Any,
                      pending: Any, rows_of: Callable[[Any], Any],
                      keep_final: Callable[[Any], None],
                      reset: Callable[[Any], None]) -> BatchDriver:
    """The contract's autoreset ``rule`` (``on_episode_end``) over an engine's batch buffers
    (NumPy arrays or torch tensors), fixed when it is made as the scalar driver's mode is.

    After a step, ``done`` (a buffer) gets which envs ended, and they are ``pending`` (NEXT_STEP:
    reset on their next step; DISABLED: refused until reset), or, under SAME_STEP, keep their
    final observation (``keep_final``) and start their next episode now (``reset``).
    ``rows_of(done)`` names the ended envs as the engine's callbacks take them (indices for a
    gathered reset, or the mask itself: no host read), None when none ended; ``begin_episodes``
    writes a reset step's outputs for either form.
    """
    logical_or = tensor_math.namespace(done).logical_or
    began = False  # whether this step's ``begin`` reset envs (their pending flags still up)

    def begin(due: Any) -> None:
        nonlocal began
        began = due is not None
        if due is not None:
            reset(due)
            begin_episodes(rewards, terminated, truncated, due)

    def nothing_to_do(count: int | None) -> bool:
        """No env ended (the engine's ``count``) and none was reset by ``begin``."""
        nonlocal began
        idle = count == 0 and not began
        began = False
        return idle

    def end_pending(count: int | None = None) -> Any:
        if nothing_to_do(count):  # ``pending`` is all down already
            return None
        ended = rows_of(logical_or(terminated, truncated, out=done))
        pending[...] = done
        return ended

    def end_reset_now(count: int | None = None) -> Any:
        if nothing_to_do(count):
            return None
        ended = rows_of(logical_or(terminated, truncated, out=done))
        if ended is not None:
            keep_final(ended)
            reset(ended)
        return ended

    return BatchDriver(begin if rule == PEND else _no_begin,
                       end_reset_now if rule == RESET_NOW else end_pending)


def mask_rows(done: np.ndarray) -> np.ndarray | None:
    """``make_batch_driver``'s ``rows_of`` for an engine whose callbacks take the ended envs
    as the mask itself (None when none ended)."""
    return done if done.any() else None


def _no_begin(due: Any) -> None:
    """SAME_STEP and DISABLED: no env is pending at a step's start."""
