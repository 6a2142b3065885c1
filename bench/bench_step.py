"""Benchmark: cost of ``env.step(<sql>)`` relative to a raw sqlite3 execute + fetchall of the same SQL.

Over Spider dev gold queries used as predictions, both are timed side by side in one run, per query,
interleaved (raw, step, raw, step ...), several repetitions each; the gold result is already cached
(a warm-up step per sample), as in RL where a sample is visited many times. Prints the median of the
per-query ratios step/raw, with and without the detailed scores (cells, components, retrieval).
Target (issue 2): median ratio <= 1.5 for the EX-only step. The last column is the median fixed
overhead per step (step minus raw, microseconds): Spider dev queries take ~10 us raw, so the ratio is
dominated by that fixed cost (action parsing, the sandbox's authorizer and progress handler, EX
comparison, observation and info building).

    python bench/bench_step.py [--spider ../shared/data/spider_dev] [--limit 300] [--reps 5]
"""
from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.env import TextSQLClarifyEnv  # noqa: E402


def _raw(con: sqlite3.Connection, sql: str) -> float:
    t0 = time.perf_counter()
    con.execute(sql).fetchall()
    return time.perf_counter() - t0


def _step(env: TextSQLClarifyEnv, index: int, action: str) -> float:
    env.reset(options={"index": index})
    t0 = time.perf_counter()
    env.step(action)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    samples = load_dataset(f"spider:{args.spider}", limit=args.limit)
    cons: dict[str, sqlite3.Connection] = {}
    rows = []
    for detailed in (False, True):
        env = TextSQLClarifyEnv(samples=samples, detailed_scores=detailed)
        ratios, raw_all, step_all, over = [], [], [], []
        for i, s in enumerate(samples):
            con = cons.setdefault(s.db_path, sqlite3.connect(Path(s.db_path).resolve().as_uri() + "?mode=ro", uri=True))
            action = f"<sql>{s.gold_sql}</sql>"
            _step(env, i, action)  # warm-up: gold result and gold-side analysis cached
            raw_t, step_t = [], []
            for _ in range(args.reps):
                raw_t.append(_raw(con, s.gold_sql))
                step_t.append(_step(env, i, action))
            r, st = statistics.median(raw_t), statistics.median(step_t)
            raw_all.append(r)
            step_all.append(st)
            ratios.append(st / max(r, 1e-9))
            over.append(st - r)
        rows.append(("EX only (detailed_scores=False)" if not detailed else "EX + cells + components + retrieval",
                     statistics.median(raw_all), statistics.median(step_all), statistics.median(ratios),
                     sum(step_all) / sum(raw_all), statistics.median(over)))
    print(f"queries: {len(samples)} Spider dev golds, {args.reps} interleaved repetitions each, gold cached")
    print(f"{'step mode':40s} {'raw median ms':>14s} {'step median ms':>15s} {'median ratio':>13s} {'total ratio':>12s} {'overhead us':>12s}")
    for name, r, st, ratio, tot, ov in rows:
        print(f"{name:40s} {r * 1e3:14.3f} {st * 1e3:15.3f} {ratio:13.2f} {tot:12.2f} {ov * 1e6:12.1f}")


if __name__ == "__main__":
    main()
