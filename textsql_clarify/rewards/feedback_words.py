"""Words of a feedback text: tokens, light stems and content words, shared by the FB judges.

The FB rule (ABISS §5.3; the rule is set out in :mod:`textsql_clarify.rewards.feedback`) compares an
explanation with the hidden knowledge word by word: :func:`content_words` gives the stems that carry
meaning and :func:`lexical_recall` the share of the hidden knowledge's stems that the explanation repeats
(the score of the lexical judge). Pure text functions: no database, no model.
"""
from __future__ import annotations

import re

from ..text import plural_stem

__all__ = ["content_words", "lexical_recall"]

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
