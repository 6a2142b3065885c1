"""A paired difference is called ``better`` / ``worse`` only where its p is under the report's level (0.05);
otherwise the report keeps its sign as ``n.s. (higher)`` / ``n.s. (lower)``, in the Markdown tables, the CSV's
``verdict`` column and the HTML leaderboard (uncoloured, marked n.s.).

The runs are real: the oracle and the random agent (seed 0) on the embedded set's answerable and ambiguous samples
(36; no feedback, so no judge loads).
"""
from __future__ import annotations

import csv
import io
import re

import pytest

from textsql_clarify.datasets import load_dataset
from textsql_clarify.reports import load_runs, render_tables
from textsql_clarify.reports.leaderboard import ALPHA, leaderboard, significance_label
from textsql_clarify.rewards.direction import direction
from textsql_clarify.rollout.evaluation import evaluate


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("significance")
    samples = [s for s in load_dataset("embedded") if s.group != "unanswerable"]
    for agent in ("oracle", "random"):
        evaluate(samples, agent, seed=0, out_dir=root / agent, progress=False, dataset="embedded")
    return load_runs([root / "oracle", root / "random"])


@pytest.fixture(scope="module")
def diff(runs):
    return leaderboard(runs)["rows"][1]["diff"]


def _expected(metric: str, d: dict, groups: set[str]) -> str:
    """The label by hand: the direction's word at p < 0.05, else the sign of the difference."""
    way = direction(metric, groups)
    if not d["value"] or way is None:
        return ""
    if d["p_value"] < 0.05:
        return "better" if (d["value"] > 0) == (way == "higher") else "worse"
    return "n.s. (higher)" if d["value"] > 0 else "n.s. (lower)"


def test_the_report_level_is_five_percent():
    assert ALPHA == 0.05


def test_each_label_follows_the_direction_only_where_p_is_under_the_level(runs, diff):
    groups = {t.group for t in runs[0].trajectories}
    labels = {m: d["verdict"] for m, d in diff.items()}
    assert labels == {m: _expected(m, d, groups) for m, d in diff.items()}
    assert {m: d["significant"] for m, d in diff.items()} == {
        m: d["p_value"] is not None and d["p_value"] < 0.05 for m, d in diff.items()}
    # the two runs give both kinds: EX (random answers no sample right) is a finding, some other Δ is not
    assert diff["EX"]["p_value"] < 0.05 and labels["EX"] == "worse"
    assert any(v.startswith("n.s. (") for v in labels.values()), labels


def test_a_difference_in_turns_above_the_level_is_not_called_better(diff):
    turns = diff["turns"]
    assert turns["value"] != 0 and turns["p_value"] is not None
    if turns["p_value"] >= 0.05:
        assert turns["verdict"] == ("n.s. (lower)" if turns["value"] < 0 else "n.s. (higher)")
    else:  # fewer turns is better
        assert turns["verdict"] == ("better" if turns["value"] < 0 else "worse")


def test_markdown_and_csv_print_the_same_labels(runs, diff):
    md = render_tables(runs, "md")
    lines = md.splitlines()
    head = next(ln for ln in lines if ln.startswith("| run | Δ "))
    cols = [c.strip()[2:] for c in head.strip("|").split("|")[1:]]
    cells = dict(zip(cols, [c.strip() for c in lines[lines.index(head) + 2].strip("|").split("|")[1:]]))
    for m, cell in cells.items():
        label = diff[m]["verdict"]
        if label:
            assert cell.endswith(f") {label}"), (m, cell)
        else:
            assert not re.search(r"(better|worse|n\.s\. \((higher|lower)\))$", cell), (m, cell)
    rows = [r for r in csv.DictReader(io.StringIO(render_tables(runs, "csv"))) if r["table"] == "paired_difference"]
    assert {r["metric"]: r["verdict"] for r in rows} == {m: d["verdict"] for m, d in diff.items()}


def test_the_html_colours_only_significant_differences(runs, diff):
    pytest.importorskip("matplotlib")
    from textsql_clarify.reports.html import render_html

    page = render_html(runs)
    for m, d in diff.items():
        if not d["n"]:
            continue
        row = page[page.index(f'<tr data-metric="{m}">'):]
        row = row[:row.index("</tr>")]
        label = d["verdict"]
        if label in ("better", "worse"):
            assert f'<span class="{label}"' in row and "n.s." not in row, m
        elif label:
            assert '<span class="ns"' in row and '<span class="ns">n.s.</span>' in row, m
            assert '"better"' not in row and '"worse"' not in row, m
            assert f"p ≥ {ALPHA}" in row and ("higher" if d["value"] > 0 else "lower") in row, m
    assert f"where p &lt; {ALPHA}" in page or f"where p < {ALPHA}" in page


def test_a_label_with_no_test_or_no_direction():
    assert significance_label("EX", -0.5, None) == "n.s. (lower)"  # no p: nothing is claimed
    assert significance_label("EX", 0.0, 0.001) == ""
    assert significance_label("EX", None, None) == ""
    assert significance_label("AR", 0.5, 0.001, {"answerable", "ambiguous"}) == ""  # no direction over a mix
    assert significance_label("turns", -0.2, 0.04, alpha=0.01) == "n.s. (lower)"
    with pytest.raises(ValueError, match="alpha must be in"):
        significance_label("EX", 0.5, 0.01, alpha=0.0)
    with pytest.raises(KeyError, match="no direction is documented"):
        significance_label("no_such_metric", 0.5, 0.01)
