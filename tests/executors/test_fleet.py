"""The executors' one autoreset rule and their one core (``executors.fleet.ShareFleet``) over
a declared transport (``executors.transport.Transport``)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import envfleet
from envfleet.executors.base import buffer_layout
from envfleet.executors.fleet import ShareFleet, split
from envfleet.executors.group import PEND, RESET_NOW, WAIT, EnvGroup, on_episode_end
from envfleet.executors.pool import PoolVectorEnv, SharedMemoryTransport
from envfleet.executors.ray import RayTransport, RayVectorEnv
from envfleet.executors.subprocess import PipeTransport, SubprocessVectorEnv
from envfleet.executors.transport import Transport
from tests.executors.envs import CountingEnv


def test_one_autoreset_rule_per_mode() -> None:
    assert on_episode_end(AutoresetMode.NEXT_STEP) == PEND
    assert on_episode_end(AutoresetMode.SAME_STEP) == RESET_NOW
    assert on_episode_end(AutoresetMode.DISABLED) == WAIT


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_new_envs_of_a_lost_share_start_under_the_rule(mode) -> None:
    """``EnvGroup.start_fresh`` (a worker or actor rebuilt during a step): NEXT_STEP resets
    every env on its next step, SAME_STEP at once (their reset infos returned), DISABLED
    leaves them to reset_mask."""
    envs = [CountingEnv(i) for i in range(3)]
    obs_space, act_space = envs[0].observation_space, envs[0].action_space
    arrays = buffer_layout(obs_space, act_space, 3, mode).local()
    group = EnvGroup(envs, 5, 0, mode, obs_space, act_space, arrays)
    group.reset(None, [1, 2, 3], None)
    arrays["act"][:] = 0
    group.step()
    infos = group.start_fresh()
    if mode is AutoresetMode.NEXT_STEP:
        assert infos == [] and group.pending.all()
        group.step()  # the reset step
        assert (arrays["obs"][:, 3] == 0).all() and (arrays["obs"][:, 2] == 1).all()
    elif mode is AutoresetMode.SAME_STEP:
        assert infos == [(5, {"index": 0}), (6, {"index": 1}), (7, {"index": 2})]
        assert (arrays["obs"][:, 3] == 0).all() and (arrays["obs"][:, 2] == 1).all()
    else:
        assert infos == [] and not group.pending.any()
        assert (arrays["obs"][:, 3] == 1).all()  # untouched


def test_every_remote_executor_is_the_one_core_over_a_transport() -> None:
    """pool, subprocess and ray are ``ShareFleet`` itself (faults, restarts, reset and step
    written once) over a transport that declares every operation of ``Transport``."""
    for cls in (PoolVectorEnv, SubprocessVectorEnv, RayVectorEnv):
        assert issubclass(cls, ShareFleet), cls
        for hook in ("failed", "blame", "_restart", "_reset_envs", "_step_envs"):
            assert getattr(cls, hook) is getattr(ShareFleet, hook), (cls, hook)
    operations = [name for name in vars(Transport) if not name.startswith("_")]
    assert {"start", "step", "reset", "stop", "replace", "shutdown"} <= set(operations)
    for cls in (SharedMemoryTransport, PipeTransport, RayTransport):
        assert not issubclass(cls, ShareFleet), cls
        for name in operations:
            assert hasattr(cls, name), (cls, name)
        assert not getattr(cls, "__abstractmethods__", None), cls
    assert split(7, 3) == [(0, 3), (3, 5), (5, 7)]


def test_a_lost_worker_is_blamed_by_env_index() -> None:
    """The core names the owner, what happened and the env it was running."""
    import os
    import signal

    env = envfleet.make([lambda: CountingEnv(0, 100)] * 4, 4, backend="pool", num_workers=2)
    try:
        env.reset(seed=0)
        pid = env.unwrapped.transport.workers[1].process.pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(envfleet.EnvWorkerError,
                           match=rf"worker 1 \(envs 2\.\.3, pid {pid}\) died unexpectedly "
                                 r"\(killed by SIGKILL\) during step\(\)") as caught:
            env.step(np.zeros(4, dtype=np.int64))
        # (killed while idle: no env was running; every env of the worker failed)
        assert caught.value.env_indices == (2, 3) and caught.value.env_index == 2
    finally:
        env.close()
