"""The ideal loop is an upper bound of the same work: it keeps exactly the transitions the
real loop kept (the same observations through the network), does the same bookkeeping and as
many forward passes and gradient steps, from the real agent's current parameters, timed the
same way right after each real iteration (issue: end-to-end / ideal > 1 must be a bug, not a
different amount of work or a different moment)."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import torch

import envfleet
from envfleet.train import ideal, ppo
from tests.train.envs import MASKED_TOY_ID, CountingEnv

LENGTH, NUM_ENVS, NUM_STEPS = 3, 4, 10


def real_iteration(target_kl: float | None = None, env_fn=None, rollouts: int = 2):
    """Real rollouts + one update on an env whose episodes end every LENGTH steps."""
    env = envfleet.make(env_fn or functools.partial(CountingEnv, LENGTH), NUM_ENVS,
                        backend="serial")
    args = ppo.Args(num_envs=NUM_ENVS, num_steps=NUM_STEPS, num_minibatches=2,
                    update_epochs=4, target_kl=target_kl)
    agent = ppo.Agent(env.single_observation_space, env.single_action_space)
    optimizer = ppo.make_optimizer(agent, args)
    obs, info = env.reset(seed=0)
    buf = ppo.make_rollout(args, agent, info, torch.device("cpu"))
    # two rollouts: the second starts right after episodes ended (its first step is dropped)
    for _ in range(rollouts):
        obs, info = ppo.collect(env, agent, buf, obs, info, ppo.Clock(), None, False)
    stats = ppo.update(agent, optimizer, buf, args, 1.0, torch.Generator().manual_seed(0))
    env.close()
    return args, agent, optimizer, buf, info, stats


def test_ideal_keeps_the_real_transitions_and_gradient_steps():
    args, agent, optimizer, buf, info, stats = real_iteration()
    assert not buf.valid.all()  # reset steps were dropped from the real rollout
    ideal = ppo.ideal_loop(agent, args, info, None, False)
    ideal.iterate(buf, int(stats["epochs"]), agent, optimizer)
    assert torch.equal(ideal.buf.valid, buf.valid)
    assert torch.equal(ideal.buf.ended, buf.ended)
    assert torch.equal(ideal.buf.rewards, buf.rewards)
    # the same observations through the network (not one fixed observation)
    assert torch.equal(ideal.buf.obs, buf.obs) and len(buf.obs.unique()) > 1
    assert ideal.last_stats["minibatch_steps"] == stats["minibatch_steps"]
    # the same bookkeeping: the real loop's episodes, counted again
    books = ppo.Bookkeeping.new(args)
    books.observe(buf)
    assert list(ideal.books.recent) == list(books.recent) and len(books.recent) > 0


def test_ideal_replays_the_action_masks():
    """An env with action masks: the ideal's rollout sees the real rollout's masks."""
    args, agent, optimizer, buf, info, stats = real_iteration(
        env_fn=lambda: gym.make(MASKED_TOY_ID))
    ideal = ppo.ideal_loop(agent, args, info, None, False)
    ideal.iterate(buf, int(stats["epochs"]), agent, optimizer)
    assert torch.equal(ideal.buf.masks, buf.masks) and not buf.masks.all()
    chosen = ideal.buf.masks[:-1].gather(-1, ideal.buf.actions.unsqueeze(-1))
    assert chosen.all()  # its sampled actions are legal under the replayed masks


def test_ideal_repeats_an_update_stopped_early_by_target_kl():
    """target_kl may stop the real update early; the ideal one runs the same epochs."""
    args, agent, optimizer, buf, info, stats = real_iteration(target_kl=-1.0)
    assert stats["epochs"] == 1  # stopped after the first epoch
    ideal = ppo.ideal_loop(agent, args, info, None, False)
    ideal.iterate(buf, int(stats["epochs"]), agent, optimizer)
    assert ideal.last_stats["minibatch_steps"] == stats["minibatch_steps"]


def test_ideal_starts_from_the_real_agent_and_leaves_it_alone(monkeypatch):
    """Each ideal iteration starts from the real agent's current parameters and Adam state
    (not a copy taken once and trained apart: another policy, other numbers), in tensors of
    its own."""
    args, agent, optimizer, buf, info, stats = real_iteration()
    ideal = ppo.ideal_loop(agent, args, info, None, False)
    ppo.update(agent, optimizer, buf, args, 1.0, torch.Generator().manual_seed(1))  # moves on
    real_state = {k: v.clone() for k, v in agent.state_dict().items()}
    real_adam = [{k: v.clone() for k, v in s.items()} for s in optimizer.state.values()]
    seen = {}
    update = ppo.update

    def spy(model, optim, *a, **k):
        seen["state"] = {n: v.clone() for n, v in model.state_dict().items()}
        seen["adam"] = [{n: v.clone() for n, v in s.items()} for s in optim.state.values()]
        return update(model, optim, *a, **k)

    monkeypatch.setattr(ppo, "update", spy)
    ideal.iterate(buf, int(stats["epochs"]), agent, optimizer)
    assert seen["state"].keys() == real_state.keys()
    assert all(torch.equal(seen["state"][k], real_state[k]) for k in real_state)
    assert all(torch.equal(a[n], b[n]) for a, b in zip(seen["adam"], real_adam, strict=True)
               for n in b)
    # the real agent and optimizer are untouched by the ideal's update
    assert all(torch.equal(v, real_state[k]) for k, v in agent.state_dict().items())
    assert all(p is not q for p, q in zip(ideal.agent.parameters(), agent.parameters(),
                                          strict=True))


def test_ideal_does_the_same_forward_and_backward_passes():
    """Counted per network: the ideal iteration's forward passes, backward passes and
    optimizer steps are the real iteration's."""
    def counting(model, optim):
        counts = {"forward": 0, "backward": 0, "steps": 0}
        for net in (model.actor, model.critic):
            net.register_forward_hook(lambda *_: counts.__setitem__(
                "forward", counts["forward"] + 1))
            net[0].weight.register_hook(lambda _: counts.__setitem__(  # its gradient computed
                "backward", counts["backward"] + 1))
        optim.register_step_post_hook(lambda *_: counts.__setitem__("steps",
                                                                    counts["steps"] + 1))
        return counts

    env = envfleet.make(functools.partial(CountingEnv, LENGTH), NUM_ENVS, backend="serial")
    args = ppo.Args(num_envs=NUM_ENVS, num_steps=NUM_STEPS, num_minibatches=2, update_epochs=3)
    agent = ppo.Agent(env.single_observation_space, env.single_action_space)
    optimizer = ppo.make_optimizer(agent, args)
    obs, info = env.reset(seed=0)
    buf = ppo.make_rollout(args, agent, info, torch.device("cpu"))
    ideal = ppo.ideal_loop(agent, args, info, None, False)
    real_counts = counting(agent, optimizer)
    ideal_counts = counting(ideal.agent, ideal.optimizer)
    for _ in range(2):
        before = dict(real_counts)
        obs, info = ppo.collect(env, agent, buf, obs, info, ppo.Clock(), None, False)
        stats = ppo.update(agent, optimizer, buf, args, 1.0, torch.Generator().manual_seed(0))
        real = {k: real_counts[k] - before[k] for k in real_counts}
        before = dict(ideal_counts)
        ideal.iterate(buf, int(stats["epochs"]), agent, optimizer)
        assert {k: ideal_counts[k] - before[k] for k in ideal_counts} == real
        assert real["steps"] == 2 * 3 and real["forward"] > real["backward"] > 0
    env.close()


def record_loops(monkeypatch) -> list[str]:
    """The order of real and ideal rollouts in ``train`` ("R" real, "I" ideal)."""
    order: list[str] = []
    collect = ppo.collect

    def spy(env, *a, **k):
        order.append("I" if isinstance(env, ideal.ReplayEnv) else "R")
        return collect(env, *a, **k)

    monkeypatch.setattr(ppo, "collect", spy)
    return order


def test_train_times_an_ideal_iteration_right_after_each_real_one(monkeypatch):
    """Interleaved one for one, so both see the same load (not a block of ideal iterations
    after training, when the machine may be busier or quieter), none untimed."""
    order = record_loops(monkeypatch)
    iterations = ideal.IDEAL_MIN_ITERATIONS + 2
    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                    total_steps=8 * 16 * iterations, eval_every=0, eval_episodes=4, seed=1)
    _, summary = ppo.train(args)
    assert "".join(order) == "RI" * iterations
    assert summary.ideal_iterations == iterations


def test_a_longer_run_times_every_ideal_every_th_iteration(monkeypatch):
    """After the first IDEAL_MIN_ITERATIONS (a short run's median and IQR, interleaved), one
    ideal iteration every ``ideal_every`` real ones (and after the last): the ideal costs as
    much as a real update, so timing every one would double the wall time."""
    order = record_loops(monkeypatch)
    first = ideal.IDEAL_MIN_ITERATIONS
    iterations = first + 5
    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                    total_steps=8 * 16 * iterations, eval_every=0, eval_episodes=4, seed=1,
                    ideal_every=4)
    _, summary = ppo.train(args)
    expected = "".join("RI" if i <= first or i % 4 == 0 or i == iterations else "R"
                       for i in range(1, iterations + 1))
    assert "".join(order) == expected and expected.count("I") < iterations
    assert summary.ideal_iterations == expected.count("I")


def test_the_ideal_iteration_runs_before_the_evaluation(monkeypatch):
    """Right after the real update, as the real learning ran: not after an evaluation, which
    leaves the machine in another state (the ideal's learning measured 3% more CPU then)."""
    order = record_loops(monkeypatch)

    def evaluate(*args, **kwargs):
        order.append("E")
        return ppo.evaluate(*args, **kwargs)

    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                    total_steps=8 * 16 * 3, eval_every=8 * 16, eval_episodes=4,
                    target_return=None, seed=1)
    ppo.train(args, evaluate_fn=evaluate)
    assert "".join(order).startswith("RIE" * 3)


def test_train_reports_the_ideal_median_its_spread_and_the_real_iterations(monkeypatch):
    order = record_loops(monkeypatch)
    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                    total_steps=8 * 16 * 4, eval_every=0, eval_episodes=4, ideal_every=2,
                    seed=1)
    _, summary = ppo.train(args)
    # a short run: an ideal iteration after each real one, then enough for a median
    assert "".join(order) == "RI" * 4 + "I" * (ideal.IDEAL_MIN_ITERATIONS - 4)
    low, high = summary.sps_ideal_iqr
    assert summary.ideal_iterations == ideal.IDEAL_MIN_ITERATIONS
    assert np.isfinite([low, summary.sps_ideal, high]).all()
    assert 0 < low <= summary.sps_ideal <= high
    low, high = summary.sps_iteration_iqr
    assert 0 < low <= summary.sps_iteration <= high
    assert summary.cpu_per_iteration["real"] > 0 and summary.cpu_per_iteration["ideal"] > 0
    assert set(summary.ideal_times) == {"env", "inference", "learning"}
    assert summary.ideal_times["learning"] > 0
    assert summary.above_ideal == (summary.sps_end_to_end > summary.sps_ideal_iqr[1])


def test_no_ideal_loop_when_ideal_every_is_0(monkeypatch):
    order = record_loops(monkeypatch)
    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                    total_steps=8 * 16 * 2, eval_every=0, eval_episodes=4, ideal_every=0,
                    seed=1)
    _, summary = ppo.train(args)
    assert "".join(order) == "RR" and summary.ideal_iterations == 0
    assert np.isnan(summary.sps_ideal) and not summary.above_ideal


def test_the_ideal_loop_leaves_training_alone():
    """Training with and without the ideal loop ends with the same parameters: the ideal's
    agent, updates and sampling draw nothing from training's random stream."""
    def trained(ideal_every: int) -> dict[str, torch.Tensor]:
        args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                        total_steps=8 * 16 * 3, eval_every=0, eval_episodes=4,
                        ideal_every=ideal_every, seed=1)
        return ppo.train(args)[0].state_dict()

    with_ideal, without = trained(1), trained(0)
    assert all(torch.equal(with_ideal[k], without[k]) for k in without)


class FakeClock:
    """``time.perf_counter`` for ``ideal``: moves only when a fake iteration runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_the_top_up_after_a_short_run_is_bounded_in_time(monkeypatch):
    """Iterations of 3 s and a 10 s bound: 3 more start (the 4th would end at 12 s), each
    reported to the progress callback; none is started past the bound."""
    clock = FakeClock()
    monkeypatch.setattr(ideal, "time", clock)
    loop = ideal.IdealLoop.__new__(ideal.IdealLoop)
    loop.times = [3.0]  # the one after the last real iteration
    seconds = 3.0  # each iteration's

    def iterate(real, epochs, agent, optimizer) -> float:
        clock.now += seconds
        loop.times.append(seconds)
        return seconds

    loop.iterate = iterate
    calls = []
    loop.top_up(None, 1, None, None, 10.0, lambda done, wanted: calls.append((done, wanted)))
    assert len(loop.times) == 4 and clock.now == 9.0
    wanted = ideal.IDEAL_MIN_ITERATIONS - 1
    assert calls == [(0, wanted), (1, wanted), (2, wanted), (3, wanted)]
    loop.times, seconds = [0.5], 0.5  # 6 more in 3 s
    calls.clear()
    loop.top_up(None, 1, None, None, 10.0, lambda done, wanted: calls.append((done, wanted)))
    assert len(loop.times) == ideal.IDEAL_MIN_ITERATIONS and calls[-1] == (wanted, wanted)


def test_train_tops_up_the_ideal_loop_within_ideal_top_up_s():
    """A one-iteration run: with no time for it, the ideal keeps the one iteration timed
    after the real one; with time, the top-up reports its progress up to its end."""
    args = ppo.Args(env_id="CartPole-v1", backend="numba", num_envs=8, num_steps=16,
                    total_steps=8 * 16, eval_every=0, eval_episodes=4, seed=1,
                    ideal_top_up_s=0.0)
    assert ppo.train(args)[1].ideal_iterations == 1
    calls = []
    args.ideal_top_up_s = 60.0
    _, summary = ppo.train(args, on_top_up=lambda done, wanted: calls.append((done, wanted)))
    wanted = ideal.IDEAL_MIN_ITERATIONS - 1
    assert summary.ideal_iterations == ideal.IDEAL_MIN_ITERATIONS
    assert calls == [(done, wanted) for done in range(wanted + 1)]
