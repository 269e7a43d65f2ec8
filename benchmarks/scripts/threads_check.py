"""Numba threads check: CartPole-v1 at 2**20 envs and Chess-v0 at 4,096 boards on 1, 2, 4, ...
threads (up to the usable cores), for a many-core host; about a minute on 16 cores.

Each point is an env made with ``num_threads=k`` (kept as asked), stepped for ``--seconds``;
Chess's ``random_legal_actions()`` is timed apart from ``step`` (it runs on one thread).
efficiency = rate(k) / (k * rate(1)) of the step alone; two controls without envfleet (FMA
chains, a memory triad) and the physical cores show what the machine itself allows. Then two
checks of the adaptive engine (default threads, as ``gpu_bench.py`` made Chess-v0): the
bench's own timing loop
(2 untimed calls, then >= 0.5 s), whose slowest call says whether a kernel compiled inside
it (the cause of the 0.10M plies/s reading: before the fix, the 63rd step's probe of the
one-thread kernel compiled it, seconds long, inside the timed calls); and the one-thread
kernel's first-call time after the threaded one compiled (the stall that probe paid). Last,
two fresh processes, each with its own empty kernel cache, run the bench's loop as it was
(``pre-fix``: the probe's kernel compiled at the probe) and as it is (``fixed``).

The kernel cache is a fresh temporary directory (``--warm-cache``: the user's), so the
compile times are real. torch is imported first when installed, as the bench does
(``--no-torch``: not imported; with torch first, numba's OpenMP pool may run on torch's
libgomp, which never saw envfleet's ``GOMP_SPINCOUNT``: the "libraries" line says). Prints
one JSON line per result and appends them to ``--out`` (default
``$OUT/threads_check.jsonl``, else ``threads_check.jsonl``)::

    PYTHONPATH=src python -m benchmarks.scripts.threads_check [--seconds 0.6] [--threads 1,2,4,8,16]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--out", default=None, help="JSON lines file (default $OUT/threads_check.jsonl)")
ARGS.add_argument("--seconds", type=float, default=0.6, help="timed seconds per point")
ARGS.add_argument("--threads", default=None, help="comma list (default 1,2,4,... up to cores)")
ARGS.add_argument("--cartpole-envs", type=int, default=2**20)
ARGS.add_argument("--chess-boards", type=int, default=4096)
ARGS.add_argument("--no-torch", action="store_true", help="do not import torch first")
ARGS.add_argument("--warm-cache", action="store_true", help="use the user's kernel cache")
ARGS.add_argument("--no-cold-loops", action="store_true",
                  help="skip the two cold-cache bench loops (pre-fix and fixed; ~25 s)")
ARGS.add_argument("--cold-loop", choices=("pre-fix", "fixed"), help=argparse.SUPPRESS)
OPTS = ARGS.parse_args()

if not OPTS.warm_cache:  # before envfleet is imported: compile times are then real
    os.environ["ENVFLEET_CACHE_DIR"] = tempfile.mkdtemp(prefix="envfleet-threads-check-")
os.environ.setdefault("ENVFLEET_QUIET", "1")
if not OPTS.no_torch:
    with contextlib.suppress(ImportError):  # first, as gpu_bench.py: its OpenMP loads first
        import torch  # noqa: F401

import numba  # noqa: E402
import numpy as np  # noqa: E402

import envfleet  # noqa: E402
from benchmarks.studies.roofline import fma_kernel, triad_kernel  # noqa: E402
from envfleet.bench.report import cpu_model  # noqa: E402
from envfleet.machine import usable_core_ids, usable_cores  # noqa: E402

OUT = OPTS.out or os.path.join(os.environ.get("OUT") or ".", "threads_check.jsonl")
T0 = time.perf_counter()


def emit(**row: Any) -> None:
    """Print one result as a JSON line and append it to ``OUT``."""
    row["at_s"] = round(time.perf_counter() - T0, 2)
    line = json.dumps(row)
    print(line, flush=True)
    with open(OUT, "a") as f:
        f.write(line + "\n")


def openmp_libraries() -> list[str]:
    """The threading runtimes mapped into this process (two OpenMP runtimes can fight)."""
    names = ("gomp", "iomp", "tbb", "omppool", "workqueue")
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if any(n in line for n in names)})


def global_gomp() -> str | None:
    """The file whose ``GOMP_parallel`` the process's global symbol scope holds (None: no
    OpenMP there). numba's pool binds there first: with torch imported first, that is
    torch's libgomp, which read ``GOMP_SPINCOUNT`` at torch's import, before envfleet set it."""
    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    try:
        try:
            lib = ctypes.CDLL("libdl.so.2")
        except OSError:
            lib = ctypes.CDLL(None)
        lib.dlsym.restype = ctypes.c_void_p
        lib.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        address = lib.dlsym(None, b"GOMP_parallel")  # RTLD_DEFAULT
        if not address:
            return None
        info = DlInfo()
        lib.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
        if lib.dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
            return info.fname.decode()
    except (OSError, AttributeError) as error:
        return f"unknown ({error})"
    return None


def physical_cores() -> int | None:
    """Distinct physical cores among the usable CPUs (hyperthread siblings counted once):
    fewer than the CPUs caps efficiency near cores / CPUs whatever the code does."""
    siblings = set()
    try:
        for cpu in usable_core_ids():
            path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
            with open(path) as f:
                siblings.add(f.read().strip())
    except OSError:
        return None
    return len(siblings) or None


def controls(counts: list[int]) -> None:
    """The machine's own scaling, no envfleet code: FMA chains (cores) and a triad (memory
    bandwidth; CartPole at 2**20 envs moves ~80 MB a step). Efficiency as for the envs."""
    fma, triad = fma_kernel(8), triad_kernel()  # the roofline study's kernels
    out = np.zeros(1 << 14)
    a, b, c = (np.full(1 << 22, 1.0) for _ in range(3))  # 32 MB each
    base: dict[str, float] = {}
    for k in counts:
        numba.set_num_threads(k)
        for name, run, work in (("fma", lambda: fma(out, 256, 1.0000001, 1e-9),
                                 out.size * 256 * 8),
                                ("triad_bytes", lambda: triad(a, b, c, 3.0), 3 * 8 * a.size)):
            run()
            calls, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.15 or calls < 3:
                run()
                calls += 1
            rate = work * calls / (time.perf_counter() - t0)
            base.setdefault(name, rate)
            emit(part="control", name=name, threads=k, per_s=rate,
                 efficiency=round(rate / (k * base[name]), 3))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def make(env_id: str, n: int, threads: int | None) -> Any:
    kw = {} if threads is None else {"num_threads": threads}
    if env_id == "Chess-v0":
        kw["opponent"] = None
    env = envfleet.make(env_id, n, backend="numba", seed=0, copy=False, **kw)
    env.reset(seed=0)
    return env


def measure(env_id: str, n: int, threads: int) -> dict[str, Any]:
    """Steps per second of ``step`` alone (and with Chess's action draw) on ``threads``."""
    env = make(env_id, n, threads)
    chess = env_id == "Chess-v0"
    if chess:
        draw = env.unwrapped.random_legal_actions
    else:
        rng = np.random.default_rng(0)
        fixed = [rng.integers(0, 2, n) for _ in range(4)]
        draw = iter(fixed * 1_000_000).__next__
    t = time.perf_counter()
    env.step(draw())
    first = time.perf_counter() - t
    env.step(draw())
    steps: list[float] = []
    drawing = 0.0
    t_end = time.perf_counter() + OPTS.seconds
    while time.perf_counter() < t_end or len(steps) < 3:
        t = time.perf_counter()
        actions = draw()
        t1 = time.perf_counter()
        env.step(actions)
        steps.append(time.perf_counter() - t1)
        drawing += t1 - t
    env.close()
    total = sum(steps)
    row = {"env": env_id, "n": n, "threads": threads, "calls": len(steps),
           "step_rate": n * len(steps) / total, "step_ms_median": 1e3 * float(np.median(steps)),
           "step_ms_max": 1e3 * max(steps), "first_call_s": round(first, 3)}
    if chess:
        row["draw_ms"] = 1e3 * drawing / len(steps)
        row["draw_and_step_rate"] = n * len(steps) / (total + drawing)
    return row


def bench_loop(call: Callable[[], None], n: int) -> dict[str, Any]:
    """gpu_bench.py's ``timeit(min_s=0.5, max_calls=400)``, with each call's time kept."""
    call()
    call()
    times: list[float] = []
    t0 = time.perf_counter()
    t = 0.0
    while t < 0.5 and len(times) < 400:
        a = time.perf_counter()
        call()
        times.append(time.perf_counter() - a)
        if len(times) % 8 == 0 or len(times) < 8:
            t = time.perf_counter() - t0
    t = time.perf_counter() - t0
    slowest = int(np.argmax(times))
    return {"calls": len(times), "rate": n * len(times) / t, "ms_per_call": 1e3 * t / len(times),
            "slowest_call": slowest + 3, "slowest_s": round(times[slowest], 4),
            "median_ms": 1e3 * float(np.median(times))}


def cold_loop(code: str) -> None:
    """One process, fresh kernel cache: gpu_bench.py's Chess-v0 loop on default threads.
    ``pre-fix`` leaves the probe's kernel unprepared, as before the fix (it then compiles at
    the probe, 63 steps in, inside the timed calls); ``fixed`` is the engine as it is."""
    from envfleet.native.numba_backend import NumbaEngine

    if code == "pre-fix":
        NumbaEngine._prepare_other = lambda self, kernel, signature: None  # type: ignore
    n = OPTS.chess_boards
    t = time.perf_counter()
    env = make("Chess-v0", n, None)
    u = env.unwrapped
    result = bench_loop(lambda: env.step(u.random_legal_actions()), n)
    emit(part="cold_bench_loop", code=code, env="Chess-v0", n=n,
         threads=u.engine.num_threads, active_threads_after=u.engine.active_threads,
         seconds_with_compiles=round(time.perf_counter() - t, 2), **result)


def main() -> None:
    if OPTS.cold_loop:
        cold_loop(OPTS.cold_loop)
        return
    cores = usable_cores()
    top = min(cores, numba.config.NUMBA_NUM_THREADS)
    if OPTS.threads:
        counts = [int(k) for k in OPTS.threads.split(",")]
    else:
        counts = [k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k <= top]
        if counts[-1] != top:
            counts.append(top)
    emit(part="machine", cpu=cpu_model(), os_cpu_count=os.cpu_count(), usable_cores=cores,
         physical_cores=physical_cores(),
         numba=numba.__version__, numba_num_threads=numba.config.NUMBA_NUM_THREADS,
         python=sys.version.split()[0], torch_imported="torch" in sys.modules,
         cache=os.environ.get("ENVFLEET_CACHE_DIR", "user"),
         env={k: os.environ[k] for k in ("GOMP_SPINCOUNT", "OMP_NUM_THREADS", "OMP_WAIT_POLICY",
                                         "NUMBA_THREADING_LAYER", "KMP_BLOCKTIME")
              if k in os.environ},
         load=os.getloadavg())
    n_chess = OPTS.chess_boards
    # the threaded chess kernel first, then the one-thread one: the order the adaptive probe
    # met them in (its compile of the one-thread kernel is what stalled the bench)
    chess_order = [k for k in counts if k > 1] + [k for k in counts if k == 1]
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for env_id, n, order in (("CartPole-v1", OPTS.cartpole_envs, counts),
                             ("Chess-v0", n_chess, chess_order)):
        for k in order:
            rows[env_id, k] = measure(env_id, n, k)
        base = rows.get((env_id, 1))
        for k in counts:
            row = rows[env_id, k]
            if base:
                row["efficiency"] = round(row["step_rate"] / (k * base["step_rate"]), 3)
                if "draw_and_step_rate" in row:
                    row["efficiency_with_draw"] = round(
                        row["draw_and_step_rate"] / (k * base["draw_and_step_rate"]), 3)
            emit(part="threads", **row)
    controls(counts)
    emit(part="libraries", threading_layer=numba.threading_layer(), mapped=openmp_libraries(),
         gomp_in_global_scope=global_gomp(), torch_first="torch" in sys.modules)
    # the adaptive engine (default threads) in the bench's own loop; the kernels are compiled
    # by now, so a slow call here is the probe itself or the machine, not a compile
    env = make("Chess-v0", n_chess, None)
    u = env.unwrapped
    result = bench_loop(lambda: env.step(u.random_legal_actions()), n_chess)
    fixed = rows.get(("Chess-v0", top), {}).get("draw_and_step_rate")
    emit(part="adaptive_bench_loop", env="Chess-v0", n=n_chess, threads=top,
         active_threads_after=u.engine.active_threads,
         rate_over_fixed_threads=result["rate"] / fixed if fixed else None, **result)
    env.close()
    # what the pre-fix probe paid: the one-thread kernel's first call after the threaded one
    # compiled (cold cache only); the pre-fix bench read n * 64 / (62 steps + this)
    if not OPTS.warm_cache:
        one = rows.get(("Chess-v0", 1))
        many = rows.get(("Chess-v0", top))
        if one and many:
            stall = one["first_call_s"]
            step_s = n_chess / many["step_rate"]
            emit(part="probe_compile_stall", env="Chess-v0", n=n_chess,
                 one_thread_first_call_s=stall,
                 pre_fix_bench_rate_predicted=n_chess * 64 / (62 * step_s + stall))
    if not OPTS.no_cold_loops:  # the cause, shown: the pre-fix stall and its absence now
        for code in ("pre-fix", "fixed"):
            argv = [sys.executable, __file__, "--cold-loop", code, "--out", OUT,
                    "--chess-boards", str(n_chess)] + (["--no-torch"] if OPTS.no_torch else [])
            environ = {k: v for k, v in os.environ.items() if k != "ENVFLEET_CACHE_DIR"}
            subprocess.run(argv, env=environ, check=False)
    emit(part="done", seconds=round(time.perf_counter() - T0, 1))


if __name__ == "__main__":
    main()
