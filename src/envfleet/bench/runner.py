"""``envfleet bench``: plan the sweep, measure each point in a fresh process, report.

The sweep is every (backend or baseline, num_envs, numba thread count or pool worker count)
point; points run one at a time (they would compete for the cores otherwise), smallest num_envs
first, all series at one num_envs before the next, so a run cut short still has complete rows.

A native id (``CartPole-v1``) is measured by default on its native backends next to gym-numpy,
gym-sync, sb3-dummy and EnvPool (each where it can run the id); any other Gymnasium id on
envfleet's executors (serial, subprocess, pool) next to every baseline that can run it.
Executors can be asked for on a native id too (they run the Gymnasium env of the same id; ray
runs the native kernel in each actor). ``ray`` is measured only when asked for (each point
starts a local Ray instance of its own).

An engine's id (``ALE/<Game>-v5``, MuJoCo's ``<Id>-v5``) is measured on envfleet's engine
(``atari``, ``mujoco``: at its default threads and at each ``--threads`` count asked for) next
to its peers (EnvPool, Gymnasium's and SB3's vector envs of the same env, ...) and the
simulator's floor (``bench/engines``), at num_envs 8 or 16 to 64 by default.

An id with a registered ``GameBench`` (the repository's ``benchmarks/chess`` registers
Chess-v0's: ``python -m benchmarks --env Chess-v0``) is measured next to its own peers instead,
in its own unit, at its own num_envs, each series also in its twin loop, then its extra points
(chess: perft); its peers still run when this envfleet cannot run the id natively.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from envfleet.bench import engines
from envfleet.bench.baselines import (
    BASELINES,
    EXECUTOR_RIVALS,
    NATIVE_DEFAULT,
    PROCESS_MAX_ENVS,
    PYTHON_LOOP_MAX_ENVS,
    native_default,
)
from envfleet.bench.measure import (
    ENGINE_BACKENDS,
    EXECUTOR_BACKENDS,
    NATIVE_BACKENDS,
    PointSpec,
    background_load,
    cpu_seconds,
    run_point,
)
from envfleet.bench.report import (
    BUSY_CORES,
    JsonLines,
    Results,
    busy,
    human,
    machine_info,
    markdown,
    micros,
    plot,
    rich_tables,
)
from envfleet.command import (
    CommandError,
    check_output,
    ints,
    names,
    positive_float,
    positive_int,
)
from envfleet.native.spec import NativeEnvSpec
from envfleet.registry import _native_name  # make()'s lookup

DEFAULT_NUM_ENVS = (1, 64, 1024, 16_384, 65_536, 262_144, 1_048_576)
#: the default sweep for a non-native id (executors: one Python env per env, processes)
DEFAULT_EXECUTOR_NUM_ENVS = (1, 8, 64, 256)
#: the executors a non-native id's default sweep measures (ray only when asked for)
DEFAULT_EXECUTORS = ("serial", "subprocess", "pool")


def all_backends() -> tuple[str, ...]:
    """Every backend and baseline ``--backends`` accepts (peers registered since included)."""
    return (*NATIVE_BACKENDS, *ENGINE_BACKENDS, *EXECUTOR_BACKENDS, *BASELINES)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` subcommand's options."""
    parser.add_argument("--env",
                        help="env id: a native id or any Gymnasium id (default: CartPole-v1)")
    parser.add_argument(
        "--backends", type=names,
        help=f"comma list of backends and baselines: {', '.join(all_backends())} (default, "
             f"native id: its native backends and {', '.join(NATIVE_DEFAULT)}; an id with "
             "peers of its own (python -m benchmarks --env Chess-v0): them; "
             + "".join(f"{f.ids}: {f.name} and {', '.join(f.peers)}; "
                       for f in engines.FAMILIES.values())
             + "other ids: "
             f"{', '.join(DEFAULT_EXECUTORS)} and every baseline but envpool and pufferlib; "
             "each only if it can run here, cuda not under the CUDA simulator; ray only when "
             "asked for)")
    parser.add_argument(
        "--num-envs", type=ints, metavar="N,N,...",
        help="comma list of batch sizes (default, native id: "
             f"{','.join(map(str, DEFAULT_NUM_ENVS))}; an id with peers of its own: "
             "theirs; "
             + "".join(f"{f.ids}: {','.join(map(str, f.default_num_envs))}; "
                       for f in engines.FAMILIES.values())
             + "other ids: "
             f"{','.join(map(str, DEFAULT_EXECUTOR_NUM_ENVS))})")
    parser.add_argument("--num-workers", type=ints, metavar="W,W,...",
                        help="comma list of pool worker counts to sweep "
                             "(default: the pool's own, the usable cores)")
    parser.add_argument("--seconds", type=positive_float,
                        help="timed stepping per point, after warm-up (default: 1; "
                             "python -m benchmarks --study: the study's own, per repeat)")
    parser.add_argument("--threads", type=ints, metavar="T,T,...",
                        help="comma list of numba thread counts to sweep (default: the "
                             "usable cores; an engine's id (ALE/<Game>-v5, MuJoCo's <Id>-v5): "
                             "its engine's series at its default threads, and at each count "
                             "given here)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"),
                        help="folder for bench-<env>-<kind>.jsonl, .md and .png, <kind> saying "
                             "what was measured (native, executors, baselines, +threads-sweep, "
                             "+workers-sweep), so another study never overwrites them "
                             "(default: ./%(default)s)")
    parser.add_argument(
        "--baseline-max-envs", type=positive_int, metavar="N",
        help="largest num_envs for the baselines and executors that build one Python env per "
             f"env ({', '.join(b.name for b in BASELINES.values() if b.python_loop)}, "
             f"{', '.join(EXECUTOR_BACKENDS)}; default: {PYTHON_LOOP_MAX_ENVS}; an id "
             "with peers of its own: theirs)")
    parser.add_argument(
        "--process-max-envs", type=positive_int, default=PROCESS_MAX_ENVS, metavar="N",
        help="largest num_envs for those that start one process per env (subprocess, "
             f"{', '.join(b.name for b in BASELINES.values() if b.process_per_env)}; "
             "default: %(default)s)")
    parser.add_argument("--timeout", type=positive_float, default=300.0, metavar="S",
                        help="wall-clock limit per point, build included (default: %(default)s)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="before each point, wait up to S seconds for other processes to "
                             "leave the cores idle (default: 0, don't wait; busy points are "
                             "marked * either way)")
    parser.add_argument("--torch-device", help="device for the torch backend "
                                               "(default: the backend's own default)")
    parser.add_argument("--threads-per-block", type=positive_int,
                        help="CUDA threads per block for the cuda backend")
    parser.set_defaults(func=run)


# --- planning ----------------------------------------------------------------------------------


@dataclass
class Planned:
    """One point of the sweep: what to measure, or why it is skipped."""

    series: str  # the table column / plot line it belongs to
    spec: PointSpec
    skip: str | None = None
    #: a game's extra point (``GameBench.extra_points``): its row ``type`` (chess: "perft"),
    #: the fields its row records, what it measures in words and its unit
    kind: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    detail: str | None = None
    unit: str | None = None


@dataclass(frozen=True)
class GameBench:
    """An env id measured against peers of its own rather than Gymnasium's envs: what the
    sweep adds for it. The repository's ``benchmarks/chess`` registers Chess-v0's
    (``register_game``); the installed package registers none."""

    env_id: str
    #: what one step is called in the tables (chess: plies)
    unit: str
    #: the native backends of its default sweep, and its default num_envs
    native: tuple[str, ...]
    num_envs: tuple[int, ...]
    #: ``--baseline-max-envs``'s default (its peers that loop in Python)
    python_max_envs: int
    #: each point's worker imports it first: it registers the peers, loops and series there
    module: str
    #: why this envfleet cannot run the id natively (its peers still run), or None
    native_status: Callable[[], str | None]
    #: ``make`` options of its native points (the peers' games)
    native_options: Callable[[], dict[str, Any]]
    #: every series measured again in this ``measure.LOOPS`` loop, as "<label> <twin_loop>"
    twin_loop: str | None
    #: the points after the sweep (chess: perft), from the parsed arguments
    extra_points: Callable[[argparse.Namespace], list[Planned]]
    #: the settings its run records (the JSON header, the Markdown footer)
    settings: Callable[[argparse.Namespace], dict[str, Any]]
    #: (a JSON line, Markdown sections, rich renderables) after the tables, from the results of
    #: both loops, the extra points' rows and the twin loop's own results
    sections: Callable[[Results, list[dict[str, Any]], Results | None],
                       tuple[dict[str, Any], str, list[Any]]]


#: env id -> its GameBench (``register_game``)
GAME_BENCHES: dict[str, GameBench] = {}


def register_game(game: GameBench) -> None:
    """Measure ``game.env_id`` as ``game`` says (its peers: ``baselines.register_peers``)."""
    GAME_BENCHES[game.env_id] = game


def _default_threads() -> int:
    from envfleet.native.numba_backend import default_threads

    return default_threads()


def choose_backends(requested: list[str] | None, reference_id: str, native: bool = True,
                    native_missing: str | None = None, family: NativeEnvSpec | None = None
                    ) -> tuple[list[str], list[str]]:
    """(backends to measure, notes on those left out). Explicit requests must be runnable,
    but one whose package is not installed (ray, envpool, ...) is left out with its reason
    when others were asked for too.

    ``native``: the env id is a native one (native backends can run it; the default is its
    native backends and ``native_default(reference_id)``); else the default is the executors
    and every baseline that plays any id. ``native_missing``: why this envfleet cannot run the
    native id yet (its peers still can). ``family``: the native id's spec; a native backend it
    has no kernels for (MinAtar's games: torch) is left out of the default and refused when
    asked for, as ``make`` would refuse it.
    """
    import envfleet
    from envfleet.native.build import missing_backend
    from envfleet.registry import NATIVE_ENVS, backend_status

    reference_imports(reference_id)  # ALE/...: ale-py registers them (the baselines' check)

    def status(name: str) -> str | None:
        if name in BASELINES and family is not None and not family.reference_id \
                and family.id not in GAME_BENCHES:
            return (f"{family.id} names no Gymnasium env it re-implements "
                    f"(NativeEnvSpec.reference_id) for the baselines to run")
        if name in BASELINES:
            return BASELINES[name].status(reference_id)
        if name in ENGINE_BACKENDS:
            return engines.FAMILIES[name].status(reference_id)
        if name in NATIVE_BACKENDS and not native:
            return (f"native backends run envfleet's native envs ({', '.join(NATIVE_ENVS)}); "
                    f"{reference_id!r} runs on the executors ({', '.join(EXECUTOR_BACKENDS)})")
        if name in NATIVE_BACKENDS and native_missing:
            return native_missing
        if name in NATIVE_BACKENDS and family is not None and name not in family.backends:
            return missing_backend(family, name)
        if name in EXECUTOR_BACKENDS and reference_id in GAME_BENCHES:
            return f"Gymnasium has no {reference_id} env for the executors to run"
        return backend_status(name)

    if requested is not None:
        valid = all_backends()
        unknown = [b for b in requested if b not in valid]
        if unknown:
            raise CommandError(f"unknown backend(s) {', '.join(map(repr, unknown))}; "
                               f"valid: {', '.join(valid)}")
        chosen, notes = [], []
        for b in dict.fromkeys(requested):
            reason = status(b)
            if reason and "pip install" in reason and len(requested) > 1:
                notes.append(f"{b}: {reason}")  # a package not installed: the others run
            elif reason:
                raise CommandError(f"backend {b!r} cannot run here: {reason}")
            else:
                chosen.append(b)
        if not chosen:
            raise CommandError(f"no requested backend can run here: {'; '.join(notes)}")
        return chosen, notes

    chosen, notes = [], []
    available = envfleet.available_backends()
    engine = engines.family_of(reference_id)
    if engine is not None:
        default = (engine.name, *engine.peers)
    elif not native:
        default = (*DEFAULT_EXECUTORS, *(b for b in BASELINES if BASELINES[b].plays is None
                                          and BASELINES[b].executor_default))
    elif reference_id in GAME_BENCHES:
        default = (*GAME_BENCHES[reference_id].native, *native_default(reference_id))
    else:
        default = (*NATIVE_BACKENDS, *native_default(reference_id))
    for b in default:
        if b in NATIVE_BACKENDS and native_missing:
            notes.append(f"{b}: {native_missing}")
        elif b in NATIVE_BACKENDS and family is not None and b not in family.backends:
            notes.append(f"{b}: {missing_backend(family, b)}")
        elif b in NATIVE_BACKENDS and b not in available:
            notes.append(f"{b}: {backend_status(b)}")
        elif b == "cuda" and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
            notes.append("cuda: the CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1), "
                         "it is for tests only; ask for it with --backends cuda")
        elif (b in BASELINES or b in ENGINE_BACKENDS) and (reason := status(b)):
            notes.append(f"{b}: {reason}")
        else:
            chosen.append(b)
    return chosen, notes


def plan(env_id: str, reference_id: str, backends: list[str], num_envs: list[int],
         threads: list[int], args: argparse.Namespace
         ) -> tuple[list[Planned], list[tuple[str, str]]]:
    """Every point in run order, and the series (label, backend) in table-column order; each
    point's worker imports ``args.env_module`` first (``--env module:Id``: it registers Id)."""
    native = [b for b in backends if b in NATIVE_BACKENDS or b in ENGINE_BACKENDS]
    executors = [b for b in backends if b in EXECUTOR_BACKENDS]
    baselines = [b for b in backends if b in BASELINES]
    workers = getattr(args, "num_workers", None) or [None]
    # (label, backend, numba threads, pool workers)
    series: list[tuple[str, str, int | None, int | None]] = []
    for b in native:
        if b == "numba":
            series += [(f"numba {t}t" if len(threads) > 1 else "numba", b, t, None)
                       for t in sorted(threads, reverse=True)]
        elif b in ENGINE_BACKENDS:  # its default threads, then each --threads count
            series.append((b, b, None, None))
            series += [(f"{b} {t}t", b, t, None)
                       for t in sorted(getattr(args, "threads", None) or [], reverse=True)]
        else:
            series.append((b, b, None, None))
    for b in executors:
        if b == "pool":
            series += [(f"pool {w}w" if len(workers) > 1 else "pool", b, None, w)
                       for w in sorted(workers, reverse=True)]
        else:
            series.append((b, b, None, None))
    series += [(b, b, None, None) for b in baselines]
    loops = dict.fromkeys((label for label, *_ in series), "tight")
    game = GAME_BENCHES.get(env_id)
    if game and game.twin_loop:  # every series again in its twin loop (chess: the user loop)
        twins = [(f"{label} {game.twin_loop}", b, t, w) for label, b, t, w in series]
        loops.update(dict.fromkeys((label for label, *_ in twins), game.twin_loop))
        series += twins

    max_python = getattr(args, "baseline_max_envs", None) or default_baseline_max_envs(env_id)
    # ray on a native id steps the native kernel in its actors: no Python env per env
    native_ray = _native_name(env_id) is not None
    max_processes = getattr(args, "process_max_envs", PROCESS_MAX_ENVS)
    module = getattr(args, "env_module", None)
    imports = (*([module] if module else []), *reference_imports(reference_id),
               *([game.module] if game else []))
    points = []
    for n in num_envs:
        for label, backend, t, w in series:
            options: dict[str, Any] = {}
            if backend == "torch" and args.torch_device:
                options["device"] = args.torch_device
            if backend == "cuda" and args.threads_per_block:
                options["threads_per_block"] = args.threads_per_block
            if backend == "pool" and w is not None:
                options["num_workers"] = w
            if backend in NATIVE_BACKENDS and game:
                options.update(game.native_options())  # the peers' games
            if loops[label] != "tight":
                options["loop"] = loops[label]
            spec = PointSpec(env_id=env_id, reference_id=reference_id, backend=backend,
                             num_envs=n, threads=t, seconds=args.seconds, options=options,
                             imports=imports)
            skip = None
            baseline = BASELINES.get(backend)
            if (backend == "subprocess" or (baseline and baseline.process_per_env)) \
                    and n > max_processes:
                skip = (f"above --process-max-envs {max_processes:,} "
                        "(one worker process per env)")
            elif (backend in EXECUTOR_BACKENDS or (baseline and baseline.python_loop)) \
                    and n > max_python and not (backend == "ray" and native_ray):
                skip = (f"above --baseline-max-envs {max_python:,} "
                        "(one Python env object per env: slow to build, ~6-10 KB each)")
            points.append(Planned(label, spec, skip))
    # a twin loop's series is no backend's column in the ratio columns (``comparisons``): the
    # game's sections compare the loops
    return points, [(label, backend if loops[label] == "tight" else f"{loops[label]} loop")
                    for label, backend, _, _ in series]


def study_name(env_id: str, backends: list[str], threads: list[int],
               num_workers: list[int] | None) -> str:
    """``bench-<env>-<kind>``: the stem of a run's files, different for different studies.

    ``kind`` names the series measured (``native`` backends, ``executors``, else ``baselines``
    alone; an engine's run, its engine: ``atari``, ``mujoco``, the executors then among its
    peers) and the sweeps (``threads-sweep``: several numba thread counts; ``workers-sweep``:
    several pool worker counts), so e.g. the default CartPole run and a pool study written to
    the same folder keep their own files; the same study run again replaces its own.
    """
    engine = next((b for b in backends if b in ENGINE_BACKENDS), None)
    families = (("native", NATIVE_BACKENDS), ("executors", EXECUTOR_BACKENDS))
    kinds = [engine] if engine else [kind for kind, names in families
                                     if any(b in names for b in backends)] or ["baselines"]
    if ("numba" in backends or engine) and len(threads) > 1:
        kinds.append("threads-sweep")
    if "pool" in backends and num_workers and len(num_workers) > 1:
        kinds.append("workers-sweep")
    stem = env_id.replace("/", "_").replace(":", "_")
    return f"bench-{stem}-{'-'.join(kinds)}"


def reference_imports(reference_id: str) -> tuple[str, ...]:
    """The module that registers a namespaced reference id with Gymnasium (``MinAtar/...``:
    minatar's ids, ``registry.NAMESPACE_MODULES``), imported here; each point's worker imports
    it too (``PointSpec.imports``). () when there is none or it cannot be imported (the
    baselines then say that Gymnasium has no such env)."""
    from envfleet.registry import NAMESPACE_MODULES

    namespace, slash, _ = reference_id.partition("/")
    module = NAMESPACE_MODULES.get(namespace) if slash else None
    if module is None:
        return ()
    try:
        importlib.import_module(module)
    except ImportError:
        return ()
    return (module,)


def default_baseline_max_envs(env_id: str) -> int:
    """``--baseline-max-envs``'s default for ``env_id``."""
    game = GAME_BENCHES.get(env_id)
    return game.python_max_envs if game else PYTHON_LOOP_MAX_ENVS


def comparisons(columns: list[tuple[str, str]]) -> tuple[str | None, list[tuple[str, str]]]:
    """(the primary series, the (ours, baseline) pairs of the ratio columns).

    The first native series (numba at the most threads) is compared with every baseline; the
    first pool series (the most workers) with ``EXECUTOR_RIVALS``; ray with the pool, the
    native series (ray runs a native id's kernel) and ``EXECUTOR_RIVALS``. The primary series
    (its per-call cost is shown) is the first native series, else the first pool series, else
    the first executor series.
    """
    native = next((label for label, b in columns
                   if b in NATIVE_BACKENDS or b in ENGINE_BACKENDS), None)
    pool = next((label for label, b in columns if b == "pool"), None)
    ray = next((label for label, b in columns if b == "ray"), None)
    executor = next((label for label, b in columns if b in EXECUTOR_BACKENDS), None)
    baselines = [label for label, b in columns if b in BASELINES]
    pairs = [(native, b) for b in baselines] if native else []
    ours = pool or (executor if native is None else None)
    if ours:
        pairs += [(ours, b) for b in baselines if b in EXECUTOR_RIVALS]
    if ray and ray != ours:
        pairs += [(ray, b) for b in (pool, native) if b]
        pairs += [(ray, b) for b in baselines if b in EXECUTOR_RIVALS]
    return native or ours, pairs


# --- running -----------------------------------------------------------------------------------


def _worker_env(spec: PointSpec) -> dict[str, str]:
    """The worker's environment: numba's pool must be large enough for the threads asked;
    no first-compile notice (the bench reports compile time apart)."""
    import numba

    env = {**os.environ, "ENVFLEET_QUIET": "1"}
    if spec.threads and spec.threads > numba.config.NUMBA_NUM_THREADS:
        env["NUMBA_NUM_THREADS"] = str(spec.threads)
    return env


def wait_until_quiet(limit_s: float, progress: Progress, task: Any, what: str) -> None:
    """Wait (up to ``limit_s``) until other processes use less than ``BUSY_CORES`` cores."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        before = cpu_seconds()
        time.sleep(0.5)
        load = background_load(before, cpu_seconds(), 0.5)
        if load is None or load < BUSY_CORES:
            return
        progress.update(task, description=f"waiting for a quiet machine (other processes: "
                                          f"{load:.1f} cores) before {what}")


def _summary(row: dict[str, Any], unit: str = "steps", detail: str | None = None) -> str:
    """A point's line under the progress bar; ``detail``: a game's extra point in words."""
    where = f"{row['series']:>12} {detail}" if detail else \
        f"{row['series']:>12} @ {row['num_envs']:>9,} envs"
    if row["status"] == "ok":
        load = row.get("background_load")
        noisy = f", [yellow]other processes: {load:.1f} cores[/]" if busy(row) else ""
        if row.get("threads_tried"):  # a thread_sweep baseline: its best thread count
            noisy = f", best of {len(row['threads_tried'])} thread counts: {row['threads']}" \
                    + noisy
        return (f"{where}: {human(row['steps_per_s']):>6} {unit}/s  "
                f"{micros(row['us_per_call']):>9}/call  "
                f"(build {row['construct_s']:.2f} s, JIT/warm-up {row['warmup_s']:.2f} s{noisy})")
    if row["status"] == "skipped":
        return f"[dim]{where}: skipped: {escape(row.get('note', ''))}[/]"
    return f"[red]{where}: {row['status']}: {escape(row.get('error', ''))}[/]"


@dataclass(frozen=True)
class Target:
    """``--env`` resolved as ``make`` resolves it: what runs it and what it is measured with."""

    env_id: str
    reference_id: str  # the id the baselines (and the executors) run
    module: str | None  # ``--env module:Id``: the module that registers Id
    native: bool  # native backends can run it
    native_missing: str | None  # why this envfleet cannot run it natively (its peers still run)
    family: NativeEnvSpec | None
    game: GameBench | None


def resolve_env(text: str) -> Target:
    """The ``Target`` of ``--env text``; an id nobody can run is a ``CommandError``."""
    from envfleet import UnknownEnvError
    from envfleet.registry import _gym_spec, _native_spec, split_module  # make()'s lookups

    native_missing = family = None
    try:
        # "module:Id": the module registers Id (imported here, and by each point's worker)
        module, bare = split_module(text)
        native = _native_name(bare) is not None
        if native:
            family = _native_spec(bare)
            # a user's family without a reference: the executors run its envfleet/<id>
            env_id, reference_id = family.id, family.reference_id or family.id
            if env_id in GAME_BENCHES:
                reference_id = env_id  # its peers play it
        elif bare in GAME_BENCHES:  # this envfleet cannot run it natively: the peers still run
            native, native_missing = True, GAME_BENCHES[bare].native_status()
            env_id = reference_id = bare
        else:
            _gym_spec(bare)
            env_id = reference_id = bare
    except UnknownEnvError as error:
        raise CommandError(str(error)) from None
    return Target(env_id, reference_id, module, native, native_missing, family,
                  GAME_BENCHES.get(env_id))


@dataclass
class Sweep:
    """What a run measures, in run order, how its tables compare the series, and what its
    files record."""

    target: Target
    backends: list[str]
    notes: list[str]  # the backends left out, and why
    num_envs: list[int]
    threads: list[int]
    points: list[Planned]
    series: list[str]  # the table columns, twin loops included
    twin_series: list[str]  # a game's twin loop's series
    primary: str | None  # the series whose ratios and per-call cost are shown
    pairs: list[tuple[str, str]]  # the (ours, baseline) ratio columns
    unit: str  # what a step is called (chess: plies)
    settings: dict[str, Any]
    stem: str  # the files' name (``study_name``)


def plan_sweep(args: argparse.Namespace) -> Sweep:
    """Resolve ``--env``, choose the backends and plan every point; the defaults that depend on
    the env are filled into ``args``."""
    target = resolve_env(args.env)
    env_id, game = target.env_id, target.game
    reference_imports(target.reference_id)  # MinAtar/...: minatar's ids, for the baselines
    backends, notes = choose_backends(args.backends, target.reference_id, target.native,
                                      target.native_missing, family=target.family)
    if not backends:
        raise CommandError("nothing to measure: no backend can run here")
    if args.num_workers and "pool" not in backends:
        raise CommandError("--num-workers sweeps the pool backend, which is not measured")
    num_envs = args.num_envs or list(
        game.num_envs if game else DEFAULT_NUM_ENVS if target.native
        else engine.default_num_envs if (engine := engines.family_of(env_id))
        else DEFAULT_EXECUTOR_NUM_ENVS)
    if args.baseline_max_envs is None:
        args.baseline_max_envs = default_baseline_max_envs(env_id)
    threads = args.threads or [_default_threads()]
    args.env_module = target.module  # each point's worker imports it first
    points, columns = plan(env_id, target.reference_id, backends, num_envs, threads, args)
    twin_series = [label for label, b in columns
                   if game and game.twin_loop and b == f"{game.twin_loop} loop"]
    if game:  # then its extra points (chess: perft, position by position)
        points += [replace(p, spec=replace(p.spec, imports=(*p.spec.imports, game.module)))
                   for p in game.extra_points(args)]
    # ratio columns: the first native series vs every baseline, pool vs EXECUTOR_RIVALS
    primary, pairs = comparisons(columns)

    unit = game.unit if game else "steps"
    settings = {"env": env_id, "backends": backends, "num_envs": num_envs,
                "threads": threads, "seconds": args.seconds,
                "baseline_max_envs": args.baseline_max_envs, "timeout_s": args.timeout}
    if game:
        settings.update(unit=unit, **game.settings(args))
    if any(b in EXECUTOR_BACKENDS or BASELINES[b].process_per_env
           for b in backends if b in EXECUTOR_BACKENDS or b in BASELINES):
        settings.update(num_workers=args.num_workers, process_max_envs=args.process_max_envs)
    stem = study_name(env_id, backends, threads, args.num_workers)
    settings["study"] = stem
    return Sweep(target, backends, notes, num_envs, threads, points,
                 [label for label, _ in columns], twin_series, primary, pairs, unit, settings,
                 stem)


def announce(console: Console, sweep: Sweep, args: argparse.Namespace,
             info: dict[str, Any]) -> None:
    """What the run measures, the backends left out, oversubscribed thread counts."""
    console.print(f"[bold]envfleet bench[/] {sweep.target.env_id}: {', '.join(sweep.series)} at "
                  f"num_envs {', '.join(f'{n:,}' for n in sweep.num_envs)}; {args.seconds:g} s "
                  f"per point, each in a fresh process. {info['cpu']}, {info['usable_cores']} "
                  "usable cores.")
    for note in sweep.notes:
        console.print(f"[dim]not measured: {escape(note)}[/]")
    over = [t for t in sweep.threads if t > info["usable_cores"]]
    if over:
        console.print(f"[yellow]note: {over} numba threads > {info['usable_cores']} usable "
                      "cores (oversubscribed)[/]")


def _describe(p: Planned) -> str:
    """A point in words, for the progress bar."""
    s = p.spec
    what = f"{p.series} {p.detail}" if p.detail else f"{p.series} num_envs={s.num_envs:,}"
    if s.threads:
        what += f" threads={s.threads}"
    if "num_workers" in s.options:
        what += f" workers={s.options['num_workers']}"
    return what


def measure_planned(p: Planned, env_id: str, dead: dict[str, str], args: argparse.Namespace,
                    progress: Progress, task: Any) -> dict[str, Any]:
    """The row of one point: measured in a fresh process, or skipped (for its own reason, or
    because its series timed out or was unavailable before); ``dead`` (series -> why its later
    points are skipped) learns from it."""
    s = p.spec
    what = _describe(p)
    progress.update(task, description=f"measuring {what}")
    skip = p.skip or dead.get(p.series)
    if skip:
        row = {"backend": s.backend, "num_envs": s.num_envs, "threads": s.threads,
               "status": "skipped", "note": skip}
    else:
        if args.wait_quiet > 0:
            wait_until_quiet(args.wait_quiet, progress, task, what)
            progress.update(task, description=f"measuring {what}")
        row = run_point(s, args.timeout, env=_worker_env(s))
    # a twin loop's rows are typed by their loop (chess: "user"), a game's extra points by
    # their kind (chess: "perft")
    kind = p.kind or s.options.get("loop", "point")
    row = {"type": kind, "series": p.series, "env": env_id, **row, **p.fields}
    if row["status"] == "timeout":
        dead[p.series] = f"timed out at {s.num_envs:,} envs"
    elif row.get("unavailable"):
        dead[p.series] = f"unavailable: {row['error']}"
    return row


def measure_points(sweep: Sweep, args: argparse.Namespace, console: Console,
                   jsonl: JsonLines) -> tuple[list[dict[str, Any]], bool]:
    """Measure the points one at a time under a progress bar, each row written to ``jsonl``
    as it comes; (the rows, whether Ctrl-C cut the run short)."""
    rows: list[dict[str, Any]] = []
    dead: dict[str, str] = {}
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                        refresh_per_second=4)
    try:
        with progress:
            task = progress.add_task("starting", total=len(sweep.points))
            for p in sweep.points:
                row = measure_planned(p, sweep.target.env_id, dead, args, progress, task)
                rows.append(row)
                jsonl.write(row)
                progress.console.print(_summary(row, p.unit or sweep.unit, p.detail))
                progress.advance(task)
            progress.update(task, description="done")
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: reporting the points measured so far[/]")
        return rows, True
    finally:
        jsonl.close()
    return rows, False


def loop_results(sweep: Sweep, rows: list[dict[str, Any]]
                 ) -> tuple[Results, Results, Results | None]:
    """(the tight loop's results, both loops' together: targets, summary and plot, the twin
    loop's own table: its series against each peer's twin, or None without a twin loop)."""
    results = Results(rows, [s for s in sweep.series if s not in sweep.twin_series],
                      sweep.primary, sweep.pairs, unit=sweep.unit)
    if not sweep.twin_series:
        return results, results, None
    twin = sweep.target.game.twin_loop
    twin_rows = [{**r, "type": "point"} if r["type"] == twin else r for r in rows]
    twin_pairs = [(f"{ours} {twin}", f"{b} {twin}") for ours, b in sweep.pairs
                  if f"{b} {twin}" in sweep.twin_series]
    both = Results(twin_rows, sweep.series, sweep.primary, sweep.pairs + twin_pairs,
                   unit=sweep.unit)
    twin_results = Results([r for r in twin_rows if r["series"] in sweep.twin_series],
                           sweep.twin_series, twin_pairs[0][0] if twin_pairs else None,
                           twin_pairs, unit=sweep.unit)
    return results, both, twin_results


def report(sweep: Sweep, rows: list[dict[str, Any]], args: argparse.Namespace,
           console: Console, jsonl_path: Path, info: dict[str, Any], t_start: float,
           interrupted: bool) -> int:
    """Print the tables, write the Markdown, the plot and a game's summary line; the exit
    status (130 when interrupted, 1 when a point failed or nothing was measured, else 0)."""
    env_id, primary = sweep.target.env_id, sweep.primary
    results, both, twin_results = loop_results(sweep, rows)
    if not results.num_envs:
        return 130 if interrupted else 1
    if primary and {ours for ours, _ in results.comparisons} <= {primary}:
        what = f"; ratios = {primary} / baseline at the same num_envs)"
    elif results.comparisons:
        what = "; ratios a × b = a / b at the same num_envs)"
    else:
        what = ")"
    main_table, startup = rich_tables(
        results, f"{env_id} {sweep.unit}/s ({args.seconds:g} s per point" + what)
    console.print(main_table)
    console.print(startup)
    for line in results.problems():
        console.print(f"[dim]- {escape(line)}[/]")
    extra = ""
    if sweep.target.game:  # its sections, and their summary as one JSON line after the points
        extra_kinds = {p.kind for p in sweep.points if p.kind}
        summary, extra, renderables = sweep.target.game.sections(
            both, [r for r in rows if r["type"] in extra_kinds], twin_results)
        with open(jsonl_path, "a") as f:
            f.write(json.dumps(summary) + "\n")
        for renderable in renderables:
            console.print(renderable)

    command = getattr(args, "command_line", None) or \
        "envfleet " + " ".join(getattr(args, "argv", ["bench"]))
    md_path = args.out / f"{sweep.stem}.md"
    md_path.write_text(markdown(results, env_id, info, sweep.settings, command) + extra)
    png_path = args.out / f"{sweep.stem}.png"
    why_not = plot(both, env_id, info, png_path)
    written = [jsonl_path, md_path] + ([] if why_not else [png_path])
    console.print(f"wrote {', '.join(map(str, written))} in "
                  f"{time.perf_counter() - t_start:.0f} s")
    if why_not:
        console.print(f"[yellow]{escape(why_not)}[/]")
    if interrupted:
        return 130
    return 1 if any(r["status"] in ("failed", "timeout") for r in rows) else 0


def run(args: argparse.Namespace) -> int:
    """Run the sweep and write the reports; 1 when a point failed, else 0."""
    check_output(args.out, "--out", directory=True)  # before any point is measured
    args.env = args.env or "CartPole-v1"
    args.seconds = args.seconds or 1.0
    t_start = time.perf_counter()
    console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    sweep = plan_sweep(args)
    info = machine_info()
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = JsonLines(args.out / f"{sweep.stem}.jsonl", {**info, "settings": sweep.settings})
    announce(console, sweep, args, info)
    rows, interrupted = measure_points(sweep, args, console, jsonl)
    return report(sweep, rows, args, console, jsonl.path, info, t_start, interrupted)
