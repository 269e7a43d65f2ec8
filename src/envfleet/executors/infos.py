"""Batched infos: a share of the envs' info dicts batched in its worker, merged by row slices.

Gymnasium's ``VectorEnv._add_info`` batches the envs' infos one env at a time: each key gets
an array (its dtype from the first env that has the key: ``int`` / ``float`` / ``bool`` ->
their NumPy types, a NumPy scalar -> its dtype, an array -> its dtype and shape, anything else
-> an object array; ``"final_obs"`` always an object array), every later env's value is
stored into it, a nested dict is batched the same way, and ``_key`` masks say which envs have
each key. A pool worker does that for its own share (``batch``) and sends the parent one
batched tree per batch; the parent merges the workers' trees by row slices (``merge``).

A tree maps each key to a leaf ``(values, mask, kind, raw)`` or a node ``(tree, mask)`` (a
nested dict). ``values`` is the array ``_add_info`` would build for the share (None if a value
could not be stored in it), ``mask`` the envs that have the key; ``kind`` says what the values
were (``p`` Python scalars, ``s`` NumPy scalars, ``a`` arrays, ``o`` objects, see ``KINDS``) and
``raw`` is None when every value had the first one's type (and dtype, shape: ``values`` gives
them back exactly), else ``[(row, value), ...]``, the values as the envs returned them.

Merging gives exactly the arrays ``_add_info`` gives over all the envs in order: a key whose
leaves agree on dtype and shape is copied by row slices (each worker stored its values with the
same per-element assignment into the same dtype); any other key is rebuilt from the envs' own
values, added one by one with Gymnasium's ``_add_info`` (so are infos that no tree can hold: a
key that is a dict for one env and not for another, keys ``k`` and ``_k`` together).
"""

from __future__ import annotations

import contextlib
import functools
import pickle
from multiprocessing import shared_memory
from types import SimpleNamespace
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from envfleet.executors.shared_memory import BufferLayout, SharedBuffers

#: the kinds of leaf values: Python int / float / bool, NumPy scalars, arrays, other objects
KINDS = ("p", "s", "a", "o")
OBJECT = np.dtype(object)
#: a part of a batch's infos: (the rows of a tree: a slice of the envs, or an index array;
#: the tree), or (None, [(env index, info), ...]) for infos that were not batched
Part = tuple[slice | np.ndarray | None, Any]


class InfoParts(list):
    """A batch's infos as parts (``Part``), in the order Gymnasium would add them; ``plan``
    (a ``ConcatPlan`` of exactly these parts, or None) merges them without any checks."""

    plan: ConcatPlan | None = None


class Irregular(Exception):
    """Infos that no tree can hold (``merge`` adds them one env at a time)."""


def batch(entries: list[tuple[int, dict[str, Any]]], n: int,
          first: int = 0) -> dict[str, Any] | None:
    """The tree of ``entries`` ((env index, info), env ``first + j`` in row ``j`` of ``n``);
    None when they are irregular (see the module doc)."""
    tree: dict[Any, list] = {}
    try:
        for i, info in entries:
            _add(tree, info, i - first, n)
    except Irregular:
        return None
    return _freeze(tree)


def _add(tree: dict[Any, list], info: dict[Any, Any], j: int, n: int) -> None:
    """Add one env's ``info`` in row ``j`` to the (building) ``tree``."""
    for key, value in info.items():
        entry = tree.get(key)
        if entry is None:
            _check_name(tree, key)
            if key != "final_obs" and isinstance(value, dict):
                entry = tree[key] = [{}, np.zeros(n, dtype=np.bool_)]
            else:
                entry = tree[key] = _new_leaf(key, value, n)
        if len(entry) == 2:  # a nested dict
            if not isinstance(value, dict) or key == "final_obs":
                raise Irregular
            _add(entry[0], value, j, n)
            entry[1][j] = True
            continue
        if key != "final_obs" and isinstance(value, dict):
            raise Irregular
        values, mask, kind, raw, sig = entry
        mask[j] = True
        if kind == "o":
            values[j] = value  # (an object array stores the value itself)
            continue
        if raw is None and (type(value) is sig if kind != "a" else (
                type(value) is np.ndarray and value.dtype == sig[0]
                and value.shape == sig[1])):
            try:
                values[j] = value
                continue
            except Exception:  # (an int beyond int64, a NaN in an int array...)
                pass
        # not stored as it is: keep the values as the envs gave them
        if raw is None:
            raw = entry[3] = [(r, _value(values, kind, r))
                              for r in np.flatnonzero(mask).tolist() if r != j]
        raw.append((j, value))
        if values is not None:
            try:
                values[j] = value
            except Exception:  # (_add_info raises here when this dtype wins)
                entry[0] = None


def _check_name(tree: dict[Any, Any], key: Any) -> None:
    """A new ``key`` must not collide with a ``_key`` mask (of its own or of another key)."""
    if f"_{key}" in tree or (isinstance(key, str) and key[:1] == "_"
                             and any(f"_{k}" == key for k in tree)):
        raise Irregular


def _new_leaf(key: Any, value: Any, n: int) -> list:
    """A new leaf for ``value``'s key: [values, mask, kind, raw, signature]."""
    t = type(value)
    if key == "final_obs":
        return [np.full(n, None, dtype=object), np.zeros(n, dtype=np.bool_), "o", None, None]
    if t in (int, float, bool):
        return [np.zeros(n, dtype=t), np.zeros(n, dtype=np.bool_), "p", None, t]
    if issubclass(t, np.number):
        return [np.zeros(n, dtype=t), np.zeros(n, dtype=np.bool_), "s", None, t]
    if isinstance(value, np.ndarray):
        return [np.zeros((n, *value.shape), dtype=value.dtype), np.zeros(n, dtype=np.bool_),
                "a", None, (value.dtype, value.shape)]
    return [np.full(n, None, dtype=object), np.zeros(n, dtype=np.bool_), "o", None, None]


def _freeze(tree: dict[Any, list]) -> dict[Any, tuple]:
    return {key: (_freeze(e[0]), e[1]) if len(e) == 2 else (e[0], e[1], e[2], e[3])
            for key, e in tree.items()}


def _value(values: np.ndarray, kind: str, j: int) -> Any:
    """Row ``j``'s value as the env returned it (a leaf whose values all had one type)."""
    if kind == "p":
        return values[j].item()
    if kind == "a":
        return np.array(values[j])
    return values[j]


def env_info(tree: dict[Any, tuple], j: int) -> dict[Any, Any]:
    """Row ``j``'s own info from a tree (the keys it has, their values as it returned them)."""
    info: dict[Any, Any] = {}
    for key, entry in tree.items():
        if entry[1][j]:
            info[key] = _leaf_value(entry, j) if len(entry) == 4 else env_info(entry[0], j)
    return info


def _leaf_value(leaf: tuple, j: int) -> Any:
    values, _, kind, raw = leaf
    if raw is None:
        return _value(values, kind, j)
    return next(v for r, v in reversed(raw) if r == j)


def tree_of(info: dict[str, Any], n: int) -> dict[Any, tuple]:
    """A share's info already batched by a vector env (Gymnasium's dict of arrays with
    ``_key`` masks, ``n`` envs) as a tree, so that ``merge`` puts it at the share's rows as it
    merges a worker's (a ``ray`` actor's local pool or native engine)."""
    tree: dict[Any, tuple] = {}
    for key, value in info.items():
        if isinstance(key, str) and key[:1] == "_" and key[1:] in info:
            continue  # (a mask)
        mask = np.asarray(info.get(f"_{key}", np.ones(n, dtype=np.bool_)), dtype=np.bool_)
        if isinstance(value, dict):
            tree[key] = (tree_of(value, n), mask)
            continue
        values = np.asarray(value)
        kind = "o" if values.dtype == OBJECT else "s" if values.ndim == 1 else "a"
        tree[key] = (values, mask, kind, None)
    return tree


def entries(parts: list[Part]) -> list[tuple[int, dict[Any, Any]]]:
    """Every env's own info in ``parts``, in order: [(env index, info)]."""
    out: list[tuple[int, dict[Any, Any]]] = []
    for rows, part in parts:
        if rows is None:
            out += part
            continue
        index = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
        present = np.zeros(len(index), dtype=bool)
        for entry in part.values():
            present |= entry[1]
        out += [(int(index[j]), env_info(part, j)) for j in np.flatnonzero(present).tolist()]
    return out


def raw_parts(items: list[tuple[int, dict[Any, Any]]], n: int) -> list[Part]:
    """``items`` ((env index, info), in order) as tree parts (one per run of distinct envs),
    or one part of them as they are when they are irregular."""
    parts: list[Part] = []
    start = 0
    while start < len(items):
        seen: set[int] = set()
        stop = start
        while stop < len(items) and items[stop][0] not in seen:
            seen.add(items[stop][0])
            stop += 1
        chunk = items[start:stop]
        tree = batch([(k, info) for k, (_, info) in enumerate(chunk)], len(chunk))
        if tree is None:
            return [(None, items)]
        parts.append((np.array([i for i, _ in chunk], dtype=np.int64), tree))
        start = stop
    return parts


def merge(parts: list[Part], num_envs: int,
          into: dict[str, Any] | None = None) -> dict[str, Any]:
    """The batched infos of ``parts`` (as ``_add_info`` gives them, env after env, in order),
    added to ``into`` (a new dict when None)."""
    plan = getattr(parts, "plan", None)
    if plan is not None and not into:
        return plan.run()
    into = {} if into is None else into
    trees: list[tuple[Any, dict]] = []
    for rows, part in parts:
        if rows is None:
            converted = raw_parts(part, num_envs)
            if converted[0][0] is None:
                return _add_each(parts, num_envs, into)
            trees += converted
        elif part:
            trees.append((rows, part))
    if not trees:
        return into
    if into and any(k in into or f"_{k}" in into or (isinstance(k, str) and k[:1] == "_"
                                                      and k[1:] in into)
                    for _, tree in trees for k in tree):
        return _add_each(parts, num_envs, into)
    into.update(_merge(trees, num_envs))
    return into


def adder(num_envs: int) -> Any:
    """An object with Gymnasium's ``VectorEnv._add_info`` for ``num_envs`` envs (it recurses
    through ``self._add_info``)."""
    view = SimpleNamespace(num_envs=num_envs)
    view._add_info = functools.partial(VectorEnv._add_info, view)
    return view


def _add_each(parts: list[Part], num_envs: int, into: dict[str, Any]) -> dict[str, Any]:
    """Gymnasium's own ``_add_info``, one env after another (the reference behaviour)."""
    view = adder(num_envs)
    for i, info in entries(parts):
        into = view._add_info(into, info, i)
    return into


def _tiled(trees: list[tuple[Any, dict]], n: int) -> bool:
    """The trees' rows are slices that cover the envs ``0 .. n - 1`` in order."""
    stop = 0
    for rows, _ in trees:
        if not isinstance(rows, slice) or rows.start != stop:
            return False
        stop = rows.stop
    return stop == n


def _merge(trees: list[tuple[Any, dict]], n: int) -> dict[str, Any]:
    keys = dict.fromkeys(k for _, tree in trees for k in tree)
    tiled = _tiled(trees, n)  # (then a key all the trees have is one concatenation)
    out: dict[str, Any] = {}
    for key in keys:
        found = [(rows, tree[key]) for rows, tree in trees if key in tree]
        first = found[0][1]
        every = tiled and len(found) == len(trees)
        if len(first) == 4 and first[0] is not None and all(
                len(e) == 4 and e[0] is not None and e[0].dtype == first[0].dtype
                and e[0].shape[1:] == first[0].shape[1:] for _, e in found):
            if every:
                values = np.concatenate([e[0] for _, e in found])
                mask = np.concatenate([e[1] for _, e in found])
            else:
                dtype = first[0].dtype
                values = np.full(n, None, dtype=object) if dtype == OBJECT else \
                    np.zeros((n, *first[0].shape[1:]), dtype=dtype)
                mask = np.zeros(n, dtype=np.bool_)
                for rows, (v, m, _, _) in found:
                    _put(values, mask, rows, v, m)
            out[key], out[f"_{key}"] = values, mask
        elif all(len(e) == 2 for _, e in found):
            if every:
                mask = np.concatenate([e[1] for _, e in found])
            else:
                mask = np.zeros(n, dtype=np.bool_)
                for rows, (_, m) in found:
                    _put(None, mask, rows, None, m)
            out[key], out[f"_{key}"] = _merge([(rows, e[0]) for rows, e in found], n), mask
        else:  # the values disagree on dtype or shape: add them env by env
            view = adder(n)
            sub: dict[str, Any] = {}
            for rows, e in found:
                index = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
                for j in np.flatnonzero(e[1]).tolist():
                    value = _leaf_value(e, j) if len(e) == 4 else env_info(e[0], j)
                    sub = view._add_info(sub, {key: value}, int(index[j]))
            out.update(sub)
    return out


def _put(values: np.ndarray | None, mask: np.ndarray, rows: Any, v: np.ndarray | None,
         m: np.ndarray) -> None:
    """Store a part's rows: all of a slice (parts over slices never overlap), only the rows
    that have the key of an index array (later parts overwrite earlier ones, env by env)."""
    if isinstance(rows, slice):
        if values is not None:
            values[rows] = v
        mask[rows] = m
    else:
        target = rows[m]
        if values is not None:
            values[target] = v[m]
        mask[target] = True


def add_infos(env: Any, into: dict[str, Any], items: Any) -> dict[str, Any]:
    """Add a batch's infos to ``into``: ``InfoParts`` merged, a list of (env index, info)
    added env by env with ``env._add_info`` (Gymnasium's)."""
    if isinstance(items, InfoParts):
        return merge(items, env.num_envs, into)
    for i, info in items:
        into = env._add_info(into, info, i)
    return into


# --- trees in shared memory (a pool worker whose infos keep one layout) ------------------------


def signature(tree: dict[Any, tuple]) -> tuple | None:
    """The layout of a tree (keys in order; each leaf's dtype, shape and kind), or None when it
    cannot live in shared memory (object values, values not all of one type, a dtype that its
    ``str`` does not give back: structured arrays)."""
    out = []
    for key, entry in tree.items():
        if len(entry) == 2:
            sub = signature(entry[0])
            if sub is None:
                return None
            out.append((key, sub))
            continue
        values, _, kind, raw = entry
        if values is None or raw is not None or values.dtype.hasobject \
                or np.dtype(values.dtype.str) != values.dtype:  # (structured: by pipe)
            return None
        out.append((key, (values.dtype.str, values.shape[1:], kind)))
    return tuple(out)


def _walk(sig: tuple, names: list[int]) -> list:
    """Each leaf and nested dict of ``sig`` with its array names (values ``v<k>``, masks
    ``m<k>``, numbered in order): [(key, kind, values name, mask name, subtree or None)]."""
    out = []
    for key, spec in sig:
        k = len(names)
        names.append(k)
        if not spec or isinstance(spec[0], tuple):  # a nested dict's signature
            out.append((key, None, None, f"m{k}", _walk(spec, names)))
        else:
            out.append((key, spec, f"v{k}", f"m{k}", None))
    return out


def shared_fields(sig: tuple, rows: int) -> dict[str, tuple[tuple[int, ...], Any]]:
    """The arrays (name -> (shape, dtype)) that hold a tree of layout ``sig`` over ``rows``."""
    fields: dict[str, tuple[tuple[int, ...], Any]] = {}

    def add(walked: list) -> None:
        for _, spec, values, mask, sub in walked:
            if sub is None:
                fields[values] = ((rows, *spec[1]), np.dtype(spec[0]))
            else:
                add(sub)
            fields[mask] = ((rows,), np.bool_)

    add(_walk(sig, []))
    return fields


def shared_tree(sig: tuple, arrays: dict[str, np.ndarray]) -> dict[Any, tuple]:
    """The tree of layout ``sig`` whose arrays are ``arrays`` (``shared_fields``' names)."""

    def build(walked: list) -> dict[Any, tuple]:
        return {key: (arrays[values], arrays[mask], spec[2], None) if sub is None else
                (build(sub), arrays[mask]) for key, spec, values, mask, sub in walked}

    return build(_walk(sig, []))


def shared_infos(sig: tuple, rows: int) -> SharedBuffers:
    """A new segment for trees of layout ``sig`` over ``rows``, its layout written first (so
    that ``attach_infos`` needs only its name)."""
    head = pickle.dumps(sig, protocol=pickle.HIGHEST_PROTOCOL)
    shared = SharedBuffers.create(_segment_layout(sig, rows, len(head)))
    shared.owner = False  # (the parent unlinks it)
    shared.arrays["head"][:8] = np.frombuffer(len(head).to_bytes(8, "little"), np.uint8)
    shared.arrays["head"][8:] = np.frombuffer(head, np.uint8)
    return shared


def unlink_info_segments(names: np.ndarray) -> None:
    """Unlink the info segments named in ``names`` (rows of ``infonames``) that still exist
    (a worker's last one, which the parent may never have attached), and forget them."""
    for row in names:
        name = bytes(row).rstrip(b"\0").decode()
        if name:
            with contextlib.suppress(OSError, ValueError):
                segment = shared_memory.SharedMemory(name=name)
                segment.close()
                segment.unlink()
        row[:] = 0


def attach_infos(name: str, rows: int) -> tuple[SharedBuffers, dict[Any, tuple]]:
    """The segment ``name`` made by ``shared_infos`` (this process unlinks it) and its tree."""
    segment = shared_memory.SharedMemory(name=name)
    size = int.from_bytes(bytes(segment.buf[:8]), "little")
    sig = pickle.loads(bytes(segment.buf[8:8 + size]))
    shared = SharedBuffers(_segment_layout(sig, rows, size), segment, owner=True)
    return shared, shared_tree(sig, shared.arrays)


def _segment_layout(sig: tuple, rows: int, head: int) -> BufferLayout:
    return BufferLayout.of({"head": ((8 + head,), np.uint8), **shared_fields(sig, rows)})


def copy_tree(src: dict[Any, tuple], dst: dict[Any, tuple]) -> None:
    """Copy the arrays of ``src`` into ``dst`` (two trees of one layout)."""
    for key, entry in src.items():
        target = dst[key]
        if len(entry) == 2:
            copy_tree(entry[0], target[0])
        else:
            target[0][...] = entry[0]
        target[1][...] = entry[1]


class ConcatPlan:
    """The merge of trees that tile the envs in order and share one layout (each worker's info
    segment, while its layout holds): every key is the concatenation of the trees' arrays,
    which is what ``_merge`` gives for them, worked out once instead of every batch."""

    def __init__(self, steps: list[tuple[Any, list[np.ndarray], list[np.ndarray],
                                         ConcatPlan | None]]) -> None:
        self.steps = steps  # (key, its values arrays or [], its mask arrays, a nested plan)

    @classmethod
    def of(cls, trees: list[dict[Any, tuple]]) -> ConcatPlan | None:
        """The plan for ``trees`` (in row order, tiling the envs), or None when their layouts
        (``signature``) differ or cannot be concatenated."""
        sig = signature(trees[0])
        if sig is None or any(signature(t) != sig for t in trees[1:]):
            return None
        steps = []
        for key, entry in trees[0].items():
            entries_ = [t[key] for t in trees]
            masks = [e[1] for e in entries_]
            if len(entry) == 2:
                steps.append((key, [], masks, cls.of([e[0] for e in entries_])))
            else:
                steps.append((key, [e[0] for e in entries_], masks, None))
        return cls(steps)

    def run(self) -> dict[str, Any]:
        """This batch's merged infos (new arrays: the trees are overwritten next batch)."""
        out: dict[str, Any] = {}
        for key, values, masks, sub in self.steps:
            out[key] = np.concatenate(values) if sub is None else sub.run()
            out[f"_{key}"] = np.concatenate(masks)
        return out
