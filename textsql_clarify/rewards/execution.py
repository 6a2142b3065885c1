"""Relaxed execution accuracy (EX): ABISS App. A on top of the sandbox's results.

Two results are equivalent when the prediction, projected onto some one-to-one choice of its
columns, gives the gold's rows (ABISS App. A, tolerances 1 to 4):

* row order is ignored (rows compare as bags), unless the gold SQL has a top-level ``ORDER BY``;
  then the projected rows must come in the gold's order. Under ``ORDER BY ... LIMIT`` the rows tied
  with the last kept row are interchangeable (option ``limit_ties``, :class:`EXOptions`);
* column names and column order are ignored;
* column supersets pass, within a bound: the prediction may have extra columns, provided that the
  projected bag of rows equals the gold's bag. Multiplicity counts and nothing is deduplicated after
  projection, else ``SELECT *`` would pass every single-column ``DISTINCT`` gold (case ex18). The
  tolerance exists for auxiliary columns (a key, a grouping column, the count a HAVING uses; ABISS
  App. A), not for guessing: at most :data:`MAX_EXTRA_COLUMNS` extra columns, and
  :data:`MAX_EXTRA_COLUMNS_SINGLE_ROW` when the gold has one row, count, where an extra column counts
  only when it could stand for a gold column (its values have the same types as some gold column's;
  identical columns count once), and against a one-row gold the columns of other types count once more,
  as one block (a typed hedge gets one allowance, not one per type). A prediction column whose SQL expression is a constant
  (:func:`~textsql_clarify.rewards.ex_sql.projection_info`) never pairs with a gold column read from
  data. ``ex_strict`` (:func:`score_execution`) allows no extra column at all;
* numbers compare by value (``3 == 3.0``); floats are rounded to :data:`FLOAT_SIGNIFICANT_DIGITS`
  significant digits first, so sums taken in another order still match. Text never equals a
  number (``'3' != 3``). NULL only equals NULL, never ``0`` or ``''`` (ABISS App. A: NULL
  disagreements are non-equivalent; case ex13).

Outcomes that are not the agent's doing are kept apart (score ``None``, left out of EX means):
a gold that fails to execute (``gold_error``, case ex22), a gold whose result depends on the clock or
on randomness (``gold_nondeterministic``: ``date('now')``, ``random()``, ...; option
``exclude_nondeterministic_gold``) and a gold without data, i.e. no rows or only NULL cells
(``gold_empty``, :func:`is_empty_result`: an empty prediction would "match" by chance, so such a sample
can never earn reward and is counted apart as a ceiling on EX; case ex16 shows why ``[]`` is not an
answer while ``[(0,)]`` is).

Column matching is polynomial in practice: each gold column's candidates are the prediction's
columns with the same bag of values (identical prediction columns merged into one class), then a
depth-first search assigns the most constrained gold column first and checks, at every step, the
joint bag of the columns assigned so far by refining per-row ids in one pass (so a wrong pairing
such as case ex04's ``goals``/``assists`` is cut at once). The search's work is capped
(:data:`DEFAULT_SEARCH_BUDGET` row checks); past the cap the verdict is ``undetermined``, scored 0.
An ordered gold needs no search: each gold column must equal a prediction column as a sequence.
"""
from __future__ import annotations

import dataclasses
import functools
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Tokenizer, TokenType

from ..sql.sandbox import ExecutionResult, SQLiteSandbox
from ..errors import SQLParseError
from ..sql.schema import parse_sql
from .ex_sql import (ColumnInfo, _names_key, column_reads, gold_nondeterminism, independent_answers,
                     limit_ties_query, projection_info)

#: Verdict statuses of :class:`EXVerdict`.
STATUSES = ("match", "mismatch", "gold_empty", "gold_error", "gold_nondeterministic", "pred_error", "undetermined")
#: Statuses whose sample is left out of EX means (``score is None``).
EXCLUDED_STATUSES = ("gold_empty", "gold_error", "gold_nondeterministic")
#: Most extra prediction columns that could stand for a gold column (see :func:`extra_columns`) when the
#: gold has two rows or more: room for a key, a grouping column and the aggregate a HAVING or ORDER BY
#: uses (ABISS App. A's auxiliary columns), all three at once.
MAX_EXTRA_COLUMNS = 3
#: The same bound when the gold has exactly one row. Every extra column of a one-row answer is one more
#: guess at a single cell: ``SELECT 0, 1, 2, 3`` (three extras) matched 82 of the 935 scorable Spider dev
#: golds, ``count(*)`` of three tables 57. One extra keeps "which student has the highest GPA" answered
#: with name and GPA (and with a key too: a number is no guess at a text cell).
MAX_EXTRA_COLUMNS_SINGLE_ROW = 1
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
        second_answer: the mismatch is a second answer beside the first (extra columns that answer from an
            independent query, :func:`_independent_answers_verdict`): a hedge, which partial credit must not
            pay either.

    Raises:
        ValueError: unknown ``status``, or a ``score`` that does not fit the status.
    """

    score: float | None
    status: str
    reason: str
    column_mapping: tuple[int, ...] | None = None
    second_answer: bool = False

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
        """``False`` for ``gold_empty``, ``gold_error`` and ``gold_nondeterministic`` samples, which EX means
        leave out."""
        return self.score is not None


@dataclass(frozen=True)
class EXOptions:
    """The policy options of relaxed EX; ``gym.make("TextSQLClarify-v0", ex_options={...})`` takes them as a
    mapping (:meth:`from_mapping`). Defaults are the env's; ``docs/metrics.md`` argues each.

    Attributes:
        max_extra_columns: bound on extra prediction columns that could stand for a gold column, gold of
            two rows or more (:data:`MAX_EXTRA_COLUMNS`); ``None``: unbounded (ABISS App. A as written).
        max_extra_columns_single_row: the same for a one-row gold (:data:`MAX_EXTRA_COLUMNS_SINGLE_ROW`).
        constant_columns: a prediction column whose SQL expression is constant never pairs with a gold
            column read from data (:func:`~textsql_clarify.rewards.ex_sql.projection_info`).
        limit_ties: under a gold ``ORDER BY ... LIMIT n``, any row whose ORDER BY keys equal those of the
            last kept row may take its place, and tied rows may come in any order (public scorer bug
            reports: the LIMIT keeps an arbitrary subset of the ties). Default ``True``.
        round_to_gold_precision: a gold column ``ROUND(x, d)`` is compared at ``d`` decimals (SQLite's
            ``round``) with a prediction column that does not round. Default ``True``.
        exclude_nondeterministic_gold: a gold that reads the clock or randomness
            (:func:`~textsql_clarify.rewards.ex_sql.gold_nondeterminism`) is ``gold_nondeterministic``:
            score ``None``, left out of EX means, counted apart like an empty gold. Default ``True``.

    Raises:
        ValueError: a bound that is not ``None`` or an int >= 0, or a flag that is not a bool.
    """

    max_extra_columns: int | None = MAX_EXTRA_COLUMNS
    max_extra_columns_single_row: int | None = MAX_EXTRA_COLUMNS_SINGLE_ROW
    constant_columns: bool = True
    limit_ties: bool = True
    round_to_gold_precision: bool = True
    exclude_nondeterministic_gold: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name.startswith("max_"):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                    raise ValueError(f"ex option {f.name} must be None or an int >= 0, got {v!r}")
            elif not isinstance(v, bool):
                raise ValueError(f"ex option {f.name} must be a bool, got {v!r}")

    @classmethod
    def from_mapping(cls, options: "EXOptions | Mapping[str, Any] | None") -> "EXOptions":
        """``None`` -> the defaults; an :class:`EXOptions` as is; a mapping of field names -> options.

        Raises:
            ValueError: an unknown option name (the message lists the known ones) or a bad value.
        """
        if options is None:
            return cls()
        if isinstance(options, cls):
            return options
        if not isinstance(options, Mapping):
            raise ValueError(f"ex_options must be a mapping of option names, got {type(options).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ValueError(f"unknown ex option(s) {unknown}; known: {names}")
        return cls(**dict(options))


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


def _match_columns(gcols: list[tuple], pcols: list[tuple], ordered: bool, budget: int,
                   pconst: frozenset[int] = frozenset(), gconst: frozenset[int] = frozenset()
                   ) -> tuple[str, tuple[int, ...] | None, str]:
    """Find gold column -> prediction column, one-to-one. Returns (status, mapping, reason).

    A prediction column in ``pconst`` (constant SQL expression) may only pair with a gold column in
    ``gconst`` (constant too)."""
    # Identical prediction columns form one class: trying one member stands for all of them.
    classes: dict[tuple, list[int]] = {}
    for j, col in enumerate(pcols):
        classes.setdefault((col, j in pconst), []).append(j)
    pseqs = [key[0] for key in classes]
    const = [key[1] for key in classes]
    members = list(classes.values())
    if ordered:
        index: dict[tuple, list[int]] = {}
        for c, seq in enumerate(pseqs):
            index.setdefault(seq, []).append(c)
        cands = [[c for c in index.get(g, []) if not const[c] or i in gconst] for i, g in enumerate(gcols)]
    else:
        bag_of = [frozenset(Counter(seq).items()) for seq in pseqs]
        by_bag: dict[frozenset, list[int]] = {}
        for c, bag in enumerate(bag_of):
            by_bag.setdefault(bag, []).append(c)
        cands = [[c for c in by_bag.get(frozenset(Counter(g).items()), []) if not const[c] or i in gconst]
                 for i, g in enumerate(gcols)]
        for i, cs in enumerate(cands):  # try the class holding the same position first
            cands[i] = sorted(cs, key=lambda c: (i not in members[c], members[c][0]))
    missing = [i for i, cs in enumerate(cands) if not cs]
    if missing:
        what = "sequence" if ordered else "bag"
        if pconst and any(cs for cs in _unfiltered(gcols, pseqs, ordered, missing)):
            return "mismatch", None, (f"only constant prediction columns (no value read from a table) have the "
                                      f"{what} of values of gold column(s) {missing}")
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


def _unfiltered(gcols: list[tuple], pseqs: list[tuple], ordered: bool, which: list[int]) -> list[bool]:
    """For the reason only: would gold columns ``which`` have a candidate without the constant rule?"""
    if ordered:
        seqs = set(pseqs)
        return [gcols[i] in seqs for i in which]
    bags = {frozenset(Counter(seq).items()) for seq in pseqs}
    return [frozenset(Counter(gcols[i]).items()) in bags for i in which]


def _type_class(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


def extra_columns(gold_cols: Sequence[tuple], pred_cols: Sequence[tuple], single_row: bool = False) -> int:
    """How many extra prediction columns count against the width bound (the quantity the bound caps).

    Counted over distinct columns (identical value sequences count once, so repeating a column adds
    nothing), among the prediction columns whose bag of value types (NULL, number, text, blob) equals
    some gold column's: only such a column can ever pair with a gold column (text never equals a number),
    so only such a column is a guess at this gold. The count is the number of those distinct prediction
    columns minus the number of distinct gold columns; a matching prediction uses exactly that many of them.

    Against a one-row gold (``single_row``) the columns of the other types add one more when there are any,
    however many they are: they are a guess that the gold's cell has another type (a policy that does not
    know the gold's type spreads its guesses over the types), so the one-row allowance holds either one
    more guess of the gold's type or a block of other-typed columns, never both. "Which student has the
    highest GPA" answered with key, name and GPA still passes (one block of numbers next to the text
    answer); ``count(*), count(*) * 0, <a text mode>`` does not.

    Args:
        gold_cols, pred_cols: normalised columns (each a tuple of comparison keys, one per row).
        single_row: the gold has one row (the block of other-typed columns counts as one).

    Returns:
        An int (negative when the prediction has fewer such columns than the gold, which then cannot match).
    """
    gtypes = {frozenset(Counter(map(_type_class, col)).items()) for col in gold_cols}
    guesses = set()
    other_types = False
    for col in pred_cols:
        if frozenset(Counter(map(_type_class, col)).items()) in gtypes:
            guesses.add(col)
        else:
            other_types = True
    return len(guesses) - len(set(gold_cols)) + (1 if single_row and other_types else 0)


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
    for row in result.rows:  # a plain loop: a generator per call cost more than the scan of a usual gold
        for v in row:
            if v is not None:
                return False
    return True


# -- verdicts --------------------------------------------------------------------------------
def _gold_verdict(gold: ExecutionResult, nondeterministic: str | None = None) -> EXVerdict | None:
    """The verdict decided by the gold alone (gold_error, gold_nondeterministic, gold_empty), or ``None``."""
    if not gold.ok:
        return EXVerdict(None, "gold_error", f"gold failed to execute ({gold.error_kind}): {gold.error_message}")
    if gold.truncated:
        return EXVerdict(None, "gold_error", f"gold result truncated at the row cap ({gold.row_count} rows fetched): "
                                             "cannot compare; a ceiling (score None), a larger row_cap scores it")
    if not gold.columns:
        return EXVerdict(None, "gold_error", "gold returns no columns")
    if nondeterministic:
        return EXVerdict(None, "gold_nondeterministic",
                         f"gold depends on the clock or on randomness ({nondeterministic}): "
                         "excluded from EX, no reward")
    if not gold.rows:
        return EXVerdict(None, "gold_empty", "gold returns no rows: excluded from EX (ceiling), no reward")
    if is_empty_result(gold):
        return EXVerdict(None, "gold_empty",
                         "gold returns only NULL values: excluded from EX (ceiling), no reward")
    return None


def gold_scorability(gold: ExecutionResult, nondeterministic: str | None = None) -> str:
    """Whether a gold result can score a prediction: ``ok``, or the reason it cannot, as the EX verdict
    would give it (ABISS App. A; the evaluation article's ceilings): ``error`` (fails, truncated, no
    columns), ``nondeterministic`` (``nondeterministic`` names what it reads: the clock or randomness) or
    ``empty`` (no rows, or only NULLs). One rule for the env's episode-end conventions and the verdicts.
    """
    early = _gold_verdict(gold, nondeterministic)
    return "ok" if early is None else {"gold_error": "error", "gold_nondeterministic": "nondeterministic",
                                       "gold_empty": "empty"}[early.status]


def _compare(pred: ExecutionResult, gold: ExecutionResult, ordered: bool, search_budget: int,
             pconst: frozenset[int], gconst: frozenset[int], max_extra: int | None, max_extra_single: int | None,
             strict: bool, gold_checked: bool = False, sources=None) -> tuple[EXVerdict, bool]:
    """:func:`compare_results`, plus whether the verdict came from column matching (a mismatch that the
    tie and rounding options may still turn into a match). ``gold_checked``: the caller already found that
    :func:`_gold_verdict` decides nothing for ``gold`` (it is not checked again). ``sources``: a callable
    giving ``(pred reads, gold reads)`` (:func:`~textsql_clarify.rewards.ex_sql.column_reads`, either
    ``None``) for the independent-answer rule, or ``None``. ``pconst`` may be a callable returning the set: it
    is then called only where the verdict depends on it (``docs/platform.md`` "Step cost": a prediction that
    fails, has too few columns or rows of another count, or that no column selection can make the gold's is
    judged without reading its SQL)."""
    const_of = pconst if callable(pconst) else (lambda: pconst)
    if not gold_checked:
        early = _gold_verdict(gold)
        if early is not None:
            return early, False
    if not pred.ok:
        return EXVerdict(0.0, "pred_error", f"prediction failed ({pred.error_kind}): {pred.error_message}"), False
    m, k = len(gold.columns), len(pred.columns)
    if k < m:
        return EXVerdict(0.0, "mismatch", f"prediction has {k} column(s), gold has {m}"), False
    if strict and k != m:
        return EXVerdict(0.0, "mismatch", f"prediction has {k} column(s), gold has {m} (strict: no extra column)"
                         ), False
    if pred.truncated:
        return EXVerdict(0.0, "mismatch",
                         f"prediction has more than {pred.row_count} rows, gold has {gold.row_count}"), False
    if pred.row_count != gold.row_count:
        return EXVerdict(0.0, "mismatch", f"prediction has {pred.row_count} row(s), gold has {gold.row_count}"), False
    data_cols = [j for j in range(m) if j not in gconst]

    def identity_ok() -> bool:  # no constant prediction column sits where the gold's column reads data
        if not data_cols:
            return True
        pc = const_of()
        return not pc or all(j not in pc for j in data_cols)

    if k == m and pred.rows == gold.rows and identity_ok():  # fast path: a correct query's usual result
        return EXVerdict(1.0, "match", "identical results", tuple(range(m))), False
    gcols, g_changed = _columns(gold.rows)
    pcols, p_changed = _columns(pred.rows)
    if k > m:
        cap = max_extra_single if gold.row_count == 1 else max_extra
        if cap is not None:
            extra = extra_columns(gcols, pcols, gold.row_count == 1)
            if extra > cap:
                if gold.row_count == 1:
                    return EXVerdict(0.0, "mismatch", f"prediction has {extra} extra column(s) or blocks of another "
                                                      f"type; at most {cap} allowed against a one-row gold"), False
                return EXVerdict(0.0, "mismatch", f"prediction has {extra} extra column(s) that could stand for gold "
                                                  f"columns; at most {cap} allowed against a gold of several rows"
                                 ), False
        if sources is not None:
            gtypes = {frozenset(Counter(map(_type_class, col)).items()) for col in gcols}
            other = frozenset(j for j, col in enumerate(pcols)
                              if frozenset(Counter(map(_type_class, col)).items()) not in gtypes)
            verdict = _independent_answers_verdict(sources, lambda: const_of() | other, m)
            if verdict is not None:
                return verdict, False
    if k == m and not ordered:  # fast path: the same columns in the same places, rows reordered
        grows = list(zip(*gcols)) if g_changed else gold.rows
        prows = list(zip(*pcols)) if p_changed else pred.rows
        if Counter(prows) == Counter(grows) and identity_ok():
            return EXVerdict(1.0, "match", "bags of rows match", tuple(range(m))), False
    if _no_candidate_for_data(gcols, pcols, ordered, gconst):
        # some gold column that reads data has no prediction column of its values at all, and none that does has
        # one: the constant rule removes no candidate, so the verdict and its reason are those without it
        what = "sequence" if ordered else "bag"
        missing = _missing(gcols, pcols, ordered)
        return EXVerdict(0.0, "mismatch", f"no prediction column has the {what} of values of gold column(s) "
                                          f"{missing}"), True
    status, mapping, reason = _match_columns(gcols, pcols, ordered, search_budget, const_of(), gconst)
    return EXVerdict(1.0 if status == "match" else 0.0, status, reason, mapping), status == "mismatch"


def _value_keys(gcols: list[tuple], pcols: list[tuple], ordered: bool) -> tuple[list, set]:
    """Per gold column the key a prediction column must share to pair with it (its sequence, ordered; else its
    bag of values), and the set of the prediction columns' keys."""
    if ordered:
        return list(gcols), set(pcols)
    return ([frozenset(Counter(g).items()) for g in gcols],
            {frozenset(Counter(p).items()) for p in set(pcols)})


def _missing(gcols: list[tuple], pcols: list[tuple], ordered: bool) -> list[int]:
    """The gold columns no prediction column has the values of (sequence, ordered; else bag)."""
    gkeys, pkeys = _value_keys(gcols, pcols, ordered)
    return [i for i, g in enumerate(gkeys) if g not in pkeys]


def _no_candidate_for_data(gcols: list[tuple], pcols: list[tuple], ordered: bool, gconst: frozenset[int]) -> bool:
    """Whether :func:`_match_columns` is a mismatch whatever the prediction's constant columns are, with the
    reason it gives when there are none: some gold column has no candidate at all, and every gold column that
    reads data (not in ``gconst``) has none (so the constant rule, which only removes candidates of such
    columns, changes neither the missing columns nor the reason)."""
    gkeys, pkeys = _value_keys(gcols, pcols, ordered)
    data = [gkeys[i] in pkeys for i in range(len(gkeys)) if i not in gconst]
    return bool(data) and not any(data)


def _independent_answers_verdict(sources, pconst, m: int) -> EXVerdict | None:
    """The mismatch of a prediction with extra columns whose data columns of a gold column's value types (the
    columns left out of ``pconst``) answer from more independent queries than the gold's do (:func:`~textsql_clarify.rewards.ex_sql.independent_answers`), else ``None``.

    ABISS App. A tolerates extra columns as auxiliary columns of the answering query (a key, a grouping column,
    the aggregate a HAVING or ORDER BY uses): they read the same joined sources as the answer. A column read
    from a source that no predicate joins to the rest (a cross join, an uncorrelated scalar subquery) is
    another query's answer beside it: ``SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b)`` is two
    guesses at a one-row count, ``SELECT * FROM (reading 1), (reading 2)`` two readings of an ambiguous
    question. Either side unanalysable: no verdict (the width bound alone decides). ``pconst``: the excluded
    columns, or a callable giving them (called only when the prediction's reads are known). Source: ours.
    """
    preads, greads = sources()
    if preads is None:
        return None
    if callable(pconst):
        pconst = pconst()
    n_pred = independent_answers([r for j, r in enumerate(preads) if j not in pconst])
    n_gold = max(1, independent_answers(greads) if greads is not None else m)
    if n_pred <= n_gold:
        return None
    return EXVerdict(0.0, "mismatch", f"prediction's columns answer from {n_pred} independent queries (sources no "
                                      f"predicate joins), the gold's from {n_gold}: an extra column must be "
                                      "auxiliary to the answering query, not a second answer",
                     second_answer=True)


def compare_results(pred: ExecutionResult, gold: ExecutionResult, *, ordered: bool,
                    search_budget: int = DEFAULT_SEARCH_BUDGET,
                    pred_constant_columns: frozenset[int] = frozenset(),
                    gold_constant_columns: frozenset[int] = frozenset(),
                    max_extra_columns: int | None = MAX_EXTRA_COLUMNS,
                    max_extra_columns_single_row: int | None = MAX_EXTRA_COLUMNS_SINGLE_ROW,
                    strict: bool = False) -> EXVerdict:
    """Relaxed EX of two execution results (ABISS App. A; see the module docstring for the rules).

    Checked in this order: gold error or truncated gold (``gold_error``), empty gold
    (``gold_empty``), prediction error including timeout (``pred_error``), fewer prediction columns
    than gold columns (under ``strict``, any other number of columns) or a different row count,
    including a truncated prediction (``mismatch``), too many extra columns (``mismatch``,
    :func:`extra_columns`), then column matching (``match`` / ``mismatch`` / ``undetermined``).

    This works on results alone; :func:`score_execution` reads the SQL too (constant columns, ties,
    rounding, nondeterministic golds) and is what the env uses.

    Args:
        pred: the prediction's result.
        gold: the gold's result.
        ordered: compare row sequences (gold has a top-level ORDER BY, :func:`gold_is_ordered`).
        search_budget: most row checks for the unordered column search.
        pred_constant_columns: prediction columns whose SQL expression is constant
            (:func:`~textsql_clarify.rewards.ex_sql.constant_columns`); they pair only with gold columns
            in ``gold_constant_columns``. Empty (the default): every column counts as read from data.
        gold_constant_columns: gold columns whose SQL expression is constant.
        max_extra_columns: bound on :func:`extra_columns` for a gold of two rows or more; ``None``: unbounded.
        max_extra_columns_single_row: the same for a one-row gold.
        strict: no column superset at all: the prediction must have the gold's number of columns
            (``ex_strict``). Names and column order are still ignored.

    Returns:
        EXVerdict; on a match ``column_mapping[i]`` is the prediction column paired with gold column ``i``.
    """
    return _compare(pred, gold, ordered, search_budget, frozenset(pred_constant_columns),
                    frozenset(gold_constant_columns), max_extra_columns, max_extra_columns_single_row, strict)[0]


# -- rounding at the gold's precision ------------------------------------------------------------
_ROUND_LOCAL = threading.local()


def sqlite_round(values: Sequence[float], digits: int) -> list[float]:
    """SQLite's ``round(x, digits)`` of each value, computed by SQLite itself (in memory) so that halves
    round exactly as they do in a gold's ``ROUND``. Non-float values are returned unchanged."""
    con = getattr(_ROUND_LOCAL, "con", None)
    if con is None:
        con = _ROUND_LOCAL.con = sqlite3.connect(":memory:")
    out = list(values)
    idx = [i for i, v in enumerate(values) if type(v) is float]
    for start in range(0, len(idx), 400):
        chunk = idx[start:start + 400]
        sql = "SELECT round(column1, ?) FROM (VALUES " + ",".join("(?)" for _ in chunk) + ")"
        got = con.execute(sql, [digits] + [values[i] for i in chunk]).fetchall()
        for i, (r,) in zip(chunk, got):
            out[i] = r
    return out


def _rounded_prediction(pred: ExecutionResult, gold: ExecutionResult, ginfo: Sequence[ColumnInfo],
                        pinfo) -> ExecutionResult | None:
    """The prediction with each unrounded float column rounded at the precision of a gold ``ROUND(x, d)``
    column whose bag of values it then has (and no gold column's before rounding); ``None`` if none is.
    ``pinfo``: the prediction's :class:`ColumnInfo` per column (``None``: not aligned), or a callable giving it,
    called only when a float column is met."""
    digits = {i: c.round_digits for i, c in enumerate(ginfo) if c.rounds and c.round_digits is not None}
    if not digits or not pred.rows:
        return None
    gcols, _ = _columns(gold.rows)
    gbags = [Counter(col) for col in gcols]
    pcols = [list(col) for col in zip(*pred.rows)]
    changed = False
    for j, col in enumerate(pcols):
        if not any(type(v) is float for v in col):
            continue
        if callable(pinfo):
            pinfo = pinfo()
        if pinfo is not None and pinfo[j].rounds:
            continue
        if Counter(map(normalise_value, col)) in gbags:
            continue  # it already has some gold column's values
        for d in sorted(set(digits.values())):
            rounded = sqlite_round(col, d)
            bag = Counter(map(normalise_value, rounded))
            if any(gbags[i] == bag for i, dd in digits.items() if dd == d):
                pcols[j] = rounded
                changed = True
                break
    if not changed:
        return None
    return dataclasses.replace(pred, rows=tuple(zip(*pcols)))


# -- ORDER BY ... LIMIT ties ---------------------------------------------------------------------
def _tie_segments(ext: ExecutionResult, m: int, n_keys: int, offset: int, n: int) -> list[tuple[int, int, list]] | None:
    """``(start, end, rows)`` per group of equal ORDER BY keys met by the kept window ``[offset, offset + n)``
    of the tie-extended gold ``ext``: positions relative to the window and the group's rows (all of them,
    inside and outside the window, normalised, gold columns only). ``None`` when no group has ties."""
    rows = ext.rows
    if len(rows) < offset + n or ext.truncated:
        return None
    keys = [tuple(map(normalise_value, r[m:m + n_keys])) for r in rows]
    starts = [0] + [i for i in range(1, len(rows)) if keys[i] != keys[i - 1]] + [len(rows)]
    segs = []
    tied = False
    for a, b in zip(starts, starts[1:]):
        lo, hi = max(a, offset), min(b, offset + n)
        if lo >= hi:
            continue
        tied |= b - a > 1
        segs.append((lo - offset, hi - offset, [tuple(map(normalise_value, r[:m])) for r in rows[a:b]]))
    return segs if tied else None


def _tie_match(pcols: list[tuple], segs: list[tuple[int, int, list]], m: int, pconst: frozenset[int],
               gconst: frozenset[int], budget: int) -> tuple[int, ...] | None:
    """A one-to-one gold -> prediction column mapping under which each window segment of the prediction's
    rows is a sub-bag of its tie group's rows (equal bags for groups wholly kept), or ``None``."""
    gseg_cols = [[Counter(r[i] for r in rows) for (_, _, rows) in segs] for i in range(m)]
    cands: list[list[int]] = []
    for i in range(m):
        cs = []
        for j, col in enumerate(pcols):
            if j in pconst and i not in gconst:
                continue
            if all(not (Counter(col[a:b]) - gseg_cols[i][s]) for s, (a, b, _) in enumerate(segs)):
                cs.append(j)
        if not cs:
            return None
        cands.append(cs)
    group_bags = [Counter(rows) for (_, _, rows) in segs]
    order = sorted(range(m), key=lambda i: len(cands[i]))
    work = 0
    chosen: dict[int, int] = {}

    def full_check() -> bool:
        for s, (a, b, _) in enumerate(segs):
            got = Counter(tuple(pcols[chosen[i]][r] for i in range(m)) for r in range(a, b))
            if got - group_bags[s]:
                return False
        return True

    def dfs(depth: int) -> bool:
        nonlocal work
        if depth == m:
            work += sum(b - a for a, b, _ in segs)
            return work <= budget and full_check()
        i = order[depth]
        for j in cands[i]:
            if j in chosen.values() or work > budget:
                continue
            chosen[i] = j
            if dfs(depth + 1):
                return True
            del chosen[i]
        return False

    return tuple(chosen[i] for i in range(m)) if dfs(0) else None


# -- the SQL-aware scorer ------------------------------------------------------------------------
def _constant_set(info: Sequence[ColumnInfo] | None) -> frozenset[int]:
    return frozenset() if info is None else frozenset(i for i, c in enumerate(info) if c.constant)


#: most entries :func:`_gold_side` keeps before it starts again
SQL_SIDE_CACHE = 4096
#: ``(gold_sql, schema names key, gold columns, options) -> _gold_side's answer``
_SQL_SIDE: dict[tuple, tuple] = {}


def _gold_side(gold_sql: str, schema: Mapping | None, n_gold: int, opts: EXOptions) -> tuple:
    """What :func:`score_execution` reads from the gold's SQL text alone: ``(nondeterminism, ordered, gold
    projection info, gold constant columns)``, ``ordered`` being the reason text when the gold's ordering cannot
    be read. Each part is a pure function of the text, the schema's names, the column count and the options;
    one lookup per step (``docs/platform.md`` "Step cost"). The prediction's side is read lazily, where a verdict
    depends on it (:func:`score_execution`)."""
    try:
        key = (gold_sql, None if schema is None else _names_key(schema), n_gold,
               opts.exclude_nondeterministic_gold)
        hit = _SQL_SIDE.get(key)
    except TypeError:  # unhashable schema contents: work it out each time
        key, hit = None, None
    if hit is not None:
        return hit
    nondet = gold_nondeterminism(gold_sql) if opts.exclude_nondeterministic_gold else None
    try:
        ordered: bool | str = gold_is_ordered(gold_sql)
    except SQLParseError as e:
        ordered = e.reason
    ginfo = projection_info(gold_sql, schema, n_gold)
    out = (nondet, ordered, ginfo, _constant_set(ginfo))
    if key is not None:
        if len(_SQL_SIDE) >= SQL_SIDE_CACHE:
            _SQL_SIDE.clear()
        _SQL_SIDE[key] = out
    return out


def score_execution(pred: ExecutionResult, gold: ExecutionResult, pred_sql: str, gold_sql: str,
                    sandbox: SQLiteSandbox | None = None, *, gold_key: str | None = None,
                    options: EXOptions | Mapping[str, Any] | None = None,
                    search_budget: int = DEFAULT_SEARCH_BUDGET) -> tuple[EXVerdict, EXVerdict]:
    """Relaxed EX and strict EX of a prediction, reading the two SQL texts as well as their results.

    On top of :func:`compare_results`: the gold is ``gold_nondeterministic`` when it reads the clock or
    randomness (:func:`~textsql_clarify.rewards.ex_sql.gold_nondeterminism`); constant prediction columns
    pair only with constant gold columns (:func:`~textsql_clarify.rewards.ex_sql.projection_info`; ``*``
    expanded from ``sandbox.schema``; a query whose columns cannot be aligned counts as all data); a
    column-matching mismatch is retried with unrounded prediction columns rounded at a gold ``ROUND``'s
    precision (``round_to_gold_precision``) and then with the rows tied under the gold's ``ORDER BY ...
    LIMIT`` (``limit_ties``; runs the tie-extended gold, cached under ``gold_key + "#ties"``).

    Args:
        pred, gold: the two results (the gold's as executed for ``gold_sql``).
        pred_sql, gold_sql: the two SQL texts.
        sandbox: the database (schema for ``*``, and the tie query); ``None``: no ``*`` expansion, no ties.
        gold_key: cache key of the gold in ``sandbox`` (sample id), for the tie query.
        options: :class:`EXOptions` or a mapping of its fields; ``None``: the defaults.
        search_budget: most row checks for each column search.

    Returns:
        ``(relaxed, strict)``: two :class:`EXVerdict`; ``strict`` is ``ex_strict`` (the gold's number of
        columns, no superset tolerance; bags or ordered as the gold says; the same options otherwise).

    Raises:
        ValueError: bad ``options``.
    """
    opts = EXOptions.from_mapping(options)
    schema = sandbox.schema if sandbox is not None else None
    n_pred = len(pred.columns) if pred.ok and pred.columns else None
    nondet, ordered, ginfo, gconst = _gold_side(gold_sql, schema, len(gold.columns), opts)
    early = _gold_verdict(gold, nondet)
    if early is not None:
        return early, early
    if isinstance(ordered, str):
        v = EXVerdict(None, "gold_error", f"cannot tell whether the gold is ordered: {ordered}")
        return v, v
    lazy: dict[str, Any] = {}

    # the prediction's projection (constant and ROUND columns) is read only where a verdict depends on it: a
    # prediction that fails, has fewer columns than the gold, another row count, too many extra columns, or no
    # column with the values of any gold column that reads data is judged without parsing its SQL
    def pinfo():
        if "pinfo" not in lazy:
            lazy["pinfo"] = projection_info(pred_sql, schema, n_pred) if n_pred is not None else None
        return lazy["pinfo"]

    def pconst() -> frozenset[int]:
        if "pconst" not in lazy:
            lazy["pconst"] = _constant_set(pinfo()) if opts.constant_columns else frozenset()
        return lazy["pconst"]

    def rounded() -> ExecutionResult | None:
        if "rounded" not in lazy:
            lazy["rounded"] = _rounded_prediction(pred, gold, ginfo, pinfo) if ginfo is not None else None
        return lazy["rounded"]

    def segments():
        if "segs" not in lazy:
            lazy["segs"] = None
            tq = limit_ties_query(gold_sql) if sandbox is not None and ordered else None
            if tq is not None:
                ext = (sandbox.execute_gold(gold_key + "#ties", tq.sql) if gold_key is not None
                       else sandbox.execute(tq.sql))
                if ext.ok and len(ext.columns) == len(gold.columns) + tq.n_keys:
                    lazy["segs"] = _tie_segments(ext, len(gold.columns), tq.n_keys, tq.offset, gold.row_count)
        return lazy["segs"]

    def sources():
        if "sources" not in lazy:
            lazy["sources"] = (column_reads(pred_sql, schema, n_pred),
                               column_reads(gold_sql, schema, len(gold.columns)))
        return lazy["sources"]

    def run(p: ExecutionResult) -> tuple[EXVerdict, bool]:
        # the gold was checked above (``early``, a superset of _compare's own gold check)
        return _compare(p, gold, ordered, search_budget, pconst, gconst, opts.max_extra_columns,
                        opts.max_extra_columns_single_row, False, True, sources)

    verdict, retry = run(pred)
    candidates = [pred]
    if retry and opts.round_to_gold_precision and rounded() is not None:
        candidates.append(rounded())
        v2, retry2 = run(rounded())
        if v2.status == "match":
            verdict, retry = EXVerdict(1.0, "match", v2.reason + " at the gold's ROUND precision",
                                       v2.column_mapping), False
        else:
            retry = retry and retry2
    if retry and opts.limit_ties and segments() is not None:
        for p in candidates:
            pcols, _ = _columns(p.rows)
            mapping = _tie_match(pcols, segments(), len(gold.columns), pconst(), gconst, search_budget)
            if mapping is not None:
                verdict = EXVerdict(1.0, "match", "rows match, ties under ORDER BY ... LIMIT interchangeable"
                                    + (" (at the gold's ROUND precision)" if p is not pred else ""), mapping)
                break
    # strict differs from relaxed only where the prediction ran and has more columns than the gold (the
    # ``strict and k != m`` check of :func:`_compare` comes after every check that could decide first)
    m, k = len(gold.columns), len(pred.columns)
    if pred.ok and k > m:
        return verdict, EXVerdict(0.0, "mismatch", f"prediction has {k} column(s), gold has {m} (strict: no extra column)")
    return verdict, verdict


def relaxed_ex(pred_sql: str, gold_sql: str, sandbox: SQLiteSandbox, *, gold_key: str | None = None,
               options: EXOptions | Mapping[str, Any] | None = None, strict: bool = False) -> EXVerdict:
    """Execute gold and prediction in ``sandbox`` and score the prediction by relaxed EX
    (:func:`score_execution`; ``strict=True`` gives ``ex_strict``).

    The gold runs first (through :meth:`SQLiteSandbox.execute_gold` when ``gold_key`` is given, so
    it is computed once per sample); when the gold alone decides the verdict (``gold_error``,
    ``gold_nondeterministic``, ``gold_empty``) the prediction is not run. A prediction that fails,
    including a timeout, is ``pred_error`` with score 0.

    Raises:
        TypeError: ``pred_sql`` or ``gold_sql`` is not a ``str``.
        ValueError: bad ``options``.
        SandboxClosedError: the sandbox was closed.
    """
    if not isinstance(pred_sql, str) or not isinstance(gold_sql, str):
        raise TypeError("pred_sql and gold_sql must be str")
    opts = EXOptions.from_mapping(options)
    gold = sandbox.execute_gold(gold_key, gold_sql) if gold_key is not None else sandbox.execute(gold_sql)
    early = _gold_verdict(gold, gold_nondeterminism(gold_sql) if opts.exclude_nondeterministic_gold else None)
    if early is not None:
        return early
    relaxed, strict_v = score_execution(sandbox.execute(pred_sql), gold, pred_sql, gold_sql, sandbox,
                                        gold_key=gold_key, options=opts)
    return strict_v if strict else relaxed
