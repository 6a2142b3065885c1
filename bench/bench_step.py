"""Benchmark: cost of ``env.step(<sql>)`` relative to a raw sqlite3 execute + fetchall of the same SQL.

Over Spider dev gold queries used as predictions, both are timed side by side in one run, per query,
interleaved (raw, step, raw, step ...), several repetitions each; the gold result is already cached
(a warm-up step per sample), as in RL where a sample is visited many times. Prints the median of the
per-query ratios step/raw next to its target (``docs/platform.md`` "Step cost"):

- EX only (``binary`` preset, ``detailed_scores=False``): median ratio <= 1.5;
- with the article's detailed scores (cells, columns, components, retrieval; the default): <= 10.

The EX-only rows: the gold text itself (repeated, every cache answers); a new string per step for the same query
(a comment after the first word: the gold's result, so the constant-column rule must read the prediction's SQL);
a new string with another result (a changed WHERE value or a dropped condition, ``bench_exact_match.py``'s
rewrites: judged without reading the SQL where no column selection can match); the gold with extra spaces (a
new string that the whitespace-normalised projection cache serves); and one text per sample stepped through the
set in order twice, the second pass timed (a cache smaller than the set would miss every time). Their target is
3x. The detailed rows repeat one prediction text per sample, as GRPO repeats a completion within a group and
across epochs, so the kept analysis of :func:`textsql_clarify.sql.schema.shared_analysis` answers after the
warm-up; a second times a text no earlier step saw, a third the in-order second epoch. The last column is the
median fixed overhead per step (step minus raw, microseconds): Spider dev queries take ~10-50 us raw, so the
EX-only ratio is dominated by that fixed cost (action parsing, the sandbox's authorizer and progress handler, EX
comparison, observation and info building).

    python bench/bench_step.py [--spider ../shared/data/spider_dev] [--limit N] [--reps 5] [--clock wall|cpu] [--only WORD ...]
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
sys.path.insert(0, str(REPO / "bench"))

from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.env import TextSQLClarifyEnv  # noqa: E402

#: (row name, detailed scores, prediction text, target median ratio or None); the text: ``same`` (the gold, every
#: step), ``novel`` (the gold with a comment no earlier step had: a new string, the gold's result), ``wrong`` (a
#: changed WHERE value or a dropped condition, new string each step: a result that differs), ``ws`` (the gold with
#: extra spaces: a new string that only whitespace tells from the gold), ``epoch`` (one text per sample, stepped
#: through the dataset in order twice; the second pass is timed)
MODES = (
    ("EX only (binary, detailed_scores=False)", False, "same", 1.5),
    ("  EX only, novel text, the gold's result", False, "novel", 3.0),
    ("  EX only, novel text, a wrong result", False, "wrong", 3.0),
    ("  EX only, whitespace respelling", False, "ws", 3.0),
    ("  EX only, in order, second epoch", False, "epoch", 3.0),
    ("EX + cells + components + retrieval", True, "same", 10.0),
    ("  the same, novel prediction text", True, "novel", 10.0),
    ("  the same, in order, second epoch", True, "epoch", 10.0),
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


def _novel(sql: str, k: int) -> str:
    """A new string for the same query: a comment no other step has, after the first word."""
    head, _, rest = sql.partition(" ")
    return f"{head} /* {k} */ {rest}"


def _wrong(sql: str) -> str | None:
    """The gold with its first WHERE / HAVING value changed, else a WHERE condition dropped (bench_exact_match)."""
    import bench_exact_match as bem
    for rewrite in (bem.value_change, bem.drop_condition):
        try:
            new = rewrite(sql)
        except Exception:  # noqa: BLE001 - sqlglot cannot rewrite it: try the next
            new = None
        if new is not None:
            return new
    return None


def _text(kind: str, sql: str, k: int) -> str:
    return {"same": lambda: sql, "novel": lambda: _novel(sql, k), "ws": lambda: _fresh(sql, k),
            "wrong": lambda: _novel(sql, k)}[kind]()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=None, help="first N samples (default: all 1,034)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall (default) or cpu: this thread's CPU time, for a loaded machine")
    ap.add_argument("--only", nargs="*", default=None, help="run only the rows whose name holds one of these words")
    args = ap.parse_args()
    global _clock
    _clock = CLOCKS[args.clock]
    samples = load_dataset(f"spider:{args.spider}", limit=args.limit)
    cons: dict[str, sqlite3.Connection] = {}
    rows = []
    for name, detailed, kind, target in MODES:
        if args.only and not any(w in name for w in args.only):
            continue
        env = TextSQLClarifyEnv(samples=samples, detailed_scores=detailed, reward_preset="binary")
        ratios, raw_all, step_all, over = [], [], [], []
        k = 0
        if kind == "epoch":  # one text per sample (not the gold's own), the whole set in order, twice
            texts = [_novel(s.gold_sql, -1 - i) for i, s in enumerate(samples)]
            for i in range(len(samples)):
                _step(env, i, f"<sql>{texts[i]}</sql>")
        for i, s in enumerate(samples):
            con = cons.setdefault(s.db_path, sqlite3.connect(Path(s.db_path).resolve().as_uri() + "?mode=ro", uri=True))
            base = s.gold_sql
            if kind == "wrong":
                base = _wrong(s.gold_sql)
                if base is None:
                    continue
            if kind == "epoch":
                raw_t = [_raw(con, s.gold_sql)]
                step_t = [_step(env, i, f"<sql>{texts[i]}</sql>")]
            else:
                _step(env, i, f"<sql>{s.gold_sql}</sql>")  # warm-up: gold result and gold-side analysis cached
                raw_t, step_t = [], []
                for _ in range(args.reps):
                    raw_t.append(_raw(con, base))
                    k += 1
                    step_t.append(_step(env, i, f"<sql>{_text(kind, base, k)}</sql>"))
            r, st = statistics.median(raw_t), statistics.median(step_t)
            raw_all.append(r)
            step_all.append(st)
            ratios.append(st / max(r, 1e-9))
            over.append(st - r)
        env.close()
        rows.append((name, target, len(step_all), statistics.median(raw_all), statistics.median(step_all),
                     statistics.median(ratios), sum(step_all) / sum(raw_all), statistics.median(over)))
    print(f"{len(samples)} Spider dev samples, {args.reps} interleaved repetitions each (epoch rows: one timed step "
          f"per sample in the second pass), gold cached, {args.clock} clock")
    print(f"{'step mode':42s} {'n':>5s} {'raw med ms':>10s} {'step med ms':>11s} {'median ratio':>12s} {'target':>7s} "
          f"{'met':>4s} {'total ratio':>11s} {'overhead us':>11s}")
    for name, target, n, r, st, ratio, tot, ov in rows:
        t = f"<= {target:g}" if target is not None else "-"
        met = "-" if target is None else ("yes" if ratio <= target else "no")
        print(f"{name:42s} {n:5d} {r * 1e3:10.3f} {st * 1e3:11.3f} {ratio:12.2f} {t:>7s} {met:>4s} {tot:11.2f} "
              f"{ov * 1e6:11.1f}")


if __name__ == "__main__":
    main()
