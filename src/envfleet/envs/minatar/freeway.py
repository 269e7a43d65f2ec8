"""MinAtar Freeway (``minatar.environments.freeway``): a chicken crosses eight lanes of cars;
+1 a crossing (then the cars' speeds are drawn again), a car sends it back to the bottom, and
the episode ends after 2,500 frames (a termination in the reference, not a truncation).

Channels: chicken 0, car 1, speed1..speed5 2..6 (a car's trail: its direction, and in which
channel how often it moves). Minimal actions: n, u, d. Draws: 16 per reset and per crossing
(``_randomize_cars``: ``randint(1, 6, 8)`` then ``rand(8)``); no difficulty ramp.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.envs.minatar.common import (
    DOWN,
    RESET_DRAW,
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

CHANNELS = 7
CHICKEN, CAR, SPEED1 = 0, 1, 2
CARS = 8
PLAYER_SPEED = 3
TIME_LIMIT = 2500

STATE: dict[str, tuple[type, tuple[int, ...]]] = {
    "pos": (np.int8, ()),  # the chicken's row (column 4)
    "move_timer": (np.int8, ()),
    "terminate_timer": (np.int16, ()),
    # the reference's cars [x, y, timer, speed]; car j drives in row j + 1
    "car_x": (np.int8, (CARS,)),
    "car_timer": (np.int8, (CARS,)),
    "car_speed": (np.int8, (CARS,)),  # frames per move, signed by direction (+: right)
}


@kernel_function
def randomize_cars(i: int, state: Any, rng: Any, first: int, initialize: bool) -> None:
    """``_randomize_cars``: speeds ``randint(1, 6, 8)`` (draws ``first .. first + 7``), signs
    ``np.sign(rand(8) - 0.5)`` (the next 8); with ``initialize`` every car back to x = 0."""
    for j in range(CARS):
        speed = draw_int(rng, i, first + j, 1, 6)
        u = draw_unit(rng, i, first + CARS + j) - 0.5
        sign = 1 if u > 0 else (-1 if u < 0 else 0)
        speed *= sign
        if initialize:
            state.car_x[i, j] = 0
        state.car_timer[i, j] = abs(speed)
        state.car_speed[i, j] = speed


@kernel_function
def reset(i: int, state: Any, params: Any, rng: Any) -> None:
    """``Env.reset``: cars drawn, the chicken at the bottom, timers full."""
    randomize_cars(i, state, rng, RESET_DRAW, True)
    state.pos[i] = 9
    state.move_timer[i] = PLAYER_SPEED
    state.terminate_timer[i] = TIME_LIMIT


@kernel_function
def act(i: int, state: Any, params: Any, a: int, rng: Any) -> tuple[int, bool]:
    """``Env.act(a)``, statement by statement (the cars in the reference's list order)."""
    r = 0
    pos = state.pos[i]
    if a == UP and state.move_timer[i] == 0:
        state.move_timer[i] = PLAYER_SPEED
        pos = max(0, pos - 1)
    elif a == DOWN and state.move_timer[i] == 0:
        state.move_timer[i] = PLAYER_SPEED
        pos = min(9, pos + 1)

    # Win condition
    if pos == 0:
        r += 1
        randomize_cars(i, state, rng, STEP_DRAW, False)
        pos = 9

    # Update cars: car[0:2] == [4, pos] is car j at x 4 in the chicken's row (y = j + 1).
    # Written as selects, not branches: whether a car moves this step (its timer at 0) and
    # which way differ per env and per car, and mispredicted branches were ~10 ns of a step.
    for j in range(CARS):
        x, timer, speed = int(state.car_x[i, j]), int(state.car_timer[i, j]), \
            int(state.car_speed[i, j])
        hit = (x == 4) & (j + 1 == pos)
        pos = 9 if hit else pos
        moves = timer == 0
        moved = x + (1 if speed > 0 else -1)
        moved = 9 if moved < 0 else (0 if moved > 9 else moved)
        x = moved if moves else x
        hit = moves & (x == 4) & (j + 1 == pos)
        pos = 9 if hit else pos
        state.car_x[i, j] = x
        state.car_timer[i, j] = abs(speed) if moves else timer - 1
    state.pos[i] = pos

    # Update various timers
    if state.move_timer[i] > 0:
        state.move_timer[i] -= 1
    state.terminate_timer[i] -= 1
    return r, state.terminate_timer[i] < 0


@kernel_function
def observe(i: int, state: Any, obs: Any) -> None:
    """``Env.state()``: the chicken, each car and its trail (the cell behind it, wrapped, in
    the channel of its speed). A car of speed 0 (a sign draw of exactly 0.5, odds 2**-53) has
    no trail: the reference's own ``state()`` has no channel for it."""
    clear(i, obs)
    put(i, obs, CHANNELS, state.pos[i], 4, CHICKEN)
    for j in range(CARS):
        x, speed = int(state.car_x[i, j]), int(state.car_speed[i, j])
        put(i, obs, CHANNELS, j + 1, x, CAR)
        back_x = x - 1 if speed > 0 else x + 1  # selects: the direction differs per car
        back_x = 9 if back_x < 0 else (0 if back_x > 9 else back_x)
        if speed != 0:
            put(i, obs, CHANNELS, j + 1, back_x, SPEED1 - 1 + abs(speed))


GAME = Game(name="Freeway", module="freeway", channels=CHANNELS, minimal_actions=(0, 2, 4),
            state=STATE, reset=reset, act=act, observe=observe,
            description="a chicken crossing eight lanes of cars; +1 a crossing, 2,500 frames")
SPEC_V0, SPEC_V1 = game_specs(GAME)
