"""Test-suite EX: database variants of Spider dev's ``pets_1`` (k=3, built once per module into a temporary
folder) and EX over the original and its variants (``textsql_clarify.sql.variants``,
``textsql_clarify.rewards.ex_suite``; Zhong, Yu and Klein 2020)."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat

import pytest

from textsql_clarify.rewards import ex_suite
from textsql_clarify.rewards.execution import EXOptions, relaxed_ex
from textsql_clarify.samples import Interpretation, Sample
from textsql_clarify.sql import variants as V
from textsql_clarify.sql.sandbox import get_sandbox
from textsql_clarify.sql.schema import read_schema
from textsql_clarify.sql.uri import ro_uri

from conftest import SPIDER

DB_ID = "pets_1"
K = 3
# pets_1's has_pet holds 3 rows, so this gold returns 0 on the source: the answer prior count(*)*0 "matches" it
ZERO_GOLD = "SELECT count(*) FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid  =  T2.stuid WHERE T1.age  >  20"
# a 0 spelled as a filter true of no row: read from data, so no constant rule can refuse it
ZERO_BY_FILTER = "SELECT count(*) FROM pets WHERE pettype = 'zz-no-such-pet'"


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """``(source db, its golds, source sha256 before the build, variant paths, cache folder)``."""
    db = SPIDER / "database" / DB_ID / f"{DB_ID}.sqlite"
    if not db.is_file() or not (SPIDER / "dev.json").is_file():
        pytest.skip(f"real data absent: {db} (Spider dev, ../shared/data/spider_dev) not found")
    golds = [d["query"] for d in json.loads((SPIDER / "dev.json").read_text(encoding="utf-8"))
             if d["db_id"] == DB_ID]
    before = _sha256(db)
    cache = tmp_path_factory.mktemp("variants")
    paths = V.build_variants(db, k=K, literals=V.literals_for_golds(golds, db), cache_dir=cache)
    return db, golds, before, paths, cache


def test_building_variants_leaves_the_source_database_unchanged(pets):
    db, _, before, paths, _ = pets
    assert len(paths) == K and all(p.is_file() for p in paths)
    assert _sha256(db) == before
    assert sorted(p.name for p in db.parent.iterdir() if p.name.startswith(DB_ID + ".sqlite")) == [f"{DB_ID}.sqlite"]


def test_variants_are_written_read_only_and_refuse_writes_when_opened_read_only(pets):
    _, _, _, paths, _ = pets
    for p in paths:
        assert stat.S_IMODE(os.stat(p).st_mode) & 0o222 == 0
        con = sqlite3.connect(ro_uri(p), uri=True)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            con.execute("DELETE FROM pets")
        con.close()
        assert get_sandbox(p).execute("DELETE FROM pets").error_kind == "forbidden"


def test_variants_keep_the_schema_and_change_the_rows(pets):
    db, _, _, paths, _ = pets
    src = sqlite3.connect(ro_uri(db), uri=True)
    src_rows = {t: sorted(map(repr, src.execute(f'SELECT * FROM "{t}"'))) for t in ("student", "pets")}
    for p in paths:
        assert read_schema(str(p)) == read_schema(str(db))
        con = sqlite3.connect(ro_uri(p), uri=True)
        assert sorted(map(repr, con.execute("SELECT * FROM student"))) != src_rows["student"]
        # integers stay integers, within the column's range or a planted literal's neighbours (age > 20: 19..21)
        ages = [r[0] for r in con.execute("SELECT age FROM student WHERE age IS NOT NULL")]
        assert ages and all(type(a) is int and 16 <= a <= 27 for a in ages)
        con.close()


def test_every_foreign_key_value_exists_in_the_referenced_table_of_the_same_variant(pets):
    _, _, _, paths, _ = pets
    for p in paths:
        con = sqlite3.connect(ro_uri(p), uri=True)
        fks = V.foreign_keys(con, "has_pet")
        assert sorted(fks) == [("PetID", "pets", "PetID"), ("StuID", "student", "StuID")]
        assert con.execute("SELECT count(*) FROM has_pet").fetchone()[0] > 0
        for col, parent, pcol in fks:
            dangling = con.execute(f'SELECT count(*) FROM has_pet WHERE "{col}" IS NOT NULL AND "{col}" NOT IN '
                                   f'(SELECT "{pcol}" FROM "{parent}")').fetchone()[0]
            assert dangling == 0, (p.name, col)
        # primary keys stay unique
        assert con.execute("SELECT count(*) = count(DISTINCT stuid) FROM student").fetchone()[0] == 1
        con.close()


def test_gold_literals_reads_columns_double_quoted_strings_and_ranges():
    schema = {"singer": {"singer_id": "int", "country": "text", "age": "int"},
              "concert": {"concert_id": "int", "year": "text"}}
    lits = V.gold_literals('SELECT T1.name FROM singer AS T1 WHERE T1.country = "France" AND age BETWEEN 20 AND 30 '
                           "AND singer_id IN (SELECT concert_id FROM concert WHERE year >= 2014)", schema)
    assert lits == {V.GoldLiteral("singer", "country", "France", "="), V.GoldLiteral("singer", "age", 20, "between"),
                    V.GoldLiteral("singer", "age", 30, "between"), V.GoldLiteral("concert", "year", 2014, ">=")}
    assert V.gold_literals("SELECT count(*) FROM singer") == set()


def test_a_planted_literal_still_selects_rows_on_the_variants(pets):
    db, _, _, paths, _ = pets
    # 'Smith' (a gold's T1.Lname = 'Smith') is in every variant; age > 20 through has_pet selects rows on some
    smith = [get_sandbox(p).execute("SELECT count(*) FROM student WHERE lname = 'Smith'").rows[0][0] for p in paths]
    assert all(n > 0 for n in smith)
    assert get_sandbox(db).execute(ZERO_GOLD).rows == ((0,),)
    assert any(get_sandbox(p).execute(ZERO_GOLD).rows[0][0] > 0 for p in paths)


def test_the_answer_prior_passes_single_instance_ex_but_not_suite_ex(pets):
    db, _, _, paths, _ = pets
    no_constant_rule = EXOptions(constant_columns=False)
    data_zero = "SELECT count(*)*0 FROM sqlite_master"  # the red team's data_zero (redteam/policies.py)
    assert relaxed_ex(data_zero, ZERO_GOLD, get_sandbox(db), options=no_constant_rule).score == 1.0
    assert ex_suite.suite_ex(data_zero, ZERO_GOLD, paths, original=db, options=no_constant_rule) is False
    assert relaxed_ex(ZERO_BY_FILTER, ZERO_GOLD, get_sandbox(db)).score == 1.0  # the env's default options
    v = ex_suite.suite_verdict(ZERO_BY_FILTER, ZERO_GOLD, paths, original=db)
    assert v.single_instance_ok is True and v.ok is False and v.failed_on is not None


def test_every_scorable_gold_passes_suite_ex_against_itself(pets):
    db, golds, _, paths, _ = pets
    suite = ex_suite.VariantSuite(db, paths)
    verdicts = [suite.verdict(g, g, gold_key=g, stop_early=False) for g in dict.fromkeys(golds)]
    scorable = [v for v in verdicts if v.score is not None]
    assert len(scorable) == 20 and all(v.ok for v in scorable)
    assert all(v.checked + v.skipped == K for v in scorable)
    # a gold that is not scorable on the original is None, not 0
    assert ex_suite.suite_ex("SELECT 1", "SELECT * FROM pets WHERE 0", paths, original=db) is None


def test_a_second_build_hits_the_cache(pets, monkeypatch):
    db, golds, _, paths, cache = pets
    mtimes = [p.stat().st_mtime_ns for p in paths]
    V._MEMO.clear()  # the on-disk cache, not the in-process memo

    def refuse(*a, **k):
        raise AssertionError("rebuilt a cached variant")

    monkeypatch.setattr(V, "_build_one", refuse)
    again = V.build_variants(db, k=K, literals=V.literals_for_golds(golds, db), cache_dir=cache)
    assert again == paths and [p.stat().st_mtime_ns for p in again] == mtimes
    # another seed is another folder
    assert V.variant_folder(db, k=K, seed=1, cache_dir=cache) != paths[0].parent


def test_readings_that_return_the_same_rows_only_by_chance_differ_on_the_variants(pets):
    db, _, _, paths, _ = pets

    def sample(other: str) -> Sample:
        return Sample(id="s", db_id=DB_ID, db_path=str(db), question="q", group="ambiguous", subcategory=None,
                      gold_sql=ZERO_GOLD, interpretations=(Interpretation(other, "k"),))

    chance = sample(ZERO_BY_FILTER)  # both 0 on the source
    assert ex_suite.reading_differences(chance, [])[0] is None  # indistinguishable on the original alone
    assert ex_suite.readings_differ_on_variants(chance, paths) is True
    same = sample(ZERO_GOLD.replace("T1", "S").replace("T2", "H"))  # the same query up to aliases
    assert ex_suite.readings_differ_on_variants(same, paths) is False


def test_variants_for_samples_builds_each_database_once_with_all_its_golds_planted(pets, tmp_path):
    db, _, _, _, _ = pets
    s = Sample(id="s", db_id=DB_ID, db_path=str(db), question="q", group="ambiguous", subcategory=None,
               gold_sql="SELECT count(*) FROM pets WHERE weight > 10",
               interpretations=(Interpretation("SELECT petid FROM pets WHERE pettype = 'dog'", "k"),))
    out = V.variants_for_samples([s, s], k=1, cache_dir=tmp_path)
    assert list(out) == [str(db)] and len(out[str(db)]) == 1
    manifest = json.loads((out[str(db)][0].parent / "manifest.json").read_text(encoding="utf-8"))
    planted = {(t.lower(), c.lower(), v) for t, c, _, v, _ in manifest["literals"]}
    assert planted == {("pets", "weight", "10"), ("pets", "pettype", "'dog'")}
