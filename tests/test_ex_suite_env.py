"""Test-suite EX in the env and in ``eval``: ``gym.make("TextSQLClarify-v0", ex_mode="suite", suite_k=K)`` reports
``ex_suite`` / ``ex_strict_suite`` beside ``ex`` (Zhong, Yu and Klein 2020), the ``suite`` preset pays it, the
prediction's statements on the variants share its time limit, and the default ``ex_mode="single"`` adds nothing.

Variants are built with k = 2 into a temporary folder (``suite_cache_dir``), once per module for the embedded set.
"""
from __future__ import annotations

import json

import gymnasium as gym
import pytest

import textsql_clarify
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.cli import main
from textsql_clarify.datasets import embedded_db_path, load_embedded
from textsql_clarify.envs.env import BASE_COMPONENTS
from textsql_clarify.samples import Sample
from textsql_clarify.sql.sandbox import get_sandbox

from conftest import SPIDER, MeanIs

K = 2
#: 0 on the embedded database (no scholarship above 5,000 EUR); the planted literal 5000 and its neighbours
#: (4999, 5001) put rows above it on the variants
ZERO_GOLD = "SELECT count(*) FROM scholarships WHERE amount_eur > 5000"
#: the same 0, read from data through a filter true of no row: no constant rule can refuse it
ZERO_BY_FILTER = "SELECT count(*) FROM scholarships WHERE name = 'zz-no-such-grant'"
#: the red team's data_zero (redteam/policies.py): a constant the env's constant rule refuses unless turned off
DATA_ZERO = "SELECT count(*)*0 FROM sqlite_master"


def _sample(gold: str, db: str | None = None, sid: str = "zero-001") -> Sample:
    return Sample(id=sid, db_id="university", db_path=db or str(embedded_db_path()), question="How many?",
                  group="answerable", subcategory="answerable", gold_sql=gold)


def _sql_step(env, sql: str, index: int = 0):
    env.reset(options={"index": index})
    return env.step(f"<sql>{sql}</sql>")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("variants")


@pytest.fixture(scope="module")
def oracle_run(cache):
    """The oracle through the env with ``ex_mode="suite"`` on the embedded samples that have a gold (the
    unanswerable ones end in feedback, which EX does not score): its trajectories and metrics."""
    solvable = [s for s in load_embedded() if s.gold_sql is not None]
    trajs, metrics = evaluate(solvable, "oracle", progress=False, ex_mode="suite", suite_k=K,
                              suite_cache_dir=cache, detailed_scores=False)
    return trajs, metrics


def test_the_oracle_passes_suite_ex_on_every_scorable_embedded_sample(oracle_run):
    trajs, metrics = oracle_run
    scorable = [t for t in trajs if t.scores["ex"] is not None]
    assert len(scorable) == len(trajs) == 36  # the 36 solvable embedded samples
    assert [t.scores["ex_suite"] for t in scorable] == [1.0] * 36
    assert [t.scores["ex_strict_suite"] for t in scorable] == [1.0] * 36
    # every checked SQL turn ran on both variants, none skipped, none out of time
    checks = [x.execution["suite"] for t in scorable for x in t.sql_turns]
    assert checks and all(c["checked"] == K and not c["out_of_time"] for c in checks)
    assert metrics["overall"]["EX_suite"] == MeanIs(1.0, 36)
    assert metrics["overall"]["EX_strict_suite"] == MeanIs(1.0, 36)


def test_a_zero_read_through_an_impossible_filter_passes_ex_but_fails_ex_suite(cache):
    env = gym.make(textsql_clarify.ENV_ID, samples=[_sample(ZERO_GOLD)], ex_mode="suite", suite_k=K,
                   suite_cache_dir=cache)
    variants = env.unwrapped.variants[str(embedded_db_path())]
    assert get_sandbox(embedded_db_path()).execute(ZERO_GOLD).rows == ((0,),)
    assert any(get_sandbox(p).execute(ZERO_GOLD).rows[0][0] > 0 for p in variants)
    _, r, _, _, info = _sql_step(env, ZERO_BY_FILTER)
    rc = info["reward_components"]
    assert (rc["ex"], rc["ex_suite"], rc["ex_strict"], rc["ex_strict_suite"]) == (1.0, 0.0, 1.0, 0.0)
    detail = info["trajectory"].turns[-1].execution["suite"]
    assert detail["failed_on"] is not None and not detail["out_of_time"]
    assert info["scores"]["ex"] == 1.0 and info["scores"]["ex_suite"] == 0.0
    assert r == 1.0  # the binary preset pays ex, which stays single-instance
    _, _, _, _, info = _sql_step(env, ZERO_GOLD)
    assert info["reward_components"]["ex_suite"] == 1.0
    env.close()


def test_the_constant_answer_prior_fails_ex_suite_with_the_constant_rule_off(cache):
    env = gym.make(textsql_clarify.ENV_ID, samples=[_sample(ZERO_GOLD)], ex_mode="suite", suite_k=K,
                   suite_cache_dir=cache, ex_options={"constant_columns": False})
    _, _, _, _, info = _sql_step(env, DATA_ZERO)
    rc = info["reward_components"]
    assert (rc["ex"], rc["ex_suite"]) == (1.0, 0.0)
    env.close()


def test_spider_pets_1_zero_count_gold_refuses_the_impossible_filter_by_suite_ex(tmp_path):
    db = SPIDER / "database" / "pets_1" / "pets_1.sqlite"
    if not db.is_file():
        pytest.skip(f"real data absent: {db} (Spider dev, ../shared/data/spider_dev) not found")
    gold = "SELECT count(*) FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid  =  T2.stuid WHERE T1.age  >  20"
    env = gym.make(textsql_clarify.ENV_ID, samples=[_sample(gold, str(db), "pets-zero")], ex_mode="suite",
                   suite_k=3, suite_cache_dir=tmp_path)
    _, _, _, _, info = _sql_step(env, "SELECT count(*) FROM pets WHERE pettype = 'zz-no-such-pet'")
    assert (info["reward_components"]["ex"], info["reward_components"]["ex_suite"]) == (1.0, 0.0)
    _, _, _, _, info = _sql_step(env, gold)
    assert info["reward_components"]["ex_suite"] == 1.0
    env.close()


def test_the_default_ex_mode_reports_no_suite_component_and_equals_single():
    samples = load_embedded()
    plain = gym.make(textsql_clarify.ENV_ID, samples=samples, detailed_scores=False)
    single = gym.make(textsql_clarify.ENV_ID, samples=samples, detailed_scores=False, ex_mode="single")
    assert plain.unwrapped.ex_mode == "single" and plain.unwrapped.variants == {}
    for i in (0, 6, 30, 40):  # answerable, ambiguous, drift, unanswerable
        sql = samples[i].gold_sql or "SELECT 1"
        outs = [_sql_step(e, sql, i) for e in (plain, single)]
        a, b = (o[4] for o in outs)
        assert a["reward_components"] == b["reward_components"] and outs[0][1] == outs[1][1]
        assert set(a["reward_components"]) >= set(BASE_COMPONENTS)
        assert not {"ex_suite", "ex_strict_suite"} & set(a["reward_components"])
        assert not {"ex_suite", "ex_strict_suite"} & set(a.get("scores", {}))
        turn = (a.get("trajectory") or plain.unwrapped._traj).turns[0]
        assert "suite" not in turn.execution
    plain.close()
    single.close()


def test_the_suite_preset_pays_ex_suite_and_needs_the_suite_mode(cache):
    env = gym.make(textsql_clarify.ENV_ID, samples=[_sample(ZERO_GOLD)], ex_mode="suite", suite_k=K,
                   suite_cache_dir=cache, reward_preset="suite")
    assert env.unwrapped.weights == {"ex_suite": 1.0, "feedback": 1.0}
    assert _sql_step(env, ZERO_BY_FILTER)[1] == 0.0  # ex 1, ex_suite 0
    assert _sql_step(env, ZERO_GOLD)[1] == 1.0
    env.close()
    with pytest.raises(ValueError, match="only ex_mode='suite' computes"):
        gym.make(textsql_clarify.ENV_ID, reward_preset="suite")
    with pytest.raises(ValueError, match="ex_mode must be one of"):
        gym.make(textsql_clarify.ENV_ID, ex_mode="multi")
    with pytest.raises(ValueError, match="only apply with ex_mode='suite'"):
        gym.make(textsql_clarify.ENV_ID, suite_k=3)
    with pytest.raises(ValueError, match="isolation='process'"):
        gym.make(textsql_clarify.ENV_ID, ex_mode="suite", isolation="process", suite_cache_dir=cache)


def test_a_prediction_slow_on_a_variant_runs_out_of_the_step_budget_and_scores_zero(cache):
    gold = "SELECT count(*) FROM students"
    env = gym.make(textsql_clarify.ENV_ID, samples=[_sample(gold, sid="slow-001")], ex_mode="suite", suite_k=K,
                   suite_cache_dir=cache, timeout_s=0.3, detailed_scores=False)
    variants = env.unwrapped.variants[str(embedded_db_path())]
    n0 = get_sandbox(embedded_db_path()).execute(gold).rows[0][0]
    assert get_sandbox(variants[0]).execute(gold).rows[0][0] != n0  # variant 0 redraws the table's size
    # the gold's count where the table has the original's size (fast), an endless recursive CTE elsewhere
    slow = (f"SELECT CASE WHEN (SELECT count(*) FROM students) = {n0} THEN (SELECT count(*) FROM students) "
            "ELSE (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c) END")
    from conftest import generous_bound

    with generous_bound("a suite step whose prediction never ends on a variant"):
        _, reward, _, _, info = _sql_step(env, slow)
    rc = info["reward_components"]
    assert (rc["ex"], rc["ex_suite"]) == (1.0, 0.0) and reward == 1.0
    detail = info["trajectory"].turns[-1].execution["suite"]
    assert detail["out_of_time"] is True and "ran out of the time budget on variant 0" in detail["reason"]
    assert 0.0 < detail["budget_s"] < 0.3  # what the run on the original left of the prediction's limit
    env.close()


def test_the_sync_vector_env_passes_ex_mode_and_shares_the_variant_connections(cache):
    envs = gym.make_vec(textsql_clarify.ENV_ID, num_envs=2, samples=[_sample(ZERO_GOLD)], ex_mode="suite",
                        suite_k=K, suite_cache_dir=cache)
    envs.reset(seed=0)
    _, rewards, _, _, infos = envs.step([f"<sql>{ZERO_BY_FILTER}</sql>", f"<sql>{ZERO_GOLD}</sql>"])
    assert list(infos["reward_components"]["ex"]) == [1.0, 1.0]
    assert list(infos["reward_components"]["ex_suite"]) == [0.0, 1.0]
    assert envs.envs[0]._suites is envs.envs[1]._suites
    envs.close()


def test_eval_with_the_suite_mode_writes_ex_suite_beside_ex(tmp_path, capsys, cache):
    out = tmp_path / "run"
    assert main(["eval", "--agent", "no-clarify", "--limit", "12", "--ex-mode", "suite", "--suite-k", str(K),
                 "--suite-cache-dir", str(cache), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    ex, suite = metrics["overall"]["EX"], metrics["overall"]["EX_suite"]
    assert suite["n"] == ex["n"] == 12 and suite["value"] <= ex["value"] and suite["ci95"] is not None
    assert list(metrics["overall"]).index("EX_suite") == list(metrics["overall"]).index("EX_strict") + 1
    assert f"EX_suite" in printed and f"{suite['value']:.3f}" in printed
    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert (info["ex_mode"], info["suite_k"]) == ("suite", K)  # a report can tell a suite run from a plain one
    # the single-instance run has no suite metric at all
    assert main(["eval", "--agent", "no-clarify", "--limit", "12", "--out", str(tmp_path / "plain"),
                 "--no-progress", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "EX_suite" not in plain["overall"] and plain["overall"]["EX"] == ex
    info = json.loads((tmp_path / "plain" / "run.json").read_text(encoding="utf-8"))
    assert (info["ex_mode"], info["suite_k"]) == ("single", None)
    assert main(["eval", "--suite-k", "3", "--out", str(tmp_path / "bad"), "--no-progress"]) == 2
    assert "--ex-mode suite" in capsys.readouterr().err
