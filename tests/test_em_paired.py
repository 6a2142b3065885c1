"""Exact-set-match (EM) kept per episode, so the report's Δ EM between two runs has the same exact paired test as
Δ EX (exact McNemar for 0/1 values, its n and method named beside the p).

Hand-made runs of n = 1, 3 and 30 samples check the p against the binomial test of the discordant pairs worked
out here (McNemar 1947); a real ``textsql-clarify score`` pair on Spider dev checks that the run writes
``scores["em"]`` beside ``scores["ex"]`` and that the report pairs it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from textsql_clarify.reports.leaderboard import leaderboard, per_sample_values
from textsql_clarify.reports.runs import Run
from textsql_clarify.rewards.metrics import aggregate
from textsql_clarify.rewards.paired_test import MCNEMAR_EXACT
from textsql_clarify.trajectory import Trajectory, Turn


def _mcnemar_by_hand(only_a: int, only_b: int) -> float:
    """Two-sided exact binomial test of ``only_a`` of ``only_a + only_b`` discordant pairs at 1/2."""
    k = only_a + only_b
    if k == 0:
        return 1.0
    tail = sum(math.comb(k, i) for i in range(max(only_a, only_b), k + 1)) / 2 ** k
    return min(1.0, 2 * tail)


def _run(name: str, em: list[float | None], ex: list[float]) -> Run:
    """A hand-made score-like run: one SQL turn per answerable sample, ``scores`` with ``ex`` and ``em``."""
    trajs = [Trajectory(sample_id=f"s{k:02d}", db_id="db", group="answerable",
                        subcategory="answerable_without_evidence", outcome="sql",
                        turns=[Turn(index=0, phase="interactive", action_type="sql", content="SELECT 1")],
                        scores={"ex": x, "em": e})
             for k, (e, x) in enumerate(zip(em, ex))]
    metrics = aggregate(trajs)
    defined = [e for e in em if e is not None]
    metrics["overall"]["EM"] = {"value": sum(defined) / len(defined) if defined else None, "n": len(defined),
                                "ci95": None}
    return Run(path=Path(name), name=name, info={"agent": f"predictions:{name}@0123456789ab"}, metrics=metrics,
               trajectories=trajs)


def _diff(ref: Run, other: Run, metric: str) -> dict:
    return leaderboard([ref, other], metrics=["EX", "EM"])["rows"][1]["diff"][metric]


def test_one_pair_em_difference_has_p_one():
    d = _diff(_run("a", [1.0], [1.0]), _run("b", [0.0], [1.0]), "EM")
    assert (d["n"], d["value"], d["test"]) == (1, -1.0, MCNEMAR_EXACT)
    assert d["p_value"] == _mcnemar_by_hand(0, 1) == 1.0


def test_three_em_pairs_cannot_go_below_a_quarter():
    ref, other = _run("a", [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]), _run("b", [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    em, ex = _diff(ref, other, "EM"), _diff(ref, other, "EX")
    assert (em["n"], em["value"], em["test"]) == (3, -1.0, MCNEMAR_EXACT)
    assert em["p_value"] == pytest.approx(_mcnemar_by_hand(0, 3)) == pytest.approx(0.25)
    # EX of the same runs is equal everywhere: EM is read from scores["em"], not from EX
    assert (ex["value"], ex["p_value"]) == (0.0, 1.0)


def test_thirty_em_pairs_with_an_undefined_sample_use_exact_mcnemar():
    # sample 0 has no readable gold (EM undefined in both): 29 pairs; the other run fixes 2 and breaks 9
    ref_em = [None] + [1.0] * 20 + [0.0] * 9
    other_em = [None] + [1.0] * 11 + [0.0] * 9 + [1.0] * 2 + [0.0] * 7
    ex = [1.0] * 30
    d = _diff(_run("a", ref_em, ex), _run("b", other_em, ex), "EM")
    fixed = sum(1 for a, b in zip(ref_em, other_em) if a == 0.0 and b == 1.0)
    broken = sum(1 for a, b in zip(ref_em, other_em) if a == 1.0 and b == 0.0)
    assert (fixed, broken) == (2, 9)
    assert d["n"] == 29 and d["test"] == MCNEMAR_EXACT
    assert d["value"] == pytest.approx((fixed - broken) / 29)
    assert d["p_value"] == pytest.approx(_mcnemar_by_hand(fixed, broken))
    # fewer exact matches, but p = 0.065 is not under 0.05: the label keeps the sign and says n.s.
    assert d["p_value"] > 0.05 and d["verdict"] == "n.s. (lower)"


def test_the_html_leaderboard_names_n_and_the_test_beside_the_em_p():
    pytest.importorskip("matplotlib")
    from textsql_clarify.reports.html import _diff_cell

    d = _diff(_run("a", [1.0, 1.0, 1.0], [1.0] * 3), _run("b", [0.0, 0.0, 0.0], [1.0] * 3), "EM")
    cell = _diff_cell(d)
    assert "n=3 p=0.250" in cell and "exact McNemar" in cell


def test_a_score_run_writes_em_per_episode_and_the_report_pairs_it(spider_root, tmp_path, capsys):
    """Two predictions files on the first twenty Spider dev samples: the golds, and the golds with every third
    replaced by ``SELECT 1`` (an EM miss). Each episode's EM is in trajectories.jsonl beside its EX, and the
    report's Δ EM is the exact McNemar test of those 0/1 values."""
    from textsql_clarify.cli import main
    from textsql_clarify.reports import load_runs

    n = 20
    dev = json.loads((spider_root / "dev.json").read_text())[:n]
    for name, wrong in (("gold", False), ("some", True)):
        (tmp_path / f"{name}.sql").write_text("".join(("SELECT 1" if wrong and i % 3 == 0 else r["query"]) + "\n"
                                                      for i, r in enumerate(dev)))
        assert main(["score", "--dataset", f"spider:{spider_root}", "--limit", str(n), "--predictions",
                     str(tmp_path / f"{name}.sql"), "--out", str(tmp_path / name), "--no-progress"]) == 0
    capsys.readouterr()
    recs = [json.loads(x) for x in (tmp_path / "some" / "trajectories.jsonl").read_text().splitlines()]
    em = {r["sample_id"]: r["scores"]["em"] for r in recs}
    assert all("ex" in r["scores"] for r in recs)
    assert [em[f"spider-dev-{i}"] for i in range(0, n, 3)] == [0.0] * len(range(0, n, 3))
    metrics = json.loads((tmp_path / "some" / "metrics.json").read_text())
    defined = [v for v in em.values() if v is not None]
    assert metrics["overall"]["EM"]["value"] == pytest.approx(sum(defined) / len(defined))
    runs = load_runs([tmp_path / "gold", tmp_path / "some"])
    ref, other = per_sample_values(runs[0], "EM"), per_sample_values(runs[1], "EM")
    both = [k for k in ref if ref[k] is not None and other.get(k) is not None]
    broken = sum(1 for k in both if ref[k] == 1.0 and other[k] == 0.0)
    fixed = sum(1 for k in both if ref[k] == 0.0 and other[k] == 1.0)
    d = leaderboard(runs)["rows"][1]["diff"]["EM"]
    assert d["n"] == len(both) and d["test"] == MCNEMAR_EXACT and broken == len(range(0, n, 3))
    assert d["p_value"] == pytest.approx(_mcnemar_by_hand(fixed, broken))
