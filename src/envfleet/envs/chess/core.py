"""The chess engine as scalar kernel code: bitboards, legal moves, moves, game-end rules.

Every function works on board ``i``'s row of the state (a NamedTuple of per-board arrays, see
``env.STATE``) and on the two flat tables ``T`` / ``S`` (``tables.py``), allocates nothing,
never recurses and compiles for numba CPU and CUDA alike (``kernel_function``). Bitboards are
uint64 with bit ``sq`` for square ``sq`` (a1 = 0, h8 = 63); every operand of a bitboard
expression is uint64 (numba turns uint64 op int64 into float64).

Moves are int32: ``from | to << 6 | kind << 12 | label << 16`` (label: the AlphaZero action).
"""

from __future__ import annotations

import numpy as np

from envfleet.envs.chess.tables import (
    BETWEEN,
    BISHOP_ATTACKS,
    BISHOP_EMPTY,
    BISHOP_MAGIC,
    BISHOP_MASK,
    BISHOP_OFFSET,
    BISHOP_SHIFT,
    DEBRUIJN,
    KING,
    KNIGHT,
    LABEL_WORD,
    LINE,
    PAWN,
    PGX_SQ,
    PLANE,
    RAYS,
    ROOK_ATTACKS,
    ROOK_EMPTY,
    ROOK_MAGIC,
    ROOK_MASK,
    ROOK_OFFSET,
    ROOK_SHIFT,
    WORD,
    Z_CASTLE,
    Z_EP,
    Z_PIECE,
    Z_SIDE,
)
from envfleet.kernels import kernel_function, random_u64

PAWN_, KNIGHT_, BISHOP_, ROOK_, QUEEN_, KING_ = 0, 1, 2, 3, 4, 5
WHITE, BLACK = 0, 1
# move kinds
NORMAL, DOUBLE_PUSH, EN_PASSANT, CASTLE, PROMO_N, PROMO_B, PROMO_R, PROMO_Q = range(8)
# castling-rights bits
WK, WQ, BK, BQ = 1, 2, 4, 8
# game status after a ply (``status`` column)
ONGOING, CHECKMATE, STALEMATE, INSUFFICIENT, FIFTY_MOVES, THREEFOLD, ILLEGAL_MOVE = range(7)

MAX_MOVES = 256  # the most legal moves of any chess position is 218
HISTORY = 104  # positions since the last irreversible move: at most 101 (fifty-move rule)
NUM_ACTIONS = 4672

U0 = np.uint64(0)
U1 = np.uint64(1)
_DB = np.uint64(0x03F79D71B4CB0A89)
_S58 = np.uint64(58)
_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_LIGHT = np.uint64(0x55AA55AA55AA55AA)
_DARK = np.uint64(0xAA55AA55AA55AA55)
_U2, _U4, _U8, _U16, _U32, _U56 = (np.uint64(k) for k in (2, 4, 8, 16, 32, 56))


# --- bit twiddling ---------------------------------------------------------------------------


@kernel_function
def bit(sq):
    return U1 << np.uint64(sq)


@kernel_function
def lsb(b, S):
    """Index of the lowest set bit of b (b != 0), by de Bruijn multiplication."""
    return np.int64(S[DEBRUIJN + np.int64(((b & (~b + U1)) * _DB) >> _S58)])


@kernel_function
def msb(b, S):
    """Index of the highest set bit of b (b != 0)."""
    b |= b >> U1
    b |= b >> _U2
    b |= b >> _U4
    b |= b >> _U8
    b |= b >> _U16
    b |= b >> _U32
    return np.int64(S[DEBRUIJN + np.int64(((b ^ (b >> U1)) * _DB) >> _S58)])


@kernel_function
def popcount(b):
    b = b - ((b >> U1) & _M1)
    b = (b & _M2) + ((b >> _U2) & _M2)
    b = (b + (b >> _U4)) & _M4
    return np.int64((b * _H01) >> _U56)


# --- attacks ---------------------------------------------------------------------------------


@kernel_function
def ray_attacks(sq, occ, d, T, S):
    r = T[RAYS + d * 64 + sq]
    b = r & occ
    if b:
        s = lsb(b, S) if d < 4 else msb(b, S)
        r ^= T[RAYS + d * 64 + s]
    return r


@kernel_function
def rook_attacks(sq, occ, T, S):
    """Rook attacks from sq given the occupancy (magic bitboards)."""
    index = ((occ & T[ROOK_MASK + sq]) * T[ROOK_MAGIC + sq]) >> np.uint64(S[ROOK_SHIFT + sq])
    return T[ROOK_ATTACKS + S[ROOK_OFFSET + sq] + np.int64(index)]


@kernel_function
def bishop_attacks(sq, occ, T, S):
    index = ((occ & T[BISHOP_MASK + sq]) * T[BISHOP_MAGIC + sq]) >> np.uint64(
        S[BISHOP_SHIFT + sq])
    return T[BISHOP_ATTACKS + S[BISHOP_OFFSET + sq] + np.int64(index)]


@kernel_function
def attackers(i, pieces, sq, us, occ, opp, T, S):
    """Pieces in ``opp`` that attack ``sq`` (the square of side ``us``) given occupancy occ."""
    a = T[KNIGHT + sq] & pieces[i, KNIGHT_]
    a |= T[PAWN + us * 64 + sq] & pieces[i, PAWN_]
    a |= T[KING + sq] & pieces[i, KING_]
    rq = (pieces[i, ROOK_] | pieces[i, QUEEN_]) & opp
    if rq & T[ROOK_EMPTY + sq]:
        a |= rook_attacks(sq, occ, T, S) & rq
    bq = (pieces[i, BISHOP_] | pieces[i, QUEEN_]) & opp
    if bq & T[BISHOP_EMPTY + sq]:
        a |= bishop_attacks(sq, occ, T, S) & bq
    return a & opp


@kernel_function
def attacked(i, pieces, sq, us, occ, opp, T, S):
    """Whether a piece in ``opp`` attacks ``sq`` (early exits: the common case is 'no')."""
    if T[KNIGHT + sq] & pieces[i, KNIGHT_] & opp:
        return True
    if T[PAWN + us * 64 + sq] & pieces[i, PAWN_] & opp:
        return True
    if T[KING + sq] & pieces[i, KING_] & opp:
        return True
    rq = (pieces[i, ROOK_] | pieces[i, QUEEN_]) & opp
    if rq & T[ROOK_EMPTY + sq] and rook_attacks(sq, occ, T, S) & rq:
        return True
    bq = (pieces[i, BISHOP_] | pieces[i, QUEEN_]) & opp
    return bool(bq & T[BISHOP_EMPTY + sq]) and bool(bishop_attacks(sq, occ, T, S) & bq)


_NOT_A = np.uint64(0xFEFEFEFEFEFEFEFE)
_NOT_H = np.uint64(0x7F7F7F7F7F7F7F7F)
_U7, _U9 = np.uint64(7), np.uint64(9)


@kernel_function
def enemy_attacks(i, pieces, them, occ, opp, T, S):
    """Every square the pieces in ``opp`` (side ``them``) attack, given occupancy occ."""
    p = pieces[i, PAWN_] & opp
    if them == WHITE:
        a = ((p & _NOT_H) << _U9) | ((p & _NOT_A) << _U7)
    else:
        a = ((p & _NOT_A) >> _U9) | ((p & _NOT_H) >> _U7)
    a |= T[KING + lsb(pieces[i, KING_] & opp, S)]
    b = pieces[i, KNIGHT_] & opp
    while b:
        a |= T[KNIGHT + lsb(b, S)]
        b &= b - U1
    b = (pieces[i, BISHOP_] | pieces[i, QUEEN_]) & opp
    while b:
        a |= bishop_attacks(lsb(b, S), occ, T, S)
        b &= b - U1
    b = (pieces[i, ROOK_] | pieces[i, QUEEN_]) & opp
    while b:
        a |= rook_attacks(lsb(b, S), occ, T, S)
        b &= b - U1
    return a


@kernel_function
def in_check(i, st):
    T, S = st.tables64, st.tables32
    us = np.int64(st.turn[i])
    own = st.colors[i, us]
    opp = st.colors[i, 1 - us]
    ksq = lsb(st.pieces[i, KING_] & own, S)
    return attacked(i, st.pieces, ksq, us, own | opp, opp, T, S)


# --- legal move generation -----------------------------------------------------------------


@kernel_function
def encode(frm, to, kind, flip, S):
    """The move word, label included (the label is seen from the side to move)."""
    f = frm ^ flip
    t = to ^ flip
    if PROMO_N <= kind <= PROMO_R:
        df = (t & 7) - (f & 7)
        direction = 0 if df == 0 else (1 if df == 1 else 2)
        plane = (PROMO_R - kind) * 3 + direction
    else:
        plane = S[PLANE + f * 64 + t]
    label = S[PGX_SQ + f] * 73 + plane
    return np.int32(frm | (to << 6) | (kind << 12) | (label << 16))


@kernel_function
def add_targets(moves, i, n, frm, targets, words, S):
    """Plain moves from ``frm`` to each square of ``targets`` (``words``: ``WORD`` + the side to
    move's table, one lookup a move)."""
    base = words + frm * 64
    while targets:
        moves[i, n] = S[base + lsb(targets, S)]
        targets &= targets - U1
        n += 1
    return n


@kernel_function
def add_pawn_moves(moves, i, n, targets, delta, kind, words, flip, S):
    """Pawn moves to each square of ``targets`` from ``to - delta``; moves onto the last rank
    are four promotions (queen first)."""
    while targets:
        to = lsb(targets, S)
        targets &= targets - U1
        frm = to - delta
        if to >= 56 or to < 8:
            moves[i, n] = S[words + frm * 64 + to] | np.int32(PROMO_Q << 12)
            moves[i, n + 1] = encode(frm, to, PROMO_N, flip, S)
            moves[i, n + 2] = encode(frm, to, PROMO_B, flip, S)
            moves[i, n + 3] = encode(frm, to, PROMO_R, flip, S)
            n += 4
        else:
            moves[i, n] = S[words + frm * 64 + to] | np.int32(kind << 12)
            n += 1
    return n


_RANK3 = np.uint64(0x0000000000FF0000)
_RANK6 = np.uint64(0x0000FF0000000000)


@kernel_function
def gen_moves(i, st):
    """Board i's legal moves into ``moves[i]``; returns (and stores) their number. Clears the
    en-passant square when no legal en-passant capture exists (python-chess's FEN rule)."""
    found = legal_moves(i, st.pieces, st.colors, np.int64(st.turn[i]),
                        np.int64(st.castling[i]), np.int64(st.ep[i]), st.moves, st.tables64,
                        st.tables32)
    n = found >> 1
    if not found & 1:
        st.ep[i] = -1
    st.num_moves[i] = n
    return n


@kernel_function
def legal_moves(i, pieces, colors, us, castling, ep, moves, T, S):
    """Board i's legal moves into ``moves[i]``; returns their number * 2 + whether a legal
    en-passant capture exists. Takes the few columns it reads, not the state: a call passes
    every field of every array it is given (the whole state is ~200 arguments).

    Legality without making moves: a check mask (``evasion``) and pin lines computed once per
    position; king steps avoid the opponent's attack map; unpinned pawns move set-wise (shifts
    of the whole pawn bitboard); en passant alone is simulated (it can uncover a rank pin)."""
    them = 1 - us
    own = colors[i, us]
    opp = colors[i, them]
    occ = own | opp
    flip = 56 if us == BLACK else 0
    words = WORD + us * 4096
    ksq = lsb(pieces[i, KING_] & own, S)
    kb = bit(ksq)
    n = 0
    # king steps: not onto a square the opponent attacks, with the king's own square vacated
    # (sliders see through it): one map of the opponent's attacks
    danger = enemy_attacks(i, pieces, them, occ ^ kb, opp, T, S)
    n = add_targets(moves, i, n, ksq, T[KING + ksq] & ~own & ~danger, words, S)
    checkers = attackers(i, pieces, ksq, us, occ, opp, T, S)
    if checkers & (checkers - U1):  # double check: king moves only
        return 2 * n
    evasion = ~U0
    if checkers:
        evasion = T[BETWEEN + ksq * 64 + lsb(checkers, S)] | checkers
    # pinned pieces: own pieces alone between the king and an enemy slider
    pinned = U0
    snipers = ((T[ROOK_EMPTY + ksq] & (pieces[i, ROOK_] | pieces[i, QUEEN_]))
               | (T[BISHOP_EMPTY + ksq] & (pieces[i, BISHOP_] | pieces[i, QUEEN_]))) & opp
    while snipers:
        s = lsb(snipers, S)
        snipers &= snipers - U1
        b = T[BETWEEN + ksq * 64 + s] & occ
        if b and not (b & (b - U1)):
            pinned |= b & own
    targets = ~own & evasion
    # knights (a pinned knight never moves)
    b = pieces[i, KNIGHT_] & own & ~pinned
    while b:
        frm = lsb(b, S)
        b &= b - U1
        n = add_targets(moves, i, n, frm, T[KNIGHT + frm] & targets, words, S)
    # sliders
    b = (pieces[i, BISHOP_] | pieces[i, QUEEN_]) & own
    while b:
        frm = lsb(b, S)
        b &= b - U1
        t = bishop_attacks(frm, occ, T, S) & targets
        if pinned & bit(frm):
            t &= T[LINE + ksq * 64 + frm]
        n = add_targets(moves, i, n, frm, t, words, S)
    b = (pieces[i, ROOK_] | pieces[i, QUEEN_]) & own
    while b:
        frm = lsb(b, S)
        b &= b - U1
        t = rook_attacks(frm, occ, T, S) & targets
        if pinned & bit(frm):
            t &= T[LINE + ksq * 64 + frm]
        n = add_targets(moves, i, n, frm, t, words, S)
    # pawns: the unpinned ones set-wise; from = to - delta
    pawns = pieces[i, PAWN_] & own
    free = pawns & ~pinned
    empty = ~occ
    if us == WHITE:
        step = 8
        one = (free << _U8) & empty
        two = ((one & _RANK3) << _U8) & empty & evasion
        left = ((free & _NOT_A) << _U7) & opp & evasion
        right = ((free & _NOT_H) << _U9) & opp & evasion
        dl, dr = 7, 9
    else:
        step = -8
        one = (free >> _U8) & empty
        two = ((one & _RANK6) >> _U8) & empty & evasion
        left = ((free & _NOT_A) >> _U9) & opp & evasion
        right = ((free & _NOT_H) >> _U7) & opp & evasion
        dl, dr = -9, -7
    n = add_pawn_moves(moves, i, n, one & evasion, step, NORMAL, words, flip, S)
    n = add_pawn_moves(moves, i, n, two, 2 * step, DOUBLE_PUSH, words, flip, S)
    n = add_pawn_moves(moves, i, n, left, dl, NORMAL, words, flip, S)
    n = add_pawn_moves(moves, i, n, right, dr, NORMAL, words, flip, S)
    b = pawns & pinned  # pinned pawns: along the pin line only
    while b:
        frm = lsb(b, S)
        b &= b - U1
        allowed = evasion & T[LINE + ksq * 64 + frm]
        to = frm + step
        if not (occ & bit(to)):
            if allowed & bit(to):
                n = add_pawn_moves(moves, i, n, bit(to), step, NORMAL, words, flip, S)
            rank = frm >> 3
            if (rank == 1 and us == WHITE) or (rank == 6 and us == BLACK):
                to2 = to + step
                if not (occ & bit(to2)) and allowed & bit(to2):
                    moves[i, n] = S[words + frm * 64 + to2] | np.int32(DOUBLE_PUSH << 12)
                    n += 1
        t = T[PAWN + us * 64 + frm] & opp & allowed
        while t:
            to = lsb(t, S)
            t &= t - U1
            n = add_pawn_moves(moves, i, n, bit(to), to - frm, NORMAL, words, flip, S)
    ep_legal = False
    if ep >= 0:  # simulate: the capturing pawn moves, the captured pawn leaves its square
        b = T[PAWN + them * 64 + ep] & pawns
        cap = bit(ep - step)
        while b:
            frm = lsb(b, S)
            b &= b - U1
            occ2 = (occ ^ bit(frm) ^ cap) | bit(ep)
            if not attacked(i, pieces, ksq, us, occ2, opp ^ cap, T, S):
                moves[i, n] = S[words + frm * 64 + ep] | np.int32(EN_PASSANT << 12)
                n += 1
                ep_legal = True
    # castling: not out of, through or into check
    if not checkers:
        rights = castling
        if us == BLACK:
            rights >>= 2
        base = 56 if us == BLACK else 0
        if (rights & WK and not (occ & (bit(base + 5) | bit(base + 6)))
                and not (danger & (bit(base + 5) | bit(base + 6)))):
            moves[i, n] = S[words + ksq * 64 + base + 6] | np.int32(CASTLE << 12)
            n += 1
        if (rights & WQ and not (occ & (bit(base + 1) | bit(base + 2) | bit(base + 3)))
                and not (danger & (bit(base + 3) | bit(base + 2)))):
            moves[i, n] = S[words + ksq * 64 + base + 2] | np.int32(CASTLE << 12)
            n += 1
    return 2 * n + (1 if ep_legal else 0)


# --- making moves ----------------------------------------------------------------------------


@kernel_function
def piece_at(i, pieces, b):
    for p in range(6):
        if pieces[i, p] & b:
            return p
    return -1


@kernel_function
def castling_touch(sq):
    """Castling rights lost when a move starts or ends on ``sq``."""
    if sq == 0:
        return WQ
    if sq == 4:
        return WK | WQ
    if sq == 7:
        return WK
    if sq == 56:
        return BQ
    if sq == 60:
        return BK | BQ
    if sq == 63:
        return BK
    return 0


@kernel_function
def zkey(colour, piece, sq, T):
    return T[Z_PIECE + (colour * 6 + piece) * 64 + sq]


@kernel_function
def make_move(i, st, m):
    """Play move word ``m`` on board i (no legality check). Returns whether the move is
    irreversible as python-chess defines it (pawn move, capture, castling rights lost, or a
    legal en-passant capture given up). The en-passant part of the key is added by
    ``finish_ply`` once the new position's legal moves are known."""
    T = st.tables64
    pieces, colors = st.pieces, st.colors
    frm = m & 63
    to = (m >> 6) & 63
    kind = (m >> 12) & 15
    us = np.int64(st.turn[i])
    them = 1 - us
    fb = bit(frm)
    tb = bit(to)
    p = piece_at(i, pieces, fb)
    key = st.key[i]
    old_ep = np.int64(st.ep[i])
    zeroing = p == PAWN_
    irreversible = old_ep >= 0
    if old_ep >= 0:
        key ^= T[Z_EP + (old_ep & 7)]
    if colors[i, them] & tb:
        c = piece_at(i, pieces, tb)
        pieces[i, c] ^= tb
        colors[i, them] ^= tb
        key ^= zkey(them, c, to, T)
        zeroing = True
    if kind == EN_PASSANT:
        cs = to - 8 if us == WHITE else to + 8
        cb = bit(cs)
        pieces[i, PAWN_] ^= cb
        colors[i, them] ^= cb
        key ^= zkey(them, PAWN_, cs, T)
    move_bb = fb | tb
    pieces[i, p] ^= move_bb
    colors[i, us] ^= move_bb
    key ^= zkey(us, p, frm, T) ^ zkey(us, p, to, T)
    if kind >= PROMO_N:
        q = kind - 3
        pieces[i, PAWN_] ^= tb
        pieces[i, q] ^= tb
        key ^= zkey(us, PAWN_, to, T) ^ zkey(us, q, to, T)
    elif kind == CASTLE:
        if to > frm:
            rf, rt = frm + 3, frm + 1
        else:
            rf, rt = frm - 4, frm - 1
        rb = bit(rf) | bit(rt)
        pieces[i, ROOK_] ^= rb
        colors[i, us] ^= rb
        key ^= zkey(us, ROOK_, rf, T) ^ zkey(us, ROOK_, rt, T)
    old = np.int64(st.castling[i])
    new = old & ~(castling_touch(frm) | castling_touch(to))
    if new != old:
        irreversible = True
        key ^= T[Z_CASTLE + old] ^ T[Z_CASTLE + new]
        st.castling[i] = new
    st.ep[i] = (frm + to) >> 1 if kind == DOUBLE_PUSH else -1
    if zeroing:
        st.halfmove[i] = 0
    else:
        st.halfmove[i] += 1
    if us == BLACK:
        st.fullmove[i] += 1
    st.turn[i] = them
    st.key[i] = key ^ T[Z_SIDE]
    return irreversible or zeroing


@kernel_function
def full_key(i, st):
    """Zobrist key of board i without its en-passant part."""
    T, S = st.tables64, st.tables32
    key = U0
    for c in range(2):
        for p in range(6):
            b = st.pieces[i, p] & st.colors[i, c]
            while b:
                key ^= zkey(c, p, lsb(b, S), T)
                b &= b - U1
    key ^= T[Z_CASTLE + np.int64(st.castling[i])]
    if st.turn[i] == BLACK:
        key ^= T[Z_SIDE]
    return key


@kernel_function
def insufficient_side(own, opp, pieces, i):
    """python-chess's ``has_insufficient_material`` for the side owning ``own``."""
    if own & (pieces[i, PAWN_] | pieces[i, ROOK_] | pieces[i, QUEEN_]):
        return False
    if own & pieces[i, KNIGHT_]:
        return popcount(own) <= 2 and not (opp & ~pieces[i, KING_] & ~pieces[i, QUEEN_])
    if own & pieces[i, BISHOP_]:
        bishops = pieces[i, BISHOP_]
        same_color = not (bishops & _DARK) or not (bishops & _LIGHT)
        return same_color and not pieces[i, PAWN_] and not pieces[i, KNIGHT_]
    return True


@kernel_function
def insufficient_material(i, st):
    w, b = st.colors[i, WHITE], st.colors[i, BLACK]
    return insufficient_side(w, b, st.pieces, i) and insufficient_side(b, w, st.pieces, i)


@kernel_function
def finish_ply(i, st, irreversible):
    """After a move (or a reset): legal moves, key, repetition history and the game status."""
    n = gen_moves(i, st)
    ep = np.int64(st.ep[i])
    key = st.key[i]
    if ep >= 0:
        key ^= st.tables64[Z_EP + (ep & 7)]
        st.key[i] = key
    history = st.history
    if irreversible:
        history[i, 0] = key
        length = 1
        count = 1
    else:
        length = np.int64(st.history_len[i])
        if length < HISTORY:
            history[i, length] = key
            length += 1
        count = 0
        k = length - 1
        while k >= 0:  # same side to move: every other entry
            if history[i, k] == key:
                count += 1
            k -= 2
    st.history_len[i] = length
    st.repetitions[i] = count
    status = ONGOING
    if n == 0:
        status = CHECKMATE if in_check(i, st) else STALEMATE
    elif insufficient_material(i, st):
        status = INSUFFICIENT
    elif st.halfmove[i] >= 100:
        status = FIFTY_MOVES
    elif count >= 3:
        status = THREEFOLD
    st.status[i] = status
    return status


@kernel_function
def load_start(i, st):
    """Board i := its start position (``start_*`` columns); returns the status."""
    for p in range(6):
        st.pieces[i, p] = st.start_pieces[i, p]
    st.colors[i, 0] = st.start_colors[i, 0]
    st.colors[i, 1] = st.start_colors[i, 1]
    st.turn[i] = st.start_turn[i]
    st.castling[i] = st.start_castling[i]
    st.ep[i] = st.start_ep[i]
    st.halfmove[i] = st.start_halfmove[i]
    st.fullmove[i] = st.start_fullmove[i]
    st.key[i] = full_key(i, st)
    return finish_ply(i, st, True)


@kernel_function
def random_move(i, st, seed, episode, counter):
    """A uniformly random legal move of board i (it has at least one)."""
    r = random_u64(seed, episode, counter) >> _U32
    j = np.int64((r * np.uint64(st.num_moves[i])) >> _U32)
    return st.moves[i, j]


@kernel_function
def label_move(i, st, label):
    """The move word of board i's legal action ``label`` (the word ``gen_moves`` listed for
    it), by one table lookup and the position: no scan of the move list."""
    m = np.int64(st.tables32[LABEL_WORD + np.int64(st.turn[i]) * NUM_ACTIONS + label])
    frm = m & 63
    to = (m >> 6) & 63
    fb = bit(frm)
    if st.pieces[i, PAWN_] & fb:
        if to - frm == 16 or frm - to == 16:
            m |= DOUBLE_PUSH << 12
        elif (to >= 56 or to < 8) and not (m >> 12) & 15:  # a queen-move label: queen
            m |= PROMO_Q << 12
        elif to == st.ep[i] and (to & 7) != (frm & 7):
            m |= EN_PASSANT << 12
    elif st.pieces[i, KING_] & fb and (to - frm == 2 or frm - to == 2):
        m |= CASTLE << 12
    return np.int32(m)


@kernel_function
def copy_position(st, src, dst):
    for p in range(6):
        st.pieces[dst, p] = st.pieces[src, p]
    st.colors[dst, 0] = st.colors[src, 0]
    st.colors[dst, 1] = st.colors[src, 1]
    st.turn[dst] = st.turn[src]
    st.castling[dst] = st.castling[src]
    st.ep[dst] = st.ep[src]
    st.halfmove[dst] = st.halfmove[src]
    st.fullmove[dst] = st.fullmove[src]
    st.key[dst] = st.key[src]
