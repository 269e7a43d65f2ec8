"""Lookup tables of the chess kernels, built once with NumPy and passed to kernels as arguments.

Squares are numbered as python-chess numbers them: ``a1 = 0, b1 = 1, ..., h8 = 63`` (rank * 8 +
file). Two flat arrays hold every table, at the offsets below (compile-time constants), so a
kernel takes two array arguments whatever it looks up (CUDA constant memory is 64 KiB: these
tables, ~80 KiB, live in global memory):

- ``T`` (uint64): attack sets, rays, between/line sets, Zobrist keys.
- ``S`` (int32): the de Bruijn bit-scan table and the AlphaZero (pgx) action-label tables.

Action labels are AlphaZero's 8x8x73 as pgx numbers them: ``label = from * 73 + plane`` with
``from = file * 8 + rank`` (pgx's square index) seen from the side to move (ranks mirrored for
black); planes 0-8 are underpromotions (``piece * 3 + direction``: piece rook, bishop, knight;
direction forward, file + 1, file - 1), planes 9-64 queen-like moves (8 directions x 7
distances), planes 65-72 knight moves. Queen promotions use the queen-move planes.
"""

from __future__ import annotations

import functools

import numpy as np

# --- offsets in T (uint64) -----------------------------------------------------------------
KNIGHT = 0  # 64: knight attacks from a square
KING = 64  # 64
PAWN = 128  # 2 x 64: PAWN + colour * 64 + sq = squares a pawn of that colour on sq attacks
RAYS = 256  # 8 x 64: RAYS + direction * 64 + sq (directions below)
ROOK_EMPTY = 768  # 64: rook attacks on an empty board
BISHOP_EMPTY = 832  # 64
BETWEEN = 896  # 64 x 64: squares strictly between two aligned squares (else 0)
LINE = 4992  # 64 x 64: the whole line through two aligned squares (else 0)
Z_PIECE = 9088  # 2 x 6 x 64: Zobrist keys, Z_PIECE + (colour * 6 + piece) * 64 + sq
Z_CASTLE = 9856  # 16: by castling-rights bits
Z_EP = 9872  # 8: by en-passant file
Z_SIDE = 9880  # 1: black to move
T_SIZE = 9881

# --- offsets in S (int32) ------------------------------------------------------------------
DEBRUIJN = 0  # 64
PLANE = 64  # 64 x 64: plane of a queen/knight move from -> to (white's view), -1 if none
PGX_SQ = 4160  # 64: our square -> pgx's square index (file * 8 + rank)
S_SIZE = 4224

DEBRUIJN_MAGIC = 0x03F79D71B4CB0A89
#: ray directions (rank step, file step): 0-3 increase the square index (first blocker = lowest
#: set bit), 4-7 decrease it (first blocker = highest set bit)
DIRECTIONS = ((1, 0), (0, 1), (1, 1), (1, -1), (-1, 0), (0, -1), (-1, -1), (-1, 1))
ROOK_DIRECTIONS = (0, 1, 4, 5)
BISHOP_DIRECTIONS = (2, 3, 6, 7)
KNIGHT_STEPS = ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2))
KING_STEPS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))

NUM_ACTIONS = 64 * 73


def _on_board(rank: int, file: int) -> bool:
    return 0 <= rank < 8 and 0 <= file < 8


def _steps(sq: int, steps: tuple) -> int:
    rank, file = divmod(sq, 8)
    bb = 0
    for dr, df in steps:
        if _on_board(rank + dr, file + df):
            bb |= 1 << ((rank + dr) * 8 + file + df)
    return bb


def _ray(sq: int, direction: int) -> list[int]:
    dr, df = DIRECTIONS[direction]
    rank, file = divmod(sq, 8)
    out = []
    rank, file = rank + dr, file + df
    while _on_board(rank, file):
        out.append(rank * 8 + file)
        rank, file = rank + dr, file + df
    return out


def _mask(squares: list[int]) -> int:
    bb = 0
    for s in squares:
        bb |= 1 << s
    return bb


@functools.cache
def pgx_planes() -> np.ndarray:
    """(64 from, 64 to) -> pgx plane of the queen or knight move (white's view), else -1.

    pgx's queen planes 9..64 are 8 blocks of 7: down (distance 7..1), up (1..7), left
    (file -7..-1), right (1..7), down-left (7..1), up-right (1..7), up-left (7..1), down-right
    (1..7); knight planes 65..72 are (rank, file) steps (-1,-2), (+1,-2), (-2,-1), (+2,-1),
    (-1,+2), (+1,+2), (-2,+1), (+2,+1).
    """
    seq = list(range(1, 8))
    dr = [-x for x in seq[::-1]] + seq + [0] * 7 + [0] * 7
    dc = [0] * 7 + [0] * 7 + [-x for x in seq[::-1]] + seq
    dr += [-x for x in seq[::-1]] + seq + seq[::-1] + [-x for x in seq]
    dc += [-x for x in seq[::-1]] + seq + [-x for x in seq[::-1]] + seq
    dr += [-1, 1, -2, 2, -1, 1, -2, 2]
    dc += [-2, -2, -1, -1, 2, 2, 1, 1]
    table = -np.ones((64, 64), dtype=np.int32)
    for frm in range(64):
        rank, file = divmod(frm, 8)
        for k in range(64):
            r, f = rank + dr[k], file + dc[k]
            if _on_board(r, f):
                table[frm, r * 8 + f] = 9 + k
    return table


@functools.cache
def build_tables() -> tuple[np.ndarray, np.ndarray]:
    """(T, S): every table the kernels use (built once per process, shared by all engines)."""
    T = np.zeros(T_SIZE, dtype=np.uint64)
    S = np.zeros(S_SIZE, dtype=np.int32)
    for sq in range(64):
        T[KNIGHT + sq] = _steps(sq, KNIGHT_STEPS)
        T[KING + sq] = _steps(sq, KING_STEPS)
        T[PAWN + sq] = _steps(sq, ((1, -1), (1, 1)))
        T[PAWN + 64 + sq] = _steps(sq, ((-1, -1), (-1, 1)))
        for d in range(8):
            T[RAYS + d * 64 + sq] = _mask(_ray(sq, d))
        T[ROOK_EMPTY + sq] = _mask([s for d in ROOK_DIRECTIONS for s in _ray(sq, d)])
        T[BISHOP_EMPTY + sq] = _mask([s for d in BISHOP_DIRECTIONS for s in _ray(sq, d)])
        for d in range(8):
            ray = _ray(sq, d)
            back = _ray(sq, (d + 4) % 8)
            for k, to in enumerate(ray):
                T[BETWEEN + sq * 64 + to] = _mask(ray[:k])
                T[LINE + sq * 64 + to] = _mask(ray + back + [sq])
    rng = np.random.Generator(np.random.PCG64(20240607))
    keys = rng.integers(0, 2**63, size=768 + 16 + 8 + 1, dtype=np.int64).astype(np.uint64)
    keys |= rng.integers(0, 2, size=keys.size, dtype=np.int64).astype(np.uint64) << np.uint64(63)
    T[Z_PIECE:Z_PIECE + 768] = keys[:768]
    T[Z_CASTLE + 1:Z_CASTLE + 16] = keys[768 + 1:768 + 16]  # no rights: key 0
    T[Z_EP:Z_EP + 8] = keys[784:792]
    T[Z_SIDE] = keys[792]
    for k in range(64):
        S[DEBRUIJN + (((1 << k) * DEBRUIJN_MAGIC) & (2**64 - 1)) >> 58] = k
    S[PLANE:PLANE + 4096] = pgx_planes().ravel()
    for sq in range(64):
        rank, file = divmod(sq, 8)
        S[PGX_SQ + sq] = file * 8 + rank
    return T, S


def label_to_move(label: int, black: bool) -> tuple[int, int, int]:
    """(from, to, underpromotion piece index 1..3 for knight/bishop/rook, else 0) of a label in
    absolute squares, or to = -1 when the label points off the board."""
    pgx_from, plane = divmod(label, 73)
    file, rank = divmod(pgx_from, 8)
    frm = rank * 8 + file
    promo = 0
    if plane < 9:
        piece, direction = divmod(plane, 3)
        df = (0, 1, -1)[direction]
        r, f = rank + 1, file + df
        promo = (3, 2, 1)[piece]  # rook, bishop, knight -> piece index R=3, B=2, N=1
        to = r * 8 + f if _on_board(r, f) else -1
    else:
        where = np.nonzero(pgx_planes()[frm] == plane)[0]
        to = int(where[0]) if where.size else -1
    if black:
        frm ^= 56
        to = to ^ 56 if to >= 0 else -1
    return frm, to, promo


def move_to_label(frm: int, to: int, promo: int, black: bool) -> int:
    """The label of the move from -> to (absolute squares) promoting to piece index ``promo``
    (0 none or queen, 1 knight, 2 bishop, 3 rook), or -1 if no label describes it."""
    if black:
        frm, to = frm ^ 56, to ^ 56
    rank, file = divmod(frm, 8)
    if promo in (1, 2, 3):
        dr, df = to // 8 - rank, to % 8 - file
        if dr != 1 or df not in (0, 1, -1):
            return -1
        plane = {3: 0, 2: 1, 1: 2}[promo] * 3 + (0, 1, 2)[(0, 1, -1).index(df)]
    else:
        plane = int(pgx_planes()[frm, to])
        if plane < 0:
            return -1
    return (file * 8 + rank) * 73 + plane
