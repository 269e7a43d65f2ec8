"""``make``: one entry point from an env id and a backend to a Gymnasium ``VectorEnv``.

``env`` says what, ``backend`` says how. Native families are listed in ``NATIVE_ENVS``; each is
also registered with Gymnasium as ``envfleet/<id>`` with a ``vector_entry_point``.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import os
from typing import Any

import gymnasium
from gymnasium.vector import AutoresetMode, VectorEnv

from envfleet.native import cartpole
from envfleet.native.driver import MODE_CODES
from envfleet.native.spec import NativeEnvSpec
from envfleet.native.vector_env import NativeVectorEnv, parse_autoreset_mode

NATIVE_ENVS: dict[str, NativeEnvSpec] = {spec.id: spec for spec in (cartpole.SPEC,)}

#: backend -> (engine class path, keyword options the backend takes)
NATIVE_BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "numba": ("envfleet.native.numba_backend:NumbaEngine", ("num_threads",)),
    "cuda": ("envfleet.native.cuda_backend:CudaEngine", ("threads_per_block",)),
    "torch": ("envfleet.native.torch_backend:TorchEngine", ("device",)),
}
GYM_NAMESPACE = "envfleet"


class UnknownEnvError(ValueError):
    """``make`` was given an env id that envfleet does not know."""


class BackendUnavailableError(RuntimeError):
    """The backend exists but cannot run here (a missing package or device)."""


def backend_status(backend: str) -> str | None:
    """None when ``backend`` can run here, else the reason it cannot."""
    if backend == "numba":
        return None
    if backend == "torch":
        return None if _has("torch") else "needs torch: pip install 'envfleet[torch]'"
    if backend == "cuda":
        if not (_has("numba_cuda") and _has("torch")):
            return "needs numba-cuda and torch: pip install 'envfleet[cuda]'"
        if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
            return None
        from numba import cuda

        return None if cuda.is_available() else "no CUDA GPU is visible to numba-cuda"
    raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(NATIVE_BACKENDS)}")


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def available_backends() -> list[str]:
    """The native backends that can run on this machine."""
    return [b for b in NATIVE_BACKENDS if backend_status(b) is None]


def list_envs() -> dict[str, list[str]]:
    """Every env id envfleet knows, with the backends that can run it here."""
    backends = available_backends()
    return {env_id: list(backends) for env_id in NATIVE_ENVS}


def _native_spec(env_id: str) -> NativeEnvSpec:
    name = env_id.removeprefix(f"{GYM_NAMESPACE}/")
    if name in NATIVE_ENVS:
        return NATIVE_ENVS[name]
    close = difflib.get_close_matches(name, list(NATIVE_ENVS), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise UnknownEnvError(
        f"unknown env id {env_id!r}{hint} Known ids: {', '.join(NATIVE_ENVS)}"
    )


def make(
    env: str,
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

    ``backend="auto"`` picks ``numba`` for native envs. Backend options (``num_threads`` for
    numba, ``threads_per_block`` for cuda, ``device`` for torch) and the env's own parameters
    (e.g. ``sutton_barto_reward``) go in ``env_kwargs``. ``copy=False`` returns the engine's own
    buffers (zero-copy, overwritten by the next step), like Gymnasium's ``copy=False``.
    """
    if not isinstance(env, str):
        raise TypeError(f"env must be an env id string, got {type(env).__name__}")
    spec = _native_spec(env)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if backend == "auto":
        backend = "numba"
    if backend not in NATIVE_BACKENDS:
        raise ValueError(
            f"unknown backend {backend!r}; valid backends: auto, {', '.join(NATIVE_BACKENDS)}"
        )
    reason = backend_status(backend)
    if reason is not None:
        raise BackendUnavailableError(f"backend {backend!r} cannot run here: {reason}")
    mode = parse_autoreset_mode(autoreset_mode)
    if max_episode_steps is None:
        max_episode_steps = spec.max_episode_steps
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) \
            or max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be an int >= 1, got {max_episode_steps!r}")

    engine_path, option_names = NATIVE_BACKENDS[backend]
    options = {k: env_kwargs.pop(k) for k in option_names if k in env_kwargs}
    misplaced = [k for k in env_kwargs if any(k in o for _, o in NATIVE_BACKENDS.values())]
    if misplaced:
        raise TypeError(f"option(s) {misplaced} do not apply to backend {backend!r}")
    try:
        params = spec.make_params(**env_kwargs)
    except TypeError as error:
        raise TypeError(f"{spec.id}: {error}") from None
    module, cls = engine_path.split(":")
    engine_cls = getattr(importlib.import_module(module), cls)
    engine = engine_cls(spec, num_envs, MODE_CODES[mode], params, max_episode_steps, **options)
    return NativeVectorEnv(spec, num_envs, engine, backend=backend, autoreset_mode=mode,
                           seed=seed, copy=copy)


def register_with_gymnasium() -> None:
    """Register ``envfleet/<id>`` for each native env (``gymnasium.make_vec`` finds our kernels).

    The single-env entry point is the reference Gymnasium env, so ``gymnasium.make`` still works.
    """
    for env_id, spec in NATIVE_ENVS.items():
        full_id = f"{GYM_NAMESPACE}/{env_id}"
        if full_id in gymnasium.registry:
            continue
        reference = gymnasium.spec(spec.reference_id)
        gymnasium.register(
            id=full_id,
            entry_point=reference.entry_point,
            vector_entry_point=functools.partial(make, env_id),
            max_episode_steps=spec.max_episode_steps,
        )
