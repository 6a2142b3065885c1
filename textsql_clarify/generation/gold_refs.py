"""What a gold SQL reads: its tables, its columns and its join keys, resolved to the source schema.

Shared by the missing-schema and lexical-overlap recipes. The gold is parsed and qualified with sqlglot
(:func:`textsql_clarify.sql.schema.qualify_sql`, stars left unexpanded so a ``*`` names no column), then each
column is traced to the real table of its scope (aliases and self-joins included, sqlglot ``traverse_scope``).
A **join key** is a column on one side of an equality between columns of two different table sources.
"""
from __future__ import annotations

import functools
import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp

from ..sql.uri import ro_uri

__all__ = ["TableInfo", "SourceSchema", "GoldRefs", "source_schema", "gold_refs", "words"]


@dataclass(frozen=True)
class TableInfo:
    """One table of a source database, names as spelled there.

    Attributes:
        name: the table's name.
        columns: lower-cased name -> spelled name, in declaration order.
        types: lower-cased name -> declared type (upper-cased; ``""`` when none).
        pk: lower-cased primary-key column names.
        fks: ``(column, ref_table, ref_column)`` triples, lower-cased (``PRAGMA foreign_key_list``).
    """

    name: str
    columns: dict[str, str]
    types: dict[str, str]
    pk: frozenset[str]
    fks: tuple[tuple[str, str, str], ...]

    @property
    def fk_columns(self) -> frozenset[str]:
        """Lower-cased columns of this table that are in a foreign key."""
        return frozenset(f[0] for f in self.fks)


@dataclass(frozen=True)
class SourceSchema:
    """A database's tables (lower-cased name -> :class:`TableInfo`)."""

    tables: dict[str, TableInfo]

    def lower_schema(self) -> dict[str, dict[str, str]]:
        """``{table: {column: type}}`` lower-cased, as :func:`textsql_clarify.sql.schema.read_schema` gives."""
        return {t: {c: (ti.types[c] or "TEXT") for c in ti.columns} for t, ti in self.tables.items()}


@functools.lru_cache(maxsize=128)
def _schema_cached(path: str, mtime: float) -> SourceSchema:
    con = sqlite3.connect(ro_uri(path), uri=True)
    try:
        out = {}
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        for t in names:
            qt = t.replace('"', '""')
            info = list(con.execute(f'PRAGMA table_info("{qt}")'))
            cols = {r[1].lower(): r[1] for r in info}
            types = {r[1].lower(): (r[2] or "").upper() for r in info}
            pk = frozenset(r[1].lower() for r in info if r[5])
            fks = []
            for r in con.execute(f'PRAGMA foreign_key_list("{qt}")'):
                ref_col = r[4]
                fks.append((r[3].lower(), r[2].lower(), (ref_col or "").lower()))
            out[t.lower()] = TableInfo(t, cols, types, pk, tuple(fks))
        return SourceSchema(out)
    finally:
        con.close()


def source_schema(db_path: str | os.PathLike) -> SourceSchema:
    """The tables of a SQLite file, opened read-only; cached per (path, modification time).

    Raises:
        FileNotFoundError: no such file.
        sqlite3.DatabaseError: not a SQLite database.
    """
    p = Path(db_path)
    if not p.is_file():
        raise FileNotFoundError(f"database file not found: {db_path}")
    return _schema_cached(str(p.resolve()), p.stat().st_mtime)


@dataclass
class GoldRefs:
    """The source elements a gold SQL reads (lower-cased names).

    Attributes:
        tables: tables read.
        columns: ``(table, column)`` pairs read by name (a ``*`` names none).
        join_pairs: ``((table, column), (table, column))`` of each equality between two table sources.
        column_nodes: ``(table, column)`` -> the qualified :class:`sqlglot.exp.Column` nodes of ``tree``.
        tree: the qualified tree (stars unexpanded).
    """

    tables: set[str] = field(default_factory=set)
    columns: set[tuple[str, str]] = field(default_factory=set)
    join_pairs: list[tuple[tuple[str, str], tuple[str, str]]] = field(default_factory=list)
    column_nodes: dict[tuple[str, str], list[exp.Column]] = field(default_factory=dict)
    tree: exp.Expression | None = None

    @property
    def join_keys(self) -> set[tuple[str, str]]:
        """Columns on a side of a join equality."""
        return {side for pair in self.join_pairs for side in pair}


def gold_refs(sql: str, schema: SourceSchema) -> GoldRefs:
    """Resolve ``sql``'s tables, columns and join keys against ``schema`` (module doc).

    Args:
        sql: a gold SQL (SQLite dialect).
        schema: its database (:func:`source_schema`).
    Raises:
        textsql_clarify.errors.SQLParseError: the SQL cannot be parsed or qualified.
    Source: sqlglot ``qualify`` and ``traverse_scope`` docs.
    """
    from sqlglot.optimizer.scope import traverse_scope

    from ..sql.schema import parse_sql, qualify_sql

    tree = qualify_sql(parse_sql(sql), schema.lower_schema(), expand_stars=False)
    out = GoldRefs(tree=tree)
    node_source: dict[int, tuple[str, str]] = {}
    for scope in traverse_scope(tree):
        for name, src in scope.sources.items():
            if isinstance(src, exp.Table) and src.name.lower() in schema.tables:
                out.tables.add(src.name.lower())
        for col in scope.columns:
            src = scope.sources.get(col.table)
            if not isinstance(src, exp.Table):
                continue
            t = src.name.lower()
            c = col.name.lower()
            if t in schema.tables and c in schema.tables[t].columns:
                out.columns.add((t, c))
                out.column_nodes.setdefault((t, c), []).append(col)
                node_source[id(col)] = (t, c)
        for eq in scope.expression.find_all(exp.EQ):
            left, right = eq.this, eq.expression
            if isinstance(left, exp.Column) and isinstance(right, exp.Column) and left.table != right.table:
                a, b = node_source.get(id(left)), node_source.get(id(right))
                if a and b:
                    out.join_pairs.append((a, b))
    return out


def words(name: str) -> str:
    """A schema name in plain words: ``Song_release_year`` -> ``song release year``, ``hireDate`` ->
    ``hire date``."""
    parts = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ").replace("-", " ").split()
    return " ".join(p.lower() for p in parts) or name
