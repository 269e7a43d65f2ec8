"""Batch buffers: one array per leaf of a space, in one shared-memory segment or in local memory.

A space is flattened into leaves (``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``);
``Dict`` and ``Tuple`` spaces nest them. Each leaf gets one array of shape
``(num_envs, *leaf_shape)`` in the leaf's dtype; ``nest`` rebuilds the batched structure
(a dict / tuple of arrays, as ``gymnasium.vector.utils.batch_space`` describes it) as views of
those arrays, and ``row_writer`` / ``row_reader`` move one env's value in and out of row ``i``.
Any other space (``Text``, ``Graph``, ``Sequence``, ``OneOf``, a user's own) has no fixed-size
form: it is an *object leaf*, a ``(num_envs,)`` object array of the envs' own values, batched
for the user as Gymnasium batches it (a tuple: ``export``).

``SharedBuffers`` carves every array of a ``BufferLayout`` out of ONE
``multiprocessing.shared_memory`` segment: the parent creates (and finally unlinks) it, workers
attach to it by name. Object leaves cannot be shared: each process holds its own, and their
rows travel through the workers' pipes (``BufferLayout.objects``). Nothing about the layout is
pickled after start-up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np
from gymnasium import spaces

LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
OBJECT = np.dtype(object)
ALIGN = 64  # bytes: every array starts on its own cache line


def leaves(space: spaces.Space, prefix: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{name: (per-env shape, dtype)}`` for each leaf of ``space``, named ``prefix.key...``."""
    if isinstance(space, spaces.Dict):
        out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for key, sub in space.spaces.items():
            out.update(leaves(sub, f"{prefix}.{key}"))
        return out
    if isinstance(space, spaces.Tuple):
        out = {}
        for k, sub in enumerate(space.spaces):
            out.update(leaves(sub, f"{prefix}.{k}"))
        return out
    if isinstance(space, spaces.Discrete):
        return {prefix: ((), np.dtype(space.dtype))}
    if isinstance(space, spaces.MultiDiscrete):
        return {prefix: (tuple(space.nvec.shape), np.dtype(space.dtype))}
    if isinstance(space, spaces.Box | spaces.MultiBinary):
        return {prefix: (tuple(space.shape), np.dtype(space.dtype))}
    return {prefix: ((), OBJECT)}  # no fixed-size form: the env's own values


def nest(space: spaces.Space, arrays: dict[str, np.ndarray], prefix: str) -> Any:
    """The batched value of ``space`` (dict / tuple of arrays) over the leaf ``arrays``."""
    if isinstance(space, spaces.Dict):
        return {key: nest(sub, arrays, f"{prefix}.{key}") for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(nest(sub, arrays, f"{prefix}.{k}") for k, sub in enumerate(space.spaces))
    return arrays[prefix]


def row_writer(space: spaces.Space) -> Callable[[Any, int, Any], None]:
    """``write(batched, i, value)``: store one env's ``value`` in row ``i`` of ``batched``."""
    if isinstance(space, spaces.Dict):
        parts = [(key, row_writer(sub)) for key, sub in space.spaces.items()]

        def write_dict(batched: Any, i: int, value: Any) -> None:
            for key, write in parts:
                write(batched[key], i, value[key])

        return write_dict
    if isinstance(space, spaces.Tuple):
        parts_t = [row_writer(sub) for sub in space.spaces]

        def write_tuple(batched: Any, i: int, value: Any) -> None:
            for k, write in enumerate(parts_t):
                write(batched[k], i, value[k])

        return write_tuple

    def write_leaf(batched: np.ndarray, i: int, value: Any) -> None:
        batched[i] = value

    return write_leaf


def row_reader(space: spaces.Space) -> Callable[[Any, int], Any]:
    """``read(batched, i)``: env i's value (a NumPy scalar, a fresh array, or a dict / tuple)."""
    if isinstance(space, spaces.Dict):
        parts = [(key, row_reader(sub)) for key, sub in space.spaces.items()]
        return lambda batched, i: {key: read(batched[key], i) for key, read in parts}
    if isinstance(space, spaces.Tuple):
        parts_t = [row_reader(sub) for sub in space.spaces]
        return lambda batched, i: tuple(read(batched[k], i) for k, read in enumerate(parts_t))
    if isinstance(space, spaces.Discrete) or not isinstance(space, LEAF_SPACES):
        return lambda batched, i: batched[i]  # a NumPy integer (as Gymnasium's iterate gives),
    return lambda batched, i: batched[i].copy()  # or an object leaf's own value


def export(value: Any, copy: bool = True) -> Any:
    """A batched value (dict / tuple of arrays) as the user gets it: arrays copied (``copy``),
    object leaves as tuples of the envs' values (Gymnasium's batching of such spaces)."""
    if isinstance(value, dict):
        return {k: export(v, copy) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(export(v, copy) for v in value)
    if isinstance(value, np.ndarray):
        if value.dtype == OBJECT:
            return tuple(value.tolist()) if value.ndim else value.item()
        return value.copy() if copy else value
    return value  # one env's value of an object leaf


def take_rows(src: Any, rows: Any) -> Any:
    """Rows ``rows`` (an index array, a slice or an int) of the batched value ``src``."""
    if isinstance(src, dict):
        return {key: take_rows(sub, rows) for key, sub in src.items()}
    if isinstance(src, tuple):
        return tuple(take_rows(sub, rows) for sub in src)
    return src[rows]


def assign_rows(dst: Any, src: Any, rows: Any) -> None:
    """Store the batched value ``src`` in rows ``rows`` of the batched buffers ``dst``."""
    if isinstance(dst, dict):
        for key, sub in dst.items():
            assign_rows(sub, src[key], rows)
    elif isinstance(dst, tuple):
        for k, sub in enumerate(dst):
            assign_rows(sub, src[k], rows)
    elif dst.dtype == OBJECT:  # one by one: NumPy would read a value's own sequence as rows
        targets = np.arange(len(dst))[rows]
        if targets.ndim == 0:
            dst[int(targets)] = src
        else:
            for i, v in zip(targets.tolist(), src, strict=True):
                dst[i] = v
    else:
        dst[rows] = src


def copy_row(src: Any, dst: Any, rows: int | slice) -> None:
    """Copy ``rows`` of the batched value ``src`` into the same rows of ``dst``."""
    assign_rows(dst, take_rows(src, rows), rows)


def final_obs_info(space: spaces.Space, value: Any, mask: np.ndarray) -> Any:
    """``info["final_obs"]`` from the batched final observations ``value`` (of ``space``) of
    the envs in ``mask``: an array with the other rows zeroed; for any other space, Gymnasium's
    ``SyncVectorEnv`` layout (an object array: env i's own observation, None for the others),
    so that ``final_obs[i]`` is env i's observation whatever the space. Rows are read by the
    space (``row_reader``), not by the values' types: an object leaf's value is the env's own
    (a ``GraphInstance`` stays one, though it is a tuple)."""
    if isinstance(value, np.ndarray) and value.dtype != OBJECT:
        return masked_copy(value, mask)
    read = row_reader(space)
    out = np.full(len(mask), None, dtype=object)
    for i in np.flatnonzero(mask).tolist():
        out[i] = read(value, i)
    return out


def masked_copy(value: Any, mask: np.ndarray) -> Any:
    """A copy of a batched value with the rows outside ``mask`` zeroed."""
    if isinstance(value, dict):
        return {k: masked_copy(v, mask) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(masked_copy(v, mask) for v in value)
    out = np.zeros_like(value)
    out[mask] = value[mask]
    return out


@dataclass(frozen=True)
class BufferLayout:
    """Named arrays (name -> (shape, dtype)) and their byte offsets in one segment."""

    fields: tuple[tuple[str, tuple[int, ...], str, int], ...]  # (name, shape, dtype, offset)
    size: int

    @classmethod
    def of(cls, arrays: dict[str, tuple[tuple[int, ...], Any]]) -> BufferLayout:
        fields, offset = [], 0
        for name, (shape, dtype) in arrays.items():
            dtype = np.dtype(dtype)
            if dtype == OBJECT:  # (held by each process: offset -1)
                fields.append((name, tuple(shape), dtype.str, -1))
                continue
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            fields.append((name, tuple(shape), dtype.str, offset))
            offset += -(-max(nbytes, 1) // ALIGN) * ALIGN
        return cls(tuple(fields), max(offset, ALIGN))

    @property
    def objects(self) -> list[str]:
        """The object leaves: in this process's memory, whatever the buffer."""
        return [name for name, _, _, offset in self.fields if offset < 0]

    def views(self, buffer: Any) -> dict[str, np.ndarray]:
        return {name: np.full(shape, None, dtype=OBJECT) if offset < 0 else
                np.ndarray(shape, dtype=np.dtype(dtype), buffer=buffer, offset=offset)
                for name, shape, dtype, offset in self.fields}

    def local(self) -> dict[str, np.ndarray]:
        """The same arrays in this process's own (zeroed) memory."""
        return self.views(bytearray(self.size))


class SharedBuffers:
    """The arrays of a ``BufferLayout`` in one shared-memory segment.

    ``create`` (parent) makes the segment; ``attach`` (worker) maps it by name. ``close`` drops
    this process's mapping; ``unlink`` (parent, once) removes the segment from the system.
    """

    def __init__(self, layout: BufferLayout, segment: shared_memory.SharedMemory,
                 owner: bool) -> None:
        self.layout = layout
        self.segment = segment
        self.owner = owner
        self.name = segment.name
        self.arrays: dict[str, np.ndarray] | None = layout.views(segment.buf)

    @classmethod
    def create(cls, layout: BufferLayout) -> SharedBuffers:
        segment = shared_memory.SharedMemory(create=True, size=layout.size)
        return cls(layout, segment, owner=True)

    @classmethod
    def attach(cls, layout: BufferLayout, name: str) -> SharedBuffers:
        segment = shared_memory.SharedMemory(name=name)
        return cls(layout, segment, owner=False)

    def close(self) -> None:
        """Unmap (idempotent). Arrays handed out with ``copy=False`` keep the mapping alive."""
        self.arrays = None
        # views still exported (copy=False outputs) keep the mapping until they are freed
        with contextlib.suppress(BufferError):
            self.segment.close()

    def unlink(self) -> None:
        """Remove the segment's name (idempotent; the owner only)."""
        if self.owner:
            self.owner = False
            with contextlib.suppress(FileNotFoundError):
                self.segment.unlink()
