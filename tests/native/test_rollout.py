"""``NativeVectorEnv.rollout``: the same trajectories as a user's step loop on every backend, one
refusal report naming the step and the env, and nothing moved from the refused step on.

The cuda cases run under Numba's CUDA simulator in CI (CUDA graphs are a GPU-only path: the GPU
check script runs these tests on a real GPU, where the third rollout replays a graph).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import envfleet
from envfleet.native import tensor_math
from envfleet.registry import backend_status
from tests.cuda_helpers import StepOps, assert_same, host, reads_back

#: "torch-ops": the torch engine's device route (what a GPU runs: enqueued rollouts, rewound
#: on a refusal) on CPU tensors; "torch-cuda": the torch backend on a GPU, where there is one
BACKENDS = (["numba", "torch", "torch-ops"]
            + (["cuda"] if backend_status("cuda") is None else [])
            + (["torch-cuda"] if torch.cuda.is_available() else []))


@pytest.fixture(autouse=True)
def device_route(request, monkeypatch):
    """For "torch-ops", every torch op off the host route (``tensor_math.HOST_NUMPY``)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "torch-ops":
        monkeypatch.setattr(tensor_math, "HOST_NUMPY", False)


def make(backend, n, **kw):
    kw.setdefault("seed", 5)
    kw.setdefault("max_episode_steps", 7)
    if backend == "cuda":
        kw.setdefault("threads_per_block", 32)  # the simulator pays for idle threads
    if backend == "torch-cuda":
        kw["device"] = "cuda"
    env = envfleet.make("CartPole-v1", n, backend=backend.split("-")[0], **kw)
    assert getattr(env.engine, "enqueues", False) == (backend != "numba" and backend != "torch")
    return env


def scripted(obs):
    """A deterministic policy of the observation: push towards the pole's lean."""
    lean = obs[:, 2] > 0
    return lean.long() if hasattr(lean, "long") else lean.astype(np.int64)


def stepped(n, steps, mode="NextStep"):
    """The reference: a numba env stepped by hand with ``scripted``."""
    env = make("numba", n, autoreset_mode=mode)
    obs, _ = env.reset()
    return (*_continue(env, obs, steps), env)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_rollout_records_the_step_loop(backend, mode):
    n, steps = 6, 12
    ref, ref_next, ref_episodes, ref_env = stepped(n, steps, mode)
    env = make(backend, n, autoreset_mode=mode)
    env.reset()
    for repeat in range(3):  # on a GPU the third rollout replays a captured graph
        out = env.rollout(scripted, steps)
        for name in ("obs", "actions", "rewards", "terminated", "truncated"):
            got = getattr(out, name)
            assert tuple(got.shape) == ref[name].shape, name
            assert_same(got, ref[name], f"{name} (rollout {repeat})")
        assert_same(out.next_obs, ref_next, "next_obs")
        assert out.episodes == ref_episodes > 0
        if repeat < 2:  # the reference goes on for the next rollout
            ref, ref_next, ref_episodes = _continue(ref_env, ref_next, steps)


def _continue(env, obs, steps):
    seen = {k: [] for k in ("obs", "actions", "rewards", "terminated", "truncated")}
    episodes = 0
    for _ in range(steps):
        a = scripted(obs)
        seen["obs"].append(obs)
        seen["actions"].append(a)
        obs, r, te, tr, _ = env.step(a)
        seen["rewards"].append(r)
        seen["terminated"].append(te)
        seen["truncated"].append(tr)
        episodes += int((te | tr).sum())
    return {k: np.stack(v) for k, v in seen.items()}, obs, episodes


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollout_from_an_action_batch(backend):
    n, steps = 5, 9
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, n))
    ref = make("numba", n)
    ref.reset()
    rewards = [ref.step(a)[1] for a in actions]
    env = make(backend, n)
    env.reset()
    out = env.rollout(actions)
    assert_same(out.actions, actions.astype(np.int64), "actions")
    assert_same(out.rewards, np.stack(rewards), "rewards")
    assert_same(out.next_obs, ref.engine.obs, "next_obs")
    for _ in range(3):  # the third replays a graph on a GPU: same batch, same work
        again = env.rollout(actions)
    ref_rewards = [ref.step(a)[1] for a in np.concatenate([actions] * 3)][-len(actions):]
    assert_same(again.rewards, np.stack(ref_rewards), "rewards of the third repeat")
    no_record = env.rollout(actions, record=False)
    assert no_record.obs is None and no_record.rewards is None
    assert tuple(no_record.next_obs.shape) == (n, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_refused_step_names_step_and_env_and_moves_nothing_after(backend):
    n, steps, bad_step, bad_env = 6, 8, 5, 3
    actions = np.ones((steps, n), dtype=np.int64)
    actions[bad_step, bad_env] = 7
    actions[bad_step + 1, 1] = 9  # a later refusal must not be the one reported
    env = make(backend, n)
    env.reset()
    with pytest.raises(ValueError, match=rf"^rollout step {bad_step}: invalid action for env "
                                         rf"{bad_env}: 7 is not in Discrete\(2\)"):
        env.rollout(actions)
    ref = make("numba", n)
    ref.reset()
    for a in actions[:bad_step]:
        ref.step(a)
    for name, got, want in zip(ref.state._fields, env.state, ref.state, strict=True):
        assert_same(got, want, f"state.{name}")
    # the env goes on from where the refusal left it
    assert_same(env.step(np.zeros(n, np.int64))[0], ref.step(np.zeros(n, np.int64))[0], "obs")


@pytest.mark.parametrize("backend", BACKENDS)
def test_disabled_refuses_the_step_after_an_episode_ends(backend):
    """DISABLED: the step after the time limit is refused for env 0 (the first that needs a
    reset), named as the step loop names it, the envs as they were at that step."""
    n, steps, limit = 4, 10, 7
    env = make(backend, n, autoreset_mode="Disabled", max_episode_steps=limit)
    env.reset()
    actions = np.tile(np.array([0, 1, 0, 1]), (steps, 1))
    with pytest.raises(ValueError, match=rf"^rollout step {limit}: env 0 has finished its "
                                         r"episode and autoreset_mode is DISABLED"):
        env.rollout(actions)
    ref = make("numba", n, autoreset_mode="Disabled", max_episode_steps=limit)
    ref.reset()
    for a in actions[:limit]:
        ref.step(a)
    for name, got, want in zip(ref.state._fields, env.state, ref.state, strict=True):
        assert_same(got, want, f"state.{name}")
    assert_same(env.engine.truncated, ref.engine.truncated, "truncated")


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollout_checks_its_arguments(backend):
    env = make(backend, 3)
    with pytest.raises(RuntimeError, match="reset"):
        env.rollout(scripted, 2)
    env.reset()
    with pytest.raises(ValueError, match="num_steps must be a positive int"):
        env.rollout(scripted, 0)
    with pytest.raises(ValueError, match="num_steps=3 but the action batch has 2 steps"):
        env.rollout(np.zeros((2, 3), np.int64), 3)
    with pytest.raises(ValueError, match=r"actions must have shape \(3,\)"):
        env.rollout(np.zeros((2, 4), np.int64))
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.rollout(scripted, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollout_outputs_are_copies(backend):
    n = 4
    env = make(backend, n)
    env.reset()
    first = env.rollout(scripted, 3)
    kept = host(first.obs).copy(), host(first.next_obs).copy()
    for _ in range(2):
        env.rollout(scripted, 3)
    np.testing.assert_array_equal(host(first.obs), kept[0])
    np.testing.assert_array_equal(host(first.next_obs), kept[1])


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_a_torch_rollout_off_the_host_reads_nothing_back(mode, monkeypatch):
    """What a GPU captures of a torch rollout (the policy's ops aside) reads no value back and
    repeats the same ops: checked on the device route, on CPU tensors."""
    monkeypatch.setattr(tensor_math, "HOST_NUMPY", False)
    env = make("torch-ops", 8, autoreset_mode=mode, max_episode_steps=50)
    env.reset()
    replay, runs = env.engine.replay, []

    def run(key, work):
        with StepOps() as seen:
            work()
        runs.append(seen.ops)

    monkeypatch.setattr(replay, "run", run)
    for _ in range(4):
        env.rollout(scripted, 5)
    assert len(runs) == 4
    assert not reads_back(runs[-1]), reads_back(runs[-1])
    assert runs[-1] == runs[2]
