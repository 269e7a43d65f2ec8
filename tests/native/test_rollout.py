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


def _state_after(actions, n, **kw):
    """The state of a numba env stepped by hand with ``actions`` (one batch per step)."""
    ref = make("numba", n, **kw)
    ref.reset()
    for a in actions:
        ref.step(a)
    return ref


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_copying_env_gives_the_policy_each_steps_own_observations(backend):
    """copy=True: a policy that keeps its inputs holds each step's observations, not T
    references to the engine's buffer."""
    n, steps = 5, 9
    kept = []

    def keeper(obs):
        kept.append(obs)
        return scripted(obs)

    env = make(backend, n)
    env.reset()
    out = env.rollout(keeper, steps)
    assert len(kept) == steps
    for t in range(steps):
        assert_same(kept[t], host(out.obs[t]), f"the policy's input at step {t}")
    assert_same(out.obs, stepped(n, steps)[0]["obs"], "obs")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_policy_editing_its_input_changes_nothing_recorded_or_stepped(backend):
    n, steps = 5, 9

    def editor(obs):
        a = scripted(obs)
        obs[...] = 1e6  # in place, on its own copy
        return a

    env = make(backend, n)
    env.reset()
    out = env.rollout(editor, steps)
    ref, ref_next, ref_episodes, _ = stepped(n, steps)
    for name in ("obs", "actions", "rewards", "terminated", "truncated"):
        assert_same(getattr(out, name), ref[name], name)
    assert_same(out.next_obs, ref_next, "next_obs")
    assert out.episodes == ref_episodes


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_false_gives_the_policy_the_engines_buffer(backend):
    """copy=False, as documented: the policy's input is the engine's observation buffer."""
    env = make(backend, 3, copy=False)
    env.reset()
    kept = []
    env.rollout(lambda obs: kept.append(obs) or scripted(obs), 3)
    assert all(obs is env.engine.obs for obs in kept)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_policy_that_closes_the_env_gets_the_closed_env_error(backend):
    from gymnasium.error import ClosedEnvironmentError

    env = make(backend, 3)
    env.reset()
    calls = []

    def closer(obs):
        calls.append(1)
        if len(calls) == 2:
            env.close()
        return scripted(obs)

    with pytest.raises(ClosedEnvironmentError, match=r"^rollout step 1: .*\(this env is closed\)"):
        env.rollout(closer, 5)
    assert len(calls) == 2
    with pytest.raises(ClosedEnvironmentError):
        env.step(np.zeros(3, np.int64))
    env.close()  # still idempotent


def _wrong_shape(obs):
    return np.zeros(len(obs) + 1, np.int64)


def _raising(obs):
    raise KeyError("the policy's own error")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bad_action_batch_from_the_policy_names_its_step(backend):
    """The policy's actions of the wrong shape at step 2: 'rollout step 2:' on every route,
    the envs as they were at step 2."""
    n, fail_at = 4, 2
    calls = []

    def policy(obs):
        calls.append(1)
        return _wrong_shape(obs) if len(calls) > fail_at else scripted(obs)

    env = make(backend, n)
    env.reset()
    with pytest.raises(ValueError, match=rf"^rollout step {fail_at}: actions must have shape "
                                         rf"\({n},\)"):
        env.rollout(policy, 6)
    ref = make("numba", n)
    obs, _ = ref.reset()
    for _ in range(fail_at):
        obs = ref.step(scripted(obs))[0]
    for name, got, want in zip(ref.state._fields, env.state, ref.state, strict=True):
        assert_same(got, want, f"state.{name}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("late", [_wrong_shape, _raising], ids=["wrong-shape", "raises"])
def test_an_earlier_refused_step_is_the_error_a_later_failure_reports(backend, late):
    """A refused action at step 1 then a failure at step 3: the step loop raises at step 1,
    so every route does (the enqueued ones learn of step 1 only at the end), the envs as they
    were at step 1."""
    n, bad_step, fail_at = 4, 1, 3
    calls = []

    def policy(obs):
        calls.append(1)
        t = len(calls) - 1
        if t == fail_at:
            return late(obs)
        a = np.ones(n, np.int64)
        if t == bad_step:
            a[2] = 5
        return a

    env = make(backend, n)
    env.reset()
    with pytest.raises(ValueError, match=rf"^rollout step {bad_step}: invalid action for env 2: "
                                         r"5 is not in Discrete\(2\)"):
        env.rollout(policy, 6)
    ref = _state_after(np.ones((bad_step, n), np.int64), n)
    for name, got, want in zip(ref.state._fields, env.state, ref.state, strict=True):
        assert_same(got, want, f"state.{name}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_same_step_rollout_records_the_final_observations(backend):
    """SAME_STEP: the rollout's final_obs are the step loop's info["final_obs"] (zero rows for
    envs that did not end), rollout after rollout; NEXT_STEP records none (obs holds them)."""
    n, steps = 5, 10
    ref = make("numba", n, autoreset_mode="SameStep")
    obs, _ = ref.reset()
    env = make(backend, n, autoreset_mode="SameStep")
    env.reset()
    for repeat in range(3):
        want = np.zeros((steps, n, 4), np.float32)
        for t in range(steps):
            obs, _, _, _, info = ref.step(scripted(obs))
            if "final_obs" in info:
                want[t][info["_final_obs"]] = info["final_obs"][info["_final_obs"]]
        assert want.any(axis=(1, 2)).sum() >= 1  # some steps end episodes, some do not
        assert not want.any(axis=(1, 2)).all()
        out = env.rollout(scripted, steps)
        assert_same(out.final_obs, want, f"final_obs (rollout {repeat})")
    assert env.rollout(scripted, 2, record=False).final_obs is None
    next_step = make(backend, n)
    next_step.reset()
    assert next_step.rollout(scripted, 2).final_obs is None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_rollout_too_large_for_memory_is_refused_before_allocating(backend, mode):
    """The same error (InsufficientMemoryError, a MemoryError) on every backend, before any
    buffer is allocated or any env moves."""
    env = make(backend, 3, autoreset_mode=mode)
    obs, _ = env.reset()
    with pytest.raises(envfleet.InsufficientMemoryError,
                       match=r"rollout with num_steps=1000000000000 needs about [\d.]+ GiB but "
                             r"only .* is available: use fewer steps"):
        env.rollout(scripted, 10**12)
    assert_same(env.engine.obs, host(obs), "obs")
    assert env.rollout(scripted, 2).rewards.shape[0] == 2  # the env goes on


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_allocation_is_the_same_error(backend, monkeypatch):
    """Where the memory available is unknown, the allocation's own failure (NumPy's
    MemoryError or ValueError, torch's RuntimeError) is worded alike too."""
    from envfleet.native import rollout as rollout_module

    monkeypatch.setattr(rollout_module, "available_host_memory", lambda: None)
    monkeypatch.setattr(rollout_module, "_device_memory", lambda *args: None)
    env = make(backend, 3)
    env.reset()
    with pytest.raises(envfleet.InsufficientMemoryError,
                       match=r"rollout with num_steps=1000000000000000000: its buffers could "
                             r"not be allocated .*: use fewer steps"):
        env.rollout(scripted, 10**18)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_action_batch_is_checked_as_the_step_loop_checks_it_every_time(backend):
    """A batch of another shape or dtype after a good one (which the enqueued route keeps a
    buffer for) is refused as the step loop refuses it, not converted into the kept buffer."""
    n, steps = 3, 4
    env = make(backend, n)
    env.reset()
    good = np.ones((steps, n), np.int64)
    env.rollout(good)
    with pytest.raises(ValueError, match=r"^rollout step 0: .*integer"):
        env.rollout(np.full((steps, n), 0.7))
    with pytest.raises(ValueError, match=rf"^rollout step 0: actions must have shape \({n},\)"):
        env.rollout(np.ones((steps, n + 1), np.int64))
    out = env.rollout(good)
    assert_same(out.actions, good, "actions")
