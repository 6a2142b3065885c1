"""The read-only SQLite sandbox: refusals leave files unchanged, timeouts really interrupt, typed results."""
from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from textsql_clarify.database import (
    ERROR_KINDS,
    DatabaseOpenError,
    ExecutionResult,
    SandboxClosedError,
    SQLiteSandbox,
    get_sandbox,
)
from textsql_clarify.sqlschema import read_schema

RUNAWAY_CTE = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_db(path: Path, script: str) -> Path:
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    rows = ",".join(f"({i}, 'name{i}', {i * 1.5})" for i in range(1, 21))
    return make_db(tmp_path / "toy.sqlite",
                   f"CREATE TABLE t(x INTEGER PRIMARY KEY, y TEXT, z REAL); INSERT INTO t VALUES {rows};"
                   "CREATE INDEX t_y ON t(y);")


def forbidden_statements(table: str, tmp_path: Path) -> list[str]:
    """Writes, DDL, ATTACH, side-effect PRAGMAs, transactions, extensions, multiple statements."""
    return [
        f'DROP TABLE "{table}"',
        f"ATTACH DATABASE '{tmp_path / 'other.sqlite'}' AS other",
        "PRAGMA writable_schema=1",
        "PRAGMA writable_schema = ON",
        f'INSERT INTO "{table}" DEFAULT VALUES',
        f'SELECT 1; DROP TABLE "{table}"',
        "SELECT 1; SELECT 2",
        "SELECT load_extension('/nonexistent/ext')",
        f'DELETE FROM "{table}"',
        f'UPDATE "{table}" SET rowid = rowid + 1',
        "CREATE TABLE extra(a INTEGER)",
        "CREATE TEMP TABLE scratch(a INTEGER)",
        f'CREATE VIEW v AS SELECT * FROM "{table}"',
        f'ALTER TABLE "{table}" RENAME TO gone',
        f"VACUUM INTO '{tmp_path / 'copy.sqlite'}'",
        "VACUUM",
        "BEGIN IMMEDIATE",
        "SAVEPOINT s1",
        "PRAGMA user_version = 7",
        "PRAGMA journal_mode = DELETE",
        "DETACH DATABASE main",
        "REINDEX",
        "ANALYZE",
        "UPDATE sqlite_master SET sql = 'x'",
    ]


# -- results ---------------------------------------------------------------------------------
def test_select_gives_typed_result(db):
    with SQLiteSandbox(db) as sb:
        r = sb.execute("SELECT x, y AS label, z FROM t WHERE x <= 3 ORDER BY x")
    assert r.ok and r.error_kind is None and r.error_message is None
    assert r.columns == ("x", "label", "z")
    assert r.rows == ((1, "name1", 1.5), (2, "name2", 3.0), (3, "name3", 4.5))
    assert r.row_count == 3 and not r.truncated
    assert 0 < r.elapsed_s < 1


def test_row_cap_marks_truncated(db):
    with SQLiteSandbox(db, row_cap=5) as sb:
        capped = sb.execute("SELECT x FROM t ORDER BY x")
        exact = sb.execute("SELECT x FROM t ORDER BY x LIMIT 5")
    assert capped.truncated and capped.rows == ((1,), (2,), (3,), (4,), (5,))
    assert not exact.truncated and exact.row_count == 5


def test_execution_result_rejects_unknown_error_kind():
    with pytest.raises(ValueError, match="error_kind"):
        ExecutionResult((), (), 0.0, error_kind="boom")
    assert set(ERROR_KINDS) == {"syntax", "forbidden", "timeout", "runtime"}


# -- refusals --------------------------------------------------------------------------------
def test_forbidden_statements_refused_and_file_unchanged(db, tmp_path):
    before = sha256(db)
    with SQLiteSandbox(db) as sb:
        for sql in forbidden_statements("t", tmp_path):
            r = sb.execute(sql)
            assert r.error_kind == "forbidden", (sql, r)
            assert r.error_message and r.rows == () and r.columns == ()
            assert sha256(db) == before, sql
            # the connection is still usable and the data intact
            assert sb.execute("SELECT count(*) FROM t").rows == ((20,),), sql
            assert sb.execute("CREATE TEMP TABLE probe(a)").error_kind == "forbidden"
    assert not (tmp_path / "copy.sqlite").exists()
    assert not (tmp_path / "other.sqlite").exists()
    assert sha256(db) == before


def test_refusal_names_the_refused_action(db, tmp_path):
    with SQLiteSandbox(db) as sb:
        assert "ATTACH" in sb.execute(f"ATTACH '{tmp_path / 'x.sqlite'}' AS x").error_message
        assert "load_extension" in sb.execute("SELECT load_extension('x')").error_message
        assert "writable_schema" in sb.execute("PRAGMA writable_schema=1").error_message
        assert "one SQL statement" in sb.execute("SELECT 1; SELECT 2").error_message


def test_read_only_pragmas_and_recursive_cte_allowed(db):
    with SQLiteSandbox(db) as sb:
        info = sb.execute("PRAGMA table_info(t)")
        assert info.ok and [row[1] for row in info.rows] == ["x", "y", "z"]
        assert sb.execute("PRAGMA index_list(t)").ok
        cte = sb.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4) "
                         "SELECT sum(i) FROM n")
        assert cte.rows == ((10,),)
        assert sb.execute("SELECT x FROM t;").ok  # a trailing semicolon is one statement


@pytest.mark.realdata
def test_forbidden_statements_leave_every_spider_db_unchanged(spider_root, tmp_path):
    dbs = sorted((spider_root / "database").glob("*/*.sqlite"))
    assert len(dbs) == 20
    for path in dbs:
        before = sha256(path)
        table = sorted(read_schema(str(path)))[0]
        with SQLiteSandbox(path) as sb:
            for sql in forbidden_statements(table, tmp_path):
                assert sb.execute(sql).error_kind == "forbidden", (path.name, sql)
        assert sha256(path) == before, path.name
    assert not list(tmp_path.iterdir())


# -- error kinds -----------------------------------------------------------------------------
@pytest.mark.parametrize("sql", ["SELEC x FROM t", "SELECT x FROM t WHERE", "SELECT 'open", "", "   ",
                                 "-- only a comment", ";", "SELECT 'a\x00b'"])
def test_syntax_errors(db, sql):
    with SQLiteSandbox(db) as sb:
        r = sb.execute(sql)
    assert r.error_kind == "syntax" and r.error_message


@pytest.mark.parametrize("sql", ["SELECT * FROM missing", "SELECT nope FROM t", "SELECT count(*) FROM t GROUP BY sum(x)",
                                 "SELECT abs(-9223372036854775807 - 1)", "SELECT randomblob(200000000)"])
def test_runtime_errors(db, sql):
    with SQLiteSandbox(db) as sb:
        r = sb.execute(sql)
        assert r.error_kind == "runtime" and r.error_message
        assert sb.execute("SELECT 1").ok


def test_non_string_sql_is_a_type_error(db):
    with SQLiteSandbox(db) as sb, pytest.raises(TypeError, match="str"):
        sb.execute(None)  # type: ignore[arg-type]


# -- time limit ------------------------------------------------------------------------------
@pytest.mark.parametrize("sql", [RUNAWAY_CTE, "SELECT count(*) FROM t a, t b, t c, t d, t e, t f, t g, t h"])
def test_runaway_query_interrupted_within_limit(db, sql):
    before = sha256(db)
    with SQLiteSandbox(db, timeout_s=0.5) as sb:
        t0 = time.perf_counter()
        r = sb.execute(sql)
        wall = time.perf_counter() - t0
        assert r.error_kind == "timeout", r
        assert 0.5 <= r.elapsed_s <= 0.55 and wall <= 0.55
        after = sb.execute("SELECT count(*) FROM t")
        assert after.ok and after.rows == ((20,),)
    assert sha256(db) == before


def test_external_interrupt_is_runtime_not_timeout(db):
    with SQLiteSandbox(db, timeout_s=5.0) as sb:
        timer = threading.Timer(0.2, sb.interrupt)
        timer.start()
        r = sb.execute(RUNAWAY_CTE)
        timer.join()
        assert r.error_kind == "runtime" and "interrupt" in r.error_message
        assert r.elapsed_s < 2.0
        assert sb.execute("SELECT 1").ok


# -- gold cache, sharing, lifecycle ----------------------------------------------------------
def test_execute_gold_cached_per_key_and_sql(db):
    with SQLiteSandbox(db) as sb:
        first = sb.execute_gold("s1", "SELECT max(x) FROM t")
        assert first.rows == ((20,),)
        assert sb.execute_gold("s1", "SELECT max(x) FROM t") is first
        other_key = sb.execute_gold("s2", "SELECT max(x) FROM t")
        assert other_key is not first and other_key.rows == first.rows
        other_sql = sb.execute_gold("s1", "SELECT min(x) FROM t")
        assert other_sql.rows == ((1,),)
        failed = sb.execute_gold("bad", "SELECT x, FROM t")
        assert failed.error_kind == "syntax" and sb.execute_gold("bad", "SELECT x, FROM t") is failed
        with pytest.raises(TypeError):
            sb.execute_gold(3, "SELECT 1")  # type: ignore[arg-type]


def test_gold_timeouts_are_not_cached(db):
    with SQLiteSandbox(db, timeout_s=0.2) as sb:
        first = sb.execute_gold("slow", RUNAWAY_CTE)
        second = sb.execute_gold("slow", RUNAWAY_CTE)
    assert first.error_kind == second.error_kind == "timeout" and second is not first


def test_get_sandbox_shares_one_connection_per_db_and_settings(db):
    a = get_sandbox(db)
    assert get_sandbox(str(db)) is a
    b = get_sandbox(db, timeout_s=1.0)
    assert b is not a and b.timeout_s == 1.0 and get_sandbox(db, timeout_s=1.0) is b
    a.close()
    c = get_sandbox(db)
    assert c is not a and not c.closed and c.execute("SELECT 1").ok
    with pytest.raises(TypeError, match="unknown keyword"):
        get_sandbox(db, timeout=1)
    b.close()
    c.close()


def test_bad_files_and_settings(tmp_path, db):
    with pytest.raises(FileNotFoundError):
        SQLiteSandbox(tmp_path / "absent.sqlite")
    with pytest.raises(FileNotFoundError):
        SQLiteSandbox(tmp_path)
    text = tmp_path / "notes.sqlite"
    text.write_text("this is not a database, just some text " * 50)
    with pytest.raises(DatabaseOpenError, match="notes.sqlite"):
        SQLiteSandbox(text)
    with pytest.raises(ValueError, match="timeout_s"):
        SQLiteSandbox(db, timeout_s=0)
    with pytest.raises(ValueError, match="row_cap"):
        SQLiteSandbox(db, row_cap=0)


def test_close_and_context_manager(db):
    with SQLiteSandbox(db) as sb:
        assert not sb.closed
    assert sb.closed
    with pytest.raises(SandboxClosedError):
        sb.execute("SELECT 1")
    sb.close()  # twice is fine


def test_schema_is_read_schema(db):
    with SQLiteSandbox(db) as sb:
        assert sb.schema == read_schema(str(db)) == {"t": {"x": "INTEGER", "y": "TEXT", "z": "REAL"}}


def test_threads_share_one_sandbox(db):
    sb = SQLiteSandbox(db)
    errors: list = []

    def work(k: int) -> None:
        for i in range(1, 41):
            r = sb.execute(f"SELECT y FROM t WHERE x = {(i + k) % 20 + 1}")
            if r.rows != ((f"name{(i + k) % 20 + 1}",),):
                errors.append(r)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sb.close()
    assert errors == []
