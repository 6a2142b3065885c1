"""The model-free drift recipe and its TIDE Table 7 checks (TIDE §2.2, App. B).

* real Spider dev anchors (chosen by id) with the exact edits, subtypes and utterances the recipe makes
  for ``random.Random(0)``;
* one crafted candidate per check stage, each rejected by that stage and no earlier one;
* the utterances carry no SQL; the recipe is deterministic; the source database is not written;
* the embedded set's drift samples pass the same checks (the post-drift golds written by hand).
"""
from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.drift_check import drift_problems
from textsql_clarify.datasets.spider import load_spider
from textsql_clarify.generation.anchors import load_anchors
from textsql_clarify.generation.base import Accepted, Anchor, GenContext, Recipe, Rejected
from textsql_clarify.generation.drift import DriftRecipe
from textsql_clarify.generation.drift_checks import STAGES, check_drift_candidate, utterance_problem
from textsql_clarify.generation.utterances import (STYLES, TEMPLATES, attribute_words, column_words,
                                                   condition_words, entity_words, flag_column_words,
                                                   flag_value_words, relation_words, render_utterance,
                                                   table_words, value_words)
from textsql_clarify.samples import DriftEvent, Sample, write_jsonl
from textsql_clarify.sql.sandbox import get_sandbox

UNI = Path(__file__).resolve().parents[1] / "textsql_clarify" / "datasets" / "embedded" / "university.sqlite"


def _ctx(tmp_path: Path, **options: str) -> GenContext:
    return GenContext(work_dir=tmp_path / "databases", options=dict(options))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------- the checks, stage by stage
PRE = "SELECT first_name FROM students WHERE dept_id = 1"


@pytest.mark.parametrize("post, subtype, utterance, stage", [
    ("SELECT first_name FROM WHERE", "value", "Make it Mathematics.", "parses"),
    ("SELECT first_name FROM nowhere_table", "value", "Make it Mathematics.", "executes"),
    ("SELECT first_name FROM students WHERE dept_id = 999", "value", "Make it department 999.", "non_empty"),
    # every student has total_credits >= 0: the same rows
    ("SELECT first_name FROM students WHERE dept_id = 1 AND total_credits >= 0", "constraint",
     "Only those with some credits.", "distinct_result"),
    ("SELECT first_name FROM students WHERE dept_id = 1 AND total_credits > 10", "constraint",
     "Only those with more than 10 credits.", "non_monotone"),
    ("SELECT first_name FROM students", "value", "Any department is fine.", "subtype_scope"),
    ("SELECT first_name FROM students WHERE dept_id = 2", "value", "Use WHERE dept_id = 2 instead.", "utterance"),
])
def test_each_check_rejects_its_crafted_candidate(post, subtype, utterance, stage):
    sb = get_sandbox(UNI)
    res = check_drift_candidate(PRE, post, subtype, utterance, sb)
    assert res.stage == stage, res
    assert list(res.verdicts) == list(STAGES[:STAGES.index(stage)])
    assert res.reason


def test_a_good_candidate_passes_every_stage():
    sb = get_sandbox(UNI)
    res = check_drift_candidate(PRE, "SELECT first_name FROM students WHERE dept_id = 2", "value",
                                "Actually, I meant Mathematics rather than Computer Science.", sb)
    assert res.passed and res.verdicts == {s: "pass" for s in STAGES}
    assert res.post_result is not None and res.post_result.row_count == 8


def test_the_monotone_reason_and_an_unknown_stage():
    sb = get_sandbox(UNI)
    same = check_drift_candidate(PRE, PRE, "value", "x", sb, stages=("parses", "non_monotone"))
    assert (same.stage, same.reason) == ("non_monotone", "no change in the commitments")
    with pytest.raises(ValueError, match="unknown drift check stage"):
        check_drift_candidate(PRE, PRE, "value", "x", sb, stages=("nope",))


@pytest.mark.parametrize("text, what", [
    ("Use WHERE dept_id = 2 instead.", "SQL as code"),
    ("Give me COUNT(*) instead.", "SQL as code"),
    ("Only ages >= 30.", "SQL as code"),
    ("Show the first_name instead.", "underscore"),
    ("Show students.last instead.", "table.column"),
    ("I meant 'France', not Italy.", "quoting"),
    ('I meant "France", not Italy.', "quoting"),
])
def test_utterance_check_rejects_sql(text, what):
    assert what in utterance_problem(text)


def test_utterance_check_accepts_the_users_words_and_refuses_given_identifiers():
    for text in ("Actually, I meant Mathematics rather than Computer Science.", "Don't show the singer's age.",
                 "Could you use 3.5 instead of 2?", "Forget about the year being 2014, any year is fine."):
        assert utterance_problem(text) is None, text
    assert "verbatim" in utterance_problem("Show the StuID instead.", ["StuID"])
    assert utterance_problem("") == "empty utterance"


# ------------------------------------------------------------------------------------------- the words
def test_schema_words():
    assert [column_words(n) for n in ("first_name", "Hometown", "LName", "StuID", "CAR_MAKERS", "GNPOld",
                                      "PetType", "Song_release_year")] == [
        "first name", "hometown", "last name", "student ID", "car makers", "old GNP", "pet type",
        "song release year"]
    assert table_words("singer", "How many singers do we have?", plural=True) == "singers"
    assert table_words("CAR_MAKERS", "the different car makers") == "car maker"
    assert table_words("Highschooler", "Show the names of high schoolers.", plural=True) == "high schoolers"
    assert relation_words("has_pet", "Student") == "pet"
    assert relation_words("singer_in_concert", "singer") == "concert"
    assert relation_words("CONTESTANTS", "AREA_CODE_STATE") == "contestant"
    assert [value_words(v) for v in (3.0, 2.5, "France", 7)] == ["3", "2.5", "France", "7"]
    assert condition_words("GT", 30) == "more than 30"
    assert condition_words("In", ["a", "b", "c"]) == "one of a, b or c"
    assert condition_words("Like", "%Stu%") == "like Stu"
    with pytest.raises(ValueError):
        condition_words("Glob", 1)


def test_flag_columns_and_generic_names_in_the_users_words(spider_root, spider_by_id, tmp_path):
    assert (flag_column_words("IsOfficial"), flag_column_words("is_male"), flag_column_words("Island")) == (
        "official flag", "male flag", None)
    assert [flag_value_words(v) for v in ("T", "F", "N", 1, "France")] == ["true", "false", "no", "true", None]
    s = spider_by_id["spider-dev-738"]  # official languages of Afghanistan: ... AND IsOfficial = "T"
    texts = [o.sample.drift.utterance for o in _run(s, tmp_path, drift_per_subtype="constraint=3,value=0")
             if isinstance(o, Accepted) and o.sample.drift.subtype == "constraint"]
    assert texts == ["Never mind the country name being Afghanistan, drop that.",
                     "Actually, skip the official flag part, it doesn't have to be true.",
                     "Actually, never mind the country name and the official flag parts, drop them both."]


def test_every_template_renders_without_sql():
    slots = {"col": "country", "old": "France", "new": "Italy", "cond": "France", "col2": "age",
             "cond2": "more than 30",
             "old_col": "name", "new_col": "age", "old_agg": "average", "new_agg": "highest", "table": "singer",
             "tables": "singers", "other": "concert", "excluded": "Jessie Alloway"}
    seen = set()
    for kind, by_style in TEMPLATES.items():
        assert set(by_style) == set(STYLES), kind
        for style, texts in by_style.items():
            assert len(texts) >= 2, (kind, style)
            for t in texts:
                assert utterance_problem(t.format(**slots)) is None, t
    for seed in range(60):
        u = render_utterance("replace_literal", slots, random.Random(seed))
        seen.add(u.style)
        assert u.text[0].isupper() and u.template.startswith("replace_literal/")
    assert seen == set(STYLES)


# ------------------------------------------------------------------------------------- the recipe, Spider
@pytest.fixture(scope="module")
def spider_by_id(request):
    root = Path(__file__).resolve().parents[2] / "shared" / "data" / "spider_dev"
    if not (root / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    return {s.id: s for s in load_spider(root)}


def _anchor(s) -> Anchor:
    return Anchor(s.id, s.db_id, s.db_path, s.question, s.gold_sql, s.difficulty, source="spider")


def _run(s, tmp_path, seed=0, **options):
    return DriftRecipe().run(_anchor(s), random.Random(seed), _ctx(tmp_path, **options))


def _accepted(outs):
    return [(o.sample.id, o.sample.drift.subtype, o.sample.provenance["edit"], o.sample.drift.post_gold_sql)
            for o in outs if isinstance(o, Accepted)]


def test_spider_singers_of_2014(spider_root, spider_by_id, tmp_path):
    s = spider_by_id["spider-dev-38"]  # names of the singers who performed in a concert in 2014
    outs = _run(s, tmp_path)
    joins = ("FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
             "JOIN concert AS T3 ON T1.concert_id = T3.concert_id")
    assert _accepted(outs) == [
        ("drift-spider-dev-38-value", "value", "value: concert.year 2014 -> 2015",
         f"SELECT T2.name {joins} WHERE T3.year = 2015"),
        ("drift-spider-dev-38-constraint", "constraint", "constraint: removed concert.year filter T3.year = 2014",
         f"SELECT T2.name {joins}"),
        ("drift-spider-dev-38-constraint-2", "constraint",
         "constraint: removed table(s) singer_in_concert, concert with their join condition(s) and filter(s) "
         "T3.year = 2014", "SELECT T2.name FROM singer AS T2"),
    ]  # no projection: the anchor has its 3 samples (drift_per_anchor)
    assert [o.sample.drift.utterance for o in outs] == [
        "Oops, make that 2015, not 2014.", "Actually, skip the year part, it doesn't have to be 2014.",
        "Forget the concert part, just give me every singer."]
    first = outs[0].sample
    assert (first.style, first.group, first.subcategory, first.difficulty) == (
        "colloquial", "answerable", "answerable_without_evidence", s.difficulty)
    assert first.question == s.question and first.gold_sql == s.gold_sql
    assert outs[0].verdicts == {st: "pass" for st in STAGES}
    # one per subtype, no cap on the total (TIDE's one drift per subtype): the projection comes back
    tide = _accepted(_run(s, tmp_path, drift_per_subtype="1", drift_per_anchor="0"))
    assert [g[1] for g in tide] == ["value", "constraint", "projection"]
    assert tide[2][2] == "projection: singer.name -> singer.Age"


def test_spider_french_singers_value_drift(spider_root, spider_by_id, tmp_path):
    s = spider_by_id["spider-dev-4"]  # average, minimum and maximum age of the singers from France
    got = _accepted(_run(s, tmp_path))
    assert [g[:3] for g in got] == [
        ("drift-spider-dev-4-value", "value", "value: singer.country 'France' -> 'United States'"),
        ("drift-spider-dev-4-value-2", "value", "value: singer.country 'France' -> 'Netherlands'"),
        ("drift-spider-dev-4-constraint", "constraint", "constraint: removed singer.country filter country = 'France'"),
    ]
    assert got[0][3] == "SELECT AVG(age), MIN(age), MAX(age) FROM singer WHERE country = 'United States'"


def test_spider_text_year_compared_as_a_number_and_a_projection(spider_root, spider_by_id, tmp_path):
    s = spider_by_id["spider-dev-24"]  # concert.Year is stored as text; the gold compares it with 2014
    outs = _run(s, tmp_path)
    rejected = [o for o in outs if isinstance(o, Rejected)]
    # the value edit 2014 -> 2015 is read as a number; the stadium with most concerts since 2014 is one of those
    # tied for most since 2015, so the pre-drift answer is a post-drift answer (ORDER BY ... LIMIT 1 ties)
    assert [(o.stage, o.reason) for o in rejected] == [
        ("pre_gold_fails", "value: concert.year 2014 -> 2015: the anchor's gold SQL returns a post-drift answer "
                           "without any extra column (ex_strict 1 under EX alone: match): an answer that follows "
                           "the drift may return the pre-drift result"),
        ("distinct_result", "constraint: removed concert.year filter T1.year >= 2014: returns the same result as "
                            "the anchor's gold SQL")]
    assert [a[1:3] for a in _accepted(outs)] == [("projection", "projection: removed output T2.name"),
                                                 ("projection", "projection: removed output T2.capacity")]
    assert outs[2].sample.drift.utterance == "Skip the name, the rest is fine."


def test_the_load_time_check_flags_an_authored_drift_whose_pre_drift_answer_is_a_post_drift_answer(
        spider_root, spider_by_id, tmp_path):
    # the pair the recipe refuses above, written by hand: flagged at load time, with file, line and field
    s = spider_by_id["spider-dev-24"]
    post = s.gold_sql.replace(">=  2014", ">=  2015")
    authored = Sample(id="authored-24", db_id=s.db_id, db_path=s.db_path, question=s.question, group="answerable",
                      subcategory="answerable_without_evidence", gold_sql=s.gold_sql,
                      drift=DriftEvent("Make that at least 2015.", post, "value"))
    file = tmp_path / "authored.jsonl"
    write_jsonl([authored], file)
    (p,) = drift_problems([authored], file)
    assert (p.file, p.line, p.field) == (str(file), 1, "drift.post_gold_sql")
    assert p.message.startswith("gold_sql returns a post-drift answer without any extra column")


def test_spider_count_only_gives_nothing_and_join_chain_removal(spider_root, spider_by_id, tmp_path):
    assert _run(spider_by_id["spider-dev-0"], tmp_path) == []  # SELECT count(*) FROM singer: nothing to edit
    outs = _run(spider_by_id["spider-dev-100"], tmp_path)  # car makers who produced a car in 1970
    removal = [o.sample for o in outs if isinstance(o, Accepted) and o.sample.id.endswith("constraint-2")][0]
    assert removal.drift.post_gold_sql == "SELECT DISTINCT T1.Maker FROM CAR_MAKERS AS T1"
    assert removal.drift.utterance == "Forget the cars data part, just give me every car maker."


def test_spider_accepted_samples_pass_the_load_time_check(spider_root, spider_by_id, tmp_path):
    ids = ["spider-dev-4", "spider-dev-24", "spider-dev-38", "spider-dev-100", "spider-dev-175", "spider-dev-300"]
    samples = [o.sample for i in ids for o in _run(spider_by_id[i], tmp_path) if isinstance(o, Accepted)]
    assert len(samples) >= 12 and {s.drift.subtype for s in samples} == {"value", "constraint", "projection"}
    file = tmp_path / "drift.jsonl"
    write_jsonl(samples, file)
    assert drift_problems(samples, file) == []


# ---------------------------------------------------------------------------------- the recipe, embedded
@pytest.fixture(scope="module")
def embedded_runs(tmp_path_factory):
    anchors = load_anchors("embedded")
    ctx = _ctx(tmp_path_factory.mktemp("drift"))
    before = _digest(UNI)
    runs = [[DriftRecipe().run(a, random.Random(7), ctx) for a in anchors] for _ in range(2)]
    return anchors, runs, before


def test_recipe_contract_and_the_source_is_not_written(embedded_runs):
    anchors, runs, before = embedded_runs
    r = DriftRecipe()
    assert isinstance(r, Recipe) and (r.name, r.needs_model, r.stages) == ("drift", False, STAGES)
    assert _digest(UNI) == before
    outs = [o for per in runs[0] for o in per]
    assert all(isinstance(o, (Accepted, Rejected)) and (isinstance(o, Accepted) or o.stage in STAGES) for o in outs)
    ids = [o.sample.id for o in outs if isinstance(o, Accepted)]
    assert len(ids) == len(set(ids)) and all(i.startswith("drift-uni-") for i in ids)


def test_deterministic_for_a_seed(embedded_runs, tmp_path):
    anchors, runs, _ = embedded_runs

    def flat(run):
        return [o.sample.to_dict() if isinstance(o, Accepted) else (o.stage, o.reason) for per in run for o in per]

    assert flat(runs[0]) == flat(runs[1])
    other = [DriftRecipe().run(a, random.Random(8), _ctx(tmp_path)) for a in anchors]
    assert flat(other) != flat(runs[0])


def test_embedded_utterances_carry_no_sql_and_every_subtype_and_style_occurs(embedded_runs):
    _, runs, _ = embedded_runs
    acc = [o.sample for per in runs[0] for o in per if isinstance(o, Accepted)]
    assert {s.drift.subtype for s in acc} == {"value", "constraint", "projection"}
    assert {s.style for s in acc} == set(STYLES)
    for s in acc:
        assert utterance_problem(s.drift.utterance) is None, s.drift.utterance
        assert "_" not in s.drift.utterance and "'" + "'" not in s.drift.utterance
        assert s.provenance["subtype"] == s.drift.subtype and s.provenance["edit"].startswith(s.drift.subtype + ":")


def test_options_cap_the_samples(embedded_runs, tmp_path):
    anchors, _, _ = embedded_runs
    a = next(x for x in anchors if x.id == "uni-drift-001")
    one = DriftRecipe().run(a, random.Random(0), _ctx(tmp_path, drift_per_subtype="1", drift_per_anchor="0"))
    got = [o.sample.drift.subtype for o in one if isinstance(o, Accepted)]
    assert sorted(got) == ["constraint", "projection", "value"]
    none = DriftRecipe().run(a, random.Random(0), _ctx(tmp_path, drift_per_subtype="value=0,constraint=0",
                                                       drift_projection_fill="0"))
    assert none == []
    with pytest.raises(ValueError, match="unknown drift subtype"):
        DriftRecipe().run(a, random.Random(0), _ctx(tmp_path, drift_per_subtype="colour=1"))
    with pytest.raises(ValueError, match="drift_tries"):
        DriftRecipe().run(a, random.Random(0), _ctx(tmp_path, drift_tries="0"))


def test_edits_on_a_crafted_anchor_negation_and_range(tmp_path):
    a = Anchor("x2", "university", str(UNI), "Students outside department 1 with 10 to 100 credits?",
               "SELECT first_name FROM students WHERE NOT dept_id = 1 AND total_credits BETWEEN 10 AND 100")
    outs = DriftRecipe().run(a, random.Random(0), _ctx(tmp_path))
    edits = [o.sample.provenance["edit"] for o in outs if isinstance(o, Accepted)]
    # the negated literal is never replaced (its words would say the opposite); the range bounds are
    assert not any(e.startswith("value: students.dept_id") for e in edits)
    assert any(e.startswith("value: students.total_credits") for e in edits)
    assert "constraint: removed students.dept_id filter NOT dept_id = 1" in edits
    assert "constraint: students.total_credits range total_credits BETWEEN 10 AND 100 -> total_credits >= 10" in edits
    drop = next(o.sample for o in outs if isinstance(o, Accepted) and "NOT dept_id" in o.sample.provenance["edit"]
                and ";" not in o.sample.provenance["edit"])
    # an exclusion withdrawn reads as what was left out (never "not just other than 1")
    assert drop.drift.utterance == "What if we didn't exclude 1 for the department ID?"
    assert drop.provenance["edit_kind"] == "remove_exclusion"
    assert drop.drift.post_gold_sql == "SELECT first_name FROM students WHERE total_credits BETWEEN 10 AND 100"


def test_anchor_whose_gold_returns_nothing_is_one_rejection(tmp_path):
    a = Anchor("x1", "university", str(UNI), "Students of department 999?",
               "SELECT first_name FROM students WHERE dept_id = 999")
    assert [(o.stage, type(o)) for o in DriftRecipe().run(a, random.Random(0), _ctx(tmp_path))] == [
        ("non_empty", Rejected)]


def test_embedded_drift_samples_pass_the_checks():
    drifting = [s for s in load_dataset("embedded") if s.drift is not None]
    assert len(drifting) == 6
    for s in drifting:
        res = check_drift_candidate(s.gold_sql, s.drift.post_gold_sql, s.drift.subtype, s.drift.utterance,
                                    get_sandbox(s.db_path))
        assert res.passed, (s.id, res)


# ------------------------------------------------- a fresh reader's defects (docs/generation.md "Quality")
def _candidates(s, subtype, seed=0):
    r = DriftRecipe()
    sb = get_sandbox(s.db_path)
    q = r._query(_anchor(s), sb)
    gen = {"value": r.value_candidates, "constraint": r.constraint_candidates,
           "projection": r.projection_candidates}[subtype]
    return list(gen(q, random.Random(seed), sb))


def test_no_projection_edit_changes_whether_the_query_collapses(spider_root, spider_by_id):
    # rate50 sample 10 (spider-dev-335): SELECT min(Version_Number), template_type_code FROM Templates without
    # the MIN returned the code of every template, not of the smallest version's
    s = spider_by_id["spider-dev-335"]
    edits = sorted(c.edit for c in _candidates(s, "projection"))
    assert edits == ["projection: MIN(Templates.Version_Number) -> MAX(Templates.Version_Number)",
                     "projection: MIN(Templates.Version_Number) -> SUM(Templates.Version_Number)",
                     "projection: removed output template_type_code"]
    # with a GROUP BY the rows stay grouped: removing the aggregate is still offered
    s = spider_by_id["spider-dev-820"]  # SELECT CountryCode, max(Percentage) ... GROUP BY CountryCode
    assert "projection: removed output MAX(Percentage)" in {c.edit for c in _candidates(s, "projection")}


def test_a_literal_said_twice_is_not_edited_and_set_operation_branches_keep_their_filters(spider_root,
                                                                                         spider_by_id):
    # rate50 sample 36 (spider-dev-755): IsOfficial = 'T' in both UNION branches; "false instead of true"
    # cannot say which
    s = spider_by_id["spider-dev-755"]
    value = {c.edit.split(" '")[0] for c in _candidates(s, "value")}
    assert value == {"value: countrylanguage.Language"}
    # spider-dev-857: Year_of_Founded < 2003 INTERSECT ... > 2003: the same value reads apart ("less than 2003")
    s = spider_by_id["spider-dev-857"]
    cands = _candidates(s, "value")
    assert cands and all(c.edit.startswith("value: orchestra.Year_of_Founded 2003 ->") for c in cands)
    assert {c.slots["old"] for c in cands} == {"less than 2003", "more than 2003"}
    # rate50 sample 9 (spider-dev-575): a join removed from one INTERSECT branch ("didn't need a degree
    # program ..."); in a set operation only a filter of an INTERSECT / EXCEPT branch named once goes
    got = sorted(c.edit for c in _candidates(spider_by_id["spider-dev-575"], "constraint"))
    assert got == [
        "constraint: removed Degree_Programs.degree_summary_name filter degree_summary_name = 'Bachelor'",
        "constraint: removed Degree_Programs.degree_summary_name filter degree_summary_name = 'Master'",
        "constraint: removed Degree_Programs.degree_summary_name filter degree_summary_name = 'Master'; "
        "removed Degree_Programs.degree_summary_name filter degree_summary_name = 'Bachelor'"]
    assert len(_candidates(s, "constraint")) == 3  # < 2003, > 2003, both
    # never one UNION branch's filter (a branch without its filter takes in every row), nor a filter said
    # twice in one branch only: IsOfficial = 'T' goes from both branches at once
    assert [c.edit for c in _candidates(spider_by_id["spider-dev-755"], "constraint")] == [
        "constraint: removed countrylanguage.IsOfficial filter IsOfficial = 'T' from both branches of the UNION"]


def test_words_of_relation_tables_exclusions_and_participles(spider_root, spider_by_id, tmp_path):
    assert column_words("Year_of_Founded") == "year founded"  # rate50 sample 38: "the year of founded"
    assert column_words("Year_of_Work") == "year of work"
    assert [attribute_words("killed", "INT"), attribute_words("created", "TIMESTAMP"),
            attribute_words("injured", "TEXT"), attribute_words("winner seed", "INT"),
            attribute_words("year of founded", "REAL")] == [
        "number killed", "created date", "injured value", "winner seed", "year founded"]
    assert entity_words("has_pet", "student", plural=True) == "pets"  # rate50 sample 12: "every has pet"
    assert entity_words("singer_in_concert", "concert") == "singer"
    assert entity_words("singer", "concert", "How many singers?", plural=True) == "singers"
    assert not any("didn't need" in t for by in TEMPLATES.values() for ts in by.values() for t in ts)  # sample 9
    s = spider_by_id["spider-dev-78"]  # the pet of the student whose last name is Smith
    texts = {o.sample.provenance["edit_kind"]: o.sample.drift.utterance for o in _run(s, tmp_path)
             if isinstance(o, Accepted)}
    assert texts["remove_join_filter"] == "Could you include every pet, not only those with a student whose " \
                                          "last name is Smith?"
    # rate50 sample 18 (spider-dev-692, contestant_name != 'Jessie Alloway'): "not just other than Jessie Alloway"
    outs = [o.sample for o in _run(spider_by_id["spider-dev-692"], tmp_path) if isinstance(o, Accepted)]
    assert [(o.provenance["edit_kind"], o.drift.utterance) for o in outs] == [
        ("replace_exclusion", "What if we left out Kurt Walser rather than Jessie Alloway?"),
        ("replace_exclusion", "Actually, keep Jessie Alloway and drop Tabatha Gehling instead."),
        ("replace_exclusion", "Actually, keep Jessie Alloway and drop Alana Bregman instead."),
        ("remove_exclusion", "Could you include Jessie Alloway as well?")]
    assert not any("other than" in o.drift.utterance for o in outs)
    texts = [o.sample.drift.utterance for o in _run(spider_by_id["spider-dev-857"], tmp_path)
             if isinstance(o, Accepted)]
    assert texts[0] == "Sorry, scratch less than 2003, I want less than 2007 for the year founded."


def test_replacement_values_carry_no_markup(spider_root, spider_by_id):
    # rate50 sample 45 (spider-dev-820): '[South]Mande' drawn as the language a user asks for
    from textsql_clarify.generation.drift import _clean_value

    s = spider_by_id["spider-dev-820"]
    r = DriftRecipe()
    pool = r.column_values(get_sandbox(s.db_path), "countrylanguage", "Language")
    assert "[South]Mande" in pool
    assert [_clean_value(v) for v in ("[South]Mande", "{x}", "a|b", "Ukrainian and Russian", " Mande", "a  b",
                                      "Tab\there", 3.5)] == [False, False, False, True, False, False, False, True]
    for seed in range(40):
        assert not any("[" in c.edit or "]" in c.edit for c in _candidates(s, "value", seed)), seed


def test_intersect_branch_filter_said_twice_is_kept(tmp_path):
    sql = ("SELECT first_name FROM students WHERE dept_id = 1 AND total_credits > 10 INTERSECT "
           "SELECT first_name FROM students WHERE dept_id = 2 AND total_credits > 10")
    a = Anchor("x3", "university", str(UNI), "Names in department 1 and in 2, with more than 10 credits?", sql)
    r = DriftRecipe()
    sb = get_sandbox(UNI)
    edits = sorted(c.edit for c in r.constraint_candidates(r._query(a, sb), random.Random(0), sb))
    # "drop the condition that the total credits is more than 10" cannot say which branch: it goes from
    # both branches at once, never from one
    assert edits == ["constraint: removed students.dept_id filter dept_id = 1",
                     "constraint: removed students.dept_id filter dept_id = 1; removed students.dept_id filter "
                     "dept_id = 2",
                     "constraint: removed students.dept_id filter dept_id = 2",
                     "constraint: removed students.total_credits filter total_credits > 10 from both branches "
                     "of the INTERSECT"]
    union = sql.replace("INTERSECT", "UNION")
    a = Anchor("x4", "university", str(UNI), "Names in department 1 or in 2?", union)
    cands = list(r.constraint_candidates(r._query(a, sb), random.Random(0), sb))
    assert [c.post_sql for c in cands] == [
        "SELECT first_name FROM students WHERE dept_id = 1 UNION SELECT first_name FROM students WHERE dept_id = 2"]
    # a third copy of the filter (in a subquery) makes the words name nothing: not offered
    three = union.replace("dept_id = 2 AND", "dept_id IN (SELECT dept_id FROM students WHERE total_credits > 10) AND")
    a = Anchor("x5", "university", str(UNI), "Names in department 1 or in 2?", three)
    assert not any("both branches" in c.edit for c in r.constraint_candidates(r._query(a, sb), random.Random(0), sb))


def test_a_filter_shared_by_both_branches_is_removed_from_both(spider_root, spider_by_id, tmp_path):
    # spider-dev-748: English and French both official (INTERSECT, T2.IsOfficial = 'T' in each branch): dropping
    # the official flag everywhere gives the nations where both are spoken; TIDE Alg. 1 calls it constraint
    outs = _accepted(_run(spider_by_id["spider-dev-748"], tmp_path))
    shared = [o for o in outs if "both branches" in o[2]]
    assert [(o[1], o[2]) for o in shared] == [
        ("constraint", "constraint: removed countrylanguage.IsOfficial filter T2.IsOfficial = 'T' from both branches "
                       "of the INTERSECT")]
    assert "IsOfficial" not in shared[0][3] and shared[0][3].count("INTERSECT") == 1
    sb = get_sandbox(spider_by_id["spider-dev-748"].db_path)
    pre = sb.execute(spider_by_id["spider-dev-748"].gold_sql)
    post = sb.execute(shared[0][3])
    assert {r[0] for r in pre.rows} < {r[0] for r in post.rows}  # more nations once unofficial languages count
    # spider-dev-755 (UNION): the value edits of before, and now the flag withdrawn from both branches
    kinds = [(o[1], o[2] if o[1] == "constraint" else o[2].split(" '")[0])
             for o in _accepted(_run(spider_by_id["spider-dev-755"], tmp_path))]
    assert kinds == [("value", "value: countrylanguage.Language")] * 3 + [
        ("constraint", "constraint: removed countrylanguage.IsOfficial filter IsOfficial = 'T' from both branches "
                       "of the UNION")]


def test_an_or_of_filters_on_one_column_is_removed_whole(spider_root, spider_by_id, tmp_path):
    # spider-dev-255: flights landing in Aberdeen or Abilene; the OR is one W unit (TIDE Alg. 1 keeps it whole)
    outs = [o.sample for o in _run(spider_by_id["spider-dev-255"], tmp_path) if isinstance(o, Accepted)]
    assert [(o.drift.subtype, o.provenance["edit"], o.drift.post_gold_sql, o.drift.utterance) for o in outs] == [
        ("constraint", "constraint: removed Airports.city filter T2.city = 'Aberdeen' OR T2.city = 'Abilene'",
         "SELECT COUNT(*) FROM Flights AS T1 JOIN Airports AS T2 ON T1.DestAirport = T2.AirportCode",
         "Never mind the city being Aberdeen or Abilene, drop that.")]
    # spider-dev-428: two comparisons on one column, said as one condition
    got = {o.sample.provenance["edit"]: o.sample.drift.utterance for o in _run(spider_by_id["spider-dev-428"], tmp_path)
           if isinstance(o, Accepted) and o.sample.drift.subtype == "constraint"}
    assert got == {"constraint: removed museum.open_year filter open_year > 2013 OR open_year < 2008":
                   "Could you leave out the condition that the open year is more than 2013 or less than 2008?"}
    # an OR over two columns (spider-dev-151: maker General Motors OR weight > 3500) goes whole, named as one
    # either-or condition; never one disjunct alone (the W unit would change, not go: Alg. 1 'reject')
    got = [(o.sample.provenance["edit_kind"], o.sample.drift.post_gold_sql, o.sample.drift.utterance)
           for o in _run(spider_by_id["spider-dev-151"], tmp_path)
           if isinstance(o, Accepted) and o.sample.drift.subtype == "constraint"]
    assert got == [("remove_either", "SELECT DISTINCT T2.Model FROM CAR_NAMES AS T1 JOIN MODEL_LIST AS T2 ON "
                    "T1.Model = T2.Model JOIN CAR_MAKERS AS T3 ON T2.Maker = T3.Id JOIN CARS_DATA AS T4 ON "
                    "T1.MakeId = T4.Id", "What if we dropped the either-or condition on the full name and the weight?")]
    assert not any(" OR " in c.post_sql for c in _candidates(spider_by_id["spider-dev-151"], "constraint"))
