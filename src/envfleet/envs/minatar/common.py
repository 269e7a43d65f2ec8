"""What every MinAtar game shares: params, action sets, sticky actions, draws, the observation
writer, the renderer's palette and the ``NativeEnvSpec`` pair (v0, v1) of a game.

The reference is the ``minatar`` package (1.0.15): ``minatar.Environment`` wraps a game's
``Env`` and ``minatar.gym.BaseEnv`` registers ``MinAtar/<Game>-v0`` (the six actions) and
``-v1`` (the game's ``minimal_action_set``). Each game module (``breakout.py``, ...) writes the
game's rules as scalar kernel functions of env i's row, in the reference's order of operations:

- ``reset(i, state, params, rng)``: the game's ``reset()``;
- ``act(i, state, params, a, rng) -> (reward, terminal)``: the game's ``act(a)`` with ``a``
  one of the six full actions, after the sticky action is resolved here (``sticky_action``);
- ``observe(i, state, obs)``: the game's ``state()``, written into env i's row of the
  (num_envs, 10 * 10 * channels) bool observations: ``clear``, then ``put`` for each entity and
  ``put_sparse_grid`` for each grid column (``put_grid`` writes a grid's whole channel into a
  row not cleared first), a game ``put``ting nothing into a channel it fills from a grid.

``game_specs`` lifts the three into the kernel contract's ``reset_one`` / ``step_one``.

Randomness (the counter RNG, ``envfleet.kernels.env_uniform``): the j-th random number the reference
asks for in a step is draw ``STEP_DRAW + j`` of that step, and in a reset draw ``RESET_DRAW +
j``, in the order the reference calls ``rand`` / ``randint`` / ``choice`` (an array call
``randint(1, 6, 8)`` takes eight consecutive draws). ``Environment.act``'s sticky test
``random.rand() < sticky_action_prob`` is draw ``STICKY_DRAW`` (0), taken before the game acts.
Reset and step draws use separate ranges because an episode's first step has the same step
counter (0) as its reset. The reference turns each uniform number into what it asked for as
``rand``: ``u``; ``randint(low, high)``: ``low + int(u * (high - low))`` (``draw_int``). The
transplant tests (``tests/minatar/harness.py``) feed the same numbers, in the same order, into
the reference's ``random`` and compare every step. Draws per step: Breakout none (one in reset),
SpaceInvaders none, Freeway 16 on a step that reaches the top (16 in reset), Asterix up to 3 on
a step that spawns (none in reset).

Episodes end as the reference's: the game's terminal flag; the reference registers no time
limit, so the specs' ``max_episode_steps`` is ``UNLIMITED_STEPS`` (no truncation; ``make``'s
``max_episode_steps=N`` adds one) and Gymnasium's ``envfleet/MinAtar-<Game>-vN`` has none.

``last_action`` (for sticky actions) is a state column that, as in ``minatar.Environment``,
starts at 0 and is never reset by a reset: after ``reset(seed=s)`` the first step of an
episode may repeat the previous episode's last action, exactly as the reference does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.kernels import UNLIMITED_STEPS, NativeEnvSpec, env_uniform, kernel_function

#: the reference's ``action_map``: the six actions every game takes (v0), in this order
ACTION_NAMES = ("n", "l", "u", "r", "d", "f")
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)
#: the grid every game is drawn on (rows y, columns x)
SIZE = 10

#: draw numbers (``env_uniform``'s ``k``) within a step and within a reset (module doc)
STICKY_DRAW = 0
STEP_DRAW = 1
RESET_DRAW = 256

#: the reference ``Environment``'s defaults
DEFAULT_STICKY_ACTION_PROB = 0.1
DEFAULT_DIFFICULTY_RAMPING = True

#: the state column every game has: the last full action taken (sticky actions)
COMMON_STATE: dict[str, tuple[type, tuple[int, ...]]] = {"last_action": (np.int8, ())}


class MinAtarParams(NamedTuple):
    """The reference ``Environment``'s options, and the spec's action set."""

    sticky_action_prob: float
    difficulty_ramping: bool
    #: the action set, packed: full action of action ``a`` = ``(action_set >> 4 * a) & 15``
    #: (one int, so the kernels take it as a compiled-in constant on every target)
    action_set: int


def pack_actions(actions: tuple[int, ...]) -> int:
    """``actions`` (full action numbers, 0..5) packed four bits each, action 0 lowest."""
    return sum(a << (4 * j) for j, a in enumerate(actions))


def params_maker(game: str, actions: tuple[int, ...]) -> Callable[..., MinAtarParams]:
    """``make_params`` of ``game``'s spec with action set ``actions``: the reference
    ``Environment``'s keyword arguments, by name (any other keyword is a ``TypeError``)."""
    packed = pack_actions(actions)

    def make_params(*, sticky_action_prob: float = DEFAULT_STICKY_ACTION_PROB,
                    difficulty_ramping: bool = DEFAULT_DIFFICULTY_RAMPING) -> MinAtarParams:
        """MinAtar's ``Environment(sticky_action_prob=0.1, difficulty_ramping=True)``: the
        probability that a step repeats the last action, and whether the game speeds up."""
        value = sticky_action_prob.item() if isinstance(sticky_action_prob, np.generic) \
            else sticky_action_prob
        # compared, not converted: an int beyond float's range (10**400) is refused, not an
        # OverflowError; NaN compares False
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not 0 <= value <= 1:
            got = (f"about {'-' if value < 0 else ''}10**{len(str(abs(value))) - 1}"
                   if isinstance(value, int) and abs(value) >= 10**16
                   else repr(sticky_action_prob))
            raise ValueError(f"MinAtar {game}: sticky_action_prob must be a probability in "
                             f"[0, 1], got {got}")
        if not isinstance(difficulty_ramping, bool | np.bool_):
            raise TypeError(f"MinAtar {game}: difficulty_ramping must be True or False, got "
                            f"{difficulty_ramping!r}")
        return MinAtarParams(float(value), bool(difficulty_ramping), packed)

    # "unexpected keyword argument" errors name the function by its qualified name
    make_params.__qualname__ = f"{game} make_params"
    return make_params


# --- kernel helpers ----------------------------------------------------------------------------


@kernel_function
def draw_unit(rng: Any, i: int, k: int) -> float:
    """Draw ``k`` of env i as the reference's ``random.rand()``: a float in [0, 1)."""
    return env_uniform(rng, i, k, 0.0, 1.0)


@kernel_function
def draw_int(rng: Any, i: int, k: int, low: int, high: int) -> int:
    """Draw ``k`` of env i as the reference's ``random.randint(low, high)``: an int in [low,
    high) (``u * n`` rounds below ``n`` for every ``u < 1``)."""
    return low + int(env_uniform(rng, i, k, 0.0, 1.0) * (high - low))


@kernel_function
def full_action(params: Any, a: int) -> int:
    """The full action (0..5) of action ``a`` of this spec's action set (v1: minimal)."""
    return (params.action_set >> (4 * a)) & 15


@kernel_function
def sticky_action(i: int, state: Any, params: Any, actions: Any, rng: Any) -> int:
    """``minatar.Environment.act``'s sticky actions: with probability ``sticky_action_prob``
    the last action is repeated; the action taken becomes the last action."""
    a = full_action(params, actions[i])
    # the reference always draws; a draw compared with p = 0 never wins, so it is skipped
    if params.sticky_action_prob > 0.0 and \
            draw_unit(rng, i, STICKY_DRAW) < params.sticky_action_prob:
        a = state.last_action[i]
    state.last_action[i] = a
    return a


@kernel_function
def clear(i: int, obs: Any) -> None:
    """Env i's observation row, all False (the reference's ``np.zeros(..., dtype=bool)``)."""
    for k in range(obs.shape[1]):
        obs[i, k] = False


@kernel_function
def put(i: int, obs: Any, channels: int, y: int, x: int, c: int) -> None:
    """``state[y, x, c] = 1`` in env i's row (rows of ``SIZE * SIZE * channels``). ``int``:
    under the CUDA simulator (and in ``GridRenderer``) an int8 column's value is an int8 NumPy
    scalar, which would overflow in the index arithmetic."""
    obs[i, (int(y) * SIZE + int(x)) * channels + int(c)] = True


@kernel_function
def put_grid(i: int, obs: Any, channels: int, grid: Any, c: int) -> None:
    """``state[:, :, c] = grid[i]`` for a (num_envs, 10, 10) grid column: every cell of channel
    ``c`` written, without a branch per cell (a cell's test mispredicted on grids such as
    SpaceInvaders' bullets: ~10 ns of a ~160 ns step)."""
    for y in range(SIZE):
        put_grid_row(i, obs, channels, grid, c, y)


@kernel_function
def put_sparse_grid(i: int, obs: Any, channels: int, grid: Any, c: int) -> None:
    """``put_grid`` into a row that ``clear`` zeroed: the grid's rows holding no True cell
    (five 2-byte loads tell) are skipped, the others written whole. The games' grids are
    sparse by rows (Breakout's bricks fill rows 1-3 of 10, SpaceInvaders' aliens 4, its
    bullets a few cells), and each cell written is a byte store of its own: measured Breakout
    37.8 -> 32.2 ns per env-step (1 thread, 4,096 envs)."""
    rows = grid.view(np.uint16)  # a grid row's 10 bools as five uint16, all 0 when all False
    for y in range(SIZE):
        if rows[i, y, 0] | rows[i, y, 1] | rows[i, y, 2] | rows[i, y, 3] | rows[i, y, 4]:
            put_grid_row(i, obs, channels, grid, c, y)


@kernel_function
def put_grid_row(i: int, obs: Any, channels: int, grid: Any, c: int, y: int) -> None:
    """``state[y, :, c] = grid[i, y]``: row y of channel ``c``, every cell."""
    for x in range(SIZE):
        obs[i, (y * SIZE + x) * channels + c] = grid[i, y, x]


def game_kernels(reset: Callable[..., None], act: Callable[..., tuple],
                 observe: Callable[..., None]) -> tuple[Callable[..., None], Callable[..., None]]:
    """``(reset_one, step_one)`` of a game from its ``reset``, ``act`` and ``observe``
    (module doc): a step resolves the sticky action, acts and writes every output."""

    @kernel_function
    def reset_one(i, state, params, rng, obs):
        reset(i, state, params, rng)
        observe(i, state, obs)

    @kernel_function
    def step_one(i, state, params, actions, rng, obs, rewards, terminated):
        a = sticky_action(i, state, params, actions, rng)
        reward, terminal = act(i, state, params, a, rng)
        observe(i, state, obs)
        rewards[i] = reward
        terminated[i] = terminal

    return reset_one, step_one


# --- render: the reference's rgb_array ----------------------------------------------------------


def cubehelix_palette(n: int) -> np.ndarray:
    """``minatar.gym.BaseEnv.render``'s colours for ``n`` channels, (n + 1, 3) float64: black,
    then seaborn's ``color_palette("cubehelix", n)``, i.e. matplotlib's 256-entry "cubehelix"
    lookup table sampled at ``linspace(0, 1, n + 2)[1:-1]`` (matplotlib's ``_ch_helper`` with
    gamma 1, s 0.5, r -1.5, h 1, computed here as matplotlib computes it, without seaborn or
    matplotlib)."""
    entries = 256
    x = np.linspace(0, 1, entries)
    xg = x**1.0
    a = 1.0 * xg * (1 - xg) / 2
    phi = 2 * np.pi * (0.5 / 3 + -1.5 * x)
    lut = np.stack([np.clip(xg + a * (p0 * np.cos(phi) + p1 * np.sin(phi)), 0.0, 1.0)
                    for p0, p1 in ((-0.14861, 1.78277), (-0.29227, -0.90649), (1.97294, 0.0))],
                   axis=1)
    bins = np.linspace(0, 1, n + 2)[1:-1] * entries
    bins[bins == entries] = entries - 1
    return np.concatenate([np.zeros((1, 3)), lut[bins.astype(int)]])


class GridRenderer:
    """Draws env rows as the reference's ``rgb_array``: a (10, 10, 3) float64 array, each cell
    the colour of its highest set channel (black when none), from ``observe`` run on the row."""

    fps = None  # the reference declares no render_fps

    def __init__(self, observe: Callable[..., None], channels: int) -> None:
        self.observe = observe
        self.channels = channels
        self.palette = cubehelix_palette(channels)

    def __call__(self, params: Any) -> GridRenderer:
        return self

    def draw(self, row: dict[str, Any]) -> np.ndarray:
        """The frame of one env's state row (column name -> value)."""
        state = _Row({name: np.asarray(value)[None] for name, value in row.items()})
        obs = np.zeros((1, SIZE * SIZE * self.channels), dtype=bool)
        self.observe(0, state, obs)
        grid = obs.reshape(SIZE, SIZE, self.channels)
        numerical = np.amax(grid * np.arange(1, self.channels + 1), axis=2)
        return self.palette[numerical]

    def close(self) -> None:
        """Nothing to release."""


class _Row:
    """A one-env state record (attribute per column) for ``observe`` run in Python."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.__dict__.update(columns)


# --- the specs of a game -------------------------------------------------------------------------


@dataclass(frozen=True)
class Game:
    """One MinAtar game: its reference module and name, channels, minimal action set, state
    columns (besides ``COMMON_STATE``) and rules (``reset``, ``act``, ``observe``)."""

    name: str  # "Breakout": the ids' name
    module: str  # "breakout": minatar.environments.<module>
    channels: int
    minimal_actions: tuple[int, ...]
    state: dict[str, tuple[type, tuple[int, ...]]]
    reset: Callable[..., None]
    act: Callable[..., tuple]
    observe: Callable[..., None]
    description: str
    compile_seconds: float = 10.0


def game_specs(game: Game) -> tuple[NativeEnvSpec, NativeEnvSpec]:
    """``MinAtar/<name>-v0`` (the six actions) and ``-v1`` (the minimal action set), as
    ``minatar.gym.register_envs`` registers them."""
    reset_one, step_one = game_kernels(game.reset, game.act, game.observe)
    renderer = GridRenderer(game.observe, game.channels)
    specs = []
    for version, actions in ((0, tuple(range(len(ACTION_NAMES)))), (1, game.minimal_actions)):
        env_id = f"MinAtar/{game.name}-v{version}"
        specs.append(NativeEnvSpec(
            id=env_id,
            observation_space=spaces.Box(0.0, 1.0, shape=(SIZE, SIZE, game.channels),
                                         dtype=bool),
            action_space=spaces.Discrete(len(actions)),
            state={**COMMON_STATE, **game.state},
            make_params=params_maker(game.name, actions),
            max_episode_steps=UNLIMITED_STEPS,
            reset_one=reset_one,
            step_one=step_one,
            reference_id=env_id,
            description=f"MinAtar {game.name} ({'full' if version == 0 else 'minimal'} action "
                        f"set): {game.description}",
            renderer=renderer,
            writes_every_output=True,
            compile_seconds=game.compile_seconds,
        ))
    return specs[0], specs[1]
