"""Which way each metric is better: the table the report colours paired differences by.

``"higher"``: a larger value is better (accuracies, recognition rates, precision and recall);
``"lower"``: a smaller value is better (turns, spurious tables); ``None``: it depends on the samples.
AR (TIDE Table 2's ask rate) is better low on answerable samples (asking there only costs a turn) and
high on ambiguous ones (the question cannot be answered right without asking); over a mix of groups it
has no direction. The definitions are in ``docs/metrics.md`` ("Aggregated metrics"); this table is
its "better" column.
"""
from __future__ import annotations

from typing import Iterable, Literal

Direction = Literal["higher", "lower"]

#: metric -> the better direction (``None``: depends on the samples' group, see :func:`direction`).
DIRECTIONS: dict[str, Direction | None] = {
    # ABISS §5.3
    "EX": "higher", "EX_strict": "higher", "EX_suite": "higher", "EX_strict_suite": "higher",
    "EX_post": "higher", "FB": "higher", "abstained": "higher", "Rec": "higher", "Cls": "higher",
    "AIR": "higher", "relevant_rate": "higher", "turns": "lower",
    # Spider's exact-set-match (Yu et al. 2018; textsql-clarify score)
    "EM": "higher",
    # TIDE Table 2
    "DEA": "higher", "AR": None, "L1-IR": "higher", "L2-IR^p": "higher", "JIR": "higher",
    "DRR": "higher", "DRA": "higher",
    # PremiseSQL §4 (SQL_behaviour: 2 = feedback and no SQL on a flawed premise)
    "SQL_behaviour": "higher", "DET": "higher", "TYPE": "higher", "GEN": "higher", "VAL": "higher",
    # the article's retrieval and output families
    "table_recall": "higher", "table_precision": "higher", "spurious_tables": "lower",
    "column_precision": "higher", "column_recall": "higher", "cell_precision": "higher",
    "cell_recall": "higher", "cell_f1": "higher",
    # the first decision (rewards/decision.py): accuracy and balanced accuracy
    "DEC": "higher", "DEC_bacc": "higher",
    # the agent's
    "format_valid_rate": "higher",
}
#: AR's direction over samples of one group (an ask on an answerable sample is a wasted turn).
AR_BY_GROUP: dict[str, Direction | None] = {"answerable": "lower", "ambiguous": "higher", "unanswerable": None}


def direction(metric: str, groups: Iterable[str] | None = None) -> Direction | None:
    """The better direction of ``metric`` over samples of ``groups``.

    Args:
        metric: a metric name (``components.<set>.precision|recall`` included: higher).
        groups: the groups (``answerable`` | ``ambiguous`` | ``unanswerable``) of the samples the value is
            taken over; only AR depends on them (one group: :data:`AR_BY_GROUP`; several or unknown: None).
    Returns:
        ``"higher"``, ``"lower"`` or ``None`` (no direction: shown uncoloured).
    Raises:
        KeyError: an unknown metric name (so that a new metric cannot be coloured by accident).
    """
    if metric.startswith("components.") and metric.endswith((".precision", ".recall")):
        return "higher"
    if metric not in DIRECTIONS:
        raise KeyError(f"no direction is documented for metric {metric!r}; add it to DIRECTIONS "
                       "(textsql_clarify/rewards/direction.py)")
    if metric == "AR":
        gs = set(groups or ())
        return AR_BY_GROUP.get(next(iter(gs))) if len(gs) == 1 else None
    return DIRECTIONS[metric]


def verdict(metric: str, delta: float | None, groups: Iterable[str] | None = None) -> str:
    """``"better"``, ``"worse"`` or ``""`` (no difference, undefined, or no direction) for a difference
    ``delta`` (this run minus the reference) of ``metric``.

    Raises:
        KeyError: as :func:`direction`.
    """
    way = direction(metric, groups)
    if delta is None or delta == 0 or way is None:
        return ""
    return "better" if (delta > 0) == (way == "higher") else "worse"
