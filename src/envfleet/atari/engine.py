"""``AtariEngine``: N ALE emulators stepped by compiled loops, with Gymnasium's standard Atari
preprocessing computed into the engine's own buffers.

Env i is, bit for bit, ``FrameStackObservation(AtariPreprocessing(gym.make("ALE/<Game>-v5",
frameskip=1, ...), ...), stack_size)`` reset with seed ``seed + i``: the same emulator calls in
the same order (``kernels``), the same seeds (ALE's ``random_seed`` and the ``np_random`` of
the no-op starts, derived from the seed as ``AtariEnv.seed_game`` does), the same max-pool,
``cv2.resize(INTER_AREA)`` and stack. Per step: one compiled loop over the envs (GIL released,
numba threads; OpenCV's area resize compiled into it where OpenCV takes its general path, else
one ``cv2.resize`` of every env's frame at once when that is exact, see
``batched_resize_is_exact``), one compiled stack update; Python per env only at seeded resets
and once per episode (the next episode's no-op count).
"""

from __future__ import annotations

import fractions
import time
from collections import deque
from typing import Any

import numba
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from envfleet.atari.ale import (
    AtariBindingError,
    ale_functions,
    check_binding,
    grayscale_table,
    instance_pointer,
)
from envfleet.atari.kernels import FrameBuffers, compiled_resize_applies, kernels, resize_tables
from envfleet.contract import (
    WAIT,
    check_action_batch,
    describe_bad_action,
    needs_reset_error,
)
from envfleet.native.driver import RULES, make_batch_driver, mask_rows
from envfleet.native.numba_backend import ThreadChoice, default_threads


def batched_resize_is_exact(height: int, out_height: int) -> bool:
    """Whether ``cv2.resize(INTER_AREA)`` of N frames stacked vertically (``N * height`` rows
    to ``N * out_height``) gives each frame's own resize, bit for bit: when OpenCV's row scale
    ``1 / (out_height / height)`` is exactly ``height / out_height`` and the frame shrinks, every
    frame's rows get the same source rows and weights (210 -> 84: 2.5). Else frames are
    resized one by one."""
    scale = 1.0 / (out_height / height)
    return out_height <= height and fractions.Fraction(scale) == fractions.Fraction(height,
                                                                                    out_height)


def _cv2() -> Any:
    try:
        import cv2
    except ImportError:
        raise ImportError("the Atari engine resizes frames with OpenCV (as Gymnasium's "
                          "AtariPreprocessing): pip install opencv-python-headless") from None
    return cv2


class AtariEngine:
    """The emulators, their frame buffers and the outputs (``obs``, ``rewards``,
    ``terminated``, ``truncated``), stepped by ``kernels()``."""

    def __init__(self, game: str, num_envs: int, *, mode: int, noop_max: int, frame_skip: int,
                 screen_size: tuple[int, int], terminal_on_life_loss: bool, stack_size: int,
                 episodic_life: bool, reward_clip: bool,
                 repeat_action_probability: float, full_action_space: bool,
                 max_num_frames_per_episode: int | None, game_mode: int | None,
                 difficulty: int | None, num_threads: int | None) -> None:
        import ale_py
        from ale_py import roms

        self.cv2 = _cv2()
        self.num_envs, self.mode = num_envs, mode
        self.noop_max, self.frame_skip = noop_max, frame_skip
        self.life_loss, self.stack_size = terminal_on_life_loss, stack_size
        self.episodic_life, self.reward_clip = episodic_life, reward_clip
        self.rom = roms.get_rom_path(game)
        self.game_mode, self.difficulty = game_mode, difficulty
        self.num_threads = default_threads() if num_threads is None else num_threads
        #: default threads adapt (``ThreadChoice``, shared with the MuJoCo engine)
        self.threads = ThreadChoice(self.num_threads, adaptive=num_threads is None)
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        self.ales = []
        for _ in range(num_envs):  # AtariEnv.__init__'s settings
            ale = ale_py.ALEInterface()
            ale.setFloat("repeat_action_probability", repeat_action_probability)
            if max_num_frames_per_episode is not None:
                ale.setInt("max_num_frames_per_episode", max_num_frames_per_episode)
            ale.setBool("sound_obs", False)
            self.ales.append(ale)
        first = self.ales[0]
        self._load(first, 0)
        actions = first.getLegalActionSet() if full_action_space else first.getMinimalActionSet()
        self.action_set = list(actions)
        #: the ALE action code of each action index
        self.codes = np.array([a.value for a in actions], dtype=np.int32)
        self.noop = actions[0]
        self.action_space = spaces.Discrete(len(actions))
        if noop_max > 0 and self.noop != ale_py.Action.NOOP:
            raise ValueError(f"{game}: noop_max > 0 needs NOOP as action 0 (as Gymnasium's "
                             f"AtariPreprocessing), got {self.noop}")
        self.pointers = np.array([instance_pointer(a) for a in self.ales], dtype=np.int64)
        check_binding(first, int(self.pointers[0]), self.noop.value)
        height, width = first.getScreenDims()
        out_w, out_h = screen_size
        gray = grayscale_table(first, int(self.pointers[0]))
        if not (gray == 0).any():
            raise AtariBindingError(f"{game}: no palette index is black in ALE's grayscale "
                                    f"table; the engine needs one for the reset's zero frame")
        #: the max-pooled gray frames (the wrapper's first buffer)
        self.frames0 = np.zeros((num_envs, height, width), np.uint8)
        self.screen = (out_w, out_h)
        self.resized = np.zeros((num_envs, out_h, out_w), np.uint8)
        self._batched = batched_resize_is_exact(height, out_h) and out_w <= width
        #: OpenCV's area resize compiled into the step loop (``area_resize``), where it is
        #: OpenCV's path and agrees with cv2 here; else cv2 resizes after the loop
        self.tables = _resize_tables(height, width, out_h, out_w, self.cv2)
        self.compiled_resize = self.tables[0].size > 0
        #: the loops' views and per-env state (``kernels.FrameBuffers``), one row per env
        self.buffers = FrameBuffers(
            raw=np.zeros((num_envs, 2, height * width), np.uint8),
            black=np.full(height * width, np.flatnonzero(gray == 0)[0], np.uint8), gray=gray,
            pooled=self.frames0.reshape(num_envs, -1), dirty=np.zeros((num_envs, height),
                                                                      np.bool_),
            stale=np.ones(num_envs, np.bool_),
            row_sums=np.zeros((num_envs, height, out_w if self.compiled_resize else 0),
                              np.float32),
            scratch=np.zeros((num_envs, 2, max(width, out_w)), np.float32),
            resized=self.resized.reshape(num_envs, -1))
        self.obs = np.zeros((num_envs, stack_size, out_h, out_w), np.uint8)
        self.rewards = np.zeros(num_envs, np.float64)
        #: the unclipped rewards (``reward_clip``) and whether the game itself is over
        #: (``episodic_life``: a lost life is ``terminated``, not a game over)
        self.raw_rewards = np.zeros(num_envs, np.float64)
        self.game_over = np.zeros(num_envs, np.bool_)
        self.terminated = np.zeros(num_envs, np.bool_)
        self.truncated = np.zeros(num_envs, np.bool_)
        self.final_obs = np.zeros_like(self.obs)
        self._flat_obs = self.obs.reshape(num_envs, stack_size, -1)
        self.lives = np.zeros(num_envs, np.int32)
        #: NEXT_STEP: reset on the next step; DISABLED: must be reset before the next step
        self.pending = np.zeros(num_envs, np.bool_)
        self.was_reset = np.zeros(num_envs, np.bool_)
        #: the step's rows whose stack restarts from their frame (reset) or shifts (stepped,
        #: or reset with the game going on: ``episodic_life``)
        self._restacked = np.zeros(num_envs, np.bool_)
        self._all = np.ones(num_envs, np.bool_)
        self._none = np.zeros(num_envs, np.bool_)
        self._stepped = np.zeros(num_envs, np.bool_)
        self._order = np.zeros(num_envs, np.int64)  # the step loop's order of envs
        #: each env's ``np_random`` (no-op starts) and its next episode's no-op count
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        self.noops = np.zeros(num_envs, np.int64)
        #: the contract's autoreset rule after the compiled step (NEXT_STEP's resets are in it)
        self.rule = RULES[mode]
        self._end = make_batch_driver(
            self.rule, self.rewards, self.terminated, self.truncated,
            np.zeros(num_envs, np.bool_), self.pending, mask_rows, self._keep_final,
            self._new_episodes).end
        self._kernels = kernels()
        self.entry_points = ale_functions()

    def _load(self, ale: Any, seed: int | None) -> np.random.Generator:
        """``AtariEnv.seed_game(seed)`` then ``load_game()``: the env's new ``np_random``."""
        np_seed, ale_seed = np.random.SeedSequence(seed).generate_state(n_words=2)
        rng, _ = seeding.np_random(int(np_seed))
        ale.setInt("random_seed", np.int32(ale_seed))
        ale.loadROM(self.rom)
        if self.game_mode is not None:
            ale.setMode(self.game_mode)
        if self.difficulty is not None:
            ale.setDifficulty(self.difficulty)
        return rng

    def _draw_noops(self, i: int) -> int:
        """The no-op count of env i's next reset, from its ``np_random`` (as the wrapper)."""
        rng = self.rngs[i]
        return int(rng.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0

    def _seeded_reset(self, i: int, seed: int) -> None:
        """``AtariPreprocessing.reset(seed=seed)`` of env i, through ale-py's Python API, up to
        its first frame (``kernels.first_frames``)."""
        ale = self.ales[i]
        self.rngs[i] = self._load(ale, seed)
        ale.reset_game()
        for _ in range(self._draw_noops(i)):
            ale.act(self.noop, 1.0)
            if ale.game_over(with_truncation=False) or ale.game_truncated():
                self.rngs[i] = self._load(ale, seed)  # env.reset(seed=seed) inside the loop
                ale.reset_game()
        self.lives[i] = ale.lives()

    def reset(self, mask: np.ndarray | None, seeds: np.ndarray | None) -> None:
        """Reset the masked envs (all when None); ``seeds``: reseed them (one per env)."""
        mask = self._all if mask is None else mask
        if seeds is not None:
            for i in np.flatnonzero(mask):
                self._seeded_reset(int(i), int(seeds[i]))
            numba.set_num_threads(self.active_threads)
            self._kernels.first_frames(self.entry_points, self.pointers, mask, self.buffers,
                                       self.tables)
        else:
            self._reset_unseeded(mask)
        self._next_noops(mask)
        self.pending[mask] = False
        self.game_over[mask] = False
        self.raw_rewards[mask] = 0.0
        self._observe(reset_rows=mask, step_rows=self._none)

    def check_actions(self, actions: Any) -> np.ndarray:
        """The batch as int64 action indices, or a ``ValueError`` naming the first env whose
        action is refused (wrong shape, not integers, out of range; an env that must be reset
        first, DISABLED): checked whole, before any env moves."""
        batch = np.asarray(actions)
        # an int64 batch of this shape passes check_action_batch: the usual batch skips it
        if batch.dtype != np.int64 or batch.shape != (self.num_envs,):
            check_action_batch(batch, self.action_space, self.num_envs)
            batch = batch.astype(np.int64, copy=False)
        if batch.min() < 0 or batch.max() >= self.codes.size:
            i = int(np.flatnonzero((batch < 0) | (batch >= self.codes.size))[0])
            raise ValueError(describe_bad_action(self.action_space, i, batch[i].item()))
        if self.rule == WAIT and self.pending.any():
            raise needs_reset_error(int(np.flatnonzero(self.pending)[0]))
        return np.ascontiguousarray(batch)

    def step(self, actions: Any) -> int:
        """Step every env with its action (checked first); returns the episodes that
        ended."""
        actions = self.check_actions(actions)
        threads, timed = self.threads.for_step()
        numba.set_num_threads(threads)
        start = time.perf_counter()
        ended, resets = self._kernels.step(
            threads, self.entry_points, self.pointers, self.codes, actions, self.pending,
            self.noops, self.noop.value, self.frame_skip, self.life_loss, self.episodic_life,
            self.reward_clip, self.lives, self.rewards, self.raw_rewards, self.terminated,
            self.truncated, self.game_over, self.was_reset, self._restacked, self._stepped,
            self.buffers, self.tables, self._order)
        if timed:
            self.threads.record(threads, time.perf_counter() - start)
        if resets:
            self._next_noops(self.was_reset)
        self._observe(reset_rows=self._restacked, step_rows=self._stepped)
        self._end(ended)
        return int(ended)

    def _keep_final(self, done: np.ndarray) -> None:
        """SAME_STEP: the ended envs' last observations (the other rows zero)."""
        self.final_obs.fill(0)
        np.copyto(self.final_obs, self.obs, where=done[:, None, None, None])

    def _new_episodes(self, done: np.ndarray) -> None:
        """SAME_STEP: the ended envs start their next episode now."""
        self._reset_unseeded(done)
        self._next_noops(done)
        self._observe(reset_rows=done, step_rows=self._none)

    @property
    def adaptive(self) -> bool:
        """Whether the threads adapt (default threads: ``ThreadChoice``)."""
        return self.threads.adaptive

    @property
    def active_threads(self) -> int:
        """The thread count steps run on (between probes)."""
        return self.threads.active_threads

    @property
    def _times(self) -> dict[int, deque[float]]:
        return self.threads.times

    def _reset_unseeded(self, mask: np.ndarray) -> None:
        """Reset the masked envs without reseeding them, in the compiled loop."""
        numba.set_num_threads(self.active_threads)
        self._kernels.reset(self.entry_points, self.pointers, mask, self.noops, self.noop.value,
                            self.lives, self.buffers, self.tables)

    def _next_noops(self, rows: np.ndarray) -> None:
        for i in np.flatnonzero(rows):
            self.noops[i] = self._draw_noops(int(i))

    def _observe(self, reset_rows: np.ndarray, step_rows: np.ndarray) -> None:
        """Resize the (pooled) frames (unless the loop did) and update the stacks of
        ``reset_rows`` and ``step_rows``. Rows in neither keep their stack (a resize of their
        unchanged frames gives the same frame)."""
        cv2 = self.cv2
        out_w, out_h = self.screen
        n, height, width = self.frames0.shape
        if self.compiled_resize:
            pass
        elif self._batched:
            cv2.resize(self.frames0.reshape(n * height, width), (out_w, n * out_h),
                       dst=self.resized.reshape(n * out_h, out_w),
                       interpolation=cv2.INTER_AREA)
        else:
            for i in np.flatnonzero(reset_rows | step_rows):
                cv2.resize(self.frames0[i], (out_w, out_h), dst=self.resized[i],
                           interpolation=cv2.INTER_AREA)
        self._kernels.stack(self._flat_obs, self.buffers.resized, reset_rows, step_rows)

    def ended_mask(self) -> np.ndarray:
        """Envs whose episode ended in the last step."""
        return self.terminated | self.truncated

    @staticmethod
    def copy(array: np.ndarray) -> np.ndarray:
        """A copy of one of the engine's buffers."""
        return array.copy()

    def close(self) -> None:
        """Release the emulators (the compiled loops hold no reference to them)."""
        self.ales.clear()
        self.pointers = np.zeros(0, np.int64)


#: ``kernels.resize_tables``: (x sources, x weights, y sources, y outputs, y weights, sizes)
ResizeTables = tuple[np.ndarray, ...]


def _resize_tables(height: int, width: int, out_height: int, out_width: int,
                   cv2: Any) -> ResizeTables:
    """``area_resize``'s tables for frames of this size, if OpenCV takes its general area
    path for them and ``area_resize`` agrees with this cv2 on sample frames (random, ramps,
    flat); else empty tables (cv2 resizes)."""
    empty = np.zeros(0, np.int64)
    none = (empty, np.zeros(0, np.float32), empty, empty, np.zeros(0, np.float32),
            np.array([width, out_width, 0], np.int64))
    if not compiled_resize_applies(height, width, out_height, out_width):
        return none
    tables = resize_tables(height, width, out_height, out_width)
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, 256, (height, width), dtype=np.uint8) for _ in range(4)]
    samples += [np.full((height, width), v, np.uint8) for v in (0, 1, 127, 255)]
    ramp = np.add.outer(np.arange(height), np.arange(width)).astype(np.uint8)
    samples += [ramp, 255 - ramp, (rng.random((height, width)) < 0.1).astype(np.uint8) * 255]
    scratch = np.zeros((3, max(width, out_width)), np.float32)
    ours = np.zeros(out_height * out_width, np.uint8)
    for frame in samples:
        kernels().resize(frame.reshape(-1), tables, scratch, ours)
        theirs = cv2.resize(frame, (out_width, out_height), interpolation=cv2.INTER_AREA)
        if not np.array_equal(ours, theirs.reshape(-1)):
            return none
    return tables
