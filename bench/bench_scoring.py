"""Benchmark: throughput of the scorers (relaxed EX, cells, components) against a naive multiset check.

Over Spider dev golds, two sets of (prediction, gold) pairs:

* ``gold=gold``: each gold SQL scored against itself;
* ``mutated``: each gold against one cheap mutation of itself, by rotation: ``drop_row`` (the gold
  wrapped in ``LIMIT n-1``), ``literal`` (the first literal of a WHERE/HAVING changed: number + 1,
  text + ``'x'``), ``swap`` (the first two output columns swapped); the next applicable one is taken
  when one does not apply.

Every query is executed once, before any timing, through :class:`textsql_clarify.sql.sandbox.SQLiteSandbox`.
Only the scoring is timed, five scorers side by side in one run, interleaved pass by pass:

* ``naive``: ``Counter(pred.rows) == Counter(gold.rows)``, the yardstick;
* ``EX``: :func:`textsql_clarify.rewards.execution.compare_results` (the ordered flag precomputed per gold);
* ``EX+score_cells``: EX plus :func:`score_cells` alone, the prediction's origins precomputed;
* ``EX+cells``: EX plus :func:`column_origins` of the prediction (sqlglot parse + qualify) and
  :func:`score_cells` (the gold's ``ResultTable`` with origins is built once per sample, as the env caches it);
* ``EX+cells+components``: plus :func:`textsql_clarify.rewards.components.score_components`.

Each row gives pairs per second (median over ``--reps`` passes) and the slowdown against ``naive``
measured in the same run. A last section times one 10,000-row x 20-column result (the target:
well under a second).

    python bench/bench_scoring.py [--spider ../shared/data/spider_dev] [--limit 1034] [--reps 5]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlglot import exp  # noqa: E402

from textsql_clarify.sql.sandbox import SQLiteSandbox  # noqa: E402
from textsql_clarify.errors import SQLParseError  # noqa: E402
from textsql_clarify.rewards.cells import ResultTable, column_origins, score_cells  # noqa: E402
from textsql_clarify.rewards.components import score_components  # noqa: E402
from textsql_clarify.rewards.execution import compare_results, gold_is_ordered  # noqa: E402
from textsql_clarify.sql.schema import DIALECT, parse_sql  # noqa: E402

MUTATIONS = ("drop_row", "literal", "swap")


def _mutate(kind: str, gold_sql: str, n_rows: int) -> str | None:
    """One cheap mutation of ``gold_sql``, or ``None`` when ``kind`` does not apply."""
    if kind == "drop_row":
        return f"SELECT * FROM ({gold_sql.strip().rstrip(';')}) LIMIT {n_rows - 1}" if n_rows >= 1 else None
    try:
        tree = parse_sql(gold_sql)
    except SQLParseError:
        return None
    if kind == "literal":
        for clause in (*tree.find_all(exp.Where), *tree.find_all(exp.Having)):
            lit = clause.find(exp.Literal)
            if lit is None:
                continue
            if lit.is_string:
                lit.replace(exp.Literal.string(lit.this + "x"))
            else:
                try:
                    lit.replace(exp.Literal.number(float(lit.this) + 1))
                except ValueError:
                    continue
            return tree.sql(dialect=DIALECT)
        return None
    if kind == "swap":
        if not isinstance(tree, exp.Select) or len(tree.expressions) < 2:
            return None
        first, second = tree.expressions[0].copy(), tree.expressions[1].copy()
        tree.expressions[0].replace(second)
        tree.expressions[1].replace(first)
        return tree.sql(dialect=DIALECT)
    raise ValueError(f"unknown mutation {kind!r}")


def _origins(sql: str, schema) -> tuple | None:
    try:
        return column_origins(sql, schema)
    except SQLParseError:
        return None


def _load(spider: Path, limit: int):
    """Execute every gold and mutation once. Returns (cases, skipped counts)."""
    dev = json.loads((spider / "dev.json").read_text())[:limit]
    boxes: dict[str, SQLiteSandbox] = {}
    cases = []
    skipped = Counter()
    for i, ex in enumerate(dev):
        db = ex["db_id"]
        if db not in boxes:
            boxes[db] = SQLiteSandbox(spider / "database" / db / f"{db}.sqlite")
        box = boxes[db]
        gold_sql = ex["query"]
        gold = box.execute(gold_sql)
        if not gold.ok:
            skipped["gold fails"] += 1
            continue
        schema = box.schema
        origins = _origins(gold_sql, schema)
        ref = ResultTable(gold.columns, gold.rows,
                          origins if origins is not None and len(origins) == len(gold.columns) else None)
        base = dict(gold_sql=gold_sql, gold=gold, ref=ref, ordered=gold_is_ordered(gold_sql), schema=schema)
        # executed a second time, so the prediction's rows are new objects, as in a real episode
        cases.append(dict(base, set="gold=gold", kind="identity", pred_sql=gold_sql, pred=box.execute(gold_sql),
                          pred_origins=ref.origins))
        for k in range(len(MUTATIONS)):
            kind = MUTATIONS[(i + k) % len(MUTATIONS)]
            pred_sql = _mutate(kind, gold_sql, gold.row_count)
            if pred_sql is None:
                continue
            pred = box.execute(pred_sql)
            if pred.ok:
                cases.append(dict(base, set="mutated", kind=kind, pred_sql=pred_sql, pred=pred,
                                  pred_origins=_origins(pred_sql, schema)))
                break
        else:
            skipped["no applicable mutation"] += 1
    for box in boxes.values():
        box.close()
    return cases, skipped


def _naive(c) -> None:
    Counter(c["pred"].rows) == Counter(c["gold"].rows)  # noqa: B015 (the comparison is the work)


def _ex(c):
    return compare_results(c["pred"], c["gold"], ordered=c["ordered"])


def _table(result, origins) -> ResultTable:
    if origins is not None and len(origins) != len(result.columns):
        origins = None
    return ResultTable(result.columns, result.rows, origins)


def _cells(c):
    return score_cells(_table(c["pred"], _origins(c["pred_sql"], c["schema"])), c["ref"])


def _cells_only(c):
    return score_cells(_table(c["pred"], c["pred_origins"]), c["ref"])


def _components(c):
    try:
        return score_components(c["pred_sql"], c["gold_sql"], c["schema"])
    except SQLParseError:
        return None


SCORERS = {
    "naive": (_naive,),
    "EX": (_ex,),
    "EX+score_cells": (_ex, _cells_only),
    "EX+cells": (_ex, _cells),
    "EX+cells+components": (_ex, _cells, _components),
}


def _pass(cases, funcs) -> float:
    t0 = time.perf_counter()
    for c in cases:
        for f in funcs:
            f(c)
    return time.perf_counter() - t0


def _large(reps: int) -> tuple[float, float]:
    """Median seconds to score one 10,000 x 20 result with score_cells, and with the naive check."""
    rng = random.Random(0)
    rows = [tuple([i] + [rng.randrange(50) for _ in range(17)] + [rng.random(), f"s{rng.randrange(999)}"])
            for i in range(10_000)]
    cand = list(rows)
    rng.shuffle(cand)
    cand = cand[:-10] + [r[:4] + (-1,) + r[5:] for r in cand[-10:]]
    names = tuple(f"c{j}" for j in range(20))
    origins = tuple(f"t.c{j}" for j in range(20))
    c_t, r_t = ResultTable(names, cand, origins), ResultTable(names, rows, origins)
    cells_s, naive_s = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        score_cells(c_t, r_t)
        cells_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        Counter(cand) == Counter(rows)  # noqa: B015
        naive_s.append(time.perf_counter() - t0)
    return statistics.median(cells_s), statistics.median(naive_s)


def _mean(values) -> str:
    vals = [v for v in values if v is not None]
    return f"{sum(vals) / len(vals):.3f} (n={len(vals)})" if vals else "undefined (n=0)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"),
                    help="folder with dev.json and database/<db_id>/<db_id>.sqlite")
    ap.add_argument("--limit", type=int, default=1034, help="first N dev questions")
    ap.add_argument("--reps", type=int, default=5, help="timed passes per scorer (median reported)")
    args = ap.parse_args()
    spider = Path(args.spider)
    if not (spider / "dev.json").is_file():
        sys.exit(f"Spider dev not found: {spider / 'dev.json'}")

    t0 = time.perf_counter()
    cases, skipped = _load(spider, args.limit)
    print(f"pre-executed {len(cases)} pairs in {time.perf_counter() - t0:.1f} s"
          f"{'; skipped: ' + dict(skipped).__repr__() if skipped else ''}")
    sets = {name: [c for c in cases if c["set"] == name] for name in ("gold=gold", "mutated")}
    for c in cases:  # warm-up: imports, lru caches of gold_is_ordered etc. (same for every scorer)
        for f in SCORERS["EX+cells+components"]:
            f(c)

    times = {(s, name): [] for s in sets for name in SCORERS}
    for _ in range(args.reps):
        for s, subset in sets.items():
            for name, funcs in SCORERS.items():
                times[(s, name)].append(_pass(subset, funcs))

    print(f"\n{'pairs':<10} {'scorer':<22} {'n':>5} {'pairs/s':>10} {'us/pair':>9} {'x naive':>8}")
    for s, subset in sets.items():
        naive = statistics.median(times[(s, "naive")])
        for name in SCORERS:
            t = statistics.median(times[(s, name)])
            n = len(subset)
            print(f"{s:<10} {name:<22} {n:>5} {n / t:>10.0f} {1e6 * t / n:>9.1f} {t / naive:>8.1f}")

    print("\nmutated pairs by kind (means over defined values, each with its n):")
    by_kind: dict[str, list] = {}
    for c in sets["mutated"]:
        by_kind.setdefault(c["kind"], []).append(c)
    for kind, cs in sorted(by_kind.items()):
        ex = [_ex(c).score for c in cs]
        sc = [_cells(c) for c in cs]
        print(f"  {kind:<9} n={len(cs):<4} EX {_mean(ex)}  cell P {_mean(s.cell_precision for s in sc)}  "
              f"cell R {_mean(s.cell_recall for s in sc)}  column P {_mean(s.column_precision for s in sc)}")
    incons = sum(_cells(c).scorer_inconsistent for c in cases)
    print(f"  scorer_inconsistent flags: {incons} of {len(cases)} pairs")

    cells_s, naive_s = _large(args.reps)
    print(f"\n10,000 rows x 20 columns: score_cells {cells_s * 1e3:.0f} ms, naive Counter {naive_s * 1e3:.1f} ms "
          f"(x{cells_s / naive_s:.0f})")


if __name__ == "__main__":
    main()
