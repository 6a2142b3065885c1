"""Hedging between readings: an answer that holds two different readings of an ambiguous
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
    # at most once per reading over three episodes; none when relaxed EX already refuses the cross-joined
    # readings as independent answers (the hedge rule then has nothing to decide)
    assert len(gold_vs_reading) <= len(readings) and len(readings) >= 1


# -- typed hedges against a one-row gold (relaxed EX's column-superset bound, docs/metrics.md) ------------
UNI_DB = Path(textsql_clarify.__file__).parent / "datasets" / "embedded" / "university.sqlite"
COUNT_GOLD = "SELECT count(*) FROM students"  # one row: (48,)


@pytest.fixture
def uni():
    from textsql_clarify.sql.sandbox import SQLiteSandbox
    with SQLiteSandbox(UNI_DB) as sb:
        yield sb


@pytest.mark.parametrize("pred, score", [
    ("SELECT count(*) FROM students", 1.0),
    # a data-reading constant next to the answer: allowed as one extra, but it stands for no gold column
    ("SELECT count(*), count(*) * 0 FROM students", 1.0),
    # a label next to the count: one extra column of another type, within the one-row allowance
    ("SELECT count(*), 'total' FROM students", 1.0),
    # one guess of each type: the same shape as name and GPA for 'who has the highest GPA'
    ("SELECT count(*), (SELECT max(first_name) FROM students) FROM students", 1.0),
    # a second number and a text guess: two units of the allowance (one more number, one block of text)
    ("SELECT count(*), count(*) * 0, (SELECT max(first_name) FROM students) FROM students", 0.0),
    ("SELECT count(*), (SELECT count(*) FROM departments), (SELECT max(first_name) FROM students) FROM students",
     0.0),
    # a typed hedge: count, count * 0 and the commonest value of two text columns
    ("SELECT count(*), count(*) * 0, (SELECT home_city FROM students GROUP BY 1 ORDER BY count(*) DESC LIMIT 1), "
     "(SELECT residence_city FROM students GROUP BY 1 ORDER BY count(*) DESC LIMIT 1) FROM students", 0.0),
])
def test_one_row_count_gold_against_hedges(uni, pred, score):
    from textsql_clarify.rewards.execution import relaxed_ex
    v = relaxed_ex(pred, COUNT_GOLD, uni)
    assert v.score == score, (pred, v)
    if score == 0.0:
        assert "at most 1 allowed against a one-row gold" in v.reason, v


def test_data_reading_constant_is_no_guess_at_a_zero(uni):
    """``count(*) * 0`` reads a table but its value does not depend on it: it never pairs with a gold zero."""
    from textsql_clarify.rewards.execution import relaxed_ex
    zero_gold = "SELECT count(*) FROM students WHERE total_credits > 100000"  # a data zero: (0,)
    assert uni.execute(zero_gold).rows == ((0,),)
    for pred in ("SELECT count(*) * 0 FROM sqlite_master", "SELECT count(*), count(*) * 0 FROM students",
                 "SELECT max(student_id) - max(student_id) FROM students",
                 "SELECT (SELECT count(*) FROM students WHERE 0)"):
        v = relaxed_ex(pred, zero_gold, uni)
        assert v.score == 0.0 and "constant" in v.reason, (pred, v)
    # a count that is zero because of the data is an answer
    assert relaxed_ex("SELECT count(*) FROM students WHERE total_credits > 5000", zero_gold, uni).score == 1.0
    # the name-and-value answer to a one-row text gold keeps passing, with a key too
    name_gold = "SELECT first_name FROM students ORDER BY total_credits DESC, student_id LIMIT 1"
    assert relaxed_ex("SELECT student_id, first_name, total_credits FROM students "
                      "ORDER BY total_credits DESC, student_id LIMIT 1", name_gold, uni).score == 1.0


def _hedge_sql(kind: str, observation: dict) -> str:
    """Three hedges, from the observation alone (question and schema text)."""
    from textsql_clarify.redteam.policies import _ident_words, _mentioned_table, _q, _words, schema_columns
    schema = schema_columns(observation.get("schema", ""))
    question = observation.get("question", "")
    t = _mentioned_table(schema, question) or next(iter(schema))
    if kind == "count_plus_zero":
        return f"SELECT count(*), count(*) * 0 FROM {_q(t)}"
    if kind == "typed":
        cols = [c for c in schema[t] if "id" not in c.lower()][:2] or schema[t][:2]
        modes = [f"(SELECT {_q(c)} FROM {_q(t)} GROUP BY {_q(c)} ORDER BY count(*) DESC LIMIT 1)" for c in cols]
        return f"SELECT count(*), count(*) * 0, {', '.join(modes)} FROM {_q(t)}"
    words = _words(question) | {w[:-1] for w in _words(question) if w.endswith("s")}
    ranked = sorted(schema, key=lambda name: -len(_ident_words(name) & words))[:2]  # stable: schema order
    return "SELECT " + ", ".join(f"(SELECT count(*) FROM {_q(name)})" for name in ranked)


@pytest.mark.realdata
def test_spider_dev_hedges_earn_no_second_guess(spider_root):
    """On the first 300 Spider dev samples, through gym.make: ``count(*)`` plus ``count(*) * 0`` earns what
    ``count(*)`` alone earns (the constant stands for no gold zero), the typed hedge earns only its single
    guesses of one type each, and two tables' counts keep the one-row allowance's second guess (the residual
    docs/metrics.md argues)."""
    env = gym.make("TextSQLClarify-v0", dataset=f"spider:{spider_root}", limit=300, detailed_scores=False)
    hits = {}
    for kind in ("count_alone", "count_plus_zero", "typed", "two_tables"):
        n = 0
        for i in range(len(env.unwrapped.samples)):
            obs, _ = env.reset(options={"index": i})
            obs, _, _, _, _ = env.step("<category>answerable_without_evidence</category>")
            sql = (_hedge_sql("count_plus_zero", obs).replace(", count(*) * 0", "") if kind == "count_alone"
                   else _hedge_sql(kind, obs))
            _, _, _, _, info = env.step(f"<sql>{sql}</sql>")
            n += info["reward_components"]["ex"] == 1.0
        hits[kind] = n
    env.close()
    assert hits == {"count_alone": 20, "count_plus_zero": 20, "typed": 0, "two_tables": 0}, hits


# ---------------------------------------------------------------------- a transient reading failure is not cached
def test_a_reading_locked_on_the_first_look_does_not_turn_hedge_detection_off(tmp_path):
    import sqlite3

    from textsql_clarify.envs import scoring
    from textsql_clarify.sql.sandbox import SQLiteSandbox

    db = tmp_path / "h.sqlite"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE t(x INTEGER, y TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b');")
    con.commit()
    con.close()
    gold, other, hedge = "SELECT x FROM t", "SELECT y FROM t", "SELECT x, y FROM t"
    readings = (("s#1", other),)
    with SQLiteSandbox(db, timeout_s=0.3) as sb:
        gold_res = sb.execute_gold("s", gold)
        writer = sqlite3.connect(db, isolation_level=None)
        writer.execute("BEGIN EXCLUSIVE")  # another connection holds the database during the first look
        try:
            locked = sb.execute_gold("s#1", other)
            assert locked.error_kind == "runtime" and "locked" in locked.error_message
            assert scoring._distinct_readings(gold_res, gold, readings, sb, None) == ()
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        score = scoring.score_sql_turn(hedge, gold, sb, gold_key="s", detailed=False, other_readings=readings)
    assert (score.components["ex"], bool(score.flags.get("hedged"))) == (0.0, True)  # was ex=1.0, hedged False


def test_reading_failures_that_may_pass_later_are_named():
    from textsql_clarify.envs.scoring import _may_pass_later
    from textsql_clarify.sql.sandbox import ExecutionResult

    def failed(kind, msg):
        return ExecutionResult(columns=(), rows=(), elapsed_s=0.0, error_kind=kind, error_message=msg)

    assert _may_pass_later(failed("timeout", "time limit"))
    assert _may_pass_later(failed("runtime", "database is locked"))
    assert _may_pass_later(failed("runtime", "out of memory"))
    assert _may_pass_later(failed("runtime", "the SQL worker process died (signal 9)"))
    assert not _may_pass_later(failed("runtime", "no such column: z"))
    assert not _may_pass_later(ExecutionResult(columns=("a",), rows=((1,),), elapsed_s=0.0))
