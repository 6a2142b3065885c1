"""ABISS loader: ``abiss:<file>:<db root>`` (ABISS's released question records, for users who have them).

ABISS (§4.1) releases one JSON object per NLQ object::

    {"db_id", "question", "evidence" (string or null), "sql" (null for unanswerable),
     "category": {"name", "subname" (null for a category without subcategories), "answerable", "solvable"},
     "question_style", "question_difficulty", "hidden_knowledge" (ambiguous and unanswerable), "is_solvable"}

The file is either a JSON list (ABISS's own output, read whole; ABISS-BIRD's release holds
13,632 questions, as its README says) or JSONL (one record a line, streamed line by line). The databases are
``<db root>/<db_id>/<db_id>.sqlite`` (BIRD's ``dev_databases`` for ABISS-BIRD, Spider's ``database`` for
ABISS-Spider); they are only checked to exist here, never opened for writing.

Mapping to our taxonomy (:mod:`textsql_clarify.taxonomy`, ABISS §3.2):

* ``category.name`` / ``category.subname`` -> group and subcategory, matched case- and
  separator-insensitively (only letters and digits count) against the paper's display names, the release's
  own names (``Structure Ambiguity`` / ``Scope Ambiguity``, ``Missing Schema Elements`` /
  ``Missing Relationships``, ``Answerable`` / ``With Evidence``, ...) and our snake_case names
  (:data:`CATEGORY_NAMES`, :data:`SUBNAMES`). A category with one subcategory (Lexical Vagueness,
  Missing User Knowledge, Conflicting Knowledge, Missing External Knowledge, Improper Question) takes it
  whatever the subname says, unless the subname names something else. A missing subname of Structural
  Ambiguity, Semantic Mapping Ambiguity or Missing Schema Elements gives subcategory ``None`` ("the source
  does not say"); of Answerable, ``answerable_with_evidence`` when the record has evidence, else
  ``answerable_without_evidence`` (the two answerable subcategories differ by that alone). An unknown name
  or subname is a record problem (field ``category.name`` / ``category.subname``), as is a ``category.answerable`` /
  ``category.solvable`` flag that contradicts the group.
* ``sql`` -> ``gold_sql`` (null or empty for unanswerable; required otherwise). ``evidence`` -> a
  one-element evidence list (ABISS's ``Evidence 1: ...\\nEvidence 2: ...`` string is kept whole).
  ``hidden_knowledge`` -> hidden knowledge: ABISS writes it as a stand-alone statement (the disambiguating
  fact, or the feedback explaining why the question is unanswerable, §4.1, checked by §4.2 stage 8), so it
  is kept verbatim.
* ``question_style`` -> ``style`` (lower-cased; ABISS's formal, colloquial, imperative, interrogative,
  descriptive, concise). ``question_difficulty`` -> ``difficulty`` through :data:`DIFFICULTY_MAP`: ABISS's
  four SQL-complexity levels (OmniSQL's simple, moderate, complex, highly complex, §4.1) onto the other
  four-level SQL-complexity scale we have, Spider's hardness (easy, medium, hard, extra), in order; the raw
  label stays in ``provenance["question_difficulty"]``. A missing level is ``unknown``; any other value is a
  record problem (ABISS's own reader rejects it too).
* Ambiguous questions come as two NLQ objects with the same text and different SQL and hidden knowledge
  (§4.1, one per reading). Records of one ambiguous subcategory with the same ``db_id`` and question are
  grouped: each stays its own sample (its reading is the gold, as ABISS runs one dialogue per object) and
  gets the others as ``interpretations``. A question whose second reading was removed by §4.2 stage 6 has
  none.
* ``id``: the record's ``id`` when it has one, else ``abiss-<index>`` (0-based record index in the file).
  Provenance: ``{"source": "abiss", "file": <file name>, "record": <record number>, "category": {...},
  "question_difficulty": ...}``.

Every bad record is reported with file, record (index + 1 in a JSON list, line in JSONL) and field, all
at once (:class:`~textsql_clarify.errors.DatasetError`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterator

from .spider import _read_json_list
from ..errors import DatasetError, RecordProblem
from ..samples import Sample, sample_from_dict
from ..taxonomy import CATEGORIES, SUBCATEGORIES
from .jsonl_stream import iter_jsonl


def _norm(name: str) -> str:
    """Case- and separator-insensitive key: lower-case letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


#: Accepted category names (normalised by :func:`_norm`) -> our category (``taxonomy.CATEGORIES`` keys).
#: Our snake_case names, the paper's §3.2 headings and the release's ``get_name()`` strings.
CATEGORY_NAMES: dict[str, str] = {_norm(c): c for c in CATEGORIES}
CATEGORY_NAMES[_norm("Structure Ambiguity")] = "structural_ambiguity"  # the release's spelling

#: Per category, accepted subnames (normalised) -> our subcategory. Our snake_case names, the paper's
#: italic subcategory names and the release's ``get_subname()`` strings.
SUBNAMES: dict[str, dict[str, str]] = {c: {_norm(s): s for s in subs} for c, subs in CATEGORIES.items()}
for _cat, _aliases in {
    "answerable": {"With Evidence": "answerable_with_evidence", "Without Evidence": "answerable_without_evidence"},
    "structural_ambiguity": {"Scope Ambiguity": "scope", "Attachment Ambiguity": "attachment"},
    "semantic_mapping_ambiguity": {"Lexical Overlap Ambiguity": "lexical_overlap", "Entity": "entity_ambiguity"},
    "missing_schema_elements": {"Missing Entities or Attributes": "missing_entities_or_attributes",
                                "Missing Entities": "missing_entities_or_attributes",
                                "Missing Relationships": "missing_relationship"},
}.items():
    SUBNAMES[_cat].update({_norm(k): v for k, v in _aliases.items()})
for _cat, _subs in CATEGORIES.items():  # a lone subcategory may be named by its category too
    if len(_subs) == 1:
        SUBNAMES[_cat][_norm(_cat)] = _subs[0]

#: ABISS's ``question_difficulty`` (normalised) -> our difficulty (see the module docstring).
DIFFICULTY_MAP: dict[str, str] = {"simple": "easy", "moderate": "medium", "complex": "hard", "highlycomplex": "extra"}


def abiss_category(name: Any, subname: Any = None, *, has_evidence: bool = False) -> tuple[str, str | None]:
    """Map an ABISS ``category {name, subname}`` to our group and subcategory (ABISS §3.2).

    Args:
        name: ``category.name`` (``"Semantic Mapping Ambiguity"``, ``"semantic_mapping_ambiguity"``, ...).
        subname: ``category.subname`` or ``None``.
        has_evidence: whether the record has evidence (decides an Answerable category without subname).

    Returns:
        ``(group, subcategory)``; subcategory ``None`` for a multi-subcategory ambiguous or unanswerable
        category given without subname.

    Raises:
        ValueError: ``args == (field, message)`` with field ``category.name`` or ``category.subname``: not a
            string, or unknown.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("category.name", f"is required and must be a non-empty string, got {name!r}")
    cat = CATEGORY_NAMES.get(_norm(name))
    if cat is None:
        raise ValueError("category.name", f"unknown ABISS category {name!r}; known: "
                                          f"{sorted(set(CATEGORY_NAMES.values()))}")
    subs = CATEGORIES[cat]
    if subname is not None and not isinstance(subname, str):
        raise ValueError("category.subname", f"must be a string or null, got {type(subname).__name__}")
    if subname is None or not subname.strip():
        if len(subs) == 1:
            sub = subs[0]
        elif cat == "answerable":
            sub = "answerable_with_evidence" if has_evidence else "answerable_without_evidence"
        else:
            sub = None
    else:
        sub = SUBNAMES[cat].get(_norm(subname))
        if sub is None:
            raise ValueError("category.subname", f"unknown subcategory {subname!r} of ABISS category {name!r}; "
                                                 f"known: {list(subs)}")
    group = SUBCATEGORIES[subs[0]].group
    return group, sub


def _records(path: Path, problems: list[RecordProblem]) -> Iterator[tuple[int, Any]]:
    """``(record number, decoded record)`` of a JSON list (index + 1; read whole) or a JSONL file (line
    number; streamed by :func:`.jsonl_stream.iter_jsonl`, which reports a line that is not JSON in
    ``problems``). A ``.jsonl`` / ``.ndjson`` file is JSONL; any other file is a JSON list when its first
    character is ``[``, else JSONL."""
    is_list = False
    if path.suffix.lower() not in (".jsonl", ".ndjson"):
        try:
            with open(path, encoding="utf-8") as fh:
                is_list = fh.read(4096).lstrip("\ufeff \t\r\n").startswith("[")
        except (OSError, UnicodeDecodeError) as e:
            raise DatasetError(f"cannot read ABISS file {path}: {e}") from e
    if not is_list:
        yield from iter_jsonl(path, problems, "ABISS file")
        return
    data = _read_json_list(path, "ABISS file")  # the Spider loader's reader: the same checks and messages
    yield from enumerate(data, start=1)


def _opt_str(rec: dict, key: str, bad) -> str | None:
    v = rec.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        bad(key, f"must be a string or null, got {type(v).__name__}")
        return None
    return v.strip()


def _native(index: int, rec: Any, file_name: str, bad) -> dict | None:
    """One ABISS record -> a native sample dict (without ``db_path``), or None after reporting with ``bad``."""
    if not isinstance(rec, dict):
        bad("<record>", f"must be a JSON object, got {type(rec).__name__}")
        return None
    n_bad = [0]

    def b(field: str, msg: str) -> None:
        n_bad[0] += 1
        bad(field, msg)

    for fld in ("db_id", "question"):
        v = rec.get(fld)
        if not isinstance(v, str) or not v.strip():
            b(fld, "is required and must be a non-empty string")
    rid = rec.get("id")
    if rid is None:
        rid = f"abiss-{index}"
    elif isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
        b("id", f"must be a non-empty string or an integer, got {rid!r}")
    evidence = _opt_str(rec, "evidence", b) or ""
    sql = _opt_str(rec, "sql", b) or None
    hk = _opt_str(rec, "hidden_knowledge", b)
    style = _opt_str(rec, "question_style", b)
    raw_diff = rec.get("question_difficulty")
    diff = "unknown"
    if raw_diff is not None:
        diff = DIFFICULTY_MAP.get(_norm(raw_diff)) if isinstance(raw_diff, str) else None
        if diff is None:
            b("question_difficulty", f"must be one of simple, moderate, complex, highly_complex; got {raw_diff!r}")
    cat = rec.get("category")
    group = sub = None
    if not isinstance(cat, dict):
        b("category", f"is required and must be an object {{name, subname}}, got {type(cat).__name__}")
    else:
        try:
            group, sub = abiss_category(cat.get("name"), cat.get("subname"), has_evidence=bool(evidence))
        except ValueError as e:
            b(*e.args)
        if group is not None:
            for flag, want in (("answerable", group == "answerable"), ("solvable", group != "unanswerable")):
                v = cat.get(flag)
                if v is not None and v is not want:
                    b(f"category.{flag}", f"is {v!r} but category {cat.get('name')!r} is {group}")
        raw_sql = rec.get("sql")
        if group == "unanswerable" and sql is not None:
            b("sql", "must be null or empty for an unanswerable category")
        if group in ("answerable", "ambiguous") and (raw_sql is None or isinstance(raw_sql, str) and not sql):
            b("sql", f"is required for a {group} category (the gold SQL)")
        raw_hk = rec.get("hidden_knowledge")
        if group in ("ambiguous", "unanswerable") and (raw_hk is None or isinstance(raw_hk, str) and not hk):
            b("hidden_knowledge", f"is required for a {group} category (the disambiguating fact or the feedback)")
    if n_bad[0]:
        return None
    prov = {"source": "abiss", "file": file_name, "record": None, "category": {k: cat.get(k) for k in ("name", "subname")},
            "question_difficulty": raw_diff}
    return {
        "id": str(rid).strip(), "db_id": rec["db_id"], "question": rec["question"], "group": group,
        "subcategory": sub, "gold_sql": sql, "hidden_knowledge": hk or "",
        "evidence": [evidence] if evidence else [], "style": style.lower() if style else "neutral",
        "difficulty": diff, "provenance": prov,
    }


def _pair_interpretations(natives: list[tuple[int, dict]]) -> None:
    """Give each ambiguous record the other readings of its question as ``interpretations`` (in place)."""
    groups: dict[tuple, list[dict]] = {}
    for _ln, n in natives:
        if n["group"] == "ambiguous":
            key = (n["db_id"], " ".join(n["question"].split()), n["subcategory"],
                   _norm(n["provenance"]["category"]["name"] or ""))
            groups.setdefault(key, []).append(n)
    for members in groups.values():
        for n in members:
            n["interpretations"] = [{"gold_sql": o["gold_sql"], "hidden_knowledge": o["hidden_knowledge"],
                                     "description": f"reading of ABISS record {o['id']}"}
                                    for o in members if o is not n]


def load_abiss(file: str | os.PathLike, db_root: str | os.PathLike) -> list[Sample]:
    """Load ABISS's released records over their databases.

    Args:
        file: a JSON list or JSONL file of ABISS records (format and mapping in the module docstring).
        db_root: folder of ``<db_id>/<db_id>.sqlite``.

    Returns:
        One sample per record, in file order, each with an absolute ``db_path`` to an existing file;
        ambiguous readings of one question are each other's ``interpretations``.

    Raises:
        DatasetError: missing file or database folder, unreadable or invalid JSON, a top level that is neither
            a list nor JSONL, or any bad record (not an object; missing ``db_id`` / ``question`` /
            ``category``; unknown ``category.name`` / ``category.subname``; contradicting
            ``category.answerable`` / ``category.solvable``; missing ``sql`` for an answerable or ambiguous
            category, or ``sql`` for an unanswerable one; non-string ``evidence`` / ``hidden_knowledge`` /
            ``question_style``; unknown ``question_difficulty``; missing ``hidden_knowledge`` for an ambiguous
            or unanswerable category; a bad or duplicate ``id``; a ``db_id`` without its ``.sqlite``), all
            listed with file, record and field.
    """
    path = Path(file).resolve()
    if not path.is_file():
        raise DatasetError(f"ABISS file not found: {path}")
    db_dir = Path(db_root).resolve()
    if not db_dir.is_dir():
        raise DatasetError(f"ABISS database root is not a directory: {db_dir} (expected <db root>/<db_id>/<db_id>.sqlite)")
    problems: list[RecordProblem] = []
    natives: list[tuple[int, dict]] = []
    seen: dict[str, int] = {}
    db_ok: dict[str, bool] = {}
    index = 0
    for ln, rec in _records(path, problems):
        native = _native(index, rec, path.name, lambda f, m, ln=ln: problems.append(RecordProblem(str(path), ln, f, m)))
        index += 1
        if native is None:  # its problems are reported
            continue
        native["provenance"]["record"] = ln
        db_id = native["db_id"]
        if db_id not in db_ok:
            db_ok[db_id] = (db_dir / db_id / f"{db_id}.sqlite").is_file()
        if not db_ok[db_id]:
            problems.append(RecordProblem(str(path), ln, "db_id", f"database file not found: "
                                                                  f"{db_dir / db_id / (db_id + '.sqlite')}"))
            continue
        if native["id"] in seen:
            problems.append(RecordProblem(str(path), ln, "id", f"duplicate id {native['id']!r} "
                                                               f"(first in record {seen[native['id']]})"))
            continue
        seen[native["id"]] = ln
        native["db_path"] = str(db_dir / db_id / f"{db_id}.sqlite")
        natives.append((ln, native))
    _pair_interpretations(natives)
    out: list[Sample] = []
    for ln, native in natives:
        s, probs = sample_from_dict(native, file=str(path), line=ln, check_db_exists=False)
        problems.extend(probs)
        if s is not None:
            out.append(s)
    if problems:
        raise DatasetError(f"invalid ABISS file {path}", problems)
    if not out:
        raise DatasetError(f"ABISS file {path} holds no records")
    return out


def load_from_spec(rest: str, *, spec: str, db_root: str | None) -> list[Sample]:
    """The ``abiss:<file>:<db root>`` spec (registry entry of :mod:`textsql_clarify.datasets`); ``abiss:<file>``
    with the ``db_root`` keyword works too (a root in the spec wins).

    Raises:
        DatasetError: a bad spec (no database root), or see :func:`load_abiss`.
    """
    from . import split_spec_paths

    form = "abiss:<file>:<db root>"
    try:
        file, root = split_spec_paths(rest, spec, form)
    except DatasetError:
        if db_root is None or not rest.strip():
            raise
        file, root = rest, db_root
    return load_abiss(file, root)
