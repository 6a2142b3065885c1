"""The training corpus: every present dataset of a data folder, flagged samples dropped, balanced by group.

API: :func:`build_training_corpus(data_root, generated=None, per_group=None, seed=0) <build_training_corpus>`
returns a :class:`TrainingCorpus` (``.samples``, counts per source and group before and after balancing, what
was skipped). :func:`corpus_specs` lists the dataset specs it loads. Split the corpus afterwards (a split by
database, :func:`~textsql_clarify.integrations.splits.split_sample_ids` with ``by="db"``), and pick per group on
each side: the split moves whole databases, so its group shares differ from the fraction.

Sources, in load order (each loaded only where its files exist under ``data_root``; the folder layout of
``../shared/data``, ``README.md`` there):

=======================  ================================================================  ====================
source (``provenance``)   spec                                                              files
=======================  ================================================================  ====================
``embedded``             ``embedded``                                                      (packaged)
``spider``               ``spider:<root>/spider_dev``                                      ``dev.json``, ``database/``
``spider_unanswerable``  ``spider-unanswerable:<root>/spider_unanswerable/...json:<spider>``  ``spider_no_answer.json``
``mmsql``                ``mmsql:<root>/mmsql/MMSQL_test.json:<spider>``                   ``MMSQL_test.json``
``ambiqt``               ``ambiqt:<root>/ambiqt:<spider>``                                 ``ambiqt/``
``mini_interact``        ``mini-interact:<root>/mini_interact``                            ``<db>/<db>.sqlite``
``generated``            ``jsonl:<generated>/samples.jsonl``                               a ``textsql-clarify
                                                                                           generate`` folder
=======================  ================================================================  ====================

Measured on ``../shared/data`` with the model-free generated Spider dev corpus (drift, missing schema, lexical
overlap over the 1,034 Spider dev anchors, seed 0: 3,817 samples), seed 0. Samples loaded per source (answerable
/ ambiguous / unanswerable) and dropped as ``indistinguishable``: embedded 12 / 24 / 12 (0 dropped); Spider dev
1,034 / 0 / 0; Spider-unanswerable 0 / 0 / 180; MMSQL 554 / 76 / 170 (all 76 ambiguous turns are
indistinguishable, so 0 ambiguous are left); AmbiQT 0 / 389 / 0 (367 dropped, 22 left; the ``tbl-agg`` train
file's 426 items name databases outside Spider dev and are skipped by the loader); generated 2,921 / 3 / 893
(0 dropped); mini-interact 0 / 261 / 0 (39 of its 300 tasks name the three databases absent here). So 310
ambiguous samples are available (24 embedded, 22 AmbiQT, 3 generated, 261 mini-interact); without the generated
folder the default cap (the smallest group's count) keeps 307 per group, 921 in all (``tests/test_db_splits.py``
checks those figures). The ambiguous group is then mostly BIRD databases and the other two mostly Spider's: a
policy can read the source off the schema, so a held-out decision accuracy must be read against a baseline that
sees the schema too (``examples/train_decision.py`` runs one).

Balancing (:func:`balance_by_group`): a cap per group; the samples are drawn in units that keep pairs together
(a missing-schema sample and its original, a PremiseSQL flawed question and its original:
:data:`~textsql_clarify.integrations.splits.PAIR_KEYS`), by a seeded shuffle per source whose queues are taken
round-robin, so a small source (the embedded 12) is not crowded out by a large one (Spider's 1,034). A unit is
taken only if no group goes over its cap, so a pair that spans two groups counts in both.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..samples import Sample
from .splits import GROUPS, PAIR_KEYS, _Union, load_training_samples

__all__ = ["TrainingCorpus", "build_training_corpus", "corpus_specs", "balance_by_group", "source_of",
           "count_by_source"]


def source_of(sample: Sample) -> str:
    """The sample's source set: ``provenance["source"]`` (``embedded``, ``spider``, ``spider_unanswerable``,
    ``mmsql``, ``ambiqt``, ``generated`` ...), else ``unknown``."""
    prov = getattr(sample, "provenance", None) or {}
    return str(prov.get("source") or "unknown") if isinstance(prov, dict) else "unknown"


def count_by_source(samples: Iterable[Sample]) -> dict[str, dict[str, int]]:
    """``{source: {group: n, ..., "all": n}}`` over :data:`~textsql_clarify.integrations.splits.GROUPS` (every
    group present, 0 where none), sources sorted."""
    out: dict[str, dict[str, int]] = {}
    for s in samples:
        row = out.setdefault(source_of(s), {**{g: 0 for g in GROUPS}, "all": 0})
        row[s.group] = row.get(s.group, 0) + 1
        row["all"] += 1
    return dict(sorted(out.items()))


@dataclass
class TrainingCorpus:
    """What :func:`build_training_corpus` built.

    Attributes:
        samples: the balanced corpus, in load order (sources in :func:`corpus_specs` order).
        per_group: the cap applied to each group (``{group: int}``).
        counts: ``{source: {group: n, "all": n}}`` of :attr:`samples`.
        available: the same before balancing (after ``exclude_flags``).
        dropped: ``{source: n}`` of samples dropped by ``exclude_flags``.
        specs: the dataset specs loaded; skipped: one message per absent source.
        exclude_flags: the flags dropped; seed: the balancing draw's seed.
    """

    samples: list[Sample]
    per_group: dict[str, int]
    counts: dict[str, dict[str, int]]
    available: dict[str, dict[str, int]]
    dropped: dict[str, int]
    specs: list[str]
    skipped: list[str] = field(default_factory=list)
    exclude_flags: tuple[str, ...] = ()
    seed: int = 0

    def totals(self) -> dict[str, int]:
        """``{group: n, "all": n}`` of :attr:`samples`."""
        out = {**{g: 0 for g in GROUPS}, "all": 0}
        for row in self.counts.values():
            for k, v in row.items():
                out[k] = out.get(k, 0) + v
        return out

    def describe(self) -> str:
        """A plain-text table: per source, available -> kept per group, then the totals and the caps."""
        lines = [f"{'source':<22}" + "".join(f"{g:>20}" for g in (*GROUPS, "all"))]
        for src in sorted(set(self.available) | set(self.counts)):
            a = self.available.get(src, {})
            k = self.counts.get(src, {})
            lines.append(f"{src:<22}" + "".join(f"{str(a.get(g, 0)) + ' -> ' + str(k.get(g, 0)):>20}"
                                                for g in (*GROUPS, "all")))
        t = self.totals()
        lines.append(f"{'kept':<22}" + "".join(f"{t[g]:>20}" for g in (*GROUPS, "all")))
        lines.append(f"caps per group {self.per_group}; dropped by {list(self.exclude_flags)}: {self.dropped}")
        lines += self.skipped
        return "\n".join(lines)


def corpus_specs(data_root: str | os.PathLike, *, generated: str | os.PathLike | None = None
                 ) -> tuple[list[str], list[str]]:
    """The dataset specs of :func:`build_training_corpus` that are present, and a message per absent source.

    Args:
        data_root: the data folder (``spider_dev/``, ``spider_unanswerable/``, ``mmsql/``, ``ambiqt/``).
        generated: a folder written by ``textsql-clarify generate`` (its ``samples.jsonl``), or ``None``.
    Returns:
        ``(specs, skipped)``: ``"embedded"`` first, then the present sets in the module table's order.
    Raises:
        ValueError: ``generated`` is given but has no ``samples.jsonl`` (a folder asked for is not skipped).
    """
    root = Path(data_root)
    specs, skipped = ["embedded"], []
    sp = root / "spider_dev"
    has_spider = (sp / "dev.json").is_file() and (sp / "database").is_dir()
    una = root / "spider_unanswerable" / "spider_no_answer.json"
    mm = root / "mmsql" / "MMSQL_test.json"
    aq = root / "ambiqt"
    if has_spider:
        specs.append(f"spider:{sp}")
    else:
        skipped.append(f"Spider dev skipped: {sp / 'dev.json'} or {sp / 'database'} not found "
                       f"(Spider-unanswerable, MMSQL and AmbiQT need its databases too)")
    for name, path, spec in (("Spider-unanswerable", una, f"spider-unanswerable:{una}:{sp}"),
                             ("MMSQL", mm, f"mmsql:{mm}:{sp}"), ("AmbiQT", aq, f"ambiqt:{aq}:{sp}")):
        if has_spider and path.exists():
            specs.append(spec)
        elif has_spider:
            skipped.append(f"{name} skipped: {path} not found")
    mi = root / "mini_interact"
    if mi.is_dir() and any(mi.glob("*/*.sqlite")):
        # BIRD-Interact's ambiguous tasks: the gold SQL is withheld upstream, so they score no EX, but the right
        # first move (ask) is defined: they carry the decision stage's ambiguous group on 23 BIRD databases
        specs.append(f"mini-interact:{mi}")
    else:
        skipped.append(f"mini-interact skipped: {mi} (its task file and databases) not found")
    if generated is not None:
        f = Path(generated) / "samples.jsonl"
        if not f.is_file():
            raise ValueError(f"generated corpus {generated}: no samples.jsonl there (write one with "
                             f"`textsql-clarify generate --out {generated}`)")
        specs.append(f"jsonl:{f}")
    return specs, skipped


def _pair_units(samples: Sequence[Sample]) -> list[list[Sample]]:
    """The samples in units that keep pairs (:data:`PAIR_KEYS`) together, in sample order of their first member."""
    ids = {s.id for s in samples}
    uf = _Union()
    for s in samples:
        uf.find(s.id)
        prov = getattr(s, "provenance", None) or {}
        if isinstance(prov, dict):
            for key in PAIR_KEYS:
                other = prov.get(key)
                if isinstance(other, str) and other in ids:
                    uf.union(s.id, other)
    units: dict[str, list[Sample]] = {}
    for s in samples:
        units.setdefault(uf.find(s.id), []).append(s)
    return list(units.values())


def balance_by_group(samples: Sequence[Sample], per_group: int | Mapping[str, int] | None = None, *,
                     seed: int = 0) -> tuple[list[Sample], dict[str, int]]:
    """At most a cap of samples per group, drawn by seed, pairs kept together (module doc, "Balancing").

    Args:
        samples: the candidates.
        per_group: ``None``: the smallest group's count among the groups present (equal counts, as far as
            pairs allow); an int: that cap for every group; ``{group: cap}``: per group (a group it omits
            gets 0).
        seed: the draw's seed (an int).
    Returns:
        ``(kept, caps)``: the kept samples in input order, and ``{group: cap}``.
    Raises:
        ValueError: a negative or non-int cap, a non-int seed, an unknown group in ``per_group``.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    samples = list(samples)
    present = {s.group for s in samples}
    if per_group is None:
        n = [sum(1 for s in samples if s.group == g) for g in GROUPS if g in present]
        caps = {g: (min(n) if n else 0) for g in GROUPS}
    elif isinstance(per_group, Mapping):
        unknown = sorted(set(per_group) - set(GROUPS))
        if unknown:
            raise ValueError(f"per_group names unknown group(s) {unknown}; groups are {list(GROUPS)}")
        caps = {g: per_group.get(g, 0) for g in GROUPS}
    else:
        caps = {g: per_group for g in GROUPS}
    for g, c in caps.items():
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"per_group cap of {g!r} must be an int >= 0, got {c!r}")
    by_source: dict[str, list[list[Sample]]] = {}
    for unit in _pair_units(samples):
        by_source.setdefault(source_of(unit[0]), []).append(unit)
    queues = []
    for src in sorted(by_source):
        units = sorted(by_source[src], key=lambda u: min(s.id for s in u))
        random.Random(f"{seed}:corpus:{src}").shuffle(units)
        queues.append(units)
    taken: set[str] = set()
    have = {g: 0 for g in GROUPS}
    pos = [0] * len(queues)
    while any(p < len(q) for p, q in zip(pos, queues)) and any(have[g] < caps[g] for g in GROUPS):
        for k, q in enumerate(queues):
            if pos[k] >= len(q):
                continue
            unit = q[pos[k]]
            pos[k] += 1
            need: dict[str, int] = {}
            for s in unit:
                need[s.group] = need.get(s.group, 0) + 1
            if all(have[g] + n <= caps[g] for g, n in need.items()):
                for g, n in need.items():
                    have[g] += n
                taken.update(s.id for s in unit)
    return [s for s in samples if s.id in taken], caps


def build_training_corpus(data_root: str | os.PathLike, *, generated: str | os.PathLike | None = None,
                          per_group: int | Mapping[str, int] | None = None, seed: int = 0,
                          exclude_flags: Iterable[str] = ("indistinguishable",)) -> TrainingCorpus:
    """Load every present source of ``data_root`` (and a generated corpus), drop flagged samples, balance by group.

    Args:
        data_root: the data folder (module table; ``../shared/data`` in this project).
        generated: a ``textsql-clarify generate`` output folder (the generated Spider dev corpus), or ``None``.
        per_group: the cap per group (:func:`balance_by_group`; ``None``: equal counts, the smallest group's).
        seed: the balancing draw's seed.
        exclude_flags: load-time flags whose samples are dropped before balancing (default
            ``("indistinguishable",)``: an ambiguous sample whose readings return the same rows, where asking
            cannot pay and the ``decision`` component is undefined; AmbiQT loses 367 of 389 items to it, MMSQL
            its 76 ambiguous turns).
    Returns:
        A :class:`TrainingCorpus` (``describe()`` prints its counts per source and group).
    Raises:
        ValueError: ``generated`` without ``samples.jsonl``; an unknown flag; a bad cap; a sample id two sources
            share; no sample at all. DatasetError: a present source whose data is invalid.

    Source: the datasets' own papers for their groups (ABISS §3.1; Spider, Yu et al. 2018; MMSQL; AmbiQT,
    Bhaskar et al. 2023); balancing by group as the ABISS §6 per-group reporting.
    """
    from ..samples import flag_set

    flags = (exclude_flags,) if isinstance(exclude_flags, str) else tuple(exclude_flags or ())
    flag_set(flags)  # refuses an unknown flag
    specs, skipped = corpus_specs(data_root, generated=generated)
    loaded = load_training_samples(specs, on_skip=lambda spec, missing: skipped.append(
        f"{spec} skipped: not found: {', '.join(missing)}"))
    dropped: dict[str, int] = {}
    kept = []
    for s in loaded:
        if set(flags) & set(s.flags):
            dropped[source_of(s)] = dropped.get(source_of(s), 0) + 1
        else:
            kept.append(s)
    balanced, caps = balance_by_group(kept, per_group, seed=seed)
    return TrainingCorpus(samples=balanced, per_group=caps, counts=count_by_source(balanced),
                          available=count_by_source(kept), dropped=dict(sorted(dropped.items())), specs=specs,
                          skipped=skipped, exclude_flags=flags, seed=seed)


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m textsql_clarify.integrations.corpus DATA_ROOT [--generated DIR] [--per-group N] [--seed S]``:
    print the corpus's counts per source and group, then a ``left out:`` list: each absent source and each
    loader warning's first line (the warnings themselves go to stderr as ``warning: ...`` lines,
    :func:`textsql_clarify.progress.show_warning`, as the main CLI writes them)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m textsql_clarify.integrations.corpus",
                                description="Build the balanced training corpus and print its counts.")
    p.add_argument("data_root")
    p.add_argument("--generated", default=None)
    p.add_argument("--per-group", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    import warnings

    from ..progress import show_warning

    # the loaders' warnings (MMSQL's skipped turns, mini-interact's tasks on absent databases, ...) as the main
    # CLI prints them: one "warning: ..." line each, without Python's file:line prefix and source line
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        corpus = build_training_corpus(a.data_root, generated=a.generated, per_group=a.per_group, seed=a.seed)
    for w in caught:
        show_warning(w.message, w.category, w.filename, w.lineno)
    print(corpus.describe())
    # what was left out and why: the absent sources (in describe() above) and each loader warning's first line
    left = [str(w.message).splitlines()[0] for w in caught]
    if corpus.skipped or left:
        print("left out:")
        for line in (*corpus.skipped, *left):
            print(f"  - {line}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())

