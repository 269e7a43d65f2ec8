"""The compiled loops of the Atari engine: numba ``prange`` over envs, calling ALE's C++ methods
through ctypes (``ale.ale_functions``, passed in as an argument) with the GIL released.

Each loop is Gymnasium's ``AtariPreprocessing`` (over ``AtariEnv(frameskip=1)``) for one env,
in the same order of emulator calls: ``_step_kernel`` is its ``step`` (frame skip, reward sum,
life-loss termination, the last two frames read in grayscale, their max-pool), and
``_reset_kernel`` its ``reset`` without a seed (``reset_game``, the no-ops drawn beforehand from
the env's ``np_random``). ``_stack_kernel`` is ``FrameStackObservation``. Nothing is allocated.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numba
import numpy as np
from numba import prange


class Kernels(NamedTuple):
    """The compiled loops (see the module's docstring); ``step`` and ``reset`` take ALE's
    entry points (``ale_functions()``) as their first argument."""

    step: Any
    reset: Any
    stack: Any
    resize: Any  # ``area_resize``, for calls from Python


@functools.cache
def kernels() -> Kernels:
    """The loops on envfleet's kernel cache (``native.kernel_cache``): compiled once per
    machine (ALE's entry points are arguments, not constants, so the machine code does not
    depend on where this process loaded ale-py), loaded from disk after that."""
    import ale_py

    from envfleet.native.jit import announce_compile
    from envfleet.native.kernel_cache import disk_cached, is_disk_cached

    loops = []
    for loop in (_step_kernel, _reset_kernel, _stack_kernel, area_resize.py_func):
        compiled = numba.njit(nogil=True, error_model="numpy",
                              parallel=loop in (_step_kernel, _reset_kernel))(loop)

        def announce(compiled: Any = compiled) -> None:
            announce_compile("atari", "ALE/<Game>-v5", "numba", 10.0,
                             cached=is_disk_cached(compiled))
        loops.append(disk_cached(compiled, ale_py.__version__, on_compile=announce))
    return Kernels(*loops)


@numba.njit(nogil=True, error_model="numpy")
def _reset_one(ale: Any, i: int, pointer: int, noops: int, noop_code: int, lives: Any,
               target0: int, frames1: Any, restart: bool = True) -> bool:
    """``AtariPreprocessing.reset()`` (no seed): ``reset_game``, the no-ops (a game they
    end is reset again), the lives, the first frame; the second frame buffer zeroed.
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
    ale.grayscale(pointer, target0)
    row = frames1[i]
    for k in range(row.size):
        row[k] = 0
    return restart


def _reset_kernel(ale: Any, pointers: Any, mask: Any, noops: Any, noop_code: int, lives: Any,
                  targets0: Any, frames0: Any, frames1: Any, tables: Any, scratch: Any,
                  resized: Any) -> None:
    """Reset the masked envs (``_reset_one``); resize their frames (``tables``: when the
    compiled resize is used)."""
    for i in prange(pointers.size):
        if mask[i]:
            _reset_one(ale, i, pointers[i], noops[i], noop_code, lives, targets0[i], frames1)
            if tables[0].size:
                area_resize(frames0[i], tables, scratch[i], resized[i])


def _step_kernel(ale: Any, pointers: Any, codes: Any, actions: Any, pending: Any, noops: Any,
                 noop_code: int, frame_skip: int, life_loss: bool, episodic: bool,
                 clip: bool, lives: Any, targets0: Any, targets1: Any, frames0: Any,
                 frames1: Any, rewards: Any, raw_rewards: Any, terminated: Any, truncated: Any,
                 game_over: Any, was_reset: Any, continued: Any, tables: Any, scratch: Any,
                 resized: Any) -> int:
    """Step every env: a pending one (NEXT_STEP) resets instead (reward 0, flags down,
    ``was_reset``; ``continued`` when ``episodic`` kept its game going after a lost life);
    the others repeat their action ``frame_skip`` frames, and their last two frames are
    max-pooled into the first buffer (as the wrapper's). ``episodic``: a lost life (lives
    left) ends the episode after the frame skip (EnvPool's ``episodic_life``); ``clip``: the
    reward is its sign (``raw_rewards`` keeps the sum). ``game_over``: the game itself ended.
    Returns the number of episodes that ended."""
    ended = 0
    for i in prange(pointers.size):
        pointer = pointers[i]
        if pending[i]:
            restart = not episodic or game_over[i] or truncated[i]
            continued[i] = not _reset_one(ale, i, pointer, noops[i], noop_code, lives,
                                          targets0[i], frames1, restart)
            if tables[0].size:
                area_resize(frames0[i], tables, scratch[i], resized[i])
            pending[i] = False
            was_reset[i] = True
            rewards[i] = 0.0
            raw_rewards[i] = 0.0
            terminated[i] = False
            truncated[i] = False
            game_over[i] = False
            continue
        was_reset[i] = False
        continued[i] = False
        code = codes[actions[i]]
        total = 0.0
        over = False
        cut = False
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
                ale.grayscale(pointer, targets1[i])
            elif t == frame_skip - 1:
                ale.grayscale(pointer, targets0[i])
        game_over[i] = ale.game_over(pointer, False)
        if not life_loss:
            now = ale.lives(pointer)
            if episodic and 0 < now < lives[i]:
                over = True
            lives[i] = now
        if frame_skip > 1:
            first, second = frames0[i], frames1[i]
            for k in range(first.size):
                if second[k] > first[k]:
                    first[k] = second[k]
        if tables[0].size:
            area_resize(frames0[i], tables, scratch[i], resized[i])
        raw_rewards[i] = total
        rewards[i] = (1.0 if total > 0 else -1.0 if total < 0 else 0.0) if clip else total
        terminated[i] = over
        truncated[i] = cut
        if over or cut:
            ended += 1
    return ended


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
    order), added row by row into the output row's sums, rounded half to even and saturated.
    Each source row is summed across once (OpenCV sums a row shared by two output rows twice,
    to the same values); ``tables``: ``resize_tables``; ``scratch``: (3, max(width, out
    width)) float32."""
    x_src, x_weight, y_src, y_out, y_weight, sizes = tables
    width, out_width, terms = sizes[0], sizes[1], sizes[2]
    row_sum, total, pixels = scratch[0], scratch[1], scratch[2]
    for d in range(out_width):
        total[d] = 0.0
    previous, summed = y_out[0], -1
    for j in range(y_src.size):
        beta, dy, sy = y_weight[j], y_out[j], y_src[j]
        if sy != summed:  # the row's sums across (0 + the first term is the first term)
            start = sy * width
            for c in range(width):
                pixels[c] = source[start + c]
            for d in range(out_width):
                row_sum[d] = pixels[x_src[d]] * x_weight[d]
            for t in range(1, terms):  # term t of every column; padding adds +0: no change
                for d in range(out_width):
                    k = t * out_width + d
                    row_sum[d] += pixels[x_src[k]] * x_weight[k]
            summed = sy
        if dy != previous:
            _store(total, out, previous * out_width, out_width)
            for d in range(out_width):
                total[d] = beta * row_sum[d]
            previous = dy
        else:
            for d in range(out_width):
                total[d] += beta * row_sum[d]
    _store(total, out, previous * out_width, out_width)


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
