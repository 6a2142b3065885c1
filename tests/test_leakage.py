"""Tests for the simulated user's leakage guard (TIDE App. E validator; ABISS §5.2 no-SQL answers)."""
from __future__ import annotations

import json

import pytest

from textsql_clarify.simulators.leakage import (
    identifier_forms, identifier_used, is_full_gold_leak, leakage_reasons,
)
from textsql_clarify.sqlschema import read_schema

IDS = ("singer", "singer_id", "name", "country", "song_name", "age", "StuID", "home_city")


def reasons(reply, question="How old is each singer?", clarification="", ids=IDS, gold=None):
    return leakage_reasons(reply, question=question, clarification=clarification, schema_identifiers=ids,
                           gold_sql=gold)


def test_clean_reply_has_no_reasons():
    assert reasons("Please have them sorted from highest to lowest.") == []
    assert reasons("Recent means offered in 2023 or later.") == []


@pytest.mark.parametrize("reply", [
    "Just run SELECT name FROM singer, thanks",
    "use count(*) for that",
    "join concert c on c.id = s.id",
    "where age >= 20 please",
    "sort with ORDER BY age DESC",
    "T1.singer_id = T2.singer_id",
    "DELETE FROM singer",
])
def test_sql_patterns_are_caught(reply):
    assert "sql" in reasons(reply, ids=())


def test_statement_found_only_by_sqlglot():
    # no keyword pattern matches DDL; sqlglot parses it as a CREATE statement
    assert reasons("CREATE TABLE x (a INT)", ids=()) == ["sql"]


@pytest.mark.parametrize("reply", [
    "Update my address later",      # sqlglot parses it as UPDATE, but with no SET it is not SQL
    "Delete it",
    "Sorted from highest to lowest by age.",
    "With pleasure, only the first 5 results.",
    "Yes, order them by age, oldest first.",
])
def test_plain_sentences_are_not_sql(reply):
    assert "sql" not in reasons(reply, question="How old is each singer, by age?", ids=())


def test_full_gold_leak_ignores_case_and_whitespace():
    gold = "SELECT name ,  country ,  age FROM singer ORDER BY age DESC"
    reply = "Here: select name, country, age\nfrom singer order by age desc;"
    assert is_full_gold_leak(reply, gold)
    assert reasons(reply, gold=gold, ids=()) == ["sql", "gold"]
    # a part of the gold is not a full leak
    assert not is_full_gold_leak("order by age desc", gold)
    assert not is_full_gold_leak("anything", None)


def test_unused_identifier_is_reported_in_every_form():
    q = "How old is each singer?"
    assert reasons("The stuid is 3.", question=q) == ["identifier:stuid"]
    assert reasons("The stu id is 3.", question=q) == ["identifier:stuid"]
    assert reasons("The STU_ID is 3.", question=q) == ["identifier:stuid"]
    assert reasons("Their home city matters.", question=q) == ["identifier:home_city"]
    assert reasons("home_city and song name", question=q) == ["identifier:home_city", "identifier:name",
                                                           "identifier:song_name"]


def test_identifier_used_by_question_or_clarification_is_allowed():
    assert reasons("Just the name.", question="What are the names of singers?") == []
    assert reasons("Just the name.", question="How old?") == ["identifier:name"]
    assert reasons("Just the name.", question="How old?", clarification="Do you want the name?") == []
    assert reasons("By home city.", question="Group students by their home cities") == []
    assert reasons("By stu id.", question="List each StuID") == []


def test_whole_words_only_and_case_insensitive():
    assert reasons("The average page count.", question="x") == []        # age inside average / page
    assert reasons("By AGE, please.", question="x") == ["identifier:age"]
    assert reasons("Nationality does not matter.", question="x", ids=("nation",)) == []


def test_one_letter_identifiers_are_skipped_and_bad_types_raise():
    assert reasons("a b c", question="x", ids=("a", "b")) == []
    with pytest.raises(TypeError, match="reply must be a string"):
        leakage_reasons(None, question="q", clarification="c", schema_identifiers=(), gold_sql=None)


def test_identifier_forms_and_use():
    assert identifier_forms("StuID") == {"stuid", "stu_id", "stu id"}
    assert identifier_forms("home_city") == {"home_city", "home city"}
    assert identifier_used("name", "What are the names?")
    assert not identifier_used("surfacearea", "What is the area?")
    assert identifier_used("SurfaceArea", "the 5 largest surface areas")


def test_real_spider_questions_and_gold(spider_root):
    """On all 1,034 Spider dev items: a question never leaks its own words, and every gold is caught."""
    dev = json.loads((spider_root / "dev.json").read_text())
    assert len(dev) == 1034
    missed_sql, self_leaks = [], []
    for d in dev:
        ids = {c for t, cols in read_schema(str(spider_root / "database" / d["db_id"] / f"{d['db_id']}.sqlite")).items()
               for c in [t, *cols]}
        r = leakage_reasons(d["query"], question=d["question"], clarification="", schema_identifiers=ids,
                            gold_sql=d["query"])
        if r[:2] != ["sql", "gold"]:
            missed_sql.append(d["query"])
        own = leakage_reasons(d["question"], question=d["question"], clarification="", schema_identifiers=ids,
                              gold_sql=d["query"])
        if own:
            self_leaks.append((d["question"], own))
    assert missed_sql == []
    assert self_leaks == []
