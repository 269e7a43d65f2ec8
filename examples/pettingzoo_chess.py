"""PettingZoo's chess_v6 on envfleet's compiled chess engine (the ``pettingzoo`` extra): the
standard AEC loop, random legal moves for both players, one line per game.

``envfleet.pettingzoo.chess_v6`` is a drop-in for ``pettingzoo.classic.chess_v6`` (same
observations, action labels, rewards and ends; docs/CHESS.md), so PettingZoo code keeps its loop.

    python examples/pettingzoo_chess.py --games 10
"""

from __future__ import annotations

import argparse

import numpy as np

from envfleet.pettingzoo import chess_v6  # instead of: from pettingzoo.classic import chess_v6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    env = chess_v6.env()
    rng = np.random.default_rng(args.seed)
    for game in range(args.games):
        env.reset(seed=args.seed + game)
        plies, returns = 0, dict.fromkeys(env.agents, 0.0)
        for agent in env.agent_iter():
            observation, reward, termination, truncation, _ = env.last()
            returns[agent] += reward
            if termination or truncation:
                action = None
            else:
                action = int(rng.choice(np.flatnonzero(observation["action_mask"])))
                plies += 1
            env.step(action)
        print(f"game={game}, plies={plies}, returns={returns}, final={env.unwrapped.fen()}")
    env.close()


if __name__ == "__main__":
    main()
