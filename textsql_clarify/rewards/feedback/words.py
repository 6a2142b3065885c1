"""Words of a feedback text: tokens, light stems and content words, shared by the FB judges.

The FB rule (ABISS §5.3; the rule is set out in :mod:`textsql_clarify.rewards.feedback`) compares an
explanation with the hidden knowledge word by word: :func:`content_words` gives the stems that carry
meaning, :func:`added_words` the stems an explanation adds beyond the question and stock refusal words,
and :func:`novel_recall` the share of the hidden knowledge's own stems (those not in the question) that
the explanation adds (the score of the lexical judge; :func:`lexical_recall` is the older score that
also counted the question's words, so that an echo of the question scored). Pure text functions: no
database, no model.
"""
from __future__ import annotations

import re

from ...text import plural_stem

__all__ = ["content_words", "lexical_recall", "added_words", "novel_recall", "residual_text", "STOCK_WORDS",
           "REFUSAL_STOCK"]

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


#: Words of stock refusal sentences ("I cannot answer: ...", "The database does not contain ...", "Sorry,
#: the required data is not available"): saying them adds nothing about *why* a question is unanswerable.
#: Together with :data:`_STOP` and :data:`_GENERIC` they are removed before an explanation is compared with
#: the hidden knowledge. Relationship words (``link``) are not stock words: a missing link is a reason.
STOCK_WORDS = frozenset("""answer answerable unanswerable question database data information contain contains
containing store stores storing record records recording available availability provide provided provides
include includes including exist exists existing existed missing absent lack lacks lacking sorry unfortunately
apologies apologise apologize afraid unable able possible impossible need needs needed required require requires
requirement know known want wants wanted look looking lookup help request requested query queries sql schema
found retrieve retrieved tell say says said given here appear appears present currently something anything
nothing everything related regarding concerning asked asking like would please sure really hold holds held keep
keeps track tracks capture captured enough sufficient necessary relevant specific certain particular actually
simply just explain explained reason reasons due none nowhere anywhere everywhere both exactly system dataset
response respond reply sentence text provide shown showing displayed display output result results return
returned returns compute computed calculate calculated determined sense neither comparison compare way means""".split())


def _norm(text: str) -> str:
    return text.lower().replace("\u2019", "'").replace("`", "'")


def _stem(word: str) -> str:
    """Light stemmer: possessive, plural, ``-ing``; relationship words map to ``"link"``."""
    w = word.lower().strip("'")
    if w.endswith("'s"):
        w = w[:-2]
    if w in _REL:
        return "link"
    if w.endswith("ing") and len(w) > 5:  # no plural suffix ends in "ing", so checking it first is safe
        return w[:-3]
    return plural_stem(w)


def _split_ident(name: str) -> list[str]:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w]


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(_norm(text))


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


_STOCK_STEMS = frozenset(_stem(w) for w in STOCK_WORDS) | STOCK_WORDS

#: Stems of a refusal that names nothing in particular, left out of both sides of the comparison (the
#: feedback's added words and the hidden knowledge's own words) on every dataset, as the corpus's stock
#: phrases are (:mod:`~textsql_clarify.rewards.feedback.stock`), for datasets too small to have a stock table
#: (the embedded set is one database): the relationship stem ``link`` ("There is no link between the
#: tables" says a link is missing, not which one; what it would link is the content, and a missing link is
#: still recognised by :func:`~textsql_clarify.rewards.feedback.claims.names_missing_link`) and vague nouns
#: for "what the question needs" ("That part of the data is not kept at all"). Unlike :data:`STOCK_WORDS`
#: they still count in the claim checks (a shotgun "no link ..." claim stays off topic, a feedback that says
#: the missing link exists still contradicts the hidden knowledge).
REFUSAL_STOCK = frozenset({"link", "part", "portion", "piece", "aspect", "bit", "entity", "fact"})


_NUM = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")


def _stems_and_numbers(text: str) -> frozenset[str]:
    """Content stems plus every number ("18-30" gives 18 and 30: numbers are content at any length)."""
    return frozenset(content_words(text)) | frozenset(_NUM.findall(_norm(text)))


def _question_stems(question: str) -> frozenset[str]:
    return _stems_and_numbers(question)


def added_words(feedback: str, question: str, exclude: frozenset[str] | set[str] = frozenset()) -> frozenset[str]:
    """Content stems (and numbers) of ``feedback`` that are neither the question's nor stock or generic words.

    This is what an explanation says beyond restating the question (the FB rule judges only this part):
    an echo of the question, or the question wrapped in a stock refusal ("I cannot answer: <question>",
    "The database does not contain <question words>"), adds nothing.

    The refusal-stock stems (:data:`REFUSAL_STOCK`) never count either.

    Args:
        feedback: the agent's explanation. question: the sample's question.
        exclude: further stems that do not count (the FB judges pass the words of the schema's table and
            column names: listing the schema is no explanation either).
    Returns:
        The stems (possibly empty).
    """
    return (_stems_and_numbers(feedback) - _question_stems(question) - _GENERIC - _STOCK_STEMS - REFUSAL_STOCK
            - frozenset(exclude))


def novel_recall(feedback: str, hidden_knowledge: str, question: str,
                 exclude: frozenset[str] | set[str] = frozenset(),
                 feedback_exclude: frozenset[str] | set[str] | None = None) -> float | None:
    """Share (0..1) of the hidden knowledge's own content stems that the feedback adds beyond the question.

    The hidden knowledge's own stems are its content stems less the question's, generic and stock words
    (for "Tuition fees are not recorded anywhere: there is no fee or payment table or column" against
    "Tuition fees paid by each Economics student": ``{"payment"}``). The feedback counts through
    :func:`added_words` only, so restating the question scores 0. ``exclude``: as for :func:`added_words`;
    ``feedback_exclude``: the stems left out of the feedback's side instead (``None``: ``exclude``; the judges
    add the feedback's own stock-covered stems there, :mod:`~textsql_clarify.rewards.feedback.stock`).

    Returns:
        The recall, or ``None`` when the hidden knowledge has no stem of its own (it only restates the
        question's words: nothing beyond the question can be matched).
    """
    need = (_stems_and_numbers(hidden_knowledge) - _question_stems(question) - _GENERIC - _STOCK_STEMS - REFUSAL_STOCK
            - frozenset(exclude))
    if not need:
        return None
    fb_ex = exclude if feedback_exclude is None else feedback_exclude
    return len(need & added_words(feedback, question, fb_ex)) / len(need)


def residual_text(text: str, question: str, exclude: frozenset[str] | set[str] = frozenset()) -> str:
    """The words of ``text`` (in order) whose stems :func:`added_words` keeps: what the text says beyond
    the question and stock refusal words (and ``exclude``), as the MiniLM judge embeds it. ``""`` for an echo."""
    keep = added_words(text, question, exclude)
    out = []
    for w in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", _norm(text)):
        if w in keep or (w not in _STOP and len(w) >= 3 and _stem(w) in keep):
            out.append(w)
    return " ".join(out)
