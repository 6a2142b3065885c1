"""Gold self-test on real data: every Spider dev gold with data scores EX 1 against itself.

On ../shared/data/spider_dev (converted databases) all 1,034 golds execute; 935 return data and
99 do not (89 return no rows, 10 only NULLs), which relaxed EX flags as ``gold_empty``.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from textsql_clarify.sql.sandbox import ExecutionResult, SQLiteSandbox
from textsql_clarify.rewards.execution import compare_results, gold_is_ordered, is_empty_result, relaxed_ex, score_execution

pytestmark = pytest.mark.realdata


def test_spider_dev_golds_match_themselves(spider_root):
    dev = json.loads((spider_root / "dev.json").read_text())
    assert len(dev) == 1034
    sandboxes: dict[str, SQLiteSandbox] = {}
    statuses: Counter = Counter()
    strict_statuses: Counter = Counter()
    permuted: Counter = Counter()
    no_rows = null_only = 0
    try:
        for i, item in enumerate(dev):
            db = item["db_id"]
            if db not in sandboxes:
                sandboxes[db] = SQLiteSandbox(spider_root / "database" / db / f"{db}.sqlite")
            sb = sandboxes[db]
            key = f"spider_dev/{i}"
            verdict = relaxed_ex(item["query"], item["query"], sb, gold_key=key)
            statuses[verdict.status] += 1
            gold = sb.execute_gold(key, item["query"])
            # ex_strict too: the gold has the gold's columns, and its constant columns pair with themselves
            strict_statuses[score_execution(gold, gold, item["query"], item["query"], sb, gold_key=key)[1].status] += 1
            assert gold.ok and not gold.truncated, (item["query"], gold)
            if is_empty_result(gold):
                assert verdict.status == "gold_empty" and verdict.score is None, item["query"]
                no_rows += not gold.rows
                null_only += bool(gold.rows)
                continue
            assert verdict.score == 1.0, (item["query"], verdict)
            assert verdict.column_mapping == tuple(range(len(gold.columns))), (item["query"], verdict)
            # the same result with its columns reversed (and its rows too, unless ordered) still matches
            ordered = gold_is_ordered(item["query"])
            rows = [tuple(reversed(r)) for r in gold.rows]
            mirrored = ExecutionResult(tuple(reversed(gold.columns)), tuple(rows if ordered else rows[::-1]), 0.0)
            permuted[compare_results(mirrored, gold, ordered=ordered).status] += 1
    finally:
        for sb in sandboxes.values():
            sb.close()
    print(f"\nSpider dev gold self-test (n=1034): {dict(statuses)}; no rows {no_rows}, only NULLs {null_only}")
    assert statuses == Counter({"match": 935, "gold_empty": 99})
    assert strict_statuses == Counter({"match": 935, "gold_empty": 99})
    assert (no_rows, null_only) == (89, 10)
    assert permuted == Counter({"match": 935})
