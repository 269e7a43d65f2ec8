"""The ``torch`` backend: the shared driver's semantics as whole-batch tensor ops on any device.

``torch_engine`` builds the engine ``make(..., backend="torch")`` runs, as one of two routes over
the same buffers and the same batched driver (``torch_engine.TorchEngine``):

- on the host (CPU tensors), ``torch_host.HostTorchEngine``: the bookkeeping runs on NumPy
  views of the buffers; the actions are checked before anything moves, and the envs that reset
  are gathered by index into a smaller batch, so their random draws cost nothing for the others;
- on any other device (or the host with ``tensor_math.HOST_NUMPY`` off),
  ``torch_device.DeviceTorchEngine``: a step is two fixed pieces of work on buffers that never
  move, each ending in one read (were the actions valid; how many episodes ended), with masked
  resets over the whole batch (no index read, no dynamic shape); on a GPU each piece is
  captured once as a CUDA graph and replayed (``graphs.Replay``).
"""

from __future__ import annotations

from typing import Any

from envfleet.native import tensor_math
from envfleet.native.spec import NativeEnvSpec
from envfleet.native.torch_device import DeviceTorchEngine
from envfleet.native.torch_engine import (
    TorchEngine,
    params_to_device,
    resolve_device,
    state_dtype,
    torch_dtype,
)
from envfleet.native.torch_host import HostTorchEngine

__all__ = ["TorchEngine", "params_to_device", "resolve_device", "state_dtype", "torch_dtype",
           "torch_engine"]


def torch_engine(spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, device: Any = None) -> TorchEngine:
    """The torch engine of ``num_envs`` envs of ``spec`` on ``device`` (None: the CPU), with
    autoreset ``mode`` (a driver code): the host route for host memory while
    ``tensor_math.HOST_NUMPY``, the device route otherwise."""
    host = resolve_device(device).type == "cpu" and tensor_math.HOST_NUMPY
    route = HostTorchEngine if host else DeviceTorchEngine
    return route(spec, num_envs, mode, params, max_episode_steps, device)
