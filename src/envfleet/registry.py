"""``make``: one entry point from an env id and a backend to a Gymnasium ``VectorEnv``.

``env`` says what, ``backend`` says how. Native families are listed in ``NATIVE_ENVS`` (envfleet's
own, ``envs.FAMILIES``, and those users add with ``register_native_env``); each is also
registered with Gymnasium as ``gym_id(id)`` (``envfleet/<id>``, a namespace's ``/`` as ``-``)
with a ``vector_entry_point``. Any other Gymnasium id, a factory or a list of factories runs on
an executor (``EXECUTOR_BACKENDS``). An id may name the module that registers it,
``module:Id`` (as ``gymnasium.make`` takes it): the module is imported first, here and in the
worker processes that build the env.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from envfleet.atari import is_atari_id, make_atari
from envfleet.backends import (
    ALL_BACKENDS,
    EXECUTOR_BACKENDS,
    NATIVE_BACKENDS,
    BackendUnavailableError,  # noqa: F401 - re-exported: envfleet.registry's public names
    backend_options,
)
from envfleet.contract import check_make_arguments, check_single_action
from envfleet.envs import FAMILIES, NATIVE_ENVS
from envfleet.mujoco import is_mujoco_id, make_mujoco
from envfleet.native.build import build_native, native_backend_status
from envfleet.native.memory import check_executor_memory
from envfleet.native.spec import (
    UNLIMITED_STEPS,
    NativeEnvSpec,
    check_per_env_kwargs,
    check_spec,
)

GYM_NAMESPACE = "envfleet"


class UnknownEnvError(ValueError):
    """``make`` was given an env id that envfleet does not know."""


def backend_status(backend: str) -> str | None:
    """None when ``backend`` can run here, else the reason it cannot."""
    if backend == "ray":
        return None if _has("ray") else "needs ray: pip install 'envfleet[ray]'"
    if backend in EXECUTOR_BACKENDS:
        return None
    if backend in NATIVE_BACKENDS:
        return native_backend_status(backend)
    raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(ALL_BACKENDS[1:])}")


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def available_backends() -> list[str]:
    """The native backends that can run on this machine."""
    return [b for b in NATIVE_BACKENDS if backend_status(b) is None]


def list_envs() -> dict[str, list[str]]:
    """Every env id envfleet knows, with the backends that can run it here."""
    backends = available_backends()
    return {env_id: [b for b in backends if b in spec.backends]
            for env_id, spec in NATIVE_ENVS.items()}


def gym_id(env_id: str) -> str:
    """The Gymnasium id of native family ``env_id``: ``envfleet/<id>``, with a namespace's
    ``/`` as ``-`` (Gymnasium's ids have one namespace): ``MinAtar/Breakout-v1`` is
    ``envfleet/MinAtar-Breakout-v1``."""
    return f"{GYM_NAMESPACE}/{env_id.replace('/', '-')}"


#: native id -> the module whose import registers it (``register_native_env`` called by that
#: module's own top-level code, or the module of a ``module:Id`` id): what a fresh process (a
#: worker, a Ray actor) imports to know a user's id (``importable_id``)
REGISTERED_BY: dict[str, str] = {}


def split_module(env_id: str) -> tuple[str | None, str]:
    """``module:Id`` as (``module``, ``Id``), ``module`` imported first (a user's module registers
    its envs when imported, as ``gymnasium.make("module:Id")`` expects); (None, ``env_id``)
    for an id without one. An UnknownEnvError when the module cannot be imported."""
    module, colon, name = env_id.partition(":")
    if not colon:
        return None, env_id
    if not module or not name:
        raise UnknownEnvError(f"env id {env_id!r}: expected 'module:Id' (a module that "
                              f"registers Id when imported, then the id), e.g. 'mygrid:MyGrid-v0'")
    path = module.startswith(".") or "/" in module or "\\" in module  # no module's name
    try:
        if not path:
            importlib.import_module(module)
    except ImportError as error:
        if not module.endswith(".py"):
            raise UnknownEnvError(
                f"env id {env_id!r}: cannot import module {module!r} ({error}); is the folder "
                f"that holds it on the module search path (PYTHONPATH, or run from that "
                f"folder)?") from None
        path = True
    if path:
        named = module.removesuffix(".py").replace("\\", "/").strip("./").replace("/", ".")
        raise UnknownEnvError(
            f"env id {env_id!r}: {module!r} is a file path; name the module instead, "
            f"'{named}:{name}' (from the folder that holds it, or with that folder on "
            f"PYTHONPATH)")
    return module, name


def importable_id(name: str) -> str:
    """Native id ``name`` as a fresh process resolves it: ``module:name`` when importing
    ``module`` registers it (``REGISTERED_BY``), else ``name`` (envfleet's own ids)."""
    module = REGISTERED_BY.get(name)
    return f"{module}:{name}" if module else name


def _native_name(env_id: str) -> str | None:
    """The native family of ``env_id`` (``CartPole-v1`` or ``envfleet/CartPole-v1``;
    ``MinAtar/Breakout-v1`` or ``envfleet/MinAtar-Breakout-v1``; any of them after ``module:``,
    which is imported first), or None."""
    module, env_id = split_module(env_id)
    if env_id.startswith(f"{GYM_NAMESPACE}/"):  # the Gymnasium form: gym_id(name)
        name = next((i for i in NATIVE_ENVS if gym_id(i) == env_id), None)
    else:
        name = env_id if env_id in NATIVE_ENVS else None
    if name is not None and module is not None and name not in FAMILIES:
        REGISTERED_BY.setdefault(name, module)
    return name


def _native_spec(env_id: str) -> NativeEnvSpec:
    """The native family of ``env_id``, or an UnknownEnvError naming the closest ids."""
    name = _native_name(env_id)
    if name is None:
        raise _unknown_env(env_id)
    return NATIVE_ENVS[name]


def _unknown_env(env_id: str) -> UnknownEnvError:
    """The error for an id neither envfleet nor Gymnasium knows, naming the closest ids: a
    native id's other spelling (``MinAtar-Breakout-v1``, ``envfleet/MinAtar/Breakout-v1``,
    another case) by both its forms, else the closest native and Gymnasium ids."""
    module, colon, bare = env_id.rpartition(":")
    where = f" (importing {module!r} registered no such id)" if colon else ""
    name = bare.removeprefix(f"{GYM_NAMESPACE}/")
    spellings = {form.lower(): native for native in NATIVE_ENVS for form in (
        native, gym_id(native), gym_id(native).removeprefix(f"{GYM_NAMESPACE}/"),
        f"{GYM_NAMESPACE}/{native}")}
    native = spellings.get(bare.lower())
    if native is not None and native != bare:
        why = (": Gymnasium's ids have one namespace, so MinAtar's '/' becomes '-'"
               if "/" in native and bare.count("/") > 1 else "")
        hint = (f"; did you mean {native!r} (envfleet's id) or {gym_id(native)!r} (its "
                f"Gymnasium id{why}; envfleet takes both)?")
    else:
        natives = [i for i in difflib.get_close_matches(name, list(NATIVE_ENVS), n=3,
                                                        cutoff=0.4) if i != name]
        gym_ids = [i for i in gymnasium.registry if not i.startswith(f"{GYM_NAMESPACE}/")]
        others = [i for i in difflib.get_close_matches(bare, gym_ids, n=3, cutoff=0.6)
                  if i not in natives and i != bare]
        close = natives + others
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return UnknownEnvError(
        f"unknown env id {env_id!r}{where}{hint} Native ids: {', '.join(NATIVE_ENVS)} (your "
        f"own: 'module:Id' imports the module that registers it); executors (backend serial, "
        f"subprocess, pool or ray) run any id registered with Gymnasium"
    )


#: the module that registers a namespace's ids when imported (Gymnasium 1.x no longer imports
#: plugins: ``gymnasium.make("ALE/...")`` needs ``import ale_py`` first; ``minatar.gym`` only
#: registers when asked, which ``envs/minatar/reference.py`` does)
NAMESPACE_MODULES = {"ALE": "ale_py", "MinAtar": "envfleet.envs.minatar.reference"}


def _gym_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec:
    """Gymnasium's spec for ``env_id``: what the executors run (``module:Id`` imports ``module``
    first, and so does a known namespace's id: ``ALE/Breakout-v5`` imports ``ale_py``). A
    native id Gymnasium has no env of its own for (a user's ``MyGrid-v0``) is its
    ``envfleet/<id>``: one native env per executor env."""
    module, env_id = split_module(env_id)
    namespace = NAMESPACE_MODULES.get(env_id.split("/", 1)[0]) if "/" in env_id else None
    if namespace is not None and env_id not in gymnasium.registry:
        try:
            importlib.import_module(namespace)
        except ImportError as error:
            raise UnknownEnvError(f"cannot import {namespace!r} for env id {env_id!r}: "
                                  f"{error}") from None
    try:
        return gymnasium.spec(env_id)
    except gymnasium.error.Error:
        pass
    native = _native_name(env_id)
    if native is not None:
        return gymnasium.spec(gym_id(native))
    raise _unknown_env(env_id if module is None else f"{module}:{env_id}")


def make(
    env: str | Callable[[], gymnasium.Env] | Sequence[Callable[[], gymnasium.Env]],
    num_envs: int,
    backend: str = "auto",
    *,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    seed: int | None = None,
    copy: bool = True,
    max_episode_steps: int | None = None,
    **env_kwargs: Any,
) -> VectorEnv:
    """A ``gymnasium.vector.VectorEnv`` of ``num_envs`` copies of ``env`` on ``backend``.

    ``env`` is an env id, a factory (called ``num_envs`` times) or a list of ``num_envs``
    factories. Native ids (``list_envs()``) run on the native backends (``numba``, ``cuda``,
    ``torch``); any Gymnasium id, and any factory, runs on an executor (``serial``,
    ``subprocess``, ``pool``). ``backend="auto"`` picks ``numba`` for native ids, ``pool``
    otherwise; for ``ALE/<Game>-v5`` it picks the Atari engine (``envfleet.atari``: the
    standard preprocessing, bit for bit Gymnasium's ``AtariPreprocessing`` +
    ``FrameStackObservation``), while the executors keep running the raw env; for
    the MuJoCo v5 ids of ``envfleet.mujoco.FAMILIES`` (HalfCheetah-v5, Hopper-v5, Ant-v5...)
    the MuJoCo engine (bit for bit Gymnasium's env), while the executors keep running
    Gymnasium's.

    Backend options go in ``env_kwargs``: ``num_threads`` (numba), ``threads_per_block``
    (cuda), ``device`` (torch), ``num_workers`` and ``batch_size`` (pool; ``batch_size <
    num_envs`` is first-ready async ``send``/``recv``), ``step_timeout`` and ``start_method``
    (subprocess, pool), ``restart_failed`` (executors: rebuild a failed env, end its episode
    as truncated with ``info["env_failure"]``, keep the others running). The rest are the
    env's own parameters: for native envs their params (e.g. ``sutton_barto_reward``), for
    Gymnasium ids ``gymnasium.make``'s keyword arguments. ``copy=False`` returns the backend's
    own buffers (zero-copy, overwritten by the next step), like Gymnasium's ``copy=False``.

    A native id has two forms, ``MinAtar/Breakout-v1`` and its Gymnasium id
    ``envfleet/MinAtar-Breakout-v1``; ``module:Id`` imports ``module`` first (the module that
    registers your env), here and in the worker processes that build it.
    """
    if isinstance(env, str):
        native = _native_name(env)
        if backend == "auto" and native is None and is_atari_id(env):  # the Atari engine
            return make_atari(env, num_envs, autoreset_mode=autoreset_mode, seed=seed,
                              copy=copy, max_episode_steps=max_episode_steps, **env_kwargs)
        if backend == "auto" and native is None and is_mujoco_id(env):  # the MuJoCo engine
            return make_mujoco(env, num_envs, autoreset_mode=autoreset_mode, seed=seed,
                               copy=copy, max_episode_steps=max_episode_steps, **env_kwargs)
        if backend == "auto":
            backend = "numba" if native else "pool"
    elif callable(env) or (isinstance(env, Sequence) and env and all(map(callable, env))):
        native = None
        if backend == "auto":
            backend = "pool"
    else:
        raise TypeError(f"env must be an env id, a factory or a list of factories, "
                        f"got {type(env).__name__}")
    if backend not in NATIVE_BACKENDS and backend not in EXECUTOR_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(ALL_BACKENDS)}")
    if backend == "ray" and native is not None and env_kwargs.get("engine", "numba") == "numba":
        return _make_ray_native(native, num_envs, autoreset_mode=autoreset_mode, seed=seed,
                                copy=copy, max_episode_steps=max_episode_steps, **env_kwargs)
    if backend in EXECUTOR_BACKENDS:
        return _make_executor(env, num_envs, backend, autoreset_mode=autoreset_mode, seed=seed,
                              copy=copy, max_episode_steps=max_episode_steps, **env_kwargs)
    if native is None:
        if isinstance(env, str):
            _gym_spec(env)  # an unknown id is an UnknownEnvError whatever the backend
            what = repr(env)
        else:
            what = "factories"
        raise ValueError(
            f"backend {backend!r} runs envfleet's native envs ({', '.join(NATIVE_ENVS)}); "
            f"run {what} with backend 'serial', 'subprocess' or 'pool'")
    return build_native(NATIVE_ENVS[native], num_envs, backend,
                        autoreset_mode=autoreset_mode, seed=seed, copy=copy,
                        max_episode_steps=max_episode_steps,
                        check_compile=native not in FAMILIES,  # a user's family: up front
                        **env_kwargs)


def _make_executor(env: Any, num_envs: int, backend: str, *,
                   autoreset_mode: AutoresetMode | str, seed: int | None, copy: bool,
                   max_episode_steps: int | None, **env_kwargs: Any) -> VectorEnv:
    """An executor over ``num_envs`` envs from an id, a factory or a list of factories."""
    mode = check_make_arguments(num_envs, autoreset_mode, seed, max_episode_steps)
    options = backend_options(env_kwargs, backend)
    check_executor_memory(num_envs, backend)
    if isinstance(env, str):
        spec = _gym_spec(env)
        if max_episode_steps is not None:
            env_kwargs["max_episode_steps"] = max_episode_steps
        factories = [functools.partial(gymnasium.make, spec, **env_kwargs)] * num_envs
    else:
        if env_kwargs:
            raise TypeError(f"keyword arguments {sorted(env_kwargs)} only apply to env ids; "
                            f"pass them to your factory instead")
        if callable(env):
            factories = [env] * num_envs
        else:
            factories = list(env)
            if len(factories) != num_envs:
                raise ValueError(f"got {len(factories)} factories for num_envs={num_envs}")
        if max_episode_steps is not None:
            factories = [functools.partial(_time_limited, f, max_episode_steps)
                         for f in factories]
    module, cls = EXECUTOR_BACKENDS[backend][0].split(":")
    executor_cls = getattr(importlib.import_module(module), cls)
    return executor_cls(factories, autoreset_mode=mode, seed=seed, copy=copy, **options)


def _make_ray_native(native: str, num_envs: int, *, autoreset_mode: AutoresetMode | str,
                     seed: int | None, copy: bool, max_episode_steps: int | None,
                     **env_kwargs: Any) -> VectorEnv:
    """Native id ``native`` on Ray actors, each stepping its share with the numba kernel."""
    from envfleet.executors.ray import NativeEnvs, RayVectorEnv

    mode = check_make_arguments(num_envs, autoreset_mode, seed, max_episode_steps)
    options = backend_options(env_kwargs, "ray")
    spec = NATIVE_ENVS[native]
    check_per_env_kwargs(spec, env_kwargs, num_envs)
    arrays = [k for k in spec.per_env_params if np.ndim(env_kwargs.get(k, 0)) > 0]
    if arrays:  # each actor makes its share from the same kwargs: they are not split yet
        raise ValueError(f"{spec.id}: per-env {', '.join(arrays)} (an array) is not supported "
                         f"on backend 'ray'; use backend 'numba', 'cuda' or 'torch'")
    try:
        spec.make_params(**{k: v for k, v in env_kwargs.items() if k != "render_mode"})
    except TypeError as error:
        raise TypeError(f"{spec.id}: {error}") from None
    return RayVectorEnv(NativeEnvs(spec.id, num_envs, env_kwargs, max_episode_steps),
                        autoreset_mode=mode, seed=seed, copy=copy, **options)


def _time_limited(factory: Callable[[], gymnasium.Env], max_episode_steps: int) -> gymnasium.Env:
    return gymnasium.wrappers.TimeLimit(factory(), max_episode_steps)


#: the native episode limit of a single env whose limit is Gymnasium's ``TimeLimit`` (never hit)
_NO_LIMIT = UNLIMITED_STEPS


def _gym_time_limit(spec: NativeEnvSpec) -> int | None:
    """The ``max_episode_steps`` registered with Gymnasium for ``spec``: None for a family whose
    limit depends on its params (Chess-v0's ``max_plies``), which then truncates on its own,
    and for one without a limit (``UNLIMITED_STEPS``: MinAtar's games)."""
    if spec.default_max_steps is not None or spec.max_episode_steps >= UNLIMITED_STEPS:
        return None
    return spec.max_episode_steps


class NativeEnv(gymnasium.Env):
    """One env of a native family as a ``gymnasium.Env``: what ``gymnasium.make("envfleet/<id>")``
    builds.

    Underneath, a 1-env native vector env (``numba`` backend, ``Disabled`` autoreset): the same
    spaces, dynamics, seeding and reset options as env 0 of ``envfleet.make(env_id, 1)``;
    ``info`` holds env 0's entries (e.g. Chess-v0's ``action_mask``). Episode limits are
    Gymnasium's ``TimeLimit`` (``gymnasium.make(..., max_episode_steps=N)``), except for
    families whose limit is a param (Chess-v0: ``max_plies``). The family's
    ``single_env_defaults`` apply unless given (Chess-v0: ``illegal_action="lose"``, an illegal
    move ends the game as a loss for the mover, as PettingZoo's chess; ``"raise"`` refuses it).
    """

    def __init__(self, env_id: str, render_mode: str | None = None, **kwargs: Any) -> None:
        spec = _native_spec(env_id)
        kwargs = {**spec.single_env_defaults, **kwargs}
        if _gym_time_limit(spec) is not None:
            kwargs.setdefault("max_episode_steps", _NO_LIMIT)
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        #: the 1-env native vector env that steps this env (its ``state``, family methods)
        self.vector_env = make(spec.id, 1, backend="numba",
                               autoreset_mode=AutoresetMode.DISABLED, **kwargs)
        self.observation_space = self.vector_env.single_observation_space
        self.action_space = self.vector_env.single_action_space
        self.metadata = {"render_modes": list(self.vector_env.metadata.get("render_modes", [])),
                         "render_fps": self.vector_env.metadata.get("render_fps")}
        self.render_mode = render_mode
        self._ended = False  # the episode ended: a step needs a reset first

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode; ``seed`` seeds envfleet's counter-based RNG as env 0's seed."""
        super().reset(seed=seed)  # Gymnasium's np_random, for code that draws from it
        obs, info = self.vector_env.reset(seed=seed, options=options)
        self._ended = False
        return obs[0], self._single_info(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step with one action; after the episode ends, call ``reset()``. A wrong action, or
        a step after the end, is refused in a single env's words (no batch, no env index)."""
        action = check_single_action(action, self.action_space)
        if self._ended:
            raise ValueError("the episode has ended (terminated or truncated): call reset() "
                             "before stepping again")
        obs, reward, terminated, truncated, info = self.vector_env.step(action[None])
        self._ended = bool(terminated[0]) or bool(truncated[0])
        return (obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]),
                self._single_info(info))

    def render(self) -> Any:
        """The frame of the env (when the native family renders)."""
        frames = self.vector_env.render()
        return None if frames is None else frames[0]

    def close(self) -> None:
        """Release the native env (idempotent)."""
        self.vector_env.close()

    @staticmethod
    def _single_info(info: dict[str, Any]) -> dict[str, Any]:
        return {k: v[0] for k, v in info.items() if not k.startswith("_")}


def register_with_gymnasium() -> None:
    """Register ``envfleet/<id>`` for each native env: ``gymnasium.make`` builds a ``NativeEnv``,
    ``gymnasium.make_vec`` (``vector_entry_point``) the native vector env."""
    for env_id, spec in NATIVE_ENVS.items():
        if gym_id(env_id) not in gymnasium.registry:
            _register_gym(spec)


def _register_gym(spec: NativeEnvSpec) -> None:
    """``envfleet/<id>`` with the reference id's ``reward_threshold`` (the "solved" bar that
    Tianshou and rl-zoo read from ``gymnasium.spec``) and the family's own episode limit (for
    envfleet's families, the reference id's: a test keeps them equal)."""
    reference = gymnasium.registry.get(spec.reference_id) if spec.reference_id else None
    env_id = importable_id(spec.id)  # a worker process that builds it imports the module first
    gymnasium.register(
        id=gym_id(spec.id),
        entry_point=functools.partial(NativeEnv, env_id),
        vector_entry_point=functools.partial(make, env_id),
        max_episode_steps=_gym_time_limit(spec),
        reward_threshold=reference.reward_threshold if reference is not None else None,
    )


def register_native_env(spec: NativeEnvSpec, *, replace: bool = False,
                        override_gymnasium: bool = False) -> None:
    """Add a native env family written by a user (docs/NATIVE_ENVS.md): afterwards
    ``make(spec.id, n, backend=...)``, ``list_envs()``, ``gymnasium.make("envfleet/<id>")`` and
    ``gymnasium.make_vec("envfleet/<id>", n, vectorization_mode="vector_entry_point")`` run it.

    ``spec`` is checked first (``InvalidSpecError`` names the field that breaks the rules); its
    kernels compile on the first ``make`` of each backend (``KernelCompileError`` explains a
    numba typing error). An id already registered is refused unless ``replace=True``; envfleet's
    own ids cannot be replaced. An id Gymnasium already has (``CartPole-v0``) is refused unless
    ``override_gymnasium=True``: ``make(id, n)`` would then run your kernels on the native
    backends (``"auto"`` included) while the executor backends keep building Gymnasium's env,
    as for envfleet's own re-implementations.
    """
    check_spec(spec)
    env_id = spec.id
    if env_id in FAMILIES:
        raise ValueError(f"{env_id} is one of envfleet's own envs and cannot be replaced; "
                         f"give your family another id (e.g. another name or version)")
    if env_id in gymnasium.registry and not override_gymnasium:
        raise ValueError(
            f"{env_id} is a Gymnasium id (gymnasium.make({env_id!r}) builds "
            f"{_entry_point_name(gymnasium.registry[env_id])}): registered as a native env, "
            f"make({env_id!r}, n) would run your kernels on the native backends but Gymnasium's "
            f"env on the executor backends (serial, subprocess, pool, ray). Give your family "
            f"another id, or pass override_gymnasium=True if it re-implements that env")
    if env_id in NATIVE_ENVS and not replace:
        raise ValueError(f"{env_id} is already registered; pass replace=True to replace it, or "
                         f"call unregister_native_env({env_id!r}) first")
    full_id = gym_id(env_id)
    if full_id in gymnasium.registry and env_id not in NATIVE_ENVS:
        raise ValueError(f"{full_id} is already registered with Gymnasium by someone else")
    NATIVE_ENVS[env_id] = spec
    module = _registering_module()
    if module is not None:
        REGISTERED_BY[env_id] = module
    else:  # (replace=True from a function: the old module would register the old spec)
        REGISTERED_BY.pop(env_id, None)
    gymnasium.registry.pop(full_id, None)  # replace=True: no "overriding" warning
    _register_gym(spec)


def _registering_module() -> str | None:
    """The module whose import is running ``register_native_env`` now (the nearest module-level
    code on the stack; not ``__main__``, which a fresh process cannot import by name), or None
    (called from a function run later: importing its module would not register the id)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    name = frame.f_globals.get("__name__") if frame is not None else None
    if name in (None, "__main__", "__mp_main__"):
        return None
    return name if getattr(sys.modules.get(name), "__spec__", None) is not None else None


def _entry_point_name(gym_spec: gymnasium.envs.registration.EnvSpec) -> str:
    """What a Gymnasium id builds, for messages: ``module:Class`` or the callable's name."""
    entry = gym_spec.entry_point
    return entry if isinstance(entry, str) else getattr(entry, "__qualname__", repr(entry))


def unregister_native_env(env_id: str) -> None:
    """Remove a family added by ``register_native_env`` (and its ``envfleet/<id>`` Gymnasium
    entry), e.g. at the end of a test."""
    name = _native_name(env_id) or env_id.removeprefix(f"{GYM_NAMESPACE}/")
    if name in FAMILIES:
        raise ValueError(f"{name} is one of envfleet's own envs and cannot be unregistered")
    if name not in NATIVE_ENVS:
        raise UnknownEnvError(f"{env_id!r} is not a registered native env")
    del NATIVE_ENVS[name]
    REGISTERED_BY.pop(name, None)
    gymnasium.registry.pop(gym_id(name), None)
