"""The backends ``make`` knows, as data: the class that runs each and the options it takes.

One list for every layer that names backends (``registry`` builds from it, ``native/build.py``
finds its engines in it, ``bench`` sweeps it), so a new backend is one entry here. Plain data
and no envfleet imports: cheap to import anywhere (``bench``'s measuring workers).
"""

from __future__ import annotations

from typing import Any

#: native backend -> (path of its engine class or factory, keyword options the backend takes)
NATIVE_BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "numba": ("envfleet.native.numba_backend:NumbaEngine", ("num_threads",)),
    "cuda": ("envfleet.native.cuda_backend:CudaEngine", ("threads_per_block",)),
    "torch": ("envfleet.native.torch_backend:torch_engine", ("device",)),
}
#: executor backend -> (executor class path, keyword options the backend takes)
EXECUTOR_BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "serial": ("envfleet.executors.serial:SerialVectorEnv", ("restart_failed",)),
    "subprocess": ("envfleet.executors.subprocess:SubprocessVectorEnv",
                   ("step_timeout", "start_method", "restart_failed", "batch_size")),
    "pool": ("envfleet.executors.pool:PoolVectorEnv",
             ("num_workers", "step_timeout", "start_method", "pin_workers", "batch_size",
              "restart_failed", "spin_us")),
    "ray": ("envfleet.executors.ray:RayVectorEnv",
            ("num_workers", "envs_per_worker", "address", "num_cpus", "num_gpus", "resources",
             "placement", "runtime_env", "engine", "engine_options", "step_timeout",
             "batch_size", "restart_failed")),
}
#: every value ``make``'s ``backend`` takes
ALL_BACKENDS = ("auto", *NATIVE_BACKENDS, *EXECUTOR_BACKENDS)


class BackendUnavailableError(RuntimeError):
    """The backend exists but cannot run here (a missing package or device)."""


def backend_options(env_kwargs: dict[str, Any], backend: str) -> dict[str, Any]:
    """Move ``backend``'s options out of ``env_kwargs`` (what is left are the env's own
    parameters); refuse another backend's options, naming them."""
    option_names = {**NATIVE_BACKENDS, **EXECUTOR_BACKENDS}[backend][1]
    options = {k: env_kwargs.pop(k) for k in option_names if k in env_kwargs}
    misplaced = [k for k in env_kwargs if any(
        k in o for _, o in (*NATIVE_BACKENDS.values(), *EXECUTOR_BACKENDS.values()))]
    if misplaced:
        raise TypeError(f"option(s) {misplaced} do not apply to backend {backend!r}")
    return options
