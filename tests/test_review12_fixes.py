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
