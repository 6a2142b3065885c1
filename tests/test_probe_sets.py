"""The labelled probe sets (tests/fixtures) are well-formed, agree with the data they cite, and the
rule-based user never leaks the full gold SQL on any of them (ABISS §5.2; TIDE App. E validator).

Accuracy figures are measured by ``scripts/measure_simulators.py`` and reported in
``docs/simulator.md``; they are not thresholds here.
"""
from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, SHARED_DATA
from textsql_clarify.datasets import load_embedded
from textsql_clarify.errors import DatasetError
from textsql_clarify.simulators.base import ALLOWED_LABELS, RELEVANCY_LABELS
from textsql_clarify.simulators.rule_based import RuleBasedUser
from textsql_clarify.taxonomy import SUBCATEGORIES

_spec = importlib.util.spec_from_file_location("measure_simulators", REPO / "scripts" / "measure_simulators.py")
ms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ms)

CLAR = ms.read_probes(ms.CLARIFICATION_PROBES)
FEED = ms.read_probes(ms.FEEDBACK_PROBES)
EMB = {s.id: s for s in load_embedded()}
MMSQL_FILE = SHARED_DATA / "mmsql" / "MMSQL_test.json"
UNANS_FILE = SHARED_DATA / "spider_unanswerable" / "spider_no_answer.json"


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


@pytest.mark.parametrize("records", [CLAR, FEED], ids=["clarifications", "feedback"])
def test_no_absolute_paths_in_fixtures(records):
    for r in records:
        for s in _strings(r):
            assert not s.startswith("/") and ":\\" not in s and "shared/data" not in s, r["id"]


def test_clarification_probes_well_formed():
    assert len(CLAR) >= 90
    counts = Counter(r["label"] for r in CLAR)
    assert set(counts) == set(RELEVANCY_LABELS)
    assert sum("mmsql" in r for r in CLAR) >= 30 and sum("sample_id" in r for r in CLAR) >= 30
    for r in CLAR:
        assert ("sample_id" in r) != ("mmsql" in r), r["id"]
        assert isinstance(r["clarification"], str) and r["clarification"].strip(), r["id"]
        assert isinstance(r["fact"], str), r["id"]
        if "sample_id" in r:
            assert r["sample_id"] in EMB, f"{r['id']}: unknown embedded sample {r['sample_id']!r}"
            group = EMB[r["sample_id"]].group
        else:
            m = r["mmsql"]
            assert {"dialogue", "turn", "db_id", "question", "group", "subcategory", "hidden_knowledge",
                    "gold_sql"} <= set(m), r["id"]
            assert SUBCATEGORIES[m["subcategory"]].group == m["group"] == "ambiguous", r["id"]
            assert m["hidden_knowledge"].strip() and m["gold_sql"].lower().startswith("select"), r["id"]
            group = m["group"]
        # a label the simulator can give at all for this group (ABISS §5.2 label limits)
        assert r["label"] in ALLOWED_LABELS[group], r["id"]
        if r["label"] == "relevant":
            assert r["fact"].strip(), f"{r['id']}: a relevant probe names the fact a reply must contain"


def test_feedback_probes_well_formed():
    assert len(FEED) >= 40
    assert set(Counter(r["label"] for r in FEED)) == {"correct", "incorrect"}
    for r in FEED:
        assert ("sample_id" in r) != ("spider_unanswerable" in r), r["id"]
        assert isinstance(r["feedback"], str), r["id"]
        assert r["set"] in ("base", "hard", "fresh"), r["id"]
        if "sample_id" in r:
            assert r["sample_id"] in EMB, f"{r['id']}: unknown embedded sample {r['sample_id']!r}"
            s = EMB[r["sample_id"]]
            assert s.group == "unanswerable" and s.hidden_knowledge.strip(), r["id"]
    # every embedded unanswerable sample has a correct and an incorrect explanation
    unans = {sid for sid, s in EMB.items() if s.group == "unanswerable"}
    for lab in ("correct", "incorrect"):
        assert unans <= {r.get("sample_id") for r in FEED if r["label"] == lab}


def test_mmsql_probes_match_the_data(shared_data):
    if not MMSQL_FILE.is_file():
        pytest.skip("real data absent: mmsql/MMSQL_test.json")
    dialogues = json.loads(MMSQL_FILE.read_text(encoding="utf-8"))
    for r in (x for x in CLAR if "mmsql" in x):
        m = r["mmsql"]
        d = dialogues[m["dialogue"]]
        turn = d["turns"][m["turn"]]
        assert d["db_name"] == m["db_id"] and turn["isuser"] and turn["type"] == "ambiguous", r["id"]
        assert turn["text"].strip() == m["question"], r["id"]
        later = [t["query"] for t in d["turns"][m["turn"] + 1:] if not t["isuser"] and t.get("query", "").strip()]
        assert " ".join(later[0].split()) == m["gold_sql"], r["id"]


def test_spider_feedback_probes_match_the_data(shared_data):
    if not UNANS_FILE.is_file():
        pytest.skip("real data absent: spider_unanswerable/spider_no_answer.json")
    qs = json.loads(UNANS_FILE.read_text(encoding="utf-8"))
    rows = [r for r in FEED if "spider_unanswerable" in r]
    assert len(rows) >= 6 and {r["label"] for r in rows} == {"correct", "incorrect"}
    for r in rows:
        u = r["spider_unanswerable"]
        assert qs[u["index"]]["db_id"] == u["db_id"] and qs[u["index"]]["question"] == u["question"], r["id"]


def test_probe_samples_build(shared_data):
    samples = ms.probe_samples(CLAR + FEED, SHARED_DATA)
    assert all(v is not None for v in samples.values())
    mm = samples[next(r["id"] for r in CLAR if "mmsql" in r)]
    assert mm.group == "ambiguous" and Path(mm.db_path).is_file()
    sp = samples[next(r["id"] for r in FEED if "spider_unanswerable" in r)]
    assert sp.group == "unanswerable" and sp.hidden_knowledge == ""


def test_rule_based_user_never_leaks_full_sql():
    """A real invariant (ABISS §6.1 audit: no full gold SQL ever revealed): 0 on every probe.

    Embedded probes always run; MMSQL probes run too when ../shared/data is present.
    """
    root = SHARED_DATA if (SHARED_DATA / "spider_dev" / "database").is_dir() else None
    samples = ms.probe_samples(CLAR, root)
    rows = ms.run_user(RuleBasedUser(), CLAR, samples)
    assert len(rows) == sum(v is not None for v in samples.values()) >= sum("sample_id" in r for r in CLAR)
    leaks = [r["id"] for r in rows if r["full_sql_leak"] or r["sql_leak"]]
    assert leaks == []
    rep = ms.relevancy_report(rows)
    assert rep["full_sql_leak"]["count"] == 0 and rep["full_sql_leak"]["n"] == len(rows)
    assert sum(v["n"] for v in rep["per_label"].values()) == len(rows)


def test_read_probes_rejects_bad_files(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a"}\n{"id": "a"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"p.jsonl:2: duplicate probe id 'a'"):
        ms.read_probes(bad)
    bad.write_text('{"id": "a"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"p.jsonl:2: invalid JSON"):
        ms.read_probes(bad)
    with pytest.raises(DatasetError, match="probe file not found"):
        ms.read_probes(tmp_path / "missing.jsonl")


def test_threshold_calibration_helpers():
    rows = [{"label": "correct", "rule": "hidden_knowledge", "score": 0.8, "names_missing": False, "contradictions": []},
            {"label": "correct", "rule": "hidden_knowledge", "score": 0.6, "names_missing": False, "contradictions": []},
            {"label": "incorrect", "rule": "hidden_knowledge", "score": 0.4, "names_missing": False, "contradictions": []},
            {"label": "incorrect", "rule": "hidden_knowledge", "score": 0.9, "names_missing": False,
             "contradictions": ["table:x"]}]
    assert ms.best_threshold(rows) == pytest.approx(0.5)
    assert ms.agreement(rows, lambda r: ms.decide(r, 0.5))["agreement"] == 1.0
    assert ms.agreement(rows, lambda r: ms.decide(r, 0.7))["agreement"] == 0.75
    assert ms.rate(0, 0) is None
    assert ms.fact_hit("I mean the city of his current address.", "current address") is True
    assert ms.fact_hit("Any order is fine.", "5 | five") is False
    assert ms.fact_hit("anything", "") is None
