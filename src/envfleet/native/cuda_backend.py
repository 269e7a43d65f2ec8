"""The ``cuda`` backend: the shared driver lifted into CUDA kernels, one thread per env.

Every buffer lives in device memory, allocated once; users see it as torch tensors that share
that memory (no copy). A step is two launches and one host sync: a validation kernel records
the first env whose step must be refused (``cuda.atomic.min``), then the step kernel runs
``begin``/``advance``/``finish`` for each env, counting ended episodes (``cuda.atomic.add``),
unless the validation refused the step, in which case no env moves. The host then reads both
results in one small copy and raises for a refused step.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before Python starts) the same
kernels run as Python threads over device arrays that wrap host memory; the engine then
exposes CPU tensors over that memory. The kernels only ever receive device arrays.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from numba import cuda

from envfleet.contract import check_action_batch
from envfleet.native.driver import (
    DISABLED,
    action_format,
    make_driver,
    refused_step_error,
    valid_actions,
)
from envfleet.native.jit import announce_compile
from envfleet.native.numba_backend import as_numpy_actions
from envfleet.native.spec import NativeEnvSpec, first_env_params, split_params

#: True when numba-cuda runs kernels in its simulator (no GPU involved).
SIMULATOR = bool(cuda.config.ENABLE_CUDASIM)

# The 3-int device counter a step uses: two ping-pong slots for the smallest refused env index
# (``num_envs`` = none refused) and the count of ended episodes. Step k's validation fills slot
# k % 2 and re-arms the other slot for step k + 1; nothing else is reset from the host.
_ENDED = 2


@functools.cache
def compile_kernels(spec: NativeEnvSpec, mode: int, per_env: tuple[str, ...] = (),
                    params_type: type | None = None) -> tuple[Any, Any, Any]:
    """(validate, step, reset) CUDA kernels of ``spec`` for autoreset ``mode``.

    Compiled lazily on first launch (per argument types), from the same scalar functions the
    numba backend compiles. ``counters`` is the 3-int device array described above. The
    params fields named in ``per_env`` are read from per-env columns (``split_params``: the
    kernels' ``state`` argument is then the flat tuple ``(*state, *columns)``).
    """
    refuse, begin, advance, finish, drive_reset = make_driver(spec, mode, per_env, params_type)

    @cuda.jit
    def validate(n, state, params, actions, bounds, pending, counters, slot):
        i = cuda.grid(1)
        if i == 0:
            counters[_ENDED] = 0
            counters[1 - slot] = n  # arm the next step's slot (this step's was armed before)
        if i < n and refuse(i, state, params, actions, bounds, pending):
            cuda.atomic.min(counters, slot, i)

    @cuda.jit
    def step(n, state, params, actions, rng, max_steps, pending, obs, rewards, terminated,
             truncated, final_obs, counters, slot):
        i = cuda.grid(1)
        if i >= n or counters[slot] < n:  # out of range, or the step was refused: move nothing
            return
        begin(i, state, params, rng, pending, obs, rewards, terminated, truncated)
        if advance(i, state, params, actions, rng, max_steps, pending, obs, rewards, terminated,
                   truncated):
            cuda.atomic.add(counters, _ENDED, 1)
        finish(i, state, params, rng, obs, terminated, truncated, final_obs)

    @cuda.jit
    def reset(n, mask, new_seeds, reseed, state, params, rng, pending, obs):
        i = cuda.grid(1)
        if i < n:
            drive_reset(i, mask, new_seeds, reseed, state, params, rng, pending, obs)

    return validate, step, reset


@functools.cache
def row_map(row_fn: Any) -> Any:
    """The kernel ``run(n, state, rng, out)``: one thread per row, ``out[i] = row_fn(i, state,
    rng)``."""

    @cuda.jit
    def run(n, state, rng, out):
        i = cuda.grid(1)
        if i < n:
            out[i] = row_fn(i, state, rng)

    return run


def _zeros(shape: tuple[int, ...], dtype: Any) -> Any:
    """A zero-filled device array (``device_array`` alone leaves memory uninitialised)."""
    return cuda.to_device(np.zeros(shape, dtype=dtype))


def as_tensor(array: Any) -> torch.Tensor:
    """A torch tensor sharing ``array``'s memory (no copy).

    On a GPU: a CUDA tensor over the device allocation, via ``__cuda_array_interface__``.
    Under the CUDA simulator, "device" arrays are wrappers of host NumPy arrays (they expose
    ``__array_interface__``, not ``__cuda_array_interface__``): share that host memory as a CPU
    tensor, so writes on either side stay visible to the other, as on a GPU.
    """
    if SIMULATOR:
        return torch.from_numpy(np.asarray(array))
    return torch.as_tensor(array, device="cuda")


@contextlib.contextmanager
def _quiet_simulator() -> Iterator[None]:
    """Silence NumPy's overflow warnings from the RNG's wrapping uint64 arithmetic, which the
    simulator runs as NumPy scalars (a GPU wraps silently, as the algorithm intends).

    ``np.errstate`` is per thread (a context variable) and the simulator runs each CUDA thread
    in its own Python thread, so a warnings filter does the work for the duration of a launch.
    """
    if not SIMULATOR:
        yield
        return
    with np.errstate(over="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="overflow encountered",
                                category=RuntimeWarning)
        yield


class CudaEngine:
    """Structure-of-arrays buffers in device memory, stepped by CUDA kernels (one thread per
    env, ``threads_per_block`` threads per block)."""

    def __init__(self, spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, threads_per_block: int = 256) -> None:
        if (isinstance(threads_per_block, bool) or not isinstance(threads_per_block, int)
                or not 32 <= threads_per_block <= 1024 or threads_per_block % 32):
            raise ValueError(
                "threads_per_block must be a positive multiple of 32 (the warp size) and at "
                f"most 1024, got {threads_per_block!r}"
            )
        self.spec, self.num_envs, self.mode = spec, num_envs, mode
        self.params, self.max_episode_steps = params, max_episode_steps
        # what the kernels see: the family may keep part of params to itself
        kernel_params = spec.kernel_params(params) if spec.kernel_params else params
        self.kernel_params, per_env, columns = split_params(spec, kernel_params, num_envs)
        self.threads_per_block = threads_per_block
        self._grid = ((num_envs + threads_per_block - 1) // threads_per_block, threads_per_block)
        self._kernels = compile_kernels(spec, mode, per_env, type(kernel_params))
        self._validate, self._step, self._reset = self._kernels

        fmt = action_format(spec.action_space)
        # Lookup constants go in as arguments: arrays (Box bounds) as device arrays.
        self._bounds = tuple(cuda.to_device(np.ascontiguousarray(b))
                             if isinstance(b, np.ndarray) else b for b in fmt.bounds)
        # Kernels take Discrete actions as (num_envs,), Box actions as rows (num_envs, size).
        action_shape = (num_envs,) if fmt.integer else (num_envs, int(np.prod(fmt.shape)))
        self._actions = _zeros(action_shape, fmt.dtype)
        self._actions_tensor = as_tensor(self._actions)

        State = spec.state_type
        self._state = State(**{name: cuda.to_device(column)
                               for name, column in spec.allocate_state(num_envs).items()})
        # what the kernels get as ``state``: with per-env params, the state and their columns
        self._kernel_state = ((*self._state, *(cuda.to_device(c) for c in columns))
                              if per_env else self._state)
        obs_space = spec.observation_space
        obs_shape = (num_envs, *obs_space.shape)
        self._obs = _zeros(obs_shape, obs_space.dtype)
        self._final_obs = _zeros(obs_shape, obs_space.dtype)
        self._obs_rows = self._obs.reshape(num_envs, -1)  # kernels see obs as rows
        self._final_obs_rows = self._final_obs.reshape(num_envs, -1)
        self._rewards = _zeros(num_envs, np.float32)
        self._terminated = _zeros(num_envs, np.bool_)
        self._truncated = _zeros(num_envs, np.bool_)
        self._pending = _zeros(num_envs, np.bool_)
        self._rng = (_zeros(num_envs, np.uint64), _zeros(num_envs, np.uint64),
                     _zeros(num_envs, np.int64))
        self._all = cuda.to_device(np.ones(num_envs, dtype=np.bool_))
        self._mask = _zeros(num_envs, np.bool_)
        self._seeds = _zeros(num_envs, np.uint64)
        self._counters = cuda.to_device(np.array([num_envs, num_envs, 0], dtype=np.int64))
        self._counters_host = cuda.pinned_array(3, dtype=np.int64)
        self._slot = 0

        # The user-facing views: torch tensors over the same memory.
        self.state = State(*(as_tensor(column) for column in self._state))
        self.obs = as_tensor(self._obs)
        self.final_obs = as_tensor(self._final_obs)
        self.rewards = as_tensor(self._rewards)
        self.terminated = as_tensor(self._terminated)
        self.truncated = as_tensor(self._truncated)
        self.pending = as_tensor(self._pending)

    def compile(self) -> None:
        """Compile the kernels now (first launch would do it) by running a 1-env copy."""
        probe = CudaEngine(self.spec, 1, self.mode, first_env_params(self.spec, self.params),
                           self.max_episode_steps,
                           self.threads_per_block)
        probe.reset(None, np.zeros(1, np.uint64))
        probe.step(valid_actions(self.spec.action_space, 1))
        probe.close()

    def _launch(self) -> tuple:
        """Launch configuration on torch's current stream, so kernels and the torch copies of
        actions and outputs are ordered even inside a user's ``torch.cuda.stream(...)``."""
        if SIMULATOR:  # nothing compiles: the simulator runs the kernels as Python
            return self._grid
        # the first launch of a kernel set compiles it (lazily, for these argument types)
        announce_compile(self._kernels, self.spec.id, "cuda", self.spec.compile_seconds)
        stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
        return (*self._grid, stream)

    def reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        launch = self._launch()
        stream = launch[2] if len(launch) > 2 else 0
        if mask is None:
            mask_dev = self._all
        else:
            self._mask.copy_to_device(np.ascontiguousarray(mask, dtype=np.bool_), stream=stream)
            mask_dev = self._mask
        if new_seeds is not None:
            self._seeds.copy_to_device(np.ascontiguousarray(new_seeds, dtype=np.uint64),
                                       stream=stream)
        with _quiet_simulator():
            self._reset[launch](self.num_envs, mask_dev, self._seeds, new_seeds is not None,
                                    self._kernel_state, self.kernel_params, self._rng,
                                    self._pending,
                                    self._obs_rows)

    def _load_actions(self, actions: Any, stream: Any) -> None:
        """Check the batch's shape and dtype kind, then copy it into the device action buffer."""
        if isinstance(actions, torch.Tensor):
            check_action_batch(actions, self.spec.action_space, self.num_envs)
            # torch converts the dtype and moves CPU tensors to the device as it copies.
            self._actions_tensor.copy_(actions.detach().reshape(self._actions_tensor.shape))
        else:
            self._actions.copy_to_device(as_numpy_actions(actions, self.spec, self.num_envs),
                                         stream=stream)

    def step(self, actions: Any) -> int:
        launch = self._launch()
        stream = launch[2] if len(launch) > 2 else 0
        self._load_actions(actions, stream)
        n, slot = self.num_envs, self._slot
        self._slot = 1 - slot
        with _quiet_simulator():
            self._validate[launch](n, self._kernel_state, self.kernel_params, self._actions,
                                       self._bounds, self._pending, self._counters, slot)
            self._step[launch](n, self._kernel_state, self.kernel_params, self._actions, self._rng,
                                   self.max_episode_steps, self._pending, self._obs_rows,
                                   self._rewards, self._terminated, self._truncated,
                                   self._final_obs_rows, self._counters, slot)
        # the step's one sync
        counters = self._counters.copy_to_host(self._counters_host, stream=stream)
        if stream:
            stream.synchronize()
        refused = int(counters[slot])
        if refused < n:
            needs_reset = self.mode == DISABLED and bool(self._pending[refused])
            raise refused_step_error(self.spec, refused, self._actions.copy_to_host(),
                                     needs_reset, self)
        return int(counters[_ENDED])

    def map_rows(self, row_fn: Any, dtype: Any) -> torch.Tensor:
        """A family's per-row kernel function ``row_fn(i, state, rng)`` over every env, one
        thread each: a tensor of ``dtype`` on the device."""
        out = cuda.device_array(self.num_envs, dtype=dtype)
        with _quiet_simulator():
            row_map(row_fn)[self._launch()](self.num_envs, self._state, self._rng, out)
        return as_tensor(out)

    def read_state(self, name: str, i: int) -> Any:
        """Env i's row of state column ``name``, copied to the host."""
        return getattr(self._state, name)[i:i + 1].copy_to_host()[0]

    def write_state(self, name: str, mask: np.ndarray, values: np.ndarray) -> None:
        """Set the masked rows of state column ``name`` from ``values`` (one row per env)."""
        column = getattr(self._state, name)
        host = column.copy_to_host()
        host[mask] = values[mask]
        column.copy_to_device(host)

    def host_state(self, name: str) -> np.ndarray:
        """State column ``name`` copied to the host."""
        return getattr(self._state, name).copy_to_host()

    def ended_mask(self) -> torch.Tensor:
        return self.terminated | self.truncated

    def copy(self, array: Any) -> Any:
        return array.clone()

    def close(self) -> None:
        """Drop the engine's references to its device buffers (freed once the user-facing
        tensors that share them are gone too)."""
        for name in ("_actions", "_actions_tensor", "_bounds", "_state", "_kernel_state", "_obs",
                     "_final_obs", "_obs_rows", "_final_obs_rows", "_rewards", "_terminated",
                     "_truncated", "_pending", "_rng", "_all", "_mask", "_seeds", "_counters"):
            setattr(self, name, None)
