"""Acrobot-v1 and MountainCar-v0 on the ``cuda`` backend: the numba backend's trajectories bit
for bit (under Numba's CUDA simulator the kernels run as Python with libm, as numba CPU does;
on a GPU, the device's libm differs: compared to 1e-9), and kernels that type and lower for a
real GPU. Small sizes: the simulator runs each CUDA thread as a Python thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import envfleet
from envfleet.registry import backend_status
from tests.reference import as_numpy

_UNAVAILABLE = backend_status("cuda")
pytestmark = pytest.mark.skipif(
    _UNAVAILABLE is not None,
    reason=f"cuda backend unavailable ({_UNAVAILABLE}); run with NUMBA_ENABLE_CUDASIM=1",
)
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def assert_equal(a, b, what: str) -> None:
    a, b = as_numpy(a), as_numpy(b)
    assert a.dtype == b.dtype, what
    if SIMULATOR or a.dtype == np.bool_:
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9, err_msg=what)


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
    assert_equal(cenv.reset()[0], nenv.reset()[0], "reset obs")
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
            assert_equal(c, r, f"{what} at step {t}")
        if "final_obs" in out_n[4]:
            mask = out_n[4]["_final_obs"]
            assert_equal(as_numpy(out_c[4]["final_obs"])[mask], out_n[4]["final_obs"][mask],
                         f"final_obs at step {t}")
        for name, c, r in zip(nenv.state._fields, cenv.state, nenv.state, strict=True):
            assert_equal(c, r, f"state.{name} at step {t}")
        ended["terminated"] += int(out_n[2].sum())
        ended["truncated"] += int(out_n[3].sum())
    assert ended["truncated"] > 0
    if env_id == "MountainCar-v0":
        assert ended["terminated"] > 0


_LOWER_FOR_GPU = textwrap.dedent("""
    import sys, types
    import numpy as np
    import numba.cuda.dispatcher as dispatcher
    if not hasattr(dispatcher, "get_current_device"):
        sys.exit(3)
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    from numba.cuda.compiler import compile_cuda
    from numba.cuda.typing.typeof import typeof
    from envfleet.envs import FAMILIES
    from envfleet.native import cuda_backend, driver
    for env_id, kwargs in (("Acrobot-v1", {"torque_noise_max": 0.1}), ("MountainCar-v0", {})):
        spec, n = FAMILIES[env_id], 4
        state = spec.state_type(**spec.allocate_state(n))
        params = spec.make_params(**kwargs)
        rng = (np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, np.int64))
        size = spec.observation_space.shape[0]
        obs, flags = np.zeros((n, size), np.float32), np.zeros(n, np.bool_)
        rewards, counters = np.zeros(n, np.float32), np.zeros(3, np.int64)
        actions = np.zeros(n, np.int64)
        validate, step, reset = cuda_backend.compile_kernels(spec, driver.SAME_STEP)
        for kernel, args in (
            (step, (n, state, params, actions, rng, 500, flags, obs, rewards, flags, flags,
                    obs, counters, 0)),
            (reset, (n, flags, rng[0], True, state, params, rng, flags, obs)),
        ):
            compile_cuda(kernel.py_func, None, tuple(typeof(a) for a in args), cc=(9, 0))
""")


@pytest.mark.skipif(not SIMULATOR, reason="a simulator-only check (on a GPU the other tests "
                    "compile the kernels for real)")
def test_kernels_type_and_lower_for_a_real_gpu() -> None:
    """The simulator runs kernels as Python: type and lower the step and reset kernels to LLVM
    IR for sm_90 in a process without it (as tests/native/test_cuda_backend.py for CartPole)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, "-c", _LOWER_FOR_GPU], env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode == 3:
        pytest.skip("numba-cuda internals changed (dispatcher.get_current_device)")
    assert done.returncode == 0, done.stderr[-4000:]
