"""Two-sided paired tests of two runs over the same samples: exact McNemar for binary values, the
paired sign-flip permutation test for the rest.

The p-value of a paired difference must be valid at every n, including n = 1 or 3, where no test can
reach a small p: with k informative pairs the smallest two-sided p is ``2 / 2**k``.

- Binary values (every paired value 0 or 1 in both runs): the exact McNemar test, i.e. the two-sided
  binomial test of the discordant pairs, ``b`` (a = 1, b = 0) of ``b + c``, against 1/2
  (McNemar 1947; Fagerland, Lydersen and Laake 2013, "The McNemar test for binary matched-pairs data";
  ``scipy.stats.binomtest``). ``b + c == 0`` gives p = 1.
- Other values: the paired sign-flip (randomisation) test of the mean difference (Fisher 1935, §21;
  Good, "Permutation, Parametric and Bootstrap Tests of Hypotheses", §3.6.2): under H0 each difference
  ``d_i`` is as likely to be ``-d_i``, and p is the share of sign assignments whose ``|sum(s_i d_i)|``
  reaches the observed ``|sum(d_i)|``. Zero differences do not change the sum, so they are left out of
  the enumeration (the p is the same as over all ``2**n`` assignments). With at most
  :data:`EXACT_MAX_NONZERO` non-zero differences every assignment is enumerated (exact); beyond that
  ``m`` seeded random assignments are drawn and ``p = (b + 1) / (m + 1)``, ``b`` the draws at least as
  extreme (Phipson and Smyth 2010, "Permutation p-values should never be zero"), never below the exact
  floor ``2 / 2**k``.

For binary values both tests give the same p (the sign-flip of +-1 differences is the binomial test of
the discordant pairs); McNemar is named because it is exact at every n without enumeration.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import TextSQLClarifyError

#: test names as written in ``paired_difference``'s ``"test"`` and the report.
MCNEMAR_EXACT = "mcnemar_exact"
SIGNFLIP_EXACT = "signflip_exact"
SIGNFLIP_MC = "signflip_mc"
#: what the report prints beside each p.
TEST_LABELS = {MCNEMAR_EXACT: "exact McNemar", SIGNFLIP_EXACT: "exact sign-flip", SIGNFLIP_MC: "sign-flip MC"}
#: most non-zero differences enumerated exactly (2**16 = 65,536 sign assignments, a 4 MB matrix).
EXACT_MAX_NONZERO = 16
#: Monte Carlo draws beyond :data:`EXACT_MAX_NONZERO` (smallest p 1 / 10,000).
DEFAULT_PERMUTATIONS = 9999
#: draws per block of the Monte Carlo (bounds memory at 1,000 x k signs).
_BLOCK = 1000


class PairedTestError(TextSQLClarifyError, ValueError):
    """The values to test or a setting are invalid; the message names which."""


def _is_binary(x: np.ndarray) -> bool:
    return bool(np.all((x == 0.0) | (x == 1.0)))


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> float:
    """Exact two-sided McNemar p of paired 0/1 values (binomial test of the discordant pairs at 1/2).

    Args:
        a, b: float arrays of shape ``(n,)`` holding only 0.0 and 1.0, paired by position.
    Returns:
        ``scipy.stats.binomtest(#(a=1, b=0), #discordant, 0.5).pvalue``; 1.0 with no discordant pair.
    Raises:
        PairedTestError: the arrays differ in shape or hold a value other than 0 and 1.
    """
    from scipy.stats import binomtest

    if a.shape != b.shape or not (_is_binary(a) and _is_binary(b)):
        raise PairedTestError("mcnemar_exact: a and b must be paired arrays of 0/1 values of one shape")
    only_a = int(np.count_nonzero((a == 1.0) & (b == 0.0)))
    only_b = int(np.count_nonzero((a == 0.0) & (b == 1.0)))
    if only_a + only_b == 0:
        return 1.0
    return float(binomtest(only_a, only_a + only_b, 0.5, alternative="two-sided").pvalue)


def _extreme(sums: np.ndarray, observed: float) -> int:
    """How many signed sums reach ``|observed|`` (a relative tolerance absorbs float summation order)."""
    tol = 1e-9 * max(1.0, abs(observed))
    return int(np.count_nonzero(np.abs(sums) >= abs(observed) - tol))


def signflip(d: Sequence[float] | np.ndarray, *, n_permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0,
             exact_max: int = EXACT_MAX_NONZERO) -> tuple[float, str]:
    """Two-sided paired sign-flip test of ``mean(d) == 0``.

    Args:
        d: the paired differences ``a_i - b_i`` (finite floats; any units, the test is scale-free).
        n_permutations: Monte Carlo draws ``m`` when more than ``exact_max`` differences are non-zero.
        seed: seed of ``numpy.random.default_rng`` for those draws (the same d and seed give the same p).
        exact_max: most non-zero differences enumerated exactly (default :data:`EXACT_MAX_NONZERO`).
    Returns:
        ``(p, test)``: exact ``#{s: |s . d| >= |sum d|} / 2**k`` over the ``k`` non-zero differences
        (``test`` :data:`SIGNFLIP_EXACT`; 1.0 when k == 0), or ``max((b + 1) / (m + 1), 2 / 2**k)``
        (:data:`SIGNFLIP_MC`).
    Raises:
        PairedTestError: a non-finite difference or a bad setting.
    """
    x = np.asarray(d, dtype=float).ravel()
    if not np.isfinite(x).all():
        raise PairedTestError("signflip: every difference must be finite")
    for name, v in (("n_permutations", n_permutations), ("exact_max", exact_max), ("seed", seed)):
        if not isinstance(v, int) or isinstance(v, bool) or v < (1 if name == "n_permutations" else 0):
            raise PairedTestError(f"signflip: {name} must be a {'positive' if name == 'n_permutations' else 'non-negative'}"
                                  f" int, got {v!r}")
    x = x[x != 0.0]
    k = int(x.size)
    if k == 0:
        return 1.0, SIGNFLIP_EXACT
    observed = float(math.fsum(x))
    if k <= exact_max:
        bits = (np.arange(2 ** k, dtype=np.int64)[:, None] >> np.arange(k, dtype=np.int64)) & 1
        sums = (1.0 - 2.0 * bits) @ x  # every assignment of signs, the identity (all +) among them
        return _extreme(sums, observed) / 2 ** k, SIGNFLIP_EXACT
    rng = np.random.default_rng(seed)
    hits, left = 0, n_permutations
    while left:
        rows = min(_BLOCK, left)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(rows, k))
        hits += _extreme(signs @ x, observed)
        left -= rows
    return max((hits + 1) / (n_permutations + 1), 2.0 ** (1 - k)), SIGNFLIP_MC


def paired_test(a: np.ndarray, b: np.ndarray, *, n_permutations: int = DEFAULT_PERMUTATIONS,
                seed: int = 0) -> tuple[float, str]:
    """The two-sided p of paired values and the test that gave it: :func:`mcnemar_exact` when every value
    of both is 0 or 1, else :func:`signflip` of ``a - b``.

    Args:
        a, b: float arrays of shape ``(n,)``, ``n >= 1``, paired by position.
        n_permutations, seed: of the Monte Carlo sign-flip (:func:`signflip`).
    Returns:
        ``(p, test)`` with ``test`` one of :data:`MCNEMAR_EXACT`, :data:`SIGNFLIP_EXACT`, :data:`SIGNFLIP_MC`.
    Raises:
        PairedTestError: the arrays are empty or differ in shape, or as :func:`signflip`.
    """
    if a.shape != b.shape or a.size == 0:
        raise PairedTestError(f"paired_test: a and b must be non-empty and of one shape, got {a.shape} and {b.shape}")
    if _is_binary(a) and _is_binary(b):
        return mcnemar_exact(a, b), MCNEMAR_EXACT
    return signflip(a - b, n_permutations=n_permutations, seed=seed)
