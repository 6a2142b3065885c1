"""Hostile SQL: the in-process sandbox's bounds hold whatever the SQL (``docs/platform.md`` "SQL bounds").

The bar: no statement outlives its time limit by more than 10 % plus a small constant
(``bench/bench_sandbox_limits.py`` measures it per case; these tests assert the mechanism that stopped each
statement and a generous wall bound, ``conftest.GENEROUS_S``, that a loaded CI machine keeps), no
statement grows the process's peak RSS past the documented cap (``MEMORY_CAP_BYTES``, measured in
a child process, never in this one), no uncaught exception, no temporary file. Each hostile case
(the core hostile input list and more) is one :class:`Case` of the bench, run here through its
:func:`run_cases`. Also: no ``-wal``/``-shm`` file beside a WAL database, connections released by
``env.close()`` and bounded in ``get_sandbox``'s cache, transient gold failures retried and never
cached, the per-statement budget, the column and heap limits, and the new guards returning what
SQLite returns.
"""
from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from textsql_clarify.sql import sandbox as sandbox_mod
from textsql_clarify.sql.sandbox import (
    ERROR_KINDS,
    MAX_COLUMNS,
    SQLiteSandbox,
    get_sandbox,
    release_sandbox,
)

from conftest import check_generous, generous_bound

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sandbox_limits", REPO / "bench" / "bench_sandbox_limits.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_sandbox_limits"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()
#: The constant of the bar in these tests: the bound's is 1 s on an idle machine (``BENCH.SLACK_S``, which the
#: bench checks); a test must hold on a loaded CI machine too, and every overrun measured before the guards was 5 s
#: or more.
TEST_SLACK_S = max(BENCH.SLACK_S, 2.0)
#: The cases the tests run: every case with a limit of at most 1 s, and the heap-limit sort.
TEST_CASES = [c for c in BENCH.CASES if c.timeout_s <= 1.0 or "heap limit" in c.name]


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory) -> dict:
    db = BENCH.toy_db(tmp_path_factory.mktemp("hostile"))
    return BENCH.run_cases(TEST_CASES, db, reps=1)


def test_every_core_hostile_case_is_covered():
    core = {c.name for c in TEST_CASES if c.core}
    # the core SQL cases: LIKE chains, json_patch, instr / GLOB chains, the wide row, the sort spill
    for word in ("LIKE", "json_patch", "instr", "GLOB", "wide row: 2,000", "sort"):
        assert any(word in name for name in core), word
    assert all(c.expect for c in TEST_CASES)


@pytest.mark.parametrize("case", TEST_CASES, ids=[c.name for c in TEST_CASES])
def test_hostile_statement_holds_the_bounds(hostile_results, case):
    (run,) = hostile_results[case.name]
    assert run["kind"] in ERROR_KINDS + ("ok",)
    # a generous wall bound (the overruns measured before the guards were 10-280 s); the exact bar, 1.1 x limit + 1 s,
    # is measured by bench/bench_sandbox_limits.py, and what stopped the statement is asserted below
    check_generous(run["wall"], f"{case.name} ({run['kind']}: {run['message']})")
    assert run["rss_growth"] <= BENCH.MEMORY_CAP_BYTES, f"{case.name}: RSS grew {run['rss_growth'] / 2**20:.0f} MiB"
    assert run["temp_files"] == 0, f"{case.name}: {run['temp_files']} temporary files"
    # the mechanism meant to stop it fired (not merely "some" failure)
    assert case.expected(run["kind"], run["message"]), (case.name, run["kind"], run["message"])


def test_wide_row_memory_is_bounded_by_the_column_limit(hostile_results):
    # 2,000 columns of 1 MB peaked at 4.1 GB before the column limit; now refused at prepare, and the widest allowed
    # row (256 columns of 256 KiB, 64 MiB of values) stays far under the cap
    (wide,) = hostile_results["wide row: 2,000 columns x 1 MB"]
    assert wide["kind"] == "runtime" and wide["rss_growth"] < 64 << 20
    (allowed,) = hostile_results["wide row: 256 columns x 256 KB"]
    assert allowed["rss_growth"] <= BENCH.MEMORY_CAP_BYTES


# -- per-statement budget -----------------------------------------------------------------------
@pytest.fixture
def db(tmp_path: Path) -> Path:
    return BENCH.toy_db(tmp_path)


def test_budget_is_shared_by_the_calls_of_one_statement(db):
    with SQLiteSandbox(db, max_statement_work=100_000) as sb:
        # 20 rows x 1 LIKE: ~41,000 work units, within the budget
        assert sb.execute("SELECT count(*) FROM t WHERE y LIKE 'name1%'").rows == ((11,),)
        # 20 rows x 3 calls: ~123,000 units, more than one statement's budget, though each call is cheap
        r = sb.execute("SELECT count(*) FROM t WHERE y LIKE 'n%' AND upper(y) LIKE 'N%' AND lower(y) > ''")
        assert r.error_kind == "timeout" and "statement cost budget spent" in r.error_message, r
        # the next statement gets a fresh budget
        assert sb.execute("SELECT count(*) FROM t WHERE y LIKE 'name1%'").rows == ((11,),)


def test_default_budget_follows_the_time_limit(db):
    with SQLiteSandbox(db, timeout_s=2.0) as sb:
        assert sb.max_statement_work == 2 * sandbox_mod.WORK_UNITS_PER_SECOND
    with pytest.raises(ValueError, match="max_statement_work"):
        SQLiteSandbox(db, max_statement_work=0)


def test_deadline_is_checked_inside_guarded_calls(db):
    # one row of cheap guarded calls over a 256 KB value: no loop step between them, so only the
    # guards can see the deadline; a huge budget leaves the deadline as the only stop
    sql = ("WITH a(s) AS (SELECT replace(hex(zeroblob(131000)), '0', 'a')) SELECT "
           + ", ".join("max(" + ", ".join(["length(upper(s))"] * 100) + ")" for _ in range(5)) + " FROM a")
    with SQLiteSandbox(db, timeout_s=0.05, max_statement_work=10**15) as sb:
        with generous_bound("500 upper() calls under a 0.05 s limit", stop=sb.interrupt):
            r = sb.execute(sql)
        assert r.error_kind == "timeout" and "deadline passed inside the statement" in r.error_message, r


# -- the new guards return what SQLite returns ------------------------------------------------------
def raw_sqlite(sql: str) -> list:
    con = sqlite3.connect(":memory:")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("sql", [
    "SELECT 'abc' LIKE 'A%', 'a_c' LIKE 'a\\_c' ESCAPE '\\', 'ÄB' LIKE 'äb', NULL LIKE 'a', 5 LIKE '5', "
    "x'61' LIKE 'a'",
    "SELECT 'abc' GLOB 'a*', 'abc' GLOB '[a-b]?c', 'ABC' GLOB 'a*', 'a1' GLOB '*[0-9]', NULL GLOB '*'",
    "SELECT json_patch('{\"a\":1,\"b\":{\"c\":2}}', '{\"b\":{\"c\":null,\"d\":3},\"e\":[1]}'), json_patch(NULL, '{}')",
    # JSON values keep their subtype where they nest (json_extract, json(), -> stay SQLite's own)
    "SELECT json_object('a', json_extract('{\"x\":[1,{\"y\":2}]}', '$.x')), json_array(json('[3]'), '[3]'), "
    "json_set('{\"a\":1}', '$.b', json_extract('[[5]]', '$[0]'), '$.c', '{\"s\":1}' -> '$'), "
    "json_replace('{\"a\":1}', '$.a', json('[3]')), json_extract('{\"a\":1,\"b\":2}', '$.a', '$.b')",
    "SELECT json_array_length('[1,2,3]'), json_array_length('{\"a\":[1]}', '$.a'), json_type('{\"a\":1.5}', '$.a'), "
    "json_type('[]'), json('  { \"a\" : 1 } '), json_valid('{'), json_valid('[]')",
    "SELECT '{\"a\":{\"b\":[7]}}' -> '$.a', '{\"a\":{\"b\":[7]}}' ->> '$.a.b[0]', '[1,\"x\"]' ->> 1, "
    "'{\"a\":\"s\"}' -> 'a'",
    "SELECT upper('straße é'), lower('ÀB'), upper(12), lower(NULL), hex('ab'), hex(x'00ff'), hex(12.5), "
    "quote('it''s'), quote(x'0a'), quote(1.5), quote(NULL), length(randomblob(16)), typeof(randomblob(0))",
])
def test_new_guards_return_what_sqlite_returns(db, sql):
    with SQLiteSandbox(db) as sb:
        r = sb.execute(sql)
    assert r.ok, r
    got = list(r.rows)
    want = raw_sqlite(sql)
    assert got == want
    assert [type(v) for v in got[0]] == [type(v) for v in want[0]]


def test_like_guard_keeps_the_pattern_limit_and_table_semantics(db):
    with SQLiteSandbox(db) as sb:
        assert sb.execute("SELECT count(*) FROM t WHERE y LIKE 'NAME1_'").rows == ((10,),)
        assert sb.execute("SELECT group_concat(x) FROM t WHERE y GLOB '*[2-3]' ORDER BY x").rows == (("2,3,12,13",),)
        too_long = sb.execute(f"SELECT 'a' LIKE '{'%' * 101}'")
        assert too_long.error_kind == "runtime" and "pattern too complex" in too_long.error_message


def test_spider_golds_with_guarded_functions_match_raw_sqlite(spider_root):
    # every Spider dev gold that calls a guarded built-in (LIKE, mostly) gives SQLite's own rows
    guarded = ("like", "glob", "instr", "replace", "upper", "lower", "trim", "printf", "json", "hex", "quote")
    golds = [g for g in json.loads((spider_root / "dev.json").read_text(encoding="utf-8"))
             if any(w in g["query"].lower() for w in guarded)]
    assert len(golds) >= 26
    for g in golds:
        path = spider_root / "database" / g["db_id"] / f"{g['db_id']}.sqlite"
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            want = con.execute(g["query"]).fetchall()
        finally:
            con.close()
        with SQLiteSandbox(path) as sb:
            r = sb.execute(g["query"])
        assert r.ok and sorted(map(repr, r.rows)) == sorted(map(repr, want)), g["query"]


# -- column, heap and temp limits ----------------------------------------------------------------
def test_column_limit(tmp_path):
    cols = ", ".join(f"c{i} INTEGER" for i in range(200))
    path = tmp_path / "wide.sqlite"
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE w({cols})")
    con.execute(f"INSERT INTO w VALUES ({', '.join(['1'] * 200)})")
    con.commit()
    con.close()
    with SQLiteSandbox(path) as sb:
        assert len(sb.execute("SELECT * FROM w").columns) == 200  # wider than any table in ../shared/data
        assert len(sb.execute("SELECT " + ", ".join(["1"] * MAX_COLUMNS)).columns) == MAX_COLUMNS
        r = sb.execute("SELECT " + ", ".join(["1"] * (MAX_COLUMNS + 1)))
        assert r.error_kind == "runtime" and "too many columns" in r.error_message


@pytest.mark.skipif(sandbox_mod._guards.STATEMENT_HEAP is None, reason="no per-statement heap limit here")
def test_heap_limit_is_set_only_while_a_statement_runs(db):
    # SQLite's limit is process-wide: between statements another connection sees the process's own (none)
    other = sqlite3.connect(":memory:")
    try:
        with SQLiteSandbox(db) as sb:
            assert sb.execute("SELECT count(*) FROM t").rows == ((20,),)
            assert other.execute("PRAGMA hard_heap_limit").fetchone()[0] == 0
            assert other.execute("PRAGMA soft_heap_limit").fetchone()[0] == 0
    finally:
        other.close()


def test_temp_storage_is_in_memory(db):
    with SQLiteSandbox(db) as sb:
        assert sb.execute("PRAGMA temp_store").error_kind == "forbidden"  # agents cannot read or set it
        sb._con.set_authorizer(None)  # look behind the authorizer
        assert sb._con.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY


# -- WAL databases: no file beside them ------------------------------------------------------------
def _wal_db(folder: Path) -> Path:
    path = folder / "wal.sqlite"
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    con.executescript("CREATE TABLE t(x INTEGER, y TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b');")
    con.commit()
    con.close()  # the last connection checkpoints and removes -wal/-shm; the header stays WAL
    return path


def test_wal_database_gets_no_side_files_and_is_unchanged(tmp_path):
    folder = tmp_path / "wal"
    folder.mkdir()
    path = _wal_db(folder)
    before = sorted(p.name for p in folder.iterdir())
    data = path.read_bytes()
    assert before == ["wal.sqlite"] and data[18:20] == b"\x02\x02"
    with SQLiteSandbox(path) as sb:
        assert sb.execute("SELECT x, y FROM t ORDER BY x").rows == ((1, "a"), (2, "b"))
        assert sb.execute_gold("g", "SELECT count(*) FROM t").rows == ((2,),)
        assert sb.execute("DELETE FROM t").error_kind == "forbidden"
        assert sorted(p.name for p in folder.iterdir()) == before  # while open, too
    assert sorted(p.name for p in folder.iterdir()) == before
    assert path.read_bytes() == data


def test_wal_database_read_by_schema_reset_and_detailed_step_gets_no_side_files(tmp_path):
    """The schema readers (sql/schema.py, envs/render.py) open a WAL file with immutable=1 too (sql/uri.py
    ``ro_uri``): before, ``sb.schema`` alone left wal.sqlite-shm and wal.sqlite-wal in the folder."""
    import dataclasses

    import gymnasium as gym

    from textsql_clarify.datasets import embedded_db_path, load_dataset
    from textsql_clarify.sql.uri import is_wal, ro_uri

    folder = tmp_path / "walenv"
    folder.mkdir()
    path = folder / "wal.sqlite"
    shutil.copyfile(embedded_db_path(), path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    con.close()
    before, data = sorted(p.name for p in folder.iterdir()), path.read_bytes()
    assert before == ["wal.sqlite"] and is_wal(path) and ro_uri(path).endswith("?mode=ro&immutable=1")
    with SQLiteSandbox(path) as sb:
        assert "students" in sb.schema
        assert sorted(p.name for p in folder.iterdir()) == before
    sample = dataclasses.replace(next(s for s in load_dataset("embedded") if s.group == "answerable"),
                                 id="wal-1", db_path=str(path))
    env = gym.make("TextSQLClarify-v0", samples=[sample], detailed_scores=True)
    try:
        env.reset(options={"sample_id": "wal-1"})
        assert sorted(p.name for p in folder.iterdir()) == before
        _, reward, _, _, info = env.step(f"<sql>{sample.gold_sql}</sql>")
        assert reward == 1.0 and info["reward_components"]["cell_f1"] == 1.0
        assert sorted(p.name for p in folder.iterdir()) == before
    finally:
        env.close()
    assert sorted(p.name for p in folder.iterdir()) == before
    assert path.read_bytes() == data


def test_rollback_database_gets_no_side_files(db):
    before = sorted(p.name for p in db.parent.iterdir())
    with SQLiteSandbox(db) as sb:
        assert sb.execute("SELECT count(*) FROM t").rows == ((20,),)
    assert sorted(p.name for p in db.parent.iterdir()) == before


# -- transient gold failures ------------------------------------------------------------------------
def test_locked_gold_is_retried_and_never_cached(db, tmp_path):
    copy = tmp_path / "locked.sqlite"
    shutil.copyfile(db, copy)
    with SQLiteSandbox(copy, timeout_s=0.3) as sb:
        writer = sqlite3.connect(copy, isolation_level=None)
        writer.execute("BEGIN EXCLUSIVE")
        try:
            t0 = time.perf_counter()
            first = sb.execute_gold("g1", "SELECT count(*) FROM t")
            spent = time.perf_counter() - t0
            assert first.error_kind == "runtime" and "database is locked" in first.error_message, first
            # one attempt waits for the lock up to the time limit; one retry (GOLD_RETRIES) after a short wait
            attempts = 1 + sandbox_mod.GOLD_RETRIES
            assert spent <= attempts * (1.1 * 0.3 + BENCH.SLACK_S)
            again = sb.execute_gold("g1", "SELECT count(*) FROM t")
            assert again.error_kind == "runtime" and again is not first  # not cached: run again
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        ok = sb.execute_gold("g1", "SELECT count(*) FROM t")
        assert ok.rows == ((20,),)
        assert sb.execute_gold("g1", "SELECT count(*) FROM t") is ok  # a success is cached
    assert copy.read_bytes() == db.read_bytes()


def test_lock_released_during_the_retry_gives_the_rows(db, tmp_path, monkeypatch):
    import threading

    copy = tmp_path / "locked2.sqlite"
    shutil.copyfile(db, copy)
    monkeypatch.setattr(sandbox_mod, "GOLD_RETRY_WAIT_S", 0.3)
    with SQLiteSandbox(copy, timeout_s=0.2) as sb:
        writer = sqlite3.connect(copy, isolation_level=None, check_same_thread=False)
        writer.execute("BEGIN EXCLUSIVE")
        timer = threading.Timer(0.3, lambda: (writer.execute("ROLLBACK"), writer.close()))
        timer.start()
        try:
            r = sb.execute_gold("g", "SELECT max(x) FROM t")
        finally:
            timer.join()
        assert r.rows == ((20,),), r


# -- connections released ---------------------------------------------------------------------------
def _fds_on(path: Path) -> int:
    target = str(Path(path).resolve())
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                n += 1
        except OSError:
            continue
    return n


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")


@needs_proc
def test_get_sandbox_cache_is_bounded(db):
    gc.collect()
    base = _fds_on(db)
    n = sandbox_mod.MAX_CACHED_SANDBOXES + 20
    for i in range(n):
        assert get_sandbox(db, timeout_s=1.0 + i / 100).execute("SELECT 1").ok
    gc.collect()
    # not one per setting; + 1: SQLite parks the descriptor of a closed connection while another
    # connection of the process holds a lock on the file, and reuses it for the next open
    assert _fds_on(db) - base <= sandbox_mod.MAX_CACHED_SANDBOXES + 1
    held = get_sandbox(db, timeout_s=9.5)
    release_sandbox(held)
    for i in range(n):  # pushed out of the cache, still held here: it stays open and cached
        get_sandbox(db, timeout_s=20 + i / 100)
    assert not held.closed and held.execute("SELECT count(*) FROM t").rows == ((20,),)
    assert get_sandbox(db, timeout_s=9.5) is held
    for i in range(n):
        release_sandbox(get_sandbox(db, timeout_s=20 + i / 100))
    del held
    gc.collect()


def _alive_sandboxes(timeouts) -> list:
    return [o for o in gc.get_objects() if isinstance(o, SQLiteSandbox) and not o.closed and o.timeout_s in timeouts]


@needs_proc
def test_env_close_releases_its_connections(tmp_path, monkeypatch):
    import gymnasium as gym

    import textsql_clarify  # noqa: F401  (registers TextSQLClarify-v0)
    from textsql_clarify.datasets import embedded_db_path

    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    db_path = embedded_db_path()
    env = gym.make("TextSQLClarify-v0", timeout_s=0.9)  # what loading the dataset opens (its validation)
    env.reset(seed=0, options={"index": 0})
    env.close()
    del env
    gc.collect()
    base = _fds_on(db_path)
    timeouts = [1.0 + i / 10 for i in range(8)]
    for t in timeouts:  # one distinct timeout each: the leak was one connection per setting
        env = gym.make("TextSQLClarify-v0", timeout_s=t)
        env.reset(seed=0, options={"index": 0})
        _, _, terminated, _, info = env.step("<sql>SELECT count(*) FROM students</sql>")
        assert terminated and info["action_type"] == "sql"
        assert len(_alive_sandboxes([t])) == 1 and _fds_on(db_path) >= 1
        env.close()
        env.close()  # twice is fine
        del env
        gc.collect()
        assert _alive_sandboxes([t]) == [], t  # its connection is closed
    # + 1: SQLite may park one closed connection's descriptor for reuse (see the cache test)
    assert _fds_on(db_path) <= base + 1


@needs_proc
def test_vector_env_close_releases_its_connections(tmp_path, monkeypatch):
    import gymnasium as gym

    import textsql_clarify  # noqa: F401
    from textsql_clarify.datasets import embedded_db_path

    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    db_path = embedded_db_path()
    gc.collect()
    base = _fds_on(db_path)
    for t in (3.2, 3.3, 3.4):
        venv = gym.make_vec("TextSQLClarify-v0", num_envs=2, timeout_s=t)
        venv.reset(seed=0)
        venv.step(["<sql>SELECT 1</sql>", "<sql>SELECT 2</sql>"])
        assert len(_alive_sandboxes([t])) == 1  # the sub-envs share one
        venv.close()  # closes each sub-env
        del venv
        gc.collect()
        assert _alive_sandboxes([t]) == [], t
    assert _fds_on(db_path) <= base + 2  # the dataset's validation sandbox and one parked descriptor


# -- CTE expansion at prepare, and hostile env steps on Spider dev ----------------------------------
def _hash(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


#: Hostile shapes with no case in bench_sandbox_limits: star-expanding CTE
#: self-joins (sqlglot qualify in the scorers), a window frame over a recursive CTE, and json_insert
#: growing a JSON array row by row.
HOSTILE = {
    "cte self-joined 60 times": "WITH a AS(SELECT*FROM singer) SELECT count(*) FROM " + ",".join(
        f"a x{i}" for i in range(60)),
    "window frame": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r LIMIT 3000000) SELECT max(w) "
                    "FROM (SELECT sum(n) OVER (ORDER BY -n ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED "
                    "FOLLOWING) w FROM r)",
    "json_insert growth": "WITH RECURSIVE r(n, j) AS (SELECT 0, '[]' UNION ALL SELECT n+1, json_insert(j, '$[#]', "
                          "hex(zeroblob(50))) FROM r WHERE n < 5000) SELECT length(j) FROM r ORDER BY n DESC LIMIT 1",
}


#: A CTE chain whose every term reads the previous one twice. SQLite copies a CTE's SELECT for every
#: reference while it PREPARES a statement (no progress handler and no interrupt check run there), so
#: such a chain of n terms costs 2^n copies
#: before the first VM step: measured on the loaded 2-core machine with raw sqlite3 and a progress handler
#: every 1,000 instructions, n = 16: 3.7 s before the first callback; n = 17: 5.3 s and "out of memory" at
#: the 256 MiB heap limit with no callback at all. Only the heap limit stopped it; the in-process step
#: overran a 0.5 s limit by ~5 s. Fixed by a static bound on CTE expansion before prepare (sql/cte_bound.py).
def test_cte_expansion_at_prepare_keeps_the_time_bound(spider_root):
    """The sandbox's statement with the 17-term chain, 0.5 s limit: the bound, 1.1 x limit + 1 s."""
    from textsql_clarify.sql.sandbox import SQLiteSandbox

    sql = "WITH " + ",".join(
        f"a{i} AS(SELECT*FROM {'singer' if i == 0 else 'a%d UNION ALL SELECT*FROM a%d' % (i - 1, i - 1)})"
        for i in range(17)) + " SELECT count(*)FROM a16"
    with SQLiteSandbox(spider_root / "database" / "concert_singer" / "concert_singer.sqlite", timeout_s=0.5) as sb:
        with generous_bound("the 17-term CTE chain under a 0.5 s limit"):
            res = sb.execute(sql)
    assert not res.ok
    assert res.error_kind == "runtime" and res.error_message.startswith("statement too complex"), res
    assert "131071 copies" in res.error_message  # 2 ** 17 - 1: each term doubles the copies (sql/cte_bound.py)


def test_cte_copies_counts_what_sqlite_copies():
    """sql/cte_bound.py: a reference costs one copy of the CTE plus its body's copies; a recursive CTE's reference
    to itself counts once; no WITH, or SQL sqlglot cannot read, is 0 (SQLite decides)."""
    from textsql_clarify.sql.cte_bound import MAX_CTE_COPIES, cte_copies

    def chain(n: int) -> str:
        terms = ["a0 AS (SELECT * FROM t)"] + [f"a{i} AS (SELECT * FROM a{i - 1} UNION ALL SELECT * FROM a{i - 1})"
                                              for i in range(1, n + 1)]
        return "WITH " + ", ".join(terms) + f" SELECT count(*) FROM a{n}"

    assert [cte_copies(chain(n)) for n in (0, 1, 4, 9, 10)] == [1, 3, 31, 1023, 2047]
    assert cte_copies(chain(8)) <= MAX_CTE_COPIES < cte_copies(chain(9))
    assert cte_copies("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5) SELECT * FROM c") == 1
    assert cte_copies("with x as (select 1) select * from x, x") == 2
    assert cte_copies("SELECT 1") == 0 and cte_copies("WITH ((( nonsense") == 0


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_step_keeps_the_time_bound_and_the_database(spider_root, name, tmp_path, monkeypatch):
    """One ``env.step`` of each shape, 0.5 s limit, in-process: no exception, the step ends within
    1.1 x limit + a generous constant (the scorers run after the query; the bound is 10 % + 1 s on an
    idle machine), no byte of the database changes, no file appears beside it."""
    from textsql_clarify.envs.env import TextSQLClarifyEnv

    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    env = TextSQLClarifyEnv(f"spider:{spider_root}", timeout_s=0.5, limit=5)
    try:
        env.reset(options={"index": 0})
        db = env.samples[0].db_path
        folder = os.path.dirname(db)
        before, files = _hash(db), sorted(os.listdir(folder))
        with generous_bound(f"env.step of {name} under a 0.5 s limit"):
            _obs, reward, _term, _trunc, info = env.step(json.dumps({"type": "sql", "content": HOSTILE[name]}))
    finally:
        env.close()
    assert reward == 0.0 and info["error"] is None
    kind = info["trajectory"].turns[-1].execution["error_kind"]
    assert kind in ("timeout", "runtime", "forbidden", "syntax"), (name, kind)  # a limit or refusal stopped it
    assert _hash(db) == before and sorted(os.listdir(folder)) == files
