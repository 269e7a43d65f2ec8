"""``envfleet.make("<Id>-v5", n, seed=s)``: env i is bit for bit ``gymnasium.make("<Id>-v5")``
reset with ``s + i`` (observations, rewards, terminated, truncated, info entries), across
autoresets, in every autoreset mode, with default and non-default keyword arguments."""

from __future__ import annotations

import numpy as np
import pytest

from tests.mujoco.reference import lockstep


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_half_cheetah_truncated_every_mode(mode):
    """HalfCheetah never terminates: short episodes end by truncation (TimeLimit)."""
    assert lockstep("HalfCheetah-v5", 3, 40, autoreset_mode=mode, max_episode_steps=12) >= 6


def test_half_cheetah_non_default_kwargs_float64_out_of_range_actions():
    """Other weights, noise, frame skip, positions kept in the observation; float64 actions
    twice the bounds (MuJoCo clamps them, the cost does not)."""
    lockstep("HalfCheetah-v5", 2, 25, seed=11, scale=2.0, dtype=np.float64,
             forward_reward_weight=0.5, ctrl_cost_weight=0.3, reset_noise_scale=0.5,
             frame_skip=3, exclude_current_positions_from_observation=False)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_hopper_terminates_every_mode(mode):
    """Random actions make Hopper fall: early terminations (health check) and truncations."""
    assert lockstep("Hopper-v5", 3, 60, autoreset_mode=mode, max_episode_steps=25) >= 6


def test_hopper_non_default_kwargs():
    lockstep("Hopper-v5", 2, 40, seed=1, healthy_reward=2.0, ctrl_cost_weight=0.01,
             healthy_z_range=(0.9, 1.5), healthy_angle_range=(-0.1, 0.1),
             healthy_state_range=(-5.0, 5.0), reset_noise_scale=0.02, frame_skip=2,
             exclude_current_positions_from_observation=False)


def test_hopper_not_terminating_when_unhealthy():
    """terminate_when_unhealthy=False: the episode runs on, the survive reward drops to 0."""
    lockstep("Hopper-v5", 2, 40, terminate_when_unhealthy=False, max_episode_steps=30)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_walker2d(mode):
    assert lockstep("Walker2d-v5", 3, 60, autoreset_mode=mode, max_episode_steps=40) >= 3


def test_walker2d_non_default_kwargs():
    lockstep("Walker2d-v5", 2, 40, seed=9, forward_reward_weight=2.0, healthy_reward=0.5,
             healthy_z_range=(0.9, 1.9), healthy_angle_range=(-0.5, 0.5),
             reset_noise_scale=0.05, exclude_current_positions_from_observation=False,
             dtype=np.float64)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_swimmer_every_mode(mode):
    """Two skipped positions, x and y velocities and distances; truncation only."""
    assert lockstep("Swimmer-v5", 2, 30, autoreset_mode=mode, max_episode_steps=10) >= 4


def test_swimmer_non_default_kwargs():
    lockstep("Swimmer-v5", 2, 20, seed=5, forward_reward_weight=3.0, ctrl_cost_weight=0.1,
             reset_noise_scale=0.3, exclude_current_positions_from_observation=False,
             scale=1.5)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_ant_terminates_every_mode(mode):
    """The clipped contact forces in the observation and the cost; a narrow healthy z range
    makes random play terminate early."""
    assert lockstep("Ant-v5", 3, 40, autoreset_mode=mode, healthy_z_range=(0.45, 0.8),
                    max_episode_steps=30) >= 3


def test_ant_defaults():
    lockstep("Ant-v5", 2, 30)


def test_ant_non_default_kwargs():
    """The main body named, contact forces out of the observation (still in the cost),
    other ranges and weights, positions kept."""
    lockstep("Ant-v5", 2, 30, seed=8, main_body="torso", include_cfrc_ext_in_observation=False,
             contact_force_range=(-0.5, 2.0), contact_cost_weight=0.01, ctrl_cost_weight=0.2,
             healthy_reward=0.5, terminate_when_unhealthy=False, healthy_z_range=(0.5, 0.7),
             exclude_current_positions_from_observation=False, reset_noise_scale=0.2,
             dtype=np.float64)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_inverted_pendulum_every_mode(mode):
    """Random pushes tip the pole over quickly: terminations in every mode."""
    assert lockstep("InvertedPendulum-v5", 3, 40, autoreset_mode=mode) >= 6


def test_inverted_pendulum_non_default_kwargs():
    lockstep("InvertedPendulum-v5", 2, 30, seed=2, reset_noise_scale=0.05, frame_skip=1,
             scale=2.0, dtype=np.float64, max_episode_steps=8)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_inverted_double_pendulum_every_mode(mode):
    """sin/cos, clipped velocities and constraint force; the penalties (NumPy's scalar
    ``v**2`` is libm's pow, not always ``v * v``: the loop calls pow)."""
    assert lockstep("InvertedDoublePendulum-v5", 3, 40, autoreset_mode=mode) >= 6


def test_inverted_double_pendulum_non_default_kwargs():
    lockstep("InvertedDoublePendulum-v5", 2, 30, seed=6, healthy_reward=3.0,
             reset_noise_scale=0.3, frame_skip=2, max_episode_steps=9)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_reacher_every_mode(mode):
    """The goal drawn until inside its disc; truncated at the id's 50 steps."""
    assert lockstep("Reacher-v5", 2, 60, autoreset_mode=mode) == 2


def test_reacher_non_default_kwargs():
    lockstep("Reacher-v5", 2, 30, seed=4, reward_dist_weight=0.5, reward_control_weight=2.0,
             frame_skip=3, max_episode_steps=11, scale=3.0)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_pusher_every_mode(mode):
    """The object drawn until away from the goal; three bodies' positions observed."""
    assert lockstep("Pusher-v5", 2, 30, autoreset_mode=mode, max_episode_steps=12) >= 4


def test_pusher_non_default_kwargs():
    lockstep("Pusher-v5", 2, 20, seed=12, reward_near_weight=0.7, reward_dist_weight=2.0,
             reward_control_weight=0.4, frame_skip=3, scale=2.0, dtype=np.float64)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_humanoid_every_mode(mode):
    """The centre of mass (einsum's running sum), cinert/cvel/qfrc_actuator/cfrc_ext in the
    observation, the costs of data.ctrl and cfrc_ext, tendon infos; random play falls."""
    assert lockstep("Humanoid-v5", 2, 30, autoreset_mode=mode, max_episode_steps=20) >= 2


def test_humanoid_non_default_kwargs():
    lockstep("Humanoid-v5", 2, 25, seed=13, forward_reward_weight=2.0, ctrl_cost_weight=0.3,
             contact_cost_weight=1e-3, contact_cost_range=(-1.0, 0.5), healthy_reward=1.0,
             healthy_z_range=(0.5, 3.0), reset_noise_scale=0.05, terminate_when_unhealthy=False,
             exclude_current_positions_from_observation=False,
             include_cinert_in_observation=False, include_qfrc_actuator_in_observation=False,
             scale=1.5, dtype=np.float64)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_humanoid_standup(mode):
    assert lockstep("HumanoidStandup-v5", 2, 24, autoreset_mode=mode,
                    max_episode_steps=10) >= 4


def test_humanoid_standup_non_default_kwargs():
    """uph_cost_weight is stored but unused by Gymnasium's v5 reward: the same here."""
    lockstep("HumanoidStandup-v5", 2, 20, seed=14, ctrl_cost_weight=0.5, uph_cost_weight=3.0,
             impact_cost_weight=1e-3, impact_cost_range=(0.0, 0.2), reset_noise_scale=0.1,
             include_cvel_in_observation=False, include_cfrc_ext_in_observation=False,
             frame_skip=3)


def _randomised(num_envs: int, **fields: tuple[tuple[int, ...], float]) -> dict:
    """Per-env model values: each field's default scaled by a different factor per env."""

    rng = np.random.default_rng(0)
    return {name: np.stack([base * rng.uniform(1 - spread, 1 + spread, base.shape)
                            for _ in range(num_envs)])
            for name, (base, spread) in fields.items()}


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_hopper_per_env_model_parameters(mode):
    """Domain randomisation: env i's gravity, masses, friction and gear are its own; it steps
    as Gymnasium's env whose model got those values."""
    import gymnasium as gym

    model = gym.make("Hopper-v5").unwrapped.model
    params = _randomised(3, **{"opt.gravity": (model.opt.gravity, 0.3),
                               "body_mass": (model.body_mass, 0.5),
                               "geom_friction": (model.geom_friction, 0.5),
                               "actuator_gear": (model.actuator_gear, 0.5)})
    assert lockstep("Hopper-v5", 3, 40, autoreset_mode=mode, max_episode_steps=25,
                    model_params=params) >= 3


def test_humanoid_per_env_masses():
    """Humanoid's centre of mass uses each env's own body masses."""
    import gymnasium as gym

    model = gym.make("Humanoid-v5").unwrapped.model
    lockstep("Humanoid-v5", 2, 15, model_params=_randomised(
        2, body_mass=(model.body_mass, 0.4), **{"opt.gravity": (model.opt.gravity, 0.2)}))


def test_per_env_model_parameters_are_checked():
    import envfleet

    with pytest.raises(ValueError,
                       match=r"model_params\['body_mass'\] must have shape \(2, 5\)"):
        envfleet.make("Hopper-v5", 2, model_params={"body_mass": np.ones((3, 5))})
    with pytest.raises(ValueError, match=r"'opt\.timestep' is not a per-env MjModel field"):
        envfleet.make("Hopper-v5", 2, model_params={"opt.timestep": np.ones((2,))})
    with pytest.raises(ValueError, match="'nq' is not a per-env MjModel field"):
        envfleet.make("Hopper-v5", 2, model_params={"nq": np.ones(2)})
    bad = np.ones((2, 3))
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="env 1's are not"):
        envfleet.make("Hopper-v5", 2, model_params={"opt.gravity": bad})
