"""Training where the env's outputs are already tensors on the agent's device (``cuda`` backend
with ``--device cuda``, ``torch`` backend): observations, actions, masks and rewards stay there,
nothing comes back to the host per step (counted here on every host read ``ppo.py`` makes),
episode returns are summed on the device; and the ``cuda`` backend trains under Numba's CUDA
simulator (CartPole from the command line, Chess-v0 with its masks)."""

from __future__ import annotations

import collections
import dataclasses
import json
import sys
import time

import numpy as np
import pytest
import torch

import envfleet
from envfleet.cli import main
from envfleet.train import ppo

needs_cuda = pytest.mark.skipif("cuda" not in envfleet.available_backends(),
                                reason="the cuda backend needs a GPU or NUMBA_ENABLE_CUDASIM=1")

#: the cuda backend's block size in these tests: the simulator runs every thread of a block as
#: a Python thread (256 by default), 4x slower than 32 for 2 envs
SMALL_BLOCKS = {"threads_per_block": 32}

#: every way a tensor's values reach the host (``np.asarray`` calls ``__array__``)
HOST_READS = ("cpu", "numpy", "item", "tolist", "__array__", "__bool__", "__float__", "__int__")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts of the host reads made from ``ppo.py``, by (function, read)."""
    counts: collections.Counter = collections.Counter()
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            caller = sys._getframe(1).f_code
            if caller.co_filename == ppo.__file__:
                counts[(caller.co_name, _name)] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


def no_evaluation(*args, **kwargs) -> ppo.EvalResult:
    """``train``'s ``evaluate_fn`` that plays nothing (the test is about the training loop)."""
    return ppo.EvalResult(0.0, 1, True, [0.0], 0.0)


def tiny_args(backend: str, num_steps: int, **kwargs) -> ppo.Args:
    """Two iterations of ``num_steps`` steps on 2 CartPole envs (an ideal one after each)."""
    return ppo.Args(env_id="CartPole-v1", backend=backend, num_envs=2, num_steps=num_steps,
                    total_steps=2 * 2 * num_steps, eval_every=0, hidden_sizes=(8,),
                    ideal_every=1, env_kwargs=SMALL_BLOCKS if backend == "cuda" else {},
                    **kwargs)


@pytest.mark.parametrize("backend", ["torch", pytest.param("cuda", marks=needs_cuda)])
def test_no_host_read_per_step_when_the_env_gives_tensors(backend, host_reads):
    """Longer rollouts, the same host reads: none of them is per step (the rollout's episode
    returns and the update's statistics come back once per iteration)."""
    reads = []
    for num_steps in (2, 5):
        host_reads.clear()
        ppo.train(tiny_args(backend, num_steps), evaluate_fn=no_evaluation)
        reads.append(dict(host_reads))
    assert reads[0] == reads[1]
    assert not any(function in ("collect", "step") for function, _ in reads[0]), reads[0]


@pytest.mark.parametrize("backend", ["torch", pytest.param("cuda", marks=needs_cuda)])
def test_the_rollout_storage_is_on_the_env_device(backend):
    """The storage and the running episode returns live where the env's outputs are."""
    args = tiny_args(backend, 3)
    env = ppo.make_envs(args, args.num_envs, args.seed)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor)
    agent = ppo.build_agent(env, args)
    buf = ppo.make_rollout(args, agent, info, obs.device)
    books = ppo.Bookkeeping.new(args, obs.device)
    ppo.collect(env, agent, buf, obs, info, ppo.Clock(), None, True)
    books.observe(buf)
    env.close()
    for tensor in (buf.obs, buf.actions, buf.rewards, buf.ended, buf.valid, books.ep_return):
        assert tensor.device == obs.device
    assert books.ep_return.sum() > 0  # the running episodes' rewards were counted


def test_evaluation_reads_back_once_per_step(host_reads):
    """A greedy evaluation on an env giving tensors reads one small tensor back per step (the
    loop must know when to stop), not the rewards and both episode flags one by one."""
    env = envfleet.make("CartPole-v1", 3, backend="torch", seed=0, copy=False)
    agent = ppo.Agent(env.single_observation_space, env.single_action_space, (8,))
    steps = 0
    step = env.step

    def counting_step(actions):
        nonlocal steps
        steps += 1
        return step(actions)

    env.step = counting_step
    result = ppo.evaluate(env, agent, 0, torch.device("cpu"), True)
    env.close()
    assert result.episodes == 3 and steps > 5
    # .numpy() after .cpu() is the same read (and a CUDA tensor's .numpy() raises)
    reads = sum(n for (function, read), n in host_reads.items()
                if function == "evaluate" and read != "numpy")
    assert reads <= steps


def test_evaluation_on_tensors_returns_what_it_returns_on_arrays():
    """The same greedy returns from the torch backend (tensors) and numba (NumPy arrays)."""
    results = []
    for backend in ("torch", "numba"):
        env = envfleet.make("CartPole-v1", 4, backend=backend, seed=0, copy=False)
        torch.manual_seed(0)
        agent = ppo.Agent(env.single_observation_space, env.single_action_space, (8,))
        results.append(ppo.evaluate(env, agent, 3, torch.device("cpu"), backend == "torch"))
        env.close()
    assert results[0].returns == results[1].returns and results[0].episodes == 4


def test_episode_returns_on_the_device_match_the_host_bookkeeping():
    """The cumulative-sum bookkeeping of tensor envs counts the same episodes, with the same
    returns in the same order, and carries the same running returns, as the host loop."""
    rng = np.random.default_rng(0)
    args = ppo.Args(num_envs=5, num_steps=7)
    host, device = ppo.Bookkeeping.new(args), ppo.Bookkeeping.new(args, torch.device("cpu"))
    for _ in range(4):
        buf = ppo.Rollout(7, 5, (1,), (), torch.long, None, torch.device("cpu"))
        buf.rewards.copy_(torch.from_numpy(rng.normal(size=(7, 5)).astype(np.float32)))
        buf.ended.copy_(torch.from_numpy(rng.random((7, 5)) < 0.25))
        host.observe(buf)
        device.observe(buf)
        np.testing.assert_allclose(device.ep_return.numpy(), host.ep_return, rtol=1e-12,
                                   atol=1e-12)
    assert len(host.recent) > 10
    np.testing.assert_allclose(list(device.recent), list(host.recent), rtol=1e-12, atol=1e-12)


def test_end_to_end_excludes_only_the_evaluations_inside_the_loop():
    """The final play-out evaluation (after the loop's clock stopped) is not taken off the
    loop's time again: end-to-end steps/s stays below what the env and learning alone allow."""

    def slow_play_out(env, agent, seed, device, torch_actions, bounds, target, *args, **kwargs):
        if target is None:  # the play-out after the loop: slow
            time.sleep(1.0)
            return ppo.EvalResult(10.0, 1, True, [10.0], 1.0)
        return ppo.EvalResult(10.0, 0, False, [], 0.0)  # stopped below the target

    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=2, num_steps=4,
                    total_steps=16, eval_every=8, target_return=400.0, hidden_sizes=(8,),
                    ideal_every=0)
    _, summary = ppo.train(args, evaluate_fn=slow_play_out)
    train_s = summary.total_steps / summary.sps_end_to_end
    assert train_s >= summary.times["env"] + summary.times["learning"]
    assert train_s <= summary.wall_s


@needs_cuda
def test_train_cartpole_on_the_cuda_backend_from_the_command_line(tmp_path, monkeypatch):
    """``envfleet train CartPole-v1 --backend cuda`` (a smoke run: the simulator is slow; target
    0, so the one evaluation episode is played once, and reaches it)."""
    make_envs = ppo.make_envs

    def small_blocks(args, num_envs, seed):
        args = dataclasses.replace(args, env_kwargs={**args.env_kwargs, **SMALL_BLOCKS})
        return make_envs(args, num_envs, seed)

    monkeypatch.setattr(ppo, "make_envs", small_blocks)
    out = tmp_path / "run.json"
    assert main(["train", "CartPole-v1", "--backend", "cuda", "--device", "cpu",
                 "--num-envs", "2", "--num-steps", "4", "--total-steps", "8",
                 "--eval-episodes", "1", "--eval-every", "0", "--target-return", "0",
                 "--quiet", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["backend"] == "cuda" and summary["total_steps"] == 8
    assert summary["sps_env"] > 0 and summary["sps_end_to_end"] > 0
    assert summary["stop_reason"] == "target" and summary["final_eval"]["episodes"] == 1


@needs_cuda
def test_train_chess_with_masks_on_the_cuda_backend():
    """Chess-v0 on the cuda backend refuses illegal moves: two iterations run only if the
    device-side masks were applied at every step."""
    args = ppo.Args(env_id="Chess-v0", backend="cuda", num_envs=2, num_steps=3,
                    total_steps=12, eval_every=0, hidden_sizes=(8,), ideal_every=1,
                    env_kwargs={"opponent": "random", "observation": "planes", **SMALL_BLOCKS})
    _, summary = ppo.train(args, evaluate_fn=no_evaluation)
    assert summary.total_steps == 12 and summary.stop_reason == "steps"
    assert summary.ideal_iterations >= ppo.IDEAL_MIN_ITERATIONS
