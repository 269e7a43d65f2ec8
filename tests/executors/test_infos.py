"""Batched infos (``executors.infos``): each worker batches its share's infos, the parent merges
the trees; checked against Gymnasium's own ``VectorEnv._add_info`` (and ``SyncVectorEnv``)."""

from __future__ import annotations

import functools
import os
import random
import signal
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import envfleet
from envfleet.executors import infos as batched

N = 5  # two workers: envs 0..2 and 3..4


def assert_same_infos(want: Any, got: Any, path: str = "info") -> None:
    """``got`` is ``want`` exactly: the same keys in the same order, arrays of the same dtype,
    shape and values, object arrays holding values of the same types."""
    if isinstance(want, dict):
        assert isinstance(got, dict), (path, got)
        assert list(got) == list(want), (path, list(got), list(want))
        for key in want:
            assert_same_infos(want[key], got[key], f"{path}[{key!r}]")
        return
    assert type(got) is type(want), (path, type(got), type(want))
    if isinstance(want, np.ndarray):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), (path, got, want)
        if want.dtype == object:
            for k, (a, b) in enumerate(zip(want.tolist(), got.tolist(), strict=True)):
                assert_same_infos(a, b, f"{path}[{k}]")
        else:
            np.testing.assert_array_equal(got, want, err_msg=path)
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), (path, got, want)
        for k, (a, b) in enumerate(zip(want, got, strict=True)):
            assert_same_infos(a, b, f"{path}[{k}]")
    else:
        assert got == want or (want != want and got != got), (path, got, want)


# --- batch + merge against _add_info, on random infos ---------------------------------------

VALUES = [
    lambda r: r.randint(-5, 5), lambda r: r.random(), lambda r: r.random() < 0.5,
    lambda r: np.float32(r.random()), lambda r: np.int8(r.randint(0, 9)),
    lambda r: np.arange(3.0) * r.random(), lambda r: np.zeros(2, np.int32) + r.randint(0, 3),
    lambda r: f"s{r.randint(0, 3)}", lambda r: None, lambda r: [1, r.randint(0, 2)],
    lambda r: np.bool_(r.random() < 0.5), lambda r: np.array(r.random()), lambda r: 2**70,
    lambda r: float("nan"), lambda r: np.zeros(2, dtype=[("a", "i4"), ("b", "f8")]),
]


def random_info(r: random.Random, mixed: bool, depth: int = 0) -> dict[str, Any]:
    """Keys from "abcde", a few nested; values of one type per key unless ``mixed``."""
    info: dict[str, Any] = {}
    for key in r.sample("abcde", r.randint(0, 4)):
        if depth < 2 and r.random() < 0.2:
            info[key] = random_info(r, mixed, depth + 1)
        else:
            pick = r.randrange(len(VALUES)) if mixed else (ord(key) + depth) % 8
            info[key] = VALUES[pick](r)
    return info


def reference(items: list, n: int, into: dict | None = None) -> tuple[Any, type | None]:
    """Gymnasium's ``_add_info`` env by env: (infos, None), or (None, the error it raised)."""
    view = batched.adder(n)
    out = {} if into is None else into
    try:
        for i, info in items:
            out = view._add_info(out, info, i)
    except Exception as error:
        return None, type(error)
    return out, None


@pytest.mark.parametrize("mixed", [False, True])
def test_merge_matches_add_info(mixed) -> None:
    """Two shares batched apart then merged (plus per-env parts, as restarts add) give what
    ``_add_info`` gives over all envs: dtypes, shapes, masks, nested dicts, key order; where
    ``_add_info`` raises (a str into an int array...), so does the merge."""
    r = random.Random(int(mixed))
    compared = 0
    for _ in range(400):
        n = r.randint(1, 8)
        items = [(i, random_info(r, mixed)) for i in range(n) if r.random() < 0.8]
        cut = r.randint(0, n)
        parts = batched.InfoParts()
        for lo, hi in ((0, cut), (cut, n)):
            mine = [(i, info) for i, info in items if lo <= i < hi]
            tree = batched.batch(mine, hi - lo, lo)
            parts.append((slice(lo, hi), tree) if tree is not None else (None, mine))
        if r.random() < 0.3:  # restarted envs: their reset info, then the failure alone
            extra = [(e, {"env_failure": "lost", "a": 1}) for e in range(min(n, 2))]
            extra += [(e, {"env_failure": "lost"}) for e in range(min(n, 2))]
            parts.append((None, extra))
            items = items + extra
        into = {"final_obs": np.zeros(n), "_final_obs": np.ones(n, bool)} \
            if r.random() < 0.3 else None
        want, error = reference(items, n, None if into is None else dict(into))
        if error is not None:
            with pytest.raises(Exception):  # noqa: B017 (whatever _add_info raised)
                batched.merge(parts, n, into)
            continue
        assert_same_infos(want, batched.merge(parts, n, into))
        compared += 1
    assert compared > 100


def test_checker_catches_a_wrong_dtype_or_mask() -> None:
    """The comparison used here fails on a wrong dtype, a wrong mask, a wrong object type."""
    items = [(0, {"x": 1, "o": "a"}), (2, {"x": 2, "o": 3})]
    want, _ = reference(items, 3)
    good = batched.merge(batched.InfoParts([(slice(0, 3), batched.batch(items, 3))]), 3)
    assert_same_infos(want, good)
    wrong_dtype = {**good, "x": good["x"].astype(np.float64)}
    wrong_mask = {**good, "_x": np.ones(3, bool)}
    wrong_object = {**good, "o": np.array(["a", None, np.int64(3)], dtype=object)}
    wrong_order = {k: good[k] for k in reversed(good)}
    for bad in (wrong_dtype, wrong_mask, wrong_object, wrong_order):
        with pytest.raises(AssertionError):
            assert_same_infos(want, bad)


@pytest.mark.parametrize("bug", ["int as float64", "masks all True", "rows misplaced"])
def test_the_comparison_catches_a_broken_batcher(bug, monkeypatch) -> None:
    """Plausible bugs in batch / merge make the comparison with _add_info fail."""
    if bug == "int as float64":
        new_leaf = batched._new_leaf

        def wrong(key, value, n):
            leaf = new_leaf(key, value, n)
            if type(value) is int:
                leaf[0] = leaf[0].astype(np.float64)
            return leaf

        monkeypatch.setattr(batched, "_new_leaf", wrong)
    elif bug == "masks all True":
        freeze = batched._freeze
        monkeypatch.setattr(batched, "_freeze", lambda tree: {
            k: (*e[:1], np.ones_like(e[1]), *e[2:]) for k, e in freeze(tree).items()})
    else:  # every share's rows put at the first rows
        put = batched._put
        monkeypatch.setattr(batched, "_tiled", lambda trees, n: False)
        monkeypatch.setattr(batched, "_put", lambda values, mask, rows, v, m: put(
            values, mask, slice(0, len(m)), v, m))
    items = [(0, {"x": 1, "y": 0.5}), (2, {"x": 2})]
    parts = batched.InfoParts([(slice(0, 2), batched.batch(items[:1], 2)),
                               (slice(2, 3), batched.batch(items[1:], 1, 2))])
    with pytest.raises(AssertionError):
        assert_same_infos(reference(items, 3)[0], batched.merge(parts, 3))


def test_shares_that_disagree_on_a_dtype() -> None:
    """Env 0 (worker 0) gives an int, env 3 (worker 1) a float then env 4 an int: the array is
    int64 as _add_info makes it (env 3's float truncated), not worker 1's float64."""
    items = [(0, {"x": 1}), (3, {"x": 2.5}), (4, {"x": 7}), (4, {})]
    parts = batched.InfoParts([(slice(0, 3), batched.batch(items[:1], 3, 0)),
                               (slice(3, 5), batched.batch(items[1:3], 2, 3))])
    got = batched.merge(parts, 5)
    assert_same_infos(reference(items, 5)[0], got)
    assert got["x"].dtype == np.int64 and got["x"].tolist() == [1, 0, 0, 2, 7]


def test_what_shared_memory_cannot_hold_has_no_layout() -> None:
    """Object values, values of mixed types and structured arrays go through the pipe."""
    record = np.zeros(2, dtype=[("a", "i4"), ("b", "f8")])
    assert batched.signature(batched.batch([(0, {"x": 1.0, "v": np.arange(2)})], 2)) == (
        ("x", ("<f8", (), "p")), ("v", ("<i8", (2,), "a")))
    for info in ({"x": "text"}, {"r": record}, {"n": {"deep": None}}):
        assert batched.signature(batched.batch([(0, info)], 2)) is None, info
    assert batched.signature(batched.batch([(0, {"x": 1}), (1, {"x": 2.5})], 2)) is None


# --- executors against Gymnasium's SyncVectorEnv ---------------------------------------------


class InfoEnv(gym.Env):
    """Infos of every shape: stable keys (Python and NumPy scalars, arrays), keys that come and
    go with t, keys only some envs have, nested dicts, object values, and keys whose type
    differs between envs (within a worker's share and across shares)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, index: int) -> None:
        self.index = index
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), dtype=np.float64)
        self.action_space = spaces.Discrete(3)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self.t], dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        info = {"index": self.index, "phase": "reset"}
        if self.index % 2:
            info["x"] = -1.0  # (a step's key in some reset infos: NEXT_STEP mixes them)
        return self._obs(), info

    def step(self, action):
        self.t += 1
        i, t = self.index, self.t
        info: dict[str, Any] = {
            "x": 0.5 * t + i, "n": t, "flag": t % 2 == 0, "f32": np.float32(t),
            "vec": np.arange(3.0) + t, "stats": {"a": i, "deep": {"c": np.full(2, t, np.int16)}},
            "name": f"env{i}", "seq": [i, t], "nothing": None,
            "mixed": t if i < 3 else t + 0.25,  # int in worker 0, float in worker 1
            "mixed_env": t if i % 2 else t + 0.5,  # both, inside each share
        }
        if t % 2 == 0:
            info["even"] = np.int32(t)
        if t >= 3:
            info["late"] = {"since": 3}
        if i < 2:
            info["low"] = True
        if i >= 3:
            info["high"] = np.array([i, t], dtype=np.int64)
        terminated = t >= 3 + i  # episodes of different lengths
        return self._obs(), float(action), terminated, False, info


def info_factories() -> list:
    return [functools.partial(InfoEnv, i) for i in range(N)]


def _normalized(step: tuple) -> tuple:
    """SAME_STEP's final_obs as one array (Gymnasium: object array; envfleet: batched)."""
    info = step[4]
    if "final_obs" not in info:
        return step
    info = dict(info)
    final = np.stack([o if m else np.zeros(2) for o, m in
                      zip(info.pop("final_obs"), info["_final_obs"], strict=True)])
    return (*step[:4], {**info, "final_obs": final})


@pytest.mark.parametrize("backend", ["pool", "subprocess"])
@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_infos_match_sync_vector_env(backend, mode) -> None:
    """Across workers (a pool's 2, or one per env), every step's and reset's infos are
    SyncVectorEnv's, key for key."""
    reference_env = gym.vector.SyncVectorEnv(info_factories(), autoreset_mode=mode)
    options = {"num_workers": 2} if backend == "pool" else {}  # (subprocess: one env each)
    env = envfleet.make(info_factories(), N, backend=backend, autoreset_mode=mode, **options)
    try:
        for venv in (reference_env, env):
            venv.outputs = [venv.reset(seed=1)[1]]
            for k in range(12):
                step = _normalized(venv.step(np.full(N, k % 3)))
                venv.outputs.append(step[4])
                if mode is AutoresetMode.DISABLED and (step[2] | step[3]).any():
                    venv.outputs.append(venv.reset(options={"reset_mask": step[2] | step[3]})[1])
        for k, (want, got) in enumerate(zip(reference_env.outputs, env.outputs, strict=True)):
            # (SAME_STEP's final keys: Gymnasium adds them where the first ended env comes,
            # envfleet first; final_obs is checked by test_autoreset)
            finals = ("final_info", "_final_info", "_final_obs")
            assert_same_infos({key: want.get(key) for key in finals},
                              {key: got.get(key) for key in finals}, f"output {k}")
            want, got = ({key: value for key, value in out.items()
                          if key not in (*finals, "final_obs")} for out in (want, got))
            assert_same_infos(want, got, f"output {k}")
        assert any("final_info" in out for out in env.outputs) == (
            mode is AutoresetMode.SAME_STEP)
    finally:
        env.close()
        reference_env.close()


def test_each_worker_sends_one_tree_per_batch() -> None:
    """The parent gets one batched tree per worker (rows: its share), nothing per env."""
    env = envfleet.make(info_factories(), N, backend="pool", num_workers=2)
    try:
        env.reset(seed=0)
        inner = env.unwrapped
        inner.arrays["act"][:] = 0
        infos, _ = inner._step_envs()
        assert isinstance(infos, batched.InfoParts)
        assert [rows for rows, _ in infos] == [slice(0, 3), slice(3, 5)]
        assert all(type(tree) is dict and "x" in tree for _, tree in infos)
    finally:
        env.close()


class StableInfoEnv(gym.Env):
    """Infos whose layout holds for a while: Python and NumPy scalars, an array, a nested dict;
    env 1 lacks ``x`` at odd t (the masks change, not the layout); from t = 6 on a new key
    ``late`` (a new layout); at t = 9 alone an object value (that batch goes by pipe)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, index: int, die_at: int | None = None) -> None:
        self.index = index
        self.die_at = die_at  # (its process is killed at this step)
        self.observation_space = spaces.Box(-1e6, 1e6, (1,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {}

    def step(self, action):
        self.t += 1
        i, t = self.index, self.t
        if t == self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        info: dict[str, Any] = {"x": 0.25 * t + i, "n": t * 10 + i, "ok": bool(t % 2),
                                "f32": np.float32(t), "vec": np.full(3, t + i, np.int16),
                                "nested": {"a": np.int64(i), "b": {"c": float(t)}}}
        if i == 1 and t % 2:
            del info["x"]
        if t >= 6:
            info["late"] = np.uint8(t)
        if t == 9:
            info["name"] = f"env{i}"
        return np.array([t], dtype=np.float64), 0.0, t >= 20, False, info


def test_stable_infos_go_through_shared_memory() -> None:
    """Once a worker's info layout holds, its infos come through its own segment (made once
    per layout, named to the parent through the shared buffers), exactly SyncVectorEnv's; a
    batch that does not fit goes through the pipe; every segment is unlinked at close."""
    from tests.executors.helpers import assert_nothing_left, our_names, worker_pids

    factories = [functools.partial(StableInfoEnv, i) for i in range(4)]
    reference_env = gym.vector.SyncVectorEnv(factories)
    env = envfleet.make(factories, 4, backend="pool", num_workers=2)
    inner = env.unwrapped
    reference_env.reset(seed=0)
    env.reset(seed=0)
    used = []
    names: set[str] = set()
    for t in range(1, 13):
        want = reference_env.step(np.zeros(4, dtype=np.int64))[4]
        got = env.step(np.zeros(4, dtype=np.int64))[4]
        assert_same_infos(want, got, f"step {t}")
        used.append(inner.transport._info_state.tolist())
        names |= our_names(env)
    # t = 1: a first layout; t = 2: the same, a segment (1); t = 6: a new layout, t = 7:
    # segment 2; t = 9: an object value (the pipe); t = 10 on: segment 2 again
    assert used == [[0, 0]] + [[1, 1]] * 4 + [[0, 0]] + [[2, 2]] * 2 + [[0, 0]] + [[2, 2]] * 3
    assert len(inner.transport._info_trees) == 2
    pids = worker_pids(env)
    env.close()
    reference_env.close()
    assert_nothing_left(pids, names)


def test_a_lost_worker_with_an_info_segment() -> None:
    """A worker killed while its infos are in its segment: the segment is unlinked, its new
    process makes its own, the other worker's infos keep coming, nothing is left at close."""
    from tests.executors.helpers import assert_nothing_left, our_names, worker_pids

    factories = [functools.partial(StableInfoEnv, i, die_at=4 if i == 3 else None)
                 for i in range(4)]
    env = envfleet.make(factories, 4, backend="pool", num_workers=2, restart_failed=True)
    inner = env.unwrapped
    env.reset(seed=0)
    names: set[str] = set()
    pids = set(worker_pids(env))
    for t in range(1, 5 + 3):
        info = env.step(np.zeros(4, dtype=np.int64))[4]
        names |= our_names(env)
        pids |= set(worker_pids(env))
        if t == 4:  # worker 1 (envs 2, 3) lost: its envs' infos say so
            assert info["_env_failure"].tolist() == [False, False, True, True]
        else:
            assert "env_failure" not in info
            assert info["n"][:2].tolist() == [10 * t, 10 * t + 1]
    # worker 0: its second segment (``late`` came at t = 6); worker 1's new process (its envs
    # new at t = 4, reset at t = 5): its first
    assert inner.transport._info_state.tolist() == [2, 1]
    env.close()
    assert_nothing_left(sorted(pids), names)


class CountingInfoEnv(gym.Env):
    """Infos of one stable layout (its step count and index); its process is killed at step
    ``die_at``."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, index: int, die_at: int | None = None) -> None:
        self.index, self.die_at, self.t = index, die_at, 0
        self.observation_space = spaces.Box(-1e6, 1e6, (1,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {}

    def step(self, action):
        self.t += 1
        if self.t == self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.zeros(1), 0.0, False, False, {"t": self.t, "i": np.int32(self.index)}


def test_infos_after_a_restarted_worker_makes_a_segment_of_the_same_number() -> None:
    """The parent's merge plan over the workers' info segments (made once per set of segment
    numbers) is made again when a lost worker's new process counts its segments from 1 again:
    the new worker's infos are this batch's, never read from its old segment's mapping."""
    factories = [functools.partial(CountingInfoEnv, i, die_at=5 if i == 3 else None)
                 for i in range(4)]
    env = envfleet.make(factories, 4, backend="pool", num_workers=2, restart_failed=True)
    inner = env.unwrapped
    try:
        env.reset(seed=0)
        for step in range(1, 11):  # (env 3's new self would die at step 11)
            info = env.step(np.zeros(4, dtype=np.int64))[4]
            if step < 5:
                assert info["t"].tolist() == [step] * 4
                before = inner.transport._info_plan[1] if step == 4 else None  # (both segments 1)
            elif step > 6:  # worker 1's envs: new at step 5, reset at 6, stepped from 7 on
                assert info["t"].tolist() == [step, step, step - 6, step - 6], step
                assert info["i"].tolist() == [0, 1, 2, 3]
        # (the same numbers as before the loss)
        assert inner.transport._info_state.tolist() == [1, 1]
        # the old plan read the lost worker's unmapped segment (its address may be reused)
        assert inner.transport._info_plan[1] is not before
    finally:
        env.close()


class FlatInfoEnv(CountingInfoEnv):
    """A flat info layout (a Python int, a NumPy float32, an int16 array) that some env breaks
    for one step at a time: a float for the int (t = 4), the keys in another order (t = 5), a
    key missing (t = 6), a bool for the int (t = 7), an array of another dtype (t = 8), no
    info at all (t = 9); the layout holds again from t = 10."""

    def step(self, action):
        self.t += 1
        i, t = self.index, self.t
        info: dict[str, Any] = {"a": 10 * t + i, "b": np.float32(t / 4),
                                "v": np.full(2, t + i, np.int16)}
        if (t, i) == (4, 1):
            info["a"] = 0.5
        elif (t, i) == (5, 2):
            info = {"b": info["b"], "a": info["a"], "v": info["v"]}
        elif (t, i) == (6, 0):
            del info["b"]
        elif (t, i) == (7, 3):
            info["a"] = True
        elif (t, i) == (8, 1):
            info["v"] = np.full(2, 7, np.int32)
        elif (t, i) == (9, 2):
            info = {}
        return np.zeros(1), 0.0, False, False, info


def test_a_flat_layout_written_straight_into_the_segment_falls_back_when_broken() -> None:
    """A worker writes a flat info layout's values straight into its segment (no tree) while
    every env gives exactly that layout; any env breaking it for a step (a type, the key order,
    a missing key or info, a dtype) sends that batch the careful way: always SyncVectorEnv's."""
    factories = [functools.partial(FlatInfoEnv, i) for i in range(4)]
    reference_env = gym.vector.SyncVectorEnv(factories)
    env = envfleet.make(factories, 4, backend="pool", num_workers=2)
    inner = env.unwrapped
    try:
        reference_env.reset(seed=0)
        env.reset(seed=0)
        used = []
        for t in range(1, 13):
            want = reference_env.step(np.zeros(4, dtype=np.int64))[4]
            got = env.step(np.zeros(4, dtype=np.int64))[4]
            assert_same_infos(want, got, f"step {t}")
            used.append(inner.transport._info_state.tolist())
        # worker 0: envs 0, 1; worker 1: envs 2, 3 (a broken step of one worker's env sends
        # that worker's infos by pipe; the other worker's stay in its segment)
        assert used[:3] == [[0, 0], [1, 1], [1, 1]]
        # (t = 9: env 2 without info leaves worker 1's layout as it was, its masks change)
        assert used[3:9] == [[0, 1], [1, 0], [0, 1], [1, 0], [0, 1], [1, 1]]
        assert used[9:] == [[1, 1]] * 3
    finally:
        env.close()
        reference_env.close()


def test_the_publisher_fills_its_segment_as_it_would_copy_the_tree() -> None:
    """``InfoPublisher.fill`` (a flat layout written straight into the segment) leaves the
    segment as ``publish`` leaves it with the batched tree, and refuses any other layout."""
    from envfleet.executors.worker import InfoPublisher

    def items(t: int, **change: Any) -> list:
        return [(3 + j, {"a": 10 * t + j, "b": np.float32(t), "v": np.full(2, t, np.int16),
                         **(change if j == 1 else {})}) for j in range(2)]

    state, names = np.zeros(1, np.int64), np.zeros((1, 64), np.uint8)
    publisher = InfoPublisher(2, state, names, 0)
    try:
        for t in (1, 2):
            assert publisher.publish(batched.batch(items(t), 2, 3)) == (t == 2)
        for t in (3, 4):
            assert publisher.fill(items(t))
            want = batched.batch(items(t), 2, 3)
            for key, (values, mask, _, _) in want.items():
                np.testing.assert_array_equal(publisher.tree[key][0], values)
                np.testing.assert_array_equal(publisher.tree[key][1], mask)
        assert state[0] == 1
        for broken in ({"a": 1.5}, {"a": True}, {"b": 1.0}, {"v": np.zeros(2, np.int32)},
                       {"v": np.zeros(3, np.int16)}, {"c": 1}):
            assert not publisher.fill(items(5, **broken)), broken
        assert not publisher.fill(items(5)[:1])  # (an env without info)
        assert not publisher.fill([items(5)[1], items(5)[0]])  # (not in env order)
        assert not publisher.fill([(3, {"b": np.float32(1), "a": 1, "v": np.zeros(2, np.int16)}),
                                   items(5)[1]])  # (another key order)
    finally:
        publisher.close(unlink=True)
