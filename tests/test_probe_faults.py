"""Databases the sandbox must open and keep usable: views that need what only their app defined, and
schemas wider or deeper than the sandbox's SQLite limits.

* A view that uses an application-defined collation or function (``COLLATE mycoll``, ``myfunc(x)``)
  cannot be queried anywhere else: the database still opens, the view is left out of the schema and
  flagged (:func:`~textsql_clarify.sql.schema.unusable_views`, an ``UnusableViewWarning`` naming it),
  and the other tables stay usable, in the sandbox, the env and the generator.
* A refused statement that makes SQLite drop its parsed schema (``VACUUM``) must not leave the connection
  unable to re-parse a schema that the sandbox's limits (:data:`~textsql_clarify.sql.guards.SQLITE_LIMITS`)
  would refuse: a 2,000-column table, a view whose expression nests 150 deep, 150 chained views.

Every database is built here under ``tmp_path`` with ``sqlite3``; expected rows are read from the same
file with a plain ``sqlite3`` connection.
"""
from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest

from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.envs.render import schema_text
from textsql_clarify.samples import Sample
from textsql_clarify.sql.guards import MAX_COLUMNS, SQLITE_LIMITS
from textsql_clarify.sql.isolated import WorkerPool
from textsql_clarify.sql.sandbox import DatabaseOpenError, SQLiteSandbox, get_sandbox
from textsql_clarify.sql.schema import UnusableViewWarning, read_schema, unusable_views

from test_database import forbidden_statements

#: Columns of the wide table: SQLite's own default limit, far over the sandbox's :data:`MAX_COLUMNS`.
WIDE_COLUMNS = 2000
#: Views in the chain ``v0 <- v1 <- ... <- v149``, and the nesting depth of one view's expression.
NESTED_VIEWS = 150

GOLD = "SELECT name FROM small ORDER BY id"


def _plain_rows(db: Path, sql: str) -> list[tuple]:
    """What a plain read-only ``sqlite3`` connection returns for ``sql`` on ``db`` (the expected rows)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _small_table(con: sqlite3.Connection) -> None:
    con.execute("CREATE TABLE small(id INTEGER PRIMARY KEY, name TEXT, x INTEGER)")
    con.executemany("INSERT INTO small VALUES (?, ?, ?)", [(i, f"name{i}", i % 3) for i in range(1, 8)])


@pytest.fixture
def wide_db(tmp_path: Path) -> Path:
    """``small`` (7 rows), ``wide`` (2,000 columns, one row), ``deep_expr`` (a view whose expression nests
    150 deep, over ``EXPR_DEPTH``) and the chain of 150 views ``v0 .. v149`` over ``small``."""
    assert WIDE_COLUMNS > MAX_COLUMNS and NESTED_VIEWS > SQLITE_LIMITS["EXPR_DEPTH"]
    path = tmp_path / "wide.sqlite"
    con = sqlite3.connect(path)
    _small_table(con)
    con.execute("CREATE TABLE wide(" + ", ".join(f"c{i} INTEGER" for i in range(WIDE_COLUMNS)) + ")")
    con.execute("INSERT INTO wide(c0, c1, c1999) VALUES (1, 2, 3)")
    con.execute("CREATE VIEW deep_expr AS SELECT id" + " + 1" * NESTED_VIEWS + " AS n FROM small")
    con.execute("CREATE VIEW v0 AS SELECT id, name FROM small")
    for i in range(1, NESTED_VIEWS):
        con.execute(f"CREATE VIEW v{i} AS SELECT id, name FROM (SELECT * FROM v{i - 1})")
    con.commit()
    con.close()
    return path


@pytest.fixture
def app_view_db(tmp_path: Path) -> Path:
    """``small`` and two views the making app could query only with its own definitions: ``by_coll``
    (``ORDER BY name COLLATE mycoll``) and ``by_func`` (``myfunc(x)``); ``ok_view`` needs nothing."""
    path = tmp_path / "app_views.sqlite"
    con = sqlite3.connect(path)
    con.create_collation("mycoll", lambda a, b: (a > b) - (a < b))
    con.create_function("myfunc", 1, lambda x: x)
    _small_table(con)
    con.execute("CREATE VIEW by_coll AS SELECT name FROM small ORDER BY name COLLATE mycoll")
    con.execute("CREATE VIEW by_func AS SELECT myfunc(x) AS y FROM small")
    con.execute("CREATE VIEW ok_view AS SELECT id, name FROM small WHERE x = 1")
    con.commit()
    con.close()
    return path


def _sample(db: Path, sid: str = "probe-1") -> Sample:
    return Sample(id=sid, db_id=db.stem, db_path=str(db), question="List the names by id.", group="answerable",
                  subcategory="answerable", gold_sql=GOLD)


# -- refused statements on a schema over the sandbox's limits -------------------------------------------------
def test_every_refused_statement_leaves_a_wide_and_deep_schema_usable(wide_db, tmp_path):
    small = _plain_rows(wide_db, GOLD)
    chained = _plain_rows(wide_db, f"SELECT id, name FROM v{NESTED_VIEWS - 1} ORDER BY id")
    wide_row = _plain_rows(wide_db, "SELECT c0, c1, c1999 FROM wide")
    with SQLiteSandbox(wide_db) as sb:
        for sql in forbidden_statements("small", tmp_path):
            r = sb.execute(sql)
            assert not r.ok, sql
            after = sb.execute(GOLD)
            assert after.ok, (sql, after.error_message)
            assert list(after.rows) == small
            assert list(sb.execute(f"SELECT id, name FROM v{NESTED_VIEWS - 1} ORDER BY id").rows) == chained
            assert list(sb.execute("SELECT c0, c1, c1999 FROM wide").rows) == wide_row
        # the limits are still in force once the schema was read again: a result over MAX_COLUMNS is refused
        r = sb.execute("SELECT * FROM wide")
        assert r.error_kind == "runtime" and "too many columns" in r.error_message
        r = sb.execute("SELECT n FROM deep_expr")
        assert r.error_kind == "runtime" and "maximum depth" in r.error_message
        assert sb.execute(GOLD).ok


def test_vacuum_on_a_shared_sandbox_leaves_fresh_handles_usable(wide_db):
    small = _plain_rows(wide_db, GOLD)
    sb = get_sandbox(wide_db)
    assert sb.execute("VACUUM").error_kind == "forbidden"
    again = get_sandbox(wide_db)  # the same shared connection, as a fresh env in this process gets it
    assert again is sb
    assert list(again.execute(GOLD).rows) == small
    assert list(again.execute_gold("g", GOLD).rows) == small


def test_env_scores_correct_sql_after_a_refused_vacuum_in_this_and_fresh_envs(wide_db):
    sample = _sample(wide_db)
    env = TextSQLClarifyEnv(samples=[sample])
    env.reset(options={"sample_id": sample.id})
    _, reward, terminated, _, info = env.step("<sql>VACUUM</sql>")
    assert terminated and reward == 0.0
    assert info["trajectory"].turns[-1].execution["error_kind"] == "forbidden"
    for e in (env, TextSQLClarifyEnv(samples=[sample])):
        e.reset(options={"sample_id": sample.id})
        _, reward, terminated, _, info = e.step(f"<sql>{GOLD}</sql>")
        assert terminated
        traj = info["trajectory"]
        assert traj.gold_status == "ok"
        assert traj.scores["ex"] == 1.0
        assert reward > 0.0
    env.close()


def test_isolated_worker_keeps_a_wide_schema_usable_after_refused_statements(wide_db, tmp_path):
    small = _plain_rows(wide_db, GOLD)
    with WorkerPool(size=1) as pool:
        sb = pool.sandbox(wide_db)
        for sql in ("VACUUM", "CREATE TABLE extra(a INTEGER)", f"VACUUM INTO '{tmp_path / 'copy.sqlite'}'"):
            assert not sb.execute(sql).ok
            r = sb.execute(GOLD)
            assert r.ok, (sql, r.error_message)
            assert list(r.rows) == small


# -- views that need the making app's collation or function -------------------------------------------------
def test_read_schema_leaves_out_and_flags_views_that_need_app_definitions(app_view_db):
    with pytest.warns(UnusableViewWarning) as caught:
        schema = read_schema(str(app_view_db))
    text = " ".join(str(w.message) for w in caught)
    assert "'by_coll'" in text and "'by_func'" in text and "mycoll" in text and "myfunc" in text
    plain = _plain_rows(app_view_db, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name")
    assert sorted(schema) == sorted(n.lower() for (n,) in plain if n not in ("by_coll", "by_func"))
    assert list(schema["ok_view"]) == ["id", "name"]
    flagged = unusable_views(str(app_view_db))
    assert sorted(flagged) == ["by_coll", "by_func"]
    assert "no such collation sequence: mycoll" in flagged["by_coll"]
    assert "no such function: myfunc" in flagged["by_func"]


def test_sandbox_opens_with_app_views_flagged_and_other_tables_usable(app_view_db):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusableViewWarning)
        with SQLiteSandbox(app_view_db) as sb:
            assert "by_func" not in sb.schema and "by_coll" not in sb.schema and "small" in sb.schema
            assert sorted(sb.unusable_views) == ["by_coll", "by_func"]
            assert list(sb.execute(GOLD).rows) == _plain_rows(app_view_db, GOLD)
            r = sb.execute("SELECT y FROM by_func")
            assert r.error_kind == "runtime" and "myfunc" in r.error_message
            # the schema shown to the agent marks each such view
            text = schema_text(str(app_view_db))
            assert "CREATE VIEW by_func" in text
            marked = [line for line in text.splitlines() if line.startswith("-- ")]
            assert len(marked) == 2 and all("cannot be queried" in line for line in marked)


def test_env_reset_on_app_views_succeeds_and_scores_correct_sql(app_view_db):
    sample = _sample(app_view_db)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusableViewWarning)
        env = TextSQLClarifyEnv(samples=[sample])
        obs, _ = env.reset(options={"sample_id": sample.id})
        _, _, terminated, _, info = env.step(f"<sql>{GOLD}</sql>")
    assert terminated and info["trajectory"].gold_status == "ok" and info["trajectory"].scores["ex"] == 1.0
    env.close()


def test_a_malformed_schema_is_a_database_open_error_not_a_raw_sqlite_error(tmp_path):
    path = tmp_path / "malformed.sqlite"
    con = sqlite3.connect(path)
    _small_table(con)
    con.execute("PRAGMA writable_schema = ON")
    con.execute("INSERT INTO sqlite_master VALUES ('table', 'broken', 'broken', 0, 'CREATE TABLE broken(')")
    con.commit()
    con.close()
    with pytest.raises(DatabaseOpenError) as e:
        SQLiteSandbox(path)
    assert "malformed database schema" in str(e.value)
    env = TextSQLClarifyEnv(samples=[_sample(path)])
    with pytest.raises(DatabaseOpenError):
        env.reset(options={"sample_id": "probe-1"})


def test_generate_skips_app_views_with_a_warning_and_writes_samples(app_view_db, tmp_path):
    import json

    from textsql_clarify.generation.anchors import load_anchors
    from textsql_clarify.generation.pipeline import generate
    from textsql_clarify.generation.recipes import make_recipes

    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in [
        {"id": "q1", "question": "List all names.", "sql": "SELECT name FROM small"},
        {"id": "q2", "question": "How many rows have x above 0?", "sql": "SELECT count(*) FROM small WHERE x > 0"},
    ]), encoding="utf-8")
    anchors = load_anchors(None, db=str(app_view_db), queries=str(queries))
    with pytest.warns(UnusableViewWarning) as caught:
        report = generate(anchors, make_recipes("drift,missing_schema"), tmp_path / "out", seed=0, progress=False)
    assert any("'by_func'" in str(w.message) for w in caught)
    assert report.samples_path.is_file()
    # no anchor failed on the views: every recipe ran, and samples were written
    assert {t.recipe: dict(t.reasons.get("error", {})) for t in report.tables} == {"drift": {}, "missing_schema": {}}
    written = report.samples_path.read_text(encoding="utf-8").splitlines()
    assert report.counts["samples"] > 0 and len(written) == report.counts["lines"]
