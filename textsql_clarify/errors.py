"""Typed errors raised by textsql_clarify.

Every error that concerns user input names where the problem is: the file, the record (line) and the
field, so that a bad dataset or action can be fixed without guessing.
"""
from __future__ import annotations

from dataclasses import dataclass


class TextSQLClarifyError(Exception):
    """Base class of every error this package raises on purpose."""


@dataclass(frozen=True)
class RecordProblem:
    """One problem in one record of a dataset file.

    Attributes:
        file: path of the file, as given by the caller.
        line: 1-based line number in a JSONL file, or record index + 1 for JSON arrays.
        field: dotted field name (``"drift.subtype"``), or ``"<record>"`` for the whole record.
        message: what is wrong.
    """

    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: field '{self.field}': {self.message}"


class DatasetError(TextSQLClarifyError):
    """A dataset file, path or record is invalid.

    ``problems`` lists every bad record found, not only the first.
    """

    def __init__(self, message: str, problems: list[RecordProblem] | None = None):
        self.problems = list(problems or [])
        if self.problems:
            shown = "\n".join(f"  - {p}" for p in self.problems[:50])
            more = "" if len(self.problems) <= 50 else f"\n  ... and {len(self.problems) - 50} more"
            message = f"{message} ({len(self.problems)} problem(s)):\n{shown}{more}"
        super().__init__(message)


class SQLParseError(TextSQLClarifyError):
    """sqlglot could not parse or analyse a query (typed, so callers can count them)."""

    def __init__(self, sql: str, reason: str):
        self.sql = sql
        self.reason = reason
        super().__init__(f"cannot analyse SQL ({reason}): {sql[:200]!r}")


class ActionError(TextSQLClarifyError):
    """An agent action string could not be parsed; ``reason`` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class SkippedRecordsWarning(UserWarning):
    """Source records that a loader did not make into samples, by design (e.g. AmbiQT items or mini-interact
    tasks whose database is absent, MMSQL turns that break their type's pattern). The message says how many
    and why; the loader's own report object holds the full list."""

