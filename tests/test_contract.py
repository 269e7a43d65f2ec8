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


def test_torch_and_the_executors_apply_the_contracts_one_autoreset_rule() -> None:
    """``contract.on_episode_end`` is the rule of the torch engine and of the executors (the
    driver compiles it for numba and cuda); ``begin_episodes`` / ``end_truncated`` write the
    outputs it gives, on NumPy arrays and torch tensors alike."""
    import torch
    from gymnasium.vector import AutoresetMode

    from envfleet import contract
    from envfleet.envs.cartpole import SPEC
    from envfleet.executors import group
    from envfleet.native.driver import MODE_CODES
    from envfleet.native.torch_backend import torch_engine

    assert group.on_episode_end is contract.on_episode_end
    for mode, code in MODE_CODES.items():
        engine = torch_engine(SPEC, 4, code, SPEC.make_params(), 500)
        assert engine.rule == contract.on_episode_end(mode)
    assert [contract.on_episode_end(m) for m in AutoresetMode] == [
        contract.PEND, contract.RESET_NOW, contract.WAIT]
    for make in (np.ones, torch.ones):
        rewards, terminated, truncated = make(4), make(4) > 0, make(4) < 0
        contract.end_truncated(rewards, terminated, truncated, [1, 2])
        assert rewards.tolist() == [1, 0, 0, 1] and terminated.tolist() == [True, False, False,
                                                                            True]
        assert truncated.tolist() == [False, True, True, False]
        contract.begin_episodes(rewards, terminated, truncated, [2])
        assert truncated.tolist() == [False, True, False, False] and rewards[2] == 0
