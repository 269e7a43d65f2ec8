"""MinAtar Asterix (``minatar.environments.asterix``): the player walks the grid while enemies
and gold cross it from the sides, one per row 1..8; +1 a gold picked up, the episode ends when
an enemy touches the player. With ``difficulty_ramping`` they spawn and move faster over time.

Channels: player 0, enemy 1, trail 2 (the cell behind an entity: its direction), gold 3.
Minimal actions: n, l, u, r, d. Draws: none per reset; on a step whose spawn timer is up,
``_spawn_entity``'s ``rand()`` (side), ``rand()`` (gold or enemy) and, when a row is free,
``randint(free rows)`` (which one): draws ``STEP_DRAW`` .. ``STEP_DRAW + 2``.

The reference's ``entities`` (a list of eight slots, ``None`` or ``[x, slot + 1, lr,
is_gold]``) is four (num_envs, 8) columns: slot j's entity lives in row j + 1, ``entity_alive``
says whether the slot holds one. Slots are visited in list order, as the reference does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.envs.minatar.common import (
    DOWN,
    LEFT,
    RIGHT,
    SIZE,
    STEP_DRAW,
    UP,
    Game,
    clear,
    draw_int,
    draw_unit,
    game_specs,
    put,
)
from envfleet.kernels import kernel_function

CHANNELS = 4
PLAYER, ENEMY, TRAIL, GOLD = range(CHANNELS)
SLOTS = 8  # the reference's entities list; slot j is row j + 1

# the reference's constants
RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5

STATE: dict[str, tuple[type, tuple[int, ...]]] = {
    "player_x": (np.int8, ()),
    "player_y": (np.int8, ()),
    "spawn_speed": (np.int8, ()),
    "spawn_timer": (np.int8, ()),
    "move_speed": (np.int8, ()),
    "move_timer": (np.int8, ()),
    "ramp_timer": (np.int8, ()),  # -1 .. 100
    "ramp_index": (np.int8, ()),  # 0 .. 9: the ramp stops once both speeds are 1
    # entities: slot j is None (not alive) or [entity_x, j + 1, entity_right, entity_gold]
    "entity_alive": (np.bool_, (SLOTS,)),
    "entity_x": (np.int8, (SLOTS,)),
    "entity_right": (np.bool_, (SLOTS,)),  # lr: moves right (spawned at x 0)
    "entity_gold": (np.bool_, (SLOTS,)),
}


@kernel_function
def remove(i: int, state: Any, j: int) -> None:
    """``entities[j] = None``: slot j empty, its columns zero (one state per reference state)."""
    state.entity_alive[i, j] = False
    state.entity_x[i, j] = 0
    state.entity_right[i, j] = False
    state.entity_gold[i, j] = False


@kernel_function
def reset(i: int, state: Any, params: Any, rng: Any) -> None:
    """``Env.reset``: the player in the middle, no entities, the initial speeds and timers."""
    state.player_x[i] = 5
    state.player_y[i] = 5
    for j in range(SLOTS):
        remove(i, state, j)
    state.spawn_speed[i] = INIT_SPAWN_SPEED
    state.spawn_timer[i] = INIT_SPAWN_SPEED
    state.move_speed[i] = INIT_MOVE_INTERVAL
    state.move_timer[i] = INIT_MOVE_INTERVAL
    state.ramp_timer[i] = RAMP_INTERVAL
    state.ramp_index[i] = 0


@kernel_function
def spawn_entity(i: int, state: Any, rng: Any) -> None:
    """``_spawn_entity``: side and kind drawn first (even when no slot is free), then a slot
    drawn among the free ones in list order (the list comprehension, as a count and a scan)."""
    lr = draw_unit(rng, i, STEP_DRAW) < 1 / 2
    is_gold = draw_unit(rng, i, STEP_DRAW + 1) < 1 / 3
    free = 0
    for j in range(SLOTS):
        if not state.entity_alive[i, j]:
            free += 1
    if free == 0:
        return
    pick = draw_int(rng, i, STEP_DRAW + 2, 0, free)  # slot_options[randint(len(slot_options))]
    for j in range(SLOTS):
        if not state.entity_alive[i, j]:
            if pick == 0:
                state.entity_alive[i, j] = True
                state.entity_x[i, j] = 0 if lr else 9
                state.entity_right[i, j] = lr
                state.entity_gold[i, j] = is_gold
                return
            pick -= 1


@kernel_function
def act(i: int, state: Any, params: Any, a: int, rng: Any) -> tuple[int, bool]:
    """``Env.act(a)``, statement by statement: spawn, move the player, collide, move the
    entities (collide again), count the timers down, ramp the difficulty. A collision is
    ``x[0:2] == [player_x, player_y]``, i.e. slot j at the player's column in its row j + 1.
    An enemy's touch ends the episode but the step goes on, as in the reference."""
    r = 0
    terminal = False

    # Spawn enemy if timer is up
    if state.spawn_timer[i] == 0:
        spawn_entity(i, state, rng)
        state.spawn_timer[i] = state.spawn_speed[i]

    # Resolve player action
    px, py = int(state.player_x[i]), int(state.player_y[i])
    if a == LEFT:
        px = max(0, px - 1)
    elif a == RIGHT:
        px = min(9, px + 1)
    elif a == UP:
        py = max(1, py - 1)
    elif a == DOWN:
        py = min(8, py + 1)
    state.player_x[i] = px
    state.player_y[i] = py

    # Update entities
    # the tests combined with & (one rarely taken branch, not one per slot on whether it is
    # alive, which differs per env and slot)
    for j in range(SLOTS):
        if state.entity_alive[i, j] & (state.entity_x[i, j] == px) & (j + 1 == py):
            if state.entity_gold[i, j]:
                remove(i, state, j)
                r += 1
            else:
                terminal = True
    if state.move_timer[i] == 0:
        state.move_timer[i] = state.move_speed[i]
        for j in range(SLOTS):
            alive = state.entity_alive[i, j]
            step = (1 if state.entity_right[i, j] else -1) if alive else 0
            x = int(state.entity_x[i, j]) + step  # an empty slot's x stays
            state.entity_x[i, j] = x
            if alive & ((x < 0) | (x > 9)):
                remove(i, state, j)
            elif alive & (x == px) & (j + 1 == py):  # (an entity that left cannot be touched)
                if state.entity_gold[i, j]:
                    remove(i, state, j)
                    r += 1
                else:
                    terminal = True

    # Update various timers
    state.spawn_timer[i] -= 1
    state.move_timer[i] -= 1

    # Ramp difficulty if interval has elapsed
    if params.difficulty_ramping and (state.spawn_speed[i] > 1 or state.move_speed[i] > 1):
        if state.ramp_timer[i] >= 0:
            state.ramp_timer[i] -= 1
        else:
            if state.move_speed[i] > 1 and state.ramp_index[i] % 2:
                state.move_speed[i] -= 1
            if state.spawn_speed[i] > 1:
                state.spawn_speed[i] -= 1
            state.ramp_index[i] += 1
            state.ramp_timer[i] = RAMP_INTERVAL
    return r, terminal


@kernel_function
def observe(i: int, state: Any, obs: Any) -> None:
    """``Env.state()``: the player, each entity (gold or enemy) and its trail when on the grid."""
    clear(i, obs)
    put(i, obs, CHANNELS, state.player_y[i], state.player_x[i], PLAYER)
    # Every slot stores its two cells, True or False, instead of branching on whether it is
    # alive and its trail on the grid (per env and slot: mispredicted). Only slot j writes
    # row j + 1's enemy, gold and trail channels, so a False store (an empty slot, a trail off
    # the grid, stored at the nearest column) lands on a cell ``clear`` left False.
    for j in range(SLOTS):
        alive = state.entity_alive[i, j]
        x = int(state.entity_x[i, j])
        c = GOLD if state.entity_gold[i, j] else ENEMY
        obs[i, ((j + 1) * SIZE + x) * CHANNELS + c] = alive
        back_x = x - 1 if state.entity_right[i, j] else x + 1
        on_grid = (back_x >= 0) & (back_x <= 9)
        back_x = min(9, max(0, back_x))
        obs[i, ((j + 1) * SIZE + back_x) * CHANNELS + TRAIL] = alive & on_grid


GAME = Game(name="Asterix", module="asterix", channels=CHANNELS, minimal_actions=(0, 1, 2, 3, 4),
            state=STATE, reset=reset, act=act, observe=observe,
            description="enemies and gold cross the rows; +1 a gold, ends when an enemy "
                        "touches the player",
            compile_seconds=5.0)  # ~1.3x Breakout's compile, measured side by side
SPEC_V0, SPEC_V1 = game_specs(GAME)
