"""Faults found by probing the commands' input and output, each fixed in the module at fault:

- a lone surrogate (a valid JSON escape such as ``\\ud800``) in a dataset loaded, played and evaluated, then
  ``report`` stopped with exit 2 and left ``report.html`` at 0 bytes over the earlier page, and ``generate``
  stopped without naming file, line or field. Every dataset loader now reads it as U+FFFD
  (``docs/dataset-format.md``, "Text"), and the report replaces its output file whole or not at all;
- a worker of the async vector env killed by a signal gave a bare ``BrokenPipeError`` / ``EOFError``, and
  ``close()`` raised again;
- ``report --format md`` passed raw HTML and Markdown from run names; ``data validate`` printed escape and bell
  characters of sample ids to the terminal;
- ``generate`` left derived databases that no written sample uses in its output folder.

Every file is written under ``tmp_path``; the validation cache lives there too.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
from pathlib import Path

import gymnasium as gym
import pytest

from textsql_clarify import cli
from textsql_clarify.datasets import embedded_db_path, load_dataset
from textsql_clarify.datasets.jsonl_stream import iter_jsonl
from textsql_clarify.generation import Accepted, Rejected
from textsql_clarify.generation.anchors import load_anchors
from textsql_clarify.generation.derived_db import Removal, build_derived, derived_name
from textsql_clarify.generation.pipeline import generate
from textsql_clarify.samples import Sample, load_jsonl

EMBEDDED = Path(embedded_db_path()).parent / "samples.jsonl"
EMPTY_GOLD = "SELECT first_name FROM students WHERE student_id = -1"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _embedded_records(n: int) -> list[dict]:
    """The first ``n`` answerable records of the embedded dataset, with an absolute ``db_path``."""
    recs = [json.loads(line) for line in EMBEDDED.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = [r for r in recs if r["group"] == "answerable"][:n]
    for r in out:
        r["db_path"] = str(embedded_db_path())
    return out


def _write_jsonl(path: Path, recs: list[dict]) -> Path:
    # json.dumps writes a lone surrogate as its ASCII escape (\ud800): valid JSON, as a probe would write it
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def _surrogate_dataset(tmp_path: Path) -> tuple[Path, dict]:
    recs = _embedded_records(3)
    recs[0]["question"] = recs[0]["question"] + " \ud800"
    recs[0]["evidence"] = ["grades run from 18 to 30 \udfff"]
    return _write_jsonl(tmp_path / "sur.jsonl", recs), recs[0]


# -- 1. lone surrogates --------------------------------------------------------------------------------------------
def test_lone_surrogates_in_a_native_jsonl_load_as_replacement_characters(tmp_path):
    path, first = _surrogate_dataset(tmp_path)
    s = load_jsonl(path)[0]
    assert s.question == first["question"].replace("\ud800", "\ufffd")
    assert s.evidence == ("grades run from 18 to 30 \ufffd",)
    s.question.encode("utf-8")  # encodes: every writer downstream accepts it


def test_an_escaped_surrogate_pair_stays_one_character(tmp_path):
    recs = _embedded_records(1)
    recs[0]["question"] = "How many students \ud83d\ude00?"
    assert load_jsonl(_write_jsonl(tmp_path / "pair.jsonl", recs))[0].question == "How many students \U0001F600?"


def test_lone_surrogates_in_keys_and_ids_are_replaced_too(tmp_path):
    recs = _embedded_records(2)
    recs[0]["id"] = "uni-\udc00"
    got = load_jsonl(_write_jsonl(tmp_path / "id.jsonl", recs))
    assert got[0].id == "uni-\ufffd"
    problems: list = []
    assert list(iter_jsonl(_write_jsonl(tmp_path / "k.jsonl", [{"k\ud800": ["v\udbff"]}]), problems, "file")) == \
        [(1, {"k\ufffd": ["v\ufffd"]})] and problems == []


def test_lone_surrogates_in_a_spider_json_list_load_as_replacement_characters(tmp_path):
    root = tmp_path / "spider"
    (root / "database" / "university").mkdir(parents=True)
    shutil.copy(embedded_db_path(), root / "database" / "university" / "university.sqlite")
    rec = {"db_id": "university", "question": "How many students are there\ud800?",
           "query": "SELECT count(*) FROM students"}
    (root / "dev.json").write_text(json.dumps([rec]), encoding="utf-8")
    assert load_dataset(f"spider:{root}")[0].question == "How many students are there\ufffd?"


@pytest.fixture(scope="module")
def surrogate_run(tmp_path_factory):
    """``eval`` of a 3-sample file whose first question holds a lone surrogate (the probe's run).

    The cache folder is the module's own while its tests run and the variable is put back after them,
    so that no later module reads this module's cache."""
    tmp = tmp_path_factory.mktemp("sur")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp / "cache"))
        path, first = _surrogate_dataset(tmp)
        out = tmp / "run"
        assert cli.main(["eval", "--dataset", str(path), "--out", str(out), "--no-progress"]) == 0
        yield path, out, first


def test_report_of_a_run_over_a_surrogate_question_writes_the_page(surrogate_run, tmp_path):
    pytest.importorskip("matplotlib")
    _, run, first = surrogate_run
    page = tmp_path / "report.html"
    assert cli.main(["report", str(run), "-o", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "\ufffd" in text
    assert cli.main(["report", str(run), "--format", "md", "-o", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("## Leaderboard")


def test_report_of_an_older_run_holding_a_surrogate_reads_it_as_a_replacement(surrogate_run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    _, run, _ = surrogate_run
    old = tmp_path / "old"
    shutil.copytree(run, old)
    recs = [json.loads(x) for x in (old / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()]
    recs[1]["question"] = "written before the loaders replaced them \ud800"
    (old / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    assert cli.main(["report", str(old), "-o", str(tmp_path / "r.html")]) == 0
    assert "written before the loaders replaced them \ufffd" in (tmp_path / "r.html").read_text(encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["report", str(old), "--format", "json"]) == 0
    json.loads(capsys.readouterr().out)


def test_data_validate_and_generate_take_a_surrogate_dataset(surrogate_run, tmp_path, capsys):
    path, _, first = surrogate_run
    assert cli.main(["data", "validate", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("3 samples, 0 flagged")
    out = tmp_path / "gen"
    assert cli.main(["generate", "--anchors", str(path), "--out", str(out), "--no-progress",
                     "--recipes", "drift"]) == 0
    capsys.readouterr()
    recs = [json.loads(x) for x in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert recs and all("\ud800" not in r["question"] for r in recs)
    grown = [r for r in recs if r["provenance"]["anchor_id"] == first["id"]]
    assert grown and all(r["question"].startswith(first["question"].replace("\ud800", "\ufffd")) for r in grown)


def test_generate_queries_file_with_a_surrogate_loads_as_a_replacement(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "q1", "question": "How many students\ud800?",
                             "sql": "SELECT count(*) FROM students"}) + "\n", encoding="utf-8")
    anchors = load_anchors(None, db=str(embedded_db_path()), queries=str(q))
    assert [a.question for a in anchors] == ["How many students\ufffd?"]


def test_a_failed_report_write_leaves_the_earlier_page_whole(surrogate_run, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    _, run, _ = surrogate_run
    page = tmp_path / "out" / "report.html"
    assert cli.main(["report", str(run), "-o", str(page)]) == 0
    before = _sha(page)
    from textsql_clarify.reports import output

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.os, "replace", full_disk)
    for fmt in ("html", "md"):
        assert cli.main(["report", str(run), "--format", fmt, "-o", str(page)]) == 2
        assert "No space left on device" in capsys.readouterr().err
        assert _sha(page) == before
        assert sorted(p.name for p in page.parent.iterdir()) == ["report.html"]  # no temporary file left


def test_the_atomic_writer_refuses_nothing_and_leaves_no_temporary(tmp_path):
    from textsql_clarify.reports.output import replace_text

    target = tmp_path / "r.md"
    target.write_text("good", encoding="utf-8")
    assert replace_text(target, "lone \ud800 surrogate") == target
    assert target.read_text(encoding="utf-8") == "lone \ufffd surrogate"
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]


# -- 2. a dead vector-env worker -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")[:4]


def _kill(envs, index: int) -> int:
    pid = envs.processes[index].pid
    os.kill(pid, signal.SIGKILL)
    envs.processes[index].join(10)
    return pid


def test_a_worker_killed_by_a_signal_is_named_and_close_is_clean(samples):
    from textsql_clarify.envs.async_vector import WorkerDiedError, make_async_vector_env

    envs = make_async_vector_env(2, samples=samples)
    envs.reset(seed=0)
    pid = _kill(envs, 1)
    with pytest.raises(WorkerDiedError) as e:
        envs.step(["<sql>SELECT 1</sql>"] * 2)
    msg = str(e.value)
    assert e.value.index == 1 and e.value.exitcode == -signal.SIGKILL and e.value.pid == pid
    assert "sub-env 1" in msg and "SIGKILL" in msg and f"pid {pid}" in msg and "Worker<" in msg
    with pytest.raises(WorkerDiedError, match="sub-env 1"):  # the env stays unusable, and says why
        envs.reset(seed=1)
    assert envs.close() is None and envs.closed
    assert not any(p.is_alive() for p in envs.processes)


def test_a_worker_killed_during_a_step_is_named(samples):
    from textsql_clarify.envs.async_vector import WorkerDiedError, make_async_vector_env

    envs = make_async_vector_env(2, samples=samples)
    envs.reset(seed=0)
    envs.step_async(["<sql>SELECT 1</sql>"] * 2)
    _kill(envs, 0)
    with pytest.raises(WorkerDiedError, match=r"sub-env 0 .*SIGKILL"):
        envs.step_wait(timeout=30)
    envs.close()
    assert envs.closed and not any(p.is_alive() for p in envs.processes)


def test_close_after_a_worker_died_unseen_returns_cleanly(samples):
    from textsql_clarify.envs.async_vector import make_async_vector_env

    envs = make_async_vector_env(3, samples=samples)
    envs.reset(seed=0)
    _kill(envs, 2)
    assert envs.close() is None and envs.closed
    assert not any(p.is_alive() for p in envs.processes)


class _ExitOnStep(gym.Wrapper):
    """A sub-env whose process exits with status 3 when it is stepped (a native crash, ``os._exit``)."""

    def step(self, action):
        os._exit(3)


def test_a_worker_that_exits_is_named_with_its_exit_code(samples):
    import functools

    from textsql_clarify import ENV_ID
    from textsql_clarify.envs.async_vector import TextSQLClarifyAsyncVectorEnv, WorkerDiedError

    ok = functools.partial(gym.make, ENV_ID, samples=samples)

    def crashing():
        return _ExitOnStep(gym.make(ENV_ID, samples=samples))

    envs = TextSQLClarifyAsyncVectorEnv([ok, crashing])
    envs.reset(seed=0)
    with pytest.raises(WorkerDiedError, match=r"sub-env 1 .*exited with code 3") as e:
        envs.step(["<sql>SELECT 1</sql>"] * 2)
    assert e.value.exitcode == 3
    envs.close()
    assert envs.closed


# -- 3. escapes in Markdown and terminal output ----------------------------------------------------------------------
def test_markdown_tables_escape_html_and_markdown_in_run_names(surrogate_run, tmp_path, capsys):
    _, run, _ = surrogate_run
    hostile = tmp_path / "hostile"
    shutil.copytree(run, hostile)
    info = json.loads((hostile / "run.json").read_text(encoding="utf-8"))
    info["agent"] = "<img src=x onerror=alert(1)> *b* _i_ [l](javascript:x) `c` |"
    (hostile / "run.json").write_text(json.dumps(info), encoding="utf-8")
    metrics = json.loads((hostile / "metrics.json").read_text(encoding="utf-8"))
    metrics["run"]["agent"] = info["agent"]
    (hostile / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    assert cli.main(["report", str(hostile), str(run), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;" in md
    assert "\\*b\\* \\_i\\_ \\[l\\](javascript:x) \\`c\\` \\|" in md
    assert "## Paired differences from &lt;img" in md  # the heading names the reference run, escaped too
    assert "| answerable_without_evidence | oracle |" in md  # plain names and keys are written as they are


def test_data_validate_escapes_control_characters_of_sample_ids(tmp_path, capsys):
    recs = _embedded_records(2)
    recs[0]["id"] = "evil\x1b[2J\x07id\u202e"
    recs[0]["gold_sql"] = "SELECT nope FROM students"  # gold_error: the id is printed with its problem
    path = _write_jsonl(tmp_path / "ctl.jsonl", recs)
    assert cli.main(["data", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "evil\\x1b[2J\\x07id\\u202e: gold_error: " in out
    assert cli.main(["data", "validate", str(path), "--json"]) == 1  # JSON keeps the id exactly, as escapes
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and '"evil\\u001b[2J\\u0007id\\u202e"' in out
    assert json.loads(out)["problems"][0]["sample_id"] == recs[0]["id"]


# -- 4. derived databases no written sample uses -------------------------------------------------------------------
KEPT = Removal("students", "residence_city")
UNUSED = Removal("students", "home_city")
MOVED = Removal("professors", "salary")


class _DerivingRecipe:
    """Builds a derived database for three anchors: one sample over it is kept, one candidate is rejected after
    the database was built, and one sample over it is moved out by the load-time validation (an empty gold)."""

    name = "deriving"
    stages = ("built", "checked")
    needs_model = False

    def run(self, anchor, rng, ctx):
        if anchor.id == "uni-ans-001":
            db = build_derived(anchor.db_path, KEPT, ctx.work_dir, anchor.db_id)
            return [Accepted(Sample(id="kept", db_id="university__no_residence_city", db_path=str(db),
                                    question=anchor.question, group="unanswerable",
                                    subcategory="missing_entities_or_attributes",
                                    hidden_knowledge="Where students live during term is not recorded anywhere."),
                             {"built": "pass", "checked": "pass"})]
        if anchor.id == "uni-ans-002":
            build_derived(anchor.db_path, UNUSED, ctx.work_dir, anchor.db_id)
            return [Rejected("checked", "the gold still runs")]
        if anchor.id == "uni-ans-003":
            db = build_derived(anchor.db_path, MOVED, ctx.work_dir, anchor.db_id)
            return [Accepted(Sample(id="moved", db_id="university__no_salary", db_path=str(db),
                                    question=anchor.question, group="answerable",
                                    subcategory="answerable_without_evidence", gold_sql=EMPTY_GOLD),
                             {"built": "pass", "checked": "pass"})]
        return []


def test_generate_removes_the_derived_databases_no_written_sample_uses(tmp_path):
    anchors = load_anchors("embedded")
    source_sha = _sha(Path(embedded_db_path()))
    out = tmp_path / "gen"
    (out / "databases").mkdir(parents=True)
    (out / "journal.jsonl").write_text("", encoding="utf-8")  # an empty journal: the folder counts as a run's
    stale = out / "databases" / ".university__x.sqlite.tmp-1-deadbeef"  # a build cut by a kill
    stale.write_bytes(b"")
    rep = generate(anchors, [_DerivingRecipe()], out, seed=0, progress=False)
    assert [r["id"] for r in rep.load_validation] == ["moved"]
    assert rep.load_validation[0]["reasons"][0].startswith("gold_empty")
    assert sorted(p.name for p in (out / "databases").iterdir()) == [derived_name("university", KEPT)]
    assert rep.manifest["counts"]["samples"] == 1
    assert _sha(Path(embedded_db_path())) == source_sha  # the source database is never touched
    kept = load_jsonl(out / "samples.jsonl")
    assert [s.id for s in kept] == ["kept"] and Path(kept[0].db_path).is_file()
    samples, rejections = _sha(out / "samples.jsonl"), _sha(out / "rejections.json")
    # resumed, the unit whose database was removed runs again: the same files, the same reasons
    again = generate(anchors, [_DerivingRecipe()], out, seed=0, progress=False)
    assert again.resumed == again.units - 1
    assert (_sha(out / "samples.jsonl"), _sha(out / "rejections.json")) == (samples, rejections)
    assert sorted(p.name for p in (out / "databases").iterdir()) == [derived_name("university", KEPT)]


def test_generate_keeps_a_file_in_databases_that_it_did_not_build(tmp_path):
    anchors = load_anchors("embedded")
    out = tmp_path / "gen"
    generate(anchors, [_DerivingRecipe()], out, seed=0, progress=False)
    notes = out / "databases" / "README.txt"  # not a database: never ours to remove
    notes.write_text("notes", encoding="utf-8")
    generate(anchors, [_DerivingRecipe()], out, seed=0, progress=False)
    assert notes.read_text(encoding="utf-8") == "notes"
    con = sqlite3.connect(f"file:{out / 'databases' / derived_name('university', KEPT)}?mode=ro", uri=True)
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(students)")]
    finally:
        con.close()
    assert "residence_city" not in cols and "home_city" in cols
