"""examples/train_grpo.py: its helpers on fixed inputs, and its ``--smoke`` run end to end (``model``):
base eval, 2 SFT steps, 2 GRPO steps in the env, the held-out tables with n, the JSON log and the PNG."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_grpo.py"


def _load():
    spec = importlib.util.spec_from_file_location("train_grpo", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _s(sid, group, source):
    return SimpleNamespace(id=sid, group=group, provenance={"source": source})


def test_stratified_pick_balances_sources_and_prefers_short_prompts():
    mod = _load()
    samples = ([_s(f"sp-{i}", "answerable", "spider") for i in range(10)]
               + [_s(f"em-{i}", "answerable", "embedded") for i in range(3)]
               + [_s(f"amb-{i}", "ambiguous", "embedded") for i in range(5)])
    ids = [s.id for s in samples]
    length = {s.id: 100 + k for k, s in enumerate(samples)}
    length["sp-7"] = 1  # the shortest prompt of all
    picked = mod.stratified_pick(samples, ids, 4, seed=0, key=lambda s: length[s.id])
    # round-robin over sources, starting at the source with the shortest prompt, shortest first in each
    assert picked[:4] == ["sp-7", "em-0", "sp-0", "em-1"]
    assert picked[4:] == ["amb-0", "amb-1", "amb-2", "amb-3"]
    # without a key: a seeded shuffle, the same on every call, still two per source
    a = mod.stratified_pick(samples, ids, 4, seed=3)
    assert a == mod.stratified_pick(samples, ids, 4, seed=3)
    assert sum(x.startswith("sp-") for x in a[:4]) == 2 and sum(x.startswith("em-") for x in a[:4]) == 2
    # a filter drops samples; a cap above the candidates keeps them all
    only = mod.stratified_pick(samples, ids[:3], 9, seed=0, filter_fn=lambda s: s.id != "sp-1")
    assert sorted(only) == ["sp-0", "sp-2"]


def test_dataset_specs_skip_absent_sets_with_a_message(tmp_path):
    mod = _load()
    specs, skipped = mod.dataset_specs(tmp_path / "nowhere")
    assert specs == ["embedded"]
    assert len(skipped) == 2 and "Spider dev skipped" in skipped[0] and "dev.json" in skipped[0]
    root = tmp_path / "data" / "spider_dev"
    (root / "database").mkdir(parents=True)
    (root / "dev.json").write_text("[]")
    specs, skipped = mod.dataset_specs(tmp_path / "data")
    assert specs == ["embedded", f"spider:{root}"]
    assert skipped and "Spider-unanswerable skipped" in skipped[0]


def test_rollout_step_stats_read_the_rollout_components():
    mod = _load()
    out = {  # four episodes: an ambiguous one that asked, one malformed action, two SQL answers
        "rollout_sample_id": ["a1", "a1", "q1", "q1"],
        "reward_components": [{"turn_penalty": -1.0, "format": 0.0}, {"turn_penalty": 0.0, "format": -1.0},
                              {"turn_penalty": 0.0, "format": 0.0}, {"turn_penalty": 0.0, "format": 0.0}],
        "num_turns": [2, 2, 1, 1], "episode_reward": [1.0, 0.0, 1.0, 0.0],
        "episode_scores": [{"ex": 1.0, "fb": None}, None, {"ex": 1.0}, {"ex": 0.0}],
        "finished": [True, False, True, True], "outcome": ["sql", "unfinished", "sql", "sql"],
        "completion_ids": [[1] * 10, [1] * 4, [1] * 6, [1] * 6], "prompt_ids": [[0] * 50] * 4,
    }
    row = mod.rollout_step_stats(out, {"a1": "ambiguous", "q1": "answerable"})
    assert row["reward"] == {"value": 0.5, "n": 4}
    assert row["format_valid_rate"] == {"value": 1 - 1 / 6, "n": 6}
    assert row["AR_ambiguous"] == {"value": 0.5, "n": 2}
    assert row["AR_answerable"] == {"value": 0.0, "n": 2}
    assert row["AR_unanswerable"] == {"value": None, "n": 0}
    assert row["EX"] == {"value": 2 / 3, "n": 3}
    assert row["FB"] == {"value": None, "n": 0}
    assert row["finished"]["value"] == 0.75


@pytest.mark.model
def test_smoke_run_writes_log_tables_and_curve(tmp_path):
    pytest.importorskip("trl", reason="the training run needs TRL (extra trl)")
    pytest.importorskip("matplotlib", reason="the learning curve needs matplotlib")
    mod = _load()
    run = mod.main(["--smoke", "--out", str(tmp_path)])
    log = json.loads((tmp_path / "train_log.json").read_text())
    assert log["config"]["smoke"] is True
    # the split: disjoint, every sample once; evaluation only on held-out ids, training only on train ids
    train, held = set(log["split"]["train_ids"]), set(log["split"]["heldout_ids"])
    assert not train & held and len(train) + len(held) == log["data"]["n_samples"]
    assert set(log["eval_ids"]) <= held and set(log["sft_ids"]) | set(log["grpo_ids"]) <= train
    assert len(log["eval_ids"]) == 3  # one per group
    # 2 SFT steps with a finite loss, 2 GRPO steps with a finite mean reward over their 2 episodes
    assert [s["step"] for s in log["sft"]["steps"]] == [1, 2]
    assert all(math.isfinite(s["loss"]) and s["loss"] > 0 for s in log["sft"]["steps"])
    steps = log["grpo"]["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        assert s["reward"]["n"] == 2 and math.isfinite(s["reward"]["value"])
        assert 0.0 <= s["format_valid_rate"]["value"] <= 1.0 and s["format_valid_rate"]["n"] >= 2
        assert s["completion_tokens"]["max"] <= 24  # the smoke run's max_completion_length
    # before / after tables, each metric with its n
    assert list(log["tables"]) == ["base", "SFT", "SFT+GRPO"]
    for row in log["tables"].values():
        assert row["n_episodes"] == 3 and row["reward"]["n"] == 3
        assert row["AR_ambiguous"]["n"] == 1 and row["AR_answerable"]["n"] == 1
        assert row["format_valid_rate"]["n"] >= 3  # n = actions
        assert all(set(row[k]) == {"value", "n"} for k in ("EX", "FB", "abstained"))
        assert math.isfinite(row["reward"]["value"])
    assert run["tables"].keys() == log["tables"].keys()
    png = (tmp_path / "learning_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "| SFT+GRPO |" in mod.format_table(log["tables"])


def test_per_group_caps_and_reward_presets_parse_or_fail_clearly():
    import argparse

    mod = _load()
    assert mod.parse_per_group("5") == 5
    assert mod.parse_per_group("answerable=6,ambiguous=3") == {"answerable": 6, "ambiguous": 3, "unanswerable": 0}
    for bad in ("-1", "answerable=x", "easy=3"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected N or answerable=N"):
            mod.parse_per_group(bad)
    assert mod.parse_preset("binary") == "binary"
    assert mod.parse_preset('{"sql_partial": 1, "format": 0.1}') == {"sql_partial": 1, "format": 0.1}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown reward component 'bogus'"):
        mod.parse_preset('{"bogus": 1}')
    with pytest.raises(argparse.ArgumentTypeError, match="not valid JSON"):
        mod.parse_preset("{sql_partial: 1}")
    args = mod.build_parser().parse_args(["--sft-per-group", "ambiguous=2", "--smoke"])
    assert args.sft_per_group == {"answerable": 0, "ambiguous": 2, "unanswerable": 0}
    assert mod.apply_smoke(args).sft_per_group == 1 and args.grpo_steps == 2
