"""Bootstrap intervals (PremiseSQL's uncertainty appendix: percentile 95 % intervals over the
benchmark's queries, paired resampling) and the paired difference's p (exact McNemar on 0/1 values,
``tests/test_paired_test.py`` for the tests themselves).

Asserted against a reference computation written out here (numpy's index matrix, then percentiles), the
normal approximation on 1,034 binary values, and the paired oracle / no-clarify runs of the embedded set.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.rewards.bootstrap import (BootstrapError, bootstrap_ci, bootstrap_cis, bootstrap_settings,
                                               paired_difference)
from textsql_clarify.rewards.metrics import aggregate, trajectory_metrics

VALUES = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0.5, 0.25]


def _reference(x, n_resamples=1000, seed=0, level=0.95):
    """Efron's percentile interval, written out: one seeded index matrix, resampled means, percentiles."""
    x = np.asarray(x, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_resamples, len(x)))
    means = x[idx].mean(axis=1)
    a = (1 - level) / 2
    return tuple(np.percentile(means, [100 * a, 100 * (1 - a)])), means


def test_percentile_interval_matches_the_reference_computation():
    for seed in (0, 7):
        for level in (0.95, 0.9):
            (lo, hi), _ = _reference(VALUES, seed=seed, level=level)
            got = bootstrap_ci(VALUES, seed=seed, level=level)
            assert got == pytest.approx((lo, hi), abs=1e-12)
    # on these 12 values the 95 % interval is about +-0.23 around the mean 0.6458
    lo, hi = bootstrap_ci(VALUES)
    assert lo < sum(VALUES) / len(VALUES) < hi and 0.35 < hi - lo < 0.6


def test_none_left_out_bools_count_and_small_n():
    with_none = [None, 1, None, 0, 1, 1, None]
    assert bootstrap_ci(with_none) == bootstrap_ci([1, 0, 1, 1])  # undefined is not zero
    assert bootstrap_ci([True, False, True, True]) == bootstrap_ci([1.0, 0.0, 1.0, 1.0])
    assert bootstrap_ci([]) is None and bootstrap_ci([None, None]) is None
    assert bootstrap_ci([0.3]) == (0.3, 0.3) and bootstrap_ci([None, 2.0]) == (2.0, 2.0)
    assert bootstrap_ci([1, 1, 1]) == (1.0, 1.0)
    # deterministic for a seed, different for another
    assert bootstrap_ci(VALUES, seed=3) == bootstrap_ci(VALUES, seed=3) != bootstrap_ci(VALUES, seed=4)
    assert bootstrap_ci(np.array(VALUES)) == bootstrap_ci(VALUES)


def test_1034_binary_values_against_the_normal_approximation():
    # 724 hits of 1,034 (p = 0.700): the normal interval is p +- 1.96 sqrt(p (1 - p) / n) = +-0.0279
    x = [1.0] * 724 + [0.0] * 310
    p, half = 724 / 1034, 1.96 * math.sqrt((724 / 1034) * (310 / 1034) / 1034)
    lo, hi = bootstrap_ci(x)
    assert lo == pytest.approx(p - half, abs=0.004) and hi == pytest.approx(p + half, abs=0.004)
    assert (lo, hi) == pytest.approx(_reference(x)[0], abs=1e-12)


def test_many_columns_at_once_equal_one_at_a_time():
    rng = np.random.default_rng(5)
    cols = {"a": list(rng.random(40)), "b": [None if k % 3 else float(k % 2) for k in range(40)],
            "c": [1.0] * 40, "d": [None] * 40, "e": list(rng.integers(0, 5, 40).astype(float))}
    many = bootstrap_cis(cols)
    assert list(many) == list(cols)
    for name, values in cols.items():
        one = bootstrap_ci(values)
        assert many[name] == (None if one is None else pytest.approx(one, abs=1e-12)), name


def test_bad_values_and_settings_are_named():
    with pytest.raises(BootstrapError, match=r"values\[1\] must be a number"):
        bootstrap_ci([1, "yes"])
    with pytest.raises(BootstrapError, match=r"values\[0\] must be finite"):
        bootstrap_ci([float("nan"), 1])
    with pytest.raises(BootstrapError, match="level"):
        bootstrap_ci([1, 0], level=95)
    with pytest.raises(BootstrapError, match="n_resamples"):
        bootstrap_ci([1, 0], n_resamples=0)
    with pytest.raises(BootstrapError, match="x values"):
        bootstrap_cis({"x": [1, None, "a"]})
    with pytest.raises(BootstrapError, match="must map sample ids"):
        paired_difference([1, 0], {"a": 1})
    assert bootstrap_settings() == {"seed": 0, "n_resamples": 1000, "level": 0.95, "unit": "sample",
                                    "method": "percentile"}


def test_paired_difference_reference_and_edge_cases():
    a = {f"s{k}": v for k, v in enumerate([1, 1, 0, 1, 1, 0, 1, 1])}
    b = {f"s{k}": v for k, v in enumerate([0, 1, 0, 0, 1, 0, 0, 1])}
    b["extra"] = 1  # not in a: not paired
    a["s0"], a["s9"] = a["s0"], None
    res = paired_difference(a, b)
    d = np.array([a[k] - b[k] for k in sorted(set(a) & set(b)) if a[k] is not None])
    (lo, hi), means = _reference(d)
    assert res["n"] == 8 and res["value"] == pytest.approx(3 / 8)
    assert res["ci95"] == pytest.approx([lo, hi], abs=1e-12)
    # 3 pairs won by a (s0, s3, s6), none by b: exact McNemar 2 * C(3,3) / 2**3 = 0.25
    assert res["p_value"] == pytest.approx(0.25) and res["test"] == "mcnemar_exact"
    # the order of the mappings does not matter; the sign flips with the order of the runs
    assert paired_difference(dict(reversed(a.items())), b) == res
    flipped = paired_difference(b, a)
    assert flipped["value"] == -res["value"] and flipped["p_value"] == res["p_value"]
    assert paired_difference({"x": None}, {"x": 1}) == {"value": None, "n": 0, "ci95": None, "p_value": None,
                                                        "test": None}
    assert paired_difference({"x": 1, "y": 0}, {"x": 1, "y": 0})["p_value"] == 1.0  # no difference at all
    same = paired_difference({"x": 1, "y": 1}, {"x": 0, "y": 0})
    # two pairs won by a: 2 * C(2,2) / 2**2 = 0.5 (the centred bootstrap read 1/1001: no resample moved)
    assert same == {"value": 1.0, "n": 2, "ci95": [1.0, 1.0], "p_value": 0.5, "test": "mcnemar_exact"}


@pytest.fixture(scope="module")
def embedded_runs():
    samples = load_dataset("embedded")
    return {a: evaluate(samples, make_agent(a), seed=0, progress=False) for a in ("oracle", "no-clarify")}


def test_paired_difference_oracle_vs_no_clarify_on_the_embedded_set(embedded_runs):
    (o_trajs, _), (n_trajs, _) = embedded_runs["oracle"], embedded_runs["no-clarify"]
    ex = lambda ts: {t.sample_id: t.scores.get("ex") for t in ts}  # noqa: E731
    res = paired_difference(ex(o_trajs), ex(n_trajs))
    # EX is defined on the 36 solvable samples in both runs; the oracle asks and gets the 24 ambiguous ones
    # right, no-clarify answers the other reading of each; both answer the 12 answerable ones
    assert res["n"] == 36 and res["value"] == pytest.approx(24 / 36) and res["value"] > 0
    assert 0.45 < res["ci95"][0] < res["value"] < res["ci95"][1] < 0.85
    # 24 discordant pairs, all won by the oracle: exact McNemar 2 / 2**24
    assert res["p_value"] == pytest.approx(2 / 2 ** 24) and res["test"] == "mcnemar_exact"
    # over the ambiguous samples alone every pair differs by 1: the interval is the point
    amb = {t.sample_id for t in o_trajs if t.group == "ambiguous"}
    sub = paired_difference({k: v for k, v in ex(o_trajs).items() if k in amb}, ex(n_trajs))
    assert sub == {"value": 1.0, "n": 24, "ci95": [1.0, 1.0], "p_value": pytest.approx(2 / 2 ** 24),
                   "test": "mcnemar_exact"}
    # AR: the oracle asks on 24 of 48, no-clarify never
    ar = lambda ts: {t.sample_id: trajectory_metrics(t)["AR"] for t in ts}  # noqa: E731
    assert paired_difference(ar(o_trajs), ar(n_trajs))["value"] == pytest.approx(0.5)


def test_every_mean_in_metrics_json_has_n_and_interval(embedded_runs, tmp_path):
    trajs, m = embedded_runs["no-clarify"]
    assert m["bootstrap"] == bootstrap_settings()

    def cells(block):
        for name, cell in block.items():
            assert set(cell) == {"value", "n", "ci95"}, name
            assert (cell["ci95"] is None) == (cell["n"] == 0), name
            if cell["ci95"] is not None:
                assert cell["ci95"][0] <= cell["value"] + 1e-12 and cell["value"] <= cell["ci95"][1] + 1e-12, name
    cells(m["overall"])
    for b in ("group", "subcategory", "difficulty", "drift_subtype", "sample_type"):
        for blk in m[f"by_{b}"].values():
            cells(blk["metrics"])
            assert blk["outcomes"]["n"] == blk["n_trajectories"]
    # each interval is bootstrap_ci of that metric's per-sample values (unit: sample)
    rows = [trajectory_metrics(t) for t in trajs]
    for name in ("EX", "FB", "AR", "turns", "DRR"):
        assert m["overall"][name]["ci95"] == pytest.approx(list(bootstrap_ci([r[name] for r in rows])), abs=1e-12)
    # no-clarify's EX: 12 answerable right, 24 ambiguous wrong -> 1/3 over 36
    assert m["overall"]["EX"]["value"] == pytest.approx(1 / 3) and m["overall"]["EX"]["n"] == 36
    assert m["overall"]["EX"]["ci95"][0] < 1 / 3 < m["overall"]["EX"]["ci95"][1]
    # metrics.json round-trips and the seed is honoured
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(m), encoding="utf-8")
    assert json.loads(path.read_text(encoding="utf-8"))["overall"]["EX"] == m["overall"]["EX"]
    other = aggregate(trajs, bootstrap_seed=1, n_resamples=200)
    assert other["bootstrap"]["seed"] == 1 and other["bootstrap"]["n_resamples"] == 200
    assert other["overall"]["EX"]["value"] == m["overall"]["EX"]["value"]
    for name in ("EX", "turns"):
        values = [r[name] for r in rows]
        assert other["overall"][name]["ci95"] == pytest.approx(list(bootstrap_ci(values, seed=1, n_resamples=200)))
    assert any(other["overall"][k]["ci95"] != m["overall"][k]["ci95"] for k in m["overall"] if m["overall"][k]["n"] > 1)
    with pytest.raises(ValueError, match="n_resamples"):
        aggregate(trajs, n_resamples=0)


# -- hostile input: clear errors naming the sample -------------------------------------------------
def test_paired_difference_names_the_sample_and_refuses_mixed_id_types():
    with pytest.raises(BootstrapError, match=r"a\['s2'\] must be finite"):
        paired_difference({"s1": 1.0, "s2": float("nan")}, {"s1": 0.0, "s2": 1.0})
    with pytest.raises(BootstrapError, match=r"b\['s1'\] must be a number"):
        paired_difference({"s1": 1.0}, {"s1": "1"})
    with pytest.raises(BootstrapError, match="sample ids"):
        paired_difference({1: 1.0, "s": 0.0}, {1: 0.0, "s": 1.0})
    # int ids alone still pair, in sorted order; no overlap is n = 0
    assert paired_difference({2: True, 1: False}, {1: False, 2: False})["value"] == 0.5
    assert paired_difference({1: 1.0}, {"1": 1.0}) == {"value": None, "n": 0, "ci95": None, "p_value": None,
                                                       "test": None}


def test_bootstrap_ci_of_none_is_a_clear_error():
    with pytest.raises(BootstrapError, match="a sequence"):
        bootstrap_ci(None)
    assert bootstrap_ci([None, None]) is None
    assert bootstrap_ci([True, False, True]) == (0.0, 1.0)
