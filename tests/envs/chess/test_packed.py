"""Chess-v0's ``packed=True`` outputs: the mask as bits, the planes as bitboards.

Every packed output must be exactly the packing of the unpacked env's output in lockstep (same
seed, same actions), on numba and on cuda (under the simulator: a few boards and steps).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import envfleet
from envfleet.chess import unpack_mask, unpack_planes
from envfleet.registry import backend_status
from tests.cuda_helpers import assert_kernels_lower, host, only_under_simulator

# starts with castling rights, an en-passant square and a half-move clock, for both sides
FENS = [
    "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
    "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",
    "r3k2r/8/8/8/3pP3/8/8/R3K2R b KQkq e3 37 40",
]


def pack_planes(planes: np.ndarray) -> np.ndarray:
    """The packed form of unpacked planes ``(n, 8, 8, 21)``, computed independently of the
    kernels: ``np.packbits`` of each plane's 64 squares, the clock word from plane 19."""
    n = planes.shape[0]
    bits = planes.reshape(n, 64, 21).transpose(0, 2, 1) != 0  # (n, 21, 64), square order
    words = np.packbits(bits, axis=2, bitorder="little").view("<u8")[..., 0].copy()
    words[:, 19] = np.rint(planes[:, 0, 0, 19] * 100).astype(np.uint64)
    return words


def assert_packed(packed_out, plain_out, planes: bool) -> None:
    """One reset's or step's outputs of the packed env against the plain env's."""
    *arrays_p, info_p = packed_out
    *arrays_u, info_u = plain_out
    mask_p, mask_u = host(info_p["action_mask"]), host(info_u["action_mask"])
    assert mask_p.dtype == np.uint8 and mask_p.shape == (mask_u.shape[0], 584)
    np.testing.assert_array_equal(mask_p, np.packbits(mask_u, axis=1, bitorder="little"))
    np.testing.assert_array_equal(unpack_mask(mask_p), mask_u)
    obs_p, obs_u = host(arrays_p[0]), host(arrays_u[0])
    if planes:
        assert obs_p.dtype == np.uint64 and obs_p.shape == (obs_u.shape[0], 21)
        np.testing.assert_array_equal(obs_p, pack_planes(obs_u))
        unpacked = unpack_planes(obs_p)
        assert unpacked.dtype == obs_u.dtype
        np.testing.assert_array_equal(unpacked, obs_u)
    else:  # compact observations are small: unchanged
        np.testing.assert_array_equal(obs_p, obs_u)
    for p, u in zip(arrays_p[1:], arrays_u[1:], strict=True):
        np.testing.assert_array_equal(host(p), host(u))


def lockstep(backend: str, n: int, plies: int, observation: str, **kw) -> None:
    """The packed env and the plain numba env, stepped with the same random legal actions
    (games end and autoreset along the way)."""
    plain = envfleet.make("Chess-v0", n, backend="numba", seed=7, observation=observation, **kw)
    extra = {"threads_per_block": 32} if backend == "cuda" else {}
    packed = envfleet.make("Chess-v0", n, backend=backend, seed=7, observation=observation,
                           packed=True, **kw, **extra)
    fens = [FENS[i % len(FENS)] for i in range(n)]
    planes = observation == "planes"
    assert_packed(packed.reset(options={"fen": fens}), plain.reset(options={"fen": fens}),
                  planes)
    for _ in range(plies):
        actions = plain.random_legal_actions()
        np.testing.assert_array_equal(host(packed.random_legal_actions()), actions)
        assert_packed(packed.step(actions), plain.step(actions), planes)
    packed.close()
    plain.close()


@pytest.mark.parametrize(("observation", "kw"), [
    ("planes", {}),
    ("compact", {"opponent": "random", "agent_color": "alternate"}),
])
def test_packed_outputs_are_the_packed_plain_outputs(observation, kw):
    """Many random games (300 plies on 48 boards: mates, draws and resets included)."""
    lockstep("numba", 48, 300, observation, max_plies=120, **kw)


def test_packed_planes_with_the_opponent_and_illegal_actions_that_lose():
    """The packed mask decides legality too: an illegal action loses, a legal one plays."""
    kw = dict(seed=1, observation="planes", opponent="random", agent_color="black",
              illegal_action="lose")
    plain = envfleet.make("Chess-v0", 4, backend="numba", **kw)
    packed = envfleet.make("Chess-v0", 4, backend="numba", packed=True, **kw)
    assert_packed(packed.reset(), plain.reset(), True)
    actions = plain.random_legal_actions()
    actions[1] = 0  # a1 north one square: never legal for black after white's opening
    out_p, out_u = packed.step(actions), plain.step(actions)
    assert_packed(out_p, out_u, True)
    assert out_p[2][1] and out_p[1][1] == -1.0 and packed.outcome(1) == "illegal_move"
    assert not out_p[2][0]


def test_packed_refuses_illegal_actions_by_default():
    env = envfleet.make("Chess-v0", 2, backend="numba", seed=0, packed=True)
    env.reset()
    with pytest.raises(ValueError, match="illegal action 0 for board 1"):
        env.step(np.array([2426, 0]))
    env.step(np.array([2426, 2426]))  # e2e4 on both boards
    assert env.fen(1) == "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


@pytest.mark.parametrize("value", ["yes", 1, None, "bits"])
def test_packed_must_be_a_bool(value):
    with pytest.raises(ValueError, match=r"packed must be True .* or False, got"):
        envfleet.make("Chess-v0", 2, packed=value)


def test_unpack_helpers_on_torch_tensors_and_bad_input():
    rng = np.random.default_rng(0)
    mask = rng.integers(0, 256, (3, 584), dtype=np.uint8)
    words = rng.integers(0, 2**63, (3, 21), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    words[:, 19] = [0, 37, 100]
    np.testing.assert_array_equal(unpack_mask(torch.from_numpy(mask)).numpy(),
                                  unpack_mask(mask))
    planes = unpack_planes(words)
    assert planes.shape == (3, 8, 8, 21) and planes.dtype == np.float32
    np.testing.assert_array_equal(unpack_planes(torch.from_numpy(words)).numpy(), planes)
    assert planes[1, 5, 2, 19] == np.float32(37) / np.float32(100) and planes[2, 0, 0, 19] == 1
    assert planes[0, 0, 0, 0] == 1 and planes[0, 7, 7, 0] == words[0, 0] >> np.uint64(63)
    np.testing.assert_array_equal(unpack_planes(words[0]), planes[0])  # one board
    with pytest.raises(ValueError, match=r"unpack_mask expects .* \(\.\.\., 584\) and dtype "
                                         r"uint8.*got shape \(3, 4672\) and dtype bool"):
        unpack_mask(np.zeros((3, 4672), np.bool_))
    with pytest.raises(ValueError, match=r"unpack_planes expects .*uint64.*got shape "
                                         r"\(3, 8, 8, 21\)"):
        unpack_planes(planes)


@pytest.mark.parametrize("value", [[0] * 584, None, "bits", 3, (np.zeros(584, np.uint8),)])
@pytest.mark.parametrize("unpack", [unpack_mask, unpack_planes])
def test_unpack_helpers_name_what_they_take_when_given_something_else(unpack, value):
    with pytest.raises(TypeError, match=rf"^{unpack.__name__} expects a NumPy array or torch "
                                        rf"tensor .*, got {type(value).__name__}$"):
        unpack(value)


def test_single_env_packed():
    import gymnasium

    env = gymnasium.make("envfleet/Chess-v0", observation="planes", packed=True)
    obs, info = env.reset(seed=0)
    assert obs.shape == (21,) and obs.dtype == np.uint64 and info["action_mask"].shape == (584,)
    assert unpack_mask(info["action_mask"]).sum() == 20
    env.close()


_UNAVAILABLE = backend_status("cuda")


@pytest.mark.skipif(_UNAVAILABLE is not None, reason=f"cuda backend unavailable ({_UNAVAILABLE})")
@pytest.mark.parametrize("observation", ["planes", "compact"])
def test_cuda_packed_matches_numba(observation):
    """cuda's packed outputs are the packed numba outputs (tiny: the simulator is slow)."""
    lockstep("cuda", 4, 3, observation)


@pytest.mark.slow
@only_under_simulator
def test_packed_chess_kernels_type_and_lower_for_a_real_gpu():
    assert_kernels_lower("""
        from envfleet.envs.chess import env as chess_env
        for observation in ("planes", "compact"):
            params = chess_env.make_params(observation=observation, packed=True)
            spec = chess_env.SPEC.specialize(params)
            lower_kernels(spec, params, (NEXT_STEP,), n=4)
    """)
