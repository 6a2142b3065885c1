"""What an explanation claims about the database: the elements it says are absent, or present.

ABISS §4.2 Stage 8 says what a good unanswerability explanation names: the missing table, column or
relationship. :func:`missing_claims` finds the phrases a text says are absent and
:func:`presence_claims` the subjects it says are stored or linked; :func:`names_missing_element`,
:func:`affirmed_missing` and :func:`number_conflicts` compare an explanation with the hidden knowledge.
Pure text functions: no database, no model (the checks against the schema are in
:mod:`textsql_clarify.rewards.feedback.schema`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .words import _GENERIC, _STOCK_STEMS, _STOP, REFUSAL_STOCK, _split_ident, _stem, _tokens, content_words

__all__ = ["MissingClaim", "missing_claims", "presence_claims", "names_missing_element", "names_missing_link",
           "singles_out_missing", "unsupported_claims", "affirmed_missing", "number_conflicts"]


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
#: a backward relationship cue: "professors and courses are never linked", "the two cannot be joined" (the
#: subjects before it are the link's ends, ABISS §3.2 "missing relationship")
_BWD_LINK = re.compile(
    r"\b(?:(?:is|are|was|were)(?: not|n't| never)|(?:cannot|can't|can not|could not|couldn't) be)"
    r"(?: (?:currently|actually|even|directly))? (?:linked|connected|related|joined|tied|mapped|associated)\b")
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
    "does not exist", "is missing") take the noun phrase before them; "A and B are never linked" (or "cannot
    be joined") is a relationship claim over the clause before it. A scope table is read from
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
    for m in _BWD_LINK.finditer(joined):
        if m.start() in at:  # "A and B are never linked": a missing relationship between what precedes
            claims.append(MissingClaim(("link",), "relationship", None, _window(toks, at[m.start()], False) | {"link"}))
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


def _missing_words(claims: Sequence[MissingClaim], schema_words: set[str]) -> set[str]:
    """Stems that name a missing element: claim heads and clause words, less generic and schema words."""
    words = set().union(*(c.window | set(c.head) for c in claims)) if claims else set()
    return words - _GENERIC - schema_words - _STOP


def names_missing_element(feedback_claims: Sequence[MissingClaim], hk_claims: Sequence[MissingClaim],
                          identifiers: set[tuple[str, ...]], question: str = "",
                          exclude: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether a feedback missing-phrase shares a word with the hidden knowledge's missing-phrases that is
    neither generic, nor a schema word, nor a word of the question, nor a stock refusal word.

    The question's words do not count: "The database does not contain administrative staff" only repeats
    what the question asked for (a wrapped echo names nothing); "there is no fee or *payment* table" adds
    the missing element's own word.

    Args:
        feedback_claims, hk_claims: from :func:`missing_claims`.
        identifiers: stems of every table and column name; their single words do not count.
        question: the sample's question (``""``: no word is excluded for it).
        exclude: further stems that do not count (the judges pass the dataset's stock-covered stems of both
            texts, :mod:`~textsql_clarify.rewards.feedback.stock`).
    """
    schema_words = {w for ident in identifiers for w in ident}
    excluded = set(content_words(question)) | _STOCK_STEMS | REFUSAL_STOCK | set(exclude)
    return bool((_missing_words(feedback_claims, schema_words) & _missing_words(hk_claims, schema_words)) - excluded)


def _link_ends(claims: Sequence[MissingClaim], exclude: frozenset[str] | set[str]) -> set[str]:
    """What the relationship claims among ``claims`` would link: the content stems of their clauses, less the
    relationship stem, generic, stock, refusal-stock and stop words and ``exclude`` (schema and question words
    stay: the ends of a link are named by them)."""
    ends: set[str] = set()
    for c in claims:
        if c.kind == "relationship":
            ends |= set(c.window)
    return ends - {"link"} - _GENERIC - _STOCK_STEMS - REFUSAL_STOCK - _STOP - set(exclude)


def names_missing_link(feedback_claims: Sequence[MissingClaim], hk_claims: Sequence[MissingClaim],
                       exclude: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether the feedback says the link the hidden knowledge says is missing is missing, between the same
    things: both make a relationship claim ("nothing links a professor to the courses they teach"), and the
    feedback's claim names at least two of what the hidden knowledge's links (all of it when that is one
    thing), with at least half of what the feedback's claim names among them ("no link between professors and
    courses" for that rationale; not "there is no link between the tables", which names no end, nor a list of
    every table).

    Relationship words are refusal stock (:data:`~textsql_clarify.rewards.feedback.words.REFUSAL_STOCK`), so
    a rationale that says only *which* link is missing, with the question's and the schema's words, has no word
    of its own; the judges call this for such a rationale (nothing of its own to score), where the ends of the
    link are its content.

    Args:
        feedback_claims, hk_claims: from :func:`missing_claims`.
        exclude: stems that name no end (the dataset's stock-covered stems of both texts).
    Returns:
        ``False`` when either side makes no relationship claim or the hidden knowledge's names no end.
    Source: ABISS §3.2 ("missing relationship": both entities exist, nothing links them) and §4.2 Stage 8.
    """
    hk_ends = _link_ends(hk_claims, exclude)
    fb_ends = _link_ends(feedback_claims, exclude)
    if not hk_ends or not fb_ends:
        return False
    shared = hk_ends & fb_ends
    return len(shared) >= min(2, len(hk_ends)) and 2 * len(shared) >= len(fb_ends)


def singles_out_missing(feedback: str, feedback_claims: Sequence[MissingClaim], hk_claims: Sequence[MissingClaim],
                        identifiers: set[tuple[str, ...]], question: str,
                        exclude: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether the feedback singles out, among the question's words, the element the hidden knowledge says
    is missing: "There is no staff table" for "List the administrative staff of the Engineering department".

    Good explanations often name the missing element with the question's own noun; an echo names it too,
    but together with everything else the question asked. So this holds iff

    * the heads of the feedback's missing-phrases (relationship and clause claims aside) hold some
      question word that is not a schema word, a generic or a stock word (the *blamed* words);
    * every blamed word is one of the hidden knowledge's missing-element words (blaming "Engineering",
      a value, or any other question word the hidden knowledge does not say is missing fails);
    * the clauses (split at punctuation) that hold the feedback's missing-phrases, together, leave out at least
      one of the question's
      own content words (schema, generic and stock words aside): saying that the whole question is
      missing ("The database does not contain <question>", or one "there is no X table" per question
      word) singles nothing out. The words may appear elsewhere ("so the lecture's room is unknown").

    Args:
        feedback: the explanation; feedback_claims / hk_claims: from :func:`missing_claims`;
        identifiers: stems of every table and column name; question: the sample's question.
        exclude: stems that cannot be blamed (the dataset's stock-covered stems of both texts): a word that the
            hidden knowledge says is missing only inside a stock phrase is no sign of this sample.
    """
    schema_words = {w for ident in identifiers for w in ident}
    q = set(content_words(question)) - _GENERIC - _STOCK_STEMS - schema_words - _STOP
    if not q:
        return False
    blamed = {w for c in feedback_claims if c.kind not in ("relationship", "clause") for w in c.head} & q
    if not blamed or not blamed <= _missing_words(hk_claims, schema_words) - set(exclude):
        return False
    said_missing: set[str] = set()
    for clause in re.split(r"[.,;:!?]+", feedback):
        if missing_claims(clause):
            said_missing |= set(content_words(clause))
    return not q <= said_missing


def _supported(word: str, allowed: set[str]) -> bool:
    """``word`` is in ``allowed``, or shares its first 6 letters with a word there ("supervision" and
    "supervising" are one word for this check: it only asks whether a claim is on topic)."""
    return word in allowed or (len(word) >= 6 and any(a[:6] == word[:6] for a in allowed if len(a) >= 6))


def unsupported_claims(feedback_claims: Sequence[MissingClaim], hidden_knowledge: str, question: str) -> list[str]:
    """Missing-phrases of the feedback that neither the hidden knowledge nor the question is about.

    A claim is unsupported when none of its words (head and clause; generic, stock and stop words aside)
    is a content word of the hidden knowledge or of the question. "The departments have no office
    address on file" against "the database has no table about administrative staff" names a wrong
    element; a feedback that lists every kind of reason ("no link between these entities, ... the
    conversion is not available") makes claims the hidden knowledge does not make. When the hidden
    knowledge speaks of no link, a relationship claim is supported only through the words of what it
    would link ("no mapping from the 18-30 scale to letter grades": ``letter``, ``grade``).

    Returns:
        The heads of the unsupported claims, one string each (``"office address"``).
    """
    allowed = set(content_words(hidden_knowledge)) | set(content_words(question))
    out = []
    for c in feedback_claims:
        words = (set(c.head) | c.window) - _GENERIC - _STOCK_STEMS - _STOP
        if "link" in words and "link" not in allowed:  # a link the hidden knowledge never mentions ...
            words = (words - {"link"}) or {"link"}  # ... is on topic only through what it would link
        if words and not any(_supported(w, allowed) for w in words):
            out.append(" ".join(c.head))
    return out


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
