"""The PremiseSQL recipe (PremiseSQL §3, §A.3): one flaw per rewriting subcategory, the review, the type
check, the paired original. Control flow on the deterministic fake model over the embedded university database;
every stage can reject (one test each); council majority with ties rejecting. The SmolLM2 run is in
``tests/test_generation_tide.py`` (one model test for both recipes)."""
from __future__ import annotations

import dataclasses
import json
import random

import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.validate import validate_samples
from textsql_clarify.generation.base import Accepted, Anchor, GenContext, Rejected
from textsql_clarify.generation.council import Council
from textsql_clarify.generation.fake_model import FakeModel
from textsql_clarify.generation.premise import PREMISE_STAGES, PremiseRecipe, sql_in_text
from textsql_clarify.generation.premise_prompts import REWRITE_FLAWS
from textsql_clarify.samples import sample_from_dict
from textsql_clarify.sql.schema import read_schema
from textsql_clarify.taxonomy import PREMISE_FLAWS

GEN, REVIEW, TYPE = "[task:premise_gen]", "[task:premise_review]", "[task:premise_type]"


@pytest.fixture(scope="module")
def embedded():
    return {s.id: s for s in load_dataset("embedded")}


def _anchor(s, **kw) -> Anchor:
    return dataclasses.replace(Anchor(s.id, s.db_id, s.db_path, s.question, s.gold_sql, s.difficulty,
                                      tuple(s.evidence), "embedded"), **kw)


def _ctx(tmp_path, *models, **options) -> GenContext:
    return GenContext(work_dir=tmp_path, council=Council(list(models) or [FakeModel("a"), FakeModel("b")]),
                      options={k: str(v) for k, v in options.items()})


def _valid(sample) -> None:
    s, problems = sample_from_dict(json.loads(json.dumps(sample.to_dict())))
    assert problems == [] and s == sample
    assert validate_samples([sample], use_cache=False).problems == []


def test_rewrite_flaws_are_the_eight_without_the_schema_premise():
    assert len(REWRITE_FLAWS) == 8 and "missing_schema_premise" not in REWRITE_FLAWS
    assert set(REWRITE_FLAWS) | {"missing_schema_premise"} == set(PREMISE_FLAWS)


def test_one_flaw_per_subcategory_with_one_paired_original(embedded, tmp_path):
    a = _anchor(embedded["uni-ans-001"])
    outs = PremiseRecipe().run(a, random.Random(0), _ctx(tmp_path))
    assert all(isinstance(o, Accepted) for o in outs)
    assert [o.sample.id for o in outs] == [f"premise-uni-ans-001-{f}" for f in REWRITE_FLAWS]
    assert [o.sample.premise_flaw for o in outs] == list(REWRITE_FLAWS)
    orig = outs[0].paired
    assert orig is not None and all(o.paired == orig for o in outs)
    assert (orig.id, orig.group, orig.subcategory, orig.question, orig.gold_sql) == (
        "premise-uni-ans-001-original", "answerable", "answerable_without_evidence", a.question, a.gold_sql)
    assert {o.sample.provenance["original_id"] for o in outs} == {orig.id}
    contra = outs[REWRITE_FLAWS.index("logical_contradiction")]
    s = contra.sample
    assert s.question == ("How many students belong to the Computer Science department, counting only those both "
                          "above and below the average?")
    assert s.group == "unanswerable" and s.gold_sql is None
    # the hidden knowledge is the council's explanation alone: no flaw label shared by every sample of the flaw
    assert s.hidden_knowledge == "The question now has a logical contradiction."
    assert (s.premise_flaw, s.provenance["premise_code"]) == ("logical_contradiction", "E2.1")
    # the crosswalk's subcategory where it is an unanswerable one, else unknown
    assert outs[REWRITE_FLAWS.index("external_fact")].sample.subcategory == "missing_external_knowledge"
    assert outs[REWRITE_FLAWS.index("beyond_sql")].sample.subcategory == "improper_question"
    assert s.subcategory is None
    assert list(contra.verdicts) == list(PREMISE_STAGES)
    assert contra.verdicts["type_check"] == "logical_contradiction (a: logical_contradiction, b: logical_contradiction)"
    for o in outs:
        _valid(o.sample)
    _valid(orig)


def test_deterministic_and_options(embedded, tmp_path):
    a = _anchor(embedded["uni-ans-002"])
    pick = [[o.sample.to_dict() for o in PremiseRecipe().run(a, random.Random(3), _ctx(tmp_path, premise_per_anchor=2))]
            for _ in range(2)]
    assert pick[0] == pick[1] and len(pick[0]) == 2
    outs = PremiseRecipe().run(a, random.Random(0), _ctx(tmp_path, premise_flaws="E2.1, beyond_sql"))
    assert [o.sample.premise_flaw for o in outs] == ["logical_contradiction", "beyond_sql"]
    with pytest.raises(ValueError, match="not a rewriting premise flaw"):
        PremiseRecipe().run(a, random.Random(0), _ctx(tmp_path, premise_flaws="E3.2"))
    with pytest.raises(ValueError, match="needs a council"):
        PremiseRecipe().run(a, random.Random(0), GenContext(work_dir=tmp_path))


def _reply(question, explanation="It cannot be answered."):
    return json.dumps({"question": question, "explanation": explanation})


@pytest.mark.parametrize("case", ["source", "format:no_json", "format:same", "no_sql:shape", "no_sql:identifier",
                                  "review:majority", "review:tie", "type_check:other", "type_check:tie"])
def test_each_premise_stage_rejects(case, embedded, tmp_path):
    a = _anchor(embedded["uni-ans-001"])
    models = [FakeModel("a"), FakeModel("b")]
    stage, why = case.split(":")[0], ""
    if case == "source":
        a = dataclasses.replace(a, gold_sql="SELECT first_name FROM students WHERE 1 = 0")
        why = "returns no data"
    elif case == "format:no_json":
        models[0] = FakeModel("a", replies={GEN: "The flawed question is: how many?"})
        why = "no JSON object"
    elif case == "format:same":
        models[0] = FakeModel("a", replies={GEN: _reply(a.question.upper())})
        why = "is the source question"
    elif case == "no_sql:shape":
        models[0] = FakeModel("a", replies={GEN: _reply("SELECT name FROM students, but for which year?")})
        why = "it holds SQL"
    elif case == "no_sql:identifier":
        models[0] = FakeModel("a", replies={GEN: _reply("How many students have a dept_id above the budget?")})
        why = "'dept_id'"
    elif case == "review:majority":
        models = [FakeModel("a"), FakeModel("b", choices={REVIEW: "fail"}), FakeModel("c", choices={REVIEW: "fail"})]
        why = "fail (a: pass, b: fail, c: fail)"
    elif case == "review:tie":
        models[1] = FakeModel("b", choices={REVIEW: "fail"})
        why = "fail (tie rule)"
    elif case == "type_check:other":
        models = [FakeModel(n, choices={TYPE: "unclear_intent"}) for n in "ab"]
        why = "names unclear_intent"
    elif case == "type_check:tie":
        models[1] = FakeModel("b", choices={TYPE: "external_fact"})
        why = "names tie"
    outs = PremiseRecipe().run(a, random.Random(0), _ctx(tmp_path, *models, premise_flaws="logical_contradiction"))
    assert len(outs) == 1 and isinstance(outs[0], Rejected), outs
    assert outs[0].stage == stage and why in outs[0].reason, outs[0]


def test_review_majority_passes_over_one_dissent(embedded, tmp_path):
    models = [FakeModel("a"), FakeModel("b"), FakeModel("c", choices={REVIEW: "fail"})]
    (o,) = PremiseRecipe().run(_anchor(embedded["uni-ans-001"]), random.Random(0),
                               _ctx(tmp_path, *models, premise_flaws="E4.1"))
    assert isinstance(o, Accepted) and o.verdicts["review"] == "pass (a: pass, b: pass, c: fail)"


def test_sql_in_text(embedded):
    schema = read_schema(embedded["uni-ans-001"].db_path)
    assert sql_in_text("How many students are there in the largest department?", schema) is None
    assert sql_in_text("Which students have the highest grade?", schema) is None
    assert "first_name" in sql_in_text("List every first_name of the students.", schema)
    assert "students.dept_id" in sql_in_text("Group them by students.dept_id please.", schema)
    assert "it holds SQL" in sql_in_text("SELECT first name FROM students", schema)
    assert "it holds SQL" in sql_in_text("List them ORDER BY grade.", schema)
    assert sql_in_text("List the students. Order by their last name.", schema) is None  # English


def test_pipeline_writes_flaws_and_one_linked_original(embedded, tmp_path):
    from textsql_clarify.generation.pipeline import generate
    from textsql_clarify.samples import load_jsonl

    anchors = [_anchor(embedded[i]) for i in ("uni-ans-001", "uni-ans-002")]
    rep = generate(anchors, ["premise"], tmp_path / "out", council=["fake"], progress=False,
                   options={"premise_flaws": "E2.1,E4.2"})
    samples = load_jsonl(rep.samples_path)
    assert validate_samples(samples, use_cache=False).problems == []
    assert [s.id for s in samples] == ["premise-uni-ans-001-logical_contradiction", "premise-uni-ans-001-original",
                                       "premise-uni-ans-001-external_fact",
                                       "premise-uni-ans-002-logical_contradiction", "premise-uni-ans-002-original",
                                       "premise-uni-ans-002-external_fact"]
    orig = samples[1]
    assert orig.provenance["paired_with"] == "premise-uni-ans-001-logical_contradiction"
    assert samples[2].provenance["paired_original"] == orig.id == samples[2].provenance["original_id"]
