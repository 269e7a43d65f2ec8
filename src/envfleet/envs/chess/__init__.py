"""Chess-v0: batched bitboard chess (``envfleet.make("Chess-v0", N)``) and its engine.

``perft(fen, depth)`` counts the leaves of the legal move tree (the usual move-generator test).
``unpack_mask`` / ``unpack_planes`` unpack the ``packed=True`` outputs (NumPy or torch).
"""

from envfleet.envs.chess.env import ChessVectorEnv, perft
from envfleet.envs.chess.fen import STARTING_FEN
from envfleet.envs.chess.packing import unpack_mask, unpack_planes

__all__ = ["STARTING_FEN", "ChessVectorEnv", "perft", "unpack_mask", "unpack_planes"]
