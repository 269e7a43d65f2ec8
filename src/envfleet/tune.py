"""``envfleet tune ENV``: the fastest way to run an env on this machine, found by measuring.

First a single-env profile (step time and its spread, the share of time spent in resets, bytes
per observation, memory per env), then a short measured search over the configurations that
can pay for that env: for a native id its native backends over a ladder of ``num_envs``
(threads: the usable cores); for any Gymnasium id ``serial``, ``pool`` at 1 .. cores workers and,
when step times vary, the pool's first-ready ``batch_size`` (EnvPool-style async). Every
candidate is measured in its own fresh process (``envfleet.bench.measure.run_point``), the
same way ``envfleet bench`` measures. The recommendation is the candidate with the most steps/s
under the memory cap, printed as the ``envfleet.make(...)`` line to use.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envfleet.command import names, positive_float, positive_int
from envfleet.machine import usable_cores

#: a ladder rung stops climbing when the next one gains less than this
MIN_GAIN = 1.10
#: num_envs ladder of native backends (each rung x4) and of executors (each rung x2)
NATIVE_LADDER = (256, 1024, 4096, 16384, 65536, 262144, 1048576)
EXECUTOR_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: step-time spread (interquartile range / median) above which first-ready batches are tried
ASYNC_SPREAD = 0.5
#: what one more worker process costs besides its envs (an interpreter with numpy, gymnasium)
WORKER_PROCESS_BYTES = 120 * 2**20


@dataclass
class Profile:
    """One env stepped alone: what the search is planned from."""

    env_id: str
    native: bool
    step_us_median: float
    step_us_iqr: float
    step_spread: float  # interquartile range / median of the step time
    reset_share: float  # fraction of the time spent in reset()
    obs_bytes: int
    env_bytes: int  # memory one more env takes (native: its buffers; else measured RSS growth)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Candidate:
    """One configuration to measure: ``envfleet.make(env_id, num_envs, backend, **options)``."""

    backend: str
    num_envs: int
    options: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    result: dict[str, Any] | None = None

    @property
    def steps_per_s(self) -> float:
        ok = self.result is not None and self.result.get("status") == "ok"
        return float(self.result["steps_per_s"]) if ok else 0.0

    def label(self) -> str:
        extra = [f"{k}={v}" for k, v in self.options.items()]
        if self.threads:
            extra.append(f"num_threads={self.threads}")
        return ", ".join([self.backend, f"{self.num_envs} envs", *extra])


def is_native(env_id: str) -> bool:
    """Whether ``env_id`` has a native family (``envfleet.list_envs()``)."""
    from envfleet.registry import _native_name

    return _native_name(env_id) is not None


def _rss_bytes() -> int:
    """This process's resident memory now (Linux /proc; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def profile_env(env_id: str, seconds: float, seed: int = 0, native: bool | None = None
                ) -> Profile:
    """Step one env of ``env_id`` with random actions for ``seconds``: step-time statistics,
    reset share, observation bytes and the memory one env takes. ``native``: profile the
    native kernel (default: whenever ``env_id`` has one) rather than Gymnasium's env."""
    import gymnasium as gym

    from envfleet.registry import NATIVE_ENVS, _native_name

    native = is_native(env_id) if native is None else native and is_native(env_id)
    if native:
        import envfleet
        from envfleet.native.memory import native_bytes

        spec = NATIVE_ENVS[_native_name(env_id)]  # any form of the id (make()'s lookup)
        env = envfleet.make(env_id, 1, backend="numba", num_threads=1, seed=seed)
        env_bytes = native_bytes(spec, 1, "numba")

        def reset() -> Any:
            return env.reset(seed=seed)[0]

        def step(action: Any) -> bool:
            env.step(action)
            return False  # native envs reset themselves (next-step autoreset)
    else:
        gym_id = env_id.removeprefix("envfleet/")
        before = _rss_bytes()
        env = gym.make(gym_id)
        extra = [gym.make(gym_id) for _ in range(3)]  # memory growth per env: 3 more
        env_bytes = max((_rss_bytes() - before) // 4, 1024)
        for e in extra:
            e.close()

        def reset() -> Any:
            return env.reset(seed=seed)[0]

        def step(action: Any) -> bool:
            out = env.step(action)
            return bool(out[2] or out[3])
    env.action_space.seed(seed)
    obs = reset()
    obs_bytes = int(sum(np.asarray(leaf).nbytes for leaf in _leaves(obs)))
    if native:  # one env's share of the batch
        obs_bytes = max(obs_bytes, 1)
    step_times: list[float] = []
    reset_time = 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(step_times) < 5:
        action = env.action_space.sample()
        t0 = time.perf_counter()
        done = step(action)
        step_times.append(time.perf_counter() - t0)
        if done:
            t0 = time.perf_counter()
            reset()
            reset_time += time.perf_counter() - t0
    env.close()
    us = np.array(step_times) * 1e6
    q1, median, q3 = np.percentile(us, [25, 50, 75])
    total = float(us.sum()) / 1e6 + reset_time
    return Profile(env_id=env_id, native=native, step_us_median=float(median),
                   step_us_iqr=float(q3 - q1), step_spread=float((q3 - q1) / median),
                   reset_share=reset_time / total if total > 0 else 0.0,
                   obs_bytes=obs_bytes, env_bytes=int(env_bytes))


def _leaves(obs: Any) -> list[Any]:
    """The arrays of a (possibly nested dict / tuple) observation."""
    if isinstance(obs, dict):
        return [leaf for value in obs.values() for leaf in _leaves(value)]
    if isinstance(obs, tuple | list):
        return [leaf for value in obs for leaf in _leaves(value)]
    return [obs]


def native_backends(env_id: str) -> list[str]:
    """The native backends of ``env_id``'s family that can run here (``envfleet.list_envs``),
    cuda only on a real GPU: under the CUDA simulator its speed means nothing."""
    from envfleet.registry import _native_name, list_envs

    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    return [b for b in list_envs()[_native_name(env_id)] if not (b == "cuda" and simulated)]


def ladder(rungs: tuple[int, ...], max_envs: int, memory_cap: int, bytes_per_env: int,
           fixed_bytes: int = 0) -> list[int]:
    """The rungs of ``rungs`` at most ``max_envs`` whose memory fits under ``memory_cap``."""
    return [n for n in rungs if n <= max_envs and fixed_bytes + n * bytes_per_env <= memory_cap]


def climb(candidates: list[Candidate], measure: Any, deadline: float) -> list[Candidate]:
    """Measure ``candidates`` (one series, increasing num_envs) in order until a rung gains less
    than ``MIN_GAIN`` over the best so far twice in a row, or ``deadline`` (``perf_counter``)
    passes (the first rung is always measured); returns those measured."""
    measured: list[Candidate] = []
    best, flat = 0.0, 0
    for candidate in candidates:
        if measured and time.perf_counter() >= deadline:
            break
        measure(candidate)
        measured.append(candidate)
        rate = candidate.steps_per_s
        flat = flat + 1 if rate < best * MIN_GAIN else 0
        best = max(best, rate)
        if flat >= 2 or candidate.result is None or candidate.result.get("status") != "ok":
            break
    return measured


def choose_backends(env_id: str, backends: list[str] | None) -> list[str]:
    """The backends to consider: those asked for (checked), else a native id's native backends
    that run here, else ``serial`` and ``pool``."""
    from envfleet.bench.measure import NATIVE_BACKENDS

    allowed = (*NATIVE_BACKENDS, "serial", "pool") if is_native(env_id) else ("serial", "pool")
    if backends is None:
        return native_backends(env_id) if is_native(env_id) else ["serial", "pool"]
    unknown = [b for b in backends if b not in allowed]
    if unknown:
        raise ValueError(f"envfleet tune {env_id}: cannot consider backend(s) "
                         f"{', '.join(unknown)}; choose among {', '.join(allowed)}")
    return backends


def plan_series(profile: Profile, backends: list[str], max_envs: int,
                memory_cap: int) -> list[list[Candidate]]:
    """The series to climb: each a list of candidates with increasing ``num_envs``."""
    from envfleet.bench.measure import NATIVE_BACKENDS

    cores = usable_cores()
    series = []
    for backend in backends:
        if backend in NATIVE_BACKENDS:
            rungs = ladder(NATIVE_LADDER, max_envs, memory_cap, profile.env_bytes)
            # numba: every core, and one thread (which wins when other work holds the cores)
            threads: tuple[int | None, ...] = (
                ((cores, 1) if cores > 1 else (1,)) if backend == "numba" else (None,))
            series += [[Candidate(backend, n, threads=t) for n in rungs] for t in threads]
        elif backend == "pool":
            for workers in range(1, cores + 1):
                rungs = ladder(EXECUTOR_LADDER, max_envs, memory_cap, profile.env_bytes,
                               fixed_bytes=workers * WORKER_PROCESS_BYTES)
                # a worker with one env pays a round trip per step: start at two per worker
                series.append([Candidate("pool", n, {"num_workers": workers})
                               for n in rungs if n >= min(2 * workers, max_envs)])
        else:  # serial: one process steps the envs in turn, so num_envs changes nothing
            rungs = ladder(EXECUTOR_LADDER, max_envs, memory_cap, profile.env_bytes)
            series.append([Candidate(backend, n) for n in rungs if n >= min(16, rungs[-1])][:1]
                          if rungs else [])
    return [s for s in series if s]


def async_candidates(best: Candidate) -> list[Candidate]:
    """First-ready variants of the best pool configuration: half and a quarter of its envs
    per batch."""
    if best.backend != "pool" or best.num_envs < 4:
        return []
    return [Candidate("pool", best.num_envs, {**best.options, "batch_size": best.num_envs // d})
            for d in (2, 4)]


def make_line(env_id: str, best: Candidate) -> str:
    """The ``envfleet.make(...)`` call that builds ``best``."""
    args = [repr(env_id), str(best.num_envs), f"backend={best.backend!r}"]
    args += [f"{k}={v!r}" for k, v in best.options.items()]
    if best.threads:
        args.append(f"num_threads={best.threads}")
    return f"envfleet.make({', '.join(args)})"


@dataclass
class Recommendation:
    """What ``tune`` found: the profile, every measured candidate and the best one."""

    profile: Profile
    measured: list[Candidate]
    best: Candidate
    memory_cap: int

    @property
    def make_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``envfleet.make`` for the best candidate (with ``env`` and
        ``num_envs``)."""
        kwargs = {"env": self.profile.env_id, "num_envs": self.best.num_envs,
                  "backend": self.best.backend, **self.best.options}
        if self.best.threads:
            kwargs["num_threads"] = self.best.threads
        return kwargs

    def as_dict(self) -> dict[str, Any]:
        from envfleet.bench.report import machine_info

        return {
            "machine": machine_info(),
            "profile": self.profile.as_dict(),
            "memory_cap_bytes": self.memory_cap,
            "measured": [{"backend": c.backend, "num_envs": c.num_envs, "options": c.options,
                          "threads": c.threads, "steps_per_s": c.steps_per_s,
                          "status": (c.result or {}).get("status"),
                          "error": (c.result or {}).get("error")} for c in self.measured],
            "best": {"make": make_line(self.profile.env_id, self.best),
                     "kwargs": self.make_kwargs, "steps_per_s": self.best.steps_per_s},
        }


def tune(env_id: str, budget_s: float = 60.0, backends: list[str] | None = None,
         max_envs: int | None = None, memory_cap: int | None = None,
         progress: Any = None) -> Recommendation:
    """Profile ``env_id``, then measure candidate configurations in fresh processes within
    about ``budget_s`` seconds; return the fastest under ``memory_cap`` bytes (default: half
    of the memory available now)."""
    from envfleet.bench.measure import PointSpec, run_point
    from envfleet.native.memory import available_host_memory
    from envfleet.registry import _native_name, importable_id

    if memory_cap is None:
        available = available_host_memory()
        memory_cap = available // 2 if available else 4 * 2**30
    from envfleet.bench.measure import NATIVE_BACKENDS

    deadline = time.perf_counter() + budget_s
    backends = choose_backends(env_id, backends)
    native = any(b in NATIVE_BACKENDS for b in backends)
    profile = profile_env(env_id, seconds=min(2.0, 0.1 * budget_s), native=native)
    if max_envs is None:
        max_envs = NATIVE_LADDER[-1] if native else EXECUTOR_LADDER[-1]
    series = plan_series(profile, backends, max_envs, memory_cap)
    if not series:
        raise ValueError(f"no configuration of {env_id} fits under the memory cap of "
                         f"{memory_cap} bytes with at most {max_envs} envs")
    points = sum(len(s) for s in series)
    # each point: a fresh process (import, build, compile, warm-up) + timed stepping; the timed
    # part gets a share of the budget
    seconds = max(0.05, min(1.0, 0.3 * budget_s / points))
    # the id each point's fresh process resolves: a user's family with its module first
    name = _native_name(env_id)
    env_ref = importable_id(name) if name is not None else env_id

    def measure(candidate: Candidate) -> None:
        if progress is not None:
            progress(f"measuring {candidate.label()}")
        spec = PointSpec(env_id=env_ref, reference_id=env_ref, backend=candidate.backend,
                         num_envs=candidate.num_envs, threads=candidate.threads,
                         seconds=seconds, min_calls=3, options=dict(candidate.options))
        env = {**os.environ, "ENVFLEET_QUIET": "1"}
        candidate.result = run_point(spec, timeout=max(60.0, 20 * seconds), env=env)

    measured: list[Candidate] = []
    for i, candidates in enumerate(series):  # each series gets an equal share of what is left
        share = (deadline - time.perf_counter()) / (len(series) - i)
        measured += climb(candidates, measure, time.perf_counter() + share)
    best = max(measured, key=lambda c: c.steps_per_s)
    if profile.step_spread > ASYNC_SPREAD:  # uneven steps: first-ready batches may pay
        for candidate in async_candidates(best):
            measure(candidate)
            measured.append(candidate)
        best = max(measured, key=lambda c: c.steps_per_s)
    if best.steps_per_s <= 0:
        errors = "; ".join(f"{c.label()}: {(c.result or {}).get('error')}" for c in measured)
        raise RuntimeError(f"no configuration of {env_id} could be measured: {errors}")
    return Recommendation(profile, measured, best, memory_cap)


# --- command line ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``tune`` subcommand's options."""
    parser.add_argument("env", help="a native id or any Gymnasium id")
    parser.add_argument("--budget", type=positive_float, default=60.0, metavar="S",
                        help="about how long the search may take, in seconds "
                             "(default: %(default)s)")
    parser.add_argument("--backends", type=names,
                        help="comma list of backends to consider (default, native id: its "
                             "native backends that run here; other ids: serial,pool)")
    parser.add_argument("--max-envs", type=positive_int, metavar="N",
                        help=f"largest num_envs to consider (default: {NATIVE_LADDER[-1]} "
                             f"native, {EXECUTOR_LADDER[-1]} other ids)")
    parser.add_argument("--memory-cap", type=positive_float, metavar="GIB",
                        help="most memory the envs may take, in GiB (default: half of the "
                             "memory available now)")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="also write the profile, every measurement and the "
                             "recommendation as JSON to FILE")
    parser.set_defaults(func=run)


def _validate_env(env_id: str) -> None:
    """Refuse an id that is neither native nor registered with Gymnasium, naming the closest
    ones (make()'s own error)."""
    from envfleet.command import CommandError
    from envfleet.registry import UnknownEnvError, _gym_spec

    try:
        if not is_native(env_id):
            _gym_spec(env_id)
    except UnknownEnvError as error:
        raise CommandError(str(error)) from None


def run(args: argparse.Namespace) -> int:
    """``envfleet tune``: profile, search, print the table and the make line."""
    from rich.console import Console
    from rich.table import Table

    from envfleet.bench.report import human
    from envfleet.command import CommandError

    _validate_env(args.env)
    try:
        choose_backends(args.env, args.backends)
    except ValueError as error:
        raise CommandError(str(error)) from None
    console = Console(stderr=False)
    cap = int(args.memory_cap * 2**30) if args.memory_cap else None
    with console.status(f"profiling {args.env}...") as status:
        recommendation = tune(args.env, args.budget, args.backends, args.max_envs, cap,
                              progress=lambda text: status.update(text))
    p = recommendation.profile
    console.print(f"[bold]{args.env}[/]: one env steps in {p.step_us_median:.1f} µs (IQR "
                  f"{p.step_us_iqr:.1f} µs, spread {p.step_spread:.2f}), resets take "
                  f"{100 * p.reset_share:.0f}% of the time, {p.obs_bytes} bytes per "
                  f"observation, ~{p.env_bytes} bytes per env")
    table = Table(title=f"envfleet tune {args.env} (memory cap "
                        f"{recommendation.memory_cap / 2**30:.1f} GiB)")
    for column in ("configuration", "steps/s", "µs per call"):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for c in recommendation.measured:
        ok = c.steps_per_s > 0
        per_call = f"{c.result['us_per_call']:.0f}" if ok else (c.result or {}).get("status", "")
        style = "bold green" if c is recommendation.best else None
        table.add_row(c.label(), human(c.steps_per_s) if ok else "-", per_call, style=style)
    console.print(table)
    console.print(f"fastest: {human(recommendation.best.steps_per_s)} steps/s with\n\n    "
                  f"{make_line(args.env, recommendation.best)}\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(recommendation.as_dict(), indent=2))
    return 0


__all__ = ["Profile", "Recommendation", "profile_env", "tune"]

if __name__ == "__main__":  # pragma: no cover
    from envfleet.cli import main

    sys.exit(main(["tune", *sys.argv[1:]]))
