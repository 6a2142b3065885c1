"""The ``decision`` reward component: the first sql / clarify / feedback against the sample's right type.

Rule (``textsql_clarify/rewards/decision.py``): ask on a distinguishable ambiguous sample, refuse on an unanswerable
one (PremiseSQL flaws included), answer on an answerable one (TIDE Drift-only included); undefined on an ambiguous
sample flagged ``indistinguishable``. Played through ``gym.make`` on the embedded set with the rule-based user and
the lexical FB judge (no model loads).
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import gymnasium as gym
import pytest

import textsql_clarify  # noqa: F401 - registers the env
from textsql_clarify.baselines.agents import OracleAgent
from textsql_clarify.redteam.policies import HACKS, DecisionAlwaysAsk, DecisionAlwaysRefuse, DecisionAlwaysSQL, \
    DecisionQuestionWords, play
from textsql_clarify.datasets import load_embedded
from textsql_clarify.rewards.decision import balanced_accuracy, decision_recalls, decision_score, expected_decision, \
    expected_for, first_decision
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge
from textsql_clarify.rewards.presets import COMPONENTS, PRESETS, resolve_preset, scalar_reward


@pytest.fixture(scope="module")
def samples():
    return load_embedded()


def _env(samples, preset="decision"):
    return gym.make("TextSQLClarify-v0", samples=samples, reward_preset=preset, detailed_scores=False,
                    feedback_judge=LexicalFeedbackJudge())


def _decisions(env, policy, n):
    """``{sample_id: (decision component of the episode, info['decision'] of its decision turn)}``."""
    out = {}
    base = env.unwrapped
    for i in range(n):
        obs, info = env.reset(seed=i, options={"index": i})
        s = base.current_sample
        policy.begin_episode(s if getattr(policy, "privileged", False) else None)
        seen, value = None, None
        while True:
            obs, _r, term, trunc, info = env.step(policy.act(obs, info))
            if "decision" in info:
                assert seen is None, f"two decision turns in {s.id}"
                seen, value = info["decision"], info["reward_components"]["decision"]
            if term or trunc:
                break
        assert info["scores"]["decision"] == value
        out[s.id] = (value, seen)
    return out


def test_embedded_expected_decisions_per_group(samples):
    """48 embedded samples: 24 ambiguous -> clarify (3 chain), 12 unanswerable -> feedback (3 PremiseSQL flaws),
    12 answerable -> sql (6 TIDE drift samples); none is indistinguishable, so none is undefined."""
    counts = Counter((s.group, expected_decision(s)) for s in samples)
    assert counts == {("ambiguous", "clarify"): 24, ("unanswerable", "feedback"): 12, ("answerable", "sql"): 12}
    assert sum(expected_decision(s) == "feedback" for s in samples if s.premise_flaw) == 3
    assert sum(expected_decision(s) == "sql" for s in samples if s.drift is not None) == 6
    assert sum(expected_decision(s) == "clarify" for s in samples if s.chain is not None) == 3


def test_indistinguishable_and_conflicting_labels_are_undefined(samples):
    amb = next(s for s in samples if s.group == "ambiguous")
    flagged = dataclasses.replace(amb, flags=("indistinguishable",))
    assert expected_decision(flagged) is None
    assert decision_score("clarify", flagged) is None and decision_score(None, flagged) is None
    # a premise flaw on an answerable sample: PremiseSQL says refuse, the group says answer
    ans = next(s for s in samples if s.group == "answerable")
    assert expected_decision(dataclasses.replace(ans, premise_flaw="external_fact")) is None
    # the other flags leave it defined (the decision does not read the gold)
    assert expected_for("answerable", ("gold_error",)) == "sql"
    assert expected_for("unanswerable", (), "external_fact") == "feedback"


def test_decision_score_values_and_errors(samples):
    una = next(s for s in samples if s.group == "unanswerable")
    assert decision_score("feedback", una) == 1.0
    assert decision_score("sql", una) == 0.0 and decision_score("clarify", una) == 0.0
    assert decision_score(None, una) == 0.0
    with pytest.raises(ValueError, match="classify"):
        decision_score("classify", una)
    with pytest.raises(TypeError):
        expected_decision({"group": "answerable"})
    with pytest.raises(ValueError, match="group"):
        expected_for("maybe")
    assert first_decision(["classify", "invalid", "clarify", "sql"]) == "clarify"
    assert first_decision(["invalid", "invalid"]) is None


def test_oracle_scores_decision_one_on_every_sample(samples):
    got = _decisions(_env(samples), OracleAgent(), len(samples))
    assert len(got) == 48
    assert all(v == 1.0 for v, _ in got.values()), [k for k, (v, _) in got.items() if v != 1.0]
    by = {s.id: s for s in samples}
    assert all(d == {"kind": expected_decision(by[k]), "expected": expected_decision(by[k])}
               for k, (_, d) in got.items())


def test_indistinguishable_sample_scores_none_in_the_env(samples):
    amb = next(s for s in samples if s.group == "ambiguous" and s.chain is None)
    flagged = dataclasses.replace(amb, flags=("indistinguishable",))
    got = _decisions(_env([flagged]), OracleAgent(), 1)
    assert got[amb.id] == (None, {"kind": "clarify", "expected": None})


@pytest.mark.parametrize("cls, group", [(DecisionAlwaysRefuse, "unanswerable"), (DecisionAlwaysSQL, "answerable"),
                                        (DecisionAlwaysAsk, "ambiguous")])
def test_constant_policy_earns_exactly_its_group_share(samples, cls, group):
    """Under ``decision`` a constant first move earns its group's share of the defined samples: always-refuse
    12/48 = 0.25, always-SQL 12/48 = 0.25, always-ask 24/48 = 0.5 on the embedded set; the best prior is 0.5."""
    env = _env(samples)
    episodes = play(env, cls(), range(len(samples)))
    w = resolve_preset("decision")
    mean = sum(e.reward(w) for e in episodes) / len(episodes)
    share = sum(s.group == group for s in samples) / len(samples)
    assert mean == pytest.approx(share)
    assert mean == pytest.approx({"unanswerable": 0.25, "answerable": 0.25, "ambiguous": 0.5}[group])
    assert mean <= 0.5


def test_question_word_classifier_stays_below_the_best_prior_on_embedded(samples):
    """The surface-word classifier: 17 of 48 right (0.354) against the best constant prior 0.5; balanced
    accuracy 0.361 against a constant policy's 1/3."""
    env = _env(samples)
    pol = DecisionQuestionWords()
    episodes = play(env, pol, range(len(samples)))
    by = {s.id: s for s in samples}
    pairs = [(first_decision(t[0] for t in e.turns), expected_decision(by[e.sample_id])) for e in episodes]
    acc = sum(a == b for a, b in pairs) / len(pairs)
    assert acc == pytest.approx(17 / 48)
    assert acc <= 0.5 + pol.decision_margin
    assert balanced_accuracy(pairs)["value"] == pytest.approx(0.3611, abs=1e-4)


def test_malformed_first_action_is_no_decision(samples):
    """A malformed action, then SQL: the SQL is the decision (answer), on the second turn. Two malformed actions in
    a row: no decision, 0 on the last turn, ``info['decision']['kind']`` None."""
    ans = next(s for s in samples if s.group == "answerable" and s.drift is None)
    env = _env(samples, "shaped_decision")
    env.reset(options={"sample_id": ans.id})
    _, r1, *_x, info1 = env.step("SELECT 1")  # no tag: malformed
    assert "decision" not in info1["reward_components"] and "decision" not in info1
    _, r2, term, _t, info2 = env.step(f"<sql>{ans.gold_sql}</sql>")
    assert term and info2["reward_components"]["decision"] == 1.0
    assert info2["decision"] == {"kind": "sql", "expected": "sql"}
    assert r1 == pytest.approx(-0.1) and r2 == pytest.approx(2.0)  # format -1 x 0.1; ex 1 + decision 1
    env.reset(options={"sample_id": ans.id})
    env.step("SELECT 1")
    _, r, term, _t, info = env.step("still no tag")
    assert term and info["reward_components"]["decision"] == 0.0
    assert info["decision"] == {"kind": None, "expected": "sql"}
    assert info["scores"]["decision"] == 0.0
    assert info["trajectory"].turns[-1].reward_components["decision"] == 0.0
    assert r == pytest.approx(-0.1)


def test_classification_phase_label_is_not_the_decision(samples):
    amb = next(s for s in samples if s.group == "ambiguous" and s.chain is None)
    env = gym.make("TextSQLClarify-v0", samples=samples, reward_preset="decision", detailed_scores=False,
                   feedback_judge=LexicalFeedbackJudge(), classification_phase=True)
    env.reset(options={"sample_id": amb.id})
    _, r, *_x, info = env.step("<category>scope</category>")
    assert "decision" not in info and r == 0.0
    _, r, *_x, info = env.step("<clarify>Which reading do you mean?</clarify>")
    assert info["decision"] == {"kind": "clarify", "expected": "clarify"} and r == 1.0


def test_decision_turn_comes_before_the_drift(samples):
    """A TIDE drift sample: the first SQL is the decision (1.0); the post-drift SQL carries no decision."""
    s = next(x for x in samples if x.drift is not None)
    env = _env(samples)
    env.reset(options={"sample_id": s.id})
    _, r, term, _t, info = env.step(f"<sql>{s.gold_sql}</sql>")
    assert not term and r == 1.0 and info["decision"]["kind"] == "sql"
    _, r, term, _t, info = env.step(f"<sql>{s.drift.post_gold_sql}</sql>")
    assert term and r == 0.0 and "decision" not in info


def test_presets_sum_the_decision():
    assert "decision" in COMPONENTS
    assert PRESETS["decision"] == {"decision": 1.0}
    assert PRESETS["shaped_decision"] == {**PRESETS["shaped"], "decision": 1.0}
    assert PRESETS["shaped"] == {"ex": 1.0, "feedback": 1.0, "format": 0.1, "turn_penalty": 0.05}
    comps = {"ex": None, "feedback": None, "turn_penalty": -1.0, "decision": 1.0}
    assert scalar_reward(comps, PRESETS["shaped_decision"]) == pytest.approx(0.95)
    assert scalar_reward(comps, PRESETS["decision"]) == 1.0
    assert scalar_reward({"decision": None}, PRESETS["decision"]) == 0.0


def test_balanced_accuracy_of_a_constant_policy_is_one_over_k():
    pairs = [("sql", "sql")] * 90 + [("sql", "clarify")] * 10  # 90 % accuracy, one type right
    rec = decision_recalls(pairs)
    assert rec == {"sql": {"value": 1.0, "n": 90}, "clarify": {"value": 0.0, "n": 10}}
    assert balanced_accuracy(pairs) == {"value": 0.5, "n": 100, "k": 2}
    assert balanced_accuracy([]) == {"value": None, "n": 0, "k": 0}


def test_decision_hacks_are_registered():
    for name in ("decision_always_ask", "decision_always_refuse", "decision_always_sql", "decision_question_words"):
        assert HACKS[name]().kind == "decision"
