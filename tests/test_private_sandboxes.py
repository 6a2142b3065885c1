"""Private sandboxes (``sql_connection="private"``): an env's own read-only connections, bounded per env, with
every guard of the shared sandbox; an interrupted gold is not cached. No timing assertions: "did not hang"
bounds and event orderings only."""
from __future__ import annotations

import shutil
import threading
import time

import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.envs.vector import TextSQLClarifyVectorEnv
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge
from textsql_clarify.sql import sandbox as sandbox_mod
from textsql_clarify.sql.private import PrivateSandboxes, open_private_count
from textsql_clarify.sql.sandbox import get_sandbox

SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
COUNT_SQL = "SELECT count(*) FROM student_courses"
SAMPLE = "uni-ans-002"
HANG_S = 60.0  # "did not hang" bound (seconds)


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


@pytest.fixture(scope="module")
def db_path(samples):
    return next(s for s in samples if s.id == SAMPLE).db_path


def test_private_sandboxes_keep_at_most_limit_open_and_never_the_kept_one(db_path, tmp_path):
    paths = []
    for name in ("a", "b", "c"):
        paths.append(tmp_path / f"{name}.sqlite")
        shutil.copy(db_path, paths[-1])
    want = get_sandbox(db_path).execute(COUNT_SQL).rows
    pool = PrivateSandboxes(limit=2)
    a, closed_a = pool.get(paths[0], timeout_s=5.0)
    b, closed_b = pool.get(paths[1], timeout_s=5.0)
    assert closed_a == closed_b == [] and a is not b
    assert pool.get(paths[0], timeout_s=5.0) == (a, [])  # reused, and now the most recently used
    c, closed_c = pool.get(paths[2], keep=a, timeout_s=5.0)
    assert closed_c == [b] and b.closed and not a.closed and len(pool) == 2
    assert [s.execute(COUNT_SQL).rows for s in (a, c)] == [want, want]
    pool.close()
    assert a.closed and c.closed and len(pool) == 0
    with pytest.raises(ValueError, match="limit"):
        PrivateSandboxes(limit=0)


def test_a_private_sandbox_keeps_the_shared_sandboxs_guards(db_path):
    box, _ = (pool := PrivateSandboxes()).get(db_path, timeout_s=0.2)
    try:
        assert box is not get_sandbox(db_path, timeout_s=0.2)
        assert box.execute("DELETE FROM students").error_kind == "forbidden"
        assert box.execute("ATTACH DATABASE ':memory:' AS x").error_kind == "forbidden"
        assert box.execute(SLOW_SQL).error_kind == "timeout"
        assert box.execute(COUNT_SQL).rows == get_sandbox(db_path).execute(COUNT_SQL).rows
    finally:
        pool.close()


def test_an_interrupted_gold_is_not_cached(db_path):
    box, _ = (pool := PrivateSandboxes()).get(db_path, timeout_s=HANG_S * 10)
    out: list = []
    t = threading.Thread(target=lambda: out.append(box.execute_gold("k", SLOW_SQL)), daemon=True)
    t.start()
    deadline = time.monotonic() + HANG_S
    while not sandbox_mod._WATCHDOG.running:  # the statement runs
        assert time.monotonic() < deadline and t.is_alive(), "the gold did not start"
        time.sleep(0.01)
    while t.is_alive():
        pool.interrupt()
        t.join(0.05)
    (r,) = out
    assert (r.error_kind, r.error_message) == ("runtime", "interrupted")
    assert box._gold_cache == {}
    ok = box.execute_gold("k2", COUNT_SQL)
    assert ok.ok and box._gold_cache[("k2", COUNT_SQL)] is ok
    pool.close()


def test_private_env_opens_its_own_connection_and_closes_it(samples):
    gold = next(s for s in samples if s.id == SAMPLE).gold_sql
    before = open_private_count()
    env = TextSQLClarifyEnv(samples=samples, sql_connection="private", feedback_judge=LexicalFeedbackJudge())
    env.reset(options={"sample_id": SAMPLE})
    box = env._sandbox
    assert box is not get_sandbox(box.db_path, timeout_s=env.timeout_s, row_cap=env.row_cap)
    assert open_private_count() == before + 1 and env.interrupt_sql() is True
    _, reward, terminated, _, info = env.step(f"<sql>{gold}</sql>")
    assert terminated and reward == 1.0 and info["scores"]["ex"] == 1.0
    env.close()
    assert box.closed and open_private_count() == before
    env.reset(options={"sample_id": SAMPLE})  # a reset after close opens a new one
    assert env._sandbox is not box and not env._sandbox.closed
    env.close()
    shared = TextSQLClarifyEnv(samples=samples, feedback_judge=LexicalFeedbackJudge())
    assert shared.sql_connection == "shared" and shared.interrupt_sql() is False


def test_sql_connection_option_is_checked(samples):
    with pytest.raises(ValueError, match="sql_connection must be one of"):
        TextSQLClarifyEnv(samples=samples, sql_connection="own")
    with pytest.raises(ValueError, match="isolation='in_process'"):
        TextSQLClarifyEnv(samples=samples, sql_connection="private", isolation="process")


def test_private_vector_sub_envs_keep_their_own_connections(samples):
    venv = TextSQLClarifyVectorEnv(2, samples=samples, sql_connection="private", feedback_judge=LexicalFeedbackJudge())
    venv.reset(options={"sample_ids": [SAMPLE, SAMPLE]})
    a, b = venv.envs
    assert a._static is not b._static and a._sandbox is not b._sandbox
    assert a._sandbox.db_path == b._sandbox.db_path
    venv.close()
    assert a._sandbox is None or a._sandbox.closed
