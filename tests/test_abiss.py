"""The ABISS loader (``abiss:<file>:<db root>``) on records we wrote in ABISS's released shape
(``tests/fixtures/abiss/abiss_spider.json``, over the Spider dev databases): every category, JSON list and
JSONL, one bad record per field, and the oracle / no-clarify figures."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.abiss import abiss_category, load_abiss
from textsql_clarify.errors import DatasetError
from textsql_clarify.taxonomy import SUBCATEGORIES

FIXTURE = Path(__file__).parent / "fixtures" / "abiss" / "abiss_spider.json"

#: (id, group, subcategory, difficulty, style) of the 22 fixture records, in file order.
EXPECTED = [
    ("abiss-0", "answerable", "answerable_without_evidence", "easy", "formal"),
    ("abiss-1", "answerable", "answerable_with_evidence", "easy", "colloquial"),
    ("abiss-2", "answerable", "answerable_with_evidence", "easy", "concise"),  # no subname, has evidence
    ("abiss-3", "ambiguous", "scope", "medium", "interrogative"),
    ("abiss-4", "ambiguous", "scope", "medium", "interrogative"),
    ("abiss-5", "ambiguous", "attachment", "extra", "imperative"),
    ("abiss-6", "ambiguous", "attachment", "extra", "imperative"),
    ("abiss-7", "ambiguous", "lexical_overlap", "easy", "interrogative"),
    ("abiss-8", "ambiguous", "lexical_overlap", "easy", "interrogative"),
    ("abiss-9", "ambiguous", "entity_ambiguity", "easy", "descriptive"),
    ("abiss-10", "ambiguous", "entity_ambiguity", "easy", "descriptive"),
    ("abiss-11", "ambiguous", "lexical_vagueness", "easy", "concise"),
    ("abiss-12", "ambiguous", "lexical_vagueness", "easy", "concise"),
    ("abiss-13", "ambiguous", "missing_user_knowledge", "hard", "colloquial"),
    ("abiss-14", "ambiguous", "missing_user_knowledge", "hard", "colloquial"),
    ("abiss-15", "ambiguous", "conflicting_knowledge", "easy", "formal"),
    ("abiss-16", "ambiguous", "conflicting_knowledge", "easy", "formal"),
    ("abiss-17", "unanswerable", "missing_entities_or_attributes", "easy", "interrogative"),
    ("abiss-18", "unanswerable", "missing_relationship", "medium", "interrogative"),
    ("abiss-19", "unanswerable", "missing_external_knowledge", "medium", "formal"),
    ("abiss-20", "unanswerable", "improper_question", "easy", "colloquial"),
    ("cs-ticket-prices", "unanswerable", None, "easy", "interrogative"),  # no subname; the record's own id
]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def db_root(spider_root) -> Path:
    return spider_root / "database"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fixture_maps_every_category(db_root):
    samples = load_dataset(f"abiss:{FIXTURE}:{db_root}")
    assert [(s.id, s.group, s.subcategory, s.difficulty, s.style) for s in samples] == EXPECTED
    assert {s.subcategory for s in samples} - {None} == set(SUBCATEGORIES)  # all 13
    # load-time validation: every gold runs and returns rows, and every pair of readings differs
    flagged = {f for s in samples for f in s.flags}
    assert not flagged & {"gold_error", "gold_empty", "gold_timeout", "interpretation_error", "indistinguishable"}
    by_id = {s.id: s for s in samples}
    # the two readings of one ambiguous question are each other's interpretation
    a, b = by_id["abiss-7"], by_id["abiss-8"]
    assert a.question == b.question and a.gold_sql != b.gold_sql
    assert [(i.gold_sql, i.hidden_knowledge) for i in a.interpretations] == [(b.gold_sql, b.hidden_knowledge)]
    assert [(i.gold_sql, i.hidden_knowledge) for i in b.interpretations] == [(a.gold_sql, a.hidden_knowledge)]
    assert a.hidden_knowledge == "By phone number I mean the owners' home phone number (Owners.home_phone)."
    assert all(len(s.interpretations) == (1 if s.group == "ambiguous" else 0) for s in samples)
    # evidence: one element, ABISS's string kept whole; null evidence -> none
    assert by_id["abiss-15"].evidence == ("Evidence 1: A popular stadium has an average attendance above 1000.\n"
                                          "Evidence 2: A popular stadium is one whose highest attendance is above 1500.",)
    assert by_id["abiss-0"].evidence == () and by_id["abiss-17"].evidence == ()
    un = by_id["abiss-18"]
    assert un.gold_sql is None and un.hidden_knowledge.startswith("Singers and stadiums are linked only through")
    assert un.db_path == str((db_root / "concert_singer" / "concert_singer.sqlite").resolve())
    assert dict(by_id["abiss-5"].provenance) == {
        "source": "abiss", "file": "abiss_spider.json", "record": 6,
        "category": {"name": "Structure Ambiguity", "subname": "Attachment Ambiguity"},
        "question_difficulty": "highly_complex"}


def test_jsonl_loads_the_same_samples_as_the_json_list(db_root, tmp_path):
    records = json.loads(FIXTURE.read_text(encoding="utf-8"))
    lines = [json.dumps(r) for r in records]
    lines.insert(5, "")  # a blank line is skipped
    jsonl = tmp_path / "abiss.jsonl"
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from_list = load_dataset(f"abiss:{FIXTURE}:{db_root}")
    from_lines = load_dataset(f"abiss:{jsonl}:{db_root}")

    def strip(s):
        d = s.to_dict()
        return d, d.pop("provenance")

    for x, y in zip(from_list, from_lines, strict=True):
        dx, px = strip(x)
        dy, py = strip(y)
        assert dx == dy
        assert px["file"] == "abiss_spider.json" and py["file"] == "abiss.jsonl"
    # record numbers are line numbers in JSONL: record 6 comes after the blank line 6
    assert from_list[5].provenance["record"] == 6 and from_lines[5].provenance["record"] == 7


def test_oracle_ex_and_fb_are_one_no_clarify_is_below(db_root):
    samples = load_dataset(f"abiss:{FIXTURE}:{db_root}")
    dbs = {s.db_path for s in samples}
    before = {p: _sha(Path(p)) for p in dbs}
    trajs, m = evaluate(samples, make_agent("oracle"), progress=False)
    assert m["by_group"]["answerable"]["metrics"]["EX"] == MeanIs(1.0, 3)
    assert m["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(1.0, 14)
    assert m["by_group"]["unanswerable"]["metrics"]["FB"] == MeanIs(1.0, 5)
    assert m["by_subcategory"]["unknown"]["metrics"]["FB"] == MeanIs(1.0, 1)
    # the rule-based user finds every oracle clarification relevant: ABISS's hidden knowledge is stand-alone
    labels = Counter(t["user_reply"]["label"] for tr in trajs for t in tr.to_dict()["turns"] if t["user_reply"])
    assert labels == {"relevant": 14}
    _, nc = evaluate(samples, make_agent("no-clarify"), progress=False)
    assert nc["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(0.0, 14)  # it submits the other reading
    assert nc["by_group"]["answerable"]["metrics"]["EX"] == MeanIs(1.0, 3)
    assert {p: _sha(Path(p)) for p in dbs} == before


def _good(**over) -> dict:
    rec = {"db_id": "concert_singer", "question": "How many singers are there?", "evidence": None,
           "sql": "SELECT count(*) FROM singer",
           "category": {"name": "Answerable", "subname": "Without Evidence", "answerable": True, "solvable": True},
           "question_style": "formal", "question_difficulty": "simple"}
    rec.update(over)
    return rec


_AMB = {"name": "Lexical Vagueness", "subname": None, "answerable": False, "solvable": True}
_UNA = {"name": "Improper Question", "subname": None, "answerable": False, "solvable": False}

#: One bad record per field: (record, the field its problem names).
BAD = [
    (["not an object"], "<record>"),
    (_good(db_id=""), "db_id"),
    (_good(question=None), "question"),
    ({k: v for k, v in _good().items() if k != "category"}, "category"),
    (_good(category={"name": "Ambiguous Stuff"}), "category.name"),
    (_good(category={"name": "Semantic Mapping Ambiguity", "subname": "Homonymy"}), "category.subname"),
    (_good(category={"name": "Answerable", "subname": "With Evidence", "answerable": False}), "category.answerable"),
    (_good(category={**_UNA, "solvable": True}, sql=None, hidden_knowledge="This is chit-chat."), "category.solvable"),
    (_good(sql=None), "sql"),
    (_good(category=_UNA, hidden_knowledge="This is chit-chat, not a database question."), "sql"),
    (_good(evidence=["a", "list"]), "evidence"),
    (_good(category=_AMB, hidden_knowledge=""), "hidden_knowledge"),
    (_good(category=_AMB, hidden_knowledge=42), "hidden_knowledge"),
    (_good(question_style=3), "question_style"),
    (_good(question_difficulty="extra hard"), "question_difficulty"),
    (_good(id=["x"]), "id"),
    (_good(db_id="no_such_db"), "db_id"),
    (_good(id="dup"), None),  # fine
    (_good(id="dup"), "id"),  # duplicate
]


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_every_bad_record_names_record_and_field(db_root, tmp_path, fmt):
    recs = [r for r, _ in BAD]
    path = tmp_path / f"bad.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(recs), encoding="utf-8")
    else:
        path.write_text("\n".join(json.dumps(r) for r in recs) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DatasetError) as ei:
        load_abiss(path, db_root)
    want = {(i + 1, f) for i, (_, f) in enumerate(BAD) if f is not None}
    if fmt == "jsonl":
        want.add((len(BAD) + 1, "<record>"))
    assert {(p.line, p.field) for p in ei.value.problems} == want
    assert len(ei.value.problems) == len(want)  # one problem per bad record, none doubled
    assert all(p.file == str(path.resolve()) for p in ei.value.problems)
    msg = str(ei.value)
    assert "'Homonymy'" in msg and "no_such_db.sqlite" in msg and "'extra hard'" in msg


def test_category_names_are_matched_case_and_separator_insensitively():
    # the paper's display names (ABISS §3.2) and the release's own strings
    assert abiss_category("Structural Ambiguity", "Scope ambiguity") == ("ambiguous", "scope")
    assert abiss_category("Structure Ambiguity", "Attachment Ambiguity") == ("ambiguous", "attachment")
    assert abiss_category("Semantic Mapping Ambiguity", "Lexical Overlap") == ("ambiguous", "lexical_overlap")
    assert abiss_category("SEMANTIC-MAPPING-AMBIGUITY", "entity_ambiguity") == ("ambiguous", "entity_ambiguity")
    assert abiss_category("Missing Schema Elements", "Missing Entities or Attributes") == \
        ("unanswerable", "missing_entities_or_attributes")
    assert abiss_category("missing_schema_elements", "Missing Relationship") == ("unanswerable", "missing_relationship")
    assert abiss_category("Missing Schema Elements", "Missing Relationships") == ("unanswerable", "missing_relationship")
    # single-subcategory categories, with or without a subname
    assert abiss_category("Lexical Vagueness") == ("ambiguous", "lexical_vagueness")
    assert abiss_category("conflicting knowledge", "Conflicting Knowledge") == ("ambiguous", "conflicting_knowledge")
    assert abiss_category("Missing User Knowledge", "") == ("ambiguous", "missing_user_knowledge")
    assert abiss_category("Missing External Knowledge") == ("unanswerable", "missing_external_knowledge")
    assert abiss_category("Improper Question") == ("unanswerable", "improper_question")
    # missing subname of a multi-subcategory category: unknown (None); answerable: by evidence
    assert abiss_category("Structure Ambiguity", None) == ("ambiguous", None)
    assert abiss_category("Missing Schema Elements") == ("unanswerable", None)
    assert abiss_category("Answerable", None, has_evidence=True) == ("answerable", "answerable_with_evidence")
    assert abiss_category("Answerable") == ("answerable", "answerable_without_evidence")
    with pytest.raises(ValueError) as ei:
        abiss_category("Lexical Vagueness", "Missing Relationship")
    assert ei.value.args[0] == "category.subname"
    with pytest.raises(ValueError) as ei:
        abiss_category("Vagueness")
    assert ei.value.args[0] == "category.name"


def test_spec_forms_and_path_errors(db_root, tmp_path):
    assert len(load_dataset(f"abiss:{FIXTURE}", db_root=db_root)) == 22  # the root from the keyword
    with pytest.raises(DatasetError, match="expected 'abiss:<file>:<db root>'"):
        load_dataset(f"abiss:{FIXTURE}")
    with pytest.raises(DatasetError, match="ABISS file not found"):
        load_dataset(f"abiss:{tmp_path / 'none.json'}:{db_root}")
    with pytest.raises(DatasetError, match="database root is not a directory"):
        load_dataset(f"abiss:{FIXTURE}:{tmp_path / 'nowhere'}")
    (tmp_path / "broken.json").write_text("[{", encoding="utf-8")
    with pytest.raises(DatasetError, match="is not valid JSON"):
        load_abiss(tmp_path / "broken.json", db_root)
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="holds no records"):
        load_abiss(tmp_path / "empty.jsonl", db_root)
