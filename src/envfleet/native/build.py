"""Building a native vector env from a family's spec: the engine, its checks and compile.

``build_native(spec, num_envs, backend, ...)`` is what ``make`` does for a native id once it has
found the family, and what a Ray actor does for its share (``executors/ray.py``): both come
here, so neither imports the other. Nothing env-specific: the family comes in as its
``NativeEnvSpec``. Also here: whether a native backend can run on this machine
(``native_backend_status``) and ``compile_checked``, which compiles a user's family up front
and turns numba's typing traceback into a ``KernelCompileError``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from typing import Any

from gymnasium.vector import AutoresetMode, VectorEnv
from numba.core.errors import NumbaError

from envfleet.backends import NATIVE_BACKENDS, BackendUnavailableError, backend_options
from envfleet.contract import check_make_arguments
from envfleet.native.driver import MODE_CODES
from envfleet.native.jit import (
    BOUNDSCHECK_VARIABLE,
    KERNEL_RULES,
    KernelCompileError,
    _user_location,
    bounds_checked,
)
from envfleet.native.memory import check_native_memory
from envfleet.native.spec import NativeEnvSpec, check_per_env_kwargs, first_env_params
from envfleet.native.vector_env import NativeVectorEnv


def native_backend_status(backend: str) -> str | None:
    """None when native ``backend`` (numba, cuda, torch) can run here, else the reason."""
    if backend == "numba":
        return None
    if backend == "torch":
        return None if _has("torch") else "needs torch: pip install 'envfleet[torch]'"
    if backend == "cuda":
        if not (_has("numba_cuda") and _has("torch")):
            return "needs numba-cuda and torch: pip install 'envfleet[cuda]'"
        if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
            return None
        broken = _cuda_numpy_mismatch()
        if broken:
            return broken
        from numba import cuda

        return None if cuda.is_available() else "no CUDA GPU is visible to numba-cuda"
    raise ValueError(f"{backend!r} is not a native backend; native backends: "
                     f"{', '.join(NATIVE_BACKENDS)}")


def _cuda_numpy_mismatch() -> str | None:
    """Why numba-cuda's CUDA target cannot load with this NumPy (it loads its NumPy support at
    the first kernel compile: numba-cuda 0.30.4 fails there with numpy 2.5, which removed
    ``np.row_stack``), or None."""
    try:
        import numba.cuda.np.arrayobj  # noqa: F401 - imported for the check
    except Exception as error:
        from importlib.metadata import version

        import numpy as np

        return (f"numba-cuda {version('numba-cuda')} does not work with numpy {np.__version__} "
                f"({type(error).__name__}: {error}): pip install 'numpy<2.5' (what "
                f"'envfleet[cuda]' asks for)")
    return None


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def missing_backend(spec: NativeEnvSpec, backend: str) -> str | None:
    """Why family ``spec`` cannot run on native ``backend`` (it has no kernels for it), or None:
    ``make``'s refusal, and the reason ``envfleet bench`` leaves that backend out."""
    if backend in spec.backends:
        return None
    hint = (" (a family runs on torch when its spec gives reset_torch and step_torch)"
            if backend == "torch" and spec.step_torch is None else "")
    return f"{spec.id} has no {backend!r} backend; its backends: {', '.join(spec.backends)}{hint}"


def build_native(spec: NativeEnvSpec, num_envs: int, backend: str, *,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 max_episode_steps: int | None = None, check_compile: bool = False,
                 **env_kwargs: Any) -> VectorEnv:
    """``num_envs`` envs of family ``spec`` on native ``backend``, with ``make``'s checks.

    ``env_kwargs`` holds the backend's options (``num_threads``, ``threads_per_block``,
    ``device``), ``render_mode`` and the family's params. ``check_compile``: compile the
    kernels now and explain a numba typing error (``KernelCompileError``), for users'
    families; envfleet's own compile on first use.
    """
    missing = missing_backend(spec, backend)
    if missing is not None:
        raise BackendUnavailableError(missing)
    mode = check_make_arguments(num_envs, autoreset_mode, seed, max_episode_steps)
    reason = native_backend_status(backend)
    if reason is not None:
        raise BackendUnavailableError(f"backend {backend!r} cannot run here: {reason}")
    options = backend_options(env_kwargs, backend)
    render_mode = env_kwargs.pop("render_mode", None)
    modes = ["rgb_array"] if spec.renderer is not None else []
    if render_mode is not None and render_mode not in modes:
        raise ValueError(f"{spec.id} renders in {modes or 'no mode'}, not render_mode="
                         f"{render_mode!r}")
    check_per_env_kwargs(spec, env_kwargs, num_envs)
    try:
        params = spec.make_params(**env_kwargs)
    except TypeError as error:
        raise TypeError(f"{spec.id}: {error}") from None
    if spec.specialize is not None:
        spec = spec.specialize(params)
    if max_episode_steps is None:
        max_episode_steps = (spec.default_max_steps(params) if spec.default_max_steps
                             else spec.max_episode_steps)
    check_native_memory(spec, num_envs, backend, options, copy=copy,
                        same_step=mode is AutoresetMode.SAME_STEP)
    if backend != "numba" and bounds_checked():
        warnings.warn(f"{BOUNDSCHECK_VARIABLE}=1 checks the numba backend's kernels; the "
                      f"{backend!r} backend runs {spec.id} unchecked: make it with "
                      f"backend='numba' to find the env and the line", stacklevel=3)
    module, cls = NATIVE_BACKENDS[backend][0].split(":")
    engine_cls = getattr(importlib.import_module(module), cls)
    engine = engine_cls(spec, num_envs, MODE_CODES[mode], params, max_episode_steps, **options)
    if check_compile:
        compile_checked(engine, spec.id, backend)
    env_cls = spec.vector_env_class() if spec.vector_env_class else NativeVectorEnv
    return env_cls(spec, num_envs, engine, backend=backend, autoreset_mode=mode, seed=seed,
                   copy=copy)


def _numba_cpu_location(engine: Any) -> str | None:
    """Where numba CPU fails to compile ``engine``'s family (None: it compiles). numba-cuda's
    messages often carry no line of the user's code (an allocation, for one); numba CPU
    compiles the same kernel source under the same rules and names the line."""
    from envfleet.native.numba_backend import NumbaEngine

    try:
        NumbaEngine(engine.spec, 1, engine.mode, first_env_params(engine.spec, engine.params),
                    engine.max_episode_steps, 1).compile()
    except NumbaError as error:
        return _user_location(str(error))
    return None


def compile_checked(engine: Any, env_id: str, backend: str) -> None:
    """Compile ``engine``'s kernels now; a numba error becomes a ``KernelCompileError`` naming
    the family, the user's line (on cuda, where numba CPU also fails, the line numba CPU
    names: the same error reads the same on both) and the kernel rules, with numba's message
    kept as its cause."""
    try:
        engine.compile()
    except NumbaError as error:
        where = None
        if backend == "cuda" and "numba" in engine.spec.backends:
            where = _numba_cpu_location(engine)
        where = where or _user_location(str(error))
        at = f" (at {where})" if where else ""
        raise KernelCompileError(
            f"{env_id}: numba could not compile the env's kernels for the {backend!r} "
            f"backend{at}. {KERNEL_RULES} numba's message, above, names the expression it "
            f"could not type."
        ) from error
