"""Bad actions are refused before any env moves, in the native envs' words, and the env keeps
working afterwards."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
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
        (np.array([[0, 0], [0, 2.0], [0, 0]]), "env 1: \\[0.0, 2.0\\] is not a finite value"),
        (np.array([[0, 0], [0, 0], [np.nan, 0]]), "env 2"),
        (np.zeros((3, 3)), r"shape \(3, 2\)"),
        (np.zeros((3, 2), dtype=complex), "must be numbers"),
    ]:
        with pytest.raises(ValueError, match=message):
            env.step(bad)
    env.step(good)
    env.step(good.astype(np.int64))  # ints are numbers
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
    with pytest.raises(ValueError, match=r"invalid action for env 1: .* is not in Dict"):
        env.step(bad)
    with pytest.raises(ValueError, match="batch of 3 actions"):
        env.step({"move": np.array([0, 1, 2])})
    env.step(good)
    env.close()
