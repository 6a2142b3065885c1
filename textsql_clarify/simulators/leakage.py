"""Leakage guard for simulated-user replies: no SQL, no gold SQL, no unused schema identifiers.

TIDE App. E runs a post-generation validator that screens each user reply for out-of-scope SQL
fragments or schema identifiers and regenerates the offending ones; ABISS §5.2 requires the user's
answer to be natural language only, never the ground-truth SQL text. This module is that validator,
shared by the rule-based user (:mod:`.rule_based`) and the transformers user.

A reply is checked for three kinds of leak, each reported as a reason string:

* ``"sql"``: the reply holds SQL, either a keyword pattern (``SELECT ... FROM``, ``JOIN x ON``,
  ``COUNT(*)``, ``t1.id = ...``, ``WHERE col = ...``) or a chunk that sqlglot parses as a real
  statement (a SELECT with a FROM, a set operation, INSERT, UPDATE ... SET, DELETE ... WHERE, DDL).
* ``"gold"``: the whole gold SQL appears, compared after lower-casing and removing whitespace.
* ``"identifier:<name>"``: a table or column name that neither the question nor the clarification
  used appears in the reply (see :func:`leakage_reasons`).
"""
from __future__ import annotations

import functools

import re
from typing import Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ..errors import SQLParseError
from ..sqlschema import parse_sql
from ..text import plural_stem

__all__ = ["leakage_reasons", "is_full_gold_leak", "identifier_forms", "identifier_used"]

_DIALECT = "sqlite"

#: Case-insensitive patterns that only SQL text matches (natural replies avoid these shapes).
_SQL_PATTERNS = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"\bselect\b[^.?!;]{0,300}?\bfrom\s+[\w\"`\[]",
    r"\binsert\s+into\b",
    r"\bupdate\s+[\w\"`\[]+\s+set\b",
    r"\bdelete\s+from\b",
    r"\b(?:count|sum|avg|min|max)\s*\(\s*(?:\*|distinct\b|[\w.\"`]+\s*\))",
    r"\b(?:group|order)\s+by\s+[\w.\"`]+\s+(?:asc|desc)\b",
    r"\b(?:group|order)\s+by\s+[a-z_]\w*\.[a-z_]\w*",
    r"\bjoin\s+[\w\"`]+(?:\s+(?:as\s+)?\w+)?\s+on\b",
    r"\bwhere\s+[\w.\"`]+\s*(?:=|!=|<>|<=|>=|<|>|\blike\b|\bin\s*\()",
    r"\b[a-z_]\w*\.[a-z_]\w*\s*(?:=|!=|<>|<=|>=|<|>)",
    r"\blimit\s+\d+\s*(?:offset\s+\d+\s*)?;",
))

#: Keywords that may open a SQL statement; a chunk starting with one is handed to sqlglot.
_STATEMENT_START = re.compile(r"\b(?:select|with|insert|update|delete|create|drop|alter)\b", re.IGNORECASE)


def _is_statement(tree: exp.Expression | None) -> bool:
    """True when ``tree`` is a real SQL statement, not a word sqlglot happens to accept."""
    if tree is None:
        return False
    if isinstance(tree, exp.SetOperation):
        return True
    if isinstance(tree, exp.Select):
        return tree.args.get("from_") is not None or tree.args.get("from") is not None
    if isinstance(tree, exp.Insert):
        return True
    if isinstance(tree, exp.Update):
        return bool(tree.args.get("expressions"))
    if isinstance(tree, exp.Delete):
        return tree.args.get("where") is not None
    if isinstance(tree, (exp.Create, exp.Drop, exp.Alter)):
        return tree.args.get("kind") is not None
    return False


def _parses_as_sql(reply: str) -> bool:
    """Try sqlglot on every chunk of ``reply`` that starts with a statement keyword."""
    for m in _STATEMENT_START.finditer(reply):
        chunk = reply[m.start():].strip()
        try:
            trees = sqlglot.parse(chunk, read=_DIALECT)
        except (SqlglotError, RecursionError, ValueError):
            continue
        if trees and _is_statement(trees[0]):
            return True
    return False


def _squash(sql: str) -> str:
    """Lower-case, drop every whitespace character and any trailing semicolons."""
    return re.sub(r"\s+", "", sql.lower()).rstrip(";")


def is_full_gold_leak(reply: str, gold_sql: str | None) -> bool:
    """True when the whole gold SQL appears in ``reply`` (ABISS §5.2: the user never reveals it).

    Comparison ignores case and whitespace (``SELECT  name\\nFROM t`` matches ``select name from t``);
    the sqlglot rendering of the gold is tried too, so a re-spaced or re-quoted copy is caught.

    Args:
        reply: the candidate user reply.
        gold_sql: the gold SQL in force, or ``None`` (unanswerable sample: never a leak).
    Returns:
        ``True`` when the normalised gold (or its sqlglot rendering) is a substring of the reply.
    """
    if not gold_sql or not gold_sql.strip():
        return False
    hay = _squash(reply)
    return any(f and f in hay for f in _gold_forms(gold_sql))


@functools.lru_cache(maxsize=2048)
def _gold_forms(gold_sql: str) -> frozenset[str]:
    """The squashed gold text and its sqlglot rendering; cached (every candidate reply is checked)."""
    forms = {_squash(gold_sql)}
    try:
        forms.add(_squash(parse_sql(gold_sql).sql(dialect=_DIALECT)))
    except SQLParseError:
        pass
    return frozenset(forms)


def _split_words(identifier: str) -> list[str]:
    """``"StuID"`` -> ``["stu", "id"]``; ``"home_city"`` -> ``["home", "city"]`` (lower-case)."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", identifier)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
    return [w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w]


def identifier_forms(identifier: str) -> set[str]:
    """The lower-case surface forms under which a schema identifier counts as printed.

    The raw name, its snake_case form, and its words joined by spaces: ``"StuID"`` gives
    ``{"stuid", "stu_id", "stu id"}``; ``"home_city"`` gives ``{"home_city", "home city"}``.

    Args:
        identifier: a table or column name (any case; may hold spaces or underscores).
    Returns:
        A non-empty set of lower-case strings, unless the identifier has no letters or digits.
    """
    raw = identifier.strip().lower()
    words = _split_words(identifier.strip())
    forms = {raw} if raw else set()
    if words:
        forms.add("_".join(words))
        forms.add(" ".join(words))
    return {f for f in forms if f}


def _form_regex(form: str) -> re.Pattern:
    parts = [re.escape(p) for p in re.split(r"\s+", form) if p]
    return re.compile(r"(?<![0-9a-z_])" + r"\s+".join(parts) + r"(?![0-9a-z_])")


def _stem(word: str) -> str:
    """A light stemmer: plural and a few verb endings (``"names"`` -> ``"name"``)."""
    return plural_stem(word.lower())


def _text_stems(text: str) -> list[str]:
    return [_stem(w) for w in _split_words(text)]


def identifier_used(identifier: str, text: str) -> bool:
    """Whether ``text`` (a question or clarification) already uses ``identifier``.

    Used means: one of :func:`identifier_forms` occurs as a whole word (case-insensitive), or the
    identifier's words occur consecutively in the text up to a plural ending (``"names"`` uses
    ``name``; ``"student ids"`` uses ``student_id``).
    """
    low = text.lower()
    if any(_form_regex(f).search(low) for f in identifier_forms(identifier)):
        return True
    want = [_stem(w) for w in _split_words(identifier)]
    if not want:
        return False
    have = _text_stems(text)
    n = len(want)
    return any(have[i:i + n] == want for i in range(len(have) - n + 1))


def leakage_reasons(reply: str, *, question: str, clarification: str, schema_identifiers: Iterable[str],
                    gold_sql: str | None) -> list[str]:
    """Why a simulated-user reply leaks, or ``[]`` when it is clean (TIDE App. E validator).

    Args:
        reply: the candidate user reply.
        question: the sample's natural-language question (what the user already said).
        clarification: the agent's clarification question being answered.
        schema_identifiers: table and column names of the database (any case). One-character names
            are skipped: they cannot be told apart from ordinary letters.
        gold_sql: the gold SQL in force, or ``None``.
    Returns:
        Reasons in a fixed order, each at most once: ``"sql"``, ``"gold"``, then
        ``"identifier:<name>"`` (lower-case name) for each identifier printed in the reply that neither
        the question nor the clarification used (:func:`identifier_used`), sorted by name. An identifier
        that is a plain word of the question (``name`` when the question says "names") is allowed.
    Raises:
        TypeError: ``reply``, ``question`` or ``clarification`` is not a string.
    """
    for nm, v in (("reply", reply), ("question", question), ("clarification", clarification)):
        if not isinstance(v, str):
            raise TypeError(f"leakage_reasons: {nm} must be a string, got {type(v).__name__}")
    reasons: list[str] = []
    if any(p.search(reply) for p in _SQL_PATTERNS) or _parses_as_sql(reply):
        reasons.append("sql")
    if is_full_gold_leak(reply, gold_sql):
        reasons.append("gold")
    low = reply.lower()
    said = question + "\n" + clarification
    leaked = set()
    for ident in schema_identifiers:
        if not isinstance(ident, str) or len(ident.strip()) < 2:
            continue
        name = ident.strip().lower()
        if name in leaked:
            continue
        if any(_form_regex(f).search(low) for f in identifier_forms(ident)) and not identifier_used(ident, said):
            leaked.add(name)
    reasons.extend(f"identifier:{n}" for n in sorted(leaked))
    return reasons
