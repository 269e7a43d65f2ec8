"""What every executor shares: the Gymnasium vector API over N copies of any Gymnasium env.

``ExecutorVectorEnv`` owns the contract (spaces, seeding, reset options, autoreset bookkeeping,
action checks, info dicts, copies, closing); an executor subclass only moves data to and from
the envs: ``_reset_envs`` and ``_step_envs`` fill the batch buffers (``self.arrays``), through
an in-process loop (``serial``), pipes (``subprocess``) or shared memory (``pool``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envfleet.contract import ClosedEnvError, VectorContract, check_seed, env_seeds
from envfleet.executors.actions import check_actions
from envfleet.executors.group import Infos
from envfleet.executors.infos import InfoParts, add_infos
from envfleet.executors.outputs import BadEnvOutput
from envfleet.executors.shared_memory import (
    BufferLayout,
    assign_rows,
    export,
    final_obs_info,
    leaves,
    nest,
)

DEFAULT_STEP_TIMEOUT = 60.0


class EnvWorkerError(RuntimeError):
    """An env failed in an executor: it raised, or its worker died or stopped answering.

    ``env_indices`` are every env that failed (a lost worker or actor: all of its envs),
    ``env_index`` the env concerned (the one it was running, else the first of them; None when
    no env is), ``worker_traceback`` the worker's traceback text (also chained as this
    exception's ``__cause__``).
    """

    def __init__(self, message: str, env_index: int | None = None,
                 worker_traceback: str | None = None,
                 env_indices: Sequence[int] | None = None) -> None:
        super().__init__(message)
        if env_indices is None:
            env_indices = () if env_index is None else (env_index,)
        self.env_indices: tuple[int, ...] = tuple(int(i) for i in env_indices)
        self.env_index = env_index if env_index is not None or not self.env_indices \
            else self.env_indices[0]
        self.worker_traceback = worker_traceback

    def __reduce__(self) -> tuple:
        return type(self), (self.args[0], self.env_index, self.worker_traceback,
                            self.env_indices)


#: a call on a closed executor: the contract's ``ClosedEnvError`` (the name executors had first)
ClosedExecutorError = ClosedEnvError


class SpacesMismatchError(RuntimeError, ValueError):
    """The envs' spaces differ: a ``RuntimeError``, as Gymnasium's vector envs raise (and a
    ``ValueError``, as envfleet raised before), the same on every backend."""


def spaces_mismatch(index: int, what: str, theirs: spaces.Space, first: int,
                    mine: spaces.Space) -> SpacesMismatchError:
    """The error for env ``index``'s ``what`` space ``theirs`` that differs from env
    ``first``'s ``mine``."""
    return SpacesMismatchError(f"env {index}'s {what} {theirs} differs from env {first}'s "
                               f"{mine}: every env must have the same spaces")


class RemoteTraceback(Exception):
    """The traceback text of an exception raised in a worker process (shown when chained)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


class EnvAttributeError(EnvWorkerError, AttributeError):
    """An env has no attribute by that name (``call`` / ``get_attr``): an ``AttributeError`` as
    well, as Gymnasium's ``SyncVectorEnv`` raises, so that ``hasattr``-style checks (SB3's
    ``VecEnv.has_attr``) see a missing attribute."""


def failure_error(index: int, phase: str, error_type: str, text: str,
                  tb: str) -> EnvWorkerError:
    """The parent-side error for an exception raised by env ``index``'s ``phase`` (or for a
    value it returned that ``executors.outputs`` refused); a missing attribute in ``call`` is
    also an ``AttributeError`` (``EnvAttributeError``), as SyncVectorEnv raises."""
    message = (f"env {index}'s {phase}() {text}" if error_type == BadEnvOutput.__name__ else
               f"env {index} raised {error_type} in {phase}(): {text}")
    cls = EnvAttributeError if error_type == "AttributeError" and phase == "call" \
        else EnvWorkerError
    error = cls(message, env_index=index, worker_traceback=tb)
    error.__cause__ = RemoteTraceback(tb)
    return error


def buffer_layout(observation_space: spaces.Space, action_space: spaces.Space, rows: int,
                  mode: AutoresetMode) -> BufferLayout:
    """The batch buffers of ``rows`` envs: observations, actions, rewards, flags (+ final obs)."""
    arrays: dict[str, tuple[tuple[int, ...], Any]] = {}
    for name, (shape, dtype) in leaves(observation_space, "obs").items():
        arrays[name] = ((rows, *shape), dtype)
    for name, (shape, dtype) in leaves(action_space, "act").items():
        arrays[name] = ((rows, *shape), dtype)
    arrays["rewards"] = ((rows,), np.float64)
    arrays["terminated"] = ((rows,), np.bool_)
    arrays["truncated"] = ((rows,), np.bool_)
    if mode is AutoresetMode.SAME_STEP:
        for name, (shape, dtype) in leaves(observation_space, "final_obs").items():
            arrays[name] = ((rows, *shape), dtype)
    return BufferLayout.of(arrays)


class ExecutorVectorEnv(VectorContract):
    """Gymnasium's ``VectorEnv`` over N Gymnasium envs run by an executor (the reset / step
    rules, SAME_STEP's ``final_obs`` info and the closed-env error: ``VectorContract``).

    Subclasses call ``_setup`` once the single-env spaces are known, then implement
    ``_reset_envs``, ``_step_envs`` and ``_close_executor``.
    """

    backend = "executor"

    def __init__(self, num_envs: int, *, autoreset_mode: AutoresetMode, seed: int | None,
                 copy: bool) -> None:
        self.num_envs = num_envs
        self.autoreset_mode = autoreset_mode
        self.copy = copy
        self.metadata = {"autoreset_mode": autoreset_mode, "render_modes": []}
        self.render_mode = None
        self._initial_seed = None if seed is None else check_seed(seed)
        self._has_reset = False
        self._failure: str | None = None  # why a reset is needed before the next step
        self._interrupted = False  # a call was cut short: answers may still be on their way
        self._broken: str | None = None  # why the executor cannot run any more
        self._needs_reset = np.zeros(num_envs, dtype=bool)  # DISABLED: ended episodes
        self.arrays: dict[str, np.ndarray] = {}

    # --- set-up, for subclasses --------------------------------------------------------------

    def _setup(self, observation_space: spaces.Space, action_space: spaces.Space,
               env_metadata: dict[str, Any] | None, render_mode: str | None) -> BufferLayout:
        """Record the single-env spaces; return the layout of the batch buffers."""
        self.single_observation_space = observation_space
        self.single_action_space = action_space
        self.observation_space = batch_space(observation_space, self.num_envs)
        self.action_space = batch_space(action_space, self.num_envs)
        if env_metadata:
            self.metadata["render_modes"] = list(env_metadata.get("render_modes", []))
            if "render_fps" in env_metadata:
                self.metadata["render_fps"] = env_metadata["render_fps"]
        self.render_mode = render_mode
        return buffer_layout(observation_space, action_space, self.num_envs,
                             self.autoreset_mode)

    def _bind(self, arrays: dict[str, np.ndarray]) -> None:
        """Use ``arrays`` (from ``_setup``'s layout) as the batch buffers."""
        self.arrays = arrays
        self._obs = nest(self.single_observation_space, arrays, "obs")
        self._actions = nest(self.single_action_space, arrays, "act")
        self._final_obs = (nest(self.single_observation_space, arrays, "final_obs")
                           if self.autoreset_mode is AutoresetMode.SAME_STEP else None)

    # --- executor hooks ------------------------------------------------------------------------

    def _reset_envs(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                    options: dict[str, Any] | None) -> Infos | InfoParts:
        raise NotImplementedError

    def _step_envs(self) -> tuple[Infos | InfoParts, Infos | InfoParts]:
        """Step every env with the actions in the action buffers; (infos, final infos): each
        a list of (env index, info) or ``InfoParts`` (already batched by share)."""
        raise NotImplementedError

    def _close_executor(self) -> None:
        raise NotImplementedError

    def _call_envs(self, rows: list[int], name: str | Callable[..., Any], args: tuple,
                   kwargs: dict[str, Any]) -> list[Any]:
        """Envs ``rows``' attribute ``name`` (see ``call_at``), in ``rows``' order."""
        raise NotImplementedError

    def _set_attr_envs(self, rows: list[int], name: str, values: list[Any]) -> None:
        """Set env ``rows[k]``'s attribute ``name`` to ``values[k]``."""
        raise NotImplementedError

    def _resync(self) -> None:
        """After an interrupted call: wait until the envs have finished what they were given,
        dropping their answers (in-process executors have nothing to wait for)."""

    # --- the Gymnasium API ------------------------------------------------------------------

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``); env i gets ``seed + i``.

        Other options are passed to every reset env's ``reset(options=...)``.
        """
        self._check_usable()
        options = dict(options or {})
        seed, mask = self._reset_rules(seed, options.pop("reset_mask", None))
        if mask is not None:
            mask = None if mask.all() else mask.copy()
        seeds = None if seed is None else env_seeds(seed, self.num_envs)

        def reset_envs() -> Infos | InfoParts:
            if self._interrupted:
                self._resync()
                self._interrupted = False
            return self._reset_envs(mask, seeds, options or None)

        infos_list = self._run(reset_envs, "reset()")
        self._has_reset = True
        self._failure = None
        if mask is None:
            self._needs_reset[:] = False
        else:
            self._needs_reset[mask] = False
        return self._out(self._obs), add_infos(self, {}, infos_list)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env; autoreset as ``metadata["autoreset_mode"]`` says."""
        self._check_usable()
        self._check_has_reset("step")
        disabled = self.autoreset_mode is AutoresetMode.DISABLED
        actions = check_actions(self.single_action_space, self.action_space, actions,
                                self.num_envs, self._needs_reset if disabled else None)
        assign_rows(self._actions, actions, slice(None))
        step_infos, final_infos = self._run(self._step_envs, "step()")
        a = self.arrays
        terminated, truncated = a["terminated"], a["truncated"]
        infos: dict[str, Any] = {}
        if disabled:
            np.logical_or(terminated, truncated, out=self._needs_reset)
        elif self.autoreset_mode is AutoresetMode.SAME_STEP:
            ended = terminated | truncated
            if ended.any():
                self._add_final(infos, final_obs_info(self.single_observation_space,
                                                      self._final_obs, ended),
                                ended, add_infos(self, {}, final_infos), own_mask=True)
        infos = add_infos(self, infos, step_infos)
        if not self.copy:
            return self._out(self._obs), a["rewards"], terminated, truncated, infos
        # (rewards and flags are plain arrays: copied directly)
        return self._out(self._obs), a["rewards"].copy(), terminated.copy(), truncated.copy(), \
            infos

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """Each env's ``np_random_seed`` (as Gymnasium's ``SyncVectorEnv`` gives it)."""
        return self.get_attr("np_random_seed")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name``: called with the arguments if callable, else its value
        (Gymnasium's ``SyncVectorEnv.call``; results in env order)."""
        return self.call_at(None, name, *args, **kwargs)

    def call_at(self, env_indices: Sequence[int] | None, name: str | Callable[..., Any],
                *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``call`` on the envs ``env_indices`` only (all when None), results in that order;
        ``name`` may also be a function, called in the env's process as ``name(env, *args,
        **kwargs)`` (it must be picklable for process executors)."""
        self._check_in_step()
        rows = self._env_rows(env_indices)
        with self._guard(f"call({name!r})", needs_reset=False):
            return tuple(self._call_envs(rows, name, args, kwargs))

    def render(self) -> tuple[Any, ...]:
        """Every env's ``render()`` in env order, as Gymnasium's ``SyncVectorEnv.render``
        (frames with ``render_mode="rgb_array"`` given to ``make``)."""
        return self.call("render")

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's attribute ``name`` (through wrappers)."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set attribute ``name`` of every env: one value for all, or a list with one per env."""
        self.set_attr_at(None, name, values)

    def set_attr_at(self, env_indices: Sequence[int] | None, name: str,
                    values: list[Any] | tuple[Any, ...] | Any) -> None:
        """``set_attr`` on the envs ``env_indices`` only (all when None): one value for them
        all, or a list with one per index; the other envs are untouched."""
        self._check_in_step()
        rows = self._env_rows(env_indices)
        if not isinstance(values, list | tuple):
            values = [values] * len(rows)
        if len(values) != len(rows):
            raise ValueError(f"set_attr needs one value per env ({len(rows)}), got "
                             f"{len(values)}")
        with self._guard(f"set_attr({name!r})", needs_reset=False):
            self._set_attr_envs(rows, name, list(values))

    def _env_rows(self, env_indices: Sequence[int] | None) -> list[int]:
        """``env_indices`` as a list of valid env indices (every env when None)."""
        if env_indices is None:
            return list(range(self.num_envs))
        rows = np.asarray(env_indices)
        if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
            raise TypeError(f"env_indices must be a 1-D sequence of ints, got {env_indices!r}")
        bad = [int(i) for i in rows.tolist() if not 0 <= i < self.num_envs]
        if bad:
            raise IndexError(f"env_indices: no env {bad[0]} (num_envs={self.num_envs})")
        return [int(i) for i in rows.tolist()]

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the executor (idempotent): no process or shared-memory segment is left."""
        if self._broken != "closed":
            self._broken = "closed"
            self._close_executor()

    # --- helpers -----------------------------------------------------------------------------

    def _run(self, call: Callable[[], Any], what: str) -> Any:
        """``call()``; if it fails, the envs must be reset before they step again."""
        with self._guard(what):
            return call()

    @contextlib.contextmanager
    def _guard(self, what: str, needs_reset: bool = True) -> Iterator[None]:
        """Around every exchange with the envs: an env failure requires a reset (when
        ``needs_reset``); anything else cutting the exchange short (Ctrl-C) leaves answers on
        their way, so nothing but ``reset()`` (which waits for them first) may run next."""
        try:
            yield
        except EnvWorkerError as error:
            if needs_reset:
                self._has_reset = False
                self._failure = str(error)
            raise
        except BaseException as error:
            self._has_reset = False
            self._interrupted = True
            self._failure = (f"{what} was interrupted by {type(error).__name__}; its results "
                             f"were dropped")
            raise

    def _check_in_step(self) -> None:
        """Usable, and not left out of step with its envs by an interrupted call."""
        self._check_usable()
        if self._interrupted:
            raise RuntimeError(f"{self._failure}: call reset() first")

    def _out(self, value: Any) -> Any:
        return export(value, self.copy)

    def _is_closed(self) -> bool:
        return self._broken == "closed" or self.closed

    def _check_usable(self) -> None:
        self._check_open()
        if self._broken is not None:
            raise EnvWorkerError(f"this env's executor has failed and was shut down "
                                 f"({self._broken}); close() it and make a new one")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, backend={self.backend!r})"
