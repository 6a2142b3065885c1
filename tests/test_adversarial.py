"""Adversarial regressions: one minimal test per bug found by hostile testing.

Each test states the contract it checks (README "Design rules" or the docstring of the API under test).
"""
from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import pytest

import textsql_clarify  # noqa: F401  (registers TextSQLClarify-v0)
from textsql_clarify.sql.sandbox import SQLiteSandbox
from textsql_clarify.datasets import embedded_db_path, load_dataset, load_embedded
from textsql_clarify.errors import DatasetError
from textsql_clarify.rewards.cells import ResultTable, score_cells
from textsql_clarify.samples import load_jsonl, write_jsonl

from conftest import generous_bound


def _record(**kw) -> dict:
    rec = dict(id="a", db_id="university", db_path=embedded_db_path(), question="q?", group="answerable",
               subcategory="answerable_without_evidence", gold_sql="SELECT 1")
    rec.update(kw)
    return rec


def _env(**kw):
    env = gym.make("TextSQLClarify-v0", **kw)
    env.reset(seed=0, options={"index": 0})
    return env


# --- "Agent SQL never runs past its time limit" ---------------------------------------------------

@pytest.mark.parametrize("sql", [
    # one VM instruction that ignores both the progress handler and the 64 MB value limit
    "SELECT printf('%.*c', 400000000, 'x')",
    # heavy scalar calls in one row: no progress-handler check between them
    "SELECT " + "+".join(f"length(replace(hex(zeroblob({8_000_000 + i})),'0','1'))" for i in range(16)),
    # heavy rows: a few VM instructions each, so the 1000-instruction check fires only every ~100 rows
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 30) "
    "SELECT length(replace(hex(zeroblob(8000000 + n)),'0','1')) FROM r",
], ids=["printf-precision", "chained-calls", "heavy-rows"])
def test_sql_respects_time_limit(sql):
    # unguarded, each runs for seconds; a limit must stop it: the time limit or the value-size cap
    # (overrun ratios: bench/bench_sandbox_limits.py)
    sb = SQLiteSandbox(embedded_db_path(), timeout_s=0.05)
    with generous_bound(sql[:60], stop=sb.interrupt):
        res = sb.execute(sql)
    assert (res.error_kind == "timeout" and res.error_message == "interrupted after the 0.05 s time limit"
            or res.error_kind == "runtime" and "value too large (limit" in res.error_message), res


# --- "bad input cannot break it" -------------------------------------------------------------------

def test_select_star_with_ordinal_order_by_does_not_crash_step():
    env = _env()
    _, _, terminated, _, info = env.step("<sql>SELECT * FROM students ORDER BY 1</sql>")
    assert terminated and info["action_type"] == "sql"


def test_json_action_with_huge_integer_is_malformed_not_raised():
    env = _env()
    _, _, terminated, _, info = env.step('{"type": "sql", "content": ' + "1" * 5000 + "}")
    assert info["action_type"] == "invalid" and not terminated


def test_step_scoring_time_is_bounded_for_long_failing_sql():
    # SQLite rejects this in < 1 ms ("Expression tree is too large"); component scoring is quadratic
    env = _env(timeout_s=0.5)
    sql = "SELECT 1 FROM students WHERE " + "s.a = 1 OR " * 2000 + "1 = 1"
    with generous_bound("one step on a 22,000-character OR chain"):
        _, _, terminated, _, info = env.step(f"<sql>{sql}</sql>")
    # the analysis cap fired: no component score, instead of a quadratic parse
    assert terminated and info["reward_components"]["components"] is None
    assert info["reward_components"]["ex"] == 0.0


def test_zero_clarification_budget_refuses_clarify():
    env = _env(max_clarifications=0)
    _, _, _, _, info = env.step("<clarify>Which department do you mean?</clarify>")
    assert info["action_type"] != "clarify" and info["error"] is not None


def test_bad_timeout_rejected_at_construction():
    with pytest.raises(ValueError):
        gym.make("TextSQLClarify-v0", timeout_s=0)


def test_surrogate_in_action_does_not_break_trajectory_writing(tmp_path):
    from textsql_clarify.rollout.evaluation import evaluate

    class Agent:
        name = "surrogate"

        def begin_episode(self, sample):
            pass

        def act(self, obs, info):
            return '{"type": "feedback", "content": "\\ud83d"}'  # half an emoji escape, valid JSON

    evaluate(load_embedded()[:1], Agent(), out_dir=tmp_path, progress=False)
    assert (tmp_path / "trajectories.jsonl").is_file()


# --- "bad dataset files give a clear DatasetError naming file, line and field" ----------------------

@pytest.mark.parametrize("rec", [
    _record(group="unanswerable", subcategory="missing_entities_or_attributes", gold_sql=None, provenance=None),
    _record(group="unanswerable", subcategory="missing_entities_or_attributes", gold_sql=None, provenance="x"),
    _record(premise_flaw=["x"]),
], ids=["provenance-null", "provenance-str", "premise-flaw-list"])
def test_bad_field_types_give_dataset_error(tmp_path, rec):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError):
        load_dataset(str(p))


@pytest.mark.parametrize("line", ["[" * 100000 + "]" * 100000, '{"id": ' + "1" * 5000 + "}"],
                         ids=["deep-nesting", "huge-int"])
def test_undecodable_json_line_gives_dataset_error(tmp_path, line):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(_record()) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as ei:
        load_dataset(str(p))
    assert [pr.line for pr in ei.value.problems] == [2]


def test_write_jsonl_roundtrip_with_line_separator_char(tmp_path):
    s = load_embedded()[0]
    samples = [dataclasses.replace(s, question="How many\u2028students?"), dataclasses.replace(s, id="b")]
    p = tmp_path / "rt.jsonl"
    write_jsonl(samples, p)
    assert [x.question for x in load_jsonl(p)] == [x.question for x in samples]


# --- "wrong verdict" --------------------------------------------------------------------------------

def test_identical_results_with_constant_column_score_full_column_precision():
    # e.g. the gold SQL itself: SELECT upper(d.name) ... WHERE d.name = 'Computer Science' (8 equal rows)
    t = ResultTable(("x",), [("COMPUTER SCIENCE",)] * 8)
    s = score_cells(t, t)
    assert s.exact_match
    assert s.column_precision == 1.0 and s.column_recall == 1.0
