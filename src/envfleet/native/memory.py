"""Memory checks before ``make`` allocates: a batch too large for the machine is refused with a
clear error instead of growing until the kernel's OOM killer ends the process."""

from __future__ import annotations

import math
from typing import Any

from envfleet.native.spec import STATE, NativeEnvSpec

#: per-env floor for executors: a Python Gymnasium env object (CartPole: about 3.5 KB) and its
#: batch-buffer rows; the env's own memory is unknowable before it is built
EXECUTOR_BYTES_PER_ENV = 1024
#: copies of each ``copy=True`` output alive at once: the caller's last step's, the step's new
#: one, and a reset's; the numba engine keeps them to write again (``Spares``, up to
#: ``numba_backend.SPARES_PER_SHAPE``: 3)
COPIES_HELD = 3
#: per-env bytes a native engine holds besides its declared buffers (``NativeEnvSpec.buffers``)
#: and its action buffer (8 bytes per component): a reset's mask and new seeds, the cuda
#: engine's all-envs mask / the torch engine's ended mask and step counter row
_ENGINE_SCRATCH = 1 + 8 + 8


class InsufficientMemoryError(MemoryError):
    """``make`` would need more memory than the machine (or the device) has available."""


def available_host_memory() -> int | None:
    """Bytes of host memory available to a new allocation (MemAvailable), None if unknown."""
    try:
        import psutil  # optional: used when installed, never required
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def native_bytes(spec: NativeEnvSpec, num_envs: int, backend: str, *, copy: bool = True,
                 same_step: bool = False) -> int:
    """An estimate of the peak bytes a native env of ``num_envs`` envs of ``spec`` takes
    through ``make``, ``reset`` and its steps: the buffers the spec declares (on numba, less
    the final obs outside SAME_STEP: never written, so never resident), the action batch, the
    engine's scratch, on torch its gathers and the family's ``torch_temporaries``, and with
    ``copy=True`` the outputs it hands out (obs, rewards, flags, info columns), ``COPIES_HELD``
    of each (torch: 2), and SAME_STEP's final obs. Checked against measured resident memory,
    family by family (tests/test_memory.py)."""
    declared = sum(b.nbytes for b in spec.buffers(num_envs))
    obs = _obs_bytes(spec)
    if backend == "numba" and not same_step:
        declared -= obs * num_envs
    per_env = 8 * math.prod(spec.action_space.shape or ()) + _ENGINE_SCRATCH
    copies = COPIES_HELD
    if backend == "torch":  # the host resets' gathers (state, obs, RNG), the family's temporaries
        per_env += _state_bytes(spec) + obs + 24 + spec.torch_temporaries
        copies = 2  # no spares: the caller's last step's and the new step's
    if copy:
        info = sum(b.nbytes for b in spec.buffers(1)
                   if b.role == STATE and b.column in spec.info_columns)
        per_env += copies * (obs + 4 + 1 + 1 + info) + (obs if same_step else 0)
    if same_step:  # the ended envs' mask in ``info``
        per_env += 1
    return declared + per_env * num_envs


def _state_bytes(spec: NativeEnvSpec) -> int:
    """Bytes of one env's state columns (as declared: ``NativeEnvSpec.buffers``)."""
    return sum(b.nbytes for b in spec.buffers(1) if b.role == STATE)


def _obs_bytes(spec: NativeEnvSpec) -> int:
    """Bytes of one env's observation."""
    return next(b.nbytes for b in spec.buffers(1) if b.name == "obs")


def check_memory(needed: int, available: int | None, what: str, where: str,
                 advice: str = "use fewer envs") -> None:
    """Refuse ``what`` when it needs more than ``available`` bytes of ``where`` memory."""
    if available is not None and needed > available:
        raise InsufficientMemoryError(
            f"{what} needs about {_size(needed)} but only {_size(available)} of {where} is "
            f"available: {advice}"
        )


def check_native_memory(spec: NativeEnvSpec, num_envs: int, backend: str,
                        options: dict[str, Any], copy: bool = True,
                        same_step: bool = False) -> None:
    """Refuse a native ``make`` whose buffers and outputs cannot fit in host (or device)
    memory."""
    needed = native_bytes(spec, num_envs, backend, copy=copy, same_step=same_step)
    what = f"make({spec.id!r}, num_envs={num_envs}, backend={backend!r})"
    device = _device_memory(backend, options)
    if device is None:
        check_memory(needed, available_host_memory(), what, "memory (MemAvailable)")
        return
    free, name = device
    if backend == "cuda":  # the state columns are built on the host, then copied
        check_memory(_state_bytes(spec) * num_envs, available_host_memory(), what,
                     "memory (MemAvailable)")
    check_memory(needed, free, what, f"free memory on {name}")


def check_executor_memory(num_envs: int, backend: str) -> None:
    """Refuse an executor ``make`` whose envs cannot fit, at ``EXECUTOR_BYTES_PER_ENV`` each (a
    lower bound: what an env takes is unknowable before it is built)."""
    check_memory(EXECUTOR_BYTES_PER_ENV * num_envs, available_host_memory(),
                 f"make(num_envs={num_envs}, backend={backend!r}), at {EXECUTOR_BYTES_PER_ENV} "
                 "bytes per env or more,", "memory (MemAvailable)")


def _device_memory(backend: str, options: dict[str, Any]) -> tuple[int, str] | None:
    """(free bytes, device name) when the engine allocates on a GPU, None for host memory."""
    if backend == "torch":
        import torch

        from envfleet.native.torch_backend import resolve_device

        device = resolve_device(options.get("device"))
        if device.type != "cuda":
            return None
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), str(device)
    if backend == "cuda":
        import os

        if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
            return None  # the simulator allocates on the host
        from numba import cuda

        free, _ = cuda.current_context().get_memory_info()
        return int(free), "the CUDA device"
    return None


def _size(nbytes: int) -> str:
    """``nbytes`` in GiB or MiB, for messages."""
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.1f} GiB"
    return f"{nbytes / 2**20:.1f} MiB"
