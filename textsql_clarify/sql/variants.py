"""Database variants for test-suite EX: K copies of a SQLite database with their values fuzzed.

Test-suite execution accuracy (Zhong, Yu and Klein 2020, "Semantic Evaluation for Text-to-SQL with Distilled
Test Suites", §3) runs the prediction and the gold on several databases of the same schema: a query that
matches the gold on one database by chance (a constant that happens to be the answer, a filter that happens
to select every row, the count of another table that happens to be equal) differs on some other database.
:func:`build_variants` makes those databases from one source database:

* **Schema**: every variant is an exact copy of the source (SQLite's backup API), so tables, columns, types,
  indexes, views and triggers are the source's; only the rows of ordinary tables change (virtual tables and
  ``sqlite_*`` tables keep theirs). Triggers are dropped while rows are written, then recreated.
* **Rows per table**: ``n'`` drawn uniformly from ``[ceil(n/2), 2n]`` for a table of ``n`` rows (an empty table
  stays empty), at most :data:`MAX_ROWS_PER_TABLE`. Keeping ``n`` would keep every ``count(*)`` of a whole table,
  so ``SELECT count(*) FROM t2`` would still match a gold counting another table of the same size, and the
  answer-prior constants (``count(*)*0+3``) would still match a ``count(*)`` gold of a 3-row table; the paper's
  fuzzer draws table sizes afresh for the same reason. The range stays within a factor 2 of the source so that
  joins and filters keep about the source's selectivity. The cap (BIRD's tables of 10^5+ rows) keeps K copies
  small and a whole table under the env's row cap; Spider dev's largest table has 4,079 rows. A table that is
  empty in the source gets :data:`EMPTY_TABLE_ROWS` rows over a small default domain of its declared types
  (:func:`_default_domain`) and the planted literals: otherwise every count over it is 0 on every variant, the
  answer ``count(*)*0`` guesses (``../shared/data/spider_dev``'s ``wta_1`` has only empty tables).
* **Values** (per column, from the column's own non-NULL values; the NULL rate is kept): each cell is, with
  probability :data:`FRESH_RATE`, a fresh value of the column's kind, else one of the column's observed values
  (so equality joins that the schema does not declare still find partners). Fresh values: integers uniform in
  ``[min, max]`` (integers stay integers), reals uniform in ``[min, max]`` at the column's decimals, dates
  (text in one ISO form, ``YYYY-MM-DD`` with an optional time) uniform in their range in the same form, other
  text drawn from the column's values and the planted literals, or, for :data:`TEXT_MUTATION_RATE` of them, an
  observed value with a digit appended (``'USA 3'``: a filter true of every source row, ``country = 'USA'``
  where every airline is in the USA, is then false of some). A column of mixed storage classes draws observed
  values only.
* **Keys**: a column with a one-column UNIQUE or PRIMARY KEY constraint gets distinct values (integers drawn
  without replacement from the range, extended past ``max`` only when the range is too small; other types
  from the observed values and literals, the table shrinking to that many rows when they run out). Multi-column
  keys and CHECK / NOT NULL constraints are kept by ``INSERT OR IGNORE`` (a row that breaks one is dropped).
  A declared foreign key column draws from the referenced column's values *in the same variant* (tables are
  written parents first; a cycle is closed by a repair pass that re-points or drops each dangling value), so
  every non-NULL foreign key value exists in the referenced table. A foreign key points, at :data:`HOT_RATE`
  per row, at a parent row that holds a planted literal (:func:`_hot_values`), so that a gold filtering two
  joined tables (``FLIGHTS`` from an airport in Aberdeen to one in Ashley) still finds rows.
* **Planted literals** (:func:`gold_literals`): the values the golds over this database compare a column with
  (``WHERE country = 'France'``, ``age > 30``, ``name LIKE '%Smith%'``) are added to that column's pool, numbers
  with their neighbours (``29, 30, 31``: a ``>``/``>=`` boundary falls on both sides), a date with the days either
  side, a LIKE pattern with its wildcards removed; each planted value is placed in at least one row with
  probability :data:`PLANT_FORCE_RATE` and then drawn at :data:`PLANT_RATE` per row, so the golds' filters still
  select rows on most variants (and none on some). The paper plants the gold's literals for the same reason
  (§3.2). A literal on a foreign key column is planted in the column it references.

Variants are built once and cached in ``cache_dir`` (default ``cache_root()/variants``, beside the rebuilt
AmbiQT databases), in a folder named by a SHA-256 of the source file's bytes, the literals, ``k``, ``seed`` and
:data:`BUILDER_VERSION`; they are written read-only (mode 0444) and meant to be opened read-only (the sandbox
does). The source database is opened read-only (``mode=ro`` URI) and never written.

Sources: Zhong, Yu and Klein 2020 §3 (fuzzing within column types, gold literals, foreign keys drawn from the
parent); SQLite docs (backup API, ``INSERT OR IGNORE``, ``PRAGMA foreign_key_list`` / ``index_list``);
implementation ours (standard library and sqlite3; sqlglot reads the golds' literals).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from sqlglot import exp

from ..errors import SQLParseError, TextSQLClarifyError
from ..progress import report
from .schema import parse_sql
from .uri import ro_uri

__all__ = ["BUILDER_VERSION", "DEFAULT_K", "MAX_ROWS_PER_TABLE", "FRESH_RATE", "PLANT_RATE", "PLANT_FORCE_RATE",
           "GoldLiteral", "VariantBuildError", "gold_literals", "literals_for_golds", "build_variants",
           "variant_folder", "variants_for_samples", "foreign_keys", "default_cache_dir"]

#: Bumped whenever the builder's output for the same inputs changes (it is part of the cache key).
BUILDER_VERSION = 1
#: Variants per database by default (besides the source). Measured on Spider dev's 935 scorable golds
#: (``bench/bench_ex_suite.py``, ``docs/metrics.md`` "Test-suite EX"): with the constant rule off, the answer-prior
#: policies (``count(*)*0``, ``count(*)*0+3``, both in one row, a 0 spelled as an impossible filter) keep
#: 0.009-0.017 at K = 1, 0.001-0.002 at K = 6 and 0.000 from K = 8 on (to K = 16); the smallest K of the grid with
#: every residual 0. A matching prediction then costs K + 1 executions of each query; one that does not match on
#: the original costs one.
DEFAULT_K = 8
#: Most rows a table of a variant holds (see the module docstring, "Rows per table").
MAX_ROWS_PER_TABLE = 10_000
#: Probability that a cell gets a fresh value of its column's kind rather than an observed one.
FRESH_RATE = 0.5
#: Probability per row that a column with planted literals takes one of them.
PLANT_RATE = 0.15
#: Probability per row that a foreign key column points at a parent row holding a planted literal
#: (:func:`_hot_values`) rather than at any parent row.
HOT_RATE = 0.3
#: Probability that each planted literal is placed in at least one row of a variant.
PLANT_FORCE_RATE = 0.85
#: Share of fresh text values that are an observed value with a suffix (``'USA'`` -> ``'USA 3'``) rather than an
#: observed value: without it a text column with one distinct value (every airline in ``USA``) keeps every
#: filter on it true of every row, on every variant.
TEXT_MUTATION_RATE = 0.2
#: Rows of a variant of a table that is empty in the source: uniform in this range (inclusive). Every count over
#: an empty table is 0 on every variant otherwise, which is what the answer prior ``count(*)*0`` guesses.
EMPTY_TABLE_ROWS = (1, 10)
#: Most decimals a fresh real keeps.
_MAX_DECIMALS = 6
_DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S")


class VariantBuildError(TextSQLClarifyError):
    """A variant cannot be built from a database (``path`` and ``reason`` say why)."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot build database variants of {self.path!r}: {reason}")


class GoldLiteral(NamedTuple):
    """One value a gold compares a column with.

    Attributes:
        table: the column's table as the database names it (``None``: not resolved; planted in every table
            with a column of that name).
        column: the column's name (``None``: no column known; not planted).
        value: ``int``, ``float`` or ``str`` (a LIKE pattern keeps its wildcards here; :func:`build_variants`
            strips them).
        op: the comparison: ``"="``, ``"<>"``, ``"<"``, ``"<="``, ``">"``, ``">="``, ``"in"``, ``"between"``,
            ``"like"``, ``"glob"``.
    """

    table: str | None
    column: str | None
    value: Any
    op: str = "="


def default_cache_dir() -> Path:
    """``textsql_clarify.models.cache_root() / "variants"``: beside the rebuilt AmbiQT databases."""
    from ..models import cache_root

    return cache_root() / "variants"


# ----------------------------------------------------------------------------------------- gold literals
_OPS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.Like: "like",
        exp.ILike: "like", exp.Glob: "glob"} if hasattr(exp, "Glob") else {
        exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.Like: "like",
        exp.ILike: "like"}
_FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">="}


def _literal_value(node: exp.Expression, columns: frozenset[str] | None):
    """The Python value of a literal node, or ``None``: a string or number literal, a negated number, or a
    double-quoted word that is no column of the database (SQLite reads ``"France"`` as the string then)."""
    if isinstance(node, exp.Paren):
        return _literal_value(node.this, columns)
    if isinstance(node, exp.Neg):
        v = _literal_value(node.this, columns)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if isinstance(node, exp.Literal):
        text = node.this
        if node.is_string:
            return text
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return None
    if (isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier)
            and node.this.quoted and columns is not None and node.name.lower() not in columns):
        return node.name
    return None


def _tables_in_scope(node: exp.Expression) -> dict[str, str]:
    """alias (lower-cased) -> table name for the tables of the SELECT enclosing ``node`` and of every SELECT
    above it (correlated subqueries see the outer aliases)."""
    out: dict[str, str] = {}
    sel = node.find_ancestor(exp.Select)
    while sel is not None:
        for t in sel.find_all(exp.Table):
            if t.find_ancestor(exp.Select) is sel and t.name:
                out.setdefault((t.alias_or_name or t.name).lower(), t.name)
        sel = sel.find_ancestor(exp.Select)
    return out


def _resolve(col: exp.Column, schema: Mapping[str, Mapping[str, str]] | None) -> tuple[str | None, str]:
    """``(table or None, column)`` of a column reference, reading aliases from the enclosing SELECTs and, for an
    unqualified name, the one table in scope that has it (``schema``)."""
    scope = _tables_in_scope(col)
    name = col.name
    if col.table:
        table = scope.get(col.table.lower(), col.table)
    else:
        table = None
        if schema is not None:
            lower = {t.lower(): t for t in schema}
            having = [t for t in dict.fromkeys(scope.values())
                      if t.lower() in lower and name.lower() in {c.lower() for c in schema[lower[t.lower()]]}]
            if len(having) == 1:
                table = having[0]
        elif len(set(scope.values())) == 1:
            table = next(iter(scope.values()))
    if schema is not None and table is not None:  # the schema mapping's spelling of both names
        lower = {t.lower(): t for t in schema}
        table = lower.get(table.lower(), table)
        cols = {c.lower(): c for c in schema.get(table, ())}
        name = cols.get(name.lower(), name)
    return table, name


def gold_literals(sql: str, schema: Mapping[str, Mapping[str, str]] | None = None) -> set[GoldLiteral]:
    """The values a SQL query compares a column with, and the columns, read with sqlglot (SQLite dialect).

    Comparisons read: ``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=`` (either side the column), ``IN (v, ...)``,
    ``BETWEEN a AND b``, ``LIKE``, ``GLOB``; in every part of the query (subqueries, HAVING, JOIN ... ON).
    With ``schema`` (``{table: {column: type}}``, e.g. :func:`textsql_clarify.sql.schema.read_schema`) an
    unqualified column is given the one table in scope that has it, and a double-quoted word that is no column
    (``country = "France"``, common in Spider) is read as a string, as SQLite reads it.

    Args:
        sql: one SQLite query.
        schema: the database's schema, or ``None``.
    Returns:
        A set of :class:`GoldLiteral` (empty when the query compares no column with a literal).
    Raises:
        SQLParseError: the SQL cannot be parsed (:func:`textsql_clarify.sql.schema.parse_sql`).
    Source: Zhong et al. 2020 §3.2 (the gold's literals are planted in the fuzzed databases).
    """
    tree = parse_sql(sql)
    columns = (frozenset(c.lower() for cols in schema.values() for c in cols) if schema is not None else None)
    out: set[GoldLiteral] = set()

    def add(col: exp.Expression, value, op: str) -> None:
        while isinstance(col, (exp.Paren, exp.Cast)) or (hasattr(exp, "Lower") and isinstance(col, (exp.Lower, exp.Upper))):
            col = col.this
        if not isinstance(col, exp.Column) or value is None or isinstance(value, bool):
            return
        if _literal_value(col, columns) is not None:  # a quoted string on the left
            return
        table, name = _resolve(col, schema)
        out.add(GoldLiteral(table, name, value, op))

    for node in tree.walk():
        node = node[0] if isinstance(node, tuple) else node
        kind = type(node)
        if kind in _OPS:
            op = _OPS[kind]
            left, right = node.this, node.expression
            lv, rv = _literal_value(left, columns), _literal_value(right, columns)
            if rv is not None and lv is None:
                add(left, rv, op)
            elif lv is not None and rv is None:
                add(right, lv, _FLIP.get(op, op))
        elif isinstance(node, exp.In) and not node.args.get("query"):
            for e in node.expressions:
                add(node.this, _literal_value(e, columns), "in")
        elif isinstance(node, exp.Between):
            add(node.this, _literal_value(node.args.get("low"), columns), "between")
            add(node.this, _literal_value(node.args.get("high"), columns), "between")
    return out


def literals_for_golds(golds: Iterable[str], db_path: str | os.PathLike) -> set[GoldLiteral]:
    """The union of :func:`gold_literals` over several golds of one database, read with its schema; a gold
    sqlglot cannot parse contributes nothing (it still runs on the variants as written).

    Args:
        golds: SQL texts over ``db_path``.
        db_path: the database (schema read read-only).
    Returns:
        A set of :class:`GoldLiteral`.
    """
    from .schema import read_schema

    schema = read_schema(str(db_path))
    out: set[GoldLiteral] = set()
    for sql in golds:
        if not isinstance(sql, str) or not sql.strip():
            continue
        try:
            out |= gold_literals(sql, schema)
        except SQLParseError:
            continue
    return out


# ----------------------------------------------------------------------------------------- reading the source
@dataclass
class _Column:
    name: str
    decl: str
    notnull: bool
    values: list = field(default_factory=list)  # observed non-NULL values, with multiplicity
    n_rows: int = 0
    unique: bool = False
    kind: str = "text"  # int | real | date | text | mixed | empty
    date_format: str | None = None
    decimals: int = 0
    planted: list = field(default_factory=list)
    fk_planted: list = field(default_factory=list)  # planted values of the column a foreign key column references

    @property
    def null_rate(self) -> float:
        return 0.0 if self.n_rows == 0 else 1.0 - len(self.values) / self.n_rows


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _decimals(v: float) -> int:
    text = repr(v)
    if "e" in text or "E" in text:
        return _MAX_DECIMALS
    return min(_MAX_DECIMALS, len(text.split(".", 1)[1])) if "." in text else 0


def _date_format(values: Sequence[str]) -> str | None:
    for fmt in _DATE_FORMATS:
        try:
            for v in values:
                _dt.datetime.strptime(v, fmt)
            return fmt
        except ValueError:
            continue
    return None


def _classify(col: _Column) -> None:
    vals = col.values
    if not vals:
        col.kind = "empty"
        return
    types = {type(v) for v in vals}
    if types == {int}:
        col.kind = "int"
    elif types <= {int, float}:
        col.kind = "real"
        col.decimals = max(_decimals(float(v)) for v in vals)
    elif types == {str}:
        distinct = list(dict.fromkeys(vals))
        fmt = _date_format(distinct[:2000]) if all(len(v) >= 10 and v[:4].isdigit() for v in distinct) else None
        col.kind, col.date_format = ("date", fmt) if fmt else ("text", None)
    else:
        col.kind = "mixed"


def foreign_keys(con: sqlite3.Connection, table: str) -> list[tuple[str, str, str]]:
    """``(column, referenced table, referenced column)`` of each one-column foreign key of ``table`` whose ends
    exist (``PRAGMA foreign_key_list``; a reference without a column names the parent's primary key). Names
    are given as the database spells them.

    Args:
        con: an open connection. table: a table name.
    Returns:
        A list of triples (empty when none resolve).
    Source: SQLite docs, ``PRAGMA foreign_key_list``.
    """
    tables = {r[0].lower(): r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    rows = con.execute(f"PRAGMA foreign_key_list({_q(table)})").fetchall()
    by_id: dict[int, list] = {}
    for r in rows:  # id, seq, table, from, to, on_update, on_delete, match
        by_id.setdefault(r[0], []).append(r)
    own = {r[1].lower(): r[1] for r in con.execute(f"PRAGMA table_info({_q(table)})")}
    out = []
    for refs in by_id.values():
        if len(refs) != 1:
            continue  # multi-column keys are kept by INSERT OR IGNORE only
        _, _, parent, child_col, parent_col = refs[0][:5]
        parent_t = tables.get(str(parent).lower())
        if parent_t is None or str(child_col).lower() not in own:
            continue
        pcols = {r[1].lower(): r[1] for r in con.execute(f"PRAGMA table_info({_q(parent_t)})")}
        if parent_col is None:
            pk = [r[1] for r in con.execute(f"PRAGMA table_info({_q(parent_t)})") if r[5] == 1]
            parent_col = pk[0] if len(pk) == 1 else None
        if parent_col is None or str(parent_col).lower() not in pcols:
            continue
        out.append((own[str(child_col).lower()], parent_t, pcols[str(parent_col).lower()]))
    return out


def _unique_columns(con: sqlite3.Connection, table: str, info: list) -> set[str]:
    """Columns of ``table`` with a one-column UNIQUE or PRIMARY KEY constraint (lower-cased)."""
    out = set()
    pk = [r[1] for r in info if r[5] > 0]
    if len(pk) == 1:
        out.add(pk[0].lower())
    for idx in con.execute(f"PRAGMA index_list({_q(table)})").fetchall():  # seq, name, unique, origin, partial
        if idx[2] and not (len(idx) > 4 and idx[4]):
            cols = con.execute(f"PRAGMA index_info({_q(idx[1])})").fetchall()
            if len(cols) == 1 and cols[0][2] is not None:
                out.add(cols[0][2].lower())
    return out


def _ordinary_tables(con: sqlite3.Connection) -> list[str]:
    rows = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid").fetchall()
    out = []
    virtual = [n for n, s in rows if s and s.lstrip().upper().startswith("CREATE VIRTUAL")]
    for name, sql in rows:
        if name.startswith("sqlite_") or name in virtual or any(name.startswith(v + "_") for v in virtual):
            continue
        out.append(name)
    return out


def _parents_first(tables: list[str], fks: dict[str, list[tuple[str, str, str]]]) -> list[str]:
    """Tables with each table after those it references (a cycle or self-reference is broken in source order)."""
    done: list[str] = []
    seen: set[str] = set()
    visiting: set[str] = set()

    def visit(t: str) -> None:
        if t in seen or t in visiting:
            return
        visiting.add(t)
        for _, parent, _ in fks.get(t, ()):
            if parent != t:
                visit(parent)
        visiting.discard(t)
        seen.add(t)
        done.append(t)

    for t in tables:
        visit(t)
    return done


# ----------------------------------------------------------------------------------------- fresh values
def _plant_values(lit: GoldLiteral, col: _Column) -> list:
    """The values planted for one literal in one column: the value, numbers with their neighbours, dates with
    the days either side, a LIKE/GLOB pattern without its wildcards."""
    v = lit.value
    if lit.op in ("like", "glob") and isinstance(v, str):
        wild = "%_" if lit.op == "like" else "*?"
        bare = "".join(ch for ch in v if ch not in wild)
        return [bare] if bare else []
    if isinstance(v, int) and not isinstance(v, bool):
        return [v - 1, v, v + 1]
    if isinstance(v, float):
        step = 10.0 ** -max(1, min(_MAX_DECIMALS, _decimals(v)))
        return [round(v - step, _MAX_DECIMALS), v, round(v + step, _MAX_DECIMALS)]
    if isinstance(v, str):
        out = [v]
        if col.kind == "date" and col.date_format:
            for fmt in _DATE_FORMATS:
                try:
                    d = _dt.datetime.strptime(v, fmt)
                except ValueError:
                    continue
                out += [(d - _dt.timedelta(days=1)).strftime(fmt), (d + _dt.timedelta(days=1)).strftime(fmt)]
                break
        elif col.kind in ("int", "real"):
            try:
                num = int(v) if v.strip().lstrip("-").isdigit() else float(v)
            except ValueError:
                num = None
            if num is not None:
                return _plant_values(GoldLiteral(lit.table, lit.column, num, lit.op), col)
        return out
    return []


def _fresh(col: _Column, rng: random.Random):
    """One fresh value of the column's kind, within its observed range (see the module docstring)."""
    vals = col.values
    if col.kind == "int":
        return rng.randint(min(vals), max(vals))
    if col.kind == "real":
        lo, hi = float(min(vals)), float(max(vals))
        x = round(rng.uniform(lo, hi), col.decimals)
        return x
    if col.kind == "date" and col.date_format:
        parsed = [_dt.datetime.strptime(v, col.date_format) for v in (min(vals), max(vals))]
        span = (parsed[1] - parsed[0]).total_seconds()
        d = parsed[0] + _dt.timedelta(seconds=rng.uniform(0, span) if span > 0 else 0)
        if col.date_format == "%Y-%m-%d":
            d = d.replace(hour=0, minute=0, second=0, microsecond=0)
        text = d.strftime(col.date_format)
        return text[:-3] if col.date_format.endswith(".%f") else text
    if rng.random() < TEXT_MUTATION_RATE:  # a value no row of the source has: "true of every row" breaks
        return f"{rng.choice(vals)} {rng.randint(2, 9)}"
    pool = vals + col.planted
    return rng.choice(pool)


def _cell(col: _Column, rng: random.Random):
    if col.null_rate > 0 and rng.random() < col.null_rate:
        return None
    if col.planted and rng.random() < PLANT_RATE:
        return rng.choice(col.planted)
    if not col.values:
        return rng.choice(col.planted) if col.planted else None
    if col.kind != "mixed" and rng.random() < FRESH_RATE:
        return _fresh(col, rng)
    return rng.choice(col.values)


def _distinct_pool(col: _Column, n: int, rng: random.Random) -> list:
    """Up to ``n`` distinct values for a unique column (fewer when a non-integer column runs out)."""
    planted = list(dict.fromkeys(v for v in col.planted if rng.random() < PLANT_FORCE_RATE))
    if col.kind == "int":
        lo, hi = min(col.values), max(col.values)
        taken = set(planted)
        need = n - len(planted)
        if need > 0:
            room = hi - lo + 1
            if room >= need + len(taken):
                picks = []
                while len(picks) < need:
                    v = rng.randint(lo, hi)
                    if v not in taken:
                        taken.add(v)
                        picks.append(v)
            else:  # the range is too small: all of it, then past max
                picks = [v for v in range(lo, hi + 1) if v not in taken]
                v = hi + 1
                while len(picks) < need:
                    if v not in taken:
                        picks.append(v)
                    v += 1
            planted += picks
        out = planted[:n]
    else:
        rest = [v for v in dict.fromkeys(col.values) if v not in set(planted)]
        rng.shuffle(rest)
        extra = []
        if col.kind in ("real", "date"):
            seen = set(planted) | set(rest)
            for _ in range(2 * n):
                v = _fresh(col, rng)
                if v not in seen:
                    seen.add(v)
                    extra.append(v)
        mixed = rest + extra
        rng.shuffle(mixed)
        out = (planted + mixed)[:n]
    rng.shuffle(out)
    return out


# ----------------------------------------------------------------------------------------- building one variant
@dataclass
class _Table:
    name: str
    columns: list[_Column]
    n_rows: int
    fks: list[tuple[str, str, str]]


def _read_source(src: sqlite3.Connection, literals: Iterable[GoldLiteral]) -> tuple[list[_Table], dict]:
    tables = _ordinary_tables(src)
    fks = {t: foreign_keys(src, t) for t in tables}
    out: dict[str, _Table] = {}
    for t in tables:
        info = src.execute(f"PRAGMA table_info({_q(t)})").fetchall()  # cid, name, type, notnull, dflt, pk
        uniq = _unique_columns(src, t, info)
        cols = [_Column(r[1], r[2] or "", bool(r[3]), unique=r[1].lower() in uniq) for r in info]
        n = src.execute(f"SELECT count(*) FROM {_q(t)}").fetchone()[0]
        for c in cols:
            c.n_rows = n
            if n:
                c.values = [r[0] for r in src.execute(f"SELECT {_q(c.name)} FROM {_q(t)} WHERE {_q(c.name)} IS NOT NULL")]
            _classify(c)
        out[t] = _Table(t, cols, n, fks[t])
    # plant literals; a literal on a foreign key column goes to the column it references
    lower = {t.lower(): t for t in out}
    for lit in literals:
        if lit.column is None:
            continue
        targets = ([lower[lit.table.lower()]] if lit.table is not None and lit.table.lower() in lower
                   else list(out) if lit.table is None else [])
        for t in targets:
            tab = out[t]
            for c in tab.columns:
                if c.name.lower() != lit.column.lower():
                    continue
                dest_t, dest_c = tab, c
                hops = [c]
                for _hop in range(4):
                    fk = next((f for f in dest_t.fks if f[0].lower() == dest_c.name.lower()), None)
                    if fk is None:
                        break
                    dest_t = out[fk[1]]
                    dest_c = next(cc for cc in dest_t.columns if cc.name.lower() == fk[2].lower())
                    hops.append(dest_c)
                for v in _plant_values(lit, dest_c):
                    if v not in dest_c.planted:
                        dest_c.planted.append(v)
                    for fk_col in hops[:-1]:  # the foreign key columns on the way prefer it too
                        if v not in fk_col.fk_planted:
                            fk_col.fk_planted.append(v)
    for tab in out.values():
        if tab.n_rows == 0:  # an empty source table: a small default domain per declared type
            for c in tab.columns:
                c.values = _default_domain(c)
                _classify(c)
    return [out[t] for t in _parents_first(tables, fks)], out


def _default_domain(col: _Column) -> list:
    """Values for a column of a table that is empty in the source, by SQLite's type affinity rules
    (sqlite.org/datatype3.html §3.1): INT -> 1..20; REAL/FLOA/DOUB/NUMERIC/DEC -> 0.5..10.0; a DATE or TIME
    type -> 20 days of 2000; other -> ``'<column> 1'`` .. ``'<column> 5'``."""
    decl = col.decl.upper()
    if "INT" in decl:
        return list(range(1, 21))
    if any(w in decl for w in ("CHAR", "CLOB", "TEXT")):
        return [f"{col.name} {i}" for i in range(1, 6)]
    if "DATE" in decl or "TIME" in decl:
        return [(_dt.date(2000, 1, 1) + _dt.timedelta(days=17 * i)).isoformat() for i in range(20)]
    if any(w in decl for w in ("REAL", "FLOA", "DOUB", "NUM", "DEC")):
        return [i / 2 for i in range(1, 21)]
    return [f"{col.name} {i}" for i in range(1, 6)]



def _row_count(n: int, rng: random.Random) -> int:
    if n == 0:
        return rng.randint(*EMPTY_TABLE_ROWS)
    lo, hi = min(math.ceil(n / 2), MAX_ROWS_PER_TABLE), min(2 * n, MAX_ROWS_PER_TABLE)
    return rng.randint(lo, hi)


def _force_planted(col_vals: list, planted: Sequence, rng: random.Random) -> None:
    """Put each planted value in at least one row (each with probability :data:`PLANT_FORCE_RATE`), on
    distinct rows, in place."""
    if not planted or not col_vals:
        return
    rows = list(range(len(col_vals)))
    rng.shuffle(rows)
    for v, r in zip([v for v in planted if rng.random() < PLANT_FORCE_RATE], rows):
        col_vals[r] = v


def _hot_values(dst: sqlite3.Connection, parent: _Table, pcol: str) -> list:
    """The referenced column's values on the parent rows that hold a planted literal in some column (written
    already): a foreign key drawn towards them lets a gold's filter on the parent (``T2.city = 'Aberdeen'``) meet
    the child's rows, as a join of two such filters needs."""
    conds, args = [], []
    for c in parent.columns:
        if c.planted:
            conds.append(f"{_q(c.name)} IN ({', '.join('?' for _ in c.planted)})")
            args += c.planted
    if not conds:
        return []
    sql = (f"SELECT DISTINCT {_q(pcol)} FROM {_q(parent.name)} WHERE {_q(pcol)} IS NOT NULL AND "
           f"({' OR '.join(conds)})")
    return [r[0] for r in dst.execute(sql, args)]


def _write_table(dst: sqlite3.Connection, tab: _Table, rng: random.Random, tables: Mapping[str, _Table]) -> None:
    n = _row_count(tab.n_rows, rng)
    fk_of = {f[0].lower(): f for f in tab.fks}
    data: dict[str, list] = {}
    # unique columns first: their pools may shrink the table
    for c in tab.columns:
        if c.unique and c.name.lower() not in fk_of and (c.values or c.planted):
            if not c.values:
                c_pool = list(dict.fromkeys(c.planted))
            else:
                c_pool = _distinct_pool(c, n, rng)
            n = min(n, len(c_pool))
            data[c.name] = c_pool
    for name in list(data):
        data[name] = data[name][:n]
    for c in tab.columns:
        key = c.name.lower()
        if c.name in data:
            continue
        if key in fk_of:
            _, parent, pcol = fk_of[key]
            if parent == tab.name and pcol in data:
                parent_vals = list(dict.fromkeys(v for v in data[pcol] if v is not None))
            else:
                parent_vals = [r[0] for r in dst.execute(
                    f"SELECT DISTINCT {_q(pcol)} FROM {_q(parent)} WHERE {_q(pcol)} IS NOT NULL")]
            if parent_vals:
                if c.unique:
                    rng.shuffle(parent_vals)
                    n = min(n, len(parent_vals))
                    for k in list(data):
                        data[k] = data[k][:n]
                    data[c.name] = parent_vals[:n]
                else:
                    nulls = c.null_rate
                    present = set(parent_vals)
                    hot = list(dict.fromkeys([v for v in c.fk_planted if v in present]
                                             + (_hot_values(dst, tables[parent], pcol) if parent != tab.name else [])))
                    col_vals = [None if nulls and rng.random() < nulls else
                                rng.choice(hot) if hot and rng.random() < HOT_RATE else
                                rng.choice(parent_vals) for _ in range(n)]
                    _force_planted(col_vals, hot[:8], rng)
                    data[c.name] = col_vals
                continue
        if not c.values and not c.planted:
            data[c.name] = [None] * n
            continue
        col_vals = [_cell(c, rng) for _ in range(n)]
        _force_planted(col_vals, c.planted, rng)
        data[c.name] = col_vals
    names = [c.name for c in tab.columns]
    rows = list(zip(*(data[nm][:n] for nm in names))) if n else []
    if rows:
        sql = (f"INSERT OR IGNORE INTO {_q(tab.name)} ({', '.join(map(_q, names))}) "
               f"VALUES ({', '.join('?' for _ in names)})")
        dst.executemany(sql, rows)


def _repair_foreign_keys(dst: sqlite3.Connection, tables: list[_Table], rng: random.Random) -> None:
    """Re-point (or set NULL, or drop) every foreign key value that has no row in the referenced table; loops
    until no value dangles (a drop may leave other rows dangling), at most 8 rounds."""
    for _ in range(8):
        changed = False
        for tab in tables:
            cols = {c.name: c for c in tab.columns}
            for col, parent, pcol in tab.fks:
                cond = (f"{_q(col)} IS NOT NULL AND {_q(col)} NOT IN "
                        f"(SELECT {_q(pcol)} FROM {_q(parent)} WHERE {_q(pcol)} IS NOT NULL)")
                bad = [r[0] for r in dst.execute(f"SELECT DISTINCT {_q(col)} FROM {_q(tab.name)} WHERE {cond}")]
                if not bad:
                    continue
                changed = True
                parent_vals = [r[0] for r in dst.execute(
                    f"SELECT DISTINCT {_q(pcol)} FROM {_q(parent)} WHERE {_q(pcol)} IS NOT NULL")]
                for v in bad:
                    if parent_vals:
                        dst.execute(f"UPDATE OR IGNORE {_q(tab.name)} SET {_q(col)} = ? WHERE {_q(col)} = ?",
                                    (rng.choice(parent_vals), v))
                if not cols[col].notnull:
                    dst.execute(f"UPDATE OR IGNORE {_q(tab.name)} SET {_q(col)} = NULL WHERE {cond}")
                dst.execute(f"DELETE FROM {_q(tab.name)} WHERE {cond}")
        if not changed:
            return


def _build_one(src_path: Path, out_path: Path, literals: Sequence[GoldLiteral], seed: int) -> None:
    rng = random.Random(seed)
    src = sqlite3.connect(ro_uri(src_path), uri=True)
    try:
        dst = sqlite3.connect(str(out_path), isolation_level=None)
        try:
            src.backup(dst)
            order, _ = _read_source(src, literals)
        finally:
            src.close()
        dst.execute("PRAGMA foreign_keys = OFF")
        dst.execute("PRAGMA journal_mode = DELETE")
        triggers = dst.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND sql IS NOT NULL"
                               ).fetchall()
        dst.execute("BEGIN")
        for name, _ in triggers:
            dst.execute(f"DROP TRIGGER {_q(name)}")
        for tab in order:
            dst.execute(f"DELETE FROM {_q(tab.name)}")
        by_name = {t.name: t for t in order}
        for tab in order:
            _write_table(dst, tab, rng, by_name)
        _repair_foreign_keys(dst, order, rng)
        for _, sql in triggers:
            dst.execute(sql)
        dst.execute("COMMIT")
        dst.execute("VACUUM")
        dst.close()
    except sqlite3.Error as e:
        raise VariantBuildError(src_path, f"{type(e).__name__}: {e}") from e


# ----------------------------------------------------------------------------------------- the cache
_MEMO: dict[tuple, list[Path]] = {}
_LOCK = threading.Lock()
_HASH_MEMO: dict[tuple, str] = {}


def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    hit = _HASH_MEMO.get(key)
    if hit is None:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        hit = _HASH_MEMO[key] = h.hexdigest()
    return hit


def _literal_key(literals: Iterable[GoldLiteral]) -> list:
    rows = []
    for lit in literals:
        lit = lit if isinstance(lit, GoldLiteral) else GoldLiteral(*lit)
        rows.append([lit.table, lit.column, type(lit.value).__name__, repr(lit.value), lit.op])
    return sorted(rows, key=lambda r: json.dumps(r))


def variant_folder(db_path: str | os.PathLike, *, k: int = DEFAULT_K, literals: Iterable[GoldLiteral] = (),
                   seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder :func:`build_variants` uses for these arguments (nothing is built or checked):
    ``<cache_dir>/<db stem>-<first 20 hex digits of the SHA-256 of the source bytes, literals, k, seed and
    BUILDER_VERSION>``.

    Raises:
        FileNotFoundError: no such database file.
    """
    path = Path(db_path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"database file not found: {db_path}")
    key = json.dumps({"db": _file_sha256(path), "literals": _literal_key(literals), "k": k, "seed": seed,
                      "builder": BUILDER_VERSION}, sort_keys=True)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in path.stem)[:60]
    return root / f"{safe}-{digest}"


def build_variants(db_path: str | os.PathLike, *, k: int = DEFAULT_K, literals: Iterable[GoldLiteral] = (),
                   seed: int = 0, cache_dir: str | os.PathLike | None = None,
                   progress: bool | None = None) -> list[Path]:
    """``k`` database variants of a SQLite database (see the module docstring), built once and cached.

    Args:
        db_path: the source SQLite file (opened read-only, never written).
        k: number of variants, >= 1 (:data:`DEFAULT_K`).
        literals: :class:`GoldLiteral` values to plant (:func:`literals_for_golds` of the golds over this
            database); plain ``(table, column, value[, op])`` tuples are accepted too.
        seed: the seed of the draw; variant ``i`` uses ``seed * 1_000_003 + i``.
        cache_dir: folder of the cached variants (created); ``None``: :func:`default_cache_dir`.
        progress: a stderr line per variant built (``database variants of pets.sqlite: 2/4 built (k=4), 1.3 s``;
            :func:`textsql_clarify.progress.report`: ``None`` = only on a terminal); a cached folder says nothing.
    Returns:
        The ``k`` paths ``<folder>/variant_<i>.sqlite`` (:func:`variant_folder`), files of mode 0444. A second
        call with the same arguments and an unchanged source returns the same paths without building.
    Raises:
        FileNotFoundError: no such database file.
        ValueError: ``k`` is not an int >= 1, or a literal is not a 3- or 4-tuple.
        VariantBuildError: SQLite refused to build a variant (the message names the database).
    Source: Zhong, Yu and Klein 2020 §3; implementation ours.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    lits: list[GoldLiteral] = []
    for lit in literals:
        if isinstance(lit, GoldLiteral):
            lits.append(lit)
        elif isinstance(lit, (tuple, list)) and len(lit) in (3, 4):
            lits.append(GoldLiteral(*lit))
        else:
            raise ValueError(f"literal must be a GoldLiteral or a (table, column, value[, op]) tuple, got {lit!r}")
    src = Path(db_path).resolve()
    folder = variant_folder(src, k=k, literals=lits, seed=seed, cache_dir=cache_dir)
    paths = [folder / f"variant_{i:02d}.sqlite" for i in range(k)]
    memo_key = (str(folder),)
    with _LOCK:
        hit = _MEMO.get(memo_key)
        if hit is not None and all(p.is_file() for p in hit):
            return list(hit)
        manifest = folder / "manifest.json"
        if manifest.is_file() and all(p.is_file() for p in paths):
            _MEMO[memo_key] = paths
            return list(paths)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", suffix=".tmp", dir=folder.parent))
        t0 = time.perf_counter()
        try:
            for i in range(k):
                out = tmp / paths[i].name
                _build_one(src, out, lits, seed * 1_000_003 + i)
                os.chmod(out, 0o444)
                report(f"database variants of {src.name}: {i + 1}/{k} built (k={k}), "
                       f"{time.perf_counter() - t0:.1f} s", progress)
            (tmp / "manifest.json").write_text(json.dumps({
                "source": src.name, "source_sha256": _file_sha256(src), "k": k, "seed": seed,
                "builder_version": BUILDER_VERSION, "literals": _literal_key(lits)}, indent=1), encoding="utf-8")
            os.chmod(tmp / "manifest.json", 0o444)
            try:
                os.rename(tmp, folder)
            except OSError:  # another process finished the same folder first: use it
                if not (folder / "manifest.json").is_file():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _MEMO[memo_key] = paths
        return list(paths)


def variants_for_samples(samples: Iterable[Any], *, k: int = DEFAULT_K, seed: int = 0,
                         cache_dir: str | os.PathLike | None = None,
                         progress: bool | None = None) -> dict[str, list[Path]]:
    """The variants of every database the samples use, each with the literals of all golds over it planted
    (the gold, every interpretation's gold and a drift event's post-drift gold): what an env or an evaluation
    builds once before scoring by test-suite EX.

    Args:
        samples: :class:`~textsql_clarify.samples.Sample` objects (``db_path``, ``gold_sql``, ``interpretations``,
            ``drift``); samples without any gold still get their database's variants.
        k, seed, cache_dir, progress: as :func:`build_variants` (each variant built names its database).
    Returns:
        ``{db_path: [variant paths]}``, keyed by each sample's ``db_path`` as given.
    Raises:
        FileNotFoundError, VariantBuildError: as :func:`build_variants`.
    """
    golds: dict[str, list[str]] = {}
    for s in samples:
        mine = golds.setdefault(s.db_path, [])
        mine += [g for g in (s.gold_sql, *(it.gold_sql for it in s.interpretations),
                             getattr(s.drift, "post_gold_sql", None) if s.drift is not None else None) if g]
    return {db: build_variants(db, k=k, literals=literals_for_golds(gs, db), seed=seed, cache_dir=cache_dir,
                               progress=progress)
            for db, gs in golds.items()}
