"""A drop-in for ``pettingzoo.classic.chess_v6`` played by envfleet's native chess engine.

``env(render_mode=None)`` and ``raw_env(...)`` behave as PettingZoo's (AEC, two agents
``player_0`` (white) and ``player_1``, observation ``{"observation": bool (8, 8, 111),
"action_mask": int8 (4672,)}``, PettingZoo's action labels, +1/-1/0 at the end for both, a
game over when python-chess's ``can_claim_draw()`` holds), checked in lock step against
PettingZoo's own. ``env()`` is ``raw_env`` with what PettingZoo's three wrappers
(``TerminateIllegalWrapper(illegal_reward=-1)``, ``AssertOutOfBoundsWrapper``,
``OrderEnforcingWrapper``) do, fused into one class so a step pays for none of their calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from os import path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import EzPickle

try:
    from pettingzoo import AECEnv
    from pettingzoo.utils.agent_selector import AgentSelector
    from pettingzoo.utils.env import AECIterable, AECIterator
    from pettingzoo.utils.env_logger import EnvLogger
except ImportError as error:
    raise ImportError(f"envfleet.pettingzoo needs pettingzoo ({error}): "
                      f"pip install 'envfleet[pettingzoo]'") from error

from envfleet.envs.chess import core
from envfleet.envs.chess.fen import format_fen
from envfleet.envs.chess.tables import move_to_label
from envfleet.pettingzoo.chess_engine import OBS_PLANES, ChessBoards, label_tables

__all__ = ["CheckedEnv", "env", "raw_env"]

_NUM_ACTIONS = 8 * 8 * 73
#: what ``_load_images`` and ``_render_gui`` keep: pygame's, not pickled
_PYGAME = frozenset({"screen", "clock", "bg_image", "piece_images"})
_PIECE_NAMES = ("pawn", "knight", "bishop", "rook", "queen", "king")


def env(**kwargs: Any) -> CheckedEnv:
    """chess_v6.env(): ``raw_env`` with its wrappers' checks (an illegal move loses: -1 for the
    mover, 0 for the other, both terminated and truncated; an action outside the space is an
    AssertionError; calls out of order are refused)."""
    return CheckedEnv(**kwargs)


class raw_env(AECEnv, EzPickle):
    """chess_v6.raw_env(): the game without the wrappers' checks (an illegal action raises)."""

    metadata = {  # noqa: RUF012 (PettingZoo's own class attribute)
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "chess_v6",
        "is_parallelizable": False,
        "render_fps": 2,
    }

    def __init__(self, render_mode: str | None = None, screen_height: int | None = 800) -> None:
        EzPickle.__init__(self, render_mode, screen_height)
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of "
                             f"{self.metadata['render_modes']}, got {render_mode!r}")
        self._boards = ChessBoards(1)
        self._boards.reset(0)
        self._moves: list[int] = []  # the move words played (for ``board``)
        self.agents = [f"player_{i}" for i in range(2)]
        self.possible_agents = self.agents[:]
        self._agent_selector = AgentSelector(self.agents)
        self.action_spaces = {name: spaces.Discrete(_NUM_ACTIONS) for name in self.agents}
        self.observation_spaces = {
            name: spaces.Dict({
                "observation": spaces.Box(low=0, high=1, shape=(8, 8, OBS_PLANES), dtype=bool),
                "action_mask": spaces.Box(low=0, high=1, shape=(_NUM_ACTIONS,), dtype=np.int8),
            })
            for name in self.agents
        }
        self.rewards: Any = None
        self.infos = {name: {} for name in self.agents}
        self.truncations = dict.fromkeys(self.agents, False)
        self.terminations = dict.fromkeys(self.agents, False)
        self.agent_selection: Any = None
        self.render_mode = render_mode
        self.screen_height = self.screen_width = screen_height
        self.screen: Any = None
        if render_mode in ("human", "rgb_array"):
            self._load_images()

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the pygame objects: a pickled env comes back in the same state, mid-game
        too (EzPickle's default rebuilt a new env from the constructor's arguments)."""
        return {name: value for name, value in self.__dict__.items() if name not in _PYGAME}

    def __setstate__(self, saved: dict[str, Any]) -> None:
        """The pickled state; the board images loaded again, a window opened at the next
        render."""
        self.__dict__.update(saved)
        self.screen = None
        if self.render_mode in ("human", "rgb_array"):
            self._load_images()

    # the AEC API --------------------------------------------------------------------------

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """``agent``'s view: the planes from its side and, if it is to act, the legal moves."""
        player = self.possible_agents.index(agent)
        observation, mask = self._boards.observe(0, player, agent == self.agent_selection)
        return {"observation": observation, "action_mask": mask}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """The starting position (``seed`` and ``options`` are ignored, as by chess_v6)."""
        self.agents = self.possible_agents[:]
        self._boards.reset(0)
        self._moves = []
        self._agent_selector = AgentSelector(self.agents)
        self.agent_selection = self._agent_selector.reset()
        self.rewards = dict.fromkeys(self.agents, 0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {name: {} for name in self.agents}
        if self.render_mode == "human":
            self.render()

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        action = int(action)
        if not (0 <= action < _NUM_ACTIONS and self._boards.mask[0, action]):
            raise ValueError(f"illegal action {action} for {agent} in {self.fen()}: not a "
                             f"legal move (see observe({agent!r})['action_mask']; chess_v6.env() "
                             f"makes an illegal move a loss instead)")
        self._play(action)

    def _play(self, action: int) -> None:
        """The legal ``action`` of ``agent_selection``: the move, the game's end, the turn."""
        status = self._boards.step(0, action)
        self._moves.append(action)
        if status:
            white = 1 if self._boards.state.turn[0] == 1 else -1  # the mover mated
            result = white if status == core.CHECKMATE else 0
            for i, name in enumerate(self.agents):
                self.terminations[name] = True
                self.rewards[name] = result * (1 if i == 0 else -1)
                self.infos[name] = {"legal_moves": []}
            self._accumulate_rewards()
        self.agent_selection = self._agent_selector.next()
        if self.render_mode == "human":
            self.render()

    # the position -------------------------------------------------------------------------

    def fen(self) -> str:
        """The position as python-chess's ``board.fen()`` prints it."""
        st = self._boards.state
        return format_fen(st.pieces[0], st.colors[0], int(st.turn[0]), int(st.castling[0]),
                          int(st.ep[0]), int(st.halfmove[0]), int(st.fullmove[0]))

    @property
    def board(self) -> Any:
        """The game as a python-chess ``Board`` (the moves replayed from the start: a copy;
        pushing moves on it does not move this env). Needs python-chess."""
        import chess

        board = chess.Board()
        for action in self._moves:
            legal = {_pz_label(board, move): move for move in board.legal_moves}
            board.push(legal[action])
        return board

    @property
    def board_history(self) -> np.ndarray:
        """chess_v6's ``board_history``: the last 8 positions' 13 planes, white's view."""
        return self._boards.observe(0, 0, False)[0][:, :, 7:]

    # rendering ----------------------------------------------------------------------------

    def render(self) -> np.ndarray | str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("You are calling render method without specifying any "
                                  "render mode.")
            return None
        if self.render_mode == "ansi":
            return self._ansi()
        return self._render_gui()

    def _squares(self) -> dict[int, tuple[int, int]]:
        """square -> (piece index 0..5, colour 1 white / 0 black), as python-chess's
        ``piece_map()`` (colours as its booleans)."""
        st = self._boards.state
        squares = {}
        for p in range(6):
            for colour in (0, 1):
                b = int(st.pieces[0, p] & st.colors[0, colour])
                while b:
                    sq = (b & -b).bit_length() - 1
                    b &= b - 1
                    squares[sq] = (p, 1 - colour)
        return squares

    def _ansi(self) -> str:
        """``str(board)``: ranks 8 to 1, pieces as letters (white upper case), '.' empty."""
        squares = self._squares()
        rows = []
        for rank in range(7, -1, -1):
            cells = []
            for file in range(8):
                piece = squares.get(rank * 8 + file)
                if piece is None:
                    cells.append(".")
                else:
                    letter = "pnbrqk"[piece[0]]
                    cells.append(letter.upper() if piece[1] else letter)
            rows.append(" ".join(cells))
        return "\n".join(rows)

    def _load_images(self) -> None:
        """PettingZoo's board and piece images (its package ships them), scaled as it does."""
        import pygame
        from pettingzoo.classic.chess import chess as pz_chess

        folder = path.dirname(pz_chess.__file__)
        self.BOARD_SIZE = (self.screen_width, self.screen_height)
        self.clock = pygame.time.Clock()
        self.cell_size = (self.BOARD_SIZE[0] / 8, self.BOARD_SIZE[1] / 8)
        self.bg_image = pygame.transform.scale(
            pygame.image.load(path.join(folder, "img/chessboard.png")), self.BOARD_SIZE)

        def load_piece(name: str) -> Any:
            image = pygame.image.load(path.join(folder, f"img/{name}.png"))
            return pygame.transform.scale(image, self.cell_size)

        self.piece_images = {name: [load_piece(f"{name}_black"), load_piece(f"{name}_white")]
                             for name in _PIECE_NAMES}

    def _render_gui(self) -> np.ndarray | None:
        import pygame

        if self.screen is None:
            if self.render_mode == "human":
                pygame.display.init()
                pygame.display.set_caption("Chess")
                self.screen = pygame.display.set_mode(self.BOARD_SIZE)
            else:
                self.screen = pygame.Surface(self.BOARD_SIZE)
        self.screen.blit(self.bg_image, (0, 0))
        for square, (piece, colour) in sorted(self._squares().items()):
            x = square % 8 * self.cell_size[0]
            y = self.BOARD_SIZE[1] - (square // 8 + 1) * self.cell_size[1]
            self.screen.blit(self.piece_images[_PIECE_NAMES[piece]][colour], (x, y))
        if self.render_mode == "human":
            pygame.display.update()
            self.clock.tick(self.metadata["render_fps"])
            return None
        return np.transpose(np.array(pygame.surfarray.pixels3d(self.screen)), axes=(1, 0, 2))

    def close(self) -> None:
        if self.screen is not None:
            import pygame

            pygame.quit()
            self.screen = None


_BEFORE_RESET = frozenset({"rewards", "terminations", "truncations", "infos",
                           "agent_selection", "agents"})


class CheckedEnv(raw_env):
    """What ``chess_v6.env()`` returns, in one class: ``raw_env`` plus the behaviour of
    ``TerminateIllegalWrapper(illegal_reward=-1)``, ``AssertOutOfBoundsWrapper`` and
    ``OrderEnforcingWrapper`` (same errors, warnings and end-of-game bookkeeping)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._has_reset = False
        self._has_updated = False
        for name in _BEFORE_RESET:  # OrderEnforcingWrapper: refused until reset()
            del self.__dict__[name]

    def __getattr__(self, name: str) -> Any:
        if name in _BEFORE_RESET or name == "num_agents":  # (num_agents: its property raised)
            raise AttributeError(f"{name} cannot be accessed before reset")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def num_agents(self) -> int:
        if not self._has_reset:
            raise AttributeError("num_agents cannot be accessed before reset")
        return len(self.agents)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._has_reset = True
        self._has_updated = True
        super().reset(seed=seed, options=options)

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        if not self._has_reset:
            EnvLogger.error_observe_before_reset()
        return super().observe(agent)

    def render(self) -> np.ndarray | str | None:
        if not self._has_reset:
            EnvLogger.error_render_before_reset()
        return super().render()

    def state(self) -> np.ndarray:
        if not self._has_reset:
            EnvLogger.error_state_before_reset()
        return super().state()

    def agent_iter(self, max_iter: int = 2**63) -> AECIterable:
        if not self._has_reset:
            EnvLogger.error_agent_iter_before_reset()
        return _OrderedIterable(self, max_iter)

    def step(self, action: Any) -> None:
        if not self._has_reset:
            EnvLogger.error_step_before_reset()
        self._has_updated = True
        if not self.agents:
            EnvLogger.warn_step_after_terminated_truncated()
            return
        agent = self.agent_selection
        dead = self.terminations[agent] or self.truncations[agent]
        if type(action) is not int or not 0 <= action < _NUM_ACTIONS:  # noqa: SIM102
            if not ((action is None and dead) or self.action_spaces[agent].contains(action)):
                raise AssertionError("action is not in action space")
        if dead:
            self._was_dead_step(action)
        elif self._boards.mask[0, action]:
            self._play(int(action))
        else:  # TerminateIllegalWrapper: the mover loses
            EnvLogger.warn_on_illegal_move()
            self._cumulative_rewards[agent] = 0
            self.terminations = dict.fromkeys(self.agents, True)
            self.truncations = dict.fromkeys(self.agents, True)
            self.rewards = dict.fromkeys(self.truncations, 0)
            self.rewards[agent] = -1.0
            self._accumulate_rewards()
            self._deads_step_first()


class _OrderedIterable(AECIterable):
    def __iter__(self) -> Iterator[str]:
        return _OrderedIterator(self.env, self.max_iter)


class _OrderedIterator(AECIterator):
    """OrderEnforcingWrapper's iterator: each agent it yields must be stepped (or reset)."""

    def __next__(self) -> str:
        agent = super().__next__()
        assert self.env._has_updated, "need to call step() or reset() in a loop over `agent_iter`"
        self.env._has_updated = False
        return agent


def _pz_label(board: Any, move: Any) -> int:
    """chess_utils' label of python-chess ``move`` on ``board`` (mirrored for black)."""
    promo = {None: 0, 5: 0, 2: 1, 3: 2, 4: 3}[move.promotion]
    native = move_to_label(move.from_square, move.to_square, promo, board.turn == 0)
    return int(label_tables()[0][native])
