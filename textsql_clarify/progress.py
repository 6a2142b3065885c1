"""Status lines that do not break a progress bar (model loading says what it loads).

:func:`announce` writes one line to stderr through ``tqdm.write``, which lifts every active tqdm bar
on that stream, prints the line and redraws the bars below it; with no bar active it is a plain
print to stderr. The model loaders (:func:`textsql_clarify.minilm.load_minilm`,
:func:`textsql_clarify.simulators.hf_models.load_causal_lm`) call it once per model actually loaded,
before the pause, so a run's bar does not look hung while a model loads.

:func:`report` is :func:`announce` behind a switch: the long steps (model preparation, database variants, an
LLM agent's lockstep rounds, training steps) take ``progress: bool | None``; ``True`` writes, ``False`` is quiet,
``None`` writes only when stderr is a terminal (:func:`progress_enabled`), so logs and captured output stay
quiet unless asked. :func:`rate` formats a count per second for those lines.

:func:`show_warning` is a ``warnings.showwarning`` that writes each warning as one ``warning: ...`` line through
:func:`announce`; the CLI installs it, so a warning raised while a bar is drawn (a loader's skipped records, the
feedback judge falling back when MiniLM cannot load) prints above the bar instead of inside it.
"""
from __future__ import annotations

import sys
from typing import TextIO


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


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """A ``warnings.showwarning`` replacement: ``warning: <message>`` as one stderr line above any running tqdm
    bar (:func:`announce`), without Python's ``file:line`` prefix; a warning sent to another ``file`` is written
    there as the same line.

    Args:
        message, category, filename, lineno, file, line: as Python's ``warnings.showwarning`` gets them.
    Nothing is raised for a closed stream (the line is dropped, as :func:`announce` does).
    Source: Python docs, ``warnings.showwarning``; tqdm docs, ``tqdm.write``.
    """
    text = f"warning: {message}"
    if file is not None and file is not sys.stderr:
        try:
            file.write(text + "\n")
        except (OSError, ValueError):  # a closed stream
            pass
        return
    announce(text)


def progress_enabled(progress: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether a step's progress lines are written.

    Args:
        progress: ``True`` (always), ``False`` (never: a ``--no-progress`` / ``progress=False`` option), or
            ``None`` (only when ``stream`` is a terminal).
        stream: the stream checked for ``None`` (default ``sys.stderr``); a closed or missing one is no terminal.
    Returns:
        The switch as a bool. Source: Python docs, ``io.IOBase.isatty``.
    """
    if progress is not None:
        return bool(progress)
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, OSError, ValueError):  # no isatty, or a closed stream
        return False


def report(message: str, progress: bool | None = None) -> None:
    """:func:`announce` ``message`` when :func:`progress_enabled` of ``progress`` says so (e.g.
    ``"database variants of university.sqlite: 2/4 built (k=4), 0.8 s"``)."""
    if progress_enabled(progress):
        announce(message)


def rate(count: float, seconds: float, unit: str) -> str:
    """``count`` per second as text (``"83.4 tokens/s"``); ``"- <unit>/s"`` when ``seconds`` is not positive (a
    step too fast for the clock says nothing rather than infinity)."""
    return f"{count / seconds:.1f} {unit}/s" if seconds > 0 else f"- {unit}/s"
