"""MinAtar Breakout (``minatar.environments.breakout``): a paddle, a ball on the diagonals and
three rows of bricks; +1 a brick, the episode ends when the ball passes the paddle.

Channels: paddle 0, ball 1, trail 2 (the ball's last cell), brick 3. Minimal actions: n, l, r.
One random draw per reset (the ball's side), none per step; no difficulty ramp.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.envs.minatar.common import (
    LEFT,
    RESET_DRAW,
    RIGHT,
    SIZE,
    Game,
    clear,
    draw_int,
    game_specs,
    put,
    put_sparse_grid,
)
from envfleet.kernels import kernel_function

CHANNELS = 4
PADDLE, BALL, TRAIL, BRICK = range(CHANNELS)

STATE: dict[str, tuple[type, tuple[int, ...]]] = {
    "ball_x": (np.int8, ()),
    "ball_y": (np.int8, ()),
    "ball_dir": (np.int8, ()),  # 0: up-left, 1: up-right, 2: down-right, 3: down-left
    "pos": (np.int8, ()),  # the paddle's column (row 9)
    "last_x": (np.int8, ()),
    "last_y": (np.int8, ()),
    "strike": (np.bool_, ()),  # the ball struck a brick on the last step
    "bricks": (np.bool_, (SIZE, SIZE)),  # brick_map
}


@kernel_function
def fill_brick_rows(i: int, bricks: Any) -> None:
    """``brick_map[1:4, :] = 1``."""
    for y in range(1, 4):
        for x in range(SIZE):
            bricks[i, y, x] = True


@kernel_function
def reset(i: int, state: Any, params: Any, rng: Any) -> None:
    """``Env.reset``: the ball at row 3 on the left (going down-right) or the right (down-left),
    the paddle at column 4, three rows of bricks."""
    start = draw_int(rng, i, RESET_DRAW, 0, 2)  # self.random.randint(2)
    state.ball_y[i] = 3
    state.ball_x[i] = 0 if start == 0 else 9
    state.ball_dir[i] = 2 if start == 0 else 3
    state.pos[i] = 4
    for y in range(SIZE):
        for x in range(SIZE):
            state.bricks[i, y, x] = False
    fill_brick_rows(i, state.bricks)
    state.strike[i] = False
    state.last_x[i] = state.ball_x[i]
    state.last_y[i] = state.ball_y[i]


@kernel_function
def act(i: int, state: Any, params: Any, a: int, rng: Any) -> tuple[int, bool]:
    """``Env.act(a)``, statement by statement: move the paddle, move the ball, bounce off
    walls, bricks and the paddle. The reference's direction tables are arithmetic here:
    ``[1,0,3,2][d]`` is ``d ^ 1``, ``[3,2,1,0][d]`` is ``3 - d``, ``[2,3,0,1][d]`` is ``d ^ 2``."""
    r = 0
    terminal = False
    pos = state.pos[i]
    if a == LEFT:
        pos = max(0, pos - 1)
    elif a == RIGHT:
        pos = min(9, pos + 1)
    state.pos[i] = pos

    ball_x, ball_y, d = state.ball_x[i], state.ball_y[i], state.ball_dir[i]
    last_x, last_y = ball_x, ball_y
    new_x = ball_x - 1 if d == 0 or d == 3 else ball_x + 1
    new_y = ball_y - 1 if d == 0 or d == 1 else ball_y + 1

    strike_toggle = False
    if new_x < 0 or new_x > 9:
        new_x = 0 if new_x < 0 else 9
        d = d ^ 1
    if new_y < 0:
        new_y = 0
        d = 3 - d
    elif state.bricks[i, new_y, new_x]:
        strike_toggle = True
        if not state.strike[i]:
            r += 1
            state.strike[i] = True
            state.bricks[i, new_y, new_x] = False
            new_y = last_y
            d = 3 - d
    elif new_y == 9:
        # np.count_nonzero(brick_map) == 0
        empty = True
        for y in range(SIZE):
            for x in range(SIZE):
                if state.bricks[i, y, x]:
                    empty = False
        if empty:
            fill_brick_rows(i, state.bricks)
        if ball_x == pos:
            d = 3 - d
            new_y = last_y
        elif new_x == pos:
            d = d ^ 2
            new_y = last_y
        else:
            terminal = True

    if not strike_toggle:
        state.strike[i] = False
    state.last_x[i] = last_x
    state.last_y[i] = last_y
    state.ball_x[i] = new_x
    state.ball_y[i] = new_y
    state.ball_dir[i] = d
    return r, terminal


@kernel_function
def observe(i: int, state: Any, obs: Any) -> None:
    """``Env.state()``: ball, paddle, trail and bricks."""
    clear(i, obs)
    put(i, obs, CHANNELS, state.ball_y[i], state.ball_x[i], BALL)
    put(i, obs, CHANNELS, 9, state.pos[i], PADDLE)
    put(i, obs, CHANNELS, state.last_y[i], state.last_x[i], TRAIL)
    put_sparse_grid(i, obs, CHANNELS, state.bricks, BRICK)


GAME = Game(name="Breakout", module="breakout", channels=CHANNELS, minimal_actions=(0, 1, 3),
            state=STATE, reset=reset, act=act, observe=observe,
            description="paddle, ball and bricks; +1 a brick, ends when the ball is missed")
SPEC_V0, SPEC_V1 = game_specs(GAME)
