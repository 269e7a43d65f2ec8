"""``NativeVectorEnv``: Gymnasium's vector API over an engine that steps all envs at once.

The class owns what every backend shares (spaces, seeding, reset options, info dicts, the
Gymnasium contract); the engine owns the buffers and the compiled step (``numba_backend``,
``cuda_backend``, ``torch_backend``). Observations, rewards and flags live in the engine's
buffers; by default the caller gets copies (as Gymnasium's ``SyncVectorEnv(copy=True)``), and
``copy=False`` hands out the buffers themselves: zero-copy, overwritten by the next step.
"""

from __future__ import annotations

import copy as copy_module
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envfleet.contract import VectorContract, check_seed, env_seeds
from envfleet.native.rollout import Rollout, rollout
from envfleet.native.spec import NativeEnvSpec


class Engine(Protocol):
    """What ``NativeVectorEnv`` needs from a backend."""

    state: tuple  # NamedTuple of per-env arrays
    obs: Any
    rewards: Any
    terminated: Any
    truncated: Any
    final_obs: Any

    def reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        """Reset the masked envs (all when None), reseeding them with ``new_seeds`` if given."""

    def step(self, actions: Any) -> int:
        """Validate then step every env; return how many episodes ended (SAME_STEP info).
        An engine with a true ``fresh_outputs`` also takes ``fresh=True``: write this step's
        obs, rewards and flags into new arrays that become its buffers. One with a true
        ``copies_info`` also takes ``copy_info=True``: write copies of the info columns,
        handed over by ``take_info_copies()``."""

    def ended_mask(self) -> Any:
        """Envs whose episode ended in the last step (terminated or truncated)."""

    def copy(self, array: Any) -> Any:
        """A copy of one of the engine's buffers, in the engine's array type."""

    def close(self) -> None:
        """Release the engine's resources."""


def native_seeds(seed: int | Sequence[int], num_envs: int) -> np.ndarray:
    """``contract.env_seeds`` as the engines take them: one uint64 per env (no None); an int
    seed without a list of ``num_envs`` Python ints (~40 bytes an env)."""
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        return np.arange(num_envs, dtype=np.uint64) + np.uint64(check_seed(seed, count=num_envs))
    seeds = env_seeds(seed, num_envs)
    if None in seeds:
        i = seeds.index(None)
        raise ValueError(f"seed[{i}] is None: native envs need a seed for every env in a seed "
                         f"list (or seed=None for all)")
    return np.array(seeds, dtype=np.uint64)


def batched_space(space: spaces.Space, num_envs: int) -> spaces.Space:
    """Gymnasium's ``batch_space(space, num_envs)`` (equal to it) without its full-size arrays:
    a Box's ``low``, ``high`` and bounded masks, a Discrete batch's ``nvec`` and ``start`` are
    read-only views of the single space's, broadcast over the batch. ``batch_space`` holds four
    arrays of the batch's observation shape (MinAtar: 1.6 KB an env, more than the engine's own
    buffers) and builds them through as many temporaries."""
    shape = (num_envs, *space.shape)
    seed = copy_module.deepcopy(space.np_random)
    if isinstance(space, spaces.Box):
        batched = spaces.Box(low=space.low, high=space.high, dtype=space.dtype, seed=seed)
        names: tuple[str, ...] = ("low", "high", "bounded_below", "bounded_above")
    elif isinstance(space, spaces.Discrete):
        batched = spaces.MultiDiscrete(np.full(1, space.n, space.dtype), dtype=space.dtype,
                                       seed=seed, start=np.full(1, space.start, space.dtype))
        names = ("nvec", "start")
    else:
        return batch_space(space, num_envs)
    for name in names:  # (the Discrete batch's are built with one element: reshaped to ())
        setattr(batched, name, np.broadcast_to(getattr(batched, name).reshape(space.shape),
                                               shape))
    batched._shape = shape
    return batched


class NativeVectorEnv(VectorContract):
    """A batch of ``num_envs`` copies of a native env family, stepped by one engine.

    The reset / step rules, SAME_STEP's ``final_obs`` info and the closed-env error are the
    contract's (``contract.VectorContract``, shared with the executors).

    Families extend it by subclassing (``NativeEnvSpec.vector_env_class``): extra reset
    options are named in ``family_reset_options`` and validated by ``_prepare_reset`` before
    anything moves; state columns named in ``spec.info_columns`` come back in ``info``.
    """

    #: reset options (besides ``reset_mask``) that a family's subclass handles
    family_reset_options: tuple[str, ...] = ()

    def __init__(
        self,
        spec: NativeEnvSpec,
        num_envs: int,
        engine: Engine,
        *,
        backend: str,
        autoreset_mode: AutoresetMode,
        seed: int | None = None,
        copy: bool = True,
    ) -> None:
        self.native_spec = spec
        self.backend = backend
        self.engine = engine
        self.num_envs = num_envs
        self.autoreset_mode = autoreset_mode
        self.copy = copy
        #: copy=True on an engine that can write each step into new arrays (no copy pass)
        self._fresh = copy and getattr(engine, "fresh_outputs", False)
        #: copy=True on an engine whose step kernel copies the info columns (no copy pass)
        self._copy_info = copy and getattr(engine, "copies_info", False)
        self._step_options = {**({"fresh": True} if self._fresh else {}),
                              **({"copy_info": True} if self._copy_info else {})}
        self.metadata = {"autoreset_mode": autoreset_mode, "render_modes": []}
        self.render_mode = None
        self._renderer: Any = None
        if spec.renderer is not None:  # frames are drawn from the state on demand: always on
            self.metadata.update(render_modes=["rgb_array"], render_fps=spec.renderer.fps)
            self.render_mode = "rgb_array"
        self.single_observation_space = spec.observation_space
        self.single_action_space = spec.action_space
        self.observation_space = batched_space(spec.observation_space, num_envs)
        self.action_space = batched_space(spec.action_space, num_envs)
        # Like gymnasium.Env: a fresh entropy seed when none is given; used by the first reset.
        self._initial_seed = (
            check_seed(seed, count=num_envs) if seed is not None
            else int(np.random.SeedSequence().entropy) % 2**63
        )
        self._has_reset = False
        self._closed = False
        self._info_true = np.ones(num_envs, dtype=np.bool_)

    @property
    def state(self) -> tuple:
        """Each env's internal state: a NamedTuple of per-env arrays (writable views)."""
        return self.engine.state

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``); env i gets ``seed + i``."""
        self._check_open()
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        family = {k: options.pop(k) for k in self.family_reset_options if k in options}
        if options:
            supported = ", ".join(repr(k) for k in ("reset_mask", *self.family_reset_options))
            raise ValueError(f"unknown reset options {sorted(options)}; supported: {supported}")
        seed, mask = self._reset_rules(seed, mask)
        new_seeds = None if seed is None else native_seeds(seed, self.num_envs)
        apply = self._prepare_reset(family, mask)  # validates everything before any env moves
        if apply is not None:
            apply()
        self.engine.reset(mask, new_seeds)
        self._has_reset = True
        return self._out(self.engine.obs), self._state_info()

    def _prepare_reset(self, family_options: dict[str, Any], mask: np.ndarray | None) -> Any:
        """Check the family's reset options; return a callable applying them (or None).
        Called after every other check, before the engine resets anything."""
        return None

    def _state_info(self, values: Any = None) -> dict[str, Any]:
        """``info`` entries for the spec's ``info_columns`` (with Gymnasium's ``_key`` masks):
        ``values`` in the columns' order (the step kernel's copies), else the engine's columns
        as handed out (``_out``)."""
        names = self.native_spec.info_columns
        if values is None:
            values = [self._out(getattr(self.engine.state, name)) for name in names]
        info: dict[str, Any] = {}
        for name, value in zip(names, values, strict=True):
            info[name], info[f"_{name}"] = value, self._info_true
        return info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env with its action; autoreset as ``metadata["autoreset_mode"]`` says."""
        self._check_open()
        self._check_has_reset("step")
        e = self.engine
        ended = e.step(actions, **self._step_options)
        if self._fresh:  # the engine wrote this step into new arrays: they are the copies
            obs, rewards, terminated, truncated = e.obs, e.rewards, e.terminated, e.truncated
        else:
            obs, rewards = self._out(e.obs), self._out(e.rewards)
            terminated, truncated = self._out(e.terminated), self._out(e.truncated)
        info: dict[str, Any] = {}
        if self.native_spec.info_columns:  # with _copy_info, the step kernel wrote the copies
            info = self._state_info(e.take_info_copies() if self._copy_info else None)
        if self.autoreset_mode is AutoresetMode.SAME_STEP and ended:
            self._add_final(info, self._out(e.final_obs), e.ended_mask(), {})
        return obs, rewards, terminated, truncated, info

    def rollout(self, policy: Callable[[Any], Any] | Any, num_steps: int | None = None, *,
                record: bool = True) -> Rollout:
        """Run ``num_steps`` steps, each env's action from ``policy(obs)`` (a callable on the
        batch of observations, in the backend's array type) or from ``policy[t]`` (a batch of
        ``(num_steps, num_envs, *action_shape)`` actions). With ``copy=True`` (the default)
        ``obs`` is each step's own copy, the policy's to keep or edit; with ``copy=False`` it is
        the engine's observation buffer itself (a view the next step overwrites). A policy that
        closes the env ends the rollout with the closed-env error.

        Autoreset and time limits as in ``step``. On ``cuda``, and on ``torch`` with a GPU,
        nothing waits for the GPU until the rollout ends (and from the third rollout with the
        same policy and length, the whole rollout replays one captured CUDA graph: the policy
        must then be capturable, i.e. read nothing back to the host; otherwise it is launched
        step by step, with a warning; a replay does not call the policy: the inputs it kept
        from the captured calls are rewritten by each replay). A refused action raises
        ``ValueError("rollout step t: ...")`` naming the step and env; the envs are left as
        they were at step t (torch on a GPU rewinds them to it: the rollout's first state kept
        in a copy of the env's buffers, then its earlier steps again). Returns a ``Rollout`` of
        ``(num_steps, num_envs, ...)`` recordings (``record=False``: only ``next_obs`` and the
        ended episodes' count), copies unless the env was made with ``copy=False`` (then
        buffers the next rollout overwrites); SAME_STEP records ``final_obs`` too (row
        ``[t, i]``: env i's last observation when its episode ended at step t, zero
        otherwise). A recording that cannot fit in memory is refused before anything is
        allocated (``InsufficientMemoryError``).
        """
        self._check_open()
        self._check_has_reset("rollout")
        return rollout(self, policy, num_steps, record)

    def render(self, env_indices: Sequence[int] | None = None) -> tuple[np.ndarray, ...]:
        """Every env's frame (RGB array), as Gymnasium's ``SyncVectorEnv.render``; drawn by
        the reference env's own renderer from each env's state (and per-env params, in the
        row under their names). ``env_indices``: only those
        envs' frames (a 600 x 400 frame is 720 KB: with thousands of envs, pick a few)."""
        self._check_open()
        if self._renderer is None:
            if self.native_spec.renderer is None:
                raise NotImplementedError(f"{self.native_spec.id} has no renderer")
            self._renderer = self.native_spec.renderer(self.engine.params)
        if not self._has_reset:
            raise RuntimeError("call reset() before render()")
        indices = range(self.num_envs) if env_indices is None else env_indices
        columns = {name: getattr(self.engine.state, name) for name in self.native_spec.state}
        params = self.engine.params  # per-env params (arrays) join each env's row
        columns.update({name: getattr(params, name) for name in self.native_spec.per_env_params
                        if getattr(getattr(params, name, None), "ndim", 0) == 1})
        frames = []
        for i in indices:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i} out of range for num_envs={self.num_envs}")
            row = {name: _host(column[i]) for name, column in columns.items()}
            frames.append(self._renderer.draw(row))
        return tuple(frames)

    def close_extras(self, **kwargs: Any) -> None:
        """Release the engine and the renderer (idempotent)."""
        if not self._closed:
            self._closed = True
            self.engine.close()
            if self._renderer is not None:
                self._renderer.close()

    def _out(self, array: Any) -> Any:
        return self.engine.copy(array) if self.copy else array

    def __repr__(self) -> str:
        return (f"NativeVectorEnv({self.native_spec.id}, num_envs={self.num_envs}, "
                f"backend={self.backend!r})")


def _host(value: Any) -> Any:
    """A state value on the host: a NumPy scalar or array (a tensor is copied off its device)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value
