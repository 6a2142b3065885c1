"""Stock phrases of a dataset's hidden knowledge: what recurs across many samples' rationales says nothing
about any one of them, so the FB judges do not score it.

A rationale written from a template ("The database has no singer table: that part of the data is not kept
at all.") shares its fixed words with every sample of that template; a constant refusal made of those words
would match them all without reading the sample. The FB rule (ABISS §5.3, set out in
:mod:`textsql_clarify.rewards.feedback`) therefore strips such phrases as it strips the question's words.

A **phrase** is a run of 2 to 5 words (:data:`NGRAM_SIZES`) inside one clause (punctuation ends a clause),
each word lower-cased and lightly stemmed (:func:`~.words._stem`: "singers" and "singer" are one word). Its
**document frequency** (a phrase holding a number never counts: numbers are the sample's data) is the number
of documents whose text holds it (a document counts once): :func:`stock_phrases` takes one document per
rationale, :func:`corpus_stock` one per source database (its rationales together). A phrase is **stock** when
that number exceeds ``max(MIN_DOCS, SHARE * documents)`` (:data:`MIN_DOCS` 3, :data:`SHARE` 3 %): a constant
made of phrases below that bound can match at most 3 % of the documents, which on a corpus with one unanswerable sample in
two earns at most 0.015 of return, inside the red team's margin of 0.02 (``docs/rewards.md``).

A content word of a text is **stock-covered** in it when every one of its occurrences lies inside a stock
phrase (:meth:`StockPhrases.covered`): "kept" in "that part of the data is not kept at all", not "singer" in
"the database has no singer table" unless "singer table" itself recurs that often. The judges leave the
covered stems out of both sides (the hidden knowledge's own words and the words the feedback adds), while
the text itself, negation cues included, is still parsed whole for its claims.

The table is computed once per dataset, deterministically (it depends only on the multiset of rationales,
not on their order), and cached per process (:func:`corpus_stock`); the env gives it to its judge when it
is built (:meth:`~textsql_clarify.rewards.feedback.LexicalFeedbackJudge.use_corpus`).
"""
from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

from .words import _norm, _stem

__all__ = ["StockPhrases", "stock_phrases", "corpus_stock", "rationales", "source_of", "NGRAM_SIZES", "MIN_DOCS",
           "SHARE"]

#: Phrase lengths in words (both ends included).
NGRAM_SIZES = (2, 5)
#: A phrase in more than ``max(MIN_DOCS, SHARE * rationales)`` rationales is stock.
MIN_DOCS = 3
SHARE = 0.03

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_CLAUSE = re.compile(r"[.,;:!?()\[\]\"]+|\s-\s|\s\u2014\s")


def _clauses(text: str) -> list[list[str]]:
    """The text's clauses, each as its list of stemmed words."""
    out = []
    for part in _CLAUSE.split(_norm(text)):
        ws = [_stem(w) for w in _WORD.findall(part)]
        if ws:
            out.append(ws)
    return out


def _ngrams(words: list[str]) -> Iterable[tuple[int, int, tuple[str, ...]]]:
    lo, hi = NGRAM_SIZES
    for n in range(lo, hi + 1):
        for i in range(len(words) - n + 1):
            yield i, n, tuple(words[i:i + n])


@dataclass(frozen=True)
class StockPhrases:
    """The stock phrases of one dataset's rationales.

    Attributes:
        phrases: the stock phrases, each a tuple of stemmed words (2 to 5 of them; a table built by hand, such
            as the missing-schema recipe's template words, may also hold single words).
        documents: the rationales counted (unanswerable samples with a non-empty hidden knowledge).
        limit: the document frequency a phrase must exceed to be stock (``max(MIN_DOCS, SHARE * documents)``).
    """

    phrases: frozenset[tuple[str, ...]]
    documents: int
    limit: float
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def covered(self, text: str) -> frozenset[str]:
        """Stems of ``text`` whose every occurrence lies inside a stock phrase (module doc).

        Args:
            text: a feedback or a hidden knowledge.
        Returns:
            The covered stems (empty when no phrase is stock). Cached per text for hidden knowledge sized
            inputs (at most 4,096 texts per table).
        """
        if not self.phrases:
            return frozenset()
        hit = self._memo.get(text)
        if hit is not None:
            return hit
        inside: set[str] = set()
        outside: set[str] = set()
        for words in _clauses(text):
            cov = [False] * len(words)
            for i, n, g in _ngrams(words):
                if g in self.phrases:
                    for k in range(i, i + n):
                        cov[k] = True
            for k, w in enumerate(words):  # a table may also hold single words (a template's literal words)
                if (w,) in self.phrases:
                    cov[k] = True
            for w, c in zip(words, cov):
                (inside if c else outside).add(w)
        out = frozenset(inside - outside)
        if len(self._memo) < 4096:
            self._memo[text] = out
        return out

    def merged(self, other: "StockPhrases") -> "StockPhrases":
        """The union of two tables (a rationale that two loaded datasets share is judged with both)."""
        if other is self or not other.phrases:
            return self
        if not self.phrases:
            return other
        return StockPhrases(self.phrases | other.phrases, self.documents + other.documents,
                            min(self.limit, other.limit))


#: The empty table: nothing is stock (a judge without a dataset, or a sample of no loaded dataset).
NO_STOCK = StockPhrases(frozenset(), 0, float("inf"))


def stock_phrases(texts: Iterable[str], *, share: float = SHARE, min_docs: int = MIN_DOCS) -> StockPhrases:
    """The stock phrases of a list of rationales (module doc).

    Args:
        texts: hidden knowledge texts, one per sample (repeats count: two samples with one rationale give that
            rationale's phrases a frequency of 2); empty texts are skipped.
        share: the share (0..1) of the rationales a phrase must exceed, with ``min_docs`` the count it must.
    Returns:
        A :class:`StockPhrases` (its ``phrases`` empty when nothing recurs enough).
    Raises:
        ValueError: ``share`` outside 0..1 or ``min_docs`` below 0.
    """
    if not 0 <= share <= 1 or min_docs < 0:
        raise ValueError(f"stock_phrases: share must be in 0..1 and min_docs >= 0, got {share!r}, {min_docs!r}")
    df: Counter = Counter()
    docs = 0
    for t in texts:
        if not t or not t.strip():
            continue
        docs += 1
        # a phrase holding a number is data, not a template's words ("of the 15 courses"): never stock
        df.update({g for words in _clauses(t) for _i, _n, g in _ngrams(words) if not any(w.isdigit() for w in g)})
    limit = max(float(min_docs), share * docs)
    return StockPhrases(frozenset(g for g, c in df.items() if c > limit), docs, limit)


def source_of(sample) -> str:
    """The database a sample's question is about: ``provenance["source_db_id"]`` (a generated sample on a
    derived copy names its source there), else its ``db_id``."""
    prov = getattr(sample, "provenance", None) or {}
    src = prov.get("source_db_id") if isinstance(prov, dict) else None
    return str(src or sample.db_id)


def rationales(samples: Iterable) -> list[str]:
    """The hidden knowledge of the samples the FB judge compares against: unanswerable, with a stated rationale,
    stripped. Samples of other groups (an ambiguous sample's hidden knowledge is its intended reading) and
    unanswerable ones without a rationale are left out."""
    return [s.hidden_knowledge.strip() for s in samples
            if getattr(s, "group", None) == "unanswerable" and (s.hidden_knowledge or "").strip()]


def _units(samples: Iterable) -> list[str]:
    """One text per source database (:func:`source_of`): its rationales joined by newlines, in sorted order."""
    by: dict[str, list[str]] = {}
    for s in samples:
        if getattr(s, "group", None) == "unanswerable" and (s.hidden_knowledge or "").strip():
            by.setdefault(source_of(s), []).append(s.hidden_knowledge.strip())
    return ["\n".join(sorted(v)) for _k, v in sorted(by.items())]


_CACHE: "OrderedDict[tuple, StockPhrases]" = OrderedDict()
_LOCK = threading.Lock()


def corpus_stock(samples: Iterable) -> StockPhrases:
    """:func:`stock_phrases` of a dataset, counted per source database: the unit is the rationales of one
    database (:func:`source_of`), so a phrase is stock when the rationales of more than ``max(MIN_DOCS,
    SHARE * databases)`` databases hold it. Many questions about one element of one database share its name
    and data ("the weight of pets" in thirty rationales on ``pets_1``): that is what their rationales are
    about, not a template. A template's words recur across databases.

    Cached per process by the per-database texts (at most 16 datasets), so that the sub-envs of a vector env and
    repeated ``gym.make`` calls on one dataset compute it once. Deterministic: the same samples in any order
    give the same table."""
    key = tuple(_units(samples))
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    table = stock_phrases(key)
    with _LOCK:
        _CACHE[key] = table
        while len(_CACHE) > 16:
            _CACHE.popitem(last=False)
    return table
