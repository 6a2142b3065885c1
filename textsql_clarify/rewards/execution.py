"""Relaxed execution accuracy (EX): ABISS App. A on top of the sandbox's results.

Two results are equivalent when the prediction, projected onto some one-to-one choice of its
columns, gives the gold's rows (ABISS App. A, tolerances 1 to 4):

* row order is ignored (rows compare as bags), unless the gold SQL has a top-level ``ORDER BY``;
  then the projected rows must come in the gold's order. Ties in the ``ORDER BY`` keys are not
  special-cased: the sequences must match exactly as SQLite returned them;
* column names and column order are ignored;
* column supersets pass: the prediction may have extra columns, provided that the projected bag of
  rows equals the gold's bag. Multiplicity counts and nothing is deduplicated after projection,
  else ``SELECT *`` would pass every single-column ``DISTINCT`` gold (case ex18);
* numbers compare by value (``3 == 3.0``); floats are rounded to :data:`FLOAT_SIGNIFICANT_DIGITS`
  significant digits first, so sums taken in another order still match. Text never equals a
  number (``'3' != 3``). NULL only equals NULL, never ``0`` or ``''`` (ABISS App. A: NULL
  disagreements are non-equivalent; case ex13).

Outcomes that are not the agent's doing are kept apart (score ``None``, left out of EX means):
a gold that fails to execute (``gold_error``, case ex22) and a gold without data, i.e. no rows or
only NULL cells (``gold_empty``, :func:`is_empty_result`: an empty prediction would "match" by
chance, so such a sample can never earn reward and is counted apart as a ceiling on EX; case ex16
shows why ``[]`` is not an answer while ``[(0,)]`` is).

Column matching is polynomial in practice: each gold column's candidates are the prediction's
columns with the same bag of values (identical prediction columns merged into one class), then a
depth-first search assigns the most constrained gold column first and checks, at every step, the
joint bag of the columns assigned so far by refining per-row ids in one pass (so a wrong pairing
such as case ex04's ``goals``/``assists`` is cut at once). The search's work is capped
(:data:`DEFAULT_SEARCH_BUDGET` row checks); past the cap the verdict is ``undetermined``, scored 0.
An ordered gold needs no search: each gold column must equal a prediction column as a sequence.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Tokenizer, TokenType

from ..database import ExecutionResult, SQLiteSandbox
from ..errors import SQLParseError
from ..sqlschema import parse_sql

#: Verdict statuses of :class:`EXVerdict`.
STATUSES = ("match", "mismatch", "gold_empty", "gold_error", "pred_error", "undetermined")
#: Statuses whose sample is left out of EX means (``score is None``).
EXCLUDED_STATUSES = ("gold_empty", "gold_error")
#: Floats are compared after rounding to this many significant digits (relative resolution ~1e-12).
FLOAT_SIGNIFICANT_DIGITS = 12
#: Most row-level checks the column-matching search may make (rows x search nodes) before it
#: gives up with status ``undetermined``; about a second of work in the worst case.
DEFAULT_SEARCH_BUDGET = 2_000_000


@dataclass(frozen=True)
class EXVerdict:
    """The relaxed EX verdict for one prediction (ABISS §5.3, App. A).

    Attributes:
        score: ``1.0`` (match) or ``0.0`` (mismatch, pred_error, undetermined); ``None`` when the
            sample cannot be scored: the gold failed (``gold_error``) or returned no rows
            (``gold_empty``). ``None`` samples are left out of EX means.
        status: one of :data:`STATUSES`.
        reason: a human-readable explanation.
        column_mapping: on a match, gold column ``i`` -> prediction column ``column_mapping[i]``.

    Raises:
        ValueError: unknown ``status``, or a ``score`` that does not fit the status.
    """

    score: float | None
    status: str
    reason: str
    column_mapping: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        expected = None if self.status in EXCLUDED_STATUSES else (1.0 if self.status == "match" else 0.0)
        if self.score != expected:
            raise ValueError(f"status {self.status!r} needs score {expected!r}, got {self.score!r}")

    @property
    def reward(self) -> float:
        """The EX reward component: ``score``, or ``0.0`` when the score is undefined (never positive
        for a sample the agent cannot get right, such as an empty gold)."""
        return 0.0 if self.score is None else self.score

    @property
    def counts_in_mean(self) -> bool:
        """``False`` for ``gold_empty`` and ``gold_error`` samples, which EX means leave out."""
        return self.score is not None


# -- ordered golds ---------------------------------------------------------------------------
def _ordered_by_tokens(sql: str) -> bool:
    """Fallback when sqlglot cannot parse: is there an ``ORDER BY`` token outside all parentheses?"""
    try:
        tokens = Tokenizer().tokenize(sql)
    except SqlglotError as e:
        raise SQLParseError(sql, f"cannot tokenize: {str(e).splitlines()[0][:200]}") from e
    depth = 0
    for t in tokens:
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif t.token_type == TokenType.ORDER_BY and depth == 0:
            return True
    return False


@functools.lru_cache(maxsize=8192)
def gold_is_ordered(gold_sql: str) -> bool:
    """``True`` when the gold SQL's outermost query has an ``ORDER BY`` (ABISS App. A, tolerance 1).

    An ``ORDER BY`` inside a subquery, a CTE or an ``IN (...)`` list does not order the result and
    does not count; one after a compound query (``UNION ... ORDER BY``) does. Read from the sqlglot
    AST; if sqlglot cannot parse the SQL, from its tokens at parenthesis depth 0. Cached per SQL text.

    Raises:
        SQLParseError: the SQL is empty or cannot even be tokenized.
    """
    try:
        tree = parse_sql(gold_sql)
    except SQLParseError:
        if not isinstance(gold_sql, str) or not gold_sql.strip():
            raise
        return _ordered_by_tokens(gold_sql)
    while isinstance(tree, (exp.Subquery, exp.Paren)):
        tree = tree.this
    return tree.args.get("order") is not None


# -- value normalisation ---------------------------------------------------------------------
def normalise_value(value):
    """Comparison key of one result cell: floats rounded to :data:`FLOAT_SIGNIFICANT_DIGITS`
    significant digits; ``int``, ``str``, ``bytes`` and ``None`` unchanged. Since ``3 == 3.0`` and
    ``hash(3) == hash(3.0)`` in Python, ints and floats compare by value; ``None`` stays distinct
    from ``0`` and ``''``. Values that fall on opposite sides of a rounding boundary can still differ.
    """
    if type(value) is float:
        return float(f"{value:.{FLOAT_SIGNIFICANT_DIGITS}g}")
    return value


def _columns(rows: Sequence[tuple]) -> tuple[list[tuple], bool]:
    """Non-empty rows to normalised columns (each a tuple of comparison keys), and whether any
    value changed (only columns holding a float are normalised)."""
    cols = list(zip(*rows))
    changed = False
    for j, col in enumerate(cols):
        if any(type(v) is float for v in col):
            cols[j] = tuple(map(normalise_value, col))
            changed = True
    return cols, changed


# -- column matching -------------------------------------------------------------------------
class _BudgetExceeded(Exception):
    pass


def _search(gcols: list[tuple], pseqs: list[tuple], cands: list[list[int]], capacity: list[int],
            budget: int) -> list[int] | None:
    """Assign each gold column a prediction class so that the joint bag of rows matches.

    Depth-first, most constrained gold column first. At each depth every row carries an id for its
    values on the gold columns assigned so far; gold and prediction ids come from one shared table,
    so equal ids mean equal value tuples and comparing id Counters compares the projected bags.

    Returns the class per gold column, or ``None`` when no assignment exists.

    Raises:
        _BudgetExceeded: more than ``budget`` row checks were needed.
    """
    m = len(gcols)
    n = len(gcols[0])
    order = sorted(range(m), key=lambda i: (len(cands[i]), i))
    assignment: list[int] = [-1] * m
    remaining = list(capacity)
    work = 0
    zeros = [0] * n

    def frame(depth: int, gids: list[int], pids: list[int]) -> list:
        i = order[depth]
        table: dict = {}
        new_g = [table.setdefault(key, len(table)) for key in zip(gids, gcols[i])]
        return [i, iter(cands[i]), table, new_g, Counter(new_g), pids, -1]

    frames = [frame(0, zeros, zeros)]
    while frames:
        f = frames[-1]
        i, it, table, new_g, gcount, pids, chosen = f
        if chosen >= 0:  # back from a failed child: free the class chosen here
            remaining[chosen] += 1
            f[6] = -1
        advanced = False
        for c in it:
            if remaining[c] == 0:
                continue
            work += n
            if work > budget:
                raise _BudgetExceeded
            get = table.get
            new_p = [get(key, -1) for key in zip(pids, pseqs[c])]
            if len(frames) > 1 and Counter(new_p) != gcount:  # depth 0: candidates share gold's bag
                continue
            remaining[c] -= 1
            f[6] = c
            assignment[i] = c
            if len(frames) == m:
                return assignment
            frames.append(frame(len(frames), new_g, new_p))
            advanced = True
            break
        if not advanced:
            frames.pop()
    return None


def _match_columns(gcols: list[tuple], pcols: list[tuple], ordered: bool, budget: int
                   ) -> tuple[str, tuple[int, ...] | None, str]:
    """Find gold column -> prediction column, one-to-one. Returns (status, mapping, reason)."""
    # Identical prediction columns form one class: trying one member stands for all of them.
    classes: dict[tuple, list[int]] = {}
    for j, col in enumerate(pcols):
        classes.setdefault(col, []).append(j)
    pseqs = list(classes)
    members = list(classes.values())
    if ordered:
        index = {seq: c for c, seq in enumerate(pseqs)}
        cands = [[index[g]] if g in index else [] for g in gcols]
    else:
        bag_of = [frozenset(Counter(seq).items()) for seq in pseqs]
        by_bag: dict[frozenset, list[int]] = {}
        for c, bag in enumerate(bag_of):
            by_bag.setdefault(bag, []).append(c)
        cands = [by_bag.get(frozenset(Counter(g).items()), []) for g in gcols]
        for i, cs in enumerate(cands):  # try the class holding the same position first
            cands[i] = sorted(cs, key=lambda c: (i not in members[c], members[c][0]))
    missing = [i for i, cs in enumerate(cands) if not cs]
    if missing:
        what = "sequence" if ordered else "bag"
        return "mismatch", None, f"no prediction column has the {what} of values of gold column(s) {missing}"
    if ordered:
        need = Counter(cs[0] for cs in cands)
        short = [c for c, k in need.items() if k > len(members[c])]
        if short:
            return "mismatch", None, "gold repeats a column more often than the prediction does"
        assignment = [cs[0] for cs in cands]
    elif len(gcols) == 1:  # one gold column: an equal bag is an equal bag of rows
        assignment = [cands[0][0]]
    else:
        try:
            found = _search(gcols, pseqs, cands, [len(ms) for ms in members], budget)
        except _BudgetExceeded:
            return "undetermined", None, f"column matching gave up after {budget} row checks"
        if found is None:
            return "mismatch", None, "no one-to-one column pairing gives the gold's bag of rows"
        assignment = found
    used = [0] * len(members)
    mapping = []
    for c in assignment:
        mapping.append(members[c][used[c]])
        used[c] += 1
    return "match", tuple(mapping), "ordered rows match" if ordered else "bags of rows match"


def is_empty_result(result: ExecutionResult) -> bool:
    """``True`` when a successful result carries no data: no rows, or rows whose every cell is NULL.

    An aggregate over empty input (``SELECT avg(x) ... WHERE <nothing matches>``) returns one row of
    NULLs; a wrong query over any other empty input returns the same row, so such a gold is as
    unscorable as an empty one. ``COUNT`` gives ``0``, not NULL, and stays an answer (case ex16).
    On ``../shared/data/spider_dev``, 99 of 1,034 Spider dev golds are empty this way (89 without
    rows, 10 with only NULLs), leaving 935 that return data.

    Raises:
        ValueError: ``result`` is a failed result (it has no rows to judge).
    """
    if not result.ok:
        raise ValueError(f"is_empty_result needs a successful result, got error kind {result.error_kind!r}")
    return all(v is None for row in result.rows for v in row)


# -- verdicts --------------------------------------------------------------------------------
def _gold_verdict(gold: ExecutionResult) -> EXVerdict | None:
    """The verdict decided by the gold alone (gold_error, gold_empty), or ``None``."""
    if not gold.ok:
        return EXVerdict(None, "gold_error", f"gold failed to execute ({gold.error_kind}): {gold.error_message}")
    if gold.truncated:
        return EXVerdict(None, "gold_error", f"gold result truncated at {gold.row_count} rows: cannot compare")
    if not gold.columns:
        return EXVerdict(None, "gold_error", "gold returns no columns")
    if not gold.rows:
        return EXVerdict(None, "gold_empty", "gold returns no rows: excluded from EX (ceiling), no reward")
    if is_empty_result(gold):
        return EXVerdict(None, "gold_empty",
                         "gold returns only NULL values: excluded from EX (ceiling), no reward")
    return None


def compare_results(pred: ExecutionResult, gold: ExecutionResult, *, ordered: bool,
                    search_budget: int = DEFAULT_SEARCH_BUDGET) -> EXVerdict:
    """Relaxed EX of two execution results (ABISS App. A; see the module docstring for the rules).

    Checked in this order: gold error or truncated gold (``gold_error``), empty gold
    (``gold_empty``), prediction error including timeout (``pred_error``), fewer prediction columns
    than gold columns or a different row count, including a truncated prediction (``mismatch``),
    then column matching (``match`` / ``mismatch`` / ``undetermined``).

    Args:
        pred: the prediction's result.
        gold: the gold's result.
        ordered: compare row sequences (gold has a top-level ORDER BY, :func:`gold_is_ordered`).
        search_budget: most row checks for the unordered column search.

    Returns:
        EXVerdict; on a match ``column_mapping[i]`` is the prediction column paired with gold column ``i``.
    """
    early = _gold_verdict(gold)
    if early is not None:
        return early
    if not pred.ok:
        return EXVerdict(0.0, "pred_error", f"prediction failed ({pred.error_kind}): {pred.error_message}")
    m, k = len(gold.columns), len(pred.columns)
    if k < m:
        return EXVerdict(0.0, "mismatch", f"prediction has {k} column(s), gold has {m}")
    if pred.truncated:
        return EXVerdict(0.0, "mismatch", f"prediction has more than {pred.row_count} rows, gold has {gold.row_count}")
    if pred.row_count != gold.row_count:
        return EXVerdict(0.0, "mismatch", f"prediction has {pred.row_count} row(s), gold has {gold.row_count}")
    if k == m and pred.rows == gold.rows:  # fast path: a correct query's usual result
        return EXVerdict(1.0, "match", "identical results", tuple(range(m)))
    gcols, g_changed = _columns(gold.rows)
    pcols, p_changed = _columns(pred.rows)
    if k == m and not ordered:  # fast path: the same columns in the same places, rows reordered
        grows = list(zip(*gcols)) if g_changed else gold.rows
        prows = list(zip(*pcols)) if p_changed else pred.rows
        if Counter(prows) == Counter(grows):
            return EXVerdict(1.0, "match", "bags of rows match", tuple(range(m)))
    status, mapping, reason = _match_columns(gcols, pcols, ordered, search_budget)
    return EXVerdict(1.0 if status == "match" else 0.0, status, reason, mapping)


def relaxed_ex(pred_sql: str, gold_sql: str, sandbox: SQLiteSandbox, *, gold_key: str | None = None
               ) -> EXVerdict:
    """Execute gold and prediction in ``sandbox`` and score the prediction by relaxed EX.

    The gold runs first (through :meth:`SQLiteSandbox.execute_gold` when ``gold_key`` is given, so
    it is computed once per sample); when the gold alone decides the verdict (``gold_error``,
    ``gold_empty``) the prediction is not run. A prediction that fails, including a timeout, is
    ``pred_error`` with score 0.

    Raises:
        TypeError: ``pred_sql`` or ``gold_sql`` is not a ``str``.
        SandboxClosedError: the sandbox was closed.
    """
    if not isinstance(pred_sql, str) or not isinstance(gold_sql, str):
        raise TypeError("pred_sql and gold_sql must be str")
    gold = sandbox.execute_gold(gold_key, gold_sql) if gold_key is not None else sandbox.execute(gold_sql)
    early = _gold_verdict(gold)
    if early is not None:
        return early
    try:
        ordered = gold_is_ordered(gold_sql)
    except SQLParseError as e:
        return EXVerdict(None, "gold_error", f"cannot tell whether the gold is ordered: {e.reason}")
    return compare_results(sandbox.execute(pred_sql), gold, ordered=ordered)
