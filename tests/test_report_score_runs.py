"""The HTML report and its Markdown and CSV exports of a predictions replay (``textsql-clarify score``): the agent-behaviour metrics (AR, turns, ...)
and the outcome columns a replay cannot have (one SQL turn per episode) are hidden for score runs, kept for eval
runs, and shown as not applicable for the score run of a mixed report.

The runs are real, on the embedded set's answerable and ambiguous samples (36; no feedback, so no judge loads):
a ``score`` run of each sample's gold SQL (unanswerable ones have none) and an ``eval`` run of the no-clarify agent.
"""
from __future__ import annotations

import csv
import io
import re

import pytest

from textsql_clarify.baselines.predictions import score_predictions
from textsql_clarify.baselines.rollout import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.reports import load_runs, render_tables
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


# ------------------------------------------------------------------------- Markdown and CSV exports

def _md_table(md: str, heading: str) -> tuple[list[str], list[list[str]]]:
    """The header and body rows of the Markdown table under ``## <heading>``."""
    lines = md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0].splitlines()
    table = [ln for ln in lines if ln.startswith("| ")]

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split(" | ")]

    return cells(table[0]), [cells(ln) for ln in table[1:]]


def _csv_rows(runs) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(render_tables(runs, "csv"))))


def test_the_score_exports_leave_out_ar_turns_and_the_outcomes_a_replay_cannot_have(folders):
    runs = load_runs([folders / "score"])
    md = render_tables(runs, "md")
    head, (row,) = _md_table(md, "Leaderboard")
    assert {"EX", "EM"} <= set(head) and not set(REPLAY_SKIPPED) & set(head)
    ex = runs[0].metrics["overall"]["EX"]
    assert row[head.index("EX")].startswith(f"{ex['value']:.3f} ") and f"n={ex['n']}" in row[head.index("EX")]
    assert _md_table(md, "Outcomes")[0] == ["run", "episodes", "sql"]
    for by in ("group", "subcategory"):
        heads = _md_table(md, f"By {by}")[0]
        assert "EX" in heads and not set(REPLAY_SKIPPED) & set(heads)
    assert NOT_APPLICABLE_MARK not in md.replace("not applicable", "")
    assert "describe no agent there: they are left out" in md

    rows = _csv_rows(runs)
    assert {r["not_applicable"] for r in rows} == {"false"}
    assert not {r["metric"] for r in rows if r["table"] != "outcomes"} & set(REPLAY_SKIPPED)
    assert [r["metric"] for r in rows if r["table"] == "outcomes"] == ["sql"]
    ex_row, = (r for r in rows if r["table"] == "leaderboard" and r["metric"] == "EX")
    assert float(ex_row["value"]) == pytest.approx(ex["value"]) and int(ex_row["n"]) == ex["n"]


def test_the_eval_exports_keep_ar_and_turns(folders):
    runs = load_runs([folders / "eval"])
    md = render_tables(runs, "md")
    head, (row,) = _md_table(md, "Leaderboard")
    assert {"AR", "turns"} <= set(head)
    ar = runs[0].metrics["overall"]["AR"]
    assert row[head.index("AR")].startswith(f"{ar['value']:.3f} ")
    heads = _md_table(md, "Outcomes")[0]
    assert heads[-2:] == ["turns", "clarifications"] and set(REPLAY_SKIPPED_OUTCOMES) <= set(heads)
    assert "AR" in _md_table(md, "By group")[0]
    assert "predictions replay" not in md

    rows = _csv_rows(runs)
    assert {r["not_applicable"] for r in rows} == {"false"}
    ar_row, = (r for r in rows if r["table"] == "leaderboard" and r["metric"] == "AR")
    assert float(ar_row["value"]) == pytest.approx(ar["value"]) and int(ar_row["n"]) == ar["n"] > 0
    assert set(REPLAY_SKIPPED_OUTCOMES) <= {r["metric"] for r in rows if r["table"] == "outcomes"}


def test_a_mixed_export_marks_the_score_runs_ar_not_applicable_and_gives_no_difference(folders):
    runs = load_runs([folders / "eval", folders / "score"])
    ev, score = runs
    md = render_tables(runs, "md")
    head, (ev_row, score_row) = _md_table(md, "Leaderboard")
    assert {"AR", "turns"} <= set(head)
    for m in ("AR", "turns"):
        assert score_row[head.index(m)] == NOT_APPLICABLE_MARK
        assert ev_row[head.index(m)].startswith(f"{ev.metrics['overall'][m]['value']:.3f} ")
    assert score_row[head.index("EX")].startswith(f"{score.metrics['overall']['EX']['value']:.3f} ")
    dhead, (drow,) = _md_table(md, f"Paired differences from {ev.name}")
    assert drow[dhead.index("Δ AR")] == drow[dhead.index("Δ turns")] == NOT_APPLICABLE_MARK
    assert drow[dhead.index("Δ EX")] not in (NOT_APPLICABLE_MARK, "—")
    assert f"read {NOT_APPLICABLE_MARK}, with no Δ" in md
    ohead, (ev_out, score_out) = _md_table(md, "Outcomes")
    assert ohead[-2:] == ["turns", "clarifications"]
    assert [score_out[ohead.index(c)] for c in REPLAY_SKIPPED_OUTCOMES] == [NOT_APPLICABLE_MARK] * 6
    assert score_out[ohead.index("sql")] != NOT_APPLICABLE_MARK and NOT_APPLICABLE_MARK not in ev_out
    ghead, grows = _md_table(md, "By group")
    assert {r[ghead.index("AR")] for r in grows if r[1] == score.name} == {NOT_APPLICABLE_MARK}

    rows = _csv_rows(runs)
    na = [r for r in rows if r["not_applicable"] == "true"]
    assert na and {r["run"] for r in na} == {score.name}
    assert all(r["value"] == r["ci95_lo"] == r["ci95_hi"] == "" and r["n"] == "0" for r in na)
    cell = {(r["table"], r["run"], r["metric"], r["key"]): r for r in rows}
    assert cell[("leaderboard", score.name, "AR", "")]["not_applicable"] == "true"
    assert cell[("leaderboard", ev.name, "AR", "")]["not_applicable"] == "false"
    assert float(cell[("leaderboard", ev.name, "AR", "")]["value"]) == pytest.approx(ev.metrics["overall"]["AR"]["value"])
    assert cell[("paired_difference", score.name, "AR", ev.name)]["not_applicable"] == "true"
    ex_diff = cell[("paired_difference", score.name, "EX", ev.name)]
    assert ex_diff["not_applicable"] == "false" and int(ex_diff["n"]) > 0
    assert {r["metric"] for r in na if r["table"] == "outcomes"} == set(REPLAY_SKIPPED_OUTCOMES)

    # the score run as the reference: the eval run's AR has no difference from it either
    rev = _csv_rows([score, ev])
    d, = (r for r in rev if r["table"] == "paired_difference" and r["metric"] == "AR")
    assert d["run"] == ev.name and d["not_applicable"] == "true" and d["value"] == ""
