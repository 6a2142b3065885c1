"""A deterministic, CPU-only simulated user built from rules.

It follows the two-stage protocol of ABISS §5.2 with rules in place of the model council:

1. **Relevancy.** Each clarification gets ``relevant`` | ``technical`` | ``irrelevant`` within the
   group's label limits (:data:`~.base.ALLOWED_LABELS`): an answerable sample never gets ``relevant``;
   an unanswerable one always gets ``irrelevant``, since no clarification makes it solvable (a
   result-format question is still answered as an answerable sample without that fragment answers it:
   "Any order is fine."). A content-free clarification (:func:`is_content_free`: "Can you clarify?") is
   ``irrelevant`` on every group.
   A request for the SQL itself, the schema or table/column names is ``irrelevant`` (ABISS §5.2
   "attempts to extract the ground truth SQL"; TIDE App. E *Una*: database-internal identifiers).
   So is an identifier probe (more than two schema names the question and the hidden knowledge lack,
   :func:`~.leakage.is_identifier_probe`) and an echo of the question (:func:`specificity`: it covers
   the question and adds nothing but stock words); an ``unfocused`` clarification (covers the question,
   adds words) is judged on the words it adds only (the red-team contract, ``docs/rewards.md``).
2. **Answer.** Relevant answers state the hidden knowledge (or the chosen chain layer's answer);
   technical answers state one atomic gold-SQL fragment in words (TIDE App. E, :mod:`.fragments`; on a
   sample whose gold is withheld, ``Sample.gold_withheld``, there is none, so the user leaves the detail to
   the agent, and relevancy is judged as for any ambiguous sample); irrelevant answers are refusals. Every reply
   passes the leakage guard (:mod:`.leakage`); a reply that would leak is replaced by a vaguer one and counted in
   ``leak_rejections``.

**No side channels.** A refusal is :func:`~.base.refusal_text` of the clarification: the same words whatever
the sample's group, style, hidden knowledge, drift or database (a constant sentence needs no leakage guard).
What the group can change is the label, which the agent never sees, and, through a question that asks about
something, the content of a relevant or technical answer (:mod:`.side_channel` measures it; docs/simulator.md).

How an ambiguous sample's clarification is labelled (ABISS §5.2 "directly targets the core ambiguity
or knowledge gap" versus "a valid but secondary database concern"):

* **Technical cues** (:func:`technical_cue`): ordering, result count, duplicates and output columns,
  recognised in many phrasings ("most popular first?", "exactly five?", "appear twice?", "the names
  too?", "just the number?"). The words of an ordering / count / duplicates phrase ("sorted by budget,
  largest first") are not evidence about the ambiguity; the nouns of an output-column phrase still are,
  since two similar attributes can be the ambiguity itself (ABISS §3.2 lexical overlap).
* **Hidden-knowledge words.** Words of the hidden knowledge and the interpretations split into *strong*
  words (not in the question, not shared by every reading: the disambiguating fact) and *anchor* words
  (in the question and the hidden knowledge: the ambiguous term). Gold-SQL table words are *entity*
  words: they name what is returned, not how to read the question.
* **Relevant** when, outside the technical phrases, the clarification (a) names a strong non-entity word
  and is about the request (it names a question word, offers alternatives, or has a request form such
  as "do you mean / want", "should"), or (b) offers alternatives that differ in strong words ("X or
  Y?"; naming only the returned entity is no reading, except under entity ambiguity), or (c) restates
  most of the hidden knowledge ("can you confirm: ...?"), or (d) matches its subcategory's cue (ABISS
  §3.2): *missing user knowledge*: asks the user about themselves ("who are you", "your name",
  "which department are you in", "whose"); *scope*: each/every/all against separately/together/in
  common/per/grouped by; *attachment*: what a modifier applies to (also/too/both/apply to) on a
  question word; any ambiguity: asks what a question word means (``what counts as X``, ``which X do
  you mean``, thresholds) or which definition/evidence holds.
* Otherwise a technical cue gives ``technical``; else an anchor or strong word in a request-shaped
  question gives ``relevant``; else ``irrelevant``. Personal small talk addressed to the user ("is X
  your favourite", "have you ever", "are you a senior yourself") is ``irrelevant`` before any overlap
  counts.

Dialogue context (a follow-up sample's earlier turns, ``Sample.dialogue``; MMSQL, CoSQL): the words of the
earlier user and system turns (:func:`~.base.said_before`; the system's SQL is left out, the user saw answers,
not queries) count as context the way the question's words do where a rule asks what the user has said:
names they use are licensed in replies (leakage guard) and do not make a clarification an identifier probe,
and a clarification that names them is on target and about the request (``targets``, "names a question
word"). Where a rule asks what the *question* adds or leaves open, the question alone counts: the echo
test (:func:`specificity`), what an unfocused clarification adds, and the split of hidden-knowledge words
into strong and anchor words (a fact stated in an earlier turn is still the disambiguating fact when the
hidden knowledge states it). A sample whose subcategory is unknown (``None``) gets no subcategory cue,
only the cues that hold for any ambiguity (definition, meaning).

TIDE router (§4.2, App. E), set on samples with a chain or a drift event (TIDE samples), else ``None``:
relevant -> ``amb``, technical -> ``loc``, irrelevant -> ``una``. A clarification that targets L2 while
L1 is unresolved (``request.l1_resolved`` False) is routed ``loc`` (label ``technical``, layer ``L2``)
and answered with a deferral, not the L2 answer; metrics count L2 identification on ``amb`` routes only.
A chain clarification that is relevant by a cue but names neither layer resolves the next open layer.

Relevant and technical replies adopt the sample's ``style`` a little and deterministically (refusals do not):
``terse``/``concise``/``brief``
-> one bare sentence; ``casual``/``colloquial``/``informal`` -> an informal opener; ``formal``/``polite``
-> a courteous opener; anything else (ABISS's ``interrogative`` included) -> plain.
"""
from __future__ import annotations

import functools

import re
from typing import Sequence

from sqlglot import exp

from ..errors import SQLParseError
from ..samples import Chain, Sample
from ..sql.schema import parse_sql
from .base import (ALLOWED_LABELS, REFUSALS, UserReply, UserRequest, refusal_text, said_before, valid_request,
                   with_dialogue)
from .fragments import Fragment, gold_fragments, technical_topic, vague_text
from .leakage import is_identifier_probe, leakage_reasons

__all__ = ["RuleBasedUser", "asks_for_sql", "content_stems", "style_kind", "technical_cue", "specificity",
           "added_stems", "user_knowledge", "is_content_free", "STOCK_STEMS", "CONTENT_FREE_STEMS"]

_STOP = frozenset("""
a an the and or but if then else of to in on at by for with from into onto about as is are was were be been
being do does did done have has had having i me my mine we our ours you your yours he she it its they them
their this that these those there here what which who whom whose when where why how whether not no yes
any all some each every both either neither more most less least much many few other such same own so than
too very just only also even still again can could will would shall should may might must need needs
please thanks thank ok okay sure well like want wants wanted mean means meant meaning refer refers referring
intend intended talk talking ask asking asked question questions know tell give show list find get got
one ones thing things kind sort type way i'm it's do you did does something anything everything let us
his her hers him himself herself themselves yourself myself ourselves itself whats what's exactly here there
""".split())


def _split(text: str) -> list[str]:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return [w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w]


def _stem(word: str) -> str:
    w = word.lower()
    if w.endswith("ically") and len(w) > 8:      # academically -> academic
        return w[:-4]
    if w.endswith("ally") and len(w) > 6:        # financially -> financial
        return w[:-2]
    if w.endswith("ly") and len(w) >= 7 and w[-3] not in "aeiouy":   # recently -> recent
        return w[:-2]
    for suf, rep in (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh"), ("xes", "x"),
                     ("ing", ""), ("ed", "")):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)] + rep
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w


def content_stems(text: str) -> set[str]:
    """Content-word stems of ``text``: lower-cased, stop words dropped, plural/-ing/-ed endings cut.

    ``"What time period does 'recent' refer to?"`` -> ``{"time", "period", "recent"}``.
    """
    return set(_content_stems_cached(text))


@functools.lru_cache(maxsize=8192)
def _content_stems_cached(text: str) -> frozenset[str]:
    # the question and the hidden knowledge are re-read on every clarification of an episode
    return frozenset(_stem(w) for w in _split(text) if w not in _STOP and len(w) > 1)


def style_kind(style: str) -> str:
    """Map a sample's free-text ``style`` to ``terse`` | ``casual`` | ``formal`` | ``neutral``."""
    s = (style or "").lower()
    if re.search(r"\b(terse|concise|brief|short|keyword)", s):
        return "terse"
    if re.search(r"\b(casual|colloquial|informal|chatty|slang)", s):
        return "casual"
    if re.search(r"\b(formal|polite|professional)", s):
        return "formal"
    return "neutral"


_SQL_REQUEST = tuple(re.compile(p, re.IGNORECASE) for p in (
    # "write" only when the user is asked to write it: "before I write the query" is the agent's own plan
    r"\b(?:give|show|tell|provide|send|share|paste|reveal)\b[^?.!]{0,20}\b(?:sql|query|queries|statement)\b",
    r"\b(?:you|u)\s+(?:please\s+)?write\b[^?.!]{0,20}\b(?:sql|query|queries|statement)\b",
    r"^\s*(?:please\s+)?write\b[^?.!]{0,20}\b(?:sql|query|queries|statement)\b",
    r"\b(?:what|which)\s+(?:sql|query|queries|statement)\b",
    r"\b(?:sql|query)\s+(?:should|would|do|must|can)\s+(?:i|we)\b",
    r"\b(?:correct|expected|right|exact|gold|reference|ground[- ]truth|full|whole|final|intended)\s+(?:sql|query)\b",
    r"\bwhat\s+should\s+the\s+(?:sql|query)\s+be\b",
    r"\b(?:which|what)\s+(?:table|column|field)s?\b[^?.!]{0,40}\b(?:holds?|stores?|contains?|has|named|called|"
    r"uses?|joins?|keeps?)\b",
    r"\b(?:table|column|field)\s+names?\b",
    r"\bname\s+of\s+the\s+(?:table|column|field)\b",
    r"\b(?:primary|foreign)\s+keys?\b",
    r"\bschema\b",
    # where data is stored: "which table lists the people?", "in which column is the city?"; tables are
    # never output items, and a column asked about without an output verb is a storage question
    r"\b(?:what|which)\s+tables?\b",
    r"\b(?:in|from)\s+(?:what|which)\s+(?:table|column|field)s?\b",
    r"\b(?:what|which)(?:'s|\s+is|\s+are)?\s+(?:the\s+)?(?:column|field)s?\b(?![^?.!]{0,40}\b(?:show|shown|display|"
    r"displayed|include|included|return|returned|output|see|want|need|list|listed|print|appear)\b)",
    r"\b(?:table|column|field)s?\s+(?:links?|lists?|records?|tracks?)\b",
    r"\bhow\s+(?:is|are)\b[^?.!]{0,30}\bstored\b",
))


def asks_for_sql(clarification: str) -> bool:
    """True when a clarification asks for the SQL itself or for database-internal names.

    ABISS §5.2 labels attempts to extract the ground-truth SQL ``irrelevant``; TIDE App. E routes
    questions about database-internal identifiers to *Una*. Examples: "what query should I write",
    "give me the SQL", "which column holds the e-mail?", "which table lists the people?", "what's the
    column for seats?". Asking which columns to *show* is an output question, not this.
    """
    return any(p.search(clarification) for p in _SQL_REQUEST)


# ----------------------------------------------------------------------------- what a clarification adds

#: Stems of the stock words of a clarification request, beyond the stop words: they say that a question
#: is asked, not what about ("Can you clarify ...", "Just to be sure ...", "Before I write the query ...").
STOCK_STEMS = frozenset(_stem(w) for w in """
clarify clarifying clarification confirm confirming confirmation sure correct correctly right wrong
precise precisely specific specifically actual actually real really understand understanding understood
wonder wondering check checking double verify elaborate explain explanation expand rephrase repeat
specify detail details say saying said says request requesting mean meant meaning query write writing
before start starting look looking help wait hmm oh ah um uh got quick quickly little bit
""".split())
#: Words of the question that a clarification must not merely repeat: share of the question's content
#: stems above which a clarification "covers" the question (with at least 3 of them, or all in order).
COVER_SHARE = 0.8


def _stem_seq(text: str) -> list[str]:
    """Content stems of ``text`` in order, stock words dropped (:func:`content_stems` order-preserving)."""
    return [t for t in (_stem(w) for w in _split(text) if w not in _STOP and len(w) > 1) if t not in STOCK_STEMS]


def _contains_run(seq: list[str], run: list[str]) -> bool:
    n = len(run)
    return n > 0 and any(seq[i:i + n] == run for i in range(len(seq) - n + 1))


_WORD = re.compile(r"[0-9A-Za-z']+")


def _blank_question_words(text: str, question: str) -> str:
    """``text`` with every word that also occurs in ``question`` (any word, stop words included,
    compared by stem) replaced by spaces: what the clarification says beyond the question."""
    qw = {_stem(w) for w in _split(question)}
    return _WORD.sub(lambda m: " " * len(m.group()) if _stem(m.group().lower()) in qw else m.group(), text)


def _or_contrast_beyond(text: str, question: str) -> bool:
    """"X or Y?" whose two sides each add their own words beyond the question and stock words, and
    differ ("each department with its own semesters, or only those that every department shares")."""
    rest = _blank_question_words(text, question)
    if not _OR.search(rest):
        return False
    sides = [frozenset(w for w in (_stem(x) for x in _split(side)) if w not in STOCK_STEMS
                       and w not in _FILLER) for side in _OR.split(rest)]
    return len(sides) >= 2 and all(sides) and len(set(sides)) > 1


#: words of a clarification request that carry no reading on either side of an "or".
_FILLER = frozenset({"do", "you", "want", "mean", "is", "it", "the", "a", "an", "this", "that", "are", "we", "i",
                     "should", "would", "could", "can", "about", "asking", "to", "be", "by", "of", "in", "not",
                     "something", "else", "else's", "what", "which", "so"})


def added_stems(clarification: str, question: str) -> set[str]:
    """Content stems that ``clarification`` adds beyond ``question``: stems not in the question and not
    stock words (:data:`STOCK_STEMS`). ``"Can you clarify: list recent courses?"`` against
    ``"list recent courses"`` -> ``set()``; ``"What time period counts as recent?"`` -> ``{"time",
    "period", "count"}``."""
    return set(_stem_seq(clarification)) - set(_stem_seq(question))


#: Stems that, beyond :data:`STOCK_STEMS` and the stop words, say only that more is wanted ("anything else",
#: "further context"): a clarification made of these asks about nothing.
CONTENT_FREE_STEMS = STOCK_STEMS | frozenset(_stem(w) for w in """
else further additional extra context background info hint idea sorry hello hi hey pardon huh
""".split())


def is_content_free(clarification: str) -> bool:
    """True when a clarification asks about nothing: no content stem beyond :data:`CONTENT_FREE_STEMS`,
    no technical cue (:func:`technical_cue`: "all of them?" is a result-count question in stop words) and
    no question to the user about themselves ("who are you?", ABISS §3.2.6 missing user knowledge).

    ``"Could you tell me a bit more about what you need?"``, ``"?"``, ``"Is there anything else I should
    know?"`` -> True; ``"What do you mean by recent?"`` -> False. Both simulated users refuse such a
    clarification with :func:`~.base.refusal_text` before reading the sample (ABISS §5.2 "irrelevant").

    Raises:
        TypeError: ``clarification`` is not a string.
    """
    if not isinstance(clarification, str):
        raise TypeError(f"is_content_free: clarification must be a string, got {type(clarification).__name__}")
    words = {_stem(w) for w in _split(clarification) if w not in _STOP and len(w) > 1}
    if words - CONTENT_FREE_STEMS:
        return False
    return technical_cue(clarification)[0] is None and not _ABOUT_USER.search(clarification)


def specificity(clarification: str, question: str) -> str:
    """What a clarification adds beyond the question (a clarification that only repeats the
    question cannot earn the hidden knowledge: the red-team contract, ``docs/rewards.md``).

    The clarification *covers* the question when its content stems (stock words of :data:`STOCK_STEMS`
    dropped) contain the question's content stems in order, or at least :data:`COVER_SHARE` of them and
    at least three. Then:

    * ``"echo"``: it covers the question (or has exactly the question's content stems, in any order)
      and adds no content stem of its own, and it offers no alternatives that each add words ("Can you
      clarify: <question>?", "What do you mean by '<question>'?", the question itself, its words
      shuffled). Labelled ``irrelevant``, whatever the group.
    * ``"unfocused"``: it covers the question but adds words of its own (or alternatives). Only what it
      adds counts as evidence: the question's own words (the anchors) prove nothing.
    * ``"focused"``: it does not cover the question (it picks out part of it, "what do you mean by
      recent?", or asks something else). The ordinary rules decide.

    Args:
        clarification: the agent's clarification.
        question: the sample's question.
    Returns:
        ``"echo"`` | ``"unfocused"`` | ``"focused"``.
    Raises:
        TypeError: either argument is not a string.
    """
    for nm, v in (("clarification", clarification), ("question", question)):
        if not isinstance(v, str):
            raise TypeError(f"specificity: {nm} must be a string, got {type(v).__name__}")
    q_seq = list(dict.fromkeys(_stem_seq(question)))
    c_seq = _stem_seq(clarification)
    q, c = set(q_seq), set(c_seq)
    if not q:
        return "focused"
    shared = len(c & q)
    contrast = _or_contrast_beyond(clarification, question)
    if c == q and not contrast:   # every question stem and nothing else, in any order
        return "echo"
    covers = _contains_run(c_seq, _stem_seq(question)) or (shared >= 3 and shared >= COVER_SHARE * len(q))
    if not covers:
        return "focused"
    if c - q or contrast:
        return "unfocused"
    return "echo"


# ----------------------------------------------------------------------------- technical cues

_NUMW = r"(?:\d{1,3}|one|two|three|four|five|six|seven|eight|nine|ten|twenty|few)"
_UNIT = r"(?:credits?|euros?|eur|dollars?|percent|%|years?|points?|hp|seats?|kg|grades?)"
_ATTR = (r"(?:(?:first|last|full|given|family)\s+names?|names?|titles?|ids?|identifiers?|dates?|numbers?|count|totals?|"
         r"amounts?|averages?|values?|details|info|information|e-?mails?|address(?:es)?|ages?|scores?)")
_OUT_VERB = (r"(?:show|shown|showing|display|displayed|include|included|including|return|returned|output|print|add|"
             r"added|see|give|want|need)")

#: (topic, pattern, cut): ``cut`` phrases say nothing about the ambiguity and are blanked before the
#: ambiguity tests; output-column phrases keep their nouns (two similar attributes can be the ambiguity).
_TECH_CUES: tuple[tuple[str, re.Pattern, bool], ...] = tuple((t, re.compile(p, re.IGNORECASE), cut)
                                                              for t, p, cut in (
    ("order", r"\b(?:sort|sorts|sorted|sorting|arrange|arranged|ranked|ranking|"
              r"rank(?=\s+(?:them|it|these|those|by)\b))\b"
              r"(?:\s+(?:them|it|these|those|the\s+[\w'-]+(?:\s+[\w'-]+)?))?"
              r"(?:\s+(?:by|on|according\s+to)\b[^,;:?.!]*)?", True),
    ("order", r"\border(?:ed)?\s+(?:by\b[^,;:?.!]*|them\b|it\b|the\s+(?:results?|rows|list|output|records)\b)", True),
    ("order", r"\b(?:in|what|which|any|particular|specific|certain|some|descending|ascending|alphabetical|reverse|"
              r"chronological|numerical|an?)\s+order(?:ing)?\b", True),
    ("order", r"\bordering\b|\b(?:ascending|descending|alphabetical(?:ly)?)\b|\ba\s*(?:-|to)\s*z\b", True),
    ("order", r"\b(?:highest|lowest|largest|smallest|biggest|newest|oldest|latest|earliest|most|least|best|worst)\b"
              r"(?:\s+[\w'-]+){0,2}?\s+(?:first|last)\b(?!\s+names?\b)", True),
    ("order", r"\b(?:come|comes|go|goes|appear|appears|listed|shown|put)\s+(?:first|last)\b", True),
    ("order", r"\bat\s+the\s+(?:top|bottom)\b|\bon\s+top\b", True),
    ("limit", r"\blimit(?:s|ed|ing)?\b(?!\s+(?:to|by)\s+(?:the\s+|a\s+)?(?!" + _NUMW + r"\b|top\b|first\b)\w)", True),
    ("limit", r"\b(?:top|first|bottom|last)\s+" + _NUMW + r"\b(?!\s+names?\b)", True),
    ("limit", r"\b(?:exactly|only|just|at\s+most|up\s+to|no\s+more\s+than)\s+" + _NUMW
              + r"\b(?!\s*" + _UNIT + r"\b)", True),
    ("limit", r"\bhow\s+many\s+(?:results|rows|records|entries|items|answers|of\s+them|should|do\s+you\s+want|"
              r"would\s+you\s+like)\b", True),
    ("limit", r"\bhow\s+many\b[^?.!]{0,30}\b(?:return|returned|show|shown|list|listed|display|displayed|include|"
              r"included|give|want|need)\b", True),
    ("limit", r"^\W*how\s+many\s+[\w'-]+\W*$", True),
    ("limit", r"\b(?:only|just)\s+(?:the\s+)?(?:one|single|top|first|best|worst|highest|lowest)\b"
              r"(?!\s+names?\b)", True),
    ("limit", r"\bsingle\s+(?:result|row|answer|record|one|value|best|worst|top)\b", True),
    ("limit", r"\ball\s+(?:of\s+)?(?:them|the\s+results|results|rows|matches)\b", True),
    ("limit", r"\bties?\b[^?.!]{0,25}\b(?:include|included|cut|cut-?off|place|position|spot)\b", True),
    ("order", r"\bties?\b", True),
    ("distinct", r"\bduplicat\w*|\bdistinct\b|\bunique\b|\brepeat\w*|\bde-?dup\w*", True),
    ("distinct", r"\b(?:appear|appears|appearing|listed|list|shown|show\s+up|shows\s+up|included|counted|returned|"
                 r"mentioned|occur|occurs|be)\s+(?:only\s+|just\s+|exactly\s+)?(?:once|twice|more\s+than\s+once|"
                 r"multiple\s+times|several\s+times)\b", True),
    ("distinct", r"\b(?:only\s+once|more\s+than\s+once|once\s+each|twice)\b", True),
    ("columns", r"\b(?:columns?|fields?|attributes?)\b|\boutput\b|\bin\s+the\s+results?\b", False),
    ("columns", r"\b(?:what|which)\s+(?:information|info|details|data|properties)\b", False),
    ("columns", r"\b" + _OUT_VERB + r"\s+(?:which|what)\b", False),
    ("columns", r"\b(?:just|only)\s+(?:the\s+|a\s+)?(?:number|count|total|names?|list|ids?|titles?|amounts?)\b", False),
    ("columns", r"\bsingle\s+(?:count|number|figure|total|value)\b", False),
    ("columns", r"\b(?:count|number|total)\s*,?\s+or\s+(?:just\s+|only\s+)?(?:the\s+|a\s+)?"
                r"(?:list|names?|rows|details)\b", False),
    ("columns", r"\b(?:list|names?|rows|details)\s*,?\s+or\s+(?:just\s+|only\s+)?(?:the\s+|a\s+)?"
                r"(?:count|number|total)\b", False),
    ("columns", r"\b" + _ATTR + r"\s+(?:too|as\s+well(?![\s-]*(?!as\b)[a-z])|also)\b", False),
    ("columns", r"\b(?:shown|displayed|included|listed|added)\s+(?:too|as\s+well|also)\b", False),
    ("columns", r"\b(?:next\s+to|alongside|along\s+with)\b", False),
    ("columns", r"\b" + _OUT_VERB + r"\b(?:\s+[\w'-]+){0,6}?\s+" + _ATTR + r"\b", False),
))
#: output-phrase words that are never ambiguity evidence (the nouns of an output phrase are).
_OUTPUT_STEMS = frozenset({"display", "includ", "include", "return", "output", "print", "add", "shown", "next",
                           "alongside", "column", "field", "attribute", "result"})
_OUTPUT_PARTICLES = re.compile(r"\b(?:too|as\s+well|also|just|only|next\s+to|alongside|along\s+with)\b",
                                re.IGNORECASE)
#: phrases that :func:`~.fragments.technical_topic` would take for a topic: a filter ("limited to Physics")
#: and the noun "rank" ("by academic rank").
_FALSE_TOPIC = re.compile(r"\b(?:limit(?:s|ed|ing)?|restrict(?:s|ed|ing)?)\s+(?:to|by)\b|"
                          r"\brank\b(?!\s+(?:them|it|these|those|by)\b)", re.IGNORECASE)


def technical_cue(clarification: str) -> tuple[str | None, str]:
    """The technical topic a clarification asks about, and its text with the topic phrases blanked.

    ABISS §5.2 "Technical": a valid but secondary database concern, e.g. result ordering. Topics are
    those of :data:`~.fragments.TECHNICAL_TOPICS`: ``order`` ("most popular first?", "sorted by date?"),
    ``limit`` ("exactly five?", "just the single worst one?", "how many should I return?"),
    ``distinct`` ("should a student appear twice?", "listed once?") and ``columns`` ("the names too, or
    just the amounts?", "just the number?", "the title next to each grade?"). The earliest cue wins;
    when none of these cues matches, :func:`~.fragments.technical_topic` decides ("limited to Physics"
    is a filter, not a result limit; "their rank" is a noun, not ordering).

    Args:
        clarification: the agent's clarification question.
    Returns:
        ``(topic, rest)``: ``topic`` is ``None`` when nothing matches; ``rest`` is the clarification
        with every ordering / count / duplicates phrase blanked (same length); of an output-column phrase
        only its particles ("too", "as well", "next to") are blanked, its nouns stay.
    Raises:
        TypeError: ``clarification`` is not a string.
    """
    if not isinstance(clarification, str):
        raise TypeError(f"technical_cue: clarification must be a string, got {type(clarification).__name__}")
    best: tuple[int, str] | None = None
    keep = [True] * len(clarification)
    for topic, pat, cut in _TECH_CUES:
        for m in pat.finditer(clarification):
            if m.end() == m.start():
                continue
            if best is None or m.start() < best[0]:
                best = (m.start(), topic)
            spans = [m.span()] if cut else [(m.start() + p.start(), m.start() + p.end())
                                            for p in _OUTPUT_PARTICLES.finditer(m.group())]
            for a, b in spans:
                keep[a:b] = [False] * (b - a)
    rest = "".join(ch if k else " " for ch, k in zip(clarification, keep))
    if best is None:
        return technical_topic(_FALSE_TOPIC.sub(" ", clarification)), rest
    return best[1], rest


# ----------------------------------------------------------------------------- ambiguity cues (ABISS §3.2)

def _rx(*parts: str) -> re.Pattern:
    return re.compile("|".join(parts), re.IGNORECASE)


_OR = _rx(r"\bor\b")
#: the clarification is about the request (not small talk): a request or clarification form.
_REQUEST = _rx(r"\b(?:mean|means|meant|meaning|want|wanted|need|needs|prefer|after|asking|looking\s+for|interested|"
               r"refer\w*|should|shall|must|apply|applies|count(?:s|ed)?\s+as|would\s+you\s+like)\b",
               r"\bis\s+(?:it|that|this)\b", r"\bare\s+(?:they|these|those|we)\b", r"\bdo\s+(?:you|they|we)\b",
               r"\b(?:does|did)\b", r"\b(?:can|could|would|will)\s+you\b", r"\b(?:confirm|clarify|correct|right)\b")
#: asks what a word means or which reading/threshold applies (any ambiguous subcategory; ABISS §5.2 example).
_MEANING = _rx(r"\bmean(?:s|t|ing)?\b", r"\brefer(?:s|red|ring)?\s+to\b", r"\bcounts?\s+as\b",
               r"\bqualif(?:y|ies)\s+as\b", r"\bdefin(?:e|ed|es|ition|itions)\b", r"\bwhat\s+makes\b",
               r"\bin\s+what\s+sense\b", r"\bwhat\s+kind\s+of\b", r"\bthreshold\b", r"\bcut-?off\b",
               r"\binterpret\w*\b", r"\bin\s+mind\b",
               r"\bhow\s+(?:do|would|should)\s+(?:you|i|we)\s+(?:measure|define|decide|judge|read)\b")
#: which definition / evidence holds (conflicting knowledge, ABISS §3.2.7; vagueness).
_DEFINITION = _rx(r"\b(?:which|what|whose)\s+(?:[\w'-]+\s+)?(?:definition|rule|criterion|criteria|formula|"
                  r"interpretation|version|measure|notion|reading|sense|source)s?\b",
                  r"\bevidence\b", r"\b(?:two|both|several|different|conflicting|competing|contradictory)\s+"
                  r"(?:definitions?|rules?|notes?|sources?)\b",
                  r"\b(?:notes?|sources?|definitions?|documents?|docs)\b[^?.!]{0,30}\b(?:disagree|conflict|contradict|"
                  r"differ)\w*")
#: collective vs distributive reading (scope, ABISS §3.2.1).
_SCOPE = _rx(r"\b(?:separately|individually|independently|together|collectively|combined|jointly|altogether|"
             r"in\s+common|common\s+to|share|shares|shared|sharing|per|intersection|overlap)\b", r"\bone\s+by\s+one\b",
             r"\bgroup(?:ed)?\s+by\b", r"\bbroken\s+down\b|\bbreak\s*down\b", r"\bfor\s+each\b",
             r"\bas\s+a\s+(?:whole|group)\b")
_QUANT = _rx(r"\b(?:each|every|all|any)\b", r"\bat\s+least\s+one\b")
#: what a modifier attaches to (attachment, ABISS §3.2.1).
_ATTACH = _rx(r"\b(?:also|too|both|either|apply|applies|applied|applying|restrict\w*|bind\w*|modif\w*|attach\w*|"
              r"cover\w*|condition\w*)\b", r"\bas\s+well\b", r"\blimit(?:ed)?\s+to\b", r"\bgo(?:es)?\s+with\b",
              r"\brefer\w*\s+to\b", r"\b(?:only|just)\s+(?:to\s+|on\s+)?the\b")
#: a question to the user about themselves (missing user knowledge, ABISS §3.2.6).
_ABOUT_USER = _rx(r"\bwho\s+(?:are|r)\s+(?:you|u)\b", r"\bwho\s+you\s+are\b", r"\bwhose\b",
                  r"\b(?:your|ur)\s+(?:own\s+)?(?:full\s+)?(?:name|department|dept|faculty|school|id|identity|"
                  r"student\s+(?:id|number)|number|role|affiliation|program|programme|major|course|office|team|unit|"
                  r"position|job|email|details|account|username)\b",
                  r"\b(?:which|what)\b[^?.!,]{0,30}\b(?:are|were|am)\s+(?:you|u)\b",
                  r"\b(?:which|what|where)\b[^?.!,]{0,30}\bdo\s+you\s+(?:work|study|belong|teach|attend|enrol\w*|"
                  r"come\s+from)\b",
                  r"\b(?:which|what)\b[^?.!,]{0,30}\byou\s+(?:belong|work|study|teach|attend)\b",
                  r"\byour\s+own\b", r"\bsomeone\s+else\b", r"\bfor\s+you\b",
                  r"\babout\s+yourself\b", r"\b(?:identify|introduce)\s+yourself\b",
                  r"\bare\s+you\s+(?:a|an|the)\s+\w+", r"\bare\s+you\s+(?:in|from|with|part\s+of)\b")
#: personal small talk addressed to the user: no informative contribution (ABISS §5.2 "Irrelevant").
_PERSONAL = _rx(r"\bwho\s+are\s+you\b", r"\byourself\b", r"\bpersonally\b", r"\bfavou?rite\b",
                r"\bare\s+you\s+(?!asking|after|looking|interested|referring|thinking\s+of|sure)\w+",
                r"\bhave\s+you\b",
                r"\bdo\s+you\s+(?:study|live|have|own|know|work|like|love|enjoy|think|feel|go|play|teach)\b",
                r"\b(?:your|ur)\s+(?:day|semester|weekend|opinion|hobby|hobbies|life|family)\b",
                r"\bhow\s+(?:are|r)\s+(?:you|u)\b", r"\bhow'?s\s+(?:your|it|life|things)\b")
_SMALL_TALK = _rx(r"\bfavou?rite\b", r"\bhow'?s\b", r"\bhow\s+(?:are|r)\s+(?:you|u)\b", r"\bgoing\b",
                  r"\bfeel\w*\b", r"\bweather\b", r"\b(?:do|did)\s+you\s+(?:like|love|enjoy|think)\b")
_HOW = re.compile(r"\bhow\s+([A-Za-z][\w-]*)", re.IGNORECASE)


def _about_user(clar: str) -> bool:
    """A question about the user's own identity or affiliation (not small talk)."""
    return bool(_ABOUT_USER.search(clar)) and not _SMALL_TALK.search(clar)


def _alternatives_contrast(rest: str, words: set[str], entity: set[str]) -> bool:
    """"X or Y?" whose sides differ in hidden-knowledge ``words``: the alternatives are the readings.

    Every side must say something (a side emptied by a technical phrase is no reading), and the words
    named must include a non-entity one: "the age or the dog's name?" only names the returned entity.
    Pass an empty ``entity`` for entity ambiguity, where the entities are the readings (ABISS §3.2).
    """
    if not _OR.search(rest):
        return False
    sides = [content_stems(side) - _OUTPUT_STEMS for side in _OR.split(rest)]
    hits = [frozenset(side & words) for side in sides]
    return all(sides) and len(set(hits)) > 1 and bool(frozenset().union(*hits) - entity)


def _ambiguity_cue(sub: str | None, clar: str, rest: str, c: set[str], targets: set[str]) -> str | None:
    """The subcategory cue a clarification matches (module docstring), as a reason name, else ``None``.

    ``sub``: the sample's subcategory; ``None`` (unknown) gets only the cues of any ambiguity (definition,
    meaning), as does every subcategory without a cue of its own.
    ``clar``: the clarification; ``rest``: it with technical phrases blanked; ``c``: the content stems
    of ``rest``; ``targets``: the non-entity content stems of the question, the hidden knowledge and the
    interpretations (what an ambiguity question can be about).
    """
    on_target = bool(c & targets)
    how = {_stem(w) for w in _HOW.findall(rest)}
    if sub == "scope" and (_SCOPE.search(rest) or (_QUANT.search(clar) and _OR.search(rest))):
        return "scope"
    if sub == "attachment" and on_target and _ATTACH.search(rest):
        return "attachment"
    if _DEFINITION.search(rest):
        return "definition"
    if (_MEANING.search(rest) and on_target) or (how & targets):
        return "meaning"
    return None


# ----------------------------------------------------------------------------- reply templates

def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def _low(s: str) -> str:
    if s[:2] in ("I ", "I'") or (len(s) > 1 and s[:2].isupper()):
        return s
    return s[:1].lower() + s[1:]


def _end(s: str) -> str:
    s = s.strip()
    return s if s.endswith((".", "!", "?")) else s + "."


def _styled(sentence: str, kind: str, terse: str) -> str:
    """Wrap a plain sentence in the style's opener; ``terse`` is the one-sentence bare form."""
    if kind == "terse":
        return _end(_cap(terse))
    if kind == "casual":
        return "Oh, " + _end(_low(sentence))
    if kind == "formal":
        return "Certainly. " + _end(_cap(sentence))
    return _end(_cap(sentence))


_TECH_SENTENCE = {
    "order": "Please have them {t}",
    "limit": "I want {t}",
    "distinct": "I want {t}",
    "columns": "I'd like to see {t}",
}
_TECH_NONE = {
    "order": "Any order is fine",
    "limit": "I'd like all of them, with no cut-off",
    "distinct": "Repeats are fine, no need to remove them",
    "columns": "Just what my question asks for",
}
#: The reply of an unanswerable sample to a result-format question: (sentence, terse form) as an answerable
#: sample gives it when its gold has no such fragment, or (output columns: every gold has them) when the
#: leakage guard left only the vague form (:func:`~.fragments.vague_text`).
_UNANSWERABLE_TECH = {
    "order": (_TECH_NONE["order"], _TECH_NONE["order"]),
    "limit": (_TECH_NONE["limit"], _TECH_NONE["limit"]),
    "distinct": (_TECH_NONE["distinct"], _TECH_NONE["distinct"]),
    "columns": (_TECH_SENTENCE["columns"].format(t="just what my question asks for"), "just what my question asks for"),
}
_DEFER = {
    "neutral": "That depends on the earlier point, so let's settle that first",
    "terse": "Earlier point first",
    "casual": "Hmm, that hangs on the earlier bit, let's sort that out first",
    "formal": "That depends on the earlier point; I would prefer to settle it first",
}
_GENERIC = {
    "relevant": "I mean it in the plain, everyday sense",
    "technical": "I'd rather leave that detail to you",
    "irrelevant": REFUSALS[0],
}


# ----------------------------------------------------------------------------- the user

class RuleBasedUser:
    """Deterministic rule-based simulated user: ``respond(batch) -> list[UserReply]`` (ABISS §5.2).

    Same inputs give the same outputs; no randomness and no model. Implements
    :class:`~textsql_clarify.simulators.base.UserSimulator`.

    Each :class:`~.base.UserReply` has ``text`` (natural language, no SQL, no unused schema name),
    ``label`` (``relevant`` | ``technical`` | ``irrelevant``, always within ``ALLOWED_LABELS[group]``),
    ``layer`` (``L1`` | ``L2`` for chain matches, else ``None``), ``route`` (``amb`` | ``loc`` | ``una``
    on TIDE samples, else ``None``), ``leak_rejections`` (candidate replies the leakage guard refused)
    and ``meta`` (``reason``; ``topic`` and ``fragment_kind`` for technical replies; no SQL).
    """

    def respond(self, batch: Sequence[UserRequest]) -> list[UserReply]:
        """Answer each request, in order.

        Args:
            batch: requests; may be empty.
        Returns:
            One reply per request, same order and length.
        Raises:
            TypeError: ``batch`` is not a sequence, or an item is not a :class:`UserRequest` (the
                message gives its index), or a clarification is not a string.
        """
        if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
            raise TypeError(f"respond: batch must be a sequence of UserRequest, got {type(batch).__name__}")
        out = []
        for i, req in enumerate(batch):
            if not isinstance(req, UserRequest):
                raise TypeError(f"respond: batch[{i}] must be a UserRequest, got {type(req).__name__}")
            if not isinstance(req.clarification, str):
                raise TypeError(f"respond: batch[{i}].clarification must be a string, "
                                f"got {type(req.clarification).__name__}")
            out.append(self._one(valid_request(req)))  # lone surrogates become U+FFFD
        return out

    # -- stage 1 + 2 for one request
    def _one(self, req: UserRequest) -> UserReply:
        s = req.sample
        kind = style_kind(s.style)
        gold = req.gold_sql or s.gold_sql
        tide = s.chain is not None or s.drift is not None

        # the refusals come first and read the same on every group (module docstring, "No side channels")
        clar = req.clarification
        if asks_for_sql(clar):
            return self._refuse(req, gold, kind, tide, "asks_for_sql")
        if is_identifier_probe(clar, question=with_dialogue(s), hidden_knowledge=user_knowledge(s),
                               schema_identifiers=req.schema_identifiers):
            return self._refuse(req, gold, kind, tide, "identifier_probe")
        if is_content_free(clar):
            return self._refuse(req, gold, kind, tide, "content_free")
        spec = specificity(clar, s.question)
        if spec == "echo":
            return self._refuse(req, gold, kind, tide, "echo")

        topic, rest = technical_cue(clar)
        if s.group == "unanswerable" or (gold is None and not s.gold_withheld):
            # no clarification makes it answerable (label irrelevant, ABISS §5.2); a result-format question
            # gets the no-preference answer an answerable sample without that fragment gets
            if topic is None:
                return self._refuse(req, gold, kind, tide, "unanswerable")
            plain, terse = _UNANSWERABLE_TECH[topic]
            return self._final(req, gold, kind, "irrelevant", None, tide, "unanswerable_technical",
                               [_styled(plain, kind, terse)], {"topic": topic, "fragment_kind": None})
        if s.group == "ambiguous":
            reply = self._ambiguous(req, gold, kind, tide, topic, rest, unfocused=spec == "unfocused")
            if reply is not None:
                return reply
        if topic is not None:
            return self._technical(req, gold, kind, tide, topic)
        return self._refuse(req, gold, kind, tide, "off_target")

    def _ambiguous(self, req: UserRequest, gold: str, kind: str, tide: bool, topic: str | None,
                   rest: str, unfocused: bool = False) -> UserReply | None:
        """The relevant (or personal-refusal, or L2 deferral) reply of an ambiguous sample, else ``None``
        (then the technical topic or the off-target refusal decides). Order as in the module docstring.
        ``unfocused`` (:func:`specificity`): only the words the clarification adds beyond the question
        are evidence, so the question's words are blanked first."""
        s, clar = req.sample, req.clarification
        said = content_stems(rest) - _OUTPUT_STEMS   # every word, for what an attachment particle is said about
        if unfocused:
            clar, rest = _blank_question_words(clar, s.question), _blank_question_words(rest, s.question)
        entity = _gold_table_stems(gold)
        c = content_stems(rest) - _OUTPUT_STEMS

        def relevant(reason: str) -> UserReply:
            return self._final(req, gold, kind, "relevant", None, tide, reason,
                               _relevant_candidates(s.hidden_knowledge, kind), {})

        if s.subcategory == "missing_user_knowledge" and _about_user(clar):
            return relevant("user_knowledge")
        if topic is None and _PERSONAL.search(clar):
            return self._refuse(req, gold, kind, tide, "personal")
        strong, anchors = _hk_words(s, entity)
        q = content_stems(s.question)
        context = q | content_stems(said_before(s))   # the question and the earlier turns (module docstring)
        targets = (context | _knowledge_stems(s)) - entity
        cue = _ambiguity_cue(s.subcategory, clar, rest, c, targets)
        if cue is None and unfocused and s.subcategory == "attachment" and said & targets and _ATTACH.search(rest):
            cue = "attachment"   # the particle is what it adds; what it is said about is the question's words
        if s.chain is not None:
            layer = _chain_layer(c, s.chain, entity, req.l1_resolved)
            if layer is None and cue is not None:   # a cue naming neither layer: the next open layer
                layer = "L2" if req.l1_resolved else "L1"
            if layer == "L2" and not req.l1_resolved:
                return self._final(req, gold, kind, "technical", "L2", tide, "l2_before_l1",
                                   [_end(_DEFER[kind])], {}, route="loc")
            if layer is not None:
                ans = (s.chain.l1 if layer == "L1" else s.chain.l2).answer
                return self._final(req, gold, kind, "relevant", layer, tide, f"chain_{layer.lower()}",
                                   _relevant_candidates(ans, kind), {})
        hit = c & strong
        connected = bool(c & context) or bool(_OR.search(rest)) or bool(_REQUEST.search(rest))
        hk = content_stems(s.hidden_knowledge) - (q if unfocused else set())
        restates = bool(hk) and len(c & hk) >= max(min(2, len(hk)), 0.6 * len(hk))   # "can you confirm: <the fact>?"
        readings = _alternatives_contrast(rest, strong, set() if s.subcategory == "entity_ambiguity" else entity)
        if (hit - entity and connected) or restates or readings:
            return relevant("hidden_knowledge" if hit else "ambiguous_term")
        if cue is not None:
            return relevant("ambiguous_term" if c & anchors else cue)
        if topic is None and (hit or c & anchors) and connected:
            return relevant("hidden_knowledge" if hit else "ambiguous_term")
        return None

    def _refuse(self, req, gold, kind, tide, reason) -> UserReply:
        """The ``irrelevant`` refusal: :func:`~.base.refusal_text` of the clarification, whatever the sample.

        It skips the leakage guard: a sentence that is the same for every sample carries nothing of any
        sample, while a guard that rejected it on some databases (a column named ``help``) would make the
        refusal's wording depend on the database."""
        return self._final(req, gold, kind, "irrelevant", None, tide, reason, [refusal_text(req.clarification)], {},
                           guard=False)

    def _technical(self, req, gold, kind, tide, topic) -> UserReply:
        meta = {"topic": topic}
        if gold is None:   # a withheld gold (mini-interact): no fragment to state, and "any order is fine" may be false
            meta["fragment_kind"] = None
            return self._final(req, gold, kind, "technical", None, tide, "technical_withheld", [], meta)
        try:
            frags = [f for f in gold_fragments(gold, req.schema_identifiers) if f.kind == topic]
        except SQLParseError:
            meta["fragment_error"] = True
            frags = []
        if not frags:
            meta["fragment_kind"] = None
            none = _TECH_NONE[topic]
            return self._final(req, gold, kind, "technical", None, tide, "technical", [_styled(none, kind, none)], meta)
        frag = _pick_fragment(frags, content_stems(req.clarification))
        meta["fragment_kind"] = frag.kind
        tmpl = _TECH_SENTENCE[topic]
        if frag.kind == "order":
            texts = _order_variants(frag)
        elif frag.kind == "distinct":
            texts = [frag.text, "no repeats, with each one listed once"]
        else:
            texts = [frag.text, vague_text(frag)]
        cands = [_styled(tmpl.format(t=t), kind, t) for t in dict.fromkeys(texts)]
        return self._final(req, gold, kind, "technical", None, tide, "technical", cands, meta)

    def _final(self, req: UserRequest, gold: str | None, kind: str, label: str, layer: str | None, tide: bool,
               reason: str, candidates: list[str], meta: dict, route: str | None = None,
               guard: bool = True) -> UserReply:
        """Run the leakage guard over the candidates, then the label's generic text, then the clarification's
        refusal (:func:`~.base.refusal_text`). ``guard=False`` (the refusals): the first candidate as is."""
        if label not in ALLOWED_LABELS[req.sample.group]:  # pragma: no cover - guarded by construction
            raise AssertionError(f"label {label!r} outside ABISS limits for group {req.sample.group!r}")
        generic = _GENERIC[label]
        refusal = refusal_text(req.clarification)
        cands = list(candidates) + ([_styled(generic, kind, generic), refusal] if guard else [])
        rejected = 0
        text = cands[0] if not guard else cands[-1]
        reasons: list[str] = []
        knows = user_knowledge(req.sample)
        context = with_dialogue(req.sample)   # what the user said or was told before: licensed
        for cand in cands if guard else ():
            r = leakage_reasons(cand, question=context, clarification=req.clarification,
                                schema_identifiers=req.schema_identifiers, gold_sql=gold, hidden_knowledge=knows)
            if not r:
                text = cand
                break
            rejected += 1
            reasons.extend(x for x in r if x not in reasons)
        if route is None and tide:
            route = {"relevant": "amb", "technical": "loc", "irrelevant": "una"}[label]
        m = {"reason": reason, **meta}
        if reasons:
            m["leak_reasons"] = reasons
        return UserReply(text=text, label=label, layer=layer, route=route, leak_rejections=rejected, meta=m)


# ----------------------------------------------------------------------------- helpers

def user_knowledge(s: Sample) -> str:
    """What the user knows and may say: the hidden knowledge and, on chain samples, both layers' answers."""
    parts = [s.hidden_knowledge or ""]
    if s.chain is not None:
        parts += [s.chain.l1.answer, s.chain.l2.answer]
    return "\n".join(p for p in parts if p)


def _relevant_candidates(knowledge: str, kind: str) -> list[str]:
    k = knowledge.strip()
    first = re.split(r"(?<=[.!?])\s+", k, maxsplit=1)[0] if k else k
    styled = _styled(k, kind, first)
    plain = _end(_cap(k))
    return [styled] if styled == plain else [styled, plain]


@functools.lru_cache(maxsize=2048)
def _gold_table_stems(gold: str | None) -> frozenset[str]:
    """Stems of every table name in the gold SQL (entity words, not the ambiguous term); cached per gold."""
    if not gold:
        return frozenset()
    try:
        tree = parse_sql(gold)
    except SQLParseError:
        return frozenset()
    return frozenset(_stem(w) for t in tree.find_all(exp.Table) for w in _split(t.name))


def _knowledge_stems(s: Sample) -> set[str]:
    """Content stems of the hidden knowledge and of every interpretation's knowledge and description."""
    return content_stems(" ".join([s.hidden_knowledge] + [f"{i.hidden_knowledge} {i.description}"
                                                            for i in s.interpretations]))


def _hk_words(s: Sample, entity: set[str]) -> tuple[set[str], set[str]]:
    """(strong, anchor) stems of the hidden knowledge and interpretations (see module docstring)."""
    targets = [s.hidden_knowledge] + [f"{i.hidden_knowledge} {i.description}" for i in s.interpretations]
    sets = [content_stems(t) for t in targets if t.strip()]
    if not sets:
        return set(), set()
    union = set().union(*sets)
    shared = set.intersection(*sets) if len(sets) > 1 else set()
    q = content_stems(s.question)
    strong = union - q - shared
    anchors = (union & q) - entity
    return strong, anchors


def _chain_layer(c: set[str], chain: Chain, entity: set[str], l1_resolved: bool) -> str | None:
    """Which chain layer a clarification targets: overlap with each layer's own words (TIDE §2.1)."""
    w1 = content_stems(f"{chain.l1.question} {chain.l1.answer} {chain.l1.alternative}") - entity
    w2 = content_stems(f"{chain.l2.question} {chain.l2.answer} {chain.l2.alternative}") - entity
    both = w1 & w2
    s1, s2 = len(c & (w1 - both)), len(c & (w2 - both))
    if s1 == 0 and s2 == 0:
        return None
    if s1 == s2:
        return "L2" if l1_resolved else "L1"
    return "L1" if s1 > s2 else "L2"


_DIRECTION = {
    True: ("from highest to lowest", "largest first", "in descending order"),
    False: ("from lowest to highest", "smallest first", "in ascending order"),
}


def _order_variants(frag: Fragment) -> list[str]:
    """Wordings of an ORDER BY fragment, most to least specific, so that a direction word that happens
    to be a column name (Spider's ``stadium.highest``) does not silence the whole answer."""
    desc = re.search(r"\bDESC\b", frag.sql, re.IGNORECASE) is not None
    key = frag.text.split(" by ", 1)[1] if " by " in frag.text else ""
    a, b, c = _DIRECTION[desc]
    with_key = [frag.text, f"sorted by {key}, {b}", f"sorted by {key} {c}"] if key else [frag.text]
    return with_key + [vague_text(frag), f"sorted {b}", f"sorted {c}"]


def _pick_fragment(frags: list[Fragment], c: set[str]) -> Fragment:
    """The fragment whose words overlap the clarification most; the first on ties (one atomic node)."""
    best, score = frags[0], -1
    for f in frags:
        sc = len(c & content_stems(f.text))
        if sc > score:
            best, score = f, sc
    return best
