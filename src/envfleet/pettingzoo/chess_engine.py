"""chess_v6's game on Chess-v0's engine: compiled kernels over a few boards' rows.

PettingZoo's chess differs from Chess-v0 in three ways, all reproduced here on the native
state (``envs/chess/env.py``'s columns): its action labels number the 73 planes differently
(``label_tables``), its observation stacks the last 8 positions (13 bitboards
each, kept per board in ``hist``, white's view, with python-chess's en-passant square after
any double push), and a game also ends when a draw can be *claimed* (python-chess's
``can_claim_draw()``: a legal move reaching a third repetition, or the fifty-move rule at
half-move 99), which ``claimable`` decides with a scratch row per board.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from envfleet.envs.chess import core
from envfleet.envs.chess.core import NUM_ACTIONS
from envfleet.envs.chess.env import SPEC, START_COLUMNS, _start_rows
from envfleet.envs.chess.fen import STARTING_FEN, parse_fen
from envfleet.envs.chess.tables import Z_SIDE, label_to_move
from envfleet.kernels import disk_cached

#: ``step`` results beyond core's statuses: a draw python-chess lets the mover's opponent claim
CLAIMED_DRAW = 7
HISTORY_POSITIONS = 8  # positions in the observation
PLANES_PER_POSITION = 13  # 12 pieces + "seen before"
OBS_PLANES = 7 + HISTORY_POSITIONS * PLANES_PER_POSITION  # 111


def _pz_plane(dx: int, dy: int, promo: int) -> int:
    """chess_utils.get_move_plane for a move of (dx files, dy ranks) seen from the mover,
    ``promo`` 1/2/3 for a knight/bishop/rook underpromotion (else 0)."""
    if abs(dx) + abs(dy) == 3 and 1 <= abs(dx) <= 2:  # knight: (x, y) in x-major order
        knights = [(x, y) for x in range(-2, 3) for y in range(-2, 3) if abs(x) + abs(y) == 3]
        return 56 + knights.index((dx, dy))
    if promo:
        return 64 + 3 * (dx + 1) + (promo - 1)
    directions = [(x, y) for x in (-1, 0, 1) for y in (-1, 0, 1) if (x, y) != (0, 0)]
    magnitude = max(abs(dx), abs(dy)) - 1
    return magnitude * 8 + directions.index((int(np.sign(dx)), int(np.sign(dy))))


@functools.cache
def label_tables() -> tuple[np.ndarray, np.ndarray]:
    """(native label -> PettingZoo label, PettingZoo label -> native label), int32, -1 where a
    label points off the board. Both number ``from_square * 73 + plane`` with the square as
    ``file * 8 + rank`` from the mover's side (ranks mirrored for black); only the planes'
    order differs (pgx: underpromotions, queen moves, knight moves; PettingZoo: queen moves,
    knight moves, underpromotions)."""
    nat_to_pz = np.full(NUM_ACTIONS, -1, np.int32)
    pz_to_nat = np.full(NUM_ACTIONS, -1, np.int32)
    for label in range(NUM_ACTIONS):
        frm, to, promo = label_to_move(label, False)
        if to < 0:
            continue
        dx, dy = to % 8 - frm % 8, to // 8 - frm // 8
        pz = ((frm % 8) * 8 + frm // 8) * 73 + _pz_plane(dx, dy, promo)
        nat_to_pz[label] = pz
        pz_to_nat[pz] = label
    return nat_to_pz, pz_to_nat


@functools.cache
def _kernels() -> tuple[Any, Any, Any]:
    from numba import njit

    U1 = core.U1
    ALL = np.uint64(0xFFFFFFFFFFFFFFFF)

    @njit(nogil=True)
    def set_moves(i, st, pzmask, nat_to_pz, value):
        for k in range(st.num_moves[i]):
            pzmask[i, nat_to_pz[st.moves[i, k] >> 16]] = value

    @njit(nogil=True)
    def push_history(i, st, hist, pzep):
        """Board i's position (white's view) becomes the newest of its 8 stacked positions."""
        for k in range(HISTORY_POSITIONS - 1, 0, -1):
            for p in range(PLANES_PER_POSITION):
                hist[i, k, p] = hist[i, k - 1, p]
        white, black = st.colors[i, 0], st.colors[i, 1]
        for p in range(6):
            hist[i, 0, p] = st.pieces[i, p] & white
            hist[i, 0, 6 + p] = st.pieces[i, p] & black
        hist[i, 0, 12] = ALL if st.repetitions[i] >= 2 else core.U0
        e = np.int64(pzep[i])
        if e >= 0:  # LeelaChessZero's flag: the pawn that just moved two squares, on rank 1/8
            if e < 32:
                hist[i, 0, 0] = (hist[i, 0, 0] & ~core.bit(e + 8)) | core.bit(e & 7)
            else:
                hist[i, 0, 6] = (hist[i, 0, 6] & ~core.bit(e - 8)) | core.bit(56 + (e & 7))

    @njit(nogil=True)
    def claimable(i, st):
        """python-chess's ``can_claim_draw()`` beyond what ``finish_ply`` ends: a legal move
        to a position seen twice since the last irreversible move, or, at half-move 99, a
        non-zeroing legal move after which the game goes on (uses row i + n as scratch)."""
        T = st.tables64
        s = i + st.turn.shape[0] // 2
        us = np.int64(st.turn[i])
        opp = st.colors[i, 1 - us]
        castling = np.int64(st.castling[i])
        key = st.key[i]
        length = np.int64(st.history_len[i])
        fifty = st.halfmove[i] >= 99
        reversible = st.ep[i] < 0  # a legal en-passant capture given up: nothing repeats
        for k in range(st.num_moves[i]):
            m = np.int64(st.moves[i, k])
            frm, to, kind = m & 63, (m >> 6) & 63, (m >> 12) & 15
            fb, tb = core.bit(frm), core.bit(to)
            zeroing = (st.pieces[i, core.PAWN_] & fb) != core.U0 or (opp & tb) != core.U0
            if zeroing:
                continue
            if fifty:
                core.copy_position(st, i, s)
                core.make_move(s, st, np.int32(m))
                if core.gen_moves(s, st) > 0:
                    return True
            if reversible and kind == core.NORMAL \
                    and (core.castling_touch(frm) | core.castling_touch(to)) & castling == 0:
                p = core.piece_at(i, st.pieces, fb)
                after = key ^ core.zkey(us, p, frm, T) ^ core.zkey(us, p, to, T) ^ T[Z_SIDE]
                count = 0
                j = length - 2  # the positions with the other side to move
                while j >= 0:
                    if st.history[i, j] == after:
                        count += 1
                    j -= 2
                if count >= 2:
                    return True
        return False

    @njit(nogil=True)
    def reset(i, st, hist, pzep, pzmask, nat_to_pz):
        """Board i := the starting position, no history, its legal moves in the mask."""
        set_moves(i, st, pzmask, nat_to_pz, 0)
        core.load_start(i, st)
        set_moves(i, st, pzmask, nat_to_pz, 1)
        for k in range(HISTORY_POSITIONS):
            for p in range(PLANES_PER_POSITION):
                hist[i, k, p] = core.U0
        pzep[i] = -1

    @njit(nogil=True)
    def step(i, st, hist, pzep, pzmask, nat_to_pz, pz_to_nat, action):
        """Play board i's legal PettingZoo ``action``; returns core's status (0 ongoing,
        CHECKMATE, a draw) or CLAIMED_DRAW."""
        set_moves(i, st, pzmask, nat_to_pz, 0)
        m = core.label_move(i, st, pz_to_nat[action])
        kind = (np.int64(m) >> 12) & 15
        pzep[i] = ((np.int64(m) & 63) + ((np.int64(m) >> 6) & 63)) >> 1 \
            if kind == core.DOUBLE_PUSH else -1
        status = np.int64(core.finish_ply(i, st, core.make_move(i, st, m)))
        set_moves(i, st, pzmask, nat_to_pz, 1)
        if status == 0 and claimable(i, st):
            status = CLAIMED_DRAW
        push_history(i, st, hist, pzep)
        return status

    @njit(nogil=True)
    def observe(i, st, hist, pzmask, player, selected):
        """chess_v6's ``observe``: the (8, 8, 111) bool planes from ``player``'s side (0 white,
        1 black: ranks mirrored, own pieces first) and the int8 mask (zeros unless
        ``selected``)."""
        obs = np.zeros((8, 8, OBS_PLANES), np.bool_)
        mask = pzmask[i].copy() if selected else np.zeros(NUM_ACTIONS, np.int8)
        castling = np.int64(st.castling[i])
        # the mirrored board's rights for black: black's become "white's"
        rights = ((castling >> 2) & 3) | ((castling & 3) << 2) if player else castling
        q = np.int64(st.halfmove[i]) // 2
        for r in range(8):
            for c in range(8):
                obs[r, c, 0] = (rights & core.WK) != 0
                obs[r, c, 1] = (rights & core.WQ) != 0
                obs[r, c, 2] = (rights & core.BK) != 0
                obs[r, c, 3] = (rights & core.BQ) != 0
                obs[r, c, 4] = player != 0
                obs[r, c, 6] = True
        obs[q // 8 if player else 7 - q // 8, q % 8, 5] = True
        S = st.tables32
        for k in range(HISTORY_POSITIONS):
            for p in range(PLANES_PER_POSITION):
                source = p
                if player and p < 12:
                    source = p + 6 if p < 6 else p - 6
                b = hist[i, k, source]
                plane = 7 + k * PLANES_PER_POSITION + p
                while b:
                    sq = core.lsb(b, S)
                    b &= b - U1
                    row = sq >> 3
                    obs[row if player else 7 - row, sq & 7, plane] = True
        return obs, mask

    return disk_cached(reset), disk_cached(step), disk_cached(observe)


class ChessBoards:
    """``n`` chess_v6 games on the native engine (row i; rows n..2n-1 are scratch)."""

    def __init__(self, n: int = 1) -> None:
        self.n = n
        columns = SPEC.allocate_state(2 * n)
        for name, values in _start_rows(parse_fen(STARTING_FEN), 2 * n).items():
            columns[name][...] = values
        assert set(START_COLUMNS) <= set(columns)
        self.state = SPEC.state_type(**columns)
        self.hist = np.zeros((n, HISTORY_POSITIONS, PLANES_PER_POSITION), np.uint64)
        self.pzep = np.full(n, -1, np.int8)
        self.mask = np.zeros((n, NUM_ACTIONS), np.int8)  # PettingZoo labels, legal = 1
        self.nat_to_pz, self.pz_to_nat = label_tables()
        self._reset, self._step, self._observe = _kernels()

    def __getstate__(self) -> dict[str, Any]:
        """What pickle keeps: every board's state columns and chess_v6's own (the shared tables
        and the compiled kernels are this process's, found again on load)."""
        return {"n": self.n, "state": {name: getattr(self.state, name) for name in SPEC.state},
                "hist": self.hist, "pzep": self.pzep, "mask": self.mask}

    def __setstate__(self, saved: dict[str, Any]) -> None:
        """The boards exactly as pickled (mid-game too)."""
        self.__init__(saved["n"])
        for name, values in saved["state"].items():
            getattr(self.state, name)[...] = values
        for name in ("hist", "pzep", "mask"):
            getattr(self, name)[...] = saved[name]

    def reset(self, i: int) -> None:
        """Board i := the starting position."""
        self._reset(i, self.state, self.hist, self.pzep, self.mask, self.nat_to_pz)

    def step(self, i: int, action: int) -> int:
        """Play the legal PettingZoo label ``action`` on board i; the game's status after it."""
        return self._step(i, self.state, self.hist, self.pzep, self.mask, self.nat_to_pz,
                          self.pz_to_nat, action)

    def observe(self, i: int, player: int, selected: bool) -> tuple[np.ndarray, np.ndarray]:
        """(planes, action mask) of board i as chess_v6 shows them to ``player``."""
        return self._observe(i, self.state, self.hist, self.mask, player, selected)
