"""FEN parsing (with validation) and printing, in Python, as python-chess reads and prints them.

``parse_fen`` accepts what ``chess.Board(fen)`` accepts (trailing fields may be left out) and
also refuses positions python-chess would still parse but that no game reaches: no king or two
kings of a colour, pawns on the first or last rank, the side not to move in check, an
impossible en-passant square, a half-move clock or full-move number above ``MAX_CLOCK`` (the
boards count them in int32). Castling rights are cleaned as python-chess cleans them (a right
needs its king and rook on their home squares).
"""

from __future__ import annotations

import re
from typing import NamedTuple

STARTING_FEN = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
PIECE_SYMBOLS = "pnbrqk"
FILES = "abcdefgh"
_CASTLING_RE = re.compile(r"^(?:-|[KQABCDEFGH]{0,2}[kqabcdefgh]{0,2})\Z")
#: the largest half-move clock and full-move number accepted: the boards keep them in int32
#: columns, with room to count the moves of any episode (python-chess takes any size)
MAX_CLOCK = 2**30
# castling-rights bits (as in core.py): K, Q, k, q
_RIGHT_BITS = {"K": 1, "Q": 2, "k": 4, "q": 8, "H": 1, "A": 2, "h": 4, "a": 8}


class Position(NamedTuple):
    """A position as the kernels store it: piece-type and colour bitboards and the rest."""

    pieces: tuple[int, ...]  # 6 bitboards: pawn, knight, bishop, rook, queen, king
    colors: tuple[int, int]  # white, black
    turn: int  # 0 white, 1 black
    castling: int  # bits K=1, Q=2, k=4, q=8
    ep: int  # en-passant square or -1 (as written in the FEN, after validation)
    halfmove: int
    fullmove: int


def square_name(sq: int) -> str:
    return FILES[sq % 8] + str(sq // 8 + 1)


def parse_square(name: str) -> int:
    if len(name) != 2 or name[0] not in FILES or name[1] not in "12345678":
        raise ValueError(f"invalid square {name!r}")
    return (int(name[1]) - 1) * 8 + FILES.index(name[0])


def parse_fen(fen: str) -> Position:
    """Parse and check a FEN; ValueError naming what is wrong."""
    if not isinstance(fen, str):
        raise ValueError(f"a FEN must be a string, got {type(fen).__name__}")
    parts = fen.split()
    if not parts:
        raise ValueError("empty FEN")
    if len(parts) > 6:
        raise ValueError(f"FEN has {len(parts)} fields, at most 6 expected: {fen!r}")
    board = parts[0]
    rows = board.split("/")
    if len(rows) != 8:
        raise ValueError(f"expected 8 rows in the position part of the FEN, got {len(rows)}: "
                         f"{fen!r}")
    pieces = [0] * 6
    colors = [0, 0]
    for r, row in enumerate(rows):
        rank = 7 - r
        file = 0
        previous_digit = False
        for c in row:
            if c in "12345678":
                if previous_digit:
                    raise ValueError(f"two subsequent digits in rank {rank + 1} of FEN {fen!r}")
                file += int(c)
                previous_digit = True
                continue
            previous_digit = False
            if c.lower() not in PIECE_SYMBOLS:
                raise ValueError(f"invalid character {c!r} in the position part of FEN {fen!r}")
            if file < 8:
                bb = 1 << (rank * 8 + file)
                pieces[PIECE_SYMBOLS.index(c.lower())] |= bb
                colors[0 if c.isupper() else 1] |= bb
            file += 1
        if file != 8:
            raise ValueError(f"rank {rank + 1} of FEN {fen!r} has {file} squares, expected 8")
    turn_part = parts[1] if len(parts) > 1 else "w"
    if turn_part not in ("w", "b"):
        raise ValueError(f"expected 'w' or 'b' for the side to move, got {turn_part!r}")
    turn = 0 if turn_part == "w" else 1
    castling_part = parts[2] if len(parts) > 2 else "-"
    if not _CASTLING_RE.match(castling_part):
        raise ValueError(f"invalid castling field {castling_part!r} in FEN {fen!r}")
    ep_part = parts[3] if len(parts) > 3 else "-"
    try:
        ep = -1 if ep_part == "-" else parse_square(ep_part)
    except ValueError:
        raise ValueError(f"invalid en-passant field {ep_part!r} in FEN {fen!r}") from None
    halfmove = _count(parts, 4, 0, "half-move clock", fen)
    fullmove = _count(parts, 5, 1, "full-move number", fen) or 1

    # positions python-chess parses but no game reaches
    kings = pieces[5]
    for colour, name in ((0, "white"), (1, "black")):
        count = bin(kings & colors[colour]).count("1")
        if count == 0:
            raise ValueError(f"FEN {fen!r} has no {name} king")
        if count > 1:
            raise ValueError(f"FEN {fen!r} has {count} {name} kings")
    if pieces[0] & 0xFF000000000000FF:
        raise ValueError(f"FEN {fen!r} has pawns on the first or last rank")
    if ep >= 0:
        ep_rank = 5 if turn == 0 else 2
        pusher = ep - 8 if turn == 0 else ep + 8
        origin = ep + 8 if turn == 0 else ep - 8
        occupied = colors[0] | colors[1]
        if (ep // 8 != ep_rank or not pieces[0] & colors[1 - turn] & (1 << pusher)
                or occupied & ((1 << ep) | (1 << origin))):
            raise ValueError(f"impossible en-passant square {ep_part} in FEN {fen!r} (no pawn "
                             f"can just have passed it with a double step)")
    castling = 0
    if castling_part != "-":
        for flag in castling_part:
            castling |= _RIGHT_BITS.get(flag, 0)
    castling = clean_castling(pieces, colors, castling)
    return Position(tuple(pieces), (colors[0], colors[1]), turn, castling, ep, halfmove,
                    fullmove)


def _count(parts: list[str], index: int, default: int, what: str, fen: str) -> int:
    if len(parts) <= index:
        return default
    try:
        value = int(parts[index])
    except ValueError:
        raise ValueError(f"invalid {what} {parts[index]!r} in FEN {fen!r}") from None
    if value < 0:
        raise ValueError(f"the {what} cannot be negative in FEN {fen!r}")
    if value > MAX_CLOCK:
        raise ValueError(f"the {what} {value} is too large in FEN {fen!r}: at most "
                         f"{MAX_CLOCK} (2**30; boards keep it in int32)")
    return value


def clean_castling(pieces: list[int] | tuple[int, ...], colors: list[int] | tuple[int, int],
                   castling: int) -> int:
    """Keep only rights whose king (e1/e8) and rook (a/h file corner) are at home."""
    rooks, kings = pieces[3], pieces[5]
    white, black = colors
    out = 0
    if kings & white & (1 << 4):
        if castling & 1 and rooks & white & (1 << 7):
            out |= 1
        if castling & 2 and rooks & white & (1 << 0):
            out |= 2
    if kings & black & (1 << 60):
        if castling & 4 and rooks & black & (1 << 63):
            out |= 4
        if castling & 8 and rooks & black & (1 << 56):
            out |= 8
    return out


def format_fen(pieces, colors, turn: int, castling: int, ep: int, halfmove: int,
               fullmove: int) -> str:
    """The FEN python-chess's ``board.fen()`` prints (``ep`` is already legal-only)."""
    pieces = [int(p) for p in pieces]
    colors = [int(c) for c in colors]
    rows = []
    for rank in range(7, -1, -1):
        row = ""
        empty = 0
        for file in range(8):
            bb = 1 << (rank * 8 + file)
            symbol = ""
            for p in range(6):
                if pieces[p] & bb:
                    symbol = PIECE_SYMBOLS[p].upper() if colors[0] & bb else PIECE_SYMBOLS[p]
            if symbol:
                if empty:
                    row += str(empty)
                    empty = 0
                row += symbol
            else:
                empty += 1
        if empty:
            row += str(empty)
        rows.append(row)
    rights = "".join(flag for flag, b in (("K", 1), ("Q", 2), ("k", 4), ("q", 8))
                     if castling & b) or "-"
    ep_text = square_name(ep) if ep >= 0 else "-"
    return (f"{'/'.join(rows)} {'wb'[turn]} {rights} {ep_text} {int(halfmove)} "
            f"{int(fullmove)}")
