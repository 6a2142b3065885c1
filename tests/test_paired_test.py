"""Paired tests of two runs (exact McNemar for 0/1 values, the paired sign-flip test otherwise) and the
metric directions the report colours differences by.

Expected p-values are worked out by hand in each test's comments: the exact McNemar p of ``b`` discordant
pairs one way and ``c`` the other is ``2 * sum_{i >= max(b, c)} C(b + c, i) / 2**(b + c)`` (capped at 1);
the exact sign-flip p of k non-zero differences is the share of the ``2**k`` sign assignments whose
``|sum|`` reaches the observed one. Enumerations are cross-checked with ``scipy.stats.permutation_test``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import permutation_test

from textsql_clarify.rewards.bootstrap import paired_difference
from textsql_clarify.rewards.direction import DIRECTIONS, direction, verdict
from textsql_clarify.rewards.metrics import FAMILIES, SUITE_METRICS
from textsql_clarify.rewards.paired_test import (EXACT_MAX_NONZERO, MCNEMAR_EXACT, SIGNFLIP_EXACT, SIGNFLIP_MC,
                                                 PairedTestError, mcnemar_exact, paired_test, signflip)


def _runs(a, b):
    """Two hand-made runs as ``{sample id: value}``, paired by position."""
    return ({f"s{k:02d}": v for k, v in enumerate(a)}, {f"s{k:02d}": v for k, v in enumerate(b)})


def _mcnemar_by_hand(b: int, c: int) -> float:
    k = b + c
    return min(1.0, 2 * sum(math.comb(k, i) for i in range(max(b, c), k + 1)) / 2 ** k) if k else 1.0


# --------------------------------------------------------------------------------------------- n = 1

def test_one_pair_can_never_be_significant():
    # one discordant pair: binomial(1 of 1) two-sided = 1; one non-zero difference: both signs as extreme
    assert paired_difference(*_runs([1], [0])) == {"value": 1.0, "n": 1, "ci95": [1.0, 1.0], "p_value": 1.0,
                                                   "test": MCNEMAR_EXACT}
    res = paired_difference(*_runs([4], [1.5]))  # turns: 4 against 1.5
    assert (res["value"], res["p_value"], res["test"]) == (2.5, 1.0, SIGNFLIP_EXACT)


# --------------------------------------------------------------------------------------------- n = 3

def test_three_equal_differences_give_a_quarter_not_one_in_a_thousand():
    # McNemar b=3, c=0: 2 * C(3,3) / 2**3 = 0.25 (the centred bootstrap said 1/1001 here)
    res = paired_difference(*_runs([0, 0, 0], [1, 1, 1]))
    assert res["value"] == -1.0 and res["n"] == 3 and res["test"] == MCNEMAR_EXACT
    assert res["p_value"] == pytest.approx(0.25) == pytest.approx(_mcnemar_by_hand(3, 0))
    # sign-flip of (2, 2, 2): only all + and all - reach |6|: 2 of 8 = 0.25
    res = paired_difference(*_runs([3, 3, 3], [1, 1, 1]))
    assert (res["p_value"], res["test"]) == (0.25, SIGNFLIP_EXACT)


def test_three_mixed_differences_by_enumeration():
    # d = (3, -1, 1), sum 3: the 8 signed sums are +-5, +-3, +-3, +-1; |S| >= 3 in 6 of 8 = 0.75
    p, test = signflip([3.0, -1.0, 1.0])
    assert (p, test) == (0.75, SIGNFLIP_EXACT)
    ref = permutation_test((np.array([3.0, -1.0, 1.0]),), np.sum, permutation_type="samples",
                           n_resamples=math.inf, alternative="two-sided")
    assert p == pytest.approx(ref.pvalue)
    # no difference at all, or differences that cancel: p = 1
    assert signflip([0.0, 0.0, 0.0]) == (1.0, SIGNFLIP_EXACT)
    assert signflip([1.0, 2.0, -3.0]) == (1.0, SIGNFLIP_EXACT)
    assert mcnemar_exact(np.array([1.0, 0.0, 1.0]), np.array([1.0, 0.0, 1.0])) == 1.0


# -------------------------------------------------------------------------------------------- n = 30

def test_thirty_binary_pairs_exact_mcnemar():
    # 10 pairs won by a, 2 by b, 18 concordant: 2 * (C(12,10) + C(12,11) + C(12,12)) / 4096 = 158 / 4096
    a = [1] * 10 + [0] * 2 + [1] * 9 + [0] * 9
    b = [0] * 10 + [1] * 2 + [1] * 9 + [0] * 9
    res = paired_difference(*_runs(a, b))
    assert res["n"] == 30 and res["value"] == pytest.approx(8 / 30) and res["test"] == MCNEMAR_EXACT
    assert res["p_value"] == pytest.approx(158 / 4096) == pytest.approx(_mcnemar_by_hand(10, 2))
    # bools count as 0/1, and swapping the runs keeps p
    assert paired_difference(*_runs([bool(v) for v in a], b))["p_value"] == res["p_value"]
    assert paired_difference(*_runs(b, a))["p_value"] == res["p_value"]


def test_thirty_pairs_with_five_non_zero_differences_are_enumerated():
    # 25 ties and d = (1, 1, 1, 1, 2): only all + and all - reach |6|: 2 / 2**5 = 0.0625
    a = [2, 2, 2, 2, 3] + [1] * 25
    b = [1] * 30
    res = paired_difference(*_runs(a, b))
    assert (res["n"], res["p_value"], res["test"]) == (30, 0.0625, SIGNFLIP_EXACT)


def test_thirty_equal_non_zero_differences_use_monte_carlo_with_the_plus_one():
    # 30 > 16 non-zero differences: m = 9,999 random sign draws; a draw reaches |30| only with all signs
    # equal (chance 2 / 2**30 each), so none does and p = (0 + 1) / (9999 + 1), above the exact 2 / 2**30
    res = paired_difference(*_runs([2] * 30, [1] * 30))
    assert (res["p_value"], res["test"]) == (1 / 10000, SIGNFLIP_MC)
    assert res["p_value"] >= 2 / 2 ** 30
    # fewer draws, a larger floor: (0 + 1) / (99 + 1)
    assert paired_difference(*_runs([2] * 30, [1] * 30), n_permutations=99)["p_value"] == 0.01


def test_monte_carlo_agrees_with_the_enumeration():
    d = np.array([0.5, -1.0, 2.0, 1.5, 0.25, 1.0, -0.5, 3.0, 1.0, 0.75])
    exact, test = signflip(d)
    assert test == SIGNFLIP_EXACT and len(d) <= EXACT_MAX_NONZERO
    ref = permutation_test((d,), np.mean, permutation_type="samples", n_resamples=math.inf,
                           alternative="two-sided")
    assert exact == pytest.approx(ref.pvalue)
    m = 20000
    mc, test = signflip(d, exact_max=0, n_permutations=m, seed=3)
    assert test == SIGNFLIP_MC
    assert abs(mc - exact) < 4 * math.sqrt(exact * (1 - exact) / m) + 1 / m
    assert signflip(d, exact_max=0, n_permutations=m, seed=3) == (mc, test)  # seeded


def test_p_never_below_what_n_allows():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 8, 16, 17, 30):
        a = rng.integers(0, 4, size=n).astype(float)
        b = a - rng.integers(1, 3, size=n)  # every difference non-zero and positive
        p, _ = paired_test(a, b)
        assert p >= 2.0 ** (1 - n) - 1e-15
        ones, zeros = np.ones(n), np.zeros(n)
        assert paired_test(ones, zeros) == (pytest.approx(min(1.0, 2.0 ** (1 - n))), MCNEMAR_EXACT)


def test_bad_input_is_refused():
    with pytest.raises(PairedTestError, match="finite"):
        signflip([1.0, float("nan")])
    with pytest.raises(PairedTestError, match="n_permutations"):
        signflip([1.0], n_permutations=0)
    with pytest.raises(PairedTestError, match="one shape"):
        paired_test(np.ones(2), np.ones(3))
    with pytest.raises(PairedTestError, match="0/1"):
        mcnemar_exact(np.array([0.5]), np.array([1.0]))


# -------------------------------------------------------------------------------------- directions

def test_every_metric_has_a_documented_direction():
    for name in (*(m for names in FAMILIES.values() for m in names), *SUITE_METRICS):
        assert name in DIRECTIONS, name
    assert direction("components.where.precision") == "higher"
    with pytest.raises(KeyError, match="no direction"):
        direction("made_up")


def test_fewer_turns_and_fewer_asks_on_answerable_are_better():
    assert verdict("EX", -1.0) == "worse" and verdict("EX", 0.5) == "better" and verdict("EX", 0.0) == ""
    assert verdict("turns", -1.0) == "better" and verdict("turns", 1.0) == "worse"
    assert verdict("spurious_tables", -0.5) == "better"
    assert verdict("AR", -0.5, {"answerable"}) == "better"
    assert verdict("AR", -0.5, {"ambiguous"}) == "worse"
    assert verdict("AR", -0.5, {"answerable", "ambiguous"}) == "" and verdict("AR", -0.5) == ""
    assert verdict("EX", None) == ""
