"""``DEC`` and ``DEC_bacc`` in a run's metrics (``rewards/metrics.py``, ``rewards/decision.py``): the first decision
against the type its sample calls for (ABISS §5.1), per episode and balanced over the decision types present,
on the embedded set's 48 samples (12 answerable, 24 ambiguous, 12 unanswerable)."""
from __future__ import annotations

import pytest

from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.rewards.decision import balanced_accuracy_ci
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge
from textsql_clarify.rewards.metrics import aggregate


@pytest.fixture(scope="module")
def runs():
    samples = load_dataset("embedded")
    # DEC reads the action types only: the lexical FB judge (no model) leaves them as they are
    return {a: evaluate(samples, a, progress=False, detailed_scores=False, feedback_judge=LexicalFeedbackJudge())
            for a in ("oracle", "no-clarify", "random")}


def test_the_oracle_decides_right_on_every_sample(runs):
    o = runs["oracle"][1]["overall"]
    assert (o["DEC"]["value"], o["DEC"]["n"]) == (1.0, 48)
    assert o["DEC_bacc"] == {"value": 1.0, "n": 48, "ci95": [1.0, 1.0]}


def test_never_asking_scores_two_thirds_balanced_and_zero_on_ambiguous(runs):
    m = runs["no-clarify"][1]
    assert m["overall"]["DEC"]["value"] == 0.5  # 24 of 48: every ambiguous sample answered at once
    assert m["overall"]["DEC_bacc"]["value"] == pytest.approx(2 / 3, abs=1e-15)
    # stratified by right decision: each group's recall is 0 or 1 in every resample
    assert m["overall"]["DEC_bacc"]["ci95"] == [pytest.approx(2 / 3, abs=1e-15)] * 2
    assert {g: v["metrics"]["DEC"]["value"] for g, v in m["by_group"].items()} == \
        {"answerable": 1.0, "ambiguous": 0.0, "unanswerable": 1.0}


def test_balanced_accuracy_is_the_mean_of_group_recalls(runs):
    m = runs["random"][1]
    recalls = {g: v["metrics"]["DEC"] for g, v in m["by_group"].items()}
    assert {g: r["n"] for g, r in recalls.items()} == {"answerable": 12, "ambiguous": 24, "unanswerable": 12}
    bacc = m["overall"]["DEC_bacc"]
    assert bacc["value"] == pytest.approx(sum(r["value"] for r in recalls.values()) / 3, abs=1e-15)
    lo, hi = bacc["ci95"]
    assert lo < bacc["value"] < hi


def test_undefined_decisions_are_left_out(runs):
    """A trajectory flagged ``indistinguishable`` kept in the means has no right decision: DEC's n stays 48."""
    trajs = [t.to_dict() for t in runs["no-clarify"][0]]
    i = next(k for k, t in enumerate(trajs) if t["group"] == "ambiguous")
    trajs[i] = {**trajs[i], "flags": [*trajs[i]["flags"], "indistinguishable"]}
    m = aggregate(trajs, include_indistinguishable=True)
    assert m["overall"]["DEC"]["n"] == 47 and m["overall"]["DEC_bacc"]["n"] == 47


def test_balanced_accuracy_interval_by_hand():
    assert balanced_accuracy_ci([], []) is None
    assert balanced_accuracy_ci([1], ["sql"]) == (1.0, 1.0)
    assert balanced_accuracy_ci([1, 1, 0, 0], ["sql", "sql", "clarify", "clarify"]) == (0.5, 0.5)
    # one stratum of two: its recall resamples to 0, 1/2 or 1 (probabilities 1/4, 1/2, 1/4), the other stays 1
    lo, hi = balanced_accuracy_ci([1, 0, 1], ["sql", "sql", "clarify"], n_resamples=2000)
    assert (lo, hi) == (0.5, 1.0)
    lo, hi = balanced_accuracy_ci([1, 0, 1, 1, 0, 1], ["sql", "sql", "sql", "clarify", "clarify", "feedback"])
    assert 0.0 <= lo < (2 / 3 + 1 / 2 + 1) / 3 < hi <= 1.0
    with pytest.raises(ValueError, match="unknown right decision"):
        balanced_accuracy_ci([1], ["ask"])
    with pytest.raises(ValueError, match="differ in length"):
        balanced_accuracy_ci([1, 0], ["sql"])
