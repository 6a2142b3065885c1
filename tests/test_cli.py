"""The ``textsql-clarify`` command: the main job and its real-data run."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from textsql_clarify.cli import main


def test_eval_with_no_options_runs_oracle_on_embedded(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "agent=oracle" in out and "episodes=48" in out
    assert "1.000 (n=36)" in out  # EX over the 36 solvable embedded samples
    metrics = json.loads((tmp_path / "runs" / "embedded-oracle-rule" / "metrics.json").read_text())
    assert metrics["overall"]["EX"] == {"value": 1.0, "n": 36}
    assert metrics["overall"]["FB"] == {"value": 1.0, "n": 12}
    lines = (tmp_path / "runs" / "embedded-oracle-rule" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 48


def test_eval_oracle_on_spider_dev_first_200(spider_root, tmp_path, capsys):
    rc = main(["eval", "--dataset", f"spider:{spider_root}", "--agent", "oracle", "--limit", "200",
               "--out", str(tmp_path), "--no-progress", "--json"])
    assert rc == 0
    metrics = json.loads(capsys.readouterr().out)
    ex = metrics["overall"]["EX"]
    assert ex["value"] == 1.0
    empty = metrics["ceilings"]["gold_empty"]
    assert ex["n"] + empty == 200 and ex["n"] > 150


def test_no_clarify_scores_below_oracle(tmp_path, capsys):
    assert main(["eval", "--agent", "no-clarify", "--out", str(tmp_path), "--no-progress", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["by_group"]["ambiguous"]["metrics"]["EX"]["value"] < 1.0


def test_num_envs_gives_the_same_metrics(tmp_path, capsys):
    assert main(["eval", "--agent", "no-clarify", "--num-envs", "6", "--out", str(tmp_path), "--no-progress",
                 "--json"]) == 0
    par = json.loads(capsys.readouterr().out)
    assert main(["eval", "--agent", "no-clarify", "--out", str(tmp_path / "seq"), "--no-progress", "--json"]) == 0
    seq = json.loads(capsys.readouterr().out)
    assert par["overall"] == seq["overall"] and par["overall"]["EX"]["n"] == 36
    with pytest.raises(SystemExit, match="--num-envs must be >= 1"):
        main(["eval", "--num-envs", "0", "--out", str(tmp_path), "--no-progress"])


@pytest.mark.parametrize("args, message", [
    (["eval", "--dataset", "nosuchkind:x"], "error:"),
    (["eval", "--dataset", "missing.jsonl"], "not found"),
    (["eval", "--dataset", "spider:/nonexistent/root"], "error:"),
])
def test_bad_dataset_gives_clear_error(args, message, tmp_path, capsys):
    assert main(args + ["--out", str(tmp_path), "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_console_script_entry_point_is_installed(tmp_path):
    r = subprocess.run([sys.executable, "-m", "textsql_clarify.cli", "eval", "--limit", "3", "--no-progress",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "episodes=3" in r.stdout
