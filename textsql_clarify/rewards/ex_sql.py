"""What relaxed EX reads from the SQL text, beside the results: constant output columns, rounding,
ORDER BY ... LIMIT ties, and golds that depend on the clock or on randomness.

:mod:`.execution` compares results; these helpers read the queries with sqlglot (SQLite dialect) so that
the comparison can apply the rules of ``docs/metrics.md`` ("Execution accuracy"):

* :func:`projection_info` aligns each output column of a query with its SELECT expression and says
  whether the expression is a *constant* (no value read from a table: literals, arithmetic on literals,
  ``random()``, a column of a derived table or CTE that is itself constant) and whether it is a
  top-level ``ROUND(x, d)``. ``*`` is expanded from the database schema; when a column cannot be aligned
  the answer is ``None`` and the caller treats every column as read from data.
* :func:`gold_nondeterminism` names the clock or random function a gold SQL uses (``date('now')``,
  ``random()``, ``current_timestamp``...), so that such a gold is kept out of EX means.
* :func:`limit_ties_query` rewrites a gold ``SELECT ... ORDER BY k LIMIT n`` into the same query without
  its LIMIT and with the ORDER BY keys as extra output columns, so that the rows tied with the last kept
  row can be read.

Whether an expression's value depends on the data is undecidable in general, so the constant rule has
two parts. The syntactic part: an expression that reads no table column and aggregates over no table is
constant. The probe (:func:`probe_constant`): an expression that does read data is still constant when
its value does not depend on what it reads: each data leaf (a column, an aggregate, a window, a subquery)
is replaced by a variable and SQLite evaluates the rest for many values of the variables
(``count(*) * 0``, ``max(id) - max(id) + 3``, ``length(name) * 0 + 3``); an aggregate over a ``WHERE``
that no value makes true (``WHERE 0``, ``WHERE id <> id``) reads no row and is constant too. What the probe
cannot see is a filter true of no row of this database only (``WHERE name = 'zzz'``): that is data, and
only test-suite EX over several database instances (Zhong et al. 2020) tells it from a guess. The rule is
the second defence against width; the bound on extra columns (:mod:`.execution`) is the first. Source:
ours (execution accuracy that cannot be hit by width: the red-team contract, ``docs/rewards.md``) on top
of ABISS App. A's column-superset tolerance.
"""
from __future__ import annotations

import functools
import itertools
import random
import sqlite3
import threading
from dataclasses import dataclass
from typing import Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Tokenizer, TokenType

from ..errors import SQLParseError
from ..sql.readonly import ReadOnlySchema
from ..sql.schema import MAX_ANALYSIS_CHARS, analysis_errors, is_star, parse_for_analysis, qualified_for_analysis
from ..sql.textkey import ByteBoundedLRU, normalise_whitespace

#: SQLite aggregate functions that sqlglot parses as ``Anonymous`` (not an ``AggFunc``).
_ANON_AGGREGATES = frozenset({"total", "group_concat", "string_agg", "json_group_array", "json_group_object",
                              "jsonb_group_array", "jsonb_group_object", "median"})
#: functions whose value changes from one call to the next (SQLite core functions).
_RANDOM_FUNCTIONS = frozenset({"random", "randomblob"})
_CLOCK_NODES = tuple(getattr(exp, n) for n in ("CurrentTimestamp", "CurrentDate", "CurrentTime", "CurrentDatetime")
                     if hasattr(exp, n))
_ROWID_NAMES = frozenset({"rowid", "oid", "_rowid_"})


@dataclass(frozen=True)
class ColumnInfo:
    """One output column of a query, read from its SELECT expression.

    Attributes:
        constant: ``True`` when no value of the column is read from a table (see the module docstring).
        rounds: ``True`` when the expression is a top-level ``ROUND(...)`` (under an alias, parentheses or a CAST).
        round_digits: the ``d`` of a top-level ``ROUND(x, d)`` with a literal ``d`` (0 when omitted), else ``None``.
    """

    constant: bool
    rounds: bool = False
    round_digits: int | None = None


def _arg(node: exp.Expression, name: str):
    """``node.args[name]``, under sqlglot's old (``from``) or new (``from_``) key."""
    v = node.args.get(name)
    return v if v is not None else node.args.get(name + "_")


def _unwrap(q: exp.Expression) -> exp.Expression:
    while isinstance(q, (exp.Subquery, exp.Paren)) and isinstance(q.this, exp.Expression):
        q = q.this
    return q


class _Unknown(Exception):
    """A column that cannot be aligned with an expression (unknown table, unsupported shape)."""


# -- the probe: constant by evaluation --------------------------------------------------------------
#: values every variable of a probe takes (besides the expression's own literals and numbers next to them)
_PROBE_POOL = (None, 0, 1, -1, 2, 7, 3.5, -0.25, 1_000_003, "", "a", "zq", "2009-05-01")
#: most data leaves a probe varies; an expression with more counts as data
_PROBE_MAX_LEAVES = 24
#: random assignments tried when the leaves are too many for every combination of the pool
_PROBE_RANDOM = 96
_PROBE_LOCAL = threading.local()


def _is_leaf(node: exp.Expression) -> bool:
    """A node whose value the probe varies: it reads data (or may), and its inside is not evaluated."""
    if isinstance(node, exp.Column):
        return not isinstance(node.this, exp.Star)
    return isinstance(node, (exp.AggFunc, exp.Window, exp.Subquery, exp.Select, exp.SetOperation, exp.Exists)) or (
        isinstance(node, exp.Anonymous) and str(node.this).lower() in _ANON_AGGREGATES) or (
        isinstance(node, exp.In) and node.args.get("query") is not None)


def _with_variables(expr: exp.Expression) -> tuple[exp.Expression, list[bool], list]:
    """``expr`` with each data leaf replaced by a column ``column<k>`` of a ``VALUES`` source (equal leaves,
    by SQL text, share one variable), whether each variable is a count (never negative, never NULL) and the
    expression's literals."""
    leaves: dict[str, int] = {}
    counts: list[bool] = []
    literals: list = []

    def walk(node: exp.Expression) -> exp.Expression:
        if _is_leaf(node):
            key = node.sql(dialect="sqlite")
            if key not in leaves:
                leaves[key] = len(leaves)
                counts.append(isinstance(node, exp.Count))
            return exp.column(f"column{leaves[key] + 1}")
        if isinstance(node, exp.Literal):
            literals.append(node.this if node.is_string else _number(node.this))
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(key, walk(value))
            elif isinstance(value, list):
                node.set(key, [walk(v) if isinstance(v, exp.Expression) else v for v in value])
        return node

    out = walk(expr.copy())
    return out, counts, literals


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _assignments(counts: list[bool], literals: list) -> list[tuple]:
    """Probe rows: every combination of the pool (and the literals, their negatives and the numbers next to
    them; a count takes only integers >= 0) for one or two variables, else the uniform rows and
    :data:`_PROBE_RANDOM` seeded random ones."""
    pool = list(_PROBE_POOL)
    for v in literals:
        extra = [v] if isinstance(v, str) else [v, v - 1, v + 1, -v, -v - 1, -v + 1] \
            if isinstance(v, (int, float)) else []
        pool += [x for x in extra if x not in pool]
    count_pool = [v for v in pool if type(v) is int and v >= 0]
    pools = [count_pool if c else pool for c in counts]
    n = len(pools)
    if n <= 2:
        return list(itertools.product(*pools))
    rng = random.Random(n)
    uniform = [tuple(v if v in p else p[0] for p in pools) for v in pool]
    return uniform + [tuple(rng.choice(p) for p in pools) for _ in range(_PROBE_RANDOM)]


def _evaluate(expr_sql: str, rows: list[tuple]) -> list | None:
    """SQLite's value of ``expr_sql`` on each probe row (in memory, no table), or ``None`` when it fails."""
    con = getattr(_PROBE_LOCAL, "con", None)
    if con is None:
        con = _PROBE_LOCAL.con = sqlite3.connect(":memory:")
    width = len(rows[0])
    values = ", ".join("(" + ", ".join("?" * width) + ")" for _ in rows)
    try:
        return [r[0] for r in con.execute(f"SELECT {expr_sql} FROM (VALUES {values})",
                                          [v for row in rows for v in row]).fetchall()]
    except (sqlite3.Error, OverflowError):
        return None


@functools.lru_cache(maxsize=4096)
def _probe(expr_sql: str, condition: bool) -> bool:
    """:func:`probe_constant` on SQL text (cached). ``condition``: is the expression never true?"""
    try:
        tree = parse_for_analysis(f"SELECT {expr_sql}")
    except SQLParseError:
        return False
    expr = _unwrap(tree).selects[0] if isinstance(_unwrap(tree), exp.Select) else None
    if expr is None or _is_leaf(expr):
        return False  # a bare column or aggregate is data
    expr = expr.this if isinstance(expr, exp.Alias) else expr
    with_vars, counts, literals = _with_variables(expr)
    if not counts or len(counts) > _PROBE_MAX_LEAVES:
        return False
    rows = _assignments(counts, literals)
    if condition:
        got = _evaluate(f"CASE WHEN ({with_vars.sql(dialect='sqlite')}) THEN 1 ELSE 0 END", rows)
        return got is not None and not any(got)
    got = _evaluate(with_vars.sql(dialect="sqlite"), rows)
    if got is None:
        return False
    # a NULL that a NULL input gave is no dependence on the data: count(*) * 0 is never NULL
    # numbers compare by value (3 == 3.0), as relaxed EX compares them; text never equals a number
    seen = {("number" if isinstance(v, (int, float)) else type(v).__name__, v) for v, row in zip(got, rows)
            if not (v is None and None in row)}
    return len(seen) <= 1


def probe_constant(expr: exp.Expression | str, *, condition: bool = False) -> bool:
    """Whether an expression that reads data has a value that does not depend on it (constant by evaluation).

    Each data leaf of ``expr`` (a column, an aggregate, a window, a scalar subquery, ``EXISTS`` / ``IN
    (subquery)``; equal leaves as one) becomes a variable, and SQLite evaluates what is left, in memory, for
    every combination of a value pool (NULL, integers, floats, text, and the expression's own literals with
    the numbers next to them) for one or two variables, else for the uniform assignments and 96 seeded random
    ones. The expression is constant when every evaluation gives the same value, a NULL given by a NULL input
    aside (``count(*) * 0`` is 0 for every count). A bare leaf, an expression with no leaf or with more than
    24, and one SQLite cannot evaluate count as data.

    Args:
        expr: a SELECT expression (sqlglot node or SQL text, SQLite dialect).
        condition: test instead whether no assignment makes the expression true (a ``WHERE`` that holds for
            no row: ``0``, ``id <> id``); exhaustive over the pool for one or two variables, else not claimed.

    Returns:
        ``True`` when constant (never true, for ``condition``). Never raises. Source: ours (a probe in the
        spirit of test-suite EX, Zhong et al. 2020, over the expression instead of the database).
    """
    try:
        text = expr if isinstance(expr, str) else expr.sql(dialect="sqlite")
    except SqlglotError:
        return False
    if condition:
        try:
            tree = parse_for_analysis(f"SELECT {text}")
            n = len(_with_variables(_unwrap(tree).selects[0])[1])
        except (SQLParseError, AttributeError, IndexError):
            return False
        if n > 2:
            return False
        if n == 0:  # a literal condition: evaluate it as it is
            return _probe_literal_false(text)
    return _probe(text, condition)


@functools.lru_cache(maxsize=1024)
def _probe_literal_false(text: str) -> bool:
    got = _evaluate(f"CASE WHEN ({text}) THEN 1 ELSE 0 END", [(0,)])
    return got is not None and not any(got)


class _Analyser:
    """Constant-ness of output columns over nested scopes (CTEs, derived tables, subqueries)."""

    def __init__(self, schema: Mapping[str, Mapping[str, str]] | None):
        self.schema = {str(t).lower(): [str(c).lower() for c in cols] for t, cols in (schema or {}).items()}
        self.has_schema = schema is not None

    # -- sources -------------------------------------------------------------------------------
    def sources(self, select: exp.Select, ctes: dict) -> list[tuple[str, object]]:
        """``(alias, source)`` of each FROM / JOIN item; ``source`` is a table name (str, base table)
        or a list of output ``(name, ColumnInfo)`` (CTE, derived table, VALUES)."""
        items = []
        frm = _arg(select, "from")
        if frm is not None:
            items.append(frm.this)
        for j in select.args.get("joins") or []:
            items.append(j.this)
        out = []
        for it in items:
            alias = it.alias_or_name.lower() if hasattr(it, "alias_or_name") else ""
            if isinstance(it, exp.Table):
                name = it.name.lower()
                if it.args.get("db") is None and name in ctes:
                    out.append((alias or name, ctes[name]))
                elif isinstance(it.this, exp.Identifier):
                    out.append((alias or name, name))
                else:  # table-valued function and the like
                    raise _Unknown(f"unsupported FROM item {it.sql()[:60]}")
            elif isinstance(it, (exp.Subquery, exp.Paren, exp.Values)):
                cols = self.outputs(_unwrap(it) if not isinstance(it, exp.Values) else it, ctes)
                names = [c.name.lower() for c in (it.args.get("alias").columns if it.args.get("alias") else [])]
                if names and len(names) == len(cols):
                    cols = [(n, info) for n, (_, info) in zip(names, cols)]
                out.append((alias, cols))
            else:
                raise _Unknown(f"unsupported FROM item {type(it).__name__}")
        return out

    def source_names(self, s: object) -> list[str]:
        """The column names of a source (a base table's from the schema)."""
        if isinstance(s, str):
            if s not in self.schema:
                raise _Unknown(f"unknown table {s}")
            return list(self.schema[s])
        return [n for n, _ in s]

    def reads_data(self, srcs: list[tuple[str, object]]) -> bool:
        return any(isinstance(s, str) or any(not info.constant for _, info in s) for _, s in srcs)

    # -- outputs -------------------------------------------------------------------------------
    def with_ctes(self, q: exp.Expression, ctes: dict) -> dict:
        w = _arg(q, "with")
        if w is None:
            return ctes
        ctes = dict(ctes)
        for cte in w.expressions:
            name = cte.alias_or_name.lower()
            body = _unwrap(cte.this)
            alias = cte.args.get("alias")
            col_names = [c.name.lower() for c in alias.columns] if alias is not None and alias.columns else None
            if w.args.get("recursive") and isinstance(body, exp.SetOperation):
                # fixpoint from the anchor: the recursive part sees the anchor's columns
                anchor = self.outputs(_unwrap(body.left), ctes)
                if col_names and len(col_names) == len(anchor):
                    anchor = [(n, i) for n, (_, i) in zip(col_names, anchor)]
                ctes[name] = anchor
            cols = self.outputs(body, ctes)
            if col_names:
                if len(col_names) != len(cols):
                    raise _Unknown("CTE column list does not match its query")
                cols = [(n, i) for n, (_, i) in zip(col_names, cols)]
            ctes[name] = cols
        return ctes

    def outputs(self, q: exp.Expression, ctes: dict, outer: tuple = ()) -> list[tuple[str, ColumnInfo]]:
        """Output columns ``(name, ColumnInfo)`` of a query node."""
        q = _unwrap(q)
        ctes = self.with_ctes(q, ctes)
        if isinstance(q, exp.SetOperation):
            left = self.outputs(q.left, ctes, outer)
            right = self.outputs(q.right, ctes, outer)
            if len(left) != len(right):
                raise _Unknown("compound query branches differ in width")
            return [(n, ColumnInfo(a.constant and b.constant,
                                   a.rounds and b.rounds,
                                   a.round_digits if a.round_digits == b.round_digits else None))
                    for (n, a), (_, b) in zip(left, right)]
        if isinstance(q, exp.Values):
            rows = q.expressions
            width = len(rows[0].expressions) if rows and isinstance(rows[0], exp.Tuple) else 1
            return [(f"column{k + 1}", ColumnInfo(True)) for k in range(width)]
        if not isinstance(q, exp.Select):
            raise _Unknown(f"unsupported query {type(q).__name__}")
        srcs = self.sources(q, ctes)
        where = q.args.get("where")
        if where is not None and probe_constant(where.this, condition=True):
            srcs = [(alias, [(n, ColumnInfo(True)) for n in self.source_names(s)]) for alias, s in srcs]
        scope = (srcs, ctes)
        chain = (scope,) + tuple(outer)
        out: list[tuple[str, ColumnInfo]] = []
        for item in q.selects:
            if is_star(item):
                node = item.this if isinstance(item, exp.Alias) else item
                table = node.table.lower() if isinstance(node, exp.Column) and node.table else None
                picked = [s for s in srcs if table is None or s[0] == table]
                if not picked:
                    raise _Unknown("star over an unknown table")
                for _, s in picked:
                    if isinstance(s, str):
                        if s not in self.schema:
                            raise _Unknown(f"unknown table {s}")
                        out += [(c, ColumnInfo(False)) for c in self.schema[s]]
                    else:
                        out += list(s)
                continue
            expr = item.this if isinstance(item, exp.Alias) else item
            out.append((item.alias_or_name.lower(), self.info(expr, chain, q)))
        return out

    # -- expressions ---------------------------------------------------------------------------
    def info(self, expr: exp.Expression, chain: tuple, select: exp.Select) -> ColumnInfo:
        top = expr
        while isinstance(top, (exp.Paren, exp.Cast, exp.Alias)) and isinstance(top.this, exp.Expression):
            top = top.this
        rounds = isinstance(top, exp.Round)
        digits = None
        if rounds:
            d = top.args.get("decimals")
            if d is None:
                digits = 0
            elif isinstance(d, exp.Literal) and not d.is_string and d.is_int:
                digits = int(d.this)
            elif isinstance(d, exp.Neg) and isinstance(d.this, exp.Literal) and d.this.is_int:
                digits = -int(d.this.this)
        constant = self.constant(expr, chain) or probe_constant(expr)
        return ColumnInfo(constant, rounds, digits)

    def constant(self, expr: exp.Expression, chain: tuple) -> bool:
        """Whether ``expr`` (evaluated in the innermost scope of ``chain``) reads no value from a table."""
        srcs, ctes = chain[0]
        stack = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, (exp.Subquery, exp.Select, exp.SetOperation)):
                if isinstance(node.parent, (exp.Exists, exp.In, exp.Any, exp.All)):
                    # a set test: constant only when it reads no table and no column at all
                    if any(isinstance(t, exp.Table) and t.name.lower() not in ctes for t in node.find_all(exp.Table)) \
                            or any(True for _ in node.find_all(exp.Column)):
                        return False
                    continue
                cols = self.outputs(node, ctes, chain)  # a scalar subquery: the value of its column
                if not all(info.constant for _, info in cols):
                    return False
                continue
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                if not self.column_constant(node, chain):
                    return False
                continue
            if isinstance(node, (exp.AggFunc, exp.Window)) or (
                    isinstance(node, exp.Anonymous) and str(node.this).lower() in _ANON_AGGREGATES):
                if self.reads_data(srcs):  # an aggregate over rows read from a table counts them
                    return False
            stack.extend(node.iter_expressions())
        return True

    def column_constant(self, col: exp.Column, chain: tuple) -> bool:
        name = col.name.lower()
        table = col.table.lower() if col.table else None
        for srcs, _ in chain:
            for alias, s in srcs:
                if table is not None and alias != table:
                    continue
                if isinstance(s, str):
                    if table is not None or name in _ROWID_NAMES or name in self.schema.get(s, ()) \
                            or s not in self.schema:
                        return False
                else:
                    for n, info in s:
                        if n == name:
                            return info.constant
                    if table is not None:
                        raise _Unknown(f"no column {name} in {table}")
        if table is None and self.has_schema:
            return True  # SQLite reads an unresolvable double-quoted identifier as a string literal
        return False


def _aligned(sql: str, schema) -> tuple[ColumnInfo, ...] | None:
    try:
        tree = parse_for_analysis(sql)
        with analysis_errors(sql, "projection analysis"):
            cols = _Analyser(schema).outputs(tree, {})
    except (SQLParseError, _Unknown):
        return None
    return tuple(info for _, info in cols)


def projection_info(sql: str, schema: Mapping[str, Mapping[str, str]] | None = None,
                    n_columns: int | None = None) -> tuple[ColumnInfo, ...] | None:
    """Each output column's :class:`ColumnInfo`, read from the SQL (sqlglot, SQLite dialect).

    Args:
        sql: one query.
        schema: ``{table: {column: type}}`` (e.g. ``SQLiteSandbox.schema``), used to expand ``*`` and to
            tell table columns from string literals; ``None``: ``*`` cannot be aligned.
        n_columns: the number of columns the query returned; when given and the analysis finds another
            number, the columns are not aligned (``None``).

    Returns:
        One :class:`ColumnInfo` per output column, or ``None`` when the columns cannot be aligned with
        expressions (unparsable SQL, ``*`` over a table the schema lacks, a table-valued function...).
        Never raises.
    """
    key = None if schema is None else _names_key(schema)
    try:
        cols = _projection_cached(sql, key)
    except TypeError:  # unhashable schema contents
        cols = _aligned(sql, schema)
    if cols is not None and n_columns is not None and len(cols) != n_columns:
        return None
    return cols


#: ``id(schema) -> (schema, key)``: the last sandbox schemas' table and column names, so that an env step does not
#: rebuild the key of its database's schema for every lookup. The schema is held, so its id is not
#: reused; only a :class:`~textsql_clarify.sql.readonly.ReadOnlySchema` (a sandbox's) is kept: it cannot change,
#: where a plain dict changed in place would keep a stale key.
_NAMES_KEYS: dict[int, tuple[Mapping, tuple]] = {}


def _names_key(schema: Mapping[str, Mapping[str, str]]) -> tuple:
    if type(schema) is not ReadOnlySchema:
        return tuple((t, tuple(cols)) for t, cols in schema.items())
    hit = _NAMES_KEYS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    key = tuple((t, tuple(cols)) for t, cols in schema.items())
    if len(_NAMES_KEYS) >= 256:
        _NAMES_KEYS.clear()
    _NAMES_KEYS[id(schema)] = (schema, key)
    return key


#: the budget of the kept projection analyses, bytes (estimated by :func:`_projection_bytes`): at about 800 bytes
#: charged for a Spider-size query, some 40,000 analyses fill it, so Spider dev's 546 distinct golds and the novel
#: predictions of many steps stay in it (``docs/platform.md`` "Step cost")
PROJECTION_CACHE_BYTES = 32 * 2**20
#: bytes charged per character of the SQL text, and per entry, for a kept projection analysis: the key's text
#: (one byte a character for ASCII, plus CPython's string header), the key and value tuples, one
#: :class:`ColumnInfo` per output column and the LRU's own node; a rough figure, proportional to what is kept
PROJECTION_BYTES_PER_CHAR = 2
PROJECTION_BYTES_PER_ENTRY = 512


def _projection_bytes(key: tuple, value: tuple | None) -> int:
    return PROJECTION_BYTES_PER_ENTRY + PROJECTION_BYTES_PER_CHAR * len(key[0]) + 64 * len(value or ())


#: ``(whitespace-normalised SQL, schema names key) -> _aligned's answer``, bounded by bytes (not by entries, so
#: that how many fit follows the texts' lengths)
_PROJECTIONS = ByteBoundedLRU(PROJECTION_CACHE_BYTES, _projection_bytes)
_MISS = object()
#: the normalised key of a raw text seen lately (a repeated text skips the regex pass; entries are two strings)
_normalised = functools.lru_cache(maxsize=4096)(normalise_whitespace)


def _projection_cached(sql: str, schema_key: tuple | None) -> tuple[ColumnInfo, ...] | None:
    """:func:`_aligned` of ``sql`` under the schema of ``schema_key``, kept under the whitespace-normalised text
    (:func:`~textsql_clarify.sql.textkey.normalise_whitespace`: spellings that tokenize alike share one entry).
    A text past :data:`~textsql_clarify.sql.schema.MAX_ANALYSIS_CHARS` is not kept: its length alone decides
    (it is not analysed), and a shorter spelling of it must not answer for it.

    Raises:
        TypeError: ``schema_key`` is not hashable (the caller then analyses without the cache).
    """
    if len(sql) > MAX_ANALYSIS_CHARS:
        return _aligned(sql, None if schema_key is None else {t: dict.fromkeys(cols, "") for t, cols in schema_key})
    key = (_normalised(sql), schema_key)
    hit = _PROJECTIONS.get(key, _MISS)
    if hit is _MISS:
        schema = None if schema_key is None else {t: dict.fromkeys(cols, "") for t, cols in schema_key}
        hit = _aligned(sql, schema)
        _PROJECTIONS.put(key, hit)
    return hit


def constant_columns(sql: str, schema: Mapping[str, Mapping[str, str]] | None = None,
                     n_columns: int | None = None) -> frozenset[int]:
    """Indices of the output columns whose expression is constant (:func:`projection_info`); the empty set
    when the columns cannot be aligned (every column is then taken as read from data). Never raises."""
    cols = projection_info(sql, schema, n_columns)
    return frozenset() if cols is None else frozenset(i for i, c in enumerate(cols) if c.constant)


# -- independent answers: which tables each output column reads ------------------------------------
def _outside_subqueries(node: exp.Expression, kinds: tuple) -> list[exp.Expression]:
    """Nodes of ``kinds`` under ``node`` that are not inside one of its subqueries."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, kinds):
            out.append(n)
        if isinstance(n, (exp.Subquery, exp.Select, exp.SetOperation)) and n is not node:
            continue
        stack.extend(n.iter_expressions())
    return out


def _links(cond: exp.Expression, aliases: set[str]) -> set[str] | None:
    """The FROM aliases one join / WHERE conjunct links (``None``: every alias, when a column is unresolved).
    A conjunct true (or NULL) for every value of what it reads (``x.c + y.c >= 0 OR 1``) links nothing."""
    names: set[str] = set()
    for col in cond.find_all(exp.Column):
        if isinstance(col.this, exp.Star):
            continue
        t = col.table.lower() if col.table else ""
        if t in aliases:
            names.add(t)
        elif not t:
            return None
    if len(names) >= 2 and probe_constant(exp.Not(this=exp.Paren(this=cond.copy())), condition=True):
        return set()
    return names


def _conjuncts(cond: exp.Expression | None) -> list[exp.Expression]:
    if cond is None:
        return []
    cond = cond.this if isinstance(cond, (exp.Where, exp.Having)) else cond
    return list(cond.flatten()) if isinstance(cond, exp.And) else [cond]


def _reads(sql: str, schema) -> tuple[frozenset[str], ...] | None:
    tree = qualified_for_analysis(sql, schema)
    from sqlglot.optimizer.scope import build_scope

    with analysis_errors(sql, "column reads"):
        scope = build_scope(tree)
        if scope is None or not isinstance(scope.expression, exp.Select):
            return None
        select = scope.expression
        if any(is_star(p) for p in select.selects):
            return None
        aliases = {a.lower(): src for a, src in scope.sources.items()}
        names = set(aliases)
        parent = {a: a for a in names}

        def find(a: str) -> str:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        def link(group) -> None:
            group = list(group)
            for b in group[1:]:
                parent[find(b)] = find(group[0])

        conds = _conjuncts(select.args.get("where")) + _conjuncts(select.args.get("having"))
        for j in select.args.get("joins") or []:
            if j.args.get("using") or str(j.args.get("method") or "").upper() == "NATURAL":
                link(names)
            conds += _conjuncts(j.args.get("on"))
        for c in conds:
            got = _links(c, names)
            link(names if got is None else got)
        every = frozenset("from:" + find(a) for a in names)

        def component(a: str) -> frozenset[str]:
            return frozenset({"from:" + find(a)})

        subscopes = {id(s.expression): s for s in scope.subquery_scopes}
        out = []
        for item in select.selects:
            expr = item.this if isinstance(item, exp.Alias) else item
            reads: set[str] = set()
            for col in _outside_subqueries(expr, (exp.Column,)):
                if isinstance(col.this, exp.Star):
                    continue
                t = col.table.lower() if col.table else ""
                reads |= component(t) if t in names else every
            if _outside_subqueries(expr, (exp.AggFunc, exp.Window)) or any(
                    isinstance(n, exp.Anonymous) and str(n.this).lower() in _ANON_AGGREGATES
                    for n in _outside_subqueries(expr, (exp.Anonymous,))):
                reads |= every  # an aggregate counts the rows of the whole FROM
            for sub in _outside_subqueries(expr, (exp.Select, exp.SetOperation)):
                if sub is expr:
                    continue
                s = subscopes.get(id(sub))
                if s is None:
                    reads |= every
                    continue
                reads.add("sub:" + sub.sql(dialect="sqlite"))  # an independent query of its own
                for col in s.external_columns:  # a correlated subquery reads the outer row too
                    t = col.table.lower() if col.table else ""
                    reads |= component(t) if t in names else every
            out.append(frozenset(reads))
        return tuple(out)


@functools.lru_cache(maxsize=4096)
def _reads_cached(sql: str, schema_key: tuple | None) -> tuple[frozenset[str], ...] | None:
    schema = None if schema_key is None else {t: dict.fromkeys(cols, "") for t, cols in schema_key}
    try:
        return _reads(sql, schema)
    except (SQLParseError, _Unknown):
        return None


def column_reads(sql: str, schema: Mapping[str, Mapping[str, str]] | None = None,
                 n_columns: int | None = None) -> tuple[frozenset[str], ...] | None:
    """The independent queries each output column's value reads, so that two columns answering from
    independent sources can be told from two auxiliary columns of one query (ABISS App. A).

    The sources of the FROM clause form components: the ``ON`` / ``USING`` / ``WHERE`` / ``HAVING``
    conjuncts that name two sources link them (a conjunct true for every value, as :func:`probe_constant`
    finds, links nothing; a cross join links nothing). A column reads its source's component
    (``"from:<alias>"``); an aggregate or a window reads every component (it counts the rows of the whole
    FROM); a scalar subquery is a query of its own (``"sub:<its SQL>"``) and, when correlated, also reads
    the components it names. Literals read nothing (the empty set). ``SELECT (SELECT count(*) FROM a),
    (SELECT count(*) FROM b)`` gives two disjoint sets; ``SELECT s.name, c.id FROM s JOIN c ON s.id = c.sid``
    gives one set twice; ``SELECT * FROM (q1) AS r0, (q2) AS r1`` two disjoint sets.

    Args:
        sql: one query (SQLite dialect).
        schema: ``{table: {column: type}}``, to qualify unqualified columns; ``None``: as the query says.
        n_columns: the number of columns the query returned; another number found gives ``None``.

    Returns:
        One frozenset of source tokens per output column, or ``None`` when the query cannot be
        analysed (unparsable, compound at the top, ``*`` left unexpanded, an unsupported shape). Never
        raises. Source: ours, on the auxiliary columns of ABISS App. A (columns of the same query).
    """
    try:
        got = _reads_cached(sql, None if schema is None else _names_key(schema))
    except TypeError:
        try:
            got = _reads(sql, schema)
        except (SQLParseError, _Unknown):
            got = None
    if got is not None and n_columns is not None and len(got) != n_columns:
        return None
    return got


def independent_answers(reads: Sequence[frozenset[str]]) -> int:
    """How many groups of columns read pairwise-disjoint table sets (columns that share a table, directly or
    through another column, are one group; columns that read nothing are left out)."""
    groups: list[set[str]] = []
    for r in reads:
        if not r:
            continue
        merged = set(r)
        rest = []
        for g in groups:
            if g & merged:
                merged |= g
            else:
                rest.append(g)
        groups = rest + [merged]
    return len(groups)


# -- nondeterministic golds ----------------------------------------------------------------------
def _nondeterminism_by_tokens(sql: str) -> str | None:
    try:
        tokens = Tokenizer().tokenize(sql)
    except SqlglotError:
        return None
    for k, t in enumerate(tokens):
        text = t.text.lower()
        if text in _RANDOM_FUNCTIONS and k + 1 < len(tokens) and tokens[k + 1].token_type == TokenType.L_PAREN:
            return f"{text}()"
        if text in ("current_timestamp", "current_date", "current_time"):
            return text
        if t.token_type == TokenType.STRING and text.strip() == "now":
            return "'now'"
    return None


@functools.lru_cache(maxsize=8192)
def gold_nondeterminism(sql: str) -> str | None:
    """What makes a SQL's result depend on the clock or on randomness, or ``None``.

    Flags ``random()`` / ``randomblob(n)``, ``current_timestamp`` / ``current_date`` / ``current_time``, and
    the ``'now'`` time value given to a function (``date('now')``, ``julianday('now')``,
    ``strftime('%Y', 'now')``...); a ``'now'`` compared as a plain string (``name = 'now'``) is not
    flagged. Read from the sqlglot AST; when sqlglot cannot parse the SQL, from its tokens. Cached.

    Returns:
        A short name of the first such use, e.g. ``"random()"``, ``"date('now')"``, ``"current_timestamp"``.
        Never raises.
    """
    if not isinstance(sql, str) or not sql.strip():
        return None
    try:
        tree = parse_for_analysis(sql)
    except SQLParseError:
        return _nondeterminism_by_tokens(sql)
    for node in tree.walk():
        if isinstance(node, exp.Rand):
            return "random()"
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _RANDOM_FUNCTIONS:
            return f"{str(node.this).lower()}()"
        if _CLOCK_NODES and isinstance(node, _CLOCK_NODES):
            return {"CurrentTimestamp": "current_timestamp", "CurrentDate": "current_date",
                    "CurrentTime": "current_time"}.get(type(node).__name__, type(node).__name__.lower())
        if isinstance(node, exp.Literal) and node.is_string and str(node.this).strip().lower() == "now":
            parent = node.parent
            while isinstance(parent, exp.Func) and not isinstance(parent, exp.Anonymous) and \
                    isinstance(parent.parent, exp.Func):
                parent = parent.parent  # strftime('%Y', 'now') parses as TimeToStr(TsOrDsToTimestamp('now'))
            if isinstance(parent, exp.Func):
                return parent.sql(dialect="sqlite")[:60]
    return None


# -- ORDER BY ... LIMIT ties ---------------------------------------------------------------------
@dataclass(frozen=True)
class TiesQuery:
    """A gold ``ORDER BY ... LIMIT`` rewritten to expose ties (:func:`limit_ties_query`).

    Attributes:
        sql: the gold without LIMIT / OFFSET, its ORDER BY keys appended as output columns.
        n_keys: how many key columns were appended (the last ``n_keys`` columns).
        offset: the gold's OFFSET (0 when none).
    """

    sql: str
    n_keys: int
    offset: int


def _int_literal(node) -> int | None:
    node = getattr(node, "expression", None) if isinstance(node, (exp.Limit, exp.Offset)) else node
    if isinstance(node, exp.Literal) and not node.is_string and node.is_int:
        return int(node.this)
    return None


@functools.lru_cache(maxsize=4096)
def limit_ties_query(gold_sql: str) -> TiesQuery | None:
    """Rewrite ``SELECT ... ORDER BY k1, k2 LIMIT n [OFFSET o]`` to show which rows tie with the kept ones.

    The result is the same SELECT without LIMIT and OFFSET, with ``k1, k2`` (ordinals and output aliases
    resolved to their expressions) appended as output columns; its rows come in the gold's order, so the
    rows whose keys equal those of the last kept row are the gold's ties (the LIMIT kept an arbitrary
    subset of them). ``None`` when the gold is not such a query: no top-level ORDER BY or LIMIT, a
    LIMIT or OFFSET that is not an integer literal, a compound query, ``SELECT DISTINCT`` (appending the
    keys would change which rows are distinct), or SQL that cannot be parsed. Never raises.
    """
    try:
        tree = parse_for_analysis(gold_sql)
    except SQLParseError:
        return None
    tree = _unwrap(tree)
    if not isinstance(tree, exp.Select) or tree.args.get("distinct") is not None:
        return None
    order, limit = tree.args.get("order"), tree.args.get("limit")
    if order is None or limit is None or any(is_star(s) for s in tree.selects):
        return None
    n = _int_literal(limit)
    off_node = tree.args.get("offset")
    offset = 0 if off_node is None else _int_literal(off_node)
    if n is None or offset is None or n < 1 or offset < 0:
        return None
    try:
        with analysis_errors(gold_sql, "limit ties"):
            new = tree.copy()
            aliases = {s.alias.lower(): s.this for s in tree.selects if isinstance(s, exp.Alias) and s.alias}
            keys = []
            for o in order.expressions:
                key = o.this if isinstance(o, exp.Ordered) else o
                k = _int_literal(key)
                if k is not None:
                    if not 1 <= k <= len(tree.selects):
                        return None
                    sel = tree.selects[k - 1]
                    key = sel.this if isinstance(sel, exp.Alias) else sel
                elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
                    key = aliases[key.name.lower()]
                keys.append(key.copy())
            new.set("limit", None)
            new.set("offset", None)
            for k, key in enumerate(keys):
                new.append("expressions", exp.alias_(key, f"__tie_key_{k}"))
            sql = new.sql(dialect="sqlite")
    except SQLParseError:
        return None
    return TiesQuery(sql, len(keys), offset)
