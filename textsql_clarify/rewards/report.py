"""Plain-text rendering of :func:`textsql_clarify.rewards.metrics.aggregate` output for the CLI.

Every line fits :data:`WIDTH` (100) columns. In order:

1. the run line (trajectories per protocol), and how many ``indistinguishable`` samples were left out;
2. a short **headline** table: the main metrics this run defines (:data:`HEADLINE_ROWS`), rows = metric,
   columns = value, 95 % interval, n; a test-suite run (``eval --ex-mode suite``) has ``EX_suite`` right after EX;
3. one table per metric **family** (ABISS, TIDE, PremiseSQL, the article's, the agent's), printed only
   where some metric of it is defined;
4. the **outcomes** table (:mod:`~textsql_clarify.rewards.outcomes`): share of episodes ending in SQL,
   feedback, clarification budget spent, malformed action or truncated, with its interval and count, then
   the mean turns and clarifications;
5. one table per **breakdown** asked for (``group``, ``subcategory``, ``difficulty``, ``drift_subtype``,
   ``sample_type``): rows = the breakdown's keys after an ``overall`` row, columns = metrics (``value (n=k)``),
   as many of the defined headline metrics as fit (or the ones asked for, split over several tables when
   they do not fit); then that breakdown's outcome shares;
6. the ceiling counts and the load-time flags (article: "Ceilings are counted, never corrected").

Every mean is printed with its n (``0.750 (n=4)``) and an undefined one as ``—``, never as 0 (article:
"Every mean carries its n", "Undefined is not zero"); a metric undefined everywhere in the run is not
printed. A breakdown row's name longer than its column (``missing_entities_or_attributes``) wraps after an
underscore onto indented lines of its own (:func:`wrap_name`), so it shows in full; metric names longer than
their column are cut with ``…``.

A predictions replay (``render_table(..., replay=True)``, ``textsql-clarify score``) leaves out
:data:`REPLAY_SKIPPED` and the outcomes of :data:`REPLAY_SKIPPED_OUTCOMES` and says so in one line under the run
line: each episode is one SQL turn, so they describe no agent (docs/metrics.md, "Scoring a predictions file").
"""
from __future__ import annotations

import textwrap
from typing import Any, Mapping, Sequence

from .metrics import BREAKDOWNS, CEILINGS, FAMILIES, SUITE_METRICS, MetricsError
from .outcomes import OUTCOMES

#: the widest line :func:`render_table` prints (tables fit a 100-column terminal).
WIDTH = 100
#: metric columns of the breakdown tables, in order; those the run defines, as many as fit.
HEADLINE = ("EX", "EX_suite", "FB", "abstained", "AIR", "AR", "relevant_rate", "DEA", "DRR", "DRA", "L1-IR", "JIR",
            "L2-IR^p", "EX_post", "EX_strict", "Rec", "Cls", "SQL_behaviour", "DET", "TYPE", "GEN", "VAL",
            "format_valid_rate")
#: the headline table's rows (one or two per family), those the run defines.
HEADLINE_ROWS = ("EX", "EX_suite", "FB", "abstained", "AIR", "AR", "DEA", "DRR", "SQL_behaviour", "GEN", "cell_f1",
                 "format_valid_rate")
#: family key -> title of its table.
FAMILY_TITLES = {"abiss": "ABISS", "tide": "TIDE", "premisesql": "PremiseSQL", "article": "article",
                 "decision": "decision", "agent": "agent"}
#: the breakdowns the CLI prints unless told (``eval --by``).
DEFAULT_BREAKDOWNS = ("group", "subcategory")
#: outcome column headers of the breakdown outcome tables.
_OUTCOME_HEADS = {"sql": "sql", "feedback": "feedback", "budget_spent": "budget", "malformed": "malformed",
                  "truncated": "truncated", "turns": "turns", "clarifications": "clarif."}
#: metrics a predictions replay (``textsql-clarify score``) does not print: every episode is one SQL turn, so
#: the agent's behaviour (asking, deciding, action format, turns) is fixed, and the article's schema retrieval
#: measures the offered schema (the whole schema), not the prediction. ``metrics.json`` keeps them.
REPLAY_SKIPPED = ("AR", "DEC", "DEC_bacc", "format_valid_rate", "turns", "table_recall", "table_precision",
                  "spurious_tables")
#: outcome rows and columns a predictions replay does not print (only ``sql`` stays: one SQL turn each).
REPLAY_SKIPPED_OUTCOMES = ("feedback", "budget_spent", "malformed", "truncated", "turns", "clarifications")
#: widest row name of a breakdown table (the longest subcategory, 30 characters, wraps: :func:`wrap_name`).
_NAME_WIDTH = 24
UNDEFINED = "—"


def format_mean(cell: Mapping[str, Any] | None) -> str:
    """``{"value": 0.75, "n": 4}`` -> ``"0.750 (n=4)"``; an undefined or absent mean -> ``"—"``."""
    if not cell or cell.get("value") is None:
        return UNDEFINED
    return f"{cell['value']:.3f} (n={cell['n']})"


def format_value(cell: Mapping[str, Any] | None) -> str:
    """The value alone, 3 decimals (``"0.750"``); ``"—"`` when undefined."""
    if not cell or cell.get("value") is None:
        return UNDEFINED
    return f"{cell['value']:.3f}"


def format_ci(cell: Mapping[str, Any] | None) -> str:
    """``{"ci95": [0.5, 0.9]}`` -> ``"[0.500, 0.900]"``; ``"—"`` without an interval."""
    ci = (cell or {}).get("ci95")
    if not ci:
        return UNDEFINED
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def defined(cell: Mapping[str, Any] | None) -> bool:
    """True when the mean cell has a value (n > 0)."""
    return bool(cell) and cell.get("value") is not None


def short(name: str, limit: int) -> str:
    """``name`` cut to ``limit`` characters, the last one ``…`` when it was cut."""
    return name if len(name) <= limit else name[: max(limit - 1, 1)] + "…"


def wrap_name(name: str, width: int = _NAME_WIDTH) -> list[str]:
    """A row name as lines of at most ``width`` characters, broken after an underscore (the taxonomy's names are
    snake_case), each line after the first indented by two spaces; a part with no underscore that is still too
    long is broken inside. Joined without the indents, the lines are the name.

    Args:
        name: the row name (a breakdown key). width: the column's width (>= 4).
    Returns:
        ``[name]`` when it fits, else its lines, e.g. ``["missing_entities_or_", "  attributes"]``.
    """
    if len(name) <= width:
        return [name]
    pieces = name.split("_")
    parts = [p + "_" for p in pieces[:-1]] + [pieces[-1]]
    lines: list[str] = []
    cur = ""
    for part in parts:
        while True:
            room = width - (2 if lines else 0)  # the first line has no indent
            if len(cur) + len(part) <= room:
                cur += part
                break
            if cur:  # the part goes to the next line
                lines.append(cur)
                cur = ""
                continue
            lines.append(part[:room])  # a part longer than a whole line is broken inside
            part = part[room:]
    lines.append(cur)
    return [ln if k == 0 else "  " + ln for k, ln in enumerate(lines) if ln or k == 0]


def _wrapped(body: Sequence[Sequence[str]]) -> list[list[str]]:
    """Table rows whose first cell (a row name) is wrapped by :func:`wrap_name`: the first line keeps the row's
    cells, each further line has the rest of the name and empty cells."""
    out: list[list[str]] = []
    for row in body:
        first, *more = wrap_name(row[0])
        out.append([first, *row[1:]])
        out += [[m] + [""] * (len(row) - 1) for m in more]
    return out


def _name_width(names: Sequence[str]) -> int:
    """The widest line of the wrapped ``names``."""
    return max(len(ln) for nm in names for ln in wrap_name(nm))


def _metric_head(name: str) -> str:
    """A breakdown column header: ``components.<set>.precision`` -> ``<set> P``; others cut to 17."""
    if name.startswith("components."):
        parts = name.split(".")
        name = f"{'.'.join(parts[1:-1])} {'P' if parts[-1] == 'precision' else 'R'}"
    return short(name, 17)


def grid(header: Sequence[str], body: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Fixed-width columns two spaces apart, a dashed rule under the header, no trailing spaces: the format of
    every table this module prints (and of ``score``'s exact-match tables).

    Args:
        header: the column titles.
        body: the rows, each as many cells (strings) as ``header``.
        right: per column, True to align it right (numbers), False to align it left.
    Returns:
        The lines: the header, the rule, then one per row.
    """
    widths = [max(len(r[k]) for r in [header, *body]) for k in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body]


def _stat_table(title: str, names: Sequence[str], overall: Mapping[str, Any]) -> list[str]:
    """Rows = metric; columns = value, 95 % interval, n (headline and family tables)."""
    body = [[m, format_value(overall.get(m)), format_ci(overall.get(m)), str((overall.get(m) or {}).get("n", 0))]
            for m in names]
    return grid([title, "value", "95% CI", "n"], body, [False, True, True, True])


def _component_table(sets: Sequence[str], overall: Mapping[str, Any]) -> list[str]:
    """The article's component sets: rows = set; precision and recall with their intervals and n."""
    body = []
    for name in sets:
        p, r = overall.get(f"components.{name}.precision"), overall.get(f"components.{name}.recall")
        body.append([name, format_value(p), format_ci(p), str((p or {}).get("n", 0)),
                     format_value(r), format_ci(r), str((r or {}).get("n", 0))])
    return grid(["components", "precision", "95% CI", "n", "recall", "95% CI", "n"], body,
                 [False, True, True, True, True, True, True])


def _outcome_table(outcomes: Mapping[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """Rows = outcome (share, interval, count, n), then the mean turns and clarifications; none of ``skip``."""
    shares = outcomes.get("shares") or {}
    body = []
    for o in OUTCOMES:
        if o in skip:
            continue
        c = shares.get(o) or {}
        body.append([o, format_value(c), format_ci(c), str(c.get("count", 0)), str(c.get("n", 0))])
    for k, label in (("turns", "turns (mean)"), ("clarifications", "clarifications (mean)")):
        if k in skip:
            continue
        c = outcomes.get(k) or {}
        body.append([label, format_value(c), format_ci(c), "", str(c.get("n", 0))])
    return grid(["outcome", "share", "95% CI", "count", "n"], body, [False, True, True, True, True])


def _breakdown_rows(metrics: Mapping[str, Any], b: str) -> list[tuple[str, int, Mapping[str, Any], Mapping]]:
    key = f"by_{b}"
    if key not in metrics:
        have = [k[3:] for k in metrics if k.startswith("by_")]
        raise MetricsError(f"breakdown {b!r} not in metrics (no {key!r}); available: {have}")
    rows = [("overall", metrics.get("n_trajectories", 0), metrics["overall"], metrics.get("outcomes") or {})]
    rows += [(name, blk["n_trajectories"], blk["metrics"], blk.get("outcomes") or {})
             for name, blk in metrics[key].items()]
    return rows


def _metric_tables(b: str, rows: Sequence[tuple], columns: Sequence[str], width: int) -> list[str]:
    """The breakdown's metric table(s): the columns split over as many tables as keep each line <= width."""
    names = [r[0] for r in rows]
    counts = [str(r[1]) for r in rows]
    fixed = max(len(short(b, _NAME_WIDTH)), _name_width(names)) + 2 + max(len(x) for x in ["N", *counts])
    chunks: list[list[str]] = [[]]
    used = fixed
    for c in columns:
        w = max(len(x) for x in [_metric_head(c), *(format_mean(r[2].get(c)) for r in rows)]) + 2
        if chunks[-1] and used + w > width:
            chunks.append([])
            used = fixed
        chunks[-1].append(c)
        used += w
    out: list[str] = []
    for k, chunk in enumerate(chunks):
        if not chunk:
            continue
        if k:
            out.append("")
        header = [short(b, _NAME_WIDTH), "N"] + [_metric_head(c) for c in chunk]
        body = [[nm, ct] + [format_mean(r[2].get(c)) for c in chunk] for nm, ct, r in zip(names, counts, rows)]
        out.extend(grid(header, _wrapped(body), [False, True] + [False] * len(chunk)))
    return out


def _fit_columns(rows: Sequence[tuple], b: str, columns: Sequence[str], width: int) -> list[str]:
    """The leading ``columns`` that fit one table of ``width`` (the default choice: one table, no split)."""
    used = (max(len(short(b, _NAME_WIDTH)), _name_width([r[0] for r in rows])) + 2
            + max(len(str(r[1])) for r in rows + [("", "N")]))
    kept = []
    for c in columns:
        w = max(len(x) for x in [_metric_head(c), *(format_mean(r[2].get(c)) for r in rows)]) + 2
        if used + w > width:
            break
        kept.append(c)
        used += w
    return kept


def _breakdown_outcomes(b: str, rows: Sequence[tuple], skip: Sequence[str] = ()) -> list[str]:
    """The breakdown's outcome shares (value only; n is the row's N) and mean turns / clarifications; none of
    ``skip``."""
    keys = [k for k in (*OUTCOMES, "turns", "clarifications") if k not in skip]
    header = [short(f"{b}: outcomes", _NAME_WIDTH), "N"] + [_OUTCOME_HEADS[k] for k in keys]
    body = []
    for name, n, _m, oc in rows:
        shares = oc.get("shares") or {}
        cells = [format_value(shares.get(k) if k in OUTCOMES else oc.get(k)) for k in keys]
        body.append([name, str(n)] + cells)
    return grid(header, _wrapped(body), [False, True] + [True] * len(keys))


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_long_words=True, break_on_hyphens=False)


def render_table(metrics: Mapping[str, Any], *, breakdowns: Sequence[str] = DEFAULT_BREAKDOWNS,
                 columns: Sequence[str] | None = None, width: int = WIDTH, replay: bool = False) -> str:
    """Fixed-width plain-text tables of aggregated metrics (module docstring for the order), every line at
    most ``width`` columns.

    Args:
        metrics: the dict from :func:`~textsql_clarify.rewards.metrics.aggregate` (or ``metrics.json``).
        breakdowns: which ``by_<name>`` breakdowns to print (``group``, ``subcategory``, ``difficulty``,
            ``drift_subtype``, ``sample_type``), in order; default :data:`DEFAULT_BREAKDOWNS`.
        columns: the metrics of the headline table and the breakdown tables (``eval --metrics``), in order;
            those undefined everywhere in the run are named in one note instead of printed. Default: the
            defined :data:`HEADLINE_ROWS` in the headline, and as many defined :data:`HEADLINE` metrics as
            fit one table in each breakdown.
        width: the widest line allowed (default 100; at least 60).
        replay: the run replays a predictions file (``textsql-clarify score``): the metrics of
            :data:`REPLAY_SKIPPED` and the outcomes of :data:`REPLAY_SKIPPED_OUTCOMES` are not printed, and one
            line names those left out and why (docs/metrics.md, "Scoring a predictions file").

    Returns:
        The text, lines joined by ``"\\n"``, no trailing newline.

    Raises:
        MetricsError: ``metrics`` lacks ``overall`` or ``ceilings``, a requested breakdown is absent, a
            requested column is not a metric in ``overall`` (the message lists the valid names), or
            ``width < 60``.
    """
    if not isinstance(metrics, Mapping):
        raise MetricsError(f"metrics must be the dict aggregate() returns, got {type(metrics).__name__}")
    for key in ("overall", "ceilings"):
        if key not in metrics:
            raise MetricsError(f"metrics dict has no {key!r} key; is it aggregate()'s output?")
    if not isinstance(width, int) or width < 60:
        raise MetricsError(f"width must be an int of at least 60 columns, got {width!r}")
    overall = metrics["overall"]
    chosen = None
    if columns is not None:
        unknown = [c for c in columns if c not in overall]
        if unknown:
            raise MetricsError(f"unknown metric column(s) {unknown}; valid: {list(overall)}")
        chosen = list(dict.fromkeys(columns))
    skip = set(REPLAY_SKIPPED) if replay else set()
    skip_outcomes = REPLAY_SKIPPED_OUTCOMES if replay else ()
    if replay:  # the full metrics stay in overall (metrics.json); only what is printed loses them
        overall = {k: v for k, v in overall.items() if k not in skip}
        chosen = None if chosen is None else [c for c in chosen if c not in skip]
    n_all = metrics.get("n_trajectories", 0)
    protocols = metrics.get("n_by_protocol", {})
    head = f"Aggregated metrics: {n_all} trajectories"
    if protocols:
        head += " (" + ", ".join(f"{p}-protocol: {k}" for p, k in protocols.items()) + ")"
    lines = _wrap(head, width)
    excluded = metrics.get("excluded_indistinguishable") or 0
    if excluded:
        lines += _wrap(f"{excluded} indistinguishable left out of the means (include them with "
                       f"--include-indistinguishable)", width)
    boot = metrics.get("bootstrap")
    if boot:
        lines += _wrap(f"95% CI: percentile bootstrap over samples ({boot.get('n_resamples')} resamples, "
                       f"seed {boot.get('seed')}); n = the values averaged", width)
    if replay:
        left = ", ".join(m for m in REPLAY_SKIPPED if defined(metrics["overall"].get(m)))
        if metrics.get("outcomes"):
            left += ("; " if left else "") + "outcomes " + ", ".join(skip_outcomes)
        if left:
            lines += _wrap("left out (a predictions file is one SQL turn per episode: no agent behaviour to "
                           "measure, and table retrieval scores the offered schema; kept in metrics.json): " + left,
                           width)

    if chosen is not None:
        missing = [c for c in chosen if not defined(overall.get(c))]
        shown = [c for c in chosen if c not in missing]
        headline = shown
    else:
        missing = []
        shown = [c for c in HEADLINE if defined(overall.get(c))]
        headline = [c for c in HEADLINE_ROWS if defined(overall.get(c))]
    if headline:
        lines += [""] + _stat_table("headline", headline, overall)
    for fam, title in FAMILY_TITLES.items():
        family = list(FAMILIES[fam])
        if fam == "abiss":  # test-suite EX beside EX_strict (defined only in an ex_mode="suite" run)
            family[family.index("EX_strict") + 1:family.index("EX_strict") + 1] = SUITE_METRICS
        names = [m for m in family if defined(overall.get(m))]
        if names:
            lines += [""] + _stat_table(title, names, overall)
    sets = list(dict.fromkeys(m.split(".")[1] for m in overall
                              if m.startswith("components.") and defined(overall.get(m))))
    if sets:
        lines += [""] + _component_table(sets, overall)
    if metrics.get("outcomes"):
        lines += [""] + _outcome_table(metrics["outcomes"], skip_outcomes)
    for b in breakdowns:
        rows = _breakdown_rows(metrics, b)
        if replay:
            rows = [(name, n, {k: v for k, v in m.items() if k not in skip}, oc) for name, n, m, oc in rows]
        cols = shown if chosen is not None else _fit_columns(rows, b, shown, width)
        if cols:
            lines += [""] + _metric_tables(b, rows, cols, width)
        if any(r[3] for r in rows):
            lines += [""] + _breakdown_outcomes(b, rows, skip_outcomes)
    if missing:
        lines += [""] + _wrap("not defined in this run (not printed): " + ", ".join(missing), width)
    ceil = metrics["ceilings"]
    lines += [""] + _wrap("ceilings (trajectories): " + "  ".join(f"{c}={ceil.get(c, 0)}" for c in CEILINGS), width)
    flagged = {f: k for f, k in (metrics.get("flagged") or {}).items() if k}
    if flagged:
        lines += _wrap("flagged samples (load-time validation): "
                       + "  ".join(f"{f}={k}" for f, k in flagged.items()), width)
    return "\n".join(line if len(line) <= width else short(line, width) for line in lines)


def parse_breakdowns(text: str) -> tuple[str, ...]:
    """``"group,difficulty"`` -> ``("group", "difficulty")`` (``eval --by``); ``""`` or ``"none"`` -> ``()``.

    Raises:
        MetricsError: a name is not one of :data:`~textsql_clarify.rewards.metrics.BREAKDOWNS`.
    """
    names = tuple(dict.fromkeys(x.strip() for x in str(text).split(",") if x.strip()))
    if names == ("none",):
        return ()
    bad = [x for x in names if x not in BREAKDOWNS]
    if bad:
        raise MetricsError(f"unknown breakdown(s) {bad}; valid: {', '.join(BREAKDOWNS)} (comma-separated) or 'none'")
    return names


def parse_metric_names(text: str) -> tuple[str, ...]:
    """``"EX,FB"`` -> ``("EX", "FB")`` (``eval --metrics``); checked against a run by :func:`render_table`.

    Raises:
        MetricsError: no name given.
    """
    names = tuple(dict.fromkeys(x.strip() for x in str(text).split(",") if x.strip()))
    if not names:
        raise MetricsError("--metrics needs at least one metric name, e.g. EX,FB")
    return names
