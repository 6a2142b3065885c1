"""The report's tables alone: ``textsql-clarify report --format md|csv|json``.

The same numbers as the HTML page: the leaderboard (headline metrics with 95 % intervals and n, and
each run's paired difference from the first), the outcomes per run, and one table per breakdown.
``json`` keeps the structure; ``csv`` is one long table (one row per run, table, category and metric:
easy to load into pandas or a spreadsheet); ``md`` is GitHub Markdown, one table per section, each
cell ``value [lo, hi] n``.

A predictions replay (``textsql-clarify score``, :attr:`~textsql_clarify.reports.runs.Run.replay`) is one SQL
turn per episode, so the agent-behaviour metrics (:data:`~textsql_clarify.rewards.report.REPLAY_SKIPPED`: AR,
turns, ...) and the outcome columns of :data:`~textsql_clarify.rewards.report.REPLAY_SKIPPED_OUTCOMES` describe
no agent there. The rule is the HTML page's (:func:`~textsql_clarify.reports.leaderboard.applies`,
:func:`~textsql_clarify.reports.leaderboard.applies_outcome`): a report of score runs only leaves those metrics
and columns out; beside an ``eval`` run they stay, and the score run's cells are not applicable, with no paired
difference. In ``md`` such a cell reads ``n/a`` (:data:`~textsql_clarify.reports.html.NOT_APPLICABLE_MARK`;
undefined reads ``—``); in ``csv`` its ``value``, ``ci95_lo``, ``ci95_hi`` are empty, ``n`` is 0 and the column
``not_applicable`` is ``true`` (``false`` on every other row, so pandas reads it as booleans); in ``json`` the
cell carries ``"not_applicable": true``.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any, Sequence

from .html import NOT_APPLICABLE_MARK
from .leaderboard import DEFAULT_BY, NOT_APPLICABLE, applies_outcome, category_table, leaderboard, outcome_table
from .runs import Run

FORMATS = ("html", "md", "csv", "json")
UNDEFINED = "—"
CSV_COLUMNS = ("table", "run", "breakdown", "key", "metric", "value", "ci95_lo", "ci95_hi", "n", "p_value", "test",
               "verdict", "count", "not_applicable")


def outcome_columns(runs: Sequence[Run]) -> list[str]:
    """The outcomes table's columns: the outcome shares (:data:`~textsql_clarify.rewards.outcomes.OUTCOMES`), then
    the per-episode means (:data:`~textsql_clarify.rewards.outcomes.COUNTS`: turns, clarifications), each kept
    where it applies to some run (:func:`~textsql_clarify.reports.leaderboard.applies_outcome`; a report of
    predictions replays only keeps ``sql``), in that order, as the HTML page's outcomes section.

    Args:
        runs: the runs.
    Returns:
        The column names (``[]`` for no runs).
    """
    from ..rewards.outcomes import COUNTS, OUTCOMES

    return [c for c in (*OUTCOMES, *COUNTS) if any(applies_outcome(r, c) for r in runs)]


def applicable_outcomes(run: Run) -> dict[str, Any]:
    """A run's outcome summary (:func:`~textsql_clarify.reports.leaderboard.outcome_table`) with each column that
    does not apply to it (:func:`~textsql_clarify.reports.leaderboard.applies_outcome`) replaced by
    :data:`~textsql_clarify.reports.leaderboard.NOT_APPLICABLE`; the run's own record is not changed.

    Returns:
        ``{"n", "shares": {outcome: cell}, "turns": cell, "clarifications": cell}`` (a copy).
    """
    from ..rewards.outcomes import COUNTS

    t = dict(outcome_table(run))
    t["shares"] = {o: s if applies_outcome(run, o) else dict(NOT_APPLICABLE)
                   for o, s in (t.get("shares") or {}).items()}
    for c in COUNTS:
        if not applies_outcome(run, c):
            t[c] = dict(NOT_APPLICABLE)
    return t


def _mark_differences(board: dict[str, Any]) -> dict[str, Any]:
    """``board`` (:func:`~textsql_clarify.reports.leaderboard.leaderboard`) with each paired difference whose run's
    or reference's cell is not applicable marked ``"not_applicable": True`` (the HTML page's rule: no Δ there)."""
    rows = board["rows"]
    out = []
    for row in rows:
        if row["diff"] is not None:
            na = {m for m in board["metrics"]
                  if row["metrics"][m].get("not_applicable") or rows[0]["metrics"][m].get("not_applicable")}
            row = {**row, "diff": {m: {**d, "not_applicable": True} if m in na else d for m, d in row["diff"].items()}}
        out.append(row)
    return {**board, "rows": out}


def report_tables(runs: Sequence[Run], *, by: Sequence[str] = DEFAULT_BY) -> dict[str, Any]:
    """Every table of the report as one JSON-ready dict.

    Args:
        runs: the runs (the first is the paired differences' reference).
        by: the breakdowns, in order.
    Returns:
        ``{"runs": [{"name", "agent", "dataset", "folder", "n_trajectories", "privileged", "replay"}],
        "leaderboard": leaderboard(runs), "outcomes": {run name: applicable_outcomes(run)},
        "outcome_columns": outcome_columns(runs), "by": {breakdown: category_table(runs, breakdown)}}``; a paired
        difference against or from a cell that is not applicable is marked ``"not_applicable": True``.
    Raises:
        ValueError: an unknown breakdown.
    """
    return {
        "runs": [{"name": r.name, "agent": r.agent, "dataset": r.info.get("dataset"), "folder": str(r.path),
                  "n_trajectories": r.metrics.get("n_trajectories"), "privileged": r.privileged,
                  "replay": r.replay} for r in runs],
        "leaderboard": _mark_differences(leaderboard(runs)),
        "outcomes": {r.name: applicable_outcomes(r) for r in runs},
        "outcome_columns": outcome_columns(runs),
        "by": {b: category_table(runs, b) for b in by},
    }


#: a text cell starting with one of these is read as a formula by spreadsheets (OWASP "CSV injection")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _inert(text: str) -> str:
    """A text cell made inert for spreadsheets: a leading formula character gets a ``'`` in front
    (OWASP CSV injection advice); numbers are written as numbers, never through this."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _csv_row(table: str, run: str, metric: str, m: dict[str, Any] | None, *, breakdown: str = "",
             key: str = "") -> dict[str, Any]:
    m = m or {}
    ci = m.get("ci95") or (None, None)
    run, key = _inert(str(run)), _inert(str(key))
    return {"table": table, "run": run, "breakdown": breakdown, "key": key, "metric": metric,
            "value": m.get("value"), "ci95_lo": ci[0], "ci95_hi": ci[1], "n": m.get("n", 0),
            "p_value": m.get("p_value"), "test": m.get("test"), "verdict": m.get("verdict"), "count": m.get("count"),
            "not_applicable": "true" if m.get("not_applicable") else "false"}


def to_csv(tables: dict[str, Any]) -> str:
    """:func:`report_tables` as one long CSV (columns :data:`CSV_COLUMNS`; undefined values are empty cells).

    ``table`` is ``leaderboard``, ``paired_difference`` (the run minus the reference), ``outcomes`` or
    ``by_<breakdown>``. A cell that does not apply to its run (a predictions replay's AR, turns, ...: module
    docstring) has empty values, ``n`` 0 and ``not_applicable`` ``true``; every other row has ``false``.
    """
    from ..rewards.outcomes import COUNTS, OUTCOMES

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    board = tables["leaderboard"]
    for row in board["rows"]:
        for m in board["metrics"]:
            w.writerow(_csv_row("leaderboard", row["run"], m, row["metrics"][m]))
    for row in board["rows"]:
        if row["diff"] is not None:
            for m in board["metrics"]:
                w.writerow(_csv_row("paired_difference", row["run"], m, row["diff"][m], key=board["reference"]))
    columns = tables.get("outcome_columns", (*OUTCOMES, *COUNTS))
    for run, t in tables["outcomes"].items():
        for c in columns:
            w.writerow(_csv_row("outcomes", run, c, (t.get("shares") or {}).get(c) if c in OUTCOMES else t.get(c)))
    for b, tab in tables["by"].items():
        for row in tab["rows"]:
            for m in tab["metrics"]:
                w.writerow(_csv_row(f"by_{b}", row["run"], m, row["metrics"][m], breakdown=b, key=row["key"]))
    return buf.getvalue()


def _cell(m: dict[str, Any] | None, *, diff: bool = False) -> str:
    if m and m.get("not_applicable"):
        return NOT_APPLICABLE_MARK
    if not m or not m.get("n") or m.get("value") is None:
        return UNDEFINED
    v = m["value"]
    text = f"{v:+.3f}" if diff else f"{v:.3f}"
    ci = m.get("ci95")
    if ci:
        text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    text += f" n={m['n']}" if m.get("count") is None else f" {m['count']} of n={m['n']}"
    if diff and m.get("p_value") is not None:
        from ..rewards.paired_test import TEST_LABELS
        from .html import fmt_p

        text += f" p={fmt_p(m['p_value'])} ({TEST_LABELS.get(m.get('test'), m.get('test'))})"
    if diff and m.get("verdict"):
        text += f" {m['verdict']}"
    return text


def _md_escape(text: Any) -> str:
    """A cell the package formatted itself (a number, a metric name): the table's ``|`` escaped, newlines as spaces."""
    return str(text).replace("|", "\\|").replace("\n", " ")


#: characters that open or close Markdown inline syntax wherever they stand (code spans, emphasis, strikethrough,
#: links and images); backslash-escaped (CommonMark §2.4 allows it for any ASCII punctuation). ``|`` is escaped
#: by :func:`_md_escape`, on every cell. A table cell never starts a line, so the block markers (``#``, ``-``,
#: ``+``, ``>``, digits) need nothing
_MD_SPECIAL = frozenset("\\`*[]~")
_HTML_ENTITY = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def md_text(text: Any) -> str:
    """Text from a run (a run name, a category key) as a literal Markdown table cell: ``&``, ``<``, ``>``, ``"`` as
    HTML entities (GitHub Markdown passes raw HTML through, so ``<img onerror=...>`` would be markup), the inline
    Markdown punctuation backslash-escaped, ``_`` too except inside a word (``a_b`` opens no emphasis, so
    ``answerable_without_evidence`` stays readable), line breaks and other control characters as spaces.
    Source: CommonMark spec 0.31 §2.4 (backslash escapes), §6.2 (intraword ``_``), §6.6 (raw HTML); GitHub
    Flavored Markdown §4.10 (tables), §6.5 (strikethrough).

    Args:
        text: any value; ``str`` is applied first.
    Returns:
        The escaped cell text, on one line.
    """
    s = str(text)
    out = []
    for i, ch in enumerate(s):
        if ch in _HTML_ENTITY:
            out.append(_HTML_ENTITY[ch])
        elif ch in _MD_SPECIAL:
            out.append("\\" + ch)
        elif ch == "_":
            inside = 0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum()
            out.append("_" if inside else "\\_")
        elif ch < " " or "\x7f" <= ch <= "\x9f" or ch in "\u2028\u2029":
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out)


def _md_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(_md_escape(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def direction_note(metrics: Sequence[str], diffs: Sequence[dict[str, Any]]) -> str:
    """The footnote under the paired differences: which way each ``better`` / ``worse`` label reads, and which
    metrics get none because they have no direction over the paired samples (AR over a mix of groups).

    Args:
        metrics: the leaderboard's metric names, in order.
        diffs: the leaderboard rows that hold a ``diff`` (each ``diff[m]`` with its ``direction``:
            :func:`~textsql_clarify.reports.leaderboard.leaderboard`).
    Returns:
        One line of Markdown text.

    Source: docs/metrics.md, "Which way is better" (:mod:`textsql_clarify.rewards.direction`).
    """
    # a difference that is not applicable (a predictions replay's AR, turns, ...) has no verdict to explain
    ways = {m: {(r["diff"].get(m) or {}).get("direction") for r in diffs
                if not (r["diff"].get(m) or {}).get("not_applicable")} for m in metrics}
    lower = [m for m in metrics if ways[m] == {"lower"}]
    none = [m for m in metrics if None in ways[m]]
    text = ("better / worse follow each metric's direction (docs/metrics.md, Which way is better): higher is "
            "better" + (f", except {', '.join(lower)}, where lower is better" if lower else ""))
    if none:
        text += f"; no direction over these samples, so no label: {', '.join(none)}"
        if "AR" in none:  # AR's direction is its samples' group's (rewards/direction.py AR_BY_GROUP)
            text += " (AR is better low on answerable samples and high on ambiguous ones, so a mix has none)"
    if "EM" in metrics:
        text += "; Δ EM is not computed (the trajectories hold no per-sample exact match)"
    return _md_escape(text + ".")


def replay_note(replays: Sequence[bool]) -> str:
    """The line under the Markdown leaderboard when some run is a predictions replay (``textsql-clarify score``).

    Args:
        replays: per run, whether it is a replay (:attr:`~textsql_clarify.reports.runs.Run.replay`).
    Returns:
        ``""`` when none is; else one line naming :data:`~textsql_clarify.rewards.report.REPLAY_SKIPPED` and
        saying they are left out (every run a replay) or read ``n/a`` with no Δ (beside an eval run).

    Source: docs/metrics.md, "Scoring a predictions file" (the HTML page's leaderboard note says the same).
    """
    from ..rewards.report import REPLAY_SKIPPED

    if not any(replays):
        return ""
    how = ("they are left out, as are the outcome columns other than sql." if all(replays) else
           f"the replay's cells of these and of every outcome column but sql read {NOT_APPLICABLE_MARK}, with no Δ.")
    return _md_escape("A predictions replay (textsql-clarify score) is one SQL turn per episode, so "
                      f"{', '.join(REPLAY_SKIPPED)} describe no agent there: {how}")


def to_markdown(tables: dict[str, Any]) -> str:
    """:func:`report_tables` as Markdown: the leaderboard, the paired differences, the outcomes and one table
    per breakdown; each cell ``value [lo, hi] n=k``, undefined as —. A difference adds its p-value, the test
    that gave it and its verdict by the metric's direction: ``-1.000 [-1.000, -1.000] n=3 p=0.250
    (exact McNemar) worse``; a footnote (:func:`direction_note`) says which way the verdicts read and which
    metrics have no direction (no verdict). A cell that does not apply to its run (a predictions replay's AR,
    turns, ...), and its difference, read ``n/a``, and a line under the leaderboard says why (module docstring)."""
    from ..rewards.outcomes import COUNTS, OUTCOMES

    board = tables["leaderboard"]
    out = ["## Leaderboard", "",
           _md_table(["run", "episodes", *board["metrics"]],
                     [[md_text(r["run"]), r["n_trajectories"], *(_cell(r["metrics"][m]) for m in board["metrics"])]
                      for r in board["rows"]])]
    note = replay_note([r.get("replay", False) for r in board["rows"]])
    if note:
        out += ["", note]
    diffs = [r for r in board["rows"] if r["diff"] is not None]
    if diffs:
        out += ["", f"## Paired differences from {md_text(board['reference'])}", "",
                _md_table(["run", *(f"Δ {m}" for m in board["metrics"])],
                          [[md_text(r["run"]), *(_cell(r["diff"][m], diff=True) for m in board["metrics"])] for r in diffs]),
                "", direction_note(board["metrics"], diffs)]
    columns = tables.get("outcome_columns", (*OUTCOMES, *COUNTS))
    rows = []
    for run, t in tables["outcomes"].items():
        shares = t.get("shares") or {}
        rows.append([md_text(run), t.get("n"), *(_cell(shares.get(c) if c in OUTCOMES else t.get(c)) for c in columns)])
    out += ["", "## Outcomes", "", _md_table(["run", "episodes", *columns], rows)]
    for b, tab in tables["by"].items():
        out += ["", f"## By {b}", "",
                _md_table([b, "run", "episodes", *tab["metrics"]],
                          [[md_text(r["key"]), md_text(r["run"]), r["n_trajectories"], *(_cell(r["metrics"][m]) for m in tab["metrics"])]
                           for r in tab["rows"]])]
    return "\n".join(out) + "\n"


def to_json(tables: dict[str, Any]) -> str:
    """:func:`report_tables` as indented JSON (undefined values are ``null``)."""
    return json.dumps(tables, indent=2, ensure_ascii=False, default=str) + "\n"


def render_tables(runs: Sequence[Run], fmt: str, *, by: Sequence[str] = DEFAULT_BY) -> str:
    """The tables in ``fmt`` (``md`` | ``csv`` | ``json``).

    Raises:
        ValueError: an unknown format or breakdown.
    """
    if fmt not in ("md", "csv", "json"):
        raise ValueError(f"unknown table format {fmt!r}; choose md, csv or json")
    tables = report_tables(runs, by=by)
    return {"md": to_markdown, "csv": to_csv, "json": to_json}[fmt](tables)
