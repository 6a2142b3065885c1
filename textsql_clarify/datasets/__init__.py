"""Dataset loaders: one spec string names a dataset, :func:`load_dataset` returns validated samples.

Specs (see ``docs/dataset-format.md``):

* ``embedded``: the packaged university dataset (:mod:`.university`), the default.
* ``spider:<root>``: Spider's ``<root>/dev.json`` over ``<root>/database/<db_id>/<db_id>.sqlite``,
  as answerable samples (:func:`.spider.load_spider`).
* ``spider-unanswerable:<file>:<spider root>``: the ``spider_unanswerable`` questions as
  unanswerable samples (:func:`.spider.load_spider_unanswerable`).
* ``<path>.jsonl`` or ``jsonl:<path>``: a native JSONL file (:func:`textsql_clarify.samples.load_jsonl`).

Every loader raises :class:`~textsql_clarify.errors.DatasetError` with a message that names the bad
spec, path, record and field.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import DatasetError
from ..samples import Sample, load_jsonl
from .university import build_database, embedded_db_path, load_embedded
from .spider import load_spider, load_spider_unanswerable
from .spider_hardness import spider_hardness

__all__ = [
    "load_dataset", "embedded_db_path", "list_dataset_kinds", "load_embedded", "load_spider",
    "load_spider_unanswerable", "spider_hardness", "build_database",
]

_KINDS = {
    "embedded": "the packaged university dataset (samples.jsonl over university.sqlite)",
    "spider:<root>": "Spider dev.json + database/<db_id>/<db_id>.sqlite, answerable samples",
    "spider-unanswerable:<file>:<spider root>": "spider_unanswerable questions over the Spider databases, unanswerable samples",
    "<path>.jsonl or jsonl:<path>": "a native JSONL dataset (relative db_path resolves against the file's folder; "
                                    "drift records are checked against the database)",
}


def list_dataset_kinds() -> list[str]:
    """The accepted dataset spec forms, each with a one-line description, for CLI help.

    Returns:
        Strings such as ``"spider:<root>  Spider dev.json + ..."``.
    """
    return [f"{k}  {v}" for k, v in _KINDS.items()]


def _split_unanswerable(rest: str) -> tuple[str, str]:
    """Split ``<file>:<spider root>``; a colon right after ``.json`` wins, else the last colon."""
    idx = rest.lower().find(".json:")
    if idx >= 0:
        return rest[: idx + 5], rest[idx + 6:]
    file, sep, root = rest.rpartition(":")
    if not sep:
        raise DatasetError(f"bad dataset spec 'spider-unanswerable:{rest}': expected "
                           "'spider-unanswerable:<file>:<spider root>'")
    return file, root


def load_dataset(spec: str | os.PathLike = "embedded", *, limit: int | None = None) -> list[Sample]:
    """Load a dataset by spec.

    Args:
        spec: ``"embedded"``, ``"spider:<root>"``, ``"spider-unanswerable:<file>:<spider root>"``,
            ``"jsonl:<path>"`` or a path ending in ``.jsonl`` (``str`` or ``os.PathLike``).
        limit: keep only the first ``limit`` samples (file order); ``None`` keeps all. The whole
            file is still validated.

    Returns:
        The samples, validated, each with an absolute ``db_path`` to an existing SQLite file.

    Raises:
        DatasetError: unknown or empty spec, missing part of a spec, bad path, missing database,
            invalid records (each named with file, record and field), or a ``limit`` that is not a
            positive integer.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DatasetError(f"limit must be a positive integer or None, got {limit!r}")
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise DatasetError(f"dataset spec must be a string or path, got {type(spec).__name__}")
    s = spec.strip()
    if s == "embedded":
        samples = load_embedded()
    elif s.startswith("spider-unanswerable:"):
        file, root = _split_unanswerable(s[len("spider-unanswerable:"):])
        if not file or not root:
            raise DatasetError(f"bad dataset spec {spec!r}: expected 'spider-unanswerable:<file>:<spider root>'")
        samples = load_spider_unanswerable(file, root)
    elif s.startswith("spider:"):
        root = s[len("spider:"):]
        if not root:
            raise DatasetError(f"bad dataset spec {spec!r}: expected 'spider:<root>'")
        samples = load_spider(root)
    elif s.startswith("jsonl:") or s.lower().endswith(".jsonl"):
        path = s[len("jsonl:"):] if s.startswith("jsonl:") else s
        if not path:
            raise DatasetError(f"bad dataset spec {spec!r}: expected 'jsonl:<path>'")
        file = Path(path).resolve()
        samples = load_jsonl(file)
        from .drift_check import drift_problems  # runs queries: only for drift records

        problems = drift_problems(samples, file)
        if problems:
            raise DatasetError(f"invalid drift records in {file}", problems)
    else:
        kinds = "; ".join(_KINDS)
        raise DatasetError(f"unknown dataset spec {spec!r}; accepted forms: {kinds}")
    return samples if limit is None else samples[:limit]
