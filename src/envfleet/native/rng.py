"""Counter-based randomness: every draw is a hash of (seed, episode, counter).

No generator state is carried between draws, so the same seed gives the same numbers on every
backend, in any order, on any number of threads. The scalar functions compile for numba CPU and
CUDA alike (``register_jitable``); ``*_torch`` are the same arithmetic on int64 tensors (uint64
bit patterns, with logical shifts emulated by masking).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from envfleet.native.jit import kernel_function

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_STREAM = 0xD1B54A32D192ED03
_TO_UNIT = 2.0**-53


@kernel_function
def mix64(z: np.uint64) -> np.uint64:
    """SplitMix64's finaliser: a bijective avalanche of 64 bits."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


@kernel_function
def random_u64(seed: np.uint64, episode: np.uint64, counter: np.uint64) -> np.uint64:
    """The 64 random bits keyed by (seed, episode, counter)."""
    key = mix64(seed * np.uint64(_GOLDEN) + np.uint64(_STREAM))
    return mix64(key ^ mix64(episode * np.uint64(_STREAM) + counter * np.uint64(_GOLDEN)))


@kernel_function
def uniform(seed: np.uint64, episode: np.uint64, counter: np.uint64, low: float, high: float):
    """A float64 in [low, high), computed as NumPy's ``Generator.uniform`` does."""
    unit = np.float64(random_u64(seed, episode, counter) >> np.uint64(11)) * _TO_UNIT
    return low + (high - low) * unit


@kernel_function
def env_uniform(rng: Any, i: int, k: int, low: float, high: float) -> float:
    """Draw ``k`` of env ``i``'s current step: ``rng`` is (seeds, episodes, steps) arrays."""
    seeds, episodes, steps = rng
    counter = (np.uint64(steps[i]) << np.uint64(16)) | np.uint64(k)
    return uniform(seeds[i], episodes[i], counter, low, high)


# --- torch twins (bit-identical) -------------------------------------------------------------


def _signed(value: int) -> int:
    """The int64 with the same bits as the uint64 ``value``."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _srl(z: Any, shift: int) -> Any:
    """Logical right shift of int64 tensors holding uint64 bits."""
    return (z >> shift) & ((1 << (64 - shift)) - 1)


def mix64_torch(z: Any) -> Any:
    """``mix64`` on an int64 tensor (wrapping multiplication, logical shifts)."""
    z = (z ^ _srl(z, 30)) * _signed(_MIX1)
    z = (z ^ _srl(z, 27)) * _signed(_MIX2)
    return z ^ _srl(z, 31)


def random_u64_torch(seed: Any, episode: Any, counter: Any) -> Any:
    """``random_u64`` on int64 tensors."""
    key = mix64_torch(seed * _signed(_GOLDEN) + _signed(_STREAM))
    return mix64_torch(key ^ mix64_torch(episode * _signed(_STREAM) + counter * _signed(_GOLDEN)))


def env_uniform_torch(rng: Any, k: int, low: float, high: float) -> Any:
    """``env_uniform`` for every env at once: a float64 tensor of shape (num_envs,)."""
    seeds, episodes, steps = rng
    counter = (steps.to(seeds.dtype) << 16) | k
    unit = _srl(random_u64_torch(seeds, episodes, counter), 11).double() * _TO_UNIT
    return low + (high - low) * unit


def env_uniforms_torch(rng: Any, count: int, low: Any, high: Any) -> Any:
    """Draws ``0 .. count - 1`` of every env at once: a float64 tensor (num_envs, count), column
    k bit for bit ``env_uniform_torch(rng, k, low, high)``; the seed's and the episode's hashes
    are taken once per env, not once per draw (~45 tensor ops whatever ``count``). On CPU
    (``tensor_math.HOST_NUMPY``) the same arithmetic runs in a compiled loop over NumPy views
    (``_uniforms_loop``); ``rng`` may also hold NumPy arrays (NumPy out).

    ``low`` and ``high``: numbers, or float64 tensors (arrays) of one value per env."""
    from envfleet.native.tensor_math import host_arrays, on_host

    seeds = rng[0]
    if on_host(seeds):
        arrays = (*host_arrays(tuple(rng)), count, *host_arrays((low, high)))
        out = _uniforms_loop(*arrays)
        if isinstance(seeds, np.ndarray):
            return out
        import torch

        return torch.from_numpy(out)
    import torch

    seeds, episodes, steps = rng
    draws = torch.arange(count, dtype=torch.int64, device=seeds.device)
    counter = ((steps.to(torch.int64) << 16).unsqueeze(1) | draws) * _signed(_GOLDEN)
    key = mix64_torch(seeds * _signed(_GOLDEN) + _signed(_STREAM)).unsqueeze(1)
    inner = mix64_torch(counter.add_((episodes * _signed(_STREAM)).unsqueeze(1)))
    bits = mix64_torch(inner.bitwise_xor_(key))
    unit = _srl(bits, 11).double().mul_(_TO_UNIT)
    if isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor):
        low, high = (torch.as_tensor(b, dtype=torch.float64, device=seeds.device).unsqueeze(-1)
                     for b in (low, high))
    return unit.mul_(high - low).add_(low)


def _uniforms_loop(seeds: np.ndarray, episodes: np.ndarray, steps: np.ndarray, count: int,
                   low: Any, high: Any) -> np.ndarray:
    """``env_uniforms_torch`` on int64 arrays holding uint64 bits: ``uniform``'s arithmetic
    compiled, in one pass without temporaries, the seed's hash taken once per env. The same
    arithmetic as whole-array NumPy ops took ~3x as long on thousands of draws, and ~22 us on a
    few: the ~45 ops' overhead, which made a 64-env torch CartPole step 1.9x slower than
    Gymnasium's NumPy one."""
    out = np.empty((seeds.shape[0], count))
    bounds = (np.asarray(low, dtype=np.float64).reshape(-1),
              np.asarray(high, dtype=np.float64).reshape(-1))
    _draw_loop()(seeds.view(np.uint64), episodes.view(np.uint64), steps, *bounds, out)
    return out


@functools.cache
def _draw_loop() -> Any:
    """The compiled loop of ``_uniforms_loop``, on the kernel cache (~0.5 s once per machine)."""
    from envfleet.native.jit import host_loop

    def loop(seeds: np.ndarray, episodes: np.ndarray, steps: np.ndarray, low: np.ndarray,
             high: np.ndarray, out: np.ndarray) -> None:
        for i in range(out.shape[0]):
            lo = low[i] if low.shape[0] > 1 else low[0]
            hi = high[i] if high.shape[0] > 1 else high[0]
            # random_u64 with the seed's hash and the episode's product taken once per env
            key = mix64(seeds[i] * np.uint64(_GOLDEN) + np.uint64(_STREAM))
            base = episodes[i] * np.uint64(_STREAM)
            step = np.uint64(steps[i]) << np.uint64(16)
            for k in range(out.shape[1]):
                counter = step | np.uint64(k)
                bits = mix64(key ^ mix64(base + counter * np.uint64(_GOLDEN)))
                out[i, k] = lo + (hi - lo) * (np.float64(bits >> np.uint64(11)) * _TO_UNIT)

    return host_loop(loop, "draws", "the reset draws loop")
