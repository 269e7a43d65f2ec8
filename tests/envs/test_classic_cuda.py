"""Acrobot-v1 and MountainCar-v0 on the ``cuda`` backend: the numba backend's trajectories bit
for bit (under Numba's CUDA simulator the kernels run as Python with libm, as numba CPU does;
on a GPU, the device's libm differs: compared to 1e-9), and kernels that type and lower for a
real GPU. Small sizes: the simulator runs each CUDA thread as a Python thread."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.registry import backend_status
from tests.cuda_helpers import assert_kernels_lower, assert_same, only_under_simulator
from tests.reference import as_numpy

_UNAVAILABLE = backend_status("cuda")
pytestmark = pytest.mark.skipif(
    _UNAVAILABLE is not None,
    reason=f"cuda backend unavailable ({_UNAVAILABLE}); run with NUMBA_ENABLE_CUDASIM=1",
)

CASES = [
    ("Acrobot-v1", {"torque_noise_max": 0.2}, "SameStep"),
    ("MountainCar-v0", {"goal_velocity": 0.001}, "Disabled"),
]


@pytest.mark.parametrize(("env_id", "kwargs", "mode"), CASES)
def test_same_trajectories_as_numba(env_id: str, kwargs: dict, mode: str) -> None:
    n, steps = 8, 10
    common = dict(seed=4, max_episode_steps=6, autoreset_mode=mode, **kwargs)
    cenv = envfleet.make(env_id, n, backend="cuda", threads_per_block=32, **common)
    nenv = envfleet.make(env_id, n, backend="numba", **common)
    assert_same(cenv.reset()[0], nenv.reset()[0], "reset obs")
    if env_id == "MountainCar-v0":  # half the cars start just below the flag: terminations
        for env in (cenv, nenv):
            env.engine.write_state("position", np.arange(n) % 2 == 0, np.full(n, 0.49))
            env.engine.write_state("velocity", np.arange(n) % 2 == 0, np.full(n, 0.03))
    ended = {"terminated": 0, "truncated": 0}
    for t in range(steps):
        if mode == "Disabled":
            done = as_numpy(nenv.engine.pending)
            if done.any():
                cenv.reset(options={"reset_mask": done})
                nenv.reset(options={"reset_mask": done})
        actions = (np.arange(n) + t) % 3
        out_c, out_n = cenv.step(actions), nenv.step(actions)
        for what, c, r in zip(("obs", "reward", "terminated", "truncated"), out_c, out_n,
                              strict=False):
            assert_same(c, r, f"{what} at step {t}")
        if "final_obs" in out_n[4]:
            mask = out_n[4]["_final_obs"]
            assert_same(as_numpy(out_c[4]["final_obs"])[mask], out_n[4]["final_obs"][mask],
                         f"final_obs at step {t}")
        for name, c, r in zip(nenv.state._fields, cenv.state, nenv.state, strict=True):
            assert_same(c, r, f"state.{name} at step {t}")
        ended["terminated"] += int(out_n[2].sum())
        ended["truncated"] += int(out_n[3].sum())
    assert ended["truncated"] > 0
    if env_id == "MountainCar-v0":
        assert ended["terminated"] > 0


@pytest.mark.slow
@only_under_simulator
def test_kernels_type_and_lower_for_a_real_gpu() -> None:
    """Acrobot's (with torque noise) and MountainCar's kernels lower for sm_90."""
    assert_kernels_lower("""
        from envfleet.envs import FAMILIES
        for env_id, kwargs in (("Acrobot-v1", {"torque_noise_max": 0.1}),
                               ("MountainCar-v0", {})):
            spec = FAMILIES[env_id]
            lower_kernels(spec, spec.make_params(**kwargs), (SAME_STEP,))
    """)
