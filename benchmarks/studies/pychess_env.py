"""Chess-v0's game played with python-chess: a plain Gymnasium env, the baseline of the ``e2e``
and ``chess-learning`` studies (serial or in envfleet's pool, against native Chess-v0).

The same observation (``compact`` (72,) int8 or ``planes`` (8, 8, 21) float32, seen from the
side to move), the same action labels (AlphaZero's 8x8x73 as Chess-v0 numbers them:
``envfleet.envs.chess.tables.move_to_label``) with ``info["action_mask"]`` (4672 bools), the
same rewards (+1 the agent mates, -1 it is mated, 0 otherwise), the same game ends (checkmate,
stalemate, insufficient material, fifty moves, threefold repetition, checked in that order),
the same truncation (``max_plies`` plies; ``(max_plies + 1) // 2`` agent steps against the
opponent) and the same ``opponent="random"`` mode (a uniformly random legal reply, the opponent
opening when the agent plays black). Only the random replies' stream differs from the native
env's (its counter-based generator); ``reply`` can be replaced to replay given replies.

Registered with Gymnasium as ``PYCHESS_ID`` (``envfleet.make(PYCHESS_IMPORT_ID, n,
backend="pool")`` imports this module in each worker).

``LockstepVectorEnv``: python-chess boards played in lock step with a native Chess-v0 twin (the
opponent replaying the twin's replies), giving python-chess's outputs and counting every one
that differs from the twin's: PPO trained on it must end with native's parameters bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import chess
import gymnasium
import numpy as np
from gymnasium import spaces

from envfleet.envs.chess.tables import move_to_label

NUM_ACTIONS = 4672
PYCHESS_ID = "PyChess-v0"
PYCHESS_IMPORT_ID = f"{__name__}:{PYCHESS_ID}"
#: python-chess piece type -> Chess-v0's underpromotion index (queen promotions: 0)
_PROMO = {None: 0, chess.KNIGHT: 1, chess.BISHOP: 2, chess.ROOK: 3, chess.QUEEN: 0}


# --- Chess-v0's observation and rules, from python-chess -------------------------------------


def outcome(board: chess.Board) -> str:
    """The game end as Chess-v0 decides it (checkmate first), or 'ongoing'."""
    if not any(board.legal_moves):
        return "checkmate" if board.is_check() else "stalemate"
    if board.is_insufficient_material():
        return "insufficient_material"
    if board.halfmove_clock >= 100:
        return "fifty_moves"
    if board.is_repetition(3):
        return "threefold_repetition"
    return "ongoing"


def repetitions(board: chess.Board) -> int:
    """Occurrences of the position (1..3), as python-chess's ``is_repetition`` counts them."""
    return next(k for k in (3, 2, 1) if board.is_repetition(k))


def ep_square(board: chess.Board) -> int | None:
    """The en-passant square as Chess-v0 keeps it: only when a legal capture exists."""
    return board.ep_square if board.has_legal_en_passant() else None


def _rights(board: chess.Board) -> list[bool]:
    """Own king-side, own queen-side, opponent's king-side, opponent's queen-side rights."""
    us, them = board.turn, not board.turn
    return [board.has_kingside_castling_rights(us), board.has_queenside_castling_rights(us),
            board.has_kingside_castling_rights(them), board.has_queenside_castling_rights(them)]


def _view(board: chess.Board, square: int) -> int:
    """``square`` seen from the side to move (ranks mirrored for black)."""
    return square if board.turn == chess.WHITE else chess.square_mirror(square)


def compact_obs(board: chess.Board) -> np.ndarray:
    """Chess-v0's compact (72,) int8 observation of ``board``."""
    obs = np.zeros(72, dtype=np.int8)
    for square, piece in board.piece_map().items():
        code = piece.piece_type  # python-chess numbers P..K as 1..6
        obs[_view(board, square)] = code if piece.color == board.turn else -code
    obs[64:68] = _rights(board)
    ep = ep_square(board)
    obs[68] = -1 if ep is None else chess.square_file(ep)
    obs[69] = repetitions(board) - 1
    obs[70] = min(board.halfmove_clock, 100)
    obs[71] = 0 if board.turn == chess.WHITE else 1
    return obs


def planes_obs(board: chess.Board) -> np.ndarray:
    """Chess-v0's (8, 8, 21) float32 planes observation of ``board``."""
    obs = np.zeros((8, 8, 21), dtype=np.float32)
    for square, piece in board.piece_map().items():
        view = _view(board, square)
        plane = piece.piece_type - 1 + (0 if piece.color == board.turn else 6)
        obs[chess.square_rank(view), chess.square_file(view), plane] = 1
    reps = repetitions(board)
    obs[:, :, 12] = reps >= 2
    obs[:, :, 13] = reps >= 3
    obs[:, :, 14] = board.turn == chess.BLACK
    obs[:, :, 15:19] = _rights(board)
    obs[:, :, 19] = np.float32(min(board.halfmove_clock, 100)) / np.float32(100)
    ep = ep_square(board)
    if ep is not None:
        view = _view(board, ep)
        obs[chess.square_rank(view), chess.square_file(view), 20] = 1
    return obs


def label(board: chess.Board, move: chess.Move) -> int:
    """Chess-v0's action label of ``move`` in ``board`` (side to move's view)."""
    return move_to_label(move.from_square, move.to_square, _PROMO[move.promotion],
                         board.turn == chess.BLACK)


def legal_labels(board: chess.Board) -> dict[int, chess.Move]:
    """Each legal move of ``board`` by its action label."""
    return {label(board, m): m for m in board.legal_moves}


def compact_space() -> spaces.Box:
    """Chess-v0's compact observation space."""
    low, high = np.zeros(72, dtype=np.int8), np.zeros(72, dtype=np.int8)
    low[:64], high[:64] = -6, 6
    high[64:68] = 1
    low[68], high[68] = -1, 7
    high[69], high[70], high[71] = 2, 100, 1
    return spaces.Box(low, high, (72,), np.int8)


# --- the env -------------------------------------------------------------------------------


class PyChessEnv(gymnasium.Env):
    """One chess board in python-chess with Chess-v0's observation, actions, rewards and ends."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, opponent: str | None = None, agent_color: str = "white",
                 observation: str = "compact", max_plies: int = 512,
                 illegal_action: str = "raise") -> None:
        if opponent not in (None, "random"):
            raise ValueError(f"opponent must be None (two players) or 'random', got {opponent!r}")
        if agent_color not in ("white", "black"):
            raise ValueError(f"agent_color must be 'white' or 'black', got {agent_color!r}")
        if observation not in ("compact", "planes"):
            raise ValueError(f"observation must be 'compact' or 'planes', got {observation!r}")
        if illegal_action not in ("raise", "lose"):
            raise ValueError(f"illegal_action must be 'raise' or 'lose', got {illegal_action!r}")
        self.opponent, self.illegal_action = opponent, illegal_action
        self.agent = chess.WHITE if agent_color == "white" else chess.BLACK
        self.planes = observation == "planes"
        self.observation_space = (spaces.Box(0.0, 1.0, (8, 8, 21), np.float32) if self.planes
                                  else compact_space())
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self.max_steps = max_plies if opponent is None else (max_plies + 1) // 2
        self.board = chess.Board()
        self.legal: dict[int, chess.Move] = {}
        self.steps = 0

    def reply(self, board: chess.Board) -> chess.Move:
        """The random opponent's move: uniform over the legal moves (the env's generator)."""
        moves = list(board.legal_moves)
        return moves[int(self.np_random.integers(len(moves)))]

    def _observe(self) -> tuple[np.ndarray, dict[str, Any]]:
        self.legal = legal_labels(self.board)
        mask = np.zeros(NUM_ACTIONS, dtype=bool)
        mask[list(self.legal)] = True
        obs = planes_obs(self.board) if self.planes else compact_obs(self.board)
        return obs, {"action_mask": mask}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.board = chess.Board((options or {}).get("fen", chess.STARTING_FEN))
        self.steps = 0
        if self.opponent and self.board.turn != self.agent and outcome(self.board) == "ongoing":
            self.board.push(self.reply(self.board))
        return self._observe()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        reward, end = 0.0, outcome(self.board)
        if end != "ongoing":  # the opponent's opening reply ended the game: the action is moot
            reward = -1.0 if end == "checkmate" else 0.0
        elif (move := self.legal.get(int(action))) is None:
            if self.illegal_action == "raise":
                raise ValueError(f"action {int(action)} is not a legal move in "
                                 f"{self.board.fen()}")
            reward, end = -1.0, "illegal_move"
        else:
            self.board.push(move)
            end = outcome(self.board)
            if end == "checkmate":
                reward = 1.0
            elif end == "ongoing" and self.opponent:
                self.board.push(self.reply(self.board))
                end = outcome(self.board)
                reward = -1.0 if end == "checkmate" else 0.0
        obs, info = self._observe()
        # as Chess-v0: truncated once the step budget is used, whether or not the game ended
        return obs, reward, end != "ongoing", self.steps >= self.max_steps, info


# --- lock step with native Chess-v0 (the learning audit) ------------------------------------


def native_reply(native: Any, i: int) -> Callable[[chess.Board], chess.Move]:
    """A ``PyChessEnv.reply`` that plays native board ``i``'s random reply of the native step
    just taken (``native``: a numba Chess-v0): the legal move that leaves python-chess's
    bitboards equal to the native board's."""

    def reply(board: chess.Board) -> chess.Move:
        state = native.engine.state
        want = (*map(int, state.pieces[i]), *map(int, state.colors[i]))
        occupied, theirs = want[6] | want[7], want[6 if board.turn == chess.WHITE else 7]
        for move in board.legal_moves:  # to a square the mover holds now, from an empty one
            if not theirs >> move.to_square & 1 or occupied >> move.from_square & 1:
                continue
            board.push(move)
            got = (board.pawns, board.knights, board.bishops, board.rooks, board.queens,
                   board.kings, board.occupied_co[chess.WHITE], board.occupied_co[chess.BLACK])
            board.pop()
            if got == want:
                return move
        raise AssertionError(f"board {i}: no legal move of {board.fen()} reaches the native "
                             f"board {native.fen(i)}")

    return reply


class LockstepVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` ``PyChessEnv`` boards stepped in lock step with a native Chess-v0 twin
    (numba, one thread) on the same actions, each board's opponent replaying the twin's reply
    (``native_reply``): what a trainer gets is python-chess's (NEXT_STEP autoreset, as the
    pool gives it), and every observation, mask, reward and end that differs from the twin's is
    recorded in ``mismatches`` (step, output, boards). Opponent mode only (``opponent="random"``
    is set); other keyword arguments go to both sides."""

    metadata: ClassVar[dict[str, Any]] = {
        "autoreset_mode": gymnasium.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, seed: int | None = None, **kwargs: Any) -> None:
        import envfleet

        kwargs["opponent"] = "random"
        self.native = envfleet.make("Chess-v0", num_envs, seed=seed, num_threads=1, **kwargs)
        self.num_envs = num_envs
        for name in ("single_observation_space", "single_action_space", "observation_space",
                     "action_space"):
            setattr(self, name, getattr(self.native, name))
        self.boards = [PyChessEnv(**kwargs) for _ in range(num_envs)]
        for i, board in enumerate(self.boards):
            board.reply = native_reply(self.native, i)
        self.pending = np.zeros(num_envs, dtype=bool)
        self.steps = 0
        self.mismatches: list[tuple[int, str, list[int]]] = []

    def _compare(self, ours: dict[str, np.ndarray], twin: dict[str, np.ndarray]) -> None:
        for name, value in ours.items():
            differ = (value != twin[name]).reshape(self.num_envs, -1).any(1)
            if differ.any():
                self.mismatches.append((self.steps, name, np.flatnonzero(differ).tolist()))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        if options:
            raise ValueError("LockstepVectorEnv.reset takes no options (the start position)")
        obs_twin, info_twin = self.native.reset(seed=seed)
        outs = [b.reset(seed=None if seed is None else seed + i)
                for i, b in enumerate(self.boards)]
        obs = np.stack([o for o, _ in outs])
        mask = np.stack([info["action_mask"] for _, info in outs])
        self._compare({"obs": obs, "action_mask": mask},
                      {"obs": obs_twin, "action_mask": info_twin["action_mask"]})
        self.pending[:] = False
        return obs, {"action_mask": mask}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        twin = self.native.step(actions)  # first: the replies are read from its boards
        outs = []
        for i, board in enumerate(self.boards):
            if self.pending[i]:  # NEXT_STEP: this step only resets the board
                obs, info = board.reset()
                outs.append((obs, 0.0, False, False, info))
            else:
                outs.append(board.step(int(actions[i])))
        self.steps += 1
        ours = {"obs": np.stack([o[0] for o in outs]),
                "reward": np.array([o[1] for o in outs], dtype=twin[1].dtype),
                "terminated": np.array([o[2] for o in outs]),
                "truncated": np.array([o[3] for o in outs]),
                "action_mask": np.stack([o[4]["action_mask"] for o in outs])}
        self._compare(ours, {"obs": twin[0], "reward": twin[1], "terminated": twin[2],
                             "truncated": twin[3], "action_mask": twin[4]["action_mask"]})
        self.pending = ours["terminated"] | ours["truncated"]
        return (ours["obs"], ours["reward"], ours["terminated"], ours["truncated"],
                {"action_mask": ours["action_mask"]})

    def close(self, **kwargs: Any) -> None:
        self.native.close()


def register() -> None:
    """Register ``PYCHESS_ID`` with Gymnasium (once)."""
    if PYCHESS_ID not in gymnasium.registry:
        gymnasium.register(PYCHESS_ID, entry_point=f"{__name__}:PyChessEnv")


register()
