"""The missing-schema recipe and its derived databases (ABISS §3.2, PremiseSQL E3.2).

Real Spider dev anchors by id with their exact derived schema and sample; every check can reject; the
source database never changes by a byte; the same seed gives the same samples; the oracle's feedback (the
hidden knowledge) scores FB 1.0 in the env and the agent's schema no longer shows the removed element.
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
import sqlite3
from pathlib import Path

import pytest

from textsql_clarify.generation.base import Accepted, Anchor, GenContext, Recipe, Rejected
from textsql_clarify.generation.derived_db import DerivedDBError, Removal, build_derived, derived_name, \
    drop_element_from_create
from textsql_clarify.generation.gold_refs import gold_refs, source_schema
from textsql_clarify.generation import missing_schema as ms
from textsql_clarify.generation.missing_schema import MissingSchemaRecipe, eligible_elements
from textsql_clarify.taxonomy import PREMISE_FLAWS


class FirstIs(random.Random):
    """An rng whose shuffle puts the element named ``first`` (``table.column`` or ``table``) first."""

    def __init__(self, first: str):
        super().__init__(0)
        self.first = first.lower()

    def shuffle(self, x):  # noqa: D102 - see class doc
        x.sort(key=lambda e: e.removal.describe().lower() != self.first)


def _anchor(sample) -> Anchor:
    return Anchor(sample.id, sample.db_id, sample.db_path, sample.question, sample.gold_sql, sample.difficulty)


@pytest.fixture(scope="module")
def spider(request):
    from conftest import SPIDER

    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    from textsql_clarify.datasets.spider import load_spider

    return {s.id: s for s in load_spider(SPIDER)}


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _master(path) -> dict[str, str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {n: s for n, s in con.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")}
    finally:
        con.close()


def _columns(path, table) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    finally:
        con.close()


def _run(anchor, first, tmp_path, **opts):
    ctx = GenContext(work_dir=tmp_path / "databases", options=opts)
    return MissingSchemaRecipe().run(anchor, FirstIs(first), ctx), ctx


def test_recipe_contract():
    r = MissingSchemaRecipe()
    assert isinstance(r, Recipe) and r.name == "missing_schema" and r.needs_model is False
    assert r.stages == ("element_chosen", "derived_built", "gold_fails_on_derived", "no_substitute",
                        "original_nonempty", "hidden_knowledge_judged")
    assert ms.PREMISE_FLAW in PREMISE_FLAWS and PREMISE_FLAWS[ms.PREMISE_FLAW].code == "E3.2"


# ---------------------------------------------------------------------------------- real Spider anchors
def test_eligible_elements_of_spider_golds(spider):
    def names(i):
        s = spider[f"spider-dev-{i}"]
        return [(e.removal.describe(), e.subcategory, e.role)
                for e in eligible_elements(gold_refs(s.gold_sql, source_schema(s.db_path)), source_schema(s.db_path))]

    assert names(0) == [("singer", "missing_entities_or_attributes", "table")]
    assert names(676) == [("people", "missing_entities_or_attributes", "table"),
                          ("people.Nationality", "missing_entities_or_attributes", "attribute")]
    # a join on Template_ID: Documents' side is the foreign key, so it is the one removed; the filter column
    # Template_Type_Code is itself a foreign key (to Ref_Template_Types), so it is no attribute
    assert names(308) == [("Documents", "missing_entities_or_attributes", "table"),
                          ("Documents.Template_ID", "missing_relationship", "join_key"),
                          ("Templates", "missing_entities_or_attributes", "table")]


def test_table_removal_spider_dev_0(spider, tmp_path):
    s = spider["spider-dev-0"]  # How many singers do we have? SELECT count(*) FROM singer
    before = _sha(s.db_path)
    out, ctx = _run(_anchor(s), "singer", tmp_path)
    assert _sha(s.db_path) == before
    assert len(out) == 1 and isinstance(out[0], Accepted)
    a = out[0]
    smp = a.sample
    assert smp.id == "missing_schema-spider-dev-0-no_singer"
    assert smp.db_id == "concert_singer__no_singer"
    assert smp.db_path == "databases/concert_singer__no_singer.sqlite"
    assert (smp.group, smp.subcategory, smp.premise_flaw, smp.gold_sql) == \
        ("unanswerable", "missing_entities_or_attributes", "missing_schema_premise", None)
    assert smp.question == s.question
    assert smp.hidden_knowledge == ("The database has no singer table. The question needs the singer table to count "
                                    "singers. It held the name, country, song name, song release year and age of "
                                    "singers.")
    assert smp.provenance["removed"] == {"table": "singer", "column": None, "role": "table"}
    assert list(a.verdicts) == list(MissingSchemaRecipe.stages)
    derived = ctx.work_dir / "concert_singer__no_singer.sqlite"
    master = _master(derived)
    assert sorted(master) == ["concert", "singer_in_concert", "stadium"]
    # the bridge table's foreign key to the removed table is gone, the other one stays
    assert "REFERENCES `singer`" not in master["singer_in_concert"]
    assert "REFERENCES `concert` (`concert_ID`)" in master["singer_in_concert"]
    con = sqlite3.connect(f"file:{derived}?mode=ro", uri=True)
    assert con.execute("SELECT count(*) FROM singer_in_concert").fetchone() == (10,)
    con.close()
    # the paired original: answerable, on the source database, with the gold
    p = a.paired
    assert (p.id, p.group, p.subcategory, p.db_path, p.gold_sql, p.premise_flaw) == \
        ("missing_schema-spider-dev-0-orig", "answerable", "answerable_without_evidence", s.db_path,
         s.gold_sql, None)


def test_attribute_removal_spider_dev_676(spider, tmp_path):
    s = spider["spider-dev-676"]  # the most common nationality of people
    out, ctx = _run(_anchor(s), "people.Nationality", tmp_path)
    a = out[-1]
    assert isinstance(a, Accepted)
    assert a.sample.id == "missing_schema-spider-dev-676-no_people_Nationality"
    assert a.sample.hidden_knowledge == ("The people table has no nationality column. The question needs the "
                                         "nationality column to show the nationality of people and group people by "
                                         "nationality. Its nationality values were such as Russia and Bulgaria.")
    derived = ctx.work_dir / "poker_player__no_people_Nationality.sqlite"
    assert _columns(derived, "people") == ["People_ID", "Name", "Birth_Date", "Height"]
    assert _columns(derived, "poker_player") == _columns(s.db_path, "poker_player")
    assert a.verdicts["gold_fails_on_derived"].startswith(("syntax", "runtime"))


def test_join_key_removal_spider_dev_308_rebuilds_the_table(spider, tmp_path):
    s = spider["spider-dev-308"]  # documents that use the PPT template type
    out, ctx = _run(_anchor(s), "Documents.Template_ID", tmp_path)
    a = out[-1]
    assert isinstance(a, Accepted)
    assert a.sample.subcategory == "missing_relationship"
    assert a.sample.hidden_knowledge == ("There is no link between documents and templates: the documents table "
                                         "has no template id column. The question needs the template id column to "
                                         "join documents to templates. Nothing says which of the 19 templates each "
                                         "of the 14 documents goes with.")
    derived = ctx.work_dir / "cre_Doc_Template_Mgt__no_Documents_Template_ID.sqlite"
    assert _columns(derived, "Documents") == ["Document_ID", "Document_Name", "Document_Description", "Other_Details"]
    assert "Template_ID" not in _master(derived)["Documents"]  # the foreign key went with the column
    src = sqlite3.connect(f"file:{s.db_path}?mode=ro", uri=True)
    dst = sqlite3.connect(f"file:{derived}?mode=ro", uri=True)
    q = "SELECT Document_ID, Document_Name, Document_Description, Other_Details FROM Documents ORDER BY 1"
    assert dst.execute(q).fetchall() == src.execute(q).fetchall()  # every row kept
    src.close()
    dst.close()


def test_derived_database_is_reused_and_deterministic(spider, tmp_path):
    s0, s1 = spider["spider-dev-0"], spider["spider-dev-1"]  # both: SELECT count(*) FROM singer
    out0, ctx = _run(_anchor(s0), "singer", tmp_path)
    path = ctx.work_dir / "concert_singer__no_singer.sqlite"
    stamp = path.stat().st_mtime_ns
    out1, _ = _run(_anchor(s1), "singer", tmp_path)
    assert isinstance(out1[-1], Accepted) and path.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in ctx.work_dir.iterdir()) == ["concert_singer__no_singer.sqlite"]  # no temp left
    again, ctx2 = _run(_anchor(s0), "singer", tmp_path / "again")
    assert again[-1].sample.to_dict() == out0[-1].sample.to_dict()
    assert _master(ctx2.work_dir / path.name) == _master(path)
    # the pipeline's seeded rng: same seed, same outcomes
    ctx3 = GenContext(work_dir=tmp_path / "seeded" / "databases")
    runs = [[o.sample.to_dict() if isinstance(o, Accepted) else (o.stage, o.reason)
             for o in MissingSchemaRecipe().run(_anchor(spider["spider-dev-308"]), random.Random(7), ctx3)]
            for _ in range(2)]
    assert runs[0] == runs[1]


# ------------------------------------------------------------------------------- every check can reject
def _db(tmp_path, ddl: list[str], rows: list[str] = ()) -> Path:
    p = tmp_path / "src.sqlite"
    con = sqlite3.connect(p)
    for s in [*ddl, *rows]:
        con.execute(s)
    con.commit()
    con.close()
    return p


def _synthetic(tmp_path, db, gold) -> Anchor:
    return Anchor("a1", "toy", str(db), "What are the values?", gold)


def test_element_chosen_rejects(tmp_path):
    db = _db(tmp_path, ["CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)"], ["INSERT INTO t VALUES (1, 'a')"])
    out, _ = _run(_synthetic(tmp_path, db, "SELECT 1"), "", tmp_path)
    assert [(o.stage, o.reason) for o in out] == [("element_chosen", "the gold reads no eligible column or table")]
    out, _ = _run(_synthetic(tmp_path, db, "SELEC x FRM t"), "", tmp_path)
    assert out[0].stage == "element_chosen" and out[0].reason.startswith("the gold cannot be analysed")


def test_derived_built_rejects_the_only_column(tmp_path):
    db = _db(tmp_path, ["CREATE TABLE t (x TEXT)"], ["INSERT INTO t VALUES ('a')"])
    out, _ = _run(_synthetic(tmp_path, db, "SELECT x FROM t"), "t.x", tmp_path)
    assert len(out) == 1 and out[0].stage == "derived_built" and "only column" in out[0].reason
    with pytest.raises(DerivedDBError, match="no column 'nope'"):
        build_derived(db, Removal("t", "nope"), tmp_path / "w", "toy")


def test_gold_fails_on_derived_rejects_a_gold_that_still_runs(tmp_path):
    # SQLite reads a double-quoted name that is no column as a string: the gold still runs without x
    db = _db(tmp_path, ["CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)"], ["INSERT INTO t VALUES (1, 'a')"])
    out, _ = _run(_synthetic(tmp_path, db, 'SELECT "x" FROM t'), "t.x", tmp_path)
    assert [(o.stage, o.reason) for o in out] == [("gold_fails_on_derived", "the gold still runs without t.x")]


def test_no_substitute_rejects_a_same_named_column(tmp_path):
    db = _db(tmp_path, ["CREATE TABLE t (id INTEGER PRIMARY KEY, age INT, Ages INT)"],
             ["INSERT INTO t VALUES (1, 30, 31)"])
    out, _ = _run(_synthetic(tmp_path, db, "SELECT age FROM t"), "t.age", tmp_path)
    assert [(o.stage, o.reason) for o in out] == [("no_substitute", "column t.Ages has the removed column's name")]


def test_original_nonempty_rejects_an_empty_gold_and_stops(tmp_path):
    db = _db(tmp_path, ["CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT, y TEXT)", "CREATE TABLE u (z TEXT)"],
             ["INSERT INTO t VALUES (1, 'a', 'b')"])
    out, _ = _run(_synthetic(tmp_path, db, "SELECT x FROM t WHERE y = 'nothing'"), "t.x", tmp_path)
    # t.x fails here; no other element is tried, since the same gold is empty for every one of them
    assert [(o.stage, o.reason) for o in out] == [("original_nonempty", "the gold returns no rows on the source")]


def test_hidden_knowledge_judged_rejects(tmp_path, monkeypatch):
    db = _db(tmp_path, ["CREATE TABLE t (id INTEGER PRIMARY KEY, colour TEXT)"], ["INSERT INTO t VALUES (1, 'red')"])
    monkeypatch.setitem(ms.TEMPLATES, "attribute", ("Sorry, I cannot help with that.",))
    out, _ = _run(_synthetic(tmp_path, db, "SELECT colour FROM t"), "t.colour", tmp_path, max_tries="1")
    assert [o.stage for o in out] == ["hidden_knowledge_judged"]
    monkeypatch.undo()
    out, _ = _run(_synthetic(tmp_path, db, "SELECT colour FROM t"), "t.colour", tmp_path)
    assert isinstance(out[-1], Accepted)
    assert out[-1].sample.hidden_knowledge == ("The t table has no colour column. The question needs the colour column "
                                               "to show the colour of ts. Its colour values were such as red.")


def test_max_tries_option(tmp_path):
    db = _db(tmp_path, ["CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)"], ["INSERT INTO t VALUES (1, 'a')"])
    with pytest.raises(ValueError, match="max_tries"):
        _run(_synthetic(tmp_path, db, "SELECT x FROM t"), "t.x", tmp_path, max_tries="0")


# ---------------------------------------------------------------------------------- the derived database
def test_drop_element_from_create_cuts_only_what_names_it():
    sql = ("CREATE TABLE `emp` (\n  `id` int NOT NULL,\n  `boss` int REFERENCES `emp` (`id`),\n"
           "  `dept` int,\n  `pay` real CHECK (pay > 0),\n  PRIMARY KEY (`id`, `dept`),\n"
           "  CONSTRAINT fk FOREIGN KEY (`dept`) REFERENCES `dept` (`id`)\n)")
    new, changed = drop_element_from_create(sql, "emp", Removal("emp", "dept"))
    assert changed and new == ("CREATE TABLE `emp` (\n  `id` int NOT NULL,\n  `boss` int REFERENCES `emp` (`id`),"
                               "\n  `pay` real CHECK (pay > 0)\n)")
    new, _ = drop_element_from_create(sql, "emp", Removal("emp", "id"))  # the self-reference goes too
    assert new == ("CREATE TABLE `emp` (\n  `boss` int,\n  `dept` int,\n  `pay` real CHECK (pay > 0),\n"
                   "  CONSTRAINT fk FOREIGN KEY (`dept`) REFERENCES `dept` (`id`)\n)")
    new, _ = drop_element_from_create(sql, "emp", Removal("dept"))  # another table removed: only its foreign key
    assert new == ("CREATE TABLE `emp` (\n  `id` int NOT NULL,\n  `boss` int REFERENCES `emp` (`id`),\n"
                   "  `dept` int,\n  `pay` real CHECK (pay > 0),\n  PRIMARY KEY (`id`, `dept`)\n)")
    assert drop_element_from_create(sql, "emp", Removal("other", "x")) == (sql, False)


def test_build_drops_dependents_and_keeps_the_source(tmp_path):
    db = _db(tmp_path, ["CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT, y TEXT)",
                        "CREATE INDEX ix ON t (x)", "CREATE INDEX iy ON t (y)",
                        "CREATE VIEW vx AS SELECT id, x FROM t", "CREATE VIEW vy AS SELECT id, y FROM t",
                        "CREATE TABLE log (msg TEXT)",
                        "CREATE TRIGGER tr AFTER UPDATE OF x ON t BEGIN INSERT INTO log VALUES (new.x); END"],
             ["INSERT INTO t VALUES (1, 'a', 'b')", "INSERT INTO t VALUES (2, 'c', 'd')"])
    before = _sha(db)
    path = build_derived(db, Removal("t", "x"), tmp_path / "w", "toy")
    assert _sha(db) == before
    assert path.name == derived_name("toy", Removal("t", "x")) == "toy__no_t_x.sqlite"
    assert sorted(_master(path)) == ["iy", "log", "t", "vy"]
    assert _columns(path, "t") == ["id", "y"]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert con.execute("SELECT * FROM vy ORDER BY id").fetchall() == [(1, "b"), (2, "d")]
    assert con.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    con.close()
    assert derived_name("my db", Removal("t", "a b")).startswith("my_db__no_t_a_b_")  # names made safe, kept apart


# ---------------------------------------------------------------- a Spider-dev-wide run, then the env
#: rationales of the fixture's run that the env's judge refuses as the oracle's feedback under the stock table
#: of the run (the pipeline moves them out; measured: table removals whose only own word recurs in other
#: databases' rationales, "It held the name, level of membership and age of visitors")
FIXTURE_ORACLE_FB_FAILS = 6
@pytest.fixture(scope="module")
def generated(spider, tmp_path_factory):
    """One seeded run of the recipe over every Spider dev anchor (the count target of ``docs/generation.md``)."""
    out_dir = tmp_path_factory.mktemp("ms_out")
    ctx = GenContext(work_dir=out_dir / "databases")
    rec = MissingSchemaRecipe()
    shas = {p: _sha(p) for p in {s.db_path for s in spider.values()}}
    outcomes = []
    for s in spider.values():
        outcomes.extend(rec.run(_anchor(s), random.Random(f"0-missing_schema-{s.id}"), ctx))
    return out_dir, outcomes, shas


def test_spider_dev_yields_at_least_500_samples(spider, generated):
    out_dir, outcomes, shas = generated
    acc = [o for o in outcomes if isinstance(o, Accepted)]
    assert len(acc) >= 500  # the generation target; measured 904 of 1,034 anchors
    assert len({o.sample.id for o in acc}) == len(acc) == len({o.paired.id for o in acc})
    assert {o.sample.subcategory for o in acc} == {"missing_entities_or_attributes", "missing_relationship"}
    assert {o.stage for o in outcomes if isinstance(o, Rejected)} <= set(MissingSchemaRecipe.stages)
    assert all(_sha(p) == h for p, h in shas.items())  # no source database changed by a byte


def test_env_oracle_fb_and_schema_view(generated, tmp_path):
    import gymnasium as gym

    import textsql_clarify  # noqa: F401  (registers the env)
    from textsql_clarify.baselines.agents import OracleAgent
    from textsql_clarify.rollout.evaluation import evaluate
    from textsql_clarify.rewards.feedback import LexicalFeedbackJudge
    from textsql_clarify.samples import load_jsonl, write_jsonl

    out_dir, outcomes, _ = generated
    acc = [o for o in outcomes if isinstance(o, Accepted)]
    pick = {}
    for o in acc:  # one of each role
        pick.setdefault(o.sample.provenance["removed"]["role"], o)
    assert set(pick) == {"table", "attribute", "join_key", "bridge_table"}
    rows = [x for o in pick.values() for x in (o.sample, o.paired)]
    write_jsonl(rows, out_dir / "gen.jsonl")
    loaded = load_jsonl(out_dir / "gen.jsonl")  # relative db_path resolves in the output folder
    judge = LexicalFeedbackJudge()  # the MiniLM judge's rule, without loading it (same verdict on the oracle's text)
    trajs, metrics = evaluate(loaded, OracleAgent(), progress=False, feedback_judge=judge)
    assert [t.scores["fb"] for t in trajs if t.group == "unanswerable"] == [1.0] * 4
    assert [t.scores["ex"] for t in trajs if t.group == "answerable"] == [1.0] * 4
    env = gym.make("TextSQLClarify-v0", samples=loaded, feedback_judge=judge)
    from textsql_clarify.sql.schema import read_schema

    for s in loaded:
        if s.group != "unanswerable":
            continue
        obs, _ = env.reset(options={"sample_id": s.id})
        removed = s.provenance["removed"]
        schema = read_schema(s.db_path)
        if removed["column"] is None:
            assert removed["table"].lower() not in schema
            assert f"CREATE TABLE `{removed['table']}`" not in obs["schema"]
        else:
            assert removed["column"].lower() not in schema[removed["table"].lower()]
            assert f"`{removed['column']}`" not in obs["schema"].split(f"CREATE TABLE `{removed['table']}`")[1] \
                .split(";")[0]
    env.close()


def test_comments_of_a_removed_column_go_with_it(tmp_path):
    from textsql_clarify.datasets import embedded_db_path

    src = embedded_db_path()
    before = _sha(src)
    # residence_city is a plain column (SQLite drops it); dept_id is a foreign key (the table is rebuilt)
    for col, gone, kept in (("residence_city", "lives during term", "city of the family home"),
                            ("dept_id", "REFERENCES departments", "lives during term")):
        path = build_derived(src, Removal("students", col), tmp_path / "w", "university")
        sql = _master(path)["students"]
        assert gone not in sql and kept in sql and col not in _columns(path, "students")
    assert _sha(src) == before


# ------------------------------------------------- a fresh reader's defects (docs/generation.md "Quality")
def _tables_in_order(path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    finally:
        con.close()


@pytest.mark.parametrize("removal", [Removal("Degree_Programs"), Removal("Student_Enrolment", "degree_program_id")])
def test_rebuilt_tables_keep_the_source_table_order(spider, tmp_path, removal):
    # rate50 sample 15 (spider-dev-575): Student_Enrolment, rebuilt without its foreign key to the removed
    # Degree_Programs, came last in the schema listing and told what was removed
    src = spider["spider-dev-575"].db_path
    before = _sha(src)
    order = _tables_in_order(src)
    assert order.index("Student_Enrolment") < len(order) - 1  # it is not last in the source
    path = build_derived(src, removal, tmp_path, "student_transcripts_tracking")
    assert "Degree_Programs" not in _master(path)["Student_Enrolment"]  # rebuilt without the foreign key
    expected = [t for t in order if removal.column is not None or t != removal.table]
    assert _tables_in_order(path) == expected
    con_s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    con_d = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for t in expected:  # every table kept its rows through the rebuilds
        q = f'SELECT count(*) FROM "{t}"'
        assert con_d.execute(q).fetchone() == con_s.execute(q).fetchone(), t
    con_s.close()
    con_d.close()
    assert _sha(src) == before


def test_hidden_knowledge_of_a_participle_column(spider):
    # rate50 sample 21 (spider-dev-494, death.killed): "does not cover the killed of deaths"
    schema = source_schema(spider["spider-dev-494"].db_path)
    el = ms.Element(Removal("death", "killed"), "missing_entities_or_attributes", "attribute")
    assert ms.hidden_knowledge_options(el, schema) == [
        "The death table has no killed column. The question needs the killed column to read the number killed of "
        "deaths.",
        "There is no killed column in the death table, yet the question needs it to read the number killed of deaths."]
    schema = source_schema(spider["spider-dev-857"].db_path)
    el = ms.Element(Removal("orchestra", "Year_of_Founded"), "missing_entities_or_attributes", "attribute")
    assert ms.hidden_knowledge_options(el, schema)[0] == (
        "The orchestra table has no year of founded column. The question needs the year of founded column to read "
        "the year founded of orchestras.")


# ------------------------------------------------- rationales with content (no stock sentence, FB of constants)
def test_no_sentence_is_shared_by_rationales_of_different_elements(generated):
    # a sentence may recur only where two questions remove the same element of the same database; the old
    # templates' tail "that part of the data is not kept at all." was shared by 480 table removals
    import re

    _out_dir, outcomes, _ = generated
    owners: dict[str, set] = {}
    for o in outcomes:
        if isinstance(o, Accepted):
            for sent in re.split(r"(?<=[.!?:])\s+", o.sample.hidden_knowledge):
                rm = o.sample.provenance["removed"]  # one element: its table and column names, any database
                owners.setdefault(sent.strip(), set()).add((rm["table"].lower(), (rm["column"] or "").lower()))
    shared = {s: ids for s, ids in owners.items() if len(ids) > 1}
    assert len(owners) > 900
    assert shared == {}


def test_constant_refusals_earn_no_fb_on_generated_samples(generated):
    # the stock tail of the old rationales, a column, a link: each said by a policy that reads nothing
    from textsql_clarify.rewards.feedback import LexicalFeedbackJudge
    from textsql_clarify.sql.schema import read_schema

    out_dir, outcomes, _ = generated
    acc = [o for o in outcomes if isinstance(o, Accepted)]
    samples = [dataclasses.replace(o.sample, db_path=str(out_dir / o.sample.db_path)) for o in acc]
    judge = LexicalFeedbackJudge()
    table = judge.use_corpus(samples)
    assert table.documents == 20 and table.limit == 3.0  # the Spider dev databases the rationales are about
    consts = ["That part of the data is not kept at all.", "There is no name column.",
              "There is no link between the tables."]
    wins = {c: 0 for c in consts}
    oracle = 0
    for s in samples:
        sch = read_schema(s.db_path)
        ids = list(sch) + [c for cols in sch.values() for c in cols]
        for c in consts:
            wins[c] += judge.judge(s, c, ids)
        oracle += judge.judge(s, s.hidden_knowledge, ids)
    assert wins == {c: 0 for c in consts}
    # measured 898 of 904: 6 table removals whose only own words recur in other databases' rationales (the
    # pipeline's oracle_fb check moves them out, test below)
    assert (len(samples) - oracle, len(samples)) == (FIXTURE_ORACLE_FB_FAILS, 904)


def test_the_corpus_check_leaves_no_rationale_the_envs_judge_refuses_the_oracle(generated):
    # the recipe judges one rationale at a time with its templates' words stripped; the env strips the phrases
    # that recur across the whole file, which the pipeline's oracle_fb check applies once the file is assembled
    from textsql_clarify.generation.oracle_fb import oracle_fb_failures, schema_identifiers
    from textsql_clarify.rewards.feedback import corpus_stock, own_rationale_verdict

    out_dir, outcomes, _ = generated
    acc = [o for o in outcomes if isinstance(o, Accepted)]
    samples = [dataclasses.replace(o.sample, db_path=str(out_dir / o.sample.db_path)) for o in acc]
    fails = oracle_fb_failures(samples)
    roles = {s.id: s.provenance["removed"]["role"] for s in samples}
    assert (len(fails), {roles[k] for k in fails}) == (FIXTURE_ORACLE_FB_FAILS, {"table"}), sorted(fails)
    assert all(why.startswith("oracle_fb: ") for why in fails.values())
    left = [s for s in samples if s.id not in fails]
    table = corpus_stock(left)  # the table the env computes on what is written
    assert [s.id for s in left if not own_rationale_verdict(s, schema_identifiers(s.db_path), table).correct] == []


def test_oracle_fb_failures_on_a_hand_made_corpus_skip_fake_council_samples():
    # five databases share a tail; a rationale made only of the tail and schema words is refused, the others
    # pass; the same rationale written by the fake council is not judged (a placeholder, not a rationale)
    from textsql_clarify.datasets import embedded_db_path
    from textsql_clarify.generation.oracle_fb import oracle_fb_failures
    from textsql_clarify.samples import Sample

    tail = "the registry office keeps this on paper only."
    own = ["Handedness was never surveyed", "Vehicle registrations are held by the city",
           "Animal licences are issued by the province", "Travel bookings go through an agency",
           "Club memberships are kept by each club"]
    rows = [Sample(id=f"s{k}", db_id=f"db{k}", db_path=embedded_db_path(), question="Which students play tennis?",
                   group="unanswerable", subcategory="missing_external_knowledge", gold_sql=None,
                   hidden_knowledge=f"{h}: {tail}", provenance={"recipe": "missing_schema"}) for k, h in enumerate(own)]
    bare = dataclasses.replace(rows[0], id="bare", hidden_knowledge="Professors: " + tail)
    fails = oracle_fb_failures(rows + [bare])
    assert list(fails) == ["bare"] and fails["bare"].startswith("oracle_fb: ")
    fake = dataclasses.replace(bare, id="fake", provenance={"recipe": "premise", "models": ["fake", "fake#2"]})
    assert list(oracle_fb_failures(rows + [fake])) == []
    assert list(oracle_fb_failures(rows + [fake], checked=["fake"])) == ["fake"]
