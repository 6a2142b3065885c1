"""Post-drift EX follows the user: an answer that still carries what a drift retracted is not the post-drift answer.

After a drift event (TIDE §2.2) the user has withdrawn part of the request: an output column ("the song name
instead of the age"), an aggregate ("the latest year, not the earliest"), a filter ("not only the French ones").
Relaxed EX (ABISS App. A, :mod:`textsql_clarify.rewards.execution`) tolerates extra prediction columns, so without
more a post-drift answer could keep the retracted column beside the new one, or resubmit the pre-drift query on
a drift that only removed a column, and still score EX 1 (and the drift bonus with it). This module holds the
pure parts of the rule the env's scorer (:func:`textsql_clarify.envs.scoring.score_sql_turn`, ``retracted_gold``)
applies on a post-drift SQL turn that relaxed EX would pass:

* **a retracted output column** (:func:`retracted_columns`, :func:`carried_columns`): a column of the pre-drift
  gold's result whose set of values equals no column of the post-drift gold's result is retracted; a prediction
  column that the EX match left unpaired (an extra column) and whose set of values equals a retracted column's
  carries it. Columns compare by values, as the extra-column bound does (floats at
  :data:`~textsql_clarify.rewards.execution.FLOAT_SIGNIFICANT_DIGITS` significant digits; NULL is a value), and as
  sets, so that a one-row retracted answer repeated on every row (a cross join) is still found;
* **a retracted filter** (:func:`retracted_filters`, :func:`kept_filters`): a WHERE unit of the pre-drift gold's
  commitment set that the post-drift gold's does not hold (TIDE App. A, Table 5), held by the prediction at the
  same scope, in the same value form;
* **the pre-drift answer itself**: a prediction that relaxed EX also matches with the pre-drift gold, where the
  post-drift gold does not match it (the scorer reuses its hedge test of ambiguous readings for this).

Each of these makes post-drift ``ex`` and ``ex_strict`` 0, so the ``drift`` component (paid only with ``ex`` 1) is
0 too. The post-drift gold itself never triggers the rule: it has no extra column, holds no retracted unit, and
the pre-drift gold only counts as a different answer when the post-drift gold does not match it.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ..sql.sandbox import ExecutionResult
from .commitments import Commitment, FILTER_KINDS, commitment_set
from .execution import normalise_value

__all__ = ["column_value_sets", "retracted_columns", "carried_columns", "retracted_filters", "kept_filters",
           "query_commitments"]


def column_value_sets(result: ExecutionResult) -> list[frozenset]:
    """The set of comparison keys of each result column (:func:`~textsql_clarify.rewards.execution.normalise_value`:
    ``3 == 3.0``, floats rounded, NULL kept as ``None``), in column order; ``[]`` for a failed result.

    Args:
        result: an executed result.
    Returns:
        One frozenset per column.
    """
    if not result.ok or not result.columns:
        return []
    if not result.rows:
        return [frozenset() for _ in result.columns]
    return [frozenset(map(normalise_value, col)) for col in zip(*result.rows)]


def retracted_columns(pre: ExecutionResult, post: ExecutionResult) -> tuple[int, ...]:
    """The pre-drift gold's result columns that the drift retracted: those whose set of values equals no
    post-drift gold column's set of values (TIDE §2.2: the output side the user withdrew, read by values).

    E.g. ``SELECT name, age`` -> ``SELECT name, song``: the ``age`` column (index 1); ``SELECT min(year)`` ->
    ``SELECT max(year)``: the ``min`` column (index 0). On a value or constraint drift the filtered rows change,
    so a pre-drift column whose values change with them counts too (an extra column holding the old filter's
    answer carries the retracted filter).

    Args:
        pre, post: the pre- and post-drift gold results (successful; otherwise nothing is retracted).
    Returns:
        Indices into ``pre.columns``, ascending.
    """
    if not pre.ok or not post.ok or not pre.rows:
        return ()
    post_sets = set(column_value_sets(post))
    return tuple(j for j, vals in enumerate(column_value_sets(pre)) if vals not in post_sets)


def carried_columns(pred: ExecutionResult, mapping: Sequence[int] | None, pre: ExecutionResult,
                    retracted: Iterable[int]) -> tuple[int, ...]:
    """The prediction's extra columns that carry a retracted pre-drift column.

    Args:
        pred: the prediction's result (a relaxed-EX match of the post-drift gold).
        mapping: the match's column mapping (post-drift gold column ``i`` -> ``pred`` column ``mapping[i]``);
            ``None``: no mapping known, every prediction column is looked at.
        pre: the pre-drift gold's result.
        retracted: :func:`retracted_columns` of (``pre``, post-drift gold).
    Returns:
        Indices into ``pred.columns`` of the columns outside ``mapping`` whose set of values equals the set of
        values of a retracted column, ascending; ``()`` when there is none (or ``pred`` has no rows).
    """
    retracted = tuple(retracted)
    if not retracted or not pred.ok or not pred.rows:
        return ()
    pre_sets = column_value_sets(pre)
    wanted = {pre_sets[j] for j in retracted if j < len(pre_sets)}
    used = set(mapping or ())
    return tuple(c for c, vals in enumerate(column_value_sets(pred)) if c not in used and vals in wanted)


def retracted_filters(pre_set: frozenset[Commitment], post_set: frozenset[Commitment]) -> frozenset[Commitment]:
    """The filtering units the drift retracted: W(y_pre) \\ S(y_post) (TIDE Alg. 1's W; App. A value forms, scope
    by scope). Empty for a drift that changes only the output side.

    Args:
        pre_set, post_set: the commitment sets of the pre- and post-drift golds
            (:func:`~textsql_clarify.rewards.commitments.commitment_set`).
    """
    return frozenset(c for c in pre_set - post_set if c.kind in FILTER_KINDS)


def kept_filters(pred_set: frozenset[Commitment], retracted: frozenset[Commitment]) -> frozenset[Commitment]:
    """The retracted filtering units the prediction still holds (same scope, kind and value form).

    Args:
        pred_set: the prediction's commitment set (empty when it cannot be analysed).
        retracted: :func:`retracted_filters`.
    """
    return frozenset(retracted & pred_set)


def query_commitments(sql: str, schema: Mapping | None) -> frozenset[Commitment] | None:
    """``commitment_set(sql, schema)``, or ``None`` when the query cannot be analysed (any error: an agent query
    that does not parse commits to nothing, and the rule then looks at results only).

    Args:
        sql: one query.
        schema: ``{table: {column: type}}`` (the sandbox's), to resolve bare columns.
    """
    try:
        return commitment_set(sql, schema)
    except Exception:  # noqa: BLE001 - an unanalysable query holds no unit; the result-based parts still apply
        return None
