"""Every case in ../shared/cases/execution_cases.json, scored over its own tiny database.

``expected``: ``equivalent`` -> status match, score 1; ``not equivalent`` -> score 0 (a mismatch);
``must-not-crash: ...`` -> the outcome the text names: a gold failure marks the sample invalid
(gold_error, score None), a runaway prediction is a timeout (pred_error, score 0).
"""
from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import SHARED, generous_bound
from textsql_clarify.sql.sandbox import SQLiteSandbox
from textsql_clarify.rewards.execution import gold_is_ordered, relaxed_ex

CASES_FILE = SHARED / "cases" / "execution_cases.json"
CASES = json.loads(CASES_FILE.read_text()) if CASES_FILE.is_file() else []
TIMEOUT_S = 0.5


def expected_outcome(expected: str) -> tuple[str, float | None, str | None]:
    """(status, score, word the reason must contain) for a case's ``expected`` text."""
    if expected == "equivalent":
        return "match", 1.0, None
    if expected == "not equivalent":
        return "mismatch", 0.0, None
    if expected.startswith("must-not-crash:"):
        text = expected.lower()
        if "gold" in text and ("invalid" in text or "error" in text):
            return "gold_error", None, "gold"
        if "timeout" in text:
            return "pred_error", 0.0, "timeout"
    raise AssertionError(f"unknown expected verdict: {expected!r}")


def test_cases_present():
    if not CASES_FILE.is_file():
        pytest.skip("../shared/cases/execution_cases.json absent")
    assert len(CASES) == 9 and len({c["id"] for c in CASES}) == len(CASES)


def _case_db(case: dict, tmp_path) -> object:
    """The case's tiny schema and data written to a fresh SQLite file; returns its path."""
    path = tmp_path / f"{case['id']}.sqlite"
    con = sqlite3.connect(path)
    con.executescript(case["schema_sql"])
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_execution_case(case, tmp_path):
    path = _case_db(case, tmp_path)
    status, score, word = expected_outcome(case["expected"])
    with SQLiteSandbox(path, timeout_s=TIMEOUT_S) as sb:
        with generous_bound(f"case {case['id']}", stop=sb.interrupt):  # a must-not-crash case ends, typed
            v = relaxed_ex(case["pred_sql"], case["gold_sql"], sb, gold_key=case["id"])
        assert v.status == status, (case["id"], v)
        assert v.score == score
        if word:
            assert word in v.reason.lower()
        # scoring is symmetric for the equivalent cases whose columns match one-to-one
        if status == "match" and len(sb.execute(case["pred_sql"]).columns) == len(sb.execute(case["gold_sql"]).columns):
            if not gold_is_ordered(case["pred_sql"]):
                assert relaxed_ex(case["gold_sql"], case["pred_sql"], sb).score == 1.0
        # a gold scored against itself is a match unless the case is about the gold
        if status != "gold_error":
            assert relaxed_ex(case["gold_sql"], case["gold_sql"], sb).score == 1.0


def test_case_specific_details(tmp_path):
    by_id = {c["id"]: c for c in CASES}
    if "ex19_same_name_columns_swapped" not in by_id or "ex17_column_superset" not in by_id:
        pytest.skip("cases file absent or changed")
    for cid, mapping in (("ex19_same_name_columns_swapped", (1, 0)), ("ex17_column_superset", (1,))):
        case = by_id[cid]
        path = tmp_path / f"{cid}.sqlite"
        con = sqlite3.connect(path)
        con.executescript(case["schema_sql"])
        con.commit()
        con.close()
        with SQLiteSandbox(path) as sb:
            assert relaxed_ex(case["pred_sql"], case["gold_sql"], sb).column_mapping == mapping


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_execution_case_under_every_option_setting(case, tmp_path):
    """The width-hardening options (ties, rounding, nondeterministic golds, the width bound) change no case's verdict,
    and ex_strict agrees with it except on the column-superset case (ex17), which it rejects by design."""
    path = _case_db(case, tmp_path)
    status, score, _ = expected_outcome(case["expected"])
    off = {"limit_ties": False, "round_to_gold_precision": False, "exclude_nondeterministic_gold": False,
           "max_extra_columns": None, "max_extra_columns_single_row": None, "constant_columns": False}
    with SQLiteSandbox(path, timeout_s=TIMEOUT_S) as sb:
        for options in (None, off):
            assert relaxed_ex(case["pred_sql"], case["gold_sql"], sb, options=options).status == status
        strict = relaxed_ex(case["pred_sql"], case["gold_sql"], sb, strict=True)
        if case["category"] == "column-superset" and status == "match":
            assert strict.status == "mismatch" and "strict" in strict.reason
        else:
            assert (strict.status, strict.score) == (status, score)
