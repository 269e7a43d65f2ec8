"""Bad actions are refused before any env moves, in the native envs' words, and the env keeps
working afterwards; what Gymnasium's SyncVectorEnv hands to its envs (out-of-bounds Box values,
bool Box actions) goes to the envs here too."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

import envfleet
from envfleet.executors.actions import check_actions
from tests.executors.envs import DictEnv, TupleEnv
from tests.executors.helpers import BACKENDS

DISCRETE_CASES = [
    (np.zeros(3, dtype=np.int64), r"shape \(4,\)"),
    (np.zeros((4, 1), dtype=np.int64), r"shape \(4,\)"),
    (np.zeros(4, dtype=np.float32), "must be integers"),
    (np.zeros(4, dtype=bool), "must be integers"),
    (np.array([0, 1, 2, 0]), "invalid action for env 2: 2 is not in Discrete"),
    (np.array([0, -1, 0, 0]), "invalid action for env 1: -1 is not in Discrete"),
    (np.array([0, 0, 0, 2**64 - 1], dtype=np.uint64), "env 3"),
]


@pytest.fixture(scope="module", params=BACKENDS)
def cartpole(request):
    env = envfleet.make("CartPole-v1", 4, backend=request.param,
                        **({"num_workers": 2} if request.param == "pool" else {}))
    yield env
    env.close()


@pytest.mark.parametrize(("actions", "message"), DISCRETE_CASES)
def test_discrete_refusals_and_nothing_moves(cartpole, actions, message) -> None:
    """The native envs' cases (tests/test_make.py), same wording."""
    cartpole.reset(seed=0)
    expected = cartpole.step(np.ones(4, dtype=np.int64))[0]
    cartpole.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        cartpole.step(actions)
    np.testing.assert_array_equal(cartpole.step([1, 1, 1, 1])[0], expected)  # nothing moved
    cartpole.step(np.array([1, 0, 1, 0], dtype=np.uint8))  # other int dtypes are fine


def test_native_wording_is_the_same() -> None:
    for backend in ("numba", "pool"):
        env = envfleet.make("CartPole-v1", 4, backend=backend)
        env.reset(seed=0)
        with pytest.raises(ValueError) as caught:
            env.step(np.array([0, 1, 2, 0]))
        env.close()
        if backend == "numba":
            native = str(caught.value)
        else:
            assert str(caught.value) == native


@pytest.mark.parametrize("backend", BACKENDS)
def test_box_multidiscrete_and_nested_actions(backend) -> None:
    env = envfleet.make(DictEnv, 3, backend=backend)  # Box(-1, 1, (2,)) actions
    env.reset(seed=0)
    good = np.zeros((3, 2))
    for bad, message in [
        (np.array([[0, 0], [0, np.inf], [0, 0]]), r"env 1: \[0.0, inf\] is not finite"),
        (np.array([[0, 0], [0, 0], [np.nan, 0]]), "env 2"),
        (np.array([[0, 0], [1e39, 0], [0, 0]]), r"env 1: \[1e\+39, 0.0\] is not finite \(as "
                                                r"float32\)"),
        (np.zeros((3, 3)), r"shape \(3, 2\)"),
        (np.zeros((3, 2), dtype=complex), "must be numbers"),
    ]:
        with pytest.raises(ValueError, match=message):
            env.step(bad)
    env.step(good)
    env.step(good.astype(np.int64))  # ints are numbers
    env.step(np.full((3, 2), 5.0))  # out of bounds: the env's to handle (Gymnasium's rule)
    env.close()
    env = envfleet.make(TupleEnv, 3, backend=backend)  # MultiDiscrete([3, 4]) actions
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"env 2: \[0, 4\] is not in MultiDiscrete"):
        env.step(np.array([[0, 0], [2, 3], [0, 4]]))
    with pytest.raises(ValueError, match="must be integers"):
        env.step(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"shape \(3, 2\)"):
        env.step(np.zeros(3, dtype=np.int64))
    env.step(np.array([[0, 0], [2, 3], [1, 1]]))
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_bounds_box_actions_go_to_the_env_as_in_gymnasium(backend) -> None:
    """Pendulum clips its torque itself: the same trajectory as SyncVectorEnv's."""
    import gymnasium as gym
    from gymnasium.utils.env_checker import data_equivalence

    reference = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 3)
    env = envfleet.make("Pendulum-v1", 3, backend=backend)
    actions = np.array([[5.0], [-7.5], [1.0]], dtype=np.float32)  # bounds: [-2, 2]
    results = []
    for venv in (env, reference):
        results.append([venv.reset(seed=1)] + [venv.step(actions) for _ in range(5)])
        venv.close()
    assert data_equivalence(*results)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_box_actions(backend) -> None:
    """The env's own ``action_space.sample()`` is accepted, as SyncVectorEnv accepts it."""
    import gymnasium as gym
    from gymnasium.utils.env_checker import data_equivalence

    from tests.executors.envs import BoolActionEnv

    reference = gym.vector.SyncVectorEnv([BoolActionEnv] * 4)
    env = envfleet.make(BoolActionEnv, 4, backend=backend)
    results = []
    for venv in (env, reference):
        venv.action_space.seed(3)
        results.append([venv.reset(seed=0)] + [venv.step(venv.action_space.sample())
                                               for _ in range(4)])
    assert data_equivalence(*results)
    env.step(np.ones((4, 3), dtype=np.int64))  # 0/1 integers are bools
    with pytest.raises(ValueError, match=r"invalid action for env 2: \[0, 2, 0\] is not 0/1"):
        env.step(np.array([[0, 0, 0], [1, 1, 1], [0, 2, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="must be bools"):
        env.step(np.zeros((4, 3)))
    env.close()
    reference.close()


@pytest.mark.parametrize("backend", ["serial", "pool"])
@pytest.mark.parametrize("batch", [None, 1, 1.0, "abc", np.array(1)])
def test_non_array_batches_are_type_errors_as_in_gymnasium(backend, batch) -> None:
    import gymnasium as gym

    from tests.executors.envs import CountingEnv, DictActionEnv

    for cls, good in [(CountingEnv, np.zeros(3, dtype=np.int64)), (DictEnv, np.zeros((3, 2))),
                      (TupleEnv, np.zeros((3, 2), dtype=np.int64)), (DictActionEnv, None)]:
        reference = gym.vector.SyncVectorEnv([cls] * 3)
        reference.reset(seed=0)
        # the reference raises TypeError too (it hands a str to the envs as it is, and indexes
        # a 0-d array)
        if not isinstance(batch, np.ndarray) and (not isinstance(batch, str)
                                                  or cls is DictActionEnv):
            with pytest.raises(TypeError):
                reference.step(batch)
        env = envfleet.make(cls, 3, backend=backend)
        env.reset(seed=0)
        with pytest.raises(TypeError, match=r"actions .*must be a"):
            env.step(batch)
        if good is not None:
            env.step(good)  # nothing moved, still usable
        env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_dict_actions(backend) -> None:
    import gymnasium as gym
    from gymnasium.utils.env_checker import data_equivalence

    from tests.executors.envs import DictActionEnv

    reference = gym.vector.SyncVectorEnv([DictActionEnv] * 3)
    env = envfleet.make(DictActionEnv, 3, backend=backend)
    good = {"move": np.array([0, 1, 2]), "push": np.full((3, 2), 0.5, dtype=np.float32)}
    results = []
    for venv in (env, reference):
        out = [venv.reset(seed=4)]
        out += [venv.step(good) for _ in range(3)]
        results.append(out)
    assert data_equivalence(*results)
    bad = {"move": np.array([0, 3, 2]), "push": np.zeros((3, 2), dtype=np.float32)}
    with pytest.raises(ValueError, match=r"invalid action for env 1 at actions\['move'\]: 3 "
                                         r"is not in Discrete\(3\)"):
        env.step(bad)
    with pytest.raises(ValueError, match=r"batch of 3 actions .* the key 'push' is missing"):
        env.step({"move": np.array([0, 1, 2])})
    nan = {"move": np.array([0, 1, 2]), "push": np.array([[0, 0], [0, 0], [np.nan, 0]])}
    with pytest.raises(ValueError, match=r"env 2 at actions\['push'\]: \[nan, 0.0\] is not"):
        env.step(nan)
    with pytest.raises(TypeError, match="must be a dict"):
        env.step([good] * 3)
    env.step(good)
    env.close()


def test_float_box_batch_too_large_for_its_dtype_is_refused_without_a_warning() -> None:
    """A float64 batch for a float32 Box whose value overflows float32 names its env (the fast
    path for float Box batches casts quietly and leaves the refusal to the careful path)."""
    space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    batched = batch_space(space, 3)
    good = np.zeros((3, 2))
    assert check_actions(space, batched, good, 3).dtype == np.float32
    bad = np.zeros((3, 2))
    bad[1, 0] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="env 1"):
            check_actions(space, batched, bad, 3)
