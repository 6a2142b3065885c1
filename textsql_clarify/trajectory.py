"""What an episode leaves behind: :class:`Turn` and :class:`Trajectory`.

The env emits a trajectory at the end of each episode (``info["trajectory"]``); metrics
(:mod:`textsql_clarify.rewards.metrics`) are computed from lists of them. Both are plain dataclasses
that round-trip through JSON (``to_dict`` / ``from_dict``), one trajectory per line of
``trajectories.jsonl``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: action types an agent can take (README "Using it"); ``invalid`` marks a malformed action.
ACTION_TYPES = ("sql", "clarify", "feedback", "classify", "invalid")


@dataclass
class Turn:
    """One agent turn and what followed it.

    Attributes:
        index: 0-based turn number within the episode.
        phase: ``classification`` | ``interactive`` | ``final`` (the forced last turn, ABISS §5.1) |
            ``post_drift`` (turns after the drift utterance, TIDE §4.1).
        action_type: one of :data:`ACTION_TYPES`.
        content: the parsed action content (SQL text, question, explanation, label); raw text if invalid.
        error: parse or refusal message for invalid/refused actions, else ``None``.
        user_reply: the simulated user's reply to a clarification: ``{"text", "label", "layer", "route"}``.
        drift_utterance: the drift turn injected after this SQL, if any.
        execution: for SQL turns: ``{"error_kind", "error_message", "n_rows", "truncated", "elapsed_s"}``.
        reward: the scalar reward given for this turn.
        reward_components: every component for this turn (``None`` = undefined, never 0).
        commitment_drift: for SQL turns after a drift, whether S_pre ⊄ S_post held (TIDE Rec(τ)).
    """

    index: int
    phase: str
    action_type: str
    content: str
    error: str | None = None
    user_reply: dict[str, Any] | None = None
    drift_utterance: str | None = None
    execution: dict[str, Any] | None = None
    reward: float = 0.0
    reward_components: dict[str, Any] = field(default_factory=dict)
    commitment_drift: bool | None = None


@dataclass
class Trajectory:
    """A finished (or truncated) episode.

    Attributes:
        sample_id, db_id, group, subcategory, difficulty, premise_flaw: copied from the sample
            (``subcategory`` is ``None`` for an ambiguous or unanswerable sample whose source does not say).
        has_chain, has_drift, drift_subtype: sample features used by TIDE metrics.
        protocol: ``f`` | ``p`` (TIDE §4.1); category_mode: ABISS §5.1 mode.
        turns: every agent turn, in order.
        outcome: ``sql`` | ``feedback`` | ``abstain`` (malformed twice or no terminal action) |
            ``truncated``.
        predicted_category: the agent's classification-phase label, if any.
        gold_status: ``ok`` | ``empty`` (gold returns no rows: a ceiling) | ``error`` (gold fails:
            invalid sample) | ``nondeterministic`` (gold reads the clock or randomness: left out of EX)
            | ``none`` (no gold SQL: unanswerable) | ``withheld`` (the source withholds the gold of this
            ambiguous sample: clarification-only, EX undefined).
        scores: final per-episode scores: ``ex`` (pre-drift or only SQL), ``ex_post`` (after drift),
            ``fb``, ``cell_f1`` ... (``None`` where undefined).
        seed: the reset seed.
        flags: the sample's load-time validation flags (``Sample.flags``,
            :data:`~textsql_clarify.samples.SAMPLE_FLAGS`); metrics count them and, unless asked, leave
            ``indistinguishable`` trajectories out of every mean (``docs/metrics.md``).
        question: the sample's question (the report's dialogue browser shows it);
            ``""`` in records written before it existed.
    """

    sample_id: str
    db_id: str
    group: str
    subcategory: str | None
    difficulty: str = "unknown"
    premise_flaw: str | None = None
    has_chain: bool = False
    has_drift: bool = False
    drift_subtype: str | None = None
    protocol: str = "f"
    category_mode: str = "taxonomy_free"
    turns: list[Turn] = field(default_factory=list)
    outcome: str = "abstain"
    predicted_category: str | None = None
    gold_status: str = "ok"
    scores: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    flags: list[str] = field(default_factory=list)
    question: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (one line of ``trajectories.jsonl``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        """Inverse of :meth:`to_dict` (a record written before ``flags`` existed reads as unflagged, one
        written before ``question`` existed has ``question == ""``)."""
        d = dict(d)
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
        return cls(**d)

    @property
    def clarifications(self) -> list[Turn]:
        """The clarification turns, in order."""
        return [t for t in self.turns if t.action_type == "clarify"]

    @property
    def sql_turns(self) -> list[Turn]:
        """The SQL turns, in order (two for a drift sample answered twice)."""
        return [t for t in self.turns if t.action_type == "sql"]
