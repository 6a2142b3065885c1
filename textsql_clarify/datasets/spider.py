"""Spider loaders: answerable dev questions, and the ``spider_unanswerable`` questions.

* :func:`load_spider`: Spider's ``dev.json`` (question, gold ``query``, ``db_id``, parsed ``sql``)
  over ``<root>/database/<db_id>/<db_id>.sqlite``. Every item is an answerable sample
  (ABISS §3.2: ``answerable_without_evidence``; Spider carries no evidence), with Spider's hardness
  level as difficulty (:mod:`.spider_hardness`).
* :func:`load_spider_unanswerable`: a JSON list of ``{db_id, level, question}`` questions that no
  SQL over the database can answer, over the same Spider databases. The set gives no per-item
  reason, so every item gets the ABISS subcategory ``missing_entities_or_attributes`` (the most
  common cause of unanswerability over an unchanged schema, ABISS §3.2.4) and its hidden
  knowledge is marked absent (``provenance["hidden_knowledge"] == "absent"``,
  ``provenance["subcategory"] == "assumed"``), so a feedback judge knows it has no reason to check.

Both validate every record and report all problems at once, each with file, record (index + 1)
and field, as :class:`~textsql_clarify.errors.DatasetError`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from ..errors import DatasetError, RecordProblem
from ..samples import DIFFICULTIES, Sample, sample_from_dict
from ..text import loads_valid_unicode
from .spider_hardness import spider_hardness


def _read_json_list(path: Path, what: str) -> list:
    if not path.is_file():
        raise DatasetError(f"{what} not found: {path}")
    try:
        # a leading byte-order mark is not an error; a lone surrogate escape reads as U+FFFD
        data = loads_valid_unicode(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read {what} {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise DatasetError(f"{what} {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except (RecursionError, ValueError) as e:  # nesting too deep, an integer too long to convert
        raise DatasetError(f"{what} {path} is not valid JSON: {str(e)[:120] or type(e).__name__}") from None
    if not isinstance(data, list):
        raise DatasetError(f"{what} {path} must hold a JSON list of records, got {type(data).__name__}")
    return data


def _database_dir(spider_root: str | os.PathLike) -> Path:
    root = Path(spider_root).resolve()
    if not root.is_dir():
        raise DatasetError(f"Spider root is not a directory: {root}")
    db_dir = root / "database"
    if not db_dir.is_dir():
        raise DatasetError(f"Spider database folder not found: {db_dir} (expected <root>/database/<db_id>/<db_id>.sqlite)")
    return db_dir


def _build(records: list, file: Path, db_dir: Path, convert: Callable[[int, dict, Callable], dict | None]) -> list[Sample]:
    """Validate ``records`` with ``convert`` (Spider field names) and build samples."""
    problems: list[RecordProblem] = []
    out: list[Sample] = []
    db_ok: dict[str, bool] = {}
    for i, rec in enumerate(records):
        line = i + 1

        def where(fld: str, msg: str, line=line) -> RecordProblem:
            return RecordProblem(str(file), line, fld, msg)

        if not isinstance(rec, dict):
            problems.append(where("<record>", f"must be a JSON object, got {type(rec).__name__}"))
            continue
        n_before = len(problems)
        for fld in ("db_id", "question"):
            v = rec.get(fld)
            if not isinstance(v, str) or not v.strip():
                problems.append(where(fld, "is required and must be a non-empty string"))
        native = convert(i, rec, lambda f, m: problems.append(where(f, m)))
        db_id = rec.get("db_id")
        if isinstance(db_id, str) and db_id.strip():
            if db_id not in db_ok:
                db_ok[db_id] = (db_dir / db_id / f"{db_id}.sqlite").is_file()
            if not db_ok[db_id]:
                problems.append(where("db_id", f"database file not found: {db_dir / db_id / (db_id + '.sqlite')}"))
        if len(problems) > n_before or native is None:
            continue
        native["db_path"] = str(db_dir / db_id / f"{db_id}.sqlite")
        s, probs = sample_from_dict(native, file=str(file), line=line, check_db_exists=False)
        problems.extend(probs)
        if s is not None:
            out.append(s)
    if problems:
        raise DatasetError(f"invalid Spider file {file}", problems)
    if not out:
        raise DatasetError(f"Spider file {file} holds no samples")
    return out


def load_spider(spider_root: str | os.PathLike, *, split_file: str = "dev.json") -> list[Sample]:
    """Load Spider's questions as answerable samples.

    Args:
        spider_root: folder holding ``dev.json`` and ``database/<db_id>/<db_id>.sqlite``.
        split_file: the question file inside ``spider_root`` (default ``dev.json``).

    Returns:
        One sample per record, in file order: id ``spider-dev-<index>`` (0-based index in the file),
        group ``answerable``, subcategory ``answerable_without_evidence``, ``gold_sql`` = the
        record's ``query``, difficulty = Spider hardness (``unknown`` when the record has no usable
        ``sql`` object), provenance ``{"source": "spider", "file": split_file, "index": i}``.

    Raises:
        DatasetError: missing root, question file or database folder; a file that is not a JSON
            list; any invalid record (missing/empty ``db_id``, ``question`` or ``query``) or a
            ``db_id`` without its ``.sqlite``, all listed with file, record number and field.
    """
    db_dir = _database_dir(spider_root)
    file = Path(spider_root) / split_file
    records = _read_json_list(file, "Spider question file")
    split = Path(split_file).stem

    def convert(i: int, rec: dict, bad: Callable[[str, str], None]) -> dict | None:
        q = rec.get("query")
        if not isinstance(q, str) or not q.strip():
            bad("query", "is required and must be a non-empty string (the gold SQL)")
            return None
        return {
            "id": f"spider-{split}-{i}", "db_id": rec.get("db_id"), "question": rec.get("question"),
            "group": "answerable", "subcategory": "answerable_without_evidence", "gold_sql": q.strip(),
            "difficulty": spider_hardness(rec.get("sql")),
            "provenance": {"source": "spider", "file": split_file, "index": i},
        }

    return _build(records, file, db_dir, convert)


def load_spider_unanswerable(file: str | os.PathLike, spider_root: str | os.PathLike) -> list[Sample]:
    """Load the ``spider_unanswerable`` questions as unanswerable samples.

    Args:
        file: JSON list of ``{"db_id", "level", "question"}`` records
            (e.g. ``spider_unanswerable/spider_no_answer.json``).
        spider_root: the Spider folder whose ``database/<db_id>/<db_id>.sqlite`` they refer to.

    Returns:
        One sample per record, in file order: id ``spider-unans-<index>``, group
        ``unanswerable``, subcategory ``missing_entities_or_attributes`` (assumed, see the module
        docstring), ``gold_sql`` ``None``, empty hidden knowledge, difficulty = ``level`` when it is
        one of ``easy``/``medium``/``hard``/``extra`` else ``unknown``, provenance
        ``{"source": "spider_unanswerable", "index": i, "hidden_knowledge": "absent",
        "subcategory": "assumed"}``.

    Raises:
        DatasetError: missing file, root or database folder; not a JSON list; an invalid record
            (missing/empty ``db_id`` or ``question``, non-string ``level``) or a ``db_id`` without
            its ``.sqlite``, all listed with file, record number and field.
    """
    db_dir = _database_dir(spider_root)
    path = Path(file)
    records = _read_json_list(path, "spider_unanswerable file")

    def convert(i: int, rec: dict, bad: Callable[[str, str], None]) -> dict | None:
        level: Any = rec.get("level")
        if level is not None and not isinstance(level, str):
            bad("level", f"must be a string, got {type(level).__name__}")
            return None
        diff = level.strip().lower() if isinstance(level, str) else "unknown"
        if diff not in DIFFICULTIES:
            diff = "unknown"
        return {
            "id": f"spider-unans-{i}", "db_id": rec.get("db_id"), "question": rec.get("question"),
            "group": "unanswerable", "subcategory": "missing_entities_or_attributes", "gold_sql": None,
            "hidden_knowledge": "", "difficulty": diff,
            "provenance": {"source": "spider_unanswerable", "index": i, "hidden_knowledge": "absent",
                           "subcategory": "assumed"},
        }

    return _build(records, path, db_dir, convert)
