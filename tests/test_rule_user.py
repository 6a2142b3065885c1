"""Tests for the rule-based simulated user (ABISS §5.2 relevancy; TIDE §4.2 / App. E router)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textsql_clarify.samples import Chain, ChainLayer, DriftEvent, Interpretation, Sample
from textsql_clarify.simulators.base import ALLOWED_LABELS, REFUSALS, UserRequest, UserSimulator, refusal_text
from textsql_clarify.simulators.leakage import leakage_reasons
from textsql_clarify.simulators.rule_based import (RuleBasedUser, asks_for_sql, content_stems, style_kind,
                                                   technical_cue)
from textsql_clarify.sql.schema import read_schema

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
                           schema_identifiers=req.schema_identifiers, gold_sql=gold,
                           hidden_knowledge=req.sample.hidden_knowledge) == []


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
    assert r.text == refusal_text("Which courses do you want?") in REFUSALS


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


def test_hidden_knowledge_licenses_its_names_and_a_technical_leak_falls_back():
    # the hidden knowledge names billing_email: the user knows it, so the relevant reply may say it
    req = UserRequest(EMAILS, "Which email do you mean?", schema_identifiers=EMAIL_IDS)
    r = USER.respond([req])[0]
    assert (r.label, r.text, r.leak_rejections) == ("relevant", "I mean the billing email, not the contact one.", 0)
    req2 = UserRequest(EMAILS, "Do you mean the billing email or the contact email?", schema_identifiers=EMAIL_IDS)
    r2 = USER.respond([req2])[0]
    assert (r2.label, r2.text, r2.leak_rejections) == ("relevant", "I mean the billing email, not the contact one.", 0)
    # a technical reply naming a column that neither the question nor the hidden knowledge has is refused
    req3 = UserRequest(SINGERS, "Should I sort them?", schema_identifiers=SINGER_IDS)
    r3 = USER.respond([req3])[0]
    assert r3.label == "technical" and r3.text == "Please have them sorted from highest to lowest by age."
    assert clean(r, req) and clean(r2, req2) and clean(r3, req3)


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
    "What is the meaning of life?", "Is this about philosophy, concerts or singers?", "Give me the SQL", "Why?",
])
def test_unanswerable_is_always_an_irrelevant_refusal_worded_as_on_any_group(clar):
    r = ask(LIFE, clar, SINGER_IDS)
    assert r.label == "irrelevant"
    # the wording is the clarification's refusal, the one an answerable sample gets: it cannot tell the group
    assert r.text == refusal_text(clar) == ask(SINGERS, clar, SINGER_IDS).text
    assert not (content_stems(r.text) & content_stems(LIFE.hidden_knowledge))


def test_unanswerable_result_format_question_gets_the_no_preference_answer():
    # labelled irrelevant (ABISS §5.2), worded as an answerable sample whose gold has no ORDER BY
    r = ask(LIFE, "Should I sort them?", SINGER_IDS)
    assert (r.label, r.text, r.meta["reason"]) == ("irrelevant", "Any order is fine.", "unanswerable_technical")
    cols = ask(LIFE, "Which columns should the output show?", SINGER_IDS)
    assert cols.text == "I'd like to see just what my question asks for."


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
    # a refusal is not styled: its form would follow the sample (docs/simulator.md "No side channels")
    assert {ask(Sample(**{**LIFE.__dict__, "style": st}), "Why?").text for st in texts} == {refusal_text("Why?")}


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


# ----------------------------------------------------------------------------- labelling principles
# Hand-built samples after the ABISS §3.2 examples (university database of the ABISS paper). Each test
# checks one principle of the module docstring: the clarification's form, not probe memorisation.

UNI_IDS = frozenset({"students", "student_id", "first_name", "last_name", "personal_email", "institutional_email",
                     "enrollment_date", "dept_id", "departments", "name", "professors", "courses", "course_id",
                     "title", "student_courses", "grade", "year", "budget"})


def _amb(sid, question, sub, gold, hk, *alts, chain=None):
    return Sample(id=sid, db_id="university", db_path="/nonexistent/university.sqlite", question=question,
                  group="ambiguous", subcategory=sub, gold_sql=gold, hidden_knowledge=hk,
                  interpretations=tuple(Interpretation("SELECT 1", h, d) for d, h in alts), chain=chain)


# ABISS §3.2.6: "Give me the list of professors in my department".
MY_DEPT = _amb("muk", "Give me the list of professors in my department", "missing_user_knowledge",
               "SELECT p.last_name FROM professors p JOIN departments d ON p.dept_id = d.dept_id "
               "WHERE d.name = 'Engineering'",
               "I work in the Engineering department.", ("physics", "I work in the Physics department."))
# ABISS §3.2 lexical overlap: personal vs institutional email.
EMAIL_UNI = _amb("ovl", "List the emails of the students of the 'database' course", "lexical_overlap",
                 "SELECT s.institutional_email FROM students s JOIN student_courses sc ON sc.student_id = s.student_id "
                 "JOIN courses c ON c.course_id = sc.course_id WHERE c.title = 'database'",
                 "I mean the address the university gave them.", ("personal email", "I mean their private address."))
# ABISS §3.2 entity ambiguity: course enrolment vs university enrolment.
ENROL = _amb("ent", "List the enrollment date of the students of the 'database' course", "entity_ambiguity",
             "SELECT sc.enrollment_date FROM student_courses sc JOIN courses c ON c.course_id = sc.course_id "
             "WHERE c.title = 'database'",
             "I want the date they signed up for that course.",
             ("university", "I want the date they enrolled at the university."))
# ABISS §3.2.1 scope: "What courses does each department offer?"
SCOPE = _amb("scp", "What courses does each department offer?", "scope",
             "SELECT d.name, c.title FROM departments d JOIN courses c ON c.dept_id = d.dept_id",
             "I want every department listed with its own courses.",
             ("collective", "Only the courses offered by every single department."))
# ABISS §3.2.1 attachment: "List the professors and the students in engineering".
ATTACH = _amb("att", "List the professors and the students in engineering", "attachment",
              "SELECT last_name FROM professors WHERE dept_id = 3 UNION ALL SELECT last_name FROM students "
              "WHERE dept_id = 3",
              "Professors and students must both be in engineering.",
              ("students only", "Only the students must be in engineering."))
# ABISS §1 / §3.2.7: conflicting definitions of student performance.
PERF = _amb("cfk", "Who are the best students by performance?", "conflicting_knowledge",
            "SELECT last_name FROM students ORDER BY total_credits DESC LIMIT 3",
            "Use the weighted average.", ("plain average", "Use the plain average."))


def test_missing_user_knowledge_questions_about_the_user_are_relevant():
    for clar in ("Which department are you in?", "Who are you?", "What's your name?", "Whose department do you mean?",
                 "Could you tell me what department you belong to?", "Are you in Physics or Engineering?"):
        r = ask(MY_DEPT, clar, UNI_IDS)
        assert (r.label, r.text) == ("relevant", "I work in the Engineering department."), clar
    assert ask(MY_DEPT, "Which department are you in?", UNI_IDS).meta["reason"] == "user_knowledge"
    # small talk addressed to the user is no clarification (ABISS §5.2 Irrelevant) ...
    for clar in ("How's your day going?", "What's your favourite department?", "Do you like teaching?"):
        assert ask(MY_DEPT, clar, UNI_IDS).label == "irrelevant", clar
    # ... and asking who the user is does not help where the gap is not the user's identity
    r = ask(EMAIL_UNI, "Who are you?", UNI_IDS)
    assert (r.label, r.meta["reason"]) == ("irrelevant", "personal")
    assert ask(EMAIL_UNI, "Is email your favourite way to talk?", UNI_IDS).label == "irrelevant"


def test_alternatives_and_which_x_do_you_mean_are_relevant():
    hk = "I mean the address the university gave them."
    for clar in ("Which email do you mean?", "Personal or university email?", "Do you want the university address?"):
        r = ask(EMAIL_UNI, clar, UNI_IDS)
        assert (r.label, r.text) == ("relevant", hk), clar
    r = ask(ENROL, "Course enrollment or university enrollment?", UNI_IDS)
    assert (r.label, r.text) == ("relevant", "I want the date they signed up for that course.")
    # restating the fact to confirm it targets the gap too
    assert ask(EMAIL_UNI, "Can you confirm: the address the university gave them?", UNI_IDS).label == "relevant"


def test_alternatives_over_the_returned_entity_only_are_not_readings():
    dogs = Sample(id="dogs", db_id="dog_kennels", db_path="/nonexistent/dk.sqlite",
                  question="Tell me how old the youngest is.", group="ambiguous", subcategory="attachment",
                  gold_sql="SELECT age FROM dogs WHERE dog_id IN (SELECT dog_id FROM treatments) ORDER BY age LIMIT 1",
                  hidden_knowledge="Only among the dogs that have had at least one treatment.")
    ids = frozenset({"dogs", "dog_id", "age", "name", "treatments"})
    r = ask(dogs, "Do you want the age or the dog's name?", ids)      # names only "dog": an output question
    assert (r.label, r.meta["topic"]) == ("technical", "columns")
    assert ask(dogs, "Among all dogs, or only those that had a treatment?", ids).label == "relevant"


def test_vague_word_meaning_and_thresholds_are_relevant():
    for clar in ("What counts as recent?", "Is there a threshold for 'recent'?", "Recent meaning what exactly?",
                 "How recent?", "Which definition of recent should I use?"):
        r = ask(COURSES, clar, COURSE_IDS)
        assert r.label == "relevant", clar
        assert r.text == "Recent means courses from the last semester. Older ones do not count."
    # an ordering phrase that names the vague word's column is still an ordering question
    r = ask(COURSES, "Should I sort them by term, newest first?", COURSE_IDS)
    assert (r.label, r.meta["topic"]) == ("technical", "order")


def test_scope_each_separately_together_is_relevant():
    hk = "I want every department listed with its own courses."
    for clar in ("Are you asking about each department separately?", "Per department, or only the shared ones?",
                 "Courses common to all departments, or each department's own?",
                 "Should I group the courses by department?"):
        r = ask(SCOPE, clar, UNI_IDS)
        assert (r.label, r.text) == ("relevant", hk), clar
    assert ask(SCOPE, "Separately?", UNI_IDS).meta["reason"] == "scope"
    # "each" alone, in a duplicates question, is not the scope reading
    r = ask(SCOPE, "Should each department appear only once?", UNI_IDS)
    assert (r.label, r.meta["topic"]) == ("technical", "distinct")


def test_attachment_what_a_modifier_applies_to_is_relevant():
    hk = "Professors and students must both be in engineering."
    for clar in ("Does 'in engineering' apply to the professors too?", "Just the students, or the professors as well?",
                 "Should the professors also be limited to engineering?"):
        r = ask(ATTACH, clar, UNI_IDS)
        assert (r.label, r.text) == ("relevant", hk), clar
    # "too" of an output phrase is no attachment; "limited to engineering" is a filter, not a result limit
    r = ask(ATTACH, "Should I show their first names too?", UNI_IDS)
    assert (r.label, r.meta["topic"]) == ("technical", "columns")
    assert technical_cue("Should the professors also be limited to engineering?")[0] is None


def test_conflicting_knowledge_which_definition_is_relevant():
    for clar in ("Which definition of performance should I use?", "The notes disagree; which one applies?",
                 "Weighted or plain average?"):
        r = ask(PERF, clar, UNI_IDS)
        assert (r.label, r.text) == ("relevant", "Use the weighted average."), clar
    r = ask(PERF, "Only the top 3?", UNI_IDS)
    assert (r.label, r.text) == ("technical", "I want only the first 3 results.")


def test_technical_topics_are_recognised_broadly():
    cases = {   # ABISS §5.2 Technical; reply grounded in the gold fragment (TIDE App. E)
        "Oldest first?": ("order", "Please have them sorted from highest to lowest by age."),
        "Do you want them sorted?": ("order", "Please have them sorted from highest to lowest by age."),
        "Exactly five?": ("limit", "I'd like all of them, with no cut-off."),
        "How many should I return?": ("limit", "I'd like all of them, with no cut-off."),
        "Should a singer appear twice if she sang twice?": ("distinct", "Repeats are fine, no need to remove them."),
        "Should each singer be listed once?": ("distinct", "Repeats are fine, no need to remove them."),
        "Just the names?": ("columns", "I'd like to see the name, country and age."),
        "Their countries too, or only the names?": ("columns", "I'd like to see the name, country and age."),
        "Do you want the age next to each name?": ("columns", "I'd like to see the name, country and age."),
    }
    for clar, (topic, text) in cases.items():
        r = ask(SINGERS, clar, SINGER_IDS)
        assert (r.label, r.meta["topic"], r.text) == ("technical", topic, text), clar
    for clar in ("Which table has the singers?", "What's the column for age?", "Can you show me the schema?",
                 "In which table is the country stored?"):
        assert asks_for_sql(clar), clar
        assert ask(SINGERS, clar, SINGER_IDS).label == "irrelevant", clar
    assert not asks_for_sql("Which columns should I show?") and not asks_for_sql("What fields do you want to see?")


def test_technical_cue_blanks_phrases_that_are_not_ambiguity_evidence():
    topic, rest = technical_cue("Should the departments be sorted by budget, largest first?")
    assert topic == "order" and content_stems(rest) == {"department"}
    topic, rest = technical_cue("Just the count, or the names too?")   # output nouns stay, particles go
    assert topic == "columns" and content_stems(rest) == {"count", "name"} and "too" not in rest
    assert technical_cue("Senior by academic rank, or by length of service?")[0] is None   # "rank" the noun
    assert technical_cue("Should I rank them by grade?")[0] == "order"
    assert technical_cue("What counts as recent?") == (None, "What counts as recent?")
    with pytest.raises(TypeError, match="clarification must be a string"):
        technical_cue(None)


def test_cue_on_a_chain_sample_resolves_the_next_open_layer():
    clar = "What do you mean by 'between 2000 and 2010'?"   # names neither layer: a general meaning question
    r1 = ask(COACHES, clar, COACH_IDS)
    assert (r1.label, r1.layer, r1.route, r1.text) == ("relevant", "L1", "amb", "A losing record overall.")
    r2 = ask(COACHES, clar, COACH_IDS, l1_resolved=True)
    assert (r2.label, r2.layer, r2.route, r2.text) == ("relevant", "L2", "amb", "The team's full-season record.")
    # the L2 question before L1 is still routed Loc with a deferral (TIDE App. E)
    early = ask(COACHES, "Is that the team's record or only the coach's own stint?", COACH_IDS)
    assert (early.label, early.layer, early.route) == ("technical", "L2", "loc")


_CUE_WORDS = ["you", "your", "who", "are", "which", "department", "in", "name", "each", "separately", "per", "or",
              "too", "also", "both", "apply", "mean", "counts", "as", "definition", "first", "sorted", "once", "names",
              "just", "the", "count", "table", "favourite", "?", "engineering", "professors", "students", "email"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from([MY_DEPT, EMAIL_UNI, ENROL, SCOPE, ATTACH, PERF]), data=st.data())
def test_cue_vocabulary_keeps_label_limits_determinism_and_no_leaks(case, data):
    words = data.draw(st.lists(st.sampled_from(_CUE_WORDS), min_size=1, max_size=10))
    req = UserRequest(case, " ".join(words), schema_identifiers=UNI_IDS)
    r = USER.respond([req])[0]
    assert r.label in ALLOWED_LABELS[case.group] and clean(r, req)
    assert USER.respond([req])[0] == r
    # an answerable twin never gets "relevant", whatever the cue
    twin = Sample(**{**case.__dict__, "group": "answerable", "subcategory": "answerable_without_evidence",
                     "interpretations": ()})
    assert USER.respond([UserRequest(twin, req.clarification, schema_identifiers=UNI_IDS)])[0].label != "relevant"


# ----------------------------------------------------------------------------- the held-out probe file

HELDOUT = Path(__file__).parent / "fixtures" / "probe_clarifications_heldout.jsonl"


def test_heldout_probe_file_is_well_formed_and_never_leaks_sql():
    """Schema of probe_clarifications.jsonl, embedded samples only; labels within ABISS limits."""
    from textsql_clarify.datasets import load_embedded
    from textsql_clarify.simulators.leakage import is_full_gold_leak

    emb = {s.id: s for s in load_embedded()}
    recs = [json.loads(line) for line in HELDOUT.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(recs) >= 60 and len({r["id"] for r in recs}) == len(recs)
    assert {r["set"] for r in recs} == {"heldout", "fresh", "final"}
    subs = set()
    for r in recs:
        s = emb[r["sample_id"]]
        subs.add(s.subcategory)
        assert r["label"] in ALLOWED_LABELS[s.group], r["id"]
        assert isinstance(r["fact"], str) and (r["label"] != "relevant" or r["fact"].strip()), r["id"]
        reply = USER.respond([UserRequest(s, r["clarification"])])[0]
        assert not is_full_gold_leak(reply.text, s.gold_sql), r["id"]
    assert {"scope", "attachment", "lexical_overlap", "entity_ambiguity", "lexical_vagueness",
            "missing_user_knowledge", "conflicting_knowledge"} <= subs
    assert {"answerable_without_evidence", "answerable_with_evidence"} <= subs
    assert sum(emb[r["sample_id"]].group == "unanswerable" for r in recs) >= 5


# ----------------------------------------------------------------------------- no milking (the red-team contract)

import importlib.util  # noqa: E402

from textsql_clarify.simulators.rule_based import added_stems, specificity  # noqa: E402

_MS_SPEC = importlib.util.spec_from_file_location(
    "measure_simulators", Path(__file__).resolve().parents[1] / "scripts" / "measure_simulators.py")
MS = importlib.util.module_from_spec(_MS_SPEC)
_MS_SPEC.loader.exec_module(MS)


def test_specificity_judges_what_the_clarification_adds():
    q = "Which courses does every student of the Mathematics department take?"
    assert specificity(q, q) == "echo"
    assert specificity("Can you clarify: which courses does every student of the Mathematics department take?",
                       q) == "echo"
    assert specificity("What do you mean by 'take mathematics department student courses'?", q) == "echo"
    assert specificity("What do you mean?", q) == "focused"            # says nothing at all (refused anyway)
    assert specificity("What do you mean by courses?", q) == "focused"  # picks out one word
    # covers the question but adds its own words, or alternatives that each add words
    assert specificity("Just to clarify: do you want the courses that every Mathematics student takes, "
                       "i.e. the intersection?", q) == "unfocused"
    assert specificity("Do you want each department with its own semesters, or only the semesters that every "
                       "department teaches in?", "what semesters do all the departments teach in?") == "unfocused"
    assert specificity("What makes a professor senior?", "who are the senior professors?") == "focused"
    assert added_stems("Can you clarify: list recent courses?", "list recent courses") == set()
    assert added_stems("What time period counts as recent?", "list recent courses") == {"time", "period", "count"}


def test_echoes_and_listing_probes_through_gym_make_on_the_embedded_set():
    from textsql_clarify.datasets import load_embedded
    samples = load_embedded()
    rep = MS.milking_report(samples, RuleBasedUser())
    assert {k: v["n"] for k, v in rep["echo"].items()} == {k: 24 for k in MS.ECHO_PROBES}
    # the bound is at most 5 % of the 24 ambiguous samples; none is
    assert {k: (v["relevant"], v["hk_returned"]) for k, v in rep["echo"].items()} == {k: (0, 0) for k in MS.ECHO_PROBES}
    assert {k: v["n"] for k, v in rep["identifier"].items()} == {k: 36 for k in rep["identifier"]}
    assert {k: v["leaks"] for k, v in rep["identifier"].items()} == {k: 0 for k in rep["identifier"]}


def test_the_oracle_clarification_stays_relevant_on_every_ambiguous_embedded_sample():
    from textsql_clarify.baselines.agents import _clarification_for
    from textsql_clarify.datasets import load_embedded
    amb = [s for s in load_embedded() if s.group == "ambiguous" and s.chain is None]
    assert len(amb) >= 18
    for s in amb:
        sch = read_schema(s.db_path)
        ids = frozenset(list(sch) + [c for cs in sch.values() for c in cs])
        r = ask(s, _clarification_for(s), ids)
        assert r.label == "relevant", s.id
        assert r.text.rstrip(".").lower().endswith(s.hidden_knowledge.strip().rstrip(".").lower()[-20:]), s.id


def test_listing_probes_leak_nothing_on_spider_dev(spider_root):
    from textsql_clarify.datasets import load_dataset
    samples = load_dataset(f"spider:{spider_root}")[:150]
    rep = MS.milking_report(samples, RuleBasedUser(), echo=False)
    assert rep["identifier_any"] == {"n": 150, "leaks": 0}
    r = ask(samples[0], MS.identifier_probe_texts(samples[0])["all_columns"],
            frozenset(x.lower() for x in MS.schema_identifiers(samples[0])))
    assert (r.label, r.meta["reason"]) == ("irrelevant", "identifier_probe")
