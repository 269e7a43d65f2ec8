"""The compiled loops of the Atari engine: numba ``prange`` over envs, calling ALE's C++ methods
through ctypes (``ale.ale_functions``) with the GIL released.

Each loop is Gymnasium's ``AtariPreprocessing`` (over ``AtariEnv(frameskip=1)``) for one env,
in the same order of emulator calls: ``step_kernel`` is its ``step`` (frame skip, reward sum,
life-loss termination, the last two frames read in grayscale, their max-pool), and
``reset_kernel`` its ``reset`` without a seed (``reset_game``, the no-ops drawn beforehand from
the env's ``np_random``). ``stack_kernel`` is ``FrameStackObservation``. Nothing is allocated.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numba
import numpy as np
from numba import prange

from envfleet.atari.ale import ale_functions


class Kernels(NamedTuple):
    """The compiled loops (see the module's docstring)."""

    step: Any
    reset: Any
    stack: Any


@functools.cache
def kernels() -> Kernels:
    """Compile the loops once per process (ALE's entry points are bound in as constants)."""
    f = ale_functions()
    act, lives_of, game_over = f.act, f.lives, f.game_over
    game_truncated, reset_game, grayscale = f.game_truncated, f.reset_game, f.grayscale

    @numba.njit(nogil=True, error_model="numpy")
    def reset_one(i: int, pointer: int, noops: int, noop_code: int, lives: Any,
                  target0: int, frames1: Any) -> None:
        """``AtariPreprocessing.reset()`` (no seed): ``reset_game``, the no-ops (a game they
        end is reset again), the lives, the first frame; the second frame buffer zeroed."""
        reset_game(pointer)
        for _ in range(noops):
            act(pointer, noop_code, np.float32(1.0))
            if game_over(pointer, False) or game_truncated(pointer):
                reset_game(pointer)
        lives[i] = lives_of(pointer)
        grayscale(pointer, target0)
        row = frames1[i]
        for k in range(row.size):
            row[k] = 0

    @numba.njit(nogil=True, parallel=True, error_model="numpy")
    def reset_kernel(pointers: Any, mask: Any, noops: Any, noop_code: int, lives: Any,
                     targets0: Any, frames1: Any) -> None:
        """Reset the masked envs (``reset_one``)."""
        for i in prange(pointers.size):
            if mask[i]:
                reset_one(i, pointers[i], noops[i], noop_code, lives, targets0[i], frames1)

    @numba.njit(nogil=True, parallel=True, error_model="numpy")
    def step_kernel(pointers: Any, codes: Any, actions: Any, pending: Any, noops: Any,
                    noop_code: int, frame_skip: int, life_loss: bool, lives: Any,
                    targets0: Any, targets1: Any, frames0: Any, frames1: Any, rewards: Any,
                    terminated: Any, truncated: Any, was_reset: Any) -> int:
        """Step every env: a pending one (NEXT_STEP) resets instead (reward 0, flags down,
        ``was_reset``); the others repeat their action ``frame_skip`` frames. Returns the
        number of episodes that ended."""
        ended = 0
        for i in prange(pointers.size):
            pointer = pointers[i]
            if pending[i]:
                reset_one(i, pointer, noops[i], noop_code, lives, targets0[i], frames1)
                pending[i] = False
                was_reset[i] = True
                rewards[i] = 0.0
                terminated[i] = False
                truncated[i] = False
                continue
            was_reset[i] = False
            code = codes[actions[i]]
            total = 0.0
            over = False
            cut = False
            for t in range(frame_skip):
                total += act(pointer, code, np.float32(1.0))
                over = game_over(pointer, False)
                cut = game_truncated(pointer)
                if life_loss:
                    now = lives_of(pointer)
                    over = over or now < lives[i]
                    lives[i] = now
                if over or cut:
                    break
                if t == frame_skip - 2:
                    grayscale(pointer, targets1[i])
                elif t == frame_skip - 1:
                    grayscale(pointer, targets0[i])
            if not life_loss:
                lives[i] = lives_of(pointer)
            if frame_skip > 1:  # the max-pool, into the first buffer (as the wrapper's)
                first, second = frames0[i], frames1[i]
                for k in range(first.size):
                    if second[k] > first[k]:
                        first[k] = second[k]
            rewards[i] = total
            terminated[i] = over
            truncated[i] = cut
            if over or cut:
                ended += 1
        return ended

    @numba.njit(nogil=True, error_model="numpy")
    def stack_kernel(obs: Any, frames: Any, reset_rows: Any, step_rows: Any) -> None:
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

    return Kernels(step_kernel, reset_kernel, stack_kernel)


@numba.njit(nogil=True, error_model="numpy")
def _copy(source: Any, target: Any) -> None:
    """``target[:] = source`` (1-D, same size), element by element: no temporary."""
    for k in range(source.size):
        target[k] = source[k]
