"""eval run folders are atomic and resumable: a SIGKILLed eval continues from its journal and writes the same
bytes as an uninterrupted run; a write that fails half-way leaves the earlier run's files whole; a journal of
another configuration is refused."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from textsql_clarify.rollout import run_journal
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.rollout.run_journal import JOURNAL, RunFolderError
from textsql_clarify.cli import main
from textsql_clarify.datasets import load_dataset

COMPARED = ("trajectories.jsonl", "metrics.json")
REPO = Path(__file__).resolve().parents[1]

#: a scripted agent: the oracle, pausing SLOW_S seconds before each action, so a test can kill it mid-run
#: (the pause is read from the environment, so it is no part of the run's configuration)
SLOW_AGENT = textwrap.dedent('''
    import os, time
    from textsql_clarify.baselines.agents import OracleAgent

    class SlowOracle(OracleAgent):
        def act(self, obs, info):
            time.sleep(float(os.environ.get("SLOW_S", "0")))
            return super().act(obs, info)
''')


def _files(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in COMPARED}


def _journal_episodes(path: Path) -> int:
    """Complete episode lines of a journal (its header not counted)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return max(0, data.count(b"\n") - 1)


@pytest.fixture
def slow_agent(tmp_path) -> str:
    file = tmp_path / "slow_agent.py"
    file.write_text(SLOW_AGENT, encoding="utf-8")
    return f"{file}:SlowOracle"


def test_a_sigkilled_eval_resumes_to_the_bytes_of_an_uninterrupted_run(tmp_path, slow_agent):
    killed = tmp_path / "killed"
    args = ["eval", "--agent", slow_agent, "--limit", "16", "--no-progress"]
    env = {**os.environ, "SLOW_S": "0.3", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", "from textsql_clarify.cli import main; raise SystemExit(main())",
                             *args, "--out", str(killed)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while _journal_episodes(killed / JOURNAL) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read().decode()  # still running, with an episode journaled
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    done_before = _journal_episodes(killed / JOURNAL)
    assert 1 <= done_before < 16
    assert not (killed / "trajectories.jsonl").exists()  # nothing final is written before the run ends

    assert main([*args, "--out", str(killed)]) == 0  # the default: the journal of the same configuration
    info = json.loads((killed / "run.json").read_text(encoding="utf-8"))
    assert info["episodes_resumed"] == done_before
    assert not (killed / JOURNAL).exists()  # a finished run removes its journal

    whole = tmp_path / "whole"
    assert main([*args, "--out", str(whole)]) == 0
    assert json.loads((whole / "run.json").read_text(encoding="utf-8"))["episodes_resumed"] == 0
    assert _files(killed) == _files(whole)
    assert len((whole / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()) == 16


def test_a_write_that_fails_half_way_leaves_the_earlier_run_whole(tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert main(["eval", "--agent", "random", "--limit", "8", "--no-progress", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def half_then_fail(fh, data):
        fh.write(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_journal, "_write_all", half_then_fail)
    args = ["eval", "--agent", "no-clarify", "--limit", "8", "--no-progress", "--out", str(out)]
    assert main([*args, "--fresh"]) == 2  # the OSError, reported (--fresh: another agent may replace the run)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.name != JOURNAL}
    assert after == before  # every old file byte for byte, and no temporary file left
    assert _journal_episodes(out / JOURNAL) == 8  # the played episodes are kept

    monkeypatch.undo()
    assert main(args) == 0  # writes the files from the journal, playing nothing again
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["episodes_resumed"] == 8
    fresh = tmp_path / "fresh"
    assert main([*args[:-1], str(fresh)]) == 0
    assert _files(out) == _files(fresh)


def test_a_journal_of_another_configuration_is_refused_and_fresh_starts_over(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    monkeypatch.setattr(run_journal, "replace_files", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    assert main(["eval", "--agent", "random", "--limit", "4", "--no-progress", "--out", str(out)]) == 2
    monkeypatch.undo()
    journal = (out / JOURNAL).read_bytes()
    capsys.readouterr()
    assert main(["eval", "--agent", "random", "--seed", "1", "--limit", "4", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another configuration" in err and "seed: 0 -> 1" in err and "--fresh" in err
    assert (out / JOURNAL).read_bytes() == journal  # refused: the journal untouched

    assert main(["eval", "--agent", "random", "--seed", "1", "--limit", "4", "--no-progress", "--fresh",
                 "--out", str(out)]) == 0
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["episodes_resumed"] == 0
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["seed"] == 1


def test_resume_without_a_journal_is_refused(tmp_path, capsys):
    assert main(["eval", "--limit", "2", "--no-progress", "--resume", "--out", str(tmp_path / "run")]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # the refused run leaves no folder behind


def test_resume_of_a_finished_run_says_it_finished(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["eval", "--limit", "2", "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", "--limit", "2", "--no-progress", "--resume", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "nothing to resume" in err and "its run finished" in err and "start the run" not in err


def test_lockstep_resume_from_a_cut_journal_matches_a_sequential_run(tmp_path):
    samples = load_dataset("embedded", limit=10)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    evaluate(samples, "random", seed=2, out_dir=whole, progress=False, num_envs=3)
    # a journal of the same configuration holding episodes 0..3 and half of episode 4's line, as a kill leaves it
    monkey = pytest.MonkeyPatch()
    monkey.setattr(run_journal, "replace_files", lambda *a, **k: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError):
        evaluate(samples, "random", seed=2, out_dir=cut, progress=False, num_envs=3)
    monkey.undo()
    lines = (cut / JOURNAL).read_bytes().splitlines(keepends=True)
    assert len(lines) == 11
    (cut / JOURNAL).write_bytes(b"".join(lines[:5]) + lines[5][: len(lines[5]) // 2])
    trajs, metrics = evaluate(samples, "random", seed=2, out_dir=cut, progress=False, num_envs=3)
    assert json.loads((cut / "run.json").read_text(encoding="utf-8"))["episodes_resumed"] == 4
    assert _files(cut) == _files(whole)
    assert [t.sample_id for t in trajs] == [s.id for s in samples]


def test_timings_live_in_timings_jsonl_not_in_the_compared_files(tmp_path):
    samples = load_dataset("embedded", limit=6)
    trajs, _ = evaluate(samples, "oracle", out_dir=tmp_path, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()]
    timings = [json.loads(x) for x in (tmp_path / "timings.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["sample_id"] for r in rows] == [t["sample_id"] for t in timings] == [s.id for s in samples]
    for row, timing, traj in zip(rows, timings, trajs):
        sql = [t for t in row["turns"] if t["execution"] is not None]
        assert all("elapsed_s" not in t["execution"] for t in sql)
        assert [t["index"] for t in timing["turns"]] == [t["index"] for t in sql]
        # the returned trajectories keep the timing that timings.jsonl holds
        live = {t.index: t.execution["elapsed_s"] for t in traj.turns if t.execution is not None}
        assert {t["index"]: t["elapsed_s"] for t in timing["turns"]} == live
    assert "elapsed_s" not in (tmp_path / "metrics.json").read_text(encoding="utf-8")


def test_run_files_get_the_umask_mode_and_a_fresh_journal_never_writes_through_a_link(tmp_path):
    out = tmp_path / "run"
    old = os.umask(0o022)
    try:
        assert main(["eval", "--agent", "random", "--limit", "2", "--no-progress", "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()} == \
        dict.fromkeys(("trajectories.jsonl", "metrics.json", "timings.jsonl", "run.json"), 0o644)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / JOURNAL).symlink_to(victim)
    assert main(["eval", "--agent", "random", "--limit", "2", "--no-progress", "--fresh", "--out", str(out)]) == 0
    assert victim.read_text() == "keep me"


# ------------------------------------------------------------------ journal lines are checked, not trusted

def _unfinished(tmp_path: Path, monkeypatch, limit: int = 5) -> tuple[Path, list[str]]:
    """A run folder whose eval played ``limit`` random-agent episodes on the embedded set and failed at its
    final write: the journal holds them all. Returns the folder and the eval arguments that resume it."""
    out = tmp_path / "run"
    args = ["eval", "--agent", "random", "--limit", str(limit), "--no-progress", "--out", str(out)]
    with monkeypatch.context() as m:
        m.setattr(run_journal, "replace_files", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
        assert main(args) == 2
    assert _journal_episodes(out / JOURNAL) == limit
    return out, args


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="ascii").splitlines()]


def _write_lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=True) + "\n" for r in rows), encoding="ascii")


def _resealed(row: dict, fingerprint: str) -> dict:
    """``row`` with its digest recomputed (a line whose digest matches, so only the field checks can refuse it)."""
    return {**row, "digest": run_journal.line_digest(row, fingerprint)}


def test_every_journal_line_carries_the_digest_of_its_record_and_the_fingerprint(tmp_path, monkeypatch):
    out, _ = _unfinished(tmp_path, monkeypatch, limit=3)
    header, *episodes = _lines(out / JOURNAL)
    fingerprint = header["header"]["fingerprint"]
    assert fingerprint == run_journal.config_fingerprint(header["header"]["config"])
    ids = [s.id for s in load_dataset("embedded", limit=3)]
    assert [e["index"] for e in episodes] == [0, 1, 2] and [e["sample_id"] for e in episodes] == ids
    for e in episodes:
        body = {k: e[k] for k in ("index", "sample_id", "trajectory")}
        canonical = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        import hashlib
        assert e["digest"] == hashlib.sha256(canonical + b"\n" + fingerprint.encode("ascii")).hexdigest()
        assert run_journal.line_digest(e, "0" * 64) != e["digest"]  # bound to this run's fingerprint


def test_an_edited_reward_in_the_journal_is_refused_naming_the_file_and_line(tmp_path, monkeypatch, capsys):
    out, args = _unfinished(tmp_path, monkeypatch)
    rows = _lines(out / JOURNAL)
    turn = rows[3]["trajectory"]["turns"][-1]
    assert turn["reward"] != 1.0
    turn["reward"] = 1.0  # a hand edit of episode 2's reward, on line 4
    _write_lines(out / JOURNAL, rows)
    edited = (out / JOURNAL).read_bytes()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{out / JOURNAL}: line 4: field 'digest'" in err and "--fresh" in err, err
    assert (out / JOURNAL).read_bytes() == edited and not (out / "metrics.json").exists()  # refused, untouched
    assert main([*args, "--fresh"]) == 0  # the way out: every episode played again
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["episodes_resumed"] == 0


@pytest.mark.parametrize("edit, line, field", [
    ("duplicate", 4, "index"),        # episode 1's line again, after episode 2
    ("out_of_range", 3, "index"),     # episode 1 renumbered 5 in a run of 5 episodes
    ("other_sample", 2, "sample_id"),  # episode 0 naming the sample at index 1
    ("inner_sample", 3, "trajectory.sample_id"),  # episode 1's trajectory of another sample
])
def test_a_journal_line_of_no_episode_of_this_run_is_refused_with_its_field(tmp_path, monkeypatch, capsys,
                                                                            edit, line, field):
    out, args = _unfinished(tmp_path, monkeypatch)
    header, *episodes = _lines(out / JOURNAL)
    fp = header["header"]["fingerprint"]
    ids = [s.id for s in load_dataset("embedded", limit=5)]
    if edit == "duplicate":
        episodes = episodes[:2] + [episodes[1]] + episodes[2:]
    elif edit == "out_of_range":
        episodes[1] = _resealed({**episodes[1], "index": 5}, fp)
    elif edit == "other_sample":
        episodes[0] = _resealed({**episodes[0], "sample_id": ids[1]}, fp)
    else:
        episodes[1] = _resealed({**episodes[1], "trajectory": {**episodes[1]["trajectory"], "sample_id": ids[2]}}, fp)
    _write_lines(out / JOURNAL, [header, *episodes])
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{out / JOURNAL}: line {line}: field {field!r}" in err and "--fresh" in err, err
    assert not (out / "trajectories.jsonl").exists()


def test_a_cut_last_line_is_still_dropped_and_played_again(tmp_path, monkeypatch):
    out, args = _unfinished(tmp_path, monkeypatch)
    data = (out / JOURNAL).read_bytes()
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[1]
    (out / JOURNAL).write_bytes(data[: len(data) - len(last) // 2 - 1])  # half of episode 4's line, no newline
    assert main(args) == 0
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["episodes_resumed"] == 4
    whole = tmp_path / "whole"
    assert main([*args[:-1], str(whole)]) == 0
    assert _files(out) == _files(whole)


def test_source_digest_follows_the_package_code(tmp_path):
    """The digest reads every .py file under the package by its relative path: a copy has the same digest,
    one changed byte or a renamed file another; files other than .py do not count."""
    import shutil

    package = Path(run_journal.__file__).resolve().parents[1]
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert run_journal.source_digest(copy) == run_journal.source_digest(package) == run_journal.source_digest()
    (copy / "notes.txt").write_text("not code", encoding="utf-8")
    assert run_journal.source_digest.__wrapped__(copy) == run_journal.source_digest(package)
    cli = copy / "cli.py"
    cli.write_bytes(cli.read_bytes() + b"# changed\n")
    assert run_journal.source_digest.__wrapped__(copy) != run_journal.source_digest(package)
    cli.rename(copy / "cli2.py")
    changed = run_journal.source_digest.__wrapped__(copy)
    (copy / "cli2.py").write_bytes((copy / "cli2.py").read_bytes()[: -len(b"# changed\n")])
    assert run_journal.source_digest.__wrapped__(copy) not in (changed, run_journal.source_digest(package))


def test_a_journal_written_by_other_code_is_refused_with_a_pointer_to_fresh(tmp_path, monkeypatch, capsys):
    import shutil

    out, args = _unfinished(tmp_path, monkeypatch)
    journal = (out / JOURNAL).read_bytes()
    copy = tmp_path / "pkg"  # the package as the next run sees it, after an edit of one module
    shutil.copytree(Path(run_journal.__file__).resolve().parents[1], copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    rewards = copy / "rewards" / "presets.py"
    rewards.write_text(rewards.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    read = run_journal.source_digest.__wrapped__  # uncached: the copy is read as the edited tree it is
    monkeypatch.setattr(run_journal, "source_digest", lambda root=copy: read(root))
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "source changed" in err and "--fresh" in err and str(out) in err, err
    assert (out / JOURNAL).read_bytes() == journal
    assert main([*args, "--fresh"]) == 0
