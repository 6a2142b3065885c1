"""``textsql-clarify data validate`` / ``data stats``, and ``--db-root`` / ``--no-validate`` on eval and export-sft.

Exit status of ``data validate``: 0 when nothing is flagged, 1 when a sample is flagged, 2 when the dataset
cannot be loaded (a DatasetError). Figures are the ones measured by tests/test_validate.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.cli import main
from textsql_clarify.datasets import embedded_db_path
from textsql_clarify.datasets import validate as V

FIX = Path(__file__).resolve().parent / "fixtures" / "validate"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


def test_validate_embedded_prints_every_problem_and_exits_1(capsys):
    assert main(["data", "validate", "embedded"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        "uni-entity-003: duplicate_gold: gold_sql equals uni-ans-001's once values are masked (ABISS §4.2 stage 1)",
        "",
    ]
    assert lines[-1] == "embedded: 48 samples, 1 flagged"
    counts = {ln.split()[0]: int(ln.split()[1]) for ln in lines if ln.startswith(("indistinguishable ", "duplicate_gold "))}
    assert counts == {"duplicate_gold": 1}
    assert all(len(ln) <= 100 for ln in lines if not ln.startswith("uni-"))


def test_validate_clean_file_exits_0(capsys):
    assert main(["data", "validate", str(FIX / "clean.jsonl")]) == 0
    assert capsys.readouterr().out.strip().endswith("clean.jsonl: 2 samples, 0 flagged")


def test_validate_fixture_json(capsys):
    assert main(["data", "validate", str(FIX / "cases.jsonl"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 11 and out["flagged"] == 8 and out["cached"] is False
    assert out["counts"] == {"gold_error": 1, "gold_empty": 2, "gold_nondeterministic": 1, "interpretation_error": 1,
                             "indistinguishable": 1, "duplicate_gold": 2}
    assert {"sample_id": "val-fails", "flag": "gold_error",
            "message": "gold_sql fails (runtime): no such table: faculty"} in out["problems"]
    # the second run answers from the cache, with the same problems
    assert main(["data", "validate", str(FIX / "cases.jsonl"), "--json"]) == 1
    again = json.loads(capsys.readouterr().out)
    assert again["cached"] is True and again["problems"] == out["problems"]


def test_validate_bad_dataset_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "db_id": "university", "question": "Q?", "group": "answerable"}\n', encoding="utf-8")
    assert main(["data", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "field 'subcategory'" in err and "field 'db_path'" in err
    assert main(["data", "stats", "spider:/nonexistent/spider"]) == 2


def test_validate_spider_dev(spider_root, capsys):
    assert main(["data", "validate", f"spider:{spider_root}", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 1034 and out["counts"] == {"gold_empty": 99, "duplicate_gold": 489}
    assert out["flagged"] == 538


def test_stats_embedded_tables(capsys):
    assert main(["data", "stats", "embedded"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert all(len(ln) <= 100 for ln in lines)
    assert lines[0] == "dataset embedded: 48 samples"
    rows = {tuple(ln.split()[:-2]): int(ln.split()[-2]) for ln in lines if ln.endswith("%")}
    assert rows[("answerable",)] == 12 and rows[("ambiguous",)] == 24 and rows[("unanswerable",)] == 12
    assert rows[("ambiguous", "entity_ambiguity")] == 4 and rows[("ambiguous", "lexical_vagueness")] == 5
    assert rows[("easy",)] == 17 and rows[("medium",)] == 23 and rows[("hard",)] == 8
    assert rows[("valid",)] == 36 and rows[("no_gold",)] == 12
    assert ("indistinguishable",) not in rows and rows[("duplicate_gold",)] == 1


def test_stats_json_and_unknown_subcategory(capsys):
    assert main(["data", "stats", str(FIX / "clean.jsonl"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 2
    assert out["group"] == {"answerable": 1, "ambiguous": 1}
    assert out["subcategory"] == {"answerable/answerable_without_evidence": 1, "ambiguous/unknown": 1}
    assert out["difficulty"] == {"unknown": 2}
    assert out["gold_status"] == {"valid": 2}


def test_stats_spider_dev(spider_root, capsys):
    assert main(["data", "stats", f"spider:{spider_root}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 1034 and out["group"] == {"answerable": 1034}
    assert out["gold_status"]["valid"] == 1034 - 99
    assert out["gold_status"]["gold_empty"] == 99 and "gold_error" not in out["gold_status"]
    assert sum(out["difficulty"].values()) == 1034


def _rootless(tmp_path: Path) -> tuple[Path, Path]:
    """A JSONL whose record names no database file, and a db root holding university/university.sqlite."""
    root = tmp_path / "dbs"
    (root / "university").mkdir(parents=True)
    shutil.copyfile(embedded_db_path(), root / "university" / "university.sqlite")
    f = tmp_path / "rootless.jsonl"
    f.write_text(json.dumps({"id": "r-1", "db_id": "university", "question": "How many departments are there?",
                             "group": "answerable", "subcategory": "answerable_without_evidence",
                             "gold_sql": "SELECT COUNT(*) FROM departments"}) + "\n", encoding="utf-8")
    return f, root


def test_db_root_on_validate_and_eval(tmp_path, capsys):
    f, root = _rootless(tmp_path)
    assert main(["data", "validate", str(f)]) == 2  # no db_path and no db root
    assert "db_root" in capsys.readouterr().err
    assert main(["data", "validate", str(f), "--db-root", str(root)]) == 0
    capsys.readouterr()
    assert main(["eval", "--dataset", str(f), "--db-root", str(root), "--no-progress", "--json",
                 "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["overall"]["EX"] == MeanIs(1.0, 1)



def test_db_root_inside_the_jsonl_spec(tmp_path, capsys):
    """``jsonl:<file>.jsonl:<db root>`` names the root in the spec itself; an empty root is a bad spec (exit 2)."""
    f, root = _rootless(tmp_path)
    assert main(["data", "validate", f"jsonl:{f}:{root}"]) == 0
    assert capsys.readouterr().out.strip().endswith("1 samples, 0 flagged")
    assert main(["data", "validate", f"jsonl:{f}:"]) == 2
    assert "expected 'jsonl:<path>[:<db root>]'" in capsys.readouterr().err

def test_no_validate_skips_validation(tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("validate_loaded was called")

    monkeypatch.setattr(V, "validate_loaded", refuse)
    f, root = _rootless(tmp_path)
    assert main(["eval", "--dataset", str(f), "--db-root", str(root), "--no-validate", "--no-progress", "--json",
                 "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["export-sft", "--dataset", str(f), "--db-root", str(root), "--no-validate",
                 "--out", str(tmp_path / "sft.jsonl")]) == 0
    assert (tmp_path / "sft.jsonl").read_text(encoding="utf-8").count("\n") == 1
    # without --no-validate the (refusing) validator runs
    with pytest.raises(AssertionError, match="validate_loaded was called"):
        main(["eval", "--dataset", str(f), "--db-root", str(root), "--no-progress", "--out", str(tmp_path / "run2")])
