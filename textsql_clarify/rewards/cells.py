"""Column and cell precision/recall between two executed results (article: "Output: columns and cells").

The output family replaces all-or-nothing execution accuracy with two questions, scored separately:

* columns: did the requested information come back, and how much noise came with it?
* cells: inside the paired columns, are the values right?

Pipeline (each step cites the article, ``002_839439527a6c50bd.txt``):

1. Pair the columns (article: "Pairing the columns"). First by origin: the same resolved
   ``table.column`` on both sides is proof and pairs with no threshold (precision = recall = 1.0). When an
   origin names several columns (a table read twice in a self-join), which is which is decided by values:
   the one-to-one assignment maximising multiset value overlap (``linear_sum_assignment``, scipy docs; ours).
   Then, among what is left, by the overlap of distinct values, best ``min(P, R)`` first. Two guards
   apply to this inferred step only: the threshold is on ``min(P, R)``, not F1, and a reference column
   needs at least two distinct values. Our extension to the second guard: a reference column below it
   (a constant, or any column of a one-row result) may still pair with a candidate column holding exactly
   the same distinct values (:attr:`CellPolicy.exact_set_pairing`), so that identical results always
   score 1.0.
2. Score the columns (article: "Scoring the columns"): the pairs' precisions summed over every
   candidate column, their recalls summed over every reference column.
3. Pair the rows (article: "Pairing the rows"): a row key of at most two paired columns chosen for its
   selectivity on the reference rows; each reference row goes on the shelf its key names, the rows on
   one shelf are paired to maximise matched cells (``scipy.optimize.linear_sum_assignment``), and a
   shelf empties, so no reference row is collected twice. Below the selectivity floor the rows are
   compared as a multiset of whole rows, without partial credit.
4. Score the cells (article: "Scoring the cells"): matched cells over ``candidate rows x w`` and over
   ``reference rows x w``, ``w`` the number of paired columns.
5. Keep exact result-set equality as a check on the scorer (article: "Measuring honestly"): perfect
   column and cell scores with results that differ as multisets of rows is a scorer bug, flagged.

Undefined is not zero (article: "Measuring honestly"): a metric whose denominator is zero is ``None``.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import Any, NamedTuple, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment
from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope

from ..errors import SQLParseError, TextSQLClarifyError
from ..sql.schema import Schema, active_memo, analysis_errors, qualified_for_analysis

__all__ = [
    "CellPolicy",
    "CellScores",
    "ColumnPair",
    "ResultShapeError",
    "ResultTable",
    "column_origins",
    "paired_rows",
    "score_cells",
]


class ResultShapeError(TextSQLClarifyError, ValueError):
    """A :class:`ResultTable` or :class:`CellPolicy` is malformed; the message names the field and the row."""


@dataclass(frozen=True)
class ResultTable:
    """One executed result set.

    Attributes:
        columns: output column names, one per output column (names are never used for pairing:
            models pick their own aliases, article: "Output: columns and cells").
        rows: the rows, each a tuple (or other sequence) of Python values, ``None`` for SQL NULL, all of
            length ``len(columns)``. Row order is ignored by :func:`score_cells`.
        origins: the resolved ``"table.column"`` of each output column (``None`` for a computed column),
            as :func:`column_origins` returns them, or ``None`` when unknown (then columns pair by value only).

    Raises:
        ResultShapeError: ``columns`` is not a sequence of str, a row's length differs from the number
            of columns (the message gives the first bad row index), or ``origins`` has the wrong length.
    """

    columns: tuple[str, ...]
    rows: Sequence[tuple]
    origins: tuple[str | None, ...] | None = None

    def __post_init__(self) -> None:
        cols = tuple(self.columns)
        if any(not isinstance(c, str) for c in cols):
            raise ResultShapeError(f"ResultTable.columns must be str names, got {cols!r}")
        object.__setattr__(self, "columns", cols)
        n = len(cols)
        for i, row in enumerate(self.rows):
            if len(row) != n:
                raise ResultShapeError(
                    f"ResultTable.rows[{i}] has {len(row)} values but there are {n} columns {cols!r}")
        if self.origins is not None:
            origins = tuple(self.origins)
            if len(origins) != n:
                raise ResultShapeError(
                    f"ResultTable.origins has {len(origins)} entries but there are {n} columns {cols!r}")
            if any(o is not None and not isinstance(o, str) for o in origins):
                raise ResultShapeError(f"ResultTable.origins must be 'table.column' str or None, got {origins!r}")
            object.__setattr__(self, "origins", tuple(o.lower() if o else None for o in origins))


# --------------------------------------------------------------------------- column origins


def _origin_in_scope(scope: Scope, projection: exp.Expression, depth: int = 0) -> str | None:
    """Resolved ``table.column`` of one SELECT projection, following derived tables and CTEs."""
    node = projection.unalias() if isinstance(projection, exp.Alias) else projection
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Column) or not node.table or depth > 32:
        return None
    source = scope.sources.get(node.table)
    if isinstance(source, exp.Table):
        return f"{source.name.lower()}.{node.name.lower()}"
    if isinstance(source, Scope):
        inner = _scope_origins(source, depth + 1)
        names = source.expression.named_selects if isinstance(source.expression, exp.Query) else []
        for name, origin in zip(names, inner):
            if name.lower() == node.name.lower():
                return origin
    return None


def _scope_origins(scope: Scope, depth: int = 0) -> list[str | None]:
    """Origins of every output column of ``scope``; a set operation keeps an origin only if all branches agree."""
    expr = scope.expression
    if isinstance(expr, exp.SetOperation):
        branches = getattr(scope, "set_operation_scopes", None) or getattr(scope, "union_scopes", None) or []
        if len(branches) != 2:
            return [None] * len(expr.named_selects)
        left, right = (_scope_origins(s, depth + 1) for s in branches)
        return [a if a == b else None for a, b in zip(left, right)]
    if not isinstance(expr, exp.Select):
        return []
    return [_origin_in_scope(scope, p, depth) for p in expr.expressions]


def column_origins(sql: str, schema: Schema | dict | None) -> tuple[str | None, ...]:
    """Resolve each output column of ``sql`` to its lower-cased ``"table.column"`` (article: "Pairing the columns").

    Columns are qualified with :func:`textsql_clarify.sql.schema.qualify_sql` (aliases expanded, ``*``
    expanded when ``schema`` is given) and traced through derived tables and CTEs to a base table. A
    computed column (aggregate, arithmetic, CASE, literal, ...) has origin ``None``. For a set operation
    (UNION / INTERSECT / EXCEPT) a column keeps its origin only when every branch gives the same one.

    Args:
        sql: one SQLite SELECT statement.
        schema: ``{table: {column: type}}`` as :func:`~textsql_clarify.sql.schema.read_schema` returns it, or
            ``None`` (then only what the query itself says is used; ``*`` cannot be expanded).

    Returns:
        One entry per output column, in output order.

    Raises:
        SQLParseError: the SQL cannot be parsed or qualified, is too big to analyse
            (:func:`~textsql_clarify.sql.schema.parse_for_analysis`), is not a query, has a ``*`` that cannot be
            expanded (no schema, or an unknown table) so the number of output columns is unknown, or sqlglot
            fails on it (any exception, with the reason).
    """
    memo = active_memo()
    if memo is not None and isinstance(sql, str):
        try:
            fp = memo.fingerprint(schema)
        except (TypeError, AttributeError):
            pass
        else:  # an immutable answer, worked out once per text and schema in a step (kept with it across steps)
            return memo.get(("origins", sql, fp), lambda: _column_origins(sql, schema))
    return _column_origins(sql, schema)


def _column_origins(sql: str, schema: Schema | dict | None) -> tuple[str | None, ...]:
    """:func:`column_origins` without the step memo of its answer."""
    # parsed and qualified once per env step, shared with the other scorers (read only here)
    tree = qualified_for_analysis(sql, schema)
    if not isinstance(tree, exp.Query):
        raise SQLParseError(sql, f"not a query: {type(tree).__name__}")
    with analysis_errors(sql, "column origins"):
        outer = tree
        while isinstance(outer, (exp.SetOperation, exp.Subquery)):  # the left branch fixes the output columns
            outer = outer.this
        stars = any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star))
                    for p in outer.expressions)
        scope = None if stars else build_scope(tree)
        origins = None if scope is None else tuple(_scope_origins(scope))
    if stars:
        raise SQLParseError(sql, "cannot expand '*' into output columns (schema missing or incomplete)")
    if origins is None:
        raise SQLParseError(sql, "no query scope")
    return origins


# --------------------------------------------------------------------------- policy and scores


@dataclass(frozen=True)
class CellPolicy:
    """Every threshold of :func:`score_cells`, named (article: "Pairing the columns", "Pairing the rows").

    Attributes:
        min_overlap: inclusive threshold on ``min(precision, recall)`` of distinct values for a pair made by
            value overlap (never on F1, which averages the asymmetry away: the article's rejected pair had
            recall 1.0, precision 0.033, F1 0.065). The article does not publish its value; 0.25 keeps its
            worked pair ``Total`` (min 0.5) and rejects its counter-example (min 0.033). In ``[0, 1]``.
        min_reference_distinct: distinct values a reference column needs before it may pair by value
            overlap ("a constant column discriminates nothing"); the article uses 2. Origin pairs ignore it.
        exact_set_pairing: extension, not in the article. A reference column with fewer than
            ``min_reference_distinct`` distinct values (a constant computed column such as
            ``upper(d.name)`` under ``WHERE d.name = 'x'`` over 8 rows, or any column of a one-row answer:
            ``COUNT(*)``, ``AVG(x)``) would otherwise never pair without an origin, so even the reference
            scored against itself would lose it. When ``True``, such a column may pair with a candidate
            column whose set of distinct values is exactly equal to its own (``how="exact"``, precision =
            recall = 1.0; two empty results pair their columns in order, having no values to tell them
            apart). A candidate column that merely contains the constant among other values does not pair.
            With it, identical results score 1.0 on column and cell precision and recall wherever defined.
        key_selectivity_floor: a row key needs ``distinct key values / reference rows`` of at least this
            (article: below 0.5 "the key stops meaning anything"); otherwise rows are compared as a multiset
            of whole rows. In ``[0, 1]``.
        max_key_columns: most paired columns in a row key (article: "at most two"). At least 1.
        float_decimals: floats are rounded to this many decimals before any comparison, and an integral float
            becomes an int, so ``3 == 3.0``. ``None``: no rounding. Strings never equal numbers, NULL
            (``None``) equals only NULL.
        max_shelf_pairs: guard against a giant shelf: when ``candidate rows x reference rows`` on one shelf
            exceeds this, that shelf is compared as a multiset of whole rows (no partial credit, no
            Hungarian matrix) and counted in :attr:`CellScores.oversized_shelves`. At least 1.

    Raises:
        ResultShapeError: a value outside its range (the message names the field).
    """

    min_overlap: float = 0.25
    min_reference_distinct: int = 2
    exact_set_pairing: bool = True
    key_selectivity_floor: float = 0.5
    max_key_columns: int = 2
    float_decimals: int | None = 6
    max_shelf_pairs: int = 250_000

    def __post_init__(self) -> None:
        for name in ("min_overlap", "key_selectivity_floor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ResultShapeError(f"CellPolicy.{name} must be a number in [0, 1], got {v!r}")
        for name, lo in (("min_reference_distinct", 1), ("max_key_columns", 1), ("max_shelf_pairs", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ResultShapeError(f"CellPolicy.{name} must be an int >= {lo}, got {v!r}")
        if self.float_decimals is not None and (isinstance(self.float_decimals, bool)
                                                or not isinstance(self.float_decimals, int)
                                                or self.float_decimals < 0):
            raise ResultShapeError(f"CellPolicy.float_decimals must be None or an int >= 0, got {self.float_decimals!r}")
        if not isinstance(self.exact_set_pairing, bool):
            raise ResultShapeError(
                f"CellPolicy.exact_set_pairing must be a bool, got {self.exact_set_pairing!r}")


class ColumnPair(NamedTuple):
    """One paired column: indices into the candidate's and the reference's columns.

    ``how`` is ``"origin"`` (same ``table.column``, precision = recall = 1.0), ``"overlap"`` (distinct-value
    overlap; ``precision = |C & R| / |C|``, ``recall = |C & R| / |R|`` over distinct values) or ``"exact"``
    (a reference column below the distinct-values guard, paired with a candidate column holding exactly its
    distinct values; precision = recall = 1.0; :attr:`CellPolicy.exact_set_pairing`).
    """

    candidate_index: int
    reference_index: int
    how: str
    precision: float
    recall: float


@dataclass(frozen=True)
class CellScores:
    """Output-family scores of one candidate result against one reference result (article: "Output").

    Attributes:
        column_precision: sum of the pairs' precision / number of candidate columns; ``None`` with no
            candidate column.
        column_recall: sum of the pairs' recall / number of reference columns; ``None`` with no reference column.
        cell_precision: matched cells / (candidate rows x w); ``None`` when that product is 0.
        cell_recall: matched cells / (reference rows x w); ``None`` when that product is 0.
        cell_f1: harmonic mean of the two, ``None`` unless both are defined (0.0 when both are 0).
        pairs: the :class:`ColumnPair` s, ordered by reference index; ``w = len(pairs)``.
        key_columns: reference column indices of the row key (empty when keyless or when no rows were compared).
        key_selectivity: distinct key values / reference rows for the chosen key, ``None`` when no key was sought.
        keyless: ``True`` when no key reached the selectivity floor and rows were compared as whole-row multisets.
        matched_cells: the shared numerator of cell precision and recall.
        oversized_shelves: shelves too big for the Hungarian step, compared as whole-row multisets
            (a ceiling counted, not corrected; article: "Measuring honestly").
        exact_match: the two results are equal as multisets of rows with columns compared by position
            (values normalised as in :class:`CellPolicy`); row order is ignored.
        scorer_inconsistent: column and cell precision and recall are all 1.0, yet the rows differ as
            multisets once the candidate's columns are put in the reference order by the pairs. That is a
            bug in the scorer, never in the model (article: "Measuring honestly").
    """

    column_precision: float | None
    column_recall: float | None
    cell_precision: float | None
    cell_recall: float | None
    cell_f1: float | None
    pairs: tuple[ColumnPair, ...]
    key_columns: tuple[int, ...]
    keyless: bool
    exact_match: bool
    scorer_inconsistent: bool
    key_selectivity: float | None = None
    matched_cells: int = 0
    oversized_shelves: int = 0


# --------------------------------------------------------------------------- helpers


class _NaN:
    """Hashable stand-in so that NaN equals NaN (sqlite3 itself returns NULL for NaN)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NaN"


_NAN = _NaN()


def _normalise_column(values: Sequence[Any], decimals: int | None) -> list:
    """Normalise one column: bools to ints, integral floats to ints, other floats rounded; NaN equals NaN."""
    types = set(map(type, values))
    if float not in types and bool not in types:
        return list(values)
    out = []
    for v in values:
        t = type(v)
        if t is float:
            if math.isnan(v):
                v = _NAN
            elif not math.isinf(v):
                if decimals is not None:
                    v = round(v, decimals)
                if v.is_integer():
                    v = int(v)
        elif t is bool:
            v = int(v)
        out.append(v)
    return out


def _columns_of(table: ResultTable, decimals: int | None) -> list[list]:
    """The table's normalised columns, column-major."""
    n = len(table.columns)
    if not table.rows:
        return [[] for _ in range(n)]
    return [_normalise_column(col, decimals) for col in zip(*table.rows)]


def _bag_overlap(a: list, b: list) -> float:
    """Multiset overlap of two columns' values, ``|bag(a) & bag(b)| / max(|a|, |b|)`` in ``[0, 1]``."""
    if not a or not b:
        return 0.0
    return sum((Counter(a) & Counter(b)).values()) / max(len(a), len(b))


def _origin_pairs(c_origins: tuple, r_origins: tuple, ccols: list[list], rcols: list[list]) -> list[tuple[int, int]]:
    """Origin pairs ``(candidate index, reference index)`` (article: "Pairing the columns"; self-joins: ours).

    Columns with the same resolved ``table.column`` pair with no threshold. When an origin names several
    columns on a side (a table read twice, ``T1.name`` and ``T2.name`` of a self-join), which candidate
    column is which reference column is decided by their values: the one-to-one assignment maximising the
    summed multiset overlap (:func:`_bag_overlap`, ``scipy.optimize.linear_sum_assignment``), ties going to
    the pairing that keeps the output order. A correct self-join answer with its two columns swapped so pairs
    each column with the column holding its values.
    """
    by_c: dict[str, list[int]] = defaultdict(list)
    by_r: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(c_origins):
        if o is not None:
            by_c[o].append(i)
    for j, o in enumerate(r_origins):
        if o is not None:
            by_r[o].append(j)
    out: list[tuple[int, int]] = []
    for o, cs in by_c.items():
        rs = by_r.get(o)
        if not rs:
            continue
        if len(cs) == 1 or len(rs) == 1:  # one column on a side: the first of the other side, in order
            out.append((cs[0], rs[0]))
            continue
        score = np.array([[_bag_overlap(ccols[i], rcols[j]) for j in rs] for i in cs], dtype=float)
        # position tie-break, smaller than any overlap difference a result of up to 10^6 rows can make
        tie = np.array([[1e-9 if a == b else 0.0 for b in range(len(rs))] for a in range(len(cs))])
        rows, cols = linear_sum_assignment(score + tie, maximize=True)
        out.extend((cs[a], rs[b]) for a, b in zip(rows, cols))
    return out


def _pair_columns(cand: ResultTable, ref: ResultTable, ccols: list[list], rcols: list[list],
                  policy: CellPolicy) -> list[ColumnPair]:
    """Origin pairs first (no threshold), then overlap and exact-set pairs best ``min(P, R)`` first (article:
    "Pairing the columns"; exact-set pairs: :attr:`CellPolicy.exact_set_pairing`); ties go to the lower
    reference, then candidate, index."""
    pairs: list[ColumnPair] = []
    used_c: set[int] = set()
    used_r: set[int] = set()
    if cand.origins is not None and ref.origins is not None:
        for i, j in _origin_pairs(cand.origins, ref.origins, ccols, rcols):
            pairs.append(ColumnPair(i, j, "origin", 1.0, 1.0))
            used_c.add(i)
            used_r.add(j)
    c_sets = {i: set(ccols[i]) for i in range(len(ccols)) if i not in used_c}
    options = []
    for j in range(len(rcols)):
        if j in used_r:
            continue
        r_set = set(rcols[j])
        if len(r_set) < policy.min_reference_distinct:
            if policy.exact_set_pairing:  # below the guard: only an identical set of distinct values pairs
                options += [(-1.0, -2.0, j, i, "exact", 1.0, 1.0) for i, c_set in c_sets.items() if c_set == r_set]
            continue
        for i, c_set in c_sets.items():
            if not c_set:
                continue
            small, big = (c_set, r_set) if len(c_set) <= len(r_set) else (r_set, c_set)
            inter = sum(1 for v in small if v in big)
            if not inter:
                continue
            p, r = inter / len(c_set), inter / len(r_set)
            low = min(p, r)
            if low < policy.min_overlap:
                continue
            options.append((-low, -(p + r), j, i, "overlap", p, r))
    options.sort()
    for _, _, j, i, how, p, r in options:
        if i in used_c or j in used_r:
            continue
        pairs.append(ColumnPair(i, j, how, p, r))
        used_c.add(i)
        used_r.add(j)
    pairs.sort(key=lambda q: q.reference_index)
    return pairs


def _encode(pairs: list[ColumnPair], ccols: list[list], rcols: list[list],
            n_cand: int, n_ref: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes per paired column (shared by both sides), shapes (n_cand, w) and (n_ref, w)."""
    w = len(pairs)
    C = np.empty((n_cand, w), dtype=np.int64)
    R = np.empty((n_ref, w), dtype=np.int64)
    for k, pr in enumerate(pairs):
        codes: dict = {}
        get = codes.setdefault
        R[:, k] = [get(v, len(codes)) for v in rcols[pr.reference_index]] if n_ref else []
        C[:, k] = [get(v, len(codes)) for v in ccols[pr.candidate_index]] if n_cand else []
    return C, R


def _choose_key(R: np.ndarray, pairs: list[ColumnPair], policy: CellPolicy) -> tuple[tuple[int, ...], float]:
    """Most selective key of at most ``max_key_columns`` paired columns (article: "Pairing the rows").

    Ranking: selectivity on the reference rows, then fewer columns, then the pairs' quality (an origin pair
    counts 1.0, an overlap pair its ``min(P, R)``: a column whose values the candidate does not share makes
    a key that candidate rows cannot find), then column order. Returns (positions into ``pairs``, selectivity).
    """
    n, w = R.shape
    cols = [R[:, k].tolist() for k in range(w)]
    distinct = [len(set(c)) for c in cols]
    quality = [min(p.precision, p.recall) for p in pairs]
    best_rank, best_key = None, ()
    for size in range(1, min(policy.max_key_columns, w) + 1):
        combos = []
        for key in combinations(range(w), size):
            bound = 1
            for k in key:
                bound *= distinct[k]
            combos.append((min(bound, n) / n, sum(quality[k] for k in key), key))
        combos.sort(key=lambda t: (-t[0], -t[1], t[2]))
        for upper, q, key in combos:
            if best_rank is not None and (upper, -size, q) <= best_rank[:3]:
                break  # nothing further down can beat the best so far
            sel = (distinct[key[0]] if size == 1 else len(set(zip(*(cols[k] for k in key))))) / n
            rank = (sel, -size, q, tuple(-k for k in key))
            if best_rank is None or rank > best_rank:
                best_rank, best_key = rank, key
        if best_rank is not None and best_rank[0] >= 1.0:
            break
    return best_key, best_rank[0]


def _multiset_hits(C: np.ndarray, R: np.ndarray) -> int:
    """Whole rows in common as multisets (each matched row is worth every paired column)."""
    common = Counter(map(tuple, C.tolist())) & Counter(map(tuple, R.tolist()))
    return sum(common.values()) * C.shape[1]


def _shelf_hits(C: np.ndarray, R: np.ndarray, key: tuple[int, ...], policy: CellPolicy) -> tuple[int, int]:
    """Matched cells over all shelves, and the number of oversized shelves (article: "Pairing the rows")."""
    kc = list(zip(*(C[:, k].tolist() for k in key)))
    kr = list(zip(*(R[:, k].tolist() for k in key)))
    shelves_r: dict = defaultdict(list)
    for idx, k in enumerate(kr):
        shelves_r[k].append(idx)
    shelves_c: dict = defaultdict(list)
    for idx, k in enumerate(kc):
        if k in shelves_r:
            shelves_c[k].append(idx)
    ones_c, ones_r = [], []
    hits, oversized = 0, 0
    for k, ci in shelves_c.items():
        ri = shelves_r[k]
        if len(ci) == 1 and len(ri) == 1:
            ones_c.append(ci[0])
            ones_r.append(ri[0])
            continue
        if len(ci) * len(ri) > policy.max_shelf_pairs:
            oversized += 1
            hits += _multiset_hits(C[ci], R[ri])
            continue
        score = (C[ci][:, None, :] == R[ri][None, :, :]).sum(axis=2)
        rows, cols = linear_sum_assignment(score, maximize=True)
        hits += int(score[rows, cols].sum())
    if ones_c:
        hits += int((C[ones_c] == R[ones_r]).sum())
    return hits, oversized


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


# --------------------------------------------------------------------------- scoring


def score_cells(candidate: ResultTable, reference: ResultTable, policy: CellPolicy = CellPolicy()) -> CellScores:
    """Column and cell precision/recall of ``candidate`` against ``reference`` (article: "Output: columns and cells").

    Args:
        candidate: the agent's executed result.
        reference: the gold SQL's executed result.
        policy: thresholds; see :class:`CellPolicy`.

    Returns:
        :class:`CellScores`. Undefined metrics are ``None``: column precision/recall with no
        candidate/reference column; cell precision with no candidate row or no paired column; cell recall
        with no reference row or no paired column. Empty against non-empty is a defined 0.0 on the side
        that has rows (e.g. rows returned where none were expected: cell precision 0.0, recall ``None``).

    Raises:
        TypeError: an argument is not a :class:`ResultTable` / :class:`CellPolicy`.

    Cost: pairing is O(columns^2) set intersections; rows are matched per shelf (Hungarian on small
    shelves, vectorised for 1x1 shelves), so 10,000 rows x 20 columns score in a fraction of a second.
    """
    if not isinstance(candidate, ResultTable) or not isinstance(reference, ResultTable):
        raise TypeError(f"score_cells needs two ResultTable, got {type(candidate).__name__}, {type(reference).__name__}")
    if not isinstance(policy, CellPolicy):
        raise TypeError(f"policy must be a CellPolicy, got {type(policy).__name__}")
    ccols = _columns_of(candidate, policy.float_decimals)
    rcols = _columns_of(reference, policy.float_decimals)
    n_cand, n_ref = len(candidate.rows), len(reference.rows)

    pairs = _pair_columns(candidate, reference, ccols, rcols, policy)
    w = len(pairs)
    col_p = _ratio(sum(p.precision for p in pairs), len(ccols))
    col_r = _ratio(sum(p.recall for p in pairs), len(rcols))

    key: tuple[int, ...] = ()
    selectivity: float | None = None
    keyless = False
    hits = oversized = 0
    C = R = None
    if w and n_cand and n_ref:
        C, R = _encode(pairs, ccols, rcols, n_cand, n_ref)
        key, selectivity = _choose_key(R, pairs, policy)
        if selectivity < policy.key_selectivity_floor:
            keyless, key = True, ()
            hits = _multiset_hits(C, R)
        else:
            hits, oversized = _shelf_hits(C, R, key, policy)
    cell_p = _ratio(hits, n_cand * w)
    cell_r = _ratio(hits, n_ref * w)
    if cell_p is None or cell_r is None:
        cell_f1 = None
    else:
        cell_f1 = 0.0 if cell_p + cell_r == 0 else 2 * cell_p * cell_r / (cell_p + cell_r)

    exact = (len(ccols) == len(rcols) and n_cand == n_ref
             and Counter(zip(*ccols)) == Counter(zip(*rcols)))
    perfect = col_p == 1.0 and col_r == 1.0 and cell_p == 1.0 and cell_r == 1.0
    inconsistent = False
    if perfect:
        aligned = [ccols[p.candidate_index] for p in pairs]
        ordered_ref = [rcols[p.reference_index] for p in pairs]
        inconsistent = w != len(rcols) or Counter(zip(*aligned)) != Counter(zip(*ordered_ref))
    return CellScores(
        column_precision=col_p, column_recall=col_r,
        cell_precision=cell_p, cell_recall=cell_r, cell_f1=cell_f1,
        pairs=tuple(pairs),
        key_columns=tuple(pairs[k].reference_index for k in key),
        keyless=keyless, exact_match=bool(exact), scorer_inconsistent=inconsistent,
        key_selectivity=selectivity, matched_cells=hits, oversized_shelves=oversized,
    )


def paired_rows(candidate: ResultTable, reference: ResultTable, pairs: Sequence[ColumnPair],
                policy: CellPolicy = CellPolicy()) -> tuple[list[tuple], list[tuple]]:
    """Both results' rows projected onto the paired columns, in pair order, values normalised as in scoring.

    Args:
        candidate, reference: the two results :func:`score_cells` compared.
        pairs: :attr:`CellScores.pairs` of that comparison.
        policy: the same policy (its ``float_decimals`` normalises the values).

    Returns:
        ``(candidate_rows, reference_rows)``: lists of tuples of length ``len(pairs)``, in each result's own
        row order (used by :mod:`.dense` for whole-row multiplicity and row order; ours, not the article's).

    Raises:
        ResultShapeError: a pair's index is out of range for its table.
    """
    for p in pairs:
        if not (0 <= p.candidate_index < len(candidate.columns) and 0 <= p.reference_index < len(reference.columns)):
            raise ResultShapeError(f"pair {tuple(p)} is out of range for {len(candidate.columns)} candidate and "
                                   f"{len(reference.columns)} reference columns")
    ccols = _columns_of(candidate, policy.float_decimals)
    rcols = _columns_of(reference, policy.float_decimals)
    cand = list(zip(*(ccols[p.candidate_index] for p in pairs))) if pairs else [()] * len(candidate.rows)
    ref = list(zip(*(rcols[p.reference_index] for p in pairs))) if pairs else [()] * len(reference.rows)
    return cand, ref
