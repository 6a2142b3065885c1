"""Load-time validation (textsql_clarify.datasets.validate): flags on real and fixture datasets, the cache.

Fixtures: tests/fixtures/validate/cases.jsonl (one sample per check, over the embedded university database)
and clean.jsonl (two samples that pass). Figures on the embedded dataset and Spider dev were measured with
this validator and are asserted exactly.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from textsql_clarify.sql.sandbox import SQLiteSandbox
from textsql_clarify.datasets import embedded_db_path, load_dataset
from textsql_clarify.datasets import validate as V
from textsql_clarify.datasets.gold_masking import mask_values
from textsql_clarify.datasets.validation_cache import cache_key, cache_path, source_files
from textsql_clarify.errors import DatasetError
from textsql_clarify.samples import load_jsonl

FIX = Path(__file__).resolve().parent / "fixtures" / "validate"
CASES = FIX / "cases.jsonl"
CLEAN = FIX / "clean.jsonl"

#: What the validator finds in cases.jsonl, sample by sample (a sample not listed has no flag).
CASE_FLAGS = {
    "val-same": ("indistinguishable",),
    "val-fails": ("gold_error",),
    "val-empty": ("gold_empty",),
    "val-nulls": ("gold_empty",),
    "val-dup-b": ("duplicate_gold",),
    "val-nondet": ("gold_nondeterministic",),
    "val-interp-fails": ("interpretation_error",),
    "val-loader-flag": ("duplicate_gold",),
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Every test gets its own empty cache root (never the user's)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(root))
    return root


@pytest.fixture
def executions(monkeypatch):
    """Count the statements the sandbox runs (every execution path goes through SQLiteSandbox.execute)."""
    calls: list[str] = []
    real = SQLiteSandbox.execute

    def counting(self, sql):
        calls.append(sql)
        return real(self, sql)

    monkeypatch.setattr(SQLiteSandbox, "execute", counting)
    return calls


def _flags(samples) -> dict[str, tuple[str, ...]]:
    return {s.id: s.flags for s in samples if s.flags}


def _copy_cases(tmp_path: Path, src: Path = CASES) -> Path:
    """``src`` in ``tmp_path`` with an absolute db_path to a copy of the embedded database."""
    db = tmp_path / "university.sqlite"
    shutil.copyfile(embedded_db_path(), db)
    out = tmp_path / src.name
    with open(src, encoding="utf-8") as fh, open(out, "w", encoding="utf-8") as oh:
        for line in fh:
            rec = json.loads(line)
            rec["db_path"] = str(db)
            oh.write(json.dumps(rec) + "\n")
    return out


# -- ABISS §4.2 stage 1: the masking -------------------------------------------------------------
def test_mask_values_is_abiss_stage1_example():
    # ABISS §4.2, Stage 1, verbatim: "SELECT * FROM students WHERE department = 'Engineering' would be masked
    # to SELECT * FROM students WHERE department = ?"
    assert mask_values("SELECT * FROM students WHERE department = 'Engineering'") == \
        "SELECT * FROM students WHERE department = ?"


def test_mask_values_normalises_case_literals_and_quotes():
    a = mask_values("SELECT COUNT(*) FROM professors WHERE rank = 'full'")
    assert a == mask_values('select count(*) from PROFESSORS where "rank" = \'assistant\';')
    assert mask_values("SELECT name FROM t WHERE x > -3 LIMIT 1") == "SELECT name FROM t WHERE x > ? LIMIT ?"
    assert mask_values("SELECT name FROM t WHERE x IS NULL") == "SELECT name FROM t WHERE x IS NULL"
    # a different structure stays different
    assert a != mask_values("SELECT COUNT(*) FROM professors WHERE rank <> 'full'")
    # unparseable SQL is masked from its tokens and never raises
    assert mask_values("SELEC name FRM t WHERE x = 'a'") == "SELEC NAME FRM T WHERE X = ?"


# -- the embedded dataset ------------------------------------------------------------------------
def test_embedded_flags_measured():
    samples = load_dataset("embedded")
    assert len(samples) == 48
    # uni-entity-003's gold is uni-ans-001's with 'Physics' for 'Computer Science' (ABISS stage 1 flags the
    # later one). uni-chain-001's two other readings (the smallest budget; the lowest grades given in a
    # department's courses) both return Literature, but its gold does not: asking still pays, no flag.
    assert _flags(samples) == {"uni-entity-003": ("duplicate_gold",)}
    report = V.validate_samples(load_dataset("embedded", validate=False), spec="embedded")
    assert [str(p) for p in report.problems] == [
        "uni-entity-003: duplicate_gold: gold_sql equals uni-ans-001's once values are masked (ABISS §4.2 stage 1)",
    ]
    assert report.counts() == {"duplicate_gold": 1} and report.n_flagged == 1


# -- the fixture: one sample per check -------------------------------------------------------------
def test_cases_fixture_flags_and_messages():
    samples = load_dataset(str(CASES))
    assert len(samples) == 11
    assert _flags(samples) == CASE_FLAGS
    report = V.validate_samples(load_dataset(str(CASES), validate=False), spec=str(CASES))
    msgs = {(p.sample_id, p.flag): p.message for p in report.problems}
    assert msgs[("val-fails", "gold_error")] == "gold_sql fails (runtime): no such table: faculty"
    assert msgs[("val-empty", "gold_empty")] == "gold_sql returns no rows"
    assert msgs[("val-nulls", "gold_empty")] == "gold_sql returns only NULL values"
    assert msgs[("val-dup-b", "duplicate_gold")] == \
        "gold_sql equals val-dup-a's once values are masked (ABISS §4.2 stage 1)"
    assert "strftime" in msgs[("val-nondet", "gold_nondeterministic")].lower()
    assert msgs[("val-interp-fails", "interpretation_error")] == \
        "interpretations[0].gold_sql fails (runtime): no such column: nme"
    assert msgs[("val-same", "indistinguishable")] == \
        "interpretations[0].gold_sql returns the same result as gold_sql (strict EX)"
    assert msgs[("val-loader-flag", "duplicate_gold")] == V.LOADER_FLAG_MESSAGE
    assert len(report.problems) == len(CASE_FLAGS)
    # the distinguishable ambiguous sample and the unanswerable one carry no flag
    by_id = {s.id: s for s in samples}
    assert by_id["val-differ"].flags == () and by_id["val-unans"].flags == ()


def test_validation_returns_new_samples_and_keeps_the_rest(executions):
    raw = load_jsonl(CASES)
    out = V.validate_loaded(raw, spec=str(CASES))
    assert [s.id for s in out] == [s.id for s in raw]
    for before, after in zip(raw, out):
        assert before.flags == (("duplicate_gold",) if before.id == "val-loader-flag" else ())  # inputs untouched
        assert after.gold_sql == before.gold_sql and after.interpretations == before.interpretations
        if not after.flags:
            assert after is before


def test_clean_fixture_has_no_flag():
    samples = load_dataset(str(CLEAN))
    assert [s.flags for s in samples] == [(), ()]


def test_gold_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "GOLD_TIMEOUT_S", 0.2)
    spin = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    rec = {"id": "spin", "db_id": "university", "db_path": embedded_db_path(), "question": "Count forever.",
           "group": "answerable", "subcategory": "answerable_without_evidence", "gold_sql": spin}
    f = tmp_path / "spin.jsonl"
    f.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    report = V.validate_samples(load_dataset(str(f), validate=False), spec=str(f))
    assert [str(p) for p in report.problems] == ["spin: gold_timeout: gold_sql did not finish within the 0.2 s time limit"]
    # a run with a timeout is not cached (a busy machine can time out): the next load runs it again
    assert not any((Path(os.environ["TEXTSQL_CLARIFY_CACHE"]) / "validation").glob("*.json"))


def test_a_locked_database_is_retried_and_never_cached(tmp_path, monkeypatch):
    """``database is locked`` comes from another connection, not from the gold. While a writer holds an
    exclusive lock the gold fails, the run is retried (GOLD_RETRIES) and not cached; once released, it passes."""
    import sqlite3

    monkeypatch.setattr(V, "GOLD_RETRY_WAIT_S", 0.01)
    db = tmp_path / "locked.sqlite"
    shutil.copyfile(embedded_db_path(), db)
    rec = {"id": "lk", "db_id": "locked", "db_path": str(db), "question": "How many students are there?",
           "group": "answerable", "subcategory": "answerable_without_evidence", "gold_sql": "SELECT COUNT(*) FROM students"}
    f = tmp_path / "lk.jsonl"
    f.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    samples = load_dataset(str(f), validate=False)
    keep = V._Runner().sandbox(str(db))  # opened (schema read) before the lock, as in a run that meets one midway
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        report = V.validate_samples(samples, spec=str(f))
        assert [p.flag for p in report.problems] == ["gold_error"]
        assert "locked" in report.problems[0].message
        assert not any((Path(os.environ["TEXTSQL_CLARIFY_CACHE"]) / "validation").glob("*.json"))
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    report = V.validate_samples(samples, spec=str(f))
    assert report.problems == [] and not report.cached
    assert len(list((Path(os.environ["TEXTSQL_CLARIFY_CACHE"]) / "validation").glob("*.json"))) == 1
    keep.close()


def test_unopenable_database_is_a_dataset_error(tmp_path):
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"this is not a SQLite file" * 100)
    rec = {"id": "b", "db_id": "broken", "db_path": str(bad), "question": "Anything?", "group": "answerable",
           "subcategory": "answerable_without_evidence", "gold_sql": "SELECT 1"}
    f = tmp_path / "b.jsonl"
    f.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="cannot be opened"):
        load_dataset(str(f))
    assert len(load_dataset(str(f), validate=False)) == 1


# -- Spider dev ----------------------------------------------------------------------------------
def test_spider_dev_flags(spider_root):
    samples = load_dataset(f"spider:{spider_root}")
    assert len(samples) == 1034
    report = V.validate_samples(load_dataset(f"spider:{spider_root}", validate=False), spec=f"spider:{spider_root}")
    assert report.cached  # the load above wrote the cache
    # data README: all 1,034 golds execute, 99 return no rows (89 without rows, 10 only NULLs:
    # rewards/execution.is_empty_result); ABISS stage 1 finds 489 later golds that repeat an earlier one's
    # masked SQL over the same database (Spider pairs most SQL with two paraphrased questions)
    assert report.counts() == {"gold_empty": 99, "duplicate_gold": 489}
    empty = [p.message for p in report.problems if p.flag == "gold_empty"]
    assert empty.count("gold_sql returns no rows") == 89 and empty.count("gold_sql returns only NULL values") == 10
    flags = {s.id: s.flags for s in samples}
    assert flags["spider-dev-0"] == () and flags["spider-dev-1"] == ("duplicate_gold",)
    assert "gold_empty" in flags["spider-dev-14"]
    assert sum(1 for s in samples if not s.flags) == 1034 - report.n_flagged == 496


def test_spider_dev_executes_each_distinct_sql_once(spider_root, executions):
    samples = load_dataset(f"spider:{spider_root}", validate=False)
    V.validate_samples(samples, use_cache=False)
    distinct = {(s.db_path, s.gold_sql) for s in samples}
    assert len(distinct) == 547
    assert len(executions) == 547


# -- the cache -----------------------------------------------------------------------------------
def test_cache_hit_does_not_execute(executions):
    first = load_dataset(str(CASES))
    assert executions  # cold: golds and interpretations executed
    n = len(executions)
    second = load_dataset(str(CASES))
    assert len(executions) == n  # cached: nothing ran
    assert _flags(second) == _flags(first) == CASE_FLAGS
    report = V.validate_samples(load_dataset(str(CASES), validate=False), spec=str(CASES))
    assert report.cached and len(executions) == n
    assert [str(p) for p in report.problems] == [str(p) for p in
                                                 V.validate_samples(load_jsonl(CASES), use_cache=False).problems]


def test_cache_file_location_and_key(_cache):
    load_dataset(str(CASES))
    files = list((_cache / "validation").glob("*.json"))
    assert len(files) == 1 and len(files[0].stem) == 64  # <sha256>.json
    rec = json.loads(files[0].read_text(encoding="utf-8"))
    assert rec["key"]["spec"] == str(CASES)
    assert rec["key"]["settings"] == {"validator_version": V.VALIDATOR_VERSION, "timeout_s": 5.0, "row_cap": 10_000}
    assert [s[0] for s in rec["key"]["sources"]] == [str(CASES.resolve())]
    assert [d[0] for d in rec["key"]["databases"]] == [str(Path(embedded_db_path()).resolve())]
    assert not list((_cache / "validation").glob("*.tmp"))  # written under a temporary name, then renamed


def test_cache_invalidated_when_the_file_changes(tmp_path, executions):
    f = _copy_cases(tmp_path)
    assert _flags(load_dataset(str(f)))["val-fails"] == ("gold_error",)
    n = len(executions)
    text = f.read_text(encoding="utf-8").replace("SELECT name FROM faculty", "SELECT name FROM departments")
    f.write_text(text, encoding="utf-8")
    after = load_dataset(str(f))
    assert len(executions) > n  # the changed file was validated again
    assert "val-fails" not in _flags(after)


def test_cache_invalidated_when_the_database_changes(tmp_path, executions):
    f = _copy_cases(tmp_path)
    load_dataset(str(f))
    n = len(executions)
    load_dataset(str(f))
    assert len(executions) == n
    db = tmp_path / "university.sqlite"
    st = db.stat()
    os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    load_dataset(str(f))
    assert len(executions) > n


def test_source_files_of_specs(spider_root):
    assert source_files(f"spider:{spider_root}") == sorted([(spider_root / "dev.json").resolve(),
                                                             (spider_root / "tables.json").resolve()])
    assert source_files("embedded")[0].name == "samples.jsonl"
    assert source_files(str(CASES)) == [CASES.resolve()]


def test_corrupt_cache_file_is_ignored_and_rewritten(executions):
    samples = load_jsonl(CASES)
    digest, _ = cache_key(str(CASES), samples, V._settings(), code=V._code_digest())
    path = cache_path(digest)
    path.parent.mkdir(parents=True)
    path.write_text("{not json", encoding="utf-8")
    assert _flags(load_dataset(str(CASES))) == CASE_FLAGS
    assert executions
    rec = json.loads(path.read_text(encoding="utf-8"))  # rewritten, valid
    assert rec["n"] == 11 and rec["key_sha256"] == digest
    # a well-formed file that does not fit the samples (an id that differs) is a miss too
    rec["problems"][0][1] = "someone-else"
    path.write_text(json.dumps(rec), encoding="utf-8")
    n = len(executions)
    assert _flags(load_dataset(str(CASES))) == CASE_FLAGS
    assert len(executions) > n


def test_validate_false_skips(executions, _cache):
    samples = load_dataset(str(CASES), validate=False)
    assert executions == []
    assert _flags(samples) == {"val-loader-flag": ("duplicate_gold",)}  # only what the file itself says
    assert not (_cache / "validation").exists()


def test_env_exclude_flags_leaves_flagged_samples_out(monkeypatch, tmp_path):
    """``gym.make(..., exclude_flags=("indistinguishable",))``: the env serves no sample on which asking
    cannot pay (for RL training; the metrics leave them out by default, the env only when told)."""
    import gymnasium as gym

    import textsql_clarify  # noqa: F401

    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    spec = str(FIX / "cases.jsonl")
    every = gym.make("TextSQLClarify-v0", dataset=spec).unwrapped.samples
    kept = gym.make("TextSQLClarify-v0", dataset=spec, exclude_flags=("indistinguishable",)).unwrapped.samples
    assert len(every) == 11 and [s.id for s in every if s not in kept] == ["val-same"]
    first = gym.make("TextSQLClarify-v0", dataset=spec, exclude_flags=["indistinguishable"], limit=3).unwrapped.samples
    assert [s.id for s in first] == [s.id for s in kept[:3]]  # flags first, then the limit
    with pytest.raises(ValueError, match="unknown flag"):
        gym.make("TextSQLClarify-v0", dataset=spec, exclude_flags=("indistinguishible",))


# -- double-quoted values (SQLite reads "abc" as a string where no column abc exists) -------------
DQ = FIX / "double_quoted.jsonl"


def test_mask_values_masks_double_quoted_values_given_the_columns():
    cols = frozenset({"name", "building", "budget"})
    a = mask_values('SELECT name FROM departments WHERE building = "Turing Hall"', cols)
    assert a == "SELECT name FROM departments WHERE building = ?"
    assert a == mask_values("SELECT name FROM departments WHERE building = 'Fermi Building'", cols)
    # a quoted column, a quoted alias, a quoted table stay identifiers
    assert mask_values('SELECT "name" AS "n" FROM "departments" WHERE "budget" > 5 ORDER BY "n"', cols) == \
        "SELECT name AS n FROM departments WHERE budget > ? ORDER BY n"
    # without a schema a quoted name cannot be told from a value: kept as an identifier
    assert mask_values('SELECT name FROM departments WHERE building = "Turing Hall"') == \
        'SELECT name FROM departments WHERE building = turing hall'
    # SQL sqlglot cannot parse: its quoted tokens are told apart the same way
    assert mask_values('SELECT name FROM departments WHERE building = "Turing Hall" AND (', cols) == \
        "SELECT NAME FROM DEPARTMENTS WHERE BUILDING = ? AND ("


def test_golds_differing_only_in_a_double_quoted_value_are_duplicates():
    samples = load_dataset(str(DQ))
    assert _flags(samples) == {"val-dq-b": ("duplicate_gold",)}
    report = V.validate_samples(load_dataset(str(DQ), validate=False), spec=str(DQ))
    assert [str(p) for p in report.problems] == [
        "val-dq-b: duplicate_gold: gold_sql equals val-dq-a's once values are masked (ABISS §4.2 stage 1)"]


# -- a gold over the row cap: a ceiling with its reason, never a silent 0 -------------------------
ROW_CAP_FIX = FIX / "row_cap.jsonl"


def test_gold_over_the_row_cap_is_flagged_at_load_as_a_ceiling_with_the_reason(tmp_path):
    from conftest import MeanIs
    from textsql_clarify.baselines.agents import make_agent
    from textsql_clarify.rollout.evaluation import evaluate

    assert V.ROW_CAP == 10_000
    samples = load_dataset(str(ROW_CAP_FIX))
    assert _flags(samples) == {"rowcap-over-cap": ("gold_error",)}  # 10,000 rows: scored; 10,001: a ceiling
    report = V.validate_samples(load_dataset(str(ROW_CAP_FIX), validate=False), spec=str(ROW_CAP_FIX))
    assert [str(p) for p in report.problems] == [
        "rowcap-over-cap: gold_error: gold_sql returns more than the row cap of 10,000 rows (fetched 10,000, "
        "truncated): EX cannot compare a truncated result, so the sample is a ceiling (EX undefined, left out of "
        "EX means)"]
    trajs, m = evaluate(samples, make_agent("oracle"), progress=False)
    by = {t.sample_id: t for t in trajs}
    over = by["rowcap-over-cap"]
    # EX undefined and the sample counted as a ceiling, not EX 0 in the mean
    assert over.scores["ex"] is None and over.gold_status == "error" and over.scores["gold_truncated"] is True
    assert over.turns[-1].reward_components["ex"] is None
    assert m["overall"]["EX"] == MeanIs(1.0, 1)
    assert m["flagged"]["gold_error"] == 1
