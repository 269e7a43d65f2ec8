"""Chess-v0's public API (the family itself lives in ``envfleet.envs.chess``).

``perft(fen, depth)`` counts the leaves of the legal move tree (the usual move-generator test).
``unpack_mask`` / ``unpack_planes`` unpack the ``packed=True`` outputs (NumPy or torch).
"""

from envfleet.envs.chess import (
    STARTING_FEN,
    ChessVectorEnv,
    perft,
    unpack_mask,
    unpack_planes,
)

__all__ = ["STARTING_FEN", "ChessVectorEnv", "perft", "unpack_mask", "unpack_planes"]
