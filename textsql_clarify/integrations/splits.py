"""Train / held-out splits of sample ids, and loading the training samples that are available.

API: :func:`split_sample_ids(samples, heldout_fraction=0.25, seed=0) <split_sample_ids>` returns
``(train_ids, heldout_ids)``: two disjoint lists of sample ids that together hold every sample, drawn
per group (``answerable`` / ``ambiguous`` / ``unanswerable``) so each group keeps its share on both
sides, and the same for the same samples, fraction and seed on any machine (the draw is a seeded
:class:`random.Random` per group over the sorted ids, not Python's per-process ``hash``).
:func:`load_training_samples(specs) <load_training_samples>` loads each dataset spec of
:func:`textsql_clarify.datasets.load_dataset` whose data is present, skips (with a warning that names
it) each spec whose files are absent, and refuses sample ids that two specs share. Roots are always
arguments: nothing here knows where a machine keeps its data.
"""
from __future__ import annotations

import os
import random
import warnings
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..samples import Sample

__all__ = ["split_sample_ids", "load_training_samples", "spec_missing_paths", "GROUPS"]

#: The groups a split is stratified by (DESIGN.md "Words").
GROUPS = ("answerable", "ambiguous", "unanswerable")


def split_sample_ids(samples: Sequence[Sample], *, heldout_fraction: float = 0.25,
                     seed: int = 0) -> tuple[list[str], list[str]]:
    """Split sample ids into train and held-out parts, stratified by group, deterministically.

    Within each group the ids are sorted, shuffled by ``random.Random(f"{seed}:{group}")`` and the first
    ``round(n * heldout_fraction)`` are held out; a group of two or more samples with a fraction above 0
    holds out at least one and keeps at least one for training. Both lists keep the order of
    ``samples``.

    Args:
        samples: the samples (:class:`~textsql_clarify.samples.Sample`; anything with ``id`` and ``group``).
        heldout_fraction: share of each group held out, ``0 <= f < 1``.
        seed: the draw's seed (an int).

    Returns:
        ``(train_ids, heldout_ids)``: disjoint, together every id once.

    Raises:
        ValueError: a fraction outside ``[0, 1)``, a non-int seed, a repeated sample id, or a sample
            whose group is not one of :data:`GROUPS` (the message names the sample).
        TypeError: an item without ``id`` / ``group``.

    Source: the project's issue 9 (held-out evaluation of GRPO runs); stratification as in the ABISS
    §6 per-group reporting.
    """
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
