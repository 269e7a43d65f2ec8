"""Chess-v0: the family's state, kernels, spec and its ``ChessVectorEnv``.

One row per board (structure of arrays). ``reset_one`` loads the board's start position
(``start_*`` columns, written from ``reset(options={"fen": ...})``), ``step_one`` plays the
action's move (and, with ``opponent="random"``, a random reply) and decides the game's end.
Per-board settings (opponent mode, agent colour, illegal-action rule) live in the ``setup``
column, so one compiled kernel serves every mode; the kernels only see ``ChessKernelParams``.
``packed=True`` swaps the legal-action mask for its bits and the planes for bitboards (the
outputs a GPU policy reads): same kernels, written by the same scalar code on both backends.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from envfleet.envs.chess import core
from envfleet.envs.chess.core import (
    CHECKMATE,
    HISTORY,
    MAX_MOVES,
    NUM_ACTIONS,
    finish_ply,
    label_move,
    load_start,
    lsb,
    make_move,
    random_move,
)
from envfleet.envs.chess.fen import STARTING_FEN, Position, format_fen, parse_fen
from envfleet.envs.chess.tables import build_tables, label_to_move, move_to_label
from envfleet.kernels import NativeEnvSpec, NativeVectorEnv, disk_cached, kernel_function

# --- state ------------------------------------------------------------------------------------

STATE: dict[str, tuple[type, tuple[int, ...]]] = {
    "pieces": (np.uint64, (6,)),  # pawn, knight, bishop, rook, queen, king (both colours)
    "colors": (np.uint64, (2,)),  # white, black
    "turn": (np.uint8, ()),  # 0 white, 1 black
    "castling": (np.uint8, ()),  # bits K=1, Q=2, k=4, q=8
    "ep": (np.int8, ()),  # en-passant square when a legal en-passant capture exists, else -1
    "halfmove": (np.int32, ()),
    "fullmove": (np.int32, ()),
    "key": (np.uint64, ()),  # Zobrist key of the position (python-chess's repetition key)
    "history": (np.uint64, (HISTORY,)),  # keys since the last irreversible move
    "history_len": (np.int32, ()),
    "repetitions": (np.int8, ()),  # occurrences of the current position (1..3)
    "moves": (np.int32, (MAX_MOVES,)),  # legal moves (core.py's move words)
    "num_moves": (np.int32, ()),
    "status": (np.int8, ()),  # core.ONGOING, CHECKMATE, ... after the last ply
    "agent": (np.uint8, ()),  # the agent's colour this episode (opponent mode)
    "setup": (np.uint8, ()),  # bit 0: random opponent; bit 1: illegal action loses;
    #                           bits 2-3: agent colour 0 white, 1 black, 2 alternate
    "start_pieces": (np.uint64, (6,)),
    "start_colors": (np.uint64, (2,)),
    "start_turn": (np.uint8, ()),
    "start_castling": (np.uint8, ()),
    "start_ep": (np.int8, ()),
    "start_halfmove": (np.int32, ()),
    "start_fullmove": (np.int32, ()),
    "action_mask": (np.bool_, (NUM_ACTIONS,)),
}
START_COLUMNS = ("start_pieces", "start_colors", "start_turn", "start_castling", "start_ep",
                 "start_halfmove", "start_fullmove")
SETUP_OPPONENT, SETUP_LOSE = 1, 2
AGENT_COLORS = {"white": 0, "black": 1, "alternate": 2}
OUTCOMES = ("ongoing", "checkmate", "stalemate", "insufficient_material", "fifty_moves",
            "threefold_repetition", "illegal_move")

COMPACT_SIZE = 72
NUM_PLANES = 21
#: ``packed=True``: the mask's bytes per board (4672 bits, little-endian within a byte)
MASK_BYTES = NUM_ACTIONS // 8
#: ``packed=True``: the packed planes' halfmove word (the others are bitboards)
HALFMOVE_PLANE = 19
_PACKED_STATE = {**STATE, "action_mask": (np.uint8, (MASK_BYTES,))}


def _compact_space() -> spaces.Box:
    low = np.zeros(COMPACT_SIZE, dtype=np.int8)
    high = np.zeros(COMPACT_SIZE, dtype=np.int8)
    low[:64], high[:64] = -6, 6
    high[64:68] = 1
    low[68], high[68] = -1, 7
    high[69] = 2
    high[70] = 100
    high[71] = 1
    return spaces.Box(low, high, (COMPACT_SIZE,), np.int8)


def _planes_space() -> spaces.Box:
    return spaces.Box(0.0, 1.0, (8, 8, NUM_PLANES), np.float32)


def _packed_planes_space() -> spaces.Box:
    """The planes as 21 uint64 words: plane p's bitboard (bit ``8 * rank + file``), except
    word 19, the half-move clock (0..100) whose plane holds it / 100."""
    high = np.full(NUM_PLANES, np.iinfo(np.uint64).max, dtype=np.uint64)
    high[HALFMOVE_PLANE] = 100
    return spaces.Box(np.zeros(NUM_PLANES, np.uint64), high, (NUM_PLANES,), np.uint64)


# --- params -----------------------------------------------------------------------------------


class ChessParams(NamedTuple):
    """Everything ``make("Chess-v0", ...)`` configures."""

    planes: bool
    opponent: str | None
    agent_color: str
    illegal_action: str
    max_plies: int
    packed: bool = False


class ChessKernelParams(NamedTuple):
    """The part of the params the kernels see (one compile per observation kind)."""

    planes: bool
    packed: bool = False


def make_params(*, opponent: str | None = None, agent_color: str = "white",
                illegal_action: str = "raise", observation: str = "compact",
                max_plies: int = 512, packed: bool = False) -> ChessParams:
    """Chess-v0's constructor options; ``packed=True``: ``info["action_mask"]`` as bits (uint8
    ``(n, 584)``) and, with ``observation="planes"``, the planes as uint64 bitboards
    ``(n, 21)`` (``envfleet.chess.unpack_mask`` / ``unpack_planes`` give the usual arrays)."""
    if opponent not in (None, "random"):
        raise ValueError(f"opponent must be None (two players) or 'random', got {opponent!r}")
    if agent_color not in AGENT_COLORS:
        raise ValueError(f"agent_color must be 'white', 'black' or 'alternate', "
                         f"got {agent_color!r}")
    if illegal_action not in ("raise", "lose"):
        raise ValueError(f"illegal_action must be 'raise' or 'lose', got {illegal_action!r}")
    if observation not in ("compact", "planes"):
        raise ValueError(f"observation must be 'compact' or 'planes', got {observation!r}")
    if isinstance(max_plies, bool) or not isinstance(max_plies, int) or max_plies < 1:
        raise ValueError(f"max_plies must be an int >= 1, got {max_plies!r}")
    if not isinstance(packed, bool | np.bool_):
        raise ValueError(f"packed must be True (the mask as bits, the planes as bitboards) or "
                         f"False, got {packed!r}")
    return ChessParams(observation == "planes", opponent, agent_color, illegal_action, max_plies,
                       bool(packed))


def kernel_params(params: ChessParams) -> ChessKernelParams:
    return ChessKernelParams(params.planes, params.packed)


def setup_code(params: ChessParams) -> int:
    code = AGENT_COLORS[params.agent_color] << 2
    if params.opponent == "random":
        code |= SETUP_OPPONENT
    if params.illegal_action == "lose":
        code |= SETUP_LOSE
    return code


# --- kernels ----------------------------------------------------------------------------------

_U16 = np.uint64(16)
_RESET_DRAW = np.uint64(1)
_STEP_DRAW = np.uint64(0)
RANDOM_ACTION_DRAW = np.uint64(0xFFFF)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_BYTES = np.uint64(0x00FF00FF00FF00FF)
_HALVES = np.uint64(0x0000FFFF0000FFFF)
_U8, _U32 = np.uint64(8), np.uint64(32)


@kernel_function
def piece_code(i, st, sq, us):
    """The man on ``sq`` as the compact observation codes it: piece + 1 (pawn 1 .. king 6),
    negative for the opponent's; branch-free (a branch per piece type mispredicts)."""
    s = np.uint64(sq)
    one = core.U1
    code = (1 + np.int64((st.pieces[i, 1] >> s) & one) + 2 * np.int64((st.pieces[i, 2] >> s) & one)
            + 3 * np.int64((st.pieces[i, 3] >> s) & one)
            + 4 * np.int64((st.pieces[i, 4] >> s) & one)
            + 5 * np.int64((st.pieces[i, 5] >> s) & one))
    theirs = np.int64((st.colors[i, 1 - us] >> s) & one)
    return code - 2 * theirs * code


@kernel_function
def write_obs(i, st, params, obs):
    """Board i's observation from the side to move's view (ranks mirrored for black)."""
    S = st.tables32
    us = np.int64(st.turn[i])
    flip = 56 if us == 1 else 0
    rights = np.int64(st.castling[i])
    own_rights = (rights >> 2) if us == 1 else rights
    opp_rights = rights if us == 1 else (rights >> 2)
    ep = np.int64(st.ep[i])
    if params.planes and params.packed:
        write_bitboards(i, st, obs, us, own_rights, opp_rights, ep)
    elif params.planes:
        for k in range(64 * 21):
            obs[i, k] = 0
        b = st.colors[i, 0] | st.colors[i, 1]
        while b:
            sq = lsb(b, S)
            b &= b - core.U1
            code = piece_code(i, st, sq, us)  # +-(piece + 1)
            plane = code - 1 if code > 0 else 5 - code
            obs[i, (sq ^ flip) * 21 + plane] = 1
        reps = np.int64(st.repetitions[i])
        half = np.float32(min(np.int64(st.halfmove[i]), 100)) / np.float32(100.0)
        for sq in range(64):
            base = sq * 21
            obs[i, base + 12] = 1 if reps >= 2 else 0
            obs[i, base + 13] = 1 if reps >= 3 else 0
            obs[i, base + 14] = us
            obs[i, base + 15] = own_rights & 1
            obs[i, base + 16] = (own_rights >> 1) & 1
            obs[i, base + 17] = opp_rights & 1
            obs[i, base + 18] = (opp_rights >> 1) & 1
            obs[i, base + 19] = half
        if ep >= 0:
            obs[i, (ep ^ flip) * 21 + 20] = 1
    else:
        for k in range(64):
            obs[i, k] = 0
        b = st.colors[i, 0] | st.colors[i, 1]
        while b:  # one loop over the men (12 loops, one per piece bitboard, cost ~2x)
            sq = lsb(b, S)
            b &= b - core.U1
            obs[i, sq ^ flip] = piece_code(i, st, sq, us)
        obs[i, 64] = own_rights & 1
        obs[i, 65] = (own_rights >> 1) & 1
        obs[i, 66] = opp_rights & 1
        obs[i, 67] = (opp_rights >> 1) & 1
        obs[i, 68] = (ep & 7) if ep >= 0 else -1
        obs[i, 69] = st.repetitions[i] - 1
        obs[i, 70] = min(np.int64(st.halfmove[i]), 100)
        obs[i, 71] = us


@kernel_function
def flip_ranks(b):
    """Bitboard ``b`` with its ranks mirrored (square ``sq`` -> ``sq ^ 56``): a byte swap."""
    b = ((b >> _U8) & _BYTES) | ((b & _BYTES) << _U8)
    b = ((b >> _U16) & _HALVES) | ((b & _HALVES) << _U16)
    return (b >> _U32) | (b << _U32)


@kernel_function
def write_bitboards(i, st, obs, us, own_rights, opp_rights, ep):
    """Board i's packed planes (``packed=True``): word p is plane p's bitboard, as
    ``write_obs`` lays the planes out (side to move's view), word 19 the half-move clock."""
    own = st.colors[i, us]
    opp = st.colors[i, 1 - us]
    for p in range(6):
        b = st.pieces[i, p]
        mine = b & own
        theirs = b & opp
        if us == 1:
            mine = flip_ranks(mine)
            theirs = flip_ranks(theirs)
        obs[i, p] = mine
        obs[i, 6 + p] = theirs
    reps = np.int64(st.repetitions[i])
    obs[i, 12] = _ALL if reps >= 2 else core.U0
    obs[i, 13] = _ALL if reps >= 3 else core.U0
    obs[i, 14] = _ALL if us == 1 else core.U0
    obs[i, 15] = _ALL if own_rights & 1 else core.U0
    obs[i, 16] = _ALL if (own_rights >> 1) & 1 else core.U0
    obs[i, 17] = _ALL if opp_rights & 1 else core.U0
    obs[i, 18] = _ALL if (opp_rights >> 1) & 1 else core.U0
    obs[i, HALFMOVE_PLANE] = np.uint64(min(np.int64(st.halfmove[i]), 100))
    flip = 56 if us == 1 else 0
    obs[i, 20] = (core.U1 << np.uint64(ep ^ flip)) if ep >= 0 else core.U0


@kernel_function
def write_mask(i, st, params):
    """Board i's mask := its legal moves, clearing the whole row first (resets)."""
    mask = st.action_mask
    for k in range(mask.shape[1]):
        mask[i, k] = 0
    set_mask(i, st, params, True)


@kernel_function
def set_mask(i, st, params, value):
    """Set board i's mask entries of its current legal moves to ``value``: a step clears the
    old moves' entries and sets the new ones (~40 bytes instead of a 4672-byte row); packed,
    bit ``a & 7`` of byte ``a >> 3`` is action a's entry."""
    mask = st.action_mask
    for k in range(st.num_moves[i]):
        a = np.int64(st.moves[i, k] >> 16)
        if params.packed:
            byte = a >> 3
            bit = np.int64(1) << (a & 7)
            old = np.int64(mask[i, byte])
            mask[i, byte] = (old | bit) if value else (old & ~bit)
        else:
            mask[i, a] = value


@kernel_function
def mask_allows(i, st, params, a):
    """Whether board i's mask holds action ``a`` (packed or not)."""
    if params.packed:
        return (np.int64(st.action_mask[i, a >> 3]) >> (a & 7)) & 1 != 0
    return st.action_mask[i, a]


@kernel_function
def reset_one(i, state, params, rng, obs):
    """Board i := its start position; the random opponent opens if it plays that colour."""
    st = state
    seeds, episodes, steps = rng
    status = load_start(i, st)
    setup = np.int64(st.setup[i])
    if setup & SETUP_OPPONENT:
        mode = (setup >> 2) & 3
        agent = mode
        if mode == 2:  # alternate: by board and episode
            agent = np.int64((np.uint64(i) + episodes[i]) & core.U1)
        st.agent[i] = agent
        if status == 0 and np.int64(st.turn[i]) != agent:
            counter = (np.uint64(steps[i]) << _U16) | _RESET_DRAW
            m = random_move(i, st, seeds[i], episodes[i], counter)
            finish_ply(i, st, make_move(i, st, m))
    write_obs(i, st, params, obs)
    write_mask(i, st, params)


@kernel_function
def step_one(i, state, params, actions, rng, obs, rewards, terminated):
    """One ply for the side to move (plus the random opponent's reply in opponent mode)."""
    st = state
    status = np.int64(st.status[i])
    if status != 0:  # the opponent's opening reply at reset ended the game
        terminated[i] = True
        rewards[i] = -1.0 if status == CHECKMATE else 0.0
        return
    if not mask_allows(i, st, params, np.int64(actions[i])):  # illegal_action="lose"
        st.status[i] = core.ILLEGAL_MOVE
        terminated[i] = True
        rewards[i] = -1.0
        return
    set_mask(i, st, params, False)
    opponent = st.setup[i] & SETUP_OPPONENT
    m = label_move(i, st, actions[i])
    ply = 0
    while True:  # the agent's ply, then the opponent's reply: one call site (inlined once)
        status = finish_ply(i, st, make_move(i, st, m))
        if status != 0 or ply == 1 or not opponent:
            break
        ply = 1
        seeds, episodes, steps = rng
        counter = (np.uint64(steps[i]) << _U16) | _STEP_DRAW
        m = random_move(i, st, seeds[i], episodes[i], counter)
    reward = 0.0
    if status == CHECKMATE:
        reward = 1.0 if ply == 0 else -1.0
    rewards[i] = reward
    terminated[i] = status != 0
    write_obs(i, st, params, obs)
    set_mask(i, st, params, True)


@kernel_function
def action_check(i, state, params, actions):
    """Board i's action is legal in its position (any action when illegal actions lose)."""
    if state.setup[i] & SETUP_LOSE or state.status[i] != 0:
        return True
    return mask_allows(i, state, params, np.int64(actions[i]))  # the legal moves: no scan


@kernel_function
def random_legal_action(i, state, rng):
    """``random_action`` of board i, as the engines' ``map_rows`` calls it."""
    return random_action(i, state.moves, state.num_moves, rng[0], rng[1], rng[2])


@kernel_function
def random_action(i, moves, num_moves, seeds, episodes, steps):
    """A uniformly random legal action of board i (0 when it has none)."""
    n = num_moves[i]
    if n == 0:
        return 0
    counter = (np.uint64(steps[i]) << _U16) | RANDOM_ACTION_DRAW
    r = core.random_u64(seeds[i], episodes[i], counter) >> np.uint64(32)
    return np.int64(moves[i, np.int64((r * np.uint64(n)) >> np.uint64(32))] >> 16)


# --- the spec -------------------------------------------------------------------------------


def _tables() -> dict[str, np.ndarray]:
    T, S = build_tables()
    return {"tables64": T, "tables32": S}


def _describe_illegal(index: int, value: Any, state: Any) -> str:
    return (f"illegal action {value} for board {index}: it is not a legal move in that "
            f"board's position (use info['action_mask'] or env.random_legal_actions(); "
            f"illegal_action='lose' makes it a loss instead)")


def _vector_env_class() -> type:
    return ChessVectorEnv


SPEC = NativeEnvSpec(
    id="Chess-v0",
    observation_space=_compact_space(),
    action_space=spaces.Discrete(NUM_ACTIONS),
    state=STATE,
    make_params=make_params,
    max_episode_steps=512,
    reset_one=reset_one,
    step_one=step_one,
    reset_torch=None,
    step_torch=None,
    reference_id="",
    description="Chess with AlphaZero's 4672 action labels, bitboards, full rules",
    tables=_tables,
    info_columns=("action_mask",),
    action_check=action_check,
    describe_refusal=_describe_illegal,
    kernel_params=kernel_params,
    specialize=lambda params: _SPECS[params.planes, params.packed],
    default_max_steps=lambda params: (params.max_plies if params.opponent is None
                                      else (params.max_plies + 1) // 2),
    vector_env_class=_vector_env_class,
    backends=("numba", "cuda"),
    parallel_min_envs=128,  # a ply costs ~1 us: threads pay off well below CartPole's 512
    compile_seconds=15.0,  # move generation, rules and the opponent: a large kernel
    # gymnasium.make("envfleet/Chess-v0"): an illegal move loses (PettingZoo's chess_v6 rule),
    # since single-env tools step unmasked actions; the vector API keeps refusing them
    single_env_defaults={"illegal_action": "lose"},
)
_PLANES_SPEC = replace(SPEC, observation_space=_planes_space())
#: (planes, packed) -> the spec: packed specs hold the mask as bits (a uint8 column)
_SPECS = {
    (False, False): SPEC,
    (True, False): _PLANES_SPEC,
    (False, True): replace(SPEC, state=_PACKED_STATE),
    (True, True): replace(SPEC, state=_PACKED_STATE, observation_space=_packed_planes_space()),
}


# --- Python-side helpers: one-board scratch on CPU ------------------------------------------


@functools.cache
def _scratch_kernels() -> tuple[Any, Any]:
    from numba import njit

    @njit(nogil=True)
    def inspect(st):
        """(number of legal moves or -1 if the side not to move is in check, insufficient)."""
        T, S = st.tables64, st.tables32
        us = np.int64(st.turn[0])
        own = st.colors[0, us]
        opp = st.colors[0, 1 - us]
        oksq = lsb(st.pieces[0, core.KING_] & opp, S)
        if core.attacked(0, st.pieces, oksq, 1 - us, own | opp, own, T, S):
            return -1, False
        n = core.gen_moves(0, st)
        return n, core.insufficient_material(0, st)

    @njit(nogil=True)
    def perft_from_row0(st, depth):
        """Leaf count of the move tree below row 0 (iterative: row d = the position at depth
        d, its moves generated)."""
        if depth == 0:
            return 1
        core.gen_moves(0, st)
        index = np.zeros(depth + 1, dtype=np.int64)
        total = 0
        d = 0
        while d >= 0:
            if d == depth - 1:
                total += st.num_moves[d]
                d -= 1
                continue
            if index[d] >= st.num_moves[d]:
                d -= 1
                continue
            m = st.moves[d, index[d]]
            index[d] += 1
            core.copy_position(st, d, d + 1)
            core.make_move(d + 1, st, m)
            core.gen_moves(d + 1, st)
            d += 1
            index[d] = 0
        return total

    return disk_cached(inspect), disk_cached(perft_from_row0)


def _scratch_state(rows: int, position: Position) -> tuple:
    """A CPU state of ``rows`` boards with row 0 holding ``position`` (raw en-passant)."""
    st = SPEC.state_type(**SPEC.allocate_state(rows))
    st.pieces[0] = np.array(position.pieces, dtype=np.uint64)
    st.colors[0] = np.array(position.colors, dtype=np.uint64)
    st.turn[0] = position.turn
    st.castling[0] = position.castling
    st.ep[0] = position.ep
    st.halfmove[0] = position.halfmove
    st.fullmove[0] = position.fullmove
    return st


def check_start_position(position: Position, fen: str) -> None:
    """Refuse positions that are illegal or already over as start positions."""
    inspect, _ = _scratch_kernels()
    n, insufficient = inspect(_scratch_state(1, position))
    if n < 0:
        side = "black" if position.turn == 0 else "white"
        raise ValueError(f"FEN {fen!r}: the side not to move ({side}) is in check")
    if n == 0:
        raise ValueError(f"FEN {fen!r}: the game is already over (no legal move: checkmate or "
                         f"stalemate); a start position needs a legal move")
    if insufficient:
        raise ValueError(f"FEN {fen!r}: the game is already over (insufficient material)")
    if position.halfmove >= 100:
        raise ValueError(f"FEN {fen!r}: the game is already over (half-move clock "
                         f"{position.halfmove} >= 100)")


def perft(fen: str, depth: int) -> int:
    """The number of leaf nodes of the legal move tree of ``fen`` at ``depth`` plies."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= 20:
        raise ValueError(f"depth must be an int in 0..20, got {depth!r}")
    position = parse_fen(fen)
    inspect, perft_from_row0 = _scratch_kernels()
    st = _scratch_state(depth + 1, position)
    if inspect(st)[0] < 0:
        raise ValueError(f"FEN {fen!r}: the side not to move is in check")
    return int(perft_from_row0(st, depth))


# --- the vector env -------------------------------------------------------------------------


class ChessVectorEnv(NativeVectorEnv):
    """Chess-v0's ``VectorEnv``: FEN starts, FEN/UCI translation and random legal actions."""

    family_reset_options = ("fen",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chess_params: ChessParams = self.engine.params
        code = np.full(self.num_envs, setup_code(self.chess_params), dtype=np.uint8)
        self.engine.write_state("setup", np.ones(self.num_envs, np.bool_), code)
        self._start_default = _start_rows(parse_fen(STARTING_FEN), 1)

    # reset options ---------------------------------------------------------------------------

    def _prepare_reset(self, family_options: dict[str, Any], mask: np.ndarray | None) -> Any:
        """Validate ``options["fen"]`` (before anything moves); return the write to apply."""
        fens = family_options.get("fen")
        n = self.num_envs
        if fens is None:
            positions = [None] * n
        else:
            if isinstance(fens, str):
                fens = [fens] * n
            elif not isinstance(fens, list | tuple | np.ndarray):
                raise ValueError(f"options['fen'] must be a list of {n} FEN strings (or one "
                                 f"string for every board), got {type(fens).__name__}")
            fens = list(fens)
            if len(fens) != n:
                raise ValueError(f"options['fen'] must have num_envs={n} entries, got "
                                 f"{len(fens)}")
            positions = []
            for i, fen in enumerate(fens):
                if fen is None:
                    positions.append(None)
                    continue
                try:
                    position = parse_fen(fen)
                    check_start_position(position, fen)
                except ValueError as error:
                    raise ValueError(f"options['fen'][{i}] (board {i}): {error}") from None
                positions.append(position)
        rows = mask if mask is not None else np.ones(n, dtype=np.bool_)

        def apply() -> None:
            columns = {name: np.repeat(self._start_default[name], n, axis=0)
                       for name in START_COLUMNS}
            for i, position in enumerate(positions):
                if position is not None:
                    for name, value in _start_rows(position, 1).items():
                        columns[name][i] = value[0]
            for name, values in columns.items():
                self.engine.write_state(name, rows, values)

        return apply

    # board queries ---------------------------------------------------------------------------

    def _board(self, i: Any) -> int:
        if isinstance(i, bool) or not isinstance(i, int | np.integer):
            raise ValueError(f"board index must be an int in 0..{self.num_envs - 1}, got {i!r}")
        if not 0 <= i < self.num_envs:
            raise ValueError(f"board index {i} is out of range: this env has {self.num_envs} "
                             f"boards (0..{self.num_envs - 1})")
        if not self._has_reset:
            raise RuntimeError("call reset() before asking about a board")
        return int(i)

    def _row(self, name: str, i: int) -> np.ndarray:
        return self.engine.read_state(name, i)

    def fen(self, i: int) -> str:
        """Board i's position as python-chess's ``board.fen()`` prints it."""
        i = self._board(i)
        r = self._row
        return format_fen(r("pieces", i), r("colors", i), int(r("turn", i)),
                          int(r("castling", i)), int(r("ep", i)), int(r("halfmove", i)),
                          int(r("fullmove", i)))

    def outcome(self, i: int) -> str:
        """How board i's last ply ended its game: 'ongoing', 'checkmate', 'stalemate',
        'insufficient_material', 'fifty_moves', 'threefold_repetition' or 'illegal_move'."""
        return OUTCOMES[int(self._row("status", self._board(i)))]

    def _legal_moves(self, i: int) -> np.ndarray:
        n = int(self._row("num_moves", i))
        return np.asarray(self._row("moves", i))[:n]

    def action_to_uci(self, i: int, action: Any) -> str:
        """The UCI text (``e2e4``, ``e7e8q``) of ``action`` in board i's position."""
        i = self._board(i)
        a = _check_action(action)
        black = int(self._row("turn", i)) == 1
        frm, to, promo = label_to_move(a, black)
        if to < 0:
            raise ValueError(f"action {a} points off the board (from {frm}) for board {i}")
        uci = _square(frm) + _square(to)
        if promo:
            return uci + "?nbr"[promo]
        pawns = int(self._row("pieces", i)[0])
        if pawns >> frm & 1 and to // 8 in (0, 7):
            uci += "q"
        return uci

    def uci_to_action(self, i: int, uci: str) -> int:
        """The action label of the legal move ``uci`` in board i's position."""
        i = self._board(i)
        if not isinstance(uci, str) or len(uci) not in (4, 5):
            raise ValueError(f"invalid UCI move {uci!r} (expected like 'e2e4' or 'e7e8q')")
        from envfleet.envs.chess.fen import parse_square

        try:
            frm, to = parse_square(uci[:2]), parse_square(uci[2:4])
        except ValueError:
            raise ValueError(f"invalid UCI move {uci!r}") from None
        promo_letter = uci[4:]
        if promo_letter and promo_letter not in "nbrq":
            raise ValueError(f"invalid promotion piece in UCI move {uci!r}")
        promo = " nbrq".index(promo_letter) if promo_letter else 0
        black = int(self._row("turn", i)) == 1
        label = move_to_label(frm, to, 0 if promo == 4 else promo, black)
        legal = {int(m) >> 16: int(m) for m in self._legal_moves(i)}
        word = legal.get(label)
        ok = word is not None
        if ok:  # the label must mean this exact move (promotion or not)
            kind = (word >> 12) & 15
            ok = (promo == 4) == (kind == core.PROMO_Q) and (promo != 0) == (kind >= 4)
        if not ok:
            raise ValueError(f"{uci} is not a legal move on board {i} ({self.fen(i)})")
        return label

    def random_legal_actions(self) -> Any:
        """One uniformly random legal action per board (int64, shape (num_envs,); a torch
        tensor on the device with the cuda backend), drawn in compiled code from each board's
        legal moves with counter-based randomness keyed by (seed, episode, step): same seed,
        same actions; 0 for a board without legal moves (its step is a reset)."""
        self._check_open()
        if not self._has_reset:
            raise RuntimeError("call reset() before random_legal_actions()")
        return self.engine.map_rows(random_legal_action, np.int64)


def _check_action(action: Any) -> int:
    if isinstance(action, bool) or not isinstance(action, int | np.integer) \
            or not 0 <= action < NUM_ACTIONS:
        raise ValueError(f"invalid action {action!r}: actions are ints in 0..{NUM_ACTIONS - 1}")
    return int(action)


def _square(sq: int) -> str:
    return "abcdefgh"[sq % 8] + str(sq // 8 + 1)


def _start_rows(position: Position, n: int) -> dict[str, np.ndarray]:
    return {
        "start_pieces": np.tile(np.array(position.pieces, dtype=np.uint64), (n, 1)),
        "start_colors": np.tile(np.array(position.colors, dtype=np.uint64), (n, 1)),
        "start_turn": np.full(n, position.turn, np.uint8),
        "start_castling": np.full(n, position.castling, np.uint8),
        "start_ep": np.full(n, position.ep, np.int8),
        "start_halfmove": np.full(n, position.halfmove, np.int32),
        "start_fullmove": np.full(n, position.fullmove, np.int32),
    }
