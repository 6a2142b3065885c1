"""Shared SQL helpers: parse with sqlglot (SQLite dialect), read a database schema, qualify columns.

Every module that needs an AST goes through here, so that sqlglot failures are always a typed
:class:`~textsql_clarify.errors.SQLParseError` and schemas are read the same way everywhere.

The analysis boundary (used by the metric modules: components, commitments, cells, retrieval):

- :func:`parse_for_analysis` parses and refuses a query that is too big to analyse in bounded time
  (:data:`MAX_ANALYSIS_CHARS`, :data:`MAX_ANALYSIS_NODES`, :data:`MAX_ANALYSIS_DEPTH`);
- :func:`analysis_errors` wraps the later sqlglot work (qualify, scopes, optimizer helpers, rendering):
  whatever sqlglot raises (``AssertionError``, ``KeyError``, ``ValueError``, ``TypeError``,
  ``IndexError``, ``RecursionError``, ``OptimizeError``, ``ParseError``, ...) leaves as a
  :class:`SQLParseError` with the reason.
"""
from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import sqlglot
from sqlglot import exp

from ..errors import SQLParseError, TextSQLClarifyError

DIALECT = "sqlite"

#: ``{table: {column: type}}`` with lower-cased names, the mapping sqlglot's qualify accepts.
Schema = dict[str, dict[str, str]]

#: Longest SQL text (characters) the metric modules analyse. sqlglot's qualify and scope walks cost
#: O(nodes x depth), so a 65,000-character chain of ORs took 30 s per env step. Every gold SQL of Spider
#: dev (1,034, longest 422 chars), BIRD mini-dev (500, longest 1,006), AmbiQT and MMSQL (longest 496) is
#: far below. Checked before parsing.
MAX_ANALYSIS_CHARS = 20_000
#: Most AST nodes (sqlglot expressions) a query may have to be analysed; the largest gold SQL has 88
#: nodes (Spider dev) and 205 (BIRD mini-dev). Together with the depth cap it keeps the worst case of
#: every analysis entry point at a fraction of a second (measured in ``tests/test_sqlschema.py``).
MAX_ANALYSIS_NODES = 3_000
#: Deepest AST nesting (root = 1) a query may have to be analysed: a chain of n ORs is n levels deep.
#: The deepest gold SQL is 12 levels (Spider dev) and 19 (BIRD mini-dev).
MAX_ANALYSIS_DEPTH = 120


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else "")[:limit]


def _reason(what: str, e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return f"{what}: query nested too deeply"
    detail = _first_line(e)
    return f"{what}: {type(e).__name__}" + (f": {detail}" if detail else "")


@contextlib.contextmanager
def analysis_errors(sql: str | exp.Expression, what: str) -> Iterator[None]:
    """Context manager: any exception raised inside becomes :class:`SQLParseError` (``sql``, reason).

    The reason reads ``"<what>: <ExceptionType>: <first line of the message>"`` (``"<what>: query nested
    too deeply"`` for a ``RecursionError``). This package's own typed errors (``SQLParseError`` included)
    and ``MemoryError`` pass through unchanged, as do ``KeyboardInterrupt`` / ``SystemExit``.

    Use it around sqlglot work on a query that came from outside (agent or dataset SQL): sqlglot signals
    unsupported shapes with plain ``AssertionError``, ``KeyError``, ``IndexError``, ... as well as its own
    ``SqlglotError`` family, so catching a fixed list misses some (an ``ORDER BY 1`` over ``SELECT *``
    raised ``AssertionError`` from qualify).

    Args:
        sql: the SQL text being analysed (stored in the error), or the AST (rendered only on error).
        what: the step, e.g. ``"qualify"``, ``"component sets"``.

    Raises:
        SQLParseError: for any other exception raised inside the block.
    """
    try:
        yield
    except (TextSQLClarifyError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the point of the boundary
        text = sql if isinstance(sql, str) else _safe_sql(sql)
        raise SQLParseError(text, _reason(what, e)) from e


def parse_sql(sql: str) -> exp.Expression:
    """Parse one SQLite statement.

    No size limit (see :func:`parse_for_analysis` for the metric modules' bounded version).

    Raises:
        SQLParseError: not a str, empty input, more than one statement, a sqlglot parse error, nesting too
            deep for the parser, or any other exception raised by sqlglot while parsing.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise SQLParseError(str(sql), "empty SQL" if isinstance(sql, str) else f"not a str: {type(sql).__name__}")
    with analysis_errors(sql, "parse error"):
        trees = [t for t in sqlglot.parse(sql, read=DIALECT) if t is not None]
    if len(trees) != 1:
        raise SQLParseError(sql, f"expected one statement, got {len(trees)}")
    return trees[0]


def tree_size(tree: exp.Expression, *, stop_after: int | None = None) -> tuple[int, int]:
    """``(nodes, depth)`` of a sqlglot AST, counted iteratively (no recursion limit); the root is depth 1.

    Args:
        tree: the AST.
        stop_after: stop counting once ``nodes`` exceeds this (the depth is then a lower bound).
    """
    nodes, depth = 0, 0
    stack = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        nodes += 1
        if d > depth:
            depth = d
        if stop_after is not None and nodes > stop_after:
            break
        stack.extend((child, d + 1) for child in node.iter_expressions())
    return nodes, depth


def parse_for_analysis(sql: str, *, max_chars: int = MAX_ANALYSIS_CHARS, max_nodes: int = MAX_ANALYSIS_NODES,
                       max_depth: int = MAX_ANALYSIS_DEPTH) -> exp.Expression:
    """Parse one statement for analysis (metrics), refusing one too big to analyse in bounded time.

    Args:
        sql: one SQLite statement.
        max_chars: longest text (characters) accepted, checked before parsing (:data:`MAX_ANALYSIS_CHARS`).
        max_nodes: most AST nodes accepted (:data:`MAX_ANALYSIS_NODES`).
        max_depth: deepest AST nesting accepted (:data:`MAX_ANALYSIS_DEPTH`).

    Returns:
        The sqlglot AST (a fresh tree, the caller may mutate it).

    Raises:
        SQLParseError: everything :func:`parse_sql` raises; and ``"too long to analyse: ..."`` (characters),
            ``"too large to analyse: ..."`` (nodes) or ``"nested too deeply to analyse: ..."`` (depth).
    """
    if isinstance(sql, str) and len(sql) > max_chars:
        raise SQLParseError(sql, f"too long to analyse: {len(sql):,} characters > {max_chars:,}")
    tree = parse_sql(sql)
    nodes, depth = tree_size(tree, stop_after=max_nodes)
    if nodes > max_nodes:
        raise SQLParseError(sql, f"too large to analyse: more than {max_nodes:,} AST nodes")
    if depth > max_depth:
        raise SQLParseError(sql, f"nested too deeply to analyse: AST depth {depth} > {max_depth}")
    return tree


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

    Columns are in the table's declaration order (``PRAGMA table_info``), which is the order ``*`` expands
    to. Cached per (path, modification time).

    Raises:
        FileNotFoundError: no such file.
        sqlite3.DatabaseError: not a SQLite database.
    """
    p = Path(db_path)
    if not p.is_file():
        raise FileNotFoundError(f"database file not found: {db_path}")
    return {t: dict(cols) for t, cols in _read_schema_cached(str(p.resolve()), p.stat().st_mtime)}


# ------------------------------------------------------------------------------------ ordinal references
_ORDINAL_MARK = re.compile(r"__textsql_ordinal_(\d+)__")


def is_star(item: exp.Expression) -> bool:
    """``True`` for a select item that is ``*`` or ``t.*`` (an alias around it is looked through)."""
    node = item.this if isinstance(item, exp.Alias) else item
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


def ordinal_references(tree: exp.Expression) -> Iterator[tuple[exp.Query, exp.Literal]]:
    """Every ``GROUP BY k`` / ``ORDER BY k`` / ``DISTINCT ON (k)`` ordinal, with the query it indexes.

    Yields ``(query, literal)``: ``query`` is the SELECT or set operation (whose output columns are its
    leftmost branch's) that owns the clause; ``literal`` the integer literal node. Window ``ORDER BY`` is
    not a reference to output columns and is skipped.
    """
    for q in list(tree.find_all(exp.Select, exp.SetOperation)):
        nodes: list[exp.Expression] = []
        group = q.args.get("group")
        if group is not None:
            nodes += group.expressions
        order = q.args.get("order")
        if order is not None:
            nodes += [o.this if isinstance(o, exp.Ordered) else o for o in order.expressions]
        distinct = q.args.get("distinct")
        if isinstance(distinct, exp.Distinct) and isinstance(distinct.args.get("on"), exp.Expression):
            nodes += distinct.args["on"].expressions
        for n in nodes:
            if isinstance(n, exp.Literal) and not n.is_string and n.is_int:
                yield q, n


def _mask_unresolvable_ordinals(tree: exp.Expression) -> int:
    """Replace (in place) each ordinal that sqlglot's qualify cannot resolve without expanding stars by a
    marker node qualify leaves alone: one at or after a ``*`` item (sqlglot would index the unexpanded
    list, or assert), or out of range. Returns how many were masked; :func:`_unmask_ordinals` undoes it."""
    masked = 0
    for q, lit in list(ordinal_references(tree)):
        k = int(lit.this)
        items = q.selects
        if k < 1 or k > len(items) or any(is_star(i) for i in items[:k]):
            lit.replace(exp.Var(this=f"__textsql_ordinal_{k}__"))
            masked += 1
    return masked


def _unmask_ordinals(tree: exp.Expression) -> exp.Expression:
    for v in list(tree.find_all(exp.Var)):
        m = _ORDINAL_MARK.fullmatch(v.name or "")
        if m:
            if v is tree:
                return exp.Literal.number(int(m.group(1)))
            v.replace(exp.Literal.number(int(m.group(1))))
    return tree


def qualify_sql(tree: exp.Expression, schema: Schema | None, *, expand_stars: bool = True) -> exp.Expression:
    """Return a copy of ``tree`` with every column resolved to its table (sqlglot ``qualify``).

    Aliases are expanded, so ``t1.name`` and ``student.name`` end up the same. With ``schema=None``
    only what the query itself says is used. ``expand_stars``: replace ``*`` by the schema's columns.

    Ordinals (``ORDER BY 1``, ``GROUP BY 2``) that point at or past a ``*`` item, or out of range, are kept
    as the ordinal they are: they are masked from qualify and restored after. sqlglot resolves ordinals on
    the select list as written, so on such an ordinal it raises (``AssertionError``) or, where a star stays
    unexpanded, silently picks the wrong item.

    Raises:
        SQLParseError: sqlglot cannot resolve the query (unknown column, ambiguous reference), or raises
            anything else (:func:`analysis_errors`).
    """
    from sqlglot.optimizer.qualify import qualify

    with analysis_errors(tree, "cannot qualify"):
        t = tree.copy()
        masked = _mask_unresolvable_ordinals(t)
        out = qualify(t, schema=schema or None, dialect=DIALECT, validate_qualify_columns=False,
                      identify=False, quote_identifiers=False, expand_stars=expand_stars)
        return _unmask_ordinals(out) if masked else out


def _safe_sql(tree: exp.Expression) -> str:
    """The SQL text of ``tree`` for an error message; never raises."""
    try:
        return tree.sql(dialect=DIALECT)
    except Exception:  # noqa: BLE001 - only used to label an error
        return f"<{type(tree).__name__} node>"
