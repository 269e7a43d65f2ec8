"""``envfleet.make``: ids, backends, seeding, determinism, bad input, Gymnasium integration."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import envfleet
import envfleet.native.memory
from envfleet.native import numba_backend


def rollout(env, steps: int = 60, seed: int = 0) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(123)
    out = [obs.copy()]
    for _ in range(steps):
        obs, rew, term, trunc, _ = env.step(rng.integers(0, 2, env.num_envs))
        out += [obs.copy(), rew.copy(), term.copy(), trunc.copy()]
    return out


def test_list_envs_and_backends() -> None:
    envs = envfleet.list_envs()
    assert "CartPole-v1" in envs and "numba" in envs["CartPole-v1"]
    assert "numba" in envfleet.available_backends()


def test_unknown_id_names_the_closest() -> None:
    with pytest.raises(envfleet.UnknownEnvError, match="CartPole-v1"):
        envfleet.make("CartPol-v1", 4)
    with pytest.raises(ValueError, match="unknown env id"):
        envfleet.make("NoSuchEnv-v0", 4)


def test_ale_id_without_importing_ale_py() -> None:
    """``ALE/...`` ids work as Gymnasium documents them, without the user importing ale_py
    (a fresh process: another test may have imported it here)."""
    pytest.importorskip("ale_py")
    import subprocess
    import sys
    code = ("import sys, envfleet\n"
            "assert 'ale_py' not in sys.modules\n"
            "env = envfleet.make('ALE/Breakout-v5', 2, backend='serial')\n"
            "obs, _ = env.reset(seed=0)\n"
            "obs, *_ = env.step(env.action_space.sample())\n"
            "assert obs.shape == (2, 210, 160, 3), obs.shape\n"
            "env.close()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_unknown_backend_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid backends: auto, numba, cuda, torch"):
        envfleet.make("CartPole-v1", 4, backend="jax")


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "8"])
def test_num_envs_must_be_a_positive_int(bad) -> None:
    with pytest.raises(ValueError, match="num_envs"):
        envfleet.make("CartPole-v1", bad)


def test_autoreset_mode_accepts_enum_and_string() -> None:
    for value in ("NextStep", "SameStep", "Disabled"):
        env = envfleet.make("CartPole-v1", 2, autoreset_mode=value)
        assert env.metadata["autoreset_mode"] is AutoresetMode(value)
    with pytest.raises(ValueError, match="autoreset_mode"):
        envfleet.make("CartPole-v1", 2, autoreset_mode="sometimes")


def test_bad_kwargs_are_refused() -> None:
    with pytest.raises(TypeError, match="gravty"):
        envfleet.make("CartPole-v1", 2, gravty=9.8)
    with pytest.raises(TypeError, match="device"):
        envfleet.make("CartPole-v1", 2, backend="numba", device="cpu")
    with pytest.raises(ValueError, match="num_threads"):
        envfleet.make("CartPole-v1", 2, num_threads=0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        envfleet.make("CartPole-v1", 2, max_episode_steps=0)
    with pytest.raises(ValueError, match="seed"):
        envfleet.make("CartPole-v1", 2, seed=-1)


def test_seed_plus_i() -> None:
    """Env i of reset(seed=s) is env 0 of reset(seed=s + i) (Gymnasium's rule)."""
    wide, _ = envfleet.make("CartPole-v1", 4).reset(seed=10)
    for i in range(4):
        single, _ = envfleet.make("CartPole-v1", 1).reset(seed=10 + i)
        np.testing.assert_array_equal(single[0], wide[i])
    seeds = envfleet.make("CartPole-v1", 3)
    obs_list, _ = seeds.reset(seed=[12, 11, 10])
    obs_int, _ = envfleet.make("CartPole-v1", 3).reset(seed=10)
    np.testing.assert_array_equal(obs_list[::-1], obs_int)


def test_same_seed_same_trajectory_different_seed_different() -> None:
    a = rollout(envfleet.make("CartPole-v1", 32), seed=5)
    b = rollout(envfleet.make("CartPole-v1", 32), seed=5)
    c = rollout(envfleet.make("CartPole-v1", 32), seed=6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_make_seed_is_the_first_reset_seed() -> None:
    a = envfleet.make("CartPole-v1", 4, seed=3).reset()[0]
    b = envfleet.make("CartPole-v1", 4).reset(seed=3)[0]
    np.testing.assert_array_equal(a, b)
    unseeded = [envfleet.make("CartPole-v1", 4).reset()[0] for _ in range(2)]
    assert not np.array_equal(*unseeded)


def test_thread_count_does_not_change_trajectories() -> None:
    n = 5000  # above the parallel threshold
    runs = [rollout(envfleet.make("CartPole-v1", n, num_threads=t), steps=40) for t in (1, 2)]
    assert all(np.array_equal(x, y) for x, y in zip(*runs, strict=True))


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (np.zeros(3, dtype=np.int64), r"shape \(4,\)"),
        (np.zeros((4, 1), dtype=np.int64), r"shape \(4,\)"),
        (np.zeros(4, dtype=np.float32), "must be integers"),
        (np.zeros(4, dtype=bool), "must be integers"),
        (np.array([0, 1, 2, 0]), "env 2: 2 is not in Discrete"),
        (np.array([0, -1, 0, 0]), "env 1: -1 is not in Discrete"),
        (np.array([0, 0, 0, 2**64 - 1], dtype=np.uint64), "env 3: 18446744073709551615 is not"),
        (np.array([0, 0, 0, np.nan]), "must be integers"),
    ],
)
def test_bad_actions_are_refused_and_nothing_moves(actions, message) -> None:
    env = envfleet.make("CartPole-v1", 4, seed=0)
    env.reset()
    env.step(np.ones(4, dtype=np.int64))
    before = [c.copy() for c in env.state]
    with pytest.raises(ValueError, match=message):
        env.step(actions)
    for col, old in zip(env.state, before, strict=True):
        np.testing.assert_array_equal(col, old)
    obs, *_ = env.step([1, 0, 1, 0])  # lists and other int dtypes are fine
    env.step(np.array([1, 0, 1, 0], dtype=np.uint8))
    assert obs.shape == (4, 4)


@pytest.mark.parametrize("n", [600, numba_backend.SERIAL_CHECK_ENVS + 1000])
@pytest.mark.parametrize("bad", [0, -1])
def test_the_parallel_step_refuses_any_env_and_nothing_moves(n: int, bad: int) -> None:
    """On 2 threads, actions checked on the calling thread (small batches) or in a parallel
    region (large ones): either way the first bad env is named and no env moves."""
    env = envfleet.make("CartPole-v1", n, seed=0, num_threads=2)
    env.reset()
    env.step(np.ones(n, dtype=np.int64))
    before = [c.copy() for c in env.state]
    actions = np.ones(n, dtype=np.int64)
    actions[[bad, bad - 7]] = 3  # two bad envs: the lower index is named
    first = min(bad % n, (bad - 7) % n)
    with pytest.raises(ValueError, match=f"env {first}: 3 is not in Discrete"):
        env.step(actions)
    for col, old in zip(env.state, before, strict=True):
        np.testing.assert_array_equal(col, old)
    env.close()


@pytest.mark.parametrize("backend", ["numba", "torch", "cuda", "serial"])
def test_a_uint64_action_is_reported_with_its_real_value(backend) -> None:
    """Not as the int64 it wraps to ("-1"): the value the caller gave, as Gymnasium prints it."""
    if envfleet.registry.backend_status(backend) is not None:
        pytest.skip(envfleet.registry.backend_status(backend))
    env = envfleet.make("CartPole-v1", 4, backend=backend)
    env.reset(seed=0)
    for value, index in ((2**64 - 1, 3), (2**63, 1)):
        actions = np.zeros(4, dtype=np.uint64)
        actions[index] = value
        with pytest.raises(ValueError, match=f"env {index}: {value} is not in Discrete"):
            env.step(actions)
    env.step(np.array([0, 1, 1, 0], dtype=np.uint64))  # in-range uint64 actions still step
    env.close()


@pytest.mark.parametrize("backend", ["numba", "torch", "serial"])
def test_seeds_must_fit_in_uint64_as_an_int_or_in_a_list(backend) -> None:
    """2**64 is refused (not aliased to 0), the same way alone or in a list; so is an int seed
    whose last env (seed + num_envs - 1) would pass 2**64 - 1."""
    if envfleet.registry.backend_status(backend) is not None:
        pytest.skip(envfleet.registry.backend_status(backend))
    env = envfleet.make("CartPole-v1", 2, backend=backend)
    for seed in (2**64, [0, 2**64], np.array([2**64, 0], dtype=object)):
        with pytest.raises(ValueError, match=r"must be below 2\*\*64 \(seeds are uint64\), "
                                             r"got 18446744073709551616"):
            env.reset(seed=seed)
    with pytest.raises(ValueError, match=r"passes 2\*\*64 - 1 .* num_envs=2"):
        env.reset(seed=2**64 - 1)
    with pytest.raises(ValueError, match=r"passes 2\*\*64 - 1 .* num_envs=2"):
        envfleet.make("CartPole-v1", 2, backend=backend, seed=2**64 - 1)
    obs, _ = env.reset(seed=2**64 - 2)  # the largest that fits: env 1 gets 2**64 - 1
    one, _ = envfleet.make("CartPole-v1", 1, backend=backend).reset(seed=2**64 - 1)
    np.testing.assert_array_equal(obs[1], one[0])
    env.close()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MinAtar/Breakout-v1"])
def test_more_envs_than_uint64_seeds_suggests_no_negative_seed(env_id) -> None:
    """num_envs beyond 2**64: no seed fits, and the message says so (no 'at most -...')."""
    for num_envs in (10**30, 2**64 + 1):
        with pytest.raises(ValueError, match=rf"^seed 0 gives env i the seed seed \+ i, but "
                                             rf"num_envs={num_envs} passes 2\*\*64 \(seeds are "
                                             rf"uint64\): no seed fits; use fewer envs$"):
            envfleet.make(env_id, num_envs, seed=0)


def test_step_before_reset_and_after_close() -> None:
    env = envfleet.make("CartPole-v1", 2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(2, dtype=np.int64))
    env.reset()
    env.close()
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros(2, dtype=np.int64))


def test_bad_reset_options() -> None:
    env = envfleet.make("CartPole-v1", 3)
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(2, dtype=bool)})
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(3, dtype=np.int64)})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"low": -0.1})
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=1.5)
    with pytest.raises(ValueError, match="3 entries"):
        env.reset(seed=[1, 2])


def test_copy_false_hands_out_the_engine_buffers() -> None:
    env = envfleet.make("CartPole-v1", 2, copy=False)
    obs, _ = env.reset(seed=0)
    obs2 = env.step(np.zeros(2, dtype=np.int64))[0]
    assert obs2 is obs
    default = envfleet.make("CartPole-v1", 2)
    first, _ = default.reset(seed=0)
    second = default.step(np.zeros(2, dtype=np.int64))[0]
    assert not np.shares_memory(first, second)


def test_gymnasium_make_vec_gets_the_native_kernel() -> None:
    env = gym.make_vec("envfleet/CartPole-v1", num_envs=8,
                       vectorization_mode="vector_entry_point")
    assert isinstance(env.unwrapped, envfleet.native.vector_env.NativeVectorEnv)
    assert env.num_envs == 8 and env.single_action_space == gym.spaces.Discrete(2)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    env.step(env.action_space.sample())
    single = gym.make("envfleet/CartPole-v1")  # the single env too (tests/test_single_env.py)
    single.reset(seed=0)
    env.close()


def test_spaces_match_gymnasium() -> None:
    env = envfleet.make("CartPole-v1", 5)
    reference = gym.make("CartPole-v1")
    assert env.single_observation_space == reference.observation_space
    assert env.single_action_space == reference.action_space
    assert env.observation_space.shape == (5, 4)
    assert env.action_space == gym.spaces.MultiDiscrete([2] * 5)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_a_make_too_large_for_memory_is_refused_before_allocating(backend) -> None:
    """10**9 CartPoles (~110 GiB of buffers) is an error naming the sizes, not the OOM killer."""
    from envfleet.native.memory import available_host_memory, native_bytes

    if backend == "torch":
        pytest.importorskip("torch")
    spec = envfleet.registry.NATIVE_ENVS["CartPole-v1"]
    available = available_host_memory()
    if available is None or available > native_bytes(spec, 10**9, backend):
        pytest.skip("this machine has the memory (or does not say how much it has)")
    with pytest.raises(envfleet.InsufficientMemoryError,
                       match=r"num_envs=1000000000.*needs about .* GiB but only .* available"):
        envfleet.make("CartPole-v1", 10**9, backend=backend)
    env = envfleet.make("CartPole-v1", 1000, backend=backend)  # a normal size still works
    assert env.reset(seed=0)[0].shape == (1000, 4)


@pytest.mark.parametrize("backend", ["numba", "serial", "pool"])
def test_make_compares_its_estimate_with_the_available_memory(backend, monkeypatch) -> None:
    """With 1 MiB available, 10**5 envs (native buffers or executor envs) are refused."""
    monkeypatch.setattr(envfleet.native.memory, "available_host_memory", lambda: 2**20)
    with pytest.raises(MemoryError, match=r"num_envs=100000.* but only 1.0 MiB"):
        envfleet.make("CartPole-v1", 10**5, backend=backend)
    assert envfleet.make("CartPole-v1", 100, backend="numba").num_envs == 100
