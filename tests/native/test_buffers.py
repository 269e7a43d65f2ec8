"""Buffers from the spec: ``NativeEnvSpec.buffers`` declares every batch buffer once; the numba,
cuda and torch engines allocate exactly those (name, shape, dtype), the memory estimate covers
them, and the roofline study reads each family's flop count from its spec."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from envfleet.envs import FAMILIES
from envfleet.envs.chess.env import MASK_BYTES
from envfleet.envs.chess.env import SPEC as CHESS
from envfleet.native.driver import NEXT_STEP
from envfleet.native.memory import native_bytes
from envfleet.native.numba_backend import NumbaEngine
from envfleet.native.spec import PARAMS, InvalidSpecError, check_spec

CARTPOLE = FAMILIES["CartPole-v1"]
PACKED_CHESS = CHESS.specialize(CHESS.make_params(packed=True))


def host_buffers(engine: NumbaEngine) -> dict[str, np.ndarray]:
    """The numba engine's arrays by declared name (``params.*``: its per-env columns)."""
    arrays = {"obs": engine.obs, "final_obs": engine.final_obs, "rewards": engine.rewards,
              "terminated": engine.terminated, "truncated": engine.truncated,
              "pending": engine.pending, "seeds": engine.rng[0], "episodes": engine.rng[1],
              "steps": engine.rng[2]}
    arrays.update({f"state.{name}": getattr(engine.state, name) for name in engine.spec.state})
    columns = engine._kernel_state[len(engine.state):]
    per_env = [b for b in engine.spec.buffers(engine.num_envs) if b.role == PARAMS]
    assert not per_env  # declared only when asked for (``per_env``)
    names = [name for name in engine.spec.per_env_params
             if isinstance(getattr(engine.kernel_params, name), np.ndarray)]
    arrays.update({f"params.{name}": c for name, c in zip(names, columns, strict=True)})
    return arrays


def declared(spec, n: int, per_env: tuple[str, ...] = ()) -> dict[str, tuple]:
    return {b.name: (b.shape, b.dtype) for b in spec.buffers(n, per_env)}


@pytest.mark.parametrize("spec", [*FAMILIES.values(), PACKED_CHESS], ids=lambda s: s.id)
def test_the_numba_engine_allocates_what_the_spec_declares(spec):
    n = 3
    engine = NumbaEngine(spec, n, NEXT_STEP, spec.make_params(), 10, num_threads=1)
    actual = {name: (a.shape, a.dtype) for name, a in host_buffers(engine).items()}
    assert actual == declared(spec, n)
    allocated = sum(a.nbytes for a in host_buffers(engine).values())
    assert allocated <= native_bytes(spec, n, "numba")


def test_per_env_params_are_declared_columns():
    params = CARTPOLE.make_params(gravity=np.array([9.8, 3.7, 1.6]))
    engine = NumbaEngine(CARTPOLE, 3, NEXT_STEP, params, 10, num_threads=1)
    arrays = host_buffers(engine)
    assert {name for name in arrays if name.startswith("params.")} == {"params.gravity"}
    assert {name: (a.shape, a.dtype) for name, a in arrays.items()} == declared(
        CARTPOLE, 3, ("gravity",))
    np.testing.assert_array_equal(arrays["params.gravity"], [9.8, 3.7, 1.6])
    assert not arrays["params.gravity"].flags.writeable  # one compiled signature


def test_chess_masks_are_declared_state_columns():
    """Chess-v0's extra per-env outputs (its action masks) come from the same declaration:
    ``packed=True`` declares them as bits."""
    n = 2
    masks = {b.name: (b.shape, b.dtype, b.role) for b in CHESS.buffers(n)
             if b.name == "state.action_mask"}
    assert masks == {"state.action_mask": ((n, 4672), np.dtype(np.bool_), "state")}
    packed = {b.name: (b.shape, b.dtype) for b in PACKED_CHESS.buffers(n)}
    assert packed["state.action_mask"] == ((n, MASK_BYTES), np.dtype(np.uint8))


def test_the_torch_engine_carves_the_declared_buffers_from_one_arena():
    torch = pytest.importorskip("torch")
    from envfleet.native.torch_backend import state_dtype, torch_dtype, torch_engine

    n = 5
    engine = torch_engine(CARTPOLE, n, NEXT_STEP, CARTPOLE.make_params(), 10)
    arrays = {"obs": engine.obs, "final_obs": engine.final_obs, "rewards": engine.rewards,
              "terminated": engine.terminated, "truncated": engine.truncated,
              "pending": engine.pending, "seeds": engine.rng[0], "episodes": engine.rng[1],
              "steps": engine.rng[2],
              **{f"state.{name}": getattr(engine.state, name) for name in CARTPOLE.state}}
    for b in CARTPOLE.buffers(n):
        dtype = state_dtype(b.dtype) if b.role in ("state", "rng") else torch_dtype(b.dtype)
        assert (tuple(arrays[b.name].shape), arrays[b.name].dtype) == (b.shape, dtype), b.name
    storage = {t.untyped_storage().data_ptr() for t in arrays.values()}
    assert len(storage) == 1 and isinstance(engine.obs, torch.Tensor)  # one arena


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                    reason="constructs a CudaEngine: needs a GPU or the CUDA simulator")
@pytest.mark.parametrize("spec", [CARTPOLE, PACKED_CHESS], ids=lambda s: s.id)
def test_the_cuda_engine_allocates_what_the_spec_declares(spec):
    from envfleet.native.cuda_backend import CudaEngine

    n = 3
    params = (spec.make_params(gravity=np.array([9.8, 3.7, 1.6])) if spec is CARTPOLE
              else spec.make_params())
    engine = CudaEngine(spec, n, NEXT_STEP, params, 10)
    arrays = {"obs": engine._obs, "final_obs": engine._final_obs, "rewards": engine._rewards,
              "terminated": engine._terminated, "truncated": engine._truncated,
              "pending": engine._pending, "seeds": engine._rng[0], "episodes": engine._rng[1],
              "steps": engine._rng[2],
              **{f"state.{name}": getattr(engine._state, name) for name in spec.state}}
    per_env = ("gravity",) if spec is CARTPOLE else ()
    if per_env:
        arrays["params.gravity"] = engine._kernel_state[-1]
        np.testing.assert_array_equal(arrays["params.gravity"].copy_to_host(), [9.8, 3.7, 1.6])
    assert {name: (a.shape, a.dtype) for name, a in arrays.items()} == declared(spec, n, per_env)
    engine.close()


def test_flop_counts_live_on_the_spec():
    from benchmarks.studies import roofline

    assert CARTPOLE.flops_per_step == 28 and CHESS.flops_per_step is None
    counted = {env_id: spec.flops_per_step for env_id, spec in FAMILIES.items()
               if spec.flops_per_step is not None}
    assert counted == roofline.flops_by_family() == dict(roofline.FLOPS)
    assert roofline.step_counts("Acrobot-v1")["flops"] == 245
    with pytest.raises(InvalidSpecError, match="flops_per_step must be an int >= 1 or None"):
        check_spec(dataclasses.replace(CARTPOLE, flops_per_step=0))
