"""``python -m textsql_clarify.integrations.corpus``: loader warnings as ``warning: ...`` lines (as the main CLI
prints them, no ``file:line`` source), and a summary that lists what was left out and why."""
from __future__ import annotations

import warnings

from textsql_clarify.integrations import corpus


def test_an_empty_data_folder_lists_the_absent_sources_as_left_out(tmp_path, capsys):
    assert corpus._main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    left = out[out.index("left out:"):].splitlines()[1:]
    _, skipped = corpus.corpus_specs(tmp_path)
    assert left == [f"  - {m}" for m in skipped]
    assert any(m.startswith("Spider dev skipped:") for m in skipped)
    assert any(m.startswith("mini-interact skipped:") for m in skipped)
    assert out.splitlines()[1].startswith("embedded")  # the packaged set is still loaded


def test_a_loader_warning_prints_as_one_line_and_is_listed(tmp_path, capsys, monkeypatch):
    real = corpus.build_training_corpus
    text = "MMSQL file mmsql/MMSQL_test.json: user turns that are not samples (2 turn(s) skipped):\n  - detail"

    def warns(*a, **k):
        warnings.warn(text, UserWarning)
        return real(*a, **k)

    monkeypatch.setattr(corpus, "build_training_corpus", warns)
    assert corpus._main([str(tmp_path)]) == 0
    cap = capsys.readouterr()
    assert cap.err.startswith(f"warning: {text}\n")
    assert "corpus.py:" not in cap.err and "UserWarning" not in cap.err and "warnings.warn" not in cap.err
    assert cap.out.rstrip().endswith(f"  - {text.splitlines()[0]}")
