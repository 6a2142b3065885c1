"""The embedded university dataset: database build, sample coverage, and that every SQL runs.

Checks the dataset's requirements against ABISS §3.2 (13 subcategories, two+ samples each; hidden
knowledge per interpretation), TIDE §2.1 (chain: two layers, verdict eliminated/transformed), TIDE
§2.2 / App. B Table 7 (drift: post-drift SQL executes, returns rows, result differs from the
pre-drift one; subtype per Algorithm 1) and PremiseSQL §3 (premise flaw crosswalks to the ABISS
subcategory).
"""
from __future__ import annotations

import collections
import itertools
import re
import sqlite3
from pathlib import Path

import pytest

from textsql_clarify.datasets import embedded_db_path, load_dataset
from textsql_clarify.datasets.university import DB_FILE, SAMPLES_FILE, SQL_SOURCE, build_database
from textsql_clarify.errors import DatasetError
from textsql_clarify.sql.schema import read_schema
from textsql_clarify.taxonomy import SUBCATEGORIES, crosswalk


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


@pytest.fixture(scope="module")
def ro_con():
    con = sqlite3.connect(Path(embedded_db_path()).as_uri() + "?mode=ro", uri=True)
    yield con
    con.close()


def _rows(con, sql):
    return con.execute(sql).fetchall()


def _norm(v):
    return round(v, 6) if isinstance(v, float) else v


def _same_lenient(pred_rows, gold_rows) -> bool:
    """True if ``pred`` could pass as ``gold`` under the loosest EX we might use: row order and
    duplicates ignored, columns matched in any order, extra predicted columns allowed (ABISS App. A
    column-superset relaxation)."""
    if not gold_rows or not pred_rows:
        return not gold_rows and not pred_rows
    wg, wp = len(gold_rows[0]), len(pred_rows[0])
    gold = {tuple(_norm(v) for v in r) for r in gold_rows}
    for cols in itertools.permutations(range(wp), wg):
        if {tuple(_norm(r[c]) for c in cols) for r in pred_rows} == gold:
            return True
    return False


def test_lenient_comparison_helper_itself():
    assert _same_lenient([(1, "a"), (2, "b")], [("b",), ("a",)])          # superset + reorder
    assert not _same_lenient([(1, "a")], [("a",), ("b",)])
    assert _same_lenient([(2.0000001,)], [(2.0,)])


# --------------------------------------------------------------------------- database
def test_embedded_db_is_small_and_built_from_its_sql(tmp_path):
    assert DB_FILE.stat().st_size < 200 * 1024
    rebuilt = Path(build_database(SQL_SOURCE, tmp_path / "u.sqlite"))
    a = sqlite3.connect(DB_FILE.as_uri() + "?mode=ro", uri=True)
    b = sqlite3.connect(rebuilt.as_uri() + "?mode=ro", uri=True)
    try:
        q = "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
        master = a.execute(q).fetchall()
        assert master == b.execute(q).fetchall()
        tables = [n for t, n, _ in master if t == "table"]
        assert sorted(tables) == ["courses", "departments", "professors", "scholarships", "student_courses", "students"]
        for t in tables:
            ra = a.execute(f'SELECT * FROM "{t}" ORDER BY 1, 2').fetchall()
            assert ra == b.execute(f'SELECT * FROM "{t}" ORDER BY 1, 2').fetchall(), t
            assert len(ra) >= 6, t
    finally:
        a.close()
        b.close()


def test_build_database_bad_script_raises_and_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE TABLE t (a INTEGER);\nINSERT INTO missing_table VALUES (1);\n", encoding="utf-8")
    out = tmp_path / "out.sqlite"
    with pytest.raises(DatasetError, match="bad.sql.*missing_table"):
        build_database(bad, out)
    assert not out.exists()
    with pytest.raises(DatasetError, match="SQL script not found"):
        build_database(tmp_path / "nope.sql", out)


def test_schema_has_the_deliberate_gaps():
    schema = read_schema(embedded_db_path())
    # ABISS §3.2.4: no table links professors to courses (missing relationship samples rely on it)
    for table, cols in schema.items():
        assert not ({"prof_id", "course_id"} <= set(cols)), table
        assert not ({"prof_id", "student_id"} <= set(cols)), table
    # ABISS §3.2.1 lexical overlap: the two email columns; §3.2.2 entity ambiguity: two enrolment dates
    assert {"personal_email", "institutional_email", "enrollment_date"} <= set(schema["students"])
    assert "enrollment_date" in schema["student_courses"] and "grade" in schema["student_courses"]
    # no staff table, no letter grades
    assert not any("staff" in t for t in schema)
    assert not any("letter" in c for cols in schema.values() for c in cols)


def test_data_is_consistent(ro_con):
    # grades on the Italian 18-30 scale, honours only with a 30, course enrolment after university enrolment
    lo, hi = ro_con.execute("SELECT MIN(grade), MAX(grade) FROM student_courses").fetchone()
    assert 18 <= lo and hi <= 30
    assert ro_con.execute("SELECT COUNT(*) FROM student_courses WHERE honors = 1 AND grade IS NOT 30").fetchone() == (0,)
    assert ro_con.execute(
        "SELECT COUNT(*) FROM student_courses sc JOIN students s ON s.student_id = sc.student_id "
        "WHERE sc.enrollment_date < s.enrollment_date").fetchone() == (0,)
    assert ro_con.execute("PRAGMA foreign_key_check").fetchall() == []
    assert ro_con.execute("SELECT COUNT(*) FROM student_courses WHERE (grade IS NULL) != (exam_date IS NULL)").fetchone() == (0,)


# --------------------------------------------------------------------------- coverage
def test_at_least_two_per_subcategory_three_per_ambiguous(samples):
    counts = collections.Counter(s.subcategory for s in samples)
    assert set(counts) == set(SUBCATEGORIES)
    for name, sc in SUBCATEGORIES.items():
        assert counts[name] >= (3 if sc.group == "ambiguous" else 2), name
    assert len(samples) >= 26


def test_provenance_style_difficulty(samples):
    assert all(s.provenance == {"source": "embedded", "author": "textsql-clarify"} for s in samples)
    assert all(s.db_id == "university" and s.db_path == embedded_db_path() for s in samples)
    assert len({s.style for s in samples}) >= 3
    assert {"easy", "medium", "hard"} <= {s.difficulty for s in samples}


def test_chain_drift_premise_counts(samples):
    chains = [s for s in samples if s.chain]
    assert len(chains) >= 3
    assert {c.chain.verdict for c in chains} == {"eliminated", "transformed"}
    for s in chains:
        assert s.group == "ambiguous" and s.interpretations, s.id
        assert s.chain.l1.answer != s.chain.l1.alternative and s.chain.l2.answer != s.chain.l2.alternative
    drifts = collections.Counter(s.drift.subtype for s in samples if s.drift)
    assert all(drifts[k] >= 2 for k in ("value", "constraint", "projection")), drifts
    flawed = [s for s in samples if s.premise_flaw]
    assert len(flawed) >= 2
    for s in flawed:
        assert s.group == "unanswerable", s.id
        assert crosswalk(s.premise_flaw) == s.subcategory, s.id


def test_evidence_where_the_subcategory_needs_it(samples):
    for s in samples:
        if s.subcategory == "answerable_with_evidence":
            assert len(s.evidence) >= 1, s.id
        elif s.subcategory == "conflicting_knowledge":
            assert len(s.evidence) >= 2 and len(set(s.evidence)) == len(s.evidence), s.id
        else:
            assert s.evidence == (), s.id


# --------------------------------------------------------------------------- SQL
def test_every_sql_executes_read_only_and_returns_rows(samples, ro_con):
    n = 0
    for s in samples:
        sqls = [s.gold_sql] if s.gold_sql else []
        sqls += [i.gold_sql for i in s.interpretations]
        if s.drift:
            sqls.append(s.drift.post_gold_sql)
        for q in sqls:
            assert _rows(ro_con, q), f"{s.id}: no rows for {q}"
            n += 1
    assert n >= 26 + 21


def test_read_only_connection_refuses_writes(ro_con):
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro_con.execute("DELETE FROM students")


def test_group_rules(samples):
    for s in samples:
        if s.group == "unanswerable":
            assert s.gold_sql is None and len(s.hidden_knowledge) >= 30, s.id
            assert not s.interpretations and not s.drift and not s.chain, s.id
        else:
            assert s.gold_sql, s.id
        if s.group == "ambiguous":
            assert s.hidden_knowledge.strip() and s.interpretations, s.id
            for it in s.interpretations:
                assert it.hidden_knowledge.strip() and it.hidden_knowledge != s.hidden_knowledge, s.id


def test_interpretations_differ_from_gold(samples, ro_con):
    """A baseline submitting interpretations[0] without asking must get EX 0 (any interpretation)."""
    n = 0
    for s in samples:
        if s.group != "ambiguous":
            continue
        gold = _rows(ro_con, s.gold_sql)
        for k, it in enumerate(s.interpretations):
            assert not _same_lenient(_rows(ro_con, it.gold_sql), gold), f"{s.id} interpretations[{k}]"
            n += 1
    assert n >= 24


def test_interpretations_score_zero_with_project_ex(samples):
    try:
        from textsql_clarify.sql.sandbox import SQLiteSandbox
        from textsql_clarify.rewards.execution import relaxed_ex
    except ImportError as e:  # written by another engineer; may not exist yet
        pytest.skip(f"project EX not importable yet: {e}")
    sb = SQLiteSandbox(embedded_db_path())
    for s in samples:
        if s.gold_sql:
            assert relaxed_ex(s.gold_sql, s.gold_sql, sb).score == 1.0, s.id
        for it in s.interpretations:
            assert relaxed_ex(it.gold_sql, s.gold_sql, sb).score == 0.0, s.id


def test_drift_post_result_differs_from_pre(samples, ro_con):
    """TIDE App. B, Table 7 check 5 (observable effect)."""
    for s in samples:
        if s.drift:
            pre, post = _rows(ro_con, s.gold_sql), _rows(ro_con, s.drift.post_gold_sql)
            assert not _same_lenient(post, pre) and not _same_lenient(pre, post), s.id


def test_drift_subtype_matches_algorithm_1(samples):
    try:
        from textsql_clarify.rewards.commitments import drift_subtype
    except ImportError as e:  # written by another engineer; may not exist yet
        pytest.skip(f"textsql_clarify.rewards.commitments.drift_subtype not importable yet: {e}")
    drifts = [s for s in samples if s.drift]
    for s in drifts:
        assert drift_subtype(s.gold_sql, s.drift.post_gold_sql) == s.drift.subtype, s.id


# --------------------------------------------------------------------------- hidden knowledge
_SQL_WORDS = re.compile(r"\b(SELECT|FROM|WHERE|GROUP BY|ORDER BY|JOIN|HAVING)\b")


def test_hidden_knowledge_is_natural_language(samples):
    """No SQL and no schema identifiers (snake_case names) that the question does not use."""
    schema = read_schema(embedded_db_path())
    idents = {t for t in schema if "_" in t} | {c for cols in schema.values() for c in cols if "_" in c}
    for s in samples:
        texts = [s.hidden_knowledge] + [i.hidden_knowledge for i in s.interpretations]
        for t in texts:
            assert not _SQL_WORDS.search(t), (s.id, t)
            for ident in idents:
                if ident not in s.question.lower():
                    assert ident not in t.lower(), (s.id, ident)


def test_missing_relationship_names_both_entities(samples):
    """ABISS §3.2.4: both entities exist; the hidden knowledge names them so a judge can check it."""
    tables = set(read_schema(embedded_db_path()))
    for s in samples:
        if s.subcategory == "missing_relationship":
            named = {t for t in tables if t in s.hidden_knowledge.lower()}
            assert len(named) >= 2, (s.id, named)


def test_embedded_spec_is_default_and_limit(samples):
    assert [s.id for s in load_dataset()] == [s.id for s in samples]
    assert [s.id for s in load_dataset("embedded", limit=5)] == [s.id for s in samples[:5]]
    assert SAMPLES_FILE.is_file()
