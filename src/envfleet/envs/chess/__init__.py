"""Chess-v0: batched bitboard chess (``envfleet.make("Chess-v0", N)``) and its engine.

``perft(fen, depth)`` counts the leaves of the legal move tree (the usual move-generator test).
"""

from envfleet.envs.chess.env import ChessVectorEnv, perft
from envfleet.envs.chess.fen import STARTING_FEN

__all__ = ["STARTING_FEN", "ChessVectorEnv", "perft"]
