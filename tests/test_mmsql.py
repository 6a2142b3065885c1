"""MMSQL loader (``mmsql:<file>:<spider root>``) on the real ``MMSQL_test.json``, and its rules on files we
write: counts per group, specific samples and dialogues, the stand-alone hidden knowledge and the rule-based
user's relevancy labels on the oracle's clarifications, oracle / no-clarify scores, and bad-record reports."""
from __future__ import annotations

import collections
import json
import warnings

import pytest

from conftest import MeanIs
from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.dialogue_common import (SkippedTurnsWarning, has_stated_reason, is_sql,
                                                      standalone_knowledge)
from textsql_clarify.datasets.mmsql import load_mmsql, read_mmsql
from textsql_clarify.errors import DatasetError


@pytest.fixture
def mmsql_file(shared_data):
    path = shared_data / "mmsql" / "MMSQL_test.json"
    if not path.is_file():
        pytest.skip("real data absent: ../shared/data/mmsql/MMSQL_test.json not found")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def mmsql(mmsql_file, spider_root):
    return read_mmsql(mmsql_file, spider_root)


def _by_id(read):
    return {s.id: s for s in read.samples}


# ----------------------------------------------------------------------------- the real file

def test_counts_per_group_and_subcategory(mmsql):
    """808 user turns (554 answerable, 84 ambiguous, 21 unanswerable, 149 improper): 800 samples, 8 skipped."""
    c = collections.Counter((s.group, s.subcategory) for s in mmsql.samples)
    assert c == {("answerable", "answerable_without_evidence"): 554, ("ambiguous", None): 76,
                 ("unanswerable", None): 21, ("unanswerable", "improper_question"): 149}
    assert len(mmsql.samples) == 800
    types = collections.Counter(s.provenance["mmsql_type"] for s in mmsql.samples)
    assert types == {"answerable": 554, "ambiguous": 76, "unanswerable": 21, "improper": 149}
    assert len({s.id for s in mmsql.samples}) == 800
    # no ambiguous sample has a second reading: MMSQL gives one gold per turn
    assert all(not s.interpretations for s in mmsql.samples)


def test_skipped_turns_are_the_eight_ambiguous_ones_without_the_pattern(mmsql, mmsql_file):
    where = sorted((p.line, p.field) for p in mmsql.skipped)
    assert where == [(43, "turns[6].type"), (57, "turns[4].type"), (68, "turns[1].query"), (87, "turns[9].query"),
                     (98, "turns[6].type"), (134, "turns[6].type"), (138, "turns[2].type"), (148, "turns[9]")]
    assert all(p.file == str(mmsql_file) for p in mmsql.skipped)
    by = {(p.line, p.field): p.message for p in mmsql.skipped}
    assert "answered with SQL, without a clarification" in by[(68, "turns[1].query")]
    assert "typed 'improper'" in by[(134, "turns[6].type")]
    # the replaced question's reply is a sample of its own (dialogue 42, turn 6)
    assert _by_id(mmsql)["mmsql-42-6"].group == "ambiguous"


def test_ambiguous_sample_dialogue_gold_and_hidden_knowledge(mmsql):
    s = _by_id(mmsql)["mmsql-2-4"]
    assert (s.group, s.subcategory, s.db_id) == ("ambiguous", None, "student_transcripts_tracking")
    assert s.question == "Can you show me the last name and city he lives?"
    assert s.gold_sql == ("SELECT T1.last_name, T2.city FROM Students as T1 join addresses as T2 on "
                          "T1.current_address_id = T2.address_id WHERE T1.cell_mobile_number = '09700166582'")
    assert s.hidden_knowledge == "I mean the city of his current address, not the permanent address."
    assert [t.role for t in s.dialogue] == ["user", "system", "user", "system"]
    assert s.dialogue[0].text == "Find the first name of the students who permanently live in the country Haiti."
    assert s.dialogue[1].text == "" and s.dialogue[1].sql.startswith("SELECT T1.first_name FROM Students AS T1 JOIN")
    assert s.dialogue[3].sql == "SELECT first_name FROM Students WHERE cell_mobile_number = '09700166582'"
    assert s.provenance == {"source": "mmsql", "dialogue": 2, "record": 3, "turn": 4, "mmsql_type": "ambiguous",
                            "clarification": "Do you want the city of his current address or the permanent address?",
                            "answer": "current address please", "answer_turn": 6,
                            "hidden_knowledge_rule": "alternative"}


def test_answer_to_a_clarification_is_an_answerable_follow_up(mmsql):
    s = _by_id(mmsql)["mmsql-2-6"]
    assert (s.group, s.subcategory, s.question) == ("answerable", "answerable_without_evidence",
                                                    "current address please")
    assert s.gold_sql == _by_id(mmsql)["mmsql-2-4"].gold_sql
    assert len(s.dialogue) == 6
    assert (s.dialogue[4].role, s.dialogue[4].text) == ("user", "Can you show me the last name and city he lives?")
    assert (s.dialogue[5].role, s.dialogue[5].text, s.dialogue[5].sql) == (
        "system", "Do you want the city of his current address or the permanent address?", None)


def test_unanswerable_and_improper_samples(mmsql):
    d = _by_id(mmsql)
    s = d["mmsql-0-4"]
    assert (s.group, s.subcategory, s.question) == ("unanswerable", None, "Which models are the most popular?")
    assert s.hidden_knowledge == "The database doesn't have any information about popularity."
    # an explanation in MMSQL's query field is text, not SQL, in a later sample's dialogue
    assert d["mmsql-0-2"].dialogue[1].text.startswith("This question cannot be answered because the provided")
    assert d["mmsql-0-2"].dialogue[1].sql is None
    # a bare refusal is no rationale: hidden knowledge absent, the reply kept
    s = d["mmsql-29-8"]
    assert s.hidden_knowledge == "" and s.provenance["hidden_knowledge"] == "absent"
    assert s.provenance["system_reply"] == "Sorry, I cannot answer that question."
    # an explanation that only repeats the question's words cannot be told apart from a refusal
    s = d["mmsql-5-8"]
    assert s.hidden_knowledge == "" and s.provenance["system_reply"].endswith("email addresses of the teachers.")
    s = d["mmsql-0-8"]
    assert (s.group, s.subcategory, s.question, s.hidden_knowledge) == ("unanswerable", "improper_question",
                                                                          "Thanks!", "")
    assert s.provenance["subcategory"] == "mmsql_type" and s.provenance["system_reply"] == "Welcome goodbye!"
    with_reason = sorted(x.id for x in mmsql.samples if x.group == "unanswerable" and x.hidden_knowledge)
    assert with_reason == ["mmsql-0-0", "mmsql-0-4", "mmsql-12-6", "mmsql-121-2", "mmsql-124-2", "mmsql-14-4",
                           "mmsql-21-6"]


def test_difficulty_from_matching_spider_queries(mmsql):
    d = _by_id(mmsql)
    assert d["mmsql-5-0"].gold_sql == "SELECT COUNT(*) FROM teacher" and d["mmsql-5-0"].difficulty == "easy"
    assert d["mmsql-3-0"].difficulty == "hard"
    assert d["mmsql-5-4"].difficulty == "medium"
    assert collections.Counter(s.difficulty for s in mmsql.samples) == {
        "unknown": 691, "medium": 50, "hard": 23, "extra": 19, "easy": 17}


def test_spec_loads_and_warns_about_skipped_turns(mmsql_file, spider_root, cache):
    spec = f"mmsql:{mmsql_file}:{spider_root}"
    with pytest.warns(SkippedTurnsWarning, match=r"8 turn\(s\) skipped"):
        samples = load_dataset(spec, validate=False)
    assert len(samples) == 800 and samples[0].id == "mmsql-0-0"
    assert samples[0].db_path == str(spider_root.resolve() / "database" / "car_1" / "car_1.sqlite")


def test_rule_user_labels_oracle_clarifications_relevant(mmsql):
    """Acceptance: at least 95 % of the oracle's clarifications on ambiguous turns are labelled relevant."""
    amb = [s for s in mmsql.samples if s.group == "ambiguous"]
    trajs, metrics = evaluate(amb, make_agent("oracle"), progress=False)
    labels = [t.user_reply["label"] for tr in trajs for t in tr.turns if t.action_type == "clarify"]
    assert len(labels) == 76
    relevant = labels.count("relevant")
    assert relevant / len(labels) >= 0.95, collections.Counter(labels)
    assert relevant == 75   # the one other: mmsql-117-6, whose confirmation only repeats the question
    # the same figure as the relevant_rate metric (one clarification per episode: the mean of 75 ones, 1 zero)
    assert metrics["by_group"]["ambiguous"]["metrics"]["relevant_rate"] == MeanIs(75 / 76, 76)


def test_oracle_and_no_clarify_scores(mmsql, cache):
    """Oracle: EX 1.0 over every sample whose gold is valid, FB 1.0 over the unanswerable ones with a
    rationale. No-clarify: the same EX on ambiguous samples, since MMSQL gives no second reading."""
    samples = mmsql.samples
    trajs, m = evaluate(samples, make_agent("oracle"), progress=False)
    status = collections.Counter(t.gold_status for t in trajs)
    assert status == {"ok": 569, "none": 170, "empty": 58, "error": 3}
    assert {t.sample_id for t in trajs if t.gold_status == "error"} == {"mmsql-52-2", "mmsql-66-6", "mmsql-100-4"}
    assert m["overall"]["EX"] == MeanIs(1.0, 569)
    assert m["overall"]["FB"] == MeanIs(1.0, 7)
    assert m["overall"]["abstained"] == MeanIs(1.0, 163)
    assert m["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(1.0, 68)
    assert m["by_group"]["ambiguous"]["metrics"]["AR"] == MeanIs(1.0, 76)
    nc_trajs, nc = evaluate([s for s in samples if s.group != "answerable"], make_agent("no-clarify"), progress=False)
    assert nc["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(1.0, 68)
    assert nc["by_group"]["ambiguous"]["metrics"]["AR"] == MeanIs(0.0, 76)
    assert nc["overall"]["FB"] == MeanIs(0.0, 7)


# ----------------------------------------------------------------------------- rules, on files we write

def _write(tmp_path, records):
    p = tmp_path / "mm.json"
    p.write_text(json.dumps(records), encoding="utf-8")
    return p


def test_bad_records_are_all_reported_with_record_and_field(tmp_path, spider_root):
    recs = [
        {"db_name": "car_1", "id": 0, "turns": [
            {"isuser": True, "text": "How many cars?", "type": "answerable"},
            {"isuser": False, "text": "", "query": "SELECT count(*) FROM cars_data"}]},
        {"id": 1, "turns": [{"isuser": True, "text": "Hi", "type": "improper"}]},
        {"db_name": "car_1", "id": 2, "turns": [{"text": "x", "type": "answerable"},
                                                {"isuser": True, "text": "y", "type": "vague"},
                                                {"isuser": False, "text": "", "query": 3}]},
        {"db_name": "no_such_db", "id": 3, "turns": [{"isuser": True, "text": "Hi", "type": "improper"}]},
        "not a dialogue",
    ]
    with pytest.raises(DatasetError) as e:
        read_mmsql(_write(tmp_path, recs), spider_root)
    got = {(p.line, p.field) for p in e.value.problems}
    assert got == {(2, "db_name"), (3, "turns[0].isuser"), (3, "turns[1].type"), (3, "turns[2].query"),
                   (4, "db_name"), (5, "<record>")}
    assert "mm.json:3: field 'turns[1].type'" in str(e.value)


def test_turn_without_a_following_system_turn_is_skipped_with_report(tmp_path, spider_root):
    recs = [{"db_name": "car_1", "id": 7, "turns": [
        {"isuser": True, "text": "How many cars?", "type": "answerable"},
        {"isuser": False, "text": "", "query": "SELECT count(*) FROM cars_data"},
        {"isuser": True, "text": "And how many makers?", "type": "answerable"}]}]
    path = _write(tmp_path, recs)
    with pytest.warns(SkippedTurnsWarning) as w:
        samples = load_mmsql(path, spider_root)
    assert [s.id for s in samples] == ["mmsql-7-0"]
    (p,) = w[0].message.problems
    assert (p.line, p.field) == (1, "turns[2]") and "no system SQL follows" in p.message


def test_duplicate_dialogue_ids_are_an_error(tmp_path, spider_root):
    d = {"db_name": "car_1", "id": 5, "turns": [{"isuser": True, "text": "Thanks", "type": "improper"}]}
    with pytest.raises(DatasetError, match="duplicate sample id 'mmsql-5-0'"):
        read_mmsql(_write(tmp_path, [d, d]), spider_root)


@pytest.mark.parametrize("clar, answer, expected", [
    ("Do you want the city of his current address or the permanent address?", "current address please",
     "I mean the city of his current address, not the permanent address."),
    ("Do you want documents with 'w' in the name or description?", "Description pls",
     "I mean documents with 'w' in the description, not documents with 'w' in the name."),
    ("Did you mean to ask for the weight of the car with makeid 1?", "Yes",
     "I mean the weight of the car with makeid 1."),
    ("Did you mean the full name of the owner?", "YES, but just the first name will be fine.",
     "I mean the full name of the owner. But just the first name will be fine."),
    ("Can you please clarify your question?", "what is the highest weight on the table?",
     "My question is: What is the highest weight on the table?"),
    ("What is ASY?", "dest airport", 'In answer to "What is ASY?": dest airport.'),
    ("By which metric do you mean famous?", "football stadium",
     'In answer to "By which metric do you mean famous?": football stadium.'),
    ("Did you want their ids?", "no, their types", "I do not mean their ids; I mean their types."),
    ("Can you clarify?", "Yes", 'In answer to "Can you clarify?", I said: Yes.'),
])
def test_standalone_knowledge_rules(clar, answer, expected):
    text, _rules = standalone_knowledge([(clar, answer)])
    assert text == expected


def test_stated_reason_and_sql_detection():
    assert has_stated_reason("The database doesn't have any information about popularity.",
                             "Which models are the most popular?")
    assert not has_stated_reason("Sorry, I cannot answer this.", "What ship type was in those battles?")
    assert not has_stated_reason("I am sorry, I cannot understand that question. Can you rephrase it?",
                                 "how is about the summer?")
    assert not has_stated_reason("This question cannot be answered because the database schema provided does not "
                                 "include a field for the email addresses of the teachers.",
                                 "What is the email address of each teacher?")
    assert is_sql("  SELECT 1") and is_sql("(select a from t)") and is_sql("WITH x AS (SELECT 1) SELECT * FROM x")
    assert not is_sql("Sorry, select another question") and not is_sql("") and not is_sql(None)


def test_no_warning_when_nothing_is_skipped(tmp_path, spider_root):
    recs = [{"db_name": "car_1", "id": 1, "turns": [{"isuser": True, "text": "Thanks", "type": "improper"},
                                                    {"isuser": False, "text": "Bye!", "query": ""}]}]
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedTurnsWarning)
        (s,) = load_mmsql(_write(tmp_path, recs), spider_root)
    assert (s.id, s.group, s.subcategory, s.provenance["system_reply"]) == ("mmsql-1-0", "unanswerable",
                                                                            "improper_question", "Bye!")


def test_load_time_validation_flags(mmsql_file, spider_root, cache):
    """The figures of docs/datasets.md: 569 of 630 golds valid; flags by reason (duplicate_gold
    counts double-quoted values as values: 136, 115 when they were read as names). Every ambiguous turn is
    ``indistinguishable``: MMSQL gives one reading, so the agent that never asks submits it."""
    with pytest.warns(SkippedTurnsWarning):
        samples = load_dataset(f"mmsql:{mmsql_file}:{spider_root}")
    flags = collections.Counter(f for s in samples for f in s.flags)
    assert flags == {"duplicate_gold": 136, "gold_empty": 58, "gold_error": 3, "indistinguishable": 76}
    assert sum(1 for s in samples if s.flags) == 248
    assert {s.id for s in samples if "indistinguishable" in s.flags} == {s.id for s in samples if s.group == "ambiguous"}
    bad = {"gold_error", "gold_empty", "gold_timeout", "gold_nondeterministic"}
    assert sum(1 for s in samples if s.gold_sql and not bad & set(s.flags)) == 569
    # the answer to a clarification repeats its ambiguous turn's gold: duplicate by construction
    d = {s.id: s for s in samples}
    assert "duplicate_gold" in d["mmsql-2-6"].flags and "duplicate_gold" not in d["mmsql-2-4"].flags
