"""Drift utterances in the user's words: style templates and the words for schema elements.

A drift utterance (TIDE §2.2, ``docs/generation.md``) names what the user retracts and what replaces it,
never in SQL. This module holds

* the words for schema elements: :func:`column_words` (``first_name`` -> ``first name``,
  ``Hometown`` -> ``hometown``, ``LName`` -> ``last name``), :func:`table_words` (singular or plural,
  as the question spells it where it can), :func:`value_words` (a value as written in the data, no
  SQL quoting) and :func:`condition_words` (``> 30`` -> ``more than 30``);
* the style templates: :data:`TEMPLATES`, per edit kind and per style (ABISS §4.1's three linguistic
  styles: ``formal``, ``colloquial``, ``interrogative``),
  several per style; :func:`render_utterance` picks a style and a template with the caller's rng.

Nothing here reads SQL text; the recipe (:mod:`textsql_clarify.generation.drift`) gives the slots.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = [
    "STYLES", "TEMPLATES", "column_words", "table_words", "relation_words", "flag_column_words", "flag_value_words", "value_words", "condition_words",
    "aggregate_words", "attribute_words", "entity_words", "Utterance", "render_utterance",
]

#: the three styles of the drift utterances (ABISS §4.1 styles)
STYLES: tuple[str, ...] = ("formal", "colloquial", "interrogative")

#: whole identifiers (lower case, separators removed) with a known reading
_WHOLE: dict[str, str] = {
    "lname": "last name", "fname": "first name", "gnpold": "old GNP", "gnp": "GNP", "dob": "date of birth",
}
#: one word of an identifier -> its reading
_WORDS: dict[str, str] = {
    "no": "number", "num": "number", "abbrev": "abbreviation", "dest": "destination", "indep": "independence",
    "stu": "student", "cont": "continent", "dept": "department", "qty": "quantity", "amt": "amount",
    "desc": "description", "addr": "address", "yr": "year", "pct": "percentage", "fname": "first name",
    "lname": "last name", "id": "ID", "ids": "IDs",
}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def column_words(name: str) -> str:
    """The user's words for a column (or any identifier): separators and camel case become spaces,
    lower case except acronyms, known abbreviations read out.

    ``first_name`` -> ``first name``; ``Hometown`` -> ``hometown``; ``LName`` -> ``last name``;
    ``StuID`` -> ``student ID``; ``Song_release_year`` -> ``song release year``.

    Args:
        name: the identifier as written in the schema.
    Returns:
        A phrase without underscores or dots (``"value"`` for an identifier with no letters).
    Source: ours (schema elements in the user's words: column ``first_name`` -> 'first name').
    """
    flat = re.sub(r"[^A-Za-z0-9]", "", name).lower()
    if flat in _WHOLE:
        return _WHOLE[flat]
    shouting = name.upper() == name  # CAR_MAKERS, YEAR: capitals for the whole name are no acronyms
    out = []
    for part in re.split(r"[_\W]+", name):
        for w in _CAMEL.split(part):
            if not w:
                continue
            low = w.lower()
            if low in _WORDS:
                out.append(_WORDS[low])
            elif low in _WHOLE:
                out.append(_WHOLE[low])
            elif not shouting and len(w) >= 2 and w.isupper() and w.isalpha():
                out.append(w)  # an acronym inside a mixed-case name: GNPOld, SSN
            else:
                out.append(low)
    if len(out) >= 3 and out[-2] == "of" and _participle(out[-1]):
        del out[-2]  # Year_of_Founded: "year founded", not "year of founded"
    return " ".join(out) or "value"


def _participle(word: str) -> bool:
    """A past participle by its ending (``founded``, ``killed``; not ``seed``, ``need``)."""
    return len(word) > 4 and word.endswith("ed") and not word.endswith("eed")


def attribute_words(words: str, sql_type: str = "") -> str:
    """A column's words that can stand as a noun: a bare participle (``killed``, ``injured``, ``created``)
    says nothing alone ("the killed of deaths"), so it becomes ``number killed`` on a numeric column,
    ``created date`` on a date or time column, ``created value`` otherwise; ``year of founded`` becomes
    ``year founded``; other words are returned as they are.

    Args:
        words: the column's words (:func:`column_words`).
        sql_type: its declared SQL type (``INT``, ``TEXT``, ``DATETIME`` ...; any case).
    Source: ``docs/generation.md`` "Quality: a fresh reader's ratings" (sample 21).
    """
    parts = words.split()
    if len(parts) >= 3 and parts[-2] == "of" and _participle(parts[-1]):
        return " ".join(parts[:-2] + parts[-1:])
    if len(parts) != 1 or not _participle(words):
        return words
    t = sql_type.upper()
    if any(k in t for k in ("INT", "REAL", "NUM", "FLOA", "DOUB", "DEC")):
        return f"number {words}"
    return f"{words} date" if ("DATE" in t or "TIME" in t) else f"{words} value"


def _plural(noun: str) -> str:
    last = noun.rsplit(" ", 1)[-1]
    head = noun[: len(noun) - len(last)]
    if re.search(r"(s|x|z|ch|sh)$", last):
        return head + last + "es"
    if re.search(r"[^aeiou]y$", last):
        return head + last[:-1] + "ies"
    return head + last + "s"


#: nouns whose plural is themselves
_UNCOUNTED = frozenset({"people", "staff", "information", "equipment", "music", "furniture", "data"})


def relation_words(table: str, main: str) -> str:
    """The user's words for a table that links rows of ``main`` to something: the words of ``table``
    without the words of ``main`` and the linking words (``has_pet`` -> ``pet``; ``singer_in_concert``
    with ``singer`` -> ``concert``; ``MODEL_LIST`` -> ``model list``).

    Args:
        table: the joined table's name.
        main: the name of the table it filters.
    Source: ours (schema elements in the user's words).
    """
    words = column_words(table).lower().split()
    main_words = column_words(main).lower().split()

    def stem(w: str) -> str:
        return _singular(w)

    contains_main = all(any(stem(w) == stem(m) for w in words) for m in main_words)
    drop = {stem(m) for m in main_words} if contains_main else set()
    linking = {"has", "have", "in", "of", "to", "for", "by", "a", "the"}
    kept = [w for w in words if stem(w) not in drop and w not in linking]
    kept = kept or words
    return " ".join(kept[:-1] + [_singular(kept[-1])])


#: words that make a table name a relation between two entities (``has_pet``, ``singer_in_concert``)
_LINKING = frozenset({"has", "have", "in", "of", "to", "for", "by"})


def entity_words(table: str, other: str, question: str = "", *, plural: bool = False) -> str:
    """The user's words for the rows of ``table`` when ``other`` is the table it is linked to: a relation
    table (its name holds a linking word: ``has_pet``) reads as the entity it lists (``pet`` / ``pets``,
    :func:`relation_words`), never "every has pet"; any other table as :func:`table_words`.

    Args:
        table: the table whose rows are meant.
        other: the table on the other side of the link.
        question: the anchor's question (its spelling is preferred for a plain table).
        plural: the plural form.
    Source: ``docs/generation.md`` "Quality: a fresh reader's ratings" (sample 12).
    """
    if not set(column_words(table).lower().split()) & _LINKING:
        return table_words(table, question, plural=plural)
    words = relation_words(table, other)
    return (words if words.endswith("s") or words in _UNCOUNTED else _plural(words)) if plural else words


def _singular(word: str) -> str:
    """``contestants`` -> ``contestant``, ``countries`` -> ``country``, ``addresses`` -> ``address``."""
    if word in _UNCOUNTED or len(word) < 4 or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if re.search(r"(ss|x|ch|sh)es$", word):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def table_words(name: str, question: str = "", *, plural: bool = False) -> str:
    """The user's words for a table, singular or plural, spelt as the question spells it where it can.

    ``singer`` -> ``singer`` / ``singers``; ``people`` stays ``people`` when the question says so;
    ``Highschooler`` with the question "... high schoolers ..." -> ``high schoolers``.

    Args:
        name: the table name as written in the schema.
        question: the anchor's question (its wording is preferred).
        plural: the plural form.
    Source: ours (table names singular or plural as in the question where possible).
    """
    base = column_words(name).lower()
    if plural:
        form = base if base.endswith("s") or base in _UNCOUNTED else _plural(base)
    else:
        form = " ".join(base.split()[:-1] + [_singular(base.split()[-1])]) if base else base
    q = question.lower()
    if re.search(r"\b" + re.escape(form) + r"\b", q):
        return form
    squashed = form.replace(" ", "")
    m = re.search(r"\b(" + r"\s?".join(re.escape(c) for c in squashed) + r")\b", q)
    if m and len(squashed) >= 4:
        return m.group(1)  # the question's spacing: "high schoolers" for Highschooler
    return form


def value_words(value: Any) -> str:
    """A database value as the user writes it: text as stored (no SQL quotes), ``3.0`` -> ``3``,
    ``2.50`` -> ``2.5``.

    Args:
        value: a Python value from a result row (``str``, ``int``, ``float``).
    Source: ours (values as written in the data).
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value).strip()


#: how a flag column's coded values read (``IsOfficial = 'T'``)
_FLAG_VALUES: dict[str, str] = {"t": "true", "f": "false", "y": "yes", "n": "no", "1": "true", "0": "false",
                                "true": "true", "false": "false", "yes": "yes", "no": "no"}


def flag_column_words(name: str) -> str | None:
    """The words for a flag column named ``is ...``: ``IsOfficial`` -> ``official flag``, ``is_male`` ->
    ``male flag``; ``None`` for any other column (its :func:`column_words` reading is kept)."""
    words = column_words(name)
    return words[3:] + " flag" if words.lower().startswith("is ") and len(words) > 3 else None


def flag_value_words(value: Any) -> str | None:
    """A flag's coded value in words: ``'T'`` -> ``true``, ``'N'`` -> ``no``, ``1`` -> ``true``; ``None``
    when the value is no flag code."""
    return _FLAG_VALUES.get(value_words(value).lower())


#: comparison operator (sqlglot class name) -> how the user says "<column> <op> <value>"
_CONDITION: dict[str, str] = {
    "EQ": "{v}", "NEQ": "other than {v}", "GT": "more than {v}", "GTE": "at least {v}",
    "LT": "less than {v}", "LTE": "at most {v}", "Like": "like {v}", "In": "one of {v}",
}


def condition_words(op: str, value: Any) -> str:
    """How the user says a condition on a value: ``("GT", 30)`` -> ``more than 30``; ``("EQ", "France")``
    -> ``France``; ``("Like", "%Stu%")`` -> ``like Stu``; ``("In", ["a", "b"])`` -> ``one of a or b``.

    Args:
        op: the sqlglot class name of the comparison (``EQ``, ``NEQ``, ``GT``, ``GTE``, ``LT``, ``LTE``,
            ``Like``, ``In``).
        value: the value, or a list of values for ``In``.
    Raises:
        ValueError: an unknown ``op``.
    """
    if op not in _CONDITION:
        raise ValueError(f"no words for comparison {op!r}; known: {sorted(_CONDITION)}")
    if op == "In":
        items = [value_words(v) for v in value]
        v = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]
    elif op == "Like":
        v = value_words(value).strip("%").replace("%", " ").replace("_", " ").strip()
    else:
        v = value_words(value)
    return _CONDITION[op].format(v=v)


#: aggregate (sqlglot class name) -> (noun phrase, adjective) in the user's words
_AGGREGATE: dict[str, tuple[str, str]] = {
    "Avg": ("average", "average"), "Max": ("maximum", "highest"), "Min": ("minimum", "lowest"),
    "Sum": ("total", "total"), "Count": ("number", "number of"),
}


def aggregate_words(name: str) -> str:
    """The user's adjective for an aggregate: ``Avg`` -> ``average``, ``Max`` -> ``highest``,
    ``Min`` -> ``lowest``, ``Sum`` -> ``total``.

    Raises:
        ValueError: an aggregate with no words.
    """
    if name not in _AGGREGATE:
        raise ValueError(f"no words for aggregate {name!r}; known: {sorted(_AGGREGATE)}")
    return _AGGREGATE[name][1]


#: edit kind -> style -> templates. Slots: {col} column words, {old}/{new} value or condition words,
#: {cond} the retracted condition, {old_col}/{new_col}, {old_agg}/{new_agg}, {table}/{tables} table words,
#: {other} the joined table's words.
TEMPLATES: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    # value: one literal of a filter replaced by another value of that column
    "replace_literal": {
        "formal": (
            "Correction: the {col} should be {new}, not {old}.",
            "I would like the {col} to be {new} rather than {old}.",
            "Please use {new} instead of {old} for the {col}.",
            "On reflection, I meant {new} and not {old}.",
        ),
        "colloquial": (
            "Oops, make that {new}, not {old}.",
            "Actually, swap {old} for {new}.",
            "Wait, I meant {new} instead of {old}.",
            "Sorry, scratch {old}, I want {new} for the {col}.",
        ),
        "interrogative": (
            "Could you use {new} instead of {old} for the {col}?",
            "What if the {col} were {new} rather than {old}?",
            "Can you change it to {new} instead of {old}?",
            "How about {new} instead of {old}?",
        ),
    },
    # value: the literal of an exclusion (``!= v``) replaced: {old}/{new} the plain values, never
    # "other than X instead of other than Y"
    "replace_exclusion": {
        "formal": (
            "Correction: please exclude {new} instead of {old}.",
            "I would like to leave out {new} rather than {old}.",
        ),
        "colloquial": (
            "Oops, leave out {new}, not {old}.",
            "Actually, keep {old} and drop {new} instead.",
        ),
        "interrogative": (
            "Could you exclude {new} instead of {old}?",
            "What if we left out {new} rather than {old}?",
        ),
    },
    # constraint: one filter removed
    "remove_predicate": {
        "formal": (
            "Please drop the condition that the {col} is {cond}.",
            "I no longer need the {col} to be {cond}; please remove that condition.",
            "Kindly disregard the requirement on the {col} ({cond}).",
        ),
        "colloquial": (
            "Never mind the {col} being {cond}, drop that.",
            "Forget about the {col} being {cond}, any {col} is fine.",
            "Actually, skip the {col} part, it doesn't have to be {cond}.",
        ),
        "interrogative": (
            "Could you leave out the condition that the {col} is {cond}?",
            "What if the {col} didn't have to be {cond}?",
            "Can you do it for any {col}, not just {cond}?",
        ),
    },
    # constraint: an exclusion removed (``!= v``, ``NOT x = v``, ``NOT IN (...)``); {excluded} the words of
    # what was left out ("Jessie Alloway"), never "not just other than ..."
    "remove_exclusion": {
        "formal": (
            "Please no longer exclude {excluded}; every {col} should be included.",
            "I no longer want {excluded} left out; please include every {col}.",
        ),
        "colloquial": (
            "Actually, don't leave out {excluded}, any {col} is fine.",
            "Never mind excluding {excluded}, keep it in.",
        ),
        "interrogative": (
            "Could you include {excluded} as well?",
            "What if we didn't exclude {excluded} for the {col}?",
        ),
    },
    # constraint: two filters removed at once ({cond} and {cond2} on {col} and {col2})
    "remove_predicates": {
        "formal": (
            "Please drop both conditions: the {col} being {cond} and the {col2} being {cond2}.",
            "I no longer need the {col} to be {cond}, nor the {col2} to be {cond2}.",
        ),
        "colloquial": (
            "Forget both the {col} being {cond} and the {col2} being {cond2}.",
            "Actually, never mind the {col} and the {col2} parts, drop them both.",
        ),
        "interrogative": (
            "Could you leave out both the {col} and the {col2} conditions?",
            "What if neither the {col} had to be {cond} nor the {col2} {cond2}?",
        ),
    },
    # constraint: two filters on one column removed at once ({cond} and {cond2})
    "remove_predicates_same": {
        "formal": (
            "Please drop both conditions on the {col}, {cond} and {cond2}.",
            "I no longer need any condition on the {col}, neither {cond} nor {cond2}.",
        ),
        "colloquial": (
            "Forget both {col} conditions, {cond} and {cond2}.",
            "Actually, never mind the {col} parts, {cond} and {cond2}, drop them both.",
        ),
        "interrogative": (
            "Could you leave out both conditions on the {col}, {cond} and {cond2}?",
            "What if the {col} didn't have to be {cond} or {cond2}?",
        ),
    },
    # constraint: one either-or filter over two columns removed whole ({col} {cond} OR {col2} {cond2})
    "remove_either": {
        "formal": (
            "Please drop the condition that the {col} is {cond} or the {col2} is {cond2}.",
            "I no longer need the {col} to be {cond} or the {col2} to be {cond2}; please remove that condition.",
        ),
        "colloquial": (
            "Never mind the {col} being {cond} or the {col2} being {cond2}, drop that.",
            "Forget the either-or part about the {col} being {cond} or the {col2} being {cond2}.",
        ),
        "interrogative": (
            "Could you leave out the condition that the {col} is {cond} or the {col2} is {cond2}?",
            "What if we dropped the either-or condition on the {col} and the {col2}?",
        ),
    },
    # constraint: one bound of a range removed
    "drop_bound": {
        "formal": (
            "Please keep only the lower limit: the {col} should be {cond}, with no upper limit.",
            "I would like to remove the other bound and keep the {col} {cond}.",
        ),
        "colloquial": (
            "Actually, just keep the {col} {cond}, forget the other limit.",
            "Drop the other end of the range, {cond} is enough for the {col}.",
        ),
        "interrogative": (
            "Could you keep only the {col} being {cond} and drop the other limit?",
            "What if the only limit on the {col} were {cond}?",
        ),
    },
    # constraint: a joined table that only filtered the rows removed with its conditions
    "remove_join": {
        "formal": (
            "Please include all {tables}, whether or not they have a matching {other}.",
            "I no longer need the {tables} to be linked to a {other}; please include all of them.",
        ),
        "colloquial": (
            "Never mind the {other} part, I want all the {tables}.",
            "Forget the {other} link, just give me every {table}.",
        ),
        "interrogative": (
            "Could you include every {table}, not only those with a {other}?",
            "What if we didn't require a matching {other} for the {tables}?",
        ),
    },
    # constraint: a joined table that only filtered the rows removed with its link and its filter on {col}
    "remove_join_filter": {
        "formal": (
            "Please include all {tables}, not only those linked to a {other} whose {col} is {cond}.",
            "I no longer need the {tables} to have a {other} with {col} {cond}; please include all of them.",
        ),
        "colloquial": (
            "Never mind the {other} with {col} {cond}, I want all the {tables}.",
            "Forget the {other} part, just give me every {table}.",
        ),
        "interrogative": (
            "Could you include every {table}, not only those with a {other} whose {col} is {cond}?",
            "What if we included every {table}, even one without a {other} whose {col} is {cond}?",
        ),
    },
    # projection: an output column replaced by another column of its table
    "replace_column": {
        "formal": (
            "Instead of the {old_col}, please show the {new_col}.",
            "I would like the {new_col} rather than the {old_col}.",
            "Please report the {new_col} in place of the {old_col}.",
        ),
        "colloquial": (
            "Actually, swap the {old_col} for the {new_col}.",
            "Hmm, not the {old_col}, give me the {new_col}.",
            "Oh wait, I want the {new_col}, not the {old_col}.",
        ),
        "interrogative": (
            "Could you show the {new_col} instead of the {old_col}?",
            "Can I have the {new_col} rather than the {old_col}?",
            "What about the {new_col} instead of the {old_col}?",
        ),
    },
    # projection: an output column removed
    "remove_column": {
        "formal": (
            "I no longer need the {old_col}; please leave it out.",
            "Please remove the {old_col} from the answer.",
        ),
        "colloquial": (
            "Actually, drop the {old_col}, I don't need it.",
            "Skip the {old_col}, the rest is fine.",
        ),
        "interrogative": (
            "Could you leave out the {old_col}?",
            "Can you give me the same without the {old_col}?",
        ),
    },
    # projection: an aggregate replaced by another over the same column
    "swap_aggregate": {
        "formal": (
            "Instead of the {old_agg} {col}, please give the {new_agg} {col}.",
            "I would like the {new_agg} {col} rather than the {old_agg}.",
        ),
        "colloquial": (
            "Actually, not the {old_agg} {col}, I want the {new_agg} one.",
            "Make that the {new_agg} {col} instead of the {old_agg}.",
        ),
        "interrogative": (
            "Could you give the {new_agg} {col} instead of the {old_agg}?",
            "What is the {new_agg} {col} rather than the {old_agg}?",
        ),
    },
}


@dataclass(frozen=True)
class Utterance:
    """A rendered drift utterance.

    Attributes:
        text: the utterance, first letter capitalised.
        style: its style, one of :data:`STYLES`.
        template: ``"<kind>/<style>/<index>"``, the template it came from.
    """

    text: str
    style: str
    template: str


def render_utterance(kind: str, slots: Mapping[str, str], rng: random.Random) -> Utterance:
    """Pick a style, then one of its templates, with ``rng``, and fill it with ``slots``.

    Args:
        kind: an edit kind, a key of :data:`TEMPLATES`.
        slots: the words for the template's slots (see :data:`TEMPLATES`).
        rng: the recipe's random generator (two draws).
    Raises:
        KeyError: an unknown ``kind``, or a slot the picked template needs is missing.
    Source: ABISS §4.1 (linguistic styles); the templates are ours.
    """
    by_style = TEMPLATES[kind]
    style = rng.choice(STYLES)
    options = by_style[style]
    i = rng.randrange(len(options))
    text = options[i].format(**slots)
    text = text[0].upper() + text[1:]
    return Utterance(text, style, f"{kind}/{style}/{i}")
