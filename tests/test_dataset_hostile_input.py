"""Hostile dataset files: the loaders, the load-time validation and its cache refuse them with a clear error.

Each test is one attack that once gave a traceback, a silently wrong flag or a database outside the
dataset's root; the expected outcome is a :class:`~textsql_clarify.errors.DatasetError` naming file, record
and field, or the right flag. Every database here is built in ``tmp_path``; the validation cache lives in
``tmp_path`` too (``TEXTSQL_CLARIFY_CACHE``).
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets import validate as validate_mod
from textsql_clarify.datasets.validate import validate_samples
from textsql_clarify.errors import DatasetError

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


def _db(folder: Path, name: str = "singer") -> Path:
    """``folder/<name>/<name>.sqlite`` with a 3-row ``singer(singer_id, name, country)`` table."""
    path = folder / name / f"{name}.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT)")
    con.executemany("INSERT INTO singer VALUES (?, ?, ?)", [(1, "Ann", "x"), (2, "Bob", "x"), (3, "Cy", "y")])
    con.commit()
    con.close()
    return path


def _bird(root: Path, records) -> str:
    _db(root / "dev_databases")
    (root / "dev.json").write_text(records if isinstance(records, str) else json.dumps(records), encoding="utf-8")
    return f"bird:{root}"


BIRD_REC = {"question_id": 1, "db_id": "singer", "question": "How many singers?", "evidence": "",
            "SQL": "SELECT count(*) FROM singer", "difficulty": "simple"}


def _native(**kw) -> dict:
    rec = {"id": "a1", "db_id": "singer", "question": "How many singers?", "group": "answerable",
           "subcategory": "answerable_without_evidence", "gold_sql": "SELECT count(*) FROM singer"}
    rec.update(kw)
    return rec


def _jsonl(path: Path, recs) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return str(path)


# -- deep JSON nesting: a RecursionError traceback before --------------------------------------------------
def test_deeply_nested_bird_file_is_a_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="dev.json"):
        load_dataset(_bird(tmp_path / "b", DEEP))


def test_deeply_nested_ambiqt_file_is_a_dataset_error(tmp_path):
    _db(tmp_path / "sp" / "database")
    (tmp_path / "aq" / "tbl-split").mkdir(parents=True)
    (tmp_path / "aq" / "tbl-split" / "validation.json").write_text(DEEP)
    with pytest.raises(DatasetError, match="validation.json"):
        load_dataset(f"ambiqt:{tmp_path / 'aq'}:{tmp_path / 'sp'}")


def test_deeply_nested_abiss_list_is_a_dataset_error(tmp_path):
    _db(tmp_path / "db")
    (tmp_path / "a.json").write_text(DEEP)
    with pytest.raises(DatasetError, match="a.json"):
        load_dataset(f"abiss:{tmp_path / 'a.json'}:{tmp_path / 'db'}")


# -- a lone surrogate (valid JSON escape) crashed the validation cache key with UnicodeEncodeError --------
def test_lone_surrogate_in_gold_and_id_reads_as_a_replacement_not_a_crash(tmp_path):
    spec = _bird(tmp_path / "b", [{**BIRD_REC, "question_id": "\udc00", "SQL": "SELECT '\ud800' FROM singer"}])
    samples = load_dataset(spec)
    # the loader reads the escape as U+FFFD (docs/dataset-format.md, "Text"): the gold is a valid query
    assert samples[0].gold_sql == "SELECT '\ufffd' FROM singer" and samples[0].id.endswith("\ufffd")
    assert samples[0].flags == ()
    assert load_dataset(spec)[0].flags == ()  # and the cache reads back


# -- NUL in a spec path: ValueError('embedded null byte') traceback from Path.resolve ------------------------
@pytest.mark.parametrize("spec", ["bird:data/x\x00y", "mini-interact:data/x\x00y", "jsonl:data/x\x00y.jsonl",
                                  "abiss:data/x\x00y.json:data", "ambiqt:data/x\x00y:data"])
def test_nul_in_spec_is_a_dataset_error(spec):
    with pytest.raises(DatasetError, match="NUL"):
        load_dataset(spec)


def test_nul_in_db_root_is_a_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="NUL"):
        load_dataset(_bird(tmp_path / "b", [BIRD_REC]), db_root="data/x\x00y")


# -- db_id as a path: a record could open any .sqlite file outside its dataset's database root ---------------
def test_bird_db_id_that_is_an_absolute_path_is_rejected(tmp_path):
    outside = _db(tmp_path / "elsewhere", "other")
    spec = _bird(tmp_path / "b", [{**BIRD_REC, "db_id": str(outside)[: -len(".sqlite")]}])
    with pytest.raises(DatasetError) as e:
        load_dataset(spec)
    assert [(p.line, p.field) for p in e.value.problems] == [(1, "db_id")]


def test_jsonl_db_id_with_dotdot_is_rejected_under_a_db_root(tmp_path):
    _db(tmp_path / "root")
    # root/../evil/../evil.sqlite is tmp_path/evil.sqlite, outside the root
    (tmp_path / "evil.sqlite").write_bytes(_db(tmp_path, "evil").read_bytes())
    rec = _native(db_id="../evil")
    path = _jsonl(tmp_path / "d.jsonl", [rec])
    with pytest.raises(DatasetError) as e:
        load_dataset(f"jsonl:{path}:{tmp_path / 'root'}")
    assert [(p.line, p.field) for p in e.value.problems] == [(1, "db_id")]


# -- mini-interact ---------------------------------------------------------------------------------------
MINI_TASK = {"instance_id": "t_1", "selected_database": "singer", "amb_user_query": "Show the good singers.",
             "sol_sql": [], "preprocess_sql": [], "external_knowledge": [],
             "user_query_ambiguity": {"critical_ambiguity": [{"term": "good", "sql_snippet": "WHERE country = 'x'"}],
                                      "non_critical_ambiguity": []},
             "knowledge_ambiguity": []}


def _mini(root: Path, tasks: bytes | list, kb: bytes | None = None) -> str:
    _db(root)
    (root / "mini_interact.jsonl").write_bytes(
        tasks if isinstance(tasks, bytes) else "".join(json.dumps(t) + "\n" for t in tasks).encode())
    (root / "singer" / "singer_kb.jsonl").write_bytes(kb or b'{"id": 0, "knowledge": "Good", "definition": "x"}\n')
    return f"mini-interact:{root}"


def test_mini_interact_task_file_not_utf8_is_a_dataset_error(tmp_path):
    spec = _mini(tmp_path / "m", json.dumps(MINI_TASK).encode() + b'\n{"x": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match="mini_interact.jsonl"):
        load_dataset(spec)


def test_mini_interact_kb_not_utf8_is_a_dataset_error(tmp_path):
    spec = _mini(tmp_path / "m", [MINI_TASK], kb=b'{"id": 0, "knowledge": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match="singer_kb.jsonl"):
        load_dataset(spec)


@pytest.mark.parametrize("value", [5, "abc", {"a": "b"}])
def test_mini_interact_external_knowledge_of_the_wrong_type_is_a_record_problem(tmp_path, value):
    # 5 raised TypeError; "abc" became three evidence lines 'a', 'b', 'c'
    spec = _mini(tmp_path / "m", [{**MINI_TASK, "external_knowledge": value}])
    with pytest.raises(DatasetError) as e:
        load_dataset(spec)
    assert [(p.line, p.field) for p in e.value.problems] == [(1, "external_knowledge")]


# -- AmbiQT: sqlite3 / OS errors escaped as tracebacks ---------------------------------------------------
SPLIT_ITEM = {
    "db_id": "singer", "question": "What are the names and countries of singers?",
    "query1": "select name, country from singer",
    "query2": "select t1.name, t2.country from singer as t1 join singer_country as t2 on t1.singer_id = t2.singer_id",
    "schema_with_content": 'singer : singer_id (1, 2), name ("Ann", "Bob"), country ("x", "y") | '
                           'singer_country : singer_id (1, 2), country ("x", "y")',
    "split_map": {"singer": "country"}, "primary_key": {"singer": "singer_id"},
}


def _ambiqt(tmp_path: Path, item: dict) -> str:
    (tmp_path / "aq" / "tbl-split").mkdir(parents=True)
    (tmp_path / "aq" / "tbl-split" / "validation.json").write_text(json.dumps([item]))
    return f"ambiqt:{tmp_path / 'aq'}:{tmp_path / 'sp'}"


def test_ambiqt_spider_database_that_is_not_sqlite_is_a_record_problem(tmp_path):
    bad = tmp_path / "sp" / "database" / "singer" / "singer.sqlite"
    bad.parent.mkdir(parents=True)
    bad.write_text("not a database")
    with pytest.raises(DatasetError) as e:
        load_dataset(_ambiqt(tmp_path, SPLIT_ITEM))
    assert [(p.line, p.field) for p in e.value.problems] == [(1, "db_id")]


def test_ambiqt_unwritable_cache_is_a_dataset_error(tmp_path, monkeypatch):
    _db(tmp_path / "sp" / "database")
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(blocker / "cache"))
    with pytest.raises(DatasetError, match="cache"):
        load_dataset(_ambiqt(tmp_path, SPLIT_ITEM))


# -- the validation cache ----------------------------------------------------------------------------------
def _two_duplicates(tmp_path: Path):
    db = _db(tmp_path / "db")
    recs = [_native(id="q1", db_path=str(db), question="Who is singer 1?", gold_sql="SELECT name FROM singer WHERE singer_id = 1"),
            _native(id="q2", db_path=str(db), question="Who is singer 2?", gold_sql="SELECT name FROM singer WHERE singer_id = 2")]
    return load_dataset(_jsonl(tmp_path / "d.jsonl", recs), validate=False)


def test_cache_misses_when_only_a_question_changes(tmp_path):
    # duplicate_gold reads the question text (another reading of the same question is no duplicate), so a loader
    # change that rewrites a question, with no file changed, must not reuse the old flags
    samples = _two_duplicates(tmp_path)
    first = validate_samples(samples, spec="attack-cache")
    assert [s.flags for s in first.samples] == [(), ("duplicate_gold",)]
    reworded = [samples[0], dataclasses.replace(samples[1], question=samples[0].question)]
    again = validate_samples(reworded, spec="attack-cache")
    assert again.cached is False
    assert [s.flags for s in again.samples] == [(), ()]


def test_cache_misses_when_validator_code_changes(tmp_path, monkeypatch):
    # the checks depend on the scorer (rewards/execution.py), the masking, the sandbox: a change there must not
    # reuse results computed by the old code even when nobody bumped VALIDATOR_VERSION
    code = tmp_path / "scorer.py"
    code.write_text("v = 1\n")
    monkeypatch.setattr(validate_mod, "_CODE_FILES", (code,))
    samples = _two_duplicates(tmp_path)
    assert validate_samples(samples, spec="attack-code").cached is False
    assert validate_samples(samples, spec="attack-code").cached is True
    code.write_text("v = 2\n")
    assert validate_samples(samples, spec="attack-code").cached is False


def test_validator_code_files_exist():
    assert validate_mod._CODE_FILES and all(Path(p).is_file() for p in validate_mod._CODE_FILES)
    names = {Path(p).name for p in validate_mod._CODE_FILES}
    assert {"validate.py", "gold_masking.py", "execution.py", "ex_sql.py", "sandbox.py"} <= names


# -- flags and interpretations that only an ambiguous sample can have -------------------------------------
def test_interpretations_on_an_answerable_sample_are_rejected(tmp_path):
    # they were accepted; the validator then flagged the sample indistinguishable (an alternative gold returns the
    # same rows) and the metrics silently left an answerable sample out of every mean
    db = _db(tmp_path / "db")
    rec = _native(db_path=str(db), interpretations=[{"gold_sql": "SELECT count(singer_id) FROM singer",
                                                     "hidden_knowledge": "Count by id."}])
    with pytest.raises(DatasetError) as e:
        load_dataset(_jsonl(tmp_path / "d.jsonl", [rec]))
    assert [(p.line, p.field) for p in e.value.problems] == [(1, "interpretations")]


@pytest.mark.parametrize("flag", ["indistinguishable", "interpretation_error"])
def test_reading_flags_on_an_answerable_sample_are_rejected(tmp_path, flag):
    db = _db(tmp_path / "db")
    with pytest.raises(DatasetError) as e:
        load_dataset(_jsonl(tmp_path / "d.jsonl", [_native(db_path=str(db), flags=[flag])]))
    assert [(p.line, p.field) for p in e.value.problems] == [(1, "flags")]


def test_reading_that_relaxed_ex_accepts_is_indistinguishable(tmp_path):
    # the other reading returns the gold's rows plus one column: strict EX tells them apart, but the env pays
    # relaxed EX (binary, shaped), which allows that extra column, so the never-asking agent that submits the
    # other reading earns EX 1, as the oracle does
    from textsql_clarify.sql.sandbox import get_sandbox
    from textsql_clarify.rewards.execution import score_execution

    db = _db(tmp_path / "db")
    gold, other = "SELECT name FROM singer WHERE country = 'x'", "SELECT name, singer_id FROM singer WHERE country = 'x'"
    sb = get_sandbox(str(db))
    relaxed, strict = score_execution(sb.execute(other), sb.execute(gold), other, gold, sb)
    assert (relaxed.status, strict.status) == ("match", "mismatch")
    rec = _native(id="m1", db_path=str(db), group="ambiguous", subcategory="lexical_overlap", gold_sql=gold,
                  question="List the singers from x.", hidden_knowledge="I mean only their names.",
                  interpretations=[{"gold_sql": other, "hidden_knowledge": "I mean their names and ids."}])
    (s,) = load_dataset(_jsonl(tmp_path / "d.jsonl", [rec]))
    assert s.flags == ("indistinguishable",)
