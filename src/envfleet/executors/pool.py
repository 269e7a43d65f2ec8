"""``pool``: W worker processes, each stepping a contiguous share of the envs in a loop.

Observations, rewards and flags are written by the workers straight into shared-memory batch
buffers, and the actions are read from them: per batch, the parent writes the actions, sends
each worker one byte and sleeps until each answers with one byte (``b"k"``; only non-empty
infos are pickled). W defaults to the usable cores, never more than ``num_envs``; any
``num_envs`` works (shares differ by one env at most). ``pin_workers=True`` keeps worker w on
usable core ``w mod cores`` (faster on an otherwise idle machine: no migrations; slower when
other processes want those cores, hence off by default).

First-ready async (EnvPool's ``send`` / ``recv``): with ``batch_size`` B < N, ``send(actions,
env_ids)`` writes those envs' actions into the shared buffers and sends each owning worker one
message with their ids; a worker keeps a queue of envs to step, steps them one at a time and
reports each env on its pipe as soon as it has written its row (8 bytes, or its pickled infos),
so a fast env is never held back by a slow env's batch. ``recv()`` sleeps in ``poll(2)`` until
B envs have reported and returns the B that have waited longest (a FIFO: no env starves), with
``info["env_id"]``. A worker still runs its own envs one after another, so a slow env delays
the envs that share its worker: async pools therefore default to small shares
(``num_workers = min(num_envs, 4 * cores)``). ``reset()`` returns every env's observation as
usual and also queues them for ``recv()`` (EnvPool's async reset: ``reset(); recv(); send()``
works, and so does ``reset(); send(all)``); ``step()`` refuses to run when B < N.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium.vector import AutoresetMode

from envfleet.executors.base import DEFAULT_STEP_TIMEOUT
from envfleet.executors.fleet import check_batch_size
from envfleet.executors.processes import ProcessVectorEnv
from envfleet.executors.shared_batch import SharedBatch
from envfleet.machine import usable_cores

#: how long a worker polls for the next batch before sleeping (``worker.CommandWaiter``):
#: measured on this project's 2-core VM, CartPole-v1 at 64 envs, pool / SyncVectorEnv went from
#: 1.18x (0) to 1.57x (200) in one interleaved run (/tmp-style A/B, 9 rounds)
DEFAULT_SPIN_US = 200.0


class PoolVectorEnv(SharedBatch, ProcessVectorEnv):
    """``num_envs`` Gymnasium envs over ``num_workers`` processes and shared memory."""

    backend = "pool"

    def __init__(self, factories: list[Callable[[], Any]], num_workers: int | None = None, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 start_method: str | None = None, pin_workers: bool = False,
                 batch_size: int | None = None, restart_failed: bool = False,
                 spin_us: float = DEFAULT_SPIN_US) -> None:
        num_envs = len(factories)
        if num_workers is None:
            num_workers = usable_cores()
            if check_batch_size(batch_size, num_envs) < num_envs:  # async: small shares
                num_workers = 4 * num_workers  # isolate slow envs
        super().__init__(factories, num_workers, autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, start_method=start_method,
                         pin_workers=pin_workers, restart_failed=restart_failed,
                         spin_us=spin_us, batch_size=batch_size)
