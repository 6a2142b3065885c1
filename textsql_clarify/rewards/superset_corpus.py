"""Legitimate column supersets of gold queries, built mechanically: the corpus that the width bound of
relaxed EX must keep passing (``docs/metrics.md``, "Execution accuracy").

ABISS App. A tolerates extra columns because models add auxiliary ones, "foreign key columns or count
columns used in HAVING clauses". From a gold ``SELECT`` this module appends, with sqlglot (SQLite dialect),
the auxiliary columns a model typically adds, each kind alone and all of them combined:

* ``key``: the single-column primary key of a table the gold reads (one variant per table), for a gold
  without aggregates or GROUP BY (a key beside an aggregate is a bare column, not an auxiliary one);
* ``order_key``: an ORDER BY expression the SELECT list lacks (the aggregate or the column the ranking
  uses: "which student has the highest GPA" answered with name and GPA);
* ``having_aggregate``: an aggregate the HAVING clause uses;
* ``group_column``: a GROUP BY expression the SELECT list lacks;
* ``combined``: every column above for that gold at once (when there are two or more).

:func:`legitimate_supersets` builds the SQL; :func:`verified_supersets` executes each variant and keeps it
only when it really is a superset: it runs, returns as many rows as the gold, and its first columns (the
gold's own) give the gold's rows (in order when the gold is ordered). Source: ours, from ABISS App. A's
examples of auxiliary columns; used by ``tests/test_superset_corpus.py`` on Spider dev.
"""
from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sqlglot import exp

from ..sql.sandbox import ExecutionResult, SQLiteSandbox
from ..errors import SQLParseError
from ..sql.schema import analysis_errors, is_star, parse_for_analysis
from ..sql.uri import ro_uri
from .execution import gold_is_ordered, is_empty_result, normalise_value

#: the kinds of auxiliary column, in the order variants are produced.
KINDS = ("key", "order_key", "having_aggregate", "group_column", "combined")


@dataclass(frozen=True)
class Superset:
    """One legitimate superset of a gold query.

    Attributes:
        kind: one of :data:`KINDS`.
        sql: the gold with the auxiliary column(s) appended to its SELECT list.
        added: the SQL of each appended column.
    """

    kind: str
    sql: str
    added: tuple[str, ...]


def primary_keys(db_path: str | Path) -> dict[str, str]:
    """``{table: key column}`` (lower-cased) for each table of a SQLite file with a one-column primary key.

    Raises:
        sqlite3.Error: the file is not a readable SQLite database.
    """
    con = sqlite3.connect(ro_uri(db_path), uri=True)  # immutable=1 for a WAL file: no -wal/-shm beside it
    try:
        out = {}
        for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            pk = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")') if r[5]]
            if len(pk) == 1:
                out[t.lower()] = pk[0].lower()
        return out
    finally:
        con.close()


def _has_aggregate(node: exp.Expression) -> bool:
    return any(isinstance(n, exp.AggFunc) for n in node.walk())


def legitimate_supersets(gold_sql: str, keys: dict[str, str]) -> list[Superset]:
    """The auxiliary-column variants of one gold (see the module docstring); not yet executed.

    Args:
        gold_sql: a gold query. Compound queries (UNION ...), ``SELECT *`` and SQL sqlglot cannot parse
            give no variant.
        keys: ``{table: primary key column}`` (:func:`primary_keys`).

    Returns:
        The variants, by kind in :data:`KINDS` order; an expression the SELECT list already holds is never
        added, and one expression is added at most once. Never raises.
    """
    try:
        tree = parse_for_analysis(gold_sql)
    except SQLParseError:
        return []
    if not isinstance(tree, exp.Select) or any(is_star(s) for s in tree.selects):
        return []
    selected = {(s.this if isinstance(s, exp.Alias) else s).sql(dialect="sqlite").lower() for s in tree.selects}
    aliases = {s.alias.lower() for s in tree.selects if isinstance(s, exp.Alias) and s.alias}
    grouped = tree.args.get("group") is not None
    aggregated = grouped or any(_has_aggregate(s) for s in tree.selects)
    candidates: list[tuple[str, exp.Expression]] = []
    if not aggregated:
        items = []
        frm = tree.args.get("from") or tree.args.get("from_")
        if frm is not None:
            items.append(frm.this)
        items += [j.this for j in tree.args.get("joins") or []]
        for it in items:
            if isinstance(it, exp.Table) and it.name.lower() in keys:
                qual = it.alias_or_name
                candidates.append(("key", exp.column(keys[it.name.lower()], table=qual if len(items) > 1 else None)))
    order = tree.args.get("order")
    for o in (order.expressions if order is not None else []):
        key = o.this if isinstance(o, exp.Ordered) else o
        if isinstance(key, exp.Literal) or (isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases):
            continue  # an ordinal or an output alias: already selected
        candidates.append(("order_key", key))
    having = tree.args.get("having")
    if having is not None:
        for agg in having.find_all(exp.AggFunc):
            candidates.append(("having_aggregate", agg))
    group = tree.args.get("group")
    for g in (group.expressions if group is not None else []):
        if not isinstance(g, exp.Literal):
            candidates.append(("group_column", g))
    out: list[Superset] = []
    seen = set(selected)
    combined: list[exp.Expression] = []
    for kind, node in candidates:
        text = node.sql(dialect="sqlite")
        if text.lower() in seen:
            continue
        seen.add(text.lower())
        combined.append(node)
        out.append(_variant(tree, kind, [node]))
    if len(combined) >= 2:
        out.append(_variant(tree, "combined", combined))
    return [v for v in out if v is not None]


def _variant(tree: exp.Select, kind: str, nodes: list[exp.Expression]) -> Superset | None:
    try:
        with analysis_errors(tree, "superset variant"):
            new = tree.copy()
            for k, node in enumerate(nodes):
                new.append("expressions", exp.alias_(node.copy(), f"aux_{k}"))
            return Superset(kind, new.sql(dialect="sqlite"), tuple(n.sql(dialect="sqlite") for n in nodes))
    except SQLParseError:
        return None


def is_true_superset(variant: ExecutionResult, gold: ExecutionResult, ordered: bool) -> bool:
    """Whether ``variant`` (the gold's columns first, then the appended ones) ran, returned the gold's row
    count, and its first ``len(gold.columns)`` columns give the gold's rows (in order when ``ordered``)."""
    m = len(gold.columns)
    if not variant.ok or variant.truncated or variant.row_count != gold.row_count or len(variant.columns) <= m:
        return False
    proj = [tuple(map(normalise_value, r[:m])) for r in variant.rows]
    ref = [tuple(map(normalise_value, r)) for r in gold.rows]
    return proj == ref if ordered else Counter(proj) == Counter(ref)


def verified_supersets(gold_sql: str, sandbox: SQLiteSandbox, keys: dict[str, str],
                       gold_key: str | None = None) -> tuple[ExecutionResult | None, list[tuple[Superset, ExecutionResult]]]:
    """Execute the gold and its :func:`legitimate_supersets`; keep the variants that really are supersets.

    Returns:
        ``(gold result, [(variant, its result)])``; the gold result is ``None`` and the list empty when the
        gold fails, is truncated or has no data (such a gold is not scorable).
    """
    gold = sandbox.execute_gold(gold_key, gold_sql) if gold_key is not None else sandbox.execute(gold_sql)
    if not gold.ok or gold.truncated or is_empty_result(gold):
        return None, []
    ordered = gold_is_ordered(gold_sql)
    kept = []
    for v in legitimate_supersets(gold_sql, keys):
        res = sandbox.execute(v.sql)
        if is_true_superset(res, gold, ordered):
            kept.append((v, res))
    return gold, kept
