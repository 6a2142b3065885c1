"""Spider's exact-set-match (EM): a predicted query matches the gold when every SQL component matches.

Source: Yu et al. 2018, "Spider: A Large-Scale Human-Labeled Dataset for Complex and Cross-Domain Semantic
Parsing and Text-to-SQL Task", §"Evaluation Metrics" (Component Matching and Exact Matching), as its
evaluation script defines the components. This module implements those definitions on sqlglot ASTs; it does
not reuse the script's code or its parser.

Both queries go through the shared preparation (:func:`~textsql_clarify.rewards.sql_canonical.prepare_sql`):
every column resolved to ``table.column`` with the schema, table aliases replaced by table names, select
aliases and ordinals in GROUP BY / ORDER BY / HAVING expanded. Then each query becomes Spider's structure:

- a **column unit** ``(agg, column)``: ``agg`` one of ``none max min count sum avg``, ``column`` the
  resolved ``table.column`` (``__all__`` for ``*``), with columns joined by a foreign key mapped to one
  representative (Spider's foreign-key map); ``DISTINCT`` is dropped everywhere (the script's
  ``DISABLE_DISTINCT``);
- a **value unit** ``(op, unit1, unit2)``: ``op`` one of ``none - + * /``;
- a **condition unit** ``(not, op, value unit, val1, val2)``: ``op`` one of ``between = > < >= <= != in
  like is exists``; ``val1`` / ``val2`` are a nested query or nothing: literal values, and columns on the
  right-hand side, are dropped (the script's ``DISABLE_VALUE``); a condition is the flat list of its units
  with the ``and`` / ``or`` between them;
- the query: select items ``(agg, value unit)`` (an aggregate over the whole item is the item's ``agg``),
  FROM table units (table names, or nested queries), WHERE, GROUP BY columns, HAVING, ORDER BY (one
  direction: the last one written, ``asc`` by default, and its value units), whether there is a LIMIT (its
  value is ignored), and the INTERSECT / UNION / EXCEPT query that follows.

What Spider's parser cannot represent (a function other than the five aggregates, CASE, CAST, a literal in
the select list, nested arithmetic, ...) becomes one opaque unit: the expression's SQL text after the
preparation with every literal replaced by the same placeholder, so values are still ignored.

Components (:data:`COMPONENTS`); each matches when the gold's count, the prediction's count and the number
of prediction units found in the gold (each gold unit used once) are equal (so two empty clauses match):

- ``select``: the select items as a multiset; ``select(no AGG)``: their value units without the item's ``agg``;
- ``where``: the WHERE condition units as a multiset; ``where(no OP)``: their value units only;
- ``group(no having)``: the GROUP BY column names without their table, as a multiset;
- ``group``: GROUP BY columns (in order) and HAVING (in order) together: both absent, or both present and equal;
- ``order``: ORDER BY and the presence of LIMIT: both absent, or both present, ORDER BY equal and LIMIT
  present in both or neither;
- ``and/or``: the set of connectors in WHERE;
- ``IUEN``: for each of INTERSECT, UNION, EXCEPT present in the gold or the prediction, both have it and
  the two nested queries exact-match;
- ``keywords``: the set of ``where group having order asc/desc limit except union intersect or not in like``
  the query uses (``or``, ``not``, ``in``, ``like`` counted over the join, WHERE and HAVING conditions).

Exact match: every component matches and, when the gold has FROM table units, the sorted table units are
equal. A nested query in a condition compares by equality of its structure (values dropped).

Partial matching (:func:`partial_match`), as the script's ``eval_partial_match`` and ``evaluate`` define it: each
verdict keeps, per component, the prediction's and the gold's count of units (``pred_total``, ``label_total``)
and whether the component matched (the script's 0/1 ``acc``: the counts equal and every predicted unit found).
Over a set of verdicts, a component's precision is the share of matches among the examples whose prediction has
the component (``pred_total > 0``), its recall the share among those whose gold has it (``label_total > 0``), and
F1 = 2PR / (P + R).
"""
from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from ..errors import SQLParseError
from ..sql.schema import DIALECT
from ..sql.uri import ro_uri
from .sql_canonical import prepare_sql

__all__ = ["COMPONENTS", "ExactMatch", "SpiderQuery", "exact_match", "foreign_keys", "partial_match", "spider_query"]

#: The ten components of Spider's component matching, in the order its evaluation prints them.
COMPONENTS: tuple[str, ...] = ("select", "select(no AGG)", "where", "where(no OP)", "group(no having)", "group",
                               "order", "and/or", "IUEN", "keywords")

_AGGS = {exp.Max: "max", exp.Min: "min", exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg"}
_ARITH = {exp.Sub: "-", exp.Add: "+", exp.Mul: "*", exp.Div: "/"}
_OPS = {exp.EQ: "=", exp.GT: ">", exp.LT: "<", exp.GTE: ">=", exp.LTE: "<=", exp.NEQ: "!=", exp.Like: "like",
        exp.Is: "is", exp.In: "in", exp.Between: "between", exp.Exists: "exists"}
#: the comparison a condition reads as when its two sides are swapped (``5 < age`` is ``age > 5``).
_FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">="}
_SET_OPS = {exp.Intersect: "intersect", exp.Union: "union", exp.Except: "except"}
_PLACEHOLDER = "value"


@dataclass(frozen=True)
class SpiderQuery:
    """One SELECT as Spider's structure (module docstring), hashable so it can sit inside a condition unit.

    Attributes:
        select: the select items ``(agg, value unit)``, in written order.
        tables: the FROM table units, sorted: ``("table", name)`` or ``("sql", SpiderQuery)``.
        join_conds: the join conditions' units (used for the keywords only).
        join_connectors: the ``and`` / ``or`` of the join conditions.
        where, where_connectors: WHERE's condition units and connectors, in written order.
        group: the GROUP BY column units' columns, in written order.
        having, having_connectors: HAVING's condition units and connectors.
        order: ``(direction, value units)`` or ``None``.
        limit: whether the query has a LIMIT.
        intersect, union, except_: the query that follows the set operation, or ``None``.
    """

    select: tuple = ()
    tables: tuple = ()
    join_conds: tuple = ()
    join_connectors: tuple = ()
    where: tuple = ()
    where_connectors: tuple = ()
    group: tuple = ()
    having: tuple = ()
    having_connectors: tuple = ()
    order: tuple | None = None
    limit: bool = False
    intersect: "SpiderQuery | None" = None
    union: "SpiderQuery | None" = None
    except_: "SpiderQuery | None" = None


@dataclass(frozen=True)
class ExactMatch:
    """The verdict of :func:`exact_match` for one prediction.

    Attributes:
        match: every component matched (and the FROM tables, where the gold has any).
        components: ``{component: matched}`` for each name in :data:`COMPONENTS`.
        error: why the prediction could not be read (parse error, not a query); then ``match`` and every
            component are ``False``, as Spider scores a prediction its parser rejects.
        partial: ``{component: (pred_total, label_total, matched)}`` for each name in :data:`COMPONENTS`: the
            counts of Spider's ``eval_partial_match`` and its 0/1 score (module docstring); for an unreadable
            prediction those of an empty query, as the script scores one (so ``and/or`` can match there).
    """

    match: bool
    components: Mapping[str, bool] = field(default_factory=dict)
    error: str | None = None
    partial: Mapping[str, tuple[int, int, bool]] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------- schema facts

def foreign_keys(db_path: str) -> tuple[tuple[str, str], ...]:
    """The foreign keys of a SQLite database as ``(("table.column", "table.column"), ...)``, lower-cased.

    A key that names no parent column refers to the parent's primary key (SQLite's rule); composite keys
    give one pair per column. The file is opened read-only.

    Args:
        db_path: path of a SQLite file.
    Returns:
        The pairs, sorted.
    Raises:
        sqlite3.Error: the file is not a readable SQLite database.

    Source: SQLite documentation, ``PRAGMA foreign_key_list`` and "SQLite Foreign Key Support" §3.
    """
    con = sqlite3.connect(ro_uri(db_path), uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        pairs = set()
        for t in tables:
            q = t.replace('"', '""')
            for row in con.execute(f'PRAGMA foreign_key_list("{q}")'):
                parent, child_col, parent_col = row[2], row[3], row[4]
                if parent_col is None:  # refers to the parent's primary key
                    pq = parent.replace('"', '""')
                    pk = [r[1] for r in con.execute(f'PRAGMA table_info("{pq}")') if r[5]]
                    if len(pk) != 1:
                        continue
                    parent_col = pk[0]
                pairs.add((f"{t}.{child_col}".lower(), f"{parent}.{parent_col}".lower()))
        return tuple(sorted(pairs))
    finally:
        con.close()


def _key_map(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each column joined by a foreign key -> the smallest name of its group (union-find over the pairs)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a.lower()), find(b.lower())
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


# ----------------------------------------------------------------------------------------- conversion

class _Converter:
    """sqlglot AST (after the shared preparation) -> :class:`SpiderQuery`."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        self.keys = keys

    def column(self, e: exp.Expression) -> str:
        if isinstance(e, exp.Star):
            return "__all__"
        if isinstance(e, exp.Column):
            if isinstance(e.this, exp.Star):
                return "__all__"
            name = f"{e.table}.{e.name}".lower() if e.table else e.name.lower()
            return self.keys.get(name, name)
        return self.opaque(e)

    def opaque(self, e: exp.Expression) -> str:
        """The expression's text with every literal replaced by one placeholder and columns mapped."""
        e = e.copy()
        for lit in list(e.find_all(exp.Literal)):
            lit.replace(exp.Literal.string(_PLACEHOLDER))
        for col in list(e.find_all(exp.Column)):
            mapped = self.column(col)
            if mapped != "__all__":
                col.replace(exp.column(mapped.split(".")[-1], mapped.split(".")[0] if "." in mapped else None))
        return "expr:" + e.sql(dialect=DIALECT)

    def col_unit(self, e: exp.Expression) -> tuple:
        e = _strip(e)
        for kind, agg in _AGGS.items():
            if type(e) is kind:
                arg = _strip(e.this) if e.this is not None else exp.Star()
                if isinstance(arg, exp.Distinct):  # COUNT(DISTINCT x): DISTINCT is dropped
                    arg = _strip(arg.expressions[0]) if len(arg.expressions) == 1 else arg
                if isinstance(arg, (exp.Column, exp.Star)):
                    return (agg, self.column(arg))
                return (agg, self.opaque(arg))
        if isinstance(e, (exp.Column, exp.Star)):
            return ("none", self.column(e))
        return ("none", self.opaque(e))

    def val_unit(self, e: exp.Expression) -> tuple:
        e = _strip(e)
        op = _ARITH.get(type(e))
        if op is not None:
            return (op, self.col_unit(e.this), self.col_unit(e.expression))
        return ("none", self.col_unit(e), None)

    def select_item(self, e: exp.Expression) -> tuple:
        e = _strip(e)
        agg = _AGGS.get(type(e))
        if agg is not None:
            arg = _strip(e.this) if e.this is not None else exp.Star()
            if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
                arg = _strip(arg.expressions[0])
            return (agg, self.val_unit(arg))
        return ("none", self.val_unit(e))

    def value(self, e: exp.Expression | None) -> Any:
        """A condition's right-hand side: a nested query, else nothing (values and columns dropped)."""
        if e is None:
            return None
        e = _strip(e)
        if isinstance(e, exp.Subquery):
            e = e.this
        if isinstance(e, exp.Query):
            return self.query(e)
        return None

    def cond_unit(self, e: exp.Expression) -> tuple:
        e = _strip(e)
        negated = False
        while isinstance(e, exp.Not):
            negated = not negated
            e = _strip(e.this)
        if e.args.get("negate"):  # x NOT LIKE y, x NOT IN (...) as sqlglot may spell them
            negated = not negated
        op = _OPS.get(type(e))
        if op is None:
            return (negated, "expr", self.opaque(e), None, None)
        if op == "exists":
            return (negated, op, None, self.value(e.this), None)
        if op == "in":
            nested = e.args.get("query")
            return (negated, op, self.val_unit(e.this), self.value(nested) if nested is not None else None, None)
        if op == "between":
            return (negated, op, self.val_unit(e.this), self.value(e.args.get("low")), self.value(e.args.get("high")))
        left, right = _strip(e.this), _strip(e.expression)
        if _is_value(left) and not _is_value(right):  # 5 < age reads as age > 5
            left, right, op = right, left, _FLIP.get(op, op)
        return (negated, op, self.val_unit(left), self.value(right), None)

    def condition(self, e: exp.Expression | None) -> tuple[tuple, tuple]:
        """The flat ``(units, connectors)`` of a condition tree, as Spider's parser reads it left to right."""
        units: list = []
        connectors: list = []

        def walk(x: exp.Expression) -> None:
            x = _strip(x)
            if isinstance(x, (exp.And, exp.Or)):
                walk(x.this)
                connectors.append("and" if isinstance(x, exp.And) else "or")
                walk(x.expression)
            else:
                units.append(self.cond_unit(x))

        if e is not None:
            walk(e.this if isinstance(e, (exp.Where, exp.Having)) else e)
        return tuple(units), tuple(connectors)

    def query(self, q: exp.Expression, order: exp.Expression | None = None,
              limit: exp.Expression | None = None) -> SpiderQuery:
        """A SELECT or a set operation; ``order`` / ``limit`` of an enclosing set operation go to its last
        SELECT (Spider's parser reads a trailing ORDER BY as part of the query after the set operator)."""
        q = _strip(q)
        if isinstance(q, exp.Subquery):
            return self.query(q.this, order, limit)
        if isinstance(q, exp.SetOperation):
            leaves: list[exp.Expression] = []
            ops: list[str] = []

            def flat(x: exp.Expression) -> None:
                x = _strip(x)
                if isinstance(x, exp.Subquery) and isinstance(x.this, exp.SetOperation):
                    x = x.this
                if isinstance(x, exp.SetOperation) and not x.args.get("order") and not x.args.get("limit"):
                    flat(x.this)
                    ops.append(_SET_OPS.get(type(x), "union"))
                    flat(x.expression)
                else:
                    leaves.append(x)

            flat(q.this)
            ops.append(_SET_OPS.get(type(q), "union"))
            flat(q.expression)
            tail = self.query(leaves[-1], order or q.args.get("order"), limit or q.args.get("limit"))
            for leaf, op in zip(reversed(leaves[:-1]), reversed(ops)):
                head = self.query(leaf)
                tail = _with(head, op, tail)
            return tail
        if not isinstance(q, exp.Select):
            raise SQLParseError(q.sql(dialect=DIALECT)[:120], "not a SELECT query")
        select = tuple(self.select_item(e) for e in q.expressions)
        tables = []
        source = q.args.get("from_", q.args.get("from"))  # the key is "from_" in sqlglot >= 26
        sources = [source.this] if source is not None else []
        joins = q.args.get("joins") or []
        sources += [j.this for j in joins]
        for s in sources:
            s = _strip(s)
            if isinstance(s, exp.Table):
                tables.append(("table", s.name.lower()))
            elif isinstance(s, exp.Subquery):
                tables.append(("sql", self.query(s.this)))
            else:
                tables.append(("table", self.opaque(s)))
        join_units: list = []
        join_conn: list = []
        for j in joins:
            if j.args.get("on") is not None:
                u, c = self.condition(j.args["on"])
                if join_units:
                    join_conn.append("and")
                join_units += u
                join_conn += c
        where, where_conn = self.condition(q.args.get("where"))
        group = tuple(self.column(_strip(g)) if isinstance(_strip(g), exp.Column) else self.opaque(g)
                      for g in (q.args["group"].expressions if q.args.get("group") is not None else ()))
        having, having_conn = self.condition(q.args.get("having"))
        order = order if order is not None else q.args.get("order")
        order_t = None
        if order is not None and order.expressions:
            direction = "asc"
            for o in order.expressions:  # the last direction written wins, as in Spider's parser
                if isinstance(o, exp.Ordered) and o.args.get("desc") is not None:
                    direction = "desc" if o.args["desc"] else "asc"
            order_t = (direction, tuple(self.val_unit(o.this if isinstance(o, exp.Ordered) else o)
                                        for o in order.expressions))
        has_limit = (limit if limit is not None else q.args.get("limit")) is not None
        return SpiderQuery(select=select, tables=tuple(sorted(tables, key=repr)), join_conds=tuple(join_units),
                           join_connectors=tuple(join_conn), where=where, where_connectors=where_conn, group=group,
                           having=having, having_connectors=having_conn, order=order_t, limit=has_limit)


def _with(head: SpiderQuery, op: str, tail: SpiderQuery) -> SpiderQuery:
    """``head`` followed by ``tail`` through the set operation ``op``."""
    return replace(head, **{"except_" if op == "except" else op: tail})


def _strip(e: exp.Expression) -> exp.Expression:
    """Without enclosing parentheses and select aliases."""
    while isinstance(e, (exp.Paren, exp.Alias)):
        e = e.this
    return e


def _is_value(e: exp.Expression) -> bool:
    return isinstance(e, (exp.Literal, exp.Null, exp.Boolean)) or (
        isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal))


def spider_query(sql: str, schema: Mapping | None = None, keys: Iterable[tuple[str, str]] = ()) -> SpiderQuery:
    """Read one SQLite query as Spider's structure (module docstring).

    Args:
        sql: one SELECT (or set operation of SELECTs).
        schema: ``{table: {column: type}}`` (:func:`textsql_clarify.sql.schema.read_schema`) to resolve
            unqualified columns, or ``None``.
        keys: foreign-key pairs (:func:`foreign_keys`); the columns each joins map to one representative.
    Returns:
        The :class:`SpiderQuery`.
    Raises:
        SQLParseError: the text does not parse, is not a query, or is too big to analyse.

    Source: Yu et al. 2018 (Spider), §Evaluation Metrics: the SQL components.
    """
    prepared = prepare_sql(sql, schema)
    # Spider's grammar has no WITH: a common table expression can shadow a table the components name (its rows
    # made up), so a query holding one is not read, as Spider's own parser reads none
    if any(True for _ in prepared.tree.find_all(exp.With)):
        raise SQLParseError(sql, "a WITH clause (common table expression): outside Spider's SQL grammar")
    return _Converter(_key_map(keys)).query(prepared.tree)


# ----------------------------------------------------------------------------------------- matching

def _multiset_match(pred: Iterable, gold: Iterable) -> bool:
    """Spider's count rule: gold count = predicted count = predicted units found in the gold (each used once)."""
    return Counter(pred) == Counter(gold)


def _keywords(q: SpiderQuery) -> set[str]:
    out = set()
    if q.where:
        out.add("where")
    if q.group:
        out.add("group")
    if q.having:
        out.add("having")
    if q.order is not None:
        out.update(("order", q.order[0]))
    if q.limit:
        out.add("limit")
    for name, nested in (("except", q.except_), ("union", q.union), ("intersect", q.intersect)):
        if nested is not None:
            out.add(name)
    if "or" in q.join_connectors + q.where_connectors + q.having_connectors:
        out.add("or")
    units = q.join_conds + q.where + q.having
    if any(u[0] for u in units):
        out.add("not")
    if any(u[1] == "in" for u in units):
        out.add("in")
    if any(u[1] == "like" for u in units):
        out.add("like")
    return out


def _components(pred: SpiderQuery, gold: SpiderQuery) -> dict[str, bool]:
    def group_name(c: str) -> str:
        return c.split(".", 1)[1] if "." in c and not c.startswith("expr:") else c

    def both_or_neither(p: bool, g: bool, equal: bool) -> bool:
        return (not p and not g) or (p and g and equal)

    iuen = True
    for name in ("intersect", "union", "except_"):
        p, g = getattr(pred, name), getattr(gold, name)
        if (p is None) != (g is None) or (p is not None and not _match(p, g)):
            iuen = False
    return {
        "select": _multiset_match(pred.select, gold.select),
        "select(no AGG)": _multiset_match((s[1] for s in pred.select), (s[1] for s in gold.select)),
        "where": _multiset_match(pred.where, gold.where),
        "where(no OP)": _multiset_match((u[2] for u in pred.where), (u[2] for u in gold.where)),
        "group(no having)": _multiset_match(map(group_name, pred.group), map(group_name, gold.group)),
        "group": both_or_neither(bool(pred.group), bool(gold.group),
                                 pred.group == gold.group and pred.having == gold.having),
        "order": both_or_neither(pred.order is not None, gold.order is not None,
                                 pred.order == gold.order and pred.limit == gold.limit),
        "and/or": set(pred.where_connectors) == set(gold.where_connectors),
        "IUEN": iuen,
        "keywords": _keywords(pred) == _keywords(gold),
    }


def _totals(pred: SpiderQuery, gold: SpiderQuery) -> dict[str, tuple[int, int]]:
    """``{component: (pred_total, label_total)}``: the unit counts of the script's ``eval_sel``, ``eval_where``,
    ``eval_group``, ``eval_having``, ``eval_order``, ``eval_and_or``, ``eval_IUEN`` and ``eval_keywords``."""
    def has(q: SpiderQuery, name: str) -> int:
        return int(getattr(q, name) is not None)

    p_ao, g_ao = set(pred.where_connectors), set(gold.where_connectors)
    # the script's eval_and_or returns (1, 1) for equal sets (empty ones too), else the two set sizes in the
    # order (label_total, pred_total) = (len(pred), len(gold)): kept as written, so the shares are the script's
    and_or = (1, 1) if p_ao == g_ao else (len(g_ao), len(p_ao))
    return {
        "select": (len(pred.select), len(gold.select)),
        "select(no AGG)": (len(pred.select), len(gold.select)),
        "where": (len(pred.where), len(gold.where)),
        "where(no OP)": (len(pred.where), len(gold.where)),
        "group(no having)": (len(pred.group), len(gold.group)),
        "group": (int(bool(pred.group)), int(bool(gold.group))),
        "order": (int(pred.order is not None), int(gold.order is not None)),
        "and/or": and_or,
        "IUEN": (sum(has(pred, n) for n in ("intersect", "union", "except_")),
                 sum(has(gold, n) for n in ("intersect", "union", "except_"))),
        "keywords": (len(_keywords(pred)), len(_keywords(gold))),
    }


def _partial(pred: SpiderQuery, gold: SpiderQuery, comps: Mapping[str, bool]) -> dict[str, tuple[int, int, bool]]:
    totals = _totals(pred, gold)
    return {c: (totals[c][0], totals[c][1], bool(comps[c])) for c in COMPONENTS}


def partial_match(verdicts: Iterable[ExactMatch]) -> dict[str, dict[str, Any]]:
    """Spider's partial-match precision, recall and F1 of each component over a set of verdicts.

    Per component: ``precision`` = matches / examples whose prediction has the component (``pred_total > 0``),
    ``recall`` = matches / examples whose gold has it (``label_total > 0``), each ``{"value", "n"}`` with ``n``
    that denominator (``value`` ``None`` when ``n == 0``); ``f1`` = 2PR / (P + R), 0.0 when P + R = 0, ``None``
    when P or R is undefined. Two departures from the script's printout, where it has no number to give: it
    prints 0 for a precision or recall over no example and then F1 = 1 whenever both are 0; here they are
    undefined (``None``), and F1 is 0 when both are 0 over some example (no match at all).

    Args:
        verdicts: :class:`ExactMatch` values of :func:`exact_match` (their ``partial`` counts).
    Returns:
        ``{component: {"precision": {"value", "n"}, "recall": {"value", "n"}, "f1": float | None}}`` for each
        name in :data:`COMPONENTS`, in order.
    Raises:
        ValueError: a verdict has no ``partial`` counts (not made by :func:`exact_match`).

    Source: Yu et al. 2018 (Spider), §Evaluation Metrics (Component Matching: "average exact match between the
    prediction and ground truth on SQL components", precision, recall and F1); the released ``evaluation.py``
    (``eval_partial_match``, ``get_scores`` and the partial averages of ``evaluate``), github.com/taoyds/spider.
    """
    sums = {c: [0, 0, 0, 0] for c in COMPONENTS}  # matches over pred_total > 0, its n, the same for label_total
    for v in verdicts:
        if set(v.partial) != set(COMPONENTS):
            raise ValueError(f"partial_match: a verdict without partial counts for every component: {v!r}")
        for c in COMPONENTS:
            pred_total, label_total, matched = v.partial[c]
            acc = sums[c]
            if pred_total > 0:
                acc[0] += matched
                acc[1] += 1
            if label_total > 0:
                acc[2] += matched
                acc[3] += 1
    out = {}
    for c, (p_hits, p_n, r_hits, r_n) in sums.items():
        prec = p_hits / p_n if p_n else None
        rec = r_hits / r_n if r_n else None
        f1 = None if prec is None or rec is None else (2 * prec * rec / (prec + rec) if prec + rec else 0.0)
        out[c] = {"precision": {"value": prec, "n": p_n}, "recall": {"value": rec, "n": r_n}, "f1": f1}
    return out


def _match(pred: SpiderQuery, gold: SpiderQuery) -> bool:
    if not all(_components(pred, gold).values()):
        return False
    return not gold.tables or pred.tables == gold.tables


def exact_match(pred_sql: str, gold_sql: str, schema: Mapping | None = None,
                keys: Iterable[tuple[str, str]] = ()) -> ExactMatch:
    """Spider's exact-set-match of one prediction against its gold (values ignored).

    Args:
        pred_sql: the predicted query.
        gold_sql: the gold query.
        schema: ``{table: {column: type}}`` of the database both run on (resolves unqualified columns), or ``None``.
        keys: its foreign-key pairs (:func:`foreign_keys`).
    Returns:
        :class:`ExactMatch`: ``match``, the per-component verdicts, ``error`` when the prediction could
        not be read (then nothing matches), and the partial-match counts (:func:`partial_match`).
    Raises:
        SQLParseError: the gold query cannot be read (the comparison is then undefined, not a miss).

    Source: Yu et al. 2018 (Spider), §Evaluation Metrics, Component Matching and Exact Matching.
    """
    keys = tuple(keys)
    gold = spider_query(gold_sql, schema, keys)
    try:
        pred = spider_query(pred_sql, schema, keys)
    except SQLParseError as e:
        empty = SpiderQuery()  # the script scores an unparsable prediction's parts as an empty query's
        return ExactMatch(False, dict.fromkeys(COMPONENTS, False), str(e),
                          _partial(empty, gold, _components(empty, gold)))
    comps = _components(pred, gold)
    return ExactMatch(all(comps.values()) and (not gold.tables or pred.tables == gold.tables), comps,
                      partial=_partial(pred, gold, comps))
