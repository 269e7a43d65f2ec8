"""The declaration of a native env family: spaces, per-env state, params and kernels.

One ``NativeEnvSpec`` per family (EnvPool's habit): the engines allocate every buffer from it
(``NativeEnvSpec.buffers``) and lift its scalar kernels; nothing else about the family is
special-cased anywhere.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import math
import numbers
import re
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from envfleet.backends import NATIVE_BACKENDS

#: buffer roles (``Buffer.role``): what a step hands out (obs, rewards, flags); the autoreset
#: driver's bookkeeping (``final_obs``, ``pending``); the counter-based RNG's columns (seeds,
#: episodes, steps); the family's state columns; per-env params values (``split_params``)
OUTPUT, AUTORESET, RNG, STATE, PARAMS = "output", "autoreset", "rng", "state", "params"


@dataclass(frozen=True)
class Buffer:
    """One batch array an engine preallocates: its name (``state.<column>`` and
    ``params.<field>`` for the family's columns), batch shape (``num_envs`` first), NumPy dtype
    and role. Each engine allocates it with its own allocator (NumPy, numba device arrays, a
    torch arena); ``memory.native_bytes`` sums ``nbytes``."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str

    @property
    def column(self) -> str:
        """The name without its role prefix (``state.x_dot`` -> ``x_dot``)."""
        return self.name.partition(".")[2] or self.name

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True, eq=False)
class NativeEnvSpec:
    """One native env family: envfleet's own (``envs/``) or a user's (``register_native_env``).

    ``reset_one(i, state, params, rng, obs)`` and
    ``step_one(i, state, params, actions, rng, obs, rewards, terminated)`` are scalar functions of
    env ``i``'s row, decorated with ``kernel_function`` and compiled for numba CPU and CUDA.
    Truncation (the episode step limit) and autoreset belong to the shared driver, not to the
    family. The fields come in groups: the **core** eight every family declares (``id`` to
    ``step_one``); then, all optional, the **torch forms** (the same dynamics as whole-batch
    tensor ops), **about** the family, **hooks** (declarations and functions a family adds:
    tables, info columns, per-env params, rendering; Chess-v0's action check, params split and
    vector env class) and **tuning** (where and how fast it runs, never what it computes). The
    rules a spec follows: ``check_spec`` and docs/NATIVE_ENVS.md.
    """

    # --- core: what every family declares -----------------------------------------------------
    #: ``"Name-vN"`` (Gymnasium's pattern, no namespace); also registered as ``envfleet/Name-vN``
    id: str
    #: a ``Box`` of numbers; kernels see ``obs`` as rows ``(num_envs, obs_size)``
    observation_space: spaces.Box
    #: ``Discrete`` (kernels get int64 ``actions``) or ``Box`` (float64 rows)
    action_space: spaces.Space
    #: per-env state columns: name -> (dtype, per-env shape)
    state: dict[str, tuple[type, tuple[int, ...]]]
    #: builds the params record (a NamedTuple) from the env's keyword arguments
    make_params: Callable[..., tuple]
    #: the default episode limit in steps (``UNLIMITED_STEPS``: none)
    max_episode_steps: int
    #: ``reset_one(i, state, params, rng, obs)``: start env i's episode (kernel code)
    reset_one: Callable[..., None]
    #: ``step_one(i, state, params, actions, rng, obs, rewards, terminated)``: step env i
    step_one: Callable[..., None]

    # --- torch forms (optional): the same dynamics as whole-batch tensor ops ------------------
    #: the batched tensor forms for the torch backend (None: the family does not run on torch)
    reset_torch: Callable[..., None] | None = None
    step_torch: Callable[..., None] | None = None
    #: bytes per env that ``reset_torch`` / ``step_torch`` hold in temporaries at their peak on
    #: the CPU (``memory.native_bytes``: besides the engine's buffers); measured per family
    torch_temporaries: int = 0

    # --- about the family (optional) ----------------------------------------------------------
    #: the Gymnasium id of the reference implementation (bench baselines, agreement tests)
    reference_id: str = ""
    #: one line saying what the family is
    description: str = ""

    # --- hooks (optional, default "none"; CartPole uses per_env_params and renderer) ----------
    #: shared constant arrays (lookup tables): name -> array, appended to the state NamedTuple
    #: after the per-env columns, so they reach every kernel as arguments (never as captured
    #: globals); built once per process by the family, copied to the device once per engine
    tables: Callable[[], dict[str, np.ndarray]] | None = None
    #: state columns returned in ``info`` on every reset and step (e.g. ``action_mask``)
    info_columns: tuple[str, ...] = ()
    #: the params record fields that may hold one value per env (domain randomisation):
    #: ``make`` takes a keyword of that name as one number or an array of ``num_envs`` numbers
    #: (fields the family derives from such keywords, e.g. CartPole's ``total_mass``, are
    #: listed too). A field given one value is compiled in as today; only a record holding an
    #: array compiles the variant that reads that field from a per-env column (``split_params``)
    per_env_params: tuple[str, ...] = ()
    #: keyword defaults of ``gymnasium.make("envfleet/<id>")`` (one env, ``NativeEnv``) that the
    #: vector API does not take: Chess-v0's ``illegal_action="lose"`` (PettingZoo's rule), as
    #: single-env tools (Gymnasium's ``check_env``, TorchRL's probes) step unmasked actions
    single_env_defaults: dict[str, Any] = field(default_factory=dict)
    #: draws an env from its state with the reference env's own renderer:
    #: ``renderer(params)`` -> an object with ``fps``, ``draw(row) -> RGB array`` (``row``:
    #: state column name -> that env's value) and ``close()``; None: the family cannot render
    renderer: Callable[[tuple], Any] | None = None
    # Chess-v0's hooks: functions of the state or of the params record
    #: per-env action check that sees the state: ``action_check(i, state, params, actions)``
    #: -> bool (kernel code); a step with any env failing it is refused before any env moves
    action_check: Callable[..., bool] | None = None
    #: the error text for an in-range action refused by ``action_check``:
    #: ``describe_refusal(index, value, engine) -> str``
    describe_refusal: Callable[[int, Any, Any], str] | None = None
    #: the part of the params record the kernels see (compiled in on numba: one compile per
    #: distinct value); the rest stays on the engine (``engine.params``) for the family's env
    kernel_params: Callable[[tuple], tuple] | None = None
    #: the spec to use for a params record (e.g. a different observation space)
    specialize: Callable[[tuple], NativeEnvSpec] | None = None
    #: the default episode limit (in steps) for a params record
    default_max_steps: Callable[[tuple], int] | None = None
    #: returns the ``NativeVectorEnv`` subclass to build (family methods and reset options)
    vector_env_class: Callable[[], type] | None = None

    # --- tuning (optional): where and how fast it runs, never what it computes ----------------
    #: the native backends that can run this family (None: numba and cuda, plus torch when
    #: ``reset_torch`` and ``step_torch`` are given)
    backends: tuple[str, ...] | None = None
    #: numba: the fewest envs stepped by the parallel kernel (None: the backend's default,
    #: tuned for cheap steps; an env family with microsecond steps gains from threads sooner)
    parallel_min_envs: int | None = None
    #: ``step_one`` writes env i's whole ``obs`` row, ``rewards[i]`` and ``terminated[i]`` on
    #: every call (and ``reset_one`` the whole row): numba's ``copy=True`` steps then write
    #: straight into new arrays instead of copying the buffers after the step
    writes_every_output: bool = False
    #: seconds a first compile usually takes (numba, 2 cores): the first-compile notice's hint
    compile_seconds: float = 2.0
    #: floating-point operations per env-step counted from ``step_one``'s expressions (+, -, *,
    #: / and each sin / cos / fmod as one; the roofline study's compute bound); None: not
    #: counted (e.g. Chess-v0's integer bitboard work)
    flops_per_step: int | None = None

    def __post_init__(self) -> None:
        if self.backends is None:
            torch = self.reset_torch is not None and self.step_torch is not None
            object.__setattr__(self, "backends", ("numba", "cuda", *(("torch",) if torch else ())))

    @functools.cached_property
    def state_type(self) -> type:
        """The NamedTuple class of the per-env state arrays (and shared tables), one per family:
        numba types a NamedTuple by its class, so a class per env would recompile every kernel
        per env."""
        name = re.sub(r"\W", "_", str(self.id).split("-")[0])
        if not name.isidentifier():  # e.g. an id starting with a digit
            name = f"Env{name}"
        return namedtuple(f"{name}State", [*self.state, *self.table_names])

    @functools.cached_property
    def table_names(self) -> tuple[str, ...]:
        return tuple(self.tables()) if self.tables is not None else ()

    def buffers(self, num_envs: int, per_env: tuple[str, ...] = ()) -> tuple[Buffer, ...]:
        """Every batch buffer of ``num_envs`` envs, declared once for the three engines and the
        memory estimate: the outputs, the autoreset driver's, the RNG's columns, the state
        columns, then one float64 column per per-env params field named in ``per_env``.
        (The shared ``tables`` are not per env: each engine takes them as the family builds
        them.) A family's extra per-env arrays (e.g. Chess-v0's action masks) are state
        columns: they come from ``state``."""
        n = num_envs
        obs = self.observation_space
        flag = np.dtype(np.bool_)
        return (
            Buffer("obs", (n, *obs.shape), np.dtype(obs.dtype), OUTPUT),
            Buffer("rewards", (n,), np.dtype(np.float32), OUTPUT),
            Buffer("terminated", (n,), flag, OUTPUT),
            Buffer("truncated", (n,), flag, OUTPUT),
            Buffer("final_obs", (n, *obs.shape), np.dtype(obs.dtype), AUTORESET),
            Buffer("pending", (n,), flag, AUTORESET),
            # the counter-based RNG's (seeds, episodes, steps): ``rng.env_uniform``
            Buffer("seeds", (n,), np.dtype(np.uint64), RNG),
            Buffer("episodes", (n,), np.dtype(np.uint64), RNG),
            Buffer("steps", (n,), np.dtype(np.int64), RNG),
            *(Buffer(f"state.{name}", (n, *shape), np.dtype(dtype), STATE)
              for name, (dtype, shape) in self.state.items()),
            *(Buffer(f"params.{name}", (n,), np.dtype(np.float64), PARAMS) for name in per_env),
        )

    def allocate_state(self, num_envs: int) -> dict[str, np.ndarray]:
        """Zeroed NumPy arrays for every state column (``buffers``), then the shared tables
        (not copied)."""
        columns = {b.column: np.zeros(b.shape, b.dtype)
                   for b in self.buffers(num_envs) if b.role == STATE}
        if self.tables is not None:
            columns.update(self.tables())
        return columns

    def state_from(self, buffers: dict[str, Any], tables: dict[str, Any]) -> tuple:
        """The ``state_type`` record over an engine's buffers by name (``buffers``'
        ``state.<column>`` entries) and its copy of the shared tables."""
        return self.state_type(*(buffers[f"state.{name}"] for name in self.state),
                               *(tables[name] for name in self.table_names))


def one_value(value: Any) -> Any:
    """``value``, or the number a 0-d NumPy array holds (``np.array(9.8)`` is one value)."""
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


def as_float(name: str, value: Any) -> float:
    """``float(value)``; a number beyond float64's range (``10**400``) is a ``ValueError``
    naming ``name``, not Python's ``OverflowError``."""
    try:
        return float(value)
    except OverflowError:
        size = (f"about {'-' if value < 0 else ''}10**{math.log10(abs(value)):.0f}"
                if isinstance(value, numbers.Integral) else "a number")
        raise ValueError(f"{name} must be finite, got {size}, beyond float64's range "
                         f"(+-1.8e308)") from None


def finite_param(name: str, value: Any) -> float:
    """A family's real-valued constructor argument as a float: a real number or a 0-d array
    of one (``TypeError`` otherwise) that is finite (``ValueError`` otherwise)."""
    value = one_value(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    number = as_float(name, value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return number


def physics_param(name: str, value: Any, *, positive: bool = False) -> float | np.ndarray:
    """A family's physics parameter as one float (``finite_param``: a number or a 0-d array)
    or, for a 1-D array (one value per env), a read-only float64 copy; finite, and above 0 when
    ``positive``. The errors name the parameter and, for an array, the first bad env."""
    if np.ndim(value) == 0:
        number = finite_param(name, value)
        if positive and not number > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")
        return number
    array = np.asarray(value)
    if array.ndim != 1 or array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be one real number or a 1-D array of real numbers (one "
                         f"per env), got an array of shape {array.shape} and dtype {array.dtype}")
    array = array.astype(np.float64)  # a copy: the user's array may change later
    bad = ~np.isfinite(array) | ((array <= 0) if positive else False)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        need = "finite and > 0" if positive else "finite"
        raise ValueError(f"{name}[{i}] (env {i}) must be {need}, got {float(array[i])!r}")
    array.flags.writeable = False
    return array


def check_per_env_kwargs(spec: NativeEnvSpec, kwargs: dict[str, Any], num_envs: int) -> None:
    """Refuse, before ``make_params`` runs, a keyword given as an array that cannot vary per
    env or whose shape is not ``(num_envs,)``."""
    for name, value in kwargs.items():
        if isinstance(value, str | bytes) or np.ndim(value) == 0:
            continue
        shape = np.shape(value)
        if name not in spec.per_env_params:
            if spec.per_env_params and isinstance(value, np.ndarray | list | tuple):
                raise ValueError(f"{spec.id}: {name} takes one value; the parameters that may "
                                 f"vary per env are {', '.join(spec.per_env_params)}")
            continue
        if shape != (num_envs,):
            raise ValueError(f"{spec.id}: {name} must be one number or an array of num_envs="
                             f"{num_envs} numbers (one per env), got shape {shape}")


def split_params(spec: NativeEnvSpec, params: tuple,
                 num_envs: int) -> tuple[tuple, tuple[str, ...], tuple[np.ndarray, ...]]:
    """``(constant, names, columns)``: the kernel params record with each per-env array field
    (listed in ``spec.per_env_params``) replaced by 0.0, so that it can be compiled in, the
    names of those fields and their float64 arrays, one value per env. No array: ``(params,
    (), ())``, compiled exactly as a family without per-env params."""
    names = tuple(name for name in spec.per_env_params
                  if isinstance(getattr(params, name), np.ndarray))
    if not names:
        return params, (), ()
    columns = []
    for name in names:
        column = np.array(getattr(params, name), dtype=np.float64)  # a copy, C-contiguous
        if column.shape != (num_envs,):
            raise ValueError(f"{spec.id}: params.{name} must hold one value or num_envs="
                             f"{num_envs} values, got shape {column.shape}")
        column.flags.writeable = False  # one compiled signature (read-only arrays)
        columns.append(column)
    return params._replace(**dict.fromkeys(names, 0.0)), names, tuple(columns)


def first_env_params(spec: NativeEnvSpec, params: tuple) -> tuple:
    """``params`` with each per-env array cut to its first value's array (a 1-env copy that
    compiles to the same kernels, e.g. to compile ahead)."""
    arrays = {name: getattr(params, name)[:1] for name in spec.per_env_params
              if isinstance(getattr(params, name, None), np.ndarray)}
    return params._replace(**arrays) if arrays else params


# --- the rules a spec must follow (checked when a user registers a family) -----------------


class InvalidSpecError(ValueError):
    """A ``NativeEnvSpec`` breaks the kernel contract's rules; the message names the field."""


#: the native backends a family may list
NATIVE_BACKEND_NAMES = tuple(NATIVE_BACKENDS)
#: the env id pattern: Gymnasium's "Name-vN" (envfleet adds the ``envfleet/`` namespace), or
#: "MinAtar/Name-vN", the namespace of the ``minatar`` package's own ids (the MinAtar families
#: keep them; Gymnasium gets them as ``envfleet/MinAtar-Name-vN``: ``registry.gym_id``)
ID_PATTERN = re.compile(r"^(?:MinAtar/)?[\w.-]+?-v(\d+)$")
#: ``max_episode_steps`` of a family whose reference has no episode limit (MinAtar's games):
#: never reached, and registered with Gymnasium as no limit
UNLIMITED_STEPS = 2**62
#: each kernel's arguments, in order
KERNEL_ARGUMENTS = {
    "reset_one": ("i", "state", "params", "rng", "obs"),
    "step_one": ("i", "state", "params", "actions", "rng", "obs", "rewards", "terminated"),
    "action_check": ("i", "state", "params", "actions"),
    "reset_torch": ("mask", "state", "params", "rng", "obs"),
    "step_torch": ("state", "params", "actions", "rng", "obs", "rewards", "terminated"),
}
_NUMERIC_KINDS = "biuf"  # bool, int, uint, float: what both numba and CUDA device code hold


def check_spec(spec: Any) -> None:
    """Raise ``InvalidSpecError`` naming the first field of ``spec`` that breaks the rules
    (docs/NATIVE_ENVS.md), before any kernel compiles."""
    if not isinstance(spec, NativeEnvSpec):
        raise InvalidSpecError(f"expected a NativeEnvSpec, got {type(spec).__name__}")
    env_id = spec.id
    if not isinstance(env_id, str) or not ID_PATTERN.match(env_id):
        raise InvalidSpecError(
            f"NativeEnvSpec.id must be a Gymnasium id 'Name-vN' without a namespace (letters, "
            f"digits, '_', '.', '-', then the version, e.g. 'GridWalk-v0'), got {env_id!r}")

    def fail(field_name: str, problem: str) -> InvalidSpecError:
        return InvalidSpecError(f"{env_id}: NativeEnvSpec.{field_name} {problem}")

    _check_spaces(spec, fail)
    _check_state(spec, fail)
    steps = spec.max_episode_steps
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
        raise fail("max_episode_steps", f"must be an int >= 1 (the episode limit), got {steps!r}")
    _check_kernels(spec, fail)
    _check_params(spec, fail)
    backends = spec.backends
    if (not isinstance(backends, tuple) or not backends
            or any(b not in NATIVE_BACKEND_NAMES for b in backends)):
        raise fail("backends", f"must be a non-empty tuple of {NATIVE_BACKEND_NAMES}, "
                               f"got {backends!r}")
    if "torch" in backends:
        if spec.reset_torch is None or spec.step_torch is None:
            raise fail("backends", "lists 'torch' but reset_torch / step_torch (the batched "
                                   "tensor forms) are not given")
        if spec.tables is not None:
            raise fail("backends", "lists 'torch', but the torch backend does not take lookup "
                                   "tables (spec.tables): leave 'torch' out")
    _check_info_columns(spec, fail)
    flops = spec.flops_per_step
    if flops is not None and (isinstance(flops, bool) or not isinstance(flops, int) or flops < 1):
        raise fail("flops_per_step", f"must be an int >= 1 or None, got {flops!r}")
    for name in ("kernel_params", "specialize", "default_max_steps", "vector_env_class",
                 "describe_refusal", "renderer"):
        value = getattr(spec, name)
        if value is not None and not callable(value):
            raise fail(name, f"must be a function or None, got {type(value).__name__}")


def _check_info_columns(spec: NativeEnvSpec, fail: Callable[[str, str], Exception]) -> None:
    """``info_columns``: a tuple (or list) of state column names; a bare string is refused
    rather than read as one column per character."""
    columns = spec.info_columns
    if isinstance(columns, str | bytes) or not isinstance(columns, tuple | list):
        hint = f" (one column: write ({columns!r},))" if isinstance(columns, str) else ""
        raise fail("info_columns", f"must be a tuple of state column names, got "
                                   f"{type(columns).__name__} {columns!r}{hint}")
    for name in columns:
        if not isinstance(name, str) or name not in spec.state:
            raise fail("info_columns", f"names {name!r}, which is not a state column "
                                       f"({', '.join(spec.state)})")


def _call_user(fail: Callable[[str, str], Exception], field_name: str, fn: Callable[..., Any],
               *args: Any) -> Any:
    """``fn(*args)``, a function the spec gives; an exception it raises is refused as an
    ``InvalidSpecError`` naming the field (the user's exception kept as its cause)."""
    if not callable(fn):
        raise fail(field_name, f"must be a function or None, got {type(fn).__name__}")
    try:
        return fn(*args)
    except Exception as error:  # reported with its type, as the user wrote it
        raise fail(f"{field_name}()", f"raised {type(error).__name__}: {error}") from error


def _check_spaces(spec: NativeEnvSpec, fail: Callable[[str, str], Exception]) -> None:
    obs = spec.observation_space
    if not isinstance(obs, spaces.Box) or np.dtype(obs.dtype).kind not in _NUMERIC_KINDS:
        raise fail("observation_space", f"must be a gymnasium.spaces.Box of numbers (the "
                                        f"kernels write each env's row of one array), got {obs!r}")
    action = spec.action_space
    if not isinstance(action, spaces.Discrete | spaces.Box):
        raise fail("action_space", f"must be a gymnasium.spaces.Discrete or Box, got {action!r}")


def _check_state(spec: NativeEnvSpec, fail: Callable[[str, str], Exception]) -> None:
    """State columns: ``name -> (NumPy dtype, per-env shape)``; names usable as fields."""
    if not isinstance(spec.state, dict):
        raise fail("state", f"must be a dict name -> (dtype, shape), got "
                            f"{type(spec.state).__name__}")
    for name, column in spec.state.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_") \
                or keyword.iskeyword(name):
            raise fail("state", f"column name {name!r} must be a Python identifier not starting "
                                f"with '_' (kernels read it as state.{name})")
        if not isinstance(column, tuple) or len(column) != 2:
            raise fail("state", f"column {name!r} must be a (dtype, shape) pair such as "
                                f"(np.float64, ()), got {column!r}")
        dtype, shape = column
        try:
            kind = np.dtype(dtype).kind
        except TypeError:
            kind = None
        if kind not in tuple(_NUMERIC_KINDS) or dtype is None:
            raise fail("state", f"column {name!r} has dtype {dtype!r}; use a NumPy number or "
                                f"bool dtype (np.float64, np.int32, np.bool_, ...)")
        if not isinstance(shape, tuple) or not all(
                isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0
                for d in shape):
            raise fail("state", f"column {name!r} has shape {shape!r}; use a tuple of ints, "
                                f"() for one value per env")
    tables = spec.tables
    if tables is None:
        return
    if not callable(tables):
        raise fail("tables", f"must be a function returning name -> array, got "
                             f"{type(tables).__name__}")
    built = _call_user(fail, "tables", tables)
    if not isinstance(built, dict):
        raise fail("tables", f"must return a dict name -> NumPy array, returned "
                             f"{type(built).__name__}")
    for name, array in built.items():
        if name in spec.state or not isinstance(name, str) or not name.isidentifier() \
                or name.startswith("_") or keyword.iskeyword(name):
            raise fail("tables", f"table name {name!r} must be an identifier not starting with "
                                 f"'_' and not a state column")
        if not isinstance(array, np.ndarray) or array.dtype.kind not in _NUMERIC_KINDS:
            raise fail("tables", f"table {name!r} must be a NumPy array of numbers, got "
                                 f"{type(array).__name__}")


def _check_kernels(spec: NativeEnvSpec, fail: Callable[[str, str], Exception]) -> None:
    """Scalar kernels decorated with ``kernel_function``, torch forms plain functions; each
    taking the contract's arguments."""
    from envfleet.native.jit import is_kernel_function

    for name in ("reset_one", "step_one", "action_check", "reset_torch", "step_torch"):
        fn = getattr(spec, name)
        if fn is None:
            if name in ("reset_one", "step_one"):
                raise fail(name, "is missing: every family needs reset_one and step_one")
            continue
        if not callable(fn):
            raise fail(name, f"must be a function, got {type(fn).__name__}")
        if name.endswith("_torch"):
            if (spec.reset_torch is None) != (spec.step_torch is None):
                raise fail(name, "is given alone: give both reset_torch and step_torch or "
                                 "neither")
        elif not is_kernel_function(fn):
            how = ("is a numba.njit dispatcher, which CUDA device code cannot call"
                   if hasattr(fn, "py_func") else "is not decorated")
            raise fail(name, f"{how}: decorate it (and every helper it calls) with "
                             f"@envfleet.kernels.kernel_function, so one source compiles for "
                             f"numba and CUDA")
        arguments = KERNEL_ARGUMENTS[name]
        try:
            inspect.signature(fn).bind(*arguments)
        except TypeError:
            raise fail(name, f"must take {len(arguments)} arguments ({', '.join(arguments)}), "
                             f"its signature is {inspect.signature(fn)}") from None
        except ValueError:  # no signature to inspect (a builtin): numba will say
            pass


def _check_params(spec: NativeEnvSpec, fail: Callable[[str, str], Exception]) -> None:
    """``make_params()`` (all defaults) returns a NamedTuple whose kernel part holds numbers,
    bools and NumPy arrays only."""
    if not callable(spec.make_params):
        raise fail("make_params", f"must be a function returning a NamedTuple, got "
                                  f"{type(spec.make_params).__name__}")
    try:
        params = spec.make_params()
    except Exception as error:  # reported with its type, as the user wrote it
        raise fail("make_params()", f"raised {type(error).__name__}: {error}; every param "
                                    f"needs a default, so that make(id, n) works") from error
    defaults = spec.single_env_defaults
    if not isinstance(defaults, dict) or not all(isinstance(k, str) for k in defaults):
        raise fail("single_env_defaults", f"must be a dict of make_params keywords, got "
                                          f"{defaults!r}")
    try:
        spec.make_params(**defaults)
    except Exception as error:  # reported with its type, as the user wrote it
        raise fail("single_env_defaults", f"{defaults!r} do not make params: make_params raised "
                                          f"{type(error).__name__}: {error}") from error
    kernel_params = (_call_user(fail, "kernel_params", spec.kernel_params, params)
                     if spec.kernel_params else params)
    if not isinstance(kernel_params, tuple) or not hasattr(kernel_params, "_fields"):
        raise fail("make_params", f"must return a NamedTuple (kernels read params.<name>), "
                                  f"returned {type(kernel_params).__name__}")
    per_env = spec.per_env_params
    if not isinstance(per_env, tuple) or any(
            name not in kernel_params._fields for name in per_env):
        raise fail("per_env_params", f"must be a tuple of the kernel params record's fields "
                                     f"({', '.join(kernel_params._fields)}), got {per_env!r}")
    for name, value in zip(kernel_params._fields, kernel_params, strict=True):
        number = isinstance(value, bool | int | float | np.number | np.bool_)
        array = isinstance(value, np.ndarray) and value.dtype.kind in _NUMERIC_KINDS
        if not (number or array):
            raise fail("make_params", f"returned params.{name} = {value!r} "
                                      f"({type(value).__name__}); kernels take numbers, bools "
                                      f"and NumPy arrays of numbers")
