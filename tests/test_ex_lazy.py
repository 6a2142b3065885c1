"""The EX-only path reads the prediction's SQL only where a verdict depends on it, and keeps projection
analyses under whitespace-normalised text in a cache bounded by bytes."""
from __future__ import annotations

import pytest
import sqlglot

from textsql_clarify.datasets import load_dataset
from textsql_clarify.rewards import ex_sql
from textsql_clarify.rewards.execution import score_execution
from textsql_clarify.sql.sandbox import SQLiteSandbox
from textsql_clarify.sql.textkey import ByteBoundedLRU, normalise_whitespace


def test_whitespace_between_tokens_collapses_and_literals_keep_theirs():
    sql = "SELECT  name ,\n\n  age\tFROM singer WHERE country = 'New  York' AND \"a  b\" = 1 "
    assert normalise_whitespace(sql) == "SELECT name ,\nage FROM singer WHERE country = 'New  York' AND \"a  b\" = 1"
    # a line break that ends a comment stays one
    assert normalise_whitespace("SELECT 1 -- one  two\n   , 2") == "SELECT 1 -- one  two\n, 2"
    assert normalise_whitespace("SELECT 'a b'") != normalise_whitespace("SELECT 'a  b'")


def test_respelled_spider_golds_parse_to_the_normalised_texts_tree(spider_root):
    samples = load_dataset(f"spider:{spider_root}", limit=300)
    for s in samples:
        head, _, rest = s.gold_sql.partition(" ")
        respelled = head + " \t  " + rest.replace(" ", "   ")
        norm = normalise_whitespace(respelled)
        assert sqlglot.parse_one(norm, read="sqlite") == sqlglot.parse_one(respelled, read="sqlite"), s.id
        if "'" not in s.gold_sql and '"' not in s.gold_sql:
            assert norm == normalise_whitespace(s.gold_sql)


def test_byte_bounded_lru_drops_the_least_recently_used_past_its_budget():
    lru = ByteBoundedLRU(100, lambda k, v: len(v))
    lru.put("a", "x" * 40)
    lru.put("b", "y" * 40)
    assert lru.get("a") == "x" * 40  # a is now the most recent
    lru.put("c", "z" * 40)  # 120 > 100: b goes
    assert "b" not in lru and "a" in lru and "c" in lru and lru.bytes == 80
    lru.put("d", "w" * 101)  # larger than the budget: not kept
    assert "d" not in lru and lru.bytes == 80
    with pytest.raises(ValueError):
        ByteBoundedLRU(-1, len)


def test_second_in_order_pass_over_spider_dev_golds_hits_the_projection_cache(spider_root):
    samples = load_dataset(f"spider:{spider_root}")
    distinct = {normalise_whitespace(s.gold_sql) for s in samples}
    assert len(distinct) > 512  # more than the former entry-bounded caches held
    sbs: dict[str, SQLiteSandbox] = {}
    ex_sql._PROJECTIONS.clear()
    for _ in range(2):
        for s in samples:
            sb = sbs.setdefault(s.db_path, SQLiteSandbox(s.db_path))
            ex_sql.projection_info(s.gold_sql, sb.schema)
    before = ex_sql._PROJECTIONS.hits
    for s in samples:  # a third pass, respelled: every lookup is a hit
        quoted = "'" in s.gold_sql or '"' in s.gold_sql
        ex_sql.projection_info(s.gold_sql if quoted else s.gold_sql.replace(" ", "  "), sbs[s.db_path].schema)
    assert ex_sql._PROJECTIONS.hits - before == len(samples)
    assert ex_sql._PROJECTIONS.bytes <= ex_sql.PROJECTION_CACHE_BYTES
    for sb in sbs.values():
        sb.close()


@pytest.fixture
def count_analyses(monkeypatch):
    calls = []
    real = ex_sql._aligned

    def counted(sql, schema):
        calls.append(sql)
        return real(sql, schema)

    monkeypatch.setattr(ex_sql, "_aligned", counted)
    ex_sql._PROJECTIONS.clear()
    return calls


def _first_count_gold(spider_root):
    for s in load_dataset(f"spider:{spider_root}", limit=200):
        if s.gold_sql.lower().startswith("select count(*) from") and " where " not in s.gold_sql.lower():
            return s
    raise AssertionError("no plain count gold in the first 200 Spider dev samples")


def test_a_wrong_row_count_is_judged_without_reading_the_predictions_sql(spider_root, count_analyses):
    s = _first_count_gold(spider_root)
    table = s.gold_sql.split()[-1]
    with SQLiteSandbox(s.db_path) as sb:
        gold = sb.execute_gold(s.id, s.gold_sql)
        pred_sql = f"SELECT * FROM {table}"  # one row per row of the table: another row count
        pred = sb.execute(pred_sql)
        assert pred.row_count != gold.row_count
        relaxed, strict = score_execution(pred, gold, pred_sql, s.gold_sql, sb, gold_key=s.id)
    assert (relaxed.status, relaxed.score, strict.score) == ("mismatch", 0.0, 0.0)
    assert pred_sql not in count_analyses


def test_the_gold_result_from_a_constant_still_reads_the_sql(spider_root, count_analyses):
    """The constant rule applies to a result equal to the gold's: a literal guess of a count does not pass."""
    s = _first_count_gold(spider_root)
    with SQLiteSandbox(s.db_path) as sb:
        gold = sb.execute_gold(s.id, s.gold_sql)
        (n,), = gold.rows
        guess = f"SELECT {n}"
        relaxed, _ = score_execution(sb.execute(guess), gold, guess, s.gold_sql, sb, gold_key=s.id)
        assert relaxed.score == 0.0 and guess in count_analyses
        respelled = s.gold_sql.replace(" ", "   ", 1)
        relaxed, strict = score_execution(sb.execute(respelled), gold, respelled, s.gold_sql, sb, gold_key=s.id)
        assert (relaxed.score, strict.score) == (1.0, 1.0)
        again = s.gold_sql.replace(" ", " \t ", 1)  # another spelling of the same tokens: its analysis is kept
        relaxed, strict = score_execution(sb.execute(again), gold, again, s.gold_sql, sb, gold_key=s.id)
    assert (relaxed.score, strict.score) == (1.0, 1.0)
    assert again not in count_analyses
