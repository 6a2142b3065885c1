"""Dense SQL reward: partial credit that ranks honest near-misses above hacks (component ``sql_partial``).

The article's output scores (:mod:`.cells`) measure how much of the gold's result came back; as a reward they
can be gamed (the red-team contract, ``docs/rewards.md``; measured on Spider dev with ``cell_f1 x column_recall``:
dropping a required ORDER BY earned 0.917, duplicating every row 0.586, returning half the rows 0.516, all with EX 0;
width hacks 0.337).
``sql_partial`` keeps the article's scores as ingredients and adds what a reward needs:

* an exact answer scores 1 (same number of columns, same bag of rows, or the same sequence when the gold is
  ordered: the strict execution match), and nothing else does: partial credit is capped at
  :attr:`PartialPolicy.partial_cap`;
* partial credit is the product of five agreements, each in ``[0, 1]``, so that a result-only trick (rows
  that look right from a query that is not) and a SQL-only trick (a query that looks right and returns
  nothing useful) both earn nothing::

      partial = rows x columns x order x content            (then capped; 0 when a gate closes)
      rows    = cell F1 of the article (bags: each gold row collected once, so extra and repeated rows cost)
      columns = F1 of column precision and column recall (width costs, not only missing columns)
      order   = 1 for an unordered gold; else recall of the gold's ORDER BY keys x the longest common
                subsequence of the matched rows / matched rows
      content = mean F1 of the article's component sets tables, joins, filters, aggregations, group_by
                (each set either side uses; a set one side lacks scores 0)

* gates for errors of *form*: when the candidate changes how many times, in which window or in what width the
  gold's rows come back, without changing what they are, the overlap says nothing about closeness and partial
  credit is 0 (:attr:`DenseScore.gate` says which):

  - ``width``: more than :attr:`PartialPolicy.max_extra_columns` candidate columns pair with no gold column
    (``SELECT *`` of the gold's table, ``SELECT 0, 1, ..., 1700``, every aggregate of the schema);
  - ``row_window``: a ``LIMIT`` / ``OFFSET`` the gold does not have (``LIMIT half``, top-2 for top-1), except a
    pagination cap of at least :attr:`PartialPolicy.agent_limit_min_rows` rows that cut nothing;
  - ``set_operation``: a ``UNION`` / ``UNION ALL`` / ``INTERSECT`` / ``EXCEPT`` the gold does not have
    (``gold UNION ALL gold``, with or without junk rows);
  - ``duplicates``: every candidate row is a gold row or an all-NULL row, yet some gold row comes back more
    often than in the gold, or more all-NULL rows come back than the gold has (duplication by any spelling, a
    dropped ``DISTINCT``, the gold padded with NULL rows through an outer join);
  - ``unanalysable``: either query cannot be parsed into component sets (the exact path still applies).

Honest near-misses change content and keep form: a wrong literal or a missing filter changes which rows come
back (``rows`` and ``content`` fall, nothing gates), an extra column costs column precision (``columns``).
Measured on Spider dev by ``bench/bench_dense_ranking.py`` (table in ``docs/rewards.md``).

Sources: the article ("Output: columns and cells", "Component: where the SQL went wrong") for the
ingredients; ABISS App. A for the ordered / bag comparison; the gates and the product are ours.
"""
from __future__ import annotations

import functools
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from ..errors import SQLParseError
from ..sql.schema import parse_for_analysis
from .cells import CellPolicy, CellScores, ResultTable, paired_rows
from .components import _schema_key, component_sets, precision_recall

__all__ = ["CONTENT_SETS", "GATES", "DenseScore", "PartialPolicy", "order_agreement", "score_partial"]

#: component sets whose agreement is ``content`` (the article's six minus ``order_by``, which ``order`` and the
#: ``row_window`` gate handle).
CONTENT_SETS: tuple[str, ...] = ("tables", "joins", "filters", "aggregations", "group_by")
#: reasons partial credit is 0, in the order they are checked.
GATES: tuple[str, ...] = ("width", "unanalysable", "row_window", "set_operation", "duplicates")


@dataclass(frozen=True)
class PartialPolicy:
    """Every threshold of :func:`score_partial`, named (ours).

    Attributes:
        max_extra_columns: most candidate columns that may pair with no gold column before the ``width`` gate
            closes. 1 admits the honest "one extra column" (a key, the ORDER BY aggregate) and refuses
            ``SELECT *`` of a wider table. An int >= 0.
        partial_cap: the most an inexact answer can earn, in ``[0, 1)``, so that the exact answer is the
            unique maximiser (a float difference past ``CellPolicy.float_decimals`` would otherwise tie it).
        agent_limit_min_rows: a candidate ``LIMIT n`` the gold lacks is a pagination cap, not a row window,
            when ``n`` is at least this and the candidate returned fewer than ``n`` rows (the cap cut nothing).
            Same default as :class:`~textsql_clarify.rewards.components.ComponentPolicy`. An int >= 1.

    Raises:
        ValueError: a value outside its range (the message names the field).
    """

    max_extra_columns: int = 1
    partial_cap: float = 0.9
    agent_limit_min_rows: int = 100

    def __post_init__(self) -> None:
        for name, lo in (("max_extra_columns", 0), ("agent_limit_min_rows", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"PartialPolicy.{name} must be an int >= {lo}, got {v!r}")
        v = self.partial_cap
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
            raise ValueError(f"PartialPolicy.partial_cap must be a number in [0, 1), got {v!r}")


@dataclass(frozen=True)
class DenseScore:
    """``sql_partial`` of one SQL turn and its factors (:func:`score_partial`).

    Attributes:
        score: in ``[0, 1]``: 1.0 for an exact answer, else ``min(partial_cap, rows x columns x order x content)``,
            or 0.0 when a gate closed.
        exact: the strict execution match (same column count, same bag or ordered sequence of rows).
        rows, columns, order, content: the factors (``None`` when not computed: exact answers, closed gates
            before the factor was reached).
        gate: ``None``, or the first :data:`GATES` entry that closed.
    """

    score: float
    exact: bool
    rows: float | None = None
    columns: float | None = None
    order: float | None = None
    content: float | None = None
    gate: str | None = None


def _f1(p: float | None, r: float | None) -> float:
    """Harmonic mean; an undefined side (nothing on that side) counts 0 when the other side is defined."""
    p = 0.0 if p is None else p
    r = 0.0 if r is None else r
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def _set_operations(sql: str) -> Counter:
    """``(kind, distinct)`` of every set operation anywhere in the query."""
    tree = parse_for_analysis(sql)
    return Counter((type(n).__name__.lower(), bool(n.args.get("distinct")))
                   for n in tree.find_all(exp.Union, exp.Intersect, exp.Except))


def _features(sql: str, schema: Mapping | None) -> tuple[dict[str, frozenset[str]], Counter]:
    """Component sets (both sides prepared alike, no one-sided cleaning) and set operations of ``sql``."""
    return component_sets(sql, schema), _set_operations(sql)


@functools.lru_cache(maxsize=4096)
def _gold_features(gold_sql: str, schema_key) -> tuple[dict[str, frozenset[str]], Counter]:
    schema = None if schema_key is None else {t: {c: "" for c in cols} for t, cols in schema_key}
    return _features(gold_sql, schema)


def _window(fragments: frozenset[str]) -> set[str]:
    return {f for f in fragments if f.startswith(("LIMIT ", "OFFSET "))}


def _limit_value(fragment: str) -> int | None:
    try:
        return int(float(fragment.split(" ", 1)[1]))
    except (IndexError, ValueError):
        return None


def _lis(seq: list[int]) -> int:
    """Length of the longest strictly increasing subsequence (patience sorting, O(n log n))."""
    tails: list[int] = []
    for x in seq:
        k = bisect_left(tails, x)
        if k == len(tails):
            tails.append(x)
        else:
            tails[k] = x
    return len(tails)


def order_agreement(cand_rows: list[tuple], ref_rows: list[tuple]) -> float:
    """Share of the matched rows that come in the reference's order: LCS / matched (ours).

    Each candidate row, in candidate order, takes the earliest unused reference row with equal values; the
    longest common subsequence of the two orders is then the longest increasing run of the reference indices
    taken (exact for distinct rows; with repeated rows this greedy assignment gives a lower bound of the LCS).
    Fewer than two matched rows: 1.0 (no order to get wrong).

    Args:
        cand_rows, ref_rows: rows projected onto the paired columns (:func:`~textsql_clarify.rewards.cells.paired_rows`).

    Returns:
        A float in ``[0, 1]``; e.g. reference ``[a, b, c]``, candidate ``[c, a, b]``: 2/3.
    """
    where: dict[tuple, list[int]] = {}
    for i, r in enumerate(ref_rows):
        where.setdefault(r, []).append(i)
    taken: dict[tuple, int] = {}
    seq: list[int] = []
    for r in cand_rows:
        idx = where.get(r)
        k = taken.get(r, 0)
        if idx is not None and k < len(idx):
            seq.append(idx[k])
            taken[r] = k + 1
    return 1.0 if len(seq) < 2 else _lis(seq) / len(seq)


def _only_repeats(cand_rows: list[tuple], ref_rows: list[tuple]) -> bool:
    """Every candidate row is a reference row or an all-NULL row, and the candidate repeats some reference
    row more often than the reference has it, or pads it with more all-NULL rows than the reference has.

    All-NULL rows carry no value (ABISS App. A: NULL only equals NULL), so ``gold`` plus junk NULL rows (an
    outer join with a two-row table) is the gold's rows in another form, as a repeat is.
    """
    def blank(r: tuple) -> bool:
        return all(v is None for v in r)

    cb, rb = Counter(cand_rows), Counter(ref_rows)
    if not all(r in rb or blank(r) for r in cb):
        return False
    repeats = any(n > rb[r] for r, n in cb.items() if not blank(r))
    padded = sum(n for r, n in cb.items() if blank(r)) > sum(n for r, n in rb.items() if blank(r))
    return repeats or padded


def score_partial(pred_sql: str, gold_sql: str, candidate: ResultTable, reference: ResultTable, cells: CellScores,
                  *, ordered: bool, exact: bool, schema: Mapping | None = None,
                  policy: PartialPolicy = PartialPolicy(), cell_policy: CellPolicy = CellPolicy()) -> DenseScore:
    """``sql_partial`` of the candidate against the gold (module docstring: formula, gates, argument).

    Args:
        pred_sql, gold_sql: the two queries (their component sets and set operations are read).
        candidate, reference: their executed results, with origins where known.
        cells: :func:`~textsql_clarify.rewards.cells.score_cells` of ``candidate`` against ``reference``.
        ordered: the gold has a top-level ORDER BY (:func:`~textsql_clarify.rewards.execution.gold_is_ordered`).
        exact: the strict execution match (relaxed EX with as many candidate columns as gold columns).
        schema: ``{table: {column: type}}`` for the component sets, or ``None``.
        policy: :class:`PartialPolicy`; cell_policy: the policy ``cells`` was computed with.

    Returns:
        :class:`DenseScore`. Never raises for a query the analyser refuses (gate ``unanalysable``).

    Raises:
        TypeError: ``policy`` is not a :class:`PartialPolicy`.
    """
    if not isinstance(policy, PartialPolicy):
        raise TypeError(f"policy must be a PartialPolicy, got {type(policy).__name__}")
    if exact:
        return DenseScore(1.0, True)
    w = len(cells.pairs)
    rows = _f1(cells.cell_precision, cells.cell_recall) if w and candidate.rows else 0.0
    columns = _f1(cells.column_precision, cells.column_recall)
    if rows == 0.0 or columns == 0.0:
        return DenseScore(0.0, False, rows, columns)
    if len(candidate.columns) - w > policy.max_extra_columns:  # before the (costlier) SQL analysis
        return DenseScore(0.0, False, rows, columns, gate="width")
    try:
        gsets, gops = _gold_features(gold_sql, _schema_key(schema))
        csets, cops = _features(pred_sql, schema)
    except (SQLParseError, TypeError):
        return DenseScore(0.0, False, rows, columns, gate="unanalysable")
    gwin = _window(gsets["order_by"])
    for frag in _window(csets["order_by"]) - gwin:
        n = _limit_value(frag) if frag.startswith("LIMIT ") else None
        if n is None or n < policy.agent_limit_min_rows or len(candidate.rows) >= n:
            return DenseScore(0.0, False, rows, columns, gate="row_window")
    if cops - gops:
        return DenseScore(0.0, False, rows, columns, gate="set_operation")
    cand_rows, ref_rows = paired_rows(candidate, reference, cells.pairs, cell_policy)
    if _only_repeats(cand_rows, ref_rows):
        return DenseScore(0.0, False, rows, columns, gate="duplicates")
    order = 1.0
    if ordered:
        keys = gsets["order_by"] - gwin
        recall = len(keys & csets["order_by"]) / len(keys) if keys else 1.0
        order = recall * order_agreement(cand_rows, ref_rows)
    f1s = [_f1(*precision_recall(csets[s], gsets[s])) for s in CONTENT_SETS if csets[s] or gsets[s]]
    content = sum(f1s) / len(f1s) if f1s else 1.0
    score = min(policy.partial_cap, rows * columns * order * content)
    return DenseScore(score, False, rows, columns, order, content)

