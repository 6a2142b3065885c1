"""The generation pipeline: anchors, the recipe registry, generate() (journal, resume, determinism,
provenance, pairs, duplicates, load-time validation), the rejection table and the ``generate`` command.

Stub recipes over the embedded university database; the real recipes over Spider dev are
``tests/test_generation_acceptance.py``.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from textsql_clarify.datasets import embedded_db_path
from textsql_clarify.errors import DatasetError
from textsql_clarify.generation import Accepted, Rejected
from textsql_clarify.generation.anchors import anchor_gold, load_anchors
from textsql_clarify.generation.pipeline import GenerationError, generate, unit_seed
from textsql_clarify.generation.recipes import RECIPES, RecipeError, make_recipe, make_recipes
from textsql_clarify.generation.rejections import RecipeRejections, render_rejection_table
from textsql_clarify.samples import Sample, load_jsonl

EMPTY_GOLD = "SELECT first_name FROM students WHERE student_id = -1"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def anchors():
    return load_anchors("embedded")


def _answerable(a, sid: str, gold: str | None = None, **prov) -> Sample:
    return Sample(id=sid, db_id=a.db_id, db_path=a.db_path, question=a.question, group="answerable",
                  subcategory="answerable_without_evidence", gold_sql=gold or a.gold_sql, difficulty=a.difficulty,
                  provenance=dict(prov))


def _derived_db(work: Path) -> Path:
    """A derived database in the work folder (students without residence_city), built once."""
    path = work / "university__no_residence_city.sqlite"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        src = sqlite3.connect(f"file:{embedded_db_path()}?mode=ro", uri=True)
        dst = sqlite3.connect(tmp)
        src.backup(dst)
        src.close()
        dst.execute("ALTER TABLE students DROP COLUMN residence_city")
        dst.commit()
        dst.close()
        tmp.rename(path)
    return path


class StubRecipe:
    """Deterministic given the rng: for anchors of the ``uni-ans`` family an unanswerable sample over a derived
    database with the anchor as its paired original; for the others one coin (tails: rejected at ``coin``),
    else an answerable sample whose provenance holds a draw."""

    name = "stub"
    stages = ("coin", "pair")
    needs_model = False

    def run(self, anchor, rng, ctx):
        out = []
        if anchor.id.startswith("uni-ans"):
            pass
        elif rng.random() < 0.25:
            out.append(Rejected("coin", "tails"))
        else:
            out.append(Accepted(_answerable(anchor, f"stub-{anchor.id}", draw=rng.randrange(1000)),
                                {"coin": "pass", "pair": "pass"}))
        if anchor.id.startswith("uni-ans"):
            db = _derived_db(ctx.work_dir)
            flawed = Sample(id=f"stub-{anchor.id}-missing", db_id="university__no_residence_city", db_path=str(db),
                            question=anchor.question, group="unanswerable",
                            subcategory="missing_entities_or_attributes",
                            hidden_knowledge="The database does not record where students live during term.",
                            provenance={"removed": "students.residence_city"})
            out.append(Accepted(flawed, {"coin": "pass", "pair": "pass"},
                                paired=_answerable(anchor, f"stub-{anchor.id}-orig")))
        return out


class InterruptingRecipe(StubRecipe):
    """The stub, but a KeyboardInterrupt (Ctrl-C, a kill) on the ``k``-th anchor."""

    def __init__(self, k: int):
        self.k, self.calls = k, 0

    def run(self, anchor, rng, ctx):
        self.calls += 1
        if self.calls == self.k:
            raise KeyboardInterrupt
        return super().run(anchor, rng, ctx)


def test_unit_seed_is_a_stable_sha256():
    assert unit_seed(0, "drift", "spider-dev-0") == unit_seed(0, "drift", "spider-dev-0")
    import hashlib

    want = int.from_bytes(hashlib.sha256(b"0\x00drift\x00spider-dev-0").digest()[:8], "big")
    assert unit_seed(0, "drift", "spider-dev-0") == want == 0x301F02B6DBEC090D  # fixed: resumes depend on it
    assert len({unit_seed(s, r, a) for s in (0, 1) for r in ("drift", "stub") for a in ("a", "b")}) == 8


# -- anchors ------------------------------------------------------------------------------------------------
def test_anchors_from_the_embedded_spec(anchors):
    assert len(anchors) == 36 and anchors.n_source == 48
    assert anchors.skipped == {"no gold SQL": 12}  # the 12 unanswerable samples
    a = anchors[0]
    assert (a.id, a.db_id, a.difficulty, a.source) == ("uni-ans-001", "university", "easy", "embedded")
    assert a.gold_sql.startswith("SELECT COUNT(*) FROM students s JOIN departments d")
    assert Path(a.db_path).is_absolute() and Path(a.db_path).is_file()
    assert [x.id for x in load_anchors("embedded", limit=2)] == ["uni-ans-001", "uni-ans-002"]


def test_anchors_from_a_database_and_its_queries(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text('{"question": "How many students?", "sql": "SELECT COUNT(*) FROM students"}\n\n'
                 '{"id": 7, "question": "Name the courses.", "query": "SELECT title FROM courses", "difficulty": "easy"}\n'
                 '{"id": "c", "question": "Budgets?", "gold_sql": "SELECT budget FROM departments", "evidence": "euros"}\n')
    got = load_anchors(db=embedded_db_path(), queries=q)
    assert [(a.id, a.db_id, a.gold_sql, a.difficulty, a.evidence) for a in got] == [
        ("university-1", "university", "SELECT COUNT(*) FROM students", "unknown", ()),
        ("7", "university", "SELECT title FROM courses", "easy", ()),
        ("c", "university", "SELECT budget FROM departments", "unknown", ("euros",))]
    assert got.source == str(q) and got.skipped == {}


def test_bad_queries_name_file_line_and_field(tmp_path):
    q = tmp_path / "bad.jsonl"
    q.write_text('{"question": "ok", "sql": "SELECT 1"}\n'
                 '{"question": "", "sql": "SELECT 1"}\n'
                 '{"question": "two", "sql": "SELECT 1", "query": "SELECT 2"}\n'
                 '{"question": "none"}\n'
                 'not json\n'
                 '{"question": "x", "sql": "SELECT 1", "difficulty": "trivial", "colour": 1}\n'
                 '{"id": "university-1", "question": "dup", "sql": "SELECT 1"}\n')
    with pytest.raises(DatasetError) as e:
        load_anchors(db=embedded_db_path(), queries=q)
    got = [(p.line, p.field) for p in e.value.problems]
    assert got == [(2, "question"), (3, "query"), (4, "sql"), (5, "<record>"), (6, "colour"), (6, "difficulty"),
                   (7, "id")]
    assert all(p.file == str(q) for p in e.value.problems)
    assert "duplicate id 'university-1' (first on line 1)" in str(e.value)


def test_bad_anchor_sources(tmp_path):
    notdb = tmp_path / "x.sqlite"
    notdb.write_text("hello")
    q = tmp_path / "q.jsonl"
    q.write_text('{"question": "q", "sql": "SELECT 1"}\n')
    with pytest.raises(DatasetError, match="is not a SQLite database"):
        load_anchors(db=notdb, queries=q)
    with pytest.raises(DatasetError, match="database file not found"):
        load_anchors(db=tmp_path / "absent.sqlite", queries=q)
    with pytest.raises(DatasetError, match="not both"):
        load_anchors("embedded", db=embedded_db_path(), queries=q)
    with pytest.raises(DatasetError, match="--queries"):
        load_anchors(db=embedded_db_path())
    with pytest.raises(DatasetError, match="unknown dataset spec"):
        load_anchors("nonsense:spec")
    with pytest.raises(DatasetError, match="positive integer"):
        load_anchors("embedded", limit=0)


# -- the registry -------------------------------------------------------------------------------------------
def test_registry_names_and_errors(monkeypatch):
    assert list(RECIPES) == ["drift", "missing_schema", "lexical_overlap", "abiss", "tide_chain", "tide_drift",
                             "tide_triplets", "premise"]
    with pytest.raises(RecipeError) as e:
        make_recipe("drfit")
    assert "unknown recipe 'drfit'; valid recipes: drift, missing_schema, lexical_overlap, abiss" in str(e.value)
    monkeypatch.setitem(RECIPES, "ghost", "ghost_module:Ghost")
    with pytest.raises(RecipeError, match="its module textsql_clarify.generation.ghost_module is not there yet"):
        make_recipe("ghost")
    monkeypatch.setitem(RECIPES, "wrong", "base:Anchor")
    with pytest.raises(RecipeError, match="lacks name, stages, needs_model or run|Anchor"):
        make_recipe("wrong")
    with pytest.raises(RecipeError, match="more than once: drift"):
        make_recipes("drift,drift")
    with pytest.raises(RecipeError, match="no recipe given"):
        make_recipes(" , ")


# -- generate -----------------------------------------------------------------------------------------------
def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_generate_writes_validated_samples_with_provenance_and_pairs(tmp_path, anchors):
    out = tmp_path / "run"
    rep = generate(anchors, [StubRecipe()], out, seed=3, progress=False)
    recs = _lines(out / "samples.jsonl")
    t = rep.tables[0]
    # 36 anchors: 3 flawed samples of the uni-ans family, one coin for each of the 33 others
    assert t.candidates == 36 and dict(t.rejected) == {"coin": 7, "load_validation": 1} and t.accepted == 28
    assert rep.counts["samples"] == 28 and rep.counts["paired_originals"] == 3 and rep.counts["lines"] == 31
    assert rep.counts["by_recipe"]["stub"]["by_group"] == {"unanswerable": 3, "answerable": 25}
    # the embedded uni-entity-003 gold is uni-ans-001's once values are masked (ABISS §4.2 stage 1)
    assert rep.load_validation == [{"id": "stub-uni-entity-003", "recipe": "stub", "anchor_id": "uni-entity-003",
                                    "reasons": ["duplicate_gold: gold_sql equals stub-uni-ans-001-orig's once values "
                                                "are masked (ABISS §4.2 stage 1)"]}]
    by_id = {r["id"]: r for r in recs}
    flawed = by_id["stub-uni-ans-001-missing"]
    assert flawed["db_path"] == "databases/university__no_residence_city.sqlite"  # relative: resolves on load
    assert flawed["provenance"] == {
        "source": "generated", "recipe": "stub", "anchor_id": "uni-ans-001", "anchor_source": "embedded",
        "anchor_gold": anchor_gold(anchors[0].gold_sql), "seed": 3, "models": [], "removed": "students.residence_city", "paired_original": "stub-uni-ans-001-orig",
        "verdicts": {"coin": "pass", "pair": "pass"}}
    ids = [r["id"] for r in recs]
    assert ids[ids.index("stub-uni-ans-001-missing") + 1] == "stub-uni-ans-001-orig"  # the pair follows it
    orig = by_id["stub-uni-ans-001-orig"]
    assert orig["provenance"]["paired_with"] == "stub-uni-ans-001-missing" and "verdicts" not in orig["provenance"]
    loaded = load_jsonl(out / "samples.jsonl")
    assert Path(next(s for s in loaded if s.id == flawed["id"]).db_path) == out / "databases" / \
        "university__no_residence_city.sqlite"
    from textsql_clarify.datasets.validate import validate_samples

    assert validate_samples(loaded, use_cache=False).problems == []
    man = json.loads((out / "manifest.json").read_text())
    assert man["seed"] == 3 and man["models"] == [] and man["units"] == 36
    assert man["anchors"]["source"] == "embedded" and man["anchors"]["n"] == 36
    assert man["anchors"]["skipped"] == {"no gold SQL": 12}
    assert man["recipes"] == [{"name": "stub", "stages": ["coin", "pair"], "needs_model": False}]
    assert man["version"] and man["counts"] == rep.counts
    rej = json.loads((out / "rejections.json").read_text())
    assert rej["recipes"]["stub"]["stages"][1] == {"stage": "coin", "entered": 36, "rejected": 7, "rate": 7 / 36}
    assert rej["recipes"]["stub"]["reasons"]["coin"] == {"top": [["tails", 7]], "distinct": 1}


def test_keep_flags_keeps_the_flagged_sample_with_its_flag(tmp_path, anchors):
    rep = generate(anchors, [StubRecipe()], tmp_path / "k", seed=3, progress=False, keep_flags=("duplicate_gold",))
    assert rep.load_validation == [] and rep.counts["samples"] == 29
    rec = next(r for r in _lines(tmp_path / "k" / "samples.jsonl") if r["id"] == "stub-uni-entity-003")
    assert rec["flags"] == ["duplicate_gold"]
    with pytest.raises(GenerationError, match="unknown validation flag"):
        generate(anchors, [StubRecipe()], tmp_path / "k", seed=3, progress=False, keep_flags=("nope",))


def test_same_seed_same_bytes_other_seed_other_samples(tmp_path, anchors):
    a = generate(anchors, [StubRecipe()], tmp_path / "a", seed=0, progress=False)
    b = generate(anchors, [StubRecipe()], tmp_path / "b", seed=0, progress=False)
    c = generate(anchors, [StubRecipe()], tmp_path / "c", seed=1, progress=False)
    assert a.samples_path.read_bytes() == b.samples_path.read_bytes()
    assert a.samples_path.read_bytes() != c.samples_path.read_bytes()
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (tmp_path / "b" / "manifest.json").read_bytes()


def test_a_killed_run_resumes_to_the_same_bytes(tmp_path, anchors):
    whole = generate(anchors, [StubRecipe()], tmp_path / "whole", seed=5, progress=False)
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        generate(anchors, [InterruptingRecipe(k=11)], out, seed=5, progress=False)
    journal = (out / "journal.jsonl").read_text().splitlines()
    assert len(journal) == 1 + 10  # the header and the 10 units finished before the interrupt
    assert not (out / "samples.jsonl").exists()
    with open(out / "journal.jsonl", "a") as fh:  # a line cut by a kill mid-write
        fh.write('{"recipe": "stub", "anchor_id": "uni-sco')
    again = generate(anchors, [StubRecipe()], out, seed=5, progress=False)
    assert again.resumed == 10 and again.units == 36
    assert again.samples_path.read_bytes() == whole.samples_path.read_bytes()
    assert len((out / "journal.jsonl").read_text().splitlines()) == 1 + 36
    once_more = generate(anchors, [StubRecipe()], out, seed=5, progress=False)  # nothing left to run
    assert once_more.resumed == 36 and once_more.samples_path.read_bytes() == whole.samples_path.read_bytes()


def test_resume_refuses_other_settings_and_no_resume_starts_over(tmp_path, anchors):
    out = tmp_path / "run"
    generate(anchors[:4], [StubRecipe()], out, seed=0, progress=False)
    with pytest.raises(GenerationError, match="other settings.*--no-resume"):
        generate(anchors[:4], [StubRecipe()], out, seed=1, progress=False)
    rep = generate(anchors[:4], [StubRecipe()], out, seed=1, progress=False, resume=False)
    assert rep.resumed == 0
    assert all(r["provenance"]["seed"] == 1 for r in _lines(out / "samples.jsonl"))
    more = generate(anchors[:6], [StubRecipe()], out, seed=1, progress=False)  # more anchors: only the new ones run
    assert (more.resumed, more.units) == (4, 6)


class _Troublesome:
    """An error on one anchor, a non-outcome on another, duplicates, flawed golds, for the pipeline's own stages."""

    name = "trouble"
    stages = ("check",)
    needs_model = False

    def run(self, anchor, rng, ctx):
        n = int(anchor.id.rsplit("-", 1)[1])
        if anchor.id == "uni-ans-001":
            raise ValueError("boom\nsecond line")
        if anchor.id == "uni-ans-002":
            return ["not an outcome"]
        if anchor.id == "uni-ans-003":
            s = _answerable(anchor, "trouble-x")
            return [Accepted(s), Accepted(s), Accepted(_answerable(anchor, "trouble-y"))]  # same id; same content
        if anchor.id == "uni-evd-001":
            return [Accepted(_answerable(anchor, "trouble-empty", gold=EMPTY_GOLD))]
        if anchor.id == "uni-evd-002":  # a flawed sample whose original's gold returns nothing: both go out
            flawed = Sample(id="trouble-flawed", db_id=anchor.db_id, db_path=anchor.db_path, question="Who?",
                            group="unanswerable", subcategory="missing_entities_or_attributes", hidden_knowledge="gone")
            return [Accepted(flawed, paired=_answerable(anchor, "trouble-orig", gold=EMPTY_GOLD))]
        if anchor.id == "uni-scope-001":  # a paired original equal to a sample written before: linked to it
            flawed = Sample(id="trouble-linked", db_id=anchor.db_id, db_path=anchor.db_path, question="Which?",
                            group="unanswerable", subcategory="missing_entities_or_attributes", hidden_knowledge="gone")
            return [Accepted(_answerable(anchor, "trouble-a")),
                    Accepted(flawed, paired=_answerable(anchor, "trouble-a-orig"))]
        return [Rejected("check", f"no {n}")] if anchor.id.startswith("uni-evd") else []


def test_pipeline_stages_error_duplicate_and_load_validation(tmp_path, anchors):
    rep = generate(anchors, [_Troublesome()], tmp_path / "t", progress=False)
    t = rep.tables[0]
    assert t.candidates == 10
    assert dict(t.rejected) == {"error": 2, "duplicate": 2, "check": 1, "load_validation": 2}
    assert t.accepted == 3 and rep.counts["lines"] == 3
    recs = {r["id"]: r for r in _lines(tmp_path / "t" / "samples.jsonl")}
    assert sorted(recs) == ["trouble-a", "trouble-linked", "trouble-x"]
    assert recs["trouble-linked"]["provenance"]["paired_original"] == "trouble-a"  # not written twice
    assert t.reasons["error"] == {"ValueError: boom": 1,
                                  "the recipe returned str, not Accepted(Sample) or Rejected": 1}
    assert sorted(t.reasons["duplicate"]) == ["same database, question and golds as 'trouble-x'",
                                              "sample id 'trouble-x' already generated"]
    moved = {m["id"]: m["reasons"] for m in rep.load_validation}
    assert moved["trouble-empty"] == ["gold_empty: gold_sql returns no rows"]
    assert moved["trouble-orig"][0] == "gold_empty: gold_sql returns no rows"
    assert moved["trouble-flawed"] == ["its paired original 'trouble-orig' was moved out"]
    assert t.reasons["load_validation"] == {"gold_empty": 1, "its paired original was moved out": 1}
    assert [r["stage"] for r in t.rows()] == ["error", "check", "duplicate", "load_validation"]
    assert [r["entered"] for r in t.rows()] == [10, 8, 7, 5]


class _Twins:
    """Two phrasings of each anchor's question with its gold: episodes grown from one anchor on purpose."""

    name = "twins"
    stages = ()
    needs_model = False

    def run(self, anchor, rng, ctx):
        return [Accepted(dataclasses.replace(_answerable(anchor, f"twins-{anchor.id}-{k}"), question=q))
                for k, q in enumerate((anchor.question, "Put differently: " + anchor.question))]


def test_samples_grown_from_one_anchor_are_not_duplicates_of_each_other(tmp_path, anchors):
    rep = generate(anchors[:2], [_Twins()], tmp_path / "tw", progress=False)
    assert rep.load_validation == [] and rep.counts["samples"] == 4  # same gold, other text, same anchor: kept
    rep = generate([anchors[0], anchors[17]], [_Twins()], tmp_path / "tw2", progress=False)  # uni-entity-003
    # uni-entity-003's gold is uni-ans-001's once values are masked: another anchor, so a duplicate (ABISS §4.2)
    assert [m["id"] for m in rep.load_validation] == ["twins-uni-entity-003-0", "twins-uni-entity-003-1"]


class _NeedsModel(StubRecipe):
    name = "needy"
    needs_model = True


def test_a_council_of_specs_is_loaded_and_named_in_provenance(tmp_path, anchors):
    rep = generate(anchors[:3], [_NeedsModel()], tmp_path / "m", council=["fake", "fake"], progress=False)
    recs = _lines(tmp_path / "m" / "samples.jsonl")
    assert rep.manifest["models"] == ["fake", "fake#2"]
    assert recs and all(r["provenance"]["models"] == ["fake", "fake#2"] for r in recs)
    with pytest.raises(GenerationError, match="other settings"):  # another council: not the same run
        generate(anchors[:3], [_NeedsModel()], tmp_path / "m", council=["fake"], progress=False)


def test_generate_refuses_bad_runs(tmp_path, anchors):
    with pytest.raises(GenerationError, match="need a council.*--model"):
        generate(anchors, [_NeedsModel()], tmp_path / "x", progress=False)
    with pytest.raises(GenerationError, match="no anchors"):
        generate([], [StubRecipe()], tmp_path / "x", progress=False)
    with pytest.raises(GenerationError, match="unique"):
        generate([anchors[0], anchors[0]], [StubRecipe()], tmp_path / "x", progress=False)
    (tmp_path / "file").write_text("")
    with pytest.raises(GenerationError, match="is a file"):
        generate(anchors, [StubRecipe()], tmp_path / "file", progress=False)
    with pytest.raises(RecipeError, match="unknown recipe"):
        generate(anchors, ["nope"], tmp_path / "x", progress=False)


def test_the_source_database_is_not_written(tmp_path, anchors):
    import hashlib

    before = hashlib.sha256(Path(embedded_db_path()).read_bytes()).hexdigest()
    generate(anchors, [StubRecipe()], tmp_path / "run", progress=False)
    assert hashlib.sha256(Path(embedded_db_path()).read_bytes()).hexdigest() == before


# -- the table ----------------------------------------------------------------------------------------------
def test_rejection_table_rates_and_width():
    t = RecipeRejections("a_recipe_with_a_really_long_name", ("parses", "a_stage_name_that_goes_on_and_on_forever"))
    t.candidates = 10
    for _ in range(4):
        t.reject("parses", "bad")
    t.reject("a_stage_name_that_goes_on_and_on_forever", "x")
    rows = t.rows()
    assert [(r["stage"], r["entered"], r["rejected"]) for r in rows] == [
        ("error", 10, 0), ("parses", 10, 4), ("a_stage_name_that_goes_on_and_on_forever", 6, 1), ("duplicate", 5, 0),
        ("load_validation", 5, 0)]
    assert rows[1]["rate"] == 0.4 and t.accepted == 5
    empty = RecipeRejections("none", ("parses",))
    assert empty.rows()[1]["rate"] is None
    text = render_rejection_table([t, empty], width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "40.0%" in text and "16.7%" in text and "—" in text  # 1 of the 6 entering; none entered: undefined
    assert "error" not in text  # a pipeline stage that rejected nothing is not printed


# -- the command --------------------------------------------------------------------------------------------
_STUB_MODULE = '''
from textsql_clarify.generation import Accepted, Rejected
from textsql_clarify.samples import Sample


class Stub:
    name = "stub"
    stages = ("coin",)
    needs_model = False

    def run(self, a, rng, ctx):
        if rng.random() < 0.5:
            return [Rejected("coin", "tails")]
        return [Accepted(Sample(id="stub-" + a.id, db_id=a.db_id, db_path=a.db_path, question=a.question,
                                group="answerable", subcategory="answerable_without_evidence", gold_sql=a.gold_sql))]
'''


def test_generate_command(tmp_path, monkeypatch, capsys):
    from textsql_clarify.cli import main

    pkg = tmp_path / "stubpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "recipes.py").write_text(_STUB_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(RECIPES, "stub", "stubpkg.recipes:Stub")
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"question": f"q{i}", "sql": f"SELECT name FROM departments WHERE dept_id >= {i}"})
                         + "\n" for i in range(1, 7)))
    out = tmp_path / ("long-out-" * 5) / "out"  # "wrote ... to <path>: ..." passed 100 columns with a long path
    rc = main(["generate", "--db", str(embedded_db_path()), "--queries", str(q), "--recipes", "stub", "--out", str(out),
               "--seed", "2", "--no-progress", "--option", "k=v"])
    printed = capsys.readouterr().out
    assert rc == 0
    recs = _lines(out / "samples.jsonl")
    assert printed.splitlines()[0].split() == ["recipe", "stage", "entered", "rejected", "rate"]
    assert f"wrote {len(recs)} line{'' if len(recs) == 1 else 's'} to" in printed
    assert str(out / "samples.jsonl") in printed
    assert all(len(line) <= 100 or line.strip() == f"{out / 'samples.jsonl'}:" for line in printed.splitlines())
    man = json.loads((out / "manifest.json").read_text())
    assert man["options"] == {"k": "v"} and man["seed"] == 2 and man["anchors"]["source"] == str(q)
    assert 0 < len(recs) < 6 and all(r["provenance"]["anchor_source"] == str(q) for r in recs)
    shutil.rmtree(out)
    for argv in (["--db", str(embedded_db_path())],  # --db without --queries
                 ["--anchors", "embedded", "--recipes", "nope"],
                 ["--anchors", "embedded", "--recipes", "stub", "--option", "novalue"],
                 ["--anchors", "embedded", "--recipes", "stub", "--limit", "0"],
                 ["--db", str(q), "--queries", str(q), "--recipes", "stub"]):  # not a database
        assert main(["generate", *argv, "--out", str(out), "--no-progress"]) == 2, argv
        assert capsys.readouterr().err.startswith("error: ")
    assert not (out / "samples.jsonl").exists()


def test_generate_summary_lines_fit_100_columns_and_count_drift_subtypes_apart(tmp_path):
    """The summary after ``generate``'s table: every line <= 100 columns even with a long ``--out`` path,
    1 sample / 2 samples, and tide_triplets' subtypes labelled as those of the samples with a drift (its
    24 samples hold 16 drifts: projection 14, value 2; the other 8 are its chain and premise members)."""
    from textsql_clarify.cli import generate_summary

    counts = {"lines": 31, "samples": 25, "paired_originals": 6, "by_recipe": {
        "tide_triplets": {"samples": 24, "paired_originals": 6, "by_group": {"answerable": 16, "ambiguous": 8},
                          "by_drift_subtype": {"projection": 14, "value": 2}},
        "lexical_overlap": {"samples": 1, "paired_originals": 0, "by_group": {"ambiguous": 1}},
        "drift": {"samples": 3, "paired_originals": 0, "by_group": {"answerable": 3},
                  "by_drift_subtype": {"value": 3}}}}
    path = Path("runs") / ("generated-corpus-" * 3) / "samples.jsonl"  # 70 characters
    lines = generate_summary(counts, path, 0, 4)
    assert max(map(len, lines)) <= 100
    assert lines[:2] == [f"wrote 31 lines to {path}:",
                         "  25 samples, 6 paired originals (0 of 4 units from the journal)"]
    assert lines[2:] == ["  tide_triplets: 24 samples; drift subtypes of the 16 with a drift: projection 14, value 2;",
                         "    6 paired originals",
                         "  lexical_overlap: 1 sample (ambiguous 1)",
                         "  drift: 3 samples; drift subtypes: value 3"]
    one = {**counts, "lines": 1, "samples": 1, "paired_originals": 1, "by_recipe": {}}
    assert generate_summary(one, "s.jsonl", 1, 1) == [
        "wrote 1 line to s.jsonl: 1 sample, 1 paired original (1 of 1 unit from the journal)"]
    longer = Path("/" + "x" * 120) / "samples.jsonl"  # a path wider than the page stands on its own line
    assert generate_summary(counts, longer, 0, 4)[:2] == ["wrote 31 lines to", f"  {longer}:"]
