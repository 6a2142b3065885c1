"""BIRD loader: ``bird:<root>`` (BIRD's dev or train layout, with evidence).

BIRD's layout (dev, mini-dev and train alike)::

    <root>/dev.json                                 JSON list of {question_id, db_id, question, evidence,
                                                    SQL, difficulty}
    <root>/dev_databases/<db_id>/<db_id>.sqlite     one SQLite file per database
    <root>/dev_tables.json                          schemas (optional, not read)
    <root>/mini_dev_sqlite.json                     mini-dev's SQLite edition (read when no dev.json is
                                                    there; upstream ``bird-bench/mini_dev``, 500 records
                                                    of which question_id 137 and 138 are repeated)

    <root>/train.json + <root>/train_databases/...  the train split: same fields, no question_id or difficulty

Spec forms:

* ``bird:<root>``: the split is detected: ``dev.json`` when present, else ``mini_dev_sqlite.json`` (split
  ``dev``), else ``train.json``.
* ``bird:<file>.json``: that question file; its split is ``train`` when the file name starts with
  ``train`` else ``dev``, and the databases are ``<file's folder>/<split>_databases``.
* ``db_root`` (of :func:`~textsql_clarify.datasets.load_dataset`, ``gym.make``, the CLI) names the folder of
  ``<db_id>/<db_id>.sqlite`` files instead of ``<split>_databases``.

Mapping (ABISS §3.2): every record is an ``answerable`` sample; subcategory ``answerable_with_evidence``
when BIRD's evidence string is non-empty, else ``answerable_without_evidence``; ``evidence`` is a
one-element list holding BIRD's string (empty list when empty); difficulty is BIRD's label
(``simple`` | ``moderate`` | ``challenging``; ``unknown`` where the record has none, as in train); id
``bird-<split>-<question_id>`` (the 0-based record index where the record has no ``question_id``);
provenance ``{"source": "bird", "file": <file name>, "question_id": ...}``.

The question file is a JSON list (dev: 1,534 records; train: 9,428; a few MB at most), so it is read
whole; there is no line structure to stream. Every bad record is reported with file, record (index + 1)
and field, all at once (:class:`~textsql_clarify.errors.DatasetError`). Databases are only checked to
exist here; nothing opens them for writing.

:func:`parse_bird_questions` parses a question file without any database (the SQL-only use of
``../shared/data/bird_minidev/mini_dev_sqlite.json``, 498 questions and no databases).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import DatasetError, RecordProblem
from ..samples import Sample, sample_from_dict
from .spider import _read_json_list

#: BIRD's difficulty labels.
BIRD_DIFFICULTIES = ("simple", "moderate", "challenging")
#: Accepted keys of the gold SQL, in order (BIRD and mini-dev: ``SQL``; some re-releases: ``sql``).
_SQL_KEYS = ("SQL", "sql")
#: Question files looked for in a ``bird:<root>`` folder, in order, with their split: BIRD's dev, mini-dev's
#: SQLite edition (``bird-bench/mini_dev``'s ``mini_dev_sqlite.json``; its databases are ``dev_databases``
#: as in dev), BIRD's train.
_ROOT_FILES = (("dev.json", "dev"), ("mini_dev_sqlite.json", "dev"), ("train.json", "train"))


def _split_of(file: Path) -> str:
    """``train`` for a file named ``train*.json``, else ``dev`` (BIRD's two published splits)."""
    return "train" if file.name.lower().startswith("train") else "dev"


def _native(i: int, rec: Any, split: str, file_name: str, bad) -> dict | None:
    """One BIRD record -> a native sample dict (without ``db_path``), or None after reporting with ``bad``."""
    if not isinstance(rec, dict):
        bad("<record>", f"must be a JSON object, got {type(rec).__name__}")
        return None
    ok = True
    for fld in ("db_id", "question"):
        v = rec.get(fld)
        if not isinstance(v, str) or not v.strip():
            bad(fld, "is required and must be a non-empty string")
            ok = False
    sql_key = next((k for k in _SQL_KEYS if k in rec), None)
    sql = rec.get(sql_key) if sql_key else None
    if sql_key is None:
        bad("SQL", "is required (BIRD's gold SQL; 'SQL' or 'sql')")
        ok = False
    elif not isinstance(sql, str) or not sql.strip():
        bad(sql_key, "must be a non-empty string (the gold SQL)")
        ok = False
    ev = rec.get("evidence")
    if ev is None:
        ev = ""
    if not isinstance(ev, str):
        bad("evidence", f"must be a string (BIRD's evidence; may be empty), got {type(ev).__name__}")
        ok = False
    diff = rec.get("difficulty")
    if diff is None:
        diff = "unknown"
    elif not isinstance(diff, str) or diff.strip().lower() not in BIRD_DIFFICULTIES:
        bad("difficulty", f"must be one of {list(BIRD_DIFFICULTIES)}, got {diff!r}")
        ok = False
    else:
        diff = diff.strip().lower()
    qid = rec.get("question_id", i)
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or (isinstance(qid, str) and not qid.strip()):
        bad("question_id", f"must be an integer or a non-empty string, got {qid!r}")
        ok = False
    if not ok:
        return None
    ev = ev.strip()
    return {
        "id": f"bird-{split}-{qid}", "db_id": rec["db_id"], "question": rec["question"],
        "group": "answerable",
        "subcategory": "answerable_with_evidence" if ev else "answerable_without_evidence",
        "gold_sql": sql.strip(), "evidence": [ev] if ev else [], "difficulty": diff,
        "provenance": {"source": "bird", "file": file_name, "question_id": rec.get("question_id")},
    }


def _parse(file: Path, split: str) -> tuple[list[tuple[int, dict]], list[RecordProblem]]:
    """Every record of ``file`` as ``(record number, native dict)``, and every problem found."""
    records = _read_json_list(file, "BIRD question file")
    problems: list[RecordProblem] = []
    out: list[tuple[int, dict]] = []
    seen: dict[str, int] = {}
    for i, rec in enumerate(records):
        line = i + 1
        native = _native(i, rec, split, file.name,
                         lambda f, m, line=line: problems.append(RecordProblem(str(file), line, f, m)))
        if native is None:  # its problems are reported
            continue
        if native["id"] in seen:
            problems.append(RecordProblem(str(file), line, "question_id",
                                          f"duplicate id {native['id']!r} (first in record {seen[native['id']]})"))
            continue
        seen[native["id"]] = line
        out.append((line, native))
    return out, problems


def parse_bird_questions(file: str | os.PathLike, *, split: str | None = None) -> list[dict]:
    """Parse a BIRD question file without touching any database (BIRD dev/train, mini-dev).

    Args:
        file: ``dev.json`` / ``train.json`` / mini-dev's ``dev.json`` (a JSON list; read whole, see the
            module docstring).
        split: the id infix (``bird-<split>-<question_id>``); ``None``: ``train`` for a file named
            ``train*`` else ``dev``.

    Returns:
        One native sample dict per record, in file order, without ``db_path``: ``id``, ``db_id``,
        ``question``, ``group`` (``answerable``), ``subcategory`` (``answerable_with_evidence`` |
        ``answerable_without_evidence``, ABISS §3.2), ``gold_sql``, ``evidence`` (list), ``difficulty``,
        ``provenance``. Pass one to :func:`textsql_clarify.samples.sample_from_dict` with a ``db_root`` to
        build a :class:`~textsql_clarify.samples.Sample`.

    Raises:
        DatasetError: missing or unreadable file, not a JSON list, or any bad record (not an object;
            missing/empty ``db_id``, ``question`` or ``SQL``; non-string ``evidence``; a difficulty other
            than simple/moderate/challenging; a bad or duplicate ``question_id``), all listed with file,
            record (index + 1) and field.
    """
    path = Path(file)
    natives, problems = _parse(path, split or _split_of(path))
    if problems:
        raise DatasetError(f"invalid BIRD question file {path}", problems)
    if not natives:
        raise DatasetError(f"BIRD question file {path} holds no records")
    return [n for _line, n in natives]


def _locate(spec_path: str | os.PathLike) -> tuple[Path, str]:
    """The question file and split of a ``bird:`` spec path (a root folder or a ``.json`` file)."""
    p = Path(spec_path).resolve()
    if p.is_file():
        return p, _split_of(p)
    if not p.is_dir():
        raise DatasetError(f"BIRD root not found: {p} (expected a folder with dev.json or train.json, or a .json file)")
    for name, split in _ROOT_FILES:
        if (p / name).is_file():
            return p / name, split
    raise DatasetError(f"BIRD root {p} holds none of {', '.join(n for n, _ in _ROOT_FILES)}")


def load_bird(root: str | os.PathLike, *, db_root: str | os.PathLike | None = None) -> list[Sample]:
    """Load BIRD questions over their databases as answerable samples (BIRD dev/train layout).

    Args:
        root: the BIRD folder (the first of ``dev.json``, ``mini_dev_sqlite.json``, ``train.json`` there) or a
            question file.
        db_root: folder of ``<db_id>/<db_id>.sqlite``; ``None``: ``<folder>/<split>_databases``.

    Returns:
        One sample per record, in file order (mapping in the module docstring), each with an absolute
        ``db_path`` to an existing file.

    Raises:
        DatasetError: missing root, question file or database folder (the message names the folder;
            :func:`parse_bird_questions` reads the questions without databases); any bad record (see
            :func:`parse_bird_questions`) or a ``db_id`` without its ``.sqlite``, all listed with file,
            record and field.
    """
    file, split = _locate(root)
    if db_root is not None:
        db_dir = Path(db_root).resolve()
        if not db_dir.is_dir():
            raise DatasetError(f"BIRD database folder (db_root) not found: {db_dir}")
    else:
        db_dir = file.parent / f"{split}_databases"
        if not db_dir.is_dir():
            raise DatasetError(
                f"BIRD database folder not found: {db_dir} (expected {db_dir}/<db_id>/<db_id>.sqlite for the "
                f"questions in {file}; give db_root to use another folder, or parse the questions alone with "
                f"textsql_clarify.datasets.bird.parse_bird_questions)")
    natives, problems = _parse(file, split)
    out: list[Sample] = []
    db_ok: dict[str, bool] = {}
    for line, native in natives:
        db_id = native["db_id"]
        if db_id not in db_ok:
            db_ok[db_id] = (db_dir / db_id / f"{db_id}.sqlite").is_file()
        if not db_ok[db_id]:
            problems.append(RecordProblem(str(file), line, "db_id",
                                          f"database file not found: {db_dir / db_id / (db_id + '.sqlite')}"))
            continue
        native = {**native, "db_path": str(db_dir / db_id / f"{db_id}.sqlite")}
        s, probs = sample_from_dict(native, file=str(file), line=line, check_db_exists=False)
        problems.extend(probs)
        if s is not None:
            out.append(s)
    if problems:
        raise DatasetError(f"invalid BIRD dataset {file}", problems)
    if not out:
        raise DatasetError(f"BIRD question file {file} holds no records")
    return out


def load_from_spec(rest: str, *, spec: str, db_root: str | None) -> list[Sample]:
    """The ``bird:<root>`` spec (registry entry of :mod:`textsql_clarify.datasets`).

    Args:
        rest: the spec after ``bird:`` (a folder or a ``.json`` question file). spec: the whole spec.
        db_root: the database folder (``<db_id>/<db_id>.sqlite``), or ``None`` for ``<split>_databases``.
    Raises:
        DatasetError: see :func:`load_bird`.
    """
    if not rest.strip():
        raise DatasetError(f"bad dataset spec {spec!r}: expected 'bird:<root>'")
    return load_bird(rest, db_root=db_root)
