"""The ``decision`` reward component: was the episode's first move the right kind of move (ask, answer, refuse)?

The **decision** of an episode is the type of its first well-formed action of kind ``sql``, ``clarify`` or
``feedback`` (``docs/rewards.md``). A ``<category>`` action of the classification phase is no decision (it is scored
by ``classification``), and neither is a malformed or refused action (scored by ``format``): the decision is the
first well-formed answer, question or refusal that follows. An episode that ends without one (two malformed
actions in a row, or a classification and then malformed actions) made the wrong decision: ``decision`` 0 on its
last turn, where the right one is defined.

The right decision of a sample (:func:`expected_decision`):

============================================  =================  ====================================================
sample                                        right decision     source
============================================  =================  ====================================================
answerable (incl. TIDE Drift-only)            ``sql``            ABISS §5.1 (interactive phase); TIDE §4.1: the drift
                                                                 turn is injected after the agent's first SQL, and
                                                                 the Drift-only question carries no ambiguity, so a
                                                                 clarification there is not ambiguity-driven (TIDE
                                                                 §5, "Ask behavior", Table 13 AR on Drift-only)
ambiguous, not ``indistinguishable``          ``clarify``        ABISS §5.1, §5.2 (a clarification that targets the
(incl. TIDE Chain-only and Joint)                                ambiguity); TIDE §4.1 (Joint: chain phase first)
ambiguous, flagged ``indistinguishable``      ``None``           its readings return the same rows: asking changes
                                                                 no outcome, so no type is the right one
unanswerable (incl. Spider-unanswerable)      ``feedback``       ABISS §5.1, §5.3 (feedback for unanswerable NLQs)
unanswerable with a PremiseSQL flaw           ``feedback``       PremiseSQL, task definition: a flawed query
                                                                 (y = 1) warrants critique and abstention
premise flaw on an answerable / ambiguous     ``None``           the sample's labels disagree (PremiseSQL says
sample                                                           refuse, its group says answer or ask)
============================================  =================  ====================================================

:func:`decision_score` turns a decision into the component: 1.0 when it is the right one, 0.0 when it is not (or
when the episode never made one), ``None`` where the right one is undefined. The env writes it on the decision
turn only (``None`` on every other turn, where it is not applicable).

A label-based reward is legitimate here for the reason the classification phase is (ABISS §5.1, Rec in §5.3):
the group label is the benchmark's own ground truth for what kind of move the question calls for. It also pays a
constant policy exactly its group's share of the defined samples (the group prior): "always ask" earns the
ambiguous share. So its red-team bound is the best constant prior, not the random agent (``docs/rewards.md``,
"decision"), and evaluation reports the balanced accuracy (:func:`balanced_accuracy`), on which every constant
policy scores 1 / (number of decision types present).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..samples import Sample

__all__ = ["DECISIONS", "expected_decision", "expected_for", "decision_score", "first_decision",
           "balanced_accuracy", "balanced_accuracy_ci", "decision_recalls"]

#: the three decision types, in report order: answer, ask, refuse.
DECISIONS: tuple[str, ...] = ("sql", "clarify", "feedback")
#: the flag that leaves an ambiguous sample's decision undefined (its readings return the same rows).
_UNDEFINING_FLAG = "indistinguishable"
_BY_GROUP = {"answerable": "sql", "ambiguous": "clarify", "unanswerable": "feedback"}


def expected_for(group: str, flags: Iterable[str] = (), premise_flaw: str | None = None) -> str | None:
    """The right decision from a sample's labels alone (what :func:`expected_decision` reads; trajectories carry
    the same three fields, so metrics can recompute it without the sample).

    Args:
        group: ``answerable`` | ``ambiguous`` | ``unanswerable`` (ABISS §3.1).
        flags: the sample's load-time flags (:data:`~textsql_clarify.samples.SAMPLE_FLAGS`).
        premise_flaw: a PremiseSQL flaw name or ``None``.
    Returns:
        ``"sql"`` | ``"clarify"`` | ``"feedback"``, or ``None`` (undefined: see the module table).
    Raises:
        ValueError: ``group`` is not one of the three groups.
    """
    if group not in _BY_GROUP:
        raise ValueError(f"unknown group {group!r}; expected one of {sorted(_BY_GROUP)}")
    if premise_flaw is not None and group != "unanswerable":
        return None  # PremiseSQL says critique and abstain, the group says answer or ask: no single right type
    if group == "ambiguous" and _UNDEFINING_FLAG in tuple(flags or ()):
        return None
    return _BY_GROUP[group]


def expected_decision(sample: Sample) -> str | None:
    """The type of first action a sample calls for (module table; ABISS §5.1, TIDE §4.1, PremiseSQL).

    Args:
        sample: a :class:`~textsql_clarify.samples.Sample`.
    Returns:
        ``"sql"`` (answerable, TIDE Drift-only included), ``"clarify"`` (ambiguous, TIDE Chain-only and Joint
        included), ``"feedback"`` (unanswerable, PremiseSQL flawed premises included), or ``None``: an ambiguous
        sample flagged ``indistinguishable``, or a premise flaw on a sample that is not unanswerable.
    Raises:
        TypeError: ``sample`` is not a Sample.
        ValueError: its group is unknown.
    """
    if not isinstance(sample, Sample):
        raise TypeError(f"expected_decision needs a Sample, got {type(sample).__name__}")
    return expected_for(sample.group, sample.flags, sample.premise_flaw)


def decision_score(action_kind: str | None, sample: Sample) -> float | None:
    """The ``decision`` component of an episode whose first decision was ``action_kind``.

    Args:
        action_kind: ``"sql"`` | ``"clarify"`` | ``"feedback"``; ``None`` for an episode that ended without one
            (malformed actions only).
        sample: the episode's sample.
    Returns:
        1.0 when ``action_kind`` is :func:`expected_decision`, 0.0 when it is another type or ``None``, ``None``
        when the right decision is undefined.
    Raises:
        ValueError: ``action_kind`` is another string (``"classify"``, ``"invalid"``: no decision).
        TypeError: ``sample`` is not a Sample.
    """
    if action_kind is not None and action_kind not in DECISIONS:
        raise ValueError(f"action_kind must be one of {list(DECISIONS)} or None (no decision), got {action_kind!r}")
    expected = expected_decision(sample)
    if expected is None:
        return None
    return 1.0 if action_kind == expected else 0.0


def first_decision(action_types: Iterable[str | None]) -> str | None:
    """The decision among an episode's action types in order (``Trajectory.turns[k].action_type``): the first
    one in :data:`DECISIONS`, or ``None`` when there is none (``classify`` and ``invalid`` are skipped)."""
    return next((a for a in action_types if a in DECISIONS), None)


def decision_recalls(pairs: Iterable[tuple[str | None, str | None]]) -> dict[str, dict[str, Any]]:
    """Per right decision, the share of episodes that took it (its recall).

    Args:
        pairs: ``(decision taken or None, right decision or None)`` per episode; pairs whose right decision is
            ``None`` (undefined) are left out.
    Returns:
        ``{expected: {"value": recall, "n": episodes}}`` for each type of :data:`DECISIONS` present, in that order.
    Raises:
        ValueError: a right decision outside :data:`DECISIONS`.
    """
    hits: dict[str, list[int]] = {}
    for taken, expected in pairs:
        if expected is None:
            continue
        if expected not in DECISIONS:
            raise ValueError(f"unknown right decision {expected!r}; expected one of {list(DECISIONS)} or None")
        hits.setdefault(expected, []).append(int(taken == expected))
    return {d: {"value": sum(hits[d]) / len(hits[d]), "n": len(hits[d])} for d in DECISIONS if d in hits}


def balanced_accuracy(recalls: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str | None, str | None]]
                      ) -> dict[str, Any]:
    """Balanced decision accuracy: the mean over the right decisions present of their recall (sklearn's
    ``balanced_accuracy_score`` definition). A constant policy scores 1 / k with k types present, whatever
    the group shares, so it cannot pass for a learned decision on skewed data as plain accuracy can.

    Args:
        recalls: :func:`decision_recalls`' answer, or the ``(taken, expected)`` pairs it reads.
    Returns:
        ``{"value": mean recall or None (no defined episode), "n": episodes, "k": types present}``.
    """
    if not isinstance(recalls, Mapping):
        recalls = decision_recalls(recalls)
    vals = [r["value"] for r in recalls.values()]
    return {"value": sum(vals) / len(vals) if vals else None, "n": sum(r["n"] for r in recalls.values()),
            "k": len(vals)}


def balanced_accuracy_ci(hits: Iterable[float | bool], expected: Iterable[str], *, n_resamples: int = 1000,
                         seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the balanced decision accuracy, stratified by right decision: each
    type's episodes are resampled among themselves (their counts are the benchmark's design, not chance), with
    :func:`~textsql_clarify.rewards.bootstrap.resample_counts` at ``seed + k`` for the k-th type of
    :data:`DECISIONS`, and each resample's recalls are averaged.

    Args:
        hits: per episode, 1/0 (``True``/``False``): the first decision was the right one.
        expected: per episode, its right decision (one of :data:`DECISIONS`), aligned with ``hits``.
        n_resamples, seed, level: the bootstrap's settings (default 1,000, 0, 0.95).
    Returns:
        ``(lo, hi)``; ``None`` with no episode; ``(v, v)`` where every type's recall is the same in every
        resample (each type's hits all equal).
    Raises:
        ValueError: lengths differ, or a right decision is outside :data:`DECISIONS`.
    """
    import numpy as np

    from .bootstrap import _percentile_interval, resample_counts

    h = np.asarray([float(x) for x in hits], dtype=float)
    e = np.asarray(list(expected), dtype=object)
    if e.size != h.size:
        raise ValueError(f"hits and expected differ in length ({h.size} vs {e.size})")
    bad = sorted({str(x) for x in e if x not in DECISIONS})
    if bad:
        raise ValueError(f"unknown right decision(s) {bad}; expected one of {list(DECISIONS)}")
    if h.size == 0:
        return None
    strata = [(k, h[e == d]) for k, d in enumerate(DECISIONS) if (e == d).any()]
    if all(np.all(x == x[0]) for _, x in strata):
        v = float(np.mean([x[0] for _, x in strata]))
        return (v, v)
    recalls = [resample_counts(int(x.size), n_resamples=n_resamples, seed=seed + k) @ x / x.size for k, x in strata]
    lo, hi = _percentile_interval(np.mean(np.vstack(recalls), axis=0), level)
    return (float(lo), float(hi))
