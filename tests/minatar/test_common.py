"""What every MinAtar family shares: ids and their Gymnasium form, params, sticky actions'
``last_action``, refused actions, the reference's rgb_array colours, the cuda backend."""

from __future__ import annotations

import types
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.envs import FAMILIES
from envfleet.envs.minatar.common import (
    SIZE,
    clear,
    cubehelix_palette,
    put_grid,
    put_sparse_grid,
)
from envfleet.registry import backend_status, gym_id
from tests.cuda_helpers import assert_kernels_lower, only_under_simulator
from tests.minatar.harness import cuda_agrees_with_numba
from tests.minatar.test_breakout import to_reference
from tests.reference import as_numpy

MINATAR_IDS = sorted(i for i in FAMILIES if i.startswith("MinAtar/"))


def test_ids_are_the_references_and_gymnasium_gets_a_dashed_form() -> None:
    assert {"MinAtar/Breakout-v0", "MinAtar/Breakout-v1"} <= set(MINATAR_IDS)
    assert gym_id("MinAtar/Breakout-v1") == "envfleet/MinAtar-Breakout-v1"
    for env_id in ("MinAtar/Breakout-v1", "envfleet/MinAtar-Breakout-v1"):
        env = envfleet.make(env_id, 2, seed=0)
        assert env.native_spec.id == "MinAtar/Breakout-v1"
        assert env.single_observation_space == gym.spaces.Box(0.0, 1.0, (10, 10, 4), bool)
        assert env.single_action_space == gym.spaces.Discrete(3)
        env.close()
    assert envfleet.make("MinAtar/Breakout-v0", 1).single_action_space.n == 6
    spec = gym.spec("envfleet/MinAtar-Breakout-v1")
    assert spec.max_episode_steps is None  # as the reference's registration: no time limit
    single = gym.make("envfleet/MinAtar-Breakout-v1", sticky_action_prob=0.0)
    obs, _ = single.reset(seed=3)
    assert obs.shape == (10, 10, 4) and obs.dtype == bool
    single.close()
    vec = gym.make_vec("envfleet/MinAtar-Breakout-v1", num_envs=3,
                       vectorization_mode="vector_entry_point")
    assert vec.reset(seed=0)[0].shape == (3, 10, 10, 4)
    vec.close()
    with pytest.raises(envfleet.registry.UnknownEnvError):
        envfleet.make("MinAtar-Breakout-v1", 1, backend="numba")


def test_the_executors_run_the_reference_under_the_same_id() -> None:
    """``make("MinAtar/Breakout-v1", n, backend="serial")`` is minatar.gym's own env."""
    env = envfleet.make("MinAtar/Breakout-v1", 2, backend="serial", seed=0)
    obs, _ = env.reset()
    assert obs.shape == (2, 10, 10, 4) and env.single_action_space.n == 3
    assert type(env.envs[0].unwrapped).__module__ == "minatar.gym"
    env.close()


def test_params_are_the_references_options_checked_by_name() -> None:
    params = FAMILIES["MinAtar/Breakout-v1"].make_params()
    assert (params.sticky_action_prob, params.difficulty_ramping) == (0.1, True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sticky'"):
        envfleet.make("MinAtar/Breakout-v1", 1, sticky=0.2)
    with pytest.raises(ValueError, match=r"sticky_action_prob must be a probability in \[0, 1\]"):
        envfleet.make("MinAtar/Breakout-v1", 1, sticky_action_prob=1.5)
    with pytest.raises(TypeError, match="difficulty_ramping must be True or False"):
        envfleet.make("MinAtar/Breakout-v1", 1, difficulty_ramping="yes")


@pytest.mark.parametrize("value", [10**400, -10**400, float("nan"), float("inf"), -0.5, 2,
                                   np.float64(1.5), "0.1", None])
def test_sticky_action_prob_out_of_range_is_refused_by_name(value) -> None:
    """Anything but a probability, however large an int (no OverflowError), names the
    option and the value."""
    with pytest.raises(ValueError, match=r"^MinAtar Breakout: sticky_action_prob must be a "
                                         r"probability in \[0, 1\], got "):
        envfleet.make("MinAtar/Breakout-v1", 1, sticky_action_prob=value)
    with pytest.raises(ValueError, match=r"got about -10\*\*400$"):
        envfleet.make("MinAtar/Breakout-v1", 1, sticky_action_prob=-10**400)


@pytest.mark.parametrize("value", [0, 1, 0.5, np.float32(0.25), np.int64(1)])
def test_sticky_action_prob_accepts_every_probability(value) -> None:
    env = envfleet.make("MinAtar/Breakout-v1", 1, sticky_action_prob=value)
    assert env.engine.params.sticky_action_prob == float(value)
    env.close()


def test_bad_actions_are_refused_naming_the_env_and_nothing_moves() -> None:
    env = envfleet.make("MinAtar/Breakout-v1", 3, seed=0)
    env.reset()
    before = [as_numpy(c).copy() for c in env.state]
    for actions, message in ((np.array([0, 3, 1]), "env 1: 3 is not in Discrete"),
                             (np.array([0, -1, 1]), "env 1: -1 is not in Discrete"),
                             (np.array([0, 1]), r"must have shape \(3,\)"),
                             (np.array([0.0, 1.0, 1.0]), "must be integers")):
        with pytest.raises(ValueError, match=message):
            env.step(actions)
        assert all(np.array_equal(a, as_numpy(b)) for a, b in zip(before, env.state, strict=True))
    env.close()


def test_last_action_survives_resets_as_in_the_reference() -> None:
    """``minatar.Environment.reset`` leaves ``last_action`` alone; so does ours."""
    env = envfleet.make("MinAtar/Breakout-v0", 2, seed=0, sticky_action_prob=0.0)
    env.reset()
    env.step(np.array([3, 5]))
    env.reset(seed=1)
    assert as_numpy(env.state.last_action).tolist() == [3, 5]
    env.close()


def test_put_grid_writes_its_whole_channel_and_nothing_else() -> None:
    """``put_grid`` is ``state[:, :, c] = grid[i]``: every cell of channel ``c`` (False ones
    too, written without a branch per cell), the other channels and rows untouched."""
    rng = np.random.default_rng(0)
    grid = rng.random((3, SIZE, SIZE)) < 0.3
    obs = rng.random((3, SIZE * SIZE * 4)) < 0.5
    expected = obs.copy().reshape(3, SIZE, SIZE, 4)
    expected[1, :, :, 2] = grid[1]
    put_grid(1, obs, 4, grid, 2)
    assert np.array_equal(obs.reshape(3, SIZE, SIZE, 4), expected)


def test_put_sparse_grid_writes_the_grids_true_cells_into_a_cleared_row() -> None:
    """``put_sparse_grid`` after ``clear``: the row equals ``state[:, :, c] = grid[i]`` for
    grids with empty rows (skipped) and full ones, other envs' rows untouched."""
    rng = np.random.default_rng(1)
    grid = (rng.random((3, SIZE, SIZE)) < 0.3) & (rng.random((3, SIZE, 1)) < 0.5)
    grid[1, 0] = True  # a full row next to empty ones
    obs = rng.random((3, SIZE * SIZE * 4)) < 0.5
    expected = obs.copy().reshape(3, SIZE, SIZE, 4)
    expected[1] = False
    expected[1, :, :, 2] = grid[1]
    clear(1, obs)
    put_sparse_grid(1, obs, 4, grid, 2)
    assert not grid[1].all(axis=1).all() and not grid[1].any(axis=1).all()
    assert np.array_equal(obs.reshape(3, SIZE, SIZE, 4), expected)


def _random_rows(module: str, state: Any, rng: np.random.Generator) -> None:
    """Fill a game's state columns with states its rules may never reach (bricks in any row,
    grids with empty and full rows, entities at the edges with their trails off the grid),
    as the reference's ``state()`` still draws them."""
    n = len(state.last_action)

    def sparse_grid() -> np.ndarray:  # each row empty, sparse or full
        density = rng.choice([0.0, 0.2, 1.0], size=(n, SIZE, 1))
        return rng.random((n, SIZE, SIZE)) < density

    if module == "breakout":
        for name in ("ball_x", "ball_y", "pos", "last_x", "last_y"):
            getattr(state, name)[:] = rng.integers(0, SIZE, n)
        state.bricks[:] = sparse_grid()
    elif module == "space_invaders":
        state.pos[:] = rng.integers(0, SIZE, n)
        state.alien_dir[:] = rng.choice([-1, 1], n)
        for name in ("aliens", "f_bullets", "e_bullets"):
            getattr(state, name)[:] = sparse_grid()
    elif module == "asterix":
        state.player_x[:] = rng.integers(0, SIZE, n)
        state.player_y[:] = rng.integers(1, 9, n)
        alive = rng.random(state.entity_alive.shape) < 0.6
        state.entity_alive[:] = alive
        # an entity at either edge often (its trail off the grid); an empty slot's columns 0
        x = rng.choice([0, 9, *range(SIZE)], size=alive.shape)
        state.entity_x[:] = np.where(alive, x, 0)
        state.entity_right[:] = alive & (rng.random(alive.shape) < 0.5)
        state.entity_gold[:] = alive & (rng.random(alive.shape) < 0.5)
    else:  # freeway
        state.pos[:] = rng.integers(0, SIZE, n)
        state.car_x[:] = rng.integers(0, SIZE, state.car_x.shape)
        speed = rng.integers(1, 6, state.car_speed.shape) * rng.choice([-1, 1],
                                                                        state.car_speed.shape)
        state.car_speed[:] = speed
        state.car_timer[:] = np.abs(speed)


@pytest.mark.parametrize("module", ["breakout", "space_invaders", "asterix", "freeway"])
def test_compiled_observe_is_the_references_state_for_any_state(module: str) -> None:
    """Each game's ``observe``, compiled as the numba engine compiles it, writes the
    reference's ``state()`` for states its rules never reach (the sparse grid writer's skipped
    rows, Asterix's unconditional stores for empty slots and trails off the grid, Freeway's
    selects), over rows first filled with garbage."""
    import importlib

    from numba import njit

    from tests.minatar import (
        test_asterix,
        test_breakout,
        test_freeway,
        test_space_invaders,
    )

    tests = {"breakout": test_breakout, "space_invaders": test_space_invaders,
             "asterix": test_asterix, "freeway": test_freeway}
    game = importlib.import_module(f"envfleet.envs.minatar.{module}")
    observe = game.observe

    @njit(error_model="numpy", _nrt=False)
    def observe_all(state, obs):  # pragma: no cover - compiled
        for i in range(obs.shape[0]):
            observe(i, state, obs)

    env = envfleet.make(game.SPEC_V1.id, 64, backend="numba", seed=0)
    env.reset()
    rng = np.random.default_rng(2)
    _random_rows(module, env.state, rng)
    obs = rng.random((64, SIZE * SIZE * game.CHANNELS)) < 0.5
    observe_all(env.state, obs)
    reference = importlib.import_module(f"minatar.environments.{module}").Env()
    columns = {name: np.asarray(c) for name, c in zip(env.state._fields, env.state, strict=True)}
    for i in range(64):
        tests[module].to_reference(reference, {name: c[i] for name, c in columns.items()})
        assert np.array_equal(obs[i].reshape(SIZE, SIZE, game.CHANNELS), reference.state()), i
    env.close()


def test_palette_is_seaborns_cubehelix_with_black_first() -> None:
    """seaborn's ``color_palette("cubehelix", n)`` is its ``mpl_palette``: matplotlib's
    colormap sampled at ``linspace(0, 1, n + 2)[1:-1]``; bit for bit."""
    matplotlib = pytest.importorskip("matplotlib")
    cmap = matplotlib.colormaps["cubehelix"]
    for n in range(1, 11):
        expected = cmap(np.linspace(0, 1, n + 2)[1:-1])[:, :3]
        palette = cubehelix_palette(n)
        assert palette.shape == (n + 1, 3) and palette.dtype == np.float64
        assert np.array_equal(palette[0], [0, 0, 0])
        assert np.array_equal(palette[1:], expected), n


def test_render_is_the_references_rgb_array() -> None:
    """Frames are ``minatar.gym.BaseEnv.render()``'s for the same state (seaborn stood in by
    its formula on matplotlib: it is not installed)."""
    matplotlib = pytest.importorskip("matplotlib")
    import minatar.gym

    def color_palette(name: str, n: int) -> list:
        assert name == "cubehelix"
        return list(map(tuple, matplotlib.colormaps[name](np.linspace(0, 1, n + 2)[1:-1])[:, :3]))

    env = envfleet.make("MinAtar/Breakout-v1", 3, seed=0)
    env.reset()
    for _ in range(12):
        env.step(np.array([1, 2, 0]))
    frames = env.render()
    assert env.render_mode == "rgb_array" and len(frames) == 3
    reference = minatar.gym.BaseEnv("breakout", render_mode="rgb_array")
    saved = getattr(minatar.gym, "sns", None)
    minatar.gym.sns = types.SimpleNamespace(color_palette=color_palette)
    try:
        for i, frame in enumerate(frames):
            row = {name: as_numpy(c)[i] for name, c in zip(env.state._fields, env.state,
                                                           strict=True)}
            to_reference(reference.game.env, row)
            expected = reference.render()
            assert frame.shape == (10, 10, 3) and frame.dtype == expected.dtype
            assert np.array_equal(frame, expected), i
    finally:
        if saved is None:
            del minatar.gym.sns
        else:
            minatar.gym.sns = saved
    env.close()


_CUDA = backend_status("cuda")


#: the v1 ids in the default suite (v0 differs in the action set only: slow)
CUDA_IDS = [pytest.param(i, marks=pytest.mark.slow) if i.endswith("-v0") else i
            for i in MINATAR_IDS]


@pytest.mark.skipif(_CUDA is not None, reason=f"cuda backend unavailable ({_CUDA})")
@pytest.mark.parametrize("env_id", CUDA_IDS)
def test_cuda_plays_numbas_trajectories(env_id: str) -> None:
    """Small: the simulator runs each CUDA thread as a Python thread."""
    for _ in cuda_agrees_with_numba(env_id, num_envs=3, steps=10, seed=5,
                                    sticky_action_prob=0.3):
        pass


@pytest.mark.slow
@only_under_simulator
def test_kernels_type_and_lower_for_a_real_gpu() -> None:
    assert_kernels_lower(f"""
        from envfleet.envs import FAMILIES
        for env_id in {[i for i in MINATAR_IDS if i.endswith("-v1")]!r}:
            spec = FAMILIES[env_id]
            lower_kernels(spec, spec.make_params(), (NEXT_STEP,))
    """)


def test_bench_measures_the_reference_as_gym_sync() -> None:
    """``envfleet bench --env MinAtar/...``: minatar's ids registered here and in each point's
    worker, its SyncVectorEnv the gym-sync baseline."""
    from envfleet.bench.runner import choose_backends, reference_imports

    assert reference_imports("MinAtar/Breakout-v1") == ("envfleet.envs.minatar.reference",)
    assert reference_imports("CartPole-v1") == ()
    backends, _ = choose_backends(["numba", "gym-sync"], "MinAtar/Breakout-v1")
    assert backends == ["numba", "gym-sync"]
