"""Hostile input to ``generate``: odd table names, foreign files in ``--out``, concurrent runs, damaged journals.

Each test is one defect an attack found, fixed in the module at fault:

- a table whose name holds ``"`` broke every recipe (``PRAGMA table_info("{t}")`` unescaped, in
  ``sql/schema.py`` and ``generation/gold_refs.py``);
- ``generate --no-resume`` into a folder whose ``databases/`` held the *source* database deleted it, and a
  folder holding a ``samples.jsonl`` that no generate run wrote had it overwritten;
- two ``generate`` runs at once on one ``--out`` interleaved one journal;
- a damaged ``journal.jsonl`` line (valid JSON, no unit record) gave a TypeError/AttributeError traceback;
- ``--timeout nan`` / ``inf`` passed the check: every unit was an error and the journal and manifest held ``NaN``.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from textsql_clarify import cli
from textsql_clarify.generation.anchors import load_anchors
from textsql_clarify.generation.pipeline import GenerationError, generate
from textsql_clarify.sql.schema import read_schema

WEIRD = 'we"ird tab'


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


def _weird_db(path: Path) -> Path:
    """A database whose table names hold a double quote, a space and a reserved word."""
    con = sqlite3.connect(path)
    con.executescript(f'''
        CREATE TABLE "order" ("select" INTEGER PRIMARY KEY, name TEXT, "group" TEXT);
        CREATE TABLE "{WEIRD.replace('"', '""')}" (id INTEGER PRIMARY KEY,
            order_id INTEGER REFERENCES "order"("select"), val INTEGER, kind TEXT);
    ''')
    for i in range(1, 31):
        con.execute('INSERT INTO "order" VALUES (?, ?, ?)', (i, f"name{i % 7}", "abc"[i % 3]))
        con.execute(f'INSERT INTO "{WEIRD.replace(chr(34), 2 * chr(34))}" VALUES (?, ?, ?, ?)',
                    (i, i % 10 + 1, (i * 7) % 50 + 1, "xy"[i % 2]))
    con.commit()
    con.close()
    return path


def _queries(path: Path) -> Path:
    recs = [{"id": "q1", "question": "Which kinds of rows have a val over 10, and how many?",
             "sql": 'SELECT kind, count(*) FROM "we""ird tab" WHERE val > 10 GROUP BY kind'},
            {"id": "q2", "question": "How many orders are in group a?",
             "sql": 'SELECT count(*) FROM "order" WHERE "group" = \'a\''}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- generate ----------------------------------------------------------------------------------------------------
def test_table_name_with_double_quote_is_read_and_generated_from(tmp_path):
    db = _weird_db(tmp_path / "w.sqlite")
    schema = read_schema(str(db))
    assert schema[WEIRD] == {"id": "INTEGER", "order_id": "INTEGER", "val": "INTEGER", "kind": "TEXT"}
    from textsql_clarify.generation.gold_refs import source_schema

    fk = source_schema(db).tables[WEIRD].fks
    assert fk == (("order_id", "order", "select"),)
    digest = _sha(db)
    rep = generate(load_anchors(db=db, queries=_queries(tmp_path / "q.jsonl")), ["drift", "missing_schema"],
                   tmp_path / "out", progress=False)
    for table in rep.tables:
        d = table.to_dict()
        assert "error" not in d["reasons"], (table.name, d["reasons"].get("error"))
    # measured: drift 6 samples (q1: 3 value edits + the constraint removed; q2: value a->b dropped as same result)
    assert rep.counts["by_recipe"]["drift"]["samples"] >= 3
    assert rep.counts["by_recipe"]["missing_schema"]["samples"] >= 1
    assert _sha(db) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "q.jsonl", "w.sqlite"]


def test_no_resume_never_deletes_a_source_database_inside_out(tmp_path):
    folder = tmp_path / "ds"
    (folder / "databases").mkdir(parents=True)
    db = _weird_db(folder / "databases" / "w.sqlite")
    digest = _sha(db)
    anchors = load_anchors(db=db, queries=_queries(tmp_path / "q.jsonl"))
    for resume in (False, True):
        with pytest.raises(GenerationError, match="source database .*w.sqlite.* inside"):
            generate(anchors, ["drift"], folder, progress=False, resume=resume)
    assert db.is_file() and _sha(db) == digest
    assert sorted(p.name for p in (folder / "databases").iterdir()) == ["w.sqlite"]
    # the command says so with exit status 2
    assert cli.main(["generate", "--db", str(db), "--queries", str(tmp_path / "q.jsonl"), "--out", str(folder),
                     "--no-resume", "--no-progress", "--recipes", "drift"]) == 2
    assert _sha(db) == digest


def test_a_samples_file_no_generate_run_wrote_is_not_overwritten(tmp_path):
    db = _weird_db(tmp_path / "w.sqlite")
    anchors = load_anchors(db=db, queries=_queries(tmp_path / "q.jsonl"))
    out = tmp_path / "mydataset"
    out.mkdir()
    mine = out / "samples.jsonl"
    mine.write_text('{"id": "hand-written"}\n', encoding="utf-8")
    for resume in (True, False):
        with pytest.raises(GenerationError, match="samples.jsonl.*no generate run"):
            generate(anchors, ["drift"], out, progress=False, resume=resume)
    assert mine.read_text(encoding="utf-8") == '{"id": "hand-written"}\n'
    # nor a databases/ folder of someone else's files (--no-resume removed it whole)
    other = tmp_path / "project"
    (other / "databases").mkdir(parents=True)
    keep = _weird_db(other / "databases" / "other.sqlite")
    for resume in (True, False):
        with pytest.raises(GenerationError, match="databases exists but no generate run"):
            generate(anchors, ["drift"], other, progress=False, resume=resume)
    assert keep.is_file() and sorted(p.name for p in other.iterdir()) == ["databases"]
    # a folder a generate run wrote is still resumed and restarted
    run = tmp_path / "run"
    first = generate(anchors, ["drift"], run, progress=False).samples_path.read_bytes()
    assert generate(anchors, ["drift"], run, progress=False).samples_path.read_bytes() == first
    assert generate(anchors, ["drift"], run, progress=False, resume=False).samples_path.read_bytes() == first


def test_two_runs_at_once_on_one_out_the_second_is_refused(tmp_path):
    db = _weird_db(tmp_path / "w.sqlite")
    anchors = load_anchors(db=db, queries=_queries(tmp_path / "q.jsonl"))
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)  # what a running generate holds on its folder
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(GenerationError, match="another generate run"):
            generate(anchors, ["drift"], out, progress=False)
        assert not (out / "journal.jsonl").exists()
    finally:
        os.close(fd)
    rep = generate(anchors, ["drift"], out, progress=False)  # released: runs
    assert rep.counts["by_recipe"]["drift"]["samples"] >= 3
    # and the lock is released after a run and after a refused one (the same process can run again)
    with pytest.raises(GenerationError):
        generate(anchors, ["drift"], out, progress=False, seed=1)
    assert generate(anchors, ["drift"], out, progress=False).resumed == 2


@pytest.mark.parametrize("timeout", ["nan", "inf"])
def test_a_timeout_that_is_not_finite_is_refused(tmp_path, capsys, timeout):
    db = _weird_db(tmp_path / "w.sqlite")
    anchors = load_anchors(db=db, queries=_queries(tmp_path / "q.jsonl"))
    with pytest.raises(GenerationError, match="timeout_s must be a positive finite number"):
        generate(anchors, ["drift"], tmp_path / "out", progress=False, timeout_s=float(timeout))
    assert cli.main(["generate", "--db", str(db), "--queries", str(tmp_path / "q.jsonl"), "--out",
                     str(tmp_path / "out2"), "--timeout", timeout, "--no-progress", "--recipes", "drift"]) == 2
    assert "timeout_s must be a positive finite number" in capsys.readouterr().err
    assert not (tmp_path / "out2" / "journal.jsonl").exists()  # was a journal header with NaN, every unit an error


@pytest.mark.parametrize("damage", ["list", "no_recipe", "outcomes_str"])
def test_a_damaged_journal_line_is_run_again_not_a_traceback(tmp_path, damage):
    db = _weird_db(tmp_path / "w.sqlite")
    anchors = load_anchors(db=db, queries=_queries(tmp_path / "q.jsonl"))
    out = tmp_path / "out"
    first = generate(anchors, ["drift", "missing_schema"], out, progress=False).samples_path.read_bytes()
    journal = out / "journal.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + 4
    if damage == "list":
        lines.insert(2, "[1, 2]")
    elif damage == "no_recipe":
        lines.insert(2, '{"anchor_id": "q1"}')
    else:
        rec = json.loads(lines[2])
        rec["outcomes"] = "x"
        lines[2] = json.dumps(rec)
    journal.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rep = generate(anchors, ["drift", "missing_schema"], out, progress=False)
    assert rep.resumed == 1  # the units before the damaged line; it and the rest are run again
    assert rep.samples_path.read_bytes() == first
    assert len(journal.read_text(encoding="utf-8").splitlines()) == 1 + 4


def test_a_journal_whose_first_line_is_no_header_is_a_clear_error(tmp_path):
    db = _weird_db(tmp_path / "w.sqlite")
    anchors = load_anchors(db=db, queries=_queries(tmp_path / "q.jsonl"))
    out = tmp_path / "out"
    generate(anchors, ["drift"], out, progress=False)
    journal = out / "journal.jsonl"
    journal.write_text("[]\n" + journal.read_text(encoding="utf-8").split("\n", 1)[1], encoding="utf-8")
    with pytest.raises(GenerationError, match="is not a generate journal"):
        generate(anchors, ["drift"], out, progress=False)
    assert generate(anchors, ["drift"], out, progress=False, resume=False).resumed == 0
