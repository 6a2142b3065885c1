"""CoSQL loader (``cosql:<dir>:<spider root>``) on a fixture in CoSQL's published state-tracking layout
(``tests/fixtures/cosql``, over Spider dev databases): samples per turn with their dialogue, the ``" | "``
clarification turns as ambiguous samples, the tokenised-SQL repair, difficulty, oracle scores and the
reports of bad records."""
from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.sql.sandbox import get_sandbox
from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.cosql import find_cosql_file, load_cosql, read_cosql
from textsql_clarify.datasets.dialogue_common import SkippedTurnsWarning, repair_tokenised_sql, sql_parses
from textsql_clarify.errors import DatasetError

FIXTURE = Path(__file__).parent / "fixtures" / "cosql"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def cosql(spider_root):
    return read_cosql(FIXTURE, spider_root)


def _by_id(read):
    return {s.id: s for s in read.samples}


def test_samples_per_turn_and_group(cosql):
    ids = [s.id for s in cosql.samples]
    assert ids == ["cosql-dev-0-0", "cosql-dev-0-2", "cosql-dev-0-4", "cosql-dev-0-6", "cosql-dev-1-0", "cosql-dev-1-2",
                   "cosql-dev-1-4", "cosql-dev-1-6", "cosql-dev-2-0", "cosql-dev-2-2", "cosql-dev-2-4", "cosql-dev-2-6",
                   "cosql-dev-2-8"]
    assert collections.Counter((s.group, s.subcategory) for s in cosql.samples) == {
        ("answerable", "answerable_without_evidence"): 9, ("ambiguous", None): 4}
    assert cosql.skipped == []
    assert all(not s.interpretations for s in cosql.samples)


def test_clarification_turn_is_an_ambiguous_sample_and_a_follow_up(cosql):
    d = _by_id(cosql)
    s = d["cosql-dev-0-4"]
    assert (s.group, s.question, s.db_id) == ("ambiguous", "list the singers from france", "concert_singer")
    assert s.hidden_knowledge == "I mean their names."
    assert s.gold_sql == 'SELECT name FROM singer WHERE country  =  "France"'
    assert [(t.role, t.text, t.sql) for t in s.dialogue] == [
        ("user", "How many singers do we have?", None), ("system", "", "SELECT count ( * ) FROM singer"),
        ("user", "Which of them are 40 or older? Just their names.", None),
        ("system", "", "SELECT name FROM singer WHERE age   >=  40")]
    assert s.provenance["clarifications"] == ["do you mean their names?"] and s.provenance["answers"] == ["yes"]
    f = d["cosql-dev-0-6"]
    assert (f.group, f.question, f.gold_sql) == ("answerable", "yes", s.gold_sql)
    assert [(t.role, t.text) for t in f.dialogue[4:]] == [("user", "list the singers from france"),
                                                          ("system", "do you mean their names?")]
    assert f.provenance["reply_to"] == 4
    # a later turn sees the whole exchange, then the SQL
    later = d["cosql-dev-1-4"]
    assert [(t.role, t.text) for t in later.dialogue] == [
        ("user", "How many car makers does each country have?"),
        ("system", "Do you want the country names or the country ids?"), ("user", "the names please"),
        ("system", "")]
    assert d["cosql-dev-1-0"].hidden_knowledge == "I mean the country names, not the country ids."
    assert d["cosql-dev-2-6"].hidden_knowledge == "I do not mean their ids; I mean their types."


def test_tokenised_sql_is_repaired_and_executes(cosql):
    d = _by_id(cosql)
    assert d["cosql-dev-0-2"].gold_sql == "SELECT name FROM singer WHERE age   >=  40"
    assert d["cosql-dev-0-2"].provenance["sql_repairs"] == ["'> =' -> '>='"]
    assert d["cosql-dev-1-6"].gold_sql == "SELECT count ( * )  FROM CARS_DATA WHERE Cylinders  !=  4"
    assert d["cosql-dev-0-4"].provenance["sql_repairs"] == ['padded value " France "']
    for s in cosql.samples:
        assert sql_parses(s.gold_sql) is None and "sql_parse_error" not in s.provenance
        res = get_sandbox(s.db_path).execute(s.gold_sql)
        assert res.ok and res.rows, s.id
    rows = get_sandbox(d["cosql-dev-0-4"].db_path).execute(d["cosql-dev-0-4"].gold_sql).rows
    assert sorted(r[0] for r in rows) == ["John Nizinik", "Justin Brown", "Rose White", "Tribal King"]
    assert list(get_sandbox(d["cosql-dev-1-6"].db_path).execute(d["cosql-dev-1-6"].gold_sql).rows) == [(22,)]


@pytest.mark.parametrize("sql, fixed", [
    ("SELECT a FROM t WHERE x > = 3 AND y < = 2", "SELECT a FROM t WHERE x >= 3 AND y <= 2"),
    ("SELECT a FROM t WHERE x ! = 3 OR y < > 2", "SELECT a FROM t WHERE x != 3 OR y <> 2"),
    ("SELECT a FROM t WHERE n = ' Haiti '", "SELECT a FROM t WHERE n = 'Haiti'"),
    ("SELECT a FROM t WHERE n = '> = '", "SELECT a FROM t WHERE n = '> = '"),      # inside a literal: untouched
    ("SELECT a FROM t WHERE n LIKE '% w %'", "SELECT a FROM t WHERE n LIKE '% w %'"),  # not padding
    ("SELECT count ( * ) FROM t", "SELECT count ( * ) FROM t"),
])
def test_repair_tokenised_sql(sql, fixed):
    out, changes = repair_tokenised_sql(sql)
    assert out == fixed
    assert bool(changes) == (sql != fixed)
    assert sql_parses(out) is None


def test_difficulty_from_the_parsed_sql(cosql):
    d = _by_id(cosql)
    assert [d[i].difficulty for i in ("cosql-dev-0-0", "cosql-dev-0-2", "cosql-dev-1-0", "cosql-dev-1-4")] == [
        "easy", "easy", "medium", "unknown"]


def test_spec_forms(spider_root, cache, tmp_path):
    a = load_dataset(f"cosql:{FIXTURE}:{spider_root}", validate=False)
    b = load_dataset(f"cosql:{FIXTURE / 'sql_state_tracking'}:{spider_root}", validate=False)
    c = load_dataset(f"cosql:{FIXTURE / 'sql_state_tracking' / 'cosql_dev.json'}:{spider_root}", validate=False)
    assert [s.id for s in a] == [s.id for s in b] == [s.id for s in c]
    assert len(a) == 13
    with pytest.raises(DatasetError, match="expected 'cosql:<dir>:<spider root>'"):
        load_dataset(f"cosql:{FIXTURE}", validate=False)
    with pytest.raises(DatasetError, match="no CoSQL state-tracking file"):
        find_cosql_file(tmp_path)
    with pytest.raises(DatasetError, match="CoSQL path not found"):
        find_cosql_file(tmp_path / "missing")


def test_oracle_and_no_clarify(cosql, cache):
    trajs, m = evaluate(cosql.samples, make_agent("oracle"), progress=False)
    assert m["overall"]["EX"] == MeanIs(1.0, 13)
    labels = [t.user_reply["label"] for tr in trajs for t in tr.turns if t.action_type == "clarify"]
    assert labels == ["relevant"] * 4
    _, nc = evaluate(cosql.samples, make_agent("no-clarify"), progress=False)
    # one reading per ambiguous turn: answering without asking scores the same EX
    assert nc["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(1.0, 4)
    assert nc["by_group"]["ambiguous"]["metrics"]["AR"] == MeanIs(0.0, 4)


def _write(tmp_path, data):
    d = tmp_path / "cosql" / "sql_state_tracking"
    d.mkdir(parents=True)
    (d / "cosql_dev.json").write_text(json.dumps(data), encoding="utf-8")
    return tmp_path / "cosql"


def test_bad_records_are_all_reported(tmp_path, spider_root):
    data = [
        {"database_id": "concert_singer", "interaction": [
            {"utterance": "How many singers?", "query": "SELECT count(*) FROM singer"},
            {"utterance": "And concerts?", "query": ""}]},
        {"interaction": [{"utterance": "x", "query": "SELECT 1"}]},
        {"database_id": "concert_singer", "interaction": []},
        {"database_id": "nope_db", "interaction": [{"utterance": "x", "query": "SELECT 1"}]},
        ["not", "an", "object"],
    ]
    with pytest.raises(DatasetError) as e:
        read_cosql(_write(tmp_path, data), spider_root)
    assert {(p.line, p.field) for p in e.value.problems} == {
        (1, "interaction[1].query"), (2, "database_id"), (3, "interaction"), (4, "database_id"), (5, "<record>")}
    assert "cosql_dev.json:1: field 'interaction[1].query'" in str(e.value)


def test_clarification_without_answer_is_skipped_with_report(tmp_path, spider_root):
    data = [{"database_id": "concert_singer", "interaction": [
        {"utterance": "list the singers | do you mean their names?", "query": "SELECT name FROM singer"},
        {"utterance": "How many are there?", "query": "SELECT count(*) FROM singer"}]}]
    with pytest.warns(SkippedTurnsWarning) as w:
        samples = load_cosql(_write(tmp_path, data), spider_root)
    (p,) = w[0].message.problems
    assert (p.line, p.field) == (1, "interaction[0].utterance")
    assert [s.id for s in samples] == ["cosql-dev-0-2"]
    assert samples[0].dialogue[0].text == "list the singers | do you mean their names?"


def test_unparseable_gold_is_marked_not_dropped(tmp_path, spider_root):
    data = [{"database_id": "concert_singer", "interaction": [
        {"utterance": "How many singers?", "query": "SELECT count ( * FROM singer"}]}]
    (s,) = read_cosql(_write(tmp_path, data), spider_root).samples
    assert "sql_parse_error" in s.provenance


def test_source_fixture_is_never_written(spider_root, tmp_path):
    copy = tmp_path / "fx"
    shutil.copytree(FIXTURE, copy)
    before = (copy / "sql_state_tracking" / "cosql_dev.json").read_bytes()
    read_cosql(copy, spider_root)
    assert (copy / "sql_state_tracking" / "cosql_dev.json").read_bytes() == before


# -- answered turns and replies without content (tests/fixtures/cosql_answered) -----------------
ANSWERED = Path(__file__).parent / "fixtures" / "cosql_answered"


def test_question_answer_new_question_turn_is_a_follow_up_not_a_clarification(spider_root):
    read = read_cosql(ANSWERED, spider_root)
    d = _by_id(read)
    assert "cosql-dev-0-0" not in d  # the answered question has no gold of its own: context only
    f = d["cosql-dev-0-2"]
    assert (f.group, f.question) == ("answerable", "What are their names?")
    assert f.gold_sql == 'SELECT name FROM singer WHERE country  =  "France"'
    assert [(t.role, t.text) for t in f.dialogue] == [("user", "How many singers are from France?"),
                                                      ("system", "There are 4 singers from France.")]
    assert f.provenance["answered_turn"] == 0
    assert f.provenance["system_answers"] == ["There are 4 singers from France."]
    # the next turn sees the exchange, then the SQL
    assert [(t.role, t.text) for t in d["cosql-dev-0-4"].dialogue][:3] == [
        ("user", "How many singers are from France?"), ("system", "There are 4 singers from France."),
        ("user", "What are their names?")]
    assert [s.id for s in read.samples if s.group == "ambiguous"] == ["cosql-dev-1-0", "cosql-dev-1-4"]


def test_hidden_knowledge_carries_the_reply_or_the_sample_is_marked(spider_root):
    read = read_cosql(ANSWERED, spider_root)
    d = _by_id(read)
    both = d["cosql-dev-1-0"]  # "both" to "X or Y?": both alternatives, named
    assert both.hidden_knowledge == "I mean both: the country names and the country ids."
    assert both.provenance["hidden_knowledge_rules"] == ["all_alternatives"]
    assert "hidden_knowledge_contentless" not in both.provenance
    empty = d["cosql-dev-1-4"]  # "I mean both." to a yes/no question: nothing to carry
    assert empty.hidden_knowledge == "I mean both."
    assert empty.provenance["hidden_knowledge_rules"] == ["contentless"]
    assert empty.provenance["hidden_knowledge_contentless"] is True
    (p,) = read.contentless
    assert (p.line, p.field) == (2, "interaction[1].utterance") and "'I mean both.'" in p.message
    with pytest.warns(UserWarning, match="1 ambiguous sample.s. whose hidden knowledge carries no content"):
        load_cosql(ANSWERED, spider_root)
    # the clarification fixture has neither shape
    assert read_cosql(FIXTURE, spider_root).contentless == []
