"""MinAtar Seaquest (``minatar.environments.seaquest``): a two-cell submarine shoots fish and
enemy subs (+1 each), picks up divers and surfaces for oxygen; surfacing with six divers pays
the oxygen left (up to +10). The episode ends when a fish, an enemy sub or an enemy bullet hits
the sub, when oxygen runs out, or when the sub surfaces with no diver on board.

Channels: sub_front 0, sub_back 1, friendly_bullet 2, trail 3, enemy_bullet 4, enemy_fish 5,
enemy_sub 6, oxygen_guage 7, diver_guage 8, diver 9. Minimal actions: all six. No draws in a
reset; a step that spawns an enemy takes 3 (``rand`` side, ``rand`` sub or fish, ``randint(1,
9)`` row), then one that spawns a diver 2 more (side, row). With ``difficulty_ramping`` each
surfacing with divers spawns enemies one step sooner (20 down to 1) and, every other one, moves
them one step sooner (5 down to 2).

The reference keeps five Python lists of entities (``[x, y, dir, move_timer]``, subs with a
``shot_timer`` after); here each is a table column ``(num_envs, CAP, fields)`` of int8 with a
count column, the entries in the list's order, the slots past the count zero. The list idioms
become loops with the same results:

- ``for e in reversed(lst)`` (CPython's list_reverseiterator) is an index counting down from
  ``len - 1`` that re-reads the table each turn and stops once it leaves ``[0, len)``;
- ``lst.remove(e)`` removes the first entry *equal* to ``e`` in every field (``remove_equal``),
  which may be an earlier twin; the entry being processed is then followed by its index (one
  less when an earlier entry went) or, once it is itself removed, by local copies: the
  reference goes on using a removed sub (it counts its shot timer down and may fire);
- ``lst += [e]`` appends.

Capacities, as bounds the rules guarantee: an enemy moves at least every 6 steps and leaves after
10 moves, one spawns per step at most, so fewer than 60 fish plus subs live at once (``ENEMIES``
64 each); divers spawn every 30 steps and live under 60 (``DIVERS`` 4); the sub fires every 5
steps at most and a bullet lives under 10 (``F_BULLETS`` 4); an enemy bullet lives under 10
steps and a sub fires every 11, first 10 steps after it spawns, so under 50 live between steps
and under 60 are added in one (``E_BULLETS`` 128). An append to a full table is dropped rather
than written out of bounds (never reached by the bounds above).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.envs.minatar.common import (
    DOWN,
    FIRE,
    LEFT,
    RIGHT,
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

CHANNELS = 10
(SUB_FRONT, SUB_BACK, FRIENDLY_BULLET, TRAIL, ENEMY_BULLET, ENEMY_FISH, ENEMY_SUB, OXYGEN_GUAGE,
 DIVER_GUAGE, DIVER) = range(CHANNELS)

#: the reference's constants
RAMP_INTERVAL = 100  # defined by the reference, unused by its rules
MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5

#: an entity's fields (the reference's list entries): x, y, dir (1: right), timers
X, Y, DIR, MOVE_TIMER, SHOT_TIMER = range(5)
#: table capacities (module doc)
F_BULLETS, E_BULLETS, ENEMIES, DIVERS = 4, 128, 64, 4

STATE: dict[str, tuple[type, tuple[int, ...]]] = {
    "oxygen": (np.int16, ()),
    # the reference's surfacing with six divers leaves -1, and each surfacing below zero one
    # less (``diver_count -= 1`` after the reset to 0): int32 does not wrap in any real run
    "diver_count": (np.int32, ()),
    "sub_x": (np.int8, ()),
    "sub_y": (np.int8, ()),
    "sub_or": (np.bool_, ()),  # facing right
    "e_spawn_speed": (np.int8, ()),
    "e_spawn_timer": (np.int8, ()),
    "d_spawn_timer": (np.int8, ()),
    "move_speed": (np.int8, ()),
    "ramp_index": (np.int16, ()),
    "shot_timer": (np.int8, ()),
    "surface": (np.bool_, ()),
    "f_bullets": (np.int8, (F_BULLETS, 3)),  # [x, y, dir]
    "n_f_bullets": (np.int8, ()),
    "e_bullets": (np.int8, (E_BULLETS, 3)),  # [x, y, dir]
    "n_e_bullets": (np.int16, ()),
    "e_fish": (np.int8, (ENEMIES, 4)),  # [x, y, dir, move_timer]
    "n_e_fish": (np.int8, ()),
    "e_subs": (np.int8, (ENEMIES, 5)),  # [x, y, dir, move_timer, shot_timer]
    "n_e_subs": (np.int8, ()),
    "divers": (np.int8, (DIVERS, 4)),  # [x, y, dir, move_timer]
    "n_divers": (np.int8, ()),
}


# --- the list idioms --------------------------------------------------------------------------


@kernel_function
def clear_table(i: int, table: Any, counts: Any) -> None:
    """``lst = []``: no entries, every slot zero (the used ones zeroed: the slots past the count
    are zero already, module doc; zeroing all 1,000 bytes of the tables at every reset made a
    random-play step 85.5 instead of 80.3 ns, episodes ~31 steps)."""
    for k in range(counts[i]):
        for f in range(table.shape[2]):
            table[i, k, f] = 0
    counts[i] = 0


@kernel_function
def append(i: int, table: Any, counts: Any, x: int, y: int, d: int, t0: int, t1: int) -> None:
    """``lst += [[x, y, d, t0, t1][:fields]]`` (dropped when the table is full: module doc)."""
    n = counts[i]
    if n == table.shape[1]:
        return
    table[i, n, X] = x
    table[i, n, Y] = y
    table[i, n, DIR] = d
    if table.shape[2] > MOVE_TIMER:
        table[i, n, MOVE_TIMER] = t0
    if table.shape[2] > SHOT_TIMER:
        table[i, n, SHOT_TIMER] = t1
    counts[i] = n + 1


@kernel_function
def remove_equal(i: int, table: Any, counts: Any, j: int) -> int:
    """``lst.remove(lst[j])``: removes the first entry equal to entry j in every field (j or an
    earlier twin), moves the later ones up and zeroes the freed slot; returns its index."""
    n = counts[i]
    fields = table.shape[2]
    k = j
    for m in range(j):
        same = True
        for f in range(fields):
            if table[i, m, f] != table[i, j, f]:
                same = False
        if same:
            k = m
            break
    for m in range(k, n - 1):
        for f in range(fields):
            table[i, m, f] = table[i, m + 1, f]
    for f in range(fields):
        table[i, n - 1, f] = 0
    counts[i] = n - 1
    return k


@kernel_function
def follow(c: int, k: int) -> int:
    """Where the entry at index c is after entry k was removed: c, c - 1, or -1 (removed)."""
    if k == c:
        return -1
    if k < c:
        return c - 1
    return c


@kernel_function
def find_at(i: int, table: Any, counts: Any, x: int, y: int) -> int:
    """``for e in lst: if e[0:2] == [x, y]``: the first such entry's index, or -1."""
    for k in range(counts[i]):
        if table[i, k, X] == x and table[i, k, Y] == y:
            return k
    return -1


@kernel_function
def step_x(x: int, d: int) -> int:
    """``e[0] += 1 if e[2] else -1``."""
    return x + 1 if d else x - 1


# --- the rules ---------------------------------------------------------------------------------


@kernel_function
def reset(i: int, state: Any, params: Any, rng: Any) -> None:
    """``Env.reset``: the sub on the surface at column 5 facing left, full oxygen, no divers,
    no entities, the timers and speeds at their initial values."""
    state.oxygen[i] = MAX_OXYGEN
    state.diver_count[i] = 0
    state.sub_x[i] = 5
    state.sub_y[i] = 0
    state.sub_or[i] = False
    clear_table(i, state.f_bullets, state.n_f_bullets)
    clear_table(i, state.e_bullets, state.n_e_bullets)
    clear_table(i, state.e_fish, state.n_e_fish)
    clear_table(i, state.e_subs, state.n_e_subs)
    clear_table(i, state.divers, state.n_divers)
    state.e_spawn_speed[i] = INIT_SPAWN_SPEED
    state.e_spawn_timer[i] = INIT_SPAWN_SPEED
    state.d_spawn_timer[i] = DIVER_SPAWN_SPEED
    state.move_speed[i] = INIT_MOVE_INTERVAL
    state.ramp_index[i] = 0
    state.shot_timer[i] = 0
    state.surface[i] = True


@kernel_function
def spawn_enemy(i: int, state: Any, rng: Any, k: int) -> int:
    """``Env._spawn_enemy`` with draws k, k + 1, k + 2: a fish or a sub at a random row and
    side, unless an enemy in that row goes the other way. Returns the next draw number."""
    lr = draw_unit(rng, i, k) < 1.0 / 2.0
    is_sub = draw_unit(rng, i, k + 1) < 1.0 / 3.0
    x = 0 if lr else 9
    y = draw_int(rng, i, k + 2, 1, 9)
    d = 1 if lr else 0
    # any([z[1] == y and z[2] != lr for z in self.e_subs + self.e_fish])
    for m in range(state.n_e_subs[i]):
        if state.e_subs[i, m, Y] == y and state.e_subs[i, m, DIR] != d:
            return k + 3
    for m in range(state.n_e_fish[i]):
        if state.e_fish[i, m, Y] == y and state.e_fish[i, m, DIR] != d:
            return k + 3
    if is_sub:
        append(i, state.e_subs, state.n_e_subs, x, y, d, state.move_speed[i],
               ENEMY_SHOT_INTERVAL)
    else:
        append(i, state.e_fish, state.n_e_fish, x, y, d, state.move_speed[i], 0)
    return k + 3


@kernel_function
def spawn_diver(i: int, state: Any, rng: Any, k: int) -> int:
    """``Env._spawn_diver`` with draws k, k + 1: a diver at a random row and side. Returns the
    next draw number."""
    lr = draw_unit(rng, i, k) < 1.0 / 2.0
    x = 0 if lr else 9
    y = draw_int(rng, i, k + 1, 1, 9)
    append(i, state.divers, state.n_divers, x, y, 1 if lr else 0, DIVER_MOVE_INTERVAL, 0)
    return k + 2


@kernel_function
def update_friendly_bullets(i: int, state: Any) -> int:
    """``# Update friendly Bullets``: each bullet moves; one that leaves the grid goes, one that
    lands on a fish (else a sub) removes it and goes, +1. Returns the reward."""
    r = 0
    bullets, n_bullets = state.f_bullets, state.n_f_bullets
    idx = n_bullets[i] - 1
    while 0 <= idx < n_bullets[i]:  # for bullet in reversed(self.f_bullets)
        c = idx
        idx -= 1
        bullets[i, c, X] = step_x(bullets[i, c, X], bullets[i, c, DIR])
        bx, by = bullets[i, c, X], bullets[i, c, Y]
        if bx < 0 or bx > 9:
            remove_equal(i, bullets, n_bullets, c)
        else:
            # the first fish at the bullet is also the first entry equal to it: remove(x)
            hit = find_at(i, state.e_fish, state.n_e_fish, bx, by)
            if hit >= 0:
                remove_equal(i, state.e_fish, state.n_e_fish, hit)
                remove_equal(i, bullets, n_bullets, c)
                r += 1
            else:
                hit = find_at(i, state.e_subs, state.n_e_subs, bx, by)
                if hit >= 0:
                    remove_equal(i, state.e_subs, state.n_e_subs, hit)
                    remove_equal(i, bullets, n_bullets, c)
                    r += 1
    return r


@kernel_function
def pick_up(i: int, state: Any, c: int) -> bool:
    """``diver[0:2] == [self.sub_x, self.sub_y] and self.diver_count < 6`` for diver c."""
    return (state.divers[i, c, X] == state.sub_x[i] and state.divers[i, c, Y] == state.sub_y[i]
            and state.diver_count[i] < 6)


@kernel_function
def update_divers(i: int, state: Any) -> None:
    """``# Update divers``: a diver under the sub is picked up (six at most on board), the
    others move every ``diver_move_interval + 1`` steps, leave the grid or get picked up."""
    divers, n_divers = state.divers, state.n_divers
    idx = n_divers[i] - 1
    while 0 <= idx < n_divers[i]:  # for diver in reversed(self.divers)
        c = idx
        idx -= 1
        if pick_up(i, state, c):
            remove_equal(i, divers, n_divers, c)
            state.diver_count[i] += 1
        elif divers[i, c, MOVE_TIMER] == 0:
            divers[i, c, MOVE_TIMER] = DIVER_MOVE_INTERVAL
            divers[i, c, X] = step_x(divers[i, c, X], divers[i, c, DIR])
            if divers[i, c, X] < 0 or divers[i, c, X] > 9:
                remove_equal(i, divers, n_divers, c)
            elif pick_up(i, state, c):
                remove_equal(i, divers, n_divers, c)
                state.diver_count[i] += 1
        else:
            divers[i, c, MOVE_TIMER] -= 1


@kernel_function
def update_enemies(i: int, state: Any, table: Any, counts: Any, subs: bool) -> tuple[int, bool]:
    """``# Update enemy subs`` (``subs``: ``table`` is ``e_subs``) or ``# Update enemy fish``:
    an enemy on the sub ends the episode; each moves every ``move_speed + 1`` steps, leaves
    the grid, ends the episode or meets a friendly bullet (both go, +1); subs fire every
    ``enemy_shot_interval + 1`` steps, even one removed this step (module doc). Returns
    (reward, terminal)."""
    r = 0
    terminal = False
    px, py = state.sub_x[i], state.sub_y[i]
    idx = counts[i] - 1
    while 0 <= idx < counts[i]:  # for sub in reversed(self.e_subs)
        c = idx
        idx -= 1
        # the entry as locals, written back before a removal compares it and at the end
        x, y, d = table[i, c, X], table[i, c, Y], table[i, c, DIR]
        move_timer = table[i, c, MOVE_TIMER]
        shot_timer = table[i, c, SHOT_TIMER] if subs else 0
        if x == px and y == py:
            terminal = True
        if move_timer == 0:
            move_timer = state.move_speed[i]
            x = step_x(x, d)
            table[i, c, MOVE_TIMER] = move_timer
            table[i, c, X] = x
            if x < 0 or x > 9:
                c = follow(c, remove_equal(i, table, counts, c))
            elif x == px and y == py:
                terminal = True
            else:
                hit = find_at(i, state.f_bullets, state.n_f_bullets, x, y)
                if hit >= 0:
                    c = follow(c, remove_equal(i, table, counts, c))
                    remove_equal(i, state.f_bullets, state.n_f_bullets, hit)
                    r += 1
        else:
            move_timer -= 1
        if c >= 0:
            table[i, c, MOVE_TIMER] = move_timer
            table[i, c, X] = x
        if subs:
            if shot_timer == 0:
                shot_timer = ENEMY_SHOT_INTERVAL
                append(i, state.e_bullets, state.n_e_bullets, x, y, d, 0, 0)
            else:
                shot_timer -= 1
            if c >= 0:
                table[i, c, SHOT_TIMER] = shot_timer
    return r, terminal


@kernel_function
def update_enemy_bullets(i: int, state: Any) -> bool:
    """``# Update enemy bullets``: a bullet on the sub, before or after it moves, ends the
    episode; one that leaves the grid goes. Returns the terminal flag."""
    terminal = False
    bullets, n_bullets = state.e_bullets, state.n_e_bullets
    px, py = state.sub_x[i], state.sub_y[i]
    idx = n_bullets[i] - 1
    while 0 <= idx < n_bullets[i]:  # for bullet in reversed(self.e_bullets)
        c = idx
        idx -= 1
        if bullets[i, c, X] == px and bullets[i, c, Y] == py:
            terminal = True
        bullets[i, c, X] = step_x(bullets[i, c, X], bullets[i, c, DIR])
        if bullets[i, c, X] < 0 or bullets[i, c, X] > 9:
            remove_equal(i, bullets, n_bullets, c)
        elif bullets[i, c, X] == px and bullets[i, c, Y] == py:
            terminal = True
    return terminal


@kernel_function
def surface(i: int, state: Any, params: Any) -> int:
    """``Env._surface``: full oxygen and one diver fewer (six: none, and the oxygen left as
    reward, ``oxygen * 10 // max_oxygen``); with ramping, faster spawns and moves."""
    state.surface[i] = True
    r = 0
    if state.diver_count[i] == 6:
        state.diver_count[i] = 0
        r = state.oxygen[i] * 10 // MAX_OXYGEN
    state.oxygen[i] = MAX_OXYGEN
    state.diver_count[i] -= 1
    if params.difficulty_ramping and (state.e_spawn_speed[i] > 1 or state.move_speed[i] > 2):
        if state.move_speed[i] > 2 and state.ramp_index[i] % 2:
            state.move_speed[i] -= 1
        if state.e_spawn_speed[i] > 1:
            state.e_spawn_speed[i] -= 1
        state.ramp_index[i] += 1
    return r


@kernel_function
def act(i: int, state: Any, params: Any, a: int, rng: Any) -> tuple[int, bool]:
    """``Env.act(a)``, in the reference's order: spawns, the sub's action, friendly bullets,
    divers, enemy subs, enemy bullets, fish, timers, oxygen and surfacing."""
    r = 0
    terminal = False
    k = STEP_DRAW
    if state.e_spawn_timer[i] == 0:
        k = spawn_enemy(i, state, rng, k)
        state.e_spawn_timer[i] = state.e_spawn_speed[i]
    if state.d_spawn_timer[i] == 0:
        k = spawn_diver(i, state, rng, k)
        state.d_spawn_timer[i] = DIVER_SPAWN_SPEED

    if a == FIRE and state.shot_timer[i] == 0:
        append(i, state.f_bullets, state.n_f_bullets, state.sub_x[i], state.sub_y[i],
               1 if state.sub_or[i] else 0, 0, 0)
        state.shot_timer[i] = SHOT_COOL_DOWN
    elif a == LEFT:
        state.sub_x[i] = max(0, state.sub_x[i] - 1)
        state.sub_or[i] = False
    elif a == RIGHT:
        state.sub_x[i] = min(9, state.sub_x[i] + 1)
        state.sub_or[i] = True
    elif a == UP:
        state.sub_y[i] = max(0, state.sub_y[i] - 1)
    elif a == DOWN:
        state.sub_y[i] = min(8, state.sub_y[i] + 1)

    r += update_friendly_bullets(i, state)
    update_divers(i, state)
    reward, hit = update_enemies(i, state, state.e_subs, state.n_e_subs, True)
    r += reward
    terminal = terminal or hit
    if update_enemy_bullets(i, state):
        terminal = True
    reward, hit = update_enemies(i, state, state.e_fish, state.n_e_fish, False)
    r += reward
    terminal = terminal or hit

    # self.x -= self.x > 0
    if state.e_spawn_timer[i] > 0:
        state.e_spawn_timer[i] -= 1
    if state.d_spawn_timer[i] > 0:
        state.d_spawn_timer[i] -= 1
    if state.shot_timer[i] > 0:
        state.shot_timer[i] -= 1
    if state.oxygen[i] <= 0:
        terminal = True
    if state.sub_y[i] > 0:
        state.oxygen[i] -= 1
        state.surface[i] = False
    elif not state.surface[i]:
        if state.diver_count[i] == 0:
            terminal = True
        else:
            r += surface(i, state, params)
    return r, terminal


@kernel_function
def put_trail(i: int, obs: Any, y: int, x: int, d: int) -> None:
    """The trail cell behind an entity at (y, x) going ``d``, when it is on the grid."""
    back_x = x - 1 if d else x + 1
    if 0 <= back_x <= 9:
        put(i, obs, CHANNELS, y, back_x, TRAIL)


@kernel_function
def observe(i: int, state: Any, obs: Any) -> None:
    """``Env.state()``: the sub (front and back), the oxygen and diver gauges on row 9, bullets,
    fish, subs and divers, with a trail behind each fish, sub and diver."""
    clear(i, obs)
    x, y = state.sub_x[i], state.sub_y[i]
    put(i, obs, CHANNELS, y, x, SUB_FRONT)
    # the sub faces right only after a move right (x >= 1), left from x <= 8: on the grid
    put(i, obs, CHANNELS, y, x - 1 if state.sub_or[i] else x + 1, SUB_BACK)
    # state[9, 0:max(0, oxygen) * 10 // max_oxygen, oxygen_guage] = 1
    for col in range(max(0, state.oxygen[i]) * 10 // MAX_OXYGEN):
        put(i, obs, CHANNELS, 9, col, OXYGEN_GUAGE)
    # state[9, 9 - diver_count:9, diver_guage] = 1 (empty for diver_count <= 0)
    for col in range(max(0, 9 - state.diver_count[i]), 9):
        put(i, obs, CHANNELS, 9, col, DIVER_GUAGE)
    for k in range(state.n_f_bullets[i]):
        put(i, obs, CHANNELS, state.f_bullets[i, k, Y], state.f_bullets[i, k, X],
            FRIENDLY_BULLET)
    for k in range(state.n_e_bullets[i]):
        put(i, obs, CHANNELS, state.e_bullets[i, k, Y], state.e_bullets[i, k, X], ENEMY_BULLET)
    for k in range(state.n_e_fish[i]):
        fy, fx = state.e_fish[i, k, Y], state.e_fish[i, k, X]
        put(i, obs, CHANNELS, fy, fx, ENEMY_FISH)
        put_trail(i, obs, fy, fx, state.e_fish[i, k, DIR])
    for k in range(state.n_e_subs[i]):
        sy, sx = state.e_subs[i, k, Y], state.e_subs[i, k, X]
        put(i, obs, CHANNELS, sy, sx, ENEMY_SUB)
        put_trail(i, obs, sy, sx, state.e_subs[i, k, DIR])
    for k in range(state.n_divers[i]):
        dy, dx = state.divers[i, k, Y], state.divers[i, k, X]
        put(i, obs, CHANNELS, dy, dx, DIVER)
        put_trail(i, obs, dy, dx, state.divers[i, k, DIR])


GAME = Game(name="Seaquest", module="seaquest", channels=CHANNELS,
            minimal_actions=(0, 1, 2, 3, 4, 5), state=STATE, reset=reset, act=act,
            observe=observe,
            description="a submarine shooting fish and subs, rescuing divers, surfacing for "
                        "oxygen; +1 an enemy, the oxygen left on surfacing with six divers",
            compile_seconds=11.0)  # its serial kernels, forceinline'd: ~11 s of CPU
SPEC_V0, SPEC_V1 = game_specs(GAME)
