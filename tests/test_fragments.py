"""Tests for gold-SQL fragments (ABISS §5.2 fragments; TIDE App. E one atomic node per reply)."""
from __future__ import annotations

import json
import re

import pytest

from textsql_clarify.errors import SQLParseError
from textsql_clarify.simulators.fragments import (
    FRAGMENT_KINDS, Fragment, gold_fragments, technical_topic, vague_text,
)
from textsql_clarify.simulators.leakage import leakage_reasons


def by_kind(sql, kind, ids=()):
    return [f for f in gold_fragments(sql, ids) if f.kind == kind]


def test_order_by_desc_from_spider_dev():
    # Spider dev, concert_singer: "Show name, country, age for all singers ordered by age from the oldest..."
    frags = gold_fragments("SELECT name ,  country ,  age FROM singer ORDER BY age DESC")
    assert frags == [
        Fragment("columns", "SELECT name, country, age", "the name, country and age"),
        Fragment("order", "ORDER BY age DESC", "sorted from highest to lowest by age"),
    ]


def test_limit_5_with_order_from_spider_dev():
    frags = gold_fragments("SELECT Name ,  SurfaceArea FROM country ORDER BY SurfaceArea DESC LIMIT 5")
    assert [f.kind for f in frags] == ["columns", "order", "limit"]
    assert frags[1].text == "sorted from highest to lowest by surface area"
    assert frags[2] == Fragment("limit", "LIMIT 5", "only the first 5 results")
    assert by_kind("SELECT name FROM t ORDER BY a LIMIT 1", "limit")[0].text == "only the top result"
    assert by_kind("SELECT name FROM t LIMIT 1", "limit")[0].text == "only one result"
    assert by_kind("SELECT name FROM t ORDER BY a LIMIT 3 OFFSET 2", "limit")[0].text == \
        "only the first 3 results, skipping the first 2"
    assert by_kind("SELECT name FROM t ORDER BY a", "order")[0].text == "sorted from lowest to highest by a"


def test_distinct_and_filter_from_spider_dev():
    frags = gold_fragments("SELECT DISTINCT country FROM singer WHERE age  >  20")
    assert [f.kind for f in frags] == ["columns", "distinct", "filter"]
    assert frags[1] == Fragment("distinct", "SELECT DISTINCT", "each result listed only once, without duplicates")
    assert frags[2] == Fragment("filter", "WHERE age > 20", "only those where age is more than 20")
    # COUNT(DISTINCT ...) is an aggregate, not SELECT DISTINCT
    assert by_kind("SELECT count(DISTINCT pettype) FROM pets", "distinct") == []
    assert by_kind("SELECT count(DISTINCT pettype) FROM pets", "aggregate")[0].text == \
        "the number of different pettype values"


def test_group_join_having_aggregate():
    sql = ("SELECT T2.name ,  count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id  =  T2.stadium_id "
           "GROUP BY T1.stadium_id HAVING count(*) >= 2")
    frags = gold_fragments(sql)
    assert [f.kind for f in frags] == ["columns", "aggregate", "join", "group", "filter"]
    assert frags[0].text == "the name and the number of records"
    assert frags[2].text == "combined with the stadium records"
    assert frags[3].text == "one result per stadium id"
    assert frags[4] == Fragment("filter", "HAVING COUNT(*) >= 2", "only groups where the number of records is at least 2")


def test_alias_in_order_is_described_by_its_definition_unless_a_schema_name():
    sql = "SELECT year, count(*) AS cnt FROM concert GROUP BY year ORDER BY cnt DESC"
    assert by_kind(sql, "order")[0].text == "sorted from highest to lowest by the number of records"
    assert by_kind(sql, "order", ids=["concert", "year"])[0].text == \
        "sorted from highest to lowest by the number of records"
    assert by_kind(sql, "order", ids=["concert", "year", "cnt"])[0].text == "sorted from highest to lowest by cnt"


def test_filters_in_words():
    texts = [f.text for f in by_kind(
        "SELECT a FROM t WHERE s LIKE '%Hey%' AND u LIKE 'A%' AND v NOT IN ('x', 'y') AND w BETWEEN 1 AND 9 "
        "AND z IS NULL AND k != 3 AND id NOT IN (SELECT id FROM u)", "filter")]
    assert texts == [
        'only those where s contains "Hey"',
        'only those where u starts with "A"',
        'only those where v is none of "x" or "y"',
        "only those where w is between 1 and 9",
        "only those where z is missing",
        "only those where k is not 3",
        "only those where id does not appear among the results of a separate lookup",
    ]


def test_only_the_top_level_query_is_used():
    sql = "SELECT name FROM t WHERE id IN (SELECT id FROM u ORDER BY x DESC LIMIT 3)"
    assert [f.kind for f in gold_fragments(sql)] == ["columns", "filter"]
    union = "SELECT a FROM t WHERE x = 1 UNION SELECT a FROM u ORDER BY a DESC LIMIT 2"
    assert [(f.kind, f.sql) for f in gold_fragments(union)] == [
        ("columns", "SELECT a"), ("distinct", "UNION"), ("order", "ORDER BY a DESC"), ("limit", "LIMIT 2")]
    assert by_kind("SELECT a FROM t UNION ALL SELECT a FROM u", "distinct") == []


@pytest.mark.parametrize("bad", ["", "   ", "SELEC name FROM", "SELECT 1; SELECT 2", "UPDATE t SET a = 1"])
def test_bad_gold_raises_typed_error(bad):
    with pytest.raises(SQLParseError):
        gold_fragments(bad)


def test_spider_dev_all_gold_queries(spider_root):
    """All 1,034 Spider dev gold queries: no SQLParseError, one projection, texts free of SQL."""
    dev = json.loads((spider_root / "dev.json").read_text())
    errors, leaks = [], []
    n_limit = n_distinct = 0
    for d in dev:
        q = d["query"]
        try:
            frags = gold_fragments(q)
        except SQLParseError as e:  # counted, not hidden
            errors.append(e)
            continue
        assert [f.kind for f in frags].count("columns") == 1
        assert all(f.kind in FRAGMENT_KINDS for f in frags)
        for f in frags:
            # no SQL text and not the gold (a filter names its value: the guard licenses values per reply)
            r = [x for x in leakage_reasons(f.text, question="", clarification="", schema_identifiers=(),
                                            gold_sql=q) if not x.startswith("value:")]
            if r:
                leaks.append((q, f, r))
        m = re.search(r"\bLIMIT\s+(\d+)\s*;?\s*$", q, re.IGNORECASE)
        if m and "(" not in q[q.upper().rfind("LIMIT"):]:
            n_limit += 1
            lim = [f for f in frags if f.kind == "limit"]
            assert len(lim) == 1 and (m.group(1) in lim[0].text or "top" in lim[0].text or "one" in lim[0].text), q
        if re.match(r"\s*SELECT\s+DISTINCT\b", q, re.IGNORECASE) and not re.search(r"\b(UNION|INTERSECT|EXCEPT)\b",
                                                                                     q, re.IGNORECASE):
            n_distinct += 1
            assert any(f.kind == "distinct" for f in frags), q
    assert len(dev) == 1034
    assert errors == []
    assert leaks == []
    assert n_limit > 100 and n_distinct > 40  # the checks above really ran on many queries


@pytest.mark.parametrize("clar, topic", [
    ("Should I sort the results?", "order"),
    ("In what order do you want them?", "order"),
    ("Highest first?", "order"),
    ("Do you want them alphabetically?", "order"),
    ("How many results should I return?", "limit"),
    ("Just the top 5?", "limit"),
    ("Only one, or all of them?", "limit"),
    ("Should duplicates be removed?", "distinct"),
    ("Do you want unique values?", "distinct"),
    ("Which columns should I show?", "columns"),
    ("What information do you need for each?", "columns"),
    ("Which orders do you mean, the 2020 ones?", None),
    ("What does recent mean?", None),
    ("Sort by name, and only the top 3?", "order"),   # first mention wins
    ("Only the top 3, sorted by name?", "limit"),
])
def test_technical_topic(clar, topic):
    assert technical_topic(clar) == topic


def test_technical_topic_type_error():
    with pytest.raises(TypeError, match="clarification must be a string"):
        technical_topic(3)


def test_vague_text_names_nothing():
    f_order, f_limit = gold_fragments("SELECT Name FROM country ORDER BY SurfaceArea DESC LIMIT 5")[1:]
    assert vague_text(f_order) == "sorted from highest to lowest"
    assert vague_text(f_limit) == "only the first 5 results"
    assert vague_text(Fragment("columns", "SELECT x", "the x")) == "just what my question asks for"
    with pytest.raises(ValueError, match="unknown fragment kind"):
        vague_text(Fragment("window", "", ""))
