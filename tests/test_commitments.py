"""Commitment sets and drift subtypes (TIDE §2.2, App. A: Table 5, Alg. 2; Alg. 1; Table 4 case study)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp
from sqlglot.errors import ErrorLevel, UnsupportedError

from conftest import MeanIs
from textsql_clarify.errors import SQLParseError
from textsql_clarify.rewards.commitments import (
    Commitment, commitment_set, drift_revision, drift_subtype, filtering_commitments, is_drift, literal_replacement,
    output_commitments,
)
from textsql_clarify.sql.schema import parse_sql, read_schema


def units(sql: str, kind: str, scope: str = "$") -> set[str]:
    return {c.value_form for c in commitment_set(sql) if c.kind == kind and c.scope == scope}


# ---------------------------------------------------------------------------------------- TIDE Table 5
def test_table5_where_splits_top_level_and():
    assert units("SELECT * FROM t WHERE a=1 AND b=2", "where") == {"t.a = 1", "t.b = 2"}


def test_table5_where_keeps_or_and_not_whole():
    # a NOT subtree stays one unit, written in negation normal form (De Morgan): NOT (d=4 AND e=5) is an OR
    got = units("SELECT * FROM t WHERE a = 1 AND (b = 2 OR c = 3) AND NOT (d = 4 AND e = 5)", "where")
    assert got == {"t.a = 1", "t.b = 2 OR t.c = 3", "t.d <> 4 OR t.e <> 5"}
    # NOT over an OR is a conjunction: the same two units as writing both negations out
    assert units("SELECT * FROM t WHERE NOT (d = 4 OR e = 5)", "where") == {"t.d <> 4", "t.e <> 5"}


def test_table5_select_items_and_star_marker():
    assert units("SELECT c, AVG(v) FROM t GROUP BY c", "select") == {"t.c", "AVG(t.v)"}
    assert units("SELECT * FROM t", "select") == {"*"}


def test_table5_group_by():
    assert units("SELECT c, d, COUNT(*) FROM t GROUP BY c, d", "group_by") == {"t.c", "t.d"}


def test_table5_order_by_with_direction():
    assert units("SELECT c FROM t ORDER BY v DESC", "order_by") == {"t.v DESC"}
    assert units("SELECT c FROM t ORDER BY v", "order_by") == {"t.v ASC"}


def test_table5_having():
    assert units("SELECT c FROM t GROUP BY c HAVING COUNT(*)>5", "having") == {"COUNT(*) > 5"}


def test_table5_limit_offset_with_values():
    s = commitment_set("SELECT c FROM t LIMIT 10 OFFSET 20")
    assert {(c.kind, c.value_form, c.structural_form) for c in s if c.kind in ("limit", "offset")} == {
        ("limit", "LIMIT 10", "LIMIT ?"), ("offset", "OFFSET 20", "OFFSET ?")}


def test_value_and_structural_forms_app_a_example():
    (c,) = [c for c in commitment_set("SELECT * FROM sales WHERE region = 'West'") if c.kind == "where"]
    assert c == Commitment("$", "where", "sales.region = 'West'", "sales.region = ?")


def test_scopes_of_set_operation_branches_and_subqueries():
    s = commitment_set("SELECT a FROM t WHERE b IN (SELECT b FROM u WHERE u.k = 1) "
                       "UNION SELECT a FROM v WHERE v.k = 2")
    by_scope = {(c.scope, c.kind, c.value_form) for c in s}
    assert by_scope == {
        ("$/union[0]", "select", "t.a"), ("$/union[0]", "where", "t.b IN (@where[0])"),
        ("$/union[0]/where[0]", "select", "u.b"), ("$/union[0]/where[0]", "where", "u.k = 1"),
        ("$/union[1]", "select", "v.a"), ("$/union[1]", "where", "v.k = 2"),
    }
    # the same unit in two scopes is two commitments
    assert len({c for c in commitment_set("SELECT a FROM t WHERE a = 1 INTERSECT SELECT a FROM t WHERE a = 1")}) == 4


# -------------------------------------------------------------------------------- TIDE Table 4 case study
T4_PRE = ("SELECT DISTINCT c.coachID, t.tmID, c.year FROM coaches c JOIN teams t ON c.tmID=t.tmID AND "
          "c.year=t.year WHERE c.year BETWEEN 2000 AND 2010 AND t.lost>t.won")
T4_POST = ("SELECT DISTINCT c.coachID, t.tmID, c.year FROM coaches c JOIN teams t ON c.tmID=t.tmID AND "
           "c.year=t.year WHERE t.lost>t.won")


def test_table4_case_study_is_constraint_level():
    assert is_drift(T4_PRE, T4_POST)
    assert drift_subtype(T4_PRE, T4_POST) == "constraint"
    removed = commitment_set(T4_PRE) - commitment_set(T4_POST)
    # BETWEEN is its two bounds (normalise_predicates): both are retracted
    assert {c.value_form for c in removed} == {"coaches.year >= 2000", "coaches.year <= 2010"}


def test_table4_models_drop_the_year_filter_drr_true():
    """Both models keep coaches.lost > coaches.won (the L2 error) and delete the year predicate: DRR=True."""
    pre = T4_PRE.replace("t.lost>t.won", "c.lost > c.won")
    post = T4_POST.replace("t.lost>t.won", "c.lost > c.won")
    assert is_drift(pre, post) and drift_subtype(pre, post) == "constraint"
    # the inherited chain error: the model's post-drift SQL differs from the gold post-drift SQL
    assert commitment_set(post) != commitment_set(T4_POST)


def test_literal_only_change_is_value_level():
    assert drift_subtype(T4_PRE, T4_PRE.replace("2010", "2005")) == "value"
    assert drift_subtype("SELECT * FROM sales WHERE region = 'West'",
                         "SELECT * FROM sales WHERE region = 'East'") == "value"
    # inside a subquery scope: the outer unit only names the scope, so only the inner literal moved
    nested = "SELECT x FROM t WHERE x IN (SELECT y FROM v WHERE z = 3) AND w > 1"
    assert drift_subtype(nested, nested.replace("z = 3", "z = 4")) == "value"


def test_value_level_allows_one_literal_by_default():
    two = T4_PRE.replace("2000 AND 2010", "1990 AND 2020")
    assert drift_subtype(T4_PRE, two) == "reject"
    assert drift_subtype(T4_PRE, two, max_literal_changes=2) == "value"
    with pytest.raises(ValueError):
        drift_subtype(T4_PRE, two, max_literal_changes=0)


def test_select_only_change_is_projection_level():
    post = T4_PRE.replace("c.coachID, t.tmID, c.year", "c.coachID, c.year")
    assert drift_subtype(T4_PRE, post) == "projection"
    assert drift_subtype("SELECT AVG(profit) FROM s WHERE y = 1",
                         "SELECT name, profit FROM s WHERE y = 1 ORDER BY profit DESC LIMIT 5") == "projection"


def test_pure_addition_and_no_change_are_not_drift():
    assert drift_subtype(T4_POST, T4_PRE) == "not_drift"  # adding the year filter back
    assert not is_drift(T4_POST, T4_PRE)
    assert drift_subtype(T4_PRE, T4_PRE) == "not_drift"
    assert drift_subtype("SELECT a FROM t", "SELECT a, b FROM t ORDER BY b LIMIT 3") == "not_drift"


def test_mixed_change_is_rejected():
    post = T4_POST.replace("c.coachID, t.tmID, c.year", "c.coachID")
    assert is_drift(T4_PRE, post) and drift_subtype(T4_PRE, post) == "reject"
    # a replaced predicate with a different structure is neither value nor constraint level
    assert drift_subtype(T4_PRE, T4_PRE.replace("t.lost>t.won", "t.lost>=t.won")) == "reject"


def test_w_and_o_split_and_lit_replace():
    s = commitment_set(T4_PRE)
    assert {c.kind for c in filtering_commitments(s)} == {"where"}
    assert filtering_commitments(s) | output_commitments(s) == s
    w_pre = filtering_commitments(s)
    w_post = filtering_commitments(commitment_set(T4_PRE.replace("2000", "1999")))
    assert literal_replacement(w_pre, w_post)
    assert not literal_replacement(w_pre, w_pre)


def test_numerically_equal_literals_are_not_drift():
    a = "SELECT * FROM t WHERE dept_id = 1"
    b = "SELECT * FROM t WHERE dept_id = 1.0"
    assert commitment_set(a) == commitment_set(b)
    assert drift_subtype(a, b) == "not_drift" and not is_drift(a, b) and not is_drift(b, a)
    assert drift_subtype("SELECT * FROM t WHERE x IN (1.0, 2.50) AND y BETWEEN 1e1 AND 20",
                         "SELECT * FROM t WHERE x IN (2.5, 1) AND y BETWEEN 10 AND 20.0") == "not_drift"
    # a different number is still a value-level drift; a literal inside arithmetic keeps its spelling
    assert drift_subtype(a, "SELECT * FROM t WHERE dept_id = 1.5") == "value"
    assert drift_subtype("SELECT a / 2 FROM t", "SELECT a / 2.0 FROM t") == "projection"


def test_ordinal_into_a_star_gives_a_commitment_set():
    # sqlglot's qualify raised AssertionError here, out of commitment_set, drift_subtype and the env step
    schema = {"students": {"id": "INT", "name": "TEXT"}}
    s = commitment_set("SELECT * FROM students ORDER BY 1", schema)
    assert {(c.kind, c.value_form) for c in s} == {("select", "*"), ("order_by", "students.id ASC")}
    assert {c.value_form for c in commitment_set("SELECT * FROM students ORDER BY 1") if c.kind == "order_by"} == {
        "1 ASC"}
    cte = "WITH c AS (SELECT * FROM students) SELECT * FROM c ORDER BY 1"
    assert ("order_by", "1 ASC") in {(c.kind, c.value_form) for c in commitment_set(cte, schema)}
    assert drift_subtype("SELECT * FROM students ORDER BY 1", "SELECT * FROM students ORDER BY 1 DESC") == "projection"
    assert drift_subtype("SELECT s.* FROM students AS s GROUP BY 1", "SELECT s.* FROM students AS s GROUP BY 1",
                         schema) == "not_drift"
    # a query too long to analyse is a typed error, refused before parsing
    with pytest.raises(SQLParseError, match="too long to analyse"):
        drift_subtype("SELECT 1 FROM t WHERE " + "a = 1 OR " * 3000 + "1 = 1", "SELECT 1")


def test_commitment_sets_accepted_as_inputs_and_typed_errors():
    pre, post = commitment_set(T4_PRE), commitment_set(T4_POST)
    assert drift_subtype(pre, post) == "constraint" and is_drift(pre, T4_POST)
    with pytest.raises(TypeError, match="pre"):
        is_drift(["SELECT 1"], T4_POST)
    with pytest.raises(TypeError, match="Commitment"):
        drift_subtype({"t.a = 1"}, post)
    with pytest.raises(SQLParseError):
        commitment_set("SELECT FROM WHERE")
    with pytest.raises(SQLParseError):
        is_drift("SELECT a FROM t", "DROP TABLE t")


# ------------------------------------------------------------------- canonicalisation must not invent drift
def test_alias_names_do_not_matter():
    a = commitment_set("SELECT t1.name AS n FROM student AS t1 WHERE t1.age > 5 ORDER BY n")
    b = commitment_set("select STUDENT.Name as x from Student where 5 < AGE order by 1")
    assert a == b


def test_inner_join_on_equals_where_but_outer_join_on_does_not():
    on = commitment_set("SELECT a.x FROM a JOIN b ON a.id = b.id WHERE b.y = 1")
    where = commitment_set("SELECT a.x FROM a, b WHERE b.y = 1 AND b.id = a.id")
    assert on == where
    left = commitment_set("SELECT a.x FROM a LEFT JOIN b ON a.id = b.id WHERE b.y = 1")
    assert left != on and {c.value_form for c in left if c.kind == "where"} == {"b.y = 1"}


def test_reordered_conjuncts_with_subqueries_keep_their_scopes():
    a = commitment_set("SELECT x FROM t WHERE x IN (SELECT y FROM u WHERE k = 1) AND z IN (SELECT w FROM v)")
    b = commitment_set("SELECT x FROM t WHERE z IN (SELECT w FROM v) AND x IN (SELECT y FROM u WHERE k = 1)")
    assert a == b


_OPS = {"=": "<>", "<>": "=", ">": "<=", "<=": ">", "<": ">=", ">=": "<"}
_MIRROR = {"=": "=", "<>": "<>", ">": "<", "<": ">", ">=": "<=", "<=": ">="}
_COLS = ("age", "name", "score", "city")

predicate = st.tuples(st.sampled_from(_COLS), st.sampled_from(sorted(_OPS)),
                      st.one_of(st.integers(-50, 50), st.sampled_from(["'West'", "'east'", "'A b'"])))


def _spell(preds, flips, cases, parens, alias, order):
    """One spelling of ``SELECT name FROM people WHERE <preds>`` (equivalent for every argument value)."""
    q = "p." if alias else ""
    parts = []
    for (col, op, lit), flip, upper, paren in zip(preds, flips, cases, parens):
        c = (col.upper() if upper else col)
        text = f"{lit} {_MIRROR[op]} {q}{c}" if flip else f"{q}{c} {op} {lit}"
        parts.append(f"(({text}))" if paren else text)
    parts = [parts[i] for i in order]
    src = "People AS p" if alias else "people"
    kw_and = " and " if cases[0] else " AND "
    return f"SELECT {q}name FROM {src} WHERE {kw_and.join(parts)}"


@st.composite
def spellings(draw):
    preds = draw(st.lists(predicate, min_size=1, max_size=4, unique=True))
    n = len(preds)
    bools = st.lists(st.booleans(), min_size=n, max_size=n)
    a = (draw(bools), draw(bools), draw(bools), draw(st.booleans()), draw(st.permutations(range(n))))
    b = (draw(bools), draw(bools), draw(bools), draw(st.booleans()), draw(st.permutations(range(n))))
    return preds, a, b


@settings(max_examples=60, deadline=None)
@given(spellings())
def test_equivalent_spellings_give_one_commitment_set(case):
    preds, a, b = case
    sa, sb = _spell(preds, *a), _spell(preds, *b)
    assert commitment_set(sa) == commitment_set(sb), (sa, sb)
    assert not is_drift(sa, sb) and drift_subtype(sa, sb) == "not_drift"


@settings(max_examples=60, deadline=None)
@given(spellings(), st.data())
def test_reversed_polarity_is_a_different_commitment(case, data):
    preds, a, b = case
    i = data.draw(st.integers(0, len(preds) - 1))
    col, op, lit = preds[i]
    negated = preds[:i] + [(col, _OPS[op], lit)] + preds[i + 1:]
    if (col, _OPS[op], lit) in preds:  # the negation is already there: removing the original is constraint
        return
    sa, sb = _spell(preds, *a), _spell(negated, *b)
    assert commitment_set(sa) != commitment_set(sb)
    assert is_drift(sa, sb)
    assert drift_subtype(sa, sb) == "reject"  # structure changed: not a literal swap, not a removal


# ------------------------------------------------------------------------------------------ real data
def _respell(sql: str) -> str | None:
    """Re-spell a query: table aliases renamed, every = operand pair swapped, x > y written y < x, pretty.

    ``None`` where sqlglot cannot write the query back in SQLite faithfully: BIRD's ``TO_CHAR(x, fmt)``
    (the format would be dropped) and Postgres' ``DISTINCT ON`` (rewritten into a window query).
    """
    t = parse_sql(sql)
    if any(d.args.get("on") is not None for d in t.find_all(exp.Distinct)):
        return None
    aliases = {tb.alias.lower() for tb in t.find_all(exp.Table) if tb.alias}
    for ta in t.find_all(exp.TableAlias):
        if ta.name.lower() in aliases:
            ta.set("this", exp.to_identifier("q_" + ta.name))
    for col in t.find_all(exp.Column):
        if col.table.lower() in aliases:
            col.set("table", exp.to_identifier("q_" + col.table))
    mirror = {exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE}
    for node in list(t.find_all(exp.EQ, exp.GT, exp.LT, exp.GTE, exp.LTE)):
        node.replace(mirror.get(type(node), type(node))(this=node.expression.copy(), expression=node.this.copy()))
    try:
        return t.sql(dialect="sqlite", pretty=True, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError:
        return None


def _check_real(pairs):
    failures, changed, not_respelled = [], [], 0
    for sql, schema in pairs:
        try:
            s = commitment_set(sql, schema)
        except SQLParseError as e:
            failures.append((sql, e.reason))
            continue
        assert s, sql
        other = _respell(sql)
        if other is None:
            not_respelled += 1
        elif commitment_set(other, schema) != s:
            changed.append(sql)
    return failures, changed, not_respelled


@pytest.mark.realdata
def test_all_spider_dev_gold_queries(spider_root):
    items = json.loads((spider_root / "dev.json").read_text())
    assert len(items) == 1034
    failures, _ = _check_real_no_respell((it["query"], None) for it in items)
    assert failures == []
    pairs = [(it["query"], read_schema(str(spider_root / "database" / it["db_id"] / f"{it['db_id']}.sqlite")))
             for it in items]
    failures, changed, not_respelled = _check_real(pairs)
    assert failures == [] and not_respelled == 0
    assert changed == []  # a re-spelling never reads as drift


def _check_real_no_respell(pairs):
    failures = []
    for sql, schema in pairs:
        try:
            assert commitment_set(sql, schema), sql
        except SQLParseError as e:
            failures.append((sql, e.reason))
    return failures, []


def _bird_schemas(path):
    out = {}
    for db in json.loads(path.read_text()):
        tables = db["table_names_original"]
        schema = {t.lower(): {} for t in tables}
        for ti, col in db["column_names_original"]:
            if ti >= 0:
                schema[tables[ti].lower()][col.lower()] = "TEXT"
        out[db["db_id"]] = schema
    return out


@pytest.mark.realdata
def test_all_bird_minidev_gold_queries(shared_data):
    folder = shared_data / "bird_minidev"
    if not (folder / "mini_dev_sqlite.json").is_file():
        pytest.skip("real data absent: bird_minidev/mini_dev_sqlite.json not found")
    items = json.loads((folder / "mini_dev_sqlite.json").read_text())
    assert len(items) == 498
    failures, _ = _check_real_no_respell((it["SQL"], None) for it in items)
    assert failures == []
    schemas = _bird_schemas(folder / "dev_tables.json")
    failures, changed, not_respelled = _check_real((it["SQL"], schemas[it["db_id"]]) for it in items)
    assert failures == [] and changed == []
    # the SQLite edition: every gold can be re-spelled (the superseded PostgreSQL golds' TO_CHAR and
    # DISTINCT ON could not)
    assert not_respelled == 0


# ------------------------------------------------------------- equivalent rewrites are one commitment
EQUIVALENT = [
    ("x NOT BETWEEN 1 AND 5", "x < 1 OR x > 5"),
    ("x NOT BETWEEN 1 AND 5", "NOT (x >= 1 AND x <= 5)"),
    ("x BETWEEN 1 AND 5", "x >= 1 AND x <= 5"),
    ("x BETWEEN 1 AND 5", "5 >= x AND 1 <= x"),
    ("1 = a", "a = 1"),
    ("a + b > 3", "b + a > 3"),
    ("a * 2 > 3", "2 * a > 3"),
    ("NULL IS x", "x IS NULL"),
    ("NULL IS NOT x", "x IS NOT NULL"),
    ("NOT x IS NULL", "x IS NOT NULL"),
    ("NOT (a = 1)", "a <> 1"),
    ("a <> 1", "a != 1"),
    ("NOT (a >= 1)", "a < 1"),
    ("a IN (1, 2)", "a IN (2, 1)"),
    ("x NOT IN (2, 1)", "NOT x IN (1, 2)"),
    ("NOT NOT a = 1", "a = 1"),
    ("NOT (NOT (a = 1))", "a = 1"),
    ("NOT (a = 1 OR b = 2)", "a <> 1 AND b <> 2"),
    ("NOT (a = 1 AND b = 2)", "a <> 1 OR b <> 2"),
    ("x NOT LIKE 'A%'", "NOT x LIKE 'A%'"),
]

#: one real change each: a different predicate, never a respelling
REAL_CHANGES = [
    ("x BETWEEN 1 AND 5", "x BETWEEN 1 AND 6"),
    ("x NOT BETWEEN 1 AND 5", "x BETWEEN 1 AND 5"),
    ("x < 1 OR x > 5", "x <= 1 OR x > 5"),
    ("a - b > 3", "b - a > 3"),
    ("a / b > 3", "b / a > 3"),
    ("a || b = 'xy'", "b || a = 'xy'"),
    ("x IS NULL", "x IS NOT NULL"),
    ("NOT (a = 1 AND b = 2)", "a <> 1 AND b <> 2"),
    ("a IN (1, 2)", "a IN (1, 3)"),
    ("a = 1", "a <> 1"),
]


def _where(cond: str) -> str:
    return f"SELECT y FROM t WHERE {cond}"


@pytest.mark.parametrize("a, b", EQUIVALENT)
def test_equivalent_rewrites_are_one_commitment(a, b):
    assert commitment_set(_where(a)) == commitment_set(_where(b))
    assert not is_drift(_where(a), _where(b)) and not is_drift(_where(b), _where(a))
    assert drift_subtype(_where(a), _where(b)) == "not_drift"


@pytest.mark.parametrize("a, b", REAL_CHANGES)
def test_real_changes_remain_drift(a, b):
    assert commitment_set(_where(a)) != commitment_set(_where(b))
    assert is_drift(_where(a), _where(b)) and is_drift(_where(b), _where(a))


def _rows_per_condition(pairs):
    """Run every condition on a table whose columns take NULL, negatives, zeros and strings: ``{cond: rows}``."""
    import itertools
    import sqlite3
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (y INTEGER, x, a, b)")
    values = [None, -1, 0, 1, 2, 3, 5, 6, "A1", "x", "xy"]
    rows = [(i, x, a, b) for i, (x, a, b) in enumerate(itertools.product(values, values, [None, 1, 2, "y"]))]
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    return {c: sorted(con.execute(_where(c)).fetchall()) for pair in pairs for c in pair}


def test_equivalent_rewrites_return_the_same_rows_in_sqlite():
    """Each equivalence the canonical form assumes is exact in SQLite, NULLs and mixed types included;
    each real change returns other rows on the same table (so the test could fail)."""
    rows = _rows_per_condition(EQUIVALENT + REAL_CHANGES)
    assert [(a, b) for a, b in EQUIVALENT if rows[a] != rows[b]] == []
    assert [(a, b) for a, b in REAL_CHANGES if rows[a] == rows[b]] == []


def test_normal_form_keeps_the_value_of_a_boolean_select_item():
    """The rewrites also hold where a condition is a value (0, 1 or NULL), not a filter."""
    import sqlite3
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (x, a)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(None, None), (0, 1), (3, None), (7, 2), (None, 1)])
    for a, b in [("NOT (x BETWEEN 1 AND 5)", "x < 1 OR x > 5"), ("NOT (x = 3 AND a = 1)", "x <> 3 OR a <> 1"),
                 ("NULL IS x", "x IS NULL")]:
        qa, qb = f"SELECT {a} FROM t", f"SELECT {b} FROM t"
        assert con.execute(qa).fetchall() == con.execute(qb).fetchall()
        assert commitment_set(qa) == commitment_set(qb)


def test_two_bound_between_change_is_two_literals():
    # the year range moved at both ends: two units replaced, one literal each (reject at Alg. 1's budget of 1)
    assert literal_replacement(filtering_commitments(commitment_set(T4_PRE)),
                               filtering_commitments(commitment_set(T4_PRE.replace("2000 AND 2010", "1990 AND 2020"))),
                               max_literal_changes=2)
    assert drift_subtype(T4_PRE, T4_PRE.replace("2000 AND 2010", "2000 AND 2020")) == "value"
    # a removed bound with nothing in its place is not a literal replacement
    assert drift_subtype(T4_PRE, T4_PRE.replace("c.year BETWEEN 2000 AND 2010", "c.year >= 2000")) == "constraint"


# ---------------------------------------------------------------- drift revision (the drift reward's test)
def _forms(units) -> set[str]:
    return {c.value_form for c in units}


def test_table4_models_revise_the_drift_though_their_sql_is_wrong():
    """TIDE Table 4: both models delete the year predicate (DRR=True) and keep coaches.lost > coaches.won.
    They revised what the drift retracted; the env still pays no drift reward, since postEX=False."""
    pre = T4_PRE.replace("t.lost>t.won", "c.lost > c.won")
    post = T4_POST.replace("t.lost>t.won", "c.lost > c.won")
    r = drift_revision(T4_PRE, T4_POST, pre, post, subtype="constraint")
    assert r.subtype == "constraint" and r.recognised and r.revised
    assert _forms(r.retracted) == {"coaches.year >= 2000", "coaches.year <= 2010"} and r.introduced == frozenset()
    # the gold pair itself, and its retraction re-worded as a weaker year filter: not dropped
    assert drift_revision(T4_PRE, T4_POST, T4_PRE, T4_POST).revised
    kept = drift_revision(T4_PRE, T4_POST, T4_PRE, T4_POST.replace("WHERE", "WHERE c.year >= 1900 AND"))
    assert not kept.revised and _forms(kept.surviving) == {"coaches.year >= 2000", "coaches.year <= 2010"}


def test_app_a_value_drift_needs_the_new_literal_and_not_the_old():
    pre, post = "SELECT * FROM sales WHERE region = 'West'", "SELECT * FROM sales WHERE region = 'East'"
    r = drift_revision(pre, post, pre, post)
    assert r.subtype == "value" and r.revised
    assert _forms(r.retracted) == {"sales.region = 'West'"} and _forms(r.introduced) == {"sales.region = 'East'"}
    both = drift_revision(pre, post, pre, "SELECT * FROM sales WHERE region IN ('East', 'West')")
    assert both.recognised and not both.revised and _forms(both.missing) == {"sales.region = 'East'"}
    other = drift_revision(pre, post, pre, "SELECT * FROM sales WHERE region = 'North'")
    assert other.recognised and not other.revised


@pytest.mark.parametrize("name, pre, post", [
    ("churn", "SELECT 1", "SELECT 2"),
    ("pre-drift gold resubmitted", T4_PRE, T4_PRE),
    ("post-drift gold for both turns", T4_POST, T4_POST),
    ("churn, then the post-drift gold", "SELECT 1", T4_POST),
    ("an unrelated query", T4_PRE, "SELECT coachID FROM coaches"),
    ("unparsable after the drift", T4_PRE, "SELEC nothing"),
])
def test_policies_that_do_not_revise_the_retraction(name, pre, post):
    r = drift_revision(T4_PRE, T4_POST, pre, post)
    assert not r.revised, name
    # TIDE's Rec(τ) is met by churn, by churn then gold and by the unrelated query: DRR alone cannot pay
    assert r.recognised == (name in ("churn", "churn, then the post-drift gold", "an unrelated query",
                                     "unparsable after the drift"))


def test_drift_revision_checks_the_gold_pair_and_the_subtype():
    with pytest.raises(ValueError, match="not_drift"):
        drift_revision(T4_POST, T4_PRE, T4_POST, T4_PRE)  # adding the year filter back is not drift
    with pytest.raises(ValueError, match="Algorithm 1 gives 'constraint'"):
        drift_revision(T4_PRE, T4_POST, T4_PRE, T4_POST, subtype="value")
    with pytest.raises(SQLParseError):
        drift_revision("SELECT FROM", T4_POST, T4_PRE, T4_POST)
    with pytest.raises(TypeError, match="pred_post"):
        drift_revision(T4_PRE, T4_POST, T4_PRE, ["SELECT 1"])


# ------------------------------------------------- the drift reward through gym.make, embedded drift samples
@pytest.fixture(scope="module")
def drift_samples():
    from textsql_clarify.datasets import load_dataset
    out = [s for s in load_dataset("embedded") if s.drift is not None]
    assert len(out) == 6 and sorted(s.drift.subtype for s in out) == ["constraint"] * 2 + ["projection"] * 2 + [
        "value"] * 2
    return out


@pytest.fixture(scope="module")
def drift_env(drift_samples):
    import gymnasium as gym

    import textsql_clarify  # noqa: F401  (registers the env)
    return gym.make("TextSQLClarify-v0", samples=drift_samples, reward_preset="drift", detailed_scores=False)


def _play(env, sample, first: str, second: str):
    """Two SQL turns around the drift utterance: ``(episode reward, post-drift components, scores)``."""
    env.reset(options={"sample_id": sample.id})
    _, r1, term, _, info = env.step(f"<sql>{first}</sql>")
    assert not term and info["reward_components"].get("drift") is None  # the pre-drift turn pays no drift
    _, r2, term, _, info = env.step(f"<sql>{second}</sql>")
    assert term
    return r1 + r2, info["reward_components"], info["scores"]


def test_oracle_earns_the_drift_reward_on_every_embedded_drift_sample(drift_env, drift_samples):
    got = [_play(drift_env, s, s.gold_sql, s.drift.post_gold_sql) for s in drift_samples]
    assert [(c["ex"], c["drift"], c["drift_revised"]) for _, c, _ in got] == [(1.0, 1.0, 1.0)] * 6
    assert [sc["drift_recognised"] for _, _, sc in got] == [True] * 6
    assert [r for r, _, _ in got] == [2.5] * 6  # ex 1 + ex_post 1 + 0.5 × drift 1


def _unrelated(samples, s):
    """Another drift sample's post-drift gold on the same database: a real query, not this one's answer."""
    others = [o for o in samples if o.id != s.id and o.db_id == s.db_id]
    return others[0].drift.post_gold_sql


_NON_REVISIONS = {
    "churn": lambda ss, s: ("SELECT 1", "SELECT 2"),
    "re-spelled pre-drift gold": lambda ss, s: (s.gold_sql, _respell(s.gold_sql)),
    "pre-drift gold resubmitted": lambda ss, s: (s.gold_sql, s.gold_sql),
    "post-drift gold for both turns": lambda ss, s: (s.drift.post_gold_sql, s.drift.post_gold_sql),
    "churn, then the post-drift gold": lambda ss, s: ("SELECT 1", s.drift.post_gold_sql),
    "unrelated query after the drift": lambda ss, s: (s.gold_sql, _unrelated(ss, s)),
}


@pytest.mark.parametrize("policy", sorted(_NON_REVISIONS))
def test_policies_that_do_not_revise_earn_no_drift_reward(drift_env, drift_samples, policy):
    comps = [_play(drift_env, s, *_NON_REVISIONS[policy](drift_samples, s))[1] for s in drift_samples]
    assert [c["drift"] for c in comps] == [0.0] * 6
    assert [c["drift_revised"] for c in comps] == [0.0] * 6


def test_dropping_a_retraction_only_in_form_earns_no_drift_reward(drift_env, drift_samples):
    """The retracted filter re-worded (``amount_eur > 0``) or the retracted columns kept next to the new one:
    EX may pass (column supersets, a filter every row meets), the drift reward does not."""
    by_id = {s.id: s for s in drift_samples}
    s4, s5 = by_id["uni-drift-004"], by_id["uni-drift-005"]
    reworded = s4.drift.post_gold_sql + " AND sh.amount_eur > 0"
    kept = s5.drift.post_gold_sql.replace("SELECT p.hire_date", "SELECT p.hire_date, p.first_name, p.last_name")
    _, c, sc = _play(drift_env, s4, s4.gold_sql, reworded)
    assert sc["drift_recognised"] is True and c["ex"] == 1.0  # Rec(τ) holds and every grant is above 0
    assert c["drift_revised"] == 0.0 and c["drift"] == 0.0
    _, c, sc = _play(drift_env, s5, s5.gold_sql, kept)
    assert sc["drift_recognised"] is False  # a pure addition: not even Rec(τ)
    assert c["drift_revised"] == 0.0 and c["drift"] == 0.0


def test_oracle_drr_stays_one(drift_samples):
    from textsql_clarify.baselines.agents import OracleAgent
    from textsql_clarify.rollout.evaluation import evaluate
    trajs, metrics = evaluate(drift_samples, OracleAgent(), progress=False, reward_preset="drift")
    assert metrics["overall"]["DRR"] == MeanIs(1.0, 6)
    assert metrics["overall"]["DRA"] == MeanIs(1.0, 6)
    assert [t.scores["drift_revised"] for t in trajs] == [True] * 6


_ATOM = st.one_of(
    st.builds(lambda c, op, v: f"{c} {op} {v}", st.sampled_from(["x", "a"]),
              st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "!="]), st.integers(-1, 6)),
    st.builds(lambda c, lo, hi, neg: f"{c} {'NOT ' if neg else ''}BETWEEN {lo} AND {hi}",
              st.sampled_from(["x", "a"]), st.integers(-1, 3), st.integers(2, 6), st.booleans()),
    st.builds(lambda c, neg: f"{c} IS {'NOT ' if neg else ''}NULL", st.sampled_from(["x", "a"]), st.booleans()),
    st.builds(lambda c: f"NULL IS {c}", st.sampled_from(["x", "a"])),
)
_CONDITION = st.recursive(_ATOM, lambda inner: st.one_of(
    st.builds(lambda p: f"NOT ({p})", inner),
    st.builds(lambda p, q, op: f"({p}) {op} ({q})", inner, inner, st.sampled_from(["AND", "OR"]))), max_leaves=6)


@settings(max_examples=80, deadline=None)
@given(_CONDITION)
def test_normal_form_returns_the_same_rows_as_the_condition(cond):
    """normalise_predicates is exact: the canonical text of the rewritten WHERE selects the same rows in
    SQLite as the condition as written, on a table with NULLs (three-valued logic)."""
    import sqlite3

    from textsql_clarify.rewards.sql_canonical import canonical_sql, normalise_predicates, prepare_sql
    tree = normalise_predicates(prepare_sql(_where(cond)).tree)
    rewritten = canonical_sql(tree.args["where"].this)
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (y INTEGER, x, a)")
    vals = [None, -1, 0, 1, 2, 3, 5, 6, 7]
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i * 10 + j, x, a) for i, x in enumerate(vals)
                                                       for j, a in enumerate(vals)])
    assert (sorted(con.execute(_where(cond)).fetchall())
            == sorted(con.execute(f"SELECT y FROM t WHERE {rewritten}").fetchall())), (cond, rewritten)
    assert "BETWEEN" not in rewritten and "NOT (" not in rewritten


def test_between_spelled_out_is_not_recognised_as_drift(drift_env, drift_samples):
    """A re-spelling that writes BETWEEN as two comparisons and swaps operands: no Rec(τ), no drift reward."""
    def spell(sql):
        t = parse_sql(sql)
        for b in list(t.find_all(exp.Between)):
            b.replace(exp.paren(exp.and_(exp.LTE(this=b.args["low"].copy(), expression=b.this.copy()),
                                         exp.GTE(this=b.args["high"].copy(), expression=b.this.copy()))))
        return t.sql(dialect="sqlite")
    assert any("BETWEEN" in s.gold_sql for s in drift_samples)
    got = [_play(drift_env, s, s.gold_sql, spell(s.gold_sql)) for s in drift_samples]
    assert [(sc["drift_recognised"], c["drift"]) for _, c, sc in got] == [(False, 0.0)] * 6
