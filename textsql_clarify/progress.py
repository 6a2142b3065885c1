"""Status lines that do not break a progress bar (model loading says what it loads).

:func:`announce` writes one line to stderr through ``tqdm.write``, which lifts every active tqdm bar
on that stream, prints the line and redraws the bars below it; with no bar active it is a plain
print to stderr. The model loaders (:func:`textsql_clarify.minilm.load_minilm`,
:func:`textsql_clarify.simulators.hf_models.load_causal_lm`) call it once per model actually loaded,
before the pause, so a run's bar does not look hung while a model loads.
"""
from __future__ import annotations

import sys


def announce(message: str) -> None:
    """Write ``message`` as one stderr line above any running tqdm progress bar.

    Args:
        message: the text, without a trailing newline (e.g. ``"loading the feedback judge's sentence
            encoder (all-MiniLM-L6-v2) on cpu ..."``).
    Nothing is raised for a closed or missing stderr: the line is dropped (a status line must never
    stop the work it describes).
    """
    stream = sys.stderr
    if stream is None:
        return
    try:
        from tqdm import tqdm

        tqdm.write(str(message), file=stream)
    except ImportError:  # pragma: no cover - tqdm is a dependency; print plainly without it
        print(str(message), file=stream, flush=True)
    except (OSError, ValueError):  # a closed stream
        pass
