"""Benchmark: how far past (or short of) its limit the SQLite sandbox stops each runaway statement.

The tests assert only that a limit fired (a ``timeout`` error kind, a guard's message) under a
generous "did not hang" bound (``tests/conftest.py``: ``generous_bound``), because a loaded machine
does not keep tight wall-clock bounds (one run measured 0.0545 s against a 0.05 s assert). The tight
numbers live here, side by side:

* ``limit``: the sandbox's ``timeout_s`` (s);
* ``elapsed``: :attr:`textsql_clarify.sql.sandbox.ExecutionResult.elapsed_s`, median and max over ``--reps``
  runs (s); ``wall``: the max of ``time.perf_counter`` around ``execute`` (s);
* ``ratio``: elapsed / limit, median and max. A timeout stops at a ratio just above 1 (the
  progress handler checks every :data:`~textsql_clarify.sql.sandbox.PROGRESS_EVERY` VM instructions,
  the watchdog at the next loop step); a guard (value cap, printf ``%c``, quadratic trim / replace /
  instr) refuses well below 1;
* ``stopped by``: the error kind and the start of its message.

Cases: the runaway recursive CTE (with and without the progress handler: the watchdog alone), an
8-way cross join, heavy rows (each row a few VM instructions of ~5 ms), the value cap, printf's ``%c``
precision, the quadratic guards, and ``tests/test_adversarial.py``'s statements on the embedded
database. Sources: ``../shared/cases/execution_cases.json`` ex21; SQLite's ``sqlite3_interrupt`` and
``sqlite3_progress_handler`` documentation.

    python bench/bench_sandbox_limits.py [--reps 5]
"""
from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import textsql_clarify.sql.sandbox as database  # noqa: E402
from textsql_clarify.sql.sandbox import MAX_VALUE_BYTES, SQLiteSandbox  # noqa: E402
from textsql_clarify.datasets import embedded_db_path  # noqa: E402

RUNAWAY_CTE = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
CROSS_JOIN = "SELECT count(*) FROM t a, t b, t c, t d, t e, t f, t g, t h"
HEAVY_ROWS = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 3000) "
              "SELECT length(replace(hex(zeroblob(500000 + n)), '0', '1')) FROM r")
A40 = "WITH a(s) AS (SELECT replace(hex(zeroblob(40000)), '0', 'a')) "
A524 = "WITH a(s) AS (SELECT replace(hex(zeroblob(524000)), '0', 'a')) "

#: (name, SQL, timeout_s, progress handler on, database: "toy" or "embedded")
CASES: list[tuple[str, str, float, bool, str]] = [
    ("runaway CTE", RUNAWAY_CTE, 0.5, True, "toy"),
    ("runaway CTE", RUNAWAY_CTE, 0.05, True, "toy"),
    ("runaway CTE, watchdog only", RUNAWAY_CTE, 0.3, False, "toy"),
    ("cross join x8", CROSS_JOIN, 0.5, True, "toy"),
    ("heavy rows", HEAVY_ROWS, 0.1, True, "toy"),
    ("heavy rows, watchdog only", HEAVY_ROWS, 0.1, False, "toy"),
    ("value cap: zeroblob", f"SELECT zeroblob({MAX_VALUE_BYTES + 1})", 0.05, True, "toy"),
    ("value cap: 40 x replace(16 MB)",
     "SELECT " + "+".join(["length(replace(hex(zeroblob(16000000)),'0','1'))"] * 40), 0.05, True, "toy"),
    ("printf %c precision 4e8", "SELECT printf('%.*c', 400000000, 'x')", 0.05, True, "toy"),
    ("printf %.2000000000c", "SELECT printf('%.2000000000c', 'x')", 0.05, True, "toy"),
    ("quadratic ltrim", A40 + "SELECT length(ltrim(s, replace(s, 'a', 'b') || 'a')) FROM a", 0.05, True, "toy"),
    ("quadratic trim", A40 + "SELECT trim(s, s || 'b') FROM a", 0.05, True, "toy"),
    ("quadratic replace", A524 + "SELECT length(replace(s, substr(s, 1, 524000) || 'b', '')) FROM a",
     0.05, True, "toy"),
    ("quadratic instr", A524 + "SELECT instr(s, substr(s, 1, 524000) || 'b') FROM a", 0.05, True, "toy"),
    ("adversarial chained calls",
     "SELECT " + "+".join(f"length(replace(hex(zeroblob({8_000_000 + i})),'0','1'))" for i in range(16)),
     0.05, True, "embedded"),
    ("adversarial heavy rows", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 30) "
     "SELECT length(replace(hex(zeroblob(8000000 + n)),'0','1')) FROM r", 0.05, True, "embedded"),
]


def toy_db(folder: Path) -> Path:
    """The 20-row table ``t(x, y, z)`` of ``tests/test_database.py``."""
    path = folder / "toy.sqlite"
    con = sqlite3.connect(path)
    rows = ",".join(f"({i}, 'name{i}', {i * 1.5})" for i in range(1, 21))
    con.executescript(f"CREATE TABLE t(x INTEGER PRIMARY KEY, y TEXT, z REAL); INSERT INTO t VALUES {rows};")
    con.commit()
    con.close()
    return path


def measure(path: Path, sql: str, timeout_s: float, progress: bool, reps: int) -> dict:
    """Run ``sql`` ``reps`` times in a fresh sandbox; elapsed and wall times in seconds."""
    saved = database.PROGRESS_EVERY
    if not progress:
        database.PROGRESS_EVERY = 2**31 - 1  # read when the connection opens
    try:
        with SQLiteSandbox(path, timeout_s=timeout_s) as sb:
            elapsed, walls, result = [], [], None
            for _ in range(reps):
                t0 = time.perf_counter()
                result = sb.execute(sql)
                walls.append(time.perf_counter() - t0)
                elapsed.append(result.elapsed_s)
    finally:
        database.PROGRESS_EVERY = saved
    return dict(elapsed=elapsed, wall=walls, kind=result.error_kind or "ok",
                message=(result.error_message or "")[:44])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="runs per case (default 5)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        dbs = {"toy": toy_db(Path(tmp)), "embedded": Path(embedded_db_path())}
        head = (f"{'case':<32} {'limit s':>7} {'elapsed med':>11} {'elapsed max':>11} {'wall max':>8} "
                f"{'ratio med':>9} {'ratio max':>9}  stopped by")
        print(f"sandbox limits: elapsed / limit over {args.reps} runs per case (PROGRESS_EVERY="
              f"{database.PROGRESS_EVERY}, MAX_VALUE_BYTES={MAX_VALUE_BYTES})")
        print(head)
        print("-" * len(head))
        for name, sql, limit, progress, db in CASES:
            m = measure(dbs[db], sql, limit, progress, args.reps)
            med, top = statistics.median(m["elapsed"]), max(m["elapsed"])
            print(f"{name:<32} {limit:>7g} {med:>11.4f} {top:>11.4f} {max(m['wall']):>8.4f} "
                  f"{med / limit:>9.3f} {top / limit:>9.3f}  {m['kind']}: {m['message']}")


if __name__ == "__main__":
    main()
