"""The simulated-user interface shared by the rule-based and transformers users.

``respond(batch)`` takes a list of :class:`UserRequest` and returns one :class:`UserReply` per request,
in order. Batching is the interface so that a model-backed user can run one padded ``generate`` for
many environments (ABISS §5.2, TIDE §4.2).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Protocol, Sequence, runtime_checkable

from ..samples import Sample
from ..text import valid_unicode

RELEVANCY_LABELS = ("relevant", "technical", "irrelevant")
ROUTES = ("amb", "loc", "una")
LAYERS = ("L1", "L2")

#: ABISS §5.2 label limits per group. Unanswerable samples bypass the models (always irrelevant).
ALLOWED_LABELS = {
    "answerable": ("technical", "irrelevant"),
    "ambiguous": ("relevant", "technical", "irrelevant"),
    "unanswerable": ("irrelevant",),
}


#: The refusals of an ``irrelevant`` reply (ABISS §5.2), the same for every group: a refusal that read
#: differently on an unanswerable sample (or by the sample's style, or after the leakage guard replaced it)
#: would tell the agent the group without the agent solving anything. :func:`refusal_text` picks one by
#: the clarification alone. None names a table, a column or a reason, and each has at most one content word
#: (a reply that shared half of a short hidden knowledge's words would read as stating it). That word is one the
#: FB judge never counts (its generic words, :mod:`textsql_clarify.rewards.feedback.words`): an agent may hand a
#: refusal back as its feedback, and it must earn nothing there. "nothing to add" was dropped for that reason:
#: the fake council's rationales end "ask the database administrator to add that information", and the stem
#: ``add`` paid FB 1.0 for the handed-back refusal on those samples.
REFUSALS = (
    "Sorry, I can't help with that.",
    "Sorry, I have nothing else to say on that.",
    "Not sure, sorry.",
)


def refusal_text(clarification: str) -> str:
    """The refusal of an ``irrelevant`` reply to ``clarification``: one of :data:`REFUSALS`, chosen by the
    CRC-32 of the clarification (case-folded, whitespace collapsed), so a function of the clarification
    only: never of the sample, its group, style, hidden knowledge or gold. Both simulated users use it.

    Raises:
        TypeError: ``clarification`` is not a string.
    """
    if not isinstance(clarification, str):
        raise TypeError(f"refusal_text: clarification must be a string, got {type(clarification).__name__}")
    key = " ".join(clarification.casefold().split()).encode("utf-8", "replace")
    return REFUSALS[zlib.crc32(key) % len(REFUSALS)]


@dataclass(frozen=True)
class UserRequest:
    """One clarification to answer.

    Attributes:
        sample: the episode's sample (question, hidden knowledge, gold SQL, chain, and ``dialogue``: the
            earlier turns before the question, which :func:`dialogue_said` reads as the user remembers them).
        clarification: the agent's clarification question.
        history: the dialogue so far as ``(role, text)`` pairs, role ``user`` | ``assistant``, as the agent
            sees it: the sample's earlier turns first (a system turn's SQL as ``<sql>…</sql>``), then the
            question and this episode's turns.
        schema_identifiers: lower-cased table and column names of the database (for the leakage guard).
        l1_resolved: TIDE router state: has the chain's L1 been answered already (or primed, p-protocol).
        gold_sql: the gold SQL currently in force (post-drift gold after a drift), else the sample's.
    """

    sample: Sample
    clarification: str
    history: tuple[tuple[str, str], ...] = ()
    schema_identifiers: frozenset[str] = frozenset()
    l1_resolved: bool = False
    gold_sql: str | None = None


def valid_request(req: UserRequest) -> UserRequest:
    """``req`` with surrogate code points in its clarification and history replaced by U+FFFD
    (:func:`textsql_clarify.text.valid_unicode`); ``req`` itself when its text is valid. The users apply it
    on entry, so a caller's ``"Sorry \\ud83d"`` is answered instead of crashing a tokenizer.
    A non-string clarification is left for the user's own type check."""
    clar = req.clarification
    fixed = valid_unicode(clar) if isinstance(clar, str) else clar
    turns = req.history if isinstance(req.history, (tuple, list)) else ()
    history = [(t[0], valid_unicode(t[1])) if isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], str) else t
               for t in turns]
    if fixed is clar and all(a is b or a[1] is b[1] for a, b in zip(history, turns)):
        return req
    return replace(req, clarification=fixed, history=tuple(history) if turns is req.history else req.history)


#: how a system turn that answered only with SQL reads to the simulated user (:func:`dialogue_said`).
SQL_ONLY_TURN = "(answered with a query)"


def dialogue_said(sample: Sample) -> tuple[tuple[str, str], ...]:
    """The sample's earlier turns (``Sample.dialogue``, MMSQL / CoSQL) as the simulated user remembers them:
    ``(role, text)`` pairs, role ``user`` | ``system``, oldest first. A system turn's SQL is left out: the
    user is a person who saw the answers, not the queries, and SQL in the user's context invites SQL in its
    replies (which the leakage guard would reject). A system turn that only gave SQL reads
    :data:`SQL_ONLY_TURN`. Empty when the sample has no dialogue."""
    return tuple((t.role, t.text.strip() or (SQL_ONLY_TURN if t.role == "system" else ""))
                 for t in sample.dialogue)


def said_before(sample: Sample) -> str:
    """The words of the sample's earlier turns (user and system text, no SQL, as in :func:`dialogue_said`; a
    turn that only gave SQL adds nothing), one turn per line; ``""`` without a dialogue. The simulated users count them as context the way they count
    the question's words (what the user has already said or been told)."""
    return "\n".join(t.text.strip() for t in sample.dialogue if t.text.strip())


def with_dialogue(sample: Sample) -> str:
    """The question preceded by the words of the earlier turns (:func:`said_before`): what the user has
    said or been told so far, for the leakage guard's licence and the identifier-probe test."""
    before = said_before(sample)
    return f"{before}\n{sample.question}" if before else sample.question


@dataclass(frozen=True)
class UserReply:
    """The simulated user's reply.

    Attributes:
        text: natural-language reply, never SQL.
        label: ``relevant`` | ``technical`` | ``irrelevant`` (ABISS §5.2).
        layer: ``L1`` | ``L2`` | ``None``: which chain layer the clarification targeted (TIDE App. E).
        route: ``amb`` | ``loc`` | ``una`` router decision (TIDE §4.2), or ``None`` for the ABISS protocol.
        leak_rejections: replies rejected by the leakage guard before this one was accepted.
        meta: free-form diagnostics (votes, chosen fact).
    """

    text: str
    label: str
    layer: str | None = None
    route: str | None = None
    leak_rejections: int = 0
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready dict stored in a trajectory turn."""
        return {"text": self.text, "label": self.label, "layer": self.layer, "route": self.route,
                "leak_rejections": self.leak_rejections}


@runtime_checkable
class UserSimulator(Protocol):
    """Anything with ``respond(batch) -> list[UserReply]`` (same length and order as ``batch``)."""

    def respond(self, batch: Sequence[UserRequest]) -> list[UserReply]:  # pragma: no cover - protocol
        ...
