"""The torch engine's common part: its buffers, the reset and step it runs, its action checks.

A family's ``reset_torch`` / ``step_torch`` step every env at once; the engine wraps them with
the time limit and the batched driver's autoreset (``driver.make_batch_driver``), so the same
code runs on CPU, CUDA or any other torch device and keeps state and outputs there.
``TorchEngine`` here holds what both routes share (one arena of buffers as the spec declares
them, the reset and step templates, refusals); ``torch_host.HostTorchEngine`` and
``torch_device.DeviceTorchEngine`` are the two routes, and ``torch_backend.torch_engine``
picks one for a device.
"""

from __future__ import annotations

import abc
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from envfleet.native.driver import (
    DISABLED,
    NEXT_STEP,
    RULES,
    SAME_STEP,
    action_format,
    refused_step_error,
)
from envfleet.native.graphs import Replay, graphs_wanted
from envfleet.native.spec import RNG, STATE, NativeEnvSpec, split_params

_ALIGN = 64  # byte alignment of each buffer inside the arena


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a NumPy dtype."""
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def state_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a state column: unsigned types wider than 8 bits become the signed
    type of the same width holding the same bits (as the RNG's seeds are), because torch
    implements little arithmetic on uint16/32/64 (no shifts, no addition)."""
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "u" and np_dtype.itemsize > 1:
        np_dtype = np.dtype(f"i{np_dtype.itemsize}")
    return torch_dtype(np_dtype)


def resolve_device(device: Any) -> torch.device:
    """``device`` (a str, ``torch.device`` or None for CPU) as a device torch can allocate on."""
    if device is None:
        device = "cpu"
    if isinstance(device, bool) or not isinstance(device, str | torch.device | int):
        raise ValueError(f"device must be a torch device or its name (e.g. 'cpu', 'cuda:0'), "
                         f"got {device!r}")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"invalid torch device {device!r}: {error}") from None
    if resolved.type == "meta":
        raise ValueError("torch device 'meta' holds no data: envs cannot be stepped on it")
    try:
        probe = torch.empty(1, device=resolved)
    except (RuntimeError, AssertionError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise ValueError(f"torch device {device!r} is not usable here: {first_line}") from None
    return probe.device  # "cuda" -> "cuda:0": the index the buffers really live on


def params_to_device(params: tuple, device: torch.device) -> tuple:
    """``params`` with its NumPy-array fields (per-env values) as tensors on ``device``.

    Scalars stay Python numbers: torch folds them into each op without a tensor.
    """
    if not hasattr(params, "_replace"):
        return params
    arrays = {name: torch.as_tensor(np.array(value), device=device)  # a writable copy
              for name, value in zip(params._fields, params, strict=True)
              if isinstance(value, np.ndarray)}
    return params._replace(**arrays) if arrays else params


class TorchEngine(abc.ABC):
    """Structure-of-arrays buffers on a torch device, stepped by whole-batch tensor ops.

    The family's torch kernels see what its numba kernels see: observations as rows
    (num_envs, obs_size) whatever the obs shape, actions as ``int64`` of shape (num_envs,) for
    Discrete and rows (num_envs, action_size) of the space's dtype for Box; ``rng`` is the
    (seeds, episodes, steps) triple of int64 tensors that ``rng.env_uniform_torch`` takes.
    State columns keep their declared dtype, except wide unsigned ones (``state_dtype``).
    On the host ``reset_torch`` gets only the envs that reset, gathered into a smaller batch
    (``mask`` all set); on other devices the whole batch, with ``mask`` set for those envs.

    A route (``torch_backend.torch_engine`` picks it) supplies ``_reset``, ``_checked``,
    ``_advance``, ``ended_mask`` and ``copy``.
    """

    #: a refused rollout is undone by replaying its earlier steps (``collect``)
    rewinds = True
    #: whether ``rollout`` enqueues this engine's steps with one wait at the end
    enqueues = False

    def __init__(self, spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, device: Any = None) -> None:
        if mode not in (NEXT_STEP, SAME_STEP, DISABLED):
            raise ValueError(f"unknown autoreset mode code {mode!r}")
        self.device = resolve_device(device)
        self.spec, self.num_envs, self.mode = spec, num_envs, mode
        #: the contract's one autoreset rule (``on_episode_end``), run by the batched driver
        self.rule = RULES[mode]
        self.max_episode_steps = max_episode_steps
        split_params(spec, params, num_envs)  # checks each per-env array's shape
        self.params = params_to_device(params, self.device)
        self._per_env = tuple(name for name, value in zip(
            getattr(self.params, "_fields", ()), self.params, strict=True)
            if isinstance(value, torch.Tensor))
        self._format = fmt = action_format(spec.action_space)
        self._action_dtype = torch_dtype(fmt.dtype)
        self._check_actions = self._discrete_ok if fmt.integer else self._box_ok
        if fmt.integer:
            self._low, self._high = fmt.bounds

        n = num_envs
        # every batch buffer as the spec declares it, carved from one arena; the per-env
        # params are ``self.params``' tensors (``params_to_device``: they hold values)
        layout = [(b.name, state_dtype(b.dtype) if b.role in (STATE, RNG)
                   else torch_dtype(b.dtype), b.shape) for b in spec.buffers(n)]
        views = self._allocate(layout)
        self.state = spec.state_from(views, {})
        self.obs = views["obs"]
        self.rewards = views["rewards"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]
        self.pending = views["pending"]
        self.final_obs = views["final_obs"]
        self._obs_rows = self.obs.view(n, -1)  # kernels see obs as rows
        self._final_obs_rows = self.final_obs.view(n, -1)
        seeds = views["seeds"]
        #: (seeds, episodes, steps): int64 tensors, seeds and episodes holding uint64 bits
        self.rng = (seeds, views["episodes"], views["steps"])
        self._done = torch.zeros(n, dtype=torch.bool, device=self.device)
        self._all = torch.ones(n, dtype=torch.bool, device=self.device)
        # The two reads of a device step land in pinned host memory, and a GPU replays each
        # piece of work as a CUDA graph (``DeviceTorchEngine``).
        self._pinned = self.device.type == "cuda"
        self.replay = Replay(self._pinned and graphs_wanted())
        #: what the family's forms get: the tensors (the host route may swap in NumPy views)
        self._args = SimpleNamespace(
            state=self.state, params=self.params, rng=self.rng, obs_rows=self._obs_rows,
            rewards=self.rewards, terminated=self.terminated, all=self._all)
        # Host-side hint, from numbers already read back: may an env be pending?
        self._maybe_pending = False
        self._broken = ""  # why the buffers cannot be trusted until a full reset
        self._closed = False

    def _allocate(self, layout: list[tuple[str, torch.dtype, tuple[int, ...]]]
                  ) -> dict[str, torch.Tensor]:
        """One zeroed byte arena holding every buffer in ``layout``, and a view per buffer."""
        offsets, size = [], 0
        for _, dtype, shape in layout:
            offsets.append(size)
            nbytes = int(np.prod(shape)) * dtype.itemsize
            size += -(-nbytes // _ALIGN) * _ALIGN
        arena = self._arena = torch.zeros(max(size, _ALIGN), dtype=torch.uint8,
                                          device=self.device)
        views = {}
        for (name, dtype, shape), start in zip(layout, offsets, strict=True):
            nbytes = int(np.prod(shape)) * dtype.itemsize
            views[name] = arena[start:start + nbytes].view(dtype).view(shape)
        return views

    # --- the Engine interface ------------------------------------------------------------------

    def compile(self) -> None:
        """Nothing to compile: torch runs eagerly (present for parity with the numba engine)."""
        return

    def reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        """Reset the masked envs (all when None), reseeding them with ``new_seeds`` (one per
        env) if given."""
        self._check_open()
        if mask is not None and bool(np.all(mask)):
            mask = None
        if mask is not None and not np.any(mask):
            return
        if new_seeds is not None:
            new_seeds = np.ascontiguousarray(new_seeds, dtype=np.uint64).view(np.int64).copy()
        self._reset(mask, new_seeds)
        if mask is None:
            self._maybe_pending, self._broken = False, ""

    @abc.abstractmethod
    def _reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        """The route's reset of the masked envs (all when None; ``new_seeds`` as int64 bits),
        which are no longer pending."""

    def step(self, actions: Any) -> int:
        """Validate then step every env; return how many episodes ended.

        A refused step (a bad action, or DISABLED and an env that needs a reset) raises
        ``ValueError`` naming the first refused env before any buffer changes. A step that
        fails part-way (an error in the family's code, an interrupt) leaves the envs
        half-stepped: the engine then refuses to step until every env is reset.
        """
        self._check_open()
        if self._broken:
            raise RuntimeError(f"{self.spec.id}: an earlier step failed part-way "
                               f"({self._broken}); reset() every env before stepping again")
        checked = self._checked(actions)
        try:
            ended = self._advance(checked)
        except BaseException as error:  # the buffers are half-stepped: no step until a reset
            self._broken = f"{type(error).__name__}: {error}"
            raise
        self._maybe_pending = ended > 0
        return ended

    @abc.abstractmethod
    def _checked(self, actions: Any) -> Any:
        """The route's action check, before anything moves: what ``_advance`` steps with, or
        the ``ValueError`` naming the first refused env."""

    @abc.abstractmethod
    def _advance(self, checked: Any) -> int:
        """The route's step of every env (with the batched driver's autoreset); how many
        episodes ended."""

    @abc.abstractmethod
    def ended_mask(self) -> torch.Tensor:
        """Envs whose episode ended in the last step."""

    @abc.abstractmethod
    def copy(self, array: Any) -> Any:
        """A copy of one of the buffers."""

    def map_rows(self, row_fn: Any, dtype: Any) -> torch.Tensor:
        """Per-row kernel functions are scalar code: the torch engine runs a family's batched
        tensor forms only."""
        raise NotImplementedError(
            f"{self.spec.id}: per-row kernel functions run on the numba and cuda backends; the "
            f"torch backend runs the family's batched tensor forms only")

    def close(self) -> None:
        """Drop the scratch buffers and graphs; the outputs stay readable until the engine is
        dropped."""
        if not self._closed:
            self._closed = True
            self.replay.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this torch engine is closed")

    # --- refusals, on either route ---------------------------------------------------------

    def _steppable(self, ok: torch.Tensor) -> torch.Tensor:
        """Per env, whether it may step: its action is ``ok`` and, under DISABLED, it does not
        wait for a reset."""
        return ok & ~self.pending if self.mode == DISABLED else ok

    def _raise_refused(self, a: torch.Tensor) -> None:
        """Raise the error naming the first refused env of the actions ``a``."""
        valid = self._steppable(self._check_actions(a))
        index = int(torch.nonzero(~valid)[0, 0])
        raise refused_step_error(self.spec, index, a[index],
                                 self.mode == DISABLED and bool(self.pending[index]))

    def _discrete_ok(self, a: torch.Tensor) -> torch.Tensor:
        return (a >= self._low) & (a < self._high)

    def _box_ok(self, a: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(a).all(dim=1)  # the bounds are the env's: it clips

    def __repr__(self) -> str:
        return f"TorchEngine({self.spec.id}, num_envs={self.num_envs}, device={self.device})"

