"""The FB verdict and judge protocol, and the checks every FB judge applies first.

Shared by the offline judges (:mod:`textsql_clarify.rewards.feedback.offline`) and the council
(:mod:`textsql_clarify.rewards.feedback.council`): a judge answers ``judge(sample, feedback,
schema_identifiers) -> bool`` (ABISS §5.3 FB), and its ``assess`` gives a :class:`FeedbackVerdict`.
Empty feedback and SQL given as feedback fail before anything is compared.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, runtime_checkable

from ...errors import SQLParseError
from ...samples import Sample
from ...sql.schema import parse_sql

__all__ = ["FeedbackVerdict", "FeedbackJudge"]


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
        added: the stems the feedback adds beyond the question and stock refusal words
            (:func:`~textsql_clarify.rewards.feedback.words.added_words`); ``()`` for an echo of the question
            and for the rules that compare nothing.
    """

    correct: bool
    judge: str
    rule: str
    score: float | None = None
    names_missing: bool = False
    contradictions: tuple[str, ...] = ()
    added: tuple[str, ...] = ()


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


def _is_sql(text: str) -> bool:
    if not re.match(r"\s*(?:select|with|insert|update|delete)\b", text, re.IGNORECASE):
        return False
    try:
        parse_sql(text)
    except SQLParseError:
        return False
    return True
