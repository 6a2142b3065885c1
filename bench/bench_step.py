"""Benchmark: cost of ``env.step(<sql>)`` relative to a raw sqlite3 execute + fetchall of the same SQL.

Over Spider dev gold queries used as predictions, both are timed side by side in one run, per query,
interleaved (raw, step, raw, step ...), several repetitions each; the gold result is already cached
(a warm-up step per sample), as in RL where a sample is visited many times. Prints the median of the
per-query ratios step/raw next to its target (``docs/platform.md`` "Step cost"):

- EX only (``binary`` preset, ``detailed_scores=False``): median ratio <= 1.5;
- with the article's detailed scores (cells, columns, components, retrieval; the default): <= 10.

The detailed row repeats one prediction text per sample, as GRPO repeats a completion within a group and
across epochs, so the kept analysis of :func:`textsql_clarify.sql.schema.shared_analysis` answers after the
warm-up. A third row times the detailed step on a prediction text no earlier step saw (extra spaces after
the first word), so that no cache keyed by the SQL text answers across steps: the honest cost of a novel RL
completion, printed next to the same 10x target. The last column is the median fixed overhead per step (step minus raw, microseconds): Spider dev
queries take ~10-50 us raw, so the EX-only ratio is dominated by that fixed cost (action parsing, the
sandbox's authorizer and progress handler, EX comparison, observation and info building).

    python bench/bench_step.py [--spider ../shared/data/spider_dev] [--limit N] [--reps 5] [--clock wall|cpu]
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

#: (row name, detailed scores, fresh text per step, target median ratio or None)
MODES = (
    ("EX only (binary, detailed_scores=False)", False, False, 1.5),
    ("EX + cells + components + retrieval", True, False, 10.0),
    ("  the same, novel prediction text", True, True, 10.0),
)


#: the clock both sides are timed with (``--clock``): wall time, or this thread's CPU time (steadier when
#: other processes load the machine: time spent waiting for a core is not counted on either side)
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
_clock = time.perf_counter


def _raw(con: sqlite3.Connection, sql: str) -> float:
    t0 = _clock()
    con.execute(sql).fetchall()
    return _clock() - t0


def _step(env: TextSQLClarifyEnv, index: int, action: str) -> float:
    env.reset(options={"index": index})
    t0 = _clock()
    env.step(action)
    return _clock() - t0


def _fresh(sql: str, k: int) -> str:
    head, _, rest = sql.partition(" ")
    return head + " " * (k + 1) + rest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=None, help="first N samples (default: all 1,034)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall (default) or cpu: this thread's CPU time, for a loaded machine")
    args = ap.parse_args()
    global _clock
    _clock = CLOCKS[args.clock]
    samples = load_dataset(f"spider:{args.spider}", limit=args.limit)
    cons: dict[str, sqlite3.Connection] = {}
    rows = []
    for name, detailed, fresh, target in MODES:
        env = TextSQLClarifyEnv(samples=samples, detailed_scores=detailed, reward_preset="binary")
        ratios, raw_all, step_all, over = [], [], [], []
        k = 0
        for i, s in enumerate(samples):
            con = cons.setdefault(s.db_path, sqlite3.connect(Path(s.db_path).resolve().as_uri() + "?mode=ro", uri=True))
            action = f"<sql>{s.gold_sql}</sql>"
            _step(env, i, action)  # warm-up: gold result and gold-side analysis cached
            raw_t, step_t = [], []
            for _ in range(args.reps):
                raw_t.append(_raw(con, s.gold_sql))
                k += 1
                step_t.append(_step(env, i, f"<sql>{_fresh(s.gold_sql, k)}</sql>" if fresh else action))
            r, st = statistics.median(raw_t), statistics.median(step_t)
            raw_all.append(r)
            step_all.append(st)
            ratios.append(st / max(r, 1e-9))
            over.append(st - r)
        env.close()
        rows.append((name, target, statistics.median(raw_all), statistics.median(step_all), statistics.median(ratios),
                     sum(step_all) / sum(raw_all), statistics.median(over)))
    print(f"n = {len(samples)} Spider dev golds, {args.reps} interleaved repetitions each, gold cached, "
          f"{args.clock} clock")
    print(f"{'step mode':40s} {'raw med ms':>10s} {'step med ms':>11s} {'median ratio':>12s} {'target':>7s} "
          f"{'met':>4s} {'total ratio':>11s} {'overhead us':>11s}")
    for name, target, r, st, ratio, tot, ov in rows:
        t = f"<= {target:g}" if target is not None else "-"
        met = "-" if target is None else ("yes" if ratio <= target else "no")
        print(f"{name:40s} {r * 1e3:10.3f} {st * 1e3:11.3f} {ratio:12.2f} {t:>7s} {met:>4s} {tot:11.2f} {ov * 1e6:11.1f}")


if __name__ == "__main__":
    main()
