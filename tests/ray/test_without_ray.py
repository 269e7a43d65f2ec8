"""``backend="ray"`` without ray installed names the extra; the driver-side info merge of the
ray executor matches Gymnasium's env-by-env ``_add_info`` (no Ray needed for either)."""

from __future__ import annotations

import functools

import numpy as np
from gymnasium.vector import SyncVectorEnv

from envfleet.executors.infos import merge, tree_of
from tests.executors.envs import CountingEnv
from tests.test_extras import run_without


def test_make_without_ray_names_the_extra() -> None:
    proc = run_without(("ray",), """
        import envfleet
        from envfleet.registry import BackendUnavailableError, backend_status
        assert "envfleet[ray]" in backend_status("ray")
        for env in ("CartPole-v1", "Pendulum-v1"):
            try:
                envfleet.make(env, 2, backend="ray")
            except BackendUnavailableError as error:
                assert "pip install 'envfleet[ray]'" in str(error), error
            else:
                raise AssertionError("no error")
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_batched_infos_merge_as_gymnasium_adds_them_env_by_env() -> None:
    """Shares' batched infos put at their rows equal the infos of one SyncVectorEnv."""
    rng = np.random.default_rng(0)
    n, shares = 7, [(0, 3), (3, 5), (5, 7)]
    infos = [{} if rng.random() < 0.3 else
             {"t": int(rng.integers(9)), "x": float(rng.random()), "ok": bool(rng.random() < .5),
              "v": rng.random(2), "o": ("s", i), "nested": {"k": i}} for i in range(n)]
    infos[4] = {"t": 1.5}  # another type after the first env's: cast as Gymnasium casts it
    sync = SyncVectorEnv([functools.partial(CountingEnv, i) for i in range(n)])
    whole: dict = {}
    for i, info in enumerate(infos):
        whole = sync._add_info(whole, info, i)
    parts = []  # (the shares' batched infos, as ray's driver merges them: infos.merge)
    for start, stop in shares:
        part: dict = {}
        view = SyncVectorEnv([functools.partial(CountingEnv, i) for i in range(stop - start)])
        for j in range(stop - start):
            part = view._add_info(part, infos[start + j], j)
        parts.append((slice(start, stop), tree_of(part, stop - start)))
    merged = merge(parts, n)
    assert sorted(merged) == sorted(whole)
    for key, value in whole.items():
        if isinstance(value, dict):
            for k, v in value.items():
                np.testing.assert_array_equal(merged[key][k], v)
            continue
        assert merged[key].dtype == value.dtype, key
        for a, b in zip(merged[key], value, strict=True):
            assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, key
