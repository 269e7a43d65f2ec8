"""The compiled loops of the Atari engine: numba ``prange`` over envs, calling ALE's C++ methods
through ctypes (``ale.ale_functions``, passed in as an argument) with the GIL released.

Each loop is Gymnasium's ``AtariPreprocessing`` (over ``AtariEnv(frameskip=1)``) for one env,
in the same order of emulator calls: ``_step_kernel`` is its ``step`` (frame skip, reward sum,
life-loss termination, the last two frames read, their max-pool), ``_reset_kernel`` its
``reset`` without a seed (``reset_game``, the no-ops drawn beforehand from the env's
``np_random``) and ``_first_frames_kernel`` the frame a reset ends with (after seeded resets
run in Python). ``_stack_kernel`` is ``FrameStackObservation``. Nothing is allocated.

Frames are read as ALE's palette indices, in place in the emulator's screen (``_screen``), and
each row is compared with the env's copy of that frame's last read (``FrameBuffers.raw``): only
the rows that changed are copied, turned to gray (ALE's own table, ``ale.grayscale_table``),
max-pooled and summed across by the resize, and only the output rows over a changed row are
summed down and stored; the others keep last step's values, which the same inputs give again.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numba
import numpy as np
from numba import prange
from numba.core import types
from numba.extending import intrinsic

from envfleet.native.handout import next_index


class Kernels(NamedTuple):
    """The compiled loops (see the module's docstring); ``step``, ``reset`` and
    ``first_frames`` take ALE's entry points (``ale_functions()``) as their first argument."""

    step: Any
    reset: Any
    first_frames: Any
    stack: Any
    resize: Any  # ``area_resize``, for calls from Python


class FrameBuffers(NamedTuple):
    """Each env's frames (one row per env, flat): the step loops' view of the engine's
    buffers."""

    raw: Any  # (n, 2, height * width) uint8: the last frame read, the one before (indices)
    black: Any  # (height * width,) uint8: a palette index whose gray is 0 (the reset's
    #             second frame: the wrapper's zeroed buffer)
    gray: Any  # (256,) uint8: ALE's grayscale of each palette index
    pooled: Any  # (n, height * width) uint8: the max-pooled gray frame (the wrapper's buffer 0)
    dirty: Any  # (n, height) bool: rows read changed, not yet pooled and resized
    stale: Any  # (n,) bool: ``pooled`` is not the pool of ``raw`` (every row is redone)
    row_sums: Any  # (n, height, out width) float32: each source row's sums across (resize)
    scratch: Any  # (n, 2, max(width, out width)) float32
    resized: Any  # (n, out height * out width) uint8


@functools.cache
def kernels() -> Kernels:
    """The loops on envfleet's kernel cache (``native.kernel_cache``): compiled once per
    machine (ALE's entry points are arguments, not constants, so the machine code does not
    depend on where this process loaded ale-py), loaded from disk after that."""
    import ale_py

    from envfleet.native.jit import announce_compile
    from envfleet.native.kernel_cache import disk_cached, is_disk_cached

    parallel = (_step_kernel, _reset_kernel, _first_frames_kernel)
    loops = []
    for loop in (*parallel, _stack_kernel, area_resize.py_func):
        compiled = numba.njit(nogil=True, error_model="numpy", parallel=loop in parallel)(loop)

        def announce(compiled: Any = compiled) -> None:
            announce_compile("atari", "ALE/<Game>-v5", "numba", 10.0,
                             cached=is_disk_cached(compiled))
        loops.append(disk_cached(compiled, ale_py.__version__, on_compile=announce))
    return Kernels(*loops)


@intrinsic
def _byte_pointer(typingctx: Any, address: Any) -> Any:
    """``(uint8 *) address``."""
    pointer = types.CPointer(types.uint8)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(pointer))
    return pointer(types.int64), codegen


@intrinsic
def _word_pointer(typingctx: Any, address: Any) -> Any:
    """``(int64 *) address``."""
    pointer = types.CPointer(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(pointer))
    return pointer(types.int64), codegen


@numba.njit(nogil=True, error_model="numpy")
def _screen(ale: Any, pointer: int, size: int) -> Any:
    """The emulator's screen (``size`` palette indices) where ALE keeps it: its ``ALEScreen``
    holds the rows and columns (two int32), then the pixels' address (``ale.screen_indices``,
    checked when an engine is made)."""
    header = numba.carray(_word_pointer(ale.screen(pointer)), 2)
    return numba.carray(_byte_pointer(header[1]), size)


@numba.njit(nogil=True, error_model="numpy")
def _take(source: Any, raw: Any, dirty: Any) -> None:
    """Copy the rows of ``source`` that differ from ``raw``'s into ``raw`` (both flat, one row
    per entry of ``dirty``) and mark them ``dirty``."""
    width = raw.size // dirty.size
    for r in range(dirty.size):
        start = r * width
        differ = np.uint8(0)  # (a uint8 sum, indices from 0: the loop is vectorized)
        for k in range(width):
            differ |= source[start + k] ^ raw[start + k]
        if differ:
            for k in range(width):
                raw[start + k] = source[start + k]
            dirty[r] = True


@numba.njit(nogil=True, error_model="numpy")
def _observe_frames(i: int, buffers: Any, tables: Any, extend: bool) -> None:
    """Env i's pooled frame and its resize, from the rows its reads changed: the max of the
    two raw frames' grays, or (``extend``: a step that ended before its last frame, whose
    second-to-last frame may have been read) of the pooled frame and the second frame's gray,
    as the wrapper's ``np.maximum(buffer[0], buffer[1])`` over what it holds then."""
    dirty, pooled = buffers.dirty[i], buffers.pooled[i]
    first, second, gray = buffers.raw[i, 0], buffers.raw[i, 1], buffers.gray
    if buffers.stale[i] and not extend:
        for r in range(dirty.size):
            dirty[r] = True
        buffers.stale[i] = False
    width = pooled.size // dirty.size
    for r in range(dirty.size):
        if dirty[r]:
            for k in range(r * width, (r + 1) * width):
                low = pooled[k] if extend else gray[first[k]]
                high = gray[second[k]]
                pooled[k] = high if high > low else low
    if extend:  # the pooled frame is no longer the pool of the raw frames
        buffers.stale[i] = True
    if tables[0].size:
        area_resize_rows(pooled, tables, dirty, buffers.row_sums[i], buffers.scratch[i],
                         buffers.resized[i])
    for r in range(dirty.size):
        dirty[r] = False


@numba.njit(nogil=True, error_model="numpy")
def _first_frame(ale: Any, i: int, pointer: int, buffers: Any, tables: Any) -> None:
    """The frame a reset ends with: the screen read, the second frame the zero frame."""
    raw, dirty = buffers.raw[i], buffers.dirty[i]
    _take(_screen(ale, pointer, raw.shape[1]), raw[0], dirty)
    _take(buffers.black, raw[1], dirty)
    _observe_frames(i, buffers, tables, False)


@numba.njit(nogil=True, error_model="numpy")
def _reset_one(ale: Any, i: int, pointer: int, noops: int, noop_code: int, lives: Any,
               buffers: Any, tables: Any, restart: bool = True) -> bool:
    """``AtariPreprocessing.reset()`` (no seed): ``reset_game``, the no-ops (a game they
    end is reset again), the lives, the first frame (``_first_frame``).
    ``restart`` False (``episodic_life`` after a lost life, as EnvPool): no ``reset_game``,
    the game goes on. Returns whether the game was reset."""
    if restart:
        ale.reset_game(pointer)
    for _ in range(noops):
        ale.act(pointer, noop_code, np.float32(1.0))
        if ale.game_over(pointer, False) or ale.game_truncated(pointer):
            ale.reset_game(pointer)
            restart = True
    lives[i] = ale.lives(pointer)
    _first_frame(ale, i, pointer, buffers, tables)
    return restart


def _reset_kernel(ale: Any, pointers: Any, mask: Any, noops: Any, noop_code: int, lives: Any,
                  buffers: Any, tables: Any) -> None:
    """Reset the masked envs (``_reset_one``)."""
    for i in prange(pointers.size):
        if mask[i]:
            _reset_one(ale, i, pointers[i], noops[i], noop_code, lives, buffers, tables)


def _first_frames_kernel(ale: Any, pointers: Any, mask: Any, buffers: Any,
                         tables: Any) -> None:
    """The masked envs' first frames (``_first_frame``), after resets run in Python."""
    for i in prange(pointers.size):
        if mask[i]:
            _first_frame(ale, i, pointers[i], buffers, tables)


def _step_kernel(threads: int, ale: Any, pointers: Any, codes: Any, actions: Any,
                 pending: Any, noops: Any, noop_code: int, frame_skip: int, life_loss: bool,
                 episodic: bool, clip: bool, lives: Any, rewards: Any, raw_rewards: Any,
                 terminated: Any, truncated: Any, game_over: Any, was_reset: Any,
                 restacked: Any, stepped: Any, buffers: Any, tables: Any,
                 order: Any) -> tuple[int, int]:
    """Step every env: a pending one (NEXT_STEP) resets instead (reward 0, flags down,
    ``was_reset``; its stack ``restacked`` from its new frame, or ``stepped`` on when
    ``episodic`` kept its game going after a lost life); the others are ``stepped`` and
    repeat their action ``frame_skip`` frames, and their last two frames are max-pooled
    (``_observe_frames``, as the wrapper's). ``episodic``: a lost life (lives left) ends the
    episode after the frame skip (EnvPool's ``episodic_life``); ``clip``: the reward is its
    sign (``raw_rewards`` keeps the sum). ``game_over``: the game itself ended.
    Envs go to the ``threads`` threads one at a time (``native.handout``), the pending ones
    first (``order``: scratch, one per env): a reset emulates ~20 steps' frames, and one
    started last would hold up every other thread at the join.
    Returns the numbers of episodes that ended and of envs reset."""
    first, size = 0, buffers.raw.shape[2]
    for i in range(pointers.size):
        if pending[i]:
            order[first] = i
            first += 1
    last = pointers.size
    for i in range(pointers.size):
        if not pending[i]:
            last -= 1
            order[last] = i
    counter = np.zeros(1, np.int64)  # envs handed out one at a time (handout)
    for _worker in prange(threads):
        while True:
            k = next_index(counter)
            if k >= pointers.size:
                break
            i = order[k]
            pointer = pointers[i]
            if pending[i]:
                restart = not episodic or game_over[i] or truncated[i]
                continued = not _reset_one(ale, i, pointer, noops[i], noop_code, lives, buffers,
                                           tables, restart)
                restacked[i] = not continued
                stepped[i] = continued
                pending[i] = False
                was_reset[i] = True
                rewards[i] = 0.0
                raw_rewards[i] = 0.0
                terminated[i] = False
                truncated[i] = False
                game_over[i] = False
                continue
            was_reset[i] = False
            restacked[i] = False
            stepped[i] = True
            code = codes[actions[i]]
            total = 0.0
            over = False
            cut = False
            last_read = False
            for t in range(frame_skip):
                total += ale.act(pointer, code, np.float32(1.0))
                over = ale.game_over(pointer, False)
                cut = ale.game_truncated(pointer)
                if life_loss:
                    now = ale.lives(pointer)
                    over = over or now < lives[i]
                    lives[i] = now
                if over or cut:
                    break
                if t == frame_skip - 2:
                    _take(_screen(ale, pointer, size), buffers.raw[i, 1], buffers.dirty[i])
                elif t == frame_skip - 1:
                    _take(_screen(ale, pointer, size), buffers.raw[i, 0], buffers.dirty[i])
                    last_read = True
            game_over[i] = ale.game_over(pointer, False)
            if not life_loss:
                now = ale.lives(pointer)
                if episodic and 0 < now < lives[i]:
                    over = True
                lives[i] = now
            _observe_frames(i, buffers, tables, not last_read)
            raw_rewards[i] = total
            rewards[i] = (1.0 if total > 0 else -1.0 if total < 0 else 0.0) if clip else total
            terminated[i] = over
            truncated[i] = cut
    ended = resets = 0
    for i in range(pointers.size):
        ended += terminated[i] or truncated[i]
        resets += was_reset[i]
    return ended, resets


def _stack_kernel(obs: Any, frames: Any, reset_rows: Any, step_rows: Any) -> None:
    """``FrameStackObservation``: a reset row's stack is its frame ``stack`` times; a
    stepped row's stack drops its oldest frame and ends with the new one."""
    stack = obs.shape[1]
    for i in range(obs.shape[0]):
        if reset_rows[i]:
            for j in range(stack):
                _copy(frames[i], obs[i, j])
        elif step_rows[i]:
            for j in range(stack - 1):
                _copy(obs[i, j + 1], obs[i, j])
            _copy(frames[i], obs[i, stack - 1])


@numba.njit(nogil=True, error_model="numpy")
def _copy(source: Any, target: Any) -> None:
    """``target[:] = source`` (1-D, same size), element by element: no temporary."""
    for k in range(source.size):
        target[k] = source[k]


def area_tables(size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV's ``computeResizeAreaTab`` for one axis shrinking from ``size`` to ``out_size``
    (its scale ``1 / (out_size / size)``, double arithmetic, weights rounded to float32): the
    (source index, output index, weight) of each term, in OpenCV's order."""
    scale = 1.0 / (out_size / size)
    sources, outputs, weights = [], [], []
    for d in range(out_size):
        fs1 = d * scale
        fs2 = fs1 + scale
        cell = min(scale, size - fs1)
        s1, s2 = math.ceil(fs1), math.floor(fs2)
        s2 = min(s2, size - 1)
        s1 = min(s1, s2)
        if s1 - fs1 > 1e-3:
            sources.append(s1 - 1), outputs.append(d), weights.append((s1 - fs1) / cell)
        for s in range(s1, s2):
            sources.append(s), outputs.append(d), weights.append(1.0 / cell)
        if fs2 - s2 > 1e-3:
            sources.append(s2), outputs.append(d), weights.append(min(min(fs2 - s2, 1.0), cell)
                                                                  / cell)
    return (np.array(sources, np.int64), np.array(outputs, np.int64),
            np.array(weights, np.float64).astype(np.float32))


def compiled_resize_applies(height: int, width: int, out_height: int, out_width: int) -> bool:
    """Whether ``cv2.resize(INTER_AREA)`` takes its general area path (``area_resize``'s):
    both axes shrink and not both by whole factors (OpenCV's ``resizeAreaFast``)."""
    if out_height > height or out_width > width or (out_height, out_width) == (height, width):
        return False
    scale_x, scale_y = 1.0 / (out_width / width), 1.0 / (out_height / height)
    whole = (abs(scale_x - round(scale_x)) < np.finfo(float).eps
             and abs(scale_y - round(scale_y)) < np.finfo(float).eps)
    return not whole


@numba.njit(nogil=True, error_model="numpy")
def area_resize(source: Any, tables: Any, scratch: Any, out: Any) -> None:
    """OpenCV's ``resizeArea_<uchar, float>`` for one frame (flat ``source``, ``out``): each
    source row's weighted sums across (float32, each output column's terms in OpenCV's
    order, ``_sum_across``), added row by row into the output row's sums (``_add_down``),
    rounded half to even and saturated (``_store``). Each source row is summed across once
    (OpenCV sums a row shared by two output rows twice, to the same values); ``tables``:
    ``resize_tables``; ``scratch``: (3, max(width, out width)) float32."""
    _, _, y_src, y_out, y_weight, sizes = tables
    width, out_width = sizes[0], sizes[1]
    row_sum, total, pixels = scratch[0], scratch[1], scratch[2]
    summed, j = -1, 0
    while j < y_src.size:
        end = _row_end(y_out, j)
        for e in range(j, end):
            if y_src[e] != summed:
                _sum_across(source, y_src[e] * width, tables, pixels, row_sum)
                summed = y_src[e]
            _add_down(total, y_weight[e], row_sum, e == j, out_width)
        _store(total, out, y_out[j] * out_width, out_width)
        j = end


@numba.njit(nogil=True, error_model="numpy")
def area_resize_rows(source: Any, tables: Any, dirty: Any, row_sums: Any, scratch: Any,
                     out: Any) -> None:
    """``area_resize`` of a frame whose rows not ``dirty`` are those of the frame ``out`` and
    ``row_sums`` (one row of sums across per source row) were made from: the dirty rows are
    summed across, and only the output rows over a dirty row are summed down and stored (the
    same arithmetic on the same values). ``scratch``: (2, max(width, out width)) float32."""
    _, _, y_src, y_out, y_weight, sizes = tables
    width, out_width = sizes[0], sizes[1]
    pixels, total = scratch[0], scratch[1]
    for row in range(dirty.size):
        if dirty[row]:
            _sum_across(source, row * width, tables, pixels, row_sums[row])
    j = 0
    while j < y_src.size:
        end = _row_end(y_out, j)
        changed = False
        for e in range(j, end):
            changed = changed or dirty[y_src[e]]
        if changed:
            for e in range(j, end):
                _add_down(total, y_weight[e], row_sums[y_src[e]], e == j, out_width)
            _store(total, out, y_out[j] * out_width, out_width)
        j = end


@numba.njit(nogil=True, error_model="numpy")
def _row_end(y_out: Any, j: int) -> int:
    """The end of the run of row terms that starts at ``j`` (one output row's terms)."""
    end = j
    while end < y_out.size and y_out[end] == y_out[j]:
        end += 1
    return end


@numba.njit(nogil=True, error_model="numpy")
def _sum_across(source: Any, start: int, tables: Any, pixels: Any, sums: Any) -> None:
    """One source row's (from ``start`` in flat ``source``) weighted sums across into
    ``sums``: term t of every output column, then t + 1 (padding adds 0 * pixel: no
    change; OpenCV starts from 0, and 0 + the first term is the first term)."""
    x_src, x_weight, sizes = tables[0], tables[1], tables[5]
    width, out_width, terms = sizes[0], sizes[1], sizes[2]
    for c in range(width):
        pixels[c] = source[start + c]
    for d in range(out_width):
        sums[d] = pixels[x_src[d]] * x_weight[d]
    for t in range(1, terms):
        for d in range(out_width):
            k = t * out_width + d
            sums[d] += pixels[x_src[k]] * x_weight[k]


@numba.njit(nogil=True, error_model="numpy")
def _add_down(total: Any, beta: Any, sums: Any, first: bool, count: int) -> None:
    """An output row's sums: ``beta`` times a source row's sums, the first of its terms, or
    added (OpenCV's ``sum = beta * buf`` / ``sum += beta * buf``)."""
    if first:
        for d in range(count):
            total[d] = beta * sums[d]
    else:
        for d in range(count):
            total[d] += beta * sums[d]


def resize_tables(height: int, width: int, out_height: int,
                  out_width: int) -> tuple[np.ndarray, ...]:
    """``area_resize``'s tables: OpenCV's column terms as (most terms, out width) source
    columns and weights (term t of every column, then t + 1), padded with weight 0; its row
    terms (source row, output row, weight) in its order; (width, out width, most terms)."""
    sources, outputs, weights = area_tables(width, out_width)
    terms = int(np.bincount(outputs).max())
    x_src = np.zeros((out_width, terms), np.int64)
    x_weight = np.zeros((out_width, terms), np.float32)
    for d in range(out_width):
        mine = outputs == d
        x_src[d, :mine.sum()] = sources[mine]
        x_weight[d, :mine.sum()] = weights[mine]
    return (x_src.T.reshape(-1), x_weight.T.reshape(-1), *area_tables(height, out_height),
            np.array([width, out_width, terms], np.int64))


@numba.njit(nogil=True, error_model="numpy")
def _store(total: Any, out: Any, offset: int, count: int) -> None:
    """``saturate_cast<uchar>(float)``: round half to even (``cvRound``), clamp to 0..255."""
    for d in range(count):
        value = np.rint(total[d])
        out[offset + d] = 0 if value < 0 else 255 if value > 255 else np.uint8(value)
