"""The generation pipeline: anchors x recipes -> validated samples, resumable and deterministic.

:func:`generate` runs every recipe on every anchor (recipe by recipe, anchors in order), each *unit*
(recipe, anchor) with its own RNG seeded from ``(seed, recipe, anchor id)`` by SHA-256 (:func:`unit_seed`;
never Python's ``hash()``, which changes between processes). Each finished unit is appended to a journal
(``journal.jsonl``, flushed and fsynced), so a run that is killed continues where it stopped; the output
files are assembled from the journal in the plan's order only, so the final ``samples.jsonl`` is the same
byte for byte whether or not the run was interrupted.

The output folder (``docs/generation.md``, "The output folder"):

* ``samples.jsonl``: the accepted samples in the native JSONL format, each followed by its paired original
  when it has one; a derived database's ``db_path`` is relative to the folder (``databases/...``);
* ``databases/``: derived databases (:attr:`~.base.GenContext.work_dir`), never a source file; at the end of a
  run those that no written sample uses are removed (:func:`_prune_databases`), and a resumed run re-runs a
  journaled unit whose accepted sample's database was so removed (:func:`_misses_a_database`);
* ``rejections.json``: per recipe, candidates, accepted, the per-stage table (ABISS App. B) and the most
  frequent reasons; the samples moved out by the load-time validation and the duplicates, by id;
* ``manifest.json``: seed, recipes, models, options, anchors (source, count, skipped, digest), counts,
  package version;
* ``journal.jsonl``: the progress journal (a header, then one line per finished unit).

After the recipes, the pipeline drops duplicates (stage ``duplicate``: a sample id already written, or the
same database, question and golds) and runs the load-time validation on the assembled file (each record
rebuilt as :func:`~textsql_clarify.samples.load_jsonl` does, the JSONL loader's drift checks, then
:func:`~textsql_clarify.datasets.validate.validate_samples`); every sample it flags is moved out (stage
``load_validation``, with its reasons), together with its pair, so the written file passes
``textsql-clarify data validate``. Every written sample's provenance carries ``anchor_gold``
(:func:`~.anchors.anchor_gold`, a digest of its anchor's gold SQL): samples grown from two phrasings of one source
query (Spider's paraphrase pairs) are no ``duplicate_gold`` of each other; ``distinct_golds=True``
(``--distinct-golds``) keeps one anchor per gold SQL instead, the strict corpus.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import TextSQLClarifyError
from ..samples import Sample, sample_from_dict
from .anchors import anchor_gold, distinct_gold_anchors
from .base import Accepted, Anchor, GenContext, Recipe, Rejected, check_options
from .rejections import ERROR_STAGE, RecipeRejections, render_rejection_table
from .recipes import RecipeError, make_recipe

__all__ = ["GenerationError", "GenerationReport", "generate", "unit_seed", "JOURNAL", "SAMPLES", "REJECTIONS",
           "MANIFEST", "DATABASES"]

SAMPLES = "samples.jsonl"
REJECTIONS = "rejections.json"
MANIFEST = "manifest.json"
JOURNAL = "journal.jsonl"
DATABASES = "databases"
#: Bumped when the journal's layout changes (a journal of another format is not resumed).
JOURNAL_FORMAT = 1
#: The provenance keys the pipeline sets on every written sample (base.py, :class:`~.base.Accepted`).
PIPELINE_KEYS = ("source", "recipe", "anchor_id", "anchor_source", "anchor_gold", "seed", "models")


class GenerationError(TextSQLClarifyError, ValueError):
    """A generation run cannot start: a model recipe without a council, an output folder holding a run with
    other settings (resume), no anchors, an output path that is a file."""


@dataclass
class GenerationReport:
    """What :func:`generate` did.

    Attributes:
        out_dir: the output folder (absolute).
        samples_path: ``out_dir/samples.jsonl``.
        tables: one :class:`~.rejections.RecipeRejections` per recipe, in run order.
        counts: the ``counts`` block of ``manifest.json`` (samples written, per recipe, group, subtype ...).
        manifest: the whole ``manifest.json``.
        units: (recipe, anchor) units in the plan; ``resumed``: how many came from the journal.
        load_validation: the samples moved out by the load-time validation: ``{"id", "recipe", "anchor_id",
            "reasons"}`` each.
        removed_databases: the derived databases this run removed from ``databases/`` because no written sample
            uses them (file names, sorted; :func:`_prune_databases`).
    """

    out_dir: Path
    samples_path: Path
    tables: list[RecipeRejections]
    counts: dict[str, Any]
    manifest: dict[str, Any]
    units: int = 0
    resumed: int = 0
    load_validation: list[dict[str, Any]] = field(default_factory=list)
    removed_databases: list[str] = field(default_factory=list)

    def table(self, width: int = 100) -> str:
        """The rejection table as text (:func:`~.rejections.render_rejection_table`)."""
        return render_rejection_table(self.tables, width=width)

    @property
    def n_samples(self) -> int:
        """Lines written to ``samples.jsonl`` (paired originals included)."""
        return self.counts["lines"]


def unit_seed(seed: int, recipe: str, anchor_id: str) -> int:
    """The RNG seed of one (recipe, anchor) unit: the first 8 bytes of SHA-256 over ``seed``, ``recipe`` and
    ``anchor_id`` (NUL-separated), big-endian. Stable across processes and machines (Python's ``hash()`` of a
    string is salted per process).

    Args:
        seed: the run's seed (int). recipe: the recipe name. anchor_id: the anchor's id.
    Returns:
        A non-negative int below 2**64.
    """
    h = hashlib.sha256(f"{int(seed)}\0{recipe}\0{anchor_id}".encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big")


def _anchor_fp(a: Anchor) -> str:
    """A short digest of everything a recipe reads from an anchor (the journal reuses a unit only on a match)."""
    payload = json.dumps([a.id, a.db_id, a.db_path, a.question, a.gold_sql, a.difficulty, list(a.evidence), a.source],
                         ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _jsonable(obj: Any) -> Any:
    """``obj`` through JSON (tuples become lists; anything else not JSON-ready becomes its ``str``)."""
    return json.loads(json.dumps(obj, ensure_ascii=False, default=str))


def _record(sample: Sample, out_dir: Path) -> dict[str, Any]:
    """The sample's JSONL record, ``db_path`` relative to ``out_dir`` when the file lies inside it."""
    rec = sample.to_dict()
    p = Path(rec["db_path"])
    if p.is_absolute():
        try:
            rec["db_path"] = p.resolve().relative_to(out_dir).as_posix()
        except ValueError:
            pass
    return _jsonable(rec)


def _encode(outcomes: Iterable[Any], out_dir: Path) -> list[dict[str, Any]]:
    """A unit's outcomes as journal entries; anything that is not an :class:`Accepted` of a :class:`Sample` or
    a :class:`Rejected` is an ``error`` rejection (a recipe that broke the contract)."""
    out = []
    for o in outcomes:
        if isinstance(o, Rejected):
            out.append({"rejected": [str(o.stage), str(o.reason)]})
        elif isinstance(o, Accepted) and isinstance(o.sample, Sample) and (o.paired is None or isinstance(o.paired, Sample)):
            out.append({"accepted": {"sample": _record(o.sample, out_dir), "verdicts": _jsonable(dict(o.verdicts or {})),
                                     "paired": None if o.paired is None else _record(o.paired, out_dir)}})
        else:
            out.append({"rejected": [ERROR_STAGE, f"the recipe returned {type(o).__name__}, not Accepted(Sample) "
                                                  f"or Rejected"]})
    return out


def _run_unit(recipe: Recipe, anchor: Anchor, seed: int, ctx: GenContext, out_dir: Path) -> list[dict[str, Any]]:
    """One recipe on one anchor; an exception (not KeyboardInterrupt) becomes one ``error`` rejection."""
    rng = random.Random(unit_seed(seed, recipe.name, anchor.id))
    try:
        return _encode(list(recipe.run(anchor, rng, ctx)), out_dir)
    except Exception as e:  # noqa: BLE001 - one anchor's failure is a rejection, not a crashed run
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        return [{"rejected": [ERROR_STAGE, f"{type(e).__name__}: {msg}" if msg else type(e).__name__]}]


# -- the journal -------------------------------------------------------------------------------------------------
def _read_journal(path: Path, header: dict[str, Any]) -> tuple[dict[tuple[str, str], dict], int]:
    """The finished units of a journal whose header equals ``header``, and the byte length of its last complete
    line (a line cut by a kill, or one that is no unit record, is dropped with the lines after it). Raises
    :class:`GenerationError` on another run's header, or a first line that is no header."""
    done: dict[tuple[str, str], dict] = {}
    good = 0
    with open(path, "rb") as fh:
        data = fh.read()
    pos = 0
    first = True
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break  # a line cut by a kill
        try:
            rec = json.loads(data[pos:end].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            break
        if first:
            if not isinstance(rec, dict) or not isinstance(rec.get("header"), dict):
                raise GenerationError(f"{path} is not a generate journal (its first line is no header); use "
                                      f"--no-resume (resume=False) to start over, or another output folder")
            if rec.get("header") != header:
                raise GenerationError(
                    f"{path.parent} holds a generation run with other settings ({json.dumps(rec.get('header'))[:300]}; "
                    f"this run: {json.dumps(header)[:300]}); use --no-resume (resume=False) to start over, or another "
                    f"output folder")
            first = False
        else:
            if not (isinstance(rec, dict) and isinstance(rec.get("recipe"), str)
                    and isinstance(rec.get("anchor_id"), str) and isinstance(rec.get("outcomes"), list)
                    and all(isinstance(o, dict) for o in rec["outcomes"])):
                break  # a damaged line: it and the rest are run again, as after a cut line
            done[(rec["recipe"], rec["anchor_id"])] = rec
        pos = end + 1
        good = pos
    return done, good


class _Journal:
    """Append-only journal: a header line, then one line per finished unit, each flushed and fsynced."""

    def __init__(self, path: Path, header: dict[str, Any], resume: bool):
        self.path = path
        self.done: dict[tuple[str, str], dict] = {}
        if resume and path.is_file() and path.stat().st_size:
            self.done, good = _read_journal(path, header)
            if good == 0:  # not even the header survived
                self._start(header)
            else:
                with open(path, "r+b") as fh:
                    fh.truncate(good)
                self.fh = open(path, "a", encoding="utf-8")
        else:
            self._start(header)

    def _start(self, header: dict[str, Any]) -> None:
        self.fh = open(self.path, "w", encoding="utf-8")
        self._write({"header": header})

    def _write(self, rec: dict[str, Any]) -> None:
        self.fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def add(self, recipe: str, anchor: Anchor, outcomes: list[dict[str, Any]]) -> dict[str, Any]:
        rec = {"recipe": recipe, "anchor_id": anchor.id, "anchor_fp": _anchor_fp(anchor), "outcomes": outcomes}
        self._write(rec)
        self.done[(recipe, anchor.id)] = rec
        return rec

    def close(self) -> None:
        self.fh.close()


# -- assembly ----------------------------------------------------------------------------------------------------
def _identity(rec: Mapping[str, Any]) -> str:
    """What makes two records the same sample: database, question (case and spacing aside), group, gold, the
    post-drift gold, the other readings' golds, the premise flaw."""
    drift = rec.get("drift") or {}
    return json.dumps([rec.get("db_path"), " ".join(str(rec.get("question", "")).lower().split()), rec.get("group"),
                       rec.get("gold_sql"), drift.get("post_gold_sql"),
                       sorted(i.get("gold_sql", "") for i in rec.get("interpretations") or []),
                       rec.get("premise_flaw")], ensure_ascii=False)


def _complete(rec: dict[str, Any], common: dict[str, Any], verdicts: Mapping[str, Any] | None,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``rec`` with its provenance completed: the pipeline's keys first, then the recipe's own, then
    ``extra`` and ``verdicts`` (base.py, :class:`~.base.Accepted`)."""
    own = {k: v for k, v in (rec.get("provenance") or {}).items() if k not in PIPELINE_KEYS and k != "verdicts"}
    prov = {**common, **own, **(extra or {})}
    if verdicts is not None:
        prov["verdicts"] = dict(verdicts)
    return {**rec, "provenance": prov}


@dataclass
class _Entry:
    """One record of the assembled file: a sample, or a paired original."""

    rec: dict[str, Any]
    recipe: str
    anchor_id: str
    original: int | None = None  # a sample with a pair: the index of its paired original
    is_original: bool = False


def _assemble(plan: Sequence[tuple[Recipe, Anchor]], done: Mapping[tuple[str, str], dict], seed: int,
              models: list[str], tables: dict[str, RecipeRejections]) -> tuple[list[_Entry], list[dict[str, Any]]]:
    """The records in plan order, duplicates dropped (and counted), pairs linked: a paired original is written
    right after its sample, or, when a record with its identity (:func:`_identity`) was written before, the
    sample is linked to that one (``provenance["paired_original"]`` names it)."""
    golds = {a.id: anchor_gold(a.gold_sql) for _, a in plan}
    entries: list[_Entry] = []
    ids: dict[str, int] = {}
    keys: dict[str, int] = {}
    duplicates: list[dict[str, Any]] = []
    for recipe, anchor in plan:
        unit = done[(recipe.name, anchor.id)]
        table = tables[recipe.name]
        common = {"source": "generated", "recipe": recipe.name, "anchor_id": anchor.id,
                  "anchor_source": anchor.source, "anchor_gold": golds[anchor.id], "seed": seed,
                  "models": list(models)}
        for out in unit["outcomes"]:
            table.candidates += 1
            if "rejected" in out:
                table.reject(*out["rejected"])
                continue
            acc = out["accepted"]
            rec, paired = acc["sample"], acc.get("paired")
            key = _identity(rec)
            why = p_index = None
            if rec["id"] in ids:
                why = f"sample id {rec['id']!r} already generated"
            elif key in keys:
                why = f"same database, question and golds as {entries[keys[key]].rec['id']!r}"
            elif paired is not None:
                pkey = _identity(paired)
                if paired["id"] == rec["id"]:
                    why = f"its paired original has the sample's own id {rec['id']!r}"
                elif paired["id"] in ids and keys.get(pkey) != ids[paired["id"]]:
                    why = f"its paired original's id {paired['id']!r} is taken by another sample"
                else:  # the same original (or a sample equal to it) written before: the sample is linked to it
                    p_index = keys.get(pkey)
            if why is not None:
                table.reject("duplicate", why)
                duplicates.append({"id": rec["id"], "recipe": recipe.name, "anchor_id": anchor.id, "reason": why})
                continue
            extra = None
            if paired is not None:
                extra = {"paired_original": paired["id"] if p_index is None else entries[p_index].rec["id"]}
            entries.append(_Entry(_complete(rec, common, acc.get("verdicts") or {}, extra), recipe.name, anchor.id))
            me = len(entries) - 1
            ids[rec["id"]] = keys[key] = me
            if paired is not None:
                if p_index is None:  # written right after its sample
                    entries.append(_Entry(_complete(paired, common, None, {"paired_with": rec["id"]}), recipe.name,
                                          anchor.id, is_original=True))
                    p_index = len(entries) - 1
                    ids[paired["id"]] = keys[_identity(paired)] = p_index
                entries[me].original = p_index
    return entries, duplicates


def _short(reason: str) -> str:
    """The table's reason for a sample moved out: the flag or check, without the ids and values of the message."""
    if reason.startswith("its paired original"):
        return "its paired original was moved out"
    if reason.startswith(("record:", "drift check:")):
        return reason.split(":", 2)[0] + ":" + reason.split(":", 2)[1]
    return reason.split(":", 1)[0]


def _validate(entries: list[_Entry], out_dir: Path, tables: dict[str, RecipeRejections],
              keep_flags: frozenset[str] = frozenset()) -> tuple[list[_Entry], list[dict]]:
    """The load-time validation of the assembled records; flagged samples are moved out with their pairs (a
    sample whose original is moved; an original none of whose samples is left). A sample flagged only with
    flags in ``keep_flags`` stays, its flags written in its record."""
    from ..datasets.drift_check import drift_problems
    from ..datasets.validate import validate_samples

    samples_file = out_dir / SAMPLES
    reasons: dict[int, list[str]] = {}
    built: dict[int, Sample] = {}
    for i, e in enumerate(entries):
        s, probs = sample_from_dict(e.rec, file=str(samples_file), line=i + 1, base_dir=out_dir)
        if s is None:
            reasons[i] = [f"record: field {p.field!r}: {p.message}" for p in probs]
        else:
            built[i] = s
    order = sorted(built)
    if order:
        tmp = out_dir / (SAMPLES + ".check")
        with open(tmp, "w", encoding="utf-8") as fh:  # drift_problems reads the file for line numbers
            for i in order:
                fh.write(json.dumps(entries[i].rec, ensure_ascii=False) + "\n")
        by_line = {n + 1: i for n, i in enumerate(order)}
        try:
            for p in drift_problems([built[i] for i in order], tmp):
                i = by_line.get(p.line)
                if i is not None:
                    reasons.setdefault(i, []).append(f"drift check: field {p.field!r}: {p.message}")
        finally:
            tmp.unlink(missing_ok=True)
        order = [i for i in order if i not in reasons]
        report = validate_samples([built[i] for i in order], use_cache=False)
        by_id = {built[i].id: i for i in order}
        for p in report.problems:
            if p.flag not in keep_flags:
                reasons.setdefault(by_id[p.sample_id], []).append(f"{p.flag}: {p.message}")
        for k, i in enumerate(order):
            kept = [f for f in report.samples[k].flags if f in keep_flags] if keep_flags else []
            if kept and i not in reasons:
                entries[i].rec["flags"] = list(dict.fromkeys([*entries[i].rec.get("flags", []), *kept]))
    for i, e in enumerate(entries):  # a sample whose original is out goes out too
        if e.original is not None and e.original in reasons and i not in reasons:
            reasons[i] = [f"its paired original {entries[e.original].rec['id']!r} was moved out"]
    # the env's judge, built on the samples left, must accept every rationale as the oracle's feedback
    # (oracle_fb.py); a sample it refuses goes out, and its original with it (below)
    from .oracle_fb import oracle_fb_failures

    live = {built[i].id: i for i in sorted(built) if i not in reasons}
    for sid, why in oracle_fb_failures([built[i] for i in live.values()]).items():
        reasons[live[sid]] = [why]
    kept_originals = {e.original for i, e in enumerate(entries) if e.original is not None and i not in reasons}
    for i, e in enumerate(entries):  # an original none of whose samples is left goes out too
        if e.is_original and i not in reasons and i not in kept_originals:
            reasons[i] = ["every sample paired with it was moved out"]
    moved = []
    for i in sorted(reasons):
        e = entries[i]
        if not e.is_original:  # a paired original is no candidate of its own
            tables[e.recipe].reject("load_validation", _short(reasons[i][0]))
        moved.append({"id": e.rec["id"], "recipe": e.recipe, "anchor_id": e.anchor_id, "reasons": reasons[i]})
    return [e for i, e in enumerate(entries) if i not in reasons], moved


def _counts(entries: Sequence[_Entry], recipes: Sequence[Recipe]) -> dict[str, Any]:
    by_recipe: dict[str, dict[str, Any]] = {}
    for r in recipes:
        mine = [e for e in entries if e.recipe == r.name]
        samples = [e.rec for e in mine if not e.is_original]
        block: dict[str, Any] = {"samples": len(samples), "paired_originals": len(mine) - len(samples),
                                 "by_group": dict(Counter(x["group"] for x in samples)),
                                 "by_subcategory": dict(Counter(str(x["subcategory"]) for x in samples))}
        sub = Counter(x["drift"]["subtype"] for x in samples if x.get("drift"))
        if sub:
            block["by_drift_subtype"] = dict(sub)
        flaws = Counter(x["premise_flaw"] for x in samples if x.get("premise_flaw"))
        if flaws:
            block["by_premise_flaw"] = dict(flaws)
        by_recipe[r.name] = block
    return {"lines": len(entries), "samples": sum(b["samples"] for b in by_recipe.values()),
            "paired_originals": sum(b["paired_originals"] for b in by_recipe.values()),
            "lines_by_group": dict(Counter(e.rec["group"] for e in entries)), "by_recipe": by_recipe}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _anchors_meta(anchors: Sequence[Anchor], given: Any) -> dict[str, Any]:
    """The manifest's ``anchors`` block: source, count, digest, and (``given`` an AnchorList) skipped records."""
    h = hashlib.sha256()
    for a in anchors:
        h.update(_anchor_fp(a).encode("ascii"))
    sources = list(dict.fromkeys(a.source for a in anchors))
    meta = {"source": getattr(given, "source", None) or (sources[0] if len(sources) == 1 else sources),
            "n": len(anchors), "digest": h.hexdigest()}
    skipped = getattr(given, "skipped", None)
    if skipped is not None:
        meta["skipped"] = dict(skipped)
        meta["n_source"] = getattr(given, "n_source", len(anchors))
    return meta


def _council_names(council: Any) -> list[str]:
    if council is None:
        return []
    names = getattr(council, "names", None)
    if names is None:
        names = [getattr(m, "name", type(m).__name__) for m in getattr(council, "models", ())]
    return [str(n) for n in names]


def _derived_paths(rec: Mapping[str, Any] | None, out_dir: Path) -> list[Path]:
    """The files under ``out_dir/databases/`` that a journal or sample record names as its database (``db_path``
    relative to ``out_dir``, as :func:`_record` writes it, or absolute); none for a source database."""
    if not rec or not isinstance(rec.get("db_path"), str):
        return []
    p = Path(rec["db_path"])
    p = (p if p.is_absolute() else out_dir / p).resolve()
    return [p] if p.parent == (out_dir / DATABASES).resolve() else []


def _misses_a_database(unit: Mapping[str, Any], out_dir: Path) -> bool:
    """Whether a journaled unit accepted a sample (or a paired original) over a derived database that is gone: a
    later run removed it (:func:`_prune_databases`) because that sample was not written. The unit then runs again
    (same seed, so the same outcomes) and rebuilds it, so the load-time validation sees what it saw the first
    time and a resumed run writes the same files."""
    for o in unit.get("outcomes", ()):
        acc = o.get("accepted") if isinstance(o, dict) else None
        if isinstance(acc, dict) and any(not p.is_file() for r in (acc.get("sample"), acc.get("paired"))
                                         for p in _derived_paths(r, out_dir)):
            return True
    return False


#: what a derived database leaves in ``databases/``: the file (``derived_db.derived_name``) and a temporary copy
#: of a build cut short (``derived_db.build_derived``: ``.<name>.tmp-<pid>-<hex>``), with SQLite's side files
_SIDE_FILES = ("-journal", "-wal", "-shm")


def _prune_databases(out_dir: Path, entries: Sequence[_Entry]) -> list[str]:
    """Remove the derived databases in ``out_dir/databases/`` that no written record uses: those of candidates
    rejected after their database was built, of duplicates and of samples moved out by the load-time validation.
    Only files the recipes write there are touched (``*.sqlite``, the build's temporary copies and SQLite's side files); a source database is never inside that
    folder (:func:`generate` refuses it), and any other file is left alone.

    Args:
        out_dir: the output folder (absolute).
        entries: the records written to ``samples.jsonl``.
    Returns:
        The names of the files removed, sorted.
    """
    work = out_dir / DATABASES
    if not work.is_dir():
        return []
    used = {p for e in entries for p in _derived_paths(e.rec, out_dir)}
    removed = []
    for p in sorted(work.iterdir()):
        if not p.is_file() or p.is_symlink():
            continue
        name = p.name
        base = next((name[: -len(s)] for s in _SIDE_FILES if name.endswith(s)), name)
        ours = base.endswith(".sqlite") or (base.startswith(".") and ".sqlite.tmp-" in base)
        if ours and (work / base).resolve() not in used:
            p.unlink()
            removed.append(name)
    return removed


def _clear(out_dir: Path) -> None:
    """Remove what an earlier run wrote in ``out_dir`` (only our files and our databases folder)."""
    for name in (JOURNAL, SAMPLES, REJECTIONS, MANIFEST):
        (out_dir / name).unlink(missing_ok=True)
    db = out_dir / DATABASES
    if db.is_dir():
        shutil.rmtree(db)


def generate(anchors: Sequence[Anchor], recipes: Sequence[Recipe | str], out_dir: str | os.PathLike, *, seed: int = 0,
             council: Any = None, resume: bool = True, progress: bool = True, timeout_s: float = 5.0,
             options: Mapping[str, str] | None = None, keep_flags: Sequence[str] = (),
             distinct_golds: bool = False) -> GenerationReport:
    """Run ``recipes`` on ``anchors`` and write validated samples to ``out_dir`` (module docstring).

    Args:
        anchors: the anchors (:func:`~.anchors.load_anchors`; an :class:`~.anchors.AnchorList` also records its
            source and skipped records in the manifest). Ids must be unique.
        recipes: recipe instances or registry names (:mod:`.recipes`), run in this order.
        out_dir: the output folder (created; its ``databases/`` is the recipes' ``GenContext.work_dir``).
        seed: the run's seed (int); each unit's RNG is :func:`unit_seed` of it.
        council: the council of generation models (:class:`~.council.Council`), or a list of model specs for
            :func:`~.council.load_council` (``"fake"`` is the fake model); required by a recipe with
            ``needs_model``. Its model names go into every sample's provenance.
        resume: continue the run journalled in ``out_dir`` (same seed, models, options and time limit; units
            whose anchor changed are run again). ``False`` deletes what an earlier run wrote there first.
        progress: show a tqdm progress bar on stderr.
        timeout_s: time limit per SQL execution in the recipes, seconds (> 0).
        options: recipe options (``--option key=value``), strings.
        keep_flags: load-time validation flags that do not move a sample out (e.g. ``("duplicate_gold",)`` keeps
            the samples grown from paraphrased anchors, Spider's question pairs); the sample is written with the
            flag, so ``data validate`` lists it. Default: none (the written file validates with nothing flagged).
        distinct_golds: keep one anchor per (database, gold SQL), the first (:func:`~.anchors.distinct_gold_anchors`);
            the others are counted in the manifest's ``anchors.skipped``. The strict corpus: no two samples grown
            from paraphrases of one source query. Default ``False``: every anchor (samples of anchors with the same
            gold are no duplicates of each other, ``provenance["anchor_gold"]``).

    Returns:
        A :class:`GenerationReport`.

    Raises:
        GenerationError: no anchors, duplicate anchor ids, a model recipe without a council, ``out_dir`` is a
            file, a journal in ``out_dir`` from a run with other settings (with ``resume``), ``timeout_s`` not a finite
            number > 0;
            a source database inside ``out_dir/databases``; a ``samples.jsonl`` or a non-empty ``databases/`` in
            ``out_dir`` with no journal beside it (no generate run wrote them); another run holding ``out_dir`` (an ``flock`` on the folder).
        RecipeError: an unknown recipe name, or a recipe that cannot be imported.
        OptionError: an option no selected recipe declares, or a value that does not parse or is out of range
            (:func:`~.base.check_options`, before any unit runs).
        KeyboardInterrupt: passed on; the journal keeps every unit finished before it.

    Source: ``docs/generation.md``; ABISS App. B (the rejection table); TIDE §3.1 (anchors).
    """
    anchors_list = list(anchors)
    if not anchors_list:
        raise GenerationError("no anchors to generate from")
    if distinct_golds:
        anchors = distinct_gold_anchors(anchors if hasattr(anchors, "skipped") else anchors_list)
        anchors_list = list(anchors)
    seen_ids = Counter(a.id for a in anchors_list)
    twice = [k for k, n in seen_ids.items() if n > 1]
    if twice:
        raise GenerationError(f"anchor ids must be unique; given more than once: {twice[:10]}")
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 0 < timeout_s < math.inf:
        raise GenerationError(f"timeout_s must be a positive finite number of seconds, got {timeout_s!r}")
    built = [make_recipe(r) if isinstance(r, str) else r for r in recipes]
    if not built:
        raise RecipeError("no recipe given")
    names = [r.name for r in built]
    if len(set(names)) != len(names):
        raise RecipeError(f"a recipe is given more than once: {names}")
    options = check_options(built, options)
    if isinstance(council, str):
        council = [council]
    if isinstance(council, (list, tuple)):
        from .council import load_council

        council = load_council(list(council)) if council else None
    needy = [r.name for r in built if r.needs_model]
    if needy and council is None:
        raise GenerationError(f"recipe(s) {', '.join(needy)} need a council of models (--model SPEC, repeatable; "
                              f"'fake' is the deterministic fake model)")
    out = Path(out_dir).resolve()
    if out.exists() and not out.is_dir():
        raise GenerationError(f"output folder {out} is a file")
    inside = sorted({a.db_path for a in anchors_list if Path(a.db_path).resolve().is_relative_to(out / DATABASES)})
    if inside:
        raise GenerationError(f"source database {inside[0]} is inside {out / DATABASES}, the folder of derived "
                              f"databases that generate writes (and --no-resume deletes); give another output folder")
    foreign = [p for p in (out / SAMPLES, out / DATABASES) if p.is_file() or (p.is_dir() and any(p.iterdir()))]
    if foreign and not (out / JOURNAL).exists():
        raise GenerationError(f"{foreign[0]} exists but no generate run wrote it (no {JOURNAL} beside it); move it "
                              f"away or give another output folder")
    out.mkdir(parents=True, exist_ok=True)
    with _exclusive(out):
        return _generate_in(out, anchors, anchors_list, built, council, seed=seed, resume=resume, progress=progress,
                            timeout_s=timeout_s, options=options, keep_flags=keep_flags, distinct_golds=distinct_golds)


@contextlib.contextmanager
def _exclusive(out: Path):
    """Hold an exclusive advisory lock (``flock``) on the output folder while a run writes it, so that a second
    run on the same folder is refused instead of interleaving one journal (no lock where ``fcntl`` is missing).

    Raises:
        GenerationError: another process (or another call) holds the folder's lock.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise GenerationError(f"another generate run is writing to {out} (it holds the folder's lock); wait for "
                                  f"it to end, or give another output folder") from None
        yield
    finally:
        os.close(fd)


def _generate_in(out: Path, anchors: Any, anchors_list: list[Anchor], built: list[Recipe], council: Any, *, seed: int,
                 resume: bool, progress: bool, timeout_s: float, options: Mapping[str, str] | None,
                 keep_flags: Sequence[str], distinct_golds: bool) -> GenerationReport:
    """The run of :func:`generate` in its locked output folder ``out`` (the arguments as :func:`generate` checked
    them)."""
    if not resume:
        _clear(out)
    work = out / DATABASES
    work.mkdir(exist_ok=True)
    models = _council_names(council)
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    header = {"format": JOURNAL_FORMAT, "seed": int(seed), "models": models, "options": opts,
              "timeout_s": float(timeout_s)}
    from ..samples import SAMPLE_FLAGS

    bad_flags = [f for f in keep_flags if f not in SAMPLE_FLAGS]
    if bad_flags:
        raise GenerationError(f"unknown validation flag(s) {bad_flags}; known: {list(SAMPLE_FLAGS)}")
    journal = _Journal(out / JOURNAL, header, resume)
    plan = [(r, a) for r in built for a in anchors_list]
    fps = {a.id: _anchor_fp(a) for a in anchors_list}
    todo = [(r, a) for r, a in plan if journal.done.get((r.name, a.id), {}).get("anchor_fp") != fps[a.id]
            or _misses_a_database(journal.done[(r.name, a.id)], out)]
    resumed = len(plan) - len(todo)
    ctxs = {r.name: GenContext(work_dir=work, council=council, timeout_s=float(timeout_s), options=dict(opts))
            for r in built}
    from tqdm.auto import tqdm

    bar = tqdm(total=len(plan), initial=resumed, disable=not progress, file=sys.stderr, desc="generate",
               unit="unit", dynamic_ncols=True)
    try:
        for recipe, anchor in todo:
            bar.set_postfix_str(recipe.name, refresh=False)
            journal.add(recipe.name, anchor, _run_unit(recipe, anchor, seed, ctxs[recipe.name], out))
            bar.update(1)
    finally:
        bar.close()
        journal.close()
    tables = {r.name: RecipeRejections(r.name, tuple(r.stages)) for r in built}
    entries, duplicates = _assemble(plan, journal.done, int(seed), models, tables)
    if progress:
        print(f"validating {len(entries)} samples (the load-time checks) ...", file=sys.stderr, flush=True)
    entries, moved = _validate(entries, out, tables, frozenset(keep_flags))
    _write_atomic(out / SAMPLES, "".join(json.dumps(e.rec, ensure_ascii=False) + "\n" for e in entries))
    removed = _prune_databases(out, entries)  # after samples.jsonl names what stays
    counts = _counts(entries, built)
    from .. import __version__

    manifest = {"package": "textsql-clarify", "version": __version__, "seed": int(seed),
                "recipes": [{"name": r.name, "stages": list(r.stages), "needs_model": bool(r.needs_model)} for r in built],
                "models": models, "options": opts, "timeout_s": float(timeout_s),
                "keep_flags": sorted(keep_flags), "distinct_golds": bool(distinct_golds), "anchors": _anchors_meta(anchors_list, anchors),
                "units": len(plan), "counts": counts,
                "files": {"samples": SAMPLES, "rejections": REJECTIONS, "journal": JOURNAL, "databases": DATABASES + "/"}}
    rejections = {"recipes": {r.name: tables[r.name].to_dict() for r in built}, "load_validation": moved,
                  "duplicates": duplicates}
    _write_atomic(out / REJECTIONS, json.dumps(rejections, indent=2, ensure_ascii=False) + "\n")
    _write_atomic(out / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return GenerationReport(out_dir=out, samples_path=out / SAMPLES, tables=[tables[r.name] for r in built],
                            counts=counts, manifest=manifest, units=len(plan), resumed=resumed, load_validation=moved,
                            removed_databases=removed)

