"""Bounded work per SQLite VM instruction and per statement: size limits, memory limits, guarded built-ins.

Neither the progress handler nor the watchdog (:mod:`textsql_clarify.sql.watchdog`) can stop
one VM instruction that runs long, and SQLite checks both only at loop steps, never inside one
row's straight-line expressions. So :class:`textsql_clarify.sql.sandbox.SQLiteSandbox` bounds
what one instruction, and one statement, may cost:

* SQLite limits (:data:`SQLITE_LIMITS`, ``max_value_bytes``, ``max_sql_bytes``, set by
  :func:`_apply_limits`) cap the size of any string or blob, of the SQL text, of expressions,
  compound SELECTs, LIKE patterns and the number of result columns (:data:`MAX_COLUMNS`);
* a SQLite heap limit per statement (:data:`HARD_HEAP_LIMIT_BYTES` beyond what the process's
  SQLite holds when the statement starts, :class:`StatementHeap`) with temp storage in memory
  (``PRAGMA temp_store = MEMORY``), so a sort or a wide row fails with "out of memory" at the
  limit instead of growing RSS or temp files without bound, and idle page caches bounded per
  connection (:data:`CACHE_SIZE_KIB`);
* the built-ins whose cost is not linear in their inputs, or that read or build large values
  (:data:`_GUARDS`: ``like``, ``glob``, ``instr``, ``replace``, two-argument ``trim``s,
  ``printf``/``format``, ``json_patch``, ``->>``, ``json_type``, ``json_array_length``,
  ``json_valid``, ``upper``/``lower``, ``hex``/``quote``/``randomblob``) are wrapped
  by guards (:func:`_install_guards`). Each call is charged its estimated work (:data:`_GUARDS`'
  cost functions, in *work units* of about 1 ns on a 2-core reference machine) against one
  budget per statement (``max_statement_work``, default ``timeout_s`` x
  :data:`WORK_UNITS_PER_SECOND`), and checks the statement's wall-clock deadline: a spent budget
  or a passed deadline stops the statement (error kind ``timeout``). A single call whose cost
  bound passes its own cap (``max_value_bytes`` for ``%c`` repeats, :data:`MAX_TRIM_WORK`,
  :data:`MAX_SEARCH_WORK`, :data:`MAX_CALL_WORK`) is refused before it runs (``runtime``,
  "too expensive"). Otherwise SQLite's own function runs, so results are SQLite's exactly.

What is still not bounded exactly: unguarded linear work inside one row (operators such as
``||``, comparisons, ``CAST``, ``length``, ``substr``, the JSON functions that return JSON;
aggregates run in loops, where the time checks do see them) between two checks. The SQL length cap bounds how much there
can be: measured with the defaults, about 0.3 s for a 10 KB statement of ``||`` over 1 MiB
values (2-core machine, loaded). ``docs/platform.md`` "SQL bounds" lists the measured overruns;
the process-isolated executor (:mod:`textsql_clarify.sql.isolated`) bounds everything.
On Python < 3.11 ``Connection.setlimit`` does not exist: SQLite's own limits then stay in force
(only the guards, the heap limit, the watchdog and the row and byte caps apply).

Everything here is re-exported by :mod:`textsql_clarify.sql.sandbox`, the public import path.

Sources: the bounds contract (no step outlives its limit by more than 10 % plus a small constant, whatever
the SQL; ``docs/platform.md`` "SQL bounds"); SQLite's documentation of
``sqlite3_limit``, ``sqlite3_hard_heap_limit64``, ``sqlite3_memory_used``, ``PRAGMA cache_size``,
``PRAGMA temp_store`` and of the built-ins
guarded (costs measured as noted at each constant and cost function).
"""
from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import time
from typing import Any, Callable

#: Default ``max_value_bytes``: largest string, blob or sorter row a query may build or read
#: (bytes, ``SQLITE_LIMIT_LENGTH``). One call such as ``hex(zeroblob(N))`` or ``upper(x)`` is a
#: single VM instruction that neither the progress handler nor an interrupt can stop; at 256 KiB
#: the linear ones take under a millisecond, and a row of unguarded operators over such values
#: (``s || ''`` filling the 10 KB SQL limit) runs ~0.45 s on the loaded 2-core machine (1.85 s
#: at 1 MiB). A stored value over the cap cannot be read either
#: (``runtime`` error), so raise it for databases with larger values (the largest stored value
#: in ``../shared/data``'s Spider dev and mini-interact databases is 821 bytes).
MAX_VALUE_BYTES = 256 << 10

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
#: Most result columns (also table, index, ORDER BY and GROUP BY columns) of a statement
#: (``SQLITE_LIMIT_COLUMN``; SQLite's default is 2,000). The widest table in ``../shared/data``
#: has 50 columns (Spider's ``wta_1``); BIRD's widest has 115. One result row may hold up to
#: ``MAX_COLUMNS x max_value_bytes`` bytes (64 MiB by default), built in one go that no time
#: check can stop (~0.6 s for 128 columns of 1 MiB on the loaded 2-core machine, 1.5 s for 250).
MAX_COLUMNS = 256

SQLITE_LIMITS = {"EXPR_DEPTH": 100, "COMPOUND_SELECT": 50, "LIKE_PATTERN_LENGTH": 100, "ATTACHED": 0,
                 "COLUMN": MAX_COLUMNS}

#: Most (characters of X) x (characters of Y) a two-argument ``trim``/``ltrim``/``rtrim(X, Y)`` may
#: cost: SQLite compares each character of X with every character of Y (~1.5 ns per pair measured,
#: so ~15 ms here; a 40,000-character X and Y took 9.7 s unguarded).
MAX_TRIM_WORK = 10_000_000

#: Most (length of X) x (length of Y) for ``replace(X, Y, Z)`` and ``instr(X, Y)``: SQLite tries a
#: ``memcmp`` of Y at every position of X (~0.01 ns per byte when Y differs early; up to ~0.06 ns
#: when it matches up to its last byte, 0.58 s for a 1 MiB X and a 9,500-byte Y; a 1 MiB X with a
#: 0.5 MiB Y would take ~2.6 s). The cost cap :data:`MAX_CALL_WORK` refuses the worst ones first.
MAX_SEARCH_WORK = 10_000_000_000

#: Work units per second of ``timeout_s``: the default per-statement budget of guarded work is
#: ``timeout_s x WORK_UNITS_PER_SECOND`` (``max_statement_work``). One unit is about 1 ns of the
#: guarded built-ins on the 2-core reference machine (the cost functions of :data:`_GUARDS`).
WORK_UNITS_PER_SECOND = 1_000_000_000

#: Most work units one guarded call may cost (~0.2 s): a call cannot be interrupted once it
#: runs, so this bounds how far one call can pass the deadline. It refuses, e.g., a 1 MiB value
#: LIKE a 40-byte pattern (GLOB: 13 bytes), ``json_patch`` of two 40 KB objects, ``instr`` of a
#: 1 MiB X and a 3,200-byte Y; values in real databases are far smaller (821 bytes at most in
#: ``../shared/data``).
MAX_CALL_WORK = 200_000_000

#: The SQLite heap each statement may allocate, bytes: while a sandbox statement runs, SQLite's
#: hard heap limit (``sqlite3_hard_heap_limit64``) is what the process's SQLite held when it
#: started (``sqlite3_memory_used``) plus this cap (plus the caps of the other statements running
#: at that moment, :class:`StatementHeap`); past it every SQLite allocation fails and the statement
#: ends with "out of memory". Between statements the process's own limit (none, unless other code
#: set one) is back in force, so other SQLite use of the process is not limited by it. The
#: environment variable ``TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT`` (bytes; 0: no limit) overrides it
#: for sandboxes opened after it is set. With temp storage in memory SQLite sorts in one list
#: that it sorts in one step no time check can stop: the cap also bounds that step (6 M small
#: records, about this much, took 1.8 s on the loaded 2-core machine; 3 M, 0.7 s).
HARD_HEAP_LIMIT_BYTES = 256 << 20

#: ``PRAGMA cache_size`` of every sandbox connection, KiB (SQLite's default is 2,000 KiB): the most
#: page cache one idle sandbox keeps, so N sandboxes hold a known amount (``docs/platform.md``
#: "Memory per statement and per sandbox": 64 sandboxes over the 11 files of ``../shared/data`` over
#: 2 MiB, every table scanned, held 74.6 MiB of SQLite memory, 1,194 KiB each; 135.4 MiB with
#: SQLite's default). Read when a sandbox opens.
CACHE_SIZE_KIB = 1024

#: ``PRAGMA temp_store`` of every sandbox connection: ``"MEMORY"`` keeps sorts, temp indices and
#: materialised views under the heap limit, with no temporary file (with the default file store, sorts spilled up to
#: 832 MB of unlinked temp files in one step). The price, measured: SQLite then sorts in one list
#: in one step no time check can stop, so a sort whose input finished just before the deadline
#: overruns it by its sort time (5 M small records under the 256 MiB heap: 5-16 s on the loaded
#: 2-core machine, in 3 of 5 runs; with ``"FILE"`` the same statement sorts in chunks and stops
#: within 0.1 s, but writes temp files). ``"FILE"`` is SQLite's default; read when a sandbox opens.
TEMP_STORE = "MEMORY"

_HAS_SETLIMIT = hasattr(sqlite3.Connection, "setlimit")  # Python >= 3.11


def _apply_limits(con: sqlite3.Connection, max_value_bytes: int, max_sql_bytes: int) -> None:
    """Set :data:`SQLITE_LIMITS`, ``SQLITE_LIMIT_LENGTH = max_value_bytes`` (bytes) and
    ``SQLITE_LIMIT_SQL_LENGTH = max_sql_bytes`` (bytes) on ``con``; they apply to statements
    prepared from then on. A no-op without ``Connection.setlimit`` (Python < 3.11)."""
    if _HAS_SETLIMIT:
        for name, value in SQLITE_LIMITS.items():
            con.setlimit(getattr(sqlite3, "SQLITE_LIMIT_" + name), value)
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
        con.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max_sql_bytes)


def _limit_codes() -> tuple[int, ...]:
    """The ``sqlite3.SQLITE_LIMIT_*`` codes :func:`_apply_limits` sets."""
    return tuple(getattr(sqlite3, "SQLITE_LIMIT_" + n) for n in (*SQLITE_LIMITS, "LENGTH", "SQL_LENGTH"))


def _current_limits(con: sqlite3.Connection) -> dict[int, int]:
    """``{limit code: value}`` of the limits :func:`_apply_limits` sets, as ``con`` has them now (``{}``
    without ``Connection.setlimit``)."""
    return {code: con.getlimit(code) for code in _limit_codes()} if _HAS_SETLIMIT else {}


def _reparse_schema(con: sqlite3.Connection, open_limits: dict[int, int]) -> bool:
    """Have SQLite parse the schema of ``con`` again under ``open_limits`` (the limits it had when it opened,
    :func:`_current_limits`), then put the connection's own limits back; ``True`` when the schema reads.

    SQLite applies a connection's limits to the ``CREATE`` statements of its schema each time it parses them,
    and parses them again after it dropped the parsed schema (a failed ``VACUUM`` does, and so does a failure
    that rolls back). A table over :data:`MAX_COLUMNS` columns, a ``CREATE`` statement over ``max_sql_bytes``
    or a view whose expression nests over ``EXPR_DEPTH`` then fails ("malformed database schema") and every
    later statement fails with it. Limits apply to statements prepared while they are in force, so statements
    prepared after this call are bounded as before.

    Source: SQLite's documentation of ``sqlite3_limit`` (limits apply to the schema's statements too) and of
    the schema cache (``sqlite3_reset`` / ``SQLITE_SCHEMA``).
    """
    if not open_limits:
        return False
    own = {code: con.setlimit(code, value) for code, value in open_limits.items()}  # setlimit returns the old
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchall()
        return True
    except sqlite3.Error:
        return False
    finally:
        for code, value in own.items():
            con.setlimit(code, value)


# -- SQLite's heap limit, one per statement --------------------------------------------------------
def heap_cap_from_env() -> int:
    """The heap cap of a sandbox opened now, bytes (0: none): ``TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT`` when
    set, else :data:`HARD_HEAP_LIMIT_BYTES`.

    Raises:
        ValueError: ``TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT`` is not an integer >= 0.
    """
    raw = os.environ.get("TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT")
    if raw is None:
        return HARD_HEAP_LIMIT_BYTES
    try:
        cap = int(raw)
    except ValueError:
        cap = -1
    if cap < 0:
        raise ValueError(f"TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT must be a number of bytes >= 0, got {raw!r}")
    return cap


def _load_sqlite_api() -> tuple[tuple[Callable[..., int], ...] | None, str]:
    """``((memory_used, hard_heap_limit64, soft_heap_limit64), "")`` of the SQLite library that this
    process's ``sqlite3`` module runs on (looked up through ``_sqlite3``'s own handle, so it is the same
    library, linked statically or not), or ``(None, why not)``.

    SQLite counts memory, and enforces a heap limit, only with memory statistics on (its default,
    ``SQLITE_DEFAULT_MEMSTATUS=1``): with them off ``sqlite3_memory_used`` stays 0 and no limit applies.
    """
    try:
        import ctypes

        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)
        used = lib.sqlite3_memory_used
        used.restype, used.argtypes = ctypes.c_int64, []
        fns = [used]
        for name in ("sqlite3_hard_heap_limit64", "sqlite3_soft_heap_limit64"):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int64, [ctypes.c_int64]
            fns.append(fn)
    except (ImportError, OSError, AttributeError) as e:
        return None, f"SQLite's C functions are not reachable through ctypes ({type(e).__name__}: {e})"
    probe = sqlite3.connect(":memory:")
    try:
        if used() <= 0:
            return None, "SQLite counts no memory here (memory statistics off): it enforces no heap limit"
    finally:
        probe.close()
    return tuple(fns), ""


class StatementHeap:
    """Process-wide bookkeeping of SQLite's hard heap limit, so that each statement's bound is its own.

    SQLite has one hard heap limit per process (``sqlite3_hard_heap_limit64``), counting every
    connection's memory: page caches of idle sandboxes, other sub-envs, a trainer's own SQLite. So
    the limit is set per statement instead. :meth:`enter`, called before a statement is prepared,
    sets the limit to ``sqlite3_memory_used()`` (what the process's SQLite holds now) plus the sum of
    the caps of the statements running now, its own included; :meth:`exit` re-measures it for the
    ones still running, and once none runs puts back the hard and soft limits found before the
    first one started (the process's own: none unless other code set one). All of it happens under
    one lock. Consequences (``docs/platform.md`` "Memory per statement and per sandbox"):

    * a statement running alone may allocate its cap beyond what the process's SQLite held when it
      started, whatever other connections hold;
    * ``k`` statements running at once (threads) may together allocate the sum of their caps
      beyond what was held when the last of them started or ended; one of them gets less than its
      cap only if another takes more than its own. An "out of memory" message says when the
      limit was shared;
    * other SQLite use in another thread *during* a statement counts against that headroom, and is
      limited by it; between statements it is not limited at all;
    * a lower hard limit that other code set before (``PRAGMA hard_heap_limit``) is kept as a
      ceiling: the limit is never raised above it;
    * a cap of 0 (no limit) makes the process's own limit apply while that statement runs.

    Cost: two lock round trips and 3-5 ``ctypes`` calls per statement (~2-3 us).

    Args:
        api: ``(memory_used, hard_heap_limit64, soft_heap_limit64)``, as :func:`_load_sqlite_api` gives.

    Source: SQLite's documentation of ``sqlite3_hard_heap_limit64``, ``sqlite3_soft_heap_limit64``
    and ``sqlite3_memory_used``.
    """

    def __init__(self, api: tuple[Callable[..., int], ...]) -> None:
        import ctypes

        self._used, self._hard, self._soft = api
        self._c_int64 = ctypes.c_int64  # an argument built once converts faster than an int (~0.2 us)
        self._read = ctypes.c_int64(-1)  # -1: read a limit without changing it
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def _reset(self) -> None:
        self.lock = threading.Lock()
        #: statements running now with a cap / with none (cap 0)
        self.running = 0
        self.unlimited = 0
        #: sum of the caps of the statements running now, bytes
        self.reserved = 0
        #: statements started so far (tells a statement whether another started while it ran)
        self.starts = 0
        #: the process's own hard and soft limits, found when the first running statement started
        self.outer_hard = self.outer_soft = 0
        #: the hard limit in force now (0: the process's own, no statement running)
        self.limit = 0

    def _after_fork(self) -> None:
        # a child forked while a statement ran in another thread inherits its limit: put the outer one back
        if self.running or self.unlimited:
            self._restore()
        self._reset()

    def _restore(self) -> None:
        self._hard(self._c_int64(self.outer_hard))  # 0 also clears the soft limit (SQLite's malloc.c)
        if (self.outer_hard or self.outer_soft) and self._soft(self._read) != self.outer_soft:
            self._soft(self._c_int64(self.outer_soft))

    def _want(self) -> int:
        """The hard limit for the statements running now (call under :attr:`lock`)."""
        outer = self.outer_hard
        if self.unlimited:
            return outer
        want = self._used() + self.reserved
        return outer if 0 < outer < want else want

    def enter(self, cap: int) -> tuple[int, int]:
        """Start a statement whose cap is ``cap`` bytes (0: none); call :meth:`exit` with the same cap.

        Returns:
            ``(bytes the process's SQLite held, this statement's start number)``, for :meth:`describe`.
        """
        with self.lock:
            first = not (self.running or self.unlimited)
            if first:
                self.outer_soft = self._soft(self._read)
            if cap > 0:
                self.running += 1
                self.reserved += cap
            else:
                self.unlimited += 1
            self.starts += 1
            used = self._used()
            if first:
                want = used + cap if cap > 0 else 0
                prior = self._hard(self._c_int64(want))  # the process's own limit, returned as it is replaced
                self.outer_hard = prior
                if 0 < prior and (want == 0 or prior < want):  # keep a lower limit other code set
                    want = prior
                    self._hard(self._c_int64(want))
            else:
                want = self._want()
                self._hard(self._c_int64(want))
            self.limit = want
            return used, self.starts

    def exit(self, cap: int) -> None:
        """End a statement started by :meth:`enter` with ``cap``."""
        with self.lock:
            if cap > 0:
                self.running -= 1
                self.reserved -= cap
            else:
                self.unlimited -= 1
            if self.running or self.unlimited:
                self.limit = want = self._want()
                self._hard(self._c_int64(want))
            else:
                self._restore()
                self.limit = 0

    def describe(self, cap: int, used: int, start: int) -> str:
        """What bounded a statement that ran out of memory (call before :meth:`exit`): its cap, what the
        process's SQLite held when it started, and whether other statements or an outer limit shared it."""
        with self.lock:
            shared = self.running + self.unlimited > 1 or self.starts != start
            outer, limit = self.outer_hard, self.limit
        text = (f"SQLite heap limit {cap:,} bytes for this statement, beyond the {used:,} bytes the process's "
                f"SQLite held when it started")
        if shared:
            text += "; shared with statements running at the same time in other threads"
        if outer and limit == outer:
            text += f"; held to the process's own hard heap limit of {outer:,} bytes"
        return text


def _apply_process_wide_limit(con: sqlite3.Connection, cap: int) -> int:
    """Where :class:`StatementHeap` cannot work (no ``ctypes`` access to SQLite): lower the process-wide
    hard heap limit to ``cap`` bytes once, through ``con`` (``PRAGMA hard_heap_limit`` only lowers it).
    Return the limit now in force (0: none)."""
    if cap > 0:
        current = con.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if current == 0 or current > cap:
            con.execute(f"PRAGMA hard_heap_limit = {int(cap)}")
    return int(con.execute("PRAGMA hard_heap_limit").fetchone()[0])


_API, HEAP_API_MISSING = _load_sqlite_api()
#: The process's :class:`StatementHeap`, or ``None`` where SQLite's C functions are not reachable
#: (:data:`HEAP_API_MISSING` says why; sandboxes then lower the process-wide limit once instead).
STATEMENT_HEAP: StatementHeap | None = StatementHeap(_API) if _API is not None else None


def sqlite_memory_used() -> int:
    """Bytes the process's SQLite holds now (``sqlite3_memory_used``), every connection together;
    -1 where :data:`STATEMENT_HEAP` is ``None``."""
    return _API[0]() if _API is not None else -1


def sqlite_heap_limits() -> tuple[int, int]:
    """``(hard, soft)``: SQLite's process-wide heap limits in force now, bytes (0: none); ``(-1, -1)``
    where :data:`STATEMENT_HEAP` is ``None``."""
    return (_API[1](-1), _API[2](-1)) if _API is not None else (-1, -1)

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


def _call_reason(cost: float) -> str | None:
    if cost > MAX_CALL_WORK:
        return f"too expensive: one call costs about {cost:,.0f} work units, more than the sandbox's {MAX_CALL_WORK:,}"
    return None


# -- cost functions: estimated work units (~ns on the reference machine) of one call --------------
# Measured on the 2-core machine (loaded), over 1 MiB values: upper/lower ~4 ns per byte, hex and
# quote ~2, randomblob ~5, json parse ~12 per byte, one JSON path lookup ~2.5 per document byte;
# per (value byte x pattern byte): LIKE up to ~5 (``'%' || 97 x 'a' || 'b'``: 0.55 s), GLOB up to
# ~15 (24 ``[a]`` classes: 1.5 s); json_patch ~0.12 per (byte x byte) of its two objects (two
# 210 KB, 20,000-key objects: 5.1 s); trim 2 per pair; instr/replace 0.06 per (X byte x Y byte)
# (a 1 MiB X and a 9,500-byte Y that matches up to its last byte: 0.58 s).
_CALL_UNITS = 2_000  # the fixed cost of a call through a guard (~2 us)


def _like_cost(args: tuple, _mvb: int) -> float:
    return _CALL_UNITS + 5 * _text_len(args[1]) * max(1, _text_len(args[0]))


def _glob_cost(args: tuple, _mvb: int) -> float:
    return _CALL_UNITS + 15 * _text_len(args[1]) * max(1, _text_len(args[0]))


def _search_cost(args: tuple, _mvb: int) -> float:
    n = _text_len(args[0])
    return _CALL_UNITS + 1.5 * n + 0.06 * n * _text_len(args[1])


def _trim_cost(args: tuple, _mvb: int) -> float:
    return _CALL_UNITS + 2 * _text_len(args[0]) * max(1, _text_len(args[1]))


def _printf_cost(args: tuple, mvb: int) -> float:
    return _CALL_UNITS + min(_printf_repeat_bound(args), mvb) + 2 * sum(map(_text_len, args))


def _json_path_cost(args: tuple, _mvb: int) -> float:
    # parse the document once, then one lookup (or edit) per path
    n = _text_len(args[0]) if args else 0
    return _CALL_UNITS + 12 * n + 2.5 * n * max(1, len(args) - 1)


def _json_patch_cost(args: tuple, _mvb: int) -> float:
    a, b = _text_len(args[0]), _text_len(args[1])
    return _CALL_UNITS + 12 * (a + b) + 0.12 * a * b


def _linear_cost(per_byte: float) -> Callable[[tuple, int], float]:
    def cost(args: tuple, _mvb: int) -> float:
        return _CALL_UNITS + per_byte * sum(map(_text_len, args))
    return cost


def _randomblob_cost(args: tuple, mvb: int) -> float:
    n = args[0] if args and args[0].__class__ is int else 0
    return _CALL_UNITS + 5 * min(max(n, 0), mvb)


# -- per-call refusals (before the call runs) ------------------------------------------------------
def _printf_reason(args: tuple, max_value_bytes: int, cost: float) -> str | None:
    repeats = _printf_repeat_bound(args)
    if repeats >= max_value_bytes:  # SQLite would loop that long, then return NULL
        return f"value too large (limit {max_value_bytes} bytes): %c precisions repeat {repeats:,} characters"
    return _call_reason(cost)


def _trim_reason(args: tuple, _max_value_bytes: int, cost: float) -> str | None:
    return _pairwise_reason(args, MAX_TRIM_WORK, "trimming X by the characters of Y") or _call_reason(cost)


def _search_reason(args: tuple, _max_value_bytes: int, cost: float) -> str | None:
    return _pairwise_reason(args, MAX_SEARCH_WORK, "searching X for Y") or _call_reason(cost)


def _cap_reason(_args: tuple, _max_value_bytes: int, cost: float) -> str | None:
    return _call_reason(cost)


_Cost = Callable[[tuple, int], float]
_Reason = Callable[[tuple, int, float], "str | None"]

#: Guarded built-ins: (name, number of arguments or -1 for any, cost(args, max_value_bytes) in
#: work units, reason(args, max_value_bytes, cost) giving why one call is refused or None,
#: deterministic). A name this SQLite lacks is skipped (``format`` is new in 3.38, ``->`` in 3.38).
#: Not wrapped, because they are linear and cheap per byte, or run in loops the time checks see:
#: ``length``, ``substr``, ``trim`` with one argument, ``zeroblob`` (its value is not built until
#: read), ``char``, ``unicode``, ``soundex``, ``json_quote``, ``json_object``/``json_array``,
#: the aggregates (``group_concat``, ``json_group_array``/``json_group_object``: bounded by the
#: value cap, one row per loop step) and the table-valued ``json_each``/``json_tree`` (refused by
#: the authorizer anyway). Not wrapped because a Python function cannot return SQLite's JSON
#: *subtype*, so ``json_object('a', json_extract(x, '$.list'))`` would nest a string instead of
#: the list: ``json``, ``json_extract``, ``->``, ``json_set``/``json_insert``/``json_replace``/
#: ``json_remove`` (linear per path; mini-interact golds use ``json_extract`` 384 times).
#: ``json_patch`` is wrapped (it is quadratic): its result loses the subtype, so a patch nested
#: in another JSON function's value argument is embedded as a string (no gold in
#: ``../shared/data`` does that).
_GUARDS: tuple[tuple[str, int, _Cost, _Reason, bool], ...] = (
    ("printf", -1, _printf_cost, _printf_reason, True), ("format", -1, _printf_cost, _printf_reason, True),
    ("trim", 2, _trim_cost, _trim_reason, True), ("ltrim", 2, _trim_cost, _trim_reason, True),
    ("rtrim", 2, _trim_cost, _trim_reason, True),
    ("replace", 3, _search_cost, _search_reason, True), ("instr", 2, _search_cost, _search_reason, True),
    ("like", 2, _like_cost, _cap_reason, True), ("like", 3, _like_cost, _cap_reason, True),
    ("glob", 2, _glob_cost, _cap_reason, True),
    ("json_patch", 2, _json_patch_cost, _cap_reason, True),
    ("json_array_length", -1, _json_path_cost, _cap_reason, True),
    ("json_type", -1, _json_path_cost, _cap_reason, True),
    ("->>", 2, _json_path_cost, _cap_reason, True), ("json_valid", 1, _json_path_cost, _cap_reason, True),
    ("upper", 1, _linear_cost(4), _cap_reason, True), ("lower", 1, _linear_cost(4), _cap_reason, True),
    ("hex", 1, _linear_cost(2), _cap_reason, True), ("quote", 1, _linear_cost(2), _cap_reason, True),
    ("randomblob", 1, _randomblob_cost, _cap_reason, False),
)


def _install_guards(con: sqlite3.Connection, state: list, max_value_bytes: int, guard_slot: int, *,
                    deadline_slot: int | None = None, budget_slot: int | None = None,
                    stop_slot: int | None = None) -> sqlite3.Connection:
    """Wrap the :data:`_GUARDS` functions of ``con``; return the helper connection that runs them.

    A guarded call first checks its own cost bound (refused: ``state[guard_slot]`` gets the
    reason and the statement fails, kind ``runtime``); then it is charged its cost against the
    statement's budget ``state[budget_slot]`` (work units) and checks the wall-clock deadline
    ``state[deadline_slot]`` (``time.perf_counter`` s): a spent budget or a passed deadline puts
    the reason in ``state[stop_slot]`` and stops the statement (kind ``timeout``). Otherwise it
    runs SQLite's own built-in on a private in-memory connection with the same value limit, so
    results are SQLite's exactly (about 2-3 us more per call). A function the database schema
    uses (a view, index or generated column) is left unwrapped: with ``trusted_schema`` off,
    SQLite refuses application functions there.

    Args:
        con: the sandbox's connection (its schema is read once here).
        state: the sandbox's per-call state list (see the slots).
        max_value_bytes: the sandbox's value limit (bytes), also set on the helper connection.
        guard_slot: index of the guard message in ``state``.
        deadline_slot, budget_slot, stop_slot: indices of the statement's deadline (s), its
            remaining budget (work units) and the stop reason; ``None`` (all three): no
            per-statement budget or deadline check, only the per-call refusals.

    Raises:
        sqlite3.Error: the schema of ``con`` cannot be read.

    Source: the bounds contract (``docs/platform.md`` "SQL bounds": one per-statement budget across all
    guarded calls; a guard for every superlinear built-in, including the JSON functions).
    """
    helper = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    if _HAS_SETLIMIT:  # the same limits (LIKE pattern length ...), which the built-ins check
        for name, value in SQLITE_LIMITS.items():
            helper.setlimit(getattr(sqlite3, "SQLITE_LIMIT_" + name), value)
        helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
    schema_sql = " ".join(r[0] for r in con.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    per_statement = deadline_slot is not None and budget_slot is not None and stop_slot is not None
    now_of = time.perf_counter
    for name, nargs, cost_of, reason_of, deterministic in _GUARDS:
        if name[0].isalpha():
            if re.search(rf"\b{name}\s*\(", schema_sql, re.IGNORECASE):
                continue
        elif name in schema_sql:
            continue
        probe = (f"SELECT NULL {name} NULL" if not name[0].isalpha()
                 else f"SELECT {name}({', '.join(['NULL'] * max(nargs, 1))})")
        try:  # only wrap what this SQLite has (format() and -> are new in 3.38)
            helper.execute(probe).fetchall()
        except sqlite3.Error:
            continue
        sql_name = f'"{name}"' if not name[0].isalpha() else name

        def guarded(*args, _name=name, _cost_of=cost_of, _reason_of=reason_of, _sql={}, _sql_name=sql_name):
            cost = _cost_of(args, max_value_bytes)
            reason = _reason_of(args, max_value_bytes, cost)
            if reason is not None:
                state[guard_slot] = f"{_name}(): {reason}"
                raise _GuardRefusal(reason)
            if per_statement:
                left = state[budget_slot] = state[budget_slot] - cost
                if left < 0:
                    state[stop_slot] = (f"statement cost budget spent: its guarded calls cost more than "
                                        f"the {state[budget_slot] + cost:,.0f} work units left (at {_name}())")
                    raise _GuardRefusal(state[stop_slot])
                if now_of() > state[deadline_slot]:
                    state[stop_slot] = f"deadline passed inside the statement (at {_name}())"
                    raise _GuardRefusal(state[stop_slot])
            sql = _sql.get(len(args))
            if sql is None:
                if _sql_name[0] == '"':
                    sql = _sql[2] = f"SELECT ? {_name} ?"
                else:
                    sql = _sql[len(args)] = f"SELECT {_sql_name}({', '.join(['?'] * len(args))})"
            try:
                return helper.execute(sql, args).fetchone()[0]
            except sqlite3.Error as e:
                state[guard_slot] = f"{_name}(): {e}"
                raise

        con.create_function(name, nargs, guarded, deterministic=deterministic)
    return helper
