"""Sandboxed, read-only SQLite execution: the only way this package runs SQL.

Every query, the agent's and the gold, goes through :class:`SQLiteSandbox`:

* the file is opened read-only (URI ``mode=ro``; a WAL-mode file also ``immutable=1``, so that no
  ``-wal``/``-shm`` file is created beside it), with ``PRAGMA query_only`` on and the ``ATTACH``
  limit set to 0;
* an authorizer allows reads only (``SELECT``, column reads, functions other than a short
  deny-list, recursive CTEs, and a few schema-introspection PRAGMAs); writes, DDL, ``ATTACH``,
  transactions, PRAGMAs that set something and ``load_extension`` are refused;
* one statement per call (the stdlib refuses a second statement before running the first);
* a time limit that really stops SQLite, enforced twice: a progress handler checks the deadline
  every :data:`PROGRESS_EVERY` virtual-machine (VM) instructions, and a per-process watchdog thread
  (:mod:`textsql_clarify.sql.watchdog`) calls ``sqlite3_interrupt`` at the deadline, which
  SQLite notices at its next loop step or row. Wrapping a blocking call in a thread or
  ``asyncio.wait_for`` (or ``func_timeout``) cannot stop SQLite;
* bounded work per VM instruction and per statement, since neither check can stop one
  instruction that runs long, nor see inside one row: SQLite limits (:data:`SQLITE_LIMITS`,
  ``max_value_bytes``, ``max_sql_bytes``, :data:`MAX_COLUMNS`), guards on the costly built-ins
  that charge one budget per statement (``max_statement_work``) and check the deadline, and a
  SQLite heap limit per statement with temp storage in memory (:mod:`textsql_clarify.sql.guards`,
  which also says what is still not bounded exactly); idle page caches are bounded per
  connection (``PRAGMA cache_size``, :data:`~textsql_clarify.sql.guards.CACHE_SIZE_KIB`);
* a row cap (at most ``row_cap`` rows) and a byte cap (about ``max_result_bytes`` of values) on
  what is fetched; the result is marked ``truncated`` when more exist. One result row may hold up
  to (result columns x ``max_value_bytes``) bytes, at most :data:`MAX_COLUMNS` x 256 KiB by
  default, before the byte cap sees it.

Bad SQL never raises: it gives an :class:`ExecutionResult` whose ``error_kind`` is one of
:data:`ERROR_KINDS` (:meth:`SQLiteSandbox._classify`). Gold results are cached per (key, SQL) for
the sandbox's lifetime, except transient failures. The measured bounds: ``docs/platform.md``
"SQL bounds".

This module is the public import path: it re-exports the limits and guards of
:mod:`textsql_clarify.sql.guards` and the watchdog of :mod:`textsql_clarify.sql.watchdog`.

Sources: the contract that agent SQL never changes a database and never runs past its time
limit; the execution protocol of ABISS §5.3 (EX needs both queries executed on the same
database) and the cases in ``../shared/cases/execution_cases.json``
(ex21: a runaway recursive CTE must be interrupted, not waited for); SQLite's documentation of
``sqlite3_limit``, ``sqlite3_interrupt`` and ``sqlite3_progress_handler``.
"""
from __future__ import annotations

import marshal
import math
import re
import os
import sqlite3
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TextSQLClarifyError
from .guards import (  # noqa: F401  (the public limits are re-exported for users of the sandbox)
    CACHE_SIZE_KIB,
    HARD_HEAP_LIMIT_BYTES,
    MAX_CALL_WORK,
    MAX_COLUMNS,
    MAX_SEARCH_WORK,
    MAX_SQL_BYTES,
    MAX_TRIM_WORK,
    MAX_VALUE_BYTES,
    SQLITE_LIMITS,
    WORK_UNITS_PER_SECOND,
    _apply_limits,
    _apply_process_wide_limit,
    _current_limits,
    _reparse_schema,
    _install_guards,
    heap_cap_from_env,
    sqlite_heap_limits,
    sqlite_memory_used,
)
from . import guards as _guards
from .cte_bound import MAX_CTE_COPIES, cte_copies

_WITH = re.compile("with", re.IGNORECASE).search
from .watchdog import _Watchdog
from .schema import Schema, read_schema, unusable_views
from .readonly import ReadOnlySchema
from .uri import is_wal, ro_uri

#: Error kinds of a failed :class:`ExecutionResult`, see :meth:`SQLiteSandbox.execute`.
ERROR_KINDS = ("syntax", "forbidden", "timeout", "runtime")

#: The progress handler runs every this many SQLite VM instructions. Measured on the 1,034 Spider
#: dev golds (best of 5, 2-core machine): every 1000 adds 0.5% to raw sqlite3, every 100 adds 8%
#: (20% on a 2M-row scan), every 10 adds 60%. Rows whose instructions are each expensive are
#: caught by the watchdog instead, which interrupts at the next loop step whatever this count.
PROGRESS_EVERY = 1000

#: Default ``max_result_bytes``: approximate bytes of values fetched per statement (the bytes of
#: each value plus a few per cell, see :func:`_approx_bytes`); past it the result is ``truncated``.
MAX_RESULT_BYTES = 64 << 20

#: Most rows asked of SQLite per ``fetchmany`` while fetching (fewer when rows can be wide, so that
#: one batch cannot pass ``max_result_bytes`` by more than its own size).
FETCH_ROWS_MAX = 1024

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
_TOO_BIG_MARKER = "string or blob too big"
# SQLite's message when it cannot parse a connection's schema (the start of it)
_SCHEMA_LOST_MARKER = "malformed database schema"
_SQL_TOO_LONG_MARKERS = ("query string is too large", "statement too long")

# Per-call state shared by a sandbox and its callbacks (indices into SQLiteSandbox._state); the
# guards get the _GUARD, _DEADLINE, _BUDGET and _STOP slots and the watchdog the _TIMED_OUT slot.
_DEADLINE, _TIMED_OUT, _DENIAL, _GUARD, _BUDGET, _STOP = range(6)

# SQLite messages of a failure that can pass by itself (another connection holds a lock): a gold
# that fails so is retried and never cached (:meth:`SQLiteSandbox.execute_gold`).
_TRANSIENT_MARKERS = ("database is locked", "database table is locked", "database is busy")
_MEMORY_MARKERS = ("out of memory",)

#: Extra attempts :meth:`SQLiteSandbox.execute_gold` makes when a gold fails transiently
#: (``database is locked``/busy), each after :data:`GOLD_RETRY_WAIT_S` seconds.
GOLD_RETRIES = 1
GOLD_RETRY_WAIT_S = 0.05


_is_wal = is_wal  # the former name (sql/uri.py holds it now)


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
        truncated: ``True`` when the query had more rows than ``row_cap``, or more than about
            ``max_result_bytes`` of values (``rows`` holds the first ones).
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


def _approx_bytes(rows: list[tuple]) -> int:
    """Approximate size of ``rows`` in bytes: their ``marshal`` length, i.e. each value's bytes (UTF-8
    for text) plus 1-9 bytes per cell and per row (~8 ns per cell, C speed)."""
    return len(marshal.dumps(rows))


# One watchdog per process; it sets and reads the ``_TIMED_OUT`` slot of each sandbox's state.
_WATCHDOG = _Watchdog(_TIMED_OUT)


def _is_transient(r: ExecutionResult) -> bool:
    """``True`` when ``r`` failed because another connection held a lock (it may pass by itself)."""
    return r.error_kind == "runtime" and any(m in (r.error_message or "").lower() for m in _TRANSIENT_MARKERS)


def _is_interrupted(r: ExecutionResult) -> bool:
    """``True`` when ``r`` was stopped by :meth:`SQLiteSandbox.interrupt` (SQLite's message "interrupted", not
    the time limit): the gold was cut short by its caller, not failed by itself."""
    return r.error_kind == "runtime" and (r.error_message or "") == "interrupted"


def _is_memory(r: ExecutionResult) -> bool:
    """``True`` when ``r`` failed on SQLite's heap limit (or a ``MemoryError``)."""
    return r.error_kind == "runtime" and (r.error_message or "").startswith("out of memory")


def schema_of(db_path: str) -> ReadOnlySchema:
    """:func:`~textsql_clarify.sql.schema.read_schema` of ``db_path`` as a read-only mapping, with SQLite's
    failures as :class:`DatabaseOpenError` (a schema the sandbox opened but cannot read, e.g. malformed).

    Raises:
        FileNotFoundError: no such file. DatabaseOpenError: SQLite cannot read the schema.
    """
    try:
        return ReadOnlySchema(read_schema(db_path))
    except sqlite3.Error as e:
        raise DatabaseOpenError(db_path, f"cannot read the schema: {e}") from e


def views_unusable_in(db_path: str) -> dict[str, str]:
    """:func:`~textsql_clarify.sql.schema.unusable_views` of ``db_path``, with SQLite's failures as
    :class:`DatabaseOpenError`.

    Raises:
        FileNotFoundError: no such file. DatabaseOpenError: SQLite cannot read the schema.
    """
    try:
        return unusable_views(db_path)
    except sqlite3.Error as e:
        raise DatabaseOpenError(db_path, f"cannot read the schema: {e}") from e


def _check_positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class SQLiteSandbox:
    """One read-only, time-, size- and row-limited SQLite connection to one database file.

    Thread-safe: calls are serialised by a lock, so several environments in one process can
    share one sandbox (see :func:`get_sandbox`). Do not share one across ``fork``:
    :func:`get_sandbox` keys its cache by process id for that reason.

    Args:
        db_path: path of a SQLite file.
        timeout_s: time limit per statement, seconds (> 0), covering execution and fetching.
        row_cap: most rows fetched per statement (>= 1); more make the result ``truncated``.
        max_value_bytes: largest string, blob or sorter row a statement may build or read, bytes
            (>= 1024, at most SQLite's compile-time 1,000,000,000); more gives a ``runtime`` error
            "value too large". Default :data:`MAX_VALUE_BYTES`.
        max_result_bytes: about how many bytes of values are fetched per statement (>= 1);
            more make the result ``truncated``. Default :data:`MAX_RESULT_BYTES`.
        max_sql_bytes: SQL text of this many UTF-8 bytes or more gives a ``runtime`` error
            "SQL too long" (>= 1024). Default :data:`MAX_SQL_BYTES`.
        max_statement_work: budget of one statement's guarded calls, work units (>= 1; about
            ns on the reference machine, see :mod:`textsql_clarify.sql.guards`); spent, the
            statement stops with kind ``timeout``. Default ``timeout_s`` x
            :data:`WORK_UNITS_PER_SECOND`.

    Memory: each statement may allocate :attr:`heap_limit_bytes` of SQLite heap beyond what the
    process's SQLite holds when it starts (:data:`HARD_HEAP_LIMIT_BYTES`, or
    ``TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT`` when the sandbox opens; "out of memory" past it, kind
    ``runtime``; :class:`~textsql_clarify.sql.guards.StatementHeap` says what concurrent statements
    share); temp storage (sorts, temporary indices, materialised views) is kept in memory under
    that limit; between statements SQLite's limit is the process's own again. The page cache is at
    most :data:`CACHE_SIZE_KIB` KiB. At most :data:`MAX_COLUMNS` result columns are allowed, so
    one row holds at most ``MAX_COLUMNS x max_value_bytes`` bytes.

    Opening: the file is opened read-only (``mode=ro``); a WAL-mode file also ``immutable=1``, so
    no ``-wal``/``-shm`` file is created beside it. Immutable means SQLite takes no lock and does
    not see changes by other writers (nor content still in an existing ``-wal`` file): a WAL
    database must not be written while a sandbox has it open. A rollback-journal file keeps
    SQLite's locking; a lock held by a writer is waited for up to ``timeout_s``, then gives
    ``runtime`` "database is locked".

    ``max_value_bytes`` and ``max_sql_bytes`` need ``Connection.setlimit`` (Python >= 3.11);
    without it SQLite's own defaults (1e9 bytes) stay in force.

    Raises:
        FileNotFoundError: ``db_path`` is not an existing file.
        DatabaseOpenError: the file is not a readable SQLite database.
        ValueError: a setting out of range.
    """

    def __init__(self, db_path: str | os.PathLike, *, timeout_s: float = 5.0, row_cap: int = 10_000,
                 max_value_bytes: int = MAX_VALUE_BYTES, max_result_bytes: int = MAX_RESULT_BYTES,
                 max_sql_bytes: int = MAX_SQL_BYTES, max_statement_work: int | None = None):
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if isinstance(row_cap, bool) or not isinstance(row_cap, int) or row_cap < 1:
            raise ValueError(f"row_cap must be an integer >= 1, got {row_cap!r}")
        _check_positive_int("max_value_bytes", max_value_bytes, 1024)
        if max_value_bytes > 1_000_000_000:
            raise ValueError(f"max_value_bytes must be <= 1000000000 (SQLite's own maximum), got {max_value_bytes}")
        _check_positive_int("max_result_bytes", max_result_bytes)
        _check_positive_int("max_sql_bytes", max_sql_bytes, 1024)
        if max_statement_work is None:
            max_statement_work = max(1, int(float(timeout_s) * WORK_UNITS_PER_SECOND))
        _check_positive_int("max_statement_work", max_statement_work)
        path = Path(db_path)
        if not path.is_file():
            raise FileNotFoundError(f"database file not found: {db_path}")
        self.db_path = str(path.resolve())
        self.timeout_s = float(timeout_s)
        self.row_cap = row_cap
        self.max_value_bytes = max_value_bytes
        self.max_result_bytes = max_result_bytes
        self.max_sql_bytes = max_sql_bytes
        self.max_statement_work = max_statement_work
        self._lock = threading.Lock()
        self._gold_cache: dict[tuple[str, str], ExecutionResult] = {}
        self._schema: Schema | None = None
        # Per-call state shared with the callbacks and the watchdog, indexed by _DEADLINE (perf_counter
        # s), _TIMED_OUT (bool), _DENIAL (authorizer refusal or None), _GUARD (guard message or None),
        # _BUDGET (work units left to the statement's guarded calls), _STOP (why a guard stopped it).
        self._state: list[Any] = [math.inf, False, None, None, max_statement_work, None]
        self._helper: sqlite3.Connection | None = None
        self._key = id(self._state)  # this sandbox's key in the watchdog's table
        self._cache_key: tuple | None = None  # its key in get_sandbox's cache, if it came from there
        # rows of one column per fetch batch; a batch of n columns holds _batch1 // n rows (>= 1)
        self._batch1 = max(1, min(FETCH_ROWS_MAX, max_result_bytes // (max_value_bytes + 8)))
        #: SQLite heap one statement may allocate beyond what the process's SQLite holds when it
        #: starts, bytes (0: no limit of its own); read from the environment when the sandbox opens.
        self.heap_limit_bytes = heap_cap_from_env()
        self._heap_start: tuple[int, int] = (0, 0)  # (bytes held, start number) of the running statement
        self._process_limit = 0  # the process-wide limit, where no per-statement one can be set
        self._open_limits: dict[int, int] = {}  # the SQLite limits the connection opened with (_open)
        self._con = self._open()

    # -- set-up -----------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        uri = ro_uri(self.db_path)  # immutable=1 for WAL files: mode=ro alone creates -wal and -shm files beside them
        try:
            con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                                  timeout=self.timeout_s)
        except sqlite3.Error as e:
            raise DatabaseOpenError(self.db_path, str(e)) from e
        try:
            if _guards.STATEMENT_HEAP is None:  # no per-statement limit here: one process-wide limit instead
                self._process_limit = _apply_process_wide_limit(con, self.heap_limit_bytes)
            con.execute("SELECT count(*) FROM sqlite_master").fetchall()
            cache_kib = int(_guards.CACHE_SIZE_KIB)
            if cache_kib < 1:
                raise ValueError(f"guards.CACHE_SIZE_KIB must be an integer >= 1, got {_guards.CACHE_SIZE_KIB!r}")
            con.execute(f"PRAGMA cache_size = {-cache_kib}")  # negative: KiB, not pages
            con.execute("PRAGMA query_only = ON")
            con.execute("PRAGMA trusted_schema = OFF")
            if _guards.TEMP_STORE not in ("MEMORY", "FILE", "DEFAULT"):
                raise ValueError(f"guards.TEMP_STORE must be MEMORY, FILE or DEFAULT, got {_guards.TEMP_STORE!r}")
            con.execute(f"PRAGMA temp_store = {_guards.TEMP_STORE}")  # MEMORY: under the heap limit, no file
            self._helper = _install_guards(con, self._state, self.max_value_bytes, _GUARD, deadline_slot=_DEADLINE,
                                           budget_slot=_BUDGET, stop_slot=_STOP)
        except sqlite3.Error as e:
            con.close()
            if self._helper is not None:
                self._helper.close()
            raise DatabaseOpenError(self.db_path, str(e)) from e
        if hasattr(con, "enable_load_extension"):
            con.enable_load_extension(False)
        # after the schema was read: the limits apply to what runs from now on; the limits SQLite opened
        # with are kept to parse the schema again should SQLite drop it (_reparse_schema)
        self._open_limits = _current_limits(con)
        _apply_limits(con, self.max_value_bytes, self.max_sql_bytes)
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
            if state[_DENIAL] is None:
                state[_DENIAL] = denial
            elif state[_DENIAL].count(";") < 2:  # name at most three refused actions
                state[_DENIAL] = f"{state[_DENIAL]}; {denial}"
            return _DENY

        def progress(_now=time.perf_counter) -> int:
            if _now() > state[_DEADLINE]:
                state[_TIMED_OUT] = True
                return 1
            return 0

        con.set_authorizer(authorizer)
        con.set_progress_handler(progress, PROGRESS_EVERY)
        return con

    # -- execution --------------------------------------------------------------------------
    def execute(self, sql: str) -> ExecutionResult:
        """Run one read-only statement under the time limit, the size limits and the row cap.

        Error kinds (never raised, returned in the result):

        * ``syntax``: empty SQL, no statement, or text SQLite cannot parse (``syntax error``,
          ``incomplete input``, ``unrecognized token``, a NUL character);
        * ``forbidden``: the authorizer refused an action (write, DDL, ATTACH, transaction,
          PRAGMA that is not schema introspection, a forbidden function), a write refused by the
          read-only connection, a statement that is not a query, or more than one statement.
          Table-valued functions (``json_each``, ``pragma_table_info``) are refused too, because
          SQLite builds them through a schema update the authorizer cannot tell apart;
        * ``timeout``: the time limit ran out and the progress handler, the watchdog or a guard
          stopped the statement, or its guarded calls spent the statement's budget
          (``max_statement_work``);
        * ``runtime``: any other SQLite error (unknown table or column, misuse of an aggregate,
          an interrupt from :meth:`interrupt`, ...), including the sandbox's size limits:
          "value too large (limit N bytes)", "SQL too long (limit N bytes)", a guarded function
          refused as too expensive, an expression too deep, a LIKE pattern too long, too many
          columns, "out of memory (resource limit: SQLite heap limit N bytes for this statement ...)", "database is
          locked" (a writer held a rollback-journal file's lock for the whole time limit).

        Args:
            sql: one SQLite statement; a trailing ``;`` is fine.

        Returns:
            ExecutionResult: at most ``row_cap`` rows and about ``max_result_bytes`` of values,
            fetched in batches of at most :data:`FETCH_ROWS_MAX` rows; ``truncated`` when more
            exist; ``elapsed_s`` covers execution and fetching, in seconds.

        Raises:
            TypeError: ``sql`` is not a ``str``.
            SandboxClosedError: the sandbox was closed.

        A statement that finds the parsed schema dropped (SQLite drops it after some failures, a refused
        ``VACUUM`` among them) and cannot parse it again under the sandbox's limits (a table over
        :data:`MAX_COLUMNS` columns ...: "malformed database schema") has the schema parsed again under the
        limits the connection opened with, and runs once more (:func:`~textsql_clarify.sql.guards._reparse_schema`).
        """
        return self._execute(sql, True)

    def _execute(self, sql: str, may_reparse: bool) -> ExecutionResult:
        """:meth:`execute`; ``may_reparse``: whether a lost schema may be parsed again and the statement rerun."""
        if not isinstance(sql, str):
            raise TypeError(f"sql must be a str, got {type(sql).__name__}")
        if _WITH(sql) is not None and len(sql) < self.max_sql_bytes:
            copies = cte_copies(sql)  # SQLite copies CTEs while preparing, where no limit reaches
            if copies > MAX_CTE_COPIES:
                return _failure("runtime", f"statement too complex: its common table expressions expand to about "
                                f"{copies} copies (limit {MAX_CTE_COPIES})", 0.0)
        state = self._state
        watchdog = _WATCHDOG
        with self._lock:
            con = self._con
            if con is None:
                raise SandboxClosedError(f"sandbox for {self.db_path} is closed")
            state[_TIMED_OUT] = False
            state[_DENIAL] = state[_GUARD] = state[_STOP] = None
            state[_BUDGET] = self.max_statement_work
            t0 = time.perf_counter()
            state[_DEADLINE] = deadline = t0 + self.timeout_s
            lock = watchdog.lock  # acquire/release: measurably cheaper than ``with`` on this path
            lock.acquire()
            try:
                watchdog.running[self._key] = (deadline, con, state)
                if deadline < watchdog.wake_at:
                    watchdog.wake(deadline)
            finally:
                lock.release()
            cur = None
            reparsed = False
            heap, cap = _guards.STATEMENT_HEAP, self.heap_limit_bytes
            if heap is not None:  # this statement's own heap bound, from what the process holds now
                self._heap_start = heap.enter(cap)
            try:
                cur = con.execute(sql)
                description = cur.description
                over_bytes = False
                if description is None:
                    rows = []
                else:
                    ncols = len(description)
                    batch = self._batch1 // ncols or 1
                    rows = cur.fetchmany(batch if batch <= self.row_cap else self.row_cap + 1)
                    if len(rows) == batch and batch <= self.row_cap:  # there may be more
                        over_bytes = self._fetch_more(cur, rows, ncols, batch)
            except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as e:
                failed = self._classify(e, time.perf_counter() - t0)
                if not (may_reparse and str(e).startswith(_SCHEMA_LOST_MARKER)
                        and _reparse_schema(con, self._open_limits)):
                    return failed
                reparsed = True
            finally:
                if cur is not None:
                    cur.close()
                if heap is not None:
                    heap.exit(cap)
                lock.acquire()
                watchdog.running.pop(self._key, None)
                lock.release()
                state[_DEADLINE] = math.inf
            elapsed = time.perf_counter() - t0
        if reparsed:  # the schema reads again: the statement once more, as if it were the first time
            return self._execute(sql, False)
        if description is None:
            if _is_blank(sql):
                return _failure("syntax", "empty SQL: no statement", elapsed)
            return _failure("forbidden", "not a query: the statement returns no result set", elapsed)
        truncated = over_bytes or len(rows) > self.row_cap
        if len(rows) > self.row_cap:
            del rows[self.row_cap:]
        return ExecutionResult(tuple([d[0] for d in description]), tuple(rows), elapsed, truncated)

    def _fetch_more(self, cur: sqlite3.Cursor, rows: list[tuple], ncols: int, batch: int) -> bool:
        """Fetch into ``rows`` (which holds the first batch) up to ``row_cap + 1`` rows and about
        ``max_result_bytes`` of values.

        A batch holds at most ``max_result_bytes // (ncols * (max_value_bytes + 8))`` rows (>= 1,
        <= :data:`FETCH_ROWS_MAX`), so no batch can pass the budget by more than its own size. Sizes
        (:func:`_approx_bytes`) are counted only once the rows fetched could pass the budget at all.

        Returns:
            bool: ``True`` when the byte budget stopped the fetch; ``rows`` then keeps the rows that fit.
        """
        budget = self.max_result_bytes
        row_worst = ncols * (self.max_value_bytes + 8)
        want_total = self.row_cap + 1
        size = -1  # -1: not counted yet
        done = False
        while True:
            if size < 0 and row_worst * len(rows) > budget:
                size = _approx_bytes(rows)
            if size > budget:
                keep = total = 0
                for row in rows:
                    total += _approx_bytes([row])
                    if total > budget:
                        break
                    keep += 1
                del rows[keep:]
                return True
            if done or len(rows) >= want_total:
                return False
            want = min(batch, want_total - len(rows))
            more = cur.fetchmany(want)
            if size >= 0:
                size += _approx_bytes(more)
            rows += more
            done = len(more) < want

    def _classify(self, e: BaseException, elapsed: float) -> ExecutionResult:
        state = self._state
        message = str(e) or type(e).__name__
        low = message.lower()
        if state[_TIMED_OUT] and "interrupt" in low:
            return _failure("timeout", f"interrupted after the {self.timeout_s:g} s time limit", elapsed)
        if state[_STOP] is not None:
            return _failure("timeout", f"stopped within the {self.timeout_s:g} s time limit: {state[_STOP]}", elapsed)
        if isinstance(e, MemoryError) or any(m in low for m in _MEMORY_MARKERS):
            heap = _guards.STATEMENT_HEAP
            if heap is not None and self.heap_limit_bytes > 0:
                what = heap.describe(self.heap_limit_bytes, *self._heap_start)
            else:
                what = f"SQLite heap limit {self._process_limit:,} bytes, process-wide"
            return _failure("runtime", f"out of memory (resource limit: {what}): {message}", elapsed)
        if state[_DENIAL] is not None:
            return _failure("forbidden", f"not allowed in the read-only sandbox: {state[_DENIAL]} ({message})",
                            elapsed)
        if _MULTI_STATEMENT_MARKER in low:
            return _failure("forbidden", "only one SQL statement per action", elapsed)
        if any(m in low for m in _FORBIDDEN_MARKERS):
            return _failure("forbidden", message, elapsed)
        if state[_GUARD] is not None:
            message = state[_GUARD]
            low = message.lower()
        if _TOO_BIG_MARKER in low:
            return _failure("runtime", f"value too large (limit {self.max_value_bytes} bytes): {message}", elapsed)
        if any(m in low for m in _SQL_TOO_LONG_MARKERS):
            return _failure("runtime", f"SQL too long (limit {self.max_sql_bytes} bytes): {message}", elapsed)
        if isinstance(e, ValueError) or any(m in low for m in _SYNTAX_MARKERS):
            return _failure("syntax", message, elapsed)
        return _failure("runtime", message, elapsed)

    def execute_gold(self, key: str, sql: str) -> ExecutionResult:
        """Run a gold SQL once and cache its result for the sandbox's lifetime.

        The cache is keyed by ``(key, sql)``: ``key`` names the sample (e.g. its id, or
        ``"<id>#<interpretation>"``) and the SQL text guards against two golds sharing a key.
        Failed golds are cached too (their failure is the sample's, not the agent's), except
        timeouts and out-of-memory failures, which can come from a busy machine or process and
        are retried on the next call, interrupted ones (:meth:`interrupt`: the caller cut it short), and transient ones (``database is locked``/busy: another
        connection holds a lock), which are retried :data:`GOLD_RETRIES` times at once, after
        :data:`GOLD_RETRY_WAIT_S` s, and never cached.

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
            for _ in range(GOLD_RETRIES):
                if not _is_transient(hit):
                    break
                time.sleep(GOLD_RETRY_WAIT_S)
                hit = self.execute(sql)
            if hit.error_kind != "timeout" and not _is_transient(hit) and not _is_memory(hit) \
                    and not _is_interrupted(hit):
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
        """``{table: {column: type}}`` of this database (:func:`textsql_clarify.sql.schema.read_schema`), read once,
        as a :class:`~textsql_clarify.sql.readonly.ReadOnlySchema` (``dict(sb.schema)`` gives a copy to change).
        Views SQLite cannot prepare here are left out (:attr:`unusable_views`).

        Raises:
            DatabaseOpenError: the schema cannot be read (:func:`schema_of`).
        """
        if self._schema is None:
            self._schema = schema_of(self.db_path)
        return self._schema

    @property
    def unusable_views(self) -> dict[str, str]:
        """``{view: reason}`` of the views left out of :attr:`schema` because SQLite cannot prepare them
        here (a collation or function only the making application defined;
        :func:`textsql_clarify.sql.schema.unusable_views`). Querying one gives a ``runtime`` error.

        Raises:
            DatabaseOpenError: the schema cannot be read.
        """
        return views_unusable_in(self.db_path)

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
            if self._helper is not None:
                self._helper.close()
                self._helper = None
            self._gold_cache.clear()

    def __enter__(self) -> "SQLiteSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"SQLiteSandbox({self.db_path!r}, timeout_s={self.timeout_s:g}, row_cap={self.row_cap}, {state})"


#: Most sandboxes :func:`get_sandbox` keeps open for reuse when nobody else holds them (least
#: recently used first out). A sandbox also held elsewhere (an env) stays open and cached, weakly,
#: until the last holder lets it go; then its connection closes.
MAX_CACHED_SANDBOXES = 32

_SANDBOXES: "weakref.WeakValueDictionary[tuple, SQLiteSandbox]" = weakref.WeakValueDictionary()
_SANDBOX_LRU: "OrderedDict[tuple, SQLiteSandbox]" = OrderedDict()  # the strong references, bounded
_SANDBOX_SETTINGS = frozenset({"timeout_s", "row_cap", "max_value_bytes", "max_result_bytes", "max_sql_bytes",
                               "max_statement_work"})
_SANDBOXES_LOCK = threading.Lock()


def get_sandbox(db_path: str | os.PathLike, **kw: Any) -> SQLiteSandbox:
    """Return this process's shared :class:`SQLiteSandbox` for ``db_path`` with settings ``kw``.

    Cached per (process id, resolved path, ``kw``), so many environments in one process share one
    connection (and one gold cache) per database, and a forked worker opens its own. A closed
    sandbox is replaced by a new one. The cache holds at most :data:`MAX_CACHED_SANDBOXES` strong
    references (least recently used out); a sandbox let go by the cache and by every other holder
    is freed, with its connection. Holders that are done with a sandbox call
    :func:`release_sandbox` (``TextSQLClarifyEnv.close`` does).

    Args:
        db_path: path of a SQLite file.
        **kw: ``timeout_s``, ``row_cap``, ``max_value_bytes``, ``max_result_bytes``,
            ``max_sql_bytes``, ``max_statement_work``, as for :class:`SQLiteSandbox`.

    Raises:
        FileNotFoundError, DatabaseOpenError, ValueError: as :class:`SQLiteSandbox`.
        TypeError: an unknown keyword.
    """
    unknown = set(kw) - _SANDBOX_SETTINGS
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
        sandbox._cache_key = key
        lru = _SANDBOX_LRU
        lru[key] = sandbox
        lru.move_to_end(key)
        while len(lru) > MAX_CACHED_SANDBOXES:
            lru.popitem(last=False)
        return sandbox


def release_sandbox(sandbox: SQLiteSandbox) -> None:
    """Drop :func:`get_sandbox`'s strong reference to ``sandbox``.

    The sandbox stays usable, and cached, while anyone still holds it; when the last holder
    lets it go its connection closes (CPython frees it at once). Safe to call twice, and for a
    sandbox that did not come from :func:`get_sandbox`. Source: Gymnasium's ``Env.close`` docs
    (``env.close()`` releases what the env opened).
    """
    key = getattr(sandbox, "_cache_key", None)
    if key is None:
        return
    with _SANDBOXES_LOCK:
        if _SANDBOX_LRU.get(key) is sandbox:
            del _SANDBOX_LRU[key]


def cached_sandbox_count() -> int:
    """Number of sandboxes :func:`get_sandbox` can still hand out without opening one (open ones
    held by the cache or by anyone else), in this process."""
    with _SANDBOXES_LOCK:
        return sum(1 for s in list(_SANDBOXES.values()) if not s.closed)
