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

The constant rule is a syntactic approximation (whether an expression's value depends on the data is
undecidable in general): an expression that reads a table column or aggregates over a table counts as
data, even when it is arithmetically constant (``max(id) - max(id) + 3``). It is the second defence
against width; the bound on extra columns (:mod:`.execution`) is the first. Source: ours, for issue 8
("Execution accuracy that cannot be hit by width") on top of ABISS App. A's column-superset tolerance.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Tokenizer, TokenType

from ..errors import SQLParseError
from ..sql.readonly import ReadOnlySchema
from ..sql.schema import analysis_errors, is_star, parse_for_analysis

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
        return ColumnInfo(self.constant(expr, chain), rounds, digits)

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
#: rebuild the key of its database's schema for every lookup (issue 12). The schema is held, so its id is not
#: reused; only a :class:`~textsql_clarify.sql.readonly.ReadOnlySchema` (a sandbox's) is kept: it cannot change,
#: where a plain dict changed in place would keep a stale key (issue 12 review).
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


@functools.lru_cache(maxsize=4096)
def _projection_cached(sql: str, schema_key: tuple | None) -> tuple[ColumnInfo, ...] | None:
    schema = None if schema_key is None else {t: dict.fromkeys(cols, "") for t, cols in schema_key}
    return _aligned(sql, schema)


def constant_columns(sql: str, schema: Mapping[str, Mapping[str, str]] | None = None,
                     n_columns: int | None = None) -> frozenset[int]:
    """Indices of the output columns whose expression is constant (:func:`projection_info`); the empty set
    when the columns cannot be aligned (every column is then taken as read from data). Never raises."""
    cols = projection_info(sql, schema, n_columns)
    return frozenset() if cols is None else frozenset(i for i, c in enumerate(cols) if c.constant)


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
