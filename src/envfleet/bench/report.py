"""Reporting bench results: the rich table, its Markdown twin, JSON lines and the PNG plot.

Rows are the dicts the measuring workers return, with ``series`` (the column they belong to)
added by the runner. The throughput table has one row per num_envs and one column per series,
then one ratio column per compared pair (by default the primary series divided by each
baseline; the runner also compares ``pool`` with the process-based baselines), at the same
num_envs, from the same run, and the primary series' µs per call.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from rich.table import Table

from envfleet.bench.baselines import BASELINES
from envfleet.machine import usable_cores

#: a point during which other processes kept this many cores busy is marked "*" (noisy)
BUSY_CORES = 0.25
VERSIONED = ("numpy", "numba", "numba-cuda", "torch", "gymnasium", "stable-baselines3", "envpool",
             "ray", "mujoco", "ale-py", "pufferlib-core", "envfleet")


# --- formatting -------------------------------------------------------------------------------


def human(x: float) -> str:
    """A rate with three significant digits and a k/M/G suffix: 82.1M, 4.38k, 950."""
    units = (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9))
    i = 0
    while i + 1 < len(units) and x >= 0.9995 * units[i + 1][1]:  # 999,999 is 1.00M
        i += 1
    suffix, scale = units[i]
    return _three(x / scale) + suffix


def _three(v: float) -> str:
    """Three significant digits, trailing zeros kept (5.00, 31.2, 812)."""
    return f"{v:.0f}" if v >= 99.95 else f"{v:.1f}" if v >= 9.995 else f"{v:.2f}"


def ratio(x: float) -> str:
    """A speed ratio: 2.74×, 31.2×, 1,234×, 0.52×, 0.00026×."""
    if x >= 100:
        return f"{x:,.0f}×"
    if x >= 0.01:
        return f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"
    return f"{x:.2g}×"


def micros(us: float) -> str:
    """A duration given in µs: 4.14 µs, 812 µs, 26.3 ms, 1.20 s."""
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if us >= 0.9995 * scale:
            return f"{_three(us / scale)} {unit}"
    return f"{_three(us)} µs"


def envs_label(n: int) -> str:
    """1, 64, 1k, 16k, 1M (binary multiples, as the default sweep uses)."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10}k"
    return str(n)


# --- machine info and JSON lines ---------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: the CPU, the cores this process may use, package versions."""
    usable = usable_cores()
    versions = {}
    for package in VERSIONED:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


class JsonLines:
    """``<out>/<env>.jsonl``: a header line, then one line per point as it is measured."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self._file: TextIO = open(path, "w")  # noqa: SIM115 (closed in close())
        self.write({"type": "header", **header})

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# --- tables ------------------------------------------------------------------------------------


def _ok(row: dict[str, Any] | None) -> bool:
    return row is not None and row.get("status") == "ok"


def busy(row: dict[str, Any] | None) -> bool:
    """Other processes competed for the cores while this point ran."""
    return row is not None and (row.get("background_load") or 0.0) >= BUSY_CORES


def _cell(row: dict[str, Any] | None) -> tuple[str, str]:
    """(text, rich style) for one series at one num_envs."""
    if row is None:
        return "", ""
    if _ok(row):
        return human(row["steps_per_s"]) + ("*" if busy(row) else ""), ""
    if row.get("status") == "skipped":
        return "–", "dim"
    return row.get("status", "failed"), "red"


class Results:
    """The measured rows, indexed by (series, num_envs)."""

    def __init__(self, rows: Iterable[dict[str, Any]], series: list[str],
                 primary: str | None,
                 comparisons: list[tuple[str, str]] | None = None, unit: str = "steps") -> None:
        """``comparisons``: the (ours, baseline) ratio columns; default: the primary series
        against every baseline series. ``unit``: what a step is called (chess: plies)."""
        self.unit = unit
        self.rows = [r for r in rows if r.get("type", "point") == "point"]
        self.series = series
        self.primary = primary
        self.by_key = {(r["series"], r["num_envs"]): r for r in self.rows}
        self.num_envs = sorted({r["num_envs"] for r in self.rows})
        if comparisons is None:
            comparisons = [(primary, s) for s in series if s in BASELINES] if primary else []
        # a ratio column for each pair whose baseline has at least one measured point
        self.comparisons = [(ours, b) for ours, b in comparisons if
                            any(_ok(self.by_key.get((b, n))) for n in self.num_envs)]
        self.baselines = list(dict.fromkeys(b for _, b in self.comparisons))

    def get(self, series: str, n: int) -> dict[str, Any] | None:
        return self.by_key.get((series, n))

    def get_best(self, series: str) -> dict[str, Any] | None:
        """The measured point of ``series`` with the most steps/s (None: none measured)."""
        ok = [r for n in self.num_envs if _ok(r := self.get(series, n))]
        return max(ok, key=lambda r: r["steps_per_s"], default=None)

    def ratio(self, baseline: str, n: int, ours: str | None = None) -> float | None:
        """``ours`` (default: the primary) steps/s over ``baseline`` steps/s at ``n`` envs,
        when both were measured."""
        ours = ours or self.primary
        p, b = self.get(ours, n) if ours else None, self.get(baseline, n)
        if _ok(p) and _ok(b) and b["steps_per_s"] > 0:
            return p["steps_per_s"] / b["steps_per_s"]
        return None

    def throughput_table(self) -> tuple[list[str], list[list[tuple[str, str]]]]:
        """Header and cells (text, style) of the steps/s table."""
        header = ["num_envs", *self.series]
        header += [f"{ours} × {b}" for ours, b in self.comparisons]
        if self.primary:
            header.append(f"{self.primary} per call")
        body = []
        for n in self.num_envs:
            cells = [(f"{n:,}", "")] + [_cell(self.get(s, n)) for s in self.series]
            for ours, b in self.comparisons:
                r = self.ratio(b, n, ours)
                cells.append((ratio(r), "bold green" if r >= 1 else "yellow") if r else ("", ""))
            if self.primary:
                p = self.get(self.primary, n)
                cells.append((micros(p["us_per_call"]), "") if _ok(p) else ("", ""))
            body.append(cells)
        return header, body

    def startup_table(self) -> tuple[list[str], list[list[str]]]:
        """Per series: cost per call at the smallest num_envs, warm-up/JIT and build times."""
        n_min = self.num_envs[0] if self.num_envs else 1
        header = ["series", f"per call @ {n_min:,} env{'s' if n_min > 1 else ''}",
                  "JIT + first reset/step (s)", "largest num_envs", "build (s)",
                  "first reset/step (s)", "peak RSS (MB)"]
        body = []
        for s in self.series:
            ok = [self.get(s, n) for n in self.num_envs if _ok(self.get(s, n))]
            if not ok:
                continue
            first, last = ok[0], ok[-1]
            per_call = micros(first["us_per_call"]) if first["num_envs"] == n_min else ""
            rss = last.get("peak_rss_mb")
            body.append([s, per_call, f"{first['warmup_s']:.2f}", f"{last['num_envs']:,}",
                         f"{last['construct_s']:.2f}", f"{last['warmup_s']:.2f}",
                         f"{rss:,.0f}" if rss else ""])
        return header, body

    def problems(self) -> list[str]:
        """One line per failed, timed-out or skipped point (skips grouped by reason)."""
        lines, skipped = [], {}
        for r in self.rows:
            if r["status"] == "skipped":
                skipped.setdefault((r["series"], r.get("note", "")), []).append(r["num_envs"])
            elif r["status"] != "ok":
                lines.append(f"{r['series']} @ {r['num_envs']:,} envs: {r['status']}: "
                             f"{r.get('error', '')}")
        for (s, note), ns in skipped.items():
            lines.append(f"{s} skipped at {', '.join(f'{n:,}' for n in ns)} envs: {note}")
        if any(busy(r) for r in self.rows if _ok(r)):
            lines.append(f"* other processes kept >= {BUSY_CORES} cores busy during that point "
                         "(see background_load in the JSON lines): expect it to be low")
        return lines


def rich_tables(results: Results, title: str) -> tuple[Table, Table]:
    """The throughput table and the start-up table, for the terminal."""
    header, body = results.throughput_table()
    main = Table(title=title, title_justify="left")
    for i, h in enumerate(header):
        main.add_column(h, justify="right", style="bold" if h == results.primary else None,
                        no_wrap=i == 0)
    for cells in body:
        main.add_row(*(f"[{style}]{text}[/]" if style and text else text
                       for text, style in cells))
    startup = rich_table(f"Start-up and per-call cost (not included in {results.unit}/s)",
                         *results.startup_table())
    return main, startup


def rich_table(title: str, header: list[str], body: list[list[str]]) -> Table:
    """A terminal table, the first column left-aligned, the others right-aligned (the rich
    twin of ``_md_table``)."""
    table = Table(title=title, title_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for cells in body:
        table.add_row(*cells)
    return table


def _md_table(header: list[str], body: list[list[str]]) -> str:
    # first column (num_envs or series) left, numbers right
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def markdown(results: Results, env_id: str, info: dict[str, Any], settings: dict[str, Any],
             command: str) -> str:
    """``<env>.md``: the throughput table, the start-up table and how they were made."""
    header, body = results.throughput_table()
    sheader, sbody = results.startup_table()
    text_body = [[text for text, _ in row] for row in body]
    cores = f"{info['usable_cores']} usable core{'s' if info['usable_cores'] != 1 else ''}"
    parts = [
        f"### {env_id}: {results.unit}/s by num_envs",
        "",
        _md_table(header, text_body),
        "",
        f"Start-up and per-call cost (not included in {results.unit}/s):",
        "",
        _md_table(sheader, sbody),
        "",
        f"{info['cpu']}, {cores}, Python {info['python']}, "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
        + f"; {settings['seconds']:g} s per point, each point in a fresh process; "
        f"{info['date'][:10]}. Reproduce: `{command}`",
    ]
    notes = results.problems()
    if notes:
        parts += ["", *(f"- {n}" for n in notes)]
    return "\n".join(parts) + "\n"


# --- plot --------------------------------------------------------------------------------------


def plot(results: Results, env_id: str, info: dict[str, Any], path: Path) -> str | None:
    """Write the log-log steps/s vs num_envs plot; returns why not when it cannot."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install 'envfleet[bench]'): no plot"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    noisy = False
    for s in results.series:
        rows = [r for n in results.num_envs if _ok(r := results.get(s, n))]
        if not rows:
            continue
        (line,) = ax.plot([r["num_envs"] for r in rows], [r["steps_per_s"] for r in rows],
                          marker="o", linewidth=2.5 if s == results.primary else 1.5,
                          linestyle="--" if s in BASELINES else "-", label=s)
        busy_rows = [r for r in rows if busy(r)]
        if busy_rows:  # open markers: measured while other processes used the cores
            noisy = True
            ax.plot([r["num_envs"] for r in busy_rows], [r["steps_per_s"] for r in busy_rows],
                    linestyle="none", marker="o", color=line.get_color(),
                    markerfacecolor="white", zorder=line.get_zorder() + 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(results.num_envs, [envs_label(n) for n in results.num_envs])
    ax.minorticks_off()
    ax.set_xlabel("num_envs")
    ax.set_ylabel(f"{results.unit}/s")
    ax.set_title(f"envfleet bench {env_id}: {info['cpu']}, {info['usable_cores']} cores, "
                 f"{info['date'][:10]}", fontsize=10)
    ax.grid(True, which="major", alpha=0.4)
    # open markers: other processes kept >= BUSY_CORES cores busy during that point
    ax.legend(title="○ = other processes were busy" if noisy else None, title_fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None

