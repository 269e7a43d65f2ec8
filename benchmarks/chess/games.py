"""Chess-v0's bench games: the constants, the bench positions, the peers (python-chess,
OpenSpiel, pgx) as ``Baseline`` entries that play their own random legal moves, and envfleet's
own games on the same positions (``native_options``, ``native_reset_options``, ``fairness``,
``NativeGames``). The package's ``__init__`` says what is measured and how.
"""

from __future__ import annotations

import importlib.util
import os
import random
from typing import Any

import numpy as np

from envfleet.bench.baselines import Baseline, BaselineEnv

CHESS_ID = "Chess-v0"
NUM_ACTIONS = 4672  # AlphaZero's 8x8x73 labels (pgx, OpenSpiel)
#: envfleet's backends measured by default for Chess-v0 (cuda only where a GPU is visible)
NATIVE = ("numba", "cuda")
#: envfleet's default sweep for Chess-v0
DEFAULT_NUM_ENVS = (1, 64, 512, 4096)
#: the Python-loop peers (python-chess, OpenSpiel) are not measured above this many boards
#: by default (--baseline-max-envs): ~60 ms a call at 4096 boards, and the targets are at 512
PYTHON_PEER_MAX_ENVS = 512
#: the chess peers, in table-column order
PEERS = ("python-chess", "openspiel", "openspiel-numpy", "pgx", "envpool-chess")
#: what each peer needs installed (the import name)
REQUIRES = {"python-chess": "chess", "openspiel": "pyspiel", "openspiel-numpy": "pyspiel",
            "pgx": "pgx", "envpool-chess": "envpool"}
#: the peers that cannot load a FEN: whole games from the initial position
INITIAL_ONLY = ("pgx", "envpool-chess")
#: EnvPool's chess (a C++ port of pgx's: 8x8x119 observations, ``legal_action_mask`` in info)
ENVPOOL_CHESS_ID = "Chess-v1"
#: the issues' performance targets: (peer, num_envs or None for the best N of each, ratio as
#: measured); issue 10 raised OpenSpiel's (list mask) from 25x to 40x
TARGETS = (("openspiel", 512, 40.0), ("openspiel-numpy", 512, 100.0),
           ("python-chess", 512, 300.0), ("pgx", None, 20.0))
#: issue 22's user-loop targets: (peer, num_envs, ratio) of envfleet's user loop against the
#: peer's user loop, and (num_envs, most) of envfleet's tight-loop plies/s over its user loop's
USER_TARGETS = (("openspiel", 512, 40.0),)
USER_GAP_TARGET = (512, 1.3)

#: plies a bench game runs from its start position before it restarts there (every contender)
GAME_PLIES = 32
#: the start positions every contender plays (``generate_positions()``, stored so that a run
#: without python-chess plays them too): (phase, FEN), 16 each of openings (2-15 plies of
#: seeded random play from the initial position), middlegames (24-69 plies, 18+ men) and
#: endgames (6-12 men); board i starts at position i % 48 and restarts there after
#: ``GAME_PLIES`` plies or at the end of its game
BENCH_POSITIONS: tuple[tuple[str, str], ...] = (
    ("opening", "rnq1kbnr/p2pp2p/bpp2p1B/5P2/3P2pP/1PP5/P3P1PR/RN1QKBN1 b Qkq - 2 8"),
    ("opening", "rnbqkbnr/1ppp1ppp/8/p3p3/8/N4P2/PPPPP1PP/R1BQKBNR w KQkq - 0 3"),
    ("opening", "r1bqkbnr/pp1pp3/2p2p1p/6p1/Pn1P4/1P3P2/N1P1P1PP/R1BQKBNR b KQkq - 0 7"),
    ("opening", "rnbqkb2/1p1p1pp1/p3pn1B/2p4p/P2P3P/5P2/1PP1P1P1/RN1QKBNR w KQq - 1 7"),
    ("opening", "rnb1k2r/p1pp1ppp/1p2q2n/4p2P/1b6/5NP1/P1PPPP2/RNBQKB1R b KQkq - 3 7"),
    ("opening", "r1bq1bnr/nppp1kpp/p7/4p2P/2P2p1R/N7/PP1PPPP1/R1BQKBN1 w Q - 2 8"),
    ("opening", "r1bq1bnr/p1pkp1pp/3p1p2/n7/3P4/N7/PP1QPPPP/R1B1KBNR b KQ - 2 8"),
    ("opening", "rnbqkb1r/1ppppppp/5n2/P7/8/6P1/P1PPPP1P/RNBQKBNR b KQkq - 0 3"),
    ("opening", "r1bqkb1r/ppp1pppp/5n2/3pn3/P6P/2N5/1PPPPPP1/R1BQKBNR b KQkq - 0 5"),
    ("opening", "rnb1kbnr/pp3ppp/2p5/2Ppp3/1q3P1P/P7/1P1PP1P1/RNBQKBNR w KQkq - 0 7"),
    ("opening", "1rbqkbnr/pp2pp1p/B1p5/3p2p1/1n6/P1P1P3/1P1P1PPP/RNBQK1NR w KQk - 2 7"),
    ("opening", "r1bqkbnr/pppppppp/n7/8/8/3P4/PPP1PPPP/RNBQKBNR w KQkq - 1 2"),
    ("opening", "rnbqk1nr/1p1ppp1p/Q6b/2p5/5p2/4P3/PPPP2PP/RNB1KBNR b KQkq - 0 7"),
    ("opening", "rnbqkbnr/ppppp1pp/5p2/8/8/N7/PPPPPPPP/R1BQKBNR w KQkq - 0 2"),
    ("opening", "1rbqkbnr/ppppp1pp/8/5p2/nP6/2P2NP1/P2PPP1P/RNBQKB1R b KQk - 3 6"),
    ("opening", "rn1qk1n1/p1ppbppr/b7/1p2p1Bp/1PN5/2PP3P/P3PPP1/R2QKBNR b KQq - 2 7"),
    ("middlegame", "r3kb1r/pppb1p1p/1Q1p1nB1/8/PPP1p1q1/2N1Pn2/3P1PPP/R1BK2NR w kq - 5 15"),
    ("middlegame", "r2k1r2/pp2n1Np/4b1p1/2p1b3/2B1P1P1/1P2q3/RB2RN2/1K6 w - - 6 32"),
    ("middlegame", "r1Q2b2/1b2pk2/n1p4r/qp4p1/4P2P/N1PP1P2/pB2B1P1/R2K3n b - - 0 28"),
    ("middlegame", "1nb2bq1/1p3p1r/1r2pk2/N2p2pp/3P1PPP/BP5N/PnPK4/R3R3 w - - 0 33"),
    ("middlegame", "1rbq1k1r/1pppb1p1/3PQ1n1/pP3p1p/P7/2NP4/R3PPPP/4KBNR w K - 1 18"),
    ("middlegame", "r1k3n1/2p5/1p3p1Q/3bp3/pb1PPP2/3B2PN/1qPB3P/4K1R1 b - - 2 29"),
    ("middlegame", "1rb1k1nr/p1p2qbp/2np1p2/1p2pP2/7P/PPPP4/3QPR2/RNB1KBN1 w Qk - 3 13"),
    ("middlegame", "1rbBr3/p2p2kp/n5p1/q3p3/1P2B3/N1P4P/P2nKP2/4R1NR w - - 3 32"),
    ("middlegame", "rn2k2r/p1ppn1p1/1pb1p3/P1bP3p/2PRPp2/6PR/1P1Q1q2/1NBK1BN1 b kq e3 0 14"),
    ("middlegame", "r4bnr/1pp1kppp/n1bpp3/8/P3P3/p2P1P1N/R1P3PP/1N1K1B1R w - - 0 14"),
    ("middlegame", "r4k1r/p4pbR/1pp5/2nPp3/P5P1/RP1q1P1K/2PP2P1/1N3bN1 w - - 1 26"),
    ("middlegame", "5b1r/1p1kpppp/nrp4n/pq2PPB1/3P1P2/2K4N/7P/1N2R3 w - - 0 28"),
    ("middlegame", "rnq2bnr/pbp2pp1/Bpkpp2p/8/4PPPP/2NK3N/PPPP4/R1B1Q1R1 w - - 7 13"),
    ("middlegame", "3n1b1r/1bp1kpp1/7p/1p2P3/rP1Pp1P1/B1P1Kn1P/P1N5/2R3NR b - - 1 23"),
    ("middlegame", "1r1qkbnr/n7/bppp1p1p/1p2p1p1/PPP5/3PPNPB/4QP1P/R1B1K2R w KQk - 1 16"),
    ("middlegame", "rn5r/p3p1bp/5kpn/1q1p1P2/Pp1P1B1P/1P3P2/4NQP1/RN1K1b1R b - - 6 21"),
    ("endgame", "R4n2/8/1K6/q5k1/8/8/1R6/8 w - - 0 146"),
    ("endgame", "8/4N3/5p2/5P2/kB1P4/p2pP2R/8/3K4 w - - 0 108"),
    ("endgame", "4Q1r1/8/P5k1/8/1K6/8/4r3/3b4 b - - 0 141"),
    ("endgame", "8/4k3/7P/Pn2Pp2/1P1bN3/2p4K/8/7n w - - 0 81"),
    ("endgame", "8/7p/pp6/3k3n/2p3p1/3b4/5K2/8 w - - 0 75"),
    ("endgame", "8/8/2n5/8/6k1/p7/P2K4/1B4B1 b - - 0 139"),
    ("endgame", "8/2K5/1p3n1k/Q4p1p/4r2P/1P6/8/8 b - - 0 62"),
    ("endgame", "8/8/P7/RK5k/3B4/7p/R7/8 b - - 0 93"),
    ("endgame", "5k2/3r4/8/3n3P/P2P1p1P/4p3/4B1K1/1r6 w - - 0 80"),
    ("endgame", "n7/3Nk3/8/1p1p4/1P4pq/6p1/6K1/8 w - - 0 79"),
    ("endgame", "k7/8/3P4/2N5/8/3b4/7N/Kn6 w - - 0 123"),
    ("endgame", "8/7k/R7/RR5p/7P/8/8/6Kn b - - 0 147"),
    ("endgame", "8/k6B/1p5K/p7/4Pp1N/8/8/2n5 w - - 0 109"),
    ("endgame", "8/8/2P5/p6p/P7/6bP/4N3/K6k w - - 0 122"),
    ("endgame", "5r2/p4B2/1k6/8/Pb6/R4N2/1B2P3/3K4 b - - 0 84"),
    ("endgame", "1R5B/8/4B2N/1pb1P3/1p2k2P/8/8/R4K2 b - - 0 76"),
)
START_FEN = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
KIWIPETE_FEN = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
#: (name, FEN, default depth, {depth: published node count}); the default depths take python-chess
#: a few seconds here
PERFT_POSITIONS = (
    ("start", START_FEN, 4, {1: 20, 2: 400, 3: 8_902, 4: 197_281, 5: 4_865_609}),
    ("kiwipete", KIWIPETE_FEN, 3, {1: 48, 2: 2_039, 3: 97_862, 4: 4_085_603}),
)
#: perft series: envfleet's, and the python-chess reference
PERFT_SERIES = ("envfleet-perft", "python-chess-perft")


def is_chess(env_id: str) -> bool:
    return env_id == CHESS_ID


def chess_env_status() -> str | None:
    """None when this envfleet has the native Chess-v0 env, else why not."""
    from envfleet.registry import NATIVE_ENVS

    if CHESS_ID in NATIVE_ENVS:
        return None
    return f"{CHESS_ID} is not available in this envfleet (envfleet.make does not know it yet)"


def _missing(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return f"not installed (pip install 'envfleet[chess-bench]' for {module})"
    return None


# --- the bench positions -----------------------------------------------------------------------


def generate_positions(per_phase: int = 16, seed: int = 0) -> list[tuple[str, str]]:
    """(phase, FEN) of ``BENCH_POSITIONS``: seeded random games (python-chess) stopped in the
    opening, the middlegame and the endgame."""
    import chess

    rng = random.Random(seed)

    def play_until(done: Any) -> str:
        while True:  # a game that ends first is played again (the generator moves on)
            board = chess.Board()
            for ply in range(400):
                moves = list(board.legal_moves)
                if game_over(board, moves, 0):
                    break
                if done(board, ply):
                    return board.fen()
                board.push(moves[rng.randrange(len(moves))])

    out = []
    for _ in range(per_phase):
        depth = rng.randrange(2, 16)
        out.append(("opening", play_until(lambda b, ply, d=depth: ply == d)))
    for _ in range(per_phase):
        depth = rng.randrange(24, 70)
        out.append(("middlegame", play_until(
            lambda b, ply, d=depth: ply == d and len(b.piece_map()) >= 18)))
    for _ in range(per_phase):
        men = rng.randrange(6, 13)
        out.append(("endgame", play_until(
            lambda b, ply, m=men: len(b.piece_map()) <= m and b.halfmove_clock < 60)))
    return out


def start_fens(num_envs: int) -> list[str]:
    """Board i's start position: ``BENCH_POSITIONS[i % 48]`` (the same for every contender)."""
    return [BENCH_POSITIONS[i % len(BENCH_POSITIONS)][1] for i in range(num_envs)]


# --- python-chess -------------------------------------------------------------------------------


def game_over(board: Any, moves: list[Any], plies: int) -> bool:
    """Chess-v0's end of a game for a python-chess board whose legal moves are ``moves``
    (``plies``: plies since its start position, truncated at ``GAME_PLIES``)."""
    return (not moves or plies >= GAME_PLIES or board.halfmove_clock >= 100
            or board.is_insufficient_material() or board.is_repetition(3))


class PythonChessGames:
    """N python-chess boards in random self-play from the bench positions; ``moves[i]`` is
    board i's mask (its legal moves, a new list every ply), kept for the next ply."""

    def __init__(self, num_envs: int, seed: int) -> None:
        import chess

        self.seed = seed
        self.rng = random.Random(seed)
        self.starts = [chess.Board(fen) for fen in start_fens(num_envs)]
        self.boards = [start.copy() for start in self.starts]
        self.moves: list[list[Any]] = [[] for _ in range(num_envs)]
        self.plies = [0] * num_envs

    def reset(self) -> list[list[Any]]:
        self.rng.seed(self.seed)
        for i, start in enumerate(self.starts):
            board = self.boards[i] = start.copy()
            self.moves[i] = list(board.legal_moves)
            self.plies[i] = 0
        return self.moves

    def step(self) -> list[list[Any]]:
        """One random legal ply on every board; finished games restart at their position."""
        rng = self.rng
        return self.play([rng.randrange(len(legal)) for legal in self.moves])

    def play(self, actions: Any) -> list[list[Any]]:
        """Board i plays its legal move ``actions[i]`` (an index into ``moves[i]``: python-chess
        has no action labels); finished games restart at their position."""
        moves, plies, boards = self.moves, self.plies, self.boards
        for i, board in enumerate(boards):
            board.push(moves[i][actions[i]])
            plies[i] += 1
            legal = moves[i] = list(board.legal_moves)  # the next ply's mask
            if game_over(board, legal, plies[i]):
                board = boards[i] = self.starts[i].copy()
                moves[i] = list(board.legal_moves)
                plies[i] = 0
        return moves

    @staticmethod
    def policy(moves: list[list[Any]], rng: np.random.Generator) -> np.ndarray:
        """The user loop's policy here: a uniformly random index into each board's list."""
        counts = np.fromiter(map(len, moves), np.int64, len(moves))
        return (rng.random(len(moves)) * counts).astype(np.int64)


def _python_chess(reference_id: str, num_envs: int, seed: int) -> BaselineEnv:
    games = PythonChessGames(num_envs, seed)
    return BaselineEnv(reset=games.reset, step=games.step, action_space=None,
                       close=lambda: None)


# --- OpenSpiel ----------------------------------------------------------------------------------


class OpenSpielGames:
    """N OpenSpiel chess states in random self-play from the bench positions; ``masks[i]`` is
    ``legal_actions_mask()`` (a new list of 4672 ints every ply), or that as a NumPy bool
    array with ``as_numpy``."""

    def __init__(self, num_envs: int, seed: int, as_numpy: bool = False) -> None:
        import pyspiel

        self.game = pyspiel.load_game("chess")
        self.seed, self.as_numpy = seed, as_numpy
        self.rng = random.Random(seed)
        self.fens = start_fens(num_envs)
        self.states = [self.game.new_initial_state(fen) for fen in self.fens]
        self.masks: list[Any] = [None] * num_envs
        self.plies = [0] * num_envs

    def _mask(self, state: Any) -> Any:
        mask = state.legal_actions_mask()
        return np.asarray(mask, dtype=bool) if self.as_numpy else mask

    def reset(self) -> list[Any]:
        self.rng.seed(self.seed)
        for i, fen in enumerate(self.fens):
            state = self.states[i] = self.game.new_initial_state(fen)
            self.masks[i] = self._mask(state)
            self.plies[i] = 0
        return self.masks

    def step(self) -> list[Any]:
        """One random legal ply on every state; finished games restart at their position."""
        states, masks, plies, rng = self.states, self.masks, self.plies, self.rng
        for i, state in enumerate(states):
            legal = state.legal_actions()
            state.apply_action(legal[rng.randrange(len(legal))])
            plies[i] += 1
            if plies[i] >= GAME_PLIES or state.is_terminal():
                state = states[i] = self.game.new_initial_state(self.fens[i])
                plies[i] = 0
            masks[i] = self._mask(state)  # the next ply's mask
        return masks

    def play(self, actions: Any) -> list[Any]:
        """State i plays action ``actions[i]`` (a label its mask allows); finished games
        restart at their position."""
        states, masks, plies = self.states, self.masks, self.plies
        for i, state in enumerate(states):
            state.apply_action(int(actions[i]))
            plies[i] += 1
            if plies[i] >= GAME_PLIES or state.is_terminal():
                state = states[i] = self.game.new_initial_state(self.fens[i])
                plies[i] = 0
            masks[i] = self._mask(state)
        return masks

    @staticmethod
    def policy(masks: list[Any], rng: np.random.Generator) -> np.ndarray:
        """The user loop's policy: ``random_legal_from_mask`` on the masks as one array."""
        return random_legal_from_mask(masks, rng)


def _openspiel(as_numpy: bool):
    def build(reference_id: str, num_envs: int, seed: int) -> BaselineEnv:
        games = OpenSpielGames(num_envs, seed, as_numpy)
        return BaselineEnv(reset=games.reset, step=games.step, action_space=None,
                           close=lambda: None)

    return build


# --- the user loop's policy ---------------------------------------------------------------------


def random_legal_from_mask(mask: Any, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random legal action per row of ``mask`` ((N, 4672) bools, or what
    ``np.asarray`` makes one of: OpenSpiel's lists), 0 for a row without one: the NumPy work a
    masked random policy does between steps (the user loop's policy on every side)."""
    mask = np.asarray(mask, dtype=bool)
    rows, labels = np.nonzero(mask)
    counts = np.bincount(rows, minlength=len(mask))
    pick = np.cumsum(counts) - counts + (rng.random(len(mask)) * counts).astype(np.int64)
    out = np.zeros(len(mask), np.int64)
    has = counts > 0
    out[has] = labels[pick[has]]
    return out


# --- pgx ----------------------------------------------------------------------------------------


class PgxGames:
    """pgx's chess on JAX's CPU backend, N boards from the initial position (pgx cannot load a
    FEN), finished games replaced by an initial state. ``step``: one jitted function per ply
    that draws a uniformly random legal action with ``jax.random`` (its mask stays a JAX
    array); ``play``: the caller's actions, the mask handed back as a NumPy array."""

    def __init__(self, num_envs: int, seed: int) -> None:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported (the worker's)
        import jax
        import jax.numpy as jnp
        import pgx

        self.jax, self.jnp, self.seed, self.num_envs = jax, jnp, seed, num_envs
        env = pgx.make("chess")
        self._init = jax.jit(jax.vmap(env.init))
        step_env = jax.vmap(env.step)

        def advance(state: Any, first: Any, action: Any) -> Any:
            state = step_env(state, action)
            done = state.terminated | state.truncated

            def restart(start: Any, now: Any) -> Any:
                return jnp.where(done.reshape(done.shape + (1,) * (now.ndim - 1)), start, now)

            # most plies end no game: copy initial states in only when one did
            return jax.lax.cond(done.any(), lambda: jax.tree.map(restart, first, state),
                                lambda: state)

        def ply(state: Any, first: Any, key: Any) -> tuple[Any, Any]:
            key, sub = jax.random.split(key)
            mask = state.legal_action_mask
            # a uniformly random legal action: the k-th legal label, k uniform in [0, count)
            count = jnp.cumsum(mask, axis=1, dtype=jnp.int32)
            k = jnp.floor(jax.random.uniform(sub, (num_envs,)) * count[:, -1]).astype(jnp.int32)
            action = jnp.argmax(count > k[:, None], axis=1).astype(jnp.int32)
            return advance(state, first, action), key

        self._ply = jax.jit(ply, donate_argnums=(0, 2))
        # no donation: the NumPy mask handed out may share the state's buffer
        self._advance = jax.jit(advance)
        self.state: Any = None

    def reset(self) -> Any:
        keys = self.jax.random.split(self.jax.random.PRNGKey(self.seed), self.num_envs + 1)
        self.first, self.state, self.key = self._init(keys[1:]), self._init(keys[1:]), keys[0]
        self.state.legal_action_mask.block_until_ready()
        return np.asarray(self.state.legal_action_mask)

    def step(self) -> Any:
        self.state, self.key = self._ply(self.state, self.first, self.key)
        self.state.legal_action_mask.block_until_ready()
        return self.state

    def play(self, actions: Any) -> np.ndarray:
        self.state = self._advance(self.state, self.first, self.jnp.asarray(actions,
                                                                            self.jnp.int32))
        return np.asarray(self.state.legal_action_mask)

    policy = staticmethod(random_legal_from_mask)

    def close(self) -> None:
        self.state = self.first = None


def _pgx(reference_id: str, num_envs: int, seed: int) -> BaselineEnv:
    games = PgxGames(num_envs, seed)
    return BaselineEnv(reset=games.reset, step=games.step, action_space=None,
                       close=games.close)


# --- EnvPool ------------------------------------------------------------------------------------


class EnvPoolGames:
    """EnvPool's ``Chess-v1`` (C++, sync mode: every board stepped each call, on
    ``num_threads`` threads), N boards from the initial position (it cannot load a FEN),
    finished games reset by EnvPool on the next step. It has no random-legal-action call:
    ``step`` draws one from its mask with ``random_legal_from_mask`` (NumPy, counted: the
    only way its users have); ``play`` takes the caller's actions."""

    def __init__(self, num_envs: int, seed: int, num_threads: int = 1) -> None:
        import envpool

        self.env = envpool.make_gymnasium(ENVPOOL_CHESS_ID, num_envs=num_envs,
                                          batch_size=num_envs, num_threads=num_threads,
                                          seed=seed)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.mask: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        self.rng = np.random.default_rng(self.seed)
        self.mask = self.env.reset()[1]["legal_action_mask"]
        return self.mask

    def step(self) -> np.ndarray:
        return self.play(random_legal_from_mask(self.mask, self.rng))

    def play(self, actions: Any) -> np.ndarray:
        self.mask = self.env.step(np.asarray(actions, np.int32))[4]["legal_action_mask"]
        return self.mask

    policy = staticmethod(random_legal_from_mask)

    def close(self) -> None:
        self.env.close()


def _envpool_chess(reference_id: str, num_envs: int, seed: int, num_threads: int = 1
                   ) -> BaselineEnv:
    games = EnvPoolGames(num_envs, seed, num_threads)
    return BaselineEnv(reset=games.reset, step=games.step, action_space=None,
                       close=games.close)


def peer_baselines() -> list[Baseline]:
    """The chess peers as ``Baseline`` entries (they play ``CHESS_ID`` only)."""
    return [
        Baseline("python-chess", "python-chess Boards in a Python loop, legal-move lists",
                 True, _python_chess, requires="chess", plays=CHESS_ID, extra="chess-bench"),
        Baseline("openspiel", "OpenSpiel chess from Python, legal_actions_mask() lists", True,
                 _openspiel(False), requires="pyspiel", plays=CHESS_ID, extra="chess-bench"),
        Baseline("openspiel-numpy", "OpenSpiel chess from Python, masks as NumPy bool arrays",
                 True, _openspiel(True), requires="pyspiel", plays=CHESS_ID, extra="chess-bench"),
        Baseline("pgx", "pgx chess, jax.jit(jax.vmap(env.step)) on CPU", False, _pgx,
                 requires="pgx", plays=CHESS_ID, threads=None, extra="chess-bench"),
        Baseline("envpool-chess", f"EnvPool's C++ {ENVPOOL_CHESS_ID} (sync mode, its best "
                 "thread count), random legal actions drawn from its mask in NumPy", False,
                 _envpool_chess, requires="envpool", plays=CHESS_ID, thread_sweep=True,
                 extra="envpool"),
    ]


# --- like-for-like comparison in one process ------------------------------------------------------


def native_options() -> dict[str, Any]:
    """``envfleet.make`` options of a native Chess-v0 bench point: games truncated at
    ``GAME_PLIES`` and restarted in the same step (as the peers restart theirs: every step is
    one ply on every board); ``copy`` stays envfleet's default (True) unless a series says."""
    return {"max_plies": GAME_PLIES, "autoreset_mode": "SameStep"}


def native_reset_options(env_id: str, num_envs: int) -> dict[str, Any] | None:
    """The ``reset`` options of a native point: Chess-v0 boards start at the bench positions."""
    return {"fen": start_fens(num_envs)} if is_chess(env_id) else None


def fairness(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """What a chess point's series plays, for its JSON row: ``copy`` ("copy": arrays or lists
    of the caller's own each ply; "view": envfleet's buffers, overwritten by the next step,
    ``copy=False``), ``positions`` ("bench": ``BENCH_POSITIONS`` in ``GAME_PLIES``-ply
    games; pgx and EnvPool cannot load a FEN: "initial", whole games from the initial
    position), ``actions`` (uniform over the legal moves, every series) and ``loop``
    ("tight": each side draws its actions its own way, inside the clock; "user": the
    caller's NumPy policy draws them between steps, outside the clock)."""
    copy = "view" if backend in NATIVE and options.get("copy", True) is False else "copy"
    initial = backend in INITIAL_ONLY
    return {"copy": copy, "positions": "initial" if initial else "bench",
            "game_plies": None if initial else GAME_PLIES,
            "actions": "uniform over legal moves", "loop": options.get("loop", "tight")}


class NativeGames:
    """envfleet's Chess-v0 playing the bench positions: ``step(random_legal_actions())`` with
    ``native_options()``, every board reset to its bench position; every step is one ply on
    every board (a finished game restarts in the same step, as the peers')."""

    def __init__(self, num_envs: int, seed: int, *, copy: bool = True,
                 num_threads: int | None = None, backend: str = "numba") -> None:
        import envfleet

        options: dict[str, Any] = {"num_threads": num_threads} if backend == "numba" else {}
        self.env = envfleet.make(CHESS_ID, num_envs, backend=backend, seed=seed, copy=copy,
                                 **native_options(), **options)
        self.seed, self.num_envs = seed, num_envs

    def reset(self) -> Any:
        _, info = self.env.reset(seed=self.seed,
                                 options=native_reset_options(CHESS_ID, self.num_envs))
        return info["action_mask"]

    def step(self) -> Any:
        return self.env.step(self.env.unwrapped.random_legal_actions())[4]["action_mask"]

    def play(self, actions: Any) -> Any:
        """One ply with the caller's actions; the new mask (the caller's own with copy=True)."""
        return self.env.step(actions)[4]["action_mask"]

    policy = staticmethod(random_legal_from_mask)

    def close(self) -> None:
        self.env.close()


def build_games(name: str, num_envs: int, seed: int, threads: int | None = None,
                copy: bool = True) -> Any:
    """The games object (``reset``, ``step``, ``play``, ``policy``, maybe ``close``) of a
    native backend (``numba`` with ``threads``, ``cuda``) or a peer (EnvPool on ``threads``)."""
    if name in NATIVE:
        return NativeGames(num_envs, seed, copy=copy, num_threads=threads, backend=name)
    if name == "python-chess":
        return PythonChessGames(num_envs, seed)
    if name in ("openspiel", "openspiel-numpy"):
        return OpenSpielGames(num_envs, seed, as_numpy=name == "openspiel-numpy")
    if name == "pgx":
        return PgxGames(num_envs, seed)
    if name == "envpool-chess":
        return EnvPoolGames(num_envs, seed, threads or 1)
    raise ValueError(f"no chess games named {name!r}; known: {', '.join((*NATIVE, *PEERS))}")
