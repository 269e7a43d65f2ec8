"""Hand-written players against Chess-v0's random opponent, in python-chess: what a win rate
means in ``python -m benchmarks --study chess-learning`` (its target: a greedy win rate of 0.4).

Each player plays white against uniformly random legal replies for at most 512 plies (the
study's game: Chess-v0's ``max_plies``; a game ends at checkmate, stalemate, insufficient
material, the fifty-move rule or threefold repetition, as in Chess-v0). Players: ``random``
(uniform legal moves), ``capture`` (the capture of the most valuable piece, else random),
``mate1`` (a mate in one when there is one, else random), ``mate1+capture`` (both).

    python -m benchmarks.scripts.chess_reference_players --games 200
"""

from __future__ import annotations

import argparse
import random

import chess

VALUES = {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9,
          chess.KING: 0}
PLAYERS = ("random", "capture", "mate1", "mate1+capture")


def choose(board: chess.Board, player: str, rng: random.Random) -> chess.Move:
    """``player``'s move in ``board`` (ties broken at random)."""
    moves = list(board.legal_moves)
    if player == "random":
        return rng.choice(moves)
    best: list[chess.Move] = []
    top = -1
    for move in moves:
        if "mate1" in player:
            board.push(move)
            mate = board.is_checkmate()
            board.pop()
            if mate:
                return move
        value = 0
        if "capture" in player and board.is_capture(move):
            piece = board.piece_at(move.to_square)
            value = VALUES[piece.piece_type] if piece else 1  # en passant: a pawn
        if value > top:
            best, top = [move], value
        elif value == top:
            best.append(move)
    return rng.choice(best)


def ended(board: chess.Board) -> bool:
    """Chess-v0's game ends (no claim needed for fifty moves or threefold repetition)."""
    return (board.is_game_over(claim_draw=False) or board.halfmove_clock >= 100
            or board.is_repetition(3))


def play(player: str, games: int, max_plies: int = 512, seed: int = 0) -> dict[str, float]:
    """Win / draw / loss rates and score (win 1, draw 0.5) of ``player`` (white) over
    ``games`` games against the random opponent."""
    rng = random.Random(seed)
    wins = losses = 0
    for _ in range(games):
        board = chess.Board()
        for ply in range(max_plies):
            if ended(board):
                break
            board.push(choose(board, player, rng) if ply % 2 == 0
                       else rng.choice(list(board.legal_moves)))
        if board.is_checkmate():
            wins += board.turn == chess.BLACK
            losses += board.turn == chess.WHITE
    draws = games - wins - losses
    return {"win": wins / games, "draw": draws / games, "loss": losses / games,
            "score": (wins + draws / 2) / games}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--players", default=",".join(PLAYERS))
    options = parser.parse_args()
    for player in options.players.split(","):
        r = play(player, options.games)
        print(f"{player:14s} win {r['win']:.3f} draw {r['draw']:.3f} loss {r['loss']:.3f} "
              f"score {r['score']:.3f}", flush=True)


if __name__ == "__main__":
    main()
