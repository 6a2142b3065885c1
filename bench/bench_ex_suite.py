"""Test-suite EX on Spider dev, AmbiQT and MMSQL: residuals, oracle, cost, variant build, distinguishability.

Prints, in one run (ratios measured side by side, never timed tests):

1. the variant build for the 20 Spider dev databases (K variants each, literals of the golds over each database
   planted): seconds and bytes on disk;
2. the answer-prior residuals on Spider dev's scorable golds (the gold returns data on the original): the mean EX
   of the red team's constant policies (``data_zero``, ``data_zero_three``; ``bench/red_team.py``) and of the
   table-count heuristics (``count_mentioned``, ``table_counts_4``), single-instance and under test-suite EX
   for K = 1, 2, 4, 8, ..., with the constant rule on (the env's default) and off (``constant_columns=False``:
   what test-suite EX removes by itself), plus ``data_zero_filter``, a 0 spelled as a filter true of no row
   (``count(*) ... WHERE <text column> = 'no such value'``), which no syntactic rule can call constant;
3. the oracle (gold against itself): suite EX on every scorable gold, and how many variants each gold skips;
4. the cost of one suite EX against one single-instance EX, for matching predictions (the worst case: all K + 1
   databases run) and for the mix of a constant policy (most stop on the original);
5. distinguishability: of the ambiguous samples flagged ``indistinguishable`` at load time, how many still are
   when the readings run on the variants too, and why (AmbiQT; MMSQL has one reading per sample).

Usage::

    .venv/bin/python bench/bench_ex_suite.py [--k-max 16] [--k 8] [--cache DIR] [--no-ambiqt]

``--cache`` defaults to a fresh temporary folder, so the build is measured from nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from textsql_clarify.redteam import policies as hacks  # noqa: E402
from textsql_clarify.envs import render  # noqa: E402
from textsql_clarify.rewards.execution import EXOptions, relaxed_ex  # noqa: E402
from textsql_clarify.rewards.ex_suite import VariantSuite, reading_differences  # noqa: E402
from textsql_clarify.sql.sandbox import get_sandbox  # noqa: E402
from textsql_clarify.sql.schema import read_schema  # noqa: E402
from textsql_clarify.sql.variants import DEFAULT_K, build_variants, literals_for_golds  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SPIDER = DATA / "spider_dev"


def _dir_bytes(paths) -> int:
    return sum(Path(p).stat().st_size for p in paths)


def _zero_filter_sql(db: Path) -> str:
    """``SELECT count(*) FROM t WHERE c = 'no such value'`` for the first table with a text column."""
    for t, cols in read_schema(str(db)).items():
        for c, typ in cols.items():
            if "char" in typ or "text" in typ or typ == "":
                return f'SELECT count(*) FROM "{t}" WHERE "{c}" = \'zz-no-such-value\''
    t = next(iter(read_schema(str(db))))
    return f'SELECT count(*) FROM "{t}" WHERE rowid < 0'


def spider(k_max: int, k_default: int, cache: Path) -> None:
    dev = json.loads((SPIDER / "dev.json").read_text(encoding="utf-8"))
    by_db: dict[str, list[dict]] = defaultdict(list)
    for d in dev:
        by_db[d["db_id"]].append(d)
    print(f"Spider dev: {len(dev)} golds over {len(by_db)} databases")

    # 1. build
    t0 = time.perf_counter()
    variants: dict[str, list[Path]] = {}
    for db_id, items in by_db.items():
        db = SPIDER / "database" / db_id / f"{db_id}.sqlite"
        variants[db_id] = build_variants(db, k=k_max, literals=literals_for_golds([d["query"] for d in items], db),
                                         cache_dir=cache)
    build_s = time.perf_counter() - t0
    nbytes = sum(_dir_bytes(v) for v in variants.values())
    src_bytes = sum((SPIDER / "database" / d / f"{d}.sqlite").stat().st_size for d in by_db)
    print(f"build: {len(by_db)} databases x {k_max} variants in {build_s:.1f} s ({build_s / len(by_db):.2f} s per "
          f"database); {nbytes / 2**20:.1f} MiB on disk (sources {src_bytes / 2**20:.1f} MiB); "
          f"K={k_default}: about {nbytes * k_default / k_max / 2**20:.1f} MiB")
    t0 = time.perf_counter()
    for db_id, items in by_db.items():
        db = SPIDER / "database" / db_id / f"{db_id}.sqlite"
        build_variants(db, k=k_max, literals=literals_for_golds([d["query"] for d in items], db), cache_dir=cache)
    print(f"second build call (cache hit): {time.perf_counter() - t0:.2f} s for all 20")

    policies = {
        "data_zero": lambda obs, db: hacks.DataZero().sql(obs),
        "data_zero_three": lambda obs, db: hacks.DataZeroThree().sql(obs),
        "data_three": lambda obs, db: "SELECT count(*)*0+3 FROM sqlite_master",
        "data_zero_filter": lambda obs, db: _zero_filter_sql(db),
        "count_mentioned": lambda obs, db: hacks.CountMentioned().sql(obs),
        "table_counts_4": lambda obs, db: hacks.TableCountsCapped().sql(obs),
    }
    ks = [k for k in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32) if k <= k_max]
    option_sets = {"constant rule on (default)": EXOptions(), "constant rule off": EXOptions(constant_columns=False)}
    # 2. residuals
    scorable = 0
    oracle_ok = oracle_n = 0
    skipped_hist: Counter = Counter()
    gold_empty_on_variants = 0
    single: dict[tuple[str, str], int] = Counter()
    fails: dict[tuple[str, str], list] = defaultdict(list)  # first failing variant of each original match
    same_query_hits: Counter = Counter()
    cost_single = cost_suite = 0.0
    cost_pol_single = cost_pol_suite = 0.0
    for db_id, items in by_db.items():
        db = SPIDER / "database" / db_id / f"{db_id}.sqlite"
        suite = VariantSuite(db, variants[db_id])
        suite_k = VariantSuite(db, variants[db_id][:k_default])
        schema = render.schema_text(str(db))
        for idx, d in enumerate(items):
            gold = d["query"]
            key = f"{db_id}-{idx}"
            o = suite.verdict(gold, gold, gold_key=key, stop_early=False)
            if o.score is None:
                continue
            scorable += 1
            oracle_n += 1
            oracle_ok += o.score == 1.0
            skipped_hist[o.skipped] += 1
            for vsb in suite.variants:
                g = vsb.execute_gold(key, gold)
                if g.ok and not g.truncated and (not g.rows or all(c is None for r in g.rows for c in r)):
                    gold_empty_on_variants += 1
            obs = {"schema": schema, "question": d["question"]}
            for pname, make in policies.items():
                sql = make(obs, db)
                for oname, opts in option_sets.items():
                    v = suite.verdict(sql, gold, gold_key=key, options=opts)
                    if v.single_instance_ok:
                        single[(pname, oname)] += 1
                        fails[(pname, oname)].append(v.failed_on)
                        if v.ok and oname.startswith("constant rule on") and pname.startswith("count"):
                            same_query_hits[pname] += " ".join(sql.lower().replace('"', "").split()) == \
                                " ".join(gold.lower().replace('"', "").rstrip(";").split())
            # 4. cost, side by side: single-instance EX and suite EX at the default K, matching prediction
            sb = suite_k.original
            pol = policies["count_mentioned"](obs, db)
            for warm in (gold, pol):  # the SQL-text caches of the scorer, so that neither side pays them alone
                relaxed_ex(warm, gold, sb, gold_key=key)
                suite_k.verdict(warm, gold, gold_key=key)
            t = time.perf_counter()
            relaxed_ex(gold, gold, sb, gold_key=key)
            cost_single += time.perf_counter() - t
            t = time.perf_counter()
            suite_k.verdict(gold, gold, gold_key=key)
            cost_suite += time.perf_counter() - t
            t = time.perf_counter()
            relaxed_ex(pol, gold, sb, gold_key=key)
            cost_pol_single += time.perf_counter() - t
            t = time.perf_counter()
            suite_k.verdict(pol, gold, gold_key=key)
            cost_pol_suite += time.perf_counter() - t

    print(f"\nscorable golds (the gold returns data on the original): n={scorable}")
    print(f"oracle (gold vs itself) under suite EX, K={k_max}: {oracle_ok}/{oracle_n} = {oracle_ok / oracle_n:.3f}")
    print(f"variants skipped per gold (gold fails/truncated there): "
          + ", ".join(f"{s} skipped: {c}" for s, c in sorted(skipped_hist.items())))
    print(f"gold returns no data on a variant: {gold_empty_on_variants} of {scorable * k_max} (gold, variant) pairs "
          f"({gold_empty_on_variants / (scorable * k_max):.3f})")
    for oname in option_sets:
        print(f"\nanswer-prior residuals (mean EX over n={scorable}), {oname}:")
        print("  policy             single   " + "  ".join(f"K={k:<4d}" for k in ks))
        for pname in policies:
            fl = fails[(pname, oname)]
            row = [sum(1 for f in fl if f is None or f >= k) / scorable for k in ks]
            print(f"  {pname:<18s} {single[(pname, oname)] / scorable:.3f}   "
                  + "  ".join(f"{x:.3f} " for x in row)
                  + f"   (hits: single {single[(pname, oname)]}, K={k_max} {sum(1 for f in fl if f is None)})")
    for pname, n in same_query_hits.items():
        print(f"  {pname}: of its K={k_max} hits, {n} are the gold's own text (a plain count of that table)")
    print(f"\ncost, {scorable} golds, K={k_default} (side by side, same process, gold results cached):")
    print(f"  matching prediction (gold vs itself): single {cost_single * 1e3 / scorable:.2f} ms, "
          f"suite {cost_suite * 1e3 / scorable:.2f} ms per EX: ratio {cost_suite / cost_single:.2f}x")
    print(f"  count_mentioned (mostly no match): single {cost_pol_single * 1e3 / scorable:.2f} ms, "
          f"suite {cost_pol_suite * 1e3 / scorable:.2f} ms per EX: ratio {cost_pol_suite / cost_pol_single:.2f}x")


def _reason(gold: str, other: str, diffs_seen: bool) -> str:
    """Why two readings give the same results on every database, read from their SQL texts."""
    import sqlglot
    from sqlglot import exp

    try:
        a, b = (sqlglot.parse_one(s, read="sqlite") for s in (gold, other))
    except Exception:  # noqa: BLE001
        return "unparsable"

    def norm(t, drop_order=False, drop_distinct=False):
        t = t.copy()
        for al in list(t.find_all(exp.TableAlias)):
            al.pop()
        for c in t.find_all(exp.Column):
            c.set("table", None)
        if drop_order:
            t.set("order", None)
        if drop_distinct:
            for s in t.find_all(exp.Select):
                s.set("distinct", None)
        return t.sql(dialect="sqlite").lower()

    if norm(a) == norm(b):
        return "the same query up to aliases"
    if norm(a, drop_order=True) == norm(b, drop_order=True):
        return "differ in ORDER BY only"
    if norm(a, drop_distinct=True) == norm(b, drop_distinct=True):
        return "differ in DISTINCT only"
    return "different queries, same results on every variant"


def distinguishability(k: int, cache: Path, ambiqt: bool) -> None:
    from textsql_clarify.datasets import load_dataset

    specs = {"MMSQL": f"mmsql:{DATA / 'mmsql' / 'MMSQL_test.json'}:{SPIDER}"}
    if ambiqt:
        specs = {"AmbiQT": f"ambiqt:{DATA / 'ambiqt'}:{SPIDER}", **specs}
    for name, spec in specs.items():
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = load_dataset(spec)
        amb = [s for s in samples if s.group == "ambiguous"]
        flagged = [s for s in amb if "indistinguishable" in s.flags]
        by_db: dict[str, list] = defaultdict(list)
        for s in amb:
            by_db[s.db_path].append(s)
        t0 = time.perf_counter()
        still: Counter = Counter()
        n_still = 0
        for db_path, items in by_db.items():
            golds = [x for s in items for x in [s.gold_sql, *(it.gold_sql for it in s.interpretations)] if x]
            vs = None
            for s in items:
                if "indistinguishable" not in s.flags:
                    continue
                if not s.interpretations:
                    still["one reading only (no interpretation to tell apart)"] += 1
                    n_still += 1
                    continue
                if vs is None:
                    vs = build_variants(db_path, k=k, literals=literals_for_golds(golds, db_path), cache_dir=cache)
                diffs = reading_differences(s, vs)
                same = [it for it, dd in zip(s.interpretations, diffs) if dd is None]
                if same:
                    n_still += 1
                    still[_reason(s.gold_sql, same[0].gold_sql, False)] += 1
        dt = time.perf_counter() - t0
        print(f"\n{name}: {len(amb)} ambiguous samples over {len(by_db)} databases; {len(flagged)} flagged "
              f"indistinguishable at load time ({len(flagged) / max(1, len(amb)):.3f}); after K={k} variants: "
              f"{n_still} still indistinguishable ({n_still / max(1, len(amb)):.3f} of the ambiguous samples) "
              f"[{dt:.1f} s, builds included]")
        for why, c in still.most_common():
            print(f"  {c:4d}  {why}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k-max", type=int, default=16, help="variants built per database (residuals for K <= this)")
    ap.add_argument("--k", type=int, default=DEFAULT_K, help="the K of the cost and distinguishability figures")
    ap.add_argument("--cache", default=None, help="variant cache folder (default: a fresh temporary folder)")
    ap.add_argument("--no-ambiqt", action="store_true", help="skip AmbiQT (its 160 rebuilt databases)")
    args = ap.parse_args(argv)
    if not (SPIDER / "dev.json").is_file():
        print(f"Spider dev not found at {SPIDER}: nothing to measure", file=sys.stderr)
        return 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="ex-suite-") as tmp:
        cache = Path(args.cache) if args.cache else Path(tmp)
        spider(args.k_max, args.k, cache)
        distinguishability(args.k, cache, not args.no_ambiqt)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
