"""Render what the agent sees: schema text, category context, dialogue history and chat messages.

The same content goes into the observation's text fields and into ``info["messages"]`` (a chat list
for LLM agents), so both views always agree (README "Design rules": contracts).
"""
from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import Iterable, Sequence

from ..samples import DialogueTurn, Sample
from ..sql.uri import ro_uri
from ..taxonomy import SUBCATEGORIES, taxonomy_text

CATEGORY_MODES = ("ground_truth", "predicted", "taxonomy_only", "taxonomy_free")

INSTRUCTIONS = (
    "You are a text-to-SQL assistant working on a SQLite database. Each turn, reply with exactly one action:\n"
    "  <sql>one SQLite SELECT query</sql>  to answer (this ends the episode unless the user then changes the request),\n"
    "  <clarify>a question to the user</clarify>  when the request is ambiguous,\n"
    "  <feedback>why the question cannot be answered from this database</feedback>  when it is unanswerable.\n"
    "JSON {\"type\": \"sql\"|\"clarify\"|\"feedback\", \"content\": \"...\"} is accepted too. "
    "Query results are not shown to you."
)
CLASSIFY_INSTRUCTIONS = (
    "First, classify the question: reply <category>NAME</category> with one subcategory name from this list:\n"
)


@functools.lru_cache(maxsize=128)
def _schema_statements(db_path: str, mtime: float) -> tuple[tuple[str, str], ...]:
    con = sqlite3.connect(ro_uri(db_path), uri=True)  # immutable=1 for a WAL file: no -wal/-shm beside it
    try:
        rows = con.execute(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%' "
            "AND sql IS NOT NULL ORDER BY name").fetchall()
    finally:
        con.close()
    from ..sql.schema import unusable_views

    unusable = unusable_views(db_path)  # views SQLite cannot prepare here, each marked under its statement
    return tuple((n, s.strip().rstrip(";") + ";" + (f"\n-- view {n} cannot be queried here: {unusable[n.lower()]}"
                                                    if n.lower() in unusable else "")) for n, s in rows)


def table_names(db_path: str) -> list[str]:
    """All user tables and views of a database, sorted (read-only access)."""
    p = Path(db_path)
    return [n for n, _ in _schema_statements(str(p.resolve()), p.stat().st_mtime)]


def schema_text(db_path: str, tables: Iterable[str] | None = None) -> str:
    """The ``CREATE`` statements of the database, one per table, optionally limited to ``tables``.

    A view SQLite cannot prepare here (:func:`textsql_clarify.sql.schema.unusable_views`: it needs a collation or
    function only the making application defined) is followed by a ``-- view NAME cannot be queried here:
    REASON`` line.

    Args:
        db_path: SQLite file (opened read-only).
        tables: names to show (case-insensitive); ``None`` shows every table.
    """
    p = Path(db_path)
    stmts = _schema_statements(str(p.resolve()), p.stat().st_mtime)
    if tables is not None:
        keep = {t.lower() for t in tables}
        stmts = tuple(s for s in stmts if s[0].lower() in keep)
    return "\n".join(s for _, s in stmts)


def evidence_text(sample: Sample) -> str:
    """Evidence lines (external knowledge shown to the agent), one per line, or ``""``."""
    return "\n".join(f"- {e}" for e in sample.evidence)


def context_text(mode: str, sample: Sample, predicted: str | None = None) -> str:
    """Category information for one of the four ABISS §5.1 usage modes.

    * ``ground_truth``: the true subcategory and its definition; for a sample whose subcategory is unknown
      (``None``, the source does not say), its group and a note that the subcategory is not known.
    * ``predicted``: the agent's own classification-phase label (if valid).
    * ``taxonomy_only``: all 13 definitions, no label.
    * ``taxonomy_free``: only the answerable / ambiguous / unanswerable distinction.

    Raises:
        ValueError: unknown mode.
    """
    if mode == "ground_truth":
        if sample.subcategory is None:
            return (f"Question category: {sample.group} (the subcategory is not known). "
                    f"{_GROUP_HINTS.get(sample.group, '')}").rstrip()
        sc = SUBCATEGORIES[sample.subcategory]
        return f"Question category: {sc.name} ({sc.group}). {sc.definition}"
    if mode == "predicted":
        if predicted in SUBCATEGORIES:
            sc = SUBCATEGORIES[predicted]
            return f"Your predicted category: {sc.name} ({sc.group}). {sc.definition}"
        return f"Your predicted category: {predicted!r} (not a known subcategory)."
    if mode == "taxonomy_only":
        return "Questions fall into these subcategories:\n" + taxonomy_text()
    if mode == "taxonomy_free":
        return ("A question may be answerable (write SQL), ambiguous (ask a clarification first) "
                "or unanswerable (explain why with feedback).")
    raise ValueError(f"unknown category mode {mode!r}; expected one of {list(CATEGORY_MODES)}")


#: what each group asks of the agent, for the ``ground_truth`` context of a sample with no known subcategory.
_GROUP_HINTS = {
    "answerable": "Write the SQL.",
    "ambiguous": "The question can be read in more than one way: ask a clarification first.",
    "unanswerable": "The database cannot answer it: explain why with feedback.",
}


def dialogue_turn_text(turn: DialogueTurn) -> str:
    """What one earlier turn says as a chat message: a user turn's text; a system turn's text, its SQL as
    the assistant's ``<sql>…</sql>`` action, or the text then (on a new line) the SQL when it has both."""
    if turn.role != "system" or turn.sql is None:
        return turn.text
    action = f"<sql>{turn.sql}</sql>"
    return f"{turn.text}\n{action}" if turn.text.strip() else action


def initial_history(sample: Sample) -> list[tuple[str, str]]:
    """The history an episode starts from: the sample's earlier turns (``Sample.dialogue``, MMSQL / CoSQL
    follow-ups), then the first user message (:func:`first_user_message`), as ``(role, text)`` pairs with
    roles ``user`` / ``assistant`` that alternate.

    A system turn becomes an ``assistant`` message (:func:`dialogue_turn_text`). Consecutive turns of the
    same role are joined into one message (blank line between), and when the dialogue ends with a user
    turn, that turn and the question are one user message (earlier text first): chat templates expect
    user and assistant turns to alternate. Without a dialogue this is ``[("user", first_user_message)]``.
    """
    out: list[tuple[str, str]] = []
    items = [("assistant" if t.role == "system" else "user", dialogue_turn_text(t)) for t in sample.dialogue]
    items.append(("user", first_user_message(sample)))
    for role, text in items:
        if out and out[-1][0] == role:
            out[-1] = (role, out[-1][1] + "\n\n" + text)
        else:
            out.append((role, text))
    return out


def history_text(history: Sequence[tuple[str, str]]) -> str:
    """The dialogue as ``role: text`` lines; roles ``user`` / ``assistant`` / ``system``."""
    return "\n".join(f"{role}: {text}" for role, text in history)


def system_message(schema: str, context: str, classification: bool) -> str:
    """The system prompt of ``info["messages"]``: instructions, category context and schema."""
    parts = [INSTRUCTIONS]
    if classification:
        parts.append(CLASSIFY_INSTRUCTIONS + ", ".join(SUBCATEGORIES))
    if context:
        parts.append(context)
    parts.append("Database schema:\n" + schema)
    return "\n\n".join(parts)


def first_user_message(sample: Sample) -> str:
    """The first user message: the question, plus evidence where there is some."""
    ev = evidence_text(sample)
    return sample.question + (f"\n\nEvidence:\n{ev}" if ev else "")
