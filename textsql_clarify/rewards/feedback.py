"""Feedback accuracy (FB): does the agent's explanation match why the question is unanswerable?

ABISS §5.3 judges FB with an LLM council against the sample's hidden knowledge. Offline, the default
judge here is lexical: the explanation must cover enough of the hidden knowledge's content words
(threshold :data:`LexicalFeedbackJudge.min_recall`).

Samples without a stated rationale (the Spider unanswerable set, provenance
``hidden_knowledge: "absent"``): FB means that feedback was given and it names no schema element
(table or column) that exists, since claiming an existing element is missing is a wrong explanation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Protocol, runtime_checkable

from ..samples import Sample

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("""a an the of in on at to for from by with and or not no is are was were be been being it its this that
these those there their they them we you your i my me our as any all some can cannot can't could would should will do does
did has have had about which who whom what when where why how than then so such only also into out up down over under
because question database table column data information answer answered records record value values here""".split())


def content_words(text: str) -> list[str]:
    """Lower-cased content words of ``text`` (stop words dropped, a crude plural strip)."""
    out = []
    for w in _WORD.findall(text.lower()):
        if w in _STOP or len(w) < 3:
            continue
        if len(w) > 4 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.append(w)
    return out


@runtime_checkable
class FeedbackJudge(Protocol):
    """Anything with ``judge(sample, feedback, schema_identifiers) -> bool``."""

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:  # pragma: no cover
        ...


@dataclass(frozen=True)
class LexicalFeedbackJudge:
    """Offline FB judge by content-word recall of the hidden knowledge.

    Attributes:
        min_recall: fraction (0..1) of the hidden knowledge's distinct content words the feedback must
            contain to count as correct.
    """

    min_recall: float = 0.34

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """True when ``feedback`` explains the sample's unanswerability (see module doc).

        Args:
            sample: an unanswerable sample (for solvable samples the env scores feedback 0 itself).
            feedback: the agent's explanation.
            schema_identifiers: lower-cased table and column names of the database.
        """
        if not feedback or not feedback.strip():
            return False
        hk = sample.hidden_knowledge.strip()
        if not hk:
            names = {s.lower() for s in schema_identifiers}
            words = set(_WORD.findall(feedback.lower())) | {w.replace(" ", "_") for w in [feedback.lower()]}
            return not (names & words)
        need = set(content_words(hk))
        if not need:
            return True
        have = set(content_words(feedback))
        return len(need & have) / len(need) >= self.min_recall


def default_judge() -> FeedbackJudge:
    """The judge the env uses when none is given."""
    return LexicalFeedbackJudge()
