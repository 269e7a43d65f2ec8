"""``render()``: executors return their envs' frames as Gymnasium's ``SyncVectorEnv`` does;
native envs draw env i with Gymnasium's own renderer from its state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from tests.executors.helpers import BACKENDS
from tests.reference import as_numpy

ACTIONS = [np.array([0, 1, 1]), np.array([1, 1, 0]), np.array([0, 0, 1])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_executor_frames_are_sync_vector_envs(backend):
    env = envfleet.make("CartPole-v1", 3, backend=backend, render_mode="rgb_array", seed=0)
    sync = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", render_mode="rgb_array")] * 3)
    try:
        env.reset(seed=7)
        sync.reset(seed=7)
        for actions in ACTIONS:
            env.step(actions)
            sync.step(actions)
        frames, expected = env.render(), sync.render()
        assert isinstance(frames, tuple) and len(frames) == 3
        for frame, reference in zip(frames, expected, strict=True):
            assert frame.shape == (400, 600, 3) and np.array_equal(frame, reference)
        assert env.render_mode == sync.render_mode == "rgb_array"
        assert env.metadata["render_fps"] == sync.metadata["render_fps"]
    finally:
        env.close()
        sync.close()


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_native_frame_is_gymnasiums_for_the_same_state(backend):
    env = envfleet.make("CartPole-v1", 4, backend=backend, seed=0)
    reference = gym.make("CartPole-v1", render_mode="rgb_array")
    try:
        env.reset(seed=3)
        reference.reset(seed=0)
        for _ in range(15):  # move away from the start so frames differ between envs
            env.step(np.array([1, 1, 0, 1]))
        state = np.stack([as_numpy(column) for column in env.state])  # (4 columns, 4 envs)
        frames = env.render()
        assert len(frames) == 4 and env.render_mode == "rgb_array"
        assert env.metadata["render_fps"] == reference.metadata["render_fps"]
        for i, frame in enumerate(frames):
            reference.unwrapped.state = state[:, i].copy()
            assert np.array_equal(frame, reference.render()), i
        assert not np.array_equal(frames[0], frames[2])  # different states, different frames
        (only,) = env.render(env_indices=[2])
        assert np.array_equal(only, frames[2])
        with pytest.raises(IndexError, match="env index 4"):
            env.render(env_indices=[4])
    finally:
        env.close()
        reference.close()


def test_native_render_needs_a_reset_and_a_renderer():
    env = envfleet.make("CartPole-v1", 2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.render()
    env.close()
    chess = envfleet.make("Chess-v0", 1)
    assert chess.render_mode is None
    with pytest.raises(NotImplementedError, match="Chess-v0 has no renderer"):
        chess.render()
    chess.close()


def test_sb3_get_images_of_a_native_batch():
    from envfleet.sb3 import to_sb3

    vec = to_sb3("CartPole-v1", 2)
    vec.seed(0)
    vec.reset()
    images = vec.get_images()
    assert len(images) == 2 and all(image.shape == (400, 600, 3) for image in images)
    vec.close()


def test_render_mode_is_accepted_where_the_family_renders() -> None:
    env = envfleet.make("CartPole-v1", 2, render_mode="rgb_array")
    assert env.render_mode == "rgb_array"
    env.close()
    with pytest.raises(ValueError, match=r"renders in \['rgb_array'\], not render_mode='human'"):
        envfleet.make("CartPole-v1", 2, render_mode="human")
    with pytest.raises(ValueError, match="Chess-v0 renders in no mode"):
        envfleet.make("Chess-v0", 2, render_mode="rgb_array")


def test_pendulum_frame_is_gymnasiums_for_the_same_angle() -> None:
    """Pendulum-v1 draws with Gymnasium's PendulumEnv at each env's angle; without the torque
    arrow (the state keeps no last action), i.e. Gymnasium's frame right after a reset."""
    env = envfleet.make("Pendulum-v1", 3, backend="numba", seed=0)
    reference = gym.make("Pendulum-v1", render_mode="rgb_array")
    try:
        env.reset(seed=3)
        reference.reset(seed=0)  # last_u = None: no arrow
        for _ in range(10):
            env.step(np.array([[2.0], [-1.0], [0.5]], dtype=np.float32))
        frames = env.render()
        assert env.render_mode == "rgb_array"
        assert env.metadata["render_fps"] == reference.metadata["render_fps"]
        for i, frame in enumerate(frames):
            reference.unwrapped.state = np.array([env.state.theta[i], env.state.theta_dot[i]])
            assert np.array_equal(frame, reference.render()), i
        assert not np.array_equal(frames[0], frames[1])
    finally:
        env.close()
        reference.close()


def test_mountain_car_continuous_frame_is_gymnasiums_after_the_same_step() -> None:
    """MountainCarContinuous-v0 draws with Gymnasium's env, whose state is float64 after a reset
    and float32 after a step: each frame equals the reference's, stepped from env i's state
    with the same action."""
    env = envfleet.make("MountainCarContinuous-v0", 4, backend="numba", seed=0)
    reference = gym.make("MountainCarContinuous-v0", render_mode="rgb_array").unwrapped
    actions = np.array([[1.0], [-1.0], [0.3], [-0.7]], dtype=np.float32)
    try:
        env.reset(seed=5)
        reference.reset(seed=0)
        for step in range(6):
            before = [(float(p), float(v), bool(f)) for p, v, f in zip(*env.state, strict=True)]
            env.step(actions)
            frames = env.render()
            for i, frame in enumerate(frames):
                position, velocity, fresh = before[i]
                reference.state = np.array([position, velocity],
                                           dtype=np.float64 if fresh else np.float32)
                reference.step(actions[i])
                assert np.array_equal(frame, reference.render()), (step, i)
        # two float32 positions where Gymnasium's float32 state draws other pixels than float64
        positions = np.float32([-0.9337403, 0.4542744])
        env.state.position[:2], env.state.velocity[:2], env.state.fresh[:2] = positions, 0.0, False
        for i, frame in enumerate(env.render(env_indices=[0, 1])):
            reference.state = np.array([positions[i], 0.0], dtype=np.float32)
            assert np.array_equal(frame, reference.render()), i
            reference.state = reference.state.astype(np.float64)
            assert not np.array_equal(frame, reference.render()), i
    finally:
        env.close()
        reference.close()
