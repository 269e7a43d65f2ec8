"""The chess report sections: perft table, the issue's target ratios, best N, the summary
JSON line; as Markdown and as rich tables."""

from __future__ import annotations

from typing import Any

from envfleet.bench.chess.games import CHESS_ID, PERFT_SERIES, TARGETS
from envfleet.bench.report import _md_table, human, ratio, rich_table

# --- the chess report sections --------------------------------------------------------------------


def perft_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the perft table: one row per (position, depth)."""
    cases = list(dict.fromkeys((r["position"], r["depth"]) for r in rows))
    by = {(r["position"], r["depth"], r["series"]): r for r in rows}
    names = [s.removesuffix("-perft") for s in PERFT_SERIES]
    header = ["position", "depth", "nodes", *(f"{name} nodes/s" for name in names),
              f"{names[0]} × {names[1]}"]
    body = []
    for position, depth in cases:
        got = [by.get((position, depth, s)) for s in PERFT_SERIES]
        ok = [r if r and r.get("status") == "ok" else None for r in got]
        nodes = next((r["nodes"] for r in ok if r), None)
        cells = [position, str(depth), f"{nodes:,}" if nodes else ""]
        for r, measured in zip(got, ok, strict=True):
            if measured:
                cells.append(human(measured["nodes_per_s"]))
            else:
                cells.append("–" if r is None or r.get("status") == "skipped"
                             else r.get("status", ""))
        cells.append(ratio(ok[0]["nodes_per_s"] / ok[1]["nodes_per_s"])
                     if ok[0] and ok[1] else "")
        body.append(cells)
    return header, body


def target_lines(results: Any) -> list[str]:
    """The issue's targets: measured ratio against each, or why it was not measured."""
    primary = results.primary
    lines = []
    if primary is None or not results.get_best(primary):
        return [f"not measured ({CHESS_ID} is not available here: peers only)"]
    for peer, n, target in TARGETS:
        if n is None:  # the best N of each
            ours, theirs = results.get_best(primary), results.get_best(peer)
            where = "at the best N of each"
        else:
            ours, theirs = results.get(primary, n), results.get(peer, n)
            ours = ours if ours and ours.get("status") == "ok" else None
            theirs = theirs if theirs and theirs.get("status") == "ok" else None
            where = f"at N={n:,}"
        if not (ours and theirs):
            lines.append(f"{primary} vs {peer} {where}: not measured (target >= {target:g}×)")
            continue
        r = ours["steps_per_s"] / theirs["steps_per_s"]
        verdict = "met" if r >= target else "NOT met"
        detail = (f"{human(ours['steps_per_s'])} @ {ours['num_envs']:,} vs "
                  f"{human(theirs['steps_per_s'])} @ {theirs['num_envs']:,}")
        core = per_core(r, ours, theirs)
        core_text = f", {ratio(core)} per core used" if core is not None else ""
        lines.append(f"{primary} vs {peer} {where}: {ratio(r)} as measured{core_text} "
                     f"({detail}); target >= {target:g}× as measured: {verdict}")
    return lines


def per_core(measured: float, ours: dict[str, Any], theirs: dict[str, Any]) -> float | None:
    """A ratio per core used: ``measured`` times the peer's threads over envfleet's (None
    where a side's thread count is not known, e.g. pgx's XLA)."""
    a, b = ours.get("threads"), theirs.get("threads")
    return measured * b / a if a and b else None


def summary(results: Any, perft_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON line after the points: ratios per num_envs, best N, targets, perft ratios."""
    ratios: dict[str, dict[str, float]] = {}
    for ours, peer in results.comparisons:
        by_n = {str(n): round(r, 3) for n in results.num_envs
                if (r := results.ratio(peer, n, ours)) is not None}
        ratios[f"{ours} / {peer}"] = by_n
    best = {s: {"num_envs": b["num_envs"], "plies_per_s": b["steps_per_s"]}
            for s in results.series if (b := results.get_best(s))}
    targets = []
    primary = results.primary
    for peer, n, target in TARGETS:
        entry: dict[str, Any] = {"peer": peer, "num_envs": n if n else "best", "target": target,
                                 "ratio": None, "met": None}
        if primary and n is None and primary in best and peer in best:
            entry["ratio"] = best[primary]["plies_per_s"] / best[peer]["plies_per_s"]
        elif primary and n is not None:
            entry["ratio"] = results.ratio(peer, n, primary)
        if entry["ratio"] is not None:
            entry["met"] = entry["ratio"] >= target
            rows = ((results.get_best(primary), results.get_best(peer)) if n is None
                    else (results.get(primary, n), results.get(peer, n)))
            entry["ratio_per_core"] = per_core(entry["ratio"], *rows)
        targets.append(entry)
    perft = {}
    ok = {(r["position"], r["depth"], r["series"]): r for r in perft_rows
          if r.get("status") == "ok"}
    for position, depth in dict.fromkeys((r["position"], r["depth"]) for r in perft_rows):
        mine, ref = (ok.get((position, depth, s)) for s in PERFT_SERIES)
        perft[f"{position} depth {depth}"] = {
            "envfleet_nodes_per_s": mine and mine["nodes_per_s"],
            "python_chess_nodes_per_s": ref and ref["nodes_per_s"],
            "ratio": mine["nodes_per_s"] / ref["nodes_per_s"] if mine and ref else None}
    return {"type": "summary", "primary": primary, "unit": "plies", "ratios": ratios,
            "best": best, "targets": targets, "perft": perft}


def best_lines(results: Any) -> list[str]:
    """Each series' best plies/s and its N."""
    lines = []
    for s in results.series:
        best = results.get_best(s)
        if best:
            lines.append(f"{s}: {human(best['steps_per_s'])} plies/s at N={best['num_envs']:,}")
    return lines


def markdown_sections(results: Any, perft_rows: list[dict[str, Any]]) -> str:
    """The chess sections after the plies/s tables: best N, targets, perft."""
    parts = ["", "Best plies/s of each series: " + "; ".join(best_lines(results)) + ".", "",
             "Targets (issues 4 and 10, one run on this machine; ratios as measured, "
             "envfleet's threads against each peer's, and per core used):", ""]
    parts += [f"- {line}" for line in target_lines(results)]
    if perft_rows:
        header, body = perft_table(perft_rows)
        parts += ["", f"### {CHESS_ID}: perft nodes/s (bulk counting at the last ply)", "",
                  _md_table(header, body)]
        problems = [f"{r['series']} {r['position']} depth {r['depth']}: {r['status']}: "
                    f"{r.get('error', r.get('note', ''))}" for r in perft_rows
                    if r.get("status") != "ok"]
        if problems:
            parts += ["", *(f"- {p}" for p in problems)]
    return "\n".join(parts) + "\n"


def rich_sections(results: Any, perft_rows: list[dict[str, Any]]) -> list[Any]:
    """The same sections for the terminal: best N and targets as text, the perft table."""
    from rich.markup import escape

    out: list[Any] = ["best: " + escape("; ".join(best_lines(results)))]
    for line in target_lines(results):
        style = "green" if line.endswith(": met") else "yellow"
        out.append(f"[{style}]target: {escape(line)}[/]")
    if perft_rows:
        out.append(rich_table(f"{CHESS_ID} perft nodes/s (bulk counting at the last ply)",
                              *perft_table(perft_rows)))
    return out
