"""Bootstrap confidence intervals over samples, and the paired difference of two runs.

PremiseSQL (the appendix paragraph on uncertainty, before its Table 9) resamples the benchmark's queries
with replacement, keeps the pairing of two runs over the same queries, and reports percentile 95 %
intervals with two-sided centred-bootstrap tests. This module does the same over a run's samples for the
intervals: the unit of resampling is one sample (one defined value of a metric), the interval is Efron's
percentile interval, and every call is deterministic for its ``seed``. The p-value of a paired
difference comes from an exact or permutation paired test instead
(:mod:`~textsql_clarify.rewards.paired_test`), which stays valid at small n.

Implementation (measured, ``bench/bench_bootstrap.py``): plain numpy with one seeded resampling matrix
per sample count ``n``: ``numpy.random.default_rng(seed).integers(0, n, (n_resamples, n))`` turned into
a count matrix ``W`` (how often each value is drawn in each resample), so that every metric with ``n``
defined values is one matrix-vector product ``W @ x / n``; the matrices of the last few ``n`` are kept.
``scipy.stats.bootstrap(method="percentile")`` gives intervals of the same kind but draws afresh for
each call and refuses ``n == 1``; on n = 1,034 binary values with 1,000 resamples it took 26 ms a call,
numpy 18 ms with a fresh matrix and 1.4 ms with the cached one (on 2 cores at load 7: 72-90, 76-101
and 20-28 ms). A metrics block holds dozens of means over the same n, which share the cached matrix,
so numpy is used.
The resampled means are exactly those of ``x[idx].mean(axis=1)`` for that index matrix (up to float
summation order), which is the reference the tests compare with.

Undefined is not zero (``docs/metrics.md``, "Aggregated metrics"): ``None`` entries are left out before resampling, so an interval is
taken over the same n as its mean; no defined value gives no interval (``None``).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Mapping, Sequence

import numpy as np

from ..errors import TextSQLClarifyError

#: defaults recorded at the top of ``metrics.json`` (``"bootstrap"``): seed, resamples, level, unit.
DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 1000
DEFAULT_LEVEL = 0.95
#: Monte Carlo draws of the paired sign-flip test (:mod:`~textsql_clarify.rewards.paired_test`).
DEFAULT_PERMUTATIONS = 9999

#: cached count matrices, keyed by (n, n_resamples, seed), least recently used dropped first: at most
#: :data:`_CACHE_SIZE` matrices and :data:`_CACHE_MAX_CELLS` cells in all (64 MB; a 1,034 x 1,000 matrix is 8 MB).
_CACHE_SIZE = 64
_CACHE_MAX_CELLS = 8_000_000
_CACHE: "OrderedDict[tuple[int, int, int], np.ndarray]" = OrderedDict()


class BootstrapError(TextSQLClarifyError, ValueError):
    """A value to resample or a bootstrap setting is invalid; the message names which."""


def bootstrap_settings(*, n_resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                       seed: int = DEFAULT_SEED) -> dict:
    """The settings block written at the top of ``metrics.json``.

    Returns:
        ``{"seed": seed, "n_resamples": n_resamples, "level": level, "unit": "sample", "method": "percentile"}``.
    Raises:
        BootstrapError: as :func:`bootstrap_ci` for a bad setting.
    """
    _check_settings(n_resamples, level, seed)
    return {"seed": seed, "n_resamples": n_resamples, "level": level, "unit": "sample", "method": "percentile"}


def _check_settings(n_resamples: int, level: float, seed: int) -> None:
    if not isinstance(n_resamples, int) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise BootstrapError(f"n_resamples must be a positive int, got {n_resamples!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.0 < float(level) < 1.0:
        raise BootstrapError(f"level must be a number strictly between 0 and 1, got {level!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BootstrapError(f"seed must be a non-negative int, got {seed!r}")


#: value types converted without a per-value check (the common case: the metrics' floats and bools).
_PLAIN = frozenset({float, int, bool, np.float64, np.bool_})


def _defined(values: Sequence[float | bool | None], what: str = "values") -> np.ndarray:
    """The non-``None`` entries as a float array; bools count 1/0."""
    if values is None or isinstance(values, (str, bytes, Mapping)):
        raise BootstrapError(f"{what} must be a sequence of numbers, bools or None, got {type(values).__name__}")
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        plain = values.astype(float).ravel()
        if np.isfinite(plain).all():
            return plain
    else:
        kept = [v for v in values if v is not None]
        if all(type(v) in _PLAIN for v in kept):
            plain = np.asarray(kept, dtype=float)
            if np.isfinite(plain).all():
                return plain
    xs: list[float] = []  # the slow path, which names the offending value
    for k, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, (bool, np.bool_)):
            xs.append(float(v))
            continue
        if not isinstance(v, (int, float, np.integer, np.floating)):
            raise BootstrapError(f"{what}[{k}] must be a number, a bool or None, got {type(v).__name__} {v!r}")
        f = float(v)
        if not math.isfinite(f):
            raise BootstrapError(f"{what}[{k}] must be finite, got {v!r}")
        xs.append(f)
    return np.asarray(xs, dtype=float)


def resample_counts(n: int, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The count matrix of the seeded percentile bootstrap for ``n`` values.

    Row ``b`` says how many times each of the ``n`` values is drawn in resample ``b``; it comes from
    ``numpy.random.default_rng(seed).integers(0, n, size=(n_resamples, n))``, so the same ``(n, seed)``
    always gives the same resamples. Kept in a small cache (read-only array).

    Args:
        n: number of values (>= 1).
        n_resamples: rows.
        seed: the generator's seed.
    Returns:
        float array of shape ``(n_resamples, n)``, each row summing to ``n``.
    Raises:
        BootstrapError: ``n < 1`` or a bad setting.
    """
    if not isinstance(n, int) or n < 1:
        raise BootstrapError(f"n must be a positive int, got {n!r}")
    key = (n, n_resamples, seed)
    w = _CACHE.get(key)
    if w is not None:
        _CACHE.move_to_end(key)
        return w
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    flat = idx + (np.arange(n_resamples, dtype=idx.dtype) * n)[:, None]
    w = np.bincount(flat.ravel(), minlength=n_resamples * n).reshape(n_resamples, n).astype(float)
    w.flags.writeable = False
    if w.size <= _CACHE_MAX_CELLS:
        _CACHE[key] = w
        while len(_CACHE) > _CACHE_SIZE or sum(m.size for m in _CACHE.values()) > _CACHE_MAX_CELLS:
            _CACHE.popitem(last=False)
    return w


def resampled_means(x: np.ndarray, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The bootstrap distribution of the mean of ``x`` (columns of ``x`` are bootstrapped together).

    Args:
        x: shape ``(n,)`` or ``(n, k)``: ``k`` metrics with ``n`` defined values each, resampled with the
            same draws (one :func:`resample_counts` matrix per ``n``).
    Returns:
        shape ``(n_resamples,)`` or ``(n_resamples, k)``.
    """
    n = x.shape[0]
    return resample_counts(n, n_resamples=n_resamples, seed=seed) @ x / n


def _percentile_interval(means: np.ndarray, level: float) -> np.ndarray:
    alpha = (1.0 - level) / 2.0
    return np.percentile(means, [100.0 * alpha, 100.0 * (1.0 - alpha)], axis=0)


def bootstrap_ci(values: Sequence[float | bool | None], *, n_resamples: int = DEFAULT_RESAMPLES,
                 level: float = DEFAULT_LEVEL, seed: int = DEFAULT_SEED) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of the defined values (Efron; PremiseSQL's appendix
    on uncertainty reports its metrics' 95 % intervals this way).

    Args:
        values: per-sample values; bools count 1/0; ``None`` entries are left out (undefined is not zero).
        n_resamples: bootstrap resamples (default 1,000).
        level: coverage, strictly between 0 and 1 (default 0.95).
        seed: seed of the resampling (default 0); the same values and seed give the same interval.
    Returns:
        ``(lo, hi)`` (numpy's linear-interpolated percentiles ``100 (1 - level) / 2`` and
        ``100 (1 + level) / 2`` of the resampled means); ``None`` when no value is defined;
        ``(v, v)`` for a single value.
    Raises:
        BootstrapError: ``values`` is not a sequence (``None``, a string, a mapping), a value is not a
            number/bool/None or is not finite, or a setting is invalid.
    """
    _check_settings(n_resamples, level, seed)
    x = _defined(values)
    if x.size == 0:
        return None
    if x.size == 1 or bool(np.all(x == x[0])):
        return (float(x[0]), float(x[0]))
    lo, hi = _percentile_interval(resampled_means(x, n_resamples=n_resamples, seed=seed), level)
    return (float(lo), float(hi))


def bootstrap_cis(columns: Mapping[str, Sequence[float | bool | None]], *, n_resamples: int = DEFAULT_RESAMPLES,
                  level: float = DEFAULT_LEVEL, seed: int = DEFAULT_SEED) -> dict[str, tuple[float, float] | None]:
    """:func:`bootstrap_ci` of many metrics at once: metrics with the same number of defined values share
    one matrix product (what :func:`~textsql_clarify.rewards.metrics.aggregate` calls for each block).

    Args:
        columns: ``{metric: per-sample values (None = undefined)}``.
    Returns:
        ``{metric: (lo, hi) | None}``, each equal to ``bootstrap_ci(values, ...)`` with the same settings.
    Raises:
        BootstrapError: as :func:`bootstrap_ci` (the message names the metric).
    """
    _check_settings(n_resamples, level, seed)
    out: dict[str, tuple[float, float] | None] = {}
    by_n: dict[int, list[tuple[str, np.ndarray]]] = {}
    for name, values in columns.items():
        x = _defined(values, what=f"{name} values")
        if x.size == 0:
            out[name] = None
        elif x.size == 1 or bool(np.all(x == x[0])):
            out[name] = (float(x[0]), float(x[0]))
        else:
            by_n.setdefault(int(x.size), []).append((name, x))
    for n, items in by_n.items():
        stacked = np.stack([x for _, x in items], axis=1)
        ci = _percentile_interval(resampled_means(stacked, n_resamples=n_resamples, seed=seed), level)
        for k, (name, _) in enumerate(items):
            out[name] = (float(ci[0, k]), float(ci[1, k]))
    return {name: out[name] for name in columns}


def paired_difference(a: Mapping[str, float | bool | None], b: Mapping[str, float | bool | None], *,
                      n_resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                      seed: int = DEFAULT_SEED, n_permutations: int = DEFAULT_PERMUTATIONS) -> dict:
    """``mean(a_i - b_i)`` over the samples both runs define, with the paired bootstrap's interval
    (PremiseSQL's appendix on uncertainty: resample the aligned queries, keeping the pairing; percentile
    interval) and the two-sided p of an exact or permutation paired test
    (:func:`~textsql_clarify.rewards.paired_test.paired_test`: exact McNemar for 0/1 values, else the paired
    sign-flip test, exact up to 16 non-zero differences).

    The p is not the centred bootstrap's: that one reads ``1 / (n_resamples + 1)`` whenever every
    difference is equal, even at n = 3, where no paired test can go below 2 / 2**3 = 0.25.

    Args:
        a, b: ``{sample id: value}`` of two runs over the same samples (bools count 1/0; ``None`` = undefined).
            Only ids present and defined in both are paired; they are taken in sorted id order, so the
            result does not depend on the mappings' order.
        n_resamples, level, seed: of the interval, as :func:`bootstrap_ci`; ``seed`` also seeds the
            Monte Carlo sign-flip.
        n_permutations: Monte Carlo draws of the sign-flip test past its exact range.
    Returns:
        ``{"value": mean difference | None, "n": k paired samples, "ci95": [lo, hi] | None,
        "p_value": p | None, "test": "mcnemar_exact" | "signflip_exact" | "signflip_mc" | None}``.
        ``n == 0``: every field but ``n`` is ``None``. Every difference equal gives the interval
        ``[d, d]``. The key stays ``ci95`` whatever ``level`` is given.
    Raises:
        BootstrapError: a value is invalid (names the sample id), the ids do not sort (of two types), or a
            setting is invalid.
    """
    from .paired_test import paired_test

    _check_settings(n_resamples, level, seed)
    if not isinstance(n_permutations, int) or isinstance(n_permutations, bool) or n_permutations < 1:
        raise BootstrapError(f"n_permutations must be a positive int, got {n_permutations!r}")
    for name, m in (("a", a), ("b", b)):
        if not isinstance(m, Mapping):
            raise BootstrapError(f"paired_difference: {name} must map sample ids to values, got {type(m).__name__}")
    try:
        ids = sorted(k for k in a.keys() & b.keys() if a[k] is not None and b[k] is not None)
    except TypeError as e:
        raise BootstrapError(f"paired_difference: the sample ids must be of one type that sorts (e.g. all str): "
                             f"{e}") from None
    try:
        xa = _defined([a[k] for k in ids], what="a")
        xb = _defined([b[k] for k in ids], what="b")
    except BootstrapError:  # name the sample id, not its index
        for name, m in (("a", a), ("b", b)):
            for k in ids:
                try:
                    _defined([m[k]])
                except BootstrapError as e:
                    raise BootstrapError(f"{name}[{k!r}]{str(e)[len('values[0]'):]}") from None
        raise
    d = xa - xb
    n = int(d.size)
    if n == 0:
        return {"value": None, "n": 0, "ci95": None, "p_value": None, "test": None}
    obs = float(math.fsum(d) / n)
    p, test = paired_test(xa, xb, n_permutations=n_permutations, seed=seed)
    if bool(np.all(d == d[0])):
        return {"value": obs, "n": n, "ci95": [obs, obs], "p_value": p, "test": test}
    lo, hi = _percentile_interval(resampled_means(d, n_resamples=n_resamples, seed=seed), level)
    return {"value": obs, "n": n, "ci95": [float(lo), float(hi)], "p_value": p, "test": test}
