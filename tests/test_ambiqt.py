"""The AmbiQT loader (``ambiqt:<dir>:<spider root>``) and its database rebuild.

Real data: ``../shared/data/ambiqt`` (tbl-agg train 426 / validation 101, tbl-split validation 288) over
``../shared/data/spider_dev`` (the 20 dev databases). Synthetic: a two-table Spider-like root built in
``tmp_path`` for the kinds that are not in ``../shared/data`` (column and table synonyms) and for bad
records. Every test sets ``TEXTSQL_CLARIFY_CACHE`` to a temporary folder.
"""
from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.ambiqt import OTHER_SUFFIX, READING_SEED, check_golds, gold_reading, hidden_knowledge, load_ambiqt
from textsql_clarify.datasets.ambiqt_rebuild import (RebuildError, build_database, parse_schema_text, plan_rebuild,
                                                     read_schema, rebuilt_schema)
from textsql_clarify.errors import DatasetError

AMBIQT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ambiqt"
SPIDER_DEV = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "spider_dev"
#: the flags a loader check sets (the load-time validator adds duplicate_gold on top)
LOADER_FLAGS = {"indistinguishable", "gold_empty", "gold_error", "gold_timeout", "interpretation_error"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """One real load into a fresh cache: (samples, report, cache folder, source hashes before).

    Each test that uses it also asks for ``shared_data``, which marks it ``realdata``."""
    if not (AMBIQT / "tbl-split" / "validation.json").is_file() or not (SPIDER_DEV / "database").is_dir():
        pytest.skip("real data absent: ../shared/data/ambiqt or ../shared/data/spider_dev not found")
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("TEXTSQL_CLARIFY_CACHE", str(cache))
    sources = {p: _sha(p) for p in sorted((SPIDER_DEV / "database").glob("*/*.sqlite"))}
    try:
        samples, report = load_ambiqt(AMBIQT, SPIDER_DEV)
        yield samples, report, cache, sources
    finally:
        mp.undo()


def _by_id(samples):
    return {s.id: s for s in samples}


# -- schema text -----------------------------------------------------------------------------------
def test_parse_schema_text_skips_values_with_brackets_and_bars():
    text = ('car_names : make ("amc (hornet)", "a | b"), model ("volvo") | cars_data : id (1, 2), '
            'official_ratings_(millions) (5.2)')
    assert parse_schema_text(text) == [("car_names", ["make", "model"]), ("cars_data", ["id", "official_ratings_"])]
    for broken, why in [("t : a (1, 2", "unclosed"), ("t a, b", "not 'table : columns'"),
                        ("t : a | t : b", "appears twice"), ("t : a-b (1)", "plain identifier")]:
        with pytest.raises(ValueError, match=why.replace("(", r"\(")):
            parse_schema_text(broken)


def test_schema_without_content_is_broken_where_with_content_parses(shared_data, loaded):
    """Why the loader reads schema_with_content: AmbiQT cut schema_without_content at the first ')'."""
    item = json.loads((AMBIQT / "tbl-agg" / "validation.json").read_text())[13]
    tables = dict(parse_schema_text(item["schema_with_content"]))
    assert tables["car_names"] == ["make", "model", "makeid"]
    assert 'make "' in item["schema_without_content"]


# -- counts on the real files ------------------------------------------------------------------------
def test_counts_per_file(shared_data, loaded):
    samples, report, _cache, _ = loaded
    train, agg, split = (report.files[k] for k in ("tbl-agg/train.json", "tbl-agg/validation.json",
                                                    "tbl-split/validation.json"))
    # tbl-agg/train is over Spider's train databases only: every item skipped, counted, not an error
    assert (train.records, train.loaded, sum(train.skipped_no_database.values())) == (426, 0, 426)
    assert len(train.skipped_no_database) == 100
    assert train.skipped_no_database.most_common(2) == [("manufactory_1", 22), ("loan_1", 18)]
    assert (agg.records, agg.loaded, sum(agg.skipped_no_database.values())) == (101, 101, 0)
    assert (split.records, split.loaded, sum(split.skipped_no_database.values())) == (288, 288, 0)
    assert len(samples) == 389
    assert Counter(s.provenance["split"] for s in samples) == {"tbl-agg": 101, "tbl-split": 288}
    dbs = {s.db_id for s in samples}
    assert len(dbs) == 19 and sorted({p.name for p in (SPIDER_DEV / "database").iterdir()} - dbs) == [
        "real_estate_properties"]  # AmbiQT has no item over it


def test_flagged_by_reason(shared_data, loaded):
    samples, report, _cache, _ = loaded
    agg, split = report.files["tbl-agg/validation.json"], report.files["tbl-split/validation.json"]
    # an aggregate computed from the rows equals the aggregate: most readings cannot be told apart by EX
    assert dict(agg.flagged) == {"indistinguishable": 83, "gold_empty": 14}
    assert agg.distinguishable == 18
    assert dict(split.flagged) == {"indistinguishable": 284, "gold_empty": 24}
    assert split.distinguishable == 4
    # no gold fails on the rebuilt databases: every query2 column exists there
    assert not any({"gold_error", "interpretation_error", "gold_timeout"} & set(s.flags) for s in samples)
    # gold_empty items (wta_1 has no rows, ...) also return the same (empty) result both ways
    assert all("indistinguishable" in s.flags for s in samples if "gold_empty" in s.flags)
    dist = sorted(s.id for s in samples if not s.flags)
    assert dist[-4:] == [f"ambiqt-tbl-split-validation-{i}" for i in (234, 235, 236, 237)]
    assert "ambiqt-tbl-agg-validation-14" in dist and "ambiqt-tbl-agg-validation-0" not in dist


def test_sample_mapping(shared_data, loaded):
    samples, _report, _cache, _ = loaded
    s = _by_id(samples)["ambiqt-tbl-agg-validation-0"]
    assert s.question == "What is the average, minimum, and maximum age of all singers from France?"
    assert (s.group, s.subcategory, s.difficulty) == ("ambiguous", "lexical_overlap", "medium")
    assert s.gold_sql == "select avg(age), min(age), max(age) from singer where country = 'France'"
    assert [i.gold_sql for i in s.interpretations] == [
        "select avg_age, min_age, max_age from singer_age where country = 'France'"]
    assert s.hidden_knowledge == ("I want the average age, minimum age and maximum age computed from the individual "
                                  "singer records themselves, not read from the precomputed singer age summary table.")
    assert s.interpretations[0].hidden_knowledge.startswith("I want the average age, minimum age and maximum age read "
                                                            "from the precomputed singer age summary table")
    p = s.provenance
    assert (p["source"], p["split"], p["file"], p["index"]) == ("ambiqt", "tbl-agg", "tbl-agg/validation.json", 0)
    assert p["rebuilt_db"] == Path(s.db_path).name and p["schema_additions"] == ["singer_age.country"]
    t = _by_id(samples)["ambiqt-tbl-split-validation-0"]
    assert t.hidden_knowledge == ("I mean the country stored in the singer table itself, not the copy in the separate "
                                  "singer country table.")
    assert "linked to each singer by its singer id" in t.interpretations[0].hidden_knowledge
    # a sample whose draw made AmbiQT's reading the gold: the user means the summary table
    u = _by_id(samples)["ambiqt-tbl-agg-validation-15"]
    assert u.provenance["gold_reading"] == "query2" and not u.flags
    assert u.gold_sql == "select avg_horsepower from cars_data_horsepower where year < 1980"
    assert u.hidden_knowledge == ("I want the average horsepower read from the precomputed cars data horsepower "
                                  "summary table, not recomputed from the individual cars data records.")
    assert [(i.gold_sql, i.description) for i in u.interpretations] == [
        ("select avg(horsepower) from cars_data where year < 1980", "computed from the individual cars data records")]
    assert Counter(x.difficulty for x in samples) == {"medium": 341, "easy": 34, "hard": 12, "extra": 2}
    # every hidden knowledge is a stand-alone sentence, never a bare reply
    assert all(x.hidden_knowledge.startswith("I ") and x.hidden_knowledge.endswith(".") and
               len(x.hidden_knowledge.split()) > 8 for x in samples)


# -- the rebuilt databases ------------------------------------------------------------------------------
def test_rebuilt_aggregate_table(shared_data, loaded):
    samples, _report, cache, _ = loaded
    s = _by_id(samples)["ambiqt-tbl-agg-validation-0"]
    assert Path(s.db_path).parent == cache / "ambiqt"
    schema = rebuilt_schema(s.db_path)
    assert schema["singer_age"] == ("country", "sum_age", "avg_age", "min_age", "max_age")
    assert set(schema) == {"stadium", "singer", "concert", "singer_in_concert", "singer_age"}
    con = sqlite3.connect(Path(s.db_path).as_uri() + "?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT country, sum_age, avg_age, min_age, max_age FROM singer_age ORDER BY country").fetchall()
        live = con.execute("SELECT country, sum(age), avg(age), min(age), max(age) FROM singer GROUP BY country "
                           "ORDER BY country").fetchall()
    finally:
        con.close()
    assert rows == live == [("France", 138, 34.5, 25, 43), ("Netherlands", 52, 52.0, 52, 52),
                            ("United States", 32, 32.0, 32, 32)]
    flags, note = check_golds(s.db_path, s.gold_sql, s.interpretations[0].gold_sql)
    assert flags == ["indistinguishable"] and "match" in note


def test_rebuilt_split_table_and_both_golds_run(shared_data, loaded):
    samples, _report, _cache, _ = loaded
    s = _by_id(samples)["ambiqt-tbl-split-validation-0"]
    con = sqlite3.connect(Path(s.db_path).as_uri() + "?mode=ro", uri=True)
    try:
        ddl = con.execute("SELECT sql FROM sqlite_master WHERE name = 'singer_country'").fetchone()[0]
        rows = con.execute("SELECT * FROM singer_country ORDER BY singer_id").fetchall()
        singer = con.execute("SELECT singer_id, country FROM singer ORDER BY singer_id").fetchall()
        r1 = con.execute(s.gold_sql).fetchall()
        r2 = con.execute(s.interpretations[0].gold_sql).fetchall()
    finally:
        con.close()
    assert 'FOREIGN KEY ("singer_id") REFERENCES "singer"' in ddl
    assert rows == singer and len(rows) == 6 and rows[0] == (1, "Netherlands")
    assert len(r1) == 6 and sorted(r1) == sorted(r2)  # a 1:1 split: the join returns the same rows


def test_distinguishable_split_is_a_non_unique_key(shared_data, loaded):
    """countrylanguage's key is (countrycode, language); AmbiQT joins on countrycode alone."""
    samples, _report, _cache, _ = loaded
    s = _by_id(samples)["ambiqt-tbl-split-validation-234"]
    assert not s.flags and s.provenance["gold_check"].startswith("results differ (mismatch)")
    assert s.provenance["gold_reading"] == "query1"
    assert "join countrylanguage_language as t2 on t1.countrycode = t2.countrycode" in s.interpretations[0].gold_sql


def test_wta_1_drops_the_table_the_schema_lacks(shared_data, loaded):
    samples, _report, _cache, _ = loaded
    s = _by_id(samples)["ambiqt-tbl-agg-validation-30"]
    assert s.provenance["dropped_tables"] == ["qualifying_matches"]
    assert "qualifying_matches" not in rebuilt_schema(s.db_path)
    assert s.flags == ("gold_empty", "indistinguishable")  # wta_1 has its schema but no rows here


def test_sources_unchanged_and_cache_reused(shared_data, loaded, monkeypatch):
    samples, report, cache, before = loaded
    assert report.built == 160 and report.reused == 0
    assert len({s.db_path for s in samples}) == 160
    assert {p: _sha(p) for p in before} == before  # no Spider file written
    assert not list((cache / "ambiqt").glob("*.tmp")) and not list((cache / "ambiqt").glob(".*"))
    mtimes = {p: p.stat().st_mtime_ns for p in (cache / "ambiqt").glob("*.sqlite")}
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(cache))
    again, report2 = load_ambiqt(AMBIQT, SPIDER_DEV)
    assert (report2.built, report2.reused) == (0, 160)
    assert [s.db_path for s in again] == [s.db_path for s in samples]
    assert {p: p.stat().st_mtime_ns for p in (cache / "ambiqt").glob("*.sqlite")} == mtimes
    assert [s.flags for s in again] == [s.flags for s in samples]
    # the gold reading is drawn from the id and the seed alone: the same on every load
    assert [(s.gold_sql, s.hidden_knowledge) for s in again] == [(s.gold_sql, s.hidden_knowledge) for s in samples]


# -- which reading is the gold --------------------------------------------------------------------------
def _schema_only_choice(s) -> str | None:
    """The reading a schema-only chooser picks: the one naming no table AmbiQT added (no ``<agg>_<col>``
    summary table, no split table); None when not exactly one reading is such."""
    added = {t.lower() for t in s.provenance["constructions"]}
    readings = [s.gold_sql] + [i.gold_sql for i in s.interpretations]
    plain = [q for q in readings if not set(re.findall(r"[a-z_0-9]+", q.lower())) & added]
    return plain[0] if len(plain) == 1 else None


def test_gold_reading_is_drawn_so_a_schema_only_chooser_is_at_chance(shared_data, loaded):
    samples, _report, _cache, _ = loaded
    dist = [s for s in samples if not s.flags]
    assert len(dist) == 22 and all(_schema_only_choice(s) is not None for s in samples)
    # before the draw the gold was always query1, the plain reading: the chooser scored 22/22 = 1.000
    plain_is_query1 = [_schema_only_choice(s) == (s.gold_sql if s.provenance["gold_reading"] == "query1"
                                                  else s.interpretations[0].gold_sql) for s in dist]
    assert all(plain_is_query1)
    # with the seeded draw (seed 0): 14/22 = 0.636 on the distinguishable items, 204/389 = 0.524 on all
    assert sum(_schema_only_choice(s) == s.gold_sql for s in dist) == 14
    assert sum(_schema_only_choice(s) == s.gold_sql for s in samples) == 204
    assert Counter(s.provenance["gold_reading"] for s in samples) == {"query1": 204, "query2": 185}
    # over seeds 0..99 (distinguishability is symmetric here, so the 22 stay the 22) the mean is 0.522, n=2,200
    per_seed = [sum(gold_reading(s.id, seed) == 1 for s in dist) for seed in range(100)]
    assert sum(per_seed) == 1149 and sum(per_seed) / 2200 == pytest.approx(0.522, abs=5e-4)


def test_gold_hidden_knowledge_and_interpretation_agree_with_the_draw(shared_data, loaded):
    samples, _report, _cache, _ = loaded
    records = {k: json.loads((AMBIQT / k).read_text())
               for k in ("tbl-agg/validation.json", "tbl-split/validation.json")}
    for s in samples:
        rec = records[s.provenance["file"]][s.provenance["index"]]
        st1, st2, d1, d2 = hidden_knowledge(rec)
        n = gold_reading(s.id, READING_SEED)
        assert s.provenance["gold_reading"] == f"query{n}" and s.provenance["reading_seed"] == READING_SEED
        gold, other = (rec["query1"], rec["query2"]) if n == 1 else (rec["query2"], rec["query1"])
        assert (s.gold_sql, s.hidden_knowledge) == (gold.strip(), st1 if n == 1 else st2)
        (it,) = s.interpretations
        assert (it.gold_sql, it.hidden_knowledge, it.description) == ((other.strip(), st2, d2) if n == 1
                                                                      else (other.strip(), st1, d1))


def test_other_draw_swaps_each_items_gold_and_interpretation(shared_data, loaded, monkeypatch):
    """``reading="other"``: every item once more with its other reading as the gold (and the user's statement of
    it), so the two loads together hold each reading as the gold exactly once per item: 389 each way, where the
    one draw gives 204 query1 to 185 query2."""
    samples, _report, cache, _ = loaded
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(cache))
    other, _ = load_ambiqt(AMBIQT, SPIDER_DEV, reading="other")
    assert [t.id for t in other] == [s.id + OTHER_SUFFIX for s in samples]
    for s, t in zip(samples, other):
        (si,), (ti,) = s.interpretations, t.interpretations
        assert (t.gold_sql, t.hidden_knowledge) == (si.gold_sql, si.hidden_knowledge)
        assert (ti.gold_sql, ti.hidden_knowledge) == (s.gold_sql, s.hidden_knowledge)
        assert {s.provenance["gold_reading"], t.provenance["gold_reading"]} == {"query1", "query2"}
        assert t.db_path == s.db_path and t.question == s.question
    both = Counter(x.provenance["gold_reading"] for x in [*samples, *other])
    assert both == {"query1": 389, "query2": 389}
    with pytest.raises(ValueError, match="reading must be"):
        load_ambiqt(AMBIQT, SPIDER_DEV, reading="both")


def test_gold_reading_depends_on_id_and_seed_only():
    assert gold_reading("ambiqt-tbl-agg-validation-0") == gold_reading("ambiqt-tbl-agg-validation-0", 0) == 1
    assert gold_reading("ambiqt-tbl-agg-validation-15") == 2
    ids = [f"ambiqt-tbl-split-validation-{i}" for i in range(400)]
    assert {gold_reading(i, 1) for i in ids} == {1, 2}
    assert [gold_reading(i, 0) for i in ids] != [gold_reading(i, 1) for i in ids]


def test_oracle_and_no_clarify_on_distinguishable(shared_data, loaded, tmp_path, monkeypatch):
    samples, _report, cache, _ = loaded
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(cache))
    via_spec = load_dataset(f"ambiqt:{AMBIQT}:{SPIDER_DEV}")  # with the load-time validator
    assert [s.id for s in via_spec] == [s.id for s in samples]
    assert all(set(s.flags) & LOADER_FLAGS == set(t.flags) for s, t in zip(via_spec, samples))
    dist = [s for s in via_spec if not set(s.flags) & LOADER_FLAGS]
    assert len(dist) == 22
    trajs, oracle = evaluate(dist, make_agent("oracle"), out_dir=tmp_path / "o", progress=False)
    _, nocl = evaluate(dist, make_agent("no-clarify"), out_dir=tmp_path / "n", progress=False)
    assert oracle["overall"]["EX"] == MeanIs(1.0, 22)
    assert nocl["overall"]["EX"] == MeanIs(0.0, 22)
    assert oracle["by_subcategory"]["lexical_overlap"]["metrics"]["EX"]["value"] == 1.0
    # the rule-based user calls every oracle clarification relevant
    labels = [t.turns[0].user_reply["label"] for t in trajs]
    assert labels == ["relevant"] * 22


def test_oracle_ex_over_every_valid_gold(shared_data, loaded):
    samples, _report, _cache, _ = loaded
    valid = [s for s in samples if not {"gold_empty", "gold_error", "gold_timeout"} & set(s.flags)]
    assert len(valid) == 351
    _, m = evaluate(valid, make_agent("oracle"), progress=False)
    # by default the metrics leave indistinguishable samples out of every mean
    assert m["overall"]["EX"] == MeanIs(1.0, 22) and m["excluded_indistinguishable"] == 329
    _, m = evaluate(valid, make_agent("oracle"), progress=False, include_indistinguishable=True)
    assert m["overall"]["EX"] == MeanIs(1.0, 351)
    _, nocl = evaluate(valid, make_agent("no-clarify"), progress=False, include_indistinguishable=True)
    assert nocl["overall"]["EX"] == MeanIs(pytest.approx(329 / 351), 351)  # only the 22 differ


# -- synthetic: the other AmbiQT kinds and bad records ----------------------------------------------------
def _spider_root(tmp_path: Path) -> Path:
    db = tmp_path / "spider" / "database" / "shop" / "shop.sqlite"
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE store (store_id INTEGER PRIMARY KEY, name TEXT, city TEXT, staff INTEGER);
        INSERT INTO store VALUES (1, 'North', 'Oslo', 4), (2, 'South', 'Rome', 9), (3, 'East', 'Oslo', 2);
        CREATE TABLE sale (sale_id INTEGER PRIMARY KEY, store_id INTEGER, amount REAL);
        INSERT INTO sale VALUES (1, 1, 10.0), (2, 1, 5.5), (3, 2, 7.0);
    """)
    con.commit()
    con.close()
    return tmp_path / "spider"


def _write(folder: Path, kind: str, records: list) -> Path:
    (folder / kind).mkdir(parents=True, exist_ok=True)
    (folder / kind / "validation.json").write_text(json.dumps(records))
    return folder


def test_column_and_table_synonyms(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    root = _spider_root(tmp_path)
    col = {"db_id": "shop", "question": "Which city is each store in?",
           "query1": "select name, town from store", "query2": "select name, location from store",
           "extra_map": {"store": {"city": ["town", "location"]}},
           "schema_with_content": 'store : store_id (1), name ("North"), town ("Oslo"), location ("Oslo"), staff (4) | '
                                  'sale : sale_id (1), store_id (1), amount (10.0)'}
    tbl = {"db_id": "shop", "question": "How many sales are there?", "query1": "select count(*) from sales",
           "query2": "select count(*) from purchases", "extra_table_map": {"sale": ["sales", "purchases"]},
           "schema_with_content": "store : store_id (1), name, city, staff | sales : sale_id, store_id, amount | "
                                  "purchases : sale_id, store_id, amount"}
    amb = _write(tmp_path / "ambiqt", "col-synonyms", [col])
    _write(amb, "tbl-synonyms", [tbl])
    samples, report = load_ambiqt(amb, root)
    assert [s.id for s in samples] == ["ambiqt-col-synonyms-validation-0", "ambiqt-tbl-synonyms-validation-0"]
    c, t = samples
    assert rebuilt_schema(c.db_path) == {"store": ("store_id", "name", "town", "staff", "location"),
                                         "sale": ("sale_id", "store_id", "amount")}
    assert set(rebuilt_schema(t.db_path)) == {"store", "sales", "purchases"}
    # synonyms hold the same values: honest copies, so EX cannot tell the readings apart
    assert c.flags == ("indistinguishable",) and t.flags == ("indistinguishable",)
    assert c.hidden_knowledge == "By city I mean the town column of the store table, not the location one."
    # the draw made query2 the gold of the table-synonym item: the user means purchases
    assert (t.gold_sql, t.provenance["gold_reading"]) == ("select count(*) from purchases", "query2")
    assert t.hidden_knowledge == "By sale I mean the purchases table, not the sales table."
    assert t.interpretations[0].hidden_knowledge == "By sale I mean the sales table, not the purchases table."
    assert (report.built, report.files["col-synonyms/validation.json"].loaded) == (2, 1)
    src = root / "database" / "shop" / "shop.sqlite"
    assert read_schema(src)["store"].columns[2] == ("city", "TEXT")  # the source keeps its column


def test_aggregate_with_grain_finer_than_the_question(tmp_path, monkeypatch):
    """A WHERE column that AmbiQT's schema left out becomes a grouping key; per-city rows differ from one total."""
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    root = _spider_root(tmp_path)
    eq = {"db_id": "shop", "question": "Total staff of the stores in Oslo?",
          "query1": "select sum(staff) from store where city = 'Oslo'",
          "query2": "select sum_staff from store_staff where city = 'Oslo'", "new_table_name": "store_staff",
          "schema_with_content": "store : store_id, name, city, staff | sale : sale_id, store_id, amount | "
                                 "store_staff : sum_staff (4), avg_staff (2), min_staff (9), max_staff (4)"}
    lt = dict(eq, question="Total staff of the stores with fewer than 5 staff?",
              query1="select sum(staff) from store where staff < 5",
              query2="select sum_staff from store_staff where staff < 5")
    join = {"db_id": "shop", "question": "Total sales per store name?",
            "query1": "select t1.name, sum(t2.amount) from store as t1 join sale as t2 on t1.store_id = t2.store_id "
                      "group by t1.name",
            "query2": "select name, sum_amount from store_sale_amount", "new_table_name": "store_sale_amount",
            "schema_with_content": "store : store_id, name, city, staff | sale : sale_id, store_id, amount | "
                                   "store_sale_amount : name, sum_amount, avg_amount, min_amount, max_amount"}
    samples, report = load_ambiqt(_write(tmp_path / "ambiqt", "tbl-agg", [eq, lt, join]), root)
    a, b, j = samples
    assert a.provenance["schema_additions"] == ["store_staff.city"]
    assert a.flags == ("indistinguishable",)  # grouped by city: the Oslo row is the Oslo total
    assert b.provenance["schema_additions"] == ["store_staff.staff"] and b.flags == ()  # one row per staff size
    assert rebuilt_schema(j.db_path)["store_sale_amount"] == ("name", "sum_amount", "avg_amount", "min_amount",
                                                             "max_amount")
    con = sqlite3.connect(j.db_path)
    try:
        assert con.execute("SELECT name, sum_amount FROM store_sale_amount ORDER BY name").fetchall() == [
            ("North", 15.5), ("South", 7.0)]
    finally:
        con.close()
    assert j.flags == ("indistinguishable",) and report.built == 3


def test_bad_records_name_file_record_and_field(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    root = _spider_root(tmp_path)
    good = {"db_id": "shop", "question": "Store names?", "query1": "select name from store",
            "query2": "select t2.name from store as t1 join store_name as t2 on t1.store_id = t2.store_id",
            "split_map": {"store": "name"}, "primary_key": {"store": "store_id"},
            "schema_with_content": "store : store_id, name, city, staff | store_name : store_id, name | "
                                   "sale : sale_id, store_id, amount"}
    records = [good, "not an object", dict(good, query2=""), dict(good, schema_with_content="store : a (1"),
               dict(good, schema_with_content=good["schema_with_content"] + " | mystery : x, y"),
               dict(good, schema_with_content="store : store_id, name, town, staff | store_name : store_id, name | "
                                              "sale : sale_id, store_id, amount"),
               dict(good, db_id="not_here")]
    amb = _write(tmp_path / "ambiqt", "tbl-split", records)
    with pytest.raises(DatasetError) as ei:
        load_ambiqt(amb, root)
    file = str(amb / "tbl-split" / "validation.json")
    got = [(p.file, p.line, p.field) for p in ei.value.problems]
    assert got == [(file, 2, "<record>"), (file, 3, "query2"), (file, 4, "schema_with_content"),
                   (file, 5, "schema_with_content"), (file, 6, "schema_with_content")]
    assert "'mystery' is not in Spider's shop" in ei.value.problems[3].message
    assert "Spider's shop.store lacks" in ei.value.problems[4].message
    assert not list((tmp_path / "cache" / "ambiqt").glob("*.tmp"))
    # the good record alone loads; the one over an absent database is skipped, not an error
    samples, report = load_ambiqt(_write(tmp_path / "ok", "tbl-split", [good, dict(good, db_id="not_here")]), root)
    assert len(samples) == 1 and samples[0].flags == ("indistinguishable",)
    assert report.files["tbl-split/validation.json"].skipped_no_database == {"not_here": 1}


def test_no_sample_and_bad_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    root = _spider_root(tmp_path)
    only_absent = _write(tmp_path / "ambiqt", "tbl-split", [{"db_id": "elsewhere", "question": "q", "query1": "select 1",
                                                             "query2": "select 2", "schema_with_content": "t : a"}])
    with pytest.raises(DatasetError, match="gives no sample: 1 items are over databases"):
        load_ambiqt(only_absent, root)
    with pytest.raises(DatasetError, match="expected 'ambiqt:<dir>:<spider root>'"):
        load_dataset("ambiqt:onlyonepart")
    with pytest.raises(DatasetError, match="Spider database folder not found"):
        load_dataset(f"ambiqt:{only_absent}:{tmp_path}")


def test_failed_build_leaves_no_file(tmp_path):
    root = _spider_root(tmp_path)
    src = root / "database" / "shop" / "shop.sqlite"
    before = _sha(src)
    item = {"query1": "select 1", "query2": "select 1", "split_map": {"store": "name"},
            "primary_key": {"store": "store_id"}}
    plan = plan_rebuild(item, [("store", ["store_id", "name", "city", "staff"]), ("store_name", ["store_id", "name"]),
                               ("sale", ["sale_id", "store_id", "amount"])], read_schema(src), "shop")
    broken = type(plan)(db_id=plan.db_id, statements=plan.statements + ("INSERT INTO nowhere VALUES (1)",),
                        tables=plan.tables)
    with pytest.raises(RebuildError, match="rebuild statement failed"):
        build_database(broken, src, tmp_path / "c")
    assert list((tmp_path / "c").iterdir()) == []
    path, built = build_database(plan, src, tmp_path / "c")
    assert built and build_database(plan, src, tmp_path / "c") == (path, False)
    assert _sha(src) == before


def test_hidden_knowledge_fallback_names_a_reading():
    first, second, desc1, desc2 = hidden_knowledge({"query1": "select 1"})
    assert first.startswith("I mean") and second != first and desc1 != desc2
