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
* ``"identifier:<name>"``: a table or column name that the user has not licensed appears in the reply
  (see :func:`leakage_reasons`).
* ``"value:<v>"``: a literal that the gold query compares (``WHERE city = 'Bologna'``) appears in the
  reply and was not licensed either.

**What licenses a name** (a clarification cannot milk the user; the red-team contract,
``docs/rewards.md``): the question and the hidden knowledge always do (the user knows both). The agent's
clarification does too, but only when it names at most :data:`LICENSE_LIMIT` (one) schema identifier
that the question and the hidden knowledge do not already contain (:func:`named_identifiers`): a
clarification that lists candidates licenses none of them, so no reply can confirm which of the listed
names the gold uses. A clarification that names more than :data:`PROBE_LIMIT` (two) such identifiers is
an **identifier probe** (:func:`is_identifier_probe`, e.g. "which of these columns: a, b, c, d?"); the
simulated users label it ``irrelevant`` and refuse it.

:func:`gold_leaks` is the leak *measure* used by ``scripts/measure_simulators.py``: the gold output
columns, tables and condition values a reply names that neither the question nor the hidden knowledge
contains (the clarification never excuses a leak there).
"""
from __future__ import annotations

import functools

import logging
import re
from typing import Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ..errors import SQLParseError
from ..sql.schema import parse_sql
from ..text import plural_stem

__all__ = ["leakage_reasons", "is_full_gold_leak", "identifier_forms", "identifier_used", "gold_exposure", "gold_leaks",
           "named_identifiers", "is_identifier_probe", "LICENSE_LIMIT", "PROBE_LIMIT"]

_DIALECT = "sqlite"

#: Most schema identifiers (beyond those of the question and the hidden knowledge) that a clarification
#: may name and still license them in the reply: one ("should I show their age too?"). A clarification
#: that names two may still be a fair question ("the first and the last name?"), but its reply names
#: neither: otherwise "which of these: a, b?" over a two-column table tells which one the gold uses.
LICENSE_LIMIT = 1
#: Most such identifiers a clarification may name and still be answered at all: two covers the
#: legitimate choices ("the personal or the institutional email?"); three or more is an enumeration,
#: an identifier probe, which the simulated users refuse.
PROBE_LIMIT = 2

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
    """Try sqlglot on every chunk of ``reply`` that starts with a statement keyword. The reply is prose; a
    chunk sqlglot falls back to parsing as a ``Command`` ("drop-box ...") is expected here, so sqlglot's
    warning about it is held back for the probe (its logger is set to ERROR, then restored)."""
    log = logging.getLogger("sqlglot")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        for m in _STATEMENT_START.finditer(reply):
            chunk = reply[m.start():].strip()
            try:
                trees = sqlglot.parse(chunk, read=_DIALECT)
            except (SqlglotError, RecursionError, ValueError):
                continue
            if trees and _is_statement(trees[0]):
                return True
        return False
    finally:
        log.setLevel(level)


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


_CAPS_RUN_END = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")


def _split_words(identifier: str) -> list[str]:
    """``"StuID"`` -> ``["stu", "id"]``; ``"home_city"`` -> ``["home", "city"]`` (lower-case)."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", identifier)
    # a space before the last capital of a run that a lower-case letter follows ("HTMLParser" -> "HTML Parser"), by
    # lookaround: the former ``([A-Z]+)([A-Z][a-z])`` retried the run from each capital, quadratic on "A" * n (a
    # clarification is agent text)
    s = _CAPS_RUN_END.sub(" ", s)
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


@functools.lru_cache(maxsize=16384)
def _form_regex(form: str) -> re.Pattern:
    parts = [re.escape(p) for p in re.split(r"\s+", form) if p]
    return re.compile(r"(?<![0-9a-z_])" + r"\s+".join(parts) + r"(?![0-9a-z_])")


def _stem(word: str) -> str:
    """A light stemmer: plural and a few verb endings (``"names"`` -> ``"name"``)."""
    return plural_stem(word.lower())


@functools.lru_cache(maxsize=4096)
def _text_stems(text: str) -> tuple[str, ...]:
    return tuple(_stem(w) for w in _split_words(text))


def identifier_used(identifier: str, text: str) -> bool:
    """Whether ``text`` (a question or clarification) already uses ``identifier``.

    Used means: one of :func:`identifier_forms` occurs as a whole word (case-insensitive), or the
    identifier's words occur consecutively in the text up to a plural ending (``"names"`` uses
    ``name``; ``"student ids"`` uses ``student_id``).
    """
    low = text.lower()
    if any(_form_regex(f).search(low) for f in identifier_forms(identifier)):
        return True
    want = _text_stems(identifier)
    if not want:
        return False
    have = _text_stems(text)
    n = len(want)
    return any(have[i:i + n] == want for i in range(len(have) - n + 1))


def named_identifiers(text: str, schema_identifiers: Iterable[str], known: str = "") -> list[str]:
    """The schema identifiers that ``text`` names and ``known`` does not, one per name.

    Named means :func:`identifier_used`. Names that differ only in spelling (``StuID`` / ``stu_id``)
    count once, and a name whose words lie inside a longer named one (``name`` inside ``first_name``)
    is not counted again. One-character names are skipped.

    Args:
        text: a clarification.
        schema_identifiers: table and column names of the database (any case).
        known: what the user already said or knows (question and hidden knowledge).
    Returns:
        Lower-case names, sorted.
    """
    return list(_named_cached(text, frozenset(i for i in schema_identifiers if isinstance(i, str)), known))


@functools.lru_cache(maxsize=4096)
def _named_cached(text: str, schema_identifiers: frozenset[str], known: str) -> tuple[str, ...]:
    """:func:`named_identifiers`, cached: every candidate reply of a request asks it again."""
    found: dict[tuple[str, ...], str] = {}
    for ident in sorted(schema_identifiers):
        if not isinstance(ident, str) or len(ident.strip()) < 2:
            continue
        words = tuple(_stem(w) for w in _split_words(ident.strip()))
        if not words or words in found:
            continue
        if identifier_used(ident, text) and not (known and identifier_used(ident, known)):
            found[words] = ident.strip().lower()

    def inside(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
        return len(a) < len(b) and any(b[i:i + len(a)] == a for i in range(len(b) - len(a) + 1))

    return tuple(sorted(n for w, n in found.items() if not any(inside(w, o) for o in found)))


def is_identifier_probe(clarification: str, *, question: str, hidden_knowledge: str = "",
                        schema_identifiers: Iterable[str], limit: int = PROBE_LIMIT) -> bool:
    """True when a clarification enumerates schema identifiers: it names more than ``limit``
    identifiers (:func:`named_identifiers`) that neither the question nor the hidden knowledge contains.

    Such a clarification licenses no name in the reply (:func:`leakage_reasons`), and the simulated
    users label it ``irrelevant``: a list of candidates is not a question about the request, and any
    answer would tell the agent which of them the gold uses.

    Raises:
        TypeError: ``clarification`` or ``question`` is not a string.
    """
    for nm, v in (("clarification", clarification), ("question", question)):
        if not isinstance(v, str):
            raise TypeError(f"is_identifier_probe: {nm} must be a string, got {type(v).__name__}")
    known = f"{question}\n{hidden_knowledge or ''}"
    return len(_named_cached(clarification, frozenset(i for i in schema_identifiers if isinstance(i, str)),
                             known)) > limit


def leakage_reasons(reply: str, *, question: str, clarification: str, schema_identifiers: Iterable[str],
                    gold_sql: str | None, hidden_knowledge: str = "", license_limit: int = LICENSE_LIMIT) -> list[str]:
    """Why a simulated-user reply leaks, or ``[]`` when it is clean (TIDE App. E validator).

    Args:
        reply: the candidate user reply.
        question: the sample's natural-language question (what the user already said).
        clarification: the agent's clarification question being answered.
        schema_identifiers: table and column names of the database (any case). One-character names
            are skipped: they cannot be told apart from ordinary letters.
        gold_sql: the gold SQL in force, or ``None``.
        hidden_knowledge: what the user knows (a relevant reply states it, so its names are licensed).
        license_limit: a clarification that names more identifiers than this (beyond the question and
            the hidden knowledge, :func:`named_identifiers`) licenses no name.
    Returns:
        Reasons in a fixed order, each at most once: ``"sql"``, ``"gold"``, then
        ``"identifier:<name>"`` (lower-case name) for each identifier printed in the reply that is not
        licensed (:func:`identifier_used` on the question, the hidden knowledge and, when it names at
        most ``license_limit`` new identifiers, the clarification), sorted by name, then ``"value:<v>"`` for each gold
        condition value (:func:`gold_exposure`) printed and not licensed, sorted. An identifier that is
        a plain word of the question (``name`` when the question says "names") is allowed.
    Raises:
        TypeError: ``reply``, ``question``, ``clarification`` or ``hidden_knowledge`` is not a string.
    """
    for nm, v in (("reply", reply), ("question", question), ("clarification", clarification),
                  ("hidden_knowledge", hidden_knowledge)):
        if not isinstance(v, str):
            raise TypeError(f"leakage_reasons: {nm} must be a string, got {type(v).__name__}")
    reasons: list[str] = []
    if any(p.search(reply) for p in _SQL_PATTERNS) or _parses_as_sql(reply):
        reasons.append("sql")
    if is_full_gold_leak(reply, gold_sql):
        reasons.append("gold")
    low = reply.lower()
    schema_identifiers = list(schema_identifiers)
    said = question + "\n" + hidden_knowledge
    if len(_named_cached(clarification, frozenset(i for i in schema_identifiers if isinstance(i, str)),
                         said)) <= license_limit:
        said += "\n" + clarification
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
    reasons.extend(f"value:{v}" for v in sorted(gold_exposure(gold_sql)[2])
                   if _value_used(v, low) and not _value_used(v, said))
    return reasons


# ----------------------------------------------------------------------------- gold exposure (leak metric)

@functools.lru_cache(maxsize=2048)
def gold_exposure(gold_sql: str | None) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """What a reply must not reveal about the gold query: ``(output_columns, tables, values)``.

    * ``output_columns``: names of the columns referenced in the top-level projection (the leftmost
      SELECT of a set operation), lower-case; ``*`` is not a name.
    * ``tables``: every table name the query reads, lower-case (subqueries included).
    * ``values``: literals compared in a condition (WHERE / HAVING / JOIN ... ON, subqueries included):
      strings without their ``LIKE`` wildcards, numbers as written; LIMIT / OFFSET counts are not values.
      Strings and numbers of one character are left out (they cannot be told apart from ordinary text).

    Args:
        gold_sql: one SQLite query, or ``None``.
    Returns:
        Three frozensets; all empty for ``None`` or SQL that does not parse.
    """
    if not gold_sql:
        return frozenset(), frozenset(), frozenset()
    try:
        tree = parse_sql(gold_sql)
    except SQLParseError:
        return frozenset(), frozenset(), frozenset()
    top = tree
    while isinstance(top, exp.SetOperation):
        top = top.this
    if isinstance(top, exp.Subquery):
        top = top.this
    cols: set[str] = set()
    if isinstance(top, exp.Select):
        for e in top.expressions:
            for c in e.find_all(exp.Column):
                if not isinstance(c.this, exp.Star) and c.name:
                    cols.add(c.name.lower())
    tables = {t.name.lower() for t in tree.find_all(exp.Table) if t.name}
    values: set[str] = set()
    for cond in [*tree.find_all(exp.Where), *tree.find_all(exp.Having), *tree.find_all(exp.Join)]:
        for lit in cond.find_all(exp.Literal):
            v = str(lit.this).strip("%").strip() if lit.is_string else str(lit.this)
            if len(v) >= 2:
                values.add(v.lower())
    return frozenset(cols), frozenset(tables), frozenset(values)


def _value_regex(value: str) -> re.Pattern:
    return re.compile(r"(?<![0-9a-z_])" + re.escape(value) + r"(?![0-9a-z_]|\.\d)")


def _value_used(value: str, text: str) -> bool:
    return _value_regex(value).search(text.lower()) is not None


def gold_leaks(reply: str, *, question: str, hidden_knowledge: str, gold_sql: str | None) -> list[str]:
    """The gold parts a reply names that the user had not already said: the leak measure.

    A **leak** is a gold output column, a gold table or a gold condition value (:func:`gold_exposure`)
    that the reply names (an :func:`identifier_forms` form as a whole word; a value as a whole word,
    case-insensitive) and that appears neither in the question nor in the hidden knowledge. An
    identifier appears there when :func:`identifier_used` says so or when every word of it does
    ("template type codes and descriptions" uses ``template_type_description``); a value, as a whole
    word. What the agent's clarification said does not excuse a leak: a clarification that lists every
    column would otherwise license them all.

    Args:
        reply: the user reply.
        question: the sample's question.
        hidden_knowledge: the sample's hidden knowledge (``""`` when none).
        gold_sql: the gold SQL in force, or ``None`` (nothing can leak).
    Returns:
        Sorted ``"column:<name>"``, ``"table:<name>"``, ``"value:<v>"`` strings; ``[]`` when clean.
    """
    cols, tables, values = gold_exposure(gold_sql)
    low = reply.lower()
    known = f"{question}\n{hidden_knowledge}"
    out = set()
    for kind, names in (("column", cols), ("table", tables)):
        for n in names:
            if len(n) < 2:
                continue
            if any(_form_regex(f).search(low) for f in identifier_forms(n)) and not identifier_used(n, known) \
                    and not set(_text_stems(n)) <= set(_text_stems(known)):
                out.add(f"{kind}:{n}")
    for v in values:
        if _value_used(v, low) and not _value_used(v, known):
            out.add(f"value:{v}")
    return sorted(out)
