"""Run folders of ``eval`` and ``score``: the folder lock covers score's exact-match, default folder names
hold every option that changes the result, a finished run is not overwritten by another configuration, Ctrl-C
ends in one line, and a slow dataset load says what it does."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from textsql_clarify.rollout import run_journal
from textsql_clarify.rollout.run_journal import RunFolderError, exclusive_folder
from textsql_clarify.cli import main

N = 6  # the first six Spider dev samples


def _held_elsewhere(folder: Path) -> bool:
    """Whether some other open file description holds the folder's flock (tried on a new descriptor)."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_score_computes_exact_match_while_it_holds_the_folder_lock(spider_root, tmp_path, monkeypatch):
    from textsql_clarify.baselines import predictions as preds_mod

    dev = json.loads((spider_root / "dev.json").read_text(encoding="utf-8"))[:N]
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": f"spider-dev-{i}", "sql": r["query"]}) + "\n"
                             for i, r in enumerate(dev)), encoding="utf-8")
    out = tmp_path / "run"
    seen = []
    real = preds_mod.add_exact_match

    def watched(metrics, *a, **k):
        seen.append(_held_elsewhere(out))
        return real(metrics, *a, **k)

    monkeypatch.setattr(preds_mod, "add_exact_match", watched)
    assert main(["score", "--dataset", f"spider:{spider_root}", "--limit", str(N), "--predictions", str(preds),
                 "--out", str(out), "--no-progress", "--json"]) == 0
    assert seen == [True]
    assert not _held_elsewhere(out)  # released at the end
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["overall"]["EM"]["value"] == 1.0 and metrics["overall"]["EM"]["n"] == N


def test_the_folder_lock_nests_in_its_thread_and_refuses_another(tmp_path):
    refused = []

    def other():
        try:
            with exclusive_folder(tmp_path):
                refused.append(False)
        except RunFolderError as e:
            refused.append(str(tmp_path) in str(e))

    with exclusive_folder(tmp_path):
        with exclusive_folder(tmp_path):  # the same thread: passes through
            assert _held_elsewhere(tmp_path)
        assert _held_elsewhere(tmp_path)  # the inner exit keeps the outer lock
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert refused == [True]
    assert not _held_elsewhere(tmp_path)


def test_a_failed_command_leaves_no_folder_that_run_folder_made(tmp_path):
    out = tmp_path / "a" / "b"
    with pytest.raises(OSError):
        with run_journal.run_folder(out):
            raise OSError("no space")
    assert not (tmp_path / "a").exists()
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(KeyError):
        with run_journal.run_folder(keep):
            raise KeyError("x")
    assert (keep / "notes.txt").read_text(encoding="utf-8") == "mine"


# ------------------------------------------------------------------ default folder names and finished runs

def _eval_folder(*argv: str) -> Path:
    from textsql_clarify.cli import _parser, default_eval_folder

    return default_eval_folder(_parser().parse_args(["eval", *argv]))


def test_every_option_that_changes_the_result_changes_the_default_eval_folder(spider_root):
    from textsql_clarify.generation.pipeline import SAMPLES

    assert _eval_folder() == Path("runs") / "embedded-oracle-rule"  # the README's folder of the plain command
    variants = [(), ("--limit", "5"), ("--limit", "6"), ("--ex-mode", "suite"), ("--ex-mode", "suite", "--suite-k", "2"),
                ("--preset", "shaped_decision"), ("--seed", "1"), ("--protocol", "p"), ("--max-clarifications", "1"),
                ("--category-mode", "ground_truth"), ("--agent", "random"), ("--simulator", "transformers"),
                ("--dataset", f"spider:{spider_root}"), ("--dataset", f"gen/spider/{SAMPLES}"),
                ("--dataset", f"spider:{spider_root}", "--limit", "5")]
    names = [_eval_folder(*v) for v in variants]
    assert len(set(names)) == len(variants), names
    # a generated corpus named spider and the shared Spider set: one kind, two folders
    gen, shared = _eval_folder("--dataset", f"gen/spider/{SAMPLES}"), _eval_folder("--dataset", f"spider:{spider_root}")
    assert gen.name.startswith("spider-") and shared.name.startswith("spider-") and gen != shared
    # options that only change how the run is played keep the folder
    assert _eval_folder("--num-envs", "4", "--isolation", "process", "--no-progress") == _eval_folder()
    assert all(c.isalnum() or c in "._-" for n in names for c in n.name)


def test_the_default_score_folder_names_limit_suite_and_corpus(spider_root, tmp_path):
    from textsql_clarify.cli import _parser, default_score_folder

    def folder(*argv):
        return default_score_folder(_parser().parse_args(["score", "--predictions", "a/p.jsonl", *argv]))

    from textsql_clarify.sql.variants import DEFAULT_K

    base = ("--dataset", f"spider:{spider_root}")
    plain = folder(*base)
    assert plain.parent == Path("runs") and plain.name.startswith("spider-") and plain.name.endswith("-predictions-p")
    assert folder(*base, "--limit", "5").name == plain.name.replace("-predictions-", "-n5-predictions-")
    assert folder(*base, "--ex-mode", "suite").name == f"{plain.name}-suite{DEFAULT_K}"
    assert folder(*base, "--ex-mode", "suite", "--suite-k", "2").name == f"{plain.name}-suite2"
    generated = folder("--dataset", "gen/spider/samples.jsonl")
    assert generated.name.startswith("spider-") and generated != plain


def test_a_finished_run_is_not_overwritten_by_another_configuration(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--agent", "random", "--limit", "3", "--no-progress"]) == 0
    assert main(["eval", "--agent", "random", "--limit", "4", "--no-progress"]) == 0
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 2  # --limit 3 and --limit 4: two folders, neither overwritten
    for name, n in zip(runs, (3, 4)):
        assert json.loads((tmp_path / "runs" / name / "run.json").read_text(encoding="utf-8"))["n_samples"] == n

    out = tmp_path / "runs" / runs[0]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(["eval", "--agent", "random", "--limit", "3", "--seed", "1", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} holds a finished run of another configuration" in err and "seed: 0 -> 1" in err
    assert "--fresh" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # refused: every file as it was
    # the same configuration may play again (code may have changed), and --fresh replaces another one
    assert main(["eval", "--agent", "random", "--limit", "3", "--no-progress", "--out", str(out)]) == 0
    assert main(["eval", "--agent", "random", "--limit", "3", "--seed", "1", "--no-progress", "--fresh",
                 "--out", str(out)]) == 0
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["seed"] == 1


def test_a_finished_score_run_is_not_overwritten_by_other_predictions(spider_root, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    dev = json.loads((spider_root / "dev.json").read_text(encoding="utf-8"))[:N]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "p.jsonl", tmp_path / "b" / "p.jsonl"  # one stem, so one default folder
    first.write_text("".join(json.dumps({"id": f"spider-dev-{i}", "sql": r["query"]}) + "\n"
                             for i, r in enumerate(dev)), encoding="utf-8")
    second.write_text("".join(json.dumps({"id": f"spider-dev-{i}", "sql": "SELECT 1"}) + "\n"
                              for i in range(N)), encoding="utf-8")
    args = ["score", "--dataset", f"spider:{spider_root}", "--limit", str(N), "--no-progress", "--json"]
    assert main([*args, "--predictions", str(first)]) == 0
    (out,) = (tmp_path / "runs").iterdir()
    metrics = (out / "metrics.json").read_bytes()
    capsys.readouterr()
    assert main([*args, "--predictions", str(second)]) == 2
    err = capsys.readouterr().err
    assert f"{Path('runs') / out.name} holds a finished run" in err and "agent: " in err, err
    assert (out / "metrics.json").read_bytes() == metrics
    assert main([*args, "--predictions", str(second), "--fresh"]) == 0
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["overall"]["EM"]["value"] == 0.0


# ------------------------------------------------------------------ Ctrl-C

SLOW_AGENT = """
import os, time
from textsql_clarify.baselines.agents import OracleAgent

class SlowOracle(OracleAgent):
    def act(self, obs, info):
        time.sleep(float(os.environ.get("SLOW_S", "0")))
        return super().act(obs, info)
"""


def test_ctrl_c_during_eval_prints_one_line_and_the_command_resumes(tmp_path, monkeypatch):
    """A real SIGINT to an eval subprocess: exit status 130, no traceback, one last stderr line that counts the
    journaled episodes and gives the command (without --fresh), and that command resumes exactly those."""
    import shlex
    import signal
    import subprocess
    import sys
    import time

    from textsql_clarify.rollout.run_journal import JOURNAL

    (tmp_path / "slow_agent.py").write_text(SLOW_AGENT, encoding="utf-8")
    out = tmp_path / "run"
    args = ["eval", "--agent", f"{tmp_path / 'slow_agent.py'}:SlowOracle", "--limit", "12", "--no-progress",
            "--fresh", "--out", str(out)]
    env = {**os.environ, "SLOW_S": "0.3", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", "from textsql_clarify.cli import main; raise SystemExit(main())",
                             *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        journal = out / JOURNAL
        while proc.poll() is None and time.monotonic() < deadline and \
                (not journal.exists() or journal.read_bytes().count(b"\n") < 3):
            time.sleep(0.02)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    err = err.decode()
    assert proc.returncode == 130 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    done = journal.read_bytes().count(b"\n") - 1
    assert 2 <= done < 12
    assert last.startswith(f"interrupted: the journal in {out} keeps {done} finished episodes; `"), last
    command = shlex.split(last.split("`")[1])
    assert command[0] == "textsql-clarify" and "--fresh" not in command and command[1:] == \
        [a for a in args if a != "--fresh"]
    monkeypatch.delenv("SLOW_S", raising=False)
    assert main(command[1:]) == 0  # no pause in this process
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["episodes_resumed"] == done
    assert len((out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()) == 12


# ------------------------------------------------------------------ loading feedback

def test_eval_says_on_stderr_what_it_loads_and_how_many_samples_came(tmp_path, monkeypatch, capsys):
    """The dataset load reports through progress.report: on (as on a terminal) it writes a line before and one
    after with the count; --no-progress keeps stderr free of both."""
    from textsql_clarify import progress
    from textsql_clarify.datasets import load_dataset

    monkeypatch.setattr(progress, "progress_enabled", lambda p=None, stream=None: p is not False)
    n = len(load_dataset("embedded", limit=3))
    assert main(["eval", "--agent", "random", "--limit", "3", "--out", str(tmp_path / "a")]) == 0
    lines = capsys.readouterr().err.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("loading dataset embedded and validating its golds"))
    done = next(i for i, x in enumerate(lines) if x.startswith(f"loaded {n} samples of embedded in "))
    assert start < done
    assert main(["eval", "--agent", "random", "--limit", "3", "--no-progress", "--out", str(tmp_path / "b")]) == 0
    assert "loading dataset" not in capsys.readouterr().err


def test_a_finished_run_of_an_edited_dataset_file_under_the_same_spec_is_not_overwritten(tmp_path, monkeypatch,
                                                                                         capsys):
    """run.json records the played samples' digest, so the same spec over an edited file is another configuration."""
    import shutil

    from textsql_clarify.datasets import university

    src = Path(university.__file__).parent / "embedded"
    data = tmp_path / "data"
    shutil.copytree(src, data)
    file = data / "samples.jsonl"
    out = tmp_path / "run"
    args = ["eval", "--agent", "oracle", "--dataset", str(file), "--limit", "3", "--no-progress", "--out", str(out)]
    assert main(args) == 0
    first = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert len(first["samples_sha256"]) == 64
    lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["question"] = rec["question"] + " Please."
    file.write_text(json.dumps(rec) + "\n" + "".join(lines[1:]), encoding="utf-8")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "holds a finished run of another configuration" in err and "samples_sha256" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main([*args, "--fresh"]) == 0
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["samples_sha256"] != first["samples_sha256"]
