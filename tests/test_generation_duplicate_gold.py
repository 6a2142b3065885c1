"""The duplicate-gold rule for generated corpora, ``--distinct-golds`` and the paired originals of GEN/VAL.

* Every generated sample carries ``provenance["anchor_gold"]``
  (:func:`~textsql_clarify.generation.anchors.anchor_gold`); two generated samples with the same one are no
  ``duplicate_gold`` of each other (one source query asked in two phrasings: Spider's paraphrase pairs), while
  golds equal only once values are masked still are (ABISS §4.2 stage 1) and Spider dev itself is flagged as before.
* ``distinct_golds=True`` keeps one anchor per gold SQL (the strict corpus).
* ``evaluate`` passes the paired originals to ``aggregate`` (PremiseSQL §4: GEN/VAL over the originals only).

Real data: Spider dev's paraphrase pair spider-dev-4 / spider-dev-5 (the identical gold text) and spider-dev-143 /
spider-dev-163 (``Cylinders > 4`` / ``Cylinders > 6``: different source queries whose golds mask alike), grown by
the drift and missing-schema recipes in ONE module-scoped run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from conftest import SPIDER
from textsql_clarify.datasets import embedded_db_path
from textsql_clarify.datasets.validate import validate_samples
from textsql_clarify.generation import Anchor, generate
from textsql_clarify.generation.anchors import SAME_GOLD, anchor_gold, distinct_gold_anchors, load_anchors
from textsql_clarify.samples import Sample

PAIR = ("spider-dev-4", "spider-dev-5")  # one source query, two phrasings
MASKED = ("spider-dev-143", "spider-dev-163")  # two source queries, golds equal once values are masked
RECIPES = ("drift", "missing_schema")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


def test_anchor_gold_is_the_sha256_of_the_gold_with_whitespace_collapsed():
    sql = "SELECT avg(age) ,  min(age) ,  max(age) FROM singer WHERE country  =  'France'"
    want = hashlib.sha256(" ".join(sql.split()).encode("utf-8")).hexdigest()[:16]
    assert anchor_gold(sql) == want == "18c709e6478f8463"  # fixed: written into every generated corpus
    assert anchor_gold("  " + sql.replace(" ,  ", "\n,\t") + " ") == anchor_gold(sql.replace(" ,  ", " , "))
    assert anchor_gold(sql.replace("France", "france")) != want  # case is kept (a value may differ in case only)
    assert anchor_gold(sql.lower()) != want
    with pytest.raises(TypeError, match="must be a string"):
        anchor_gold(None)


def _sample(sid: str, question: str, gold: str, **prov) -> Sample:
    return Sample(id=sid, db_id="university", db_path=str(embedded_db_path()), question=question, group="answerable",
                  subcategory="answerable_without_evidence", gold_sql=gold, provenance=dict(prov))


def test_the_rule_on_constructed_samples():
    g = "SELECT first_name FROM students WHERE home_city = 'Milan'"
    g_other_value = g.replace("Milan", "Padua")
    gen = {"source": "generated", "recipe": "drift", "anchor_source": "embedded"}
    samples = [
        _sample("a", "Which students come from Milan?", g, anchor_id="x1", anchor_gold=anchor_gold(g), **gen),
        _sample("b", "Name the students whose family lives in Milan.", g, anchor_id="x2", anchor_gold=anchor_gold(g),
                **gen),
        _sample("c", "Which students come from Padua?", g_other_value, anchor_id="x3",
                anchor_gold=anchor_gold(g_other_value), **gen),
        _sample("d", "List the Milanese students.", g, anchor_id="x4", **gen),  # no anchor_gold, another anchor
        _sample("e", "First names of the students from Milan?", g, anchor_gold=anchor_gold(g)),  # not generated
    ]
    flags = {s.id: s.flags for s in validate_samples(samples, use_cache=False).samples}
    assert flags == {"a": (), "b": (), "c": ("duplicate_gold",), "d": ("duplicate_gold",), "e": ("duplicate_gold",)}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path_factory.mktemp("cache")))
        from textsql_clarify.baselines.agents import OracleAgent
        from textsql_clarify.rollout.evaluation import evaluate
        from textsql_clarify.datasets import load_dataset
        from textsql_clarify.rewards.metrics import aggregate

        spider = {s.id: s for s in load_dataset(f"spider:{SPIDER}", validate=False)}
        raw = [spider[i] for i in (*PAIR, *MASKED)]
        anchors = [Anchor(id=s.id, db_id=s.db_id, db_path=s.db_path, question=s.question, gold_sql=s.gold_sql,
                          difficulty=s.difficulty, source=f"spider:{SPIDER}") for s in raw]
        out = tmp_path_factory.mktemp("generated")
        report = generate(anchors, list(RECIPES), out, seed=0, progress=False)
        samples = load_dataset(str(out / "samples.jsonl"), validate=False)
        trajs, metrics = evaluate(samples, OracleAgent(), progress=False)
        strict = generate(anchors, list(RECIPES), tmp_path_factory.mktemp("strict"), seed=0, progress=False,
                          distinct_golds=True)
        yield {"raw": raw, "anchors": anchors, "report": report, "samples": samples, "metrics": metrics,
               "fallback": aggregate(trajs), "strict": strict}


@pytest.mark.realdata
def test_spider_dev_itself_is_flagged_as_before(run):
    raw = run["raw"]
    assert raw[0].gold_sql == raw[1].gold_sql and raw[0].question != raw[1].question
    flags = {s.id: s.flags for s in validate_samples(raw, use_cache=False).samples}
    assert flags == {"spider-dev-4": (), "spider-dev-5": ("duplicate_gold",), "spider-dev-143": (),
                     "spider-dev-163": ("duplicate_gold",)}


@pytest.mark.realdata
def test_samples_of_a_paraphrase_pair_are_kept_and_those_of_masked_equal_golds_moved_out(run):
    rep, samples = run["report"], run["samples"]
    by_anchor = {a: [s for s in samples if s.provenance["anchor_id"] == a] for a in (*PAIR, *MASKED)}
    assert all(by_anchor[a] for a in (*PAIR, MASKED[0]))  # drift and missing schema from each, both phrasings
    assert {s.provenance["anchor_gold"] for s in by_anchor[PAIR[0]] + by_anchor[PAIR[1]]} == {anchor_gold(
        run["raw"][0].gold_sql)}
    assert {s.question for s in by_anchor[PAIR[1]]} == {run["raw"][1].question}  # its own phrasing: another episode
    assert by_anchor[MASKED[1]] == []
    moved = {m["anchor_id"] for m in rep.load_validation}
    assert moved == {MASKED[1]}
    assert all(m["reasons"][0].startswith(("duplicate_gold: ", "its paired original")) for m in rep.load_validation)
    assert validate_samples(samples, use_cache=False).n_flagged == 0
    # without anchor_gold (the rule before it) the second phrasing's samples are flagged: the test can fail
    bare = [dataclasses.replace(s, provenance={k: v for k, v in s.provenance.items() if k != "anchor_gold"})
            for s in samples]
    flagged = {s.provenance["anchor_id"] for s in validate_samples(bare, use_cache=False).samples if s.flags}
    assert flagged == {PAIR[1]}


@pytest.mark.realdata
def test_distinct_golds_keeps_one_anchor_per_gold(run):
    strict = run["strict"]
    assert strict.manifest["distinct_golds"] is True and run["report"].manifest["distinct_golds"] is False
    assert strict.manifest["anchors"]["n"] == 3 and strict.manifest["anchors"]["skipped"] == {SAME_GOLD: 1}
    assert strict.units == 2 * 3
    recs = [json.loads(x) for x in strict.samples_path.read_text(encoding="utf-8").splitlines()]
    assert {r["provenance"]["anchor_id"] for r in recs} == {PAIR[0], MASKED[0]}  # 163 is still moved out
    assert {m["anchor_id"] for m in strict.load_validation} == {MASKED[1]}
    kept = distinct_gold_anchors(run["anchors"])
    assert [a.id for a in kept] == [PAIR[0], *MASKED] and kept.skipped == {SAME_GOLD: 1} and kept.n_source == 4


@pytest.mark.realdata
def test_gen_and_val_count_the_paired_originals_only(run):
    samples, m = run["samples"], run["metrics"]
    originals = [s for s in samples if s.provenance.get("paired_with")]
    assert len(originals) == 3 == run["report"].counts["paired_originals"]  # 4, 5 and 143
    drift = [s for s in samples if s.drift is not None]
    assert drift and all(s.group == "answerable" and s.premise_flaw is None for s in drift)
    assert m["premise_originals"] == {"rule": "original_ids", "n": 3}
    assert m["overall"]["GEN"]["n"] == m["overall"]["VAL"]["n"] == 3
    assert m["overall"]["GEN"]["value"] == m["overall"]["VAL"]["value"] == 1.0  # the oracle answers each original
    fb = run["fallback"]  # no original_ids: every answerable unflawed sample, drift samples included
    assert fb["premise_originals"] == {"rule": "answerable_fallback", "n": 3 + len(drift)}


def test_the_generate_command_takes_distinct_golds(tmp_path, spider_root, capsys):
    from textsql_clarify.cli import main

    dev = json.loads((spider_root / "dev.json").read_text(encoding="utf-8"))
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"id": f"d{i}", "question": dev[i]["question"], "sql": dev[i]["query"]}) + "\n"
                         for i in (4, 5, 8, 9)), encoding="utf-8")
    db = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    out = tmp_path / "out"
    assert main(["generate", "--db", str(db), "--queries", str(q), "--recipes", "missing_schema", "--out", str(out),
                 "--no-progress", "--distinct-golds"]) == 0
    err = capsys.readouterr().err
    assert f"--distinct-golds: 2 anchors kept, 2 skipped ({SAME_GOLD})" in err
    man = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert man["anchors"]["skipped"] == {SAME_GOLD: 2} and man["anchors"]["n_source"] == 4
    ids = {json.loads(x)["provenance"]["anchor_id"] for x in (out / "samples.jsonl").read_text().splitlines()}
    assert ids == {"d4", "d8"}
    assert [a.id for a in distinct_gold_anchors(load_anchors(db=db, queries=q))] == ["d4", "d8"]
