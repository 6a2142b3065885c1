"""Spider's exact-set-match (Yu et al. 2018, Evaluation) on real Spider dev golds and rewrites of them."""
from __future__ import annotations

import json
from functools import lru_cache

import pytest

from textsql_clarify.errors import SQLParseError
from textsql_clarify.rewards.exact_match import COMPONENTS, exact_match, foreign_keys, spider_query
from textsql_clarify.sql.schema import read_schema


@lru_cache(maxsize=None)
def _dev(root: str) -> list:
    with open(f"{root}/dev.json", encoding="utf-8") as fh:
        return json.load(fh)


@lru_cache(maxsize=None)
def _facts(root: str, db_id: str):
    path = f"{root}/database/{db_id}/{db_id}.sqlite"
    return read_schema(path), foreign_keys(path)


@pytest.fixture
def dev(spider_root):
    return _dev(str(spider_root))


@pytest.fixture
def facts(spider_root):
    return lambda db_id: _facts(str(spider_root), db_id)


def em(dev, facts, i: int, pred: str):
    """Exact match of ``pred`` against dev gold ``i`` on its database."""
    schema, keys = facts(dev[i]["db_id"])
    return exact_match(pred, dev[i]["query"], schema, keys)


def rewrite(sql: str, old: str, new: str) -> str:
    assert old in sql, f"{old!r} not in {sql!r}"
    return sql.replace(old, new)


def test_every_spider_dev_gold_matches_itself(dev, facts):
    verdicts = [em(dev, facts, i, r["query"]) for i, r in enumerate(dev)]
    assert len(verdicts) == 1034
    assert sum(v.match for v in verdicts) == 1034
    assert all(all(v.components[c] for c in COMPONENTS) for v in verdicts)


def test_renamed_table_aliases_match(dev, facts):
    gold = dev[24]["query"]  # SELECT T2.name, T2.capacity FROM concert AS T1 JOIN stadium AS T2 ... GROUP BY ... LIMIT 1
    pred = rewrite(rewrite(gold, "T1", "c"), "T2", "s")
    assert em(dev, facts, 24, pred).match


def test_swapped_select_columns_match(dev, facts):
    gold = dev[810]["query"]  # SELECT sum(Population), avg(SurfaceArea) FROM country WHERE ... AND SurfaceArea > 3000
    pred = rewrite(gold, "sum(Population) ,  avg(SurfaceArea)", "avg(SurfaceArea), sum(Population)")
    assert em(dev, facts, 810, pred).match


def test_reordered_where_conditions_match(dev, facts):
    gold = dev[119]["query"]  # ... WHERE Cylinders = 4 AND YEAR = 1974 ORDER BY Weight ASC LIMIT 1
    pred = rewrite(gold, "Cylinders  =  4 AND YEAR  =  1974", "YEAR = 1974 AND Cylinders = 4")
    assert em(dev, facts, 119, pred).match


def test_values_are_ignored(dev, facts):
    gold = dev[501]["query"]  # WHERE bulgarian_commander = 'Kaloyan' AND latin_commander = 'Baldwin I'
    pred = rewrite(rewrite(gold, "'Kaloyan'", "'Boril'"), "'Baldwin I'", "'Henry'")
    assert em(dev, facts, 501, pred).match
    gold = dev[24]["query"]  # ... WHERE T1.year >= 2014 ... LIMIT 1: a year and a LIMIT value
    assert em(dev, facts, 24, rewrite(rewrite(gold, "2014", "1999"), "LIMIT 1", "LIMIT 5")).match


def test_a_changed_aggregate_does_not_match(dev, facts):
    gold = dev[810]["query"]
    v = em(dev, facts, 810, rewrite(gold, "avg(SurfaceArea)", "max(SurfaceArea)"))
    assert not v.match
    assert not v.components["select"] and v.components["select(no AGG)"]  # same column, other aggregate


def test_an_added_condition_does_not_match(dev, facts):
    gold = dev[273]["query"]  # SELECT name, LOCATION, district FROM shop ORDER BY number_products DESC
    v = em(dev, facts, 273, rewrite(gold, "FROM shop", "FROM shop WHERE district = 'x'"))
    assert not v.match
    assert not v.components["where"] and not v.components["keywords"]


def test_a_flipped_order_direction_does_not_match(dev, facts):
    gold = dev[273]["query"]
    v = em(dev, facts, 273, rewrite(gold, "DESC", "ASC"))
    assert not v.match
    assert not v.components["order"] and not v.components["keywords"]
    assert all(v.components[c] for c in COMPONENTS if c not in ("order", "keywords"))


def test_a_missing_group_by_does_not_match(dev, facts):
    gold = dev[22]["query"]  # SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2 ... GROUP BY T1.stadium_id
    v = em(dev, facts, 22, rewrite(gold, " GROUP BY T1.stadium_id", ""))
    assert not v.match
    assert not v.components["group(no having)"] and not v.components["group"]


def test_intersect_against_union_does_not_match(dev, facts):
    gold = dev[30]["query"]  # SELECT country FROM singer WHERE age > 40 INTERSECT SELECT country ... age < 30
    v = em(dev, facts, 30, rewrite(gold, "INTERSECT", "UNION"))
    assert not v.match and not v.components["IUEN"]


def test_a_select_alias_in_order_by_is_its_expression(dev, facts):
    gold = dev[695]["query"]  # ... GROUP BY T1.contestant_number ORDER BY count(*) ASC LIMIT 1
    pred = rewrite(rewrite(gold, "T1.contestant_name FROM", "T1.contestant_name, count(*) AS n FROM"),
                   "ORDER BY count(*)", "ORDER BY n")
    v = em(dev, facts, 695, pred)
    assert v.components["order"] and not v.components["select"]  # the extra item still counts in SELECT


def test_foreign_key_columns_are_one_column(dev, facts, spider_root):
    schema, keys = facts("concert_singer")
    tables = next(t for t in json.loads((spider_root / "tables.json").read_text()) if t["db_id"] == "concert_singer")
    names = [f"{tables['table_names_original'][t]}.{c}".lower() for t, c in tables["column_names_original"][1:]]
    expected = {tuple(sorted((names[a - 1], names[b - 1]))) for a, b in tables["foreign_keys"]}
    assert {tuple(sorted(p)) for p in keys} == expected  # the SQLite file's keys are Spider's tables.json keys
    gold = dev[22]["query"]
    pred = rewrite(gold, "GROUP BY T1.stadium_id", "GROUP BY T2.stadium_id")  # joined by concert.stadium_id
    assert exact_match(pred, gold, schema, keys).match
    assert not exact_match(pred, gold, schema, ()).match


def test_distinct_is_ignored(dev, facts):
    gold = dev[153]["query"]  # SELECT DISTINCT T1.Year FROM CARS_DATA AS T1 WHERE ...
    assert em(dev, facts, 153, rewrite(gold, "DISTINCT ", "")).match


def test_an_unreadable_prediction_is_a_miss_with_its_reason(dev, facts):
    v = em(dev, facts, 0, "SELEC count(* FROM singer")
    assert not v.match and v.error and not any(v.components.values())
    assert set(v.components) == set(COMPONENTS)


def test_an_unreadable_gold_raises(facts):
    schema, keys = facts("concert_singer")
    with pytest.raises(SQLParseError):
        exact_match("SELECT 1", "SELECT FROM WHERE", schema, keys)


def test_conditions_keep_their_connectors_and_nested_queries(dev, facts):
    schema, keys = facts("concert_singer")
    q = spider_query("SELECT name FROM singer WHERE age > 20 OR singer_id NOT IN (SELECT singer_id FROM "
                     "singer_in_concert)", schema, keys)
    assert q.where_connectors == ("or",)
    negated, op, unit, nested, _ = q.where[1]
    assert (negated, op) == (True, "in") and nested.tables == (("table", "singer_in_concert"),)
    assert q.where[0][3] is None  # the value 20 is dropped


def test_a_common_table_expression_is_not_read_so_a_shadowing_one_cannot_match():
    """Spider's grammar has no WITH: a CTE that shadows ``singer`` with made-up rows is a miss, not EM 1."""
    gold = "SELECT name, country, age FROM singer ORDER BY age DESC"
    fake = "WITH singer(name, country, age) AS (SELECT 'x', 'y', 1) SELECT name, country, age FROM singer ORDER BY age DESC"
    res = exact_match(fake, gold)
    assert not res.match and "WITH" in res.error
    assert exact_match(gold, gold).match
