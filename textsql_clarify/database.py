"""Sandboxed, read-only SQLite execution: the only way this package runs SQL.

Every query, the agent's and the gold, goes through :class:`SQLiteSandbox`:

* the file is opened read-only (URI ``mode=ro``), with ``PRAGMA query_only`` on and the
  ``ATTACH`` limit set to 0;
* an authorizer allows reads only (``SELECT``, column reads, functions other than a short
  deny-list, recursive CTEs, and a few schema-introspection PRAGMAs); writes, DDL, ``ATTACH``,
  transactions, PRAGMAs that set something and ``load_extension`` are refused;
* one statement per call (the stdlib refuses a second statement before running the first);
* a time limit that really stops SQLite: a progress handler checks a deadline every
  :data:`PROGRESS_EVERY` virtual-machine instructions and aborts the statement. Wrapping a
  blocking call in a thread or ``asyncio.wait_for`` (or ``func_timeout``) cannot stop SQLite;
* a row cap: at most ``row_cap`` rows are fetched; the result is marked ``truncated`` when more exist.

Bad SQL never raises: it gives an :class:`ExecutionResult` whose ``error_kind`` is one of
:data:`ERROR_KINDS`. Gold results are cached per (key, SQL) for the sandbox's lifetime.

Sources: the issue's sandbox requirements; the execution protocol of ABISS §5.3 (EX needs both
queries executed on the same database) and the cases in ``../shared/cases/execution_cases.json``
(ex21: a runaway recursive CTE must be interrupted, not waited for).
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TextSQLClarifyError
from .sqlschema import Schema, read_schema

#: Error kinds of a failed :class:`ExecutionResult`, see :meth:`SQLiteSandbox.execute`.
ERROR_KINDS = ("syntax", "forbidden", "timeout", "runtime")

#: The progress handler runs every this many SQLite VM instructions (a few microseconds of work),
#: so a timeout is noticed within microseconds while its cost stays negligible.
PROGRESS_EVERY = 1000

#: Largest string or blob a query may build (bytes, ``SQLITE_LIMIT_LENGTH``). A single
#: ``randomblob(1e9)`` is one VM instruction, which no progress handler can interrupt; this
#: limit makes it fail fast with a ``runtime`` error instead.
MAX_VALUE_BYTES = 64 * 1024 * 1024

#: PRAGMAs that only read the schema; every other PRAGMA is refused.
READ_ONLY_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "table_list",
})

#: SQL functions refused even though functions in general are allowed.
FORBIDDEN_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})

# SQLite authorizer action codes, by name (sqlite.org/c3ref/c_alter_table.html).
_ACTION_NAMES = {
    getattr(sqlite3, "SQLITE_" + name): name
    for name in (
        "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE", "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE", "DROP_INDEX", "DROP_TABLE",
        "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER",
        "DROP_VIEW", "INSERT", "PRAGMA", "READ", "SELECT", "TRANSACTION", "UPDATE", "ATTACH", "DETACH",
        "ALTER_TABLE", "REINDEX", "ANALYZE", "CREATE_VTABLE", "DROP_VTABLE", "FUNCTION", "SAVEPOINT",
        "RECURSIVE",
    )
    if hasattr(sqlite3, "SQLITE_" + name)
}
_ALWAYS_ALLOWED = frozenset(
    getattr(sqlite3, "SQLITE_" + n) for n in ("SELECT", "READ", "RECURSIVE") if hasattr(sqlite3, "SQLITE_" + n)
)
_PRAGMA = sqlite3.SQLITE_PRAGMA
_FUNCTION = sqlite3.SQLITE_FUNCTION
_OK = sqlite3.SQLITE_OK
_DENY = sqlite3.SQLITE_DENY

# SQLite messages that mean the text is not valid SQL (the rest of SQLite's errors are "runtime").
_SYNTAX_MARKERS = ("syntax error", "incomplete input", "unrecognized token", "null character")
_MULTI_STATEMENT_MARKER = "one statement at a time"
# SQLite messages that mean a write was refused by a layer below the authorizer.
_FORBIDDEN_MARKERS = ("not authorized", "readonly database", "query_only", "may not be modified")


class DatabaseOpenError(TextSQLClarifyError):
    """A database file exists but cannot be opened as SQLite (``path`` and ``reason`` say why)."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"cannot open SQLite database {path!r}: {reason}")


class SandboxClosedError(TextSQLClarifyError):
    """A closed :class:`SQLiteSandbox` was asked to run SQL."""


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """What one SQL statement returned, or why it failed.

    Attributes:
        columns: result column names, in result order (``()`` on error).
        rows: result rows, each a tuple of Python values (``int``, ``float``, ``str``, ``bytes``,
            ``None`` for NULL), in the order SQLite returned them; at most the sandbox's ``row_cap``.
        elapsed_s: wall-clock seconds spent executing and fetching.
        truncated: ``True`` when the query had more rows than ``row_cap`` (``rows`` holds the first ones).
        error_kind: ``None`` on success, else one of :data:`ERROR_KINDS`.
        error_message: SQLite's (or the sandbox's) message when ``error_kind`` is set.

    Raises:
        ValueError: ``error_kind`` is not ``None`` and not in :data:`ERROR_KINDS`.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    elapsed_s: float
    truncated: bool = False
    error_kind: str | None = None
    error_message: str | None = None

    def __post_init__(self) -> None:
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"error_kind must be None or one of {ERROR_KINDS}, got {self.error_kind!r}")

    @property
    def ok(self) -> bool:
        """``True`` when the statement ran to completion (possibly truncated) without error."""
        return self.error_kind is None

    @property
    def row_count(self) -> int:
        """Number of rows held in ``rows`` (rows; capped at the sandbox's ``row_cap``)."""
        return len(self.rows)


def _is_blank(sql: str) -> bool:
    """``True`` when ``sql`` holds only whitespace, ``;`` and comments (sqlglot's tokenizer)."""
    from sqlglot.errors import SqlglotError
    from sqlglot.tokens import Tokenizer

    try:
        return not [t for t in Tokenizer().tokenize(sql) if t.text != ";"]
    except SqlglotError:
        return False


def _failure(kind: str, message: str, elapsed_s: float) -> ExecutionResult:
    return ExecutionResult(columns=(), rows=(), elapsed_s=elapsed_s, error_kind=kind, error_message=message)


class SQLiteSandbox:
    """One read-only, time- and row-limited SQLite connection to one database file.

    Thread-safe: calls are serialised by a lock, so several environments in one process can
    share one sandbox (see :func:`get_sandbox`). Do not share one across ``fork``:
    :func:`get_sandbox` keys its cache by process id for that reason.

    Args:
        db_path: path of a SQLite file.
        timeout_s: time limit per statement, seconds (> 0), covering execution and fetching.
        row_cap: most rows fetched per statement (>= 1); more make the result ``truncated``.

    Raises:
        FileNotFoundError: ``db_path`` is not an existing file.
        DatabaseOpenError: the file is not a readable SQLite database.
        ValueError: ``timeout_s`` or ``row_cap`` out of range.
    """

    def __init__(self, db_path: str | os.PathLike, *, timeout_s: float = 5.0, row_cap: int = 10_000):
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if isinstance(row_cap, bool) or not isinstance(row_cap, int) or row_cap < 1:
            raise ValueError(f"row_cap must be an integer >= 1, got {row_cap!r}")
        path = Path(db_path)
        if not path.is_file():
            raise FileNotFoundError(f"database file not found: {db_path}")
        self.db_path = str(path.resolve())
        self.timeout_s = float(timeout_s)
        self.row_cap = row_cap
        self._lock = threading.Lock()
        self._gold_cache: dict[tuple[str, str], ExecutionResult] = {}
        self._schema: Schema | None = None
        # Per-call state shared with the callbacks: [deadline (perf_counter s), timed out?, denial or None].
        self._state: list[Any] = [float("inf"), False, None]
        self._con = self._open()

    # -- set-up -----------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        uri = Path(self.db_path).as_uri() + "?mode=ro"
        try:
            con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise DatabaseOpenError(self.db_path, str(e)) from e
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchall()
            con.execute("PRAGMA query_only = ON")
            con.execute("PRAGMA trusted_schema = OFF")
        except sqlite3.Error as e:
            con.close()
            raise DatabaseOpenError(self.db_path, str(e)) from e
        if hasattr(con, "enable_load_extension"):
            con.enable_load_extension(False)
        if hasattr(con, "setlimit"):
            con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        state = self._state

        def authorizer(action: int, arg1, arg2, _db, _source) -> int:
            if action in _ALWAYS_ALLOWED:
                return _OK
            if action == _FUNCTION:
                if arg2 is None or arg2.lower() not in FORBIDDEN_FUNCTIONS:
                    return _OK
            elif action == _PRAGMA and arg1 is not None and arg1.lower() in READ_ONLY_PRAGMAS:
                return _OK
            what = " ".join(str(a) for a in (arg1, arg2) if a is not None)
            denial = f"{_ACTION_NAMES.get(action, f'action {action}')}{' ' + what if what else ''}"
            if state[2] is None:
                state[2] = denial
            elif state[2].count(";") < 2:  # name at most three refused actions
                state[2] = f"{state[2]}; {denial}"
            return _DENY

        def progress(_now=time.perf_counter) -> int:
            if _now() > state[0]:
                state[1] = True
                return 1
            return 0

        con.set_authorizer(authorizer)
        con.set_progress_handler(progress, PROGRESS_EVERY)
        return con

    # -- execution --------------------------------------------------------------------------
    def execute(self, sql: str) -> ExecutionResult:
        """Run one read-only statement under the time limit and row cap.

        Error kinds (never raised, returned in the result):

        * ``syntax``: empty SQL, no statement, or text SQLite cannot parse (``syntax error``,
          ``incomplete input``, ``unrecognized token``, a NUL character);
        * ``forbidden``: the authorizer refused an action (write, DDL, ATTACH, transaction,
          PRAGMA that is not schema introspection, a forbidden function), a write refused by the
          read-only connection, a statement that is not a query, or more than one statement.
          Table-valued functions (``json_each``, ``pragma_table_info``) are refused too, because
          SQLite builds them through a schema update the authorizer cannot tell apart;
        * ``timeout``: the time limit ran out and the progress handler aborted the statement;
        * ``runtime``: any other SQLite error (unknown table or column, misuse of an aggregate,
          value too big, an interrupt from :meth:`interrupt`, ...).

        Args:
            sql: one SQLite statement; a trailing ``;`` is fine.

        Returns:
            ExecutionResult: rows are fetched with ``fetchmany(row_cap + 1)``; ``elapsed_s`` covers
            execution and fetching, in seconds.

        Raises:
            TypeError: ``sql`` is not a ``str``.
            SandboxClosedError: the sandbox was closed.
        """
        if not isinstance(sql, str):
            raise TypeError(f"sql must be a str, got {type(sql).__name__}")
        state = self._state
        with self._lock:
            con = self._con
            if con is None:
                raise SandboxClosedError(f"sandbox for {self.db_path} is closed")
            state[1] = False
            state[2] = None
            t0 = time.perf_counter()
            state[0] = t0 + self.timeout_s
            cur = None
            try:
                cur = con.execute(sql)
                description = cur.description
                rows = cur.fetchmany(self.row_cap + 1) if description is not None else []
            except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as e:
                return self._classify(e, time.perf_counter() - t0)
            finally:
                state[0] = float("inf")
                if cur is not None:
                    cur.close()
            elapsed = time.perf_counter() - t0
        if description is None:
            if _is_blank(sql):
                return _failure("syntax", "empty SQL: no statement", elapsed)
            return _failure("forbidden", "not a query: the statement returns no result set", elapsed)
        truncated = len(rows) > self.row_cap
        if truncated:
            del rows[self.row_cap:]
        return ExecutionResult(tuple([d[0] for d in description]), tuple(rows), elapsed, truncated)

    def _classify(self, e: BaseException, elapsed: float) -> ExecutionResult:
        message = str(e) or type(e).__name__
        low = message.lower()
        if self._state[1] and "interrupt" in low:
            return _failure("timeout", f"interrupted after the {self.timeout_s:g} s time limit", elapsed)
        if self._state[2] is not None:
            return _failure("forbidden", f"not allowed in the read-only sandbox: {self._state[2]} ({message})",
                            elapsed)
        if _MULTI_STATEMENT_MARKER in low:
            return _failure("forbidden", "only one SQL statement per action", elapsed)
        if any(m in low for m in _FORBIDDEN_MARKERS):
            return _failure("forbidden", message, elapsed)
        if isinstance(e, ValueError) or any(m in low for m in _SYNTAX_MARKERS):
            return _failure("syntax", message, elapsed)
        return _failure("runtime", message, elapsed)

    def execute_gold(self, key: str, sql: str) -> ExecutionResult:
        """Run a gold SQL once and cache its result for the sandbox's lifetime.

        The cache is keyed by ``(key, sql)``: ``key`` names the sample (e.g. its id, or
        ``"<id>#<interpretation>"``) and the SQL text guards against two golds sharing a key.
        Failed golds are cached too (their failure is the sample's, not the agent's), except
        timeouts, which can come from a busy machine and are retried on the next call.

        Raises:
            TypeError: ``key`` or ``sql`` is not a ``str``.
            SandboxClosedError: the sandbox was closed.
        """
        if not isinstance(key, str):
            raise TypeError(f"gold key must be a str, got {type(key).__name__}")
        cache_key = (key, sql)
        hit = self._gold_cache.get(cache_key)
        if hit is None:
            hit = self.execute(sql)
            if hit.error_kind != "timeout":
                self._gold_cache[cache_key] = hit
        return hit

    def interrupt(self) -> None:
        """Abort the statement running now, from another thread; it ends with error kind ``runtime``
        (not ``timeout``, which is reserved for the time limit). A no-op when idle or closed."""
        con = self._con
        if con is not None:
            con.interrupt()

    @property
    def schema(self) -> Schema:
        """``{table: {column: type}}`` of this database (:func:`textsql_clarify.sqlschema.read_schema`)."""
        if self._schema is None:
            self._schema = read_schema(self.db_path)
        return self._schema

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` was called."""
        return self._con is None

    def close(self) -> None:
        """Close the connection and drop the gold cache; safe to call twice."""
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None
            self._gold_cache.clear()

    def __enter__(self) -> "SQLiteSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"SQLiteSandbox({self.db_path!r}, timeout_s={self.timeout_s:g}, row_cap={self.row_cap}, {state})"


_SANDBOXES: dict[tuple, SQLiteSandbox] = {}
_SANDBOXES_LOCK = threading.Lock()


def get_sandbox(db_path: str | os.PathLike, **kw: Any) -> SQLiteSandbox:
    """Return this process's shared :class:`SQLiteSandbox` for ``db_path`` with settings ``kw``.

    Cached per (process id, resolved path, ``kw``), so many environments in one process share one
    connection (and one gold cache) per database, and a forked worker opens its own. A closed
    sandbox is replaced by a new one.

    Args:
        db_path: path of a SQLite file.
        **kw: ``timeout_s`` and/or ``row_cap``, as for :class:`SQLiteSandbox`.

    Raises:
        FileNotFoundError, DatabaseOpenError, ValueError: as :class:`SQLiteSandbox`.
        TypeError: an unknown keyword.
    """
    unknown = set(kw) - {"timeout_s", "row_cap"}
    if unknown:
        raise TypeError(f"get_sandbox() got unknown keyword(s): {sorted(unknown)}")
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"database file not found: {db_path}")
    key = (os.getpid(), str(path.resolve()), tuple(sorted(kw.items())))
    with _SANDBOXES_LOCK:
        sandbox = _SANDBOXES.get(key)
        if sandbox is None or sandbox.closed:
            sandbox = SQLiteSandbox(path, **kw)
            _SANDBOXES[key] = sandbox
        return sandbox
