"""Relaxed EX (ABISS App. A): each rule, and generalisations of each kind in ../shared/cases."""
from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from conftest import generous_bound
from hypothesis import given, settings
from hypothesis import strategies as st

from textsql_clarify.sql.sandbox import ExecutionResult, SQLiteSandbox
from textsql_clarify.errors import SQLParseError
from textsql_clarify.rewards.execution import (
    EXVerdict,
    _ordered_by_tokens,
    compare_results,
    gold_is_ordered,
    is_empty_result,
    normalise_value,
    relaxed_ex,
)


def res(columns, rows, **kw) -> ExecutionResult:
    return ExecutionResult(tuple(columns), tuple(tuple(r) for r in rows), 0.001, **kw)


def err(kind: str, message: str = "boom") -> ExecutionResult:
    return ExecutionResult((), (), 0.001, error_kind=kind, error_message=message)


@pytest.fixture
def sandbox(tmp_path: Path):
    path = tmp_path / "shop.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, colour TEXT, price REAL, stock INTEGER, note TEXT);
        INSERT INTO item VALUES (1,'pen','red',1.5,10,NULL),(2,'pen','red',1.5,10,''),(3,'ink','blue',3.0,0,'x'),
                                (4,'cap','blue',3,NULL,NULL),(5,'pad','red',0.1,5,'y');
    """)
    con.commit()
    con.close()
    with SQLiteSandbox(path, timeout_s=0.5) as sb:
        yield sb


# -- gold_is_ordered ---------------------------------------------------------------------------
@pytest.mark.parametrize("sql, ordered", [
    ("SELECT name FROM item ORDER BY price", True),
    ("SELECT name FROM item ORDER BY price DESC LIMIT 1", True),
    ("SELECT name FROM item LIMIT 3", False),
    ("SELECT name FROM (SELECT name FROM item ORDER BY price)", False),
    ("SELECT name FROM item WHERE id IN (SELECT id FROM item ORDER BY price LIMIT 2)", False),
    ("WITH c AS (SELECT name FROM item ORDER BY id) SELECT name FROM c", False),
    ("WITH c AS (SELECT name, id FROM item) SELECT name FROM c ORDER BY id", True),
    ("SELECT name FROM item UNION SELECT colour FROM item ORDER BY 1", True),
    ("SELECT name FROM item EXCEPT SELECT name FROM item WHERE id = 1", False),
    ("(SELECT name FROM item ORDER BY id)", True),
])
def test_gold_is_ordered(sql, ordered):
    assert gold_is_ordered(sql) is ordered


def test_gold_is_ordered_token_fallback_and_errors():
    assert _ordered_by_tokens("SELECT a FROM (SELECT a FROM t ORDER BY a) ORDER BY a") is True
    assert _ordered_by_tokens("SELECT a FROM (SELECT a FROM t ORDER BY a)") is False
    with pytest.raises(SQLParseError):
        gold_is_ordered("   ")


# -- value rules -----------------------------------------------------------------------------
@pytest.mark.parametrize("gold_value, pred_value, same", [
    (None, 0, False), (None, "", False), (None, 0.0, False), (0, "", False), (None, None, True),
    (3, 3.0, True), (0.1 + 0.2, 0.3, True), (2 / 3, 0.666666666667, True), (1.0, 1.0000001, False),
    ("3", 3, False), ("Oslo", "oslo", False), (b"\x00", b"\x00", True), (-0.0, 0, True),
])
def test_value_equality(gold_value, pred_value, same):
    v = compare_results(res(["p"], [[pred_value], [7]]), res(["g"], [[gold_value], [7]]), ordered=False)
    assert v.status == ("match" if same else "mismatch"), v
    assert normalise_value(3.0) == 3 and normalise_value(None) is None


def test_null_vs_total_grouped_generalised(sandbox):
    # ex13's kind: an all-NULL group under SUM is NULL, under TOTAL 0.0, under COALESCE 0
    gold = "SELECT colour, SUM(stock) FROM item WHERE id >= 4 GROUP BY colour"
    for pred in ("SELECT colour, TOTAL(stock) FROM item WHERE id >= 4 GROUP BY colour",
                 "SELECT colour, COALESCE(SUM(stock), 0) FROM item WHERE id >= 4 GROUP BY colour",
                 "SELECT colour, IFNULL(SUM(stock), '') FROM item WHERE id >= 4 GROUP BY colour"):
        assert relaxed_ex(pred, gold, sandbox).status == "mismatch", pred
    assert relaxed_ex("SELECT SUM(stock), colour FROM item WHERE id >= 4 GROUP BY colour", gold,
                      sandbox).score == 1.0


# -- multiplicity (ex02, ex18) ---------------------------------------------------------------
def test_distinct_dropped_multi_column(sandbox):
    v = relaxed_ex("SELECT name, colour FROM item", "SELECT DISTINCT name, colour FROM item", sandbox)
    assert v.status == "mismatch" and "5 row" in v.reason


def test_select_star_does_not_pass_distinct_gold(sandbox):
    for pred in ("SELECT * FROM item", "SELECT DISTINCT colour, name FROM item", "SELECT colour, id FROM item"):
        v = relaxed_ex(pred, "SELECT DISTINCT colour FROM item", sandbox)
        assert v.score == 0.0, pred
    assert relaxed_ex("SELECT DISTINCT colour FROM item", "SELECT DISTINCT colour FROM item", sandbox).score == 1.0


def test_projected_bag_keeps_duplicates():
    gold = res(["c"], [["a"], ["b"]])
    pred = res(["c", "n"], [["a", 1], ["a", 2]])  # same row count, wrong multiplicity after projection
    assert compare_results(pred, gold, ordered=False).status == "mismatch"


# -- column supersets and pairing (ex17, ex19, ex04) -----------------------------------------
def test_superset_with_duplicated_columns(sandbox):
    v = relaxed_ex("SELECT id, name, name, price FROM item WHERE colour = 'red'",
                   "SELECT name FROM item WHERE colour = 'red'", sandbox)
    assert v.score == 1.0 and v.column_mapping == (1,)
    v = relaxed_ex("SELECT price, name, id, name FROM item", "SELECT name, name FROM item", sandbox)
    assert v.score == 1.0 and v.column_mapping == (1, 3)
    v = relaxed_ex("SELECT name FROM item", "SELECT name, name FROM item", sandbox)
    assert v.status == "mismatch" and "1 column" in v.reason


def test_column_order_and_names_ignored(sandbox):
    v = relaxed_ex("SELECT price AS cost, name AS what FROM item", "SELECT name, price FROM item", sandbox)
    assert v.score == 1.0 and v.column_mapping == (1, 0)


def test_same_bag_columns_swapped_within_self_join():
    # ex19's kind with three same-named columns: pairing must follow the values, one-to-one
    gold_rows = [("Oslo", "Rome", "Rome"), ("Rome", "Lima", "Oslo"), ("Lima", "Oslo", "Lima")]
    gold = res(["town"] * 3, gold_rows)
    pred = res(["town"] * 3, [(g[1], g[2], g[0]) for g in reversed(gold_rows)])
    assert compare_results(res(["town"] * 3, reversed(gold_rows)), gold, ordered=False).column_mapping == (0, 1, 2)
    v = compare_results(pred, gold, ordered=False)
    assert v.score == 1.0 and v.column_mapping == (2, 0, 1)


def test_row_alignment_lost_three_columns():
    # ex04's kind: every column's bag matches, but no pairing keeps the rows together
    gold = res(["n", "a", "b"], [["x", 1, 2], ["y", 2, 3], ["z", 3, 1]])
    pred = res(["n", "a", "b"], [["x", 1, 3], ["y", 2, 1], ["z", 3, 2]])
    v = compare_results(pred, gold, ordered=False)
    assert v.status == "mismatch" and v.column_mapping is None
    swapped = res(["n", "b", "a"], [["z", 1, 3], ["x", 2, 1], ["y", 3, 2]])
    assert compare_results(swapped, gold, ordered=False).column_mapping == (0, 2, 1)


# -- order -----------------------------------------------------------------------------------
def test_row_order_only_matters_for_ordered_gold(sandbox):
    gold_unordered = "SELECT name, price FROM item WHERE id < 4"
    assert relaxed_ex("SELECT price, name FROM item WHERE id < 4 ORDER BY id DESC", gold_unordered, sandbox).score == 1.0
    gold_ordered = "SELECT id, name FROM item ORDER BY id"
    assert relaxed_ex("SELECT name, id FROM item ORDER BY id", gold_ordered, sandbox).score == 1.0
    v = relaxed_ex("SELECT name, id FROM item ORDER BY id DESC", gold_ordered, sandbox)
    assert v.status == "mismatch" and "sequence" in v.reason


def test_ordered_gold_with_duplicate_columns():
    gold = res(["a", "a"], [[1, 1], [2, 2]])
    assert compare_results(res(["a", "b", "a"], [[1, 9, 1], [2, 8, 2]]), gold, ordered=True).column_mapping == (0, 2)
    assert compare_results(res(["a", "b"], [[1, 9], [2, 8]]), gold, ordered=True).status == "mismatch"


# -- empty and failed results (ex16, ex21, ex22) ---------------------------------------------
def test_empty_gold_never_rewarded(sandbox):
    v = relaxed_ex("SELECT name FROM item WHERE id = -1", "SELECT name FROM item WHERE id = 99", sandbox)
    assert v.status == "gold_empty" and v.score is None and v.reward == 0.0 and not v.counts_in_mean
    # all-NULL gold (aggregate over empty input) is empty too, even when the prediction agrees
    v = relaxed_ex("SELECT max(price) FROM item WHERE id > 50", "SELECT avg(price) FROM item WHERE id > 50", sandbox)
    assert v.status == "gold_empty" and v.reward == 0.0


def test_empty_gold_skips_the_prediction(sandbox, monkeypatch):
    runaway = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n"
    ran = []
    real_execute = sandbox.execute
    monkeypatch.setattr(sandbox, "execute", lambda sql, *a, **k: ran.append(sql) or real_execute(sql, *a, **k))
    v = relaxed_ex(runaway, "SELECT name FROM item WHERE 0", sandbox)
    assert v.status == "gold_empty"
    assert runaway not in ran  # the gold alone decided: the prediction never ran


def test_is_empty_result():
    assert is_empty_result(res(["a"], []))
    assert is_empty_result(res(["a", "b"], [[None, None], [None, None]]))
    assert not is_empty_result(res(["a", "b"], [[None, 0]]))
    assert not is_empty_result(res(["c"], [[0]]))
    with pytest.raises(ValueError, match="syntax"):
        is_empty_result(err("syntax"))


def test_zero_count_is_an_answer(sandbox):
    gold = "SELECT count(*) FROM item WHERE name = 'clip'"
    assert relaxed_ex("SELECT count(*) FROM item WHERE name = 'clip' GROUP BY name", gold, sandbox).status == "mismatch"
    assert relaxed_ex("SELECT count(id) FROM item WHERE name = 'clip'", gold, sandbox).score == 1.0


@pytest.mark.parametrize("kind", ["syntax", "forbidden", "timeout", "runtime"])
def test_pred_errors_scored_zero(kind):
    v = compare_results(err(kind, "msg"), res(["a"], [[1]]), ordered=False)
    assert v.status == "pred_error" and v.score == 0.0 and kind in v.reason


@pytest.mark.parametrize("kind", ["syntax", "forbidden", "timeout", "runtime"])
def test_gold_errors_make_the_sample_invalid(kind):
    v = compare_results(res(["a"], [[1]]), err(kind, "msg"), ordered=False)
    assert v.status == "gold_error" and v.score is None and not v.counts_in_mean


def test_gold_error_over_sandbox(sandbox):
    v = relaxed_ex("SELECT name FROM item", "SELECT nme FROM item", sandbox)
    assert v.status == "gold_error" and "runtime" in v.reason
    v = relaxed_ex("SELECT name FROM item", "DELETE FROM item", sandbox)
    assert v.status == "gold_error" and "forbidden" in v.reason


def test_truncation():
    gold = res(["a"], [[1], [2]])
    assert compare_results(res(["a"], [[1], [2]], truncated=True), gold, ordered=False).status == "mismatch"
    v = compare_results(gold, res(["a"], [[1], [2]], truncated=True), ordered=False)
    assert v.status == "gold_error" and "truncated" in v.reason


# -- search budget and scale -----------------------------------------------------------------
def test_many_same_bag_columns_match_without_blowup():
    rng = random.Random(7)
    n_rows, n_cols = 200, 40
    base = list(range(n_rows))
    gold_cols = [rng.sample(base, n_rows) for _ in range(n_cols)]  # every column has the same bag
    extra = [rng.sample(base, n_rows) for _ in range(10)]
    pred_order = list(range(n_cols + 10))
    rng.shuffle(pred_order)
    all_cols = gold_cols + extra
    pred_cols = [all_cols[j] for j in pred_order]
    row_perm = rng.sample(range(n_rows), n_rows)
    gold = res([f"g{i}" for i in range(n_cols)], list(zip(*gold_cols)))
    pred = res([f"p{j}" for j in range(n_cols + 10)], [tuple(c[r] for c in pred_cols) for r in row_perm])
    with generous_bound("the column search over 10 extra columns", seconds=30):
        v = compare_results(pred, gold, ordered=False, max_extra_columns=None)  # the search alone, unbounded width
    assert v.score == 1.0
    assert v.column_mapping == tuple(pred_order.index(i) for i in range(n_cols))
    # under the default bound the 10 same-typed extra columns are too many guesses
    v = compare_results(pred, gold, ordered=False)
    assert v.status == "mismatch" and "10 extra column(s)" in v.reason


def test_search_budget_gives_undetermined():
    gold = res(["a", "b", "c"], [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    pred = res(["c", "b", "a"], [[3, 2, 1], [1, 3, 2], [2, 1, 3]])  # every column has the same bag
    mapping = compare_results(pred, gold, ordered=False).column_mapping
    assert mapping is not None and mapping != (0, 1, 2)  # the identity fails; (0, 2, 1) and (2, 1, 0) work
    assert sorted(tuple(r[j] for j in mapping) for r in pred.rows) == sorted(gold.rows)
    v = compare_results(pred, gold, ordered=False, search_budget=4)
    assert v.status == "undetermined" and v.score == 0.0 and v.counts_in_mean


def test_verdict_validation():
    with pytest.raises(ValueError, match="status"):
        EXVerdict(1.0, "great", "")
    with pytest.raises(ValueError, match="needs score"):
        EXVerdict(1.0, "gold_empty", "")
    with pytest.raises(ValueError, match="needs score"):
        EXVerdict(None, "mismatch", "")


# -- properties ------------------------------------------------------------------------------
cell = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["", "a", "b"]), st.sampled_from([0.5, 2.0]))
# extra prediction columns draw from values gold never holds, so none can stand in for a gold column
extra_cell = st.sampled_from(["x", "y", 100, 101.5])


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n_cols=st.integers(1, 4), n_extra=st.integers(0, 2), n_rows=st.integers(1, 6))
def test_shuffled_superset_matches_and_mutation_breaks(data, n_cols, n_extra, n_rows):
    rows = data.draw(st.lists(st.tuples(*[cell] * n_cols), min_size=n_rows, max_size=n_rows))
    if all(v is None for r in rows for v in r):
        rows[0] = (7,) + tuple(rows[0][1:])
    gold = res([f"g{i}" for i in range(n_cols)], rows)
    extra = data.draw(st.lists(st.tuples(*[extra_cell] * n_extra), min_size=n_rows, max_size=n_rows))
    wide = [tuple(r) + tuple(e) for r, e in zip(rows, extra)]
    col_perm = data.draw(st.permutations(range(n_cols + n_extra)))
    row_perm = data.draw(st.permutations(range(n_rows)))
    pred_rows = [tuple(wide[r][j] for j in col_perm) for r in row_perm]
    v = compare_results(res([f"p{j}" for j in col_perm], pred_rows), gold, ordered=False,
                        max_extra_columns=None, max_extra_columns_single_row=None)
    assert v.score == 1.0
    # under the default bound: a match exactly when few enough distinct extra columns share a gold column's
    # value types (recounted here from the raw cells: number, text, NULL); against a one-row gold the extra
    # columns of other types count once more, as one block
    def types(col):
        return sorted("n" if x is None else "s" if isinstance(x, str) else "d" for x in col)
    gold_types = [types(c) for c in zip(*rows)]
    distinct_extra = {c for c in zip(*extra) if types(c) in gold_types} if n_extra else set()
    other_block = n_rows == 1 and n_extra > 0 and any(types(c) not in gold_types for c in zip(*extra))
    cap = 1 if n_rows == 1 else 3
    bounded = compare_results(res([f"p{j}" for j in col_perm], pred_rows), gold, ordered=False)
    assert bounded.score == (1.0 if len(distinct_extra) + other_block <= cap else 0.0), (bounded, distinct_extra)
    projected = sorted((tuple(r[j] for j in v.column_mapping) for r in pred_rows), key=repr)
    assert projected == sorted(rows, key=repr)
    # a value that occurs nowhere in gold, put into a gold column of one prediction row
    target = col_perm.index(data.draw(st.integers(0, n_cols - 1)))
    broken = [list(r) for r in pred_rows]
    broken[0][target] = "never-in-gold"
    assert compare_results(res(["p"] * len(col_perm), broken), gold, ordered=False).score == 0.0


# -- width bound and constant columns (EX that cannot be hit by width) ------------------------
@pytest.fixture
def games(tmp_path: Path):
    path = tmp_path / "games.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE team(id INTEGER PRIMARY KEY, name TEXT, city TEXT, wins INTEGER, rating REAL,
                          a INTEGER, b INTEGER, c INTEGER, d INTEGER);
        INSERT INTO team VALUES (1,'owls','oslo',3,2.345,10,100,7,0),(2,'cats','rome',5,1.115,20,200,8,0),
                                (3,'bats','oslo',5,4.5,30,300,9,0),(4,'rats','lima',1,3.25,40,400,6,1);
    """)
    con.commit()
    con.close()
    with SQLiteSandbox(path, timeout_s=0.5) as sb:
        yield sb


@pytest.mark.parametrize("pred", [
    "SELECT " + ", ".join(str(i) for i in range(1701)),        # the width hack: one row of constants
    "SELECT 0, 1, 2, 3, 4",                                     # four extras, all constants
    "SELECT 4",                                                 # one constant, the right value
    "SELECT a, b FROM (SELECT 3 AS a, 4 AS b)",                 # constants through a derived table
    "WITH c(x) AS (SELECT 4) SELECT x FROM c",                  # through a CTE
    "SELECT * FROM (SELECT 3, 4)",                              # star over constants is expanded
    "SELECT 4 FROM team LIMIT 1",                               # a constant read once per row
    "SELECT (SELECT 4)",                                        # a constant scalar subquery
    "SELECT 4 UNION SELECT 4",                                  # a compound of constants
    "SELECT (SELECT count(*) FROM team), (SELECT max(wins) FROM team), (SELECT min(wins) FROM team)",
])
def test_width_and_constant_hacks_fail(games, pred):
    gold = "SELECT count(*) FROM team"  # one row: (4,)
    assert relaxed_ex(pred, gold, games).score == 0.0, pred
    assert relaxed_ex(pred, gold, games, strict=True).score == 0.0, pred


def test_data_columns_pass_where_constants_fail(games):
    gold = "SELECT count(*) FROM team"
    assert relaxed_ex("SELECT count(*), max(wins) FROM team", gold, games).score == 1.0  # one extra
    assert relaxed_ex("SELECT count(id) FROM team", gold, games, strict=True).score == 1.0
    v = relaxed_ex("SELECT 4, max(wins) FROM team", gold, games)
    assert v.status == "mismatch" and "constant" in v.reason
    # arithmetic constants built from data: the probe sees that the value does not depend on what is read
    v = relaxed_ex("SELECT max(rowid) - max(rowid) + 4 FROM team", gold, games)
    assert v.score == 0.0 and "constant" in v.reason, v
    # a filter no row can pass makes its aggregate a constant too
    assert relaxed_ex("SELECT count(*) FROM team WHERE id <> id", "SELECT count(*) FROM team WHERE wins > 99",
                      games).score == 0.0
    assert relaxed_ex("SELECT count(*) FROM team WHERE wins > 1000", "SELECT count(*) FROM team WHERE wins > 99",
                      games).score == 1.0  # a data filter that happens to hold for no row stays data
    assert relaxed_ex("SELECT max(id)-max(id)+3, max(id)-max(id)+4, max(id)-max(id)+5 FROM team",
                      gold, games).score == 0.0
    # a constant gold column pairs with a constant prediction column
    assert relaxed_ex("SELECT 'yes', count(*) FROM team", "SELECT 'yes', count(*) FROM team", games).score == 1.0


def test_wide_select_star_is_bounded(games):
    gold = "SELECT name FROM team"  # text gold: only text extras (city) could stand for it
    assert relaxed_ex("SELECT * FROM team", gold, games).score == 1.0
    gold = "SELECT wins FROM team"  # numeric gold: id, rating, a, b, c, d are 6 numeric extras
    v = relaxed_ex("SELECT * FROM team", gold, games)
    assert v.status == "mismatch" and "6 extra column(s)" in v.reason and "at most 3" in v.reason
    assert relaxed_ex("SELECT wins, a, b, c FROM team", gold, games).score == 1.0
    assert relaxed_ex("SELECT wins, a, b, c, d FROM team", gold, games).score == 0.0
    # identical columns count once: repeating a column buys nothing and costs nothing
    assert relaxed_ex("SELECT wins, id, id, id, id, a, a FROM team", gold, games).score == 1.0
    assert relaxed_ex("SELECT wins, wins, wins, wins, wins FROM team", gold, games).score == 1.0


def test_extra_column_count():
    from textsql_clarify.rewards.execution import extra_columns
    g = [(1, 2)]
    assert extra_columns(g, [(1, 2), (3, 4), (3, 4)]) == 1          # a repeated column counts once
    assert extra_columns(g, [(1, 2), ("a", "b"), ("c", "d")]) == 0  # text cannot stand for numbers
    assert extra_columns(g, [(1, 2), (None, 5), (5, 6)]) == 1       # other mix of types: no candidate
    assert extra_columns([(1,), ("x",)], [(1,), ("x",), (2,), ("y",)]) == 2
    # one row: the columns of types no gold column has count as one block, however many
    assert extra_columns([(1,)], [(1,), ("a",), ("b",), (None,)], single_row=True) == 1
    assert extra_columns([(1,)], [(1,), (0,), ("a",)], single_row=True) == 2
    assert extra_columns([(1,)], [(1,), (0,), ("a",)]) == 1          # several rows: other types are free


# -- ex_strict ---------------------------------------------------------------------------------
def test_ex_strict(games):
    gold = "SELECT name, wins FROM team WHERE city = 'oslo'"
    assert relaxed_ex("SELECT wins, name FROM team WHERE city = 'oslo'", gold, games, strict=True).score == 1.0
    assert relaxed_ex("SELECT id, name, wins FROM team WHERE city = 'oslo'", gold, games).score == 1.0
    v = relaxed_ex("SELECT id, name, wins FROM team WHERE city = 'oslo'", gold, games, strict=True)
    assert v.status == "mismatch" and "strict" in v.reason
    ordered = "SELECT name FROM team ORDER BY rating"
    assert relaxed_ex("SELECT name FROM team ORDER BY rating DESC", ordered, games, strict=True).score == 0.0


# -- limit_ties --------------------------------------------------------------------------------
def test_limit_ties(games):
    gold = "SELECT name FROM team ORDER BY wins DESC LIMIT 1"  # cats and bats both have 5 wins
    kept = games.execute(gold).rows[0][0]
    other = ({"cats", "bats"} - {kept}).pop()
    pred = f"SELECT name FROM team WHERE name = '{other}'"
    v = relaxed_ex(pred, gold, games)
    assert v.score == 1.0 and "ties" in v.reason
    assert relaxed_ex(pred, gold, games, options={"limit_ties": False}).score == 0.0
    assert relaxed_ex("SELECT name FROM team WHERE name = 'owls'", gold, games).score == 0.0  # not tied
    assert relaxed_ex(f"SELECT name, wins FROM team WHERE name = '{other}'", gold, games).score == 1.0
    # two kept rows: the first (5 wins) is tied too; the 3-win row is not interchangeable with the 1-win one
    gold2 = "SELECT name FROM team ORDER BY wins DESC LIMIT 3"
    assert relaxed_ex("SELECT name FROM team WHERE wins >= 3 ORDER BY wins DESC, name", gold2, games).score == 1.0
    assert relaxed_ex("SELECT name FROM team WHERE wins >= 3 ORDER BY wins DESC, name DESC", gold2, games).score == 1.0
    assert relaxed_ex("SELECT name FROM team WHERE wins <> 3 ORDER BY wins DESC", gold2, games).score == 0.0
    # ordinals and aliases in the ORDER BY resolve to the key
    gold3 = "SELECT name, wins AS w FROM team ORDER BY w DESC LIMIT 1"
    assert relaxed_ex(f"SELECT name, wins FROM team WHERE name = '{other}'", gold3, games).score == 1.0


# -- round_to_gold_precision -------------------------------------------------------------------
def test_round_to_gold_precision(games):
    gold = "SELECT name, ROUND(rating, 2) FROM team"
    assert relaxed_ex("SELECT name, rating FROM team", gold, games).score == 1.0
    assert relaxed_ex("SELECT name, rating FROM team", gold, games, options={"round_to_gold_precision": False}
                      ).score == 0.0
    assert relaxed_ex("SELECT name, ROUND(rating, 1) FROM team", gold, games).score == 0.0  # it rounds otherwise
    assert relaxed_ex("SELECT name, rating + 0.01 FROM team", gold, games).score == 0.0
    # SQLite's own rounding of halves: 1.115 is 1.1149999... in binary, SQLite gives 1.12 (Python round: 1.11)
    from textsql_clarify.rewards.execution import sqlite_round
    assert sqlite_round([1.115, 2.345, 7, "x"], 2) == [games.execute("SELECT round(1.115, 2)").rows[0][0],
                                                       games.execute("SELECT round(2.345, 2)").rows[0][0], 7, "x"]
    assert relaxed_ex("SELECT avg(rating) FROM team", "SELECT round(avg(rating), 1) FROM team", games).score == 1.0


# -- nondeterministic golds --------------------------------------------------------------------
@pytest.mark.parametrize("gold", [
    "SELECT name FROM team ORDER BY random() LIMIT 1", "SELECT date('now')",
    "SELECT name FROM team WHERE julianday('now') > 0", "SELECT current_timestamp",
    "SELECT strftime('%Y', 'now')", "SELECT abs(random()) % 2",
])
def test_nondeterministic_gold_excluded(games, gold):
    v = relaxed_ex(gold, gold, games)
    assert v.status == "gold_nondeterministic" and v.score is None and not v.counts_in_mean and v.reward == 0.0
    kept = relaxed_ex(gold, gold, games, options={"exclude_nondeterministic_gold": False})
    assert kept.status != "gold_nondeterministic"


def test_now_as_a_plain_string_is_deterministic(games):
    from textsql_clarify.rewards.ex_sql import gold_nondeterminism
    assert gold_nondeterminism("SELECT name FROM team WHERE city = 'now'") is None
    assert gold_nondeterminism("SELECT name FROM team") is None


def test_nondeterministic_gold_flagged_at_load_time(tmp_path):
    from textsql_clarify.samples import load_jsonl
    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).executescript("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1);")
    rec = {"id": "s1", "db_id": "t", "db_path": str(db), "question": "q", "group": "answerable",
           "subcategory": "answerable_without_evidence", "gold_sql": "SELECT x FROM t WHERE date('now') > '2000'"}
    plain = {**rec, "id": "s2", "gold_sql": "SELECT x FROM t"}
    (tmp_path / "d.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(plain) + "\n")
    s1, s2 = load_jsonl(tmp_path / "d.jsonl")
    assert s1.provenance["gold_nondeterministic"] == "DATE('now')" and "gold_nondeterministic" not in s2.provenance


# -- options and the env -----------------------------------------------------------------------
def test_ex_options_validation():
    from textsql_clarify.rewards.execution import EXOptions
    assert EXOptions.from_mapping(None) == EXOptions() and EXOptions().limit_ties and EXOptions().max_extra_columns == 3
    with pytest.raises(ValueError, match="unknown ex option"):
        EXOptions.from_mapping({"limit_tie": True})
    with pytest.raises(ValueError, match="bool"):
        EXOptions.from_mapping({"limit_ties": 1})
    with pytest.raises(ValueError, match="int >= 0"):
        EXOptions.from_mapping({"max_extra_columns": -1})


def test_env_reports_ex_strict_and_takes_ex_options():
    import gymnasium as gym
    import textsql_clarify  # noqa: F401  (registers the env)
    env = gym.make("TextSQLClarify-v0", reward_preset="strict", detailed_scores=False)
    sample = next(s for s in env.unwrapped.samples
                  if s.group == "answerable" and s.drift is None and not gold_is_ordered(s.gold_sql))
    _, info = env.reset(options={"sample_id": sample.id})
    assert info["reward_components"] == {}
    _, r, term, _, info = env.step("<clarify>which one?</clarify>")
    assert info["reward_components"]["ex_strict"] is None and info["reward_components"]["ex"] is None
    # the gold plus one column that stands for none of the gold's: relaxed EX 1, strict EX 0, and the
    # strict preset pays the strict one
    _, r, term, _, info = env.step(f"<sql>SELECT *, 'extra' FROM ({sample.gold_sql})</sql>")
    comps = info["reward_components"]
    assert term and comps["ex"] == 1.0 and comps["ex_strict"] == 0.0 and r == 0.0
    assert info["scores"]["ex_strict"] == comps["ex_strict"]
    env.close()
    with pytest.raises(ValueError, match="unknown ex option"):
        gym.make("TextSQLClarify-v0", ex_options={"nope": 1})


# -- hedges across readings: strict EX implies relaxed EX ----------------------------------------
def test_strict_match_of_the_gold_is_never_a_hedge_and_a_relaxed_only_one_is(sandbox):
    from textsql_clarify.envs.scoring import score_sql_turn

    gold = "SELECT name, price FROM item"
    ordered = "SELECT name, price FROM item ORDER BY price DESC"     # the other reading: the gold, ordered
    readings = (("h#1", ordered), ("h#2", "SELECT colour FROM item"))

    def play(pred):
        s = score_sql_turn(pred, gold, sandbox, gold_key="h", detailed=True, other_readings=readings)
        return s.components["ex"], s.components["ex_strict"], bool(s.flags["hedged"]), s.ex_status

    # a never-asking agent submitting the other reading returns the gold's rows, column for column: both EX
    # pay it (it was ex 0.0, ex_strict 1.0, hedged before); load-time validation flags such a sample
    # indistinguishable, so it is left out of the means
    assert play(ordered) == (1.0, 1.0, False, "match")
    assert play(gold) == (1.0, 1.0, False, "match")
    # the gold and the colour reading side by side: relaxed EX alone matches it, and it answers both readings
    ex, strict, hedged, status = play("SELECT name, price, colour FROM item")
    assert (ex, strict, hedged, status) == (0.0, 0.0, True, "hedged")
    for pred in (ordered, gold, "SELECT name, price, colour FROM item", "SELECT name FROM item"):
        ex, strict, *_ = play(pred)
        assert strict <= ex, pred
