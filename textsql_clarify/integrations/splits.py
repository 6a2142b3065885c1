"""Train / held-out splits of sample ids, and loading the training samples that are available.

API: :func:`split_sample_ids(samples, heldout_fraction=0.25, seed=0, by="group") <split_sample_ids>` returns
``(train_ids, heldout_ids)``: two disjoint lists of sample ids that together hold every sample, the same for the
same samples, fraction, seed and ``by`` on any machine (every draw is a seeded :class:`random.Random` over sorted
keys, not Python's per-process ``hash``). Two kinds:

* ``by="group"``: drawn per group (``answerable`` / ``ambiguous`` / ``unanswerable``) so each group keeps its
  share on both sides; a database can be on both sides.
* ``by="db"``: database-disjoint. Whole databases (:func:`database_of`) are held out, together with every sample
  linked to one of their samples (:func:`database_units`: a missing-schema sample and its original, a PremiseSQL
  flawed question and its original, the turns of one dialogue, the samples grown from one anchor), so no database
  and no pair is on both sides. The held-out share of *samples* is close to the fraction, but each group's share
  can differ from it (a database holds its own mix of groups): count them with :func:`split_counts` and balance by
  group afterwards (:func:`~textsql_clarify.integrations.corpus.build_training_corpus`, or a per-group pick).
  :func:`split_databases` names the databases of each side, for logs.

:func:`load_training_samples(specs) <load_training_samples>` loads each dataset spec of
:func:`textsql_clarify.datasets.load_dataset` whose data is present, skips (with a warning that names
it) each spec whose files are absent, and refuses sample ids that two specs share.
:func:`select_samples` is the one selection every trainer adapter applies (ids, a split side, excluded flags).
Roots are always arguments: nothing here knows where a machine keeps its data.
"""
from __future__ import annotations

import os
import random
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..samples import Sample

__all__ = ["split_sample_ids", "split_databases", "split_counts", "database_of", "database_units",
           "select_samples", "build_training_corpus", "load_training_samples", "spec_missing_paths", "GROUPS", "SPLIT_KINDS", "PAIR_KEYS"]

#: The groups a split is stratified by (``docs/dataset-format.md``).
GROUPS = ("answerable", "ambiguous", "unanswerable")
#: The ``by`` values of :func:`split_sample_ids`.
SPLIT_KINDS = ("group", "db")
#: Provenance keys that name another sample's id: a sample and the one it names are a pair (missing schema:
#: ``paired_with`` / ``paired_original`` / ``original_of``, written by ``generation/pipeline.py`` and
#: ``generation/missing_schema.py``; PremiseSQL: ``original_id``, ``generation/premise.py``).
PAIR_KEYS = ("paired_with", "paired_original", "original_of", "original_id")
#: Provenance keys whose value is shared by linked samples: the turns of one dialogue (MMSQL, CoSQL:
#: ``dialogue``), the samples grown from one anchor (``anchor_id``; TIDE ``triplet``). Read with the
#: sample's ``source``, so two datasets' dialogue ids never meet.
LINK_KEYS = ("dialogue", "anchor_id", "triplet")


def _checked(samples: Sequence[Sample], heldout_fraction: float, seed: int
             ) -> tuple[list[str], dict[str, list[str]]]:
    """The argument checks both kinds of split share: ``(ids in input order, group -> ids)``."""
    if isinstance(heldout_fraction, bool) or not isinstance(heldout_fraction, (int, float)) \
            or not 0 <= heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be a number in [0, 1), got {heldout_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    by_group: dict[str, list[str]] = {g: [] for g in GROUPS}
    seen: set[str] = set()
    order: list[str] = []
    for k, s in enumerate(samples):
        sid, group = getattr(s, "id", None), getattr(s, "group", None)
        if not isinstance(sid, str):
            raise TypeError(f"samples[{k}] has no string id (got {type(s).__name__})")
        if sid in seen:
            raise ValueError(f"sample id {sid!r} appears more than once (samples[{k}])")
        if group not in by_group:
            raise ValueError(f"sample {sid!r} has group {group!r}; expected one of {list(GROUPS)}")
        seen.add(sid)
        order.append(sid)
        by_group[group].append(sid)
    return order, by_group


def split_sample_ids(samples: Sequence[Sample], *, heldout_fraction: float = 0.25,
                     seed: int = 0, by: str = "group") -> tuple[list[str], list[str]]:
    """Split sample ids into train and held-out parts, deterministically: stratified by group, or by database.

    ``by="group"``: within each group the ids are sorted, shuffled by ``random.Random(f"{seed}:{group}")`` and
    the first ``round(n * heldout_fraction)`` are held out; a group of two or more samples with a fraction above
    0 holds out at least one and keeps at least one for training.

    ``by="db"``: the samples fall into units (:func:`database_units`: each unit is one database, or several that
    a pair or a dialogue links), the units (sorted by name) are shuffled by ``random.Random(f"{seed}:db")`` and
    taken in that order whenever taking one brings the held-out sample count closer to
    ``heldout_fraction * n``; with a fraction above 0 at least one unit is held out and one kept. No database
    is on both sides and linked samples stay together. The share of each group can differ from the fraction
    (a database has its own mix of groups): :func:`split_counts` counts them.

    Both lists keep the order of ``samples``.

    Args:
        samples: the samples (:class:`~textsql_clarify.samples.Sample`; anything with ``id`` and ``group``, and
            for ``by="db"`` ``db_id`` and ``provenance``).
        heldout_fraction: share held out, ``0 <= f < 1`` (of each group with ``by="group"``; of all samples,
            approximately, with ``by="db"``).
        seed: the draw's seed (an int).
        by: ``"group"`` or ``"db"`` (:data:`SPLIT_KINDS`).

    Returns:
        ``(train_ids, heldout_ids)``: disjoint, together every id once.

    Raises:
        ValueError: a fraction outside ``[0, 1)``, a non-int seed, an unknown ``by``, a repeated sample id, a
            sample whose group is not one of :data:`GROUPS` (the message names the sample); with ``by="db"`` a
            sample without a ``db_id`` (named), or a fraction above 0 over samples that form a single unit
            (one database: nothing can be held out without holding out everything).
        TypeError: an item without ``id`` / ``group``.

    Source: held-out evaluation of GRPO runs (``docs/training.md``, "Splits by database"); stratification as in
    the ABISS §6 per-group reporting; database-disjoint splits as Spider's own train / dev / test (Yu et al.
    2018, §3: no database appears in two of them).
    """
    if by not in SPLIT_KINDS:
        raise ValueError(f"by must be one of {list(SPLIT_KINDS)}, got {by!r}")
    if by == "db":
        return _split_by_db(samples, heldout_fraction, seed)[:2]
    order, by_group = _checked(samples, heldout_fraction, seed)
    held: set[str] = set()
    for group, ids in by_group.items():
        n = len(ids)
        k = round(n * heldout_fraction)
        if heldout_fraction > 0 and n >= 2:
            k = min(max(k, 1), n - 1)
        ids = sorted(ids)
        random.Random(f"{seed}:{group}").shuffle(ids)
        held.update(ids[:k])
    return [i for i in order if i not in held], [i for i in order if i in held]


def database_of(sample: Sample) -> str:
    """The database a sample is on, for a database-disjoint split: ``provenance["source_db_id"]`` where the
    sample runs on a derived copy (a missing-schema sample's database with one table or column removed,
    ``generation/missing_schema.py``), else its ``db_id``.

    ``db_path`` is not read: AmbiQT's rebuilt copies (``datasets/ambiqt.py``: ``db_id`` is the Spider
    database, the file a rebuilt one) and the generated corpus's derived files have other paths but hold the
    same database as far as what a policy can learn about it goes, so they are the same database here.

    Args:
        sample: a sample (anything with ``id``, ``db_id`` and optionally ``provenance``).
    Returns:
        The database name (a non-empty string).
    Raises:
        ValueError: the sample has no ``db_id`` (the message names the sample).
    """
    prov = getattr(sample, "provenance", None) or {}
    src = prov.get("source_db_id") if isinstance(prov, dict) else None
    if isinstance(src, str) and src.strip():
        return src
    db = getattr(sample, "db_id", None)
    if not isinstance(db, str) or not db.strip():
        raise ValueError(f"sample {getattr(sample, 'id', None)!r} has no db_id (got {db!r}); a split by "
                         f"database needs one on every sample")
    return db


class _Union:
    """Union-find over strings (path halving); roots are the smallest member, so results are order-free."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            lo, hi = sorted((ra, rb))
            self.parent[hi] = lo


def _links(samples: Sequence[Sample], ids: set[str]) -> list[tuple[str, str]]:
    """Pairs of sample ids that must stay on one side: :data:`PAIR_KEYS` (to a present id), :data:`LINK_KEYS`
    (samples sharing a value, within one source; an ``anchor_id`` / ``triplet`` naming a present sample links
    to it too)."""
    out: list[tuple[str, str]] = []
    first: dict[tuple[str, str, str], str] = {}
    for s in samples:
        prov = getattr(s, "provenance", None) or {}
        if not isinstance(prov, dict):
            continue
        for key in PAIR_KEYS:
            other = prov.get(key)
            if isinstance(other, str) and other in ids and other != s.id:
                out.append((s.id, other))
        for key in LINK_KEYS:
            val = prov.get(key)
            if val is None or isinstance(val, (dict, list)):
                continue
            if key != "dialogue" and isinstance(val, str) and val in ids and val != s.id:
                out.append((s.id, val))
            tag = (str(prov.get("source")), key, str(val))
            if tag in first:
                out.append((first[tag], s.id))
            else:
                first[tag] = s.id
    return out


def database_units(samples: Sequence[Sample]) -> list[tuple[str, ...]]:
    """The units a split by database moves whole: the databases (:func:`database_of`), merged where a link
    (:data:`PAIR_KEYS`, :data:`LINK_KEYS`) joins samples of two databases.

    Over the loaders and the generation pipeline as they are, a link never crosses databases (a missing-schema
    sample's ``source_db_id`` is its original's ``db_id``; a dialogue and an anchor are on one database), so each
    unit is one database; a hand-written JSONL that pairs samples across databases gets them merged.

    Args:
        samples: the samples.
    Returns:
        The units, each a sorted tuple of database names, sorted.
    Raises:
        ValueError: a sample without ``db_id`` (named).
    """
    uf = _Union()
    db_of = {s.id: database_of(s) for s in samples}
    for d in db_of.values():
        uf.find(d)
    for a, b in _links(samples, set(db_of)):
        uf.union(db_of[a], db_of[b])
    units: dict[str, set[str]] = {}
    for d in db_of.values():
        units.setdefault(uf.find(d), set()).add(d)
    return sorted(tuple(sorted(u)) for u in units.values())


def _split_by_db(samples: Sequence[Sample], heldout_fraction: float, seed: int
                 ) -> tuple[list[str], list[str], list[str], list[str]]:
    """``(train_ids, heldout_ids, train_dbs, heldout_dbs)`` of :func:`split_sample_ids` ``by="db"``."""
    samples = list(samples)
    order, _by_group = _checked(samples, heldout_fraction, seed)
    units = database_units(samples)
    unit_of = {d: u for u in units for d in u}
    db_of = {s.id: database_of(s) for s in samples}
    size: dict[tuple[str, ...], int] = {u: 0 for u in units}
    for sid in order:
        size[unit_of[db_of[sid]]] += 1
    held_units: list[tuple[str, ...]] = []
    if heldout_fraction > 0 and samples:
        if len(units) < 2:
            raise ValueError(f"a split by database needs at least two databases to hold one out; all "
                             f"{len(samples)} samples are on {', '.join(units[0])}")
        target = heldout_fraction * len(samples)
        draw = list(units)
        random.Random(f"{seed}:db").shuffle(draw)
        held = 0
        for u in draw:
            if abs(held + size[u] - target) < abs(held - target):
                held_units.append(u)
                held += size[u]
        if not held_units:  # every unit overshoots alone: the one nearest the target (draw order breaks ties)
            held_units = [min(draw, key=lambda u: abs(size[u] - target))]
        elif len(held_units) == len(units):  # keep a unit for training
            held_units.pop()
    hdbs = {d for u in held_units for d in u}
    held_ids = {sid for sid in order if db_of[sid] in hdbs}
    all_dbs = {d for u in units for d in u}
    return ([i for i in order if i not in held_ids], [i for i in order if i in held_ids],
            sorted(all_dbs - hdbs), sorted(hdbs))


def split_databases(samples: Sequence[Sample], *, heldout_fraction: float = 0.25, seed: int = 0,
                    ids: tuple[Sequence[str], Sequence[str]] | None = None) -> tuple[list[str], list[str]]:
    """The databases (:func:`database_of`) of each side of a split, for logs.

    Args:
        samples: the samples.
        heldout_fraction, seed: the split of :func:`split_sample_ids` with ``by="db"`` (same arguments, same
            draw).
        ids: ``(train_ids, heldout_ids)`` of any split instead (e.g. one of ``by="group"``, whose sides can
            share databases); ``heldout_fraction`` and ``seed`` are then not used.
    Returns:
        ``(train_dbs, heldout_dbs)``: sorted database names; disjoint for a split by database.
    Raises:
        ValueError: as :func:`split_sample_ids`; ``KeyError``: an id in ``ids`` not among ``samples``.
    """
    if ids is None:
        return _split_by_db(samples, heldout_fraction, seed)[2:]
    by_id = {s.id: s for s in samples}
    train, held = ids
    return (sorted({database_of(by_id[i]) for i in train}), sorted({database_of(by_id[i]) for i in held}))


def split_counts(samples: Sequence[Sample], train_ids: Sequence[str], heldout_ids: Sequence[str]
                 ) -> dict[str, dict[str, Any]]:
    """Samples per group on each side of a split, and the held-out share of the group.

    Args:
        samples: the samples; train_ids, heldout_ids: a split of them.
    Returns:
        ``{group: {"train": int, "heldout": int, "heldout_share": float | None}}`` for every group of
        :data:`GROUPS` (``heldout_share`` is ``None`` for a group with no sample: undefined, not 0) and
        ``"all"`` the same over every sample.
    Raises:
        KeyError: an id not among ``samples``.
    """
    group = {s.id: s.group for s in samples}
    out: dict[str, dict[str, Any]] = {}
    for g in (*GROUPS, "all"):
        tr = sum(1 for i in train_ids if g == "all" or group[i] == g)
        he = sum(1 for i in heldout_ids if g == "all" or group[i] == g)
        out[g] = {"train": tr, "heldout": he, "heldout_share": he / (tr + he) if tr + he else None}
    return out


def select_samples(samples: Sequence[Sample], *, sample_ids: Sequence[str] | None = None,
                   split: str | None = None, split_by: str = "db", heldout_fraction: float = 0.25,
                   split_seed: int = 0, exclude_flags: Iterable[str] = ()) -> list[Sample]:
    """The samples a trainer adapter plays: the one selection every adapter applies, in this order.

    1. ``split``: ``"train"`` or ``"heldout"`` keeps that side of :func:`split_sample_ids` (``by=split_by``,
       ``heldout_fraction``, ``seed=split_seed``), drawn over *all* ``samples`` so that the sides are the same
       whatever ``exclude_flags`` drops; ``None`` keeps every sample.
    2. ``sample_ids``: keep these, in this order (``None``: all that are left, in sample order). An id that step 1
       left out is an error: it is on the other side.
    3. ``exclude_flags``: drop samples carrying any of these load-time flags
       (:data:`~textsql_clarify.samples.SAMPLE_FLAGS`, e.g. ``("indistinguishable",)``: its readings return the
       same rows, so asking cannot pay and its ``decision`` is undefined).

    Args:
        samples: the samples. sample_ids, split, split_by, heldout_fraction, split_seed, exclude_flags: above.
    Returns:
        The selected samples (the same objects).
    Raises:
        ValueError: an unknown ``split`` or flag, an id on the other side of the split, or nothing left (the
            message says which step emptied it); the errors of :func:`split_sample_ids`. KeyError: an id not
            among ``samples``.
    """
    from ..samples import flag_set

    samples = list(samples)
    drop = flag_set(exclude_flags)
    if split not in (None, "train", "heldout"):
        raise ValueError(f"split must be 'train', 'heldout' or None, got {split!r}")
    by_id = {s.id: s for s in samples}
    if split is None:
        side = None
    else:
        train, held = split_sample_ids(samples, heldout_fraction=heldout_fraction, seed=split_seed, by=split_by)
        side = set(train if split == "train" else held)
    if sample_ids is None:
        chosen = [s for s in samples if side is None or s.id in side]
    else:
        if isinstance(sample_ids, str):
            raise ValueError("sample_ids must be a list of ids, not one string")
        chosen = []
        for sid in sample_ids:
            if sid not in by_id:
                raise KeyError(f"unknown sample_id {sid!r}")
            if side is not None and sid not in side:
                raise ValueError(f"sample {sid!r} is not on the {split!r} side of the split (by={split_by!r}, "
                                 f"heldout_fraction={heldout_fraction}, seed={split_seed})")
            chosen.append(by_id[sid])
    kept = [s for s in chosen if not drop & set(getattr(s, "flags", ()) or ())]
    if not kept:
        why = f"exclude_flags={sorted(drop)} drops all {len(chosen)}" if chosen else \
            f"split={split!r} / sample_ids leave none of the {len(samples)}"
        raise ValueError(f"no sample selected: {why}")
    return kept


def _unanswerable_parts(rest: str) -> tuple[str, str]:
    """``<file>:<spider root>`` split as :func:`textsql_clarify.datasets.load_dataset` does."""
    from ..datasets import _split_unanswerable

    return _split_unanswerable(rest)


def spec_missing_paths(spec: str) -> list[str]:
    """The files or folders a dataset spec needs that do not exist (``[]`` when all are present).

    Args:
        spec: a :func:`textsql_clarify.datasets.load_dataset` spec string.
    Returns:
        The missing paths, as written in the spec (``embedded`` never misses anything).
    Raises:
        DatasetError: a malformed spec (as ``load_dataset`` would raise it).
    """
    s = str(spec).strip()
    if s == "embedded":
        return []
    if s.startswith("spider-unanswerable:"):
        file, root = _unanswerable_parts(s[len("spider-unanswerable:"):])
        need = [file, os.path.join(root, "database")]
    elif s.startswith("spider:"):
        root = s[len("spider:"):]
        need = [os.path.join(root, "dev.json"), os.path.join(root, "database")]
    elif s.startswith("jsonl:"):
        need = [s[len("jsonl:"):]]
    elif s.lower().endswith(".jsonl"):
        need = [s]
    else:
        return []  # unknown form: load_dataset raises its own error naming the accepted forms
    return [p for p in need if p and not Path(p).exists()]


def load_training_samples(specs: Iterable[str | os.PathLike] = ("embedded",), *, limit: int | None = None,
                          on_skip: Callable[[str, list[str]], None] | None = None) -> list[Sample]:
    """Load the samples of every spec whose data is present, in spec order.

    Args:
        specs: :func:`textsql_clarify.datasets.load_dataset` specs, e.g. ``("embedded",
            "spider:<root>", "spider-unanswerable:<file>:<spider root>")``.
        limit: keep only the first ``limit`` samples of each spec (``None``: all).
        on_skip: called as ``on_skip(spec, missing_paths)`` for each spec skipped because its files are
            absent; the default issues a ``UserWarning`` naming the spec and the missing paths.

    Returns:
        The samples of the present specs, validated by their loaders.

    Raises:
        DatasetError: a present spec whose data is invalid (only absence is skipped), or a malformed spec.
        ValueError: a sample id that two specs share (the env needs unique ids), or no sample at all.
    """
    from ..datasets import load_dataset

    specs = [os.fspath(x) for x in specs]
    out: list[Sample] = []
    where: dict[str, str] = {}
    for spec in specs:
        missing = spec_missing_paths(spec)
        if missing:
            if on_skip is None:
                warnings.warn(f"dataset spec {spec!r} skipped: not found: {', '.join(missing)}", UserWarning,
                              stacklevel=2)
            else:
                on_skip(spec, missing)
            continue
        for s in load_dataset(spec, limit=limit):
            if s.id in where:
                raise ValueError(f"sample id {s.id!r} is in both {where[s.id]!r} and {spec!r}")
            where[s.id] = spec
            out.append(s)
    if not out:
        raise ValueError(f"no samples: none of the dataset specs {specs!r} is present")
    return out


def build_training_corpus(data_root: str | os.PathLike, **kwargs: Any) -> Any:
    """:func:`textsql_clarify.integrations.corpus.build_training_corpus` (re-exported here, next to the split it
    is made for): every present source of ``data_root``, flagged samples dropped, balanced by group.

    Args and returns: as there (``generated``, ``per_group``, ``seed``, ``exclude_flags``; a
    :class:`~textsql_clarify.integrations.corpus.TrainingCorpus`). Raises: as there.
    """
    from .corpus import build_training_corpus as build

    return build(data_root, **kwargs)
