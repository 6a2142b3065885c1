"""Hedging between readings (issue 10 review): an answer that holds two different readings of an ambiguous
question at once chose none of them (ABISS Def. 2), so relaxed EX does not pay it (envs/scoring.py,
``other_readings``). Before the check, ``SELECT * FROM (gold) AS a, (other reading) AS b`` never asked and
earned EX 1 on 6 of the 24 embedded ambiguous samples (the column-superset bound let the other reading's
columns through), and on 7 of 14 ABISS-fixture ones."""
from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import pytest

import textsql_clarify  # noqa: F401
from textsql_clarify.sql.sandbox import ExecutionResult
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.scoring import result_contains

FIX = Path(__file__).parent / "fixtures" / "abiss" / "abiss_spider.json"
SPIDER_DB = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "spider_dev" / "database"
#: the embedded samples the cross-join hedge was paid on before the check
WAS_PAID = ["uni-scope-002", "uni-attach-003", "uni-entity-003", "uni-user-003", "uni-chain-001", "uni-chain-002"]


def _r(cols, rows):
    return ExecutionResult(columns=tuple(cols), rows=tuple(tuple(r) for r in rows), elapsed_s=0.0)


def test_result_contains_finds_a_reading_in_extra_columns():
    big = _r(["name", "semester"], [("CS", "fall"), ("Math", "fall"), ("CS", "spring")])
    assert result_contains(big, _r(["s"], [("fall",), ("spring",)]))
    assert result_contains(big, _r(["n", "s"], [("Math", "fall")]))
    assert not result_contains(big, _r(["n", "s"], [("Math", "spring")]))   # a pair no row holds
    assert not result_contains(big, _r(["a", "b", "c"], [(1, 2, 3)]))         # wider than big
    assert not result_contains(big, _r(["s"], []))                             # nothing to find
    assert result_contains(_r(["x"], [(0.1 + 0.2,)]), _r(["y"], [(0.3,)]))     # floats to 6 decimals


def _play(samples, sql_of):
    env = gym.make("TextSQLClarify-v0", samples=samples, detailed_scores=False)
    out = {}
    for s in samples:
        env.reset(options={"sample_id": s.id})
        _, reward, _, _, info = env.step(f"<sql>{sql_of(s)}</sql>")
        out[s.id] = (reward, info["reward_components"]["ex"])
    return out


def _hedge(s):
    parts = [s.gold_sql, *(it.gold_sql for it in s.interpretations)]
    return "SELECT * FROM " + ", ".join(f"({q}) AS r{k}" for k, q in enumerate(parts))


def test_cross_join_hedge_earns_nothing_on_embedded_and_the_gold_still_does():
    samples = [s for s in load_dataset("embedded") if s.group == "ambiguous" and s.interpretations]
    assert len(samples) == 24
    hedged = _play(samples, _hedge)
    assert {sid: v for sid, v in hedged.items() if v[0] > 0} == {}
    assert all(hedged[sid] == (0.0, 0.0) for sid in WAS_PAID)
    gold = _play(samples, lambda s: s.gold_sql)
    assert all(v == (1.0, 1.0) for v in gold.values())
    # the gold plus a column that is not another reading is still a match (the superset bound holds)
    s = next(x for x in samples if x.id == "uni-scope-002")
    plus = _play([s], lambda x: f"SELECT *, 1 AS one FROM ({x.gold_sql})")
    assert plus[s.id] == (1.0, 1.0)


def test_cross_join_hedge_earns_nothing_on_the_abiss_fixture(shared_data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = [s for s in load_dataset(f"abiss:{FIX}:{SPIDER_DB}") if s.group == "ambiguous"]
    assert len(samples) == 14
    hedged = _play(samples, _hedge)
    assert sum(1 for r, _ in hedged.values() if r > 0) == 0
    assert all(v == (1.0, 1.0) for v in _play(samples, lambda s: s.gold_sql).values())


def test_gold_against_each_reading_is_compared_once_per_sample(monkeypatch):
    """Whether the gold answers a reading depends only on the sample: it is worked out on the first SQL turn
    and cached (scoring._distinct_readings), so later turns and episodes only compare the prediction."""
    from textsql_clarify.envs import scoring

    s = next(x for x in load_dataset("embedded") if x.id == "uni-scope-002")
    readings = {it.gold_sql for it in s.interpretations}
    calls = []
    real = scoring.score_execution

    def spy(pred, gold, pred_sql, gold_sql, *a, **k):
        calls.append((pred_sql, gold_sql))
        return real(pred, gold, pred_sql, gold_sql, *a, **k)

    monkeypatch.setattr(scoring, "score_execution", spy)
    monkeypatch.setattr(scoring, "_DISTINCT", scoring.weakref.WeakKeyDictionary())
    for _ in range(3):
        assert _play([s], _hedge)[s.id] == (0.0, 0.0)
    gold_vs_reading = [c for c in calls if c[0] == s.gold_sql and c[1] in readings]
    assert len(gold_vs_reading) == len(readings) >= 1
