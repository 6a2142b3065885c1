"""Shared SQL helpers: parse with sqlglot (SQLite dialect), read a database schema, qualify columns.

Every module that needs an AST goes through here, so parse failures are always a typed
:class:`~textsql_clarify.errors.SQLParseError` and schemas are read the same way everywhere.
"""
from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .errors import SQLParseError

DIALECT = "sqlite"

#: ``{table: {column: type}}`` with lower-cased names, the mapping sqlglot's qualify accepts.
Schema = dict[str, dict[str, str]]


def parse_sql(sql: str) -> exp.Expression:
    """Parse one SQLite statement.

    Raises:
        SQLParseError: empty input, more than one statement, or a sqlglot parse error.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise SQLParseError(str(sql), "empty SQL")
    try:
        trees = [t for t in sqlglot.parse(sql, read=DIALECT) if t is not None]
    except SqlglotError as e:
        raise SQLParseError(sql, f"parse error: {str(e).splitlines()[0][:200]}") from e
    except RecursionError as e:
        raise SQLParseError(sql, "query nested too deeply") from e
    if len(trees) != 1:
        raise SQLParseError(sql, f"expected one statement, got {len(trees)}")
    return trees[0]


@functools.lru_cache(maxsize=256)
def _read_schema_cached(path: str, mtime: float) -> tuple:
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    con = sqlite3.connect(uri, uri=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        out = []
        for t in tables:
            cols = tuple((r[1].lower(), (r[2] or "TEXT").upper()) for r in con.execute(f'PRAGMA table_info("{t}")'))
            out.append((t.lower(), cols))
        return tuple(out)
    finally:
        con.close()


def read_schema(db_path: str) -> Schema:
    """Read ``{table: {column: type}}`` (lower-cased) from a SQLite file, opened read-only.

    Cached per (path, modification time).

    Raises:
        FileNotFoundError: no such file.
        sqlite3.DatabaseError: not a SQLite database.
    """
    p = Path(db_path)
    if not p.is_file():
        raise FileNotFoundError(f"database file not found: {db_path}")
    return {t: dict(cols) for t, cols in _read_schema_cached(str(p.resolve()), p.stat().st_mtime)}


def qualify_sql(tree: exp.Expression, schema: Schema | None) -> exp.Expression:
    """Return a copy of ``tree`` with every column resolved to its table (sqlglot ``qualify``).

    Aliases are expanded, so ``t1.name`` and ``student.name`` end up the same. With ``schema=None``
    only what the query itself says is used.

    Raises:
        SQLParseError: sqlglot cannot resolve the query (unknown column, ambiguous reference).
    """
    from sqlglot.optimizer.qualify import qualify

    try:
        return qualify(tree.copy(), schema=schema or None, dialect=DIALECT, validate_qualify_columns=False,
                       identify=False, quote_identifiers=False)
    except (SqlglotError, KeyError, ValueError, RecursionError) as e:
        raise SQLParseError(tree.sql(dialect=DIALECT), f"cannot qualify: {str(e)[:200]}") from e
