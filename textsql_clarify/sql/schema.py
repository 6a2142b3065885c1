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

import contextvars
import functools
import re
import sqlite3
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from ..errors import SQLParseError, TextSQLClarifyError
from .readonly import ReadOnlySchema
from .uri import ro_uri

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


class analysis_errors:  # noqa: N801 - used as a function: ``with analysis_errors(sql, "qualify"):``
    """Context manager: any exception raised inside becomes :class:`SQLParseError` (``sql``, reason). A class, not
    a generator: it is entered many times per env step.

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

    __slots__ = ("sql", "what")

    def __init__(self, sql: str | exp.Expression, what: str) -> None:
        self.sql = sql
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, e: BaseException | None, tb: object) -> bool:
        if e is None or isinstance(e, (TextSQLClarifyError, MemoryError)) or not isinstance(e, Exception):
            return False
        text = self.sql if isinstance(self.sql, str) else _safe_sql(self.sql)
        raise SQLParseError(text, _reason(self.what, e)) from e


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
        The sqlglot AST (a fresh tree, the caller may mutate it). Inside :func:`shared_analysis` (one env step)
        the text is parsed once and every later call gets a copy of that parse.

    Raises:
        SQLParseError: everything :func:`parse_sql` raises; and ``"too long to analyse: ..."`` (characters),
            ``"too large to analyse: ..."`` (nodes) or ``"nested too deeply to analyse: ..."`` (depth).
    """
    memo = _ACTIVE.get()
    if memo is not None and isinstance(sql, str):
        return memo.get(("parse", sql, max_chars, max_nodes, max_depth),
                        lambda: _parse_bounded(sql, max_chars, max_nodes, max_depth)).copy()
    return _parse_bounded(sql, max_chars, max_nodes, max_depth)


def _parse_bounded(sql: str, max_chars: int, max_nodes: int, max_depth: int) -> exp.Expression:
    """:func:`parse_for_analysis` without the step memo."""
    if isinstance(sql, str) and len(sql) > max_chars:
        raise SQLParseError(sql, f"too long to analyse: {len(sql):,} characters > {max_chars:,}")
    tree = parse_sql(sql)
    nodes, depth = tree_size(tree, stop_after=max_nodes)
    if nodes > max_nodes:
        raise SQLParseError(sql, f"too large to analyse: more than {max_nodes:,} AST nodes")
    if depth > max_depth:
        raise SQLParseError(sql, f"nested too deeply to analyse: AST depth {depth} > {max_depth}")
    return tree


class UnusableViewWarning(UserWarning):
    """A view of a database cannot be queried outside the application that made it (it needs a collation or
    function only that application defined, or names a table that is gone): :func:`read_schema` leaves it out.
    The message names the file, the view and SQLite's reason."""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@functools.lru_cache(maxsize=256)
def _read_schema_cached(path: str, mtime: float) -> tuple[tuple, tuple]:
    """``(tables, unusable)``: ``tables`` as ``((name, ((column, type), ...)), ...)``, lower-cased and sorted;
    ``unusable``: ``((view, reason), ...)`` for the views SQLite cannot prepare here (left out of ``tables``).

    Each view is prepared once with ``EXPLAIN`` (compiled, never run): a collation or function that only the
    making application defined fails there (``PRAGMA table_info`` alone misses an ``ORDER BY ... COLLATE``)."""
    con = sqlite3.connect(ro_uri(path), uri=True)  # immutable=1 for a WAL file: no -wal/-shm beside it
    try:
        entries = con.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name").fetchall()
        out, unusable = [], []
        for t, kind in entries:
            try:
                if kind == "view":
                    con.execute("EXPLAIN SELECT * FROM " + _quote(t)).fetchone()
                cols = tuple((r[1].lower(), (r[2] or "TEXT").upper())
                             for r in con.execute("PRAGMA table_info(" + _quote(t) + ")"))
            except sqlite3.OperationalError as e:
                if kind != "view":
                    raise
                unusable.append((t.lower(), str(e)))
                continue
            out.append((t.lower(), cols))
        return tuple(out), tuple(unusable)
    finally:
        con.close()


def _read(db_path: str) -> tuple[tuple, tuple]:
    p = Path(db_path)
    if not p.is_file():
        raise FileNotFoundError(f"database file not found: {db_path}")
    return _read_schema_cached(str(p.resolve()), p.stat().st_mtime)


def read_schema(db_path: str) -> Schema:
    """Read ``{table: {column: type}}`` (lower-cased) from a SQLite file, opened read-only.

    Columns are in the table's declaration order (``PRAGMA table_info``), which is the order ``*`` expands
    to. Cached per (path, modification time). A view SQLite cannot prepare here (one that needs a collation
    or function only the making application defined, e.g. ``ORDER BY name COLLATE mycoll`` or ``myfunc(x)``,
    or that names a missing table) is left out, with an :class:`UnusableViewWarning` naming it (once per
    file, view and reason: Python's default warning filter); :func:`unusable_views` lists them
    (``docs/platform.md`` "Views the sandbox cannot query").

    Raises:
        FileNotFoundError: no such file.
        sqlite3.DatabaseError: not a SQLite database, or a malformed schema (a table that cannot be read).

    Source: SQLite's documentation of ``PRAGMA table_info``, ``EXPLAIN`` and application-defined
    collations and functions (``sqlite3_create_collation``, ``sqlite3_create_function``).
    """
    tables, unusable = _read(db_path)
    for view, reason in unusable:
        warnings.warn(f"{db_path}: view {view!r} cannot be queried here ({reason}); it is left out of the schema",
                      UnusableViewWarning, stacklevel=1)  # one location: shown once per message
    return {t: dict(cols) for t, cols in tables}


def unusable_views(db_path: str) -> dict[str, str]:
    """``{view: SQLite's reason}`` (lower-cased names) of the views :func:`read_schema` leaves out of the
    schema of ``db_path`` because SQLite cannot prepare them here; ``{}`` for most databases. Cached as
    :func:`read_schema` is; no warning.

    Raises:
        FileNotFoundError, sqlite3.DatabaseError: as :func:`read_schema`.
    """
    return dict(_read(db_path)[1])


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
    return _qualify(tree, schema, expand_stars=expand_stars, copy=True)


def _qualify(tree: exp.Expression, schema: Schema | None, *, expand_stars: bool, copy: bool) -> exp.Expression:
    """:func:`qualify_sql`; ``copy=False`` qualifies ``tree`` itself (a tree the caller owns and gives up)."""
    from sqlglot.optimizer.qualify import qualify

    with analysis_errors(tree, "cannot qualify"):
        t = tree.copy() if copy else tree
        masked = _mask_unresolvable_ordinals(t)
        ms = mapping_schema(schema)
        out = qualify(t, schema=ms, dialect=DIALECT, validate_qualify_columns=False,
                      identify=False, quote_identifiers=False, expand_stars=expand_stars)
        _trim_schema_caches(ms)
        return _unmask_ordinals(out) if masked else out


def _safe_sql(tree: exp.Expression) -> str:
    """The SQL text of ``tree`` for an error message; never raises, and logs nothing (sqlglot would warn
    on its ``sqlglot`` logger for what the dialect cannot spell, e.g. a VALUES alias with named columns)."""
    try:
        return tree.sql(dialect=DIALECT, unsupported_level=sqlglot.ErrorLevel.IGNORE)
    except Exception:  # noqa: BLE001 - only used to label an error
        return f"<{type(tree).__name__} node>"


# ------------------------------------------------------------------------- caching and per-step sharing
# ``docs/platform.md`` "Step cost": sqlglot's schema object is built once per database schema, and inside one env step
# (``shared_analysis``) the prediction is parsed once and qualified once, whichever scorer asks first.

#: most sqlglot ``MappingSchema`` objects kept (one per distinct database schema seen).
MAPPING_SCHEMA_CACHE = 256
#: entries a cached ``MappingSchema``'s own lookup memos may hold before they are emptied: they are keyed by
#: table expressions (aliases included), so a stream of novel predictions would otherwise grow them forever.
MAPPING_SCHEMA_MEMO_CAP = 4096


def schema_fingerprint(schema: Mapping | None) -> tuple | None:
    """A hashable copy of ``{table: {column: type}}`` that keeps table and column order (``None`` for ``None``
    or an empty schema). Two schemas with one fingerprint are the same mapping, in the same order.

    Raises:
        TypeError: ``schema`` is not such a mapping, or holds unhashable names or types.
    """
    if not schema:
        return None
    fp = tuple((t, tuple(cols.items())) for t, cols in schema.items())
    hash(fp)
    return fp


@functools.lru_cache(maxsize=MAPPING_SCHEMA_CACHE)
def _mapping_schema_cached(fp: tuple) -> Any:
    from sqlglot.schema import MappingSchema

    return MappingSchema({t: dict(cols) for t, cols in fp}, dialect=DIALECT)


def mapping_schema(schema: Mapping | Any | None) -> Any:
    """sqlglot's ``MappingSchema`` for ``{table: {column: type}}``, built once per distinct schema (content and
    order) and shared: building it normalises every name and was a fifth of a detailed step's cost.

    Args:
        schema: the mapping, ``None`` / empty (returns ``None``: qualify without a schema), or an object that is
            already a sqlglot ``Schema`` (returned as is).

    Returns:
        What sqlglot's ``qualify(schema=...)`` accepts; the same object for equal schemas. qualify only reads it.
    """
    from sqlglot.schema import Schema as SqlglotSchema

    if isinstance(schema, SqlglotSchema):
        return schema
    try:
        fp = schema_fingerprint(schema)
    except (TypeError, AttributeError):
        return schema or None  # let sqlglot build (and reject) what this cache cannot key
    return None if fp is None else _mapping_schema_cached(fp)


def _trim_schema_caches(ms: Any) -> None:
    """Empty the lookup memos of a shared ``MappingSchema`` once they hold more than
    :data:`MAPPING_SCHEMA_MEMO_CAP` entries (they only memoise lookups; emptying changes no result)."""
    for name in ("_find_cache", "_normalized_table_cache", "_normalized_name_cache"):
        memo = getattr(ms, name, None)
        if isinstance(memo, dict) and len(memo) > MAPPING_SCHEMA_MEMO_CAP:
            memo.clear()


class AnalysisMemo:
    """What one env step has worked out about its SQL texts, keyed by the text and every input that matters
    (:func:`shared_analysis`). A failure is remembered too, and raised again to every later caller."""

    __slots__ = ("_values", "calls", "schema", "fp")

    def __init__(self) -> None:
        self._values: dict[tuple, tuple[bool, Any]] = {}
        #: how many times each kind of work (``key[0]``) was really done, e.g. ``{"parse": 1}``
        self.calls: dict[str, int] = {}
        #: the step's database schema object and its fingerprint (set by :func:`shared_analysis` when given)
        self.schema: Any = None
        self.fp: tuple | None = None

    def fingerprint(self, schema: Any) -> tuple | None:
        """:func:`schema_fingerprint` of ``schema``; not recomputed for the step's own schema object.
        Raises as :func:`schema_fingerprint`."""
        if schema is not None and schema is self.schema:
            return self.fp
        return schema_fingerprint(schema)

    def get(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """The value under ``key``, computed by ``compute()`` on first use (its exception, if it raised,
        is raised again to every caller). Values are shared: callers copy what they mutate."""
        hit = self._values.get(key)
        if hit is None:
            self.calls[key[0]] = self.calls.get(key[0], 0) + 1
            try:
                hit = (True, compute())
            except SQLParseError as e:
                hit = (False, e)
            self._values[key] = hit
        ok, value = hit
        if ok:
            return value
        # without its traceback: an error kept across steps (:data:`ANALYSIS_CACHE_SIZE`) and raised again at
        # every step would grow its traceback chain by one raise each time (and hold the frames' locals)
        raise value.with_traceback(None)

    def __len__(self) -> int:
        return len(self._values)


_ACTIVE: contextvars.ContextVar[AnalysisMemo | None] = contextvars.ContextVar("textsql_analysis_memo", default=None)


#: most predictions whose analysis :func:`shared_analysis` keeps across steps (least recently used dropped first);
#: one entry holds the sqlglot trees and sets worked out in that prediction's steps (tens of KB for a Spider
#: query). 0 turns the cross-step cache off (every step analyses its prediction afresh).
ANALYSIS_CACHE_SIZE = 512
#: most values one kept entry may gather (it also holds the gold-side analyses of the samples the prediction
#: was scored against); past this it is emptied and starts again, which changes no result.
ANALYSIS_ENTRY_CAP = 256
#: ``(prediction text, database path, schema fingerprint) -> AnalysisMemo``, most recently used last.
_CROSS_STEP: "OrderedDict[tuple, AnalysisMemo]" = OrderedDict()
#: ``id(schema) -> (schema, fingerprint)``: the fingerprint of the last sandbox schemas seen, so that a step does not
#: rebuild its database schema's fingerprint (the schema is held, so its id is not reused). Only a
#: :class:`~textsql_clarify.sql.readonly.ReadOnlySchema` (a sandbox's) is kept: a plain dict changed in place would
#: keep a stale fingerprint.
_FINGERPRINTS: dict[int, tuple[Any, tuple | None]] = {}


def _fingerprint_once(schema: Any) -> tuple | None:
    """:func:`schema_fingerprint` of ``schema``, computed once per :class:`ReadOnlySchema` object (each time for
    any other mapping). Raises as it does."""
    if type(schema) is not ReadOnlySchema:
        return schema_fingerprint(schema)
    hit = _FINGERPRINTS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    fp = schema_fingerprint(schema)
    if len(_FINGERPRINTS) >= 256:
        _FINGERPRINTS.clear()
    _FINGERPRINTS[id(schema)] = (schema, fp)
    return fp


def clear_analysis_cache() -> None:
    """Drop every prediction analysis :func:`shared_analysis` kept across steps (frees their memory)."""
    _CROSS_STEP.clear()


class shared_analysis:  # noqa: N801 - used as a function: ``with shared_analysis() as memo``
    """Context manager for one env step: inside it, :func:`parse_for_analysis` parses each text once,
    :func:`qualified_for_analysis` qualifies it once per schema, and the metric modules share their
    per-text work (:func:`active_memo`). Nested use joins the scope already open. Results are the same as
    without it (``tests/test_step_sharing.py``). A class rather than a generator: entering and leaving it
    costs well under a microsecond.

    Across steps: opened with the step's prediction, its database path and schema (``shared_analysis(sql,
    db_path, schema)``), the step's memo is kept in a bounded LRU (:data:`ANALYSIS_CACHE_SIZE` predictions,
    each at most :data:`ANALYSIS_ENTRY_CAP` values) keyed by all three, so a prediction seen again (GRPO: the
    same completion within a group and across epochs) is not parsed, qualified or canonicalised again.
    Every value in a memo is keyed by the text and every input it depends on, and callers never mutate
    what they get (they copy), so a kept memo gives what a fresh one would; the database path and the
    schema's fingerprint in the key keep one database's analysis from ever serving another. Opened without
    them, the memo is dropped on exit (nothing is cached across steps).

    Args:
        sql: the step's prediction text (``None``: no cross-step cache).
        db_path: the database the prediction is scored on.
        schema: that database's ``{table: {column: type}}`` (its fingerprint, :func:`schema_fingerprint`, is
            part of the key; one that cannot be fingerprinted turns the cross-step cache off for the step).

    Source: ``docs/platform.md`` "Step cost" (one parse and one qualify of the prediction per step); sqlglot's
    ``parse_one`` and ``optimizer.qualify`` docs.

    Yields (``as``):
        The step's :class:`AnalysisMemo`.
    """

    __slots__ = ("_token", "_key")

    def __init__(self, sql: str | None = None, db_path: str | None = None, schema: Any = None) -> None:
        self._key = (sql, db_path, schema) if isinstance(sql, str) and ANALYSIS_CACHE_SIZE > 0 else None

    def __enter__(self) -> AnalysisMemo:
        memo = _ACTIVE.get()
        if memo is not None:
            self._token = None
            return memo
        memo = None
        if self._key is not None:
            sql, db_path, schema = self._key
            try:
                fp = _fingerprint_once(schema)
            except (TypeError, AttributeError):
                pass  # a schema that cannot be keyed: a fresh memo, dropped on exit
            else:
                memo = self._kept((sql, str(db_path), fp))
                memo.schema, memo.fp = schema, fp  # every schema under this key has this fingerprint
        if memo is None:
            memo = AnalysisMemo()
        self._token = _ACTIVE.set(memo)
        return memo

    @staticmethod
    def _kept(key: tuple) -> AnalysisMemo:
        """The cross-step memo of ``key`` (created, and the least recently used dropped, as needed)."""
        memo = _CROSS_STEP.get(key)
        try:
            if memo is None:
                memo = _CROSS_STEP[key] = AnalysisMemo()
                while len(_CROSS_STEP) > ANALYSIS_CACHE_SIZE:
                    _CROSS_STEP.popitem(last=False)
            else:
                _CROSS_STEP.move_to_end(key)
                if len(memo) > ANALYSIS_ENTRY_CAP:
                    memo = _CROSS_STEP[key] = AnalysisMemo()
        except KeyError:  # another thread dropped the entry meanwhile: this step's memo is still valid
            pass
        return memo

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ACTIVE.reset(self._token)
            self._token = None


def active_memo() -> AnalysisMemo | None:
    """The open :func:`shared_analysis` memo, or ``None`` outside one."""
    return _ACTIVE.get()


def parsed_for_analysis(sql: str) -> exp.Expression:
    """``parse_for_analysis(sql)`` with the default caps, read only: inside :func:`shared_analysis` it is the
    step's one parse of ``sql`` itself, not a copy, so the caller must not mutate it. Outside, a fresh parse.

    Raises:
        SQLParseError: as :func:`parse_for_analysis`.
    """
    memo = _ACTIVE.get()
    if memo is None or not isinstance(sql, str):
        return parse_for_analysis(sql)
    return memo.get(("parse", sql, MAX_ANALYSIS_CHARS, MAX_ANALYSIS_NODES, MAX_ANALYSIS_DEPTH),
                    lambda: _parse_bounded(sql, MAX_ANALYSIS_CHARS, MAX_ANALYSIS_NODES, MAX_ANALYSIS_DEPTH))


def qualified_for_analysis(sql: str, schema: Schema | None) -> exp.Expression:
    """``qualify_sql(parse_for_analysis(sql), schema)`` (stars expanded), done once per text and schema inside
    :func:`shared_analysis`. The tree returned there is shared: the caller must not mutate it (copy first).

    Raises:
        SQLParseError: as :func:`parse_for_analysis` and :func:`qualify_sql`.
    """
    memo = _ACTIVE.get()
    if memo is None:
        return qualify_sql(parse_for_analysis(sql), schema)
    try:
        fp = memo.fingerprint(schema)
    except (TypeError, AttributeError):
        return qualify_sql(parse_for_analysis(sql), schema)
    return memo.get(("qualify", sql, fp),
                    lambda: _qualify(parse_for_analysis(sql), schema, expand_stars=True, copy=False))
