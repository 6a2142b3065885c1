"""Counts of a loaded dataset and their text tables, for ``textsql-clarify data stats`` and ``data validate``.

:func:`dataset_stats` counts samples per group, subcategory (``None`` as ``unknown``, ABISS §3.2: the
source does not say), difficulty and gold status (``valid``, ``no_gold`` for samples without a gold SQL,
and each load-time flag of :data:`~textsql_clarify.samples.SAMPLE_FLAGS`, :mod:`.validate`).
:func:`render_stats` and :func:`render_validation` write them as plain tables at most :data:`MAX_WIDTH`
characters wide.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..samples import DIFFICULTIES, SAMPLE_FLAGS, Sample
from ..taxonomy import GROUPS, SUBCATEGORIES

__all__ = ["MAX_WIDTH", "dataset_stats", "gold_status", "render_stats", "render_validation"]

#: Widest line the tables print, characters.
MAX_WIDTH = 100
#: Name shown for a ``None`` subcategory.
UNKNOWN = "unknown"


#: Flags that say the gold itself is unusable; the others (``duplicate_gold``, ``indistinguishable``,
#: ``interpretation_error``) describe a sample whose gold is still valid.
GOLD_FLAGS = ("gold_error", "gold_empty", "gold_timeout", "gold_nondeterministic")


def gold_status(sample: Sample) -> list[str]:
    """The gold statuses of one sample: first ``no_gold`` (no gold SQL: unanswerable; ``withheld`` where the
    source withholds it, :attr:`~textsql_clarify.samples.Sample.gold_withheld`), ``valid`` (a gold with none of
    :data:`GOLD_FLAGS`) or those gold flags; then the sample's other flags. One sample may carry several."""
    if sample.gold_sql is None:
        head = ["withheld" if sample.gold_withheld else "no_gold"]
    else:
        head = [f for f in sample.flags if f in GOLD_FLAGS] or ["valid"]
    return head + [f for f in sample.flags if f not in GOLD_FLAGS and f not in head]


def _ordered(counter: Counter, order: Sequence[str]) -> dict[str, int]:
    """``counter`` as a dict: keys of ``order`` first (in that order), then the rest sorted."""
    keys = [k for k in order if counter[k]] + sorted(k for k in counter if k not in order)
    return {k: counter[k] for k in keys}


def dataset_stats(samples: Sequence[Sample]) -> dict:
    """Counts of ``samples``.

    Returns:
        ``{"n", "group": {group: n}, "subcategory": {"<group>/<subcategory>": n}, "difficulty": {level: n},
        "gold_status": {status: n}}``; a ``None`` subcategory is ``unknown``; gold statuses per
        :func:`gold_status` (their counts can sum to more than ``n``). Keys in taxonomy order, zeros left out.
    """
    subs = Counter(f"{s.group}/{s.subcategory or UNKNOWN}" for s in samples)
    sub_order = [f"{g}/{name}" for g in GROUPS for name in [*(k for k, v in SUBCATEGORIES.items() if v.group == g),
                                                             UNKNOWN]]
    return {
        "n": len(samples),
        "group": _ordered(Counter(s.group for s in samples), GROUPS),
        "subcategory": _ordered(subs, sub_order),
        "difficulty": _ordered(Counter(s.difficulty for s in samples), DIFFICULTIES),
        "gold_status": _ordered(Counter(st for s in samples for st in gold_status(s)),
                                ("valid", *SAMPLE_FLAGS, "no_gold", "withheld")),
    }


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(title: str, rows: Sequence[tuple[str, ...]], n: int, headers: tuple[str, ...]) -> str:
    """One table: ``headers`` then ``rows`` of text cells and a count, with the share of ``n``."""
    name_cols = len(headers)
    widths = [min(40, max([len(h) for h in headers[i:i + 1]] + [len(r[i]) for r in rows])) for i in range(name_cols)]
    lines = [title]
    head = "  ".join(h.ljust(w) for h, w in zip(headers, widths)) + f"  {'n':>7}  {'share':>6}"
    lines += [head, "-" * len(head)]
    for r in rows:
        *names, count = r
        cells = "  ".join(_clip(c, w).ljust(w) for c, w in zip(names, widths))
        share = f"{100 * int(count) / n:5.1f}%" if n else "     -"
        lines.append(f"{cells}  {count:>7}  {share:>6}")
    return "\n".join(line[:MAX_WIDTH] for line in lines)


def render_stats(stats: dict, spec: str = "") -> str:
    """:func:`dataset_stats` as four text tables (group, subcategory, difficulty, gold status)."""
    n = stats["n"]
    parts = [f"dataset {spec}: {n} samples" if spec else f"{n} samples"]
    parts.append(_table("by group", [(k, str(v)) for k, v in stats["group"].items()], n, ("group",)))
    parts.append(_table("by subcategory", [(*k.split("/", 1), str(v)) for k, v in stats["subcategory"].items()], n,
                        ("group", "subcategory")))
    parts.append(_table("by difficulty", [(k, str(v)) for k, v in stats["difficulty"].items()], n, ("difficulty",)))
    parts.append(_table("by gold status (a sample may carry several flags)",
                        [(k, str(v)) for k, v in stats["gold_status"].items()], n, ("gold status",)))
    return "\n\n".join(parts)


def render_validation(report, spec: str = "") -> str:
    """A :class:`~.validate.ValidationReport` as text: one line per problem, ``<sample id>: <flag>: <message>``,
    then a table of samples per flag and a summary line."""
    lines = [str(p) for p in report.problems]
    n = len(report.samples)
    counts = report.counts()
    if counts:
        lines += ["", _table("samples per flag", [(k, str(v)) for k, v in counts.items()], n, ("flag",))]
    where = f"{spec}: " if spec else ""
    lines.append(f"{where}{n} samples, {report.n_flagged} flagged"
                 + (" (cached validation)" if report.cached else ""))
    return "\n".join(lines)
