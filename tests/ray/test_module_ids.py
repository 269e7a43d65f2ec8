"""A user's native env named by its module (``module:Id``) on ``backend="ray"``: the family travels
with the actor (the driver imported the module, which registered the id), and the batch is the
numba env's."""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from tests.native.user_env import ENV_ID, MODULE_ID, forget

pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("cluster")


def test_module_id_runs_on_ray_actors_as_the_numba_env() -> None:
    forget()  # the actors never imported the module either
    n = 5
    env = envfleet.make(MODULE_ID, n, backend="ray", num_workers=2, num_cpus=0.1, seed=4)
    ref = envfleet.make(ENV_ID, n, backend="numba", seed=4)
    try:
        rng = np.random.default_rng(0)
        np.testing.assert_array_equal(env.reset()[0], ref.reset()[0])
        for _ in range(30):
            actions = rng.integers(0, 2, n)
            for a, b in zip(env.step(actions)[:4], ref.step(actions)[:4], strict=True):
                np.testing.assert_array_equal(a, b)
    finally:
        env.close()
        ref.close()
        forget()
