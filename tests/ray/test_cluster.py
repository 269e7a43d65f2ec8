"""``backend="ray"`` on a multi-node cluster: 1-CPU nodes added to the session cluster
(``conftest.cluster``) under a tag of their own, so that the actors land on them only and a test
can remove them. Placement per node, node loss with and without ``restart_failed``, an actor
whose node cannot import the envs' code, a native family the driver registered, and a
cluster the env joined itself."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest

import envfleet
from envfleet.executors.base import EnvWorkerError, RemoteTraceback
from tests.executors.envs import CountingEnv, FaultyEnv

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("cluster")

STORE = 80 * 2**20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Nodes:
    """1-CPU nodes carrying one resource ``tag`` (1 each) that only this test asks for."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.tag = f"nodes-{uuid.uuid4().hex[:8]}"
        self.nodes: dict[str, object] = {}  # node id -> the cluster's node

    def add(self, count: int = 1) -> None:
        for _ in range(count):
            node = self.cluster.add_node(num_cpus=1, resources={self.tag: 1},
                                         object_store_memory=STORE)
            self.nodes[node.node_id] = node
        self.cluster.wait_for_nodes()

    def remove(self, node_id: str) -> None:
        self.cluster.remove_node(self.nodes.pop(node_id))

    def options(self, **options):
        """make() options that put each actor on one of these nodes, a whole node each."""
        return {"num_cpus": 1, "resources": {self.tag: 1}, **options}


@pytest.fixture
def nodes(cluster):
    made = Nodes(cluster)
    try:
        yield made
    finally:
        for node_id in list(made.nodes):
            made.remove(node_id)


def counting(n: int, length: int = 100):
    return [functools.partial(CountingEnv, i, length) for i in range(n)]


def test_actors_spread_one_per_node_and_the_room_check_is_per_node(nodes) -> None:
    """Two 1-CPU nodes host two 1-CPU actors, one each; two actors asking 2 CPUs fit the
    cluster's free CPUs in all but no node: refused at once, naming what each node has."""
    nodes.add(2)
    env = envfleet.make(counting(4), 4, backend="ray", num_workers=2, **nodes.options())
    try:
        assert sorted(env.unwrapped.actor_nodes) == sorted(nodes.nodes)
        env.reset(seed=0)
        obs, *_ = env.step(np.zeros(4, dtype=np.int64))
        assert obs[:, 3].tolist() == [1] * 4
    finally:
        env.close()
    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match=rf"2 actor\(s\) asking 2 CPU, 1 {nodes.tag} each: "
                                             r"the Ray cluster has [\d.]+ CPU, 2 \S+ free in "
                                             r"all, but an actor runs on one node and its nodes "
                                             r"have room for 0 of them \(node \w+: 1 CPU, 1 "):
        envfleet.make(counting(4), 4, backend="ray", num_workers=2,
                      **nodes.options(num_cpus=2))
    assert time.monotonic() - start < 5.0


def lose_actor_node(nodes: Nodes, env, actor: int) -> str:
    node = env.unwrapped.actor_nodes[actor]
    nodes.remove(node)
    return node


def test_a_lost_node_names_its_envs_and_the_cause(nodes) -> None:
    nodes.add(2)
    env = envfleet.make(counting(4), 4, backend="ray", num_workers=2, **nodes.options())
    try:
        env.reset(seed=0)
        node = lose_actor_node(nodes, env, 1)
        with pytest.raises(EnvWorkerError, match=rf"ray actor 1 \(envs 2\.\.3, node "
                                                 rf"{node[:12]}\) died: its node {node[:12]} "
                                                 rf"was lost.* during step\(\)") as caught:
            env.step(np.zeros(4, dtype=np.int64))
        assert caught.value.env_indices == (2, 3) and caught.value.env_index == 2
        assert isinstance(caught.value.__cause__, RemoteTraceback)
        assert "node has died" in caught.value.worker_traceback
    finally:
        env.close()


def test_a_restart_without_room_fails_within_step_timeout_naming_the_lost_node(nodes) -> None:
    """Issue 30: the lost actor's restart finds no node with room (the other node is full):
    the error comes within about step_timeout, says that the node was lost and no room was
    left, in step() where it happened, and names the envs."""
    nodes.add(2)
    env = envfleet.make(counting(4), 4, backend="ray", num_workers=2, step_timeout=2.0,
                        restart_failed=True, **nodes.options())
    try:
        env.reset(seed=0)
        node = lose_actor_node(nodes, env, 1)
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match=rf"ray actor 1 \(envs 2\.\.3, node "
                                                 rf"{node[:12]}\) died: its node {node[:12]} "
                                                 r"was lost.*, and could not be restarted \(no "
                                                 r"live node had room for an actor asking 1 "
                                                 r"CPU, 1 \S+ within step_timeout=2 s; free: "
                                                 r"node .*node \w+: 0 CPU, 0 \S+\) during "
                                                 r"step\(\)") as caught:
            env.step(np.zeros(4, dtype=np.int64))
        assert time.monotonic() - start < 2.0 + 6.0  # (without the fix: 60 s)
        assert caught.value.env_indices == (2, 3)
        with pytest.raises(EnvWorkerError, match="shut down"):
            env.reset()
    finally:
        env.close()


def test_a_first_ready_restart_without_room_fails_within_step_timeout(nodes) -> None:
    """The same loss in first-ready mode: recv() hands out the other actor's envs meanwhile,
    then fails within about step_timeout, naming the lost node and its envs."""
    nodes.add(2)
    env = envfleet.make(counting(4), 4, backend="ray", num_workers=2, step_timeout=2.0,
                        restart_failed=True, batch_size=2, **nodes.options())
    try:
        env.reset(seed=0)
        node = lose_actor_node(nodes, env, 1)
        env.send(np.zeros(4, dtype=np.int64))
        start, served = time.monotonic(), []
        with pytest.raises(EnvWorkerError, match=rf"ray actor 1 \(envs 2\.\.3, node "
                                                 rf"{node[:12]}\) died: its node {node[:12]} "
                                                 r"was lost.*, and could not be restarted \(no "
                                                 r"live node had room") as caught:
            while time.monotonic() - start < 10.0:
                ids = env.recv()[4]["env_id"]
                served += ids.tolist()
                env.send(np.zeros(2, dtype=np.int64), ids)
        assert time.monotonic() - start < 2.0 + 6.0  # (without the fix: 60 s)
        assert caught.value.env_indices == (2, 3)
        assert set(served) == {0, 1}, served
    finally:
        env.close()


def test_a_restart_with_room_rebuilds_the_actor_on_another_node(nodes) -> None:
    nodes.add(3)
    env = envfleet.make(counting(4), 4, backend="ray", num_workers=2, step_timeout=2.0,
                        restart_failed=True, **nodes.options())
    try:
        env.reset(seed=0)
        spare = (set(nodes.nodes) - set(env.unwrapped.actor_nodes)).pop()
        lose_actor_node(nodes, env, 0)
        _, _, _, truncated, info = env.step(np.zeros(4, dtype=np.int64))
        assert truncated.tolist() == [True, True, False, False]
        assert "was lost" in info["env_failure"][0] and "restarted" in info["env_failure"][0]
        assert env.unwrapped.actor_nodes[0] == spare
        obs, *_ = env.step(np.zeros(4, dtype=np.int64))
        assert obs[:, 3].tolist() == [0, 0, 2, 2]  # new envs reset; the others step on
    finally:
        env.close()


def write_package(folder, name: str) -> None:
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(textwrap.dedent("""
        from tests.executors.envs import CountingEnv, FaultyEnv

        def make_env():
            return CountingEnv(7)
    """))


def test_an_actor_that_cannot_import_the_factory_names_the_cause_and_the_fix(
        tmp_path, monkeypatch) -> None:
    """The factory's module is importable in the driver only: the error carries Ray's remote
    traceback as its cause and says how to ship the code; a ``runtime_env`` that puts it on the
    actors' path fixes it."""
    name = f"driver_only_{uuid.uuid4().hex[:8]}"
    write_package(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    with pytest.raises(EnvWorkerError, match=rf"ray actor 0 \(envs 0\.\.1\) could not be built "
                                             rf"on its node \(ModuleNotFoundError: No module "
                                             rf"named '{name}'\); .*runtime_env.*py_modules.* "
                                             r"during make\(\)") as caught:
        envfleet.make(module.make_env, 2, backend="ray", num_workers=1, num_cpus=0.1)
    assert caught.value.env_indices == (0, 1)
    assert isinstance(caught.value.__cause__, RemoteTraceback)
    assert f"No module named '{name}'" in str(caught.value.__cause__)
    env = envfleet.make(module.make_env, 2, backend="ray", num_workers=1, num_cpus=0.1,
                        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                            [str(tmp_path), os.environ["PYTHONPATH"]])}})
    try:
        obs, _ = env.reset(seed=0)
        assert obs[:, 0].tolist() == [7, 7]
    finally:
        env.close()


def test_a_native_family_registered_in_the_driver_runs_on_ray() -> None:
    """A family registered with ``register_native_env`` in the driver only (not at the import
    of any module) reaches the actors with their arguments: the batch is the numba env's."""
    from tests.native.test_user_envs import SPEC

    spec = dataclasses.replace(SPEC, id=f"RayBounce{uuid.uuid4().hex[:6]}-v0")
    envfleet.register_native_env(spec)
    env = ref = None
    try:
        env = envfleet.make(spec.id, 6, backend="ray", num_workers=2, num_cpus=0.1,
                            autoreset_mode="SameStep")
        ref = envfleet.make(spec.id, 6, backend="numba", autoreset_mode="SameStep")
        for out, want in zip(env.reset(seed=3), ref.reset(seed=3), strict=True):
            np.testing.assert_equal(out, want)
        rng = np.random.default_rng(0)
        for _ in range(30):
            actions = rng.integers(0, 3, 6)
            got, want = env.step(actions), ref.step(actions)
            for k in range(4):
                np.testing.assert_array_equal(got[k], want[k])
    finally:
        for made in (env, ref):
            if made is not None:
                made.close()
        envfleet.unregister_native_env(spec.id)


#: joins the cluster at RAY_ADDRESS itself (Ray not initialised) with a native family defined
#: and registered in ``__main__`` (its functions reach the actors as copies), then closes the env
JOIN = textwrap.dedent("""
    from typing import NamedTuple

    import numpy as np
    import ray
    from gymnasium import spaces

    import envfleet
    from envfleet.kernels import NativeEnvSpec, env_uniform, kernel_function

    class Params(NamedTuple):
        step: float

    @kernel_function
    def moved(x, d):
        return x + d

    @kernel_function
    def reset_one(i, state, params, rng, obs):
        state.x[i] = env_uniform(rng, i, 0, -1.0, 1.0)
        obs[i, 0] = np.float32(state.x[i])

    @kernel_function
    def step_one(i, state, params, actions, rng, obs, rewards, terminated):
        x = moved(state.x[i], params.step if actions[i] == 1 else -params.step)
        state.x[i] = x
        obs[i, 0] = np.float32(x)
        terminated[i] = abs(x) > 2.0
        rewards[i] = 1.0

    envfleet.register_native_env(NativeEnvSpec(
        id="MainWalk-v0", observation_space=spaces.Box(-9, 9, (1,), np.float32),
        action_space=spaces.Discrete(2), state={"x": (np.float64, ())},
        make_params=lambda step=0.5: Params(float(step)), max_episode_steps=20,
        reset_one=reset_one, step_one=step_one))
    env = envfleet.make("MainWalk-v0", 4, backend="ray", num_workers=2, num_cpus=0.1)
    ref = envfleet.make("MainWalk-v0", 4, backend="numba")
    assert (env.reset(seed=1)[0] == ref.reset(seed=1)[0]).all()
    for t in range(12):
        actions = np.array([t % 2, 1, 0, t % 3 == 0])
        got, want = env.step(actions), ref.step(actions)
        assert all((g == w).all() for g, w in zip(got[:4], want[:4])), (t, got, want)

    kept = ray.put("mine")

    @ray.remote(num_cpus=0)
    class Mine:
        def ping(self):
            return "pong"

    actor = Mine.remote()
    env.close()
    assert ray.is_initialized(), "close() shut down a Ray it had joined"
    assert ray.get(kept, timeout=10) == "mine"
    assert ray.get(actor.ping.remote(), timeout=10) == "pong"
    print("kept")
""")


def test_main_defined_family_runs_and_close_leaves_a_cluster_the_env_joined_running(
        cluster) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_ADDRESS=cluster.address)
    proc = subprocess.run([sys.executable, "-c", JOIN], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "kept" in proc.stdout, proc.stderr[-3000:]


def slow_once_marked(marker: str, *args):
    """A ``FaultyEnv(*args)`` that takes 4 s to build once ``marker`` exists (a restart)."""
    if os.path.exists(marker):
        time.sleep(4.0)
    return FaultyEnv(*args)


def test_first_ready_hands_out_the_other_envs_while_a_lost_actor_restarts(tmp_path) -> None:
    """Issue 30: env 2 kills its actor (envs 2..3), whose new actor takes 4 s to build; recv()
    keeps handing out envs 0..1 meanwhile (no call blocks), then envs 2..3 come back truncated
    with ``info["env_failure"]`` and step on."""
    marker = str(tmp_path / "restarting")
    factories = [functools.partial(slow_once_marked, marker, i, "kill", 2, 3) for i in range(4)]
    env = envfleet.make(factories, 4, backend="ray", num_workers=2, num_cpus=0.1, batch_size=2,
                        restart_failed=True, step_timeout=10.0)
    try:
        env.reset(seed=0)
        open(marker, "w").close()
        env.send(np.zeros(4, dtype=np.int64), np.arange(4))
        waits, served, back = [], [], None
        deadline = time.monotonic() + 30
        while back is None and time.monotonic() < deadline:
            start = time.monotonic()
            obs, _, _, truncated, info = env.recv()
            waits.append(time.monotonic() - start)
            ids = info["env_id"].tolist()
            if "env_failure" in info:
                back = (ids, truncated.tolist(), info["_env_failure"].tolist(), obs[:, 3])
                break
            served += ids
            env.send(np.zeros(2, dtype=np.int64), ids)
        assert back is not None and sorted(back[0]) == [2, 3], back
        assert back[1] == [True, True] and back[2] == [True, True], back
        assert max(waits) < 2.5, waits  # (the whole restart took > 4 s)
        assert sum(waits) > 4.0 and served.count(0) >= 3, (waits, served)
        env.send(np.zeros(2, dtype=np.int64), back[0])
        for _ in range(5):  # the new envs step on
            obs, _, _, truncated, info = env.recv()
            if 2 in info["env_id"].tolist():
                break
            env.send(np.zeros(2, dtype=np.int64), info["env_id"])
        assert sorted(info["env_id"].tolist()) == [2, 3] and not truncated.any()
        assert obs[:, 3].tolist() == [0, 0]  # (NEXT_STEP: reset on this step)
    finally:
        env.close()
