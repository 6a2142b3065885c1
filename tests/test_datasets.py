"""Dataset loaders: spec parsing, native JSONL errors, Spider and spider_unanswerable on real data."""
from __future__ import annotations

import collections
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import SHARED_DATA
from textsql_clarify.datasets import (embedded_db_path, list_dataset_kinds, load_dataset, load_spider,
                                      load_spider_unanswerable, spider_hardness)
from textsql_clarify.errors import DatasetError

UNANSWERABLE = SHARED_DATA / "spider_unanswerable" / "spider_no_answer.json"


def _good(i: int, **kw) -> dict:
    rec = {"id": f"s{i}", "db_id": "university", "db_path": "db/university.sqlite", "question": "How many students?",
           "group": "answerable", "subcategory": "answerable_without_evidence",
           "gold_sql": "SELECT COUNT(*) FROM students", "provenance": {"source": "test"}}
    rec.update(kw)
    return rec


@pytest.fixture
def jsonl_dir(tmp_path: Path) -> Path:
    (tmp_path / "db").mkdir()
    shutil.copy(embedded_db_path(), tmp_path / "db" / "university.sqlite")
    return tmp_path


def _write(path: Path, recs: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in recs) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- native JSONL
def test_jsonl_relative_db_path_resolves_against_the_file(jsonl_dir, monkeypatch):
    f = _write(jsonl_dir / "ds.jsonl", [_good(1), _good(2)])
    monkeypatch.chdir(jsonl_dir.parent)
    rel = os.path.relpath(f)
    for spec in (rel, f"jsonl:{rel}", Path(rel)):
        out = load_dataset(spec)
        assert [s.id for s in out] == ["s1", "s2"]
        assert out[0].db_path == str((jsonl_dir / "db" / "university.sqlite").resolve())
        assert Path(out[0].db_path).is_absolute()
    assert [s.id for s in load_dataset(f, limit=1)] == ["s1"]


def test_jsonl_three_bad_records_are_all_reported(jsonl_dir):
    f = _write(jsonl_dir / "bad.jsonl", [
        _good(1),
        _good(2, group="maybe"),                                              # line 2
        _good(3, gold_sql=None),                                              # line 3
        _good(4, drift={"utterance": "x", "post_gold_sql": "SELECT 1", "subtype": "sideways"}),  # line 4
    ])
    with pytest.raises(DatasetError) as ei:
        load_dataset(str(f))
    got = {(p.line, p.field) for p in ei.value.problems}
    assert got == {(2, "group"), (3, "gold_sql"), (4, "drift.subtype")}
    msg = str(ei.value)
    assert "3 problem(s)" in msg and "bad.jsonl:2: field 'group'" in msg and "bad.jsonl:4: field 'drift.subtype'" in msg


def test_jsonl_missing_database_and_bad_path(jsonl_dir):
    f = _write(jsonl_dir / "nodb.jsonl", [_good(1, db_path="db/absent.sqlite")])
    with pytest.raises(DatasetError, match=r"nodb.jsonl:1: field 'db_path': database file not found: .*absent.sqlite"):
        load_dataset(str(f))
    with pytest.raises(DatasetError, match="dataset file not found: .*nothere.jsonl"):
        load_dataset(str(jsonl_dir / "nothere.jsonl"))


# --------------------------------------------------------------------------- spec parsing
@pytest.mark.parametrize("spec, match", [
    ("nonsense", "unknown dataset spec 'nonsense'; accepted forms: embedded; spider:<root>"),
    ("", "unknown dataset spec ''"),
    ("spider:", "expected 'spider:<root>'"),
    ("spider-unanswerable:only_one_part", "expected 'spider-unanswerable:<file>:<spider root>'"),
    ("jsonl:", "expected 'jsonl:<path>'"),
])
def test_bad_specs(spec, match):
    with pytest.raises(DatasetError, match=match):
        load_dataset(spec)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "3"])
def test_bad_limit(limit):
    with pytest.raises(DatasetError, match="limit must be a positive integer"):
        load_dataset("embedded", limit=limit)


def test_spec_type_checked():
    with pytest.raises(DatasetError, match="must be a string or path, got int"):
        load_dataset(3)


def test_list_dataset_kinds_names_every_spec_form():
    kinds = list_dataset_kinds()
    heads = [k.split()[0] for k in kinds]
    assert heads == ["embedded", "spider:<root>", "spider-unanswerable:<file>:<spider", "<path>.jsonl",
                     "mmsql:<file>:<spider", "cosql:<dir>:<spider", "ambiqt:<dir>:<spider", "mini-interact:<dir>",
                     "bird:<root>", "abiss:<file>:<db"]


# --------------------------------------------------------------------------- Spider (synthetic errors)
def _fake_spider(root: Path, records, dbs=("good_db",)) -> Path:
    for db in dbs:
        (root / "database" / db).mkdir(parents=True)
        con = sqlite3.connect(root / "database" / db / f"{db}.sqlite")
        con.execute("CREATE TABLE t (a INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
        con.commit()
        con.close()
    (root / "dev.json").write_text(json.dumps(records), encoding="utf-8")
    return root


def test_spider_bad_records_all_reported(tmp_path):
    root = _fake_spider(tmp_path, [
        {"db_id": "good_db", "question": "q?", "query": "SELECT a FROM t"},
        {"db_id": "good_db", "question": "q?"},                               # record 2: no query
        {"db_id": "other_db", "question": "q?", "query": "SELECT 1"},         # record 3: no database
        {"db_id": "good_db", "question": "  ", "query": "SELECT 1"},          # record 4: empty question
        ["not", "a", "dict"],                                                 # record 5
    ])
    with pytest.raises(DatasetError) as ei:
        load_dataset(f"spider:{root}")
    got = {(p.line, p.field) for p in ei.value.problems}
    assert got == {(2, "query"), (3, "db_id"), (4, "question"), (5, "<record>")}
    assert "other_db.sqlite" in str(ei.value) and "dev.json:3: field 'db_id'" in str(ei.value)


def test_spider_good_synthetic_and_missing_sql_object(tmp_path):
    root = _fake_spider(tmp_path, [{"db_id": "good_db", "question": "q?", "query": "SELECT a FROM t"}])
    (s,) = load_spider(root)
    assert (s.id, s.group, s.subcategory, s.difficulty) == ("spider-dev-0", "answerable", "answerable_without_evidence", "unknown")
    assert s.db_path == str((root / "database" / "good_db" / "good_db.sqlite").resolve())


def test_spider_layout_errors(tmp_path):
    with pytest.raises(DatasetError, match="Spider root is not a directory"):
        load_dataset(f"spider:{tmp_path / 'absent'}")
    with pytest.raises(DatasetError, match="Spider database folder not found"):
        load_dataset(f"spider:{tmp_path}")
    (tmp_path / "database").mkdir()
    with pytest.raises(DatasetError, match="Spider question file not found: .*dev.json"):
        load_dataset(f"spider:{tmp_path}")
    (tmp_path / "dev.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DatasetError, match="is not valid JSON"):
        load_dataset(f"spider:{tmp_path}")
    (tmp_path / "dev.json").write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(DatasetError, match="must hold a JSON list of records, got dict"):
        load_dataset(f"spider:{tmp_path}")


def test_spider_unanswerable_bad_records(tmp_path):
    root = _fake_spider(tmp_path / "spider", [])
    f = tmp_path / "unans.json"
    f.write_text(json.dumps([
        {"db_id": "good_db", "level": "hard", "question": "Who?"},
        {"db_id": "good_db", "level": 3, "question": "Who?"},                 # record 2
        {"db_id": "absent_db", "level": "easy", "question": "Who?"},          # record 3
        {"level": "easy", "question": "Who?"},                                # record 4
    ]), encoding="utf-8")
    with pytest.raises(DatasetError) as ei:
        load_dataset(f"spider-unanswerable:{f}:{root}")
    assert {(p.line, p.field) for p in ei.value.problems} == {(2, "level"), (3, "db_id"), (4, "db_id")}


# --------------------------------------------------------------------------- Spider hardness
def test_spider_hardness_hand_checked(spider_root):
    recs = json.loads((spider_root / "dev.json").read_text(encoding="utf-8"))
    # 0: SELECT count(*) FROM singer -> no component: easy
    # 2: three SELECT columns + ORDER BY -> component1 = 1, others = 1: medium
    # 12: WHERE with a nested SELECT -> component1 = 1, component2 = 1: hard
    # 24: JOIN + WHERE + GROUP BY + ORDER BY + LIMIT -> component1 = 5: extra
    assert [spider_hardness(recs[i]["sql"]) for i in (0, 2, 12, 24)] == ["easy", "medium", "hard", "extra"]
    assert spider_hardness(None) == spider_hardness({"select": []}) == "unknown"


# --------------------------------------------------------------------------- real data
@pytest.mark.realdata
def test_spider_dev_real(spider_root):
    out = load_dataset(f"spider:{spider_root}")
    assert len(out) == 1034
    assert out[0].id == "spider-dev-0" and out[0].question == "How many singers do we have?"
    assert out[0].gold_sql == "SELECT count(*) FROM singer" and out[0].db_id == "concert_singer"
    assert {s.group for s in out} == {"answerable"} and len({s.db_id for s in out}) == 20
    assert all(Path(s.db_path).is_file() for s in out)
    diff = collections.Counter(s.difficulty for s in out)
    # Published Spider dev split (re-parsed gold): 248 / 446 / 174 / 166. The parse stored in
    # dev.json gives a slightly different split; every level must be present and close to it.
    published = {"easy": 248, "medium": 446, "hard": 174, "extra": 166}
    assert set(diff) == set(published)
    assert all(abs(diff[k] - v) <= 25 for k, v in published.items()), diff
    assert [s.id for s in load_dataset(f"spider:{spider_root}", limit=3)] == ["spider-dev-0", "spider-dev-1", "spider-dev-2"]


@pytest.mark.realdata
def test_spider_unanswerable_real(spider_root):
    if not UNANSWERABLE.is_file():
        pytest.skip("real data absent: spider_unanswerable/spider_no_answer.json not found")
    out = load_dataset(f"spider-unanswerable:{UNANSWERABLE}:{spider_root}")
    assert len(out) == 180
    assert out[0].id == "spider-unans-0" and out[0].db_id == "battle_death"
    assert {s.group for s in out} == {"unanswerable"}
    assert {s.subcategory for s in out} == {"missing_entities_or_attributes"}
    assert all(s.gold_sql is None and s.hidden_knowledge == "" for s in out)
    assert all(s.provenance["hidden_knowledge"] == "absent" for s in out)
    assert collections.Counter(s.difficulty for s in out) == {"easy": 60, "medium": 60, "hard": 60}
    assert collections.Counter(s.db_id for s in out) == {db: 9 for db in {s.db_id for s in out}}
    direct = load_spider_unanswerable(UNANSWERABLE, spider_root)
    assert [s.id for s in direct] == [s.id for s in out]


def test_jsonl_drift_records_are_checked_against_the_database(tmp_path):
    """docs/dataset-format.md: post_gold_sql must execute, return rows and differ from gold_sql, and the
    subtype must be TIDE Algorithm 1's; a bad record is named by file, line and field, before any episode."""
    import json
    import os

    from textsql_clarify.datasets import embedded_db_path, load_dataset

    src = os.path.join(os.path.dirname(embedded_db_path()), "samples.jsonl")
    recs = [dict(json.loads(line), db_path=embedded_db_path()) for line in open(src, encoding="utf-8")]
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(r) for r in recs), encoding="utf-8")
    assert len(load_dataset(str(good))) == 48  # the embedded drift records all pass
    dr = [r for r in recs if r.get("drift")]
    flip = "value" if dr[2]["drift"]["subtype"] != "value" else "projection"
    bad = [dict(dr[0], drift=dict(dr[0]["drift"], post_gold_sql=dr[0]["gold_sql"])),
           dict(dr[1], drift=dict(dr[1]["drift"], post_gold_sql="SELECT * FROM nosuch")),
           dict(dr[2], drift=dict(dr[2]["drift"], subtype=flip)),
           dict(dr[3], drift=dict(dr[3]["drift"], post_gold_sql="SELECT student_id FROM students WHERE 1 = 0"))]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in bad), encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        load_dataset(str(path))
    got = [(p.line, p.field, p.message.split(":")[0]) for p in err.value.problems]
    assert got == [(1, "drift.post_gold_sql", "returns the same result as gold_sql"),
                   (2, "drift.post_gold_sql", "fails to execute (runtime)"),
                   (3, "drift.subtype", f"is {flip!r} but TIDE Algorithm 1 gives {dr[2]['drift']['subtype']!r} for "
                                        "(gold_sql, post_gold_sql)"),
                   (4, "drift.post_gold_sql", "returns no rows (or only NULLs)")]


@pytest.mark.parametrize("spec", ["embedded", "spider:../shared/data/spider_dev",
                                  "mmsql:../shared/data/mmsql/MMSQL_test.json:../shared/data/spider_dev"])
def test_db_root_refused_where_the_spec_names_its_databases(spec, tmp_path):
    # a db_root that a spec would ignore is an error, not silence (before any file is read)
    with pytest.raises(DatasetError, match="db_root is not used by the"):
        load_dataset(spec, db_root=tmp_path)


def test_unknown_subcategory_lists_the_names_of_its_group(tmp_path):
    from textsql_clarify.datasets import embedded_db_path

    rec = {"id": "x", "db_id": "university", "db_path": str(embedded_db_path()), "question": "Which ones?",
           "group": "ambiguous", "subcategory": "lexical_vaguenes", "gold_sql": "SELECT 1", "hidden_knowledge": "h"}
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as e:
        load_dataset(str(f))
    msg = str(e.value)
    assert "unknown ABISS subcategory 'lexical_vaguenes'; known for 'ambiguous'" in msg
    assert "lexical_vagueness" in msg and "missing_relationship" not in msg


def test_a_loader_spec_ending_in_jsonl_goes_to_its_loader(tmp_path):
    # mini-interact:<dir>/mini_interact.jsonl is the mini-interact spec, not a JSONL path starting "mini-interact:"
    with pytest.raises(DatasetError) as e:
        load_dataset(f"mini-interact:{tmp_path}/mini_interact.jsonl")
    assert "dataset file not found" not in str(e.value) and "mini-interact" in str(e.value).lower()
