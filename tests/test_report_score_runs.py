"""The HTML report of a predictions replay (``textsql-clarify score``): the agent-behaviour metrics (AR, turns, ...)
and the outcome columns a replay cannot have (one SQL turn per episode) are hidden for score runs, kept for eval
runs, and shown as not applicable for the score run of a mixed report.

The runs are real, on the embedded set's answerable and ambiguous samples (36; no feedback, so no judge loads):
a ``score`` run of each sample's gold SQL (unanswerable ones have none) and an ``eval`` run of the no-clarify agent.
"""
from __future__ import annotations

import re

import pytest

from textsql_clarify.baselines.predictions import score_predictions
from textsql_clarify.baselines.rollout import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.reports import load_runs
from textsql_clarify.reports.html import NOT_APPLICABLE_MARK, render_html
from textsql_clarify.reports.leaderboard import leaderboard
from textsql_clarify.rewards.report import REPLAY_SKIPPED, REPLAY_SKIPPED_OUTCOMES

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("score_report")
    samples = [s for s in load_dataset("embedded") if s.group != "unanswerable"]
    score_predictions(samples, {s.id: s.gold_sql for s in samples}, out_dir=root / "score", progress=False,
                      dataset="embedded", name="golds")
    evaluate(samples, "no-clarify", out_dir=root / "eval", progress=False, dataset="embedded")
    return root


def _section(page: str, sid: str) -> str:
    return page[page.index(f'<section id="{sid}">'):].split("</section>", 1)[0]


def _leaderboard_metrics(page: str) -> list[str]:
    return re.findall(r'<tr data-metric="([^"]+)">', _section(page, "leaderboard"))


def _outcome_heads(page: str) -> list[str]:
    head = _section(page, "outcomes").split("<table", 1)[1].split("</tr>", 1)[0]
    return re.findall(r"<th>([^<]+)</th>", head)


def _category_heads(page: str, by: str) -> list[str]:
    table = _section(page, "tables").split(f'data-by="{by}">', 1)[1]
    return re.findall(r"<th[^>]*>([^<]+)</th>", table.split("</tr>", 1)[0])


def test_a_score_run_is_told_from_its_own_run_record(folders):
    score, ev = load_runs([folders / "score", folders / "eval"])
    assert score.info["agent"].startswith("predictions:golds@") and score.replay
    assert not ev.replay


def test_the_score_report_hides_ar_turns_and_the_outcomes_a_replay_cannot_have(folders):
    run, = load_runs([folders / "score"])
    # metrics.json keeps them (AR 0 over every episode: the replay never asks)
    assert run.metrics["overall"]["AR"]["n"] == run.metrics["n_trajectories"]
    assert run.metrics["overall"]["turns"]["n"] > 0
    page = render_html([run])
    shown = _leaderboard_metrics(page)
    assert "EX" in shown and "EM" in shown
    assert not set(REPLAY_SKIPPED) & set(shown)
    assert _outcome_heads(page) == ["run", "episodes", "sql"]
    for by in ("group", "subcategory"):
        heads = _category_heads(page, by)
        assert "EX" in heads and not set(REPLAY_SKIPPED) & set(heads)
    assert 'data-metric="AR"' not in _section(page, "plots")


def test_the_eval_report_keeps_ar_and_turns(folders):
    run, = load_runs([folders / "eval"])
    page = render_html([run])
    assert {"AR", "turns"} <= set(_leaderboard_metrics(page))
    assert _outcome_heads(page)[-2:] == ["turns", "clarifications"]
    assert set(REPLAY_SKIPPED_OUTCOMES) - {"turns", "clarifications"} <= set(_outcome_heads(page))
    assert "AR" in _category_heads(page, "group")


def test_a_mixed_report_marks_the_score_runs_ar_not_applicable_and_gives_no_difference(folders):
    runs = load_runs([folders / "eval", folders / "score"])
    board = leaderboard(runs)
    assert "AR" in board["metrics"] and "turns" in board["metrics"]
    ev, score = board["rows"]
    assert ev["metrics"]["AR"]["n"] == runs[0].metrics["overall"]["AR"]["n"] > 0
    assert score["metrics"]["AR"] == {"value": None, "n": 0, "ci95": None, "not_applicable": True}
    assert score["diff"]["AR"]["n"] == 0 and score["diff"]["EX"]["n"] > 0
    page = render_html(runs)
    ar_row = _section(page, "leaderboard").split('<tr data-metric="AR">', 1)[1].split("</tr>", 1)[0]
    assert ar_row.count(f">{NOT_APPLICABLE_MARK}</td>") == 2  # the score run's cell and its Δ
    assert _outcome_heads(page)[-2:] == ["turns", "clarifications"]


def test_a_long_subcategory_name_shows_in_full_with_its_title(folders):
    run, = load_runs([folders / "eval"])
    tables = _section(render_html([run]), "tables")
    name = "answerable_without_evidence"
    assert f'title="{name}">{name}</td>' in tables
