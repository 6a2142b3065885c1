"""Bounded work per SQLite VM instruction and per statement: size limits, memory limits, guarded built-ins.

Neither the progress handler nor the watchdog (:mod:`textsql_clarify.sql.watchdog`) can stop
one VM instruction that runs long, and SQLite checks both only at loop steps, never inside one
row's straight-line expressions. So :class:`textsql_clarify.sql.sandbox.SQLiteSandbox` bounds
what one instruction, and one statement, may cost:

* SQLite limits (:data:`SQLITE_LIMITS`, ``max_value_bytes``, ``max_sql_bytes``, set by
  :func:`_apply_limits`) cap the size of any string or blob, of the SQL text, of expressions,
  compound SELECTs, LIKE patterns and the number of result columns (:data:`MAX_COLUMNS`);
* a process-wide SQLite heap limit (:data:`HARD_HEAP_LIMIT_BYTES`, :func:`apply_heap_limits`)
  with temp storage in memory (``PRAGMA temp_store = MEMORY``), so a sort or a wide row fails
  with "out of memory" at the limit instead of growing RSS or temp files without bound;
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

Sources: issue 12 ("Bounds that hold whatever the SQL"); SQLite's documentation of
``sqlite3_limit``, ``sqlite3_hard_heap_limit64``, ``PRAGMA temp_store`` and of the built-ins
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
#: at 1 MiB, the default before issue 12). A stored value over the cap cannot be read either
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

#: SQLite's hard heap limit, bytes (``sqlite3_hard_heap_limit64`` via ``PRAGMA hard_heap_limit``),
#: set once per process when the first sandbox opens: past it every SQLite allocation fails and
#: the statement ends with "out of memory". PROCESS-WIDE: it counts every SQLite connection of
#: the process, the sandbox's and any other. Only lowered, never raised (an existing lower limit
#: stays). The environment variable ``TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT`` (bytes; 0: set none)
#: overrides it before the first sandbox opens. With temp storage in memory SQLite sorts in one
#: list that it sorts in one step no time check can stop: the limit also bounds that step (6 M
#: small records, about this much, took 1.8 s on the loaded 2-core machine; 3 M, 0.7 s).
HARD_HEAP_LIMIT_BYTES = 256 << 20

#: SQLite's soft heap limit, bytes (``PRAGMA soft_heap_limit``, process-wide too): past it
#: SQLite reuses page-cache memory instead of growing. Set with the hard limit (at most a quarter of it).
SOFT_HEAP_LIMIT_BYTES = 64 << 20

#: ``PRAGMA temp_store`` of every sandbox connection: ``"MEMORY"`` keeps sorts, temp indices and
#: materialised views under the heap limit, with no temporary file (issue 12: sorts spilled up to
#: 832 MB of unlinked temp files in one step). The price, measured: SQLite then sorts in one list
#: in one step no time check can stop, so a sort whose input finished just before the deadline
#: overruns it by its sort time (5 M small records under the 256 MiB heap: 5-16 s on the loaded
#: 2-core machine, in 3 of 5 runs; with ``"FILE"`` the same statement sorts in chunks and stops
#: within 0.1 s, but writes temp files). ``"FILE"`` is SQLite's default; read when a sandbox opens.
TEMP_STORE = "MEMORY"

_HAS_SETLIMIT = hasattr(sqlite3.Connection, "setlimit")  # Python >= 3.11
_HEAP_LOCK = threading.Lock()
_heap_limits_applied: list[int] = []  # the hard limit this process set, once


def _apply_limits(con: sqlite3.Connection, max_value_bytes: int, max_sql_bytes: int) -> None:
    """Set :data:`SQLITE_LIMITS`, ``SQLITE_LIMIT_LENGTH = max_value_bytes`` (bytes) and
    ``SQLITE_LIMIT_SQL_LENGTH = max_sql_bytes`` (bytes) on ``con``; they apply to statements
    prepared from then on. A no-op without ``Connection.setlimit`` (Python < 3.11)."""
    if _HAS_SETLIMIT:
        for name, value in SQLITE_LIMITS.items():
            con.setlimit(getattr(sqlite3, "SQLITE_LIMIT_" + name), value)
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
        con.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max_sql_bytes)


def apply_heap_limits(con: sqlite3.Connection) -> int:
    """Set SQLite's process-wide hard and soft heap limits once per process; return the hard one.

    Reads :data:`HARD_HEAP_LIMIT_BYTES` (or ``TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT``, bytes, 0 for
    none) and sets ``PRAGMA hard_heap_limit`` and ``PRAGMA soft_heap_limit`` (a quarter of it,
    at most :data:`SOFT_HEAP_LIMIT_BYTES`) through ``con``, only lowering a limit already set.
    Both limits are process-wide (SQLite documentation of ``sqlite3_hard_heap_limit64``).

    Args:
        con: any open SQLite connection of this process.

    Returns:
        int: the hard heap limit now in force, bytes (0: none).

    Raises:
        ValueError: ``TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT`` is not a non-negative integer.
    """
    with _HEAP_LOCK:
        if not _heap_limits_applied:
            raw = os.environ.get("TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT")
            try:
                want = HARD_HEAP_LIMIT_BYTES if raw is None else int(raw)
            except ValueError:
                want = -1
            if want < 0:
                raise ValueError(f"TEXTSQL_CLARIFY_SQLITE_HEAP_LIMIT must be a number of bytes >= 0, got {raw!r}")
            if want > 0:
                current = con.execute("PRAGMA hard_heap_limit").fetchone()[0]
                if current == 0 or current > want:
                    con.execute(f"PRAGMA hard_heap_limit = {int(want)}")
                soft = min(SOFT_HEAP_LIMIT_BYTES, want // 4)
                current = con.execute("PRAGMA soft_heap_limit").fetchone()[0]
                if current == 0 or current > soft:
                    con.execute(f"PRAGMA soft_heap_limit = {int(soft)}")
            _heap_limits_applied.append(int(con.execute("PRAGMA hard_heap_limit").fetchone()[0]))
        return _heap_limits_applied[0]


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

    Source: issue 12 (per-statement budget across all guarded calls; a guard for every
    superlinear built-in, including the JSON functions).
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
