"""``--study roofline``: this machine's roofs, measured on the spot, every native env under them.

Seed 003's Figures 3 and 4, measured instead of computed from the data sheet:

- memory bandwidth: a STREAM triad ``a[i] = b[i] + s * c[i]`` (numba ``prange``, 3 arrays of
  ``STREAM_ELEMENTS`` float64, far beyond the caches; 24 bytes per element, as STREAM counts);
  on 1 thread and on every usable core;
- peak arithmetic rate: a double-precision matrix product (``numpy.matmul``, BLAS: SIMD FMA on
  every core, the LINPACK way of measuring a peak), and a numba kernel of 16 independent scalar
  FMA chains (``fastmath``: the rate of scalar numba code such as the env kernels, which LLVM
  does not vectorise across envs when the step branches); both are drawn as ceilings.

Per env-step counts (``step_counts``), documented and not measured by counters (this VM has
none): bytes = every state column read and written, the observation, reward and two flags
written, the action read twice (the driver's check, then the step), the autoreset flag read
twice and written, the counter-based RNG's step counter read and written, and the
``copy=True`` copy of the outputs (observation, reward, flags, ``info`` columns: read and
written once more). Chess-v0 overrides the columns a ply does not touch (``CHESS_TOUCHED``).
Floating-point operations are counted from each family's ``step_one`` expressions and live on
its spec (``NativeEnvSpec.flops_per_step``; ``FLOPS`` gathers them): +, -, *, / and each sin /
cos / fmod as one (comparisons, min / max and
conversions not counted; a libm sin costs tens of instructions, so the compute bound is
generous to the env). Chess-v0 is integer bitboard work: no flop count, placed against the
memory roof only.

Each backend runs every family at ``--num-envs`` (default ``NUM_ENVS``) in one job: numba on
every usable core, torch on the CPU. The % of the bound is the achieved GFLOP/s over
``min(peak, intensity x bandwidth)`` (memory roof alone for Chess-v0).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.studies.common import (
    Job,
    StudyRun,
    Task,
    md_table,
    ok,
    require_native,
    spread,
)
from envfleet.bench.measure import PointSpec
from envfleet.bench.report import human

STREAM_ELEMENTS = 1 << 24  # 128 MiB per array
MATMUL_SIZE = 1024
#: Chess-v0: the bytes of the state columns one ply touches (the others: none); history: one
#: Zobrist key appended; moves: the legal-move list rewritten; action_mask: rewritten
CHESS_TOUCHED = {"history": 8, "moves": 1024, "action_mask": 4672}
CHESS_UNTOUCHED_PREFIX = "start_"
NUM_ENVS = {"Chess-v0": 4096, "Acrobot-v1": 1 << 18}
DEFAULT_NUM_ENVS = 1 << 20
DEFAULT_SECONDS = 0.3


def flops_by_family() -> dict[str, int]:
    """Each native family's flops per env-step, as its spec declares them (``flops_per_step``;
    a family without a count is left out)."""
    from envfleet.registry import NATIVE_ENVS

    return {env_id: spec.flops_per_step for env_id, spec in NATIVE_ENVS.items()
            if spec.flops_per_step is not None}


def __getattr__(name: str) -> Any:
    """``FLOPS``: ``flops_by_family()``, read from the specs when asked (not at import: the
    registry of native families is imported lazily, as everywhere in this module)."""
    if name == "FLOPS":
        return flops_by_family()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def step_counts(env_id: str) -> dict[str, Any]:
    """Bytes moved and flops per env-step for a native family (see the module docstring)."""
    from envfleet.native.numba_backend import kernel_action_format
    from envfleet.native.spec import OUTPUT
    from envfleet.registry import NATIVE_ENVS

    spec = NATIVE_ENVS[env_id]
    state = 0
    for name, (dtype, shape) in spec.state.items():
        size = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
        if env_id == "Chess-v0":
            if name.startswith(CHESS_UNTOUCHED_PREFIX):
                continue
            if name in CHESS_TOUCHED:
                state += CHESS_TOUCHED[name]  # written (the mask: read again by the copy)
                continue
        state += 2 * size  # read and written
    buffers = {b.name: b for b in spec.buffers(1)}  # one env's row of each
    fmt = kernel_action_format(spec)
    action = np.dtype(fmt.dtype).itemsize * int(np.prod(fmt.shape, dtype=np.int64))
    # observation, float32 reward, terminated, truncated
    outputs = sum(b.nbytes for b in buffers.values() if b.role == OUTPUT)
    info = sum(CHESS_TOUCHED.get(c, 0) for c in spec.info_columns)
    # action twice, autoreset flag (read twice, written), RNG step counter (read, written)
    driver = 2 * action + 3 * buffers["pending"].nbytes + 2 * buffers["steps"].nbytes
    copy = 2 * (outputs + info)  # copy=True: the outputs read and written once more
    total = state + outputs + driver + copy
    flops = spec.flops_per_step
    return {"bytes": total, "bytes_state": state, "bytes_outputs": outputs,
            "bytes_driver": driver, "bytes_copy": copy, "flops": flops,
            "intensity": flops / total if flops else None}


# --- the roofs (run in a worker) ---------------------------------------------------------------


def triad_kernel() -> Any:
    """The STREAM triad ``a[i] = b[i] + s * c[i]`` as a numba ``prange`` kernel."""
    from numba import njit, prange

    @njit(parallel=True, error_model="numpy")
    def triad(a: Any, b: Any, c: Any, s: float) -> None:
        for i in prange(a.size):
            a[i] = b[i] + s * c[i]

    return triad


def fma_kernel(chains: int = 16) -> Any:
    """A numba kernel of ``chains`` independent scalar FMA chains per block (generated)."""
    from numba import njit, prange

    init = "\n".join(f"        a{j} = 1.0 + (t + {j}) * 1e-9" for j in range(chains))
    body = "\n".join(f"            a{j} = a{j} * m + c" for j in range(chains))
    total = " + ".join(f"a{j}" for j in range(chains))
    source = (f"def fma(out, iters, m, c):\n    for t in prange(out.size):\n{init}\n"
              f"        for _ in range(iters):\n{body}\n        out[t] = {total}\n")
    namespace: dict[str, Any] = {"prange": prange}
    exec(source, namespace)  # our own generated source
    return njit(parallel=True, fastmath=True)(namespace["fma"])


def _timed(fn: Any, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def roofs(threads: int, repeats: int, elements: int = STREAM_ELEMENTS,
          matmul_size: int = MATMUL_SIZE, fma_iters: int = 2_000_000) -> dict[str, Any]:
    """STREAM triad GB/s and peak GFLOP/s (BLAS matmul, scalar numba FMA) on ``threads``."""
    import numba

    numba.set_num_threads(threads)
    from envfleet.machine import cpu_seconds, tree_cpu_seconds

    before = (cpu_seconds(), tree_cpu_seconds(), time.perf_counter())
    a, b, c = np.zeros(elements), np.ones(elements), np.full(elements, 2.0)
    triad = triad_kernel()
    triad(a, b, c, 3.0)  # compile and first touch
    times = _timed(lambda: triad(a, b, c, 3.0), repeats)
    bandwidth = [24 * elements / t / 1e9 for t in times]
    fma = fma_kernel()
    out = np.zeros(threads * 4)
    fma(out, 10, 0.999999, 1e-7)
    chains = 16
    scalar = [2 * chains * fma_iters * out.size / t / 1e9
              for t in _timed(lambda: fma(out, fma_iters, 0.999999, 1e-7), repeats)]
    blas = None
    try:  # the BLAS's threads (OpenBLAS / MKL) as asked, where threadpoolctl is here
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    x = np.random.default_rng(0).random((matmul_size, matmul_size))
    x @ x
    if threadpool_limits is not None:
        with threadpool_limits(limits=threads):
            times = _timed(lambda: x @ x, repeats)
    else:
        times = _timed(lambda: x @ x, repeats)
    blas = [2 * matmul_size**3 / t / 1e9 for t in times]
    machine, ours = cpu_seconds(), tree_cpu_seconds()
    wall = time.perf_counter() - before[2]
    load = None
    if before[0] and machine and None not in (before[1], ours):
        load = round(max((machine[0] - before[0][0]) - (ours - before[1]), 0.0) / wall, 2)
    return {"threads": threads, "stream_triad_gbs": spread(bandwidth),
            "scalar_fma_gflops": spread(scalar), "matmul_gflops": spread(blas),
            "blas_threads_limited": threadpool_limits is not None, "background_load": load,
            "show": f"{spread(bandwidth)['median']:.1f} GB/s, "
                    f"{spread(blas)['median']:.1f} GFLOP/s"}


# --- the study --------------------------------------------------------------------------------


def default_families() -> list[str]:
    from envfleet.envs import FAMILIES  # envfleet's own families (not a user's)

    return list(FAMILIES)


def plan(families: list[str], backends: list[str], threads: int, num_envs: int | None,
         seconds: float, repeats: int) -> list[Job]:
    """The roofs (1 thread, every core), then one job per backend over the families."""
    jobs = [Job([Task(f"{__name__}:roofs", {"threads": t, "repeats": max(repeats, 3)})],
                [{"kind": "roof", "threads": t, "label": f"STREAM triad + peak FMA, {t} threads"}])
            for t in sorted({1, threads})]
    from envfleet.registry import NATIVE_ENVS

    for b in backends:
        items, labels = [], []
        for env in families:
            if b not in (NATIVE_ENVS[env].backends or ()):
                continue
            n = num_envs or NUM_ENVS.get(env, DEFAULT_NUM_ENVS)
            options = {"device": "cpu"} if b == "torch" else {}
            items.append(PointSpec(env, env, b, n, threads=threads if b == "numba" else None,
                                   seconds=seconds, repeats=repeats, options=options))
            labels.append({"kind": "env", "env": env, "backend": b, "num_envs": n,
                           "label": f"{env} {b} {n:,} envs", **step_counts(env)})
        if items:
            jobs.append(Job(items, labels))
    return jobs


def analyse(rows: list[dict[str, Any]], threads: int) -> dict[str, Any]:
    """The roofs on every core, and each env row's achieved rates and % of its bound."""
    roof = next((r for r in rows if r.get("kind") == "roof" and ok(r)
                 and r["threads"] == threads), None)
    if roof is None:
        return {}
    bw = roof["stream_triad_gbs"]["median"]
    peak = max(roof["matmul_gflops"]["median"], roof["scalar_fma_gflops"]["median"])
    for r in rows:
        if r.get("kind") != "env" or not ok(r):
            continue
        r["achieved_gbs"] = r["steps_per_s"] * r["bytes"] / 1e9
        r["pct_of_bandwidth"] = 100 * r["achieved_gbs"] / bw
        if r["flops"]:
            r["achieved_gflops"] = r["steps_per_s"] * r["flops"] / 1e9
            r["bound_gflops"] = min(peak, r["intensity"] * bw)
            r["bound"] = "memory" if r["intensity"] * bw < peak else "compute"
            r["pct_of_bound"] = 100 * r["achieved_gflops"] / r["bound_gflops"]
        else:
            r["bound"] = "memory (no flop count)"
            r["pct_of_bound"] = r["pct_of_bandwidth"]
    return {"bandwidth_gbs": bw, "peak_gflops": peak,
            "scalar_fma_gflops": roof["scalar_fma_gflops"]["median"],
            "matmul_gflops": roof["matmul_gflops"]["median"], "threads": threads}


def markdown(rows: list[dict[str, Any]], roofs_: dict[str, Any]) -> str:
    """The roofs table and the env table."""
    roof_rows = []
    for r in rows:
        if r.get("kind") != "roof":
            continue
        if not ok(r):
            roof_rows.append([str(r["threads"]), f"{r['status']}: {r.get('error', '')}", "", ""])
            continue
        cell = lambda s: f"{s['median']:.1f} (±{s['iqr_pct'] / 2:.1f}%)"  # noqa: E731
        roof_rows.append([str(r["threads"]), cell(r["stream_triad_gbs"]),
                          cell(r["matmul_gflops"]), cell(r["scalar_fma_gflops"])])
    env_rows = []
    for r in rows:
        if r.get("kind") != "env":
            continue
        if not ok(r):
            env_rows.append([r["env"], r["backend"], f"{r['status']}: {r.get('error', '')[:50]}"]
                            + [""] * 9)
            continue
        f = r["flops"]
        env_rows.append([
            r["env"], r["backend"], f"{r['num_envs']:,}", str(r["bytes"]), str(f or "–"),
            f"{r['intensity']:.3f}" if f else "–", human(r["steps_per_s"]),
            f"{r['achieved_gbs']:.2f}", f"{r['achieved_gflops']:.2f}" if f else "–",
            f"{r['bound_gflops']:.1f}" if f else f"{roofs_.get('bandwidth_gbs', 0):.1f} GB/s",
            r["bound"], f"{r['pct_of_bound']:.1f}%"])
    return "\n".join([
        "### The roofs, measured here", "",
        "STREAM triad (GB/s, 24 bytes per element), a float64 matrix product (BLAS: SIMD FMA, "
        "GFLOP/s) and 16 scalar FMA chains in numba (GFLOP/s); median of the repeats, ± half "
        "the interquartile range.", "",
        md_table(["threads", "STREAM triad GB/s", "matmul GFLOP/s", "scalar FMA GFLOP/s"],
                 roof_rows), "",
        f"### Each native env under the roofs ({roofs_.get('threads', '?')} threads)", "",
        "bytes and flops per env-step as counted in `benchmarks/studies/roofline.py` "
        "(state read + written, outputs, driver, the copy=True copy; flops from step_one, "
        "sin / cos as one). Bound = min(peak, intensity x bandwidth) with peak = the higher "
        "of the two measured peaks; % = achieved / bound, as measured (all cores).", "",
        md_table(["env", "backend", "num_envs", "bytes/step", "flops/step", "flop/byte",
                  "steps/s", "GB/s", "GFLOP/s", "bound", "bound by", "% of bound"], env_rows),
    ])


def plot(rows: list[dict[str, Any]], roofs_: dict[str, Any], title: str, path: Path) -> None:
    """The roofline: bandwidth slope, the two peaks, each (env, backend) point."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.5), layout="constrained")
    bw, peak = roofs_["bandwidth_gbs"], roofs_["peak_gflops"]
    xs = np.logspace(-3, 2, 200)
    ax.plot(xs, np.minimum(peak, xs * bw), "k-", linewidth=2,
            label=f"roof: STREAM {bw:.1f} GB/s, matmul {roofs_['matmul_gflops']:.1f} GFLOP/s")
    ax.plot(xs, np.minimum(roofs_["scalar_fma_gflops"], xs * bw), "k:", linewidth=1.2,
            label=f"scalar FMA ceiling {roofs_['scalar_fma_gflops']:.1f} GFLOP/s")
    markers = {"numba": "o", "torch": "s", "cuda": "^"}
    for r in rows:
        if r.get("kind") == "env" and ok(r) and r["flops"]:
            ax.plot(r["intensity"], r["achieved_gflops"], markers.get(r["backend"], "x"),
                    markersize=8, label=f"{r['env']} {r['backend']} ({r['pct_of_bound']:.0f}%)")
    ax.set(xscale="log", yscale="log", xlabel="operational intensity (flop / byte)",
           ylabel="GFLOP/s", title=title)
    ax.grid(alpha=0.4, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The roofline study (``python -m benchmarks --study roofline``)."""
    import envfleet
    from envfleet.native.numba_backend import default_threads

    families = envs or default_families()
    require_native(families, "roofline")
    available = envfleet.available_backends()
    backends = args.backends or [b for b in ("numba", "torch") if b in available]
    threads = args.max_threads or default_threads()
    seconds = args.seconds or DEFAULT_SECONDS
    n = args.num_envs[0] if args.num_envs else None
    study = StudyRun("roofline", args, {"envs": families, "backends": backends,
                                        "threads": threads, "num_envs": n,
                                        "seconds": seconds, "repeats": args.repeats,
                                        "stream_elements": STREAM_ELEMENTS})
    rows = study.run(plan(families, backends, threads, n, seconds, args.repeats))
    roofs_ = analyse(rows, threads)
    title = f"roofline: {study.info['cpu']}, {threads} threads, {study.info['date'][:10]}"
    return study.finish(markdown(rows, roofs_),
                        (lambda path: plot(rows, roofs_, title, path)) if roofs_ else None,
                        {"roofs": roofs_, "envs": [
                            {k: r.get(k) for k in ("env", "backend", "num_envs", "bytes",
                                                   "flops", "intensity", "steps_per_s",
                                                   "achieved_gbs", "achieved_gflops",
                                                   "bound_gflops", "bound", "pct_of_bound")}
                            for r in rows if r.get("kind") == "env" and ok(r)]})
