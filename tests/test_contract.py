"""The vector contract written once (``envfleet.contract.VectorContract``): native envs and
executors inherit it, and refuse the same misuse with the same error and words."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.contract import ClosedEnvError, VectorContract
from envfleet.executors import ExecutorVectorEnv
from envfleet.native.vector_env import NativeVectorEnv


def test_native_envs_and_executors_share_one_contract_base() -> None:
    assert issubclass(NativeVectorEnv, VectorContract)
    assert issubclass(ExecutorVectorEnv, VectorContract)


@pytest.mark.parametrize("backend", ["numba", "serial"])
def test_a_closed_env_raises_the_same_error_with_the_same_words(backend) -> None:
    env = envfleet.make("CartPole-v1", 2, backend=backend)
    env.reset(seed=0)
    env.close()
    for call in (lambda: env.reset(), lambda: env.step(np.zeros(2, dtype=np.int64))):
        with pytest.raises(ClosedEnvError) as caught:
            call()
        assert isinstance(caught.value, gym.error.ClosedEnvironmentError)
        assert isinstance(caught.value, RuntimeError)
        assert str(caught.value) == (f"Trying to operate on `{type(env).__name__}`, after a "
                                     f"call to `close()` (this env is closed)")


@pytest.mark.parametrize("backend", ["numba", "serial"])
def test_reset_and_step_rules_are_worded_alike(backend) -> None:
    env = envfleet.make("CartPole-v1", 3, backend=backend)
    with pytest.raises(RuntimeError, match=r"^call reset\(\) before step\(\)$"):
        env.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(RuntimeError, match=r"^the first reset\(\) must reset every env"):
        env.reset(options={"reset_mask": np.array([True, False, True])})
    env.close()
