"""The offline FB judges: the shared rule with a lexical or a MiniLM similarity score (ABISS §5.3).

:class:`LexicalFeedbackJudge` scores by content-word recall, :class:`SemanticFeedbackJudge` by MiniLM
cosine similarity (falling back to the lexical judge when MiniLM cannot load). Both apply the rule set
out in :mod:`textsql_clarify.rewards.feedback`, with the thresholds calibrated on
``tests/fixtures/probe_feedback.jsonl`` (``docs/simulator.md``, "Feedback judge").
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ...samples import Sample
from .claims import (affirmed_missing, missing_claims, names_missing_element, number_conflicts,
                              singles_out_missing, unsupported_claims)
from .minilm import load_minilm
from .schema import _structure, existing_claimed_missing
from .verdict import FeedbackVerdict, _check_args, _is_sql
from .words import added_words, novel_recall, residual_text

__all__ = ["LexicalFeedbackJudge", "SemanticFeedbackJudge", "MINILM_THRESHOLD", "LEXICAL_THRESHOLD"]

#: Cosine-similarity threshold of :class:`SemanticFeedbackJudge` (MiniLM, unit-normalised embeddings).
#: Calibrated on ``tests/fixtures/probe_feedback.jsonl``; see ``docs/simulator.md`` "Feedback judge".
MINILM_THRESHOLD = 0.35
#: Content-word recall threshold of :class:`LexicalFeedbackJudge`, calibrated the same way.
LEXICAL_THRESHOLD = 0.225


def _assess(sample: Sample, feedback: str, schema_identifiers: Iterable[str], judge: str,
            score_fn: Callable[[str, str, str, frozenset[str]], float], threshold: float) -> FeedbackVerdict:
    """The shared rule of the offline judges (module doc); ``score_fn(feedback, hk, question, schema_words)`` is the
    similarity of what the feedback adds beyond the question and the schema's names to what the hidden knowledge
    adds (0 when the feedback adds nothing)."""
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
    contra += [f"unsupported:{h}" for h in unsupported_claims(fb_claims, hk, sample.question)]
    named = (names_missing_element(fb_claims, hk_claims, idents, sample.question)
             or singles_out_missing(feedback, fb_claims, hk_claims, idents, sample.question))
    schema_words = frozenset(w for ident in idents for w in ident)
    added = added_words(feedback, sample.question, schema_words)
    score = float(score_fn(feedback, hk, sample.question, schema_words)) if added else 0.0
    ok = (score >= threshold or named) and not contra
    return FeedbackVerdict(ok, judge, "hidden_knowledge", score, named, tuple(contra), tuple(sorted(added)))


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
                       lambda f, h, q, x: novel_recall(f, h, q, x) or 0.0, self.min_recall)

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
        return _assess(sample, feedback, schema_identifiers, "minilm", self.residual_similarity, self.threshold)

    def residual_similarity(self, feedback: str, hidden_knowledge: str, question: str,
                            exclude: frozenset[str] = frozenset()) -> float:
        """Cosine similarity of what the feedback and the hidden knowledge each say beyond the question
        and the ``exclude`` stems (:func:`~textsql_clarify.rewards.feedback.words.residual_text`); 0.0 when
        either says nothing more.

        Raises:
            RuntimeError: MiniLM is unavailable.
        """
        a, b = residual_text(feedback, question, exclude), residual_text(hidden_knowledge, question, exclude)
        if not a or not b:
            return 0.0
        return self.similarity(a, b)

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """True when ``feedback`` explains the sample's unanswerability (module doc rule).

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        return self.assess(sample, feedback, schema_identifiers).correct
