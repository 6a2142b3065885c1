"""Reply features of the candidate-action wrapper (``envs/reply_support.py``): the reply's support for each candidate.

Real data: AmbiQT items of ``../shared/data/ambiqt`` over ``../shared/data/spider_dev``, whose simulated reply names
both readings, one negated; the embedded set for the content-free reply. Every test uses the model-free
:class:`HashEncoder` and the lexical FB judge: nothing loads MiniLM.
"""
from __future__ import annotations

import numpy as np
import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.reply_support import item_polarity, reply_polarity, reply_support, sql_items
from textsql_clarify.envs.wrappers import ASK, CandidateActionWrapper, HashEncoder
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge

REPLY_FEATURES = ("cand_reply_support", "cand_reply_wins", "cand_reply_distinct_cos")
#: a summary-table gold (26), a base-table gold (27) on one database, and a split-column gold (236)
AMBIQT_IDS = ("ambiqt-tbl-agg-validation-26", "ambiqt-tbl-agg-validation-27", "ambiqt-tbl-split-validation-236")


@pytest.fixture(scope="module")
def ambiqt_samples():
    from pathlib import Path

    from textsql_clarify.datasets.ambiqt import load_ambiqt

    data = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not (data / "ambiqt" / "tbl-split" / "validation.json").is_file() or not (data / "spider_dev" / "database").is_dir():
        pytest.skip("real data absent: ../shared/data/ambiqt or ../shared/data/spider_dev not found")
    samples, _report = load_ambiqt(data / "ambiqt", data / "spider_dev")
    by_id = {s.id: s for s in samples}
    return [by_id[i] for i in AMBIQT_IDS]


def _reply_of(sample):
    """The simulated user's reply to the ask action on ``sample``."""
    w = _wrapper([sample])
    w.reset(options={"sample_id": sample.id})
    return w.env.step(w.action_text(ASK))[0]["last_message"]


def _wrapper(samples):
    return CandidateActionWrapper(samples=samples, n_candidates=6, encoder=HashEncoder(16),
                                  feedback_judge=LexicalFeedbackJudge())


@pytest.mark.parametrize("sample_id", AMBIQT_IDS)
def test_after_asking_the_reply_support_ranks_the_gold_first(ambiqt_samples, sample_id):
    """AmbiQT's reply names the meant reading and negates the other one ("..., not read from the precomputed
    visitor age summary table"): the support puts the gold at the top, strictly above the other reading (ties only
    with distractors that differ from the gold in items the reply does not name: a dropped WHERE clause)."""
    s = next(x for x in ambiqt_samples if x.id == sample_id)
    w = _wrapper([s])
    _, info = w.reset(options={"sample_id": s.id})
    obs = w.step(ASK)[0]
    support = obs[w.feature_slices["cand_reply_support"]]
    wins = obs[w.feature_slices["cand_reply_wins"]]
    gold, other = info["candidate_kinds"].index("reading0"), info["candidate_kinds"].index("reading1")
    assert support[gold] == support.max() > support[other]
    assert wins[gold] == wins.max() > wins[other]
    items = [sql_items(c) for c in info["candidates_shown"]]
    phrases = {k: v for it in items for k, v in it.items()}
    pol = item_polarity(_reply_of(s), phrases)
    for j in np.flatnonzero(support == support.max()):
        if j != gold:  # a tie is a distractor that differs from the gold only in items the reply does not name
            assert info["candidate_kinds"][j] == "distractor"
            assert all(pol.get(it, 0) == 0 for it in set(items[j]) ^ set(items[gold]))


def test_negation_turns_a_named_table_against_its_candidates(ambiqt_samples):
    """The two directions of one AmbiQT item pair (26: summary table meant, 27: base table meant, on
    ``museum_visit``): the table named after "not" gets polarity -1, the one named before it +1."""
    s = ambiqt_samples[0]
    w = _wrapper([s])
    _, info = w.reset(options={"sample_id": s.id})
    reply = w.env.step(w.action_text(ASK))[0]["last_message"]
    items = {}
    for c in info["candidates_shown"]:
        items.update(sql_items(c))
    pol = item_polarity(reply, items)
    assert "not" in reply.split()
    assert pol[("table", "visitor age")] == 1 and pol[("table", "visitor")] == -1
    flipped = reply_polarity("I want X, not Y.")
    assert flipped == [("i", 1), ("want", 1), ("x", 1), ("y", -1)]


def test_a_content_free_reply_gives_every_candidate_the_same_features(ambiqt_samples):
    """The user's constant refusal on an answerable embedded sample names no candidate item: the three reply
    features are equal (0) over the candidates. The same text against a real AmbiQT candidate set gives zeros too."""
    emb = [s for s in load_dataset("embedded") if s.id == "uni-ans-001"]
    w = _wrapper(emb)
    w.reset(options={"sample_id": "uni-ans-001"})
    obs, *_ = w.step(ASK)
    for name in REPLY_FEATURES:
        f = obs[w.feature_slices[name]]
        assert np.all(f == f[0]) and f[0] == 0.0, name
    s = ambiqt_samples[1]
    wa = _wrapper([s])
    _, info = wa.reset(options={"sample_id": s.id})
    support, wins, named = reply_support("Sorry, I have nothing else to say on that.",
                                         [sql_items(c) for c in info["candidates_shown"]])
    assert named == 0 and not support.any() and not wins.any()
