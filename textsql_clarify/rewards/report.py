"""Plain-text rendering of :func:`textsql_clarify.rewards.metrics.aggregate` output for the CLI.

Every number is printed with the n it was taken over (``0.750 (n=4)``) and an undefined metric as
``—``, never as 0 (article: "Every mean carries its n", "Undefined is not zero"). Ceiling counts are
printed under the tables (article: "Ceilings are counted, never corrected"), then the load-time flags
that some trajectory carries and how many ``indistinguishable`` ones were left out of the means.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .metrics import CEILINGS, FAMILIES, MetricsError

#: the headline columns, in order; EX and FB are always shown, the others only when defined overall.
HEADLINE = ("EX", "EX_strict", "FB", "abstained", "Rec", "Cls", "AIR", "relevant_rate", "AR", "DEA", "L1-IR", "L2-IR^p", "JIR", "DRR", "DRA", "EX_post",
            "SQL_behaviour", "DET", "TYPE", "GEN", "VAL", "format_valid_rate")
_ALWAYS = ("EX", "FB")
UNDEFINED = "—"


def format_mean(cell: Mapping[str, Any] | None) -> str:
    """``{"value": 0.75, "n": 4}`` -> ``"0.750 (n=4)"``; an undefined or absent mean -> ``"—"``."""
    if not cell or cell.get("value") is None:
        return UNDEFINED
    return f"{cell['value']:.3f} (n={cell['n']})"


def _table(title: str, rows: list[tuple[str, int, Mapping[str, Any]]], columns: Sequence[str]) -> list[str]:
    header = [title, "N"] + list(columns)
    body = [[name, str(n)] + [format_mean(m.get(c)) for c in columns] for name, n, m in rows]
    widths = [max(len(r[k]) for r in [header] + body) for k in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        nn = cells[1].rjust(widths[1])
        rest = [c.ljust(w) for c, w in zip(cells[2:], widths[2:])]
        return "  ".join([first, nn] + rest).rstrip()

    return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body]


def render_table(metrics: Mapping[str, Any], *, breakdowns: Sequence[str] = ("group", "subcategory"),
                 columns: Sequence[str] | None = None) -> str:
    """Fixed-width plain-text tables of aggregated metrics, one per breakdown.

    Each table has an ``overall`` row, then one row per breakdown key; ``N`` is the number of
    trajectories in the row and each cell is ``value (n=k)`` or ``—``. Below the tables: the article's
    output/component families (overall, where defined) and the ceiling counts.

    Args:
        metrics: the dict from :func:`~textsql_clarify.rewards.metrics.aggregate` (or ``metrics.json``).
        breakdowns: which ``by_<name>`` breakdowns to print (``group``, ``subcategory``, ``difficulty``,
            ``drift_subtype``, ``sample_type``), in order.
        columns: metric columns to print; default :data:`HEADLINE`, where EX and FB always appear and
            the others only when defined overall.

    Returns:
        The text, lines joined by ``"\\n"``, no trailing newline.

    Raises:
        MetricsError: ``metrics`` lacks ``overall`` or ``ceilings``, a requested breakdown is absent, or
            a requested column is not a metric in ``overall`` (the message lists the valid names).
    """
    if not isinstance(metrics, Mapping):
        raise MetricsError(f"metrics must be the dict aggregate() returns, got {type(metrics).__name__}")
    for key in ("overall", "ceilings"):
        if key not in metrics:
            raise MetricsError(f"metrics dict has no {key!r} key; is it aggregate()'s output?")
    overall = metrics["overall"]
    if columns is None:
        columns = [c for c in HEADLINE if c in _ALWAYS or format_mean(overall.get(c)) != UNDEFINED]
    else:
        unknown = [c for c in columns if c not in overall]
        if unknown:
            raise MetricsError(f"unknown metric column(s) {unknown}; valid: {list(overall)}")
    n_all = metrics.get("n_trajectories", 0)
    protocols = metrics.get("n_by_protocol", {})
    head = f"Aggregated metrics: {n_all} trajectories"
    if protocols:
        head += " (" + ", ".join(f"{p}-protocol: {k}" for p, k in protocols.items()) + ")"
    excluded = metrics.get("excluded_indistinguishable") or 0
    if excluded:
        head += f"; {excluded} indistinguishable left out (include them with --include-indistinguishable)"
    lines = [head]
    for b in breakdowns:
        key = f"by_{b}"
        if key not in metrics:
            have = [k[3:] for k in metrics if k.startswith("by_")]
            raise MetricsError(f"breakdown {b!r} not in metrics (no {key!r}); available: {have}")
        rows = [("overall", n_all, overall)]
        rows += [(name, blk["n_trajectories"], blk["metrics"]) for name, blk in metrics[key].items()]
        lines.append("")
        lines.extend(_table(b, rows, columns))
    article = [m for m in overall if (m in FAMILIES["article"] or m.startswith("components."))
               and format_mean(overall[m]) != UNDEFINED]
    if article:
        lines += ["", "article families (overall):"]
        w = max(len(m) for m in article)
        lines += [f"  {m.ljust(w)}  {format_mean(overall[m])}" for m in article]
    ceil = metrics["ceilings"]
    lines += ["", "ceilings (trajectories): " + "  ".join(f"{c}={ceil.get(c, 0)}" for c in CEILINGS)]
    flagged = {f: k for f, k in (metrics.get("flagged") or {}).items() if k}
    if flagged:
        lines.append("flagged samples (load-time validation): " + "  ".join(f"{f}={k}" for f, k in flagged.items()))
    return "\n".join(lines)
