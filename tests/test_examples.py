"""The runnable examples in examples/ run and print what they claim."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_grpo_reward_scores_a_group_on_chosen_samples():
    mod = _load("grpo_reward")
    reward = mod.EnvReward(num_envs=3)
    done = "<sql>SELECT s.name FROM students s</sql>"
    # 5 completions over 3 sub-envs: a full chunk and a padded one; sample order as given
    ids = ["uni-ans-001", "uni-missrel-001", "uni-ans-001", "uni-missrel-001", "uni-ans-001"]
    env = reward.envs.unwrapped.envs[0]
    gold = env.samples[env.sample_index("uni-ans-001")].gold_sql
    completions = [f"<sql>{gold}</sql>", "<feedback>x</feedback>", done,
                   [{"role": "assistant", "content": "<sql>SELECT 1</sql>"}],
                   [{"role": "assistant", "content": f"<sql>{gold}</sql>"}]]
    scores = reward([None] * 5, completions, sample_id=ids)
    assert scores[0] == 1.0 and scores[2] == 0.0 and scores[3] == 0.0 and scores[4] == 1.0
    with pytest.raises(ValueError, match="5 completions but 4 sample ids"):
        reward([None] * 5, completions, sample_id=ids[:4])
    with pytest.raises(TypeError, match="string or a list of chat messages"):
        mod.completion_text(42)


def test_grpo_reward_demo_prints_its_table():
    r = subprocess.run([sys.executable, str(EXAMPLES / "grpo_reward.py")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["uni-ans-001", "1.00", "0.00", "0.00", "0.00"]
    assert lines[3].split() == ["uni-missrel-001", "0.00", "0.00", "0.00", "1.00"]
    assert lines[-1] == "respond calls: 2, clarifications answered: 3"


def test_custom_agent_example_runs():
    r = subprocess.run([sys.executable, str(EXAMPLES / "custom_agent.py")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "EX" in r.stdout
