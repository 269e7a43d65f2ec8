"""MinAtar SpaceInvaders (``minatar.environments.space_invaders``): a cannon under a block of
aliens that march sideways, step down at the edges and shoot back; +1 an alien, the episode
ends when an alien or an alien's bullet reaches the cannon (or the aliens reach the bottom).

Channels: cannon 0, alien 1, alien_left 2, alien_right 3, friendly_bullet 4, enemy_bullet 5.
Minimal actions: n, l, r, f. No random draws at all (only the sticky action's). With
``difficulty_ramping``, each cleared wave moves one frame faster (move interval 12 down to 6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.envs.minatar.common import (
    FIRE,
    LEFT,
    RIGHT,
    SIZE,
    Game,
    clear,
    game_specs,
    put,
    put_sparse_grid,
)
from envfleet.kernels import kernel_function

CHANNELS = 6
CANNON, ALIEN, ALIEN_LEFT, ALIEN_RIGHT, FRIENDLY_BULLET, ENEMY_BULLET = range(CHANNELS)
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10

GRID = (np.bool_, (SIZE, SIZE))
STATE: dict[str, tuple[type, tuple[int, ...]]] = {
    "pos": (np.int8, ()),  # the cannon's column (row 9)
    "f_bullets": GRID,  # f_bullet_map
    "e_bullets": GRID,  # e_bullet_map
    "aliens": GRID,  # alien_map
    "alien_dir": (np.int8, ()),  # -1 left, +1 right
    "enemy_move_interval": (np.int8, ()),
    "alien_move_timer": (np.int8, ()),
    "alien_shot_timer": (np.int8, ()),
    "ramp_index": (np.int16, ()),
    "shot_timer": (np.int8, ()),
}


@kernel_function
def fill_aliens(i: int, aliens: Any) -> None:
    """``alien_map[0:4, 2:8] = 1``."""
    for y in range(4):
        for x in range(2, 8):
            aliens[i, y, x] = True


@kernel_function
def count_aliens(i: int, aliens: Any) -> int:
    """``np.count_nonzero(alien_map)`` (a sum, without a branch per cell)."""
    cells = aliens.view(np.uint8)  # bytes, not bools: no 0/1 normalisation per load
    n = 0
    for y in range(SIZE):
        for x in range(SIZE):
            n += cells[i, y, x]
    return n


@kernel_function
def move_rows(i: int, grid: Any, shift: int) -> None:
    """``np.roll(grid, shift, axis=0)`` for ``shift`` -1 or 1, then the row that wrapped around
    cleared (row 9 for -1, row 0 for 1). On the grid's bytes (a uint8 view): a bool load is
    normalised to 0/1 (a compare and a set per cell), a byte copy is not, and the contiguous
    copy then compiles to a few wide moves (SpaceInvaders: ~10 ns of its step)."""
    cells = grid.view(np.uint8)
    if shift < 0:
        for y in range(SIZE - 1):
            for x in range(SIZE):
                cells[i, y, x] = cells[i, y + 1, x]
        for x in range(SIZE):
            cells[i, SIZE - 1, x] = 0
    else:
        for y in range(SIZE - 1, 0, -1):
            for x in range(SIZE):
                cells[i, y, x] = cells[i, y - 1, x]
        for x in range(SIZE):
            cells[i, 0, x] = 0


@kernel_function
def column_has_alien(i: int, aliens: Any, x: int) -> bool:
    """``np.sum(alien_map[:, x]) > 0``."""
    for y in range(SIZE):  # noqa: SIM110 - kernel code: no generator expressions
        if aliens[i, y, x]:
            return True
    return False


@kernel_function
def lowest_alien(i: int, aliens: Any, x: int) -> int:
    """``np.max(np.where(alien_map[:, x] == 1))``: the lowest row holding an alien in column
    ``x``, -1 when none does."""
    for y in range(SIZE - 1, -1, -1):
        if aliens[i, y, x]:
            return y
    return -1


@kernel_function
def reset(i: int, state: Any, params: Any, rng: Any) -> None:
    """``Env.reset``: the cannon at column 5, 4 x 6 aliens heading left, no bullets."""
    state.pos[i] = 5
    for y in range(SIZE):
        for x in range(SIZE):
            state.f_bullets[i, y, x] = False
            state.e_bullets[i, y, x] = False
            state.aliens[i, y, x] = False
    fill_aliens(i, state.aliens)
    state.alien_dir[i] = -1
    state.enemy_move_interval[i] = ENEMY_MOVE_INTERVAL
    state.alien_move_timer[i] = ENEMY_MOVE_INTERVAL
    state.alien_shot_timer[i] = ENEMY_SHOT_INTERVAL
    state.ramp_index[i] = 0
    state.shot_timer[i] = 0


@kernel_function
def act(i: int, state: Any, params: Any, a: int, rng: Any) -> tuple[int, bool]:
    """``Env.act(a)``, statement by statement; each ``np.roll`` is a loop that moves rows or
    columns in place, wrapping around as ``np.roll`` does."""
    r = 0
    terminal = False
    f, e, aliens = state.f_bullets, state.e_bullets, state.aliens
    pos = state.pos[i]

    # Resolve player action
    if a == FIRE and state.shot_timer[i] == 0:
        f[i, 9, pos] = True
        state.shot_timer[i] = SHOT_COOL_DOWN
    elif a == LEFT:
        pos = max(0, pos - 1)
    elif a == RIGHT:
        pos = min(9, pos + 1)
    state.pos[i] = pos

    # Friendly bullets: np.roll(f, -1, axis=0), then row 9 cleared (row by row: each row's
    # cells are contiguous, a column's are not), moved as bytes (``move_rows``)
    move_rows(i, f, -1)
    # Enemy bullets: np.roll(e, 1, axis=0), then row 0 cleared
    move_rows(i, e, 1)
    if e[i, 9, pos]:
        terminal = True

    # Update aliens
    if aliens[i, 9, pos]:
        terminal = True
    if state.alien_move_timer[i] == 0:
        state.alien_move_timer[i] = min(count_aliens(i, aliens), state.enemy_move_interval[i])
        d = state.alien_dir[i]
        if (column_has_alien(i, aliens, 0) and d < 0) or (column_has_alien(i, aliens, 9)
                                                          and d > 0):
            state.alien_dir[i] = -d
            for x in range(SIZE):  # np.sum(alien_map[9, :]) > 0
                if aliens[i, 9, x]:
                    terminal = True
            for x in range(SIZE):  # np.roll(alien_map, 1, axis=0): row 9 wraps to row 0
                bottom = aliens[i, 9, x]
                for y in range(SIZE - 1, 0, -1):
                    aliens[i, y, x] = aliens[i, y - 1, x]
                aliens[i, 0, x] = bottom
        elif d < 0:
            for y in range(SIZE):  # np.roll(alien_map, -1, axis=1): column 0 wraps to 9
                first = aliens[i, y, 0]
                for x in range(SIZE - 1):
                    aliens[i, y, x] = aliens[i, y, x + 1]
                aliens[i, y, 9] = first
        else:
            for y in range(SIZE):  # np.roll(alien_map, 1, axis=1): column 9 wraps to 0
                last = aliens[i, y, 9]
                for x in range(SIZE - 1, 0, -1):
                    aliens[i, y, x] = aliens[i, y, x - 1]
                aliens[i, y, 0] = last
        if aliens[i, 9, pos]:
            terminal = True
    if state.alien_shot_timer[i] == 0:
        state.alien_shot_timer[i] = ENEMY_SHOT_INTERVAL
        # _nearest_alien(pos): columns by distance to pos, the left one first on a tie (its
        # stable sort of 0..9), the lowest alien of the first column that has one; there is
        # always one (a cleared wave is refilled at the end of the step that clears it)
        for distance in range(SIZE):
            x = pos - distance
            y = lowest_alien(i, aliens, x) if x >= 0 else -1
            if y < 0 and distance > 0 and pos + distance < SIZE:
                x = pos + distance
                y = lowest_alien(i, aliens, x)
            if y >= 0:
                e[i, y, x] = True  # the alien's shot starts in its own cell
                break

    # kill_locations = alien_map & (alien_map == f_bullet_map); the sparse bullet map tested
    # first (its test is almost always False: well predicted)
    f_cells, alien_cells = f.view(np.uint8), aliens.view(np.uint8)
    for y in range(SIZE):
        for x in range(SIZE):
            if f_cells[i, y, x] & alien_cells[i, y, x]:
                r += 1
                aliens[i, y, x] = False
                f[i, y, x] = False

    # Update various timers
    if state.shot_timer[i] > 0:
        state.shot_timer[i] -= 1
    state.alien_move_timer[i] -= 1
    state.alien_shot_timer[i] -= 1
    if count_aliens(i, aliens) == 0:
        if state.enemy_move_interval[i] > 6 and params.difficulty_ramping:
            state.enemy_move_interval[i] -= 1
            state.ramp_index[i] += 1
        fill_aliens(i, aliens)
    return r, terminal


@kernel_function
def observe(i: int, state: Any, obs: Any) -> None:
    """``Env.state()``: cannon, aliens (and their direction's channel), both bullet maps."""
    clear(i, obs)
    put(i, obs, CHANNELS, 9, state.pos[i], CANNON)
    put_sparse_grid(i, obs, CHANNELS, state.aliens, ALIEN)
    put_sparse_grid(i, obs, CHANNELS, state.aliens, ALIEN_LEFT if state.alien_dir[i] < 0
             else ALIEN_RIGHT)
    put_sparse_grid(i, obs, CHANNELS, state.f_bullets, FRIENDLY_BULLET)
    put_sparse_grid(i, obs, CHANNELS, state.e_bullets, ENEMY_BULLET)


GAME = Game(name="SpaceInvaders", module="space_invaders", channels=CHANNELS,
            minimal_actions=(0, 1, 3, 5), state=STATE, reset=reset, act=act, observe=observe,
            description="a cannon against marching aliens; +1 an alien, ends when hit")
SPEC_V0, SPEC_V1 = game_specs(GAME)
