"""The simulated user has no side channel: the reply to a content-free clarification says nothing about
the sample's group (answerable, ambiguous, unanswerable, drift). Measured with
:mod:`textsql_clarify.simulators.side_channel` on the embedded set and on real corpora (Spider dev,
Spider-unanswerable, a generated missing-schema + drift corpus)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from textsql_clarify.datasets import load_dataset, load_embedded
from textsql_clarify.simulators.base import REFUSALS, UserRequest, refusal_text
from textsql_clarify.simulators.rule_based import RuleBasedUser, is_content_free
from textsql_clarify.simulators.side_channel import (CONTENT_FREE_PROBES, TECHNICAL_PROBES, ProbeReply, group_of,
                                                     lookup_accuracy, measure, mutual_information, probe_replies)

#: chance level: the plug-in MI of a group-blind reply is 0 exactly; the bound leaves room for nothing else.
MI_BOUND_BITS = 0.01
ACCURACY_MARGIN = 0.02


@pytest.fixture(scope="module")
def embedded():
    return load_embedded()


def _assert_chance(m) -> None:
    assert m.mi_bits < MI_BOUND_BITS and m.max_probe_mi_bits < MI_BOUND_BITS, m.summary()
    assert m.accuracy <= m.prior + ACCURACY_MARGIN, m.summary()


def test_probe_set_is_content_free_and_large_enough():
    assert len(CONTENT_FREE_PROBES) >= 10 and len(set(CONTENT_FREE_PROBES)) == len(CONTENT_FREE_PROBES)
    assert all(is_content_free(p) for p in CONTENT_FREE_PROBES)
    # result-format questions and questions with a content word are not content-free
    assert not any(is_content_free(p) for p in TECHNICAL_PROBES)
    assert not is_content_free("Do you want all of them?")        # a result-count question in stop words
    assert not is_content_free("Who are you?")                    # asks the user about themselves
    assert not is_content_free("What do you mean by recent?")


def test_refusal_text_is_a_function_of_the_clarification_only():
    assert {refusal_text(p) for p in CONTENT_FREE_PROBES} <= set(REFUSALS)
    assert refusal_text("Can you  CLARIFY?") == refusal_text("can you clarify?")
    with pytest.raises(TypeError, match="clarification must be a string"):
        refusal_text(None)


def test_mutual_information_and_lookup_on_a_known_table():
    # text equals the group: I = H(group) = 1 bit for two balanced groups; the lookup is always right
    leak = [ProbeReply("?", f"s{i}", g, g, "irrelevant") for i, g in enumerate(["a", "b"] * 10)]
    assert mutual_information(leak) == pytest.approx(1.0)
    acc, prior = lookup_accuracy(leak)
    assert acc == 1.0 and 0.0 < prior < 1.0
    # one text for every group: 0 bits, the lookup is the prior
    blind = [replace(r, text="Sorry.") for r in leak]
    assert mutual_information(blind) == 0.0
    acc, prior = lookup_accuracy(blind)
    assert acc == prior


class _LeakyUser:
    """The rule user with the old side channel put back: an unanswerable sample's refusal reads differently."""

    def __init__(self):
        self.inner = RuleBasedUser()

    def respond(self, batch):
        out = self.inner.respond(batch)
        return [replace(r, text="Sorry, I have nothing to add that would help there.")
                if q.sample.group == "unanswerable" else r for q, r in zip(batch, out)]


def test_measurement_detects_a_leaky_user(embedded):
    m = measure(embedded, _LeakyUser())
    assert m.mi_bits > 0.8 and m.accuracy >= m.prior + 0.15, m.summary()   # measured 0.811 bits, 0.667 vs 0.500


def test_rule_user_is_group_blind_on_the_embedded_set(embedded):
    m = measure(embedded, RuleBasedUser())
    assert m.n_samples == 48 and m.n_replies == 48 * len(CONTENT_FREE_PROBES)
    assert m.groups == {"ambiguous": 24 * 14, "unanswerable": 12 * 14, "answerable": 6 * 14, "drift": 6 * 14}
    _assert_chance(m)
    assert m.mi_bits == 0.0 and set(m.distinct_texts.values()) == {1}   # one wording per probe, whatever the sample
    replies = probe_replies(embedded, RuleBasedUser(), CONTENT_FREE_PROBES[:3])
    assert {r.label for r in replies} == {"irrelevant"}
    assert all(r.text == refusal_text(r.probe) for r in replies)


def test_rule_user_technical_probes_residual_on_the_embedded_set(embedded):
    # result-format questions may state a gold fragment (they ask about the gold): no lookup beats the prior
    # on the embedded set; the MI left is the sample's style (docs/simulator.md "No side channels")
    m = measure(embedded, RuleBasedUser(), TECHNICAL_PROBES)
    assert m.accuracy <= m.prior + ACCURACY_MARGIN, m.summary()
    assert m.mi_bits < 0.2, m.summary()


def test_dialogue_history_and_drift_do_not_change_the_refusal(embedded):
    # the request as the env builds it after an earlier turn, and with the post-drift gold in force
    user = RuleBasedUser()
    for s in embedded:
        req = UserRequest(sample=s, clarification="Can you clarify?",
                          history=(("user", s.question), ("assistant", "<clarify>?</clarify>"), ("user", "Sorry.")),
                          l1_resolved=True, gold_sql=s.drift.post_gold_sql if s.drift else s.gold_sql)
        assert user.respond([req])[0].text == refusal_text("Can you clarify?"), s.id


@pytest.fixture
def real_corpus(spider_root, shared_data, tmp_path):
    """Spider dev (first 150), Spider-unanswerable (first 150) and a missing-schema + drift corpus generated
    from the first 40 Spider dev anchors (seed 0)."""
    from textsql_clarify.generation.anchors import load_anchors
    from textsql_clarify.generation.pipeline import generate
    unans = shared_data / "spider_unanswerable" / "spider_no_answer.json"
    if not unans.is_file():
        pytest.skip(f"real data absent: {unans} not found")
    out = tmp_path / "gen_side_channel"
    rep = generate(load_anchors(f"spider:{spider_root}", limit=40), ["missing_schema", "drift"], out, seed=0,
                   progress=False)
    gen = load_dataset(str(rep.samples_path))
    return {"spider_dev": load_dataset(f"spider:{spider_root}", limit=150),
            "spider_unanswerable": load_dataset(f"spider-unanswerable:{unans}:{spider_root}", limit=150),
            "generated": gen}


def test_rule_user_is_group_blind_on_real_corpora(real_corpus):
    gen = real_corpus["generated"]
    assert {group_of(s) for s in gen} == {"answerable", "unanswerable", "drift"}
    pool = [s for ss in real_corpus.values() for s in ss]
    m = measure(pool, RuleBasedUser())
    _assert_chance(m)
    assert m.mi_bits == 0.0 and set(m.distinct_texts.values()) == {1}
    # the generated corpus alone: the missing-schema pairs (one unanswerable, one answerable per anchor)
    _assert_chance(measure(gen, RuleBasedUser()))
