"""Reports a researcher reads: ``textsql-clarify report RUN_DIR [RUN_DIR ...]``.

* :mod:`.runs`: load the folders ``textsql-clarify eval --out`` writes (clear errors naming file, line, field).
* :mod:`.leaderboard`: the leaderboard with paired differences, per-category and outcome tables.
* :mod:`.plots`: bar charts with 95 % intervals as inline SVG (matplotlib, the ``report`` extra).
* :mod:`.html`: the self-contained HTML page with its dialogue browser (:mod:`.assets`: its CSS and script).
* :mod:`.export`: the tables alone as Markdown, CSV or JSON.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .export import FORMATS, render_tables, report_tables
from .leaderboard import BREAKDOWNS, DEFAULT_BY
from .runs import ReportError, Run, load_run, load_runs

__all__ = ["BREAKDOWNS", "DEFAULT_BY", "FORMATS", "ReportError", "Run", "load_run", "load_runs", "render_tables",
           "report_tables", "write_report"]


def write_report(run_dirs: Sequence[str | Path], out: str | Path, *, by: Sequence[str] = DEFAULT_BY) -> Path:
    """Load the runs and write the HTML report (:func:`~textsql_clarify.reports.html.render_html`).

    Args:
        run_dirs: run folders, in report order (the first is the paired differences' reference).
        out: the ``.html`` file to write (its folder is created); replaced whole or left as it was
            (:func:`~textsql_clarify.reports.output.replace_text`).
        by: the breakdowns charted and tabled.
    Returns:
        The written path.
    Raises:
        ReportError: a run folder is malformed; ValueError: an unknown breakdown; ImportError: no matplotlib.
    """
    from .html import render_html

    from .output import replace_text

    return replace_text(out, render_html(load_runs(run_dirs), by=by))  # whole or not at all
