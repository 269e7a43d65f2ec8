"""The ``cuda`` backend against the ``numba`` one: same trajectories, same refusals, torch outputs.

Runs on a real GPU, or on any machine under Numba's CUDA simulator:
``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/test_cuda_backend.py`` (the variable must be set
before Python starts). The simulator runs each CUDA thread as a Python thread (~3-4 ms per
CartPole step), so sizes stay small.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import envfleet
from envfleet.registry import backend_status
from tests.cuda_helpers import assert_kernels_lower, assert_same, host, only_under_simulator

_UNAVAILABLE = backend_status("cuda")
pytestmark = pytest.mark.skipif(
    _UNAVAILABLE is not None,
    reason=f"cuda backend unavailable ({_UNAVAILABLE}); to test it without a GPU, run with "
    "NUMBA_ENABLE_CUDASIM=1 set in the environment (Numba's CUDA simulator)",
)

MODES = ("NextStep", "SameStep", "Disabled")


def pair(n, mode="NextStep", seed=7, max_episode_steps=12, **cuda_options):
    cuda_options.setdefault("threads_per_block", 32)  # the simulator pays for idle threads
    kw = dict(autoreset_mode=mode, seed=seed, max_episode_steps=max_episode_steps)
    return (envfleet.make("CartPole-v1", n, backend="cuda", **kw, **cuda_options),
            envfleet.make("CartPole-v1", n, backend="numba", **kw))


def actions_at(t, n):
    """Even envs always push right (they fall: terminated); odd envs alternate (they balance
    until the time limit: truncated)."""
    return np.where(np.arange(n) % 2 == 0, 1, t % 2).astype(np.int64)


def assert_same_state(cenv, nenv):
    for name, c, r in zip(nenv.state._fields, cenv.state, nenv.state, strict=True):
        assert_same(c, r, f"state.{name}")


@pytest.mark.parametrize("mode", MODES)
def test_same_trajectories_as_numba(mode):
    n, steps = 12, 30
    cenv, nenv = pair(n, mode)
    obs_c, _ = cenv.reset()
    obs_n, _ = nenv.reset()
    assert_same(obs_c, obs_n, "reset obs")
    seen_terminated = seen_truncated = 0
    for t in range(steps):
        if mode == "Disabled":
            ended = host(nenv.engine.pending)
            if ended.any():
                obs_c, _ = cenv.reset(options={"reset_mask": ended})
                obs_n, _ = nenv.reset(options={"reset_mask": ended})
                assert_same(obs_c, obs_n, f"masked reset obs before step {t}")
        a = actions_at(t, n)
        out_c, out_n = cenv.step(a), nenv.step(a)
        for what, c, r in zip(("obs", "reward", "terminated", "truncated"), out_c[:4], out_n[:4],
                              strict=False):
            assert_same(c, r, f"{what} at step {t}")
        info_c, info_n = out_c[4], out_n[4]
        assert info_c.keys() == info_n.keys(), t
        if "final_obs" in info_n:
            assert_same(info_c["_final_obs"], info_n["_final_obs"], f"_final_obs at step {t}")
            mask = info_n["_final_obs"]
            assert_same(host(info_c["final_obs"])[mask], info_n["final_obs"][mask],
                        f"final_obs at step {t}")
        seen_terminated += int(out_n[2].sum())
        seen_truncated += int(out_n[3].sum())
    assert_same_state(cenv, nenv)
    # the action pattern must have exercised both ways an episode ends
    assert seen_terminated >= n // 2 and seen_truncated >= n // 2


def test_reseed_and_masked_reset_match_numba():
    n = 8
    cenv, nenv = pair(n, seed=3)
    cenv.reset()
    nenv.reset()
    for t in range(3):
        cenv.step(actions_at(t, n))
        nenv.step(actions_at(t, n))
    mask = np.arange(n) % 3 == 0
    assert_same(cenv.reset(options={"reset_mask": mask})[0],
                nenv.reset(options={"reset_mask": mask})[0], "masked reset")
    assert_same(cenv.reset(seed=[5, 1, 4, 1, 5, 9, 2, 6])[0],
                nenv.reset(seed=[5, 1, 4, 1, 5, 9, 2, 6])[0], "reseeded reset")
    assert_same(cenv.step(actions_at(0, n))[0], nenv.step(actions_at(0, n))[0], "step")
    assert_same_state(cenv, nenv)


def test_step_returns_ended_count():
    n = 8
    cenv, nenv = pair(n, "SameStep", max_episode_steps=5)
    cenv.reset()
    nenv.reset()
    counts = []
    for t in range(7):
        a = actions_at(t, n)
        ended_c, ended_n = cenv.engine.step(a), nenv.engine.step(a)
        assert isinstance(ended_c, int)
        assert ended_c == ended_n == int(host(cenv.engine.ended_mask()).sum())
        counts.append(ended_c)
    assert max(counts) > 0


def _snapshot(env):
    e = env.engine
    return [host(x) for x in (e.obs, e.rewards, e.terminated, e.truncated, e.pending,
                              e.final_obs, *e.state)] + [a.copy_to_host() for a in e._rng]


def _assert_unchanged(before, env):
    for b, a in zip(before, _snapshot(env), strict=True):
        np.testing.assert_array_equal(a, b)


def _error(env, actions):
    with pytest.raises(ValueError) as info:
        env.step(actions)
    return str(info.value)


def test_refused_steps_name_the_env_and_move_nothing():
    import torch

    n = 8
    cenv, nenv = pair(n)
    cenv.reset()
    nenv.reset()
    for t in range(2):
        cenv.step(actions_at(t, n))
        nenv.step(actions_at(t, n))
    before = _snapshot(cenv)

    out_of_range = np.ones(n, np.int64)
    out_of_range[[3, 6]] = [-1, 2]
    message = _error(cenv, out_of_range)
    assert "env 3" in message and "-1" in message
    assert message == _error(nenv, out_of_range)  # the numba backend's words
    assert "env 6" in _error(cenv, torch.tensor([0, 1, 0, 1, 0, 1, 2, 1]))
    bad_shapes = (np.ones(n - 1, np.int64), np.ones((n, 1), np.int64),
                  torch.ones(n + 1, dtype=torch.int64))
    for bad in bad_shapes:
        message = _error(cenv, bad)
        assert message.startswith(f"actions must have shape ({n},)"), message
        assert message == _error(nenv, bad)
    for bad in (np.ones(n, np.float32), torch.ones(n, dtype=torch.float32),
                np.ones(n, np.bool_), torch.ones(n, dtype=torch.bool)):
        message = _error(cenv, bad)
        assert "must be integers" in message and "got dtype" in message, message
        assert message == _error(nenv, bad)
    _assert_unchanged(before, cenv)

    # valid steps after the refusals: both backends carry on identically
    for a in (torch.tensor([1, 0] * (n // 2), dtype=torch.int32), [0] * n, np.ones(n, np.uint8)):
        out_c, out_n = cenv.step(a), nenv.step(a)
        assert_same(out_c[0], out_n[0], "obs after refusals")
    assert_same_state(cenv, nenv)


def test_disabled_mode_refuses_finished_envs_until_reset():
    n = 4
    cenv, nenv = pair(n, "Disabled", max_episode_steps=2)
    cenv.reset()
    nenv.reset()
    for t in range(2):
        cenv.step(actions_at(t, n))
        nenv.step(actions_at(t, n))
    assert host(cenv.engine.pending).all()
    before = _snapshot(cenv)
    message = _error(cenv, np.ones(n, np.int64))
    assert "env 0 has finished its episode" in message
    assert message == _error(nenv, np.ones(n, np.int64))
    _assert_unchanged(before, cenv)
    mask = np.array([True, False, False, False])
    cenv.reset(options={"reset_mask": mask})
    assert "env 1 has finished" in _error(cenv, np.ones(n, np.int64))
    cenv.reset(options={"reset_mask": ~mask})
    cenv.step(np.ones(n, np.int64))


@pytest.mark.parametrize("bad", [0, -32, 16, 48, 1056, 2048, True, 64.0, "256"])
def test_threads_per_block_is_checked(bad):
    with pytest.raises(ValueError, match="threads_per_block must be a positive multiple of 32"):
        envfleet.make("CartPole-v1", 4, backend="cuda", threads_per_block=bad)


def test_threads_per_block_does_not_change_results():
    n, steps = 40, 8  # 32 per block: two blocks, the second partly idle
    runs = []
    for tpb in (32, 64):
        env = envfleet.make("CartPole-v1", n, backend="cuda", seed=11, max_episode_steps=6,
                            autoreset_mode="SameStep", threads_per_block=tpb)
        assert env.engine.threads_per_block == tpb
        trajectory = [host(env.reset()[0])]
        for t in range(steps):
            obs, reward, terminated, truncated, info = env.step(actions_at(t, n))
            trajectory += [host(x) for x in (obs, reward, terminated, truncated)]
            if info:
                trajectory.append(host(info["final_obs"])[info["_final_obs"].cpu().numpy()])
        trajectory += [host(x) for x in env.state]
        runs.append(trajectory)
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_fma_off_has_kernels_of_its_own_that_agree_with_numba(monkeypatch):
    """``ENVFLEET_CUDA_FMA=0`` builds the engine on kernels of its own (compiled with
    ``-fma=0`` on a GPU), whose trajectories agree with numba's within the same bound."""
    n, steps = 12, 30
    default = pair(n)[0]
    monkeypatch.setenv("ENVFLEET_CUDA_FMA", "0")
    cenv, nenv = pair(n)
    assert cenv.engine._kernels is not default.engine._kernels
    assert_same(cenv.reset()[0], nenv.reset()[0], "reset obs")
    for t in range(steps):
        for what, c, r in zip(("obs", "reward", "terminated"), cenv.step(actions_at(t, n)),
                              nenv.step(actions_at(t, n)), strict=False):
            assert_same(c, r, f"{what} at step {t}")
    assert_same_state(cenv, nenv)


def test_outputs_are_torch_tensors_sharing_the_device_buffers():
    import torch

    from envfleet.native.cuda_backend import SIMULATOR

    n = 4
    env = envfleet.make("CartPole-v1", n, backend="cuda", seed=0, max_episode_steps=3,
                        autoreset_mode="SameStep", threads_per_block=32, copy=False)
    device = "cpu" if SIMULATOR else "cuda"
    obs, _ = env.reset()
    assert isinstance(obs, torch.Tensor) and obs.device.type == device
    assert obs is env.engine.obs  # the engine's buffer itself: no copy
    for t in range(3):
        obs, reward, terminated, truncated, info = env.step(actions_at(t, n))
    for x, dtype in ((obs, torch.float32), (reward, torch.float32), (terminated, torch.bool),
                     (truncated, torch.bool), (info["final_obs"], torch.float32)):
        assert isinstance(x, torch.Tensor) and x.dtype == dtype and x.device.type == device
    assert obs.shape == (n, 4) and reward.shape == terminated.shape == (n,)
    assert truncated.all()  # max_episode_steps=3
    assert all(isinstance(c, torch.Tensor) and c.dtype == torch.float64 for c in env.state)

    # env.state is a writable view of the kernels' memory: push every cart off the track
    env.state.x.fill_(10.0)
    _, _, terminated, _, _ = env.step(np.ones(n, np.int64))
    assert terminated.all()

    copied = envfleet.make("CartPole-v1", n, backend="cuda", seed=0, threads_per_block=32)
    obs, _ = copied.reset()
    assert obs.data_ptr() != copied.engine.obs.data_ptr()
    assert torch.equal(obs, copied.engine.obs)


def test_compile_leaves_the_env_alone():
    n = 4
    cenv, nenv = pair(n)
    cenv.reset()
    nenv.reset()
    before = _snapshot(cenv)
    cenv.engine.compile()  # runs a throwaway 1-env engine
    _assert_unchanged(before, cenv)
    assert_same(cenv.step(actions_at(0, n))[0], nenv.step(actions_at(0, n))[0], "obs")


def test_no_overflow_warnings_escape():
    n = 4
    env = envfleet.make("CartPole-v1", n, backend="cuda", seed=1, threads_per_block=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset()
        env.step(np.ones(n, np.int64))
    assert not [w for w in caught if "overflow" in str(w.message)], caught


@pytest.mark.slow
@only_under_simulator
def test_kernels_type_and_lower_for_a_real_gpu():
    """CartPole's and the Box families' kernels, in every autoreset mode, lower for sm_90."""
    assert_kernels_lower("""
        from envfleet.envs import FAMILIES
        for env_id in ("CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0"):
            spec = FAMILIES[env_id]
            lower_kernels(spec, spec.make_params(), MODES)
    """)


@only_under_simulator
def test_fma_switch_reaches_nvvm():
    """``ENVFLEET_CUDA_FMA=0``'s kernels (``compile_kernels(..., fma=False)``) go to NVVM with
    ``-fma=0`` and without LTO (nvJitLink would contract again); the default's with neither."""
    assert_kernels_lower("""
        from envfleet.envs import FAMILIES
        spec = FAMILIES["CartPole-v1"]
        on = lower_kernels(spec, spec.make_params(), (NEXT_STEP,))
        off = lower_kernels(spec, spec.make_params(), (NEXT_STEP,), fma=False)
        assert all("fma" not in c.library._nvvm_options and c.library._lto for c in on)
        assert all(c.library._nvvm_options["fma"] is False and not c.library._lto for c in off)
    """)


@only_under_simulator
def test_fma_switch_leaves_no_contraction_in_the_ptx():
    """With ``fma=False`` CartPole's sm_90 PTX has no contracted FMA: none in reset, in step
    only libdevice's own (sin, cos), and no mul/add/sub without a rounding mode (which ptxas
    may fuse). Needs libNVVM (skips without)."""
    assert_kernels_lower("""
        import re
        from envfleet.envs import FAMILIES
        need_nvvm()
        spec = FAMILIES["CartPole-v1"]
        on = lower_kernels(spec, spec.make_params(), (NEXT_STEP,))
        off = lower_kernels(spec, spec.make_params(), (NEXT_STEP,), fma=False)

        def count(cres, pattern):
            return len(re.findall(pattern, cres.library.get_asm_str(cc=(9, 0))))

        fma, fusable = r"\\bfma\\.rn\\.f64", r"\\b(?:mul|add|sub)\\.f64"
        (_, step_on, reset_on), (_, step_off, reset_off) = on, off
        assert count(reset_on, fma) > 0 and count(reset_off, fma) == 0
        assert count(step_off, fma) < count(step_on, fma), "step: no FMA left out"
        assert count(step_on, fusable) > 0
        assert count(step_off, fusable) == 0 and count(reset_off, fusable) == 0
    """)


def test_steps_replay_a_captured_graph_on_a_gpu():
    """On a GPU the third step on replays the captured step (no silent fallback to launches);
    under the simulator every step is launched."""
    from envfleet.native.cuda_backend import SIMULATOR

    n = 8
    cenv, nenv = pair(n)
    cenv.reset()
    nenv.reset()
    for t in range(5):
        assert_same(cenv.step(actions_at(t, n))[0], nenv.step(actions_at(t, n))[0], f"obs {t}")
    step = cenv.engine.replay.entries.get("step")
    if SIMULATOR:
        assert cenv.engine.replay.enabled is False and step is None
    else:
        import torch

        assert isinstance(step, torch.cuda.CUDAGraph), step
