"""The ``numba`` backend: the shared driver lifted into a ``prange`` loop on CPU threads.

Below ``PARALLEL_MIN_ENVS`` envs a serial compile of the same loop runs instead: a parallel
region costs a few microseconds of fork/join, more than stepping a small batch.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

# GNU OpenMP (numba's default threading layer here) spins ~300,000 turns in every barrier before
# sleeping. When other processes hold the cores (or torch runs between env steps, as in
# training), the spinning threads take the CPU from the thread they wait for: 2-thread steps
# measured 20-30x slower (chess at 512 boards: 23 ms a step instead of 1.1 ms on one thread).
# 10,000 turns kept the quiet-machine speed (CartPole at 65,536 envs: ~90M steps/s either way)
# and cut that collapse ~6x. Read by libgomp when numba first starts its threads; a value the
# user set wins.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

import numba
import numpy as np
from numba import njit, prange

from envfleet.contract import check_action_batch
from envfleet.machine import usable_cores
from envfleet.native.driver import (
    DISABLED,
    SAME_STEP,
    ActionFormat,
    action_format,
    make_driver,
    refused_step_error,
    valid_actions,
)
from envfleet.native.jit import (
    KernelIndexError,
    announce_compile,
    bounds_checked,
    kernel_function,
    numba_boundscheck,
    user_frame,
)
from envfleet.native.kernel_cache import disk_cached, is_disk_cached
from envfleet.native.spec import NativeEnvSpec, first_env_params, split_params

#: default threads (no ``num_threads``): every this many steps, one step runs on the other
#: kernel (one thread / every thread) and is timed; the other takes the following steps when
#: the median of its last 3 timed steps beats the current one's by ``SWITCH_MARGIN``. Both give
#: the same results, bit for bit. A probe of a much slower kernel waits longer
#: (``NumbaEngine._probe_due``): its two steps' extra time stays within ``2 / (PROBE_EVERY - 2)``
#: (~3%) of the time stepped between probes (16 threads' chess probing one thread every 64
#: steps lost ~30%).
PROBE_EVERY = 64
#: the longest interval between ``ThreadChoice``'s probes, reached while they keep confirming
#: the current count
PROBE_MAX = 1024
SWITCH_MARGIN = 0.9
PARALLEL_MIN_ENVS = 512  # measured crossover on 2 cores: 12.5 us serial vs 11.9 parallel
CHUNKS_PER_THREAD = 4
#: ``copy=True`` steps write into new arrays from this many envs (``fresh_outputs``); below,
#: copying the small buffers is cheaper than allocating them (1 env: 4 copies ~0.6 us, 4 new
#: arrays ~0.8 us)
FRESH_MIN_ENVS = 256
#: ``copy=True`` outputs of at least this many bytes come from ``Spares`` (512 boards' chess
#: mask: 2.4 MB); smaller ones are plain copies, served warm by malloc's free lists
SPARE_MIN_BYTES = 64 * 1024
#: ``Spares`` keeps this many handed-out arrays per shape and dtype: the caller's loop holds the
#: last step's while it calls the next step, so the one before is the one usually free
SPARES_PER_SHAPE = 3
# The per-env loops allocate nothing, so they compile without the runtime's reference counting
# (with it, every array unpacked per env costs atomic increments: ~10x slower).
# ``forceinline``: every kernel function the loops call (the driver's, the family's, and what
# they call) inherits it and is inlined. Otherwise LLVM keeps a large callee (a MinAtar game's
# ``step_one``) out of line, and each call passes the whole state tuple on the stack, every
# array exploded into its fields (Breakout: ~115 pushed words per call): measured 221 -> 39 ns
# per Breakout env-step on one thread.
_RANGE_JIT = {"error_model": "numpy", "nogil": True, "_nrt": False, "forceinline": True}
#: up to this many envs, a parallel step checks the actions on the calling thread: a few ns
#: an env, against a second parallel region whose threads may have gone to sleep
SERIAL_CHECK_ENVS = 2048
_PARALLEL_JIT = {"parallel": True, "error_model": "numpy", "nogil": True, "forceinline": True}
#: the loops' options under ``ENVFLEET_BOUNDSCHECK=1``; ``forceinline`` off also keeps every
#: function they call compiled apart from the unchecked kernels' copy (numba reuses a callee's
#: code for callers with the same options, and ``forceinline`` is passed down the calls)
_CHECKED_JIT = {"boundscheck": True, "forceinline": False}


#: the end of a ``KernelIndexError``'s message
BOUNDS_HINT = ("ENVFLEET_BOUNDSCHECK=1 compiled the kernels with bounds checks (one thread, "
               "slower: unset it once fixed); see docs/NATIVE_ENVS.md, \"Kernel rules\".")


def _arrays(args: tuple) -> list[np.ndarray]:
    """The NumPy arrays in a kernel's arguments, tuples (the state record) included."""
    found = []
    for a in args:
        if isinstance(a, np.ndarray):
            found.append(a)
        elif isinstance(a, tuple):
            found.extend(_arrays(a))
    return found


def _python(kernel: Any) -> Callable[..., Any]:
    """A kernel's Python function (the kernel itself under ``NUMBA_DISABLE_JIT=1``)."""
    return getattr(kernel, "py_func", kernel)


def _restore(saved: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Each array back to its saved copy."""
    for array, copy in saved:
        np.copyto(array, copy)


def default_threads() -> int:
    """Numba threads by default: the usable cores, capped by numba's thread pool."""
    return max(1, min(usable_cores(), numba.config.NUMBA_NUM_THREADS))


def check_num_threads(num_threads: int | None) -> None:
    """Refuse ``num_threads`` unless it is None (the default) or an int numba can run."""
    top = numba.config.NUMBA_NUM_THREADS
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(
            num_threads, int) or not 1 <= num_threads <= top):
        raise ValueError(f"num_threads must be an int in 1..{top} (NUMBA_NUM_THREADS), "
                         f"got {num_threads!r}")


class ThreadChoice:
    """Default threads for an engine whose loop calls a C simulator over the envs (Atari,
    MuJoCo): a probe runs two steps on the other count (1 or ``num_threads``), the second
    timed; the other count takes over when its recent steps were clearly faster
    (``SWITCH_MARGIN``: a loaded machine, where a small batch waits for a descheduled thread
    at each step's end). Probes come every ``PROBE_EVERY`` steps after a switch or a probe
    that looked faster, and back off (the interval doubling up to ``PROBE_MAX``) while they
    confirm the current count: on a quiet machine the slower count's steps cost ~0.2% of the
    time, not ~3%. Same results either way. Explicit threads (``adaptive=False``) stay as given."""

    def __init__(self, num_threads: int, adaptive: bool) -> None:
        self.num_threads = num_threads
        self.adaptive = adaptive and num_threads > 1
        self.active_threads = num_threads
        #: recent timed steps (seconds) by thread count
        self.times: dict[int, deque[float]] = {1: deque(maxlen=3), num_threads: deque(maxlen=3)}
        self._calls, self._probing = 0, False
        #: steps between probes (``PROBE_EVERY`` .. ``PROBE_MAX``)
        self.interval = PROBE_EVERY

    def for_step(self) -> tuple[int, bool]:
        """(threads for this step, whether to time it): the current count, or when a probe
        is due (every ``interval`` steps) the other one for two steps, after switching to it
        when its recent steps were clearly faster (``SWITCH_MARGIN``); the probe's first
        step (threads waking, rows moving between caches) is not timed."""
        if not self.adaptive:
            return self.num_threads, False
        other = 1 if self.active_threads > 1 else self.num_threads
        if self._probing:
            self._probing, self._calls = False, 0
            return other, True
        self._calls += 1
        if self._calls < self.interval - 1:
            return self.active_threads, True
        times = self.times
        if times[other] and times[self.active_threads]:
            if (statistics.median(times[other])
                    < SWITCH_MARGIN * statistics.median(times[self.active_threads])):
                self.active_threads, other = other, self.active_threads
                self.interval = PROBE_EVERY
            else:
                self.interval = min(2 * self.interval, PROBE_MAX)
        self._probing = True
        return other, False

    def record(self, threads: int, seconds: float) -> None:
        """A timed step's duration on ``threads``; a probe clearly faster than the current
        count's recent steps brings the next probes back to every ``PROBE_EVERY`` steps."""
        self.times[threads].append(seconds)
        current = self.times[self.active_threads]
        if threads != self.active_threads and current and (
                seconds < SWITCH_MARGIN * statistics.median(current)):
            self.interval = PROBE_EVERY


@functools.cache
def info_copier(spec: NativeEnvSpec) -> Callable[..., None]:
    """``copy_info(i, state, out)``: env i's rows of ``spec.info_columns`` into the arrays of
    the tuple ``out`` (same order, same shapes), element by element (numba's array assignment
    may allocate a temporary; the step loops allocate nothing). Generated: the columns' indices
    in the state tuple are constants."""
    fields, lines = spec.state_type._fields, []
    for p, name in enumerate(spec.info_columns):
        j, dims = fields.index(name), len(spec.state[name][1])
        index = ", ".join(("i", *(f"k{d}" for d in range(dims))))
        for d in range(dims):
            lines.append(f"{'    ' * (d + 1)}for k{d} in range(out[{p}].shape[{d + 1}]):")
        lines.append(f"{'    ' * (dims + 1)}out[{p}][{index}] = state[{j}][{index}]")
    names: dict[str, Any] = {}
    exec("def copy_info(i, state, out):\n" + "\n".join(lines or ["    pass"]) + "\n", names)
    return kernel_function(names["copy_info"])


@functools.cache
def compile_kernels(spec: NativeEnvSpec, mode: int, params: tuple,
                    per_env: tuple[str, ...] = (), checked: bool = False) -> tuple[Any, Any, Any]:
    """(serial step, parallel step, reset) kernels of ``spec`` for autoreset ``mode``.

    ``params`` is compiled in as a constant (one compile per distinct params record): flags
    like CartPole's integrator fold away instead of branching per env (10% faster). The
    fields named in ``per_env`` are read from per-env columns instead (``split_params``:
    the kernels' ``state`` argument is then the flat tuple ``(*state, *columns)``).
    A step kernel returns how many episodes ended, or ``-1 - i`` when env i's step is refused
    (checked for every env before any env moves, so a refused step changes nothing). With
    ``copy_info``, a step also copies each env's rows of the info columns into ``info_out``
    once the step is done with that env (``copy=True``'s ``info``: the copy runs on the step's
    threads, on rows the step just touched, instead of a serial copy pass after it).
    Each kernel is ``disk_cached``: a later process loads its machine code instead of compiling.
    ``checked`` (``ENVFLEET_BOUNDSCHECK=1``): every array access is bounds-checked (an
    ``IndexError`` instead of a write past a row); the kernels must compile, and run, inside
    ``numba_boundscheck()``; the serial step's env loop is its ``range_loop`` attribute.
    """
    refuse, begin, advance, finish, drive_reset = make_driver(spec, mode, per_env, type(params))
    copy_rows = info_copier(spec)
    range_jit = {**_RANGE_JIT, **_CHECKED_JIT} if checked else _RANGE_JIT
    parallel_jit = {**_PARALLEL_JIT, **_CHECKED_JIT} if checked else _PARALLEL_JIT

    @njit(**range_jit)
    def first_refused(start, stop, state, actions, bounds, pending):
        for i in range(start, stop):
            if refuse(i, state, params, actions, bounds, pending):
                return i
        return -1

    @njit(**range_jit)
    def step_range(start, stop, state, actions, rng, max_steps, pending, obs, rewards,
                   terminated, truncated, final_obs, info_out, copy_info):
        ended = 0
        for i in range(start, stop):  # NEXT_STEP: begin resets env i, then advance skips it
            begin(i, state, params, rng, pending, obs, rewards, terminated, truncated)
            done = advance(i, state, params, actions, rng, max_steps, pending, obs, rewards,
                           terminated, truncated)
            ended += done
            if copy_info and not (mode == SAME_STEP and done):  # env i's rows are final
                copy_rows(i, state, info_out)
        if mode == SAME_STEP and ended:
            for i in range(start, stop):
                finish(i, state, params, rng, obs, terminated, truncated, final_obs)
                if copy_info and (terminated[i] or truncated[i]):  # reset by finish
                    copy_rows(i, state, info_out)
        return ended

    @njit(**range_jit)
    def step_serial(chunks, n, state, actions, bounds, rng, max_steps, pending, obs,
                    rewards, terminated, truncated, final_obs, info_out, copy_info):
        bad = first_refused(0, n, state, actions, bounds, pending)
        if bad >= 0:
            return -1 - bad
        return step_range(0, n, state, actions, rng, max_steps, pending, obs, rewards,
                          terminated, truncated, final_obs, info_out, copy_info)

    @njit(**parallel_jit)
    def step_parallel(chunks, n, state, actions, bounds, rng, max_steps, pending, obs,
                      rewards, terminated, truncated, final_obs, info_out, copy_info):
        size = (n + chunks - 1) // chunks
        if n <= SERIAL_CHECK_ENVS:  # cheaper than waking the threads for a second region
            bad = first_refused(0, n, state, actions, bounds, pending)
            if bad >= 0:
                return -1 - bad
        else:
            refused = 0
            for c in prange(chunks):
                if first_refused(c * size, min(n, (c + 1) * size), state, actions, bounds,
                                 pending) >= 0:
                    refused += 1
            if refused:
                return -1 - first_refused(0, n, state, actions, bounds, pending)
        ended = 0
        for c in prange(chunks):
            ended += step_range(c * size, min(n, (c + 1) * size), state, actions, rng,
                                max_steps, pending, obs, rewards, terminated, truncated,
                                final_obs, info_out, copy_info)
        return ended

    @njit(**range_jit)
    def reset(n, mask, new_seeds, reseed, state, rng, pending, obs):
        for i in range(n):
            drive_reset(i, mask, new_seeds, reseed, state, params, rng, pending, obs)

    kernels = (step_serial, step_parallel, reset)

    def announce() -> None:
        announce_compile(kernels, spec.id, "numba", spec.compile_seconds,
                         cached=is_disk_cached(reset))

    # (checked: numba's bounds-check switch is in the cache's key, never served unchecked)
    with numba_boundscheck() if checked else contextlib.nullcontext():
        disk_cached(first_refused)  # compiled only as part of the kernels below: not announced
        disk_cached(step_range)
        for kernel in kernels:  # one notice for the set: a big batch's first reset then step
            disk_cached(kernel, on_compile=announce)  # the serial set and the parallel step
    step_serial.range_loop = step_range
    return kernels


@functools.cache
def kernel_action_format(spec: NativeEnvSpec) -> ActionFormat:
    """``spec``'s action format, built once (it is consulted on every step)."""
    return action_format(spec.action_space)


def as_numpy_actions(actions: Any, spec: NativeEnvSpec, num_envs: int) -> np.ndarray:
    """Check a batch of actions' shape and dtype kind; return it as the kernels' array
    (Discrete: int64 of shape (num_envs,); Box: the space's dtype, as rows (num_envs, size))."""
    fmt = kernel_action_format(spec)
    if (type(actions) is np.ndarray and actions.dtype == fmt.dtype
            and actions.ndim == (1 if fmt.integer else 2) and actions.shape[0] == num_envs
            and (fmt.integer or actions.shape[1:] == fmt.shape)
            and actions.flags.c_contiguous and actions.flags.writeable):
        return actions  # the common case, as the kernels take it: nothing to convert
    if not isinstance(actions, np.ndarray) and hasattr(actions, "detach"):  # torch tensor
        actions = actions.detach().cpu().numpy()
    a = np.asarray(actions)
    check_action_batch(a, spec.action_space, num_envs)
    with np.errstate(over="ignore"):  # a float64 beyond float32's range: inf, then refused
        a = np.ascontiguousarray(a, dtype=fmt.dtype)
    if not a.flags.writeable:  # keep one compiled signature
        a = a.copy()
    return a if fmt.integer else a.reshape(num_envs, -1)


@functools.cache
def row_map(row_fn: Any) -> Any:
    """``run(state, rng, out)``: ``out[i] = row_fn(i, state, rng)`` for every row, compiled."""

    @njit(nogil=True, error_model="numpy")
    def run(state, rng, out):
        for i in range(out.shape[0]):
            out[i] = row_fn(i, state, rng)

    return disk_cached(run)


def _refs(held: deque, k: int) -> int:
    """References to ``held[k]``, as counted from here (compared with ``_ALONE``)."""
    return sys.getrefcount(held[k])


#: ``_refs`` of an array that only its ``deque`` holds (calibrated by the same call: the count
#: ``sys.getrefcount`` adds for its own argument differs between Python versions)
_ALONE = _refs(deque([np.empty(0)]), 0)


class Spares:
    """Memory for ``copy=True`` outputs: arrays handed out before that the caller holds no
    reference to any more (nor to a view of them: a view holds its base) are written again.

    A fresh 2.4 MB array per step (chess's mask at 512 boards) is a new mapping whenever
    malloc returns the big block to the kernel, e.g. after a policy's large temporaries between
    steps: ~600 page faults per step, zeroed pages and cold caches (measured: the copy took
    ~450 us instead of ~80 us). An array the caller still holds, in any form, is never reused:
    the arrays it gets stay its own, as ``copy=True`` promises."""

    def __init__(self) -> None:
        self._held: dict[tuple, deque] = {}

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` nobody else holds: a spare, else a new one."""
        held = self._held.setdefault((shape, np.dtype(dtype)), deque())
        for k in range(len(held)):
            if _refs(held, k) == _ALONE:
                array = held[k]
                del held[k]
                held.append(array)  # the most recently handed out last
                return array
        array = np.empty(shape, dtype)
        held.append(array)
        if len(held) > SPARES_PER_SHAPE:
            held.popleft()
        return array

    def copy(self, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` the caller owns, in a spare when one is free."""
        out = self.empty(array.shape, array.dtype)
        np.copyto(out, array)
        return out


class NumbaEngine:
    """Structure-of-arrays buffers in host memory, stepped by compiled CPU kernels."""

    def __init__(self, spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, num_threads: int | None = None) -> None:
        check_num_threads(num_threads)
        #: default threads adapt: a machine whose other work holds a core makes a threaded
        #: step wait for its descheduled thread (measured 2-4x slower than one thread)
        self.adaptive = num_threads is None
        if num_threads is None:
            num_threads = default_threads()
        self.spec, self.num_envs, self.mode = spec, num_envs, mode
        self.params, self.max_episode_steps = params, max_episode_steps
        # what the kernels see (compiled in): the family may keep part of params to itself
        self.kernel_params = spec.kernel_params(params) if spec.kernel_params else params
        constant, per_env, columns = split_params(spec, self.kernel_params, num_envs)
        self.num_threads = num_threads
        self.bounds = action_format(spec.action_space).bounds
        # every batch buffer as the spec declares it, in host memory
        buffers = {b.name: np.zeros(b.shape, b.dtype) for b in spec.buffers(num_envs, per_env)}
        for name, column in zip(per_env, columns, strict=True):
            buffers[f"params.{name}"][:] = column
            buffers[f"params.{name}"].flags.writeable = False  # one compiled signature
        self.state = spec.state_from(buffers, spec.tables() if spec.tables is not None else {})
        # what the kernels get as ``state``: with per-env params, the state and their columns
        self._kernel_state = ((*self.state, *(buffers[f"params.{name}"] for name in per_env))
                              if per_env else self.state)
        self.obs, self.final_obs = buffers["obs"], buffers["final_obs"]
        self._obs_rows = self.obs.reshape(num_envs, -1)  # kernels see obs as rows
        self._final_obs_rows = self.final_obs.reshape(num_envs, -1)
        self.rewards, self.terminated = buffers["rewards"], buffers["terminated"]
        self.truncated, self.pending = buffers["truncated"], buffers["pending"]
        self.rng = (buffers["seeds"], buffers["episodes"], buffers["steps"])
        self._all = np.ones(num_envs, dtype=np.bool_)
        self._handed_out = False  # the outputs are a ``fresh`` step's, handed to its caller
        #: the info columns (``spec.info_columns``), in the step kernels' ``info_out`` argument
        #: when a step does not copy them (same types: one compiled signature)
        self._info_columns = tuple(getattr(self.state, name) for name in spec.info_columns)
        self._info_copies: tuple[np.ndarray, ...] = ()  # ``take_info_copies``
        self._spares = Spares()  # memory of large copy=True outputs (``copy``, fresh steps)
        self._no_seeds = np.zeros(num_envs, dtype=np.uint64)
        min_envs = spec.parallel_min_envs or PARALLEL_MIN_ENVS
        #: ``ENVFLEET_BOUNDSCHECK=1``: bounds-checked kernels, on one thread (``_checked_call``)
        self.checked = bounds_checked()
        self._parallel = num_threads > 1 and num_envs >= min_envs and not self.checked
        # scalar params: the cache entry of compile_kernels(spec, mode, params), as before
        self._kernels = (compile_kernels(spec, mode, constant, per_env, checked=True)
                         if self.checked else
                         compile_kernels(spec, mode, constant, per_env) if per_env
                         else compile_kernels(spec, mode, constant))
        step_serial, step_parallel, self._reset = self._kernels
        self._step = step_parallel if self._parallel else step_serial
        self._chunks = num_threads * CHUNKS_PER_THREAD
        self._entry_points: dict[Any, Any] = {}
        self._adapt = self.adaptive and self._parallel
        self._calls = 0  # steps since the last probe (adaptive threads only)
        self._stepped = 0.0  # their seconds
        self._probing = False  # the probe's first step ran: its second, timed, is next
        self._probe_after = 0.0  # seconds of steps before the next probe (``_probe_due``)
        #: seconds of recent steps by kernel (adaptive threads only)
        self._times: dict[Any, deque[float]] = {k: deque(maxlen=3)
                                                 for k in (step_serial, step_parallel)}

    @property
    def active_threads(self) -> int:
        """Threads the next step runs on (1 when adaptive threads chose the serial kernel)."""
        return self.num_threads if self._step is self._kernels[1] and self._parallel else 1

    def _choose_kernel(self) -> tuple[Any, bool]:
        """(the kernel for this step, whether to time it): the current choice, or when a
        probe is due (``_probe_due``: every ``PROBE_EVERY`` steps, later for a much slower
        kernel) the other one for two steps, after switching to it when its recent steps were
        clearly faster. The probe's first step is not timed: after
        63 steps on the other kernel it pays for waking threads and moving the envs' rows
        between the cores' caches, which steady steps do not (timing it kept the engine on
        one thread when two were faster)."""
        serial, parallel = self._kernels[:2]
        other = serial if self._step is parallel else parallel
        if self._probing:  # the probe's second step
            self._probing, self._calls, self._stepped = False, 0, 0.0
            return other, True
        self._calls += 1
        if not self._probe_due(other):
            return self._step, True
        self._probing = True
        times = self._times
        if times[other] and times[self._step] and (
                statistics.median(times[other])
                < SWITCH_MARGIN * statistics.median(times[self._step])):
            self._step, other = other, self._step
        return other, False

    def _probe_due(self, other: Any) -> bool:
        """Whether to probe ``other`` now: ``PROBE_EVERY - 2`` steps since the last probe, and
        the time they took at least ``PROBE_EVERY - 2`` times the probe's extra time per step
        (the other kernel's median step less the current one's; nothing when it is faster).
        Two threads are at most 2x one, so on 2 cores this is every ``PROBE_EVERY`` steps;
        16 threads' chess (one thread ~12x slower) probes every ~700 steps instead. The wait is
        set once a cycle, not per step (two medians cost ~0.7 us, a few % of a small step)."""
        if self._calls < PROBE_EVERY - 1:
            return False
        if self._calls == PROBE_EVERY - 1:
            times = self._times
            extra = (statistics.median(times[other]) - statistics.median(times[self._step])
                     if times[other] and times[self._step] else 0.0)
            self._probe_after = (PROBE_EVERY - 2) * extra
        return self._stepped >= self._probe_after

    def compile(self) -> None:
        """Compile the kernels now (first use would do it) by stepping a throwaway copy."""
        probe = NumbaEngine(self.spec, 1, self.mode, first_env_params(self.spec, self.params),
                            self.max_episode_steps, 1)
        probe._step, probe._reset = self._step, self._reset
        try:
            probe.reset(None, np.zeros(1, np.uint64))
            probe.step(valid_actions(self.spec.action_space, 1))
        except KernelIndexError:  # the throwaway env's: this env's own calls report theirs
            pass

    def _call(self, kernel: Any, *args: Any) -> Any:
        """Call a kernel; after its first call, through its compiled entry point.

        The dispatcher's type resolution costs ~2 us per call (most of a 1-env step); the
        engine always passes the same argument types, so it is resolved once.
        """
        if self.checked:
            return self._checked_call(kernel, args)
        entry = self._entry_points.get(kernel)
        if entry is not None:
            return entry(*args)
        if not hasattr(kernel, "overloads"):  # NUMBA_DISABLE_JIT=1: plain Python, debuggable
            return kernel(*args)
        signature = tuple(numba.typeof(a) for a in args)
        result = kernel(*args)  # loaded from disk, or compiled (announced: ``announce``)
        self._entry_points[kernel] = kernel.overloads[signature].entry_point
        if self._adapt and kernel in self._kernels[:2]:
            self._prepare_other(kernel, signature)
        return result

    def _checked_call(self, kernel: Any, args: tuple) -> Any:
        """A bounds-checked kernel's call. An ``IndexError`` (a read or write past an array's
        end) undoes the call (every array it may write is restored: nothing moved), then names
        the first env whose run fails (the kernel on a shorter batch, bisected) and, from env
        i's run as plain Python, the kernel function and line: a ``KernelIndexError``."""
        arrays = {id(a): a for a in _arrays(args) if a.flags.writeable}
        saved = [(a, a.copy()) for a in arrays.values()]

        reset = kernel is self._reset

        def call(n: int) -> Any:  # the kernel on envs 0..n-1 (a step's n is its 2nd argument)
            with numba_boundscheck():  # a first call compiles: checked, everything it calls
                return kernel(n, *args[1:]) if reset else kernel(args[0], n, *args[2:])

        try:
            return call(self.num_envs)
        except IndexError as error:
            found = error
        low, high = 0, self.num_envs - 1  # the first env whose run fails is in low..high
        while low < high:
            middle = (low + high) // 2
            _restore(saved)
            try:
                call(middle + 1)
                low = middle + 1
            except IndexError:
                high = middle
        _restore(saved)
        where = self._python_line(kernel, args, low)
        _restore(saved)
        raise KernelIndexError(
            f"{self.spec.id}: env {low}'s {'reset' if reset else 'step'} indexed an array out "
            f"of bounds{where}; no env moved (the call was undone). {BOUNDS_HINT}"
        ) from found

    def _python_line(self, kernel: Any, args: tuple, i: int) -> str:
        """Where env i's call fails when run as plain Python (``py_func``: NumPy's own
        bounds checks), as " in function (file:line `code`): NumPy's message", or a hint."""
        if kernel is self._reset:
            mask = np.zeros(self.num_envs, np.bool_)
            mask[i] = args[1][i]
            run = functools.partial(_python(kernel), self.num_envs, mask, *args[2:])
        else:  # the serial step's env loop on env i alone: (state, actions, rng, ...)
            run = functools.partial(_python(kernel.range_loop), i, i + 1, *args[2:4],
                                    *args[5:])
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run()
        except IndexError as error:
            where = user_frame(error)
            return f" in {where}: {error}" if where else f": {error}"
        except Exception:  # plain Python differs from numba here: no line
            pass
        return " (run it with NUMBA_DISABLE_JIT=1 to see the line)"

    def _prepare_other(self, kernel: Any, signature: tuple) -> None:
        """Load or compile the adaptive probe's other step kernel now, with the first step's
        (same argument types): else the probe's first step, 63 steps later, compiled it
        (seconds for chess, inside whatever the caller was timing: a 16-core bench read
        0.10M plies/s at 4,096 boards, 40 ms a call, from 64 calls holding the compile)."""
        serial, parallel = self._kernels[:2]
        other = serial if kernel is parallel else parallel
        if other not in self._entry_points:
            other.compile(signature)
            self._entry_points[other] = other.overloads[signature].entry_point

    def _threads(self) -> None:
        if self._parallel:
            numba.set_num_threads(self.num_threads)

    def reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        mask = self._all if mask is None else np.array(mask, dtype=np.bool_)  # C, writable
        if self._handed_out:  # the last step's obs belong to its caller: write into a copy
            self._set_outputs(self._obs_rows.copy(), self.rewards, self.terminated,
                              self.truncated)
            self._handed_out = False
        self._call(self._reset, self.num_envs, mask,
                    self._no_seeds if new_seeds is None else np.array(new_seeds, np.uint64),
                    new_seeds is not None, self._kernel_state, self.rng, self.pending,
                    self._obs_rows)

    @property
    def fresh_outputs(self) -> bool:
        """Whether ``step(actions, fresh=True)`` writes into new arrays: the family writes
        every output row on every step (``NativeEnvSpec.writes_every_output``) and the batch is
        large enough that allocating beats copying (``FRESH_MIN_ENVS``)."""
        return self.spec.writes_every_output and self.num_envs >= FRESH_MIN_ENVS

    @property
    def copies_info(self) -> bool:
        """Whether ``step(actions, copy_info=True)`` writes copies of the info columns
        (``take_info_copies``): the family has info columns (Chess-v0's action mask)."""
        return bool(self._info_columns)

    def step(self, actions: Any, fresh: bool = False, copy_info: bool = False) -> int:
        """Step every env (``Engine.step``). ``fresh``: write this step's obs, rewards and
        flags into new arrays, which become the engine's buffers (the caller may keep them:
        ``copy=True`` without a copy pass; ``reset`` copies the obs before writing).
        ``copy_info``: also copy the info columns into new arrays (``take_info_copies``, the
        caller's to keep); the threaded kernel copies each env's rows once it is done with that
        env, on its threads (no serial copy pass after it), one thread copies after the kernel."""
        a = as_numpy_actions(actions, self.spec, self.num_envs)
        self._threads()
        kernel, timed = self._choose_kernel() if self._adapt else (self._step, False)
        timed = timed and kernel in self._entry_points  # not a first call (a compile)
        obs, rewards, terminated, truncated = self._obs_rows, self.rewards, self.terminated, \
            self.truncated  # (named, not a * call: ~0.2 us less at 1 env)
        if fresh:
            obs, rewards, terminated, truncated = (self._new(b) for b in (
                obs, rewards, terminated, truncated))
        # the threaded kernel copies the info columns, each thread its envs' rows; one thread
        # copies them after the kernel (a per-row copy inside the serial loop measured ~14%
        # slower in chess's user loop than NumPy's copy of the whole buffer)
        in_kernel = copy_info and kernel is self._kernels[1]
        info_out = (tuple(self._new(c) for c in self._info_columns) if in_kernel
                    else self._info_columns)
        t0 = time.perf_counter()
        result = self._call(kernel, self._chunks, self.num_envs, self._kernel_state, a,
                            self.bounds, self.rng, self.max_episode_steps, self.pending,
                            obs, rewards, terminated, truncated, self._final_obs_rows,
                            info_out, in_kernel)
        if timed:
            seconds = time.perf_counter() - t0
            self._times[kernel].append(seconds)
            if kernel is self._step:
                self._stepped += seconds
        if result < 0:  # refused before any env moved: nothing was written
            index = -1 - result
            raise refused_step_error(self.spec, index, a[index],
                                     self.mode == DISABLED and bool(self.pending[index]), self)
        if fresh:
            self._set_outputs(obs, rewards, terminated, truncated)
            self._handed_out = True
        if copy_info:
            self._info_copies = (info_out if in_kernel
                                 else tuple(self.copy(c) for c in self._info_columns))
        return result

    def take_info_copies(self) -> tuple[np.ndarray, ...]:
        """The last ``step(copy_info=True)``'s copies of the info columns, in
        ``spec.info_columns`` order, handed over: the engine keeps no reference (``Spares``
        writes a large one again only once its new owner let it go)."""
        copies, self._info_copies = self._info_copies, ()
        return copies

    def _set_outputs(self, obs_rows: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
                     truncated: np.ndarray) -> None:
        """Make these the buffers the kernels write and the vector env hands out."""
        self._obs_rows, self.rewards, self.terminated, self.truncated = (
            obs_rows, rewards, terminated, truncated)
        self.obs = obs_rows.reshape(self.obs.shape)

    def map_rows(self, row_fn: Any, dtype: Any) -> np.ndarray:
        """A family's per-row kernel function ``row_fn(i, state, rng)`` over every env, one
        ``dtype`` value per env (e.g. chess's random legal actions)."""
        out = np.empty(self.num_envs, dtype=dtype)
        row_map(row_fn)(self.state, self.rng, out)
        return out

    def read_state(self, name: str, i: int) -> Any:
        """Env i's row of state column ``name`` (a view of the live array)."""
        return getattr(self.state, name)[i]

    def write_state(self, name: str, mask: np.ndarray, values: np.ndarray) -> None:
        """Set the masked rows of state column ``name`` from ``values`` (one row per env)."""
        column = getattr(self.state, name)
        column[mask] = values[mask]

    def host_state(self, name: str) -> np.ndarray:
        """State column ``name`` as a NumPy array (the live array itself on this backend)."""
        return getattr(self.state, name)

    def ended_mask(self) -> np.ndarray:
        return self.terminated | self.truncated

    def _new(self, like: np.ndarray) -> np.ndarray:
        """An array of ``like``'s shape and dtype for a fresh output (a spare when large)."""
        if like.nbytes >= SPARE_MIN_BYTES:
            return self._spares.empty(like.shape, like.dtype)
        return np.empty(like.shape, like.dtype)

    def copy(self, array: Any) -> Any:
        """A copy the caller owns; a large one written into a spare when one is free."""
        if array.nbytes >= SPARE_MIN_BYTES:
            return self._spares.copy(array)
        return array.copy()

    def close(self) -> None:
        pass
