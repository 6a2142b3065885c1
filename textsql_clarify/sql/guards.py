"""Bounded work per SQLite VM instruction: the sandbox's size limits and its guarded built-ins.

Neither the progress handler nor the watchdog (:mod:`textsql_clarify.sql.watchdog`) can stop
one VM instruction that runs long, so :class:`textsql_clarify.sql.sandbox.SQLiteSandbox` bounds
what one instruction may cost:

* SQLite limits (:data:`SQLITE_LIMITS`, ``max_value_bytes``, ``max_sql_bytes``, set by
  :func:`_apply_limits`) cap the size of any string or blob, of the SQL text, of expressions,
  compound SELECTs and LIKE patterns;
* the built-in functions whose cost is not linear in their inputs (``printf``/``format`` with
  ``%c`` precision, two-argument ``trim``/``ltrim``/``rtrim``, ``replace``, ``instr``) are wrapped
  by guards (:func:`_install_guards`) that refuse a call whose cost bound passes
  ``max_value_bytes`` (``%c`` repeats) / :data:`MAX_TRIM_WORK` / :data:`MAX_SEARCH_WORK`, and
  otherwise run SQLite's own function.

What is still not bounded: SQLite checks the deadline only between rows and loop steps, never
inside one row's expressions, so a row whose expressions chain many calls, each near the value
cap, overshoots by their total cost; the SQL length cap only bounds how many calls that is.
Measured with the defaults (2-core machine, 0.05 s limit): 584 ``length(upper(s))`` columns over
a 1 MiB ``s`` ran 0.8 s; 368 ``replace`` columns 4.2 s; each ``s LIKE p`` with a 100-byte
worst-case pattern costs ~0.17 s, so a 10 KB statement of them could run minutes. Lower
``max_value_bytes`` scales these down linearly; only a separate process can bound them fully.
On Python < 3.11 ``Connection.setlimit`` does not exist: SQLite's own limits then stay in force
(only the guards, the watchdog and the row and byte caps apply).

Everything here is re-exported by :mod:`textsql_clarify.sql.sandbox`, the public import path.

Sources: the issue's sandbox requirements; SQLite's documentation of ``sqlite3_limit`` and of
``printf``, ``trim``, ``replace`` and ``instr`` (costs measured as noted at each constant).
"""
from __future__ import annotations

import math
import re
import sqlite3
from typing import Any, Callable

#: Default ``max_value_bytes``: largest string, blob or sorter row a query may build or read
#: (bytes, ``SQLITE_LIMIT_LENGTH``). One call such as ``hex(zeroblob(N))`` or ``upper(x)`` is a
#: single VM instruction that neither the progress handler nor an interrupt can stop; at 1 MiB
#: the linear ones take about a millisecond. A stored value over the cap cannot be read either
#: (``runtime`` error), so raise it for databases with larger values (the largest stored value
#: in ``../shared/data``'s Spider dev and mini-interact databases is 821 bytes).
MAX_VALUE_BYTES = 1 << 20

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


def _install_guards(con: sqlite3.Connection, state: list, max_value_bytes: int,
                    guard_slot: int) -> sqlite3.Connection:
    """Wrap the :data:`_GUARDS` functions of ``con``; return the helper connection that runs them.

    A guarded call first checks its cost bound (refused: ``state[guard_slot]`` gets the reason
    and the statement fails); otherwise it runs SQLite's own built-in on a private in-memory
    connection with the same value limit, so results are SQLite's exactly (about 3 us more per
    call). A function the database schema uses (a view, index or generated column) is left
    unwrapped: with ``trusted_schema`` off, SQLite refuses application functions there.

    Args:
        con: the sandbox's connection (its schema is read once here).
        state: the sandbox's per-call state list; a guard writes its refusal message (or the
            error SQLite raised inside the built-in) into ``state[guard_slot]``.
        max_value_bytes: the sandbox's value limit (bytes), also set on the helper connection.
        guard_slot: index of the guard message in ``state``.

    Raises:
        sqlite3.Error: the schema of ``con`` cannot be read.
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
                state[guard_slot] = f"{_name}(): {reason}"
                raise _GuardRefusal(reason)
            sql = _sql.get(len(args))
            if sql is None:
                sql = _sql[len(args)] = f"SELECT {_name}({', '.join(['?'] * len(args))})"
            try:
                return helper.execute(sql, args).fetchone()[0]
            except sqlite3.Error as e:
                state[guard_slot] = f"{_name}(): {e}"
                raise

        con.create_function(name, nargs, guarded, deterministic=True)
    return helper

