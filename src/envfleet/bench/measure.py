"""Measuring one point (a backend or baseline at one num_envs and thread or worker count).

Every point runs in its own fresh process (``python -m envfleet.bench.measure SPEC_JSON``):
each point gets a clean heap, its own JIT compile (reported apart), its own thread pool, and a
timeout that cannot hang the run; one point cannot skew the next. The worker prints one
result line (``RESULT_TAG`` + JSON).

Per point: build the envs (``construct_s``), then time the first reset + first step apart
(``warmup_s``: JIT compilation, thread-pool start, first touch of the buffers), then a short
untimed warm-up, then step with one fixed batch of random valid actions for ``seconds``
(at least ``min_calls`` calls), ``repeats`` times (``steps_per_s``: the median repeat,
``steps_per_s = num_envs * calls / elapsed``; every repeat in ``steps_per_s_samples``).
``cores_used``: the CPU seconds this process and its children used over the timed loops, per
second of wall time (what "per core used" ratios divide by).

An executor with ``batch_size < num_envs`` (first-ready async) is stepped as EnvPool's users
step it: ``send`` every env once, then ``recv`` the first ``batch_size`` ready envs and
``send`` them their actions; each call counts ``batch_size`` steps.

EnvPool (a ``thread_sweep`` baseline) is measured at each thread count from 1 to the usable
cores in the same worker, one after the other, and reported at its best (``threads``, with
``threads_tried``: steps/s by thread count). ``ray`` starts its own local Ray instance in the
worker (its start is part of ``construct_s``) and shuts it down after the point.

Envs whose valid actions depend on the state (Chess-v0: ``env.random_legal_actions()`` and
``info["action_mask"]``) are stepped with fresh random legal actions every call, and baselines
without an action space (the chess peers) play their own; perft points (``benchmarks/chess/``)
count nodes instead of steps, and a point whose options name a ``loop`` is measured by that
loop's function (``LOOPS``; benchmarks/chess's user loop: a policy between steps, steps timed).
A baseline whose call steps every env several times (``BaselineEnv.steps_per_env``: gymnax's
scan of 128 steps) counts them all (``steps_per_env_per_call`` in its row).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from envfleet import backends
from envfleet.machine import (
    background_load,
    cpu_seconds,
    tree_cpu_seconds,
)

RESULT_TAG = "ENVFLEET_BENCH_RESULT "
#: envfleet's native backends, in the order the bench sweeps and shows them: the GPU's last
NATIVE_BACKENDS = tuple(sorted(backends.NATIVE_BACKENDS, key=lambda b: b == "cuda"))
#: envfleet's executors: N copies of any Gymnasium env (``envfleet.make(id, backend=...)``);
#: ``ray`` runs a native id with the native kernel in each actor
EXECUTOR_BACKENDS = tuple(backends.EXECUTOR_BACKENDS)
#: envfleet's engines that ``envfleet.make``'s default backend picks for their own ids
#: (``atari``: ``ALE/<Game>-v5``; ``mujoco``: MuJoCo's ``<Id>-v5``; ``bench/engines``),
#: measured as a native backend is
ENGINE_BACKENDS = ("atari", "mujoco")
#: the object store of the local Ray instance a ray point starts (bytes)
RAY_OBJECT_STORE = 256 * 2**20

#: the worker's command table: a series (``PointSpec.backend``) -> the function that measures
#: its points in place of ``measure`` (``measure_one``); benchmarks/chess adds its perft series
SERIES: dict[str, Callable[[PointSpec], dict[str, Any]]] = {}
#: ``PointSpec.options["loop"]`` -> the function that measures such points in place of
#: ``measure`` (benchmarks/chess adds "user": a policy's NumPy work between steps, outside the
#: clock)
LOOPS: dict[str, Callable[[PointSpec], dict[str, Any]]] = {}
#: env id -> (backend, options) -> fields every point of that env adds to its row (what a
#: series plays, for like-for-like comparisons; benchmarks/chess adds Chess-v0's ``fairness``)
ROW_FIELDS: dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]] = {}
#: native env id -> num_envs -> the ``reset`` options of its native points (benchmarks/chess:
#: Chess-v0's boards start at the bench positions)
RESET_OPTIONS: dict[str, Callable[[int], dict[str, Any] | None]] = {}


@dataclass(frozen=True)
class PointSpec:
    """What one worker process measures."""

    env_id: str  # envfleet's id (native backends)
    reference_id: str  # the Gymnasium id (executors and baselines)
    backend: str  # a native backend, an executor or a baseline name
    num_envs: int
    threads: int | None = None  # numba threads (None: not applicable)
    seconds: float = 1.0
    min_calls: int = 3
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)  # extra make() options
    #: timed loops of ``seconds`` each, in this one process (``steps_per_s``: their median,
    #: ``steps_per_s_samples``: each one's)
    repeats: int = 1
    #: modules the worker imports first (a study's own env families register themselves)
    imports: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self))


# --- worker side --------------------------------------------------------------------------------


def _peak_rss_mb() -> float | None:
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def timed_loop(step: Callable[[], Any], sync: Callable[[], None], seconds: float,
               min_calls: int) -> tuple[int, float, float]:
    """Call ``step`` for ``seconds`` (and ``min_calls`` times at least).

    Returns (calls, elapsed seconds, median seconds per call over the timed batches). Calls are
    grouped in batches that grow while a batch takes under 10 ms, so that reading the clock
    (and synchronising a device) costs nothing next to the calls it times.
    """
    calls, batch, per_call = 0, 1, []
    sync()
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(batch):
            step()
        sync()
        t1 = time.perf_counter()
        calls += batch
        per_call.append((t1 - t0) / batch)
        elapsed = t1 - start
        if elapsed >= seconds and calls >= min_calls:
            break
        if t1 - t0 < 0.01:
            batch *= 2
        # don't overshoot the time budget by more than one call
        left = max(seconds - elapsed, 0.0)
        batch = max(1, min(batch, int(left / per_call[-1]) if per_call[-1] > 0 else batch))
    per_call.sort()
    return calls, elapsed, per_call[len(per_call) // 2]


def _is_tensor(x: Any) -> bool:
    """A torch tensor (NumPy 2 arrays have a ``device`` too: the string "cpu")."""
    return type(x).__module__.startswith("torch")


def _device_sync(backend: str, obs: Any) -> tuple[str, Callable[[], None]]:
    """(device name, a function that waits for the device) for the outputs ``obs``."""
    if not _is_tensor(obs):  # NumPy outputs
        return "cpu", lambda: None
    import torch

    device = obs.device
    syncs: list[Callable[[], None]] = []
    if device.type == "cuda":
        syncs.append(lambda: torch.cuda.synchronize(device))
    elif device.type != "cpu" and hasattr(torch, "accelerator"):
        syncs.append(torch.accelerator.synchronize)
    if backend == "cuda" and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        from numba import cuda

        syncs.append(cuda.synchronize)

    def sync() -> None:
        for s in syncs:
            s()

    return str(device), sync


def _as_backend_actions(actions: Any, obs: Any) -> Any:
    """The action batch in the outputs' array type: a tensor on their device, or NumPy."""
    if actions is None or not _is_tensor(obs):
        return actions
    import torch

    return torch.as_tensor(actions, device=obs.device)


def _import_for(backend: str) -> None:
    """Import what building ``backend`` imports, so that the build time excludes it."""
    import gymnasium  # noqa: F401

    if backend in NATIVE_BACKENDS or backend in EXECUTOR_BACKENDS or backend in ENGINE_BACKENDS:
        import envfleet  # noqa: F401
    if backend in ("atari", "ale-vector", "ale-floor"):
        import ale_py  # noqa: F401
    if backend in ("mujoco", "mujoco-floor"):
        import mujoco  # noqa: F401
    if backend in ("torch", "cuda", "sb3-dummy", "sb3-subproc"):
        import torch  # noqa: F401
    if backend.startswith("sb3-"):
        import stable_baselines3  # noqa: F401
    if backend in ("envpool", "envpool-chess"):
        import envpool  # noqa: F401
    if backend == "ray":
        import ray  # noqa: F401
    if backend == "pufferlib":
        import pufferlib.vector  # noqa: F401
    if backend == "pgx":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # JAX on CPU, before jax is imported
        import jax  # noqa: F401
        import pgx  # noqa: F401
    if backend.startswith("gymnax"):
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import gymnax  # noqa: F401
    if backend in ("openspiel", "openspiel-numpy"):
        import pyspiel  # noqa: F401
    if backend == "python-chess":
        import chess  # noqa: F401


def start_local_ray() -> Callable[[], None]:
    """Start a local Ray instance of its own for this worker; returns its shutdown.

    Its own temp folder and a small object store; the actors import envfleet as this process
    does (``PYTHONPATH`` made absolute: the actors do not start in this folder).
    """
    import tempfile

    import ray

    from envfleet.executors.ray import start_loopback_ray
    from envfleet.machine import usable_cores

    tmp = tempfile.TemporaryDirectory(prefix="envfleet-bench-ray-")
    os.environ["RAY_TMPDIR"] = tmp.name
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    start_loopback_ray(ray, num_cpus=usable_cores(), object_store_memory=RAY_OBJECT_STORE,
                     log_to_driver=False)  # (on loopback only, as backend="ray" starts one)

    def shutdown() -> None:
        ray.shutdown()
        tmp.cleanup()

    return shutdown


def _first_ready(env: Any) -> Callable[[Any], Any]:
    """One call of a first-ready async env: ``recv`` the ready envs, ``send`` them their
    actions (the first call sends every env its action first)."""
    started = False

    def step(actions: Any) -> Any:
        nonlocal started
        if not started:
            env.send(actions)
            started = True
        out = env.recv()
        ids = out[4]["env_id"]
        env.send(actions[ids], ids)
        return out

    return step


def measure_best_threads(spec: PointSpec) -> dict[str, Any]:
    """A ``thread_sweep`` baseline at 1 .. usable cores threads: the best, with every count's
    steps/s in ``threads_tried``."""
    from dataclasses import replace

    from envfleet.machine import usable_cores

    tried = [measure(replace(spec, threads=t)) for t in range(1, usable_cores() + 1)]
    best = max(tried, key=lambda r: r["steps_per_s"])
    return {**best, "threads_tried": {str(r["threads"]): r["steps_per_s"] for r in tried}}


def measure(spec: PointSpec) -> dict[str, Any]:
    """Measure one point in this process and return its result (JSON-able)."""
    result: dict[str, Any] = {"backend": spec.backend, "num_envs": spec.num_envs,
                              "threads": spec.threads, "device": "cpu"}
    engine = spec.backend in ENGINE_BACKENDS
    native = spec.backend in NATIVE_BACKENDS or engine
    if spec.reference_id in ROW_FIELDS:  # e.g. what the caller gets each ply (like for like)
        result.update(ROW_FIELDS[spec.reference_id](spec.backend, spec.options))
    executor = spec.backend in EXECUTOR_BACKENDS
    t0 = time.perf_counter()
    _import_for(spec.backend)
    result["import_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    stop_ray = None
    steps_per_call = spec.num_envs
    if native or executor:
        import envfleet

        options = dict(spec.options)
        if spec.backend == "numba" or engine:  # engine: None is its default threads
            options["num_threads"] = spec.threads
        if spec.backend == "ray":
            stop_ray = start_local_ray()
        # ray: a native id runs the native kernel in each actor, a Gymnasium id its envs
        env_id = spec.reference_id if executor and spec.backend != "ray" else spec.env_id
        env = envfleet.make(env_id, spec.num_envs, backend="auto" if engine else spec.backend,
                            seed=spec.seed, **options)
        # Chess-v0: the boards start at the bench positions, as the peers' do
        reset_options = (RESET_OPTIONS[spec.env_id](spec.num_envs)
                         if native and spec.env_id in RESET_OPTIONS else None)
        reset, step_env, batched_actions, close = (
            lambda: env.reset(seed=spec.seed, options=reset_options)[0], env.step,
            env.action_space, env.close)
        # masked envs: the valid actions depend on the state, drawn anew every step
        legal = getattr(env.unwrapped, "random_legal_actions", None)
        if legal is not None:
            step_env, batched_actions = (lambda _: env.step(legal())), None
        if executor:  # worker processes (pool: as many as it actually started)
            result["num_workers"] = getattr(env.unwrapped, "num_workers",
                                            spec.num_envs if spec.backend == "subprocess" else 0)
        batch = getattr(env.unwrapped, "batch_size", spec.num_envs)
        if executor and batch < spec.num_envs:  # first-ready async: send / recv
            steps_per_call, step_env = batch, _first_ready(env)
            result["batch_size"] = batch
    else:
        from envfleet.bench.baselines import BASELINES

        baseline = BASELINES[spec.backend]
        threads = {"num_threads": spec.threads or 1} if baseline.thread_sweep else {}
        # options: the baseline's own (pufferlib's num_workers)
        built = baseline.build(spec.reference_id, spec.num_envs, spec.seed, **threads,
                               **spec.options)
        reset, step_env, batched_actions, close = (
            built.reset, built.step, built.action_space, built.close)
        if built.steps_per_env != 1:  # a call steps every env several times (a scan)
            steps_per_call = spec.num_envs * built.steps_per_env
            result["steps_per_env_per_call"] = built.steps_per_env
        if batched_actions is None:  # it plays its own actions
            step_env = lambda _, play=built.step: play()  # noqa: E731
        # 1: a Python loop / single-threaded NumPy
        result["threads"] = threads.get("num_threads", baseline.threads)
    construct_s = time.perf_counter() - t0

    # one fixed batch of random valid actions, drawn before the clock starts
    actions = None
    if batched_actions is not None:
        batched_actions.seed(spec.seed)
        actions = batched_actions.sample()

    t0 = time.perf_counter()
    obs = reset()
    reset_s = time.perf_counter() - t0
    actions = _as_backend_actions(actions, obs)
    result["device"], sync = _device_sync(spec.backend, obs)
    if spec.backend == "torch" and result["device"] == "cpu":
        import torch

        result["threads"] = torch.get_num_threads()
    t0 = time.perf_counter()
    first = step_env(actions)
    sync()
    first_step_s = time.perf_counter() - t0
    if (native or executor) and batched_actions is None:  # a masked env: check its mask
        mask = first[4].get("action_mask") if isinstance(first[4], dict) else None
        if mask is None:
            raise RuntimeError("the env has random_legal_actions() but no info['action_mask']")
        result["action_mask_shape"] = list(mask.shape)

    # untimed warm-up: a tenth of the budget, one call at least
    t0 = time.perf_counter()
    while True:
        step_env(actions)
        sync()
        if time.perf_counter() - t0 >= 0.1 * spec.seconds:
            break

    # the cores other processes kept busy, over the timed loops, net of this process tree
    # (executors and process-per-env baselines do their work in child processes)
    before = (cpu_seconds(), tree_cpu_seconds())
    samples, calls_all, elapsed_all, medians = [], 0, 0.0, []
    for _ in range(max(1, spec.repeats)):
        calls, elapsed, median = timed_loop(lambda: step_env(actions), sync, spec.seconds,
                                            spec.min_calls)
        samples.append(steps_per_call * calls / elapsed)
        calls_all, elapsed_all = calls_all + calls, elapsed_all + elapsed
        medians.append(median)
    machine, ours = cpu_seconds(), tree_cpu_seconds()
    if None not in (before[1], ours):
        result["cores_used"] = round((ours - before[1]) / elapsed_all, 3)
    if before[0] is not None and machine is not None and None not in (before[1], ours):
        result["timed_background_load"] = background_load(
            (before[0][0], before[1]), (machine[0], ours), elapsed_all)
    close()
    if stop_ray is not None:
        stop_ray()
    # the median repeat (one repeat: that one, as before)
    order = sorted(range(len(samples)), key=samples.__getitem__)
    mid = order[len(order) // 2]
    result.update(
        status="ok",
        steps_per_s=samples[mid],
        steps_per_s_samples=samples,
        seconds=elapsed_all,
        calls=calls_all,
        steps=steps_per_call * calls_all,
        us_per_call=1e6 * elapsed_all / calls_all,
        us_per_call_median=1e6 * medians[mid],
        construct_s=construct_s,
        warmup_s=reset_s + first_step_s,
        first_reset_s=reset_s,
        first_step_s=first_step_s,
        peak_rss_mb=_peak_rss_mb(),
    )
    return result


def _thread_sweep(backend: str) -> bool:
    from envfleet.bench.baselines import BASELINES

    return backend in BASELINES and BASELINES[backend].thread_sweep


def spec_from_json(text: str) -> PointSpec:
    """A ``PointSpec`` from its JSON (lists back to tuples)."""
    fields = json.loads(text)
    return PointSpec(**{**fields, "imports": tuple(fields.get("imports", ()))})


def measure_one(spec: PointSpec) -> dict[str, Any]:
    """Measure ``spec`` here (perft, a thread-swept baseline at its best, or one point); an
    error becomes a failure row."""
    try:
        for module in spec.imports:
            importlib.import_module(module)
        loop = spec.options.get("loop")
        if loop is not None and loop not in LOOPS:
            raise ValueError(f"point options name loop {loop!r}, which no bench package "
                             f"registered (known: {', '.join(LOOPS) or 'none'})")
        command = LOOPS.get(loop) or SERIES.get(spec.backend) or (
            measure_best_threads if spec.threads is None and _thread_sweep(spec.backend)
            else measure)
        return command(spec)
    except Exception as error:  # reported as a failure row by the parent
        return {"backend": spec.backend, "num_envs": spec.num_envs, "threads": spec.threads,
                "status": "failed", "error": f"{type(error).__name__}: {error}",
                "unavailable": isinstance(error, ImportError) or
                type(error).__name__ == "BackendUnavailableError",
                "traceback": traceback.format_exc(limit=-4)}


def main(argv: list[str] | None = None) -> int:
    """Worker entry point: measure the point given as JSON, print the tagged result line."""
    args = sys.argv[1:] if argv is None else argv
    result = measure_one(spec_from_json(args[0]))
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --- parent side --------------------------------------------------------------------------------


def run_point(spec: PointSpec, timeout: float, env: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """Measure ``spec`` in a fresh worker process; a crash or timeout gives a failure row."""
    cmd = [sys.executable, "-m", "envfleet.bench.measure", spec.to_json()]
    base = {"backend": spec.backend, "num_envs": spec.num_envs, "threads": spec.threads}
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {**base, "status": "timeout", "wall_s": time.perf_counter() - t0,
                "error": f"no result within the {timeout:g} s timeout (process killed)"}
    wall = time.perf_counter() - t0
    extra = {"wall_s": wall, "background_load": background_load(cpu0, cpu_seconds(), wall)}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            result = json.loads(line[len(RESULT_TAG):])
            if "timed_background_load" in result:  # other processes' load, net of the workers
                extra["background_load"] = result.pop("timed_background_load")
            return {**result, **extra}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {**base, "status": "failed", **extra,
            "error": f"worker exited with code {proc.returncode}: " + " | ".join(tail)}


if __name__ == "__main__":
    # run as ``-m``, this file is ``__main__``, a second copy: the registered tables (SERIES,
    # ROW_FIELDS, RESET_OPTIONS: benchmarks/chess fills them) are the imported module's
    from envfleet.bench.measure import main as registered_main

    sys.exit(registered_main())
