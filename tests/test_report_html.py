"""``textsql-clarify report`` without a browser: run folders, the leaderboard and its paired
differences, outcomes, the HTML page (self-contained, escaped), the table exports and the loaders' errors.

The runs are real: the oracle, no-clarify and random agents on the embedded set (48 samples: 12 answerable,
24 ambiguous, 12 unanswerable), played once per module. The expected numbers were read from their
trajectories (and are recomputed from them below where a test can do so independently).
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.cli import main
from textsql_clarify.datasets import load_dataset
from textsql_clarify.reports import ReportError, load_run, load_runs, render_tables, report_tables, write_report
from textsql_clarify.reports.assets import JS, script_hash
from textsql_clarify.reports.html import render_html
from textsql_clarify.reports.leaderboard import (ALPHA, category_table, leaderboard, outcome_table, per_sample_values,
                                                 significance_label)
from textsql_clarify.rewards.bootstrap import paired_difference
from textsql_clarify.rewards.direction import direction
from textsql_clarify.trajectory import Trajectory

pytest.importorskip("matplotlib")

AGENTS = ("oracle", "no-clarify", "random")
PAYLOAD = "</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """The three embedded runs, each in its own folder (what ``eval --out`` writes)."""
    root = tmp_path_factory.mktemp("report_runs")
    samples = load_dataset("embedded")
    for agent in AGENTS:
        evaluate(samples, agent, out_dir=root / agent, progress=False, dataset="embedded")
    return root


@pytest.fixture(scope="module")
def runs(runs_root):
    return load_runs([runs_root / a for a in AGENTS])


@pytest.fixture(scope="module")
def page(runs):
    return render_html(runs)


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "trajectories.jsonl").read_text().splitlines()]


def _write_records(path: Path, recs: list[dict]) -> None:
    (path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


# ------------------------------------------------------------------------------------- run folders

def test_evaluate_writes_run_json_and_trajectories_carry_the_question(runs_root):
    info = json.loads((runs_root / "random" / "run.json").read_text())
    assert info == {**info, "agent": "random", "privileged": False, "dataset": "embedded", "n_samples": 48, "seed": 0,
                    "simulator": "rule", "reward_preset": "binary", "max_clarifications": 3, "protocol": "f",
                    "isolation": "in_process", "backend": "local", "num_envs": 1}
    assert json.loads((runs_root / "oracle" / "run.json").read_text())["privileged"] is True
    questions = {s.id: s.question for s in load_dataset("embedded")}
    recs = _records(runs_root / "oracle")
    assert len(recs) == 48
    assert all(r["question"] == questions[r["sample_id"]] and r["question"] for r in recs)
    old = {k: v for k, v in recs[0].items() if k != "question"}  # a record written before the field existed
    assert Trajectory.from_dict(old).question == ""


def test_loaded_runs_are_named_by_agent_and_keep_metrics_from_the_file(runs):
    assert [r.name for r in runs] == list(AGENTS)
    assert [len(r.trajectories) for r in runs] == [48, 48, 48]
    assert [r.metrics_source for r in runs] == ["file"] * 3
    assert [r.privileged for r in runs] == [True, True, False]
    ex = runs[0].metrics["overall"]["EX"]
    assert (ex["value"], ex["n"], ex["ci95"]) == (1.0, 36, [1.0, 1.0])


def test_same_agent_twice_gets_folder_names(runs_root, tmp_path):
    other = _copy_run(runs_root / "oracle", tmp_path / "oracle-again")
    names = [r.name for r in load_runs([runs_root / "oracle", other])]
    assert names == ["oracle (oracle)", "oracle (oracle-again)"]


# ----------------------------------------------------------------------------- tables and numbers

def test_leaderboard_values_and_paired_differences(runs):
    board = leaderboard(runs)
    assert board["reference"] == "oracle"
    assert board["metrics"][:3] == ["EX", "FB", "EX_post"]
    assert "abstained" not in board["metrics"] and "L2-IR^p" not in board["metrics"]  # undefined in every run
    rows = {r["run"]: r for r in board["rows"]}
    assert rows["oracle"]["diff"] is None
    nc = rows["no-clarify"]
    assert (nc["metrics"]["EX"]["value"], nc["metrics"]["EX"]["n"]) == (pytest.approx(12 / 36), 36)
    d = nc["diff"]["EX"]
    assert d["n"] == 36 and d["value"] == pytest.approx(-24 / 36)
    assert d["ci95"][1] < 0 and d["p_value"] < 0.01
    # the same difference straight from the trajectories' scores, keyed by sample id
    ex = {r.name: {t.sample_id: t.scores.get("ex") for t in r.trajectories} for r in runs}
    assert d == {**paired_difference(ex["no-clarify"], ex["oracle"]), "verdict": "worse", "significant": True,
                 "direction": "higher"}
    # 24 ambiguous pairs won by the oracle, none by no-clarify: exact McNemar 2 / 2**24
    assert d["test"] == "mcnemar_exact" and d["p_value"] == pytest.approx(2 / 2 ** 24)
    # random answered SQL on 9 unanswerable samples: its EX has n=45, but pairs only over the oracle's 36
    rnd = rows["random"]
    assert rnd["metrics"]["EX"]["n"] == 45 and rnd["diff"]["EX"]["n"] == 36
    assert rnd["diff"]["AR"]["n"] == 48 and rnd["diff"]["AR"]["value"] == pytest.approx(16 / 48 - 24 / 48)
    assert per_sample_values(runs[2], "FB")["uni-ans-001"] in (0.0, None)


def test_category_tables_and_outcomes(runs):
    tab = category_table(runs, "group")
    assert tab["keys"] == ["answerable", "ambiguous", "unanswerable"]
    cell = {(r["key"], r["run"]): r for r in tab["rows"]}
    assert cell[("ambiguous", "no-clarify")]["metrics"]["EX"]["value"] == 0.0
    assert cell[("ambiguous", "no-clarify")]["metrics"]["EX"]["n"] == 24
    assert cell[("answerable", "no-clarify")]["metrics"]["EX"]["value"] == 1.0
    assert cell[("unanswerable", "oracle")]["metrics"]["EX"]["n"] == 0
    sub = category_table(runs, "subcategory")
    assert sub["keys"][:2] == ["answerable_without_evidence", "answerable_with_evidence"] and len(sub["keys"]) == 13
    shares = {r.name: outcome_table(r)["shares"] for r in runs}
    assert (shares["oracle"]["sql"]["count"], shares["oracle"]["feedback"]["count"]) == (36, 12)
    assert (shares["random"]["sql"]["count"], shares["random"]["feedback"]["count"]) == (22, 26)
    assert all(shares[a]["malformed"]["count"] == 0 for a in AGENTS)
    with pytest.raises(ValueError, match="unknown breakdown"):
        category_table(runs, "colour")


# ----------------------------------------------------------------------------------- the HTML page

def test_page_is_self_contained_and_well_formed(page):
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", page, re.I)  # nothing to fetch
    assert "<link" not in page and "@import" not in page
    assert not re.search(r"url\((?!#)", page)  # only the SVGs' own clip paths, url(#id)
    assert page.count("<script") == 1 and html.escape(f"script-src {script_hash(JS)}") in page
    assert html.escape("default-src 'none'") in page
    svgs = re.findall(r"<svg\b.*?</svg>", page, re.S)
    # group: EX, FB, EX_post, AIR, AR, DEA, SQL_behaviour, cell_f1 (8); subcategory: the same 8
    assert len(svgs) == 16 == page.count('<figure class="plot"')
    for svg in svgs:
        root = ET.fromstring(svg)  # each inline SVG is well-formed XML
        assert root.tag.endswith("svg") and len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 0
    assert 'data-by="subcategory" data-metric="EX"' in page


def test_dialogue_browser_lists_every_episode_with_its_filters(runs, page):
    eps = re.findall(r'<details class="episode" ([^>]*)>', page)
    assert len(eps) == 144
    attrs = [dict(re.findall(r'data-(\w+)="([^"]*)"', e)) for e in eps]
    assert [sum(a["run"] == f"r{k}" for a in attrs) for k in range(3)] == [48, 48, 48]
    rnd = [a for a in attrs if a["run"] == "r2"]
    assert sum("ex:fail" in a["score"].split() for a in rnd) == 45
    assert sum(a["outcome"] == "feedback" for a in attrs) == 12 + 12 + 26
    assert sum(a["group"] == "ambiguous" and a["run"] == "r1" and "ex:fail" in a["score"].split() for a in attrs) == 24
    # the turns: the user's relevancy labels and each turn's reward components are on the page
    labels = [turn.user_reply["label"] for r in runs for t in r.trajectories for turn in t.turns if turn.user_reply]
    assert page.count('<span class="label label-relevant">') == labels.count("relevant") > 0
    assert page.count('<span class="label label-technical">') == labels.count("technical") > 0
    assert '<span class="k">components.tables.precision</span>' in page
    assert '<span class="k">turn_penalty</span> <span class="v">-1.000</span>' in page
    assert 'id="dlg-count" data-shown="144">144 of 144 episodes shown' in page


def test_each_episode_gets_its_expected_side_from_the_dataset_run_json_names(runs, runs_root, page, tmp_path):
    """Every episode carries one closed 'expected' block with its sample's gold SQL, hidden knowledge and other readings
    (from the embedded set run.json names); trajectories.jsonl itself holds no gold. A run whose dataset does not load
    says why."""
    samples = {s.id: s for s in load_dataset("embedded")}
    blocks = re.findall(r'<details class="expected">(.*?)</details>', page, re.S)
    assert len(blocks) == 144
    answered = [s for s in samples.values() if s.gold_sql]
    for s in answered:
        assert page.count(f'<pre class="gold">{html.escape(s.gold_sql, quote=True)}</pre>') == 3, s.id
    for s in samples.values():
        for i in s.interpretations:
            assert page.count(f'<pre class="alt">{html.escape(i.gold_sql, quote=True)}</pre>') >= 3, s.id
        if s.drift:
            assert page.count(html.escape(s.drift.post_gold_sql, quote=True)) >= 3, s.id
    n_unanswerable = sum(s.group == "unanswerable" for s in samples.values())
    assert page.count("none (an unanswerable sample has no gold SQL)") == 3 * n_unanswerable == 36
    overlap = samples["uni-overlap-001"]
    text = (runs_root / "no-clarify" / "trajectories.jsonl").read_text()
    assert overlap.interpretations[0].gold_sql in text  # what the agent answered ...
    assert overlap.gold_sql not in text and overlap.hidden_knowledge not in text  # ... but no gold side

    moved = _copy_run(runs_root / "no-clarify", tmp_path / "moved")
    info = json.loads((moved / "run.json").read_text())
    (moved / "run.json").write_text(json.dumps({**info, "dataset": str(tmp_path / "gone.jsonl")}))
    nameless = _copy_run(runs_root / "random", tmp_path / "nameless")
    (nameless / "run.json").write_text(json.dumps({**info, "agent": "random", "dataset": None}))
    other = render_html(load_runs([moved, nameless]))
    assert other.count('<details class="expected">') == 96 and '<pre class="gold">' not in other
    assert other.count(f"Not available: the dataset &#x27;{tmp_path / 'gone.jsonl'}&#x27; named in run.json did not "
                       "load here: DatasetError") == 48
    assert other.count("Not available: run.json names no dataset") == 48


def test_agent_text_cannot_inject_markup(runs_root, tmp_path):
    bad = _copy_run(runs_root / "no-clarify", tmp_path / "hostile")
    recs = _records(bad)
    recs[0]["turns"][0]["content"] = PAYLOAD
    recs[0]["question"] = "<b>bold</b> & 'quoted\""
    recs[1]["turns"][0]["error"] = '"><script>alert(3)</script>'
    _write_records(bad, recs)
    info = json.loads((bad / "run.json").read_text())
    (bad / "run.json").write_text(json.dumps({**info, "agent": "<svg onload=alert(2)>"}))
    page = render_html(load_runs([bad]))
    assert PAYLOAD not in page and "<img" not in page and "<svg onload" not in page and "<b>bold" not in page
    assert page.count("<script") == 1
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &#x27;quoted&quot;" in page
    for svg in re.findall(r"<svg\b.*?</svg>", page, re.S):  # the run name inside the charts is escaped too
        ET.fromstring(svg)


def test_write_report_and_cli(runs_root, tmp_path, capsys):
    dirs = [str(runs_root / a) for a in AGENTS]
    out = tmp_path / "sub" / "r.html"
    assert main(["report", *dirs, "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and out.read_text().count('<details class="episode"') == 144
    assert main(["report", dirs[0], "--by", "difficulty,drift_subtype", "-o", str(tmp_path / "d.html")]) == 0
    html = (tmp_path / "d.html").read_text()
    assert 'data-by="difficulty"' in html and 'data-by="group"' not in html
    assert main(["report", dirs[0], "--by", "colour"]) == 2
    assert "--by takes breakdowns" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert write_report(dirs[:1], tmp_path / "w.html").is_file()
    assert "warning" not in capsys.readouterr().err  # the same 48 samples in every run: no warning


def test_runs_sharing_few_or_no_samples_are_warned_about(runs_root, tmp_path, capsys):
    """A paired row over runs without shared samples was all "—" with no word said."""
    sub, apart = tmp_path / "sub", tmp_path / "apart"
    sub.mkdir()
    apart.mkdir()
    recs = _records(runs_root / "random")
    _write_records(sub, recs[:12])  # 12 of the reference's 48 ids
    _write_records(apart, [{**r, "sample_id": "other-" + r["sample_id"]} for r in recs])  # none of them
    out = tmp_path / "r.html"
    assert main(["report", str(runs_root / "oracle"), str(sub), str(apart), "-o", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["warning: run sub shares 12 of its 12 sample ids with the reference run oracle (48 ids); "
                   "its paired differences are over those 12",
                   "warning: run apart shares 0 of its 48 sample ids with the reference run oracle (48 ids); "
                   "its paired differences are over those 0 (all undefined)"]
    page = out.read_text()
    assert "sub has 12 of the 48 sample ids of oracle and 0 others" in page
    assert "the Δ is over the 12 shared ones (n)." in page
    assert "apart has 0 of the 48 sample ids of oracle and 48 others" in page
    assert "the Δ is undefined (no shared sample)." in page
    board = leaderboard(load_runs([runs_root / "oracle", sub, apart]), ["EX"], n_resamples=50)
    shared = {r["sample_id"] for r in recs[:12]}
    ex_n = sum(v is not None for k, v in per_sample_values(load_run(runs_root / "oracle"), "EX").items()
               if k in shared)
    assert ex_n > 0 and board["rows"][1]["diff"]["EX"]["n"] == ex_n
    assert board["rows"][2]["diff"]["EX"]["n"] == 0 and board["rows"][2]["diff"]["EX"]["value"] is None


def _small_runs(runs_root: Path, dst: Path, agents: tuple[str, ...], keep) -> list[Path]:
    """Hand-made run folders: each agent's trajectories of the samples ``keep(record)`` selects."""
    out = []
    for a in agents:
        (dst / a).mkdir(parents=True)
        _write_records(dst / a, [r for r in _records(runs_root / a) if keep(r)])
        out.append(dst / a)
    return out


def test_small_runs_get_exact_p_values_and_are_not_called_better_or_worse(runs_root, tmp_path):
    """At n = 3 a paired test cannot go below 0.25 (the centred bootstrap said 1/1001), so no difference is
    significant at 0.05: each keeps its sign as ``n.s. (higher|lower)``, uncoloured; each p names its test."""
    amb = [r["sample_id"] for r in _records(runs_root / "oracle") if r["group"] == "ambiguous"][:3]
    runs = load_runs(_small_runs(runs_root, tmp_path / "three", ("oracle", "no-clarify"), lambda r: r["sample_id"] in amb))
    diff = leaderboard(runs)["rows"][1]["diff"]
    # EX: 3 pairs won by the oracle: McNemar 2 * C(3,3) / 2**3 = 0.25
    assert {k: diff["EX"][k] for k in ("value", "n", "p_value", "test", "verdict")} == {
        "value": -1.0, "n": 3, "p_value": 0.25, "test": "mcnemar_exact", "verdict": "n.s. (lower)"}
    # turns: the oracle asks once then answers (2 turns), no-clarify answers (1): d = (-1, -1, -1),
    # 2 of the 8 sign assignments reach |3|: 0.25; fewer turns, but not significantly
    turns = {r.name: {t.sample_id: len(t.turns) for t in r.trajectories} for r in runs}
    assert [turns["no-clarify"][k] - turns["oracle"][k] for k in amb] == [-1, -1, -1]
    assert (diff["turns"]["p_value"], diff["turns"]["test"], diff["turns"]["verdict"]) == (0.25, "signflip_exact",
                                                                                          "n.s. (lower)")
    # AR over ambiguous samples only: asking is better, so never asking would be worse; at p >= 0.05 it is n.s.
    assert diff["AR"]["p_value"] >= ALPHA and diff["AR"]["verdict"] == "n.s. (lower)"
    assert not any(d["significant"] for d in diff.values())
    page = render_html(runs)
    row = page[page.index('<tr data-metric="turns">'):]
    row = row[:row.index("</tr>")]
    assert '<span class="ns"' in row and "p=0.250 <span class=\"test\">exact sign-flip</span>" in row
    assert '"better"' not in row and '"worse"' not in row
    row = page[page.index('<tr data-metric="EX">'):]
    assert '<span class="ns"' in row[:row.index("</tr>")] and "exact McNemar" in row[:row.index("</tr>")]
    md = render_tables(runs, "md")
    assert "-1.000 [-1.000, -1.000] n=3 p=0.250 (exact McNemar) n.s. (lower)" in md
    assert "p=0.001" not in md

    # n = 1: one pair can never be significant
    one = load_runs(_small_runs(runs_root, tmp_path / "one", ("oracle", "no-clarify"), lambda r: r["sample_id"] == amb[0]))
    d = leaderboard(one, ["EX", "turns"])["rows"][1]["diff"]
    assert (d["EX"]["n"], d["EX"]["p_value"], d["turns"]["p_value"]) == (1, 1.0, 1.0)

    # AR on answerable samples: an ask there is a wasted turn, so more asks is worse (red)
    asked = [t.sample_id for t in load_run(runs_root / "random").trajectories
             if t.group == "answerable" and any(turn.action_type == "clarify" for turn in t.turns)]
    assert asked, "the random agent asks on some answerable sample of the embedded set"
    ans = load_runs(_small_runs(runs_root, tmp_path / "ans", ("oracle", "random"), lambda r: r["sample_id"] in asked))
    d = leaderboard(ans, ["AR"])["rows"][1]["diff"]["AR"]
    # k pairs where random asked and the oracle did not: McNemar 2 / 2**k (1 for k = 1); worse once p < 0.05
    assert d["value"] == 1.0 and d["p_value"] == pytest.approx(min(1.0, 2 / 2 ** len(asked)))
    assert d["verdict"] == ("worse" if d["p_value"] < ALPHA else "n.s. (higher)")


# ------------------------------------------------------------------------------------------ export

def test_exports_md_csv_json(runs, runs_root, tmp_path, capsys):
    data = json.loads(render_tables(runs, "json"))
    assert data == json.loads(json.dumps(report_tables(runs), default=str))
    assert data["leaderboard"]["rows"][1]["diff"]["EX"]["n"] == 36
    rows = list(csv.DictReader(io.StringIO(render_tables(runs, "csv"))))
    ex = [r for r in rows if r["table"] == "leaderboard" and r["run"] == "no-clarify" and r["metric"] == "EX"]
    assert len(ex) == 1 and float(ex[0]["value"]) == pytest.approx(1 / 3) and ex[0]["n"] == "36"
    diff = [r for r in rows if r["table"] == "paired_difference" and r["run"] == "random" and r["metric"] == "EX"]
    assert float(diff[0]["value"]) == -1.0 and diff[0]["key"] == "oracle"
    sub = [r for r in rows if r["table"] == "by_subcategory" and r["key"] == "scope" and r["metric"] == "EX"]
    assert [r["run"] for r in sub] == list(AGENTS) and [r["n"] for r in sub] == ["3", "3", "3"]
    undefined = [r for r in rows if r["table"] == "by_group" and r["key"] == "unanswerable" and r["metric"] == "EX"
                 and r["run"] == "oracle"]
    assert undefined[0]["value"] == "" and undefined[0]["n"] == "0"  # undefined is empty, never 0
    out = tmp_path / "rows.csv"
    assert main(["report", *(str(runs_root / a) for a in AGENTS), "--format", "csv", "-o", str(out)]) == 0
    assert out.read_text() == render_tables(runs, "csv")
    capsys.readouterr()
    assert main(["report", str(runs_root / "oracle"), str(runs_root / "random"), "--format", "md"]) == 0
    md = capsys.readouterr().out
    # random misses all 36 pairs the oracle gets: exact McNemar 2 / 2**36 = 2.9e-11, printed, never as 0.000
    assert "## Paired differences from oracle" in md
    assert f"| random | -1.000 [-1.000, -1.000] n=36 p={2 / 2 ** 36:.1e} (exact McNemar) worse |" in md
    assert "| oracle | 48 | 0.750 [0.625, 0.875] 36 of n=48 |" in md  # outcomes: sql 36 of 48
    # every Δ's label follows its metric's direction and its p (better / worse only at p < 0.05, else n.s.);
    # AR over a mix of groups has no direction: no label, a footnote says so
    lines = md.splitlines()
    head = next(ln for ln in lines if ln.startswith("| run | Δ "))
    cols = [c.strip()[2:] for c in head.strip("|").split("|")[1:]]
    cells = dict(zip(cols, [c.strip() for c in lines[lines.index(head) + 2].strip("|").split("|")[1:]]))
    board = leaderboard(runs[:1] + [r for r in runs if r.name == "random"])
    for m, cell in cells.items():
        d = board["rows"][1]["diff"][m]
        way = direction(m, {t.group for t in runs[0].trajectories})
        assert d["direction"] == way
        if cell == "—" or way is None or not d["value"]:
            assert not cell.endswith(("better", "worse", "n.s. (higher)", "n.s. (lower)")), (m, cell)
        elif d["p_value"] < ALPHA:
            assert cell.endswith("better" if (d["value"] > 0) == (way == "higher") else "worse"), (m, cell)
        else:
            assert cell.endswith("n.s. (higher)" if d["value"] > 0 else "n.s. (lower)"), (m, cell)
        assert d["verdict"] == significance_label(m, d["value"], d["p_value"], {t.group for t in runs[0].trajectories})
    turns = [r["metrics"]["turns"]["value"] for r in board["rows"]]  # oracle's mean turns, random's
    p_turns = board["rows"][1]["diff"]["turns"]["p_value"]
    if p_turns < ALPHA:  # fewer turns is better
        assert cells["turns"].endswith("better" if turns[1] < turns[0] else "worse")
    else:
        assert cells["turns"].endswith("n.s. (lower)" if turns[1] < turns[0] else "n.s. (higher)")
    assert not cells["AR"].endswith(("better", "worse", "n.s. (higher)", "n.s. (lower)"))
    note = lines[lines.index(head) + 4]
    assert note.startswith("better / worse follow each metric's direction") and "except turns, where lower" in note
    assert "no direction over these samples, so no label: AR" in note
    with pytest.raises(ValueError, match="unknown table format"):
        render_tables(runs, "xlsx")


# ------------------------------------------------------------------------------------------ errors

def test_bad_run_folders_name_file_line_and_field(runs_root, tmp_path):
    with pytest.raises(ReportError, match="does not exist"):
        load_run(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReportError, match="is not a folder"):
        load_run(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=r"trajectories\.jsonl: not found"):
        load_run(tmp_path / "empty")

    run = _copy_run(runs_root / "random", tmp_path / "bad")
    good = (run / "trajectories.jsonl").read_text().splitlines()
    cases = [
        (2, "{not json", r"trajectories\.jsonl:3: not valid JSON"),
        (4, "[1, 2]", r"trajectories\.jsonl:5: field '<record>': expected a JSON object"),
        (0, json.dumps({**json.loads(good[0]), "group": "maybe"}), r"trajectories\.jsonl:1: field 'group': must be one of"),
        (1, json.dumps({**json.loads(good[1]), "colour": 1}), r"trajectories\.jsonl:2: field 'colour': not a trajectory"),
        (6, json.dumps({k: v for k, v in json.loads(good[6]).items() if k != "db_id"}),
         r"trajectories\.jsonl:7: field 'db_id': missing"),
        (7, json.dumps({**json.loads(good[7]), "turns": [{"index": 0}]}),
         r"trajectories\.jsonl:8: field 'turns\[0\]\.phase': missing"),
    ]
    for line, text, pattern in cases:
        lines = list(good)
        lines[line] = text
        (run / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(ReportError, match=pattern):
            load_run(run)
    (run / "trajectories.jsonl").write_text("\n".join(good[:40]) + "\n")
    with pytest.raises(ReportError, match=r"metrics\.json: field 'n_trajectories': counts 48 .* holds 40"):
        load_run(run)
    (run / "trajectories.jsonl").write_text("\n".join(good) + "\n")
    (run / "metrics.json").write_text('{"overall": {}, ')
    with pytest.raises(ReportError, match=r"metrics\.json:1: not valid JSON"):
        load_run(run)


def test_older_folder_without_run_json_or_intervals_is_recomputed(runs_root, tmp_path):
    run = _copy_run(runs_root / "no-clarify", tmp_path / "old")
    (run / "run.json").unlink()
    m = json.loads((run / "metrics.json").read_text())
    for v in m["overall"].values():
        v.pop("ci95", None)
    (run / "metrics.json").write_text(json.dumps(m))
    recs = _records(run)
    for r in recs:
        r.pop("question")
    _write_records(run, recs)
    loaded = load_run(run)
    assert loaded.metrics_source == "recomputed" and loaded.name == "no-clarify" and loaded.info == {}
    ex = loaded.metrics["overall"]["EX"]
    assert (ex["value"], ex["n"]) == (pytest.approx(1 / 3), 36) and ex["ci95"] is not None
    assert "not recorded: this run was written before" in render_html([loaded])
    (run / "metrics.json").unlink()
    assert load_run(run).metrics["overall"]["EX"]["n"] == 36


def test_csv_cells_that_a_spreadsheet_would_run_as_formulas_are_made_inert(runs_root, tmp_path):
    # a run named like a formula (run.json's agent is free text) must not become a live spreadsheet formula
    run = _copy_run(runs_root / "oracle", tmp_path / "evil")
    info = json.loads((run / "run.json").read_text())
    info["agent"] = '=HYPERLINK("http://x.example","click")'
    (run / "run.json").write_text(json.dumps(info))
    rows = list(csv.DictReader(io.StringIO(render_tables(load_runs([run]), "csv"))))
    assert rows and {r["run"] for r in rows} == {"'" + info["agent"]}
    assert not any(v.startswith(("=", "+", "-", "@")) for r in rows for k, v in r.items() if k in ("run", "key"))
