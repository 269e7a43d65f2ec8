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

NUM_ACTIONS = 64 * 73

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
ROOK_MASK = 9881  # 64: relevant occupancy of a rook on sq (edges excluded)
BISHOP_MASK = 9945  # 64
ROOK_MAGIC = 10009  # 64: "fancy" magic multipliers (found by scripts at build time, below)
BISHOP_MAGIC = 10073  # 64
ROOK_ATTACKS = 10137  # 102400: rook attack sets, ROOK_ATTACKS + offset[sq] + magic index
BISHOP_ATTACKS = ROOK_ATTACKS + 102400  # 5248
T_SIZE = BISHOP_ATTACKS + 5248

# --- offsets in S (int32) ------------------------------------------------------------------
DEBRUIJN = 0  # 64
PLANE = 64  # 64 x 64: plane of a queen/knight move from -> to (white's view), -1 if none
PGX_SQ = 4160  # 64: our square -> pgx's square index (file * 8 + rank)
ROOK_OFFSET = 4224  # 64: where square sq's rook attacks start (relative to ROOK_ATTACKS)
BISHOP_OFFSET = 4288  # 64
ROOK_SHIFT = 4352  # 64: 64 - number of relevant occupancy bits
BISHOP_SHIFT = 4416  # 64
#: 2 x 64 x 64: WORD + colour * 4096 + from * 64 + to = the move word of a plain (queen-like or
#: knight) move of the side ``colour`` from -> to, label included (``core.py``'s words; 0
#: where no label describes the move): one lookup per generated move
WORD = 4480
#: 2 x 4672: LABEL_WORD + colour * 4672 + label = that action's move word for the side
#: ``colour`` with the kind an underpromotion label names, else kind 0 (the position decides
#: double push, en passant, castling, queen promotion: ``core.label_move``); 0 off the board
LABEL_WORD = WORD + 8192
S_SIZE = LABEL_WORD + 2 * NUM_ACTIONS

DEBRUIJN_MAGIC = 0x03F79D71B4CB0A89
#: ray directions (rank step, file step): 0-3 increase the square index (first blocker = lowest
#: set bit), 4-7 decrease it (first blocker = highest set bit)
DIRECTIONS = ((1, 0), (0, 1), (1, 1), (1, -1), (-1, 0), (0, -1), (-1, -1), (-1, 1))
ROOK_DIRECTIONS = (0, 1, 4, 5)
BISHOP_DIRECTIONS = (2, 3, 6, 7)
KNIGHT_STEPS = ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2))
KING_STEPS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))

# Magic multipliers (one per square): (occupancy & mask) * magic >> shift indexes the square's
# attack table without collisions. Found by a random sparse search, checked in build_tables.
ROOK_MAGICS = (
    0x9080001184204004, 0x1040002000461000, 0x02000A4011208200, 0x0100100020184500,
    0x0500100408010002, 0x8280218004000200, 0x1400092090080402, 0x0080104100012080,
    0x000080008260C000, 0x8010400040201008, 0x0400802000B00080, 0x306A004A00604030,
    0x0829001008001501, 0x0906000430160108, 0x1021003100020004, 0x4020800040800300,
    0x0200218002400082, 0x885041C004201004, 0x8000410020010010, 0x2001010008900024,
    0x0028010004190070, 0x0402008006140080, 0x000C040010010A08, 0x0000020018408504,
    0xC014401080038420, 0x2A40008080402000, 0x0000110100600040, 0x1204100100082500,
    0x0001000500080210, 0x0106120080040080, 0x2001000900040200, 0x0000028200006104,
    0x1400C00024800580, 0x8002400901002080, 0x3000802000801006, 0x0808003000800A80,
    0x8004180101000510, 0x0000040080801200, 0x1002820554001008, 0x0000800444802100,
    0x1080004A2000400C, 0x0000500720024001, 0x0000200151010040, 0x0000100008008080,
    0x0604001008010100, 0x002200800400800A, 0x00001A0001008080, 0x400A040044820003,
    0x1300800640003080, 0x082040006F0C8100, 0x0200104102200B00, 0x0400089000210100,
    0x0034008084880180, 0x10002A0004008080, 0x00FA000445080A00, 0x00010400C1008200,
    0x008601A010410082, 0x0003020030A04086, 0x0040081141026001, 0x100C882010010501,
    0x4101001014020801, 0x8201000204000809, 0x0015000C108A0001, 0x0050008C030040A2,
)
BISHOP_MAGICS = (
    0x0008010804840080, 0x00040404104E0820, 0x0088408106003800, 0xE204404084020940,
    0x0081104012104040, 0x440C242008200820, 0x0043849018220900, 0x0002024414040200,
    0x1402501009A80880, 0xA000280104240040, 0x0401040404024510, 0x8000244040802080,
    0x2000041044080180, 0x0009020310090100, 0x0401888404202500, 0x0800290088040200,
    0x0040024428A24410, 0x901000084D480082, 0x000D110800440180, 0x0004800802004020,
    0x0014000A80A08050, 0x108E000288041202, 0x0A14002042480480, 0x8468300044020801,
    0x1804400804500C23, 0x081210000A100200, 0x000C040102003400, 0x0004004044010022,
    0x0001004004004144, 0x2A00410202010901, 0x2044014840880400, 0x0440A2004A210420,
    0x0004028809421010, 0x0144052000244C24, 0x2A00104410080803, 0x0080020084080080,
    0x00400100100102C0, 0x0029220200008800, 0x000C008200118800, 0x4200820140188400,
    0x0004021842082400, 0x0094048A08801004, 0x4000086090000804, 0x4810804208021080,
    0x0100C04812000040, 0x4C20200046806141, 0x01100208010200C4, 0x4202208511082200,
    0x0000861026A00040, 0x424081480E100960, 0x0000010080900004, 0x0100004184044080,
    0x00C8009803040001, 0x2040208410008800, 0x00C0048801810248, 0x0250020809106003,
    0x0083E10808090842, 0x0010010080842000, 0x1002540101080901, 0x140E404400420212,
    0x80002C00600A4400, 0x0020002020060A20, 0x01280404048C0401, 0x001A081001020025,
)


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
    _magic_tables(T, S)
    S[PLANE:PLANE + 4096] = pgx_planes().ravel()
    for sq in range(64):
        rank, file = divmod(sq, 8)
        S[PGX_SQ + sq] = file * 8 + rank
    S[WORD:WORD + 8192] = move_words().ravel()
    S[LABEL_WORD:LABEL_WORD + 2 * NUM_ACTIONS] = label_words().ravel()
    return T, S


def move_words() -> np.ndarray:
    """(colour, from, to) -> ``from | to << 6 | label << 16`` of a plain move (kind 0), the
    label seen from that colour's side (ranks mirrored for black); 0 where no label fits."""
    planes = pgx_planes()
    words = np.zeros((2, 64, 64), dtype=np.int32)
    for colour, flip in ((0, 0), (1, 56)):
        for frm in range(64):
            for to in range(64):
                f, t = frm ^ flip, to ^ flip
                if planes[f, t] >= 0:
                    rank, file = divmod(f, 8)
                    label = (file * 8 + rank) * 73 + int(planes[f, t])
                    words[colour, frm, to] = frm | to << 6 | label << 16
    return words


def label_words() -> np.ndarray:
    """(colour, label) -> ``from | to << 6 | kind << 12 | label << 16`` with kind 4-6 for an
    underpromotion label (knight, bishop, rook), else 0; 0 where the label leaves the board."""
    words = np.zeros((2, NUM_ACTIONS), dtype=np.int32)
    plain = move_words().reshape(2, 4096)  # queen-like and knight labels
    for colour in (0, 1):
        w = plain[colour][plain[colour] != 0]
        words[colour, w >> 16] = w
        for pgx_from in range(64):  # underpromotion planes 0-8
            for plane in range(9):
                label = pgx_from * 73 + plane
                frm, to, promo = label_to_move(label, colour == 1)
                if to >= 0:
                    words[colour, label] = frm | to << 6 | (3 + promo) << 12 | label << 16
    return words


def _relevant_mask(sq: int, directions: tuple[int, ...]) -> int:
    """The squares whose occupancy changes a slider's attacks (each ray without its last)."""
    return _mask([s for d in directions for s in _ray(sq, d)[:-1]])


def _subsets(mask: int) -> np.ndarray:
    out = [0]
    s = (0 - mask) & mask
    while s:
        out.append(s)
        s = (s - mask) & mask
    return np.array(out, dtype=np.uint64)


def _slider_attacks(T: np.ndarray, sq: int, occ: np.ndarray,
                    directions: tuple[int, ...]) -> np.ndarray:
    """Attack sets of a slider on sq for every occupancy in ``occ`` (vectorised ray method)."""
    one = np.uint64(1)
    out = np.zeros_like(occ)
    for d in directions:
        ray = T[RAYS + d * 64 + sq]
        blockers = occ & ray
        if d < 4:  # lowest blocker
            first = blockers & (~blockers + one)
        else:  # highest blocker: smear right, keep the top bit
            b = blockers.copy()
            for k in (1, 2, 4, 8, 16, 32):
                b |= b >> np.uint64(k)
            first = b ^ (b >> one)
        index = np.log2(np.where(first == 0, 1, first).astype(np.float64)).astype(np.int64)
        behind = T[RAYS + d * 64 + index]
        out |= np.where(blockers == 0, ray, ray ^ behind)
    return out


def _magic_tables(T: np.ndarray, S: np.ndarray) -> None:
    """Fill the magic-bitboard masks, multipliers, offsets and attack tables."""
    for kind, directions, magics, mask_at, magic_at, attacks_at, offset_at, shift_at in (
        ("rook", ROOK_DIRECTIONS, ROOK_MAGICS, ROOK_MASK, ROOK_MAGIC, ROOK_ATTACKS,
         ROOK_OFFSET, ROOK_SHIFT),
        ("bishop", BISHOP_DIRECTIONS, BISHOP_MAGICS, BISHOP_MASK, BISHOP_MAGIC,
         BISHOP_ATTACKS, BISHOP_OFFSET, BISHOP_SHIFT),
    ):
        offset = 0
        for sq in range(64):
            mask = _relevant_mask(sq, directions)
            bits = bin(mask).count("1")
            occ = _subsets(mask)
            attacks = _slider_attacks(T, sq, occ, directions)
            with np.errstate(over="ignore"):
                index = ((occ * np.uint64(magics[sq])) >> np.uint64(64 - bits)).astype(np.int64)
            table = np.zeros(1 << bits, dtype=np.uint64)
            table[index] = attacks
            if not np.array_equal(table[index], attacks):  # a collision: a wrong magic
                raise AssertionError(f"bad {kind} magic for square {sq}")
            T[mask_at + sq] = mask
            T[magic_at + sq] = magics[sq]
            T[attacks_at + offset:attacks_at + offset + (1 << bits)] = table
            S[offset_at + sq] = offset
            S[shift_at + sq] = 64 - bits
            offset += 1 << bits


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
