"""The read-only SQLite sandbox: refusals leave files unchanged, timeouts really interrupt, typed results."""
from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import pytest

import textsql_clarify.sql.sandbox as database
from textsql_clarify.sql.sandbox import (
    ERROR_KINDS,
    MAX_SQL_BYTES,
    MAX_VALUE_BYTES,
    SQLITE_LIMITS,
    DatabaseOpenError,
    ExecutionResult,
    SandboxClosedError,
    SQLiteSandbox,
    get_sandbox,
)
from textsql_clarify.sql.schema import read_schema

from conftest import generous_bound

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
    assert isinstance(r.elapsed_s, float) and r.elapsed_s > 0


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
def test_runaway_query_interrupted_at_its_limit(db, sql):
    # how far past the limit it stops is measured in bench/bench_sandbox_limits.py, not asserted here
    before = sha256(db)
    with SQLiteSandbox(db, timeout_s=0.5) as sb:
        with generous_bound("a runaway query under a 0.5 s limit", stop=sb.interrupt):
            r = sb.execute(sql)
        assert r.error_kind == "timeout", r
        assert r.error_message == "interrupted after the 0.5 s time limit"
        assert r.elapsed_s >= 0.5  # never stopped before its limit
        after = sb.execute("SELECT count(*) FROM t")
        assert after.ok and after.rows == ((20,),)
    assert sha256(db) == before


def test_external_interrupt_is_runtime_not_timeout(db):
    with SQLiteSandbox(db, timeout_s=5.0) as sb:
        timer = threading.Timer(0.2, sb.interrupt)
        timer.start()
        with generous_bound("a runaway query interrupted from another thread after 0.2 s"):
            r = sb.execute(RUNAWAY_CTE)
        timer.join()
        # runtime, not timeout: the 5 s limit did not fire, the interrupt did
        assert r.error_kind == "runtime" and "interrupt" in r.error_message
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


# -- size limits: no single VM instruction may run long or allocate a lot -------------------------
needs_setlimit = pytest.mark.skipif(not hasattr(sqlite3.Connection, "setlimit"),
                                    reason="Connection.setlimit needs Python >= 3.11")


def test_limits_live_in_sandbox_guards_and_stay_importable_from_database():
    """The limits moved to ``sandbox_guards``; ``database`` re-exports the very same objects, so
    changing ``database.SQLITE_LIMITS`` still changes what every new sandbox sets."""
    from textsql_clarify.sql import guards as sandbox_guards

    for name in ("MAX_VALUE_BYTES", "MAX_SQL_BYTES", "SQLITE_LIMITS", "MAX_TRIM_WORK", "MAX_SEARCH_WORK"):
        assert getattr(database, name) is getattr(sandbox_guards, name), name


def raw_sqlite(sql: str):
    """The same SQL on a plain in-memory sqlite3 connection (SQLite's own built-ins)."""
    con = sqlite3.connect(":memory:")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@needs_setlimit
@pytest.mark.parametrize("sql", ["SELECT zeroblob(5000)", "SELECT length(hex(zeroblob(2048)))",
                                 "SELECT length(replace(hex(zeroblob(1100)), '0', 'ab'))"])
def test_value_over_the_cap_fails_typed_and_fast(db, sql):
    with SQLiteSandbox(db, max_value_bytes=4096) as sb:
        assert sb.execute("SELECT length(zeroblob(4000))").rows == ((4000,),)
        with generous_bound(sql, stop=sb.interrupt):
            r = sb.execute(sql)
        assert r.error_kind == "runtime" and r.error_message.startswith("value too large (limit 4096 bytes)")
        assert sb.execute("SELECT count(*) FROM t").rows == ((20,),)


@needs_setlimit
def test_default_value_cap_stops_huge_values_fast(db):
    with SQLiteSandbox(db, timeout_s=0.05) as sb:
        for sql in [f"SELECT zeroblob({MAX_VALUE_BYTES + 1})",
                    "SELECT " + "+".join(["length(replace(hex(zeroblob(16000000)),'0','1'))"] * 40),
                    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 40) "
                    "SELECT zeroblob(60000000) FROM r"]:
            with generous_bound(sql[:60], stop=sb.interrupt):
                r = sb.execute(sql)
            # runtime, not timeout: the value cap stopped it before the 0.05 s limit could
            assert r.error_kind == "runtime" and f"limit {MAX_VALUE_BYTES} bytes" in r.error_message, sql
        assert sb.execute("SELECT x FROM t WHERE x = 3").rows == ((3,),)


@needs_setlimit
def test_stored_value_over_the_cap_cannot_be_read(tmp_path):
    path = make_db(tmp_path / "big.sqlite", "CREATE TABLE d(id INTEGER, body TEXT);"
                                            "INSERT INTO d VALUES (1, printf('%.*c', 5000, 'a'));")
    with SQLiteSandbox(path, max_value_bytes=4096) as sb:
        assert sb.execute("SELECT id FROM d").rows == ((1,),)
        assert sb.execute("SELECT substr(body, 1, 3) FROM d").error_kind == "runtime"
    with SQLiteSandbox(path, max_value_bytes=8192) as sb:
        assert sb.execute("SELECT length(body) FROM d").rows == ((5000,),)


@pytest.mark.parametrize("sql", ["SELECT printf('%.*c', 400000000, 'x')", "SELECT printf('%.2000000000c', 'x')",
                                 "SELECT format('%-3.*c|', -2000000000, 'x')",
                                 "SELECT printf('%.*c%.*c', 600000, 'x', 600000, 'y')"])
def test_printf_character_repeat_over_the_cap_fails_fast(db, sql):
    # SQLite 3.40 loops over the whole %c precision even past its length limit (1.25 s for 4e8)
    with SQLiteSandbox(db, timeout_s=0.05) as sb:
        with generous_bound(sql, stop=sb.interrupt):
            r = sb.execute(sql)
        # the printf guard's message, and runtime rather than timeout: it refused before the limit
        assert r.error_kind == "runtime" and "value too large" in r.error_message and "%c" in r.error_message
        assert sb.execute("SELECT 1").rows == ((1,),)


@pytest.mark.parametrize("sql", [
    "SELECT printf('%.*c', 5, 'x'), printf('%5.2f|%-4d|%s|%q', 3.14159, 42, 'ab', 'it''s'), printf(NULL)",
    "SELECT printf('%,d %x %c%c %.3s %!.2e', 1234567, 255, 'yes', 'no', 'abcdef', 12345.678)",
    "SELECT format('%d%%', 50), format('%.*c', 3, 'z'), format('%*d', -4, 7)",
    "SELECT trim('xxabcxx', 'x'), ltrim('  ab  '), rtrim('abccc', 'c'), ltrim(120, 1), trim(NULL, 'x')",
    "SELECT replace('a.b.c', '.', '::'), replace(5, '', 'x'), replace(1.5, '.', ','), replace('ab', 'b', NULL)",
    "SELECT instr('hello', 'l'), instr(x'010203', x'03'), instr('abc', ''), instr(12345, 34), instr(NULL, 'a')",
])
def test_guarded_functions_return_what_sqlite_returns(db, sql):
    with SQLiteSandbox(db) as sb:
        r = sb.execute(sql)
    assert r.ok, r
    assert list(r.rows) == raw_sqlite(sql)
    assert [type(v) for v in r.rows[0]] == [type(v) for v in raw_sqlite(sql)[0]]


def test_guarded_functions_over_table_rows(db):
    with SQLiteSandbox(db) as sb:
        r = sb.execute("SELECT replace(y, 'name', 'n'), instr(y, '1'), rtrim(y, '0123456789'), printf('%03d', x) "
                       "FROM t WHERE x IN (1, 10) ORDER BY x")
    assert r.rows == (("n1", 5, "name", "001"), ("n10", 5, "name", "010"))


@pytest.mark.parametrize("sql,name", [
    # 80,000 x 80,001 character comparisons: ~9.7 s unguarded
    ("WITH a(s) AS (SELECT replace(hex(zeroblob(40000)), '0', 'a')) "
     "SELECT length(ltrim(s, replace(s, 'a', 'b') || 'a')) FROM a", "ltrim"),
    ("WITH a(s) AS (SELECT replace(hex(zeroblob(40000)), '0', 'a')) SELECT trim(s, s || 'b') FROM a", "trim"),
    # 1,048,000 x 524,001 bytes of memcmp: ~2.6 s unguarded
    ("WITH a(s) AS (SELECT replace(hex(zeroblob(524000)), '0', 'a')) "
     "SELECT length(replace(s, substr(s, 1, 524000) || 'b', '')) FROM a", "replace"),
    ("WITH a(s) AS (SELECT replace(hex(zeroblob(524000)), '0', 'a')) "
     "SELECT instr(s, substr(s, 1, 524000) || 'b') FROM a", "instr"),
])
def test_quadratic_calls_refused_fast(db, sql, name):
    with SQLiteSandbox(db, timeout_s=0.05, max_value_bytes=1 << 20) as sb:  # 1 MiB values: the guard, not the cap
        with generous_bound(f"{name}() on a quadratic input", stop=sb.interrupt):
            r = sb.execute(sql)
        # the guard's refusal, and runtime rather than timeout: it refused before the 0.05 s limit
        assert r.error_kind == "runtime" and r.error_message.startswith(f"{name}(): too expensive")
        assert sb.execute("SELECT max(x) FROM t").rows == ((20,),)


def test_function_used_by_the_schema_is_left_to_sqlite(tmp_path):
    # trusted_schema=OFF refuses application functions inside views, so replace() stays SQLite's
    path = make_db(tmp_path / "view.sqlite", "CREATE TABLE t(x INTEGER, y TEXT); INSERT INTO t VALUES (1, 'name1');"
                                             "CREATE VIEW v AS SELECT x, replace(y, 'name', 'n') AS r FROM t;")
    with SQLiteSandbox(path) as sb:
        assert sb.execute("SELECT r FROM v").rows == (("n1",),)
        assert sb.execute("SELECT instr(r, '1') FROM v").rows == ((2,),)


@needs_setlimit
def test_sql_length_cap(db):
    pad = "x" * (MAX_SQL_BYTES - 100)
    with SQLiteSandbox(db) as sb:
        assert sb.execute(f"SELECT count(*) FROM t -- {pad}").rows == ((20,),)
        r = sb.execute(f"SELECT count(*) FROM t -- {pad}{pad}")
        assert r.error_kind == "runtime" and r.error_message.startswith(f"SQL too long (limit {MAX_SQL_BYTES} bytes)")
        assert sb.execute("SELECT 1").ok
    with SQLiteSandbox(db, max_sql_bytes=2000) as sb:
        assert "limit 2000 bytes" in sb.execute(f"SELECT 1 -- {'y' * 2000}").error_message


@needs_setlimit
def test_structural_limits(db):
    depth, compound, pattern = (SQLITE_LIMITS[k] for k in ("EXPR_DEPTH", "COMPOUND_SELECT", "LIKE_PATTERN_LENGTH"))
    with SQLiteSandbox(db) as sb:
        assert sb.execute("SELECT " + "+".join(["x"] * (depth // 2)) + " FROM t WHERE x = 2").rows == ((depth,),)
        deep = sb.execute("SELECT " + "+".join(["x"] * (depth + 1)) + " FROM t")
        assert deep.error_kind == "runtime" and f"maximum depth {depth}" in deep.error_message
        assert sb.execute(" UNION ".join(["SELECT 1"] * 3)).rows == ((1,),)
        many = sb.execute(" UNION ALL ".join(["SELECT 1"] * (compound + 1)))
        assert many.error_kind == "runtime" and "compound SELECT" in many.error_message
        assert sb.execute(f"SELECT count(*) FROM t WHERE y LIKE '%{'_' * (pattern - 2)}%'").rows == ((0,),)
        like = sb.execute(f"SELECT count(*) FROM t WHERE y LIKE '%{'_' * (pattern - 1)}%'")
        assert like.error_kind == "runtime" and "pattern too complex" in like.error_message
        assert sb.execute("SELECT count(*) FROM t WHERE y LIKE 'name1%'").rows == ((11,),)


# -- result byte cap -------------------------------------------------------------------------------
BLOB_ROWS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 50) SELECT n, zeroblob(100000) FROM r"


def test_result_byte_cap_marks_truncated(db):
    with SQLiteSandbox(db, max_result_bytes=1_000_000) as sb:
        r = sb.execute(BLOB_ROWS)
        # each row is 100,000 bytes plus a few of framing: 9 rows fit in 1,000,000 bytes
        assert r.ok and r.truncated and r.row_count == 9
        assert [row[0] for row in r.rows] == list(range(1, 10)) and r.rows[0][1] == bytes(100000)
        small = sb.execute("SELECT x, y FROM t ORDER BY x")
        assert small.ok and not small.truncated and small.row_count == 20
    with SQLiteSandbox(db, max_result_bytes=10_000_000) as sb:
        full = sb.execute(BLOB_ROWS)
        assert full.ok and not full.truncated and full.row_count == 50


def test_row_wider_than_the_byte_cap_keeps_no_rows(db):
    with SQLiteSandbox(db, max_result_bytes=50_000) as sb:
        r = sb.execute("SELECT zeroblob(60000), 1")
        assert r.ok and r.truncated and r.rows == () and r.columns == ("zeroblob(60000)", "1")
        assert sb.execute("SELECT x FROM t WHERE x < 3 ORDER BY x").rows == ((1,), (2,))


def test_default_byte_cap_bounds_many_large_values(db):
    # 100,000 rows of 1,000,000 bytes would be 100 GB; at most ~64 MiB are kept (values up to 1 MiB allowed)
    with SQLiteSandbox(db, max_value_bytes=1 << 20) as sb:
        r = sb.execute("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 100000) "
                       "SELECT zeroblob(1000000) FROM r")
        assert r.ok and r.truncated and r.row_count == 67
        assert sum(len(row[0]) for row in r.rows) <= database.MAX_RESULT_BYTES


def test_row_cap_and_byte_cap_together(db):
    with SQLiteSandbox(db, row_cap=7, max_result_bytes=1_000_000) as sb:
        r = sb.execute(BLOB_ROWS)
        assert r.truncated and r.row_count == 7


# -- watchdog --------------------------------------------------------------------------------------
def test_watchdog_alone_enforces_the_time_limit(db, monkeypatch):
    monkeypatch.setattr(database, "PROGRESS_EVERY", 2**31 - 1)  # the progress handler never fires
    with SQLiteSandbox(db, timeout_s=0.3) as sb:
        # without the watchdog it would run forever: the timer's interrupt would make it "runtime"
        with generous_bound("a runaway CTE with the progress handler off", stop=sb.interrupt):
            r = sb.execute(RUNAWAY_CTE)
        assert r.error_kind == "timeout", r
        assert r.elapsed_s >= 0.3
        for _ in range(50):  # no stray interrupt reaches later statements
            assert sb.execute("SELECT count(*) FROM t").rows == ((20,),)


@pytest.mark.parametrize("progress", ["on", "off"])
def test_heavy_rows_stop_at_the_deadline(db, monkeypatch, progress):
    # ~30 VM instructions per row, each row ~5 ms: the progress handler alone would see only every ~33rd row.
    # With it off, only the watchdog can stop the 3000 rows (~15 s): "timeout" proves it interrupts
    # between heavy rows. How soon after the deadline: bench/bench_sandbox_limits.py.
    if progress == "off":
        monkeypatch.setattr(database, "PROGRESS_EVERY", 2**31 - 1)
    sql = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 3000) "
           "SELECT length(replace(hex(zeroblob(500000 + n)), '0', '1')) FROM r")
    with SQLiteSandbox(db, timeout_s=0.1, max_value_bytes=1 << 20) as sb:  # 1 MB values: heavy rows
        with generous_bound("3000 heavy rows under a 0.1 s limit", stop=sb.interrupt):
            r = sb.execute(sql)
        assert r.error_kind == "timeout", r
        assert r.elapsed_s >= 0.1
        assert sb.execute("SELECT 1").ok


def test_new_settings_validated_and_shared(db):
    for kw in [dict(max_value_bytes=1000), dict(max_value_bytes=2_000_000_000), dict(max_result_bytes=0),
               dict(max_sql_bytes=True), dict(max_sql_bytes=100), dict(max_result_bytes=1.5)]:
        with pytest.raises(ValueError, match=next(iter(kw))):
            SQLiteSandbox(db, **kw)
    a = get_sandbox(db, max_result_bytes=1_000_000, max_value_bytes=200_000, max_sql_bytes=5000)
    assert get_sandbox(db, max_sql_bytes=5000, max_value_bytes=200_000, max_result_bytes=1_000_000) is a
    assert (a.max_value_bytes, a.max_result_bytes, a.max_sql_bytes) == (200_000, 1_000_000, 5000)
    assert a.execute(BLOB_ROWS).row_count == 9
    a.close()
