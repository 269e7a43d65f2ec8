"""The chess report sections: perft table, the ratios against the peers, best N, the summary
JSON line; as Markdown and as rich tables. The issues' targets (``TARGETS``, ``USER_TARGETS``)
are the project's own: only the summary JSON line and ``target_lines`` judge against them, the
report a user reads shows the ratios as measured (``peer_lines``)."""

from __future__ import annotations

from typing import Any

from benchmarks.chess.games import (
    CHESS_ID,
    PERFT_SERIES,
    TARGETS,
    USER_GAP_TARGET,
    USER_TARGETS,
)
from benchmarks.chess.userloop import USER_SUFFIX
from envfleet.bench.report import _md_table, human, micros, ratio, rich_table

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


def peer_lines(results: Any) -> list[str]:
    """The measured ratios of the targets' comparisons, without the project's targets and
    verdicts (what ``python -m benchmarks --env Chess-v0`` shows its user); the unmeasured ones
    left out."""
    return target_lines(results, judged=False)


def target_lines(results: Any, judged: bool = True) -> list[str]:
    """The issue's targets: measured ratio against each, or why it was not measured
    (``judged=False``: the measured ratios alone, no target nor verdict)."""
    primary = results.primary
    lines = []
    if primary is None or not results.get_best(primary):
        return [f"not measured ({CHESS_ID} is not available here: peers only)"] if judged else []
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
            if judged:
                lines.append(f"{primary} vs {peer} {where}: not measured (target >= "
                             f"{target:g}×)")
            continue
        r = ours["steps_per_s"] / theirs["steps_per_s"]
        verdict = "met" if r >= target else "NOT met"
        detail = (f"{human(ours['steps_per_s'])} @ {ours['num_envs']:,} vs "
                  f"{human(theirs['steps_per_s'])} @ {theirs['num_envs']:,}")
        core = per_core(r, ours, theirs)
        core_text = f", {ratio(core)} per core used" if core is not None else ""
        verdict_text = f"; target >= {target:g}× as measured: {verdict}" if judged else ""
        lines.append(f"{primary} vs {peer} {where}: {ratio(r)} as measured{core_text} "
                     f"({detail}){verdict_text}")
    return lines + user_target_lines(results, judged)


def _ok(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return row if row and row.get("status") == "ok" else None


def user_targets(results: Any) -> list[dict[str, Any]]:
    """Issue 22's user-loop targets, each with its measured ratio (None: not measured): the
    primary series' tight loop over its user loop (at most ``USER_GAP_TARGET``), and its user
    loop against each ``USER_TARGETS`` peer's user loop."""
    primary = results.primary
    if primary is None:
        return []
    ours = f"{primary} {USER_SUFFIX}"
    n, most = USER_GAP_TARGET
    tight, user = _ok(results.get(primary, n)), _ok(results.get(ours, n))
    gap = tight["steps_per_s"] / user["steps_per_s"] if tight and user else None
    out = [{"what": f"{primary} tight loop / user loop", "num_envs": n, "target": most,
            "at_most": True, "ratio": gap, "met": None if gap is None else gap <= most}]
    for peer, n, least in USER_TARGETS:
        mine, theirs = _ok(results.get(ours, n)), _ok(results.get(f"{peer} {USER_SUFFIX}", n))
        r = mine["steps_per_s"] / theirs["steps_per_s"] if mine and theirs else None
        out.append({"what": f"{ours} / {peer} {USER_SUFFIX}", "num_envs": n, "target": least,
                    "at_most": False, "ratio": r, "met": None if r is None else r >= least,
                    "ratio_per_core": None if r is None else per_core(r, mine, theirs)})
    return out


def user_target_lines(results: Any, judged: bool = True) -> list[str]:
    """``user_targets`` as the report's lines (``judged=False``: the measured ratios alone)."""
    lines = []
    for t in user_targets(results):
        bound = f"{'<=' if t['at_most'] else '>='} {t['target']:g}×"
        where = f"{t['what']} at N={t['num_envs']:,}"
        if t["ratio"] is None:
            if judged:
                lines.append(f"{where}: not measured (target {bound})")
            continue
        core = t.get("ratio_per_core")
        core_text = f", {ratio(core)} per core used" if core is not None else ""
        verdict = f"; target {bound}: {'met' if t['met'] else 'NOT met'}" if judged else ""
        lines.append(f"{where}: {ratio(t['ratio'])} as measured{core_text}{verdict}")
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
            "best": best, "targets": targets, "user_loop_targets": user_targets(results),
            "perft": perft}


def best_lines(results: Any) -> list[str]:
    """Each series' best plies/s and its N."""
    lines = []
    for s in results.series:
        best = results.get_best(s)
        if best:
            lines.append(f"{s}: {human(best['steps_per_s'])} plies/s at N={best['num_envs']:,}")
    return lines


#: what the user loop's table says about how it was measured
USER_LOOP_NOTE = ("step; then a policy's NumPy work on the mask (a uniformly random legal "
                  "action per board: `random_legal_from_mask`; python-chess: an index into "
                  "each board's legal-move list) before the next step; only the steps are "
                  "timed, the policy on no side")


def user_loop_table(user: Any) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the user loop's table: plies/s, ratios, then each series' policy
    time and page faults inside the step at each N (what the step paid beyond the plies)."""
    header, body = user.throughput_table()
    header = [*header, "policy / call", "faults / step"]
    cells = []
    for n, row in zip(user.num_envs, body, strict=True):
        p = user.get(user.primary, n) if user.primary else None
        extra = [micros(p["policy_us_per_call"]), f"{p['minor_faults_per_step']:.1f}"] \
            if p and p.get("status") == "ok" and "policy_us_per_call" in p else ["", ""]
        cells.append([text for text, _ in row] + extra)
    return header, cells


def markdown_sections(results: Any, perft_rows: list[dict[str, Any]], user: Any = None) -> str:
    """The chess sections after the plies/s tables: the user loop's table (``user``: its
    ``Results``), best N, targets, perft."""
    parts = []
    if user is not None and user.num_envs:
        parts += ["", f"### {CHESS_ID}: plies/s in the user loop", "",
                  f"The user loop: {USER_LOOP_NOTE}; the policy and faults columns are "
                  f"{user.primary}'s.", "", _md_table(*user_loop_table(user))]
    parts += ["", "Best plies/s of each series: " + "; ".join(best_lines(results)) + "."]
    if lines := peer_lines(results):
        parts += ["", "Ratios (one run on this machine; as measured, "
                  "envfleet's threads against each peer's, and per core used; the user loop's "
                  "steps timed, its policy not):", ""]
        parts += [f"- {line}" for line in lines]
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


def rich_sections(results: Any, perft_rows: list[dict[str, Any]], user: Any = None
                  ) -> list[Any]:
    """The same sections for the terminal: the user loop's table, best N and targets as text,
    the perft table."""
    from rich.markup import escape

    out: list[Any] = []
    if user is not None and user.num_envs:
        out.append(rich_table(f"{CHESS_ID} plies/s in the user loop ({USER_LOOP_NOTE})",
                              *user_loop_table(user)))
    out.append("best: " + escape("; ".join(best_lines(results))))
    out += [f"ratio: {escape(line)}" for line in peer_lines(results)]
    if perft_rows:
        out.append(rich_table(f"{CHESS_ID} perft nodes/s (bulk counting at the last ply)",
                              *perft_table(perft_rows)))
    return out
