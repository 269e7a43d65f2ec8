"""Gymnasium's vector wrappers on native envs: every applicable one works on NumPy outputs
(``backend="numba"``); on torch-tensor outputs (``backend="torch"``, ``"cuda"``) the ones in
``ON_TENSORS`` work and keep tensors, the ones in ``NUMPY_ONLY`` do not. docs/USAGE.md lists both
sets from here: when a Gymnasium release changes one, this test says so."""

from __future__ import annotations

import gymnasium as gym
import gymnasium.wrappers.vector as W
import numpy as np
import pytest

import envfleet

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array_wrap__:DeprecationWarning")  # NumPy functions on CPU tensors

torch = pytest.importorskip("torch")
pytest.importorskip("array_api_compat")  # NumpyToTorch / ArrayConversion need it (torch extra)

#: wrappers whose arithmetic works on torch tensors: outputs stay tensors, values as on NumPy
#: (the Transform* ones run your function: it must take tensors)
ON_TENSORS = {
    "TransformObservation": lambda env: W.TransformObservation(env, lambda o: o * 2),
    "TransformReward": lambda env: W.TransformReward(env, lambda r: r * 2),
    "TransformAction": lambda env: W.TransformAction(env, lambda a: 1 - a),
    "VectorizeTransformReward": lambda env: W.VectorizeTransformReward(
        env, gym.wrappers.TransformReward, func=lambda r: r * 2),
}
#: work on CPU tensors only: NumPy converts the tensor and wraps the result back (a deprecated
#: NumPy path; a CUDA tensor cannot be converted)
ON_CPU_TENSORS = {
    "ClipReward": lambda env: W.ClipReward(env, 0.0, 0.5),
}
#: wrappers that do NumPy arithmetic on the outputs: they fail (or return NumPy) on tensors
NUMPY_ONLY = {
    "RecordEpisodeStatistics": lambda env: W.RecordEpisodeStatistics(env),
    "NormalizeObservation": lambda env: W.NormalizeObservation(env),
    "NormalizeReward": lambda env: W.NormalizeReward(env),
    "FlattenObservation": lambda env: W.FlattenObservation(env),
    "ReshapeObservation": lambda env: W.ReshapeObservation(env, (2, 2)),
    "DtypeObservation": lambda env: W.DtypeObservation(env, np.float64),
    "VectorizeTransformObservation": lambda env: W.VectorizeTransformObservation(
        env, gym.wrappers.TransformObservation, func=lambda o: o,
        observation_space=env.single_observation_space),
    "VectorizeTransformAction": lambda env: W.VectorizeTransformAction(
        env, gym.wrappers.TransformAction, func=lambda a: a,
        action_space=env.single_action_space),
    "DictInfoToList": lambda env: W.DictInfoToList(env),  # asserts NumPy info arrays
}
#: need a space no native env has (Box actions, Dict or image observations) or render frames
NOT_APPLICABLE = {"ClipAction", "RescaleAction", "RescaleObservation", "FilterObservation",
                  "GrayscaleObservation", "ResizeObservation", "RecordVideo", "HumanRendering"}
#: array conversions (NumpyToTorch, ArrayConversion; JAX's: not installed) tested below
CONVERSIONS = {"NumpyToTorch", "ArrayConversion", "JaxToNumpy", "JaxToTorch"}
NUM_ENVS, STEPS = 4, 40


def test_every_gymnasium_vector_wrapper_is_classified():
    known = {*ON_TENSORS, *ON_CPU_TENSORS, *NUMPY_ONLY, *NOT_APPLICABLE, *CONVERSIONS}
    assert set(W.__all__) <= known, sorted(set(W.__all__) - known)


def accepts(wrap, mode: str) -> bool:
    """Whether Gymnasium's wrapper takes an env in ``mode`` (observation wrappers refuse
    SameStep, on any vector env)."""
    try:
        wrap(envfleet.make("CartPole-v1", 1, autoreset_mode=mode))
    except ValueError as error:
        assert "autoreset_mode" in str(error)
        return False
    return True


def run(wrap, backend: str, mode: str) -> list:
    """Wrap a CartPole env, reset with seed 0, step through 40 random actions; every output."""
    env = wrap(envfleet.make("CartPole-v1", NUM_ENVS, backend=backend, autoreset_mode=mode))
    actions = np.random.default_rng(0).integers(0, 2, (STEPS, NUM_ENVS))
    if backend == "torch":
        actions = torch.as_tensor(actions)
    obs, info = env.reset(seed=0)
    out = [obs, info]
    for a in actions:
        out += env.step(a)
    env.close()
    return out


def as_numpy(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def leaves(x) -> list:
    """The arrays/tensors/scalars in nested dicts and lists, in order."""
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in leaves(x[k])]
    if isinstance(x, list | tuple):
        return [leaf for v in x for leaf in leaves(v)]
    return [x]


MODES = ("NextStep", "SameStep")  # SameStep: info carries final_obs arrays (tensors on torch)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted({*ON_TENSORS, *ON_CPU_TENSORS}))
def test_wrapper_works_on_tensors_as_on_numpy(name, mode):
    wrap = ON_TENSORS.get(name) or ON_CPU_TENSORS[name]
    if not accepts(wrap, mode):
        pytest.skip(f"{name} refuses {mode} on every vector env")
    on_numpy = run(wrap, "numba", mode)
    on_tensors = run(wrap, "torch", mode)
    for a, b in zip(leaves(on_numpy), leaves(on_tensors), strict=True):
        if isinstance(a, np.ndarray) and a.size:
            assert isinstance(b, torch.Tensor), (name, type(b))
        np.testing.assert_array_equal(a, as_numpy(b))


@pytest.mark.parametrize("name", sorted(NUMPY_ONLY))
def test_wrapper_works_on_numpy_not_on_tensors(name):
    modes = [mode for mode in MODES if accepts(NUMPY_ONLY[name], mode)]
    for mode in modes:
        run(NUMPY_ONLY[name], "numba", mode)
    try:
        outs = [run(NUMPY_ONLY[name], "torch", mode) for mode in modes]
    except Exception:
        return  # fails on tensors, as docs/USAGE.md says
    kinds = {type(x).__name__ for out in outs for x in out[-5:-1]}
    assert kinds != {"Tensor"}, (f"{name} now works on tensors: move it to ON_TENSORS "
                                 f"(docs/USAGE.md)")


def test_record_episode_statistics_on_numpy_counts_cartpole_episodes():
    env = W.RecordEpisodeStatistics(envfleet.make("CartPole-v1", NUM_ENVS, backend="numba"))
    env.reset(seed=0)
    episodes = []
    for a in np.random.default_rng(0).integers(0, 2, (200, NUM_ENVS)):
        *_, info = env.step(a)
        if "episode" in info:
            done = info["_episode"]
            episodes += list(zip(info["episode"]["r"][done], info["episode"]["l"][done],
                                 strict=True))
    assert episodes and all(r == length > 0 for r, length in episodes)  # +1 per step


def test_numpy_only_wrappers_after_converting_tensors_to_numpy():
    """The recipe docs/USAGE.md gives for NUMPY_ONLY wrappers on the torch backend."""
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="torch")
    env = W.NormalizeObservation(W.RecordEpisodeStatistics(
        W.ArrayConversion(env, env_xp=torch, target_xp=np)))
    obs, _ = env.reset(seed=0)
    for a in np.random.default_rng(0).integers(0, 2, (STEPS, NUM_ENVS)):
        obs, reward, *_ = env.step(a)
    assert isinstance(obs, np.ndarray) and isinstance(reward, np.ndarray)


def test_numpy_to_torch_on_a_numba_env():
    env = W.NumpyToTorch(envfleet.make("CartPole-v1", NUM_ENVS, backend="numba"))
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(torch.zeros(NUM_ENVS, dtype=torch.int64))
    assert all(isinstance(x, torch.Tensor) for x in (obs, reward, terminated, truncated))
    env.close()
