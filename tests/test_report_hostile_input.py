"""Hostile input to ``report``: damaged run folders, odd run names, runs over different samples.

Each test is one defect an attack found, fixed in the module at fault:

- a ``metrics.json`` with a wrongly typed field gave a traceback (TypeError/IndexError/AttributeError) instead
  of an error naming the file and field, and a NaN/Infinity metric value was shown as ``nan`` and written as
  invalid JSON;
- a run name with ``$`` went through matplotlib's mathtext (``$\\frac{$`` stopped the report);
- runs over different sample sets were laid side by side in the leaderboard with no word that their means are
  over different samples (the page now says how many ids they share);
- a run whose trajectories.jsonl plays a sample twice (two runs appended) was read: the leaderboard means took
  every line, the paired differences only the last per sample;
- ``report RUN -o RUN/metrics.json`` overwrote the run's own file with the page.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from textsql_clarify import cli
from textsql_clarify.reports.runs import ReportError, load_run


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- report ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("atk") / "run"
    assert cli.main(["eval", "--dataset", "embedded", "--agent", "no-clarify", "--out", str(out),
                     "--no-progress"]) == 0
    return out


def _corrupt(run_dir: Path, tmp_path: Path, edit) -> Path:
    d = tmp_path / "bad"
    shutil.copytree(run_dir, d)
    m = json.loads((d / "metrics.json").read_text(encoding="utf-8"))
    edit(m)
    (d / "metrics.json").write_text(json.dumps(m), encoding="utf-8")
    return d


def _first(m):
    return m["overall"][next(iter(m["overall"]))]


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.__setitem__("n_trajectories", "48"), "n_trajectories"),
    (lambda m: m.__setitem__("n_trajectories", None), "n_trajectories"),
    (lambda m: m.__setitem__("excluded_indistinguishable", "x"), "excluded_indistinguishable"),
    (lambda m: m.__setitem__("run", "x"), "run"),
    (lambda m: _first(m).__setitem__("ci95", "x"), "overall.EX.ci95"),
    (lambda m: _first(m).__setitem__("ci95", [0.1]), "overall.EX.ci95"),
    (lambda m: _first(m).__setitem__("value", "abc"), "overall.EX.value"),
    (lambda m: _first(m).__setitem__("value", float("nan")), "overall.EX.value"),
    (lambda m: _first(m).__setitem__("value", float("inf")), "overall.EX.value"),
    (lambda m: _first(m).__setitem__("n", "many"), "overall.EX.n"),
], ids=["ntraj-str", "ntraj-null", "excluded-str", "run-str", "ci-str", "ci-short", "value-str", "value-nan",
        "value-inf", "n-str"])
def test_a_wrongly_typed_metrics_json_is_a_clear_error(run_dir, tmp_path, capsys, edit, field):
    d = _corrupt(run_dir, tmp_path, edit)
    assert next(iter(json.loads((run_dir / "metrics.json").read_text())["overall"])) == "EX"
    with pytest.raises(ReportError, match=f"metrics.json: field '{field}'"):
        load_run(d)
    for fmt in ("html", "json"):
        assert cli.main(["report", str(run_dir), str(d), "--format", fmt, "-o", str(tmp_path / f"r.{fmt}")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err and f"field '{field}'" in err


def test_the_report_never_overwrites_a_file_of_a_run(run_dir, tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(run_dir, d)
    before = {p.name: _sha(p) for p in d.iterdir()}
    for name in ("metrics.json", "trajectories.jsonl", "run.json"):
        for fmt in ("html", "md"):
            assert cli.main(["report", str(d), "--format", fmt, "-o", str(d / name)]) == 2
            assert f"is a file of the run {d}" in capsys.readouterr().err
    assert {p.name: _sha(p) for p in d.iterdir()} == before
    assert cli.main(["report", str(d), "-o", str(d / "report.html")]) == 0  # a new file in the folder is fine
    assert (d / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_a_run_that_plays_a_sample_twice_is_refused(run_dir, tmp_path):
    d = tmp_path / "twice"
    d.mkdir()
    text = (run_dir / "trajectories.jsonl").read_text(encoding="utf-8")
    (d / "trajectories.jsonl").write_text(text + text, encoding="utf-8")  # two runs appended to one file
    first = json.loads(text.splitlines()[0])["sample_id"]
    with pytest.raises(ReportError, match=f"trajectories.jsonl:49: field 'sample_id': '{first}' \\(protocol f\\) "
                                          f"was played already on line 1"):
        load_run(d)  # was: the leaderboard took all 96, the paired differences the last 48 (EX -0.667 vs -0.333)


def test_runs_over_different_samples_are_said_to_be(run_dir, tmp_path):
    pytest.importorskip("matplotlib")
    sub = tmp_path / "sub"
    sub.mkdir()
    lines = (run_dir / "trajectories.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 48
    other = json.loads(lines[5])
    other["sample_id"] = "not-in-the-reference"
    (sub / "trajectories.jsonl").write_text("".join(lines[:5]) + json.dumps(other) + "\n", encoding="utf-8")
    assert cli.main(["report", str(run_dir), str(sub), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<b>Not the same samples</b>: sub has 5 of the 48 sample ids of no-clarify and 1 others" in page
    assert cli.main(["report", str(run_dir), str(run_dir), "-o", str(tmp_path / "same.html")]) == 0
    assert "Not the same samples" not in (tmp_path / "same.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["$\\frac{$", "cost $5 and $6"])
def test_a_run_name_with_dollars_is_charted_as_text(name):
    pytest.importorskip("matplotlib")
    from textsql_clarify.reports.plots import bar_chart_svg

    m = {"value": 0.5, "n": 4, "ci95": [0.25, 0.75]}
    svg = bar_chart_svg("EX", ["scope"], [("oracle", [m]), (name, [m])], xmax=1.0, salt="atk")
    assert f">{name}</text>" in svg  # was mathtext: a ParseSyntaxException, or "$5 and $" set in italics
