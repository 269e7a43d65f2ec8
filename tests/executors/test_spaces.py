"""Every space Gymnasium's ``SyncVectorEnv`` accepts runs on every executor, as Sync runs it.

Spaces without a fixed-size form (``Text``, ``Graph``, ``Sequence``, ``OneOf``, a user's own)
travel through the workers' pipes; the others through shared memory. An echo env returns its
action as the next observation, so actions and observations both cross the transport; the
results are compared with ``SyncVectorEnv``'s, step for step, in every autoreset mode."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import iterate

import envfleet
from tests.executors.envs import AnySpace, EchoEnv
from tests.executors.helpers import BACKENDS

SPACES = {
    "box": spaces.Box(-1, 1, (3,), dtype=np.float32),
    "box-int": spaces.Box(-5, 5, (2, 2), dtype=np.int64),
    "box-bool": spaces.Box(0, 1, (2,), dtype=np.bool_),
    "discrete": spaces.Discrete(3, start=-1),
    "multidiscrete": spaces.MultiDiscrete([2, 3], start=[1, -1]),
    "multibinary": spaces.MultiBinary(4),
    "text": spaces.Text(6),
    "text-charset": spaces.Text(4, min_length=1, charset="xyz"),
    "graph": spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3)),
    "graph-no-edges": spaces.Graph(spaces.Discrete(4), None),
    "sequence": spaces.Sequence(spaces.Box(0, 1, (2,))),
    "sequence-stacked": spaces.Sequence(spaces.Discrete(5), stack=True),
    "oneof": spaces.OneOf([spaces.Discrete(2), spaces.Box(0, 1, (2,))]),
    "custom": AnySpace(),
    "dict-mixed": spaces.Dict({"name": spaces.Text(3), "pos": spaces.Box(0, 1, (2,)),
                               "seq": spaces.Sequence(spaces.Discrete(3))}),
    "tuple-mixed": spaces.Tuple((spaces.Discrete(4), spaces.Text(2),
                                 spaces.Tuple((spaces.MultiBinary(2), AnySpace())))),
}
N = 4


def assert_same(mine, theirs, t: int) -> None:
    """Equal results (``data_equivalence``); ``info["final_obs"]`` of Box-like observations is
    an array with zero rows where Sync has an object array with None: equal env by env."""
    mine, theirs = list(mine), list(theirs)
    info, sync_info = dict(mine[-1]), dict(theirs[-1])
    if isinstance(info.get("final_obs"), np.ndarray) and info["final_obs"].dtype != object:
        for i in np.flatnonzero(info["_final_obs"]).tolist():
            assert np.array_equal(info["final_obs"][i], sync_info["final_obs"][i]), (t, i)
        info.pop("final_obs")
        sync_info.pop("final_obs")
    mine[-1], theirs[-1] = info, sync_info
    assert data_equivalence(mine, theirs, exact=True), (t, mine, theirs)


def run(env, actions: list) -> list:
    """reset(seed=0), then a step per batch of ``actions``: everything returned."""
    out = [env.reset(seed=0)]
    out += [env.step(a) for a in actions]
    env.close()
    return out


# every space in NEXT_STEP; the other autoreset modes on a few spaces
CASES = [(name, AutoresetMode.NEXT_STEP) for name in SPACES] + [
    (name, mode) for mode in (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)
    for name in ("box", "text", "dict-mixed")]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_every_space_steps_as_sync_does(name, mode, backend) -> None:
    space = SPACES[name]
    factories = [functools.partial(EchoEnv, space, length=2 + i % 2) for i in range(N)]
    sync = SyncVectorEnv(factories, autoreset_mode=mode)
    sync.action_space.seed(1)
    steps = 2 if mode is AutoresetMode.DISABLED else 5  # (DISABLED: before any env ends)
    actions = [sync.action_space.sample() for _ in range(steps)]
    expected = run(sync, actions)
    options = {"num_workers": 2} if backend == "pool" else {}
    env = envfleet.make(factories, N, backend=backend, autoreset_mode=mode, **options)
    assert env.single_observation_space == space and env.observation_space == \
        sync.observation_space and env.action_space == sync.action_space
    got = run(env, actions)
    for t, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        assert_same(mine, theirs, t)


@pytest.mark.parametrize("name", ["text", "graph", "dict-mixed"])
def test_every_space_on_the_async_pool(name) -> None:
    """First-ready send/recv moves object-leaf actions and observations too."""
    space = SPACES[name]
    env = envfleet.make([functools.partial(EchoEnv, space, length=10)] * N, N, backend="pool",
                        batch_size=2, num_workers=2)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(2)
    actions = env.action_space.sample()
    env.recv()
    env.recv()
    env.send(actions, np.arange(N))
    seen = {}
    for _ in range(2):
        obs, *_, info = env.recv()
        for k, e in enumerate(info["env_id"].tolist()):
            seen[e] = (obs[k] if not isinstance(obs, dict) else
                       {key: value[k] for key, value in obs.items()})
    for e in range(N):  # the echo of env e's action
        mine = actions[e] if not isinstance(actions, dict) else \
            {key: value[e] for key, value in actions.items()}
        assert data_equivalence(seen[e], mine, exact=True), (e, seen[e], mine)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_leaf_actions_are_checked(backend) -> None:
    env = envfleet.make([functools.partial(EchoEnv, spaces.Text(3))] * 3, 3, backend=backend)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="invalid action for env 1: 'toolong'"):
        env.step(("ab", "toolong", "c"))
    with pytest.raises(ValueError, match="num_envs=3"):
        env.step(("ab", "c"))
    with pytest.raises(TypeError, match="a batch of 3 actions"):
        env.step("abc")
    obs, *_ = env.step(("ab", "x", "c"))
    assert obs == ("ab", "x", "c")
    env.close()


#: the 15 spaces of Gymnasium's own ``TESTING_SPACES`` (tests/spaces/utils.py) with a Graph in
#: them: alone, nested in Dict / Tuple, in a Sequence, with every kind of node and edge space
GRAPH_SPACES = [
    spaces.Tuple((spaces.Graph(spaces.Box(-1, 1, (2, 1)), None), spaces.Discrete(2))),
    spaces.Dict(a=spaces.Dict(a=spaces.Graph(spaces.Box(-100, 100, (2, 2)), None),
                              b=spaces.Box(-100, 100, (2, 2))),
                b=spaces.Tuple((spaces.Box(-100, 100, (2,)), spaces.Box(-100, 100, (2,))))),
    spaces.Graph(spaces.Box(-1, 1, (2,)), None),
    spaces.Graph(spaces.Box(-100, 100, (3, 4)), spaces.Discrete(5)),
    spaces.Graph(spaces.Discrete(5), spaces.Box(-100, 100, (3, 4))),
    spaces.Graph(spaces.Discrete(3), spaces.Discrete(4)),
    spaces.Graph(spaces.Dict({"node_feature_1": spaces.Discrete(5),
                              "node_feature_2": spaces.MultiBinary(5)}), spaces.Box(1, 4)),
    spaces.Graph(spaces.MultiBinary(4), None),
    spaces.Graph(spaces.MultiDiscrete([3, 4, 2]), spaces.Discrete(3)),
    spaces.Graph(spaces.Tuple((spaces.Box(-1, 1, (2,)), spaces.Discrete(3))), None),
    spaces.Graph(spaces.Discrete(4), spaces.Tuple((spaces.Box(0, 1, (2,)), spaces.Discrete(3)))),
    spaces.Graph(spaces.Discrete(3),
                 spaces.Dict({"weight": spaces.Box(0, 1, ()), "type": spaces.Discrete(4)})),
    spaces.Graph(spaces.Dict({"pos": spaces.Box(-10, 10, (3,)), "label": spaces.Discrete(5)}),
                 spaces.Dict({"weight": spaces.Box(0, 1, ()), "type": spaces.Discrete(3)})),
    spaces.Graph(spaces.Tuple((spaces.Dict({"a": spaces.Discrete(3)}), spaces.MultiBinary(2))),
                 spaces.Tuple((spaces.Discrete(4), spaces.Box(0, 1, (2,))))),
    spaces.Sequence(spaces.Graph(spaces.Box(-100, 100, (2, 2)), spaces.Discrete(4))),
]


def check_same_step_final_obs(make_env) -> None:
    """Gymnasium's ``test_same_step_final_obs`` (tests/vector/test_autoreset_mode.py): three
    SAME_STEP envs whose episodes last 2, 3 and 3 steps; each ``info["final_obs"][i]`` is in
    the single observation space, and equal to ``SyncVectorEnv``'s."""
    envs = make_env(AutoresetMode.SAME_STEP)
    space = envs.single_observation_space
    sync = SyncVectorEnv([functools.partial(EchoEnv, space, length=n) for n in (2, 3, 3)],
                         autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=0)
    sync.reset(seed=0)
    envs.action_space.seed(0)
    for ended in ([], [0], [1, 2]):
        actions = envs.action_space.sample()
        info, sync_info = envs.step(actions)[-1], sync.step(actions)[-1]
        assert np.flatnonzero(info.get("_final_obs", [])).tolist() == ended
        for i in ended:
            final = info["final_obs"][i]
            assert final in space, (i, type(final).__name__, final)
            assert data_equivalence(final, sync_info["final_obs"][i], exact=True), i
    envs.close()
    sync.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("space", GRAPH_SPACES, ids=[str(s) for s in GRAPH_SPACES])
def test_same_step_final_obs_of_graph_spaces(space, backend) -> None:
    """A Graph in the final observation stays a ``GraphInstance`` (not a plain tuple), alone
    or nested in Dict / Tuple / Sequence."""
    options = {"num_workers": 2} if backend == "pool" else {}
    check_same_step_final_obs(lambda mode: envfleet.make(
        [functools.partial(EchoEnv, space, length=n) for n in (2, 3, 3)], 3, backend=backend,
        autoreset_mode=mode, **options))


@pytest.mark.parametrize("space", [GRAPH_SPACES[k] for k in (1, 6, 14)], ids=str)
def test_same_step_final_obs_of_graph_spaces_on_the_async_pool(space) -> None:
    """First-ready recv builds final_obs alike: episodes of one step, so env e's final
    observation is the echo of its action, a GraphInstance wherever the space has a Graph."""
    env = envfleet.make([functools.partial(EchoEnv, space, length=1)] * N, N, backend="pool",
                        batch_size=2, num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    env.recv()
    env.recv()
    env.action_space.seed(3)
    actions = env.action_space.sample()
    env.send(actions, np.arange(N))
    sent = list(iterate(env.action_space, actions))
    seen = set()
    for _ in range(2):
        *_, info = env.recv()
        for k, e in enumerate(info["env_id"].tolist()):
            final = info["final_obs"][k]
            assert final in env.single_observation_space, (e, type(final).__name__, final)
            assert data_equivalence(final, sent[e], exact=True), (e, final, sent[e])
            seen.add(e)
    assert seen == set(range(N))
    env.close()
