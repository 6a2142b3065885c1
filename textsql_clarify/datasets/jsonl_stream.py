"""Streaming reader for the JSONL files of source datasets (ABISS's JSONL release, BIRD-Interact's
``mini_interact.jsonl`` and ``<db>_kb.jsonl``): one record a line, read line by line, never whole.

Native sample files have their own reader (:func:`textsql_clarify.samples.load_jsonl`), which validates
each line as a sample; this one only decodes, so that a loader can map a foreign record first.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from ..errors import DatasetError, RecordProblem
from ..text import loads_valid_unicode

__all__ = ["iter_jsonl"]


def iter_jsonl(path: Path, problems: list[RecordProblem], what: str) -> Iterator[tuple[int, Any]]:
    """``(line number, decoded value)`` for each non-blank line of a JSONL file, streamed.

    Lines are split on ``\n`` only and decoded one by one (a UTF-8 byte-order mark before the first line is
    skipped), so a byte that is not UTF-8 is reported with its line; a lone surrogate escape (``\\ud800``) is read as
    U+FFFD (:func:`textsql_clarify.text.loads_valid_unicode`). A line that is not JSON (or nested too
    deeply, or holding an integer too long to convert) is appended to ``problems`` as a
    :class:`~textsql_clarify.errors.RecordProblem` (file, line, field ``<record>``) and not yielded.

    Args:
        path: the ``.jsonl`` file.
        problems: where bad lines are reported (the caller raises once, with all of them).
        what: the file's kind for messages (``"ABISS file"``, ``"mini-interact task file"``).
    Raises:
        DatasetError: the file cannot be opened or read, or a line is not UTF-8.
    """
    try:
        fh = path.open("rb")
    except OSError as e:
        raise DatasetError(f"cannot read {what} {path}: {e}") from e
    with fh:
        for ln, raw_bytes in enumerate(fh, start=1):
            try:
                raw = raw_bytes.decode("utf-8-sig" if ln == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DatasetError(f"cannot read {what} {path}: line {ln} is not UTF-8 "
                                   f"(byte {e.start}: {e.reason})") from None
            if not raw.strip():
                continue
            try:
                yield ln, loads_valid_unicode(raw)  # lone surrogates read as U+FFFD
            except json.JSONDecodeError as e:
                problems.append(RecordProblem(str(path), ln, "<record>", f"invalid JSON: {e.msg} at column {e.colno}"))
            except (RecursionError, ValueError) as e:  # nesting too deep, an integer too long to convert
                problems.append(RecordProblem(str(path), ln, "<record>",
                                              f"invalid JSON: {str(e)[:120] or type(e).__name__}"))
