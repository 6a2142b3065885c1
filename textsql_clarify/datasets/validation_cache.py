"""The on-disk cache of load-time validation results (:mod:`.validate`), one JSON file per dataset.

A dataset is validated once per state of its files: the cache key is the SHA-256 of

* the validator version (:data:`textsql_clarify.datasets.validate.VALIDATOR_VERSION`), its sandbox
  settings (time limit, row cap) and a SHA-256 of the source of the code its checks run
  (:data:`textsql_clarify.datasets.validate._CODE_FILES`: the validator, the scorer, the masking, the sandbox),
  so that a change there misses the cache even where nobody bumped the version;
* the dataset spec;
* ``(path, size, mtime_ns)`` of every source file the spec names (a file, or the ``.json`` / ``.jsonl``
  files directly inside a folder it names; the packaged ``samples.jsonl`` for ``embedded``);
* ``(path, size, mtime_ns)`` of every database the samples use;
* a digest of what the validator reads from each sample (id, database, group, question, gold SQL,
  interpretations' golds; the question decides whether a value-masked duplicate is another reading), so
  that a loader whose code changed (a repaired gold, a new id scheme, a reworded question) misses the cache
  even where no file changed.

The file is ``<cache_root>/validation/<sha256>.json`` (:func:`textsql_clarify.models.cache_root`), written
to a temporary name in that folder and renamed, so a reader never sees half a file. Keys and files are
ASCII-escaped JSON, so a lone surrogate in an id or a SQL string (a valid JSON escape) cannot break them. A
file that cannot be read, is not valid JSON, or does not match the samples (count, ids, flags) counts as a
miss and is rewritten. The cache is an optimisation only: a folder that cannot be written is skipped silently.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

from ..samples import SAMPLE_FLAGS, Sample

__all__ = ["cache_key", "cache_path", "read_cached", "write_cached"]


def _stat(path: Path) -> list:
    """``[resolved path, size in bytes, mtime in ns]`` of an existing file."""
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def source_files(spec: str) -> list[Path]:
    """The files a dataset spec names, resolved and sorted (see the module docstring).

    Args:
        spec: a dataset spec (``embedded``, ``spider:<root>``, ``<kind>:<a>:<b>``, a ``.jsonl`` path).
    Returns:
        Existing files only; a part of the spec that is not a path is skipped.
    """
    if spec.strip() == "embedded":
        from .university import SAMPLES_FILE

        return [Path(SAMPLES_FILE).resolve()]
    from . import _LOADERS

    head, _, tail = spec.partition(":")
    known = head in _LOADERS or head in ("spider", "spider-unanswerable", "jsonl")
    # the spec itself (a .jsonl path), or its parts (after its kind)
    parts = [spec] + (tail.split(":") if known else spec.split(":"))
    found: set[Path] = set()
    for part in parts:
        if not part:
            continue
        p = Path(part)
        try:
            if p.is_file():
                found.add(p.resolve())
            elif p.is_dir():
                found.update(q.resolve() for q in p.iterdir()
                             if q.suffix.lower() in (".json", ".jsonl") and q.is_file())
        except OSError:
            continue
    return sorted(found)


def _sample_digest(samples: Sequence[Sample]) -> str:
    """SHA-256 of what the validator reads from each sample, in order."""
    h = hashlib.sha256()
    for s in samples:
        rec = [s.id, s.db_path, s.group, s.question, s.gold_sql, [i.gold_sql for i in s.interpretations],
               s.drift.post_gold_sql if s.drift is not None else None]
        h.update(json.dumps(rec, ensure_ascii=True).encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


def cache_key(spec: str, samples: Sequence[Sample], settings: dict[str, Any], *,
              code: str) -> tuple[str, dict]:
    """The cache key of one validation run.

    Args:
        spec: the dataset spec. samples: the loaded samples (before validation).
        settings: the validator's version and sandbox settings (JSON-ready values).
        code: a digest of the validator's code (``validate._code_digest()``, which the validator passes, so
            that this module never imports the validator), stored as ``key["code"]``.
    Returns:
        ``(sha256 hex digest, the key record it hashes)``; the record is stored in the cache file too.
    Raises:
        OSError: a database file vanished between loading and validating.
    """
    dbs = sorted({s.db_path for s in samples})
    key = {
        "settings": settings,
        "spec": spec,
        "sources": [_stat(p) for p in source_files(spec)],
        "databases": [_stat(Path(d).resolve()) for d in dbs],
        "samples": [len(samples), _sample_digest(samples)],
    }
    key["code"] = code
    text = json.dumps(key, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), key


def cache_path(digest: str) -> Path:
    """``<cache_root>/validation/<digest>.json``."""
    from ..models import cache_root

    return cache_root() / "validation" / f"{digest}.json"


def read_cached(digest: str, samples: Sequence[Sample]) -> list[tuple[int, str, str]] | None:
    """The cached problems for ``samples``, or ``None`` on a miss.

    Returns:
        ``[(sample index, flag, message), ...]`` as :func:`write_cached` stored them; ``None`` when there is
        no file, or it is unreadable, not JSON, or does not fit ``samples`` (wrong count, an index out of
        range, an id that differs, an unknown flag): such a file is then rewritten by the caller.
    """
    path = cache_path(digest)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    try:
        if data["n"] != len(samples) or data["key_sha256"] != digest:
            return None
        out = []
        for index, sid, flag, message in data["problems"]:
            if not (isinstance(index, int) and 0 <= index < len(samples) and samples[index].id == sid
                    and flag in SAMPLE_FLAGS and isinstance(message, str)):
                return None
            out.append((index, flag, message))
        return out
    except (KeyError, TypeError, ValueError):
        return None


def write_cached(digest: str, key: dict, samples: Sequence[Sample], problems: Sequence[tuple[int, str, str]]) -> Path | None:
    """Store the problems of one validation run (temporary file, then rename).

    Args:
        digest, key: from :func:`cache_key`. samples: the validated samples (for their ids).
        problems: ``[(sample index, flag, message), ...]``.
    Returns:
        The cache file's path, or ``None`` when it could not be written (the cache is then skipped).
    """
    path = cache_path(digest)
    record = {"key_sha256": digest, "key": key, "n": len(samples),
              "problems": [[i, samples[i].id, flag, msg] for i, flag, msg in problems]}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, ensure_ascii=True)
        os.replace(tmp, path)
        return path
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return None
