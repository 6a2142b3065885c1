"""The issue 12 review's defects, each with the case that showed it (failing before its fix):

1. regexes that backtracked quadratically on agent text (the action tag scan on ``<`` + spaces; the
   capital-run split of the leakage checks on ``"A" * n``);
2. hedge detection turned off for a sample when one of its readings failed transiently (locked) on the first look;
3. WAL databases got ``-wal``/``-shm`` files beside them from the schema readers (sql/uri.py ``ro_uri``);
4. a SAME_STEP autoreset that raised left earlier sub-envs stepped;
5. id-keyed caches (projection key, schema fingerprint) went stale when a caller changed a schema dict in place.
"""
from __future__ import annotations

import gc
import math
import random
import re
import time

import pytest

from textsql_clarify.envs.actions import Action, parse_action
from textsql_clarify.errors import ActionError
from textsql_clarify.simulators import leakage


def _cpu(fn, arg, repeats: int = 5) -> float:
    """Least thread CPU time of ``fn(arg)`` over ``repeats`` calls, the collector off."""
    best = math.inf
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.thread_time()
            fn(arg)
            best = min(best, time.thread_time() - t0)
    finally:
        if gc_was:
            gc.enable()
    return best


def _ratio(fn, make, n: int) -> float:
    """CPU time on ``make(4 n)`` over that on ``make(n)``: about 4 when linear, 16 when quadratic."""
    return _cpu(fn, make(4 * n)) / max(_cpu(fn, make(n)), 1e-6)


def _outcome(text: str):
    try:
        return parse_action(text, max_chars=10_000_000)
    except ActionError as e:
        return e.reason


# ------------------------------------------------------------------ 1. linear-time regexes on agent text
def test_tag_scan_is_linear_on_a_bracket_and_spaces():
    make = lambda n: "<sql>SELECT 1</sql><" + " " * n + "x"  # noqa: E731 - 6.7 s at n=16,000 before
    ratio = _ratio(_outcome, make, 4_000)
    assert ratio < 8, f"4x the input took {ratio:.1f}x the CPU time"
    assert _outcome(make(64_000)) == Action("sql", "SELECT 1")


@pytest.mark.parametrize("text, expect", [
    ("< / sql >", "unmatched </sql>"),
    ("<  sql  >a<   /   SQL>", Action("sql", "a")),
    ("<sql>a</ sql>", Action("sql", "a")),
    ("<sql>a< /sql>", Action("sql", "a")),
    ("<sql>a<//sql>", "not closed"),
    ("<clarify>Which year?</clarify >", Action("clarify", "Which year?")),
    ("x <category >ambiguous</category> y", Action("classify", "ambiguous")),
])
def test_tag_scan_reads_what_it_read(text, expect):
    got = _outcome(text)
    if isinstance(expect, str):
        assert isinstance(got, str) and expect in got, got
    else:
        assert got == expect


def test_capital_run_split_is_linear_and_unchanged():
    ratio = _ratio(leakage._split_words, lambda n: "A" * n, 2_000)  # 15.8 before (43 ms -> 679 ms)
    assert ratio < 8, f"4x the input took {ratio:.1f}x the CPU time"
    assert leakage._split_words("HTMLParser") == ["html", "parser"]
    assert leakage._split_words("StuID") == ["stu", "id"]
    assert leakage._split_words("ABCdEFg_hIJk") == ["ab", "cd", "e", "fg", "h", "i", "jk"]
    # the former two-regex split, derandomized: same words on 2,000 random identifiers
    rng = random.Random(12)

    def former(s: str) -> list[str]:
        s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", s)
        s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
        return [w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w]

    for _ in range(2_000):
        s = "".join(rng.choice("AaBb1_ Z") for _ in range(rng.randint(0, 14)))
        assert leakage._split_words(s) == former(s), s


def test_clarification_of_capitals_is_checked_fast():
    """A clarification is agent text: the identifier checks split it into words (``named_identifiers``)."""
    fresh = iter(range(10**6))  # a new text each call: the word split is cached per text

    def named(text: str):
        return leakage.named_identifiers(f"{text} {next(fresh)}", ["stu_id", "HomeCity"])

    ratio = _ratio(named, lambda n: "A" * n, 2_000)
    assert ratio < 8, f"4x the input took {ratio:.1f}x the CPU time"


# ------------------------------------------------------------------ 2. a transient reading failure is not cached
def test_a_reading_locked_on_the_first_look_does_not_turn_hedge_detection_off(tmp_path):
    import sqlite3

    from textsql_clarify.envs import scoring
    from textsql_clarify.sql.sandbox import SQLiteSandbox

    db = tmp_path / "h.sqlite"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE t(x INTEGER, y TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b');")
    con.commit()
    con.close()
    gold, other, hedge = "SELECT x FROM t", "SELECT y FROM t", "SELECT x, y FROM t"
    readings = (("s#1", other),)
    with SQLiteSandbox(db, timeout_s=0.3) as sb:
        gold_res = sb.execute_gold("s", gold)
        writer = sqlite3.connect(db, isolation_level=None)
        writer.execute("BEGIN EXCLUSIVE")  # another connection holds the database during the first look
        try:
            locked = sb.execute_gold("s#1", other)
            assert locked.error_kind == "runtime" and "locked" in locked.error_message
            assert scoring._distinct_readings(gold_res, gold, readings, sb, None) == ()
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        score = scoring.score_sql_turn(hedge, gold, sb, gold_key="s", detailed=False, other_readings=readings)
    assert (score.components["ex"], bool(score.flags.get("hedged"))) == (0.0, True)  # was ex=1.0, hedged False


def test_reading_failures_that_may_pass_later_are_named():
    from textsql_clarify.envs.scoring import _may_pass_later
    from textsql_clarify.sql.sandbox import ExecutionResult

    def failed(kind, msg):
        return ExecutionResult(columns=(), rows=(), elapsed_s=0.0, error_kind=kind, error_message=msg)

    assert _may_pass_later(failed("timeout", "time limit"))
    assert _may_pass_later(failed("runtime", "database is locked"))
    assert _may_pass_later(failed("runtime", "out of memory"))
    assert _may_pass_later(failed("runtime", "the SQL worker process died (signal 9)"))
    assert not _may_pass_later(failed("runtime", "no such column: z"))
    assert not _may_pass_later(ExecutionResult(columns=("a",), rows=((1,),), elapsed_s=0.0))


# ------------------------------------------------------------------ 4. a failed SAME_STEP autoreset changes no sub-env
def _env_state(env):
    return (env.current_sample.id if env.current_sample else None, env._turn, list(env._history),
            env._np_random.bit_generator.state if env._np_random is not None else None)


def test_same_step_autoreset_that_fails_changes_no_sub_env(tmp_path):
    import copy
    import dataclasses
    import shutil

    from gymnasium.vector import AutoresetMode

    from textsql_clarify.datasets import embedded_db_path, load_dataset
    from textsql_clarify.envs.vector import TextSQLClarifyVectorEnv

    good = next(s for s in load_dataset("embedded") if s.group == "answerable")
    gone = tmp_path / "gone.sqlite"
    shutil.copyfile(embedded_db_path(), gone)
    missing = dataclasses.replace(good, id="missing-db", db_path=str(gone))
    venv = TextSQLClarifyVectorEnv(2, samples=[good, missing], autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        # a seed whose autoreset draws the missing sample for sub-env 1 (sub-env 0 steps before it)
        for seed in range(100):
            venv.reset(seed=seed, options={"sample_ids": [good.id, good.id]})
            if copy.deepcopy(venv.envs[1].np_random).integers(2) == 1:
                break
        else:
            pytest.fail("no seed draws the missing sample")
        gone.unlink()  # the dataset was loaded (and validated) while it was there
        before = [_env_state(e) for e in venv.envs]
        with pytest.raises(FileNotFoundError):
            venv.step([f"<sql>{good.gold_sql}</sql>"] * 2)  # both episodes end; sub-env 1's reset cannot open
        assert [_env_state(e) for e in venv.envs] == before  # before the fix: both had stepped (turn 1, ended)
        shutil.copyfile(embedded_db_path(), gone)  # the step can be sent again
        _, rewards, terminated, _, infos = venv.step([f"<sql>{good.gold_sql}</sql>"] * 2)
        assert rewards.tolist() == [1.0, 1.0] and terminated.tolist() == [True, True]
        assert venv.envs[1].current_sample.id == "missing-db" and "final_obs" in infos
    finally:
        venv.close()


# ------------------------------------------------------------------ 5. id-keyed schema caches and in-place changes
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
