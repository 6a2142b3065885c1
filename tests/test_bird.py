"""The BIRD loader (``bird:<root>``): mini-dev parsing on the real file, execution on a BIRD-layout
database built at test time (no binary database is committed), bad records, the train layout."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.bird import load_bird, parse_bird_questions
from textsql_clarify.datasets.dialogue_common import sql_parses
from textsql_clarify.errors import DatasetError
from textsql_clarify.rewards.ex_sql import gold_nondeterminism

#: Three BIRD-shaped records over the ``shop`` database of :func:`_build_bird`.
DEV_RECORDS = [
    {"question_id": 7, "db_id": "shop", "question": "How many customers pay in EUR?",
     "evidence": "pay in EUR refers to Currency = 'EUR'",
     "SQL": "SELECT COUNT(*) FROM customers WHERE Currency = 'EUR'", "difficulty": "simple"},
    {"question_id": 8, "db_id": "shop", "question": "List the names of all customers.",
     "evidence": "", "SQL": "SELECT Name FROM customers", "difficulty": "moderate"},
    {"question_id": 9, "db_id": "shop", "question": "What is the total amount spent by customers who pay in CZK?",
     "evidence": "total amount refers to SUM(Amount); pay in CZK refers to Currency = 'CZK'",
     "SQL": "SELECT SUM(T2.Amount) FROM customers AS T1 INNER JOIN transactions AS T2 "
            "ON T1.CustomerID = T2.CustomerID WHERE T1.Currency = 'CZK'", "difficulty": "challenging"},
]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Load-time validation caches its results: keep them out of the user's cache."""
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


def _make_db(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE customers (CustomerID INTEGER PRIMARY KEY, Name TEXT, Currency TEXT);
        INSERT INTO customers VALUES (1, 'Ana', 'EUR'), (2, 'Bo', 'CZK'), (3, 'Cy', 'EUR'), (4, 'Di', 'CZK');
        CREATE TABLE transactions (TransactionID INTEGER PRIMARY KEY, CustomerID INTEGER, Amount REAL);
        INSERT INTO transactions VALUES (1, 1, 10.5), (2, 2, 20.0), (3, 4, 7.25), (4, 2, 1.0);
    """)
    con.commit()
    con.close()


def _build_bird(root: Path, records: list, split: str = "dev") -> Path:
    """Write BIRD's layout under ``root``: ``<split>.json`` and ``<split>_databases/shop/shop.sqlite``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{split}.json").write_text(json.dumps(records, indent=2), encoding="utf-8")
    _make_db(root / f"{split}_databases" / "shop" / "shop.sqlite")
    return root


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- mini-dev (real file, questions only) ------------------------------------------------------------
MINIDEV = "bird_minidev"


def _minidev(shared_data) -> Path:
    """``../shared/data/bird_minidev``, or skip: the real mini-dev SQLite edition is not committed."""
    root = shared_data / MINIDEV
    if not (root / "mini_dev_sqlite.json").is_file():
        pytest.skip(f"real data absent: {MINIDEV}/mini_dev_sqlite.json not found")
    return root


def test_minidev_parses_498_sqlite_questions_with_evidence(shared_data):
    natives = parse_bird_questions(_minidev(shared_data) / "mini_dev_sqlite.json")
    assert len(natives) == 498  # upstream's 500 records repeat question_id 137 and 138; the shared file keeps one
    assert Counter(n["difficulty"] for n in natives) == {"moderate": 248, "simple": 148, "challenging": 102}
    assert Counter(n["subcategory"] for n in natives) == {"answerable_with_evidence": 496,
                                                          "answerable_without_evidence": 2}
    assert len({n["db_id"] for n in natives}) == 11
    assert len({n["id"] for n in natives}) == 498
    assert sum(n["id"] in ("bird-dev-137", "bird-dev-138") for n in natives) == 2
    first = natives[0]
    assert first["id"] == "bird-dev-1471" and first["db_id"] == "debit_card_specializing"
    assert first["question"] == "What is the ratio of customers who pay in EUR against customers who pay in CZK?"
    assert first["evidence"] == ["ratio of customers who pay in EUR against customers who pay in CZK = "
                                 "count(Currency = 'EUR') / count(Currency = 'CZK')."]
    # the SQLite edition: IIF, not the PostgreSQL edition's CASE
    assert first["gold_sql"].startswith("SELECT CAST(SUM(IIF(Currency = 'EUR', 1, 0)) AS FLOAT)")
    assert first["provenance"] == {"source": "bird", "file": "mini_dev_sqlite.json", "question_id": 1471}
    no_ev = [n for n in natives if not n["evidence"]]
    assert [n["id"] for n in no_ev] == ["bird-dev-1507", "bird-dev-1528"]
    assert all(n["subcategory"] == "answerable_without_evidence" for n in no_ev)
    # every gold parses as SQLite (the superseded file held 32 PostgreSQL-only golds)
    assert [n["id"] for n in natives if sql_parses(n["gold_sql"])] == []
    # 10 golds read the clock (CURRENT_TIMESTAMP, ...): they load flagged gold_nondeterministic
    clock = [n["id"] for n in natives if gold_nondeterminism(n["gold_sql"])]
    assert len(clock) == 10 and clock[0] == "bird-dev-1156"


def test_minidev_folder_spec_finds_the_sqlite_file_and_names_the_missing_databases(shared_data):
    root = _minidev(shared_data)
    with pytest.raises(DatasetError) as ei:
        load_dataset(f"bird:{root}")
    msg = str(ei.value)
    assert "BIRD database folder not found" in msg and str(root.resolve() / "dev_databases") in msg
    assert "mini_dev_sqlite.json" in msg and "parse_bird_questions" in msg


def test_minidev_with_an_empty_db_root_names_every_record(shared_data, tmp_path):
    root = _minidev(shared_data)
    with pytest.raises(DatasetError) as ei:
        load_dataset(f"bird:{root}", db_root=tmp_path)
    probs = ei.value.problems
    assert len(probs) == 498 and {p.field for p in probs} == {"db_id"}
    assert probs[0].line == 1 and "debit_card_specializing.sqlite" in probs[0].message
    assert {p.file for p in probs} == {str((root / "mini_dev_sqlite.json").resolve())}


# -- a BIRD-layout database built here ----------------------------------------------------------------
def test_bird_layout_loads_and_maps(tmp_path):
    root = _build_bird(tmp_path / "bird", DEV_RECORDS)
    samples = load_dataset(f"bird:{root}")
    assert [s.id for s in samples] == ["bird-dev-7", "bird-dev-8", "bird-dev-9"]
    assert [s.difficulty for s in samples] == ["simple", "moderate", "challenging"]
    assert [s.subcategory for s in samples] == ["answerable_with_evidence", "answerable_without_evidence",
                                                "answerable_with_evidence"]
    assert samples[0].evidence == ("pay in EUR refers to Currency = 'EUR'",) and samples[1].evidence == ()
    assert all(s.group == "answerable" for s in samples)
    assert samples[0].db_path == str((root / "dev_databases" / "shop" / "shop.sqlite").resolve())
    assert dict(samples[2].provenance) == {"source": "bird", "file": "dev.json", "question_id": 9}
    # the question file itself is a spec too
    assert [s.id for s in load_dataset(f"bird:{root / 'dev.json'}")] == [s.id for s in samples]


def test_oracle_ex_is_one_and_the_source_database_is_unchanged(tmp_path):
    root = _build_bird(tmp_path / "bird", DEV_RECORDS)
    db = root / "dev_databases" / "shop" / "shop.sqlite"
    before = _sha(db)
    samples = load_dataset(f"bird:{root}")
    assert [s.flags for s in samples] == [(), (), ()]  # load-time validation: every gold runs and returns rows
    _, metrics = evaluate(samples, make_agent("oracle"), out_dir=tmp_path / "run", progress=False)
    assert metrics["overall"]["EX"] == MeanIs(1.0, 3)
    # a no-clarify run on an answerable set submits the same golds
    _, nc = evaluate(samples, make_agent("no-clarify"), progress=False)
    assert nc["overall"]["EX"] == MeanIs(1.0, 3)
    assert _sha(db) == before


def test_train_layout_is_detected(tmp_path):
    train = [{"db_id": "shop", "question": "How many customers are there?", "evidence": "",
              "SQL": "SELECT COUNT(*) FROM customers"},
             {"db_id": "shop", "question": "List every transaction amount.", "evidence": "amount refers to Amount",
              "SQL": "SELECT Amount FROM transactions"}]
    root = _build_bird(tmp_path / "bird", train, split="train")
    samples = load_bird(root)
    assert [s.id for s in samples] == ["bird-train-0", "bird-train-1"]  # no question_id: the record index
    assert [s.difficulty for s in samples] == ["unknown", "unknown"]
    assert samples[0].db_path.endswith("train_databases/shop/shop.sqlite")
    assert samples[1].subcategory == "answerable_with_evidence"
    assert samples[0].provenance["question_id"] is None
    # dev wins when both splits are present; the train file is then named in the spec
    _build_bird(root, DEV_RECORDS, split="dev")
    assert load_dataset(f"bird:{root}")[0].id == "bird-dev-7"
    assert load_dataset(f"bird:{root / 'train.json'}")[0].id == "bird-train-0"


def test_db_root_replaces_the_split_databases_folder(tmp_path):
    root = tmp_path / "bird"
    root.mkdir()
    (root / "dev.json").write_text(json.dumps(DEV_RECORDS), encoding="utf-8")
    _make_db(tmp_path / "elsewhere" / "shop" / "shop.sqlite")
    samples = load_dataset(f"bird:{root}", db_root=tmp_path / "elsewhere")
    assert samples[0].db_path == str((tmp_path / "elsewhere" / "shop" / "shop.sqlite").resolve())


def test_mini_dev_sql_key_variant_is_accepted(tmp_path):
    recs = [{**DEV_RECORDS[0]}]
    recs[0]["sql"] = recs[0].pop("SQL")
    root = _build_bird(tmp_path / "bird", recs)
    assert load_bird(root)[0].gold_sql == DEV_RECORDS[0]["SQL"]


def test_every_bad_record_is_reported_with_record_and_field(tmp_path):
    good = DEV_RECORDS[0]
    recs = [
        {k: v for k, v in good.items() if k != "SQL"} | {"question_id": 1},           # 1: missing SQL
        {**good, "question_id": 2, "evidence": ["a list"]},                          # 2: non-string evidence
        {**good, "question_id": 3, "difficulty": "hard"},                            # 3: unknown difficulty
        {**good, "question_id": 4, "db_id": ""},                                     # 4: empty db_id
        {**good, "question_id": 5, "question": None},                                # 5: missing question
        {**good, "question_id": 6, "SQL": "  "},                                     # 6: empty SQL
        {**good, "question_id": True},                                               # 7: bad question_id
        ["not", "an", "object"],                                                     # 8: not an object
        {**good, "question_id": 9, "db_id": "nowhere"},                              # 9: no such database
        {**good, "question_id": 10},                                                 # 10: fine
        {**good, "question_id": 10},                                                 # 11: duplicate id
    ]
    root = _build_bird(tmp_path / "bird", recs)
    with pytest.raises(DatasetError) as ei:
        load_bird(root)
    got = {(p.line, p.field) for p in ei.value.problems}
    assert got == {(1, "SQL"), (2, "evidence"), (3, "difficulty"), (4, "db_id"), (5, "question"), (6, "SQL"),
                   (7, "question_id"), (8, "<record>"), (9, "db_id"), (11, "question_id")}
    assert all(p.file == str((root / "dev.json").resolve()) for p in ei.value.problems)
    msg = str(ei.value)
    assert "'hard'" in msg and "nowhere.sqlite" in msg and "duplicate id 'bird-dev-10'" in msg
    # the parser reports the same record problems, except the database one it never checks
    with pytest.raises(DatasetError) as ei2:
        parse_bird_questions(root / "dev.json")
    assert {(p.line, p.field) for p in ei2.value.problems} == got - {(9, "db_id")}


def test_bad_root_and_file(tmp_path):
    with pytest.raises(DatasetError, match="BIRD root not found"):
        load_dataset(f"bird:{tmp_path / 'missing'}")
    with pytest.raises(DatasetError, match="holds none of dev.json, mini_dev_sqlite.json, train.json"):
        load_dataset(f"bird:{tmp_path}")
    (tmp_path / "dev.json").write_text('{"not": "a list"}', encoding="utf-8")
    with pytest.raises(DatasetError, match="must hold a JSON list"):
        parse_bird_questions(tmp_path / "dev.json")
    with pytest.raises(DatasetError, match="expected 'bird:<root>'"):
        load_dataset("bird: ")


def test_minidev_layout_loads_from_its_folder_with_capitalised_difficulty(tmp_path):
    # mini-dev ships mini_dev_sqlite.json beside dev_databases/; some re-releases capitalise the labels
    recs = [{**r, "difficulty": r["difficulty"].capitalize()} for r in DEV_RECORDS]
    root = tmp_path / "minidev"
    _make_db(root / "dev_databases" / "shop" / "shop.sqlite")
    (root / "mini_dev_sqlite.json").write_text(json.dumps(recs), encoding="utf-8")
    samples = load_dataset(f"bird:{root}")
    assert [s.id for s in samples] == ["bird-dev-7", "bird-dev-8", "bird-dev-9"]
    assert [s.difficulty for s in samples] == ["simple", "moderate", "challenging"]
    assert samples[0].provenance["file"] == "mini_dev_sqlite.json"
