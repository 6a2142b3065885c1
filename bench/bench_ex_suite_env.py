"""Test-suite EX in the env and in eval: EX against EX_suite per agent, and the cost of a suite step.

Prints, in one run (ratios measured side by side, never timed tests):

1. the variant build at env construction (``ex_mode="suite"``, K variants of every database, into a fresh cache
   folder unless ``--cache`` is given): seconds;
2. for the oracle and the no-clarify agent, on the embedded set and on Spider dev (``../shared/data/spider_dev``,
   skipped when absent), through :func:`~textsql_clarify.rollout.evaluation.evaluate` with ``ex_mode="suite"``
   (what ``textsql-clarify eval --ex-mode suite`` runs): EX, EX_suite, EX_strict, EX_strict_suite with n, and how
   many hits EX_suite takes back; also the red team's ``count_mentioned`` (``SELECT count(*)`` of the table the
   question names best, ``redteam/policies.py``), a non-privileged policy that single-instance EX pays by chance;
3. the cost of one SQL step, single against suite, interleaved per sample (gold results cached by a warm-up
   round): the gold SQL submitted (it matches: every variant runs, the worst case) and ``SELECT 1`` (it does not
   match: no variant runs), EX-only (``detailed_scores=False``) and detailed; medians in ms and their ratio;
4. the time budget: the wall time of a step whose prediction runs long (on the variants only, or everywhere)
   under a 0.5 s and a 1 s limit, single against suite, next to the bound of ``docs/platform.md`` "SQL bounds".

Usage::

    .venv/bin/python bench/bench_ex_suite_env.py [--k 8] [--cache DIR] [--reps 3] [--limit N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from textsql_clarify.redteam import policies as hacks  # noqa: E402
from textsql_clarify.rollout.evaluation import evaluate  # noqa: E402
from textsql_clarify.datasets import load_dataset  # noqa: E402
from textsql_clarify.envs.env import TextSQLClarifyEnv  # noqa: E402
from textsql_clarify.sql.variants import DEFAULT_K  # noqa: E402

SPIDER = ROOT.parent / "shared" / "data" / "spider_dev"
METRICS = ("EX", "EX_suite", "EX_strict", "EX_strict_suite")


def _fmt(cell) -> str:
    return "—" if cell is None or cell.get("value") is None else f"{cell['value']:.3f} (n={cell['n']})"


def agents_table(name: str, samples, k: int, cache: str) -> None:
    """EX and EX_suite for the oracle and the no-clarify agent (section 2)."""
    for agent in ("oracle", "no-clarify", hacks.CountMentioned()):
        t0 = time.perf_counter()
        trajs, m = evaluate(samples, agent, progress=False, ex_mode="suite", suite_k=k, suite_cache_dir=cache)
        took = time.perf_counter() - t0
        o = m["overall"]
        lost = sum(1 for t in trajs if t.scores.get("ex") == 1 and t.scores.get("ex_suite") == 0)
        print(f"| {name} | {getattr(agent, 'name', agent)} | " + " | ".join(_fmt(o.get(x)) for x in METRICS) + f" | {lost} | {took:.1f} s |")


def _step_ms(env: TextSQLClarifyEnv, index: int, sql: str) -> float:
    env.reset(options={"index": index})
    t0 = time.perf_counter()
    env.step(f"<sql>{sql}</sql>")
    return (time.perf_counter() - t0) * 1000.0


def cost_table(name: str, samples, k: int, cache: str, reps: int) -> None:
    """Median SQL step, single against suite, interleaved (section 3)."""
    for detailed in (False, True):
        single = TextSQLClarifyEnv(samples=samples, detailed_scores=detailed)
        suite = TextSQLClarifyEnv(samples=samples, detailed_scores=detailed, ex_mode="suite", suite_k=k,
                                  suite_cache_dir=cache)
        idx = [i for i, s in enumerate(samples) if s.gold_sql and s.drift is None]
        for label, sql_of in (("gold (matches)", lambda s: s.gold_sql), ("SELECT 1 (no match)", lambda s: "SELECT 1")):
            times = {"single": [], "suite": []}
            for rep in range(reps + 1):  # round 0 warms the gold caches
                # one env's block, then the other's, alternating which goes first: the cross-step analysis cache
                # (512 predictions) then serves both alike (every step misses on Spider dev, hits on embedded)
                order = (("single", single), ("suite", suite)) if rep % 2 else (("suite", suite), ("single", single))
                for key, env in order:
                    for i in idx:
                        ms = _step_ms(env, i, sql_of(samples[i]))
                        if rep:
                            times[key].append(ms)
            ms1, ms2 = statistics.median(times["single"]), statistics.median(times["suite"])
            print(f"| {name} | {'detailed' if detailed else 'EX-only'} | {label} | {ms1:.3f} | {ms2:.3f} | "
                  f"{ms2 / ms1:.1f}x | {len(idx)} x {reps} |")
        single.close()
        suite.close()


def budget_table(cache: str, k: int, reps: int = 3) -> None:
    """Step wall time against the time limit for predictions that run long (section 4): one slow only on the
    variants (fast where the students table has the original's size, an endless recursive CTE elsewhere), one
    endless everywhere."""
    from textsql_clarify.datasets import embedded_db_path
    from textsql_clarify.samples import Sample
    from textsql_clarify.sql.sandbox import get_sandbox

    gold = "SELECT count(*) FROM students"
    n0 = get_sandbox(embedded_db_path()).execute(gold).rows[0][0]
    endless = "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c)"
    preds = {"slow on the variants only": f"SELECT CASE WHEN (SELECT count(*) FROM students) = {n0} THEN "
                                          f"(SELECT count(*) FROM students) ELSE {endless} END",
             "endless everywhere": f"SELECT {endless}"}
    sample = Sample(id="budget", db_id="university", db_path=str(embedded_db_path()), question="How many?",
                    group="answerable", subcategory="answerable", gold_sql=gold)
    for timeout in (0.5, 1.0):
        envs = {"single": TextSQLClarifyEnv(samples=[sample], timeout_s=timeout, detailed_scores=False),
                "suite": TextSQLClarifyEnv(samples=[sample], timeout_s=timeout, detailed_scores=False,
                                           ex_mode="suite", suite_k=k, suite_cache_dir=cache)}
        for label, sql in preds.items():
            walls = {}
            for key, env in envs.items():
                ms = [_step_ms(env, 0, sql) for _ in range(reps)]
                walls[key] = max(ms) / 1000.0
            env = envs["suite"]
            env.reset(options={"index": 0})
            info = env.step(f"<sql>{sql}</sql>")[4]
            rc = info["reward_components"]
            print(f"| {timeout:g} s | {label} | {walls['single']:.3f} s | {walls['suite']:.3f} s | "
                  f"{1.1 * timeout + 1.0:.2f} s | ex {rc['ex']:g}, ex_suite {rc['ex_suite']:g} |")
        for env in envs.values():
            env.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=DEFAULT_K)
    p.add_argument("--cache", default=None, help="variant cache folder (default: a fresh temporary one)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="only the first N Spider dev samples")
    args = p.parse_args()
    cache = args.cache or tempfile.mkdtemp(prefix="variants-")
    sets = [("embedded", load_dataset("embedded"))]
    if (SPIDER / "dev.json").is_file():
        sets.append(("spider dev", load_dataset(f"spider:{SPIDER}", limit=args.limit)))
    else:
        print(f"Spider dev absent ({SPIDER}): embedded only")
    print(f"## build (K = {args.k}, cache {cache})")
    for name, samples in sets:
        t0 = time.perf_counter()
        env = TextSQLClarifyEnv(samples=samples, ex_mode="suite", suite_k=args.k, suite_cache_dir=cache,
                                detailed_scores=False)
        print(f"{name}: {len(env.variants)} database(s), {len(samples)} samples, "
              f"construction {time.perf_counter() - t0:.1f} s")
        env.close()
    print("\n## EX and EX_suite (eval --ex-mode suite)\n")
    print("| dataset | agent | " + " | ".join(METRICS) + " | EX hits lost | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for name, samples in sets:
        agents_table(name, samples, args.k, cache)
    print("\n## SQL step cost, median ms (interleaved)\n")
    print("| dataset | scores | prediction | single | suite | ratio | n |")
    print("|---|---|---|---|---|---|---|")
    for name, samples in sets:
        cost_table(name, samples, args.k, cache, args.reps)
    print("\n## step wall time against the time limit (worst of 3 steps)\n")
    print("| timeout_s | prediction | single | suite | bound 1.1 x timeout + 1 s | scores (suite) |")
    print("|---|---|---|---|---|---|")
    budget_table(cache, args.k)


if __name__ == "__main__":
    main()
