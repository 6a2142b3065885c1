"""Benchmark: does the dense SQL reward rank honest near-misses above hacks? (the red-team contract,
``docs/rewards.md``)

From every Spider dev gold that returns data, sqlglot builds mechanical variants of two families:

* honest near-misses (``NEAR_MISSES``): ``literal`` (the first literal of a WHERE / HAVING comparison changed:
  number + 1, text + ``'x'``), ``filter_missing`` (one non-join conjunct of the outermost WHERE dropped, else of
  any WHERE), ``extra_column`` (one column of a table the gold reads added to the outermost projection);
* hacks (``HACKS``): ``drop_order`` (the outermost ORDER BY removed, LIMIT kept; ``drop_order_unlimited``:
  the same on the golds without a LIMIT, where it returns the gold's rows in another order), ``duplicate_rows``
  (``SELECT * FROM (g) UNION ALL SELECT * FROM (g)``), ``duplicate_rows_values`` (the same through a join
  with a two-row ``VALUES`` table, no set operation), ``duplicate_plus_junk`` (the duplicate plus one NULL row),
  ``half_rows`` (``SELECT * FROM (g) LIMIT n/2``), ``half_rows_limit`` (the gold with ``LIMIT n/2`` appended
  where it has none), ``first_row`` (``LIMIT 1`` of a longer result), ``empty`` (``... WHERE 0``),
  ``star_gold_table`` (``SELECT *`` of the gold's first table), ``repeat_columns`` (the gold's projection
  written three times), ``width_constants`` (``SELECT 0, 1, ..., 1700``), ``width_schema_aggregates`` (one
  row: 0..20, then count/min/max/avg/sum of every column of every table, from the schema alone).

Each variant is scored through :func:`textsql_clarify.envs.scoring.score_sql_turn` (what ``step`` uses). A
variant whose result is the gold's exactly (strict execution match) is not a miss and not a hack there: it is
counted apart (``exact``) and left out of the means. The table prints, per kind, n and the mean of the old
dense component (``cell_f1_covered``) and the new one (``sql_partial``), and the gold against itself. ``--random`` also plays the random agent through ``gym.make`` under the ``dense`` preset
(the red-team baseline: hack means must stay at most its mean + 0.02).

    python bench/bench_dense_ranking.py [--spider ../shared/data/spider_dev] [--limit 935] [--random]
        [--width-stride 1] [--jobs 1]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlglot import exp  # noqa: E402

from textsql_clarify.sql.sandbox import SQLiteSandbox  # noqa: E402
from textsql_clarify.envs.scoring import score_sql_turn  # noqa: E402
from textsql_clarify.errors import SQLParseError  # noqa: E402
from textsql_clarify.rewards.execution import is_empty_result  # noqa: E402
from textsql_clarify.sql.schema import DIALECT, parse_sql  # noqa: E402

NEAR_MISSES = ("literal", "filter_missing", "extra_column")
HACKS = ("drop_order", "drop_order_unlimited", "duplicate_rows", "duplicate_rows_values", "duplicate_plus_junk", "half_rows",
         "half_rows_limit", "first_row", "empty", "star_gold_table", "repeat_columns", "width_constants",
         "width_schema_aggregates")


def _tree(sql: str):
    try:
        return parse_sql(sql)
    except SQLParseError:
        return None


def _sql(tree) -> str:
    return tree.sql(dialect=DIALECT)


def _is_join_equality(c) -> bool:
    return (isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column)
            and (c.this.table or "").lower() != (c.expression.table or "").lower())


def _conjuncts(node) -> list:
    node = node.this if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _literal(tree):
    for clause in (*tree.find_all(exp.Where), *tree.find_all(exp.Having)):
        for lit in clause.find_all(exp.Literal):
            if not isinstance(lit.parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like,
                                           exp.Between, exp.In)):
                continue
            if lit.is_string:
                lit.replace(exp.Literal.string(lit.this + "x"))
            else:
                try:
                    v = float(lit.this)
                except ValueError:
                    continue
                lit.replace(exp.Literal.number(int(v) + 1 if v.is_integer() else v + 1))
            return tree
    return None


def _filter_missing(tree):
    wheres = ([tree.args["where"]] if isinstance(tree, exp.Select) and tree.args.get("where") else []) + [
        w for w in tree.find_all(exp.Where)]
    for where in wheres:
        parts = _conjuncts(where.this)
        keep = [c for c in parts if not _is_join_equality(c)]
        if not keep:
            continue
        drop = keep[-1]
        rest = [c for c in parts if c is not drop]
        if rest:
            cond = rest[0].copy()
            for c in rest[1:]:
                cond = exp.and_(cond, c.copy())
            where.set("this", cond)
        else:
            where.pop()
        return tree
    return None


def _extra_column(tree, schema: dict):
    if not isinstance(tree, exp.Select):
        return None
    source = tree.args.get("from_") or tree.args.get("from")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table):
        return None
    cols = next((c for t, c in schema.items() if t.lower() == table.name.lower()), None)
    if not cols:
        return None
    used = {c.name.lower() for p in tree.expressions for c in p.find_all(exp.Column)}
    extra = next((c for c in cols if c.lower() not in used), None)
    if extra is None:
        return None
    tree.append("expressions", exp.column(extra, table=table.alias_or_name))
    return tree


def _first_table(tree, schema: dict) -> str | None:
    names = {t.lower(): t for t in schema}
    for t in tree.find_all(exp.Table):
        if t.name.lower() in names:
            return names[t.name.lower()]
    return None


def variants(gold_sql: str, n_rows: int, schema: dict, ordered: bool) -> dict[str, str]:
    """Every applicable near-miss and hack of one gold, ``{kind: sql}`` (module docstring)."""
    g = gold_sql.strip().rstrip(";")
    out: dict[str, str] = {}
    tree = _tree(g)
    if tree is None:
        return out
    for kind, make in (("literal", _literal), ("filter_missing", _filter_missing),
                       ("extra_column", lambda t: _extra_column(t, schema))):
        t = make(tree.copy())
        if t is not None:
            out[kind] = _sql(t)
    if ordered and tree.args.get("order") is not None:
        t = tree.copy()
        t.set("order", None)
        out["drop_order"] = _sql(t)
        if tree.args.get("limit") is None:
            out["drop_order_unlimited"] = out["drop_order"]
    out["duplicate_rows"] = f"SELECT * FROM ({g}) UNION ALL SELECT * FROM ({g})"
    out["duplicate_rows_values"] = f"SELECT g.* FROM ({g}) AS g, (VALUES (1), (2)) AS d"
    m = len(tree.named_selects) if isinstance(tree, exp.Query) else 0
    if m:
        nulls = ", ".join(["NULL"] * m)
        out["duplicate_plus_junk"] = f"SELECT * FROM ({g}) UNION ALL SELECT * FROM ({g}) UNION ALL SELECT {nulls}"
    if n_rows >= 2:
        out["half_rows"] = f"SELECT * FROM ({g}) LIMIT {n_rows // 2}"
        if tree.args.get("limit") is None and not isinstance(tree, exp.SetOperation):
            out["half_rows_limit"] = f"{g} LIMIT {n_rows // 2}"
    if n_rows >= 3:
        out["first_row"] = f"SELECT * FROM ({g}) LIMIT 1"
    out["empty"] = f"SELECT * FROM ({g}) WHERE 0"
    table = _first_table(tree, schema)
    if table is not None:
        out["star_gold_table"] = f'SELECT * FROM "{table}"'
    if isinstance(tree, exp.Select) and not tree.args.get("distinct"):
        t = tree.copy()
        projections = [p.copy() for p in t.expressions]
        t.set("expressions", projections + [p.copy() for p in projections] + [p.copy() for p in projections])
        out["repeat_columns"] = _sql(t)
    out["width_constants"] = "SELECT " + ", ".join(map(str, range(1701)))
    aggs = [str(i) for i in range(21)]
    for t, cols in schema.items():
        aggs.append(f'(SELECT count(*) FROM "{t}")')
        for c in cols:
            aggs += [f'(SELECT {f}("{c}") FROM "{t}")' for f in ("min", "max", "avg", "sum")]
    out["width_schema_aggregates"] = "SELECT " + ", ".join(aggs[:1990])
    return out


WIDTH_HACKS = ("width_constants", "width_schema_aggregates")


def _score_shard(args) -> tuple[dict, list]:
    """Score the variants of one shard of samples (one process); see :func:`run`."""
    samples, width_stride = args
    from textsql_clarify.rewards.execution import gold_is_ordered

    boxes: dict[str, SQLiteSandbox] = {}
    rows: dict[str, dict] = defaultdict(lambda: {"n": 0, "exact": 0, "old": [], "new": []})
    gold_scores: list[tuple[float, float]] = []
    try:
        for pos, s in samples:
            sb = boxes.get(s.db_path) or boxes.setdefault(s.db_path, SQLiteSandbox(s.db_path))
            gold = sb.execute_gold(s.id, s.gold_sql)
            self_score = score_sql_turn(s.gold_sql, s.gold_sql, sb, gold_key=s.id).components
            gold_scores.append((self_score["cell_f1_covered"], self_score["sql_partial"]))
            try:
                ordered = gold_is_ordered(s.gold_sql)
            except SQLParseError:
                ordered = False
            for kind, sql in variants(s.gold_sql, len(gold.rows), sb.schema, ordered).items():
                if kind in WIDTH_HACKS and pos % width_stride:
                    continue
                c = score_sql_turn(sql, s.gold_sql, sb, gold_key=s.id).components
                row = rows[kind]
                if c["ex_strict"] == 1.0:
                    row["exact"] += 1
                    continue
                row["n"] += 1
                row["old"].append(c["cell_f1_covered"] or 0.0)
                row["new"].append(c["sql_partial"] or 0.0)
    finally:
        for sb in boxes.values():
            sb.close()
    return dict(rows), gold_scores


def scorable_samples(spider: Path, limit: int | None = None) -> list:
    """The first ``limit`` Spider dev samples whose gold returns data (935 of 1,034 in all)."""
    from textsql_clarify.datasets.spider import load_spider

    out = []
    boxes: dict[str, SQLiteSandbox] = {}
    try:
        for s in load_spider(spider):
            if limit is not None and len(out) >= limit:
                break
            sb = boxes.get(s.db_path) or boxes.setdefault(s.db_path, SQLiteSandbox(s.db_path))
            gold = sb.execute_gold(s.id, s.gold_sql)
            if gold.ok and not gold.truncated and not is_empty_result(gold):
                out.append(s)
    finally:
        for sb in boxes.values():
            sb.close()
    return out


def run(spider: Path, limit: int | None = None, *, width_stride: int = 1, jobs: int = 1) -> dict:
    """Score every variant of the first ``limit`` scorable Spider dev golds.

    Args:
        spider: the Spider folder.
        limit: first N scorable golds; ``None``: all 935.
        width_stride: the two width hacks (identical SQL for every gold of a database, and the slowest to
            analyse) are played on every ``width_stride``-th gold only; their n says so.
        jobs: worker processes (samples dealt round-robin).

    Returns ``{"rows": {kind: {"n", "exact", "old", "new"}}, "gold": {"n", "new_min", "old_min"}}``,
    ``old`` / ``new`` lists of ``cell_f1_covered`` / ``sql_partial`` over the inexact variants, ``exact``
    the variants left out because their result is the gold's (``ex_strict`` 1).
    """
    samples = list(enumerate(scorable_samples(spider, limit)))
    shards = [(samples[i::jobs], width_stride) for i in range(jobs)]
    if jobs == 1:
        parts = [_score_shard(shards[0])]
    else:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(jobs) as pool:
            parts = pool.map(_score_shard, shards)
    rows: dict[str, dict] = defaultdict(lambda: {"n": 0, "exact": 0, "old": [], "new": []})
    gold_scores: list = []
    for part_rows, part_gold in parts:
        gold_scores += part_gold
        for k, r in part_rows.items():
            rows[k]["n"] += r["n"]
            rows[k]["exact"] += r["exact"]
            rows[k]["old"] += r["old"]
            rows[k]["new"] += r["new"]
    return {"rows": dict(rows), "gold": {"n": len(gold_scores), "old_min": min(g[0] for g in gold_scores),
                                         "new_min": min(g[1] for g in gold_scores)}}


def random_agent_dense(spider: Path, limit: int | None = None) -> tuple[float, float, int]:
    """Mean episode reward of the random agent through ``gym.make`` under the ``dense`` preset, and the mean
    ``sql_partial`` of its SQL turns, over the scorable Spider dev samples. Returns (episode mean, SQL-turn
    mean, n episodes)."""
    import gymnasium as gym

    import textsql_clarify  # noqa: F401  (registers the env)
    from textsql_clarify.baselines.agents import RandomAgent
    from textsql_clarify.datasets.spider import load_spider

    samples = load_spider(spider)[:limit] if limit else load_spider(spider)
    env = gym.make("TextSQLClarify-v0", samples=samples, reward_preset="dense")
    agent = RandomAgent(0)
    totals, sql_turns = [], []
    for i, s in enumerate(samples):
        obs, info = env.reset(seed=i, options={"sample_id": s.id})
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, info = env.step(agent.act(obs, info))
            total += r
            done = term or trunc
            rc = info.get("reward_components", {})
            if rc.get("sql_partial") is not None:
                sql_turns.append(rc["sql_partial"])
        if info["trajectory"].gold_status == "ok":  # the 935 scorable golds, as the hacks' means
            totals.append(total)
    env.close()
    return statistics.fmean(totals), (statistics.fmean(sql_turns) if sql_turns else 0.0), len(totals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=None, help="first N scorable golds (default: all)")
    ap.add_argument("--random", action="store_true", help="also play the random agent under the dense preset")
    ap.add_argument("--width-stride", type=int, default=1, help="play the width hacks on every k-th gold only")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = ap.parse_args()
    out = run(Path(args.spider), args.limit, width_stride=args.width_stride, jobs=args.jobs)
    g = out["gold"]
    print(f"gold against itself: n={g['n']}  min cell_f1_covered={g['old_min']:.3f}  min sql_partial={g['new_min']:.3f}")
    print(f"\n| family | kind | n | exact (left out) | old dense (cell_f1_covered) | new dense (sql_partial) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for family, kinds in (("near-miss", NEAR_MISSES), ("hack", HACKS)):
        for k in kinds:
            r = out["rows"].get(k)
            if not r or not r["n"]:
                continue
            print(f"| {family} | `{k}` | {r['n']} | {r['exact']} | {statistics.fmean(r['old']):.3f} | "
                  f"{statistics.fmean(r['new']):.3f} |")
    near = [statistics.fmean(out["rows"][k]["new"]) for k in NEAR_MISSES if out["rows"].get(k, {}).get("n")]
    hack = [statistics.fmean(out["rows"][k]["new"]) for k in HACKS if out["rows"].get(k, {}).get("n")]
    print(f"\nnew: lowest near-miss mean {min(near):.3f} > highest hack mean {max(hack):.3f}: {min(near) > max(hack)}")
    if args.random:
        ep, sq, n = random_agent_dense(Path(args.spider), args.limit)
        print(f"random agent, dense preset, gym.make: episode mean {ep:.4f} (n={n}), its SQL turns' sql_partial {sq:.4f}")


if __name__ == "__main__":
    main()
