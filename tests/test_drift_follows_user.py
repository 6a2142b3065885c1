"""Post-drift EX follows the user (TIDE §2.2): an answer that still carries what the drift retracted scores 0.

* the rule's parts (:mod:`textsql_clarify.rewards.drift_ex`) on hand-made results and commitment sets;
* a hand-made drift sample on the embedded university database, played through ``gym.make``: the post-drift gold
  keeps ``ex`` 1 and ``drift`` 1; the gold plus the retracted column, the pre-drift gold resubmitted and the
  ``min``/``max`` hedge get post-drift ``ex`` 0 and ``drift`` 0;
* the drift recipe's ``pre_gold_fails`` stage and the load-time check reject a pair whose pre-drift gold passes as
  the post-drift answer;
* real generated Spider dev drift samples (skipped where ``../shared/data/spider_dev`` is absent): the three
  hedges below earn at most the random agent's post-drift return plus 0.02 under binary, shaped and drift,
  while the oracle keeps 1.0 / 1.5.

The three hedging policies are defined here (the red team's list lives in ``textsql_clarify/redteam/policies.py``).
"""
from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import textsql_clarify
from textsql_clarify.redteam.policies import HackPolicy, aggregates_doubled, gold_plus_retracted, make_policy, play
from textsql_clarify.datasets.drift_check import drift_problems
from textsql_clarify.envs.scoring import score_sql_turn
from textsql_clarify.generation.drift_checks import STAGES, check_drift_candidate, pre_gold_problem
from textsql_clarify.rewards.commitments import commitment_set
from textsql_clarify.rewards.drift_ex import carried_columns, kept_filters, retracted_columns, retracted_filters
from textsql_clarify.rewards.presets import PRESETS
from textsql_clarify.samples import DriftEvent, Sample, write_jsonl
from textsql_clarify.sql.sandbox import ExecutionResult, get_sandbox

ROOT = Path(__file__).resolve().parents[1]
UNI = ROOT / "textsql_clarify" / "datasets" / "embedded" / "university.sqlite"
SPIDER_DEV = ROOT.parent / "shared" / "data" / "spider_dev"


# --------------------------------------------------------------------------------------- the hedging policies
def _sql(text: str) -> str:
    return f"<sql>{text}</sql>"


class _DriftHedge(HackPolicy):
    """Privileged: the pre-drift gold first, then :meth:`post` of the sample (its post-drift turn is scored)."""

    privileged, kind, scope = True, "drift", "post_drift"

    def post(self, sample: Sample) -> str | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def applies(self, sample: Sample) -> bool:
        """A drift sample with a gold SQL on which :meth:`post` gives a query."""
        if sample.drift is None or not sample.gold_sql:
            return False
        try:
            return self.post(sample) is not None
        except Exception:  # noqa: BLE001 - a gold sqlglot cannot parse: nothing to attack
            return False

    def next_action(self, observation, info):
        s = self.sample
        return _sql(s.gold_sql if self.sql_sent == 0 else self.post(s))


class GoldPlusRetracted(_DriftHedge):
    """After the drift: the post-drift gold plus every output column of the pre-drift gold that it lacks."""

    name = "drift_gold_plus_retracted"

    def post(self, sample):
        return gold_plus_retracted(sample.gold_sql, sample.drift.post_gold_sql)


class ResubmitPre(_DriftHedge):
    """After the drift: the pre-drift gold unchanged."""

    name = "drift_resubmit_pre"

    def post(self, sample):
        return sample.gold_sql


class AggregatesDoubled(_DriftHedge):
    """After the drift: the pre-drift gold with every MIN/MAX item doubled into both MIN and MAX."""

    name = "drift_aggregates_doubled"

    def post(self, sample):
        return aggregates_doubled(sample.gold_sql)


HEDGES = (GoldPlusRetracted, ResubmitPre, AggregatesDoubled)
MEASURED_PRESETS = ("binary", "shaped", "drift")


def post_drift_episodes(samples: list[Sample], policy) -> dict[str, object]:
    """Play ``policy`` through ``gym.make`` on the samples it applies to (all, for an agent without ``applies``).

    Returns:
        sample id -> :class:`~textsql_clarify.redteam.policies.Episode`.
    """
    env = gym.make(textsql_clarify.ENV_ID, samples=samples, reward_preset="binary", detailed_scores=False)
    try:
        idx = [i for i, s in enumerate(env.unwrapped.samples) if not hasattr(policy, "applies") or policy.applies(s)]
        return {e.sample_id: e for e in play(env, policy, idx)}
    finally:
        env.close()


def mean_post_drift(episodes: dict, ids, preset: str) -> float:
    """Mean post-drift return under ``preset`` of the episodes of ``ids`` (0.0 for none)."""
    ids = list(ids)
    return sum(episodes[i].reward(PRESETS[preset], "post_drift") for i in ids) / len(ids) if ids else 0.0


# ------------------------------------------------------------------------------------------ the rule's parts
def _result(columns, rows) -> ExecutionResult:
    return ExecutionResult(tuple(columns), tuple(map(tuple, rows)), 0.0)


def test_a_pre_drift_column_whose_values_no_post_drift_column_has_is_retracted():
    pre = _result(["name", "age"], [("a", 30), ("b", 41)])
    post = _result(["name", "song"], [("a", "x"), ("b", "y")])
    assert retracted_columns(pre, post) == (1,)
    # 3 == 3.0, floats compare at 12 significant digits: the same values are not retracted
    assert retracted_columns(_result(["m"], [(3,)]), _result(["m"], [(3.0,)])) == ()
    assert retracted_columns(_result(["m"], [(1.0,)]), _result(["m"], [(1.0 + 1e-15,)])) == ()


def test_an_extra_column_carrying_the_retracted_values_is_found_and_a_paired_one_is_not():
    pre = _result(["name", "age"], [("a", 30), ("b", 41)])
    pred = _result(["name", "song", "age"], [("a", "x", 30), ("b", "y", 41)])
    assert carried_columns(pred, (0, 1), pre, (1,)) == (2,)
    # the same values in a column the match pairs with a post-drift gold column are not an extra column
    assert carried_columns(pred, (0, 2), pre, (1,)) == ()
    # a one-row retracted answer repeated on every row (a cross join) is carried: values compare as sets
    one = _result(["m"], [(1998,)])
    crossed = _result(["max", "m"], [(2014, 1998), (2015, 1998)])
    assert carried_columns(crossed, (0,), one, (0,)) == (1,)
    assert carried_columns(crossed, (0,), one, ()) == ()


def test_a_retracted_where_unit_is_found_at_its_scope_and_value_form():
    schema = get_sandbox(UNI).schema
    pre = commitment_set("SELECT first_name FROM students WHERE dept_id = 1 AND total_credits > 100", schema)
    post = commitment_set("SELECT first_name FROM students WHERE dept_id = 1", schema)
    (unit,) = retracted_filters(pre, post)
    assert (unit.scope, unit.kind, unit.value_form) == ("$", "where", "students.total_credits > 100")
    kept = commitment_set("SELECT first_name FROM students WHERE 100 < total_credits AND dept_id = 1", schema)
    assert kept_filters(kept, frozenset({unit})) == {unit}
    assert kept_filters(post, frozenset({unit})) == frozenset()
    # a value drift retracts the old literal's unit only
    v_post = commitment_set("SELECT first_name FROM students WHERE dept_id = 2 AND total_credits > 100", schema)
    assert {u.value_form for u in retracted_filters(pre, v_post)} == {"students.dept_id = 1"}


# ------------------------------------------------------------------ the scorer on the university database
PROJ_PRE = "SELECT first_name, total_credits FROM students WHERE dept_id = 1"
PROJ_POST = "SELECT first_name, home_city FROM students WHERE dept_id = 1"
AGG_PRE = "SELECT MIN(budget) FROM departments"
AGG_POST = "SELECT MAX(budget) FROM departments"
DROP_PRE = "SELECT first_name, last_name FROM students WHERE dept_id = 1"
DROP_POST = "SELECT first_name FROM students WHERE dept_id = 1"


def _post_score(pred: str, pre: str, post: str, key: str):
    sb = get_sandbox(UNI)
    return score_sql_turn(pred, post, sb, gold_key=f"{key}#post", detailed=False, retracted_gold=(key, pre))


@pytest.mark.parametrize("pred, pre, post, key", [
    ("SELECT first_name, home_city, total_credits FROM students WHERE dept_id = 1", PROJ_PRE, PROJ_POST, "t-proj"),
    ("SELECT MIN(budget), MAX(budget) FROM departments", AGG_PRE, AGG_POST, "t-agg"),
    (DROP_PRE, DROP_PRE, DROP_POST, "t-drop"),
])
def test_a_post_drift_answer_that_carries_the_retraction_scores_zero(pred, pre, post, key):
    plain = score_sql_turn(pred, post, get_sandbox(UNI), gold_key=f"{key}#post", detailed=False)
    assert plain.components["ex"] == 1.0  # relaxed EX alone tolerates the retracted column as an extra column
    res = _post_score(pred, pre, post, key)
    assert (res.components["ex"], res.components["ex_strict"]) == (0.0, 0.0)
    assert res.flags["retraction_kept"] and res.ex_status == "retraction_kept"


@pytest.mark.parametrize("pre, post, key", [(PROJ_PRE, PROJ_POST, "t-proj"), (AGG_PRE, AGG_POST, "t-agg"),
                                            (DROP_PRE, DROP_POST, "t-drop")])
def test_the_post_drift_gold_and_a_legitimate_key_column_keep_ex_one(pre, post, key):
    res = _post_score(post, pre, post, key)
    assert (res.components["ex"], res.components["ex_strict"], res.flags["retraction_kept"]) == (1.0, 1.0, False)


def test_a_key_column_beside_the_post_drift_answer_is_still_tolerated():
    res = _post_score("SELECT student_id, first_name, home_city FROM students WHERE dept_id = 1", PROJ_PRE,
                      PROJ_POST, "t-proj")
    assert (res.components["ex"], res.components["ex_strict"], res.flags["retraction_kept"]) == (1.0, 0.0, False)


def test_a_retracted_filter_kept_where_the_rows_do_not_change_scores_zero():
    # every student of department 1 has total_credits >= 0: the kept filter changes no row, only the scorer's
    # commitment test can tell that the answer still carries it
    pre = "SELECT first_name FROM students WHERE dept_id = 1 AND total_credits >= 0"
    res = _post_score(pre, pre, DROP_POST, "t-filter")
    assert res.components["ex"] == 0.0 and res.flags["retraction_kept"]
    assert _post_score(DROP_POST, pre, DROP_POST, "t-filter").components["ex"] == 1.0


# ----------------------------------------------------------------- a hand-made drift sample through gym.make
def _uni_sample(sid: str, pre: str, post: str, subtype: str, utterance: str) -> Sample:
    return Sample(id=sid, db_id="university", db_path=str(UNI), question="Which students of department 1?",
                  group="answerable", subcategory="answerable_without_evidence", gold_sql=pre,
                  drift=DriftEvent(utterance, post, subtype))


HAND = [_uni_sample("hand-proj", PROJ_PRE, PROJ_POST, "projection", "Show their home city instead of the credits."),
        _uni_sample("hand-agg", AGG_PRE, AGG_POST, "projection", "Actually I want the largest budget."),
        _uni_sample("hand-drop", DROP_PRE, DROP_POST, "projection", "Leave out the last names.")]


def _play_post(samples, policy, preset: str) -> list[tuple[float | None, float | None, float]]:
    env = gym.make(textsql_clarify.ENV_ID, samples=samples, reward_preset=preset, detailed_scores=False)
    try:
        eps = play(env, policy, range(len(samples)))
    finally:
        env.close()
    out = []
    for e in eps:
        (_, _, comps, reward), = [t for t in e.turns if t[1]]
        out.append((comps.get("ex"), comps.get("drift"), reward))
    return out


def test_the_oracle_keeps_post_drift_ex_one_and_the_drift_bonus_on_hand_made_samples():
    assert _play_post(HAND, make_policy("oracle"), "drift") == [(1.0, 1.0, 1.5)] * 3


@pytest.mark.parametrize("policy, sample", [(GoldPlusRetracted, HAND[0]), (ResubmitPre, HAND[2]),
                                            (AggregatesDoubled, HAND[1]), (GoldPlusRetracted, HAND[1])])
def test_a_hedge_after_the_drift_earns_no_ex_and_no_drift_bonus(policy, sample):
    assert policy().applies(sample)
    assert _play_post([sample], policy(), "drift") == [(0.0, 0.0, 0.0)]


# --------------------------------------------------------- the recipe and the load-time check reject such pairs
#: a projection drift that retracts only the ORDER BY, on a table whose rows come in that order anyway: the
#: pre-drift gold is the post-drift answer (the env cannot see that the drift was ignored)
ORDER_PRE = "SELECT first_name FROM students WHERE dept_id = 1 ORDER BY student_id"
ORDER_POST = "SELECT first_name FROM students WHERE dept_id = 1"


def test_the_pre_gold_stage_refuses_a_pair_whose_pre_drift_gold_passes_as_the_post_drift_answer():
    sb = get_sandbox(UNI)
    assert STAGES.index("distinct_result") < STAGES.index("pre_gold_fails") < STAGES.index("non_monotone")
    assert pre_gold_problem(ORDER_PRE, ORDER_POST, sb) == (
        "the anchor's gold SQL, answered after the drift, scores ex and ex_strict 1 against the post-drift gold "
        "(match): the env cannot tell the drift was ignored")
    without_distinct = [st for st in STAGES if st != "distinct_result"]
    res = check_drift_candidate(ORDER_PRE, ORDER_POST, "projection", "Any order will do.", sb,
                                stages=without_distinct)
    assert (res.stage, list(res.verdicts)) == ("pre_gold_fails", ["parses", "executes", "non_empty"])
    # with every stage, the identical result is refused first, by distinct_result
    assert check_drift_candidate(ORDER_PRE, ORDER_POST, "projection", "Any order will do.", sb).stage == \
        "distinct_result"


@pytest.mark.parametrize("pre, post", [(PROJ_PRE, PROJ_POST), (AGG_PRE, AGG_POST), (DROP_PRE, DROP_POST)])
def test_the_pre_gold_stage_passes_pairs_the_post_drift_rule_tells_apart(pre, post):
    # relaxed EX alone passes the pre-drift gold of DROP (a superset of the post-drift gold's columns)
    assert pre_gold_problem(pre, post, get_sandbox(UNI)) is None
    res = check_drift_candidate(pre, post, "projection", "Show something else instead.", get_sandbox(UNI))
    assert res.passed and res.verdicts["pre_gold_fails"] == "pass"


def test_the_load_time_check_flags_an_authored_pair_whose_pre_drift_gold_passes(tmp_path, monkeypatch):
    import textsql_clarify.datasets.drift_check as dc

    bad = _uni_sample("bad-1", ORDER_PRE, ORDER_POST, "projection", "Any order will do.")
    good = _uni_sample("ok-1", DROP_PRE, DROP_POST, "projection", "Leave out the last names.")
    path = tmp_path / "drift.jsonl"
    write_jsonl([good, bad], path)
    (p,) = drift_problems([good, bad], path)
    assert (p.line, p.field, p.message) == (2, "drift.post_gold_sql", "returns the same result as gold_sql: the "
                                                                       "drift changes nothing")
    # the identical-result check passed by (as for a pair whose results differ only where the scorer looks
    # past them): the pre-drift gold check flags it, naming file, line and field
    monkeypatch.setattr(dc, "score_execution", lambda *a, **k: (None, type("V", (), {"status": "mismatch"})()))
    (p,) = drift_problems([good, bad], path)
    assert (p.file, p.line, p.field) == (str(path), 2, "drift.post_gold_sql")
    assert p.message.startswith("gold_sql, answered after the drift, scores ex and ex_strict 1")


# --------------------------------------------------------------- real generated samples (Spider dev anchors)
#: the Spider dev anchors the recipe runs on here: the first 60 records (concert_singer, pets_1, part of car_1)
N_ANCHORS = 60
#: accepted drift samples of those anchors (seed 0), and how many each hedge applies to (measured)
N_GENERATED = 110
#: its post-drift binary return under relaxed EX alone (measured)
PLAIN_GOLD_PLUS_RETRACTED = 1.0
HEDGE_COUNTS = {"drift_gold_plus_retracted": 58, "drift_resubmit_pre": 110, "drift_aggregates_doubled": 14}


@pytest.fixture(scope="module")
def spider_drift(tmp_path_factory):
    import random

    from textsql_clarify.datasets.spider import load_spider
    from textsql_clarify.generation.base import Accepted, Anchor, GenContext
    from textsql_clarify.generation.drift import DriftRecipe

    if not (SPIDER_DEV / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    ctx = GenContext(work_dir=tmp_path_factory.mktemp("drift") / "databases", options={})
    out = []
    for s in load_spider(SPIDER_DEV)[:N_ANCHORS]:
        a = Anchor(s.id, s.db_id, s.db_path, s.question, s.gold_sql, s.difficulty, source="spider")
        out += [o.sample for o in DriftRecipe().run(a, random.Random(0), ctx) if isinstance(o, Accepted)]
    return out


def test_generated_drift_samples_oracle_keeps_one_and_the_hedges_stay_under_random(spider_drift):
    by = {s.drift.subtype for s in spider_drift}
    assert len(spider_drift) == N_GENERATED and by == {"value", "constraint", "projection"}
    oracle = post_drift_episodes(spider_drift, make_policy("oracle"))
    assert [mean_post_drift(oracle, oracle, p) for p in MEASURED_PRESETS] == [1.0, 1.0, 1.5]
    rnd = post_drift_episodes(spider_drift, make_policy("random"))
    seen = {}
    for hedge in HEDGES:
        eps = post_drift_episodes(spider_drift, hedge())
        seen[hedge.name] = len(eps)
        for p in MEASURED_PRESETS:
            bound = max(mean_post_drift(rnd, eps, p), 0.0) + 0.02
            assert mean_post_drift(eps, eps, p) <= bound, (hedge.name, p, len(eps))
    assert seen == HEDGE_COUNTS


def test_without_the_post_drift_rule_the_retracted_column_hedge_is_paid(spider_drift, monkeypatch):
    # the same hedge scored by relaxed EX alone (the env no longer handing the pre-drift gold to the scorer): paid
    # on every one of them, which is what the rule takes away
    import textsql_clarify.envs.env as envmod

    plain = envmod.score_sql_turn
    monkeypatch.setattr(envmod, "score_sql_turn", lambda *a, **k: plain(*a, **{**k, "retracted_gold": None}))
    eps = post_drift_episodes(spider_drift, GoldPlusRetracted())
    assert len(eps) == 58 and mean_post_drift(eps, eps, "binary") == pytest.approx(PLAIN_GOLD_PLUS_RETRACTED)
