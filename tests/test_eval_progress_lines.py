"""``textsql-clarify eval``'s status lines stand on their own lines above the progress bar.

The feedback judge loads its sentence encoder at the first feedback episode, while the bar is drawn; the line
that says so (:func:`textsql_clarify.progress.announce`, ``tqdm.write``) must clear the bar, stand alone and be
followed by the bar drawn again, never appended to the bar's line. The run is the real CLI on the embedded set
(oracle agent); no model is loaded: the loader is replaced by one that fails as a missing model does, so the
judge falls back to the lexical judge with a warning, which must stand on its own line too.
"""
from __future__ import annotations

import io
import sys

from textsql_clarify import minilm
from textsql_clarify.cli import main

LOADING = "loading the feedback judge's sentence encoder (all-MiniLM-L6-v2) on cpu ..."


def _alone(raw: str, line: str) -> None:
    """``line`` occurs once in ``raw``, after a cleared bar (only spaces since the last carriage return) or at
    the start of a line, and is ended by a newline."""
    assert raw.count(line) == 1, raw
    k = raw.index(line)
    before = raw[:k]
    since_newline = before[before.rfind("\n") + 1:]
    assert since_newline.split("\r")[-1] == "", repr(since_newline[-200:])  # nothing left on the line
    assert since_newline.strip(" \r") == "" or "\r" in since_newline, repr(since_newline[-200:])
    assert raw[k + len(line)] == "\n", repr(raw[k:k + len(line) + 40])


def test_the_judge_loading_line_and_its_fallback_warning_stand_above_the_eval_bar(monkeypatch, tmp_path):
    def no_model(device):
        raise OSError("no model files in this test")

    monkeypatch.setattr(minilm, "_LOADED", set())  # as in a fresh process
    monkeypatch.setattr(minilm, "minilm_available", lambda: True)
    monkeypatch.setattr(minilm, "_load", no_model)
    import warnings

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main() installs its own
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["eval", "--dataset", "embedded", "--agent", "oracle", "--out", str(tmp_path / "run")]) == 0
    raw = err.getvalue()
    k = raw.index(LOADING)
    assert "eval oracle:" in raw[:k] and "eval oracle:" in raw[k:]  # loaded while the bar was drawn
    _alone(raw, LOADING)
    warning = ("warning: MiniLM unavailable (no model files in this test); the feedback judge falls back to the "
               "lexical judge")
    _alone(raw, warning)
    assert raw.index(warning) > k
