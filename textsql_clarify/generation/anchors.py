"""Anchors: the gold queries that generated samples grow from (TIDE §3.1 "anchor").

Two sources:

* any dataset spec that :func:`textsql_clarify.datasets.load_dataset` accepts (``spider:<root>``,
  ``embedded``, a ``.jsonl`` file, ...): every sample with a gold SQL becomes an anchor; samples without
  one (unanswerable, withheld golds) and samples whose gold the load-time validation cannot use (it fails,
  times out, returns no rows or reads the clock: flags :data:`UNUSABLE_FLAGS`) are skipped and counted;
* a SQLite database file plus a JSONL file of ``{"id"?, "question", "sql" | "query" | "gold_sql",
  "difficulty"?, "evidence"?}`` records, one per line (``docs/generation.md``).

:func:`load_anchors` returns an :class:`AnchorList`: a ``list`` of :class:`~.base.Anchor` that also says
where the anchors came from and what was skipped, and why.
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import DatasetError, RecordProblem
from ..samples import DIFFICULTIES
from ..text import loads_valid_unicode
from .base import Anchor

__all__ = ["AnchorList", "UNUSABLE_FLAGS", "SAME_GOLD", "load_anchors", "anchors_from_queries", "anchor_gold",
           "distinct_gold_anchors"]

#: Load-time validation flags (:mod:`textsql_clarify.datasets.validate`) that make a gold unusable as an
#: anchor: every recipe executes the anchor's gold, and a generated sample with such a gold would be moved
#: out by the pipeline's own validation anyway.
UNUSABLE_FLAGS = ("gold_error", "gold_empty", "gold_timeout", "gold_nondeterministic")
#: The SQL field names a queries file may use, in the order they are looked up.
SQL_FIELDS = ("sql", "query", "gold_sql")
#: The ``skipped`` reason of an anchor whose gold SQL an earlier anchor of the same database already has
#: (:func:`distinct_gold_anchors`, ``generate --distinct-golds``).
SAME_GOLD = "same gold SQL as an earlier anchor"
_QUERY_FIELDS = frozenset({"id", "question", "difficulty", "evidence", *SQL_FIELDS})
_SQLITE_MAGIC = b"SQLite format 3\x00"


class AnchorList(list):
    """The anchors (a ``list`` of :class:`~.base.Anchor`, in source order), plus where they came from.

    Attributes:
        source: the dataset spec, or the queries file (as given).
        skipped: reason -> number of source records that did not become an anchor (e.g.
            ``"no gold SQL"``, ``"gold_empty"``); empty when none.
        n_source: number of records the source held (anchors + skipped).
    """

    def __init__(self, anchors=(), *, source: str = "", skipped: dict[str, int] | None = None,
                 n_source: int | None = None):
        super().__init__(anchors)
        self.source = source
        self.skipped = dict(skipped or {})
        self.n_source = len(self) + sum(self.skipped.values()) if n_source is None else n_source

    def summary(self) -> str:
        """One line: how many anchors, from where, and what was skipped (reason: count)."""
        skip = ", ".join(f"{k}: {v}" for k, v in self.skipped.items())
        return (f"{len(self)} anchors from {self.source} ({self.n_source} records"
                + (f"; skipped {skip})" if skip else ")"))


def load_anchors(spec: str | os.PathLike | None = None, *, db: str | os.PathLike | None = None,
                 queries: str | os.PathLike | None = None, limit: int | None = None,
                 db_root: str | os.PathLike | None = None) -> AnchorList:
    """Load anchors from a dataset spec, or from a database file and a JSONL file of its queries.

    Args:
        spec: a dataset spec of :func:`textsql_clarify.datasets.load_dataset`; the samples are validated
            (cached per file) and those with no gold SQL or an unusable one (:data:`UNUSABLE_FLAGS`) are skipped.
        db: a SQLite database file (with ``queries``, instead of ``spec``); opened by no one here, never written.
        queries: the JSONL file of ``{"id"?, "question", "sql" | "query" | "gold_sql", "difficulty"?,
            "evidence"?}`` over ``db`` (with ``db``).
        limit: keep only the first ``limit`` anchors (after skipping); ``None`` keeps all.
        db_root: passed to ``load_dataset`` (records of a spec that name no database file).

    Returns:
        An :class:`AnchorList` in source order; anchor ids are the samples' ids (spec) or the records' ``id``
        (default ``"<db stem>-<line>"``).

    Raises:
        DatasetError: neither or both of ``spec`` and ``db``/``queries``; a bad spec or database; a bad
            queries record (each problem with file, line and field); ``limit`` not a positive integer; no
            anchor left.

    Source: TIDE §3.1 (anchors are gold queries that execute and return rows).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DatasetError(f"limit must be a positive integer or None, got {limit!r}")
    if spec is not None and (db is not None or queries is not None):
        raise DatasetError("give either a dataset spec (--anchors) or a database and its queries (--db, --queries), "
                           "not both")
    if spec is None:
        if db is None or queries is None:
            raise DatasetError("anchors need a dataset spec (--anchors SPEC), or both a database file (--db) and a "
                               "JSONL file of its questions and SQL (--queries)")
        out = anchors_from_queries(db, queries)
    else:
        out = _anchors_from_spec(os.fspath(spec), db_root)
    if not out:
        raise DatasetError(f"no anchors in {out.source}: {out.summary()}")
    if limit is not None and len(out) > limit:
        out = AnchorList(out[:limit], source=out.source, skipped=out.skipped, n_source=out.n_source)
    return out


def _anchors_from_spec(spec: str, db_root) -> AnchorList:
    from ..datasets import load_dataset

    samples = load_dataset(spec, db_root=db_root)
    skipped: Counter = Counter()
    out = []
    for s in samples:
        if s.gold_sql is None:
            skipped["no gold SQL"] += 1
            continue
        bad = [f for f in UNUSABLE_FLAGS if f in s.flags]
        if bad:
            skipped[bad[0]] += 1
            continue
        out.append(Anchor(id=s.id, db_id=s.db_id, db_path=str(Path(s.db_path).resolve()), question=s.question,
                          gold_sql=s.gold_sql, difficulty=s.difficulty, evidence=tuple(s.evidence), source=spec))
    return AnchorList(out, source=spec, skipped=dict(skipped), n_source=len(samples))


def _check_database(db: Path) -> None:
    if not db.is_file():
        raise DatasetError(f"database file not found: {db}")
    try:
        with open(db, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise DatasetError(f"cannot read database file {db}: {e}") from e
    if head != _SQLITE_MAGIC:
        raise DatasetError(f"{db} is not a SQLite database (its header is not 'SQLite format 3')")


def anchors_from_queries(db: str | os.PathLike, queries: str | os.PathLike) -> AnchorList:
    """Anchors from one SQLite database and a JSONL file of its questions and gold SQL.

    Args:
        db: the database file (checked to exist and to be SQLite; never written).
        queries: JSONL, one object per line: ``question`` (str), one of ``sql`` / ``query`` / ``gold_sql``
            (str), optional ``id`` (str or int; default ``"<db stem>-<line>"``), ``difficulty`` (one of
            :data:`~textsql_clarify.samples.DIFFICULTIES`), ``evidence`` (str or list of str). Blank lines
            are skipped.

    Returns:
        An :class:`AnchorList` in file order; ``db_id`` is the database file's stem.

    Raises:
        DatasetError: the database is missing or not SQLite; the queries file is missing or unreadable; any
            bad record (invalid JSON, a missing or empty field, two SQL fields, an unknown field, a duplicate
            id), all listed with file, line and field.

    Source: TIDE §3.1 (anchors); ``docs/generation.md`` "The command".
    """
    dbp = Path(db).resolve()
    _check_database(dbp)
    qp = Path(queries)
    if not qp.is_file():
        raise DatasetError(f"queries file not found: {queries}")
    try:
        text = qp.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read queries file {queries}: {e}") from e
    problems: list[RecordProblem] = []
    out: list[Anchor] = []
    seen: dict[str, int] = {}
    for ln, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue

        def bad(fld: str, msg: str, ln=ln) -> None:
            problems.append(RecordProblem(str(queries), ln, fld, msg))

        try:
            rec: Any = loads_valid_unicode(raw)  # a lone surrogate escape reads as U+FFFD, as in the datasets
        except (ValueError, RecursionError) as e:
            bad("<record>", f"invalid JSON: {getattr(e, 'msg', str(e)[:120])}")
            continue
        if not isinstance(rec, dict):
            bad("<record>", f"must be a JSON object, got {type(rec).__name__}")
            continue
        n0 = len(problems)
        for k in rec:
            if k not in _QUERY_FIELDS:
                bad(k, f"unknown field (known: {sorted(_QUERY_FIELDS)})")
        q = rec.get("question")
        if not isinstance(q, str) or not q.strip():
            bad("question", "is required and must be a non-empty string")
        given = [f for f in SQL_FIELDS if f in rec]
        sql = None
        if not given:
            bad("sql", f"is required (one of {list(SQL_FIELDS)})")
        elif len(given) > 1:
            bad(given[1], f"give one SQL field, got {given}")
        else:
            sql = rec[given[0]]
            if not isinstance(sql, str) or not sql.strip():
                bad(given[0], "must be a non-empty string")
        rid = rec.get("id", f"{dbp.stem}-{ln}")
        if isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
            bad("id", f"must be a non-empty string or an integer, got {rid!r}")
        else:
            rid = str(rid)
            if rid in seen:
                bad("id", f"duplicate id {rid!r} (first on line {seen[rid]})")
        diff = rec.get("difficulty", "unknown")
        if diff is None:
            diff = "unknown"
        if diff not in DIFFICULTIES:
            bad("difficulty", f"must be one of {list(DIFFICULTIES)}, got {diff!r}")
        ev = rec.get("evidence", [])
        if ev is None:
            ev = []
        if isinstance(ev, str):
            ev = [ev] if ev.strip() else []
        if not isinstance(ev, list) or not all(isinstance(e, str) for e in ev):
            bad("evidence", "must be a string or a list of strings")
        if len(problems) > n0:
            continue
        seen[rid] = ln
        out.append(Anchor(id=rid, db_id=dbp.stem, db_path=str(dbp), question=q, gold_sql=sql, difficulty=diff,
                          evidence=tuple(ev), source=str(queries)))
    if problems:
        raise DatasetError(f"invalid queries file {queries}", problems)
    return AnchorList(out, source=str(queries))


def anchor_gold(gold_sql: str) -> str:
    """The digest of an anchor's gold SQL that every generated sample carries as ``provenance["anchor_gold"]``.

    Two anchors with the same digest ask the same source query (Spider dev asks most of its queries twice, in
    two phrasings with the identical gold text); the load-time duplicate check
    (:func:`textsql_clarify.datasets.validate.validate_samples`, ``duplicate_gold``) does not count generated
    samples with the same digest as duplicates of each other.

    Args:
        gold_sql: the anchor's gold SQL (str).
    Returns:
        The first 16 hex digits of the SHA-256 of ``gold_sql`` (UTF-8) with its whitespace collapsed (every run
        of whitespace one space, none at either end); case and everything else kept.
    Raises:
        TypeError: ``gold_sql`` is not a string.

    Source: ABISS §4.2 stage 1 (duplicates); ``docs/datasets.md`` "Validation at load time" (the duplicate-gold
    rule for generated corpora).
    """
    if not isinstance(gold_sql, str):
        raise TypeError(f"gold_sql must be a string, got {type(gold_sql).__name__}")
    return hashlib.sha256(" ".join(gold_sql.split()).encode("utf-8")).hexdigest()[:16]


def distinct_gold_anchors(anchors) -> AnchorList:
    """One anchor per (database, gold SQL): the first, in order; the others are counted as skipped.

    Args:
        anchors: a sequence of :class:`~.base.Anchor` (an :class:`AnchorList` keeps its source, skipped
            counts and ``n_source``).
    Returns:
        An :class:`AnchorList` of the kept anchors, in input order; ``skipped`` gains :data:`SAME_GOLD` with
        the number dropped (absent when none was). Golds are compared as :func:`anchor_gold` digests (whitespace
        aside), on the same ``db_path`` only.

    Source: ``docs/generation.md`` (``generate --distinct-golds``, the strict corpus: one anchor per source query).
    """
    seen: set[tuple[str, str]] = set()
    kept = []
    for a in anchors:
        key = (a.db_path, anchor_gold(a.gold_sql))
        if key not in seen:
            seen.add(key)
            kept.append(a)
    skipped = dict(getattr(anchors, "skipped", None) or {})
    if len(kept) < len(anchors):
        skipped[SAME_GOLD] = skipped.get(SAME_GOLD, 0) + len(anchors) - len(kept)
    n_source = getattr(anchors, "n_source", len(anchors))
    return AnchorList(kept, source=getattr(anchors, "source", ""), skipped=skipped, n_source=n_source)
