"""What every study shares: measuring groups of points in fresh worker processes, repeats and
their spread, the live table with its progress bar, and the JSON lines / Markdown / PNG files.

A study is a list of ``Job``s. A job is measured in one fresh worker process
(``python -m benchmarks.studies.common JOB_JSON``): its first point starts in a clean
process (JIT compile, thread pool, buffers: all first-time costs fall in ``warmup_s``, never in
the timings); the later points of the job reuse the compiled kernels. Each point is timed
``repeats`` times (``PointSpec.repeats``); a row reports the median repeat with its
interquartile range and its extremes. Each row also says how many cores other processes kept
busy while it was timed (``background_load``), and the header records the machine, the package
versions and the load average before and after.

A job's items are ``PointSpec``s (``measure.measure_one``: a backend or baseline stepping an env)
or ``Task``s (any function ``module:name(**kwargs)`` returning a JSON-able dict, e.g. the
roofline's STREAM and FMA kernels).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from envfleet.bench.measure import RESULT_TAG, PointSpec, measure_one, spec_from_json
from envfleet.bench.report import JsonLines, human, machine_info, micros

#: rows shown in the live table (the most recent ones)
LIVE_ROWS = 14


@dataclass(frozen=True)
class Task:
    """A measurement that is not an env stepping: ``function`` (``module:name``) called with
    ``kwargs`` in the worker; it returns a JSON-able dict (``status`` "ok" unless it says)."""

    function: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    """Points measured one after the other in one fresh worker process.

    ``labels[i]`` are the study's own fields for item ``i`` (series, x values, ...), copied
    into its row; ``label`` in them is the text the live table shows."""

    items: list[PointSpec | Task]
    labels: list[dict[str, Any]]
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables


# --- worker side -------------------------------------------------------------------------------


def _run_item(item: dict[str, Any]) -> dict[str, Any]:
    if "spec" in item:
        return measure_one(spec_from_json(json.dumps(item["spec"])))
    module, _, name = item["task"].partition(":")
    try:
        result = getattr(importlib.import_module(module), name)(**item["kwargs"])
    except Exception as error:  # reported as a failure row by the parent
        return {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    return {"status": "ok", **result}


def worker_main(argv: Sequence[str] | None = None) -> int:
    """Worker entry point: measure each item of the job, one tagged result line per item."""
    items = json.loads((sys.argv[1:] if argv is None else argv)[0])
    for item in items:
        result = _run_item(item)
        sys.stdout.flush()
        print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --- statistics --------------------------------------------------------------------------------


def spread(samples: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, extremes and the interquartile range in % of the median."""
    values = sorted(samples)
    median = statistics.median(values)
    q1, q3 = (statistics.quantiles(values, n=4, method="inclusive")[::2]
              if len(values) > 1 else (values[0], values[0]))
    return {"median": median, "q1": q1, "q3": q3, "min": values[0], "max": values[-1],
            "iqr_pct": 100 * (q3 - q1) / median if median else 0.0, "repeats": len(values)}


def with_spread(row: dict[str, Any]) -> dict[str, Any]:
    """A measured row with ``steps_per_s`` as the median repeat and its ``spread``."""
    samples = row.get("steps_per_s_samples")
    if row.get("status") == "ok" and samples:
        row["spread"] = spread(samples)
        row["steps_per_s"] = row["spread"]["median"]
    return row


def spread_text(row: dict[str, Any]) -> str:
    """``±4.1%`` (interquartile range / median) for a table cell."""
    s = row.get("spread")
    return f"±{s['iqr_pct'] / 2:.1f}%" if s and s["repeats"] > 1 else ""


# --- running jobs ------------------------------------------------------------------------------


def _reader(stream: Any, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


def run_job(job: Job, timeout_per_item: float,
            on_row: Callable[[dict[str, Any]], None]) -> None:
    """Measure ``job`` in a fresh worker; ``on_row`` gets each item's row as it arrives (a
    crash or a timeout gives failure rows for the items left)."""
    items = [{"spec": dataclasses.asdict(i)} if isinstance(i, PointSpec)
             else {"task": i.function, "kwargs": i.kwargs} for i in job.items]
    env = {**os.environ, "ENVFLEET_QUIET": "1", **job.env}
    threads = max((i.threads or 0 for i in job.items if isinstance(i, PointSpec)), default=0)
    if threads:  # numba's pool must be large enough for the threads asked
        import numba

        if threads > numba.config.NUMBA_NUM_THREADS:
            env["NUMBA_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, "-m", "benchmarks.studies.common", json.dumps(items)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True).start()
    done, deadline = 0, time.monotonic() + timeout_per_item
    t0 = time.perf_counter()
    try:
        while done < len(items):
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                why = f"no result within the {timeout_per_item:g} s timeout (process killed)"
                break
            if line is None:
                proc.wait()
                tail = " | ".join(x.strip() for x in errors[-3:])
                why = f"worker exited with code {proc.returncode}: {tail}"
                break
            if not line.startswith(RESULT_TAG):
                continue
            row = json.loads(line[len(RESULT_TAG):])
            if "timed_background_load" in row:
                row["background_load"] = row.pop("timed_background_load")
            row["wall_s"] = time.perf_counter() - t0
            on_row({**job.labels[done], **with_spread(row)})
            done += 1
            deadline, t0 = time.monotonic() + timeout_per_item, time.perf_counter()
        else:
            why = ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    for labels in job.labels[done:]:
        on_row({**labels, "status": "failed", "error": why})


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


class StudyRun:
    """One study's run: the header, the live table and progress bar, the rows, the files."""

    def __init__(self, name: str, args: argparse.Namespace, settings: dict[str, Any],
                 console: Console | None = None) -> None:
        self.name = name
        self.args = args
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.console = console or Console(width=None if sys.stdout.isatty() else 150,
                                          highlight=False)
        self.info = machine_info()
        self.load_before = load_average()
        self.settings = {"study": name, **settings}
        self.stem = self.out / f"study-{name}"
        self.jsonl = JsonLines(self.stem.with_suffix(".jsonl"),
                               {**self.info, "settings": self.settings,
                                "load_average_before": self.load_before})
        self.rows: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()

    @property
    def command(self) -> str:
        """The command line that reproduces the study (``python -m benchmarks``'s own)."""
        return getattr(self.args, "command_line", None) or \
            f"python -m benchmarks --study {self.name}"

    def _live_table(self) -> Table:
        table = Table(title=f"python -m benchmarks --study {self.name} (median of "
                            f"{self.settings.get('repeats', 1)} repeats, ± half the IQR)",
                      title_justify="left")
        for h in ("point", "steps/s", "spread", "per call", "cores used", "others' load"):
            table.add_column(h, justify="left" if h == "point" else "right")
        for r in self.rows[-LIVE_ROWS:]:
            if r.get("status") != "ok":
                note = r.get("note") or r.get("error", "")
                table.add_row(escape(r.get("label", "")),
                              f"[dim]{escape(r.get('status', ''))}: {escape(note[:70])}[/]",
                              "", "", "", "")
                continue
            rate = r.get("steps_per_s")
            load = r.get("background_load")
            table.add_row(escape(r.get("label", "")), human(rate) if rate else r.get("show", ""),
                          spread_text(r),
                          micros(r["us_per_call_median"]) if "us_per_call_median" in r else "",
                          f"{r['cores_used']:.2f}" if r.get("cores_used") is not None else "",
                          f"{load:.2f}" if load is not None else "")
        return table

    def run(self, jobs: list[Job], skipped: Sequence[dict[str, Any]] = ()) -> list[dict]:
        """Measure every job (live table and progress bar); rows in ``self.rows`` and JSON."""
        for row in skipped:
            self.add(row)
        total = sum(len(j.items) for j in jobs)
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=self.console)
        task = progress.add_task("starting", total=total)
        timeout = getattr(self.args, "timeout", 300.0)
        with Live(Group(self._live_table(), progress), console=self.console,
                  refresh_per_second=4, transient=False) as live:
            for job in jobs:
                progress.update(task, description=f"measuring {job.labels[0].get('label', '')}")

                def on_row(row: dict[str, Any]) -> None:
                    self.add(row)
                    progress.advance(task)
                    live.update(Group(self._live_table(), progress))

                run_job(job, timeout, on_row)
            progress.update(task, description="done")
            live.update(Group(self._live_table(), progress))
        return self.rows

    def add(self, row: dict[str, Any]) -> None:
        row = {"type": "point", **row}
        self.rows.append(row)
        self.jsonl.write(row)

    def finish(self, markdown_body: str, plot: Callable[[Path], None] | None,
               extra: dict[str, Any] | None = None) -> int:
        """Write the summary JSON line, the Markdown and the PNG; print the table and paths."""
        load_after = load_average()
        summary = {"type": "summary", "load_average_after": load_after,
                   "elapsed_s": round(time.perf_counter() - self.t0, 1), **(extra or {})}
        self.jsonl.write(summary)
        self.jsonl.close()
        md = self.stem.with_suffix(".md")
        md.write_text(f"## python -m benchmarks --study {self.name}\n\n{markdown_body.rstrip()}\n\n"
                      + self.footer(load_after) + "\n")
        written = [self.jsonl.path, md]
        png = self.stem.with_suffix(".png")
        if plot is not None:
            try:
                import matplotlib
            except ImportError:
                self.console.print("[yellow]matplotlib is not installed "
                                   "(pip install 'envfleet[bench]'): no plot[/]")
            else:
                matplotlib.use("Agg")
                plot(png)
                written.append(png)
        from rich.markdown import Markdown

        self.console.print()
        self.console.print(Markdown(markdown_body))
        self.console.print(f"wrote {', '.join(map(str, written))} in "
                           f"{time.perf_counter() - self.t0:.0f} s")
        return 1 if any(r.get("status") == "failed" for r in self.rows) else 0

    def footer(self, load_after: list[float] | None) -> str:
        """Where and how the numbers were made (machine, versions, load, repeats, command)."""
        info = self.info
        versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
        loads = [r["background_load"] for r in self.rows if r.get("background_load") is not None]
        others = (f"; other processes kept {statistics.median(loads):.2f} cores busy (median "
                  f"over the points, max {max(loads):.2f})" if loads else "")
        return (f"{info['cpu']}, {info['usable_cores']} usable cores, Python {info['python']}, "
                f"{versions}; {info['date'][:10]}. Each job in a fresh process, each point "
                f"timed {self.settings.get('repeats', 1)} times "
                f"({self.settings.get('seconds', 0):g} s each), median and spread (± half the "
                f"interquartile range) reported. Load average before {self.load_before}, after "
                f"{load_after}{others}. Reproduce: `{self.command}`")


def require_native(envs: Sequence[str], study: str) -> None:
    """Refuse (exit status 2) env ids that are not native: the study steps native kernels."""
    from envfleet.command import CommandError
    from envfleet.registry import NATIVE_ENVS

    unknown = [e for e in envs if e not in NATIVE_ENVS]
    if unknown:
        raise CommandError(f"--study {study} steps native envs; {', '.join(map(repr, unknown))} "
                           f"is not one (native ids: {', '.join(NATIVE_ENVS)})")


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A Markdown table, the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def turning_point(points: Sequence[tuple[int, float]]) -> int | None:
    """Where runtime turns linear in num_envs: the smallest n whose time per call ``t(n)`` is
    at least half made of linear growth from the largest n measured (``n * t(n_max) / n_max
    >= t(n) / 2``); None with fewer than 2 points."""
    if len(points) < 2:
        return None
    points = sorted(points)
    n_max, t_max = points[-1]
    return next(n for n, t in points if n * t_max / n_max >= 0.5 * t)


def ok(row: dict[str, Any] | None) -> bool:
    return bool(row) and row.get("status") == "ok"


if __name__ == "__main__":
    sys.exit(worker_main())
