"""Chess-v0's public API (the family itself lives in ``envfleet.envs.chess``).

``perft(fen, depth)`` counts the leaves of the legal move tree (the usual move-generator test).
"""

from envfleet.envs.chess import STARTING_FEN, ChessVectorEnv, perft

__all__ = ["STARTING_FEN", "ChessVectorEnv", "perft"]
