"""Aggregation of trajectories into metrics (rewards/metrics.py) and their table (rewards/report.py).

Trajectories are built by hand with known answers; worked numbers come from the references (TIDE
Table 4's Joint anchor, the article's 17-case run) and from executing Spider dev's gold SQL.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conftest import MeanIs
from textsql_clarify.rewards import metrics as M
from textsql_clarify.rewards.metrics import Mean, MetricsError, aggregate, mean, trajectory_metrics, write_metrics_json
from textsql_clarify.rewards.report import render_table
from textsql_clarify.trajectory import Trajectory, Turn

_DEFAULT_SUB = {"answerable": "answerable_without_evidence", "ambiguous": "lexical_overlap",
                "unanswerable": "missing_external_knowledge"}


def sql(phase="interactive"):
    return ("sql", phase, None)


def clar(label, layer=None, route=None, phase="interactive"):
    return ("clarify", phase, {"text": "...", "label": label, "layer": layer, "route": route})


def fbk():
    return ("feedback", "interactive", None)


def cls_turn():
    return ("classify", "classification", None)


def traj(sid, group="answerable", sub=None, *, turns=(), outcome="sql", gold_status=None, scores=None, **kw):
    ts = [Turn(index=k, phase=ph, action_type=a, content="x", user_reply=r) for k, (a, ph, r) in enumerate(turns)]
    return Trajectory(sample_id=sid, db_id="db", group=group, subcategory=sub or _DEFAULT_SUB[group], turns=ts,
                      outcome=outcome,
                      gold_status=gold_status or ("none" if group == "unanswerable" else "ok"),
                      scores=dict(scores or {}), **kw)


def ov(res, name):
    return res["overall"][name]["value"], res["overall"][name]["n"]


# ----------------------------------------------------------------------------------------------- mean

def test_mean_ignores_none_and_carries_n():
    assert mean([1.0, None, 0.0, True]) == Mean(2 / 3, 3)
    assert mean([None, None]) == Mean(None, 0)
    assert mean([]) == Mean(None, 0)
    assert mean([0.0]).to_dict() == {"value": 0.0, "n": 1}  # a real zero stays a zero


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1", [1]])
def test_mean_rejects_non_numbers(bad):
    with pytest.raises(MetricsError, match="value #1"):
        mean([1.0, bad])


def test_mean_invariant_value_none_iff_n_zero():
    with pytest.raises(MetricsError):
        Mean(0.0, 0)
    with pytest.raises(MetricsError):
        Mean(None, 2)
    with pytest.raises(MetricsError):
        Mean(1.0, -1)


# ----------------------------------------------------------------------------------------------- ABISS

def test_air_over_ambiguous_with_a_relevant_reply():
    ts = [
        traj("a", "ambiguous", turns=[clar("relevant"), sql()], scores={"ex": 1}),  # hit
        traj("b", "ambiguous", turns=[clar("technical"), sql()], scores={"ex": 0}),  # no relevant reply: out
        traj("c", "ambiguous", turns=[clar("irrelevant"), clar("relevant"), clar("technical"), sql()],
             scores={"ex": 0}),  # asked again after the relevant reply: miss
        traj("d", "ambiguous", turns=[clar("relevant")], outcome="truncated", scores={"ex": 0}),  # no next turn: out
        traj("e", "answerable", turns=[clar("relevant"), sql()], scores={"ex": 1}),  # not ambiguous: out
    ]
    res = aggregate(ts)
    assert ov(res, "AIR") == (0.5, 2)
    assert res["by_group"]["ambiguous"]["metrics"]["AIR"] == MeanIs(0.5, 2)
    assert res["by_group"]["answerable"]["metrics"]["AIR"] == MeanIs(None, 0)
    # AR over all f-protocol episodes: all 5 asked
    assert ov(res, "AR") == (1.0, 5)
    # turns (ABISS App. D Avg. Turns): 2 + 2 + 4 + 1 + 2 = 11 over 5
    assert ov(res, "turns") == pytest.approx((11 / 5, 5))


def test_ex_and_fb_undefined_is_not_zero():
    ts = [
        traj("u1", "unanswerable", turns=[fbk()], outcome="feedback", scores={"ex": None, "fb": 1}),
        traj("u2", "unanswerable", turns=[fbk()], outcome="feedback", scores={"ex": None, "fb": 0}),
    ]
    res = aggregate(ts)
    assert ov(res, "EX") == (None, 0)  # no SQL on any unanswerable sample: EX has no denominator
    assert ov(res, "FB") == (0.5, 2)
    ts += [
        traj("u3", "unanswerable", scores={"ex": 0.0, "fb": 0}),  # SQL on an unanswerable sample: EX 0
        traj("s1", "answerable", turns=[fbk()], outcome="feedback", scores={"ex": 0, "fb": 0.0}),
        traj("s2", "answerable", scores={"ex": 1}),
        traj("s3", "answerable", gold_status="empty", scores={"ex": None}),
        traj("s4", "ambiguous", gold_status="error", scores={"ex": None}),
    ]
    res = aggregate(ts)
    assert ov(res, "EX") == (1 / 3, 3)  # u3, s1, s2
    assert ov(res, "FB") == (0.25, 4)  # u1..u3, s1
    assert res["by_group"]["unanswerable"]["metrics"]["EX"] == MeanIs(0.0, 1)
    assert res["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(None, 0)
    assert res["ceilings"]["gold_empty"] == 1 and res["ceilings"]["gold_error"] == 1


def test_rec_and_cls():
    ts = [
        traj("r1", "ambiguous", "lexical_overlap", predicted_category="lexical_overlap", turns=[cls_turn(), sql()]),
        traj("r2", "ambiguous", "lexical_overlap", predicted_category="scope", turns=[cls_turn(), sql()]),
        traj("r3", "unanswerable", "improper_question", predicted_category="scope", turns=[cls_turn(), fbk()],
             outcome="feedback"),
        # classification phase ran but gave no usable label: a miss, not left out
        traj("r4", "answerable", predicted_category=None,
             turns=[("invalid", "classification", None), sql()]),
        traj("r5", "answerable", predicted_category="answerable", turns=[cls_turn(), sql()]),  # bare group label
        traj("r6", "answerable", turns=[sql()]),  # no classification phase: out
    ]
    res = aggregate(ts)
    assert ov(res, "Rec") == (0.6, 5)  # r1, r2, r5
    assert ov(res, "Cls") == (0.2, 5)  # r1
    assert trajectory_metrics(ts[5])["Rec"] is None


# ------------------------------------------------------------------------------------------------ TIDE

def _tide_table4_anchor(sid):
    """TIDE Table 4 Joint anchor: L1 recognised, L2 missed, preEX False, DRR True, postEX False."""
    return traj(sid, "ambiguous", "lexical_vagueness", has_chain=True, has_drift=True, drift_subtype="constraint",
                turns=[clar("relevant", "L1", "amb"), sql(), sql("post_drift")],
                scores={"ex": 0, "ex_post": 0, "drift_recognised": True})


def test_tide_table4_joint_anchor():
    res = aggregate([_tide_table4_anchor("claude"), _tide_table4_anchor("llama")])
    assert ov(res, "L1-IR") == (1.0, 2)
    assert ov(res, "JIR") == (0.0, 2)
    assert ov(res, "DRR") == (1.0, 2)
    assert ov(res, "DRA") == (0.0, 2)  # the recognition-resolution gap
    assert ov(res, "DEA") == (0.0, 2)
    assert ov(res, "L2-IR^p") == (None, 0)  # no p-protocol episode in the run
    assert list(res["by_sample_type"]) == ["joint"]
    assert res["by_drift_subtype"]["constraint"]["metrics"]["DRR"] == MeanIs(1.0, 2)


def test_dea_drr_dra_by_hand():
    d = dict(has_drift=True, drift_subtype="value")
    ts = [
        traj("p1", scores={"ex": 1}),                                                    # DEA 1
        traj("d1", **d, scores={"ex": 1, "ex_post": 0, "drift_recognised": True}),     # DEA 0, DRR 1, DRA 0
        traj("d2", **d, scores={"ex": 1, "ex_post": 1, "drift_recognised": True}),     # DEA 1, DRR 1, DRA 1
        traj("d3", **d, scores={"ex": 0, "ex_post": 1, "drift_recognised": False}),    # DEA 0, DRR 0, DRA 0
        traj("d4", **d, scores={"ex": 1, "ex_post": None, "drift_recognised": True}),  # post gold invalid
        traj("g1", gold_status="error", scores={"ex": None}),                           # out of DEA
        traj("u1", "unanswerable", scores={"ex": 0}),                                   # no gold: out of DEA
    ]
    res = aggregate(ts)
    assert ov(res, "DEA") == (0.5, 4)  # p1, d2 of p1..d3
    assert ov(res, "DRR") == (0.75, 4)  # d1, d2, d4 of d1..d4
    assert ov(res, "DRA") == (pytest.approx(1 / 3), 3)  # d2 of d1..d3
    assert ov(res, "EX_post") == (2 / 3, 3)
    assert ov(res, "L1-IR") == (None, 0)  # no chain sample
    assert res["by_sample_type"]["drift_only"]["n_trajectories"] == 4


def test_chain_layers_and_protocols():
    c = dict(has_chain=True)
    ts = [
        traj("f1", "ambiguous", **c, turns=[clar("relevant", "L1"), clar("relevant", "L2"), sql()], scores={"ex": 1}),
        traj("f2", "ambiguous", **c, turns=[clar("relevant", "L1"), sql()], scores={"ex": 0}),
        traj("f3", "ambiguous", **c, turns=[clar("technical", None), sql()], scores={"ex": 0}),
        traj("f4", "ambiguous", **c, turns=[sql()], scores={"ex": 0}),
        # p-protocol episodes: only L2-IR^p (TIDE Table 2 caption)
        traj("q1", "ambiguous", **c, protocol="p", turns=[clar("relevant", "L2"), sql()], scores={"ex": 1}),
        traj("q2", "ambiguous", **c, protocol="p", turns=[sql()], scores={"ex": 1}),
        traj("q3", "ambiguous", protocol="p", turns=[sql()], scores={"ex": 1}),  # not a chain sample
    ]
    res = aggregate(ts)
    assert ov(res, "L1-IR") == (0.5, 4)
    assert ov(res, "JIR") == (0.25, 4)
    assert ov(res, "L2-IR^p") == (0.5, 2)
    assert ov(res, "AR") == (0.75, 4)
    assert ov(res, "EX") == (0.25, 4)  # p-protocol EX values are not counted
    assert res["n_by_protocol"] == {"f": 4, "p": 3}
    assert all(v is None for k, v in trajectory_metrics(ts[4]).items() if k != "L2-IR^p")


# ------------------------------------------------------------------------------------------ PremiseSQL

def _premise_run():
    flaw = dict(premise_flaw="external_fact")
    return [
        traj("x1", "unanswerable", **flaw, turns=[fbk()], outcome="feedback", scores={"fb": 1}),
        traj("x2", "unanswerable", **flaw, turns=[clar("irrelevant"), sql()], scores={"ex": 0, "fb": None}),
        traj("x3", "unanswerable", **flaw, turns=[sql()], scores={"ex": 0}),
        traj("x4", "unanswerable", **flaw, turns=[fbk()], outcome="feedback", scores={"fb": None}),  # unjudged
        traj("x5", "unanswerable", **flaw, turns=[("invalid", "interactive", None)] * 2, outcome="abstain"),
        traj("o1", "answerable", turns=[sql()], scores={"ex": 1}),
        traj("o2", "answerable", turns=[clar("technical"), sql()], scores={"ex": 1}),
        traj("o3", "answerable", turns=[fbk()], outcome="feedback", scores={"ex": 0, "fb": 0}),
        traj("a1", "ambiguous", turns=[sql()], scores={"ex": 1}),  # not answerable: not an original
    ]


def test_premisesql_flawed_metrics():
    res = aggregate(_premise_run())
    assert ov(res, "SQL_behaviour") == (1.25, 4)  # (2 + 1 + 0 + 2) / 4; x5 abstained: not on the scale
    assert ov(res, "DET") == (0.4, 5)  # x1, x4
    assert ov(res, "TYPE") == (0.25, 4)  # x1 of x1, x2, x3, x5 (x4 not judged)


def test_premisesql_originals_fallback_and_ids():
    res = aggregate(_premise_run())
    assert res["premise_originals"] == {"rule": "answerable_fallback", "n": 3}
    assert ov(res, "GEN") == (2 / 3, 3)
    assert ov(res, "VAL") == (1 / 3, 3)
    res = aggregate(_premise_run(), original_ids={"o2", "a1"})
    assert res["premise_originals"] == {"rule": "original_ids", "n": 2}
    assert ov(res, "GEN") == (1.0, 2)
    assert ov(res, "VAL") == (0.5, 2)
    with pytest.raises(MetricsError, match="x1.*premise_flaw"):
        aggregate(_premise_run(), original_ids={"x1"})
    # no flawed sample in the run: GEN / VAL undefined, not 0 or 1
    res = aggregate(_premise_run()[5:])
    assert ov(res, "GEN") == (None, 0) and res["premise_originals"]["rule"] is None


# --------------------------------------------------------------------------------- article and ceilings

def test_article_17_case_run_counts_empty_gold_apart():
    # article: a 17-case run read EX 0.118 = 2/17, and one of the two hits compared zero rows with zero rows
    assert round(2 / 17, 3) == 0.118
    ts = [traj(f"c{k}", scores={"ex": 0}) for k in range(15)]
    ts.append(traj("hit", scores={"ex": 1}))
    ts.append(traj("empty", gold_status="empty", scores={"ex": None}))
    res = aggregate(ts)
    assert ov(res, "EX") == (1 / 16, 16)  # the empty-vs-empty case is a ceiling, not a hit
    assert res["ceilings"]["gold_empty"] == 1


def test_article_group_by_precision_undefined_left_out():
    # article: group-by precision read 0.53 on 17 cases when the 9 with no GROUP BY on either side scored 1
    assert round(9 / 17, 2) == 0.53
    comps = [{"group_by": {"precision": None, "recall": None}}] * 9 + [{"group_by": {"precision": 0.0,
                                                                                     "recall": 0.5}}] * 8
    ts = [traj(f"c{k}", scores={"ex": 0, "components": c}) for k, c in enumerate(comps)]
    res = aggregate(ts)
    assert ov(res, "components.group_by.precision") == (0.0, 8)
    assert ov(res, "components.group_by.recall") == (0.5, 8)


def test_article_cell_scores_pass_through_with_n():
    # article worked example: 8 matched cells of 12 on each side -> cell precision = recall = 0.667;
    # column precision 2.5/4 = 0.625, recall 3/3 = 1.0; table recall 2/3, precision 2/5
    s = {"ex": 0, "cell_precision": 8 / 12, "cell_recall": 8 / 12, "column_precision": 0.625,
         "column_recall": 1.0, "table_recall": 2 / 3, "table_precision": 0.4, "spurious_tables": 3}
    ts = [traj("w", scores=s), traj("u", "unanswerable", turns=[fbk()], outcome="feedback", scores={"fb": 1})]
    res = aggregate(ts)
    assert ov(res, "cell_precision") == (pytest.approx(0.667, abs=5e-4), 1)
    assert ov(res, "column_precision") == (0.625, 1)
    assert ov(res, "table_precision") == (0.4, 1)
    assert ov(res, "spurious_tables") == (3.0, 1)
    assert ov(res, "cell_f1") == (None, 0)


def test_ceilings_counted_overall_and_per_breakdown():
    ts = [
        traj("a", gold_status="error", scores={"ex": None}, difficulty="easy"),
        traj("b", gold_status="empty", scores={"ex": None}, difficulty="easy"),
        traj("c", scores={"ex": 1, "gold_truncated": True, "keyless": True}, difficulty="hard"),
        traj("d", "ambiguous", scores={"ex": 0, "pred_truncated": True, "keyless": None,
                                        "scorer_inconsistent": True}, difficulty="hard"),
        traj("e", "ambiguous", scores={"ex": 1, "gold_truncated": False}),
    ]
    res = aggregate(ts)
    assert res["ceilings"] == {"gold_error": 1, "gold_empty": 1, "gold_nondeterministic": 0, "gold_truncated": 1,
                               "pred_truncated": 1, "keyless": 1, "scorer_inconsistent": 1, "gold_withheld": 0}
    assert res["by_group"]["ambiguous"]["ceilings"]["scorer_inconsistent"] == 1
    assert res["by_group"]["ambiguous"]["ceilings"]["gold_error"] == 0
    assert list(res["by_difficulty"]) == ["easy", "hard", "unknown"]
    assert res["by_difficulty"]["easy"]["metrics"]["EX"] == MeanIs(None, 0)
    assert res["by_difficulty"]["easy"]["n_trajectories"] == 2
    assert res["n_trajectories"] == 5


def test_breakdown_order_and_empty_run():
    ts = [traj("u", "unanswerable"), traj("m", "ambiguous", "scope"), traj("a", "answerable"),
          traj("l", "ambiguous", "lexical_overlap")]
    res = aggregate(ts)
    assert list(res["by_group"]) == ["answerable", "ambiguous", "unanswerable"]
    assert list(res["by_subcategory"]) == ["answerable_without_evidence", "scope", "lexical_overlap",
                                           "missing_external_knowledge"]
    assert res["by_drift_subtype"] == {} and res["by_sample_type"] == {}
    empty = aggregate([])
    assert empty["n_trajectories"] == 0
    assert all(v == MeanIs(None, 0) for v in empty["overall"].values())
    assert set(empty["overall"]) == set(M.METRICS)


# ----------------------------------------------------------------------------------- JSON, validation

def test_json_round_trip(tmp_path):
    ts = _premise_run() + [_tide_table4_anchor("j")]
    ts[0].scores["components"] = {"select": {"precision": 0.5, "recall": None}}
    back = [Trajectory.from_dict(json.loads(json.dumps(t.to_dict()))) for t in ts]
    assert back == ts
    res = aggregate(ts)
    assert aggregate(back) == res
    assert aggregate([t.to_dict() for t in ts]) == res  # records from trajectories.jsonl work too
    out = write_metrics_json(ts, tmp_path / "metrics.json")
    assert out == res
    assert json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8")) == res
    assert res["overall"]["components.select.precision"] == MeanIs(0.5, 1)
    assert res["by_group"]["answerable"]["metrics"]["components.select.recall"] == MeanIs(None, 0)


@pytest.mark.parametrize("make,field", [
    (lambda: traj("bad", scores={"ex": 0.5}), "scores.ex"),
    (lambda: traj("bad", scores={"drift_recognised": 1}), "scores.drift_recognised"),
    (lambda: traj("bad", scores={"cell_recall": 1.2}), "scores.cell_recall"),
    (lambda: traj("bad", scores={"keyless": "yes"}), "scores.keyless"),
    (lambda: traj("bad", scores={"components": {"where": {"precision": -0.1}}}), "scores.components.where.precision"),
    (lambda: traj("bad", group="nonsense", sub="scope"), "group"),
    (lambda: traj("bad", "answerable", "scope"), "subcategory"),
    (lambda: traj("bad", "unanswerable", gold_status="ok"), "gold_status"),
    (lambda: traj("bad", outcome="done"), "outcome"),
    (lambda: traj("bad", protocol="q"), "protocol"),
    (lambda: traj("bad", has_drift=True, drift_subtype="colour"), "drift_subtype"),
    (lambda: traj("bad", turns=[clar("useful")]), "turns[0].user_reply.label"),
    (lambda: traj("bad", turns=[clar("relevant", "L3")]), "turns[0].user_reply.layer"),
    (lambda: traj("bad", turns=[("shout", "interactive", None)]), "turns[0].action_type"),
])
def test_bad_trajectory_names_index_sample_and_field(make, field):
    with pytest.raises(MetricsError) as e:
        aggregate([traj("ok"), make()])
    msg = str(e.value)
    assert "trajectories[1]" in msg and "'bad'" in msg and f"'{field}'" in msg


def test_non_trajectory_input_is_a_typed_error():
    with pytest.raises(MetricsError, match=r"trajectories\[0\].*str"):
        aggregate(["not a trajectory"])
    with pytest.raises(MetricsError, match=r"trajectories\[0\]: not a valid trajectory record"):
        aggregate([{"sample_id": "x"}])


def test_metrics_module_is_pure():
    """rewards never import envs (README "Design rules": data flows one way)."""
    for mod in (M.__file__, Path(M.__file__).with_name("report.py")):
        tree = ast.parse(Path(mod).read_text(encoding="utf-8"))
        names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [n for n in names if "envs" in n.split(".")], names


# ---------------------------------------------------------------------------------------------- report

def test_render_table_shows_n_and_dash():
    ts = [traj(f"a{k}", scores={"ex": float(k < 3)}) for k in range(4)]
    ts += [traj("u", "unanswerable", turns=[fbk()], outcome="feedback", scores={"fb": 1}),
           traj("v", "ambiguous", turns=[clar("relevant"), sql()], scores={"ex": 1})]
    res = aggregate(ts)
    text = render_table(res)
    lines = text.splitlines()
    assert lines[0] == "Aggregated metrics: 6 trajectories (f-protocol: 6, p-protocol: 0)"
    row = next(ln for ln in lines if ln.startswith("answerable "))
    assert "0.750 (n=4)" in row and "—" in row  # EX defined, FB undefined for answerable
    assert "1.000 (n=1)" in next(ln for ln in lines if ln.startswith("unanswerable "))
    header = next(ln for ln in lines if ln.startswith("group"))
    cols = header.split()
    assert cols[:4] == ["group", "N", "EX", "FB"] and "AIR" in cols and "AR" in cols and "DRR" not in cols
    # fixed width: the EX cell of every row starts under the EX header
    ex_at = header.index(" EX ") + 1
    table = lines[lines.index(header) + 2: lines.index(header) + 6]
    assert all(ln[ex_at - 1] == " " and ln[ex_at] in "01—" for ln in table), table
    assert any(ln.startswith("lexical_overlap") for ln in lines)  # subcategory table
    # the ceiling counts close the text, wrapped to the 100-column width
    ceil = next(k for k, ln in enumerate(lines) if ln.startswith("ceilings (trajectories): gold_error=0  gold_empty=0"))
    assert lines[ceil + 1:] and all(ln.startswith("  ") for ln in lines[ceil + 1:]) and "gold_withheld=0" in lines[-1]
    assert max(len(ln) for ln in lines) <= 100


def test_render_table_bad_input():
    res = aggregate([traj("a", scores={"ex": 1})])
    with pytest.raises(MetricsError, match="breakdown 'colour'.*available"):
        render_table(res, breakdowns=("colour",))
    with pytest.raises(MetricsError, match="unknown metric column"):
        render_table(res, columns=("EX", "BLEU"))
    with pytest.raises(MetricsError, match="'overall'"):
        render_table({"by_group": {}})
    text = render_table(res, breakdowns=("difficulty",), columns=("EX", "DEA"))
    assert "difficulty" in text and "1.000 (n=1)" in text


# ------------------------------------------------------------------------------------------- real data

@pytest.mark.realdata
def test_spider_dev_oracle_run_counts_empty_gold(spider_root):
    """An oracle run over Spider dev: every gold that returns rows is a hit; empty gold is a ceiling."""
    from textsql_clarify.sql.sandbox import get_sandbox
    from textsql_clarify.rewards.execution import is_empty_result

    items = json.loads((spider_root / "dev.json").read_text(encoding="utf-8"))
    ts = []
    for k, it in enumerate(items):
        db = it["db_id"]
        gold = get_sandbox(str(spider_root / "database" / db / f"{db}.sqlite")).execute(it["query"])
        status = "empty" if is_empty_result(gold) else "ok"
        ts.append(traj(f"spider-{k}", turns=[sql()], gold_status=status,
                       scores={"ex": None if status == "empty" else 1}))
    res = aggregate(ts)
    # measured on ../shared/data/spider_dev: 99 of 1,034 golds are empty (89 return no rows,
    # 10 a single all-NULL row), matching the data README
    assert res["ceilings"]["gold_empty"] == 99
    assert ov(res, "EX") == (1.0, 1034 - 99)
    assert ov(res, "DEA") == (1.0, 935)
    assert ov(res, "AR") == (0.0, 1034)
