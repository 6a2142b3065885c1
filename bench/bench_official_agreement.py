"""Side-by-side agreement of this project's Spider scorers with the official ones, on Spider dev.

The official code is not a package and is never copied here: the user supplies a folder (``--official DIR``)
holding ``evaluation.py``, ``process_sql.py``, ``exec_eval.py`` and ``parse.py`` of a checkout of
test-suite-sql-eval (Zhong, Yu and Klein 2020; its ``process_sql.py`` is Spider's, Yu et al. 2018), with
their imports (``nltk``, ``sqlparse``, ``tqdm``) importable. ``DIR`` goes on ``sys.path`` at run time only.

Predictions: each Spider dev gold against itself and the rewrites of ``bench/bench_exact_match.py``
(``KINDS``: alias_rename, select_reorder, where_reorder, value_change, agg_change, drop_condition,
order_flip, drop_group; imported, not copied). The red-team prediction set (``--red-team-limit N``, default 200;
0 leaves it out) adds to part (b) the first SQL of every SQL-kind reward hack of
:data:`textsql_clarify.redteam.policies.HACKS` (``kind == "sql"``, on the samples it ``applies`` to) on ``N`` Spider
dev samples evenly spaced (``bench/red_team.py``'s ``spread``), each hack's observation built as the red team
builds it: ``gym.make("TextSQLClarify-v0", samples=...)`` reset on the sample, the policy's ``act`` on it.

(a) Exact-set-match: :func:`textsql_clarify.rewards.exact_match.exact_match` against the official
    ``Evaluator.eval_exact_match`` after the pipeline of the official ``evaluate()`` for ``--etype match``
    (``get_sql``, a prediction the official parser rejects scored as the empty query, ``build_valid_col_units``,
    ``rebuild_sql_val``, ``rebuild_sql_col`` with ``build_foreign_key_map_from_json(tables.json)``). A gold the
    official parser raises on is counted apart (no verdict there).
(b) Execution: the official ``exec_eval.eval_exec_match`` (``plug_value=False``; ``keep_distinct`` both ways,
    ``False`` being the official default) against the project's relaxed EX (``ex``) and ``ex_strict`` on the
    Spider database alone, and against test-suite EX (``ex_suite``, K = 8 variants, ``sql/variants.py``) with
    the official function pointed at a folder holding a copy of the original and of the same K variants (it
    runs both queries on every ``.sqlite`` file of the database's folder). The copies are made in ``--work``
    (a fresh temporary folder by default); no database file is written.

Every disagreement is classified (the class is read from the SQL and from re-running the project's scorer
with one option changed) and 1-2 examples of each class are printed; ``--out FILE`` writes all of them as JSON.

    python bench/bench_official_agreement.py --official PATH/TO/test-suite-sql-eval
        [--spider ../shared/data/spider_dev] [--limit N] [--kinds gold,order_flip] [--no-exec] [--no-suite]
        [--work DIR] [--out FILE] [--red-team-limit N] [--red-team-only]
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import re
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_exact_match import KINDS  # noqa: E402
from textsql_clarify.errors import SQLParseError  # noqa: E402
from textsql_clarify.rewards.ex_suite import VariantSuite  # noqa: E402
from textsql_clarify.rewards.exact_match import exact_match, foreign_keys  # noqa: E402
from textsql_clarify.rewards.execution import EXOptions, score_execution  # noqa: E402
from textsql_clarify.sql.schema import read_schema  # noqa: E402
from textsql_clarify.sql.variants import DEFAULT_K, build_variants, literals_for_golds  # noqa: E402

OFFICIAL_FILES = ("evaluation.py", "process_sql.py", "exec_eval.py", "parse.py")
#: The official component names, in the project's spelling (``exact_match.COMPONENTS``).
COMPONENT_NAMES = {"group(no Having)": "group(no having)"}
#: The query the official ``evaluate()`` scores a prediction its parser rejects as.
EMPTY_SQL = {"except": None, "from": {"conds": [], "table_units": []}, "groupBy": [], "having": [],
             "intersect": None, "limit": None, "orderBy": [], "select": [False, []], "union": None, "where": []}
EXAMPLES = 2


def load_official(folder: str) -> SimpleNamespace:
    """Import the official modules from ``folder`` (put on ``sys.path`` here, at run time).

    Returns:
        ``SimpleNamespace(evaluation, process_sql, exec_eval)``.
    Raises:
        SystemExit: ``folder`` lacks one of :data:`OFFICIAL_FILES` (the message names it) or an import fails.
    Source: test-suite-sql-eval (Zhong et al. 2020), ``evaluation.py`` / ``exec_eval.py``; Spider ``process_sql.py``.
    """
    d = Path(folder).expanduser().resolve()
    for name in OFFICIAL_FILES:
        if not (d / name).is_file():
            raise SystemExit(f"--official {folder}: no {name} there (expected a checkout of test-suite-sql-eval "
                             f"holding {', '.join(OFFICIAL_FILES)})")
    sys.path.insert(0, str(d))
    try:
        mods = {m: importlib.import_module(m) for m in ("process_sql", "exec_eval", "evaluation")}
    except ImportError as e:
        raise SystemExit(f"--official {folder}: importing the official code failed: {e} "
                         "(it needs nltk, sqlparse and tqdm)") from e
    return SimpleNamespace(**mods)


_SPELLINGS = ((re.compile(r"\bNOT\s+[\w.]+\s+(IN|LIKE)\b", re.I), "NOT x IN / NOT x LIKE, sqlglot's spelling"),
              (re.compile(r"<>"), "<> for !=, sqlglot's spelling"),
              (re.compile(r"\bON\s+TRUE\b", re.I), "JOIN ... ON TRUE, sqlglot's spelling of a bare JOIN"),
              (re.compile(r"\bNULLS\s+(FIRST|LAST)\b", re.I), "NULLS FIRST / LAST"),
              (re.compile(r"\bAS\s+(\w+)\b.*\bAS\s+\1\b", re.I | re.S),
               "one table alias in two SELECTs: the official aliases are query-wide"))


def _rejected_spelling(sql: str) -> str | bool:
    """The spelling of ``sql`` the official parser is known not to read (the first of :data:`_SPELLINGS`
    found), or ``True`` (another reason)."""
    for pattern, name in _SPELLINGS:
        if pattern.search(sql):
            return name
    return True


def official_em(off: SimpleNamespace, schema, kmap: dict, pred: str, gold: str) -> tuple[bool, dict, bool | str, list]:
    """The official exact-set-match of ``pred`` against ``gold``, as ``evaluate(..., etype='match')`` does.

    Returns:
        ``(match, partial_scores, pred_rejected, gold_table_units)``; ``pred_rejected``: falsy, or the official parser raised
        on the prediction (then scored as :data:`EMPTY_SQL`): the spelling it did not read, or ``True``.
    Raises:
        Exception: whatever the official parser raises on the gold (the caller counts it apart).
    """
    ev, ps = off.evaluation, off.process_sql
    g_sql = ps.get_sql(schema, gold)
    rejected = False
    try:
        p_sql = ps.get_sql(schema, pred)
    except Exception:  # noqa: BLE001 - the official evaluate() catches everything here too
        p_sql, rejected = copy.deepcopy(EMPTY_SQL), _rejected_spelling(pred)
    g_valid = ev.build_valid_col_units(g_sql["from"]["table_units"], schema)
    g_sql = ev.rebuild_sql_col(g_valid, ev.rebuild_sql_val(g_sql), kmap)
    p_valid = ev.build_valid_col_units(p_sql["from"]["table_units"], schema)
    p_sql = ev.rebuild_sql_col(p_valid, ev.rebuild_sql_val(p_sql), kmap)
    evaluator = ev.Evaluator()
    match = bool(evaluator.eval_exact_match(p_sql, g_sql))
    return match, evaluator.partial_scores, rejected, g_sql["from"]["table_units"]


def em_disagreement_kind(ours, partial: dict, rejected: bool | str, gold_tables: list) -> str:
    """Class of an EM disagreement: the official parser rejecting the prediction, or the components whose
    verdicts differ (``FROM`` when all ten agree and only the table units differ; the official
    ``rebuild_sql_val`` / ``rebuild_sql_col`` do not descend into a FROM subquery, so its values count)."""
    if rejected:
        return "official parser rejects the prediction" + (f" ({rejected})" if isinstance(rejected, str) else "")
    if ours.error is not None:
        return "project cannot read the prediction"
    diff = [COMPONENT_NAMES.get(k, k) for k, v in partial.items()
            if (v["f1"] == 1) != ours.components.get(COMPONENT_NAMES.get(k, k))]
    if diff:
        return "components differ: " + ", ".join(diff)
    if any(t[0] == "sql" for t in gold_tables):
        return "FROM table units differ: a FROM subquery, whose values the official compares"
    return "FROM table units differ"


def run_em(off, samples: list[dict], spider: Path, kinds: dict) -> dict:
    """Part (a): EM agreement per kind (see the module docstring)."""
    kmaps = off.evaluation.build_foreign_key_map_from_json(str(spider / "tables.json"))
    facts: dict[str, tuple] = {}
    out: dict = {"kinds": {}, "gold_rejected_by_official": [], "gold_unreadable_by_project": []}
    examples: dict[str, list] = defaultdict(list)
    kind_counts: Counter = Counter()
    for kind, rewrite in kinds.items():
        n = agree = both1 = both0 = 0
        dis: Counter = Counter()
        for s in samples:
            try:
                pred = rewrite(s["query"])
            except Exception:  # noqa: BLE001 - sqlglot cannot rewrite it: not a prediction of this kind
                pred = None
            if pred is None:
                continue
            db = s["db_id"]
            if db not in facts:
                path = str(spider / "database" / db / f"{db}.sqlite")
                facts[db] = (read_schema(path), foreign_keys(path),
                             off.process_sql.Schema(off.process_sql.get_schema(path)))
            schema, keys, off_schema = facts[db]
            try:
                o_match, partial, rejected, g_tables = official_em(off, off_schema, kmaps[db], pred, s["query"])
            except Exception as e:  # noqa: BLE001 - the official parser raised on the gold
                if kind == "gold":
                    out["gold_rejected_by_official"].append({"id": s["id"], "gold": s["query"],
                                                             "error": f"{type(e).__name__}: {e}"})
                continue
            try:
                ours = exact_match(pred, s["query"], schema, keys)
            except SQLParseError as e:
                if kind == "gold":
                    out["gold_unreadable_by_project"].append({"id": s["id"], "error": str(e)})
                continue
            n += 1
            if ours.match == o_match:
                agree += 1
                both1 += o_match
                both0 += not o_match
                continue
            label = ("project 1 / official 0: " if ours.match else "project 0 / official 1: ") + \
                em_disagreement_kind(ours, partial, rejected, g_tables)
            dis[label] += 1
            kind_counts[label] += 1
            if len(examples[label]) < EXAMPLES:
                examples[label].append({"id": s["id"], "kind": kind, "gold": s["query"], "pred": pred})
        out["kinds"][kind] = {"n": n, "agree": agree, "both_1": both1, "both_0": both0, "disagree": dict(dis)}
    out["disagreement_kinds"] = dict(kind_counts)
    out["examples"] = dict(examples)
    return out


_ORDER_BY = re.compile(r"\border\s+by\b", re.I)


def _top_level_order(sql: str) -> bool:
    """Whether the last ``ORDER BY`` of ``sql`` is outside every parenthesis (the top-level one)."""
    m = list(_ORDER_BY.finditer(sql))
    if not m:
        return False
    head = sql[:m[-1].start()]
    return head.count("(") == head.count(")")


def exec_disagreement_kind(ours: float, official: int, pred: str, gold: str, rerun) -> str:
    """Class of an execution disagreement, read from the SQL texts and from re-running the project's
    single-instance comparison with one option changed (``rerun(**EXOptions fields) -> score``)."""
    if ours == 1.0:
        if not _top_level_order(gold) and _ORDER_BY.search(gold):
            return "ORDER BY inside a subquery: official compares rows in order"
        if rerun(strict=True) != 1.0:
            return "extra prediction columns (relaxed EX's column superset)"
        if rerun(limit_ties=False) != 1.0:
            return "ties under ORDER BY ... LIMIT (project's limit_ties)"
        if rerun(round_to_gold_precision=False) != 1.0:
            return "rounding at the gold's ROUND precision"
        return "project 1 / official 0: other"
    if rerun(constant_columns=False) == 1.0:
        return "constant prediction column (project's constant rule)"
    return "project 0 / official 1: other"


def _official_exec(off, db_path: Path, pred: str, gold: str, keep_distinct: bool) -> int | str:
    try:
        return off.exec_eval.eval_exec_match(str(db_path), pred, gold, False, keep_distinct, False)
    except AssertionError:  # the official asserts that the gold runs on every database of the folder
        return "gold_error"


def red_team_predictions(spider: Path, samples: list[dict], n: int) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """The first SQL each SQL-kind hack of ``HACKS`` sends on ``n`` samples of ``samples`` evenly spaced.

    Each sample is reset in one ``gym.make("TextSQLClarify-v0", dataset="spider:<spider>", samples=chosen)`` env
    (the red team's env, ``bench/red_team.py``); every hack with ``kind == "sql"`` that ``applies`` to it gets
    ``begin_episode(None)`` (none of them is privileged) and one ``act`` on that observation; an action that is
    not ``<sql>...</sql>`` is left out.

    Returns:
        ``(chosen samples as the bench's dicts, {hack name: {sample id: SQL}})``.
    Raises:
        SystemExit: a loaded sample's id or gold differs from ``dev.json``'s (the message names the id).
    Source: ``textsql_clarify/redteam/policies.py`` (``HACKS``, ``HackPolicy.act``), ``bench/red_team.py``.
    """
    import gymnasium as gym  # the red team's env, only for this part

    import textsql_clarify
    from red_team import load_corpus, spread
    from textsql_clarify.redteam.policies import HACKS

    spec = f"spider:{spider}"
    chosen = spread(load_corpus(spec), n)
    by_id = {s["id"]: s for s in samples}
    for s in chosen:
        if s.id not in by_id or by_id[s.id]["query"] != s.gold_sql:
            raise SystemExit(f"--spider {spider}: sample {s.id} as loaded does not match dev.json's gold")
    hacks = {name: cls() for name, cls in HACKS.items() if cls().kind == "sql"}
    preds: dict[str, dict[str, str]] = {name: {} for name in hacks}
    env = gym.make(textsql_clarify.ENV_ID, dataset=spec, samples=chosen, reward_preset="binary")
    for i, s in enumerate(chosen):
        obs, info = env.reset(seed=i, options={"index": i})
        for name, pol in hacks.items():
            if not pol.applies(s):
                continue
            pol.begin_episode(None)
            m = re.fullmatch(r"<sql>(.*)</sql>", pol.act(obs, info), re.S)
            if m:
                preds[name][s.id] = m.group(1)
    env.close()
    return [by_id[s.id] for s in chosen], preds


def _prediction(rewrite, s: dict) -> str | None:
    """The prediction of one kind on sample ``s``: ``rewrite(gold)`` (a rewrite of ``KINDS``; ``None`` where
    sqlglot cannot rewrite it), or the entry for ``s``'s id of a table of predictions by sample id."""
    if isinstance(rewrite, dict):
        return rewrite.get(s["id"])
    try:
        return rewrite(s["query"])
    except Exception:  # noqa: BLE001 - sqlglot cannot rewrite it: not a prediction of this kind
        return None


def run_exec(off, samples: list[dict], spider: Path, kinds: dict, work: Path, suite: bool) -> dict:
    """Part (b): execution agreement per kind on the single database and, with ``suite``, on the variants.
    ``kinds``: name -> a rewrite of the gold, or a table of predictions by sample id (:func:`_prediction`)."""
    by_db: dict[str, list[dict]] = defaultdict(list)
    for s in samples:
        by_db[s["db_id"]].append(s)
    folders: dict[str, dict[str, Path]] = {}
    suites: dict[str, VariantSuite] = {}
    for db, items in by_db.items():
        src = spider / "database" / db / f"{db}.sqlite"
        single = work / "single" / db
        single.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, single / f"{db}.sqlite")
        folders[db] = {"single": single / f"{db}.sqlite"}
        variants = build_variants(src, k=DEFAULT_K, literals=literals_for_golds([d["query"] for d in items], src)) \
            if suite else []
        if suite:
            sfold = work / "suite" / db
            sfold.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, sfold / f"{db}.sqlite")
            for v in variants:
                shutil.copyfile(v, sfold / Path(v).name)
            folders[db]["suite"] = sfold / f"{db}.sqlite"
        suites[db] = VariantSuite(src, variants)
    cmp_names = ["ex", "ex_strict"] + (["ex_suite", "ex_suite_strict"] if suite else [])
    out: dict = {"kinds": {}, "comparisons": cmp_names}
    examples: dict[str, list] = defaultdict(list)
    totals: dict = defaultdict(Counter)
    for kind, rewrite in kinds.items():
        rows: dict = defaultdict(Counter)
        for s in samples:
            pred = _prediction(rewrite, s)
            if pred is None:
                continue
            db, gold, key = s["db_id"], s["query"], s["id"]
            vs = suites[db]
            relaxed = vs.verdict(pred, gold, gold_key=key) if suite else None
            strict = vs.verdict(pred, gold, gold_key=key, strict=True) if suite else None
            if suite:
                ours = {"ex": relaxed.original.score, "ex_strict": strict.original.score,
                        "ex_suite": relaxed.score, "ex_suite_strict": strict.score}
                status = relaxed.original.status
            else:
                sb = vs.original
                r, st = score_execution(sb.execute(pred), sb.execute_gold(key, gold), pred, gold, sb, gold_key=key)
                ours, status = {"ex": r.score, "ex_strict": st.score}, r.status

            def rerun(strict: bool = False, **opt) -> float | None:
                sb = vs.original
                v = score_execution(sb.execute(pred), sb.execute_gold(key, gold), pred, gold, sb, gold_key=key,
                                    options=EXOptions(**opt))
                return v[1 if strict else 0].score

            official = {(w, kd): _official_exec(off, folders[db][w], pred, gold, kd)
                        for w in (("single", "suite") if suite else ("single",)) for kd in (False, True)}
            for cname in cmp_names:
                where = "suite" if cname.startswith("ex_suite") else "single"
                for kd in (False, True):
                    off_v = official[(where, kd)]
                    col = f"{cname} vs official{'' if kd else ' (DISTINCT removed)'}"
                    row = rows[col]
                    if ours[cname] is None:  # the project leaves the sample out (gold_empty, ...)
                        row[f"project None ({status}) / official {off_v}"] += 1
                        continue
                    if off_v == "gold_error":
                        row["official: gold fails"] += 1
                        continue
                    row["n"] += 1
                    if (ours[cname] == 1.0) == bool(off_v):
                        row["agree"] += 1
                        continue
                    if not kd and (ours[cname] == 1.0) == bool(official[(where, True)]):
                        label = "DISTINCT removed from both queries (official default)"
                    else:
                        label = exec_disagreement_kind(ours[cname], off_v, pred, gold,
                                                       rerun if not cname.endswith("strict") else
                                                       (lambda strict=True, **o: rerun(True, **o)))
                    row[label] += 1
                    ex_key = f"{col}: {label}"
                    if len(examples[ex_key]) < EXAMPLES:
                        examples[ex_key].append({"id": key, "kind": kind, "gold": gold, "pred": pred})
        out["kinds"][kind] = {c: dict(v) for c, v in rows.items()}
        for c, v in rows.items():
            totals[c].update(v)
    out["totals"] = {c: dict(v) for c, v in totals.items()}
    out["examples"] = dict(examples)
    for v in suites.values():
        v.close()
    return out


def _print_examples(examples: dict) -> None:
    for label, exs in examples.items():
        print(f"  {label}")
        for e in exs:
            print(f"    [{e['id']} {e['kind']}] gold: {e['gold']}\n{'':<8}pred: {e['pred']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--official", required=True,
                    help="folder holding the official evaluation.py, process_sql.py, exec_eval.py and parse.py")
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"))
    ap.add_argument("--limit", type=int, default=None, help="only the first N dev samples")
    ap.add_argument("--kinds", default=None, help="comma-separated kinds of bench_exact_match.KINDS (default: all)")
    ap.add_argument("--no-exec", action="store_true", help="exact-set-match only")
    ap.add_argument("--no-suite", action="store_true", help="execution on the single database only")
    ap.add_argument("--work", default=None, help="folder for the database copies (default: a temporary folder)")
    ap.add_argument("--out", default=None, help="write every count and example as JSON here")
    ap.add_argument("--red-team-limit", type=int, default=200,
                    help="execution on the first SQL of every SQL-kind hack on N dev samples evenly spaced (0: none)")
    ap.add_argument("--red-team-only", action="store_true",
                    help="only the red-team execution part (no exact-set-match, no rewrites)")
    args = ap.parse_args()
    off = load_official(args.official)
    spider = Path(args.spider)
    for name in ("dev.json", "tables.json", "database"):
        if not (spider / name).exists():
            raise SystemExit(f"--spider {spider}: no {name} there")
    dev = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    samples = [{"id": f"spider-dev-{i}", "db_id": d["db_id"], "query": d["query"]} for i, d in enumerate(dev)]
    samples = samples[:args.limit] if args.limit else samples
    kinds = KINDS if not args.kinds else {k: KINDS[k] for k in args.kinds.split(",")}
    report: dict = {"n_samples": len(samples)}

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="official_agreement_"))
    if args.red_team_only:
        if args.no_exec or not args.red_team_limit:
            raise SystemExit("--red-team-only needs the execution part (no --no-exec) and --red-team-limit N > 0")
        _red_team_part(off, samples, spider, work, args, report)
        _write(args.out, report)
        return 0

    em = run_em(off, samples, spider, kinds)
    report["exact_match"] = em
    print(f"Exact-set-match, Spider dev (n={len(samples)} golds): project exact_match vs official eval_exact_match")
    print(f"  golds the official parser raises on: {len(em['gold_rejected_by_official'])}; "
          f"golds the project cannot read: {len(em['gold_unreadable_by_project'])}")
    for g in em["gold_rejected_by_official"][:EXAMPLES]:
        print(f"    [{g['id']}] {g['error']}: {g['gold']}")
    print(f"  {'kind':<15} {'n':>5} {'agree':>6} {'both 1':>7} {'both 0':>7}  disagreements")
    for kind, r in em["kinds"].items():
        print(f"  {kind:<15} {r['n']:>5} {r['agree']:>6} {r['both_1']:>7} {r['both_0']:>7}  {r['disagree'] or ''}")
    n = sum(r["n"] for r in em["kinds"].values())
    a = sum(r["agree"] for r in em["kinds"].values())
    print(f"  all kinds: {a}/{n} agree; disagreements by class: {em['disagreement_kinds']}")
    _print_examples(em["examples"])

    if not args.no_exec:
        ex = run_exec(off, samples, spider, kinds, work, suite=not args.no_suite)
        report["execution"] = ex
        _print_exec("Execution: project EX vs official eval_exec_match (plug_value off)", ex)
        if args.red_team_limit:
            _red_team_part(off, samples, spider, work, args, report)
    _write(args.out, report)
    return 0


def _print_exec(title: str, ex: dict) -> None:
    print(f"\n{title}")
    for kind, cols in ex["kinds"].items():
        print(f"  {kind}")
        for c, v in cols.items():
            print(f"    {c:<42} {v}")
    print("  all kinds")
    for c, v in ex["totals"].items():
        print(f"    {c:<42} {v}")
    _print_examples(ex["examples"])


def _red_team_part(off, samples: list[dict], spider: Path, work: Path, args, report: dict) -> None:
    """Part (b) on the red-team prediction set (:func:`red_team_predictions`), its copies under ``work/red_team``."""
    chosen, preds = red_team_predictions(spider, samples, args.red_team_limit)
    ex = run_exec(off, chosen, spider, preds, work / "red_team", suite=not args.no_suite)
    ex["n_samples"] = len(chosen)
    ex["n_predictions"] = {k: len(v) for k, v in preds.items()}
    report["execution_red_team"] = ex
    _print_exec(f"Execution, red team: the first SQL of each SQL-kind hack on {len(chosen)} dev samples evenly "
                f"spaced ({sum(ex['n_predictions'].values())} predictions): project EX vs official eval_exec_match",
                ex)


def _write(out: str | None, report: dict) -> None:
    if out:
        Path(out).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
