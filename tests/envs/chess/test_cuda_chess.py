"""Chess-v0 on the ``cuda`` backend against ``numba``: bit-for-bit equal states and outputs.

Runs on a GPU, or under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set before Python
starts); the simulator runs each board's thread as Python, so sizes stay tiny.
"""

from __future__ import annotations

import numpy as np
import pytest

import envfleet
from envfleet.registry import backend_status
from tests.cuda_helpers import assert_kernels_lower, only_under_simulator

_UNAVAILABLE = backend_status("cuda")
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None,
                                reason=f"cuda backend unavailable ({_UNAVAILABLE})")

FENS = [
    "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
    "6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1",  # mate in one for white
    "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",
]


def host(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def assert_same(cenv, nenv, outputs_c, outputs_n):
    for c, n in zip(outputs_c, outputs_n, strict=True):
        if isinstance(n, dict):
            np.testing.assert_array_equal(host(c["action_mask"]), n["action_mask"])
        else:
            np.testing.assert_array_equal(host(c), np.asarray(n))
    for name, c, n in zip(nenv.state._fields, cenv.state, nenv.state, strict=True):
        np.testing.assert_array_equal(host(c), np.asarray(n), err_msg=name)


@pytest.mark.parametrize("opponent", [None, "random"])
def test_cuda_matches_numba_bit_for_bit(opponent):
    kw = dict(seed=4, opponent=opponent, agent_color="alternate")
    cenv = envfleet.make("Chess-v0", 4, backend="cuda", threads_per_block=32, **kw)
    nenv = envfleet.make("Chess-v0", 4, backend="numba", **kw)
    options = {"fen": FENS}
    assert_same(cenv, nenv, cenv.reset(options=options), nenv.reset(options=options))
    for _ in range(3):
        actions = nenv.random_legal_actions()
        np.testing.assert_array_equal(host(cenv.random_legal_actions()), actions)
        assert_same(cenv, nenv, cenv.step(actions), nenv.step(actions))
        assert [cenv.fen(i) for i in range(4)] == [nenv.fen(i) for i in range(4)]
    if opponent is None:  # board 2: mate in one, then the autoreset
        cenv.reset(options=options)
        nenv.reset(options=options)
        actions = nenv.random_legal_actions()
        actions[2] = nenv.uci_to_action(2, "a1a8")
        out = cenv.step(actions)
        assert host(out[2])[2] and host(out[1])[2] == 1.0
        assert_same(cenv, nenv, out, nenv.step(actions))
        actions = nenv.random_legal_actions()  # board 2's step is its reset
        assert_same(cenv, nenv, cenv.step(actions), nenv.step(actions))
        assert cenv.fen(2) == FENS[2]


def test_cuda_refuses_illegal_actions_and_reads_boards():
    env = envfleet.make("Chess-v0", 2, backend="cuda", threads_per_block=32, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="illegal action 0 for board 1"):
        env.step(np.array([89, 0]))
    assert env.fen(0) == FENS[0]
    assert env.uci_to_action(1, "e2e4") == 2426 and env.action_to_uci(1, 2426) == "e2e4"
    env.step(np.array([2426, 2426]))
    assert env.fen(1) == "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


@pytest.mark.slow
@only_under_simulator
def test_chess_kernels_type_and_lower_for_a_real_gpu():
    """The chess kernels (and its random legal action row map) lower for sm_90."""
    assert_kernels_lower("""
        import numpy as np
        from numba.cuda.compiler import compile_cuda
        from numba.cuda.typing.typeof import typeof
        from envfleet.envs.chess import env as chess_env
        from envfleet.native import cuda_backend
        spec, n = chess_env.SPEC, 4
        lower_kernels(spec, spec.make_params(), (NEXT_STEP,), n=n)
        state = spec.state_type(**spec.allocate_state(n))
        rng = (np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, np.int64))
        kernel = cuda_backend.row_map(chess_env.random_legal_action)
        args = (n, state, rng, np.zeros(n, np.int64))
        compile_cuda(kernel.py_func, None, tuple(typeof(a) for a in args), cc=(9, 0))
    """)
