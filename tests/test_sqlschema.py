"""The SQL analysis boundary (textsql_clarify.sql.schema): typed errors for anything sqlglot raises, the
analysis caps, and ordinals that point into a ``*``.

Every metric module that reads SQL (components, commitments, cells, retrieval) goes through
``parse_for_analysis`` and ``analysis_errors``; these tests hold the four public entry points to that.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError

from textsql_clarify.errors import SQLParseError
from textsql_clarify.rewards import cells, retrieval
from textsql_clarify.rewards.cells import column_origins
from textsql_clarify.rewards.commitments import commitment_set, drift_subtype
from textsql_clarify.rewards.components import component_sets, prepare_sql
from textsql_clarify.rewards.retrieval import tables_read
from textsql_clarify.sql.schema import (
    MAX_ANALYSIS_CHARS, MAX_ANALYSIS_DEPTH, MAX_ANALYSIS_NODES, analysis_errors, parse_for_analysis, parse_sql,
    qualify_sql, read_schema, tree_size,
)

from conftest import generous_bound

STUDENTS = {"students": {"id": "INT", "name": "TEXT", "age": "INT"}}
ENTRY_POINTS = {
    "component_sets": lambda sql: component_sets(sql, STUDENTS),
    "commitment_set": lambda sql: commitment_set(sql, STUDENTS),
    "column_origins": lambda sql: column_origins(sql, STUDENTS),
    "tables_read": lambda sql: tables_read(sql),
}


# ------------------------------------------------------------------------------------------- typed errors
def test_parse_sql_errors_are_typed():
    for bad, reason in (("", "empty SQL"), ("   ", "empty SQL"), (None, "not a str"),
                        ("SELECT 1; SELECT 2", "one statement"), ("SELEC name FROM t", "parse error")):
        with pytest.raises(SQLParseError, match=reason):
            parse_sql(bad)


@pytest.mark.parametrize("kind", [AssertionError, KeyError, ValueError, TypeError, IndexError, AttributeError,
                                  OptimizeError, ParseError])
def test_analysis_errors_turns_any_exception_into_sql_parse_error(kind):
    with pytest.raises(SQLParseError) as ei:
        with analysis_errors("SELECT 1", "qualify"):
            raise kind("boom")
    assert ei.value.sql == "SELECT 1"
    assert ei.value.reason.startswith(f"qualify: {kind.__name__}") and "boom" in ei.value.reason
    assert isinstance(ei.value.__cause__, kind)


def test_analysis_errors_recursion_and_pass_through():
    with pytest.raises(SQLParseError, match="query nested too deeply"):
        with analysis_errors("SELECT 1", "scopes"):
            raise RecursionError("maximum recursion depth exceeded")
    inner = SQLParseError("SELECT 2", "own reason")
    with pytest.raises(SQLParseError) as ei:
        with analysis_errors("SELECT 1", "scopes"):
            raise inner
    assert ei.value is inner  # the package's own typed errors are not re-wrapped
    with pytest.raises(MemoryError):
        with analysis_errors("SELECT 1", "scopes"):
            raise MemoryError()
    # an AST instead of the text: rendered only when an error is raised
    with pytest.raises(SQLParseError) as ei:
        with analysis_errors(parse_sql("SELECT a FROM t"), "render"):
            raise IndexError("x")
    assert ei.value.sql == "SELECT a FROM t"


def test_parse_sql_turns_any_sqlglot_exception_into_sql_parse_error(monkeypatch):
    def broken(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(sqlglot, "parse", broken)
    with pytest.raises(SQLParseError, match="parse error: IndexError"):
        parse_sql("SELECT 1")


@pytest.mark.parametrize("kind", [AssertionError, KeyError, IndexError, RecursionError, OptimizeError])
def test_entry_points_turn_scope_failures_into_sql_parse_error(monkeypatch, kind):
    def broken(*args, **kwargs):
        raise kind("sqlglot failed")

    monkeypatch.setattr(retrieval, "traverse_scope", broken)
    monkeypatch.setattr(cells, "build_scope", broken)
    for fn in (ENTRY_POINTS["tables_read"], ENTRY_POINTS["column_origins"]):
        with pytest.raises(SQLParseError):
            fn("SELECT name FROM students")


@pytest.mark.parametrize("kind", [AssertionError, KeyError, TypeError, IndexError])
def test_rendering_failure_inside_sqlglot_is_typed(monkeypatch, kind):
    def broken(self, *args, **kwargs):
        raise kind("generator failed")

    monkeypatch.setattr(exp.Expression, "sql", broken)
    for name in ("component_sets", "commitment_set"):
        with pytest.raises(SQLParseError, match=kind.__name__):
            ENTRY_POINTS[name]("SELECT name FROM students WHERE age > 3")


def test_qualify_failure_degrades_instead_of_raising(monkeypatch):
    import sqlglot.optimizer.qualify as q

    def broken(*args, **kwargs):
        raise AssertionError("* is not <class 'sqlglot.expressions.core.Alias'>.")

    monkeypatch.setattr(q, "qualify", broken)
    with pytest.raises(SQLParseError, match="cannot qualify: AssertionError"):
        qualify_sql(parse_sql("SELECT name FROM students"), STUDENTS)
    prep = prepare_sql("SELECT s.name FROM students AS s WHERE s.age > 3", STUDENTS)
    assert not prep.qualified and prep.fallback.startswith("not qualified: cannot qualify: AssertionError")
    # aliases are still replaced by table names, so the sets are computed
    assert component_sets("SELECT s.name FROM students AS s WHERE s.age > 3", STUDENTS)["filters"] == {
        "students.age > 3"}


# ------------------------------------------------------------------------------------------- analysis caps
def test_tree_size_counts_nodes_and_depth():
    assert tree_size(parse_sql("SELECT a FROM t")) == (6, 4)  # Select, Column, Identifier, From, Table, Identifier
    ors = parse_sql("SELECT 1 FROM t WHERE " + " OR ".join(f"a = {i}" for i in range(150)))
    assert tree_size(ors) == (755, 154)  # a chain of n ORs is n levels deep
    assert tree_size(ors, stop_after=10)[0] == 11


def test_long_or_chain_is_refused_before_parsing_by_every_entry_point(monkeypatch):
    sql = "SELECT 1 FROM students WHERE " + "s.a = 1 OR " * 6000 + "1 = 1"
    assert len(sql) == 66_034 > MAX_ANALYSIS_CHARS == 20_000

    def no_parse(*args, **kwargs):  # the refusal must not depend on sqlglot's cost at all
        raise AssertionError("parsed a query that is too long to analyse")

    monkeypatch.setattr(sqlglot, "parse", no_parse)
    # the refusal is the mechanism (no_parse proves sqlglot never ran); it took 30 s per env step before the cap
    with generous_bound("refusing a 66,034-character OR chain in every entry point"):
        for name, fn in ENTRY_POINTS.items():
            with pytest.raises(SQLParseError, match="too long to analyse: 66,034 characters > 20,000"):
                fn(sql)


def test_node_and_depth_caps_refuse_before_qualify(monkeypatch):
    import sqlglot.optimizer.qualify as q

    in_list = "SELECT name FROM students WHERE age IN (" + ", ".join(str(i) for i in range(3000)) + ")"
    assert len(in_list) < MAX_ANALYSIS_CHARS and tree_size(parse_sql(in_list))[0] == 3010 > MAX_ANALYSIS_NODES
    deep = "SELECT 1 FROM students WHERE " + " OR ".join(f"age = {i}" for i in range(150))
    assert tree_size(parse_sql(deep))[1] == 154 > MAX_ANALYSIS_DEPTH

    def no_qualify(*args, **kwargs):
        raise AssertionError("analysed a query over the caps")

    monkeypatch.setattr(q, "qualify", no_qualify)
    for name, fn in ENTRY_POINTS.items():
        with pytest.raises(SQLParseError, match="too large to analyse: more than 3,000 AST nodes"):
            fn(in_list)
        with pytest.raises(SQLParseError, match="nested too deeply to analyse: AST depth 154 > 120"):
            fn(deep)
    # just under the depth cap: analysed
    monkeypatch.undo()
    ok = "SELECT 1 FROM students WHERE " + " OR ".join(f"age = {i}" for i in range(110))
    assert len(component_sets(ok, STUDENTS)["filters"]) == 1


def _gold_sqls(shared_data):
    out = {"spider_dev": [it["query"] for it in json.loads((shared_data / "spider_dev" / "dev.json").read_text())]}
    bird = shared_data / "bird_minidev" / "mini_dev_sqlite.json"
    if bird.is_file():
        out["bird_minidev"] = [it["SQL"] for it in json.loads(bird.read_text())]
    return out


@pytest.mark.realdata
def test_caps_are_far_above_every_real_gold(shared_data):
    if not (shared_data / "spider_dev" / "dev.json").is_file():
        pytest.skip("real data absent: spider_dev/dev.json not found")
    measured = {}
    for name, sqls in _gold_sqls(shared_data).items():
        sizes = [tree_size(parse_for_analysis(s)) for s in sqls]  # every gold is accepted
        measured[name] = (len(sqls), max(map(len, sqls)), max(n for n, _ in sizes), max(d for _, d in sizes))
    # (golds, longest text in characters, most AST nodes, deepest AST)
    assert measured["spider_dev"] == (1034, 422, 88, 12)
    if "bird_minidev" in measured:
        assert measured["bird_minidev"] == (498, 1231, 234, 18)
    for _, chars, nodes, depth in measured.values():
        assert chars * 10 < MAX_ANALYSIS_CHARS and nodes * 10 < MAX_ANALYSIS_NODES and depth * 6 < MAX_ANALYSIS_DEPTH


# ------------------------------------------------------------------------------------------- ordinals and stars
def test_qualify_sql_keeps_ordinals_that_point_into_a_star():
    def q(sql, schema, expand):
        return qualify_sql(parse_sql(sql), schema, expand_stars=expand).sql(dialect="sqlite")

    # sqlglot alone raises AssertionError on each of these (stars kept, or no schema to expand them)
    assert q("SELECT * FROM students ORDER BY 1", STUDENTS, False) == "SELECT * FROM students AS students ORDER BY 1"
    assert q("SELECT s.* FROM students AS s GROUP BY 1", None, True) == "SELECT s.* FROM students AS s GROUP BY 1"
    assert q("WITH c AS (SELECT * FROM students) SELECT * FROM c ORDER BY 1", None, True).endswith("ORDER BY 1")
    # an ordinal after an unexpanded star is the star's column, never the select item at that index
    assert q("SELECT *, name FROM students ORDER BY 2", None, True).endswith("ORDER BY 2")
    # with the schema the star is expanded; the ordinal stays an ordinal, the output columns are resolved
    assert q("SELECT * FROM students ORDER BY 1", STUDENTS, True) == (
        "SELECT students.id AS id, students.name AS name, students.age AS age FROM students AS students ORDER BY 1")
    # an ordinal before any star is still resolved by qualify
    assert q("SELECT name, age FROM students ORDER BY 2", STUDENTS, False).endswith("ORDER BY age")


def _mutants(sql: str) -> list[str]:
    """The adversarial tester's mutations of a gold: ``*`` with ``ORDER BY 1``, ``*`` with ``GROUP BY 1``,
    and the gold as a CTE read with ``SELECT *`` and ``ORDER BY 1``."""
    sql = sql.strip().rstrip(";")
    tree = parse_sql(sql)
    first = tree
    while isinstance(first, exp.SetOperation):
        first = first.this
    out = [f"WITH q AS ({sql}) SELECT * FROM q ORDER BY 1"]
    if isinstance(first, exp.Select):
        a = tree.copy()
        f = a
        while isinstance(f, exp.SetOperation):
            f = f.this
        f.set("expressions", [exp.Star()])
        a.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Literal.number(1))]))
        out.append(a.sql(dialect="sqlite"))
        b = first.copy()
        for key in ("order", "limit", "having"):
            b.set(key, None)
        b.set("expressions", [exp.Star()])
        b.set("group", exp.Group(expressions=[exp.Literal.number(1)]))
        out.append(b.sql(dialect="sqlite"))
    return out


@pytest.mark.realdata
def test_mutated_spider_golds_never_raise_untyped_errors(spider_root):
    """Over the mutated Spider dev golds (3 mutants per gold, 3,102 queries), every entry point returns or
    raises SQLParseError. Measured before the boundary: all 3,102 crashed component_sets, commitment_set and
    drift_subtype with AssertionError (from sqlglot's qualify), and 2 crashed column_origins."""
    dev = json.loads((spider_root / "dev.json").read_text())
    outcome: Counter = Counter()
    n = 0
    for ex in dev:
        schema = read_schema(str(spider_root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite"))
        for m in _mutants(ex["query"]):
            n += 1
            for name, fn in (("component_sets", lambda: component_sets(m, schema)),
                             ("commitment_set", lambda: commitment_set(m, schema)),
                             ("drift_subtype", lambda: drift_subtype(ex["query"], m)),
                             ("column_origins", lambda: column_origins(m, schema)),
                             ("tables_read", lambda: tables_read(m, schema))):
                try:
                    fn()
                except SQLParseError as e:
                    outcome[(name, e.reason.split(":")[0])] += 1
    assert n == 3102
    # measured: the metric sets work on every mutant; column_origins refuses a '*' over a derived table
    # whose duplicate output names cannot be expanded (2 golds x 2 mutants)
    assert outcome == {("column_origins", "cannot expand '*' into output columns (schema missing or incomplete)"): 2}


def test_an_analysis_error_message_logs_no_sqlglot_warning(caplog):
    """A query whose qualification fails is named in its error by regenerating its SQL; sqlglot used to log
    "Named columns are not supported in table alias." for a VALUES alias with named columns (42 lines in one
    red-team run, from the embedded set's mut_null_pad hack). The text is still the query's."""
    import logging

    import sqlglot

    from textsql_clarify.sql.schema import _safe_sql

    tree = sqlglot.parse_one("SELECT v.a FROM (VALUES (1), (2)) AS v(a)", read="sqlite")
    with caplog.at_level(logging.WARNING, logger="sqlglot"):
        text = _safe_sql(tree)
    assert text.startswith("SELECT v.a FROM (VALUES (1), (2)) AS v")
    assert not [r for r in caplog.records if r.name == "sqlglot"]


# -- id-keyed schema caches and in-place changes --------------------------------------------------------
def test_projection_follows_a_schema_dict_changed_in_place():
    from textsql_clarify.rewards.ex_sql import projection_info

    schema = {"t": {"a": "INT"}}
    assert len(projection_info("SELECT * FROM t", schema)) == 1
    schema["t"]["b"] = "INT"
    assert len(projection_info("SELECT * FROM t", schema)) == 2  # was 1: the key kept for id(schema)
    schema["u"] = {"c": "TEXT"}
    assert len(projection_info("SELECT * FROM t, u", schema)) == 3


def test_fingerprint_follows_a_schema_dict_changed_in_place():
    from textsql_clarify.sql.schema import _fingerprint_once, schema_fingerprint

    schema = {"t": {"a": "INT"}}
    assert _fingerprint_once(schema) == (("t", (("a", "INT"),)),)
    schema["t"]["b"] = "TEXT"
    assert _fingerprint_once(schema) == schema_fingerprint(schema) == (("t", (("a", "INT"), ("b", "TEXT"))),)


def test_shared_analysis_of_a_changed_schema_is_not_the_old_one():
    from textsql_clarify.rewards.ex_sql import projection_info
    from textsql_clarify.sql.schema import clear_analysis_cache, shared_analysis

    clear_analysis_cache()
    schema = {"t": {"a": "INT"}}
    with shared_analysis("SELECT * FROM t", "/db", schema) as memo1:
        assert len(projection_info("SELECT * FROM t", schema)) == 1
    schema["t"]["b"] = "INT"
    with shared_analysis("SELECT * FROM t", "/db", schema) as memo2:
        assert len(projection_info("SELECT * FROM t", schema)) == 2
    assert memo2 is not memo1 and memo2.fp == (("t", (("a", "INT"), ("b", "INT"))),)


def test_a_sandbox_schema_is_read_only_and_keyed_once(tmp_path):
    import copy
    import json
    import pickle

    from textsql_clarify.datasets import embedded_db_path
    from textsql_clarify.rewards import ex_sql
    from textsql_clarify.sql import schema as schema_mod
    from textsql_clarify.sql.readonly import ReadOnlySchema
    from textsql_clarify.sql.sandbox import SQLiteSandbox

    with SQLiteSandbox(embedded_db_path()) as sb:
        s = sb.schema
        assert type(s) is ReadOnlySchema and isinstance(s, dict) and s is sb.schema
        for change in (lambda: s.__setitem__("x", {}), lambda: s["students"].__setitem__("z", "INT"),
                       lambda: s.pop("students"), lambda: s["students"].update(z="INT"), lambda: s.clear(),
                       lambda: s.setdefault("x", {}), lambda: s.__delitem__("students")):
            with pytest.raises(TypeError, match="cannot be changed"):
                change()
        plain = copy.deepcopy(s)
        plain["students"]["z"] = "INT"  # a deep copy is a plain dict to change
        assert type(plain) is dict and "z" not in s["students"]
        again = pickle.loads(pickle.dumps(s))
        assert type(again) is ReadOnlySchema and again == s and type(again["students"]) is not dict
        assert json.loads(json.dumps(s)) == {t: dict(c) for t, c in s.items()}
        # the id-keyed caches apply to it: the key is built once
        ex_sql._NAMES_KEYS.pop(id(s), None)
        schema_mod._FINGERPRINTS.pop(id(s), None)
        k1, f1 = ex_sql._names_key(s), schema_mod._fingerprint_once(s)
        assert ex_sql._NAMES_KEYS[id(s)][1] is k1 and ex_sql._names_key(s) is k1
        assert schema_mod._FINGERPRINTS[id(s)][1] is f1 and schema_mod._fingerprint_once(s) is f1
        assert ex_sql._names_key(plain) != k1 and id(plain) not in ex_sql._NAMES_KEYS  # a plain dict: not kept
        assert schema_mod._fingerprint_once(plain) != f1 and id(plain) not in schema_mod._FINGERPRINTS
