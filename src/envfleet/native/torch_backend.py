"""The ``torch`` backend: the shared driver's semantics as whole-batch tensor ops on any device.

A family's ``reset_torch`` / ``step_torch`` step every env at once; the driver below wraps them
with the time limit and autoreset of ``driver.make_driver``, written with masks (``torch.where``,
``masked_fill_``) instead of per-env branches, so the same code runs on CPU, CUDA or any other
torch device and keeps state and outputs there.

One host round trip per step. Validating the actions on the device needs one sync before
``step`` can raise; instead of syncing first and stepping after, the step runs optimistically on
*sanitised* actions (bad ones replaced by a valid one, so a kernel never sees them) while one
backup copy of the engine's buffers is taken, and a single read at the end brings back both
"how many actions were refused" and "how many episodes ended". A refused step restores the
backup before raising: the envs are left exactly as they were. Every mutable buffer lives in one
byte arena, so the backup (and a restore) is a single copy.

The read also tells the host whether any env ended, which keeps the costly reset path (a full
batch of counter-based random draws) out of steps where no env needs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from envfleet.contract import check_action_batch
from envfleet.native.driver import (
    DISABLED,
    NEXT_STEP,
    SAME_STEP,
    action_format,
    refused_step_error,
)
from envfleet.native.spec import NativeEnvSpec, split_params

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


class TorchEngine:
    """Structure-of-arrays buffers on a torch device, stepped by whole-batch tensor ops.

    The family's torch kernels see what its numba kernels see: observations as rows
    (num_envs, obs_size) whatever the obs shape, actions as ``int64`` of shape (num_envs,) for
    Discrete and rows (num_envs, action_size) of the space's dtype for Box; ``rng`` is the
    (seeds, episodes, steps) triple of int64 tensors that ``rng.env_uniform_torch`` takes.
    State columns keep their declared dtype, except wide unsigned ones (``state_dtype``).
    """

    def __init__(self, spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, device: Any = None) -> None:
        if mode not in (NEXT_STEP, SAME_STEP, DISABLED):
            raise ValueError(f"unknown autoreset mode code {mode!r}")
        self.device = resolve_device(device)
        self.spec, self.num_envs, self.mode = spec, num_envs, mode
        self.max_episode_steps = max_episode_steps
        split_params(spec, params, num_envs)  # checks each per-env array's shape
        self.params = params_to_device(params, self.device)
        self._format = fmt = action_format(spec.action_space)
        self._action_dtype = torch_dtype(fmt.dtype)
        self._check_actions = self._discrete_ok if fmt.integer else self._box_ok
        if fmt.integer:
            self._low, self._high = fmt.bounds
            self._fallback = torch.tensor(self._low, dtype=torch.int64, device=self.device)
        else:
            low, high = fmt.bounds
            self._fallback = torch.as_tensor(np.clip(0.0, low, high), dtype=self._action_dtype,
                                             device=self.device)

        n = num_envs
        obs_space = spec.observation_space
        obs_dtype = torch_dtype(obs_space.dtype)
        layout: list[tuple[str, torch.dtype, tuple[int, ...]]] = [
            *((f"state.{name}", state_dtype(dtype), (n, *shape))
              for name, (dtype, shape) in spec.state.items()),
            ("episodes", torch.int64, (n,)),
            ("steps", torch.int64, (n,)),
            ("obs", obs_dtype, (n, *obs_space.shape)),
            ("rewards", torch.float32, (n,)),
            ("terminated", torch.bool, (n,)),
            ("truncated", torch.bool, (n,)),
            ("pending", torch.bool, (n,)),
        ]
        views, arena = self._allocate(layout)
        # A step changes only what is in the arena (seeds and final_obs stay outside). Copied
        # as 8-byte words: an eighth of the elements, so small batches stay below torch's
        # threshold for splitting a copy across threads.
        self._arena = arena.view(torch.int64)
        self._backup = torch.empty_like(self._arena)
        State = spec.state_type
        self.state = State(*(views[f"state.{name}"] for name in spec.state))
        self.obs = views["obs"]
        self.rewards = views["rewards"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]
        self.pending = views["pending"]
        self.final_obs = torch.zeros_like(self.obs)
        self._obs_rows = self.obs.view(n, -1)  # kernels see obs as rows
        self._final_obs_rows = self.final_obs.view(n, -1)
        seeds = torch.zeros(n, dtype=torch.int64, device=self.device)
        #: (seeds, episodes, steps): int64 tensors, seeds and episodes holding uint64 bits
        self.rng = (seeds, views["episodes"], views["steps"])
        self._done = torch.zeros(n, dtype=torch.bool, device=self.device)
        self._all = torch.ones(n, dtype=torch.bool, device=self.device)
        # Host-side hint, from numbers already read back: may an env be pending (NEXT_STEP)?
        self._maybe_pending = True
        self._closed = False

    def _allocate(self, layout: list) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One zeroed byte arena holding every buffer in ``layout``, and a view per buffer."""
        offsets, size = [], 0
        for _, dtype, shape in layout:
            offsets.append(size)
            nbytes = int(np.prod(shape)) * dtype.itemsize
            size += -(-nbytes // _ALIGN) * _ALIGN
        arena = torch.zeros(max(size, _ALIGN), dtype=torch.uint8, device=self.device)
        views = {}
        for (name, dtype, shape), start in zip(layout, offsets, strict=True):
            nbytes = int(np.prod(shape)) * dtype.itemsize
            views[name] = arena[start:start + nbytes].view(dtype).view(shape)
        return views, arena

    # --- the Engine interface ------------------------------------------------------------------

    def compile(self) -> None:
        """Nothing to compile: torch runs eagerly (present for parity with the numba engine)."""

    def reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        """Reset the masked envs (all when None), reseeding them with ``new_seeds`` if given."""
        self._check_open()
        seeds, episodes, steps = self.rng
        m = self._all if mask is None else torch.as_tensor(
            np.asarray(mask, dtype=np.bool_), device=self.device)
        if new_seeds is not None:
            bits = np.ascontiguousarray(new_seeds, dtype=np.uint64).view(np.int64)
            fresh = torch.as_tensor(bits.copy(), device=self.device)
            seeds.copy_(torch.where(m, fresh, seeds))
            episodes.masked_fill_(m, 0)
        else:
            episodes.add_(m)
        steps.masked_fill_(m, 0)
        self.spec.reset_torch(m, self.state, self.params, self.rng, self._obs_rows)
        self.pending.masked_fill_(m, False)
        if mask is None:
            self._maybe_pending = False

    def step(self, actions: Any) -> int:
        """Validate then step every env; return how many episodes ended.

        A refused step (a bad action, or DISABLED and an env that needs a reset) raises
        ``ValueError`` naming the first refused env and leaves every buffer as it was.
        """
        self._check_open()
        a = self._device_actions(actions)
        valid = self._check_actions(a)
        if self.mode == DISABLED:
            valid = valid & ~self.pending
        safe = torch.where(valid.view((-1,) + (1,) * (a.dim() - 1)), a, self._fallback)
        self._backup.copy_(self._arena)
        try:
            ended = self._advance(safe)
            refused, ended = torch.stack(((~valid).sum(), ended.sum())).tolist()
            if not refused and self.mode == SAME_STEP and ended:
                self._finish()
        except BaseException:  # a failing kernel or an interrupt: leave no half-made step
            self._arena.copy_(self._backup)
            raise
        if refused:
            self._arena.copy_(self._backup)
            index = int(torch.nonzero(~valid)[0, 0])
            raise refused_step_error(self.spec, index, a,
                                     self.mode == DISABLED and bool(self.pending[index]))
        self._maybe_pending = ended > 0
        return ended

    def map_rows(self, row_fn: Any, dtype: Any) -> torch.Tensor:
        """Per-row kernel functions are scalar code: the torch engine runs a family's batched
        tensor forms only."""
        raise NotImplementedError(
            f"{self.spec.id}: per-row kernel functions run on the numba and cuda backends; the "
            f"torch backend runs the family's batched tensor forms only")

    def ended_mask(self) -> torch.Tensor:
        return self.terminated | self.truncated

    def copy(self, array: Any) -> Any:
        return array.clone()

    def close(self) -> None:
        """Drop the scratch buffers; the outputs stay readable until the engine is dropped."""
        if not self._closed:
            self._closed = True
            self._backup = self._done = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this torch engine is closed")

    # --- the driver, over the whole batch --------------------------------------------------

    def _advance(self, actions: torch.Tensor) -> torch.Tensor:
        """Step every env (NEXT_STEP: reset the pending ones instead); the envs that ended.

        As ``driver.make_driver``'s ``begin`` + ``advance``: the family steps the whole batch,
        then the envs that were pending are reset over it, with reward 0 and both flags off.
        """
        _, episodes, steps = self.rng
        self.spec.step_torch(self.state, self.params, actions, self.rng, self._obs_rows,
                             self.rewards, self.terminated)
        steps.add_(1)
        torch.ge(steps, self.max_episode_steps, out=self.truncated)
        if self.mode == NEXT_STEP and self._maybe_pending:
            p = self.pending
            episodes.add_(p)
            steps.masked_fill_(p, 0)
            self.spec.reset_torch(p, self.state, self.params, self.rng, self._obs_rows)
            self.rewards.masked_fill_(p, 0.0)
            self.terminated.masked_fill_(p, False)
            self.truncated.masked_fill_(p, False)
        done = torch.logical_or(self.terminated, self.truncated, out=self._done)
        if self.mode != SAME_STEP:
            self.pending.copy_(done)
        return done

    def _finish(self) -> None:
        """SAME_STEP: keep the ended envs' final observations, then start their next episode."""
        _, episodes, steps = self.rng
        done = self._done
        rows = self._final_obs_rows
        rows.copy_(torch.where(done.view(-1, 1), self._obs_rows, 0))  # zero where not done
        episodes.add_(done)
        steps.masked_fill_(done, 0)
        self.spec.reset_torch(done, self.state, self.params, self.rng, self._obs_rows)

    # --- action checks ---------------------------------------------------------------------

    def _device_actions(self, actions: Any) -> torch.Tensor:
        """Check shape and dtype kind (as ``numba_backend.as_numpy_actions``); move to device."""
        n = self.num_envs
        a = actions.detach() if isinstance(actions, torch.Tensor) else np.asarray(actions)
        check_action_batch(a, self.spec.action_space, n)
        fmt = self._format
        if isinstance(a, np.ndarray):
            with np.errstate(over="ignore"):  # beyond float32's range: inf, then refused
                a = torch.from_numpy(np.array(a, dtype=fmt.dtype, order="C"))
        a = a.to(self.device, self._action_dtype)
        return a if fmt.integer else a.reshape(n, -1)

    def _discrete_ok(self, a: torch.Tensor) -> torch.Tensor:
        return (a >= self._low) & (a < self._high)

    def _box_ok(self, a: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(a).all(dim=1)  # the bounds are the env's: it clips

    def __repr__(self) -> str:
        return f"TorchEngine({self.spec.id}, num_envs={self.num_envs}, device={self.device})"
