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
