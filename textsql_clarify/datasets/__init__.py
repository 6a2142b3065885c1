"""Dataset loaders: one spec string names a dataset, :func:`load_dataset` returns validated samples.

Specs (see ``docs/dataset-format.md``):

* ``embedded``: the packaged university dataset (:mod:`.university`), the default.
* ``spider:<root>``: Spider's ``<root>/dev.json`` over ``<root>/database/<db_id>/<db_id>.sqlite``,
  as answerable samples (:func:`.spider.load_spider`).
* ``spider-unanswerable:<file>:<spider root>``: the ``spider_unanswerable`` questions as
  unanswerable samples (:func:`.spider.load_spider_unanswerable`).
* ``<path>.jsonl`` or ``jsonl:<path>[:<db root>]``: a native JSONL file
  (:func:`textsql_clarify.samples.load_jsonl`).
* ``mmsql:<file>:<spider root>``, ``cosql:<dir>:<spider root>``, ``ambiqt:<dir>:<spider root>``,
  ``mini-interact:<dir>``, ``bird:<root>``, ``abiss:<file>:<db root>``: the public sets' own formats
  (one module each, see ``docs/datasets.md``).

Every spec also takes ``db_root`` (the keyword of :func:`load_dataset`, ``gym.make(..., db_root=)``, the
CLI's ``--db-root``): the folder of ``<db_id>/<db_id>.sqlite`` files for records that name no database file.

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

#: spec prefix -> (module under textsql_clarify.datasets, its spec form, one-line description). Each
#: module defines ``load_from_spec(rest: str, *, spec: str, db_root: str | None) -> list[Sample]`` (``rest`` is the
#: spec after ``<prefix>:``); it is imported only when its spec is used.
_LOADERS: dict[str, tuple[str, str, str]] = {
    "mmsql": ("mmsql", "mmsql:<file>:<spider root>",
              "MMSQL dialogues: every user turn a sample, earlier turns as its dialogue"),
    "cosql": ("cosql", "cosql:<dir>:<spider root>",
              "CoSQL's published dev.json: one sample per turn with its dialogue"),
    "ambiqt": ("ambiqt", "ambiqt:<dir>:<spider root>",
               "AmbiQT items over databases rebuilt from Spider into a cache folder"),
    "mini-interact": ("mini_interact", "mini-interact:<dir>",
                      "BIRD-Interact's mini-interact tasks (clarification only: gold SQL withheld upstream)"),
    "bird": ("bird", "bird:<root>", "BIRD dev.json + dev_databases/<db>/<db>.sqlite, with evidence"),
    "abiss": ("abiss", "abiss:<file>:<db root>", "ABISS's released JSON records"),
}

#: spec kinds whose databases the spec itself names: a db_root given with them is an error, not ignored.
_NO_DB_ROOT = frozenset({"spider", "spider-unanswerable", "mmsql", "cosql", "ambiqt"})

_KINDS = {
    "embedded": "the packaged university dataset (samples.jsonl over university.sqlite)",
    "spider:<root>": "Spider dev.json + database/<db_id>/<db_id>.sqlite, answerable samples",
    "spider-unanswerable:<file>:<spider root>": "spider_unanswerable questions over the Spider databases, unanswerable samples",
    "<path>.jsonl or jsonl:<path>[:<db root>]": "a native JSONL dataset (relative db_path resolves against the file's "
                                                "folder; drift records are checked against the database)",
    **{form: desc for _m, form, desc in _LOADERS.values()},
}


def list_dataset_kinds() -> list[str]:
    """The accepted dataset spec forms, each with a one-line description, for CLI help.

    Returns:
        Strings such as ``"spider:<root>  Spider dev.json + ..."``.
    """
    return [f"{k}  {v}" for k, v in _KINDS.items()]


def split_spec_paths(rest: str, spec: str, form: str) -> tuple[str, str]:
    """Split ``<path>:<path>`` of a two-path spec: a colon right after ``.json`` / ``.jsonl`` wins, else the
    last colon.

    Args:
        rest: the spec after its ``<kind>:`` prefix. spec, form: the whole spec and its expected form,
            for the error message.
    Returns:
        The two parts, neither empty.
    Raises:
        DatasetError: no colon, or an empty part.
    """
    low = rest.lower()
    for ext in (".jsonl:", ".json:"):
        idx = low.find(ext)
        if idx >= 0:
            a, b = rest[: idx + len(ext) - 1], rest[idx + len(ext):]
            break
    else:
        a, sep, b = rest.rpartition(":")
        if not sep:
            a, b = rest, ""
    if not a or not b:
        raise DatasetError(f"bad dataset spec {spec!r}: expected {form!r}")
    return a, b


def _split_unanswerable(rest: str) -> tuple[str, str]:
    """Split ``<file>:<spider root>`` of a ``spider-unanswerable:`` spec (:func:`split_spec_paths`)."""
    return split_spec_paths(rest, f"spider-unanswerable:{rest}", "spider-unanswerable:<file>:<spider root>")


def _load_jsonl_spec(s: str, spec: str, db_root: str | None) -> list[Sample]:
    path = s[len("jsonl:"):] if s.startswith("jsonl:") else s
    if ".jsonl:" in path.lower():  # jsonl:<file>.jsonl:<db root>
        path, db_root = split_spec_paths(path, spec, "jsonl:<path>[:<db root>]")
    if not path:
        raise DatasetError(f"bad dataset spec {spec!r}: expected 'jsonl:<path>'")
    file = Path(path).resolve()
    if db_root is not None:
        db_root = str(Path(db_root).resolve())
        if not Path(db_root).is_dir():
            raise DatasetError(f"db_root is not a directory: {db_root}")
    samples = load_jsonl(file, db_root=db_root)
    from .drift_check import drift_problems  # runs queries: only for drift records

    problems = drift_problems(samples, file)
    if problems:
        raise DatasetError(f"invalid drift records in {file}", problems)
    return samples


def load_dataset(spec: str | os.PathLike = "embedded", *, limit: int | None = None,
                 db_root: str | os.PathLike | None = None, validate: bool = True) -> list[Sample]:
    """Load a dataset by spec.

    Args:
        spec: ``"embedded"``, ``"spider:<root>"``, ``"spider-unanswerable:<file>:<spider root>"``,
            ``"jsonl:<path>[:<db root>]"`` or a path ending in ``.jsonl``, or one of the public sets' specs
            (:func:`list_dataset_kinds`); ``str`` or ``os.PathLike``.
        limit: keep only the first ``limit`` samples (file order); ``None`` keeps all. The whole
            file is still validated.
        db_root: folder of ``<db_id>/<db_id>.sqlite`` files, for records that name no database file (a
            root inside the spec wins).
        validate: run the load-time validation (:func:`textsql_clarify.datasets.validate.validate_loaded`:
            golds execute and return data, interpretations differ, ...), cached per file; flagged samples are
            kept with their ``flags``. ``False`` skips it.

    Returns:
        The samples, validated, each with an absolute ``db_path`` to an existing SQLite file.

    Raises:
        DatasetError: unknown or empty spec, missing part of a spec, bad path (one holding NUL too), missing
            database, invalid records (each named with file, record and field), or a ``limit`` that is not a
            positive integer.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DatasetError(f"limit must be a positive integer or None, got {limit!r}")
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise DatasetError(f"dataset spec must be a string or path, got {type(spec).__name__}")
    if db_root is not None:
        db_root = os.fspath(db_root)
    for what, val in (("dataset spec", spec), ("db_root", db_root)):
        if isinstance(val, str) and "\x00" in val:  # no path holds NUL: Path.resolve raises ValueError on it
            raise DatasetError(f"{what} {val!r} holds a NUL character; no path can")
    s = spec.strip()
    kind = s.split(":", 1)[0] if ":" in s else ""
    if db_root is not None and (s == "embedded" or kind in _NO_DB_ROOT):
        raise DatasetError(f"db_root is not used by the {kind or s!r} spec (its databases come from the spec "
                           f"itself); drop --db-root / db_root, or name the Spider root inside the spec")
    if s == "embedded":
        samples = load_embedded()
    elif s.startswith("spider-unanswerable:"):
        file, root = _split_unanswerable(s[len("spider-unanswerable:"):])
        samples = load_spider_unanswerable(file, root)
    elif s.startswith("spider:"):
        root = s[len("spider:"):]
        if not root:
            raise DatasetError(f"bad dataset spec {spec!r}: expected 'spider:<root>'")
        samples = load_spider(root)
    elif kind not in _LOADERS and (s.startswith("jsonl:") or s.lower().endswith(".jsonl") or ".jsonl:" in s.lower()):
        samples = _load_jsonl_spec(s, spec, db_root)
    elif kind in _LOADERS:  # before the .jsonl test: mini-interact:<dir>/mini_interact.jsonl is its spec
        import importlib

        module, form, _ = _LOADERS[kind]
        rest = s[len(kind) + 1:]
        if not rest:
            raise DatasetError(f"bad dataset spec {spec!r}: expected {form!r}")
        mod = importlib.import_module(f"{__name__}.{module}")
        samples = mod.load_from_spec(rest, spec=spec, db_root=db_root)
    else:
        kinds = "; ".join(_KINDS)
        raise DatasetError(f"unknown dataset spec {spec!r}; accepted forms: {kinds}")
    if validate:
        from .validate import validate_loaded

        samples = validate_loaded(samples, spec=s)
    return samples if limit is None else samples[:limit]
