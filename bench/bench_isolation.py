"""Benchmark: cost of ``isolation="process"`` next to the in-process sandbox, side by side in one run.

1. Per-query cost: over Spider dev gold queries, ``SQLiteSandbox.execute`` and ``ProcessSandbox.execute``
   (one worker, already started) are timed per query, interleaved (in-process, process, ...), ``--reps``
   times each; prints the median per-query time of each, the median of the per-query ratios
   process / in-process, and the median fixed cost per statement (process minus in-process, us): one
   pipe round trip plus a pickle of the rows.
2. The bound: one adversarial row (~1,600 comparisons of values at the default value cap, which SQLite cannot stop
   between them) under 0.05 s and 0.5 s limits: wall time in-process and in a worker, next to the
   bounds contract (limit + 10 % + a small constant), and what the next statement waits while the worker is
   replaced; then a worker that cannot answer at all (stopped with SIGSTOP).
3. Worker start-up: seconds from a fresh pool to the first answer, per start method.

The machine's load changes the absolute numbers; the ratios are taken side by side in one run.

    python bench/bench_isolation.py [--spider ../shared/data/spider_dev] [--limit 300] [--reps 5]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from textsql_clarify.sql.isolated import WorkerPool  # noqa: E402
from textsql_clarify.sql.sandbox import MAX_VALUE_BYTES, SQLiteSandbox  # noqa: E402



def compare_chain(value_bytes: int) -> str:
    """One row of 1,250 comparisons of two ``value_bytes`` zeroblobs in under 10 KB of SQL: no guarded built-in,
    no loop step between them, so in-process the row runs whatever the time limit (~4 s at 8 MiB on the 2-core
    machine). Each comparison expands both zeroblobs into the registers it reads. The comparisons go five to a
    result column, 250 columns (under ``MAX_COLUMNS``): SQLite reuses a small pool of temporary registers, and
    a register keeps the buffer of the largest value it held until the statement ends, so a longer sum per
    column holds a new 8 MiB buffer per operand beyond the pool. Measured with ``ru_maxrss`` (SQLite 3.40,
    8 MiB): 6 to a column peaked at 96 MB, 7 at 1.9 GB, 40 at 2.7 GB; above the worker's 1 GiB cap a fast
    machine stops the row as out of memory before the deadline does."""
    one = "+".join(["(s>t)"] * 5)
    head = f"WITH a(s, t) AS (SELECT zeroblob({value_bytes}), zeroblob({value_bytes})) SELECT "
    return head + ", ".join([one] * 250) + " FROM a"


def _time(fn, sql: str) -> float:
    t0 = time.perf_counter()
    fn(sql)
    return time.perf_counter() - t0


def per_query(spider: Path, limit: int, reps: int) -> None:
    dev = json.loads((spider / "dev.json").read_text())[:limit]
    inproc: dict[str, SQLiteSandbox] = {}
    with WorkerPool(size=1) as pool:
        ins, procs, ratios, fixed = [], [], [], []
        for item in dev:
            path = spider / "database" / item["db_id"] / f"{item['db_id']}.sqlite"
            a = inproc.setdefault(item["db_id"], SQLiteSandbox(path))
            b = pool.sandbox(path)
            sql = item["query"]
            a.execute(sql), b.execute(sql)  # warm-up: page cache, the worker's sandbox for this database
            ta, tb = [], []
            for _ in range(reps):
                ta.append(_time(a.execute, sql))
                tb.append(_time(b.execute, sql))
            ma, mb = statistics.median(ta), statistics.median(tb)
            ins.append(ma)
            procs.append(mb)
            ratios.append(mb / ma)
            fixed.append(mb - ma)
        print(f"per-query execute() over {len(dev)} Spider dev golds, median of {reps} reps each (one worker):")
        print(f"  in-process  median {statistics.median(ins) * 1e6:9.1f} us")
        print(f"  process     median {statistics.median(procs) * 1e6:9.1f} us")
        print(f"  ratio process / in-process: median of per-query ratios {statistics.median(ratios):.2f}x "
              f"(p90 {sorted(ratios)[int(0.9 * len(ratios))]:.2f}x); ratio of means "
              f"{sum(procs) / sum(ins):.2f}x")
        print(f"  fixed cost per statement (process - in-process): median {statistics.median(fixed) * 1e6:.1f} us")
    for s in inproc.values():
        s.close()


def bound(spider: Path, timeouts: list[float]) -> None:
    path = next((spider / "database").glob("*/*.sqlite"))
    print("adversarial row: ~1,600 comparisons of two values at the value cap in 10 KB of SQL; "
          "bar: limit + 10 % + 0.5 s")
    big = 8 << 20  # a raised value cap, as guards.py suggests for databases with large values
    cases = [(t, MAX_VALUE_BYTES) for t in timeouts] + [(timeouts[-1], big)]
    for timeout_s, cap in cases:
        sql = compare_chain(cap - 64)
        settings = {"timeout_s": timeout_s, "max_value_bytes": cap}
        a = SQLiteSandbox(path, **settings)
        with WorkerPool(size=1) as pool:
            b = pool.sandbox(path, **settings)
            b.execute("SELECT 1")
            t0 = time.perf_counter()
            ra = a.execute(sql)
            ta = time.perf_counter() - t0
            t0 = time.perf_counter()
            rb = b.execute(sql)
            tb = time.perf_counter() - t0
            t0 = time.perf_counter()
            nxt = b.execute("SELECT 1")
            tn = time.perf_counter() - t0
            bar = timeout_s * 1.1 + 0.5
            print(f"  limit {timeout_s:g} s, value cap {cap:,} B: in-process {ta:6.3f} s ({ta / timeout_s:5.1f}x the "
                  f"limit, {ra.error_kind}{', OVER THE BAR' if ta > bar else ''}); process {tb:6.3f} s "
                  f"({tb / timeout_s:4.2f}x, {rb.error_kind}, killed {pool.killed}"
                  f"{', OVER THE BAR' if tb > bar else ''});"
                  f" next statement {tn:.3f} s (ok={nxt.ok})")
        a.close()
    with WorkerPool(size=1) as pool:  # a worker that cannot answer at all (SIGSTOP): the kill alone bounds it
        b = pool.sandbox(path, timeout_s=timeouts[0])
        b.execute("SELECT 1")
        os.kill(pool.worker_pids()[0], signal.SIGSTOP)
        t0 = time.perf_counter()
        r = b.execute("SELECT 1")
        tb = time.perf_counter() - t0
        t0 = time.perf_counter()
        b.execute("SELECT 1")
        print(f"  stalled worker at a {timeouts[0]:g} s limit: {tb:.3f} s ({r.error_kind}); next statement "
              f"{time.perf_counter() - t0:.3f} s")


def startup(spider: Path) -> None:
    path = next((spider / "database").glob("*/*.sqlite"))
    for method in ("forkserver", "spawn"):
        times = []
        for _ in range(3):
            with WorkerPool(size=1, start_method=method) as pool:
                t0 = time.perf_counter()
                pool.sandbox(path).execute("SELECT 1")
                times.append(time.perf_counter() - t0)
        print(f"worker start-up to first answer, {method:10s}: median {statistics.median(times):.3f} s "
              f"(first {times[0]:.3f} s; n=3)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeouts", default="0.05,0.5", help="time limits of the adversarial row (s, comma-separated)")
    args = ap.parse_args()
    spider = Path(args.spider)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    per_query(spider, args.limit, args.reps)
    bound(spider, [float(t) for t in args.timeouts.split(",")])
    startup(spider)


if __name__ == "__main__":
    main()
