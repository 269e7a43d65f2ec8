"""``backend="ray"`` on a local 2-node Ray cluster: the executor contract (same trajectories
as ``serial`` / the native numba env, autoreset modes, info masks, call / set_attr), first-ready
async, every fault (env raises, actor killed, hung, node removed), restarts, and clean closes."""

from __future__ import annotations

import functools
import os
import signal
import time

import numpy as np
import pytest

import envfleet
from envfleet.executors.base import EnvAttributeError, EnvWorkerError, RemoteTraceback
from envfleet.registry import BackendUnavailableError
from tests.executors.envs import CountingEnv, EchoEnv, FaultyEnv, SlowEnv
from tests.executors.helpers import pid_gone
from tests.executors.test_spaces import GRAPH_SPACES, check_same_step_final_obs

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("cluster")

MODES = ["NextStep", "SameStep", "Disabled"]
#: actors take a sliver of a CPU: the tests run many on a 2-core machine
SMALL = {"num_cpus": 0.1}


def counting(n: int, length: int = 3, truncate_at: int | None = None):
    return [functools.partial(CountingEnv, i, length, truncate_at) for i in range(n)]


def on_ray(env, n: int, **options):
    for k, v in SMALL.items():
        options.setdefault(k, v)
    return envfleet.make(env, n, backend="ray", **options)


def assert_same(a, b, where: str = "") -> None:
    """Equal batched values: arrays (dtype and values), object arrays, dicts, tuples."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), (where, sorted(a), sorted(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, tuple | list):
        assert isinstance(b, tuple | list) and len(a) == len(b), (where, a, b)
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object and a.shape == b.shape, where
        for x, y in zip(a, b, strict=True):
            assert_same(x, y, where)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, (where, a, b)
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b or (a is None and b is None), (where, a, b)


def run_both(mine, reference, n: int, steps: int, actions, seed: int = 7) -> None:
    """Step both envs alike (DISABLED: reset the ended envs) and compare every output."""
    assert_same(mine.reset(seed=seed), reference.reset(seed=seed), "reset")
    disabled = mine.metadata["autoreset_mode"].value == "Disabled"
    for t in range(steps):
        a = actions(t)
        out, ref = mine.step(a), reference.step(a)
        assert_same(out, ref, f"step {t}")
        if disabled and (out[2] | out[3]).any():
            mask = out[2] | out[3]
            assert_same(mine.reset(options={"reset_mask": mask}),
                        reference.reset(options={"reset_mask": mask}), f"reset {t}")


@pytest.mark.parametrize("mode", MODES)
def test_counting_envs_match_serial_in_every_autoreset_mode(mode) -> None:
    n = 7  # shares 3, 2, 2: uneven on purpose
    factories = counting(n, length=4, truncate_at=3)
    factories[5] = functools.partial(CountingEnv, 5, 2)  # ends earlier: per-env info masks
    env = on_ray(factories, n, num_workers=3, autoreset_mode=mode)
    ref = envfleet.make(factories, n, backend="serial", autoreset_mode=mode)
    try:
        rng = np.random.default_rng(0)
        run_both(env, ref, n, 9, lambda t: rng.integers(0, 5, n))
        assert env.unwrapped.num_workers == 3
    finally:
        env.close()
        ref.close()


@pytest.mark.parametrize("space", [GRAPH_SPACES[k] for k in (1, 6, 14)], ids=str)
def test_same_step_final_obs_of_graph_spaces(space) -> None:
    """A Graph in the final observation stays a ``GraphInstance`` on ray too (nested in a
    Dict, with Dict nodes, in a Sequence: tests/executors/test_spaces.py has all 15)."""
    check_same_step_final_obs(lambda mode: on_ray(
        [functools.partial(EchoEnv, space, length=n) for n in (2, 3, 3)], 3, num_workers=2,
        autoreset_mode=mode))


def test_gymnasium_cartpole_matches_serial() -> None:
    n = 5
    env = on_ray("CartPole-v1", n, num_workers=2, engine="serial")
    ref = envfleet.make("CartPole-v1", n, backend="serial")
    try:
        rng = np.random.default_rng(1)
        run_both(env, ref, n, 40, lambda t: rng.integers(0, 2, n))
    finally:
        env.close()
        ref.close()


def test_native_cartpole_is_the_numba_env() -> None:
    """Each actor runs its share as one native kernel seeded ``seed + start``: the batch is
    that of one numba env of all the envs (rewards float32, final_obs, info)."""
    n, mode = 301, "SameStep"  # (each actor compiles the kernel: one test, the fuller mode)
    env = on_ray("CartPole-v1", n, num_workers=2, autoreset_mode=mode)
    ref = envfleet.make("CartPole-v1", n, backend="numba", autoreset_mode=mode)
    try:
        rng = np.random.default_rng(2)
        run_both(env, ref, n, 60, lambda t: rng.integers(0, 2, n))
        mask = np.zeros(n, dtype=bool)
        mask[[3, 200]] = True
        assert_same(env.reset(seed=[9] * n, options={"reset_mask": mask}),
                    ref.reset(seed=[9] * n, options={"reset_mask": mask}))
        with pytest.raises(NotImplementedError, match="native envs on ray"):
            env.get_attr("gravity")
    finally:
        env.close()
        ref.close()


def test_local_pool_engine_matches_serial_and_names_the_env() -> None:
    n = 6
    factories = [functools.partial(FaultyEnv, i, "step", 4, 4, 10) for i in range(n)]
    env = on_ray(factories, n, num_workers=2, engine="pool", engine_options={"num_workers": 2})
    ref = envfleet.make(factories, n, backend="serial")
    try:
        run_both(env, ref, n, 3, lambda t: np.full(n, t % 5))
        assert env.get_attr("index") == tuple(range(n))
        with pytest.raises(EnvWorkerError, match=r"env 4 raised RuntimeError in step\(\): boom in "
                                                 r"env 4$") as caught:
            env.step(np.zeros(n, dtype=np.int64))
        assert caught.value.env_index == 4
    finally:
        env.close()
        ref.close()


def test_call_get_attr_set_attr() -> None:
    n = 5
    env = on_ray(counting(n), n, num_workers=2, seed=3)
    try:
        env.reset()
        assert env.get_attr("index") == (0, 1, 2, 3, 4)
        env.set_attr("length", [5, 6, 7, 8, 9])
        env.set_attr_at([4, 0], "truncate_at", [40, 10])
        assert env.get_attr("length") == (5, 6, 7, 8, 9)
        assert env.call_at([4, 1, 3], "_obs")[0].tolist() == [4, 3 + 4, 0, 0]
        assert env.call_at([3, 0], lambda e, k: e.truncate_at or k, 1) == (1, 10)
        assert env.np_random_seed == tuple(3 + i for i in range(n))
        with pytest.raises(EnvAttributeError, match="env 0 raised AttributeError"):
            env.get_attr("nope")
        assert not hasattr(env, "nope")
        env.step(np.zeros(n, dtype=np.int64))  # a failed call needs no reset
    finally:
        env.close()


def test_async_first_ready_a_slow_actor_does_not_hold_back_the_batch() -> None:
    n = 4
    factories = counting(2, length=50) + [functools.partial(SlowEnv, i, 50, 0.4)
                                          for i in (2, 3)]
    env = on_ray(factories, n, num_workers=2, batch_size=2, seed=0)
    try:
        env.reset()
        with pytest.raises(RuntimeError, match="send"):
            env.step(np.zeros(n, dtype=np.int64))
        first = env.recv()[4]["env_id"].tolist()
        env.send(np.zeros(2, dtype=np.int64), first)
        second = env.recv()[4]["env_id"].tolist()
        assert sorted(first + second) == [0, 1, 2, 3]
        env.send(np.ones(2, dtype=np.int64), second)
        start = time.monotonic()
        served = []
        for _ in range(6):
            obs, _, _, _, info = env.recv()
            ids = info["env_id"]
            served += ids.tolist()
            for k, i in enumerate(ids.tolist()):
                assert obs[k][0] == i
            env.send(np.zeros(2, dtype=np.int64), ids)
        elapsed = time.monotonic() - start
        assert served.count(0) >= 4 and served.count(2) <= 2, served
        assert elapsed < 1.2, elapsed  # the slow actor's 0.4 s steps ran beside
        with pytest.raises(ValueError, match="not waiting"):
            env.send(np.zeros(1, dtype=np.int64), [0 if 0 in served[-2:] else 2])
        obs, _ = env.reset()  # waits for the envs in flight
        assert obs[:, 3].tolist() == [0, 0, 0, 0]
    finally:
        env.close()


def test_env_exception_is_reported_with_the_remote_traceback_then_reset_recovers() -> None:
    n = 4
    factories = [functools.partial(FaultyEnv, i, "step", 2, 2) for i in range(n)]
    env = on_ray(factories, n, num_workers=2)
    try:
        env.reset(seed=0)
        env.step(np.zeros(n, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match="env 2 raised RuntimeError") as caught:
            env.step(np.zeros(n, dtype=np.int64))
        assert caught.value.env_index == 2
        assert isinstance(caught.value.__cause__, RemoteTraceback)
        assert "boom in env 2" in caught.value.worker_traceback
        with pytest.raises(RuntimeError, match="reset"):
            env.step(np.zeros(n, dtype=np.int64))
        obs, _ = env.reset(seed=0)
        assert obs[:, 1].tolist() == [0, 1, 2, 3]
        env.step(np.zeros(n, dtype=np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_dead_or_hung_actor_is_fatal_without_restart(fault) -> None:
    n = 4
    factories = [functools.partial(FaultyEnv, i, fault, 3, 2) for i in range(n)]
    env = on_ray(factories, n, num_workers=2, step_timeout=1.0)
    pids = env.unwrapped.actor_pids
    try:
        env.reset(seed=0)
        env.step(np.zeros(n, dtype=np.int64))
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match=r"ray actor 1 \(envs 2\.\.3.*(died|did not "
                                                 r"answer within step_timeout=1 s)"):
            env.step(np.zeros(n, dtype=np.int64))
        assert time.monotonic() - start < 8
        with pytest.raises(EnvWorkerError, match="shut down"):
            env.reset()
    finally:
        env.close()
    wait_gone(pids)


@pytest.mark.parametrize(("fault", "mode"), [("kill", "NextStep"), ("hang", "SameStep")])
def test_restart_failed_rebuilds_the_actor_and_truncates_its_episodes(fault, mode) -> None:
    n = 4
    factories = [functools.partial(FaultyEnv, i, fault, 3, 2) for i in range(n)]
    env = on_ray(factories, n, num_workers=2, step_timeout=1.0, restart_failed=True,
                 autoreset_mode=mode)
    try:
        env.reset(seed=0)
        last, *_ = env.step(np.zeros(n, dtype=np.int64))
        obs, rewards, terminated, truncated, info = env.step(np.zeros(n, dtype=np.int64))
        assert truncated.tolist() == [False, False, True, True]
        assert rewards[2:].tolist() == [0.0, 0.0] and not terminated.any()
        assert info["_env_failure"].tolist() == [False, False, True, True]
        assert "ray actor 1 (envs 2..3" in info["env_failure"][2]
        assert "restarted" in info["env_failure"][2]
        if mode == "SameStep":
            np.testing.assert_array_equal(info["final_obs"][2:], last[2:])
            assert obs[2:, 3].tolist() == [0, 0]  # reset at once
        else:
            np.testing.assert_array_equal(obs[2:], last[2:])
            obs, *_ = env.step(np.zeros(n, dtype=np.int64))
            assert obs[2:, 3].tolist() == [0, 0]  # reset on the next step
        assert obs[:2, 3].tolist() == ([3, 3] if mode == "NextStep" else [2, 2])
        env.step(np.zeros(n, dtype=np.int64))  # the others step on, the new actor too
    finally:
        env.close()


def test_actor_stopped_while_idle_is_restarted_within_about_a_step_timeout() -> None:
    """SIGSTOP of an idle actor whose CPUs the rebuilt one needs (3 actors x 2 CPUs fill the
    cluster): the driver kills the stopped process itself (Ray would wait ~5 s for it to
    exit before freeing its CPUs), so step() returns about one step_timeout later."""
    n = 6
    env = on_ray(counting(n, 1000), n, num_workers=3, num_cpus=2, step_timeout=1.0,
                 restart_failed=True)
    stopped = env.unwrapped.actor_pids[-1]
    try:
        env.reset(seed=0)
        os.kill(stopped, signal.SIGSTOP)
        start = time.monotonic()
        _, _, terminated, truncated, info = env.step(np.zeros(n, dtype=np.int64))
        elapsed = time.monotonic() - start
        assert truncated.tolist() == [False] * 4 + [True] * 2 and not terminated.any()
        assert "did not answer within step_timeout=1 s" in info["env_failure"][4]
        assert elapsed < 4.5, elapsed  # 1 s, then a new actor (~1-2 s); Ray's kill: 5 s more
        assert pid_gone(stopped)
        env.step(np.zeros(n, dtype=np.int64))
    finally:
        env.close()
        if not pid_gone(stopped):
            os.kill(stopped, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_async_actor_killed_with_restart_comes_back_truncated(mode) -> None:
    """SAME_STEP: the new envs are reset at once, the old ones' last observations are their
    ``final_obs``; NEXT_STEP: they reset on their next step."""
    n = 4
    factories = [functools.partial(FaultyEnv, i, "kill", 1, 2) for i in range(n)]
    env = on_ray(factories, n, num_workers=2, batch_size=2, restart_failed=True,
                 autoreset_mode=mode)
    try:
        env.reset(seed=0)
        env.send(np.zeros(n, dtype=np.int64), np.arange(n))
        for _ in range(2):
            env.recv()
        env.send(np.zeros(n, dtype=np.int64), np.arange(n))  # env 1 kills its actor
        got = {}
        for _ in range(2):
            obs, _, _, truncated, info = env.recv()
            failed = info.get("_env_failure", np.zeros(2, dtype=bool))
            for k, i in enumerate(info["env_id"].tolist()):
                got[i] = (bool(truncated[k]), bool(failed[k]), int(obs[k][3]))
                if failed[k] and mode == "SameStep":
                    assert info["final_obs"][k][3] == 1, info  # (its last step's)
        t_new = 0 if mode == "SameStep" else 1  # (NEXT_STEP: the last observation still)
        assert got == {0: (True, True, t_new), 1: (True, True, t_new), 2: (False, False, 2),
                       3: (False, False, 2)}, got
        env.send(np.zeros(2, dtype=np.int64), [0, 1])
        obs, _, _, truncated, info = env.recv()
        assert info["env_id"].tolist() == [0, 1] and not truncated.any()
        assert obs[:, 3].tolist() == ([1, 1] if mode == "SameStep" else [0, 0])
    finally:
        env.close()


def test_a_removed_node_is_reported_or_its_actors_rebuilt_elsewhere(cluster) -> None:
    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 2}, object_store_memory=80 * 2**20)
    n = 4
    fatal = on_ray(counting(n, 50), n, num_workers=1, num_cpus=0, resources={"doomed": 1})
    restart = on_ray(counting(n, 50), n, num_workers=2, num_cpus=0,
                     resources={"doomed": 0.5}, restart_failed=True)
    spare = None
    try:
        assert set(fatal.unwrapped.actor_nodes + restart.unwrapped.actor_nodes) == \
            {doomed.node_id}
        fatal.reset(seed=0)
        restart.reset(seed=0)
        cluster.remove_node(doomed)
        with pytest.raises(EnvWorkerError, match=r"ray actor 0 \(envs 0\.\.3.* died"):
            fatal.step(np.zeros(n, dtype=np.int64))
        spare = cluster.add_node(num_cpus=1, resources={"doomed": 2},
                                 object_store_memory=80 * 2**20)
        _, _, _, truncated, info = restart.step(np.zeros(n, dtype=np.int64))
        assert truncated.all() and info["_env_failure"].all()
        assert set(restart.unwrapped.actor_nodes) == {spare.node_id}
        obs, *_ = restart.step(np.zeros(n, dtype=np.int64))
        assert obs[:, 3].tolist() == [0] * n
    finally:
        fatal.close()
        restart.close()
        if spare is not None:
            cluster.remove_node(spare)


def actor_states() -> dict[str, str]:
    return {k: v["State"] for k, v in ray._private.state.actors().items()}


def wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(map(pid_gone, pids)):
        time.sleep(0.05)
    assert all(map(pid_gone, pids)), [p for p in pids if not pid_gone(p)]


def test_close_kills_its_actors_is_idempotent_and_leaves_ray_running() -> None:
    before = {k for k, s in actor_states().items() if s == "ALIVE"}
    env = on_ray(counting(3), 3, num_workers=3)
    pids = env.unwrapped.actor_pids
    env.reset()
    alive = {k for k, s in actor_states().items() if s == "ALIVE"} - before
    assert len(alive) == 3
    env.close()
    env.close()
    states = actor_states()
    assert all(states[k] == "DEAD" for k in alive)
    wait_gone(pids)
    assert ray.is_initialized()  # not this env's to shut down
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_a_second_env_without_room_is_refused_at_once_naming_what_it_asks_and_what_is_free(
        ) -> None:
    """Train + eval in one process: the first env holds 4 of the cluster's 6 CPUs; a second
    default env (1 CPU per actor, as many actors as CPUs) cannot be placed. It says so at
    once instead of waiting 60 s to blame a silent actor; after the first env's close() the
    same ask fits again (Ray's free count catches up within FREE_GRACE)."""
    train = on_ray(counting(4), 4, num_workers=2, num_cpus=2)
    before = len(actor_states())
    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match=r"6 actor\(s\) asking 1 CPU each need 6 CPU in "
                                             r"all, but the Ray cluster has 2 CPU free \(of "
                                             r"6 CPU\).*num_cpus="):
        envfleet.make(counting(8), 8, backend="ray")
    assert time.monotonic() - start < 5.0
    assert len(actor_states()) == before  # nothing was started
    train.close()
    again = on_ray(counting(4), 4, num_workers=2, num_cpus=2)
    again.close()


def test_actors_no_node_can_host_are_refused_at_once_or_named_after_the_start_timeout(
        monkeypatch) -> None:
    """3 + 3 CPUs fit the cluster's 6 free in all, but no node has 3 left for the second
    actor (4 + 2 CPUs): refused at once, naming each node's free CPUs. Where Ray does not say
    what each node has free (Ray Client), make's timeout says what each actor asks and what is
    free, and how long it waited."""
    from envfleet.executors import ray as executor

    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match=r"2 actor\(s\) asking 3 CPU each: the Ray cluster "
                                             r"has 6 CPU free in all, but an actor runs on one "
                                             r"node and its nodes have room for 1 of them "
                                             r"\(node \w+: 4 CPU, node \w+: 2 CPU\)"):
        on_ray(counting(2), 2, num_workers=2, num_cpus=3, step_timeout=1.0)
    assert time.monotonic() - start < 5.0
    monkeypatch.setattr(executor, "MIN_START_TIMEOUT", 1.0)
    monkeypatch.setattr(executor, "_free_per_node", lambda placement: None)
    with pytest.raises(EnvWorkerError, match=r"ray actor (\d) \(env \1\) did not start within 1 s "
                                             r"\(each actor asks 3 CPU; the cluster has [\d.]+ "
                                             r"CPU free now\) during make\(\)") as caught:
        on_ray(counting(2), 2, num_workers=2, num_cpus=3, step_timeout=1.0)
    assert caught.value.env_indices in ((0,), (1,))  # (Ray places either one first)


def test_the_default_number_of_actors_fits_the_nodes_one_by_one() -> None:
    """Without num_workers: as many actors as the nodes hold one by one: nodes of 4 and 2
    CPUs hold one actor of 3 CPUs (on the head), not 6 // 3 = 2, which cannot all be placed."""
    env = on_ray(counting(4), 4, num_cpus=3)
    try:
        assert env.unwrapped.num_workers == 1
    finally:
        env.close()


def test_bad_input_is_refused_before_any_actor_starts() -> None:
    before = len(actor_states())
    with pytest.raises(TypeError, match=r"\['bogus'\]"):
        on_ray(counting(2), 2, bogus=1)
    with pytest.raises(TypeError, match="num_threads"):
        on_ray(counting(2), 2, num_threads=2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_workers must be an int >= 1"):
            on_ray(counting(2), 2, num_workers=bad)
    with pytest.raises(ValueError, match="engine must be one of"):
        on_ray(counting(2), 2, engine="gpu")
    with pytest.raises(ValueError, match="engine 'numba' runs native ids"):
        on_ray(counting(2), 2, engine="numba")
    with pytest.raises(ValueError, match="needs engine='serial'"):
        on_ray("CartPole-v1", 4, batch_size=2)
    with pytest.raises(ValueError, match="step_timeout"):
        on_ray(counting(2), 2, step_timeout=0)
    with pytest.raises(TypeError, match="CartPole-v1"):
        on_ray("CartPole-v1", 4, gravity_typo=1.0)
    assert len(actor_states()) == before
    # a factory that fails in its actor is named, and the actors that started are killed
    with pytest.raises(EnvWorkerError, match="env 3 raised"):
        on_ray([functools.partial(CountingEnv, i) for i in range(3)]
               + [functools.partial(int, "x")], 4, num_workers=2)


def test_backend_status_names_the_extra(monkeypatch) -> None:
    from envfleet import registry

    assert registry.backend_status("ray") is None
    monkeypatch.setattr(registry, "_has", lambda module: module != "ray")
    assert "envfleet[ray]" in registry.backend_status("ray")
    assert BackendUnavailableError  # (raised by make when ray is missing)
