"""AmbiQT loader: ``ambiqt:<dir>:<spider root>``, ambiguous samples over databases rebuilt from Spider.

AmbiQT (Bhaskar et al., 2023, "Benchmarking and Improving Text-to-SQL Generation under Ambiguity";
``testzer0/AmbiQT``) gives each question two valid gold queries, ``query1`` and ``query2``, over a
schema that AmbiQT changed so that the question fits two schema elements. ``<dir>`` holds one folder
per kind (``tbl-split``, ``tbl-agg``; also ``col-synonyms`` and ``tbl-synonyms`` where present), each
with ``train.json`` / ``validation.json``: JSON lists, read whole (the largest here is 2.3 MB).

* **Databases.** AmbiQT ships none; :mod:`.ambiqt_rebuild` derives one per (Spider database, target
  schema) from ``<spider root>/database/<db_id>/<db_id>.sqlite`` (read-only) and the item's
  ``schema_with_content`` into ``cache_root()/ambiqt/<hash>.sqlite``, built once and reused.
* **Items over databases that the Spider root lacks** are skipped and counted
  (:attr:`FileReport.skipped_no_database`), not an error: ``../shared/data/spider_dev`` has the 20 dev
  databases, and AmbiQT's ``tbl-agg/train.json`` (426 items) is over Spider's train databases only.
* **Gold checks.** Both readings run on the rebuilt database in the read-only sandbox and the
  interpretation's result is scored against the gold's with the env's own scorer (relaxed EX,
  :func:`~textsql_clarify.rewards.execution.score_execution`). The sample is kept, with flags:
  ``gold_error`` / ``gold_timeout`` (the gold fails), ``gold_empty`` (the gold returns no data),
  ``interpretation_error`` (the other reading fails), ``indistinguishable`` (the other reading scores as a
  match of the gold, or, when the gold is empty, returns the same rows): EX cannot reward asking there.

Mapping to the taxonomy (``docs/datasets.md``, AmbiQT section):

* group ``ambiguous``; subcategory ``lexical_overlap`` (ABISS §3.2.2, semantic mapping ambiguity: "two or
  more schema attributes share similar or identical forms"): the question's term fits two schema
  elements that AmbiQT made alike (``singer.country`` and ``singer_country.country``; ``singer.age``
  aggregated and ``singer_age.avg_age``), not two entities (ABISS's entity ambiguity) and not two
  syntactic parses (structural ambiguity).
* ``gold_sql``: the reading drawn per sample (:func:`gold_reading`, seeded by the sample id and
  :data:`READING_SEED`): ``query1`` (Spider's own gold over the unchanged tables) or ``query2`` (AmbiQT's
  reading over the table it added), about half each; ``interpretations`` = [the other one]. AmbiQT gives
  both as valid golds of the question, so which one the user means is the user's hidden
  knowledge, not something the schema can tell: a fixed ``query1`` let a policy that picks the reading
  without an ``<agg>_<col>`` column or split table score EX 1.0 with no clarification. Hidden knowledge: a
  stand-alone statement of the drawn reading, in words (:func:`hidden_knowledge`); the interpretation gets
  the other statement.
* difficulty: Spider hardness of the item's ``sql`` (``query1``'s parse), ``unknown`` when absent.
* id ``ambiqt-<kind>-<file stem>-<index>``; provenance ``{source, split, file, index, rebuilt_db, ...,
  gold_reading ("query1" | "query2"), reading_seed}``.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .spider import _database_dir, _read_json_list
from ..errors import DatasetError, RecordProblem
from ..samples import Sample, sample_from_dict
from .ambiqt_rebuild import (BuildPlan, RebuildError, build_database, file_sha256, parse_schema_text,
                             plan_rebuild, read_schema)
from .spider_hardness import spider_hardness

__all__ = ["load_from_spec", "load_ambiqt", "AmbiqtReport", "FileReport", "hidden_knowledge", "check_golds",
           "gold_reading", "SPEC_FORM", "SUBCATEGORY", "READING_SEED", "OTHER_SUFFIX"]

SPEC_FORM = "ambiqt:<dir>:<spider root>"
#: ABISS §3.2.2 semantic mapping ambiguity, lexical overlap (see the module docstring).
SUBCATEGORY = "lexical_overlap"
#: the dataset seed of the per-sample draw of the gold reading (:func:`gold_reading`)
READING_SEED = 0
#: the id suffix of a sample of the complementary draw (``load_ambiqt(..., reading="other")``)
OTHER_SUFFIX = "~other"
_log = logging.getLogger(__name__)
_REQUIRED = ("db_id", "question", "query1", "query2", "schema_with_content")
_AGG_WORDS = {"avg": "average", "sum": "total", "min": "minimum", "max": "maximum", "count": "number of"}


@dataclass
class FileReport:
    """What loading one AmbiQT file gave.

    Attributes:
        records: records in the file.
        loaded: samples built.
        skipped_no_database: db_id -> items skipped because the Spider root has no such database.
        flagged: flag -> samples carrying it (a sample may carry two, e.g. gold_empty and indistinguishable).
        distinguishable: samples without any flag (both golds run, ``query1`` returns data, results differ).
    """

    records: int = 0
    loaded: int = 0
    skipped_no_database: Counter = field(default_factory=Counter)
    flagged: Counter = field(default_factory=Counter)
    distinguishable: int = 0


@dataclass
class AmbiqtReport:
    """What one :func:`load_ambiqt` call did.

    Attributes:
        files: ``"<kind>/<file>"`` -> :class:`FileReport`, in load order.
        built: databases built by this call; ``reused``: targets found in the cache.
        cache_dir: the folder of the rebuilt databases.
    """

    files: dict[str, FileReport] = field(default_factory=dict)
    built: int = 0
    reused: int = 0
    cache_dir: str = ""

    def lines(self) -> list[str]:
        """One human-readable line per file, then one for the cache."""
        out = []
        for name, r in self.files.items():
            skipped = sum(r.skipped_no_database.values())
            flags = ", ".join(f"{k} {v}" for k, v in sorted(r.flagged.items())) or "none"
            out.append(f"{name}: {r.records} records, {r.loaded} samples, {skipped} skipped (database not in the "
                       f"Spider root), {r.distinguishable} distinguishable; flagged: {flags}")
        out.append(f"rebuilt databases: {self.built} built, {self.reused} reused, in {self.cache_dir}")
        return out


def _words(name: str) -> str:
    return name.replace("_", " ").strip()


def _join(parts: list[str]) -> str:
    parts = list(dict.fromkeys(p for p in parts if p))
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _q1_parts(q1: str) -> tuple[list[str], list[str]]:
    """(aggregates of query1 in words, its tables in words)."""
    try:
        tree = sqlglot.parse_one(q1, read="sqlite")
    except SqlglotError:
        return [], []
    tables = [_words(t.name) for t in tree.find_all(exp.Table)]
    aggs = []
    sel = tree.expressions if isinstance(tree, exp.Select) else []
    for e in sel:
        for f in e.find_all(exp.AggFunc):
            key = type(f).__name__.lower()
            word = _AGG_WORDS.get(key)
            col = f.find(exp.Column)
            if word is None:
                continue
            aggs.append(f"{word} {_words(col.name)}" if col is not None else ("number of rows" if key == "count" else word))
    return aggs, tables


def hidden_knowledge(item: dict, plan: BuildPlan | None = None) -> tuple[str, str, str, str]:
    """The stand-alone statements and descriptions of the two readings of an AmbiQT item, in the user's words.

    Args:
        item: the record (its kind's fields: ``split_map``; ``new_table_name``; ``extra_map``;
            ``extra_table_map``; and ``query1``).
        plan: unused except as a fallback for the kind (its ``constructions``).
    Returns:
        ``(query1 statement, query2 statement, query1 description, query2 description)``, e.g. for tbl-agg
        ``"I want the average age computed from the individual singer records themselves, not read from the
        precomputed singer age summary table."`` for ``query1``. Which of the two is the sample's gold is drawn
        per sample (:func:`gold_reading`); the other becomes its interpretation. A statement is never a bare
        reply (the rule-based user compares a clarification with it, :mod:`textsql_clarify.simulators.rule_based`).
    """
    split = item.get("split_map")
    new = item.get("new_table_name")
    if isinstance(split, dict) and len(split) == 1 and isinstance(next(iter(split.values())), str):
        base, col = next(iter(split.items()))
        pk = (item.get("primary_key") or {}).get(base, "key") if isinstance(item.get("primary_key"), dict) else "key"
        side = f"{_words(base)} {_words(col)}"
        return (f"I mean the {_words(col)} stored in the {_words(base)} table itself, not the copy in the separate "
                f"{side} table.",
                f"I mean the {_words(col)} from the separate {side} table, linked to each {_words(base)} by its "
                f"{_words(str(pk))}, not the copy stored in the {_words(base)} table itself.",
                f"{col} read from the table {base} itself",
                f"{col} read through the split table {base}_{col}")
    if isinstance(new, str) or (plan is not None and any(v.startswith("precomputed") for v in plan.constructions.values())):
        if not isinstance(new, str):
            new = next(t for t, v in plan.constructions.items() if v.startswith("precomputed"))
        aggs, tables = _q1_parts(item.get("query1", ""))
        what = _join(aggs) or "figures"
        base = _join(tables) or "underlying"
        return (f"I want the {what} computed from the individual {base} records themselves, not read from the "
                f"precomputed {_words(new)} summary table.",
                f"I want the {what} read from the precomputed {_words(new)} summary table, not recomputed from the "
                f"individual {base} records.",
                f"computed from the individual {base} records",
                f"read from the precomputed aggregate table {new}")
    cmap = item.get("extra_map")
    if isinstance(cmap, dict) and cmap:
        t, cols = next(iter(cmap.items()))
        c, alts = next(iter(cols.items()))
        a1, a2 = alts[0], alts[1]
        return (f"By {_words(c)} I mean the {_words(a1)} column of the {_words(t)} table, not the {_words(a2)} one.",
                f"By {_words(c)} I mean the {_words(a2)} column of the {_words(t)} table, not the {_words(a1)} one.",
                f"{t}.{a1} instead of {t}.{a2}", f"{t}.{a2} instead of {t}.{a1}")
    tmap = item.get("extra_table_map")
    if isinstance(tmap, dict) and tmap:
        t, alts = next(iter(tmap.items()))
        a1, a2 = alts[0], alts[1]
        return (f"By {_words(t)} I mean the {_words(a1)} table, not the {_words(a2)} table.",
                f"By {_words(t)} I mean the {_words(a2)} table, not the {_words(a1)} table.",
                f"table {a1} instead of {a2}", f"table {a2} instead of {a1}")
    return ("I mean the reading of the question over the original tables.",
            "I mean the reading of the question over the tables that AmbiQT added.",
            "AmbiQT's first reading", "AmbiQT's second reading")


def gold_reading(sample_id: str, seed: int = READING_SEED) -> int:
    """Which of an AmbiQT item's two readings is the sample's gold: ``1`` (``query1``) or ``2`` (``query2``).

    ``query1`` is always Spider's gold over the unchanged tables and ``query2`` always reads what AmbiQT added
    (an ``<agg>_<col>`` column, a split table), so a fixed choice lets a policy pick the gold from the schema
    alone, with no clarification. The draw is the low bit of the first byte of
    ``sha256(f"ambiqt-reading:{seed}:{sample_id}")``: deterministic for a (seed, id), independent of load order,
    and about half of the samples each way. The user's hidden knowledge is the statement of the drawn reading.

    Args:
        sample_id: the sample's id (``ambiqt-<kind>-<file stem>-<index>``).
        seed: the dataset seed (:data:`READING_SEED` by default).
    Returns:
        ``1`` or ``2``.
    """
    digest = hashlib.sha256(f"ambiqt-reading:{seed}:{sample_id}".encode("utf-8")).digest()
    return 1 + (digest[0] & 1)


def check_golds(db_path: str | os.PathLike, gold_sql: str, other_sql: str) -> tuple[list[str], str]:
    """Run both readings on a rebuilt database and tell whether EX can tell them apart.

    Args:
        db_path: the rebuilt database (opened through the read-only sandbox).
        gold_sql: the sample's gold (the drawn reading, :func:`gold_reading`); other_sql: the interpretation's.
    Returns:
        ``(flags, note)``: flags from :data:`~textsql_clarify.samples.SAMPLE_FLAGS` (empty when both run, the
        gold returns data and the other reading's result is no match of it under relaxed EX, scored as the env
        scores an answer), and a one-line reason.
    """
    from ..sql.sandbox import get_sandbox
    from ..rewards.execution import is_empty_result, score_execution

    sandbox = get_sandbox(db_path)
    r1 = sandbox.execute(gold_sql)
    r2 = sandbox.execute(other_sql)
    flags: list[str] = []
    notes: list[str] = []
    if not r1.ok:
        flags.append("gold_timeout" if r1.error_kind == "timeout" else "gold_error")
        notes.append(f"the gold fails ({r1.error_kind}): {r1.error_message}")
    if not r2.ok:
        flags.append("interpretation_error")
        notes.append(f"the other reading fails ({r2.error_kind}): {r2.error_message}")
    if flags:
        return flags, "; ".join(notes)
    if not r1.rows or is_empty_result(r1):
        flags.append("gold_empty")
        notes.append("the gold returns no data")
        same = (not r2.rows or is_empty_result(r2)) or sorted(map(repr, r1.rows)) == sorted(map(repr, r2.rows))
        if same:
            flags.append("indistinguishable")
            notes.append("the other reading returns the same rows")
        return flags, "; ".join(notes)
    verdict = score_execution(r2, r1, other_sql, gold_sql, sandbox)[0]
    if verdict.status == "match":
        return ["indistinguishable"], "the other reading scores as a match of the gold (relaxed EX): " + verdict.reason
    return [], f"results differ ({verdict.status}): {verdict.reason}"


def _files(root: Path) -> list[tuple[str, Path]]:
    """(kind, file) for ``<root>/<kind>/*.json``, or ``<root>/*.json`` when ``root`` is one kind's folder."""
    own = sorted(root.glob("*.json"))
    if own:
        return [(root.name, f) for f in own]
    return [(d.name, f) for d in sorted(p for p in root.iterdir() if p.is_dir()) for f in sorted(d.glob("*.json"))]


def load_ambiqt(ambiqt_dir: str | os.PathLike, spider_root: str | os.PathLike, *,
                cache_dir: str | os.PathLike | None = None,
                seed: int = READING_SEED, reading: str = "drawn") -> tuple[list[Sample], AmbiqtReport]:
    """Load AmbiQT's items as ambiguous samples over rebuilt databases (see the module docstring).

    Args:
        ambiqt_dir: the folder of kind folders (``tbl-agg/``, ``tbl-split/``, ...), or one kind's folder.
        spider_root: the Spider folder with ``database/<db_id>/<db_id>.sqlite`` (never written).
        cache_dir: where rebuilt databases go; ``None``: ``textsql_clarify.models.cache_root()/ambiqt``.
        seed: the dataset seed of the per-sample draw of which reading is the gold (:func:`gold_reading`).
        reading: ``"drawn"`` (the default): each item's gold is its drawn reading; ``"other"``: the complementary
            draw, each item's other reading as its gold (and its hidden knowledge), the sample id suffixed
            :data:`OTHER_SUFFIX`. The two together are every item under both draws, over which a chooser's mean
            is its exact expectation over the draw (a single draw's realised balance is a binomial variable:
            its standard deviation is about 0.025 at n = 389, larger than the red team's margin).
    Returns:
        ``(samples, report)``: samples in file order (kinds and files sorted by name), flagged ones kept;
        the :class:`AmbiqtReport` of counts.
    Raises:
        DatasetError: a missing folder, no ``.json`` file, a file that is not a JSON list, or bad records
            (a missing or non-string field, a schema text that does not parse or that no AmbiQT construction
            explains), all listed with file, record (index + 1) and field; no sample at all.
    """
    if reading not in ("drawn", "other"):
        raise ValueError(f"reading must be 'drawn' or 'other', got {reading!r}")
    root = Path(ambiqt_dir).resolve()
    if not root.is_dir():
        raise DatasetError(f"AmbiQT folder is not a directory: {root}")
    db_dir = _database_dir(spider_root)
    if cache_dir is None:
        from ..models import cache_root

        cache_dir = cache_root() / "ambiqt"
    cache = Path(cache_dir)
    files = _files(root)
    if not files:
        raise DatasetError(f"no AmbiQT .json file in {root} (expected <dir>/<kind>/<split>.json)")
    report = AmbiqtReport(cache_dir=str(cache))
    problems: list[RecordProblem] = []
    samples: list[Sample] = []
    schemas: dict[str, Any] = {}
    hashes: dict[str, str] = {}
    targets: dict[str, Path] = {}
    for kind, path in files:
        rel = f"{kind}/{path.name}"
        records = _read_json_list(path, "AmbiQT file")  # read whole: the largest file is 2.3 MB
        fr = report.files.setdefault(rel, FileReport(records=len(records)))
        for i, rec in enumerate(records):
            def bad(fld: str, msg: str, i=i) -> None:
                problems.append(RecordProblem(str(path), i + 1, fld, msg))

            s = _one(rec, i, kind, path, rel, db_dir, cache, fr, report, bad, schemas, hashes, targets, seed,
                     reading == "other")
            if s is not None:
                samples.append(s)
    if problems:
        raise DatasetError(f"invalid AmbiQT records under {root}", problems)
    if not samples:
        skipped = sum(sum(r.skipped_no_database.values()) for r in report.files.values())
        raise DatasetError(f"AmbiQT folder {root} gives no sample: {skipped} items are over databases that "
                           f"{db_dir} lacks")
    return samples, report


def _one(rec: Any, i: int, kind: str, path: Path, rel: str, db_dir: Path, cache: Path, fr: FileReport,
         report: AmbiqtReport, bad: Callable[[str, str], None], schemas: dict, hashes: dict,
         targets: dict, seed: int = READING_SEED, other: bool = False) -> Sample | None:
    """One record -> sample (or None: skipped, or bad and reported through ``bad``); ``other``: the
    complementary draw (see :func:`load_ambiqt`'s ``reading``)."""
    if not isinstance(rec, dict):
        bad("<record>", f"must be a JSON object, got {type(rec).__name__}")
        return None
    ok = True
    for fld in _REQUIRED:
        v = rec.get(fld)
        if not isinstance(v, str) or not v.strip():
            bad(fld, "is required and must be a non-empty string")
            ok = False
    if not ok:
        return None
    db_id = rec["db_id"]
    src = db_dir / db_id / f"{db_id}.sqlite"
    if not src.is_file():
        fr.skipped_no_database[db_id] += 1
        return None
    try:
        schema = parse_schema_text(rec["schema_with_content"])
    except ValueError as e:
        bad("schema_with_content", f"does not parse: {e}")
        return None
    if db_id not in schemas:
        try:
            schemas[db_id] = read_schema(src)
            hashes[db_id] = file_sha256(src)
        except (OSError, sqlite3.Error) as e:  # not a SQLite file, unreadable: every item over it says so
            schemas[db_id] = f"Spider database {src} cannot be read: {e}"
    if isinstance(schemas[db_id], str):
        bad("db_id", schemas[db_id])
        return None
    try:
        plan = plan_rebuild(rec, schema, schemas[db_id], db_id)
        key = plan.key(hashes[db_id])
        if key not in targets:
            targets[key], built = build_database(plan, src, cache, source_sha256=hashes[db_id])
            if built:
                report.built += 1
            else:
                report.reused += 1
    except RebuildError as e:
        bad(e.field, str(e))
        return None
    except sqlite3.Error as e:  # the source could be read for its schema but not copied
        bad("db_id", f"Spider database {src} cannot be copied: {e}")
        return None
    except OSError as e:  # the cache folder, not the record: stop here
        raise DatasetError(f"cannot write the rebuilt AmbiQT database into the cache folder {cache}: {e} "
                           f"(set TEXTSQL_CLARIFY_CACHE to a writable folder)") from None
    db_path = targets[key]
    q1, q2 = rec["query1"].strip(), rec["query2"].strip()
    hk1, hk2, desc1, desc2 = hidden_knowledge(rec, plan)
    sid = f"ambiqt-{kind}-{path.stem}-{i}"
    drawn = gold_reading(sid, seed)
    if other:
        drawn, sid = 3 - drawn, sid + OTHER_SUFFIX
    # the drawn reading is the gold and what the user means; the other one is the interpretation
    (gold, hk_gold), (other, hk_other, desc_other) = (((q1, hk1), (q2, hk2, desc2)) if drawn == 1
                                                      else ((q2, hk2), (q1, hk1, desc1)))
    flags, note = check_golds(db_path, gold, other)
    native = {
        "id": sid, "db_id": db_id, "db_path": str(db_path), "question": rec["question"].strip(),
        "group": "ambiguous", "subcategory": SUBCATEGORY, "gold_sql": gold, "hidden_knowledge": hk_gold,
        "interpretations": [{"gold_sql": other, "hidden_knowledge": hk_other, "description": desc_other}],
        "difficulty": spider_hardness(rec.get("sql")), "flags": flags,
        "provenance": {
            "source": "ambiqt", "split": kind, "file": rel, "index": i, "rebuilt_db": db_path.name,
            "spider_db": db_id, "constructions": dict(plan.constructions), "schema_additions": list(plan.added),
            "dropped_tables": list(plan.dropped), "gold_check": note,
            "gold_reading": f"query{drawn}", "reading_seed": seed,
        },
    }
    s, probs = sample_from_dict(native, file=str(path), line=i + 1, check_db_exists=False)
    for p in probs:
        bad(p.field, p.message)
    if s is None:
        return None
    fr.loaded += 1
    for f in flags:
        fr.flagged[f] += 1
    if not flags:
        fr.distinguishable += 1
    return s


def load_from_spec(rest: str, *, spec: str, db_root: str | None) -> list[Sample]:
    """The ``ambiqt:<dir>:<spider root>`` spec (:func:`textsql_clarify.datasets.load_dataset`).

    Args:
        rest: ``<dir>:<spider root>``; spec: the whole spec (for errors); db_root: unused (the Spider root
            in the spec names the databases).
    Returns:
        :func:`load_ambiqt`'s samples; its report is logged at INFO level (logger
        ``textsql_clarify.datasets.ambiqt``).
    Warns:
        SkippedRecordsWarning: items skipped because their database is absent, counted per file.
    Raises:
        DatasetError: a bad spec, or as :func:`load_ambiqt`.
    """
    from . import split_spec_paths

    folder, root = split_spec_paths(rest, spec, SPEC_FORM)
    samples, report = load_ambiqt(folder, root)
    for line in report.lines():
        _log.info("%s: %s", spec, line)
    skipped = {name: sum(r.skipped_no_database.values()) for name, r in report.files.items()}
    if any(skipped.values()):
        import warnings

        from ..errors import SkippedRecordsWarning

        warnings.warn(SkippedRecordsWarning(
            f"AmbiQT {folder}: items skipped, their database is not in the Spider root: "
            + ", ".join(f"{name} {n}" for name, n in skipped.items() if n)), stacklevel=2)
    return samples
