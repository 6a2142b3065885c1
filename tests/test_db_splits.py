"""Database-disjoint splits (split_sample_ids by="db", split_databases) and the balanced training corpus, on the
embedded set and the real sets in ../shared/data (skipped where absent)."""
from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.integrations import splits
from textsql_clarify.integrations.corpus import balance_by_group, build_training_corpus, corpus_specs

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SPIDER = DATA / "spider_dev"
UNA = DATA / "spider_unanswerable" / "spider_no_answer.json"
MMSQL = DATA / "mmsql" / "MMSQL_test.json"
AMBIQT = DATA / "ambiqt"

needs_spider = pytest.mark.skipif(not (SPIDER / "dev.json").is_file(),
                                  reason=f"Spider dev not present at {SPIDER} (../shared/data/spider_dev)")


@pytest.fixture(scope="module")
def embedded():
    return load_dataset("embedded")


@pytest.fixture(scope="module")
def spider():
    if not (SPIDER / "dev.json").is_file():
        pytest.skip(f"Spider dev not present at {SPIDER}")
    return load_dataset(f"spider:{SPIDER}")


def _dbs(samples, ids):
    by_id = {s.id: s for s in samples}
    return {splits.database_of(by_id[i]) for i in ids}


def test_embedded_is_one_database_so_a_db_split_refuses_to_hold_out(embedded):
    assert splits.database_units(embedded) == [("university",)]
    with pytest.raises(ValueError, match="at least two databases.*university"):
        splits.split_sample_ids(embedded, heldout_fraction=0.25, by="db")
    train, held = splits.split_sample_ids(embedded, heldout_fraction=0.0, by="db")
    assert held == [] and train == [s.id for s in embedded]
    # the group split is unchanged: 3 / 6 / 3 of 12 / 24 / 12 held out
    g_train, g_held = splits.split_sample_ids(embedded, heldout_fraction=0.25, seed=0)
    assert (g_train, g_held) == splits.split_sample_ids(embedded, heldout_fraction=0.25, seed=0, by="group")
    assert splits.split_counts(embedded, g_train, g_held)["ambiguous"] == {"train": 18, "heldout": 6,
                                                                          "heldout_share": 0.25}
    with pytest.raises(ValueError, match="by must be one of"):
        splits.split_sample_ids(embedded, by="database")


def test_a_sample_without_db_id_is_named(embedded):
    bad = dataclasses.replace(embedded[3], db_id="")
    with pytest.raises(ValueError, match=repr(bad.id) + ".*no db_id"):
        splits.split_sample_ids([*embedded[:3], bad], by="db")


@needs_spider
def test_spider_dev_split_by_db_shares_no_database(spider):
    train, held = splits.split_sample_ids(spider, heldout_fraction=0.25, seed=0, by="db")
    assert not set(train) & set(held) and len(train) + len(held) == 1034
    train_dbs, held_dbs = splits.split_databases(spider, heldout_fraction=0.25, seed=0)
    assert (set(train_dbs), set(held_dbs)) == (_dbs(spider, train), _dbs(spider, held))
    assert not set(train_dbs) & set(held_dbs) and len(train_dbs) + len(held_dbs) == 20
    # seed 0: 4 of the 20 databases, 265 of 1,034 samples (target 258.5)
    assert held_dbs == ["concert_singer", "dog_kennels", "museum_visit", "world_1"] and len(held) == 265
    assert splits.split_sample_ids(spider, heldout_fraction=0.25, seed=0, by="db") == (train, held)
    other = splits.split_databases(spider, heldout_fraction=0.25, seed=1)[1]
    assert other != held_dbs
    # the held-out share of the samples stays near the fraction over seeds
    for seed in range(5):
        n = len(splits.split_sample_ids(spider, heldout_fraction=0.25, seed=seed, by="db")[1])
        assert 0.2 <= n / 1034 <= 0.3, (seed, n)
    # a group split of the same samples does share databases (what by="db" exists for)
    g_train, g_held = splits.split_sample_ids(spider, heldout_fraction=0.25, seed=0)
    assert _dbs(spider, g_train) & _dbs(spider, g_held)
    assert splits.split_databases(spider, ids=(g_train, g_held))[1] == sorted(_dbs(spider, g_held))


@needs_spider
def test_a_missing_schema_pair_and_a_cross_database_pair_stay_together(spider):
    by_db = {}
    for s in spider:
        by_db.setdefault(s.db_id, []).append(s)
    orig = by_db["concert_singer"][0]
    # as generation/pipeline.py writes them: the flawed sample on a derived copy, the original on the source
    flawed = dataclasses.replace(orig, id="missing_schema-x-drop", db_id="concert_singer__drop_singer_age",
                                 group="unanswerable", gold_sql=None, subcategory=None,
                                 provenance={"source": "generated", "source_db_id": "concert_singer",
                                             "paired_original": "missing_schema-x-orig"})
    original = dataclasses.replace(orig, id="missing_schema-x-orig",
                                   provenance={"source": "generated", "paired_with": flawed.id})
    # a hand-written pair across two databases merges them into one unit
    a = dataclasses.replace(by_db["pets_1"][0], id="hand-a", provenance={"source": "hand", "original_id": "hand-b"})
    b = dataclasses.replace(by_db["flight_2"][0], id="hand-b", provenance={"source": "hand"})
    samples = [*spider, flawed, original, a, b]
    units = splits.database_units(samples)
    assert ("flight_2", "pets_1") in units and len(units) == 19
    for seed in range(6):
        train, held = splits.split_sample_ids(samples, seed=seed, by="db")
        side = {i: "h" for i in held} | {i: "t" for i in train}
        assert side[flawed.id] == side[original.id] == side[orig.id]
        assert side["hand-a"] == side["hand-b"]
        assert not _dbs(samples, train) & _dbs(samples, held)


@pytest.mark.skipif(not (MMSQL.is_file() and AMBIQT.is_dir() and (SPIDER / "dev.json").is_file()),
                    reason="MMSQL, AmbiQT or Spider dev absent from ../shared/data")
def test_mmsql_dialogues_and_ambiqt_items_land_with_their_spider_database(spider):
    with pytest.warns(Warning):
        mm = load_dataset(f"mmsql:{MMSQL}:{SPIDER}")
    with pytest.warns(Warning):
        aq = load_dataset(f"ambiqt:{AMBIQT}:{SPIDER}")
    samples = [*spider, *mm, *aq]
    train, held = splits.split_sample_ids(samples, heldout_fraction=0.25, seed=0, by="db")
    held_set = set(held)
    sides: dict = {}
    for s in mm:
        sides.setdefault(s.provenance["dialogue"], set()).add(s.id in held_set)
    assert len(sides) == 149 and all(len(v) == 1 for v in sides.values())
    # AmbiQT names the Spider database (its rebuilt file has another path): one database, one side
    assert {s.provenance["spider_db"] for s in aq} == {s.db_id for s in aq}
    assert not _dbs(samples, train) & _dbs(samples, held)
    c = splits.split_counts(samples, train, held)
    # 1,034 + 800 + 389 samples; seed 0 holds out concert_singer, dog_kennels, world_1
    assert c["all"] == {"train": 1578, "heldout": 645, "heldout_share": pytest.approx(645 / 2223)}
    assert splits.split_databases(samples)[1] == ["concert_singer", "dog_kennels", "world_1"]
    # group shares differ from the fraction: the caller balances by group
    assert (c["answerable"]["heldout"], c["ambiguous"]["heldout"], c["unanswerable"]["heldout"]) == (412, 183, 50)


def test_balancing_keeps_pairs_and_caps_groups(embedded):
    una = [s for s in embedded if s.group == "unanswerable"]
    ans = [s for s in embedded if s.group == "answerable"]
    flawed = dataclasses.replace(una[0], id="pair-flawed", provenance={"source": "generated",
                                                                       "paired_original": "pair-orig"})
    orig = dataclasses.replace(ans[0], id="pair-orig", provenance={"source": "generated", "paired_with": "pair-flawed"})
    samples = [*embedded, flawed, orig]
    for seed in range(8):
        kept, caps = balance_by_group(samples, 5, seed=seed)
        ids = {s.id for s in kept}
        assert ("pair-flawed" in ids) == ("pair-orig" in ids)
        assert Counter(s.group for s in kept) == {"answerable": 5, "ambiguous": 5, "unanswerable": 5}
    kept, caps = balance_by_group(samples, None, seed=0)  # the smallest group: 13 answerable, 13 unanswerable
    assert caps == {"answerable": 13, "ambiguous": 13, "unanswerable": 13} and len(kept) == 39
    # the draw depends on the ids, not on the input order
    assert {s.id for s in balance_by_group(samples, 5, seed=0)[0]} == \
        {s.id for s in balance_by_group(list(reversed(samples)), 5, seed=0)[0]}
    with pytest.raises(ValueError, match="unknown group"):
        balance_by_group(samples, {"answerable": 3, "vague": 1})


@pytest.mark.skipif(not (MMSQL.is_file() and AMBIQT.is_dir() and UNA.is_file() and (SPIDER / "dev.json").is_file()
                         and (DATA / "mini_interact" / "mini_interact.jsonl").is_file()),
                    reason="the real sets of ../shared/data are not all present")
def test_training_corpus_on_shared_data_counts():
    with pytest.warns(Warning):
        corpus = build_training_corpus(DATA, seed=0)
    assert corpus.specs[0] == "embedded" and len(corpus.specs) == 6 and corpus.specs[-1].startswith("mini-interact:")
    assert corpus.available == {
        "ambiqt": {"answerable": 0, "ambiguous": 22, "unanswerable": 0, "all": 22},
        "embedded": {"answerable": 12, "ambiguous": 24, "unanswerable": 12, "all": 48},
        "mini-interact": {"answerable": 0, "ambiguous": 261, "unanswerable": 0, "all": 261},
        "mmsql": {"answerable": 554, "ambiguous": 0, "unanswerable": 170, "all": 724},
        "spider": {"answerable": 1034, "ambiguous": 0, "unanswerable": 0, "all": 1034},
        "spider_unanswerable": {"answerable": 0, "ambiguous": 0, "unanswerable": 180, "all": 180}}
    assert corpus.dropped == {"ambiqt": 367, "mmsql": 76}  # indistinguishable
    # mini-interact's 261 tasks (3 of its 26 databases absent here) carry the ambiguous group: 22 + 24 + 261
    assert corpus.per_group == {"answerable": 307, "ambiguous": 307, "unanswerable": 307}
    assert corpus.totals() == {"answerable": 307, "ambiguous": 307, "unanswerable": 307, "all": 921}
    assert not any("indistinguishable" in s.flags for s in corpus.samples)
    # round-robin over sources: the small embedded set is not crowded out
    assert corpus.counts["embedded"]["answerable"] >= 6 and corpus.counts["spider"]["answerable"] >= 6
    train, held = splits.split_sample_ids(corpus.samples, by="db", seed=0)
    assert not _dbs(corpus.samples, train) & _dbs(corpus.samples, held)
    with pytest.raises(ValueError, match="no samples.jsonl"):
        corpus_specs(DATA, generated=DATA / "no-such-folder")
