"""How well a user's clarification reply supports each candidate SQL: items named for or against, per candidate.

A clarification pays only when the reply tells the candidates apart (ABISS §5: the user answers a relevant
question with the hidden knowledge that selects the intended reading). AmbiQT's simulated replies name *both*
readings, one of them negated ("I want the average horsepower computed from the individual cars data records
themselves, not read from the precomputed cars data horsepower summary table"; the readings of Bhaskar et al.
2023, AmbiQT: a summary table against the base table, or a column split into its own table), so a bag-of-words
overlap cannot separate them. This module reads the reply as follows:

1. **Items** of a candidate (:func:`sql_items`): its table names, column names, literal values and aggregate
   applications (``MAX(percentage)``), each with a *phrase*: its words (split at non-alphanumerics, lower case,
   plurals stemmed, ``avg`` / ``sum`` / ``min`` / ``max`` / ``count`` read as ``average`` / ``total`` /
   ``minimum`` / ``maximum`` / ``number``, the words AmbiQT's replies use).
2. **Polarity** of each reply word (:func:`reply_polarity`): ``-1`` from a negation cue ("not", "no", "never",
   "without", "n't", "instead of", "rather than") to the end of its clause (``, . ; : ! ?`` or "but"), else ``+1``.
3. **Mentions** (:func:`item_polarity`): the reply is matched greedily, longest phrase first, against the phrases of
   all candidates' items, so "cars data horsepower" names the table ``cars_data_horsepower`` and not ``cars_data``;
   an item's polarity is the sign of the sum of its mentions' polarities (``0`` when never named).
4. **Support** (:func:`reply_support`): ``P_k`` = the sum of the polarities of candidate ``k``'s items. Items no
   reply names add 0, so a longer candidate gains nothing from its length (the old overlap ``|W(c) ∩ W(t)| / |W(c)|``
   favoured short candidates), and items every candidate shares cancel in the comparisons below.

Only the reply text and the candidate SQLs enter: nothing of the gold.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..text import plural_stem

__all__ = ["sql_items", "reply_polarity", "item_polarity", "reply_support", "reply_spans", "distinct_items",
           "phrase_words", "Item"]

#: an item: ``(kind, name)`` with kind ``table`` | ``column`` | ``value`` | ``agg``
Item = tuple
_AGG = {"avg": "average", "sum": "total", "min": "minimum", "max": "maximum", "count": "number"}
_WORD = re.compile(r"[0-9A-Za-z]+")
_TOKEN = re.compile(r"[0-9A-Za-z]+|[,.;:!?]")
_NEG_ONE = frozenset({"not", "no", "never", "without", "nor"})
_NEG_TWO = frozenset({("instead", "of"), ("rather", "than")})
_CLAUSE_END = frozenset({",", ".", ";", ":", "!", "?", "but"})


def phrase_words(text: str) -> tuple[str, ...]:
    """The phrase of an identifier or a reply fragment: its alphanumeric words, lower case, plurals stemmed
    (``text.plural_stem``), aggregate abbreviations spelled out (``avg_age`` -> ``("average", "age")``)."""
    return tuple(_AGG.get(w, plural_stem(w)) for w in (m.lower() for m in _WORD.findall(text)))


def sql_items(sql: str) -> dict[Item, tuple[str, ...]]:
    """The items of a SQL string with their phrases (module doc, step 1), read with sqlglot (SQLite dialect).

    Returns:
        ``{(kind, name): phrase}``; table aliases are not items (``t1`` names nothing). A SQL that sqlglot cannot
        parse gives one ``("word", w)`` item per alphanumeric word.
    """
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:  # noqa: BLE001 - an unparsable candidate is read as words
        return {("word", w): (w,) for w in phrase_words(sql)}
    items: dict[Item, tuple[str, ...]] = {}

    def add(kind: str, name: str) -> None:
        words = phrase_words(name)
        if words:
            items[(kind, " ".join(words))] = words

    for t in tree.find_all(exp.Table):
        add("table", t.name)
    for c in tree.find_all(exp.Column):
        if c.name:
            add("column", c.name)
    for lit in tree.find_all(exp.Literal):
        add("value", lit.this)
    for fn in tree.find_all(exp.AggFunc):
        col = fn.find(exp.Column)
        key = fn.key.lower()
        if col is not None and col.name and key in _AGG:
            add("agg", f"{key} {col.name}")
    return items


def reply_polarity(reply: str) -> list[tuple[str, int]]:
    """The reply's words with their polarity (module doc, step 2): ``[(word, +1 | -1)]`` in order, the words as
    :func:`phrase_words` spells them; punctuation and the cues themselves are dropped."""
    toks = [t.lower() for t in _TOKEN.findall(re.sub(r"n't\b", " not", reply))]
    out: list[tuple[str, int]] = []
    neg, i = False, 0
    while i < len(toks):
        t = toks[i]
        if t in _CLAUSE_END:
            neg = False
        elif t in _NEG_ONE:
            neg = True
        elif i + 1 < len(toks) and (t, toks[i + 1]) in _NEG_TWO:
            neg, i = True, i + 1
        else:
            out.append((_AGG.get(t, plural_stem(t)), -1 if neg else 1))
        i += 1
    return out


def reply_spans(reply: str) -> tuple[str, str]:
    """``(for, against)``: the reply's words outside and inside negated clauses (:func:`reply_polarity`), each
    joined by spaces (``""`` where there is none)."""
    pol = reply_polarity(reply)
    return " ".join(w for w, p in pol if p > 0), " ".join(w for w, p in pol if p < 0)


def item_polarity(reply: str, phrases: dict[Item, tuple[str, ...]]) -> dict[Item, int]:
    """Each item's polarity in the reply (module doc, step 3): longest-phrase-first greedy matching of the reply's
    words against ``phrases``; items sharing a phrase are named together. Items never named are absent."""
    by_phrase: dict[tuple[str, ...], list[Item]] = {}
    for it, ph in phrases.items():
        by_phrase.setdefault(ph, []).append(it)
    lengths = sorted({len(p) for p in by_phrase}, reverse=True)
    pol = reply_polarity(reply)
    words = [w for w, _ in pol]
    total: dict[Item, int] = {}
    i = 0
    while i < len(words):
        for n in lengths:
            ph = tuple(words[i:i + n])
            if len(ph) == n and ph in by_phrase:
                for it in by_phrase[ph]:
                    total[it] = total.get(it, 0) + pol[i][1]
                i += n
                break
        else:
            i += 1
    return {it: int(np.sign(v)) for it, v in total.items()}


def distinct_items(cands: Sequence[dict[Item, tuple[str, ...]]]) -> list[list[Item]]:
    """Per candidate, its items that not every candidate has (the common core dropped), sorted."""
    core = set.intersection(*(set(c) for c in cands)) if cands else set()
    return [sorted(set(c) - core) for c in cands]


def reply_support(reply: str, cands: Sequence[dict[Item, tuple[str, ...]]]) -> tuple[np.ndarray, np.ndarray, int]:
    """How well ``reply`` supports each candidate over the others (module doc, step 4).

    Args:
        reply: the user's reply. cands: each candidate's :func:`sql_items`.
    Returns:
        ``(support, wins, named)``: two float32 arrays of shape ``(K,)`` in ``[-1, 1]`` and an int.
        ``support[k] = (P_k - mean_{j != k} P_j) / max(1, named)``, the mean pairwise preference of ``k`` over the
        others (``P_k - P_j`` is the polarity sum over the items ``k`` has and ``j`` lacks minus the reverse, so
        shared items cancel); ``wins[k] = mean_{j != k} sign(P_k - P_j)``; ``named`` = the items of any candidate
        the reply names. A reply that names no item gives zeros everywhere.
    """
    k = len(cands)
    phrases: dict[Item, tuple[str, ...]] = {}
    for c in cands:
        phrases.update(c)
    pol = item_polarity(reply, phrases)
    p = np.array([sum(pol.get(it, 0) for it in c) for c in cands], np.float64)
    if k < 2:
        return np.zeros(k, np.float32), np.zeros(k, np.float32), len(pol)
    others = (p.sum() - p) / (k - 1)
    support = (p - others) / max(1, len(pol))
    wins = np.array([np.mean([np.sign(p[i] - p[j]) for j in range(k) if j != i]) for i in range(k)])
    return np.clip(support, -1, 1).astype(np.float32), wins.astype(np.float32), len(pol)
