"""Agreement of Spider's exact-set-match (EM) with relaxed EX and EX_strict on Spider dev golds and
perturbations of them.

Each kind below rewrites every gold it applies to with sqlglot (SQLite dialect); the rewrites are scored with
:func:`textsql_clarify.baselines.predictions.score_predictions`, the scorer ``textsql-clarify score`` uses (one
SQL episode per prediction through the env, EM from :mod:`textsql_clarify.rewards.exact_match`):

* ``gold``: the gold itself;
* ``alias_rename``: every table alias renamed (``T1`` -> ``a1``, ...), qualifiers with it;
* ``select_reorder``: the select list reversed (queries with two items or more, no set operation);
* ``where_reorder``: the two sides of the top AND of WHERE swapped;
* ``value_change``: the first literal of WHERE / HAVING changed (a number + 1, a text + ``'x'``);
* ``agg_change``: the first aggregate of the select list changed (max <-> min, sum <-> avg, count(col) -> max(col));
* ``drop_condition``: one side of the top AND of WHERE dropped, or a lone WHERE condition removed;
* ``order_flip``: the direction of every ORDER BY item reversed;
* ``drop_group``: GROUP BY (and HAVING) removed.

For each kind: how many rewrites, EM's agreement with relaxed EX over the samples where both are defined (EX is
undefined where the gold returns no rows), and every disagreement counted by direction (EM 1 / EX 0 and EM 0 /
EX 1), the same for EX_strict; ``--out FILE`` writes the figures and the disagreeing ids as JSON.

Spider's own evaluation script (and test-suite-sql-eval) is not installable from the package registry; the
side-by-side run against a user-supplied checkout of it is ``bench/bench_official_agreement.py`` (its figures in
``docs/metrics.md`` "Exact-set-match").

With ``--ex-mode suite`` each rewrite is also scored by test-suite EX (K = 8 fuzzed variants of its database,
Zhong et al. 2020), and EM's agreement with EX_suite is printed under each kind.

    python bench/bench_exact_match.py [--spider ../shared/data/spider_dev] [--limit N] [--ex-mode suite] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sqlglot  # noqa: E402
from sqlglot import exp  # noqa: E402

DIALECT = "sqlite"
_AGG_SWAP = {exp.Max: exp.Min, exp.Min: exp.Max, exp.Sum: exp.Avg, exp.Avg: exp.Sum}


def _parse(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read=DIALECT)


def alias_rename(sql: str) -> str | None:
    """Every table alias renamed (``T1`` -> ``a1``), the column qualifiers that name it with it."""
    tree = _parse(sql)
    changed = False
    for sel in tree.find_all(exp.Select):
        names = {}
        for t in sel.find_all(exp.Table):
            if t.alias and t.find_ancestor(exp.Select) is sel:
                new = f"a{len(names) + 1}"
                names[t.alias.lower()] = new
                t.set("alias", exp.TableAlias(this=exp.to_identifier(new)))
        for c in sel.find_all(exp.Column):
            if c.table and c.table.lower() in names and c.find_ancestor(exp.Select) is sel:
                c.set("table", exp.to_identifier(names[c.table.lower()]))
        changed |= bool(names)
    return tree.sql(dialect=DIALECT) if changed else None


def select_reorder(sql: str) -> str | None:
    """The select list reversed (a plain SELECT with two items or more)."""
    tree = _parse(sql)
    if not isinstance(tree, exp.Select) or len(tree.expressions) < 2:
        return None
    tree.set("expressions", list(reversed(tree.expressions)))
    return tree.sql(dialect=DIALECT)


def _top_where(tree: exp.Expression) -> exp.Where | None:
    return tree.args.get("where") if isinstance(tree, exp.Select) else None


def where_reorder(sql: str) -> str | None:
    """The two sides of the top AND of WHERE swapped."""
    tree = _parse(sql)
    w = _top_where(tree)
    if w is None or not isinstance(w.this, exp.And):
        return None
    a = w.this
    w.set("this", exp.And(this=a.expression.copy(), expression=a.this.copy()))
    return tree.sql(dialect=DIALECT)


def value_change(sql: str) -> str | None:
    """The first literal of a WHERE or HAVING changed: a number + 1, a text + ``'x'``."""
    tree = _parse(sql)
    for lit in tree.find_all(exp.Literal):
        if lit.find_ancestor(exp.Where, exp.Having) is None or lit.find_ancestor(exp.Limit) is not None:
            continue
        if lit.is_string:
            lit.replace(exp.Literal.string(lit.this + "x"))
        else:
            try:
                v = float(lit.this)
            except ValueError:
                continue
            lit.replace(exp.Literal.number(int(v) + 1 if v == int(v) else v + 1))
        return tree.sql(dialect=DIALECT)
    return None


def agg_change(sql: str) -> str | None:
    """The first aggregate of the top select list changed (max <-> min, sum <-> avg, count(col) -> max(col))."""
    tree = _parse(sql)
    if not isinstance(tree, exp.Select):
        return None
    for item in tree.expressions:
        for node in item.find_all(exp.AggFunc):
            kind = type(node)
            if kind in _AGG_SWAP:
                node.replace(_AGG_SWAP[kind](this=node.this.copy()))
                return tree.sql(dialect=DIALECT)
            if kind is exp.Count and isinstance(node.this, exp.Column):
                node.replace(exp.Max(this=node.this.copy()))
                return tree.sql(dialect=DIALECT)
    return None


def drop_condition(sql: str) -> str | None:
    """One side (the right) of the top AND of WHERE dropped; a lone condition: WHERE removed."""
    tree = _parse(sql)
    w = _top_where(tree)
    if w is None:
        return None
    if isinstance(w.this, exp.And):
        w.set("this", w.this.this.copy())
    elif isinstance(w.this, exp.Or):
        return None
    else:
        tree.set("where", None)
    return tree.sql(dialect=DIALECT)


def order_flip(sql: str) -> str | None:
    """Every ORDER BY item's direction reversed."""
    tree = _parse(sql)
    order = tree.args.get("order")
    if order is None:
        return None
    for o in order.expressions:
        o.set("desc", not o.args.get("desc"))
    return tree.sql(dialect=DIALECT)


def drop_group(sql: str) -> str | None:
    """GROUP BY and HAVING of the top SELECT removed."""
    tree = _parse(sql)
    if not isinstance(tree, exp.Select) or tree.args.get("group") is None:
        return None
    tree.set("group", None)
    tree.set("having", None)
    return tree.sql(dialect=DIALECT)


KINDS: dict[str, Callable[[str], str | None]] = {
    "gold": lambda s: s, "alias_rename": alias_rename, "select_reorder": select_reorder,
    "where_reorder": where_reorder, "value_change": value_change, "agg_change": agg_change,
    "drop_condition": drop_condition, "order_flip": order_flip, "drop_group": drop_group,
}


def agreement(trajs: list, metrics: dict, verdict_of: dict, ex_key: str) -> dict:
    """Counts of (EM, EX) over the samples where both are defined, and the disagreeing ids."""
    both = em1_ex0 = em0_ex1 = agree = 0
    ids = {"em1_ex0": [], "em0_ex1": []}
    for t in trajs:
        ex = t.scores.get(ex_key)
        em = verdict_of.get(t.sample_id)
        if ex is None or em is None:
            continue
        both += 1
        if bool(em) == bool(ex):
            agree += 1
        elif em:
            em1_ex0 += 1
            ids["em1_ex0"].append(t.sample_id)
        else:
            em0_ex1 += 1
            ids["em0_ex1"].append(t.sample_id)
    return {"n": both, "agree": agree, "rate": agree / both if both else None, "em1_ex0": em1_ex0,
            "em0_ex1": em0_ex1, "ids": ids}


def main() -> int:
    from textsql_clarify.baselines.predictions import _em_values, score_predictions
    from textsql_clarify.datasets import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("--ex-mode", default="single", choices=["single", "suite"],
                    help="'suite': also EM's agreement with test-suite EX (K = 8 variants, built once and cached)")
    args = ap.parse_args()
    env = {"ex_mode": "suite"} if args.ex_mode == "suite" else {}
    samples = load_dataset(f"spider:{args.spider}", limit=args.limit)
    report = {"n_samples": len(samples), "kinds": {}}
    print(f"{'kind':<15} {'rewrites':>8} {'EM':>6} {'EX':>6} {'n(EM,EX)':>8} {'agree':>6} "
          f"{'EM1/EX0':>7} {'EM0/EX1':>7} {'agree_s':>7} {'EM1/EXs0':>8} {'EM0/EXs1':>8}")
    for kind, rewrite in KINDS.items():
        preds, used = {}, []
        for s in samples:
            try:
                new = rewrite(s.gold_sql)
            except sqlglot.errors.SqlglotError:
                new = None
            if new is not None:
                preds[s.id] = new
                used.append(s)
        if not used:  # a --limit too small for this kind
            print(f"{kind:<15} {0:>8}")
            continue
        trajs, metrics = score_predictions(used, preds, progress=False, **env)
        verdicts, _ = _em_values(used, preds)
        em = {sid: (None if v is None else v.match) for sid, v in verdicts.items()}
        relaxed = agreement(trajs, metrics, em, "ex")
        strict = agreement(trajs, metrics, em, "ex_strict")
        suite = agreement(trajs, metrics, em, "ex_suite") if env else None
        report["kinds"][kind] = {"rewrites": len(used), "EM": metrics["overall"]["EM"], "EX": metrics["overall"]["EX"],
                                 "EX_strict": metrics["overall"]["EX_strict"], "vs_EX": relaxed, "vs_EX_strict": strict,
                                 **({"EX_suite": metrics["overall"]["EX_suite"], "vs_EX_suite": suite} if env else {}),
                                 "components": {c: v["value"] for c, v in metrics["exact_match"]["components"].items()}}
        f = lambda c: "—" if c["value"] is None else f"{c['value']:.3f}"  # noqa: E731
        print(f"{kind:<15} {len(used):>8} {f(metrics['overall']['EM']):>6} {f(metrics['overall']['EX']):>6} "
              f"{relaxed['n']:>8} {relaxed['agree']:>6} {relaxed['em1_ex0']:>7} {relaxed['em0_ex1']:>7} "
              f"{strict['agree']:>7} {strict['em1_ex0']:>8} {strict['em0_ex1']:>8}")
        if suite is not None:
            print(f"{'':<15} EX_suite {metrics['overall']['EX_suite']['value']:.3f}: agree {suite['agree']}/{suite['n']}, "
                  f"EM 1 / EX_suite 0: {suite['em1_ex0']}, EM 0 / EX_suite 1: {suite['em0_ex1']}")
    total = {k: sum(r["vs_EX"][k] for r in report["kinds"].values()) for k in ("n", "agree", "em1_ex0", "em0_ex1")}
    print(f"all kinds: agreement with relaxed EX {total['agree']}/{total['n']} = {total['agree'] / total['n']:.3f}; "
          f"EM 1 / EX 0: {total['em1_ex0']}, EM 0 / EX 1: {total['em0_ex1']}")
    report["total_vs_EX"] = total
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
