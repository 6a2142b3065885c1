"""Tests for the rule-based simulated user (ABISS §5.2 relevancy; TIDE §4.2 / App. E router)."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textsql_clarify.samples import Chain, ChainLayer, DriftEvent, Interpretation, Sample
from textsql_clarify.simulators.base import ALLOWED_LABELS, UserRequest, UserSimulator
from textsql_clarify.simulators.leakage import leakage_reasons
from textsql_clarify.simulators.rule_based import RuleBasedUser, asks_for_sql, content_stems, style_kind
from textsql_clarify.sqlschema import read_schema

USER = RuleBasedUser()

# ABISS §1 / §5.2 worked example: "List recent courses"; the clarification about 'recent' is Relevant,
# and the user's answer is "courses from the last semester".
COURSES = Sample(
    id="abiss-recent", db_id="college", db_path="/nonexistent/college.sqlite", question="List recent courses",
    group="ambiguous", subcategory="lexical_vagueness",
    gold_sql="SELECT title FROM course WHERE term = 'Fall 2025' ORDER BY title",
    hidden_knowledge="Recent means courses from the last semester. Older ones do not count.",
)
COURSE_IDS = frozenset({"course", "course_id", "title", "term", "credits", "dept_name", "instructor"})

# Spider dev, concert_singer (answerable): gold with ORDER BY ... DESC.
SINGERS = Sample(
    id="spider-3", db_id="concert_singer", db_path="/nonexistent/concert_singer.sqlite",
    question="Show name, country, age for all singers ordered by age from the oldest to the youngest.",
    group="answerable", subcategory="answerable_without_evidence",
    gold_sql="SELECT name ,  country ,  age FROM singer ORDER BY age DESC",
)
SINGER_IDS = frozenset({"singer", "singer_id", "name", "country", "song_name", "song_release_year", "age",
                        "is_male", "concert", "stadium", "capacity"})

# ABISS §3.2 improper question.
LIFE = Sample(
    id="abiss-life", db_id="concert_singer", db_path="/nonexistent/concert_singer.sqlite",
    question="What is the meaning of life?", group="unanswerable", subcategory="improper_question",
    hidden_knowledge="This is philosophy, not a question about concerts or singers.",
)

# TIDE Table 4 (Joint example): L1 losing record vs away games; L2 team full season vs coach stint.
COACHES = Sample(
    id="tide-joint", db_id="hockey", db_path="/nonexistent/hockey.sqlite",
    question="Which coaches had disappointing seasons between 2000 and 2010?",
    group="ambiguous", subcategory="lexical_vagueness",
    gold_sql=("SELECT c.coachID FROM coaches AS c JOIN teams AS t ON c.tmID = t.tmID AND c.year = t.year "
              "WHERE t.lost > t.won AND c.year BETWEEN 2000 AND 2010"),
    hidden_knowledge="A disappointing season is a losing record, counted over the team's full season.",
    chain=Chain(
        ChainLayer("Does disappointing mean a losing record overall or poor away-game performance?",
                   "A losing record overall.", "Poor performance in away games."),
        ChainLayer("Should the record be the team's full-season record or the coach's own stint?",
                   "The team's full-season record.", "Only the coach's own stint."),
        "eliminated"),
    drift=DriftEvent("Actually, drop the 2000 to 2010 restriction.",
                     "SELECT c.coachID FROM coaches AS c JOIN teams AS t ON c.tmID = t.tmID WHERE t.lost > t.won",
                     "constraint"),
)
COACH_IDS = frozenset({"coaches", "coachid", "teams", "tmid", "year", "won", "lost", "stint", "name"})

# ABISS §3.2 lexical overlap: two e-mail columns; the hidden knowledge names one in words.
EMAILS = Sample(
    id="overlap", db_id="shop", db_path="/nonexistent/shop.sqlite", question="Show the email of every customer",
    group="ambiguous", subcategory="lexical_overlap",
    gold_sql="SELECT billing_email FROM customer",
    hidden_knowledge="I mean the billing email, not the contact one.",
    interpretations=(Interpretation("SELECT contact_email FROM customer", "I mean the contact email.", "contact"),),
)
EMAIL_IDS = frozenset({"customer", "billing_email", "contact_email", "customer_id"})


def ask(sample, clar, ids=frozenset(), **kw):
    return USER.respond([UserRequest(sample, clar, schema_identifiers=ids, **kw)])[0]


def clean(reply, req):
    gold = req.gold_sql or req.sample.gold_sql
    return leakage_reasons(reply.text, question=req.sample.question, clarification=req.clarification,
                           schema_identifiers=req.schema_identifiers, gold_sql=gold) == []


# ----------------------------------------------------------------------------- ambiguous group

def test_relevant_clarification_gets_hidden_knowledge():
    r = ask(COURSES, "What time period does 'recent' refer to?", COURSE_IDS)   # ABISS §5.2 example
    assert (r.label, r.text, r.route, r.layer) == (
        "relevant", "Recent means courses from the last semester. Older ones do not count.", None, None)
    assert r.meta["reason"] == "ambiguous_term"
    r2 = ask(COURSES, "Do you mean the last semester or the last year?", COURSE_IDS)   # a strong word
    assert (r2.label, r2.meta["reason"]) == ("relevant", "hidden_knowledge")


def test_ambiguous_technical_and_irrelevant():
    r = ask(COURSES, "Should I sort the recent courses in some order?", COURSE_IDS)   # ABISS: result ordering
    assert r.label == "technical"
    # the order key "title" is a column the question never used: the three wordings naming it are refused
    assert (r.text, r.leak_rejections) == ("Please have them sorted from lowest to highest.", 3)
    assert r.meta == {"reason": "technical", "topic": "order", "fragment_kind": "order",
                      "leak_reasons": ["identifier:title"]}
    r = ask(COURSES, "Which courses do you want?", COURSE_IDS)   # entity word only: not the ambiguity
    assert (r.label, r.meta["reason"]) == ("irrelevant", "off_target")
    assert r.text == "Sorry, I can't help with that; I only know what I'm after, not how it is stored."


def test_content_stems_and_tide_drift_sample_routes():
    assert content_stems("What time period does 'recent' refer to?") == {"time", "period", "recent"}
    drift_only = Sample(**{**SINGERS.__dict__, "drift": COACHES.drift})   # a TIDE sample: router decisions set
    assert ask(drift_only, "Should I sort the results?", SINGER_IDS).route == "loc"
    assert ask(drift_only, "Give me the SQL", SINGER_IDS).route == "una"


def test_requests_for_the_sql_or_internal_names_are_irrelevant():
    for clar in ("What query should I write for recent courses?", "Give me the SQL", "Can you share the exact query?",
                 "Which column stores the term?", "What are the table names?"):
        assert asks_for_sql(clar), clar
        assert ask(COURSES, clar, COURSE_IDS).label == "irrelevant", clar
    assert not asks_for_sql("Which columns should I show?")
    assert ask(SINGERS, "Which columns should I show?", SINGER_IDS).label == "technical"


def test_leaking_hidden_knowledge_falls_back_and_is_counted():
    req = UserRequest(EMAILS, "Which email do you mean?", schema_identifiers=EMAIL_IDS)
    r = USER.respond([req])[0]
    assert r.label == "relevant"
    assert r.leak_rejections == 1
    assert r.meta["leak_reasons"] == ["identifier:billing_email"]
    assert r.text == "I mean it in the plain, everyday sense."
    # once the agent names both columns itself, the user may repeat the name
    req2 = UserRequest(EMAILS, "Do you mean the billing email or the contact email?", schema_identifiers=EMAIL_IDS)
    r2 = USER.respond([req2])[0]
    assert (r2.label, r2.text, r2.leak_rejections) == ("relevant", "I mean the billing email, not the contact one.", 0)
    assert clean(r, req) and clean(r2, req2)


# ----------------------------------------------------------------------------- answerable group

def test_answerable_never_relevant_even_when_clarification_names_everything():
    everything = SINGERS.question + " " + SINGERS.gold_sql.replace("SELECT", "").replace("FROM", "")
    r = ask(SINGERS, everything + " What do you mean?", SINGER_IDS)
    assert r.label in ALLOWED_LABELS["answerable"]
    r = ask(SINGERS, "What do you mean by singers?", SINGER_IDS)
    assert (r.label, r.route) == ("irrelevant", None)


def test_answerable_order_and_missing_fragment():
    r = ask(SINGERS, "Should I sort the results?", SINGER_IDS)
    assert (r.label, r.text) == ("technical", "Please have them sorted from highest to lowest by age.")
    r = ask(SINGERS, "Should duplicates be removed?", SINGER_IDS)
    assert (r.label, r.text, r.meta["fragment_kind"]) == (
        "technical", "Repeats are fine, no need to remove them.", None)
    r = ask(SINGERS, "Only the top 3?", SINGER_IDS)
    assert (r.label, r.text) == ("technical", "I'd like all of them, with no cut-off.")


def _spider_sample(spider_root, index):
    dev = json.loads((spider_root / "dev.json").read_text())
    d = dev[index]
    path = spider_root / "database" / d["db_id"] / f"{d['db_id']}.sqlite"
    ids = frozenset(x for t, cols in read_schema(str(path)).items() for x in (t, *cols))
    s = Sample(id=f"spider-dev-{index}", db_id=d["db_id"], db_path=str(path), question=d["question"],
               group="answerable", subcategory="answerable_without_evidence", gold_sql=d["query"])
    return s, ids


def test_technical_replies_from_real_spider_gold(spider_root):
    s, ids = _spider_sample(spider_root, 801)   # ... ORDER BY SurfaceArea DESC LIMIT 5
    assert s.gold_sql == "SELECT Name ,  SurfaceArea FROM country ORDER BY SurfaceArea DESC LIMIT 5"
    r = ask(s, "How many countries should I return?", ids)
    assert (r.label, r.text) == ("technical", "I want only the first 5 results.")
    r = ask(s, "In which order?", ids)
    assert (r.label, r.text) == ("technical", "Please have them sorted from highest to lowest by surface area.")
    s, ids = _spider_sample(spider_root, 9)     # SELECT DISTINCT country FROM singer WHERE age > 20
    assert s.gold_sql == "SELECT DISTINCT country FROM singer WHERE age  >  20"
    r = ask(s, "Is it fine if a country is repeated?", ids)
    assert (r.label, r.text) == ("technical", "I want each result listed only once, without duplicates.")
    s, ids = _spider_sample(spider_root, 3)     # ORDER BY age DESC
    r = ask(s, "Do you want them sorted?", ids)
    # concert_singer.stadium has columns named "highest" and "lowest": the guard refuses that wording
    assert (r.text, r.leak_rejections) == ("Please have them sorted by age, largest first.", 1)
    assert r.meta["leak_reasons"] == ["identifier:highest", "identifier:lowest"]


def test_request_gold_sql_overrides_sample_gold():
    req = UserRequest(SINGERS, "Should I sort them?", schema_identifiers=SINGER_IDS,
                      gold_sql="SELECT name FROM singer ORDER BY age")   # e.g. the post-drift gold
    assert USER.respond([req])[0].text == "Please have them sorted from lowest to highest by age."


def test_order_key_not_in_question_is_said_without_the_column():
    s = Sample(id="x", db_id="concert_singer", db_path="/nonexistent/x.sqlite", question="List all singers.",
               group="answerable", subcategory="answerable_without_evidence",
               gold_sql="SELECT name FROM singer ORDER BY song_release_year DESC")
    r = ask(s, "Any particular order?", SINGER_IDS)
    assert (r.text, r.leak_rejections) == ("Please have them sorted from highest to lowest.", 3)
    assert r.meta["leak_reasons"] == ["identifier:song_release_year"]


# ----------------------------------------------------------------------------- unanswerable group

@pytest.mark.parametrize("clar", [
    "What is the meaning of life?", "Is this about philosophy, concerts or singers?", "Should I sort them?",
    "Give me the SQL",
])
def test_unanswerable_is_always_an_irrelevant_refusal(clar):
    r = ask(LIFE, clar, SINGER_IDS)
    assert r.label == "irrelevant"
    assert r.text == "Sorry, I have nothing to add that would help there."
    assert not (content_stems(r.text) & content_stems(LIFE.hidden_knowledge))


# ----------------------------------------------------------------------------- chain (TIDE)

def test_chain_layers_and_router():
    r1 = ask(COACHES, "What counts as a disappointing season?", COACH_IDS)
    assert (r1.label, r1.layer, r1.route, r1.text) == ("relevant", "L1", "amb", "A losing record overall.")
    l2 = "Should it be the team's record or only the coach's stint?"
    early = ask(COACHES, l2, COACH_IDS, l1_resolved=False)
    assert (early.label, early.layer, early.route) == ("technical", "L2", "loc")
    assert early.text == "That depends on the earlier point, so let's settle that first."
    assert "full-season" not in early.text
    late = ask(COACHES, l2, COACH_IDS, l1_resolved=True)
    assert (late.label, late.layer, late.route, late.text) == ("relevant", "L2", "amb", "The team's full-season record.")
    other = ask(COACHES, "Do you like hockey?", COACH_IDS)
    assert (other.label, other.layer, other.route) == ("irrelevant", None, "una")
    tech = ask(COACHES, "Should I sort the coaches?", COACH_IDS)
    assert (tech.label, tech.route, tech.text) == ("technical", "loc", "Any order is fine.")


# ----------------------------------------------------------------------------- style, determinism, batch

def test_style_is_adopted_deterministically():
    clar = "What does recent refer to?"
    texts = {}
    for style in ("neutral", "terse", "casual", "formal", "interrogative"):
        s = Sample(**{**COURSES.__dict__, "style": style})
        texts[style] = ask(s, clar, COURSE_IDS).text
    assert texts == {
        "neutral": "Recent means courses from the last semester. Older ones do not count.",
        "terse": "Recent means courses from the last semester.",
        "casual": "Oh, recent means courses from the last semester. Older ones do not count.",
        "formal": "Certainly. Recent means courses from the last semester. Older ones do not count.",
        "interrogative": "Recent means courses from the last semester. Older ones do not count.",
    }
    assert style_kind("Colloquial") == "casual" and style_kind("") == "neutral"
    assert ask(Sample(**{**LIFE.__dict__, "style": "terse"}), "Why?").text == "Nothing to add, sorry."


def test_batch_order_preserved_and_deterministic():
    reqs = [UserRequest(COURSES, "What does recent mean?", schema_identifiers=COURSE_IDS),
            UserRequest(LIFE, "Why?"),
            UserRequest(SINGERS, "Should I sort the results?", schema_identifiers=SINGER_IDS),
            UserRequest(COACHES, "What counts as a disappointing season?", schema_identifiers=COACH_IDS),
            UserRequest(SINGERS, "Give me the SQL", schema_identifiers=SINGER_IDS)]
    out = USER.respond(reqs)
    assert [r.label for r in out] == ["relevant", "irrelevant", "technical", "relevant", "irrelevant"]
    assert USER.respond(list(reversed(reqs))) == list(reversed(out))
    assert [USER.respond([q])[0] for q in reqs] == out
    assert USER.respond([]) == []
    assert isinstance(USER, UserSimulator)


def test_bad_batch_raises_typed_errors():
    with pytest.raises(TypeError, match=r"batch\[1\] must be a UserRequest"):
        USER.respond([UserRequest(LIFE, "x"), "not a request"])
    with pytest.raises(TypeError, match="batch must be a sequence"):
        USER.respond("What?")
    with pytest.raises(TypeError, match=r"batch\[0\].clarification must be a string"):
        USER.respond([UserRequest(LIFE, None)])


# ----------------------------------------------------------------------------- property: no leaks, label limits

_CASES = [(COURSES, COURSE_IDS), (SINGERS, SINGER_IDS), (LIFE, SINGER_IDS), (COACHES, COACH_IDS),
          (EMAILS, EMAIL_IDS)]
_EXTRA = ["sort", "order", "top", "5", "duplicates", "columns", "show", "which", "what", "mean", "SQL", "query",
          "table", "name", "?", "or", "the", "give", "me", "limit", "unique", "first"]


def _vocab(sample, ids):
    words = set(sample.question.replace("?", " ").split()) | set(sample.hidden_knowledge.split())
    words |= {w for i in ids for w in (i, i.replace("_", " "))}
    if sample.chain:
        words |= set(sample.chain.l1.question.split()) | set(sample.chain.l2.question.split())
    return sorted(words | set(_EXTRA))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(range(len(_CASES))), data=st.data(), l1=st.booleans())
def test_no_reply_leaks_and_labels_stay_within_limits(case, data, l1):
    sample, ids = _CASES[case]
    words = data.draw(st.lists(st.sampled_from(_vocab(sample, ids)), min_size=1, max_size=10))
    req = UserRequest(sample, " ".join(words) + "?", schema_identifiers=ids, l1_resolved=l1)
    r = USER.respond([req])[0]
    assert r.label in ALLOWED_LABELS[sample.group]
    assert clean(r, req), (req.clarification, r.text)
    assert USER.respond([req])[0] == r
    if sample.group == "unanswerable":
        assert r.label == "irrelevant"


def test_all_spider_dev_technical_replies_are_clean(spider_root):
    """1,034 Spider dev golds x 4 technical clarifications: all technical, none leaks, LIMIT n is stated."""
    dev = json.loads((spider_root / "dev.json").read_text())
    clars = ("Should I sort the results?", "How many results should I return?", "Should duplicates be removed?",
             "Which columns should I show?")
    reqs = []
    for i, d in enumerate(dev):
        path = spider_root / "database" / d["db_id"] / f"{d['db_id']}.sqlite"
        ids = frozenset(x for t, cols in read_schema(str(path)).items() for x in (t, *cols))
        s = Sample(id=str(i), db_id=d["db_id"], db_path=str(path), question=d["question"], group="answerable",
                   subcategory="answerable_without_evidence", gold_sql=d["query"])
        reqs.extend(UserRequest(s, c, schema_identifiers=ids) for c in clars)
    out = USER.respond(reqs)
    assert len(out) == 4136
    assert {r.label for r in out} == {"technical"}
    assert [(q.clarification, r.text) for q, r in zip(reqs, out) if not clean(r, q)] == []
    for q, r in zip(reqs, out):
        m = re.search(r"\bLIMIT\s+(\d+)\s*;?\s*$", q.sample.gold_sql, re.IGNORECASE)
        if q.clarification.startswith("How many") and m and int(m.group(1)) > 1:
            assert f"first {m.group(1)} results" in r.text, (q.sample.gold_sql, r.text)
