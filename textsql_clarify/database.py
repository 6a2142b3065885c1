"""Sandboxed, read-only SQLite execution: the only way this package runs SQL.

Every query, the agent's and the gold, goes through :class:`SQLiteSandbox`:

* the file is opened read-only (URI ``mode=ro``), with ``PRAGMA query_only`` on and the
  ``ATTACH`` limit set to 0;
* an authorizer allows reads only (``SELECT``, column reads, functions other than a short
  deny-list, recursive CTEs, and a few schema-introspection PRAGMAs); writes, DDL, ``ATTACH``,
  transactions, PRAGMAs that set something and ``load_extension`` are refused;
* one statement per call (the stdlib refuses a second statement before running the first);
* a time limit that really stops SQLite, enforced twice: a progress handler checks the deadline
  every :data:`PROGRESS_EVERY` virtual-machine (VM) instructions, and a per-process watchdog thread
  (:class:`_Watchdog`) calls ``sqlite3_interrupt`` at the deadline, which SQLite notices at its next
  loop step or row. Wrapping a blocking call in a thread or ``asyncio.wait_for`` (or
  ``func_timeout``) cannot stop SQLite;
* bounded work per VM instruction, since neither check can stop one instruction that runs long:
  SQLite limits (:data:`SQLITE_LIMITS`, ``max_value_bytes``, ``max_sql_bytes``) cap the size of any
  string or blob, of the SQL text, of expressions, compound SELECTs and LIKE patterns; and the
  built-in functions whose cost is not linear in their inputs (``printf``/``format`` with ``%c``
  precision, two-argument ``trim``/``ltrim``/``rtrim``, ``replace``, ``instr``) are wrapped by
  guards that refuse a call whose cost bound passes ``max_value_bytes`` (``%c`` repeats) /
  :data:`MAX_TRIM_WORK` / :data:`MAX_SEARCH_WORK`, and otherwise run SQLite's own function;
* a row cap (at most ``row_cap`` rows) and a byte cap (about ``max_result_bytes`` of values) on
  what is fetched; the result is marked ``truncated`` when more exist.

Bad SQL never raises: it gives an :class:`ExecutionResult` whose ``error_kind`` is one of
:data:`ERROR_KINDS`. Gold results are cached per (key, SQL) for the sandbox's lifetime.

What is still not bounded: SQLite checks the deadline only between rows and loop steps, never
inside one row's expressions, so a row whose expressions chain many calls, each near the value
cap, overshoots by their total cost; the SQL length cap only bounds how many calls that is.
Measured with the defaults (2-core machine, 0.05 s limit): 584 ``length(upper(s))`` columns over
a 1 MiB ``s`` ran 0.8 s; 368 ``replace`` columns 4.2 s; each ``s LIKE p`` with a 100-byte
worst-case pattern costs ~0.17 s, so a 10 KB statement of them could run minutes. Lower
``max_value_bytes`` scales these down linearly; only a separate process can bound them fully.
One result row may also hold up to (result columns x ``max_value_bytes``) bytes before the byte
cap sees it. On Python < 3.11 ``Connection.setlimit`` does not exist: SQLite's own limits then
stay in force (only the guards, the watchdog and the row and byte caps apply).

Sources: the issue's sandbox requirements; the execution protocol of ABISS §5.3 (EX needs both
queries executed on the same database) and the cases in ``../shared/cases/execution_cases.json``
(ex21: a runaway recursive CTE must be interrupted, not waited for); SQLite's documentation of
``sqlite3_limit``, ``sqlite3_interrupt`` and ``sqlite3_progress_handler``.
"""
from __future__ import annotations

import marshal
import math
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import TextSQLClarifyError
from .sqlschema import Schema, read_schema

#: Error kinds of a failed :class:`ExecutionResult`, see :meth:`SQLiteSandbox.execute`.
ERROR_KINDS = ("syntax", "forbidden", "timeout", "runtime")

#: The progress handler runs every this many SQLite VM instructions. Measured on the 1,034 Spider
#: dev golds (best of 5, 2-core machine): every 1000 adds 0.5% to raw sqlite3, every 100 adds 8%
#: (20% on a 2M-row scan), every 10 adds 60%. Rows whose instructions are each expensive are
#: caught by the watchdog instead, which interrupts at the next loop step whatever this count.
PROGRESS_EVERY = 1000

#: Default ``max_value_bytes``: largest string, blob or sorter row a query may build or read
#: (bytes, ``SQLITE_LIMIT_LENGTH``). One call such as ``hex(zeroblob(N))`` or ``upper(x)`` is a
#: single VM instruction that neither the progress handler nor an interrupt can stop; at 1 MiB
#: the linear ones take about a millisecond. A stored value over the cap cannot be read either
#: (``runtime`` error), so raise it for databases with larger values (the largest stored value
#: in ``../shared/data``'s Spider dev and mini-interact databases is 821 bytes).
MAX_VALUE_BYTES = 1 << 20

#: Default ``max_result_bytes``: approximate bytes of values fetched per statement (the bytes of
#: each value plus a few per cell, see :func:`_approx_bytes`); past it the result is ``truncated``.
MAX_RESULT_BYTES = 64 << 20

#: Default ``max_sql_bytes``: SQL text of this many UTF-8 bytes or more is refused
#: (``SQLITE_LIMIT_SQL_LENGTH``). It bounds how many calls one row can chain (see the module
#: docstring). The longest gold SQL in ``../shared/data`` is 1,006 characters (BIRD mini-dev);
#: Spider dev's is 422.
MAX_SQL_BYTES = 10_000

#: Other SQLite limits set on every sandbox connection (``sqlite3.SQLITE_LIMIT_<name>``: value).
#: ``EXPR_DEPTH``: expression tree depth (the Spider dev golds need 13, BIRD mini-dev 21);
#: ``COMPOUND_SELECT``: terms of a UNION/INTERSECT/EXCEPT chain (golds need at most 3);
#: ``LIKE_PATTERN_LENGTH``: bytes of a LIKE/GLOB pattern, whose matching costs up to
#: (value bytes x pattern bytes), about 1.5 ns each, so ~0.15 s for one call at the value cap (gold
#: patterns have at most 19 characters); ``ATTACHED``: attached databases (none).
SQLITE_LIMITS = {"EXPR_DEPTH": 100, "COMPOUND_SELECT": 50, "LIKE_PATTERN_LENGTH": 100, "ATTACHED": 0}

#: Most (characters of X) x (characters of Y) a two-argument ``trim``/``ltrim``/``rtrim(X, Y)`` may
#: cost: SQLite compares each character of X with every character of Y (~1.5 ns per pair measured,
#: so ~15 ms here; a 40,000-character X and Y took 9.7 s unguarded).
MAX_TRIM_WORK = 10_000_000

#: Most (length of X) x (length of Y) for ``replace(X, Y, Z)`` and ``instr(X, Y)``: SQLite tries a
#: ``memcmp`` of Y at every position of X (~0.01 ns per byte measured, so ~0.1 s here; a 1 MiB X
#: with a 0.5 MiB Y would take ~2.6 s).
MAX_SEARCH_WORK = 10_000_000_000

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
_HAS_SETLIMIT = hasattr(sqlite3.Connection, "setlimit")  # Python >= 3.11

# SQLite messages that mean the text is not valid SQL (the rest of SQLite's errors are "runtime").
_SYNTAX_MARKERS = ("syntax error", "incomplete input", "unrecognized token", "null character")
_MULTI_STATEMENT_MARKER = "one statement at a time"
# SQLite messages that mean a write was refused by a layer below the authorizer.
_FORBIDDEN_MARKERS = ("not authorized", "readonly database", "query_only", "may not be modified")
_TOO_BIG_MARKER = "string or blob too big"
_SQL_TOO_LONG_MARKERS = ("query string is too large", "statement too long")

# Per-call state shared by a sandbox and its callbacks (indices into SQLiteSandbox._state).
_DEADLINE, _TIMED_OUT, _DENIAL, _GUARD = range(4)


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


# -- guards on built-in functions whose cost is not linear in their inputs ----------------------
class _GuardRefusal(Exception):
    """Raised inside a guarded SQL function; SQLite turns it into an error of the statement."""


_INT_PREFIX = re.compile(r"\s*[+-]?\d+")


def _as_sqlite_int_bound(v: Any) -> int:
    """An upper bound of ``abs((int) sqlite3_value_int64(v))``, the precision SQLite's printf takes."""
    if v.__class__ is int:
        return min(abs(v), 1 << 31)
    if v.__class__ is float:
        return min(abs(int(v)), 1 << 31) if math.isfinite(v) else 1 << 31
    if v.__class__ is str or v.__class__ is bytes:
        m = _INT_PREFIX.match(v if v.__class__ is str else v.decode("latin-1"))
        return min(abs(int(m.group())), 1 << 31) if m else 0
    return 0


def _printf_repeat_bound(args: tuple) -> int:
    """Upper bound of the characters SQLite's ``printf(FORMAT, ...)`` repeats for ``%c`` precisions.

    SQLite 3.40's ``%.<N>c`` loops N times even after the output passed the length limit, so its
    cost is N whatever the limit. The format is parsed as ``printf.c`` does (flags, width,
    ``.precision``, ``l``/``ll``, conversion); a ``*`` precision is bounded by the largest argument.
    """
    fmt = args[0] if args else None
    if fmt.__class__ is bytes:
        fmt = fmt.decode("latin-1")
    if fmt.__class__ is not str or "c" not in fmt:
        return 0
    star = None
    total, i, n = 0, 0, len(fmt)
    while True:
        i = fmt.find("%", i)
        if i < 0 or i + 1 >= n:
            return total
        i += 1
        precision: int | None = None
        while i < n:
            c = fmt[i]
            if c in "-+ #!0,":
                i += 1
            elif c in "123456789*":  # width: digits or an argument
                i += 1
                while c != "*" and i < n and "0" <= fmt[i] <= "9":
                    i += 1
                if i >= n or fmt[i] not in ".l":
                    break
            elif c == ".":
                i += 1
                if i < n and fmt[i] == "*":
                    if star is None:
                        star = max(map(_as_sqlite_int_bound, args[1:]), default=0)
                    precision, i = star, i + 1
                else:
                    px = 0
                    while i < n and "0" <= fmt[i] <= "9":
                        px = (px * 10 + ord(fmt[i]) - 48) & 0xFFFFFFFF
                        i += 1
                    precision = px & 0x7FFFFFFF
                if i >= n or fmt[i] != "l":
                    break
            elif c == "l":
                i += 2 if fmt.startswith("ll", i) else 1
                break
            else:
                break
        if i < n and fmt[i] == "c" and precision:
            total += precision
        i += 1


def _text_len(v: Any) -> int:
    """Length of ``v`` as SQLite text (characters or bytes; a number's text is at most ~24)."""
    if v.__class__ is str or v.__class__ is bytes:
        return len(v)
    return 0 if v is None else 24


def _pairwise_reason(args: tuple, limit: int, what: str) -> str | None:
    work = _text_len(args[0]) * _text_len(args[1])
    if work > limit:
        return (f"too expensive: {what} costs {_text_len(args[0])} x {_text_len(args[1])} = {work:,}, "
                f"more than the sandbox's {limit:,}")
    return None


def _printf_reason(args: tuple, max_value_bytes: int) -> str | None:
    repeats = _printf_repeat_bound(args)
    if repeats >= max_value_bytes:  # SQLite would loop that long, then return NULL
        return f"value too large (limit {max_value_bytes} bytes): %c precisions repeat {repeats:,} characters"
    return None


def _trim_reason(args: tuple, _max_value_bytes: int) -> str | None:
    return _pairwise_reason(args, MAX_TRIM_WORK, "trimming X by the characters of Y")


def _search_reason(args: tuple, _max_value_bytes: int) -> str | None:
    return _pairwise_reason(args, MAX_SEARCH_WORK, "searching X for Y")


#: Guarded built-ins: (name, number of arguments or -1 for any, reason(args, max_value_bytes)),
#: where reason gives why a call is refused, or None to run it.
_GUARDS: tuple[tuple[str, int, Callable[[tuple, int], str | None]], ...] = (
    ("printf", -1, _printf_reason), ("format", -1, _printf_reason),
    ("trim", 2, _trim_reason), ("ltrim", 2, _trim_reason), ("rtrim", 2, _trim_reason),
    ("replace", 3, _search_reason), ("instr", 2, _search_reason),
)


def _install_guards(con: sqlite3.Connection, state: list, max_value_bytes: int) -> sqlite3.Connection:
    """Wrap the :data:`_GUARDS` functions of ``con``; return the helper connection that runs them.

    A guarded call first checks its cost bound (refused: ``state[_GUARD]`` gets the reason and the
    statement fails); otherwise it runs SQLite's own built-in on a private in-memory connection
    with the same value limit, so results are SQLite's exactly (about 3 us more per call). A
    function the database schema uses (a view, index or generated column) is left unwrapped: with
    ``trusted_schema`` off, SQLite refuses application functions there.
    """
    helper = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    if _HAS_SETLIMIT:
        helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
    schema_sql = " ".join(r[0] for r in con.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    for name, nargs, reason_of in _GUARDS:
        if re.search(rf"\b{name}\s*\(", schema_sql, re.IGNORECASE):
            continue
        try:  # only wrap what this SQLite has (format() is new in 3.38)
            helper.execute(f"SELECT {name}({', '.join(['NULL'] * max(nargs, 1))})").fetchall()
        except sqlite3.Error:
            continue

        def guarded(*args, _name=name, _reason_of=reason_of, _sql={}):
            reason = _reason_of(args, max_value_bytes)
            if reason is not None:
                state[_GUARD] = f"{_name}(): {reason}"
                raise _GuardRefusal(reason)
            sql = _sql.get(len(args))
            if sql is None:
                sql = _sql[len(args)] = f"SELECT {_name}({', '.join(['?'] * len(args))})"
            try:
                return helper.execute(sql, args).fetchone()[0]
            except sqlite3.Error as e:
                state[_GUARD] = f"{_name}(): {e}"
                raise

        con.create_function(name, nargs, guarded, deterministic=True)
    return helper


# -- watchdog ----------------------------------------------------------------------------------
class _Watchdog:
    """One daemon thread per process that interrupts statements still running at their deadline.

    ``sqlite3_interrupt`` is noticed at SQLite's next loop step or row, whatever the instruction
    count, so it catches rows whose instructions are each expensive (test_adversarial's
    ``heavy-rows``), which the progress handler sees only every :data:`PROGRESS_EVERY` instructions.

    Protocol (:meth:`SQLiteSandbox.execute` inlines it): under :attr:`lock`, put
    ``running[key] = (deadline, connection, state)`` and call :meth:`wake` if ``deadline`` is
    earlier than :attr:`wake_at`; when the statement ends, delete the entry under :attr:`lock`.
    The thread interrupts only under the same lock, so it never hits a later statement. Cost
    per statement: two uncontended lock round trips (~0.4 us); the thread is woken only when a
    deadline is earlier than the one it sleeps until (at most once per ``timeout_s`` of activity),
    so no thread is started per query (a ``threading.Timer`` per query costs ~50-100 us).
    """

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        #: key -> (deadline in time.perf_counter s, connection, sandbox state); statements in flight.
        self.running: dict[int, tuple[float, sqlite3.Connection, list]] = {}
        #: When the thread looks next (time.perf_counter s; inf: only when woken).
        self.wake_at = math.inf
        self._thread: threading.Thread | None = None

    def wake(self, deadline: float) -> None:
        """Make the thread look at ``deadline`` (s); call with :attr:`lock` held."""
        self.wake_at = deadline
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="sqlite-sandbox-watchdog", daemon=True)
            self._thread.start()
        self._cond.notify()

    def _loop(self) -> None:
        now_of = time.perf_counter
        with self._cond:
            while True:
                now = now_of()
                wake_at = math.inf
                for deadline, con, state in self.running.values():
                    if state[_TIMED_OUT]:  # already stopped (by this thread or the progress handler)
                        continue
                    if deadline <= now:
                        state[_TIMED_OUT] = True
                        try:
                            con.interrupt()
                        except sqlite3.Error:  # closed meanwhile: nothing left to stop
                            pass
                    elif deadline < wake_at:
                        wake_at = deadline
                self.wake_at = wake_at
                self._cond.wait(None if wake_at == math.inf else min(wake_at - now, 3600.0))


_WATCHDOG = _Watchdog()


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

    ``max_value_bytes`` and ``max_sql_bytes`` need ``Connection.setlimit`` (Python >= 3.11);
    without it SQLite's own defaults (1e9 bytes) stay in force.

    Raises:
        FileNotFoundError: ``db_path`` is not an existing file.
        DatabaseOpenError: the file is not a readable SQLite database.
        ValueError: a setting out of range.
    """

    def __init__(self, db_path: str | os.PathLike, *, timeout_s: float = 5.0, row_cap: int = 10_000,
                 max_value_bytes: int = MAX_VALUE_BYTES, max_result_bytes: int = MAX_RESULT_BYTES,
                 max_sql_bytes: int = MAX_SQL_BYTES):
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if isinstance(row_cap, bool) or not isinstance(row_cap, int) or row_cap < 1:
            raise ValueError(f"row_cap must be an integer >= 1, got {row_cap!r}")
        _check_positive_int("max_value_bytes", max_value_bytes, 1024)
        if max_value_bytes > 1_000_000_000:
            raise ValueError(f"max_value_bytes must be <= 1000000000 (SQLite's own maximum), got {max_value_bytes}")
        _check_positive_int("max_result_bytes", max_result_bytes)
        _check_positive_int("max_sql_bytes", max_sql_bytes, 1024)
        path = Path(db_path)
        if not path.is_file():
            raise FileNotFoundError(f"database file not found: {db_path}")
        self.db_path = str(path.resolve())
        self.timeout_s = float(timeout_s)
        self.row_cap = row_cap
        self.max_value_bytes = max_value_bytes
        self.max_result_bytes = max_result_bytes
        self.max_sql_bytes = max_sql_bytes
        self._lock = threading.Lock()
        self._gold_cache: dict[tuple[str, str], ExecutionResult] = {}
        self._schema: Schema | None = None
        # Per-call state shared with the callbacks and the watchdog, indexed by _DEADLINE (perf_counter
        # s), _TIMED_OUT (bool), _DENIAL (authorizer refusal or None), _GUARD (guard message or None).
        self._state: list[Any] = [math.inf, False, None, None]
        self._helper: sqlite3.Connection | None = None
        self._key = id(self._state)  # this sandbox's key in the watchdog's table
        # rows of one column per fetch batch; a batch of n columns holds _batch1 // n rows (>= 1)
        self._batch1 = max(1, min(FETCH_ROWS_MAX, max_result_bytes // (max_value_bytes + 8)))
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
            self._helper = _install_guards(con, self._state, self.max_value_bytes)
        except sqlite3.Error as e:
            con.close()
            if self._helper is not None:
                self._helper.close()
            raise DatabaseOpenError(self.db_path, str(e)) from e
        if hasattr(con, "enable_load_extension"):
            con.enable_load_extension(False)
        if _HAS_SETLIMIT:  # after the schema was read: the limits apply to what runs from now on
            for name, value in SQLITE_LIMITS.items():
                con.setlimit(getattr(sqlite3, "SQLITE_LIMIT_" + name), value)
            con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.max_value_bytes)
            con.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, self.max_sql_bytes)
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
        * ``timeout``: the time limit ran out and the progress handler or the watchdog stopped
          the statement;
        * ``runtime``: any other SQLite error (unknown table or column, misuse of an aggregate,
          an interrupt from :meth:`interrupt`, ...), including the sandbox's size limits:
          "value too large (limit N bytes)", "SQL too long (limit N bytes)", a guarded function
          refused as too expensive, an expression too deep, a LIKE pattern too long.

        Args:
            sql: one SQLite statement; a trailing ``;`` is fine.

        Returns:
            ExecutionResult: at most ``row_cap`` rows and about ``max_result_bytes`` of values,
            fetched in batches of at most :data:`FETCH_ROWS_MAX` rows; ``truncated`` when more
            exist; ``elapsed_s`` covers execution and fetching, in seconds.

        Raises:
            TypeError: ``sql`` is not a ``str``.
            SandboxClosedError: the sandbox was closed.
        """
        if not isinstance(sql, str):
            raise TypeError(f"sql must be a str, got {type(sql).__name__}")
        state = self._state
        watchdog = _WATCHDOG
        with self._lock:
            con = self._con
            if con is None:
                raise SandboxClosedError(f"sandbox for {self.db_path} is closed")
            state[_TIMED_OUT] = False
            state[_DENIAL] = state[_GUARD] = None
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
                return self._classify(e, time.perf_counter() - t0)
            finally:
                if cur is not None:
                    cur.close()
                lock.acquire()
                watchdog.running.pop(self._key, None)
                lock.release()
                state[_DEADLINE] = math.inf
            elapsed = time.perf_counter() - t0
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


_SANDBOXES: dict[tuple, SQLiteSandbox] = {}
_SANDBOX_SETTINGS = frozenset({"timeout_s", "row_cap", "max_value_bytes", "max_result_bytes", "max_sql_bytes"})
_SANDBOXES_LOCK = threading.Lock()


def get_sandbox(db_path: str | os.PathLike, **kw: Any) -> SQLiteSandbox:
    """Return this process's shared :class:`SQLiteSandbox` for ``db_path`` with settings ``kw``.

    Cached per (process id, resolved path, ``kw``), so many environments in one process share one
    connection (and one gold cache) per database, and a forked worker opens its own. A closed
    sandbox is replaced by a new one.

    Args:
        db_path: path of a SQLite file.
        **kw: ``timeout_s``, ``row_cap``, ``max_value_bytes``, ``max_result_bytes``,
            ``max_sql_bytes``, as for :class:`SQLiteSandbox`.

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
        return sandbox
