"""The ``cuda`` backend: the shared driver lifted into CUDA kernels, one thread per env.

Every buffer lives in device memory, allocated once; users see it as torch tensors that share
that memory (no copy). A step is a fixed sequence on torch's current stream: arm a 4-int device
counter, a validation kernel that records the first env whose step must be refused
(``cuda.atomic.min``), the step kernel that runs ``begin``/``advance``/``finish`` for each env
(counting ended episodes, ``cuda.atomic.add``) unless the validation refused the step (then no
env moves), and one asynchronous copy of the counter into pinned host memory. On a GPU that
sequence is captured once into a CUDA graph and replayed (a step costs one graph launch and one
wait, not two numba dispatches of ~14 arguments each); ``rollout`` enqueues many steps with one
wait at the end.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before Python starts) the same
kernels run as Python threads over device arrays that wrap host memory; the engine then
exposes CPU tensors over that memory. The kernels only ever receive device arrays.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from numba import cuda, int32

from envfleet.contract import check_action_batch
from envfleet.native.driver import (
    DISABLED,
    ENDED,
    REFUSED,
    REFUSED_AT,
    STEPS,
    action_format,
    make_driver,
    refused_step_error,
    valid_actions,
)
from envfleet.native.graphs import Replay, graphs_wanted
from envfleet.native.jit import announce_compile
from envfleet.native.numba_backend import as_numpy_actions
from envfleet.native.spec import PARAMS, NativeEnvSpec, first_env_params, split_params

#: True when numba-cuda runs kernels in its simulator (no GPU involved).
SIMULATOR = bool(cuda.config.ENABLE_CUDASIM)

def _fma() -> bool:
    """Whether the env kernels let NVVM contract ``a * b + c`` into FMA instructions (the
    default, as nvcc does); ``ENVFLEET_CUDA_FMA=0`` compiles them without (see ``no_fma``)."""
    return os.environ.get("ENVFLEET_CUDA_FMA", "1") != "0"


#: the Python functions of the kernels that NVVM compiles with ``-fma=0`` (``no_fma``)
_NO_FMA: weakref.WeakSet = weakref.WeakSet()


def no_fma(*kernels: Any) -> None:
    """Have NVVM compile ``kernels`` (``cuda.jit`` dispatchers) with ``-fma=0``, without link-time
    optimisation (nvJitLink contracts again otherwise); libdevice's own fma calls stay.

    numba-cuda 0.30's ``cuda.jit`` builds NVVM's options itself (``fastmath``, ``opt``) and has
    no such switch, but the ``compile_cuda`` its dispatcher calls takes ``nvvm_options``: a
    wrapper of it, installed once per process, adds them for these kernels only.
    """
    if SIMULATOR:  # kernels run as Python there: nothing is contracted
        return
    import numba.cuda.dispatcher as dispatcher

    real = getattr(dispatcher, "compile_cuda", None)
    if real is None:
        raise RuntimeError("ENVFLEET_CUDA_FMA=0 needs numba.cuda.dispatcher.compile_cuda "
                           "(numba-cuda 0.30), which this numba-cuda does not have")
    if not getattr(real, "envfleet_no_fma", False):
        @functools.wraps(real)
        def compile_cuda(pyfunc: Any, *args: Any, **kwargs: Any) -> Any:
            if pyfunc in _NO_FMA:
                kwargs["nvvm_options"] = {**(kwargs.get("nvvm_options") or {}), "fma": False}
                kwargs["lto"] = False
            return real(pyfunc, *args, **kwargs)

        compile_cuda.envfleet_no_fma = True  # type: ignore[attr-defined]
        dispatcher.compile_cuda = compile_cuda
    _NO_FMA.update(kernel.py_func for kernel in kernels)


@functools.cache
def compile_kernels(spec: NativeEnvSpec, mode: int, per_env: tuple[str, ...] = (),
                    params_type: type | None = None, fma: bool = True) -> tuple[Any, Any, Any]:
    """(validate, step, reset) CUDA kernels of ``spec`` for autoreset ``mode``.

    Compiled lazily on first launch (per argument types), from the same scalar functions the
    numba backend compiles. ``counters`` is the 4-int device array described above; ``saved``
    receives the first refused env's action (a row). The params fields named in ``per_env``
    are read from per-env columns (``split_params``: the kernels' ``state`` argument is then
    the flat tuple ``(*state, *columns)``). ``fma=False``: compiled without FMA contraction.
    """
    refuse, begin, advance, finish, drive_reset = make_driver(spec, mode, per_env, params_type)
    save_action = _save_discrete if action_format(spec.action_space).integer else _save_box

    @cuda.jit
    def validate(n, state, params, actions, bounds, pending, counters):
        i = cuda.grid(1)
        if i < n and counters[REFUSED_AT] < 0 and refuse(i, state, params, actions, bounds,
                                                         pending):
            cuda.atomic.min(counters, REFUSED, i)

    @cuda.jit
    def step(n, state, params, actions, rng, max_steps, pending, obs, rewards, terminated,
             truncated, final_obs, counters, saved):
        i = cuda.grid(1)
        # ended episodes are counted per block (shared memory), then added once per block: one
        # global atomic per env that ended serialised on one address (10^7 envs: ~0.5M a step)
        ended = cuda.shared.array(1, int32)
        if cuda.threadIdx.x == 0:
            ended[0] = 0
        cuda.syncthreads()
        refused = counters[REFUSED]  # final: the validation ran before, on the same stream
        if i == 0:
            if refused < n and counters[REFUSED_AT] < 0:
                counters[REFUSED_AT] = counters[STEPS]
                save_action(refused, actions, saved)
            counters[STEPS] += 1
        if i < n and refused >= n:  # in range, and no step was refused: move
            begin(i, state, params, rng, pending, obs, rewards, terminated, truncated)
            if advance(i, state, params, actions, rng, max_steps, pending, obs, rewards,
                       terminated, truncated):
                cuda.atomic.add(ended, 0, 1)
            finish(i, state, params, rng, obs, terminated, truncated, final_obs)
        cuda.syncthreads()  # every thread of the block reaches it (no early return above)
        if cuda.threadIdx.x == 0 and ended[0] > 0:
            cuda.atomic.add(counters, ENDED, ended[0])

    @cuda.jit
    def reset(n, mask, new_seeds, reseed, state, params, rng, pending, obs):
        i = cuda.grid(1)
        if i < n:
            drive_reset(i, mask, new_seeds, reseed, state, params, rng, pending, obs)

    if not fma:
        no_fma(validate, step, reset)
    return validate, step, reset


@cuda.jit(device=True)
def _save_discrete(i: int, actions: Any, saved: Any) -> None:
    saved[0] = actions[i]


@cuda.jit(device=True)
def _save_box(i: int, actions: Any, saved: Any) -> None:
    for k in range(actions.shape[1]):
        saved[k] = actions[i, k]


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

    #: ``rollout`` enqueues the steps, one wait at the end
    enqueues = True

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
        self._kernels = compile_kernels(spec, mode, per_env, type(kernel_params), _fma())
        self._validate, self._step, self._reset = self._kernels

        fmt = action_format(spec.action_space)
        # Lookup constants go in as arguments: arrays (Box bounds) as device arrays.
        self._bounds = tuple(cuda.to_device(np.ascontiguousarray(b))
                             if isinstance(b, np.ndarray) else b for b in fmt.bounds)
        # Kernels take Discrete actions as (num_envs,), Box actions as rows (num_envs, size).
        action_shape = (num_envs,) if fmt.integer else (num_envs, int(np.prod(fmt.shape)))
        self._actions = _zeros(action_shape, fmt.dtype)
        self._actions_tensor = as_tensor(self._actions)
        #: the action buffer as a batch of the action space (a view of the kernels' buffer)
        self.actions = self._actions_tensor.view(num_envs, *fmt.shape)
        self._saved = _zeros(action_shape[1:] or (1,), fmt.dtype)  # the refused env's action
        self._saved_tensor = as_tensor(self._saved)
        self._integer_actions = fmt.integer

        # every batch buffer as the spec declares it, in device memory, allocated once here
        # (a captured CUDA graph replays launches on these very addresses)
        values = {f"params.{name}": c for name, c in zip(per_env, columns, strict=True)}
        buffers = {b.name: cuda.to_device(values[b.name]) if b.role == PARAMS
                   else _zeros(b.shape, b.dtype) for b in spec.buffers(num_envs, per_env)}
        tables = spec.tables() if spec.tables is not None else {}
        State = spec.state_type
        self._state = spec.state_from(buffers, {name: cuda.to_device(table)
                                                for name, table in tables.items()})
        # what the kernels get as ``state``: with per-env params, the state and their columns
        self._kernel_state = ((*self._state, *(buffers[name] for name in values))
                              if per_env else self._state)
        self._obs, self._final_obs = buffers["obs"], buffers["final_obs"]
        self._obs_rows = self._obs.reshape(num_envs, -1)  # kernels see obs as rows
        self._final_obs_rows = self._final_obs.reshape(num_envs, -1)
        self._rewards, self._terminated = buffers["rewards"], buffers["terminated"]
        self._truncated, self._pending = buffers["truncated"], buffers["pending"]
        self._rng = (buffers["seeds"], buffers["episodes"], buffers["steps"])
        self._all = cuda.to_device(np.ones(num_envs, dtype=np.bool_))
        self._mask = _zeros(num_envs, np.bool_)
        self._seeds = _zeros(num_envs, np.uint64)
        armed = np.array([num_envs, 0, -1, 0], dtype=np.int64)
        self._counters = cuda.to_device(armed)
        self._counters_tensor = as_tensor(self._counters)
        self._armed_array = cuda.to_device(armed)
        self._armed = as_tensor(self._armed_array)
        # the one host read of a step: the counter, copied asynchronously into pinned memory
        self._counters_host = torch.zeros(4, dtype=torch.int64, pin_memory=not SIMULATOR)
        self._counters_view = self._counters_host.numpy()
        self._streams: dict[int, Any] = {}  # numba's handle of each torch stream used
        #: the enqueued work (the step, each row map, rollouts), replayed as CUDA graphs on a GPU
        self.replay = Replay(not SIMULATOR and graphs_wanted())
        self._row_outputs: dict[Any, Any] = {}  # map_rows' output buffer per (fn, dtype)
        self._announced = False

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
        actions and outputs are ordered even inside a user's ``torch.cuda.stream(...)`` (and
        captured into a graph inside ``torch.cuda.graph(...)``)."""
        if SIMULATOR:  # nothing compiles: the simulator runs the kernels as Python
            return self._grid
        if not self._announced:  # the first launch of a kernel set compiles it (lazily)
            announce_compile(self._kernels, self.spec.id, "cuda", self.spec.compile_seconds)
            self._announced = True
        handle = torch.cuda.current_stream().cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = cuda.external_stream(handle)
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
                                self._pending, self._obs_rows)

    def load_actions(self, actions: Any) -> None:
        """Check the batch's shape and dtype kind, then copy it into the device action buffer
        (on torch's current stream; a host batch is copied from the host)."""
        if isinstance(actions, torch.Tensor):
            check_action_batch(actions, self.spec.action_space, self.num_envs)
            # torch converts the dtype and moves CPU tensors to the device as it copies.
            self._actions_tensor.copy_(actions.detach().reshape(self._actions_tensor.shape))
        else:
            host = as_numpy_actions(actions, self.spec, self.num_envs)
            self._actions_tensor.copy_(torch.from_numpy(np.ascontiguousarray(host)))

    def arm(self) -> None:
        """Re-arm the counter (no refusal, no ended episode, no step), on the current stream."""
        self._counters_tensor.copy_(self._armed)

    def enqueue_step(self) -> None:
        """Validate then step every env with the action buffer, on torch's current stream,
        without waiting: a refusal is recorded in the counter (``collect`` reports it)."""
        launch = self._launch()
        n = self.num_envs
        with _quiet_simulator():
            self._validate[launch](n, self._kernel_state, self.kernel_params, self._actions,
                                   self._bounds, self._pending, self._counters)
            self._step[launch](n, self._kernel_state, self.kernel_params, self._actions,
                               self._rng, self.max_episode_steps, self._pending,
                               self._obs_rows, self._rewards, self._terminated, self._truncated,
                               self._final_obs_rows, self._counters, self._saved)

    def _enqueue_counted_step(self) -> None:
        """One step as ``step`` runs it: arm, validate + step, counter to pinned memory."""
        self.arm()
        self.enqueue_step()
        self._counters_host.copy_(self._counters_tensor, non_blocking=True)

    def collect(self, what: str = "", actions: Any = None) -> int:
        """Wait for the enqueued work, raise for a refusal (``what``, formatted with the
        refused ``step``, prefixes the message) and return the count of ended episodes.
        (``actions``, the rollout's log, is not needed: no env moved from the refused step.)"""
        self._counters_host.copy_(self._counters_tensor, non_blocking=True)
        return self._read_counters(what)

    def _read_counters(self, what: str) -> int:
        if not SIMULATOR:
            torch.cuda.current_stream().synchronize()
        refused, ended, refused_at = (int(v) for v in self._counters_view[:3])
        if refused < self.num_envs:
            needs_reset = self.mode == DISABLED and bool(self.pending[refused])
            saved = self._saved_tensor.cpu().numpy()
            action = saved[0] if self._integer_actions else saved
            error = refused_step_error(self.spec, refused, action, needs_reset, self)
            if what:
                raise ValueError(what.format(step=refused_at) + str(error)) from None
            raise error
        return ended

    def step(self, actions: Any) -> int:
        self.load_actions(actions)
        self.replay.run("step", self._enqueue_counted_step)
        return self._read_counters("")

    def map_rows(self, row_fn: Any, dtype: Any) -> torch.Tensor:
        """A family's per-row kernel function ``row_fn(i, state, rng)`` over every env, one
        thread each: a new tensor of ``dtype`` on the device."""
        key = (row_fn, np.dtype(dtype))
        out = self._row_outputs.get(key)
        if out is None:
            out = self._row_outputs[key] = _zeros(self.num_envs, dtype)

        def work() -> None:
            with _quiet_simulator():
                row_map(row_fn)[self._launch()](self.num_envs, self._state, self._rng, out)

        self.replay.run(key, work)
        return as_tensor(out).clone()

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
                     "_truncated", "_pending", "_rng", "_all", "_mask", "_seeds", "_counters",
                     "_counters_tensor", "_armed", "_armed_array", "_saved", "_saved_tensor"):
            setattr(self, name, None)
        self.replay.clear()
        self._row_outputs = {}


def lower_kernels(spec: NativeEnvSpec, params: tuple, modes: tuple[int, ...],
                  cc: tuple[int, int] = (9, 0), n: int = 4, fma: bool = True) -> list[Any]:
    """Type-check and lower ``spec``'s validate, step and reset kernels to LLVM IR for compute
    capability ``cc``, with host arrays laid out as ``CudaEngine`` lays out its buffers and the
    NVVM options ``cuda.jit`` gives kernels (``fma=False``: those of ``no_fma``).

    Needs no GPU (run with the simulator off): the simulator runs kernels as Python and cannot
    catch code that the CUDA target rejects, so the tests run this in a fresh process. Returns
    the compile results, kernel by kernel: ``library.get_asm_str(cc=cc)`` is a kernel's PTX
    (that step needs libNVVM).
    """
    import numba.cuda.dispatcher as dispatcher
    from numba.cuda.typing.typeof import typeof

    kernel_params = spec.kernel_params(params) if spec.kernel_params else params
    kernel_params, per_env, columns = split_params(spec, kernel_params, n)
    buffers = {b.name: np.zeros(b.shape, b.dtype) for b in spec.buffers(n)}
    state = spec.state_from(buffers, spec.tables() if spec.tables is not None else {})
    kernel_state = (*state, *columns) if per_env else state
    fmt = action_format(spec.action_space)
    actions = np.ascontiguousarray(valid_actions(spec.action_space, n).reshape(n, -1)
                                   if not fmt.integer else valid_actions(spec.action_space, n))
    saved = np.ascontiguousarray(actions[0].reshape(-1))
    bounds = fmt.bounds
    rng = (buffers["seeds"], buffers["episodes"], buffers["steps"])
    obs = buffers["obs"].reshape(n, -1)
    rewards, flags = buffers["rewards"], buffers["pending"]
    counters = np.zeros(4, np.int64)
    done = []
    for mode in modes:
        validate, step, reset = compile_kernels(spec, mode, per_env, type(kernel_params), fma)
        for kernel, args in (
            (validate, (n, kernel_state, kernel_params, actions, bounds, flags, counters)),
            (step, (n, kernel_state, kernel_params, actions, rng, 500, flags, obs, rewards,
                    flags, flags, obs, counters, saved)),
            (reset, (n, flags, rng[0], True, kernel_state, kernel_params, rng, flags, obs)),
        ):
            # what cuda.jit's kernels get (dispatcher._Kernel; LTO where nvJitLink is
            # installed), through the compile_cuda that no_fma's wrapper replaces
            done.append(dispatcher.compile_cuda(
                kernel.py_func, None, tuple(typeof(a) for a in args), cc=cc,
                nvvm_options={"fastmath": False, "opt": 3}, lto=True))
    return done
