"""Run folders of ``eval`` and ``score``: the folder lock covers score's exact-match, default folder names
hold every option that changes the result, a finished run is not overwritten by another configuration, Ctrl-C
ends in one line, and a slow dataset load says what it does."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from textsql_clarify.baselines import run_journal
from textsql_clarify.baselines.run_journal import RunFolderError, exclusive_folder
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
