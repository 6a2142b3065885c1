"""Aggregate metrics from a run's trajectories, each mean with its n.

Input: the :class:`~textsql_clarify.trajectory.Trajectory` objects an evaluation run produced (the env
writes per-episode ``scores``; this module never scores SQL itself). Output: every metric the run can
support, as :class:`Mean` (value and n) with its seeded 95 % bootstrap interval (``ci95``,
:mod:`~textsql_clarify.rewards.bootstrap`), overall and broken down by group, subcategory, difficulty,
drift subtype and TIDE sample type, plus the episodes' outcomes (:mod:`~textsql_clarify.rewards.outcomes`)
and ceiling counts (ABISS §6 per-group reporting).

Conventions (article: "Measuring honestly"): a metric with no denominator is ``None``, never 0 or 1,
and a trajectory where a metric is undefined is left out of that metric's mean, so every mean carries
the n it was taken over. Ceilings (invalid gold, empty gold, truncated results, keyless row scoring,
scorer disagreement) are counted next to the numbers, never corrected for.

Which trajectories each metric is taken over, and what counts as a hit, is documented on
:func:`trajectory_metrics` and in ``docs/metrics.md`` ("Aggregated metrics").

Flags: a trajectory carries its sample's load-time validation flags (``Sample.flags``). Each run counts them
(``flagged``). A sample flagged ``indistinguishable`` (an ambiguous sample whose readings return the same rows,
so EX cannot reward asking) is left out of every mean of every row, overall and in each breakdown, unless
``include_indistinguishable=True``; ``excluded_indistinguishable`` says how many were left out. The other
flags exclude nothing here: a gold that fails, returns nothing, times out or reads the clock is already left
out of EX by the env's ``gold_status`` (one mechanism, counted in ``ceilings``).

A sample whose subcategory is unknown (``None``) is its own ``unknown`` row of ``by_subcategory``, last.

Protocols (TIDE §4.1, Table 2 caption): ``p``-protocol episodes (L1 pre-resolved) exist only to
measure L2-IR^p; they feed that metric and nothing else. Every other metric uses ``f``-protocol
episodes, so a run that holds both protocols does not count a sample twice.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping, Sequence

from ..errors import TextSQLClarifyError
from ..samples import DIFFICULTIES, DRIFT_SUBTYPES, SAMPLE_FLAGS
from ..taxonomy import GROUPS, PREMISE_FLAWS, SUBCATEGORIES, group_of
from ..trajectory import ACTION_TYPES, Trajectory
from .bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_ci, bootstrap_cis, bootstrap_settings
from .decision import balanced_accuracy_ci, expected_for, first_decision
from .outcomes import outcome_summary

OUTCOMES = ("sql", "feedback", "abstain", "truncated")
#: ``withheld``: an ambiguous sample whose gold the source withholds (``Sample.gold_withheld``): EX undefined.
GOLD_STATUSES = ("ok", "empty", "error", "nondeterministic", "none", "withheld")
PROTOCOLS = ("f", "p")
RELEVANCY_LABELS = ("relevant", "technical", "irrelevant")
LAYERS = ("L1", "L2")
ROUTES = ("amb", "loc", "una")
#: TIDE sample sets (§3, Table 2): Chain-only, Drift-only, Joint.
SAMPLE_TYPES = ("chain_only", "drift_only", "joint")

#: metric names by source family, in report order. ``components.<set>.precision|recall`` are added
#: per component set found in the run (article: "Component: where the SQL went wrong").
FAMILIES: dict[str, tuple[str, ...]] = {
    "abiss": ("EX", "EX_strict", "EX_post", "FB", "abstained", "Rec", "Cls", "AIR", "relevant_rate", "turns"),
    "tide": ("DEA", "AR", "L1-IR", "L2-IR^p", "JIR", "DRR", "DRA"),
    "premisesql": ("SQL_behaviour", "DET", "TYPE", "GEN", "VAL"),
    "article": ("table_recall", "table_precision", "spurious_tables", "column_precision", "column_recall",
                "cell_precision", "cell_recall", "cell_f1"),
    "decision": ("DEC", "DEC_bacc"),
    "agent": ("format_valid_rate",),
}
#: every fixed metric name, in report order.
METRICS: tuple[str, ...] = tuple(m for names in FAMILIES.values() for m in names)
#: test-suite EX metrics (``scores.ex_suite`` / ``scores.ex_strict_suite``, an env with ``ex_mode="suite"``): in a
#: run's metrics, right after ``EX_strict``, only when some trajectory of the run carries them.
SUITE_METRICS = ("EX_suite", "EX_strict_suite")
#: ceiling counters reported next to the numbers (article: "Ceilings are counted, never corrected").
CEILINGS = ("gold_error", "gold_empty", "gold_nondeterministic", "gold_truncated", "pred_truncated", "keyless",
            "scorer_inconsistent", "gold_withheld")
#: the ``by_subcategory`` row of samples whose subcategory is unknown (``None``); always the last row.
UNKNOWN_SUBCATEGORY = "unknown"
#: the flag that keeps a sample out of the means unless asked (``aggregate(include_indistinguishable=...)``).
INDISTINGUISHABLE = "indistinguishable"
#: breakdown name -> output key.
BREAKDOWNS = ("group", "subcategory", "difficulty", "drift_subtype", "sample_type")

_BINARY_SCORES = ("ex", "ex_strict", "ex_post", "fb", "abstained", "ex_suite", "ex_strict_suite", "em")
_UNIT_SCORES = ("cell_precision", "cell_recall", "cell_f1", "column_precision", "column_recall",
                "table_recall", "table_precision")
_FLAG_SCORES = ("gold_truncated", "pred_truncated", "keyless", "scorer_inconsistent")


class MetricsError(TextSQLClarifyError, ValueError):
    """A trajectory, a value to average or a metrics dict is malformed; the message names where."""


@dataclass(frozen=True)
class Mean:
    """A mean and the number of defined values it was taken over (article: "every mean carries its n").

    Attributes:
        value: the mean, or ``None`` when ``n == 0`` (undefined, never 0).
        n: how many defined (non-``None``) values were averaged.

    Raises:
        MetricsError: ``n < 0``, or ``value`` is ``None`` exactly when ``n > 0`` (or not, when ``n == 0``).
    """

    value: float | None
    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 0:
            raise MetricsError(f"Mean.n must be a non-negative int, got {self.n!r}")
        if (self.n == 0) != (self.value is None):
            raise MetricsError(f"Mean.value must be None exactly when n == 0, got value={self.value!r}, n={self.n}")

    def to_dict(self) -> dict[str, Any]:
        """``{"value": v, "n": n}`` (JSON-ready)."""
        return {"value": self.value, "n": self.n}


def mean(values: Iterable[float | bool | None]) -> Mean:
    """Mean of the defined values; ``None`` entries are left out (undefined is not zero).

    Args:
        values: numbers (bools count as 1/0) or ``None``.

    Returns:
        :class:`Mean` with ``n`` = number of non-``None`` values and ``value`` ``None`` when ``n == 0``.

    Raises:
        MetricsError: a value is not a number (e.g. a string) or is NaN/infinite.
    """
    xs: list[float] = []
    for k, v in enumerate(values):
        if v is None:
            continue
        if not isinstance(v, (int, float)):
            raise MetricsError(f"value #{k} to average must be a number or None, got {type(v).__name__} {v!r}")
        f = float(v)
        if not math.isfinite(f):
            raise MetricsError(f"value #{k} to average must be finite, got {v!r}")
        xs.append(f)
    if not xs:
        return Mean(None, 0)
    return Mean(math.fsum(xs) / len(xs), len(xs))


# ----------------------------------------------------------------------------------------- validation

def _problem(i: int, t: Any, fld: str, msg: str) -> MetricsError:
    sid = getattr(t, "sample_id", None)
    return MetricsError(f"trajectories[{i}] (sample {sid!r}): field '{fld}': {msg}")


def _as_trajectory(t: Any, i: int) -> Trajectory:
    if isinstance(t, Trajectory):
        return t
    if isinstance(t, Mapping):
        try:
            return Trajectory.from_dict(dict(t))
        except TypeError as e:
            raise MetricsError(f"trajectories[{i}]: not a valid trajectory record: {e}") from e
    raise MetricsError(f"trajectories[{i}]: expected a Trajectory or its dict, got {type(t).__name__}")


def _check_in(i: int, t: Trajectory, fld: str, value: Any, allowed: Collection[Any]) -> None:
    if value not in allowed:
        raise _problem(i, t, fld, f"must be one of {list(allowed)}, got {value!r}")


def _validate(i: int, t: Trajectory) -> None:
    _check_in(i, t, "group", t.group, GROUPS)
    if t.subcategory is None:
        if t.group == "answerable":
            raise _problem(i, t, "subcategory", "may be None (unknown) only for an ambiguous or unanswerable sample")
    else:
        _check_in(i, t, "subcategory", t.subcategory, SUBCATEGORIES)
        if SUBCATEGORIES[t.subcategory].group != t.group:
            raise _problem(i, t, "subcategory", f"{t.subcategory!r} belongs to group "
                                                f"{SUBCATEGORIES[t.subcategory].group!r}, not {t.group!r}")
    _check_in(i, t, "difficulty", t.difficulty, DIFFICULTIES)
    if not isinstance(t.flags, (list, tuple)):
        raise _problem(i, t, "flags", f"must be a list of flags, got {type(t.flags).__name__}")
    for k, flag in enumerate(t.flags):
        _check_in(i, t, f"flags[{k}]", flag, SAMPLE_FLAGS)
    _check_in(i, t, "protocol", t.protocol, PROTOCOLS)
    _check_in(i, t, "outcome", t.outcome, OUTCOMES)
    _check_in(i, t, "gold_status", t.gold_status, GOLD_STATUSES)
    if (t.gold_status == "none") != (t.group == "unanswerable"):
        raise _problem(i, t, "gold_status", f"is 'none' exactly for unanswerable samples; got {t.gold_status!r} "
                                            f"for group {t.group!r}")
    if t.gold_status == "withheld" and t.group != "ambiguous":
        raise _problem(i, t, "gold_status", f"'withheld' is only for ambiguous samples, got group {t.group!r}")
    if t.premise_flaw is not None:
        _check_in(i, t, "premise_flaw", t.premise_flaw, PREMISE_FLAWS)
    if t.has_drift:
        _check_in(i, t, "drift_subtype", t.drift_subtype, DRIFT_SUBTYPES)
    elif t.drift_subtype is not None:
        raise _problem(i, t, "drift_subtype", f"must be None when has_drift is False, got {t.drift_subtype!r}")
    for k, turn in enumerate(t.turns):
        _check_in(i, t, f"turns[{k}].action_type", turn.action_type, ACTION_TYPES)
        r = turn.user_reply
        if r is None:
            continue
        if not isinstance(r, Mapping):
            raise _problem(i, t, f"turns[{k}].user_reply", f"must be a mapping or None, got {type(r).__name__}")
        _check_in(i, t, f"turns[{k}].user_reply.label", r.get("label"), RELEVANCY_LABELS + (None,))
        _check_in(i, t, f"turns[{k}].user_reply.layer", r.get("layer"), LAYERS + (None,))
        _check_in(i, t, f"turns[{k}].user_reply.route", r.get("route"), ROUTES + (None,))
    s = t.scores
    if not isinstance(s, Mapping):
        raise _problem(i, t, "scores", f"must be a mapping, got {type(s).__name__}")
    for key in _BINARY_SCORES:
        v = s.get(key)
        if v is not None and (not isinstance(v, (int, float)) or v not in (0, 1)):
            raise _problem(i, t, f"scores.{key}", f"must be 1, 0 or None, got {v!r}")
    v = s.get("drift_recognised")
    if v is not None and not isinstance(v, bool):
        raise _problem(i, t, "scores.drift_recognised", f"must be True, False or None, got {v!r}")
    for key in _UNIT_SCORES:
        _check_unit(i, t, f"scores.{key}", s.get(key))
    v = s.get("spurious_tables")
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
        raise _problem(i, t, "scores.spurious_tables", f"must be a non-negative number or None, got {v!r}")
    for key in _FLAG_SCORES:
        v = s.get(key)
        if v is not None and not isinstance(v, bool):
            raise _problem(i, t, f"scores.{key}", f"must be True, False or None, got {v!r}")
    comps = s.get("components")
    if comps is not None:
        if not isinstance(comps, Mapping):
            raise _problem(i, t, "scores.components", f"must be a mapping, got {type(comps).__name__}")
        for name, pr in comps.items():
            if not isinstance(pr, Mapping):
                raise _problem(i, t, f"scores.components.{name}", "must be a mapping {'precision', 'recall'}")
            for part in ("precision", "recall"):
                _check_unit(i, t, f"scores.components.{name}.{part}", pr.get(part))


def _check_unit(i: int, t: Trajectory, fld: str, v: Any) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise _problem(i, t, fld, f"must be a number in [0, 1] or None, got {v!r}")


# ----------------------------------------------------------------------------------- per trajectory

def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _layers(t: Trajectory) -> set[str]:
    return {turn.user_reply.get("layer") for turn in t.clarifications if turn.user_reply} - {None}


def _abiss(t: Trajectory) -> dict[str, float | None]:
    s = t.scores
    out: dict[str, float | None] = {"EX": _f(s.get("ex")), "EX_strict": _f(s.get("ex_strict")),
                                    "EX_post": _f(s.get("ex_post")), "FB": _f(s.get("fb")),
                                    "abstained": _f(s.get("abstained"))}
    if "ex_suite" in s or "ex_strict_suite" in s:  # test-suite EX: a run with ex_mode="suite"
        out["EX_suite"], out["EX_strict_suite"] = _f(s.get("ex_suite")), _f(s.get("ex_strict_suite"))
    if "em" in s:  # Spider's exact-set-match: a predictions replay (textsql-clarify score) writes it per episode
        out["EM"] = _f(s.get("em"))
    classified = t.predicted_category is not None or any(x.phase == "classification" for x in t.turns)
    rec = cls = None
    if classified:
        pred = t.predicted_category
        if pred in SUBCATEGORIES:
            rec, cls = float(group_of(pred) == t.group), float(pred == t.subcategory)
        elif pred in GROUPS:
            rec, cls = float(pred == t.group), 0.0
        else:  # no label or a label outside the taxonomy: the classification missed
            rec, cls = 0.0, 0.0
        if t.subcategory is None:  # the true subcategory is unknown: Cls has nothing to compare with
            cls = None
    out["Rec"], out["Cls"] = rec, cls
    air = None
    if t.group == "ambiguous":
        for k, turn in enumerate(t.turns):
            if turn.action_type == "clarify" and (turn.user_reply or {}).get("label") == "relevant":
                if k + 1 < len(t.turns):
                    air = float(t.turns[k + 1].action_type in ("sql", "feedback"))
                break
    out["AIR"] = air
    labels = [(turn.user_reply or {}).get("label") for turn in t.turns if turn.action_type == "clarify"]
    out["relevant_rate"] = sum(1 for x in labels if x == "relevant") / len(labels) if labels else None
    out["turns"] = float(sum(1 for x in t.turns if x.phase != "classification"))
    return out


def _tide(t: Trajectory) -> dict[str, float | None]:
    s = t.scores
    ex, ex_post, rec = s.get("ex"), s.get("ex_post"), s.get("drift_recognised")
    dea = None
    if t.gold_status == "ok" and ex is not None:
        if not t.has_drift:
            dea = float(ex)
        elif ex_post is not None:
            dea = float(ex == 1 and ex_post == 1)
    layers = _layers(t)
    out: dict[str, float | None] = {
        "DEA": dea,
        "AR": float(bool(t.clarifications)),
        "L1-IR": float("L1" in layers) if t.has_chain else None,
        "L2-IR^p": None,  # p-protocol only
        "JIR": float({"L1", "L2"} <= layers) if t.has_chain else None,
        "DRR": _f(rec) if t.has_drift else None,
        "DRA": None,
    }
    if t.has_drift and rec is not None and ex_post is not None:
        out["DRA"] = float(rec and ex_post == 1)
    return out


def _premise(t: Trajectory, original: bool) -> dict[str, float | None]:
    out: dict[str, float | None] = dict.fromkeys(FAMILIES["premisesql"])
    sql = t.sql_turns
    gave_feedback = any(x.action_type == "feedback" for x in t.turns)
    if t.premise_flaw is not None:
        if sql:
            first_sql = next(k for k, x in enumerate(t.turns) if x.action_type == "sql")
            asked = any(x.action_type == "clarify" for x in t.turns[:first_sql])
            out["SQL_behaviour"] = 1.0 if asked else 0.0
        elif t.outcome == "feedback":
            out["SQL_behaviour"] = 2.0
        out["DET"] = float(gave_feedback)
        if not gave_feedback:
            out["TYPE"] = 0.0
        elif t.scores.get("fb") is not None:
            out["TYPE"] = float(t.scores["fb"] == 1)
    elif original:
        out["GEN"] = float(bool(sql))
        out["VAL"] = float(bool(sql) and not gave_feedback and not t.clarifications)
    return out


def _article(t: Trajectory) -> dict[str, float | None]:
    s = t.scores
    out = {m: _f(s.get(m)) for m in FAMILIES["article"]}
    for name, pr in (s.get("components") or {}).items():
        out[f"components.{name}.precision"] = _f(pr.get("precision"))
        out[f"components.{name}.recall"] = _f(pr.get("recall"))
    return out


def _format_valid_flags(t: Trajectory) -> list[bool]:
    """One flag per agent action of the episode: True unless its turn is ``invalid``."""
    return [turn.action_type != "invalid" for turn in t.turns]


def format_valid(trajectories: Sequence[Trajectory]) -> Mean:
    """``format_valid_rate`` over a run: the share of agent actions (every turn of every f-protocol
    episode, the classification phase included) that the env read as a well-formed action allowed in
    its turn, i.e. whose turn is not ``invalid`` and whose ``format`` reward component is 0 (TIDE App. D's
    malformed-action rule). n = the number of actions, not of episodes. A refused action (a
    clarification on the forced final turn, a category outside the classification phase, another
    action inside it) counts as not valid, as the ``format`` component does.

    Args:
        trajectories: the run's (validated) trajectories.
    Returns:
        The :class:`Mean` (``None`` with n = 0 when there is no f-protocol action).
    """
    return mean(f for t in trajectories if t.protocol == "f" for f in _format_valid_flags(t))


def trajectory_metrics(t: Trajectory, *, original: bool = False) -> dict[str, float | None]:
    """Every metric's value for one trajectory; ``None`` where the trajectory is not in its denominator.

    Denominators and hits (a trajectory with ``None`` is left out of that metric's mean):

    * ``EX`` = ``scores.ex`` (ABISS §5.3, App. A): the env's convention, 1/0 on solvable samples with a
      valid gold (a non-SQL outcome is 0), 0 for SQL on an unanswerable sample, ``None`` otherwise
      (including empty/failing gold, counted as ceilings, and a withheld gold, ``gold_status == "withheld"``:
      clarification-only samples, whose SQL is never scored). ``EX_post`` = ``scores.ex_post`` (drift).
      ``EX_strict`` = ``scores.ex_strict`` (ours): the same SQL and denominator as ``EX``, scored with no
      column superset (``docs/metrics.md``).
    * ``EX_suite`` / ``EX_strict_suite`` = ``scores.ex_suite`` / ``scores.ex_strict_suite`` (Zhong, Yu and Klein
      2020; only in runs whose env had ``ex_mode="suite"``, else absent): the same SQL and denominator as ``EX``
      / ``EX_strict``, a hit only when the prediction also agrees on every database variant where the gold runs.
    * ``EM`` = ``scores.em`` (Yu et al. 2018, Spider §Evaluation Metrics, exact-set-match; only in the runs of
      ``textsql-clarify score``, which writes it per episode, else absent): 1/0 where the sample has a readable
      gold SQL, ``None`` otherwise. Its mean is written by
      :func:`~textsql_clarify.baselines.predictions.add_exact_match`; the per-episode value feeds the report's
      paired difference (McNemar, as for EX).
    * ``FB`` = ``scores.fb`` (ABISS §5.3): judge verdict on unanswerable samples with a stated rationale,
      0 for feedback on a solvable one; ``None`` on unanswerable samples without a rationale.
    * ``abstained`` = ``scores.abstained`` (ours): over unanswerable samples without a stated rationale
      (Spider unanswerable); hit when the episode ended in feedback that the judge's no-rationale rule
      accepts (not SQL, blames no existing table or column as missing); SQL, a rejected feedback, running
      out of turns or a malformed-action abstention (outcome ``abstain``) is 0.
    * ``Rec`` / ``Cls`` (ABISS §5.3): over episodes that ran the classification phase (a predicted label,
      or a ``classification``-phase turn). Rec hits when the predicted subcategory's group
      (:func:`~textsql_clarify.taxonomy.group_of`; a bare group label is accepted) equals the true group;
      Cls when the subcategory matches exactly. A missing or unknown label is a miss for both. Cls is
      ``None`` (undefined) for a sample whose true subcategory is unknown; Rec is still defined by its group.
    * ``relevant_rate`` (ABISS §5.2 relevancy labels): the share of the episode's clarifications that the
      simulated user labelled ``relevant``; ``None`` without a clarification. On sets where EX cannot
      reward asking (one reading per sample: MMSQL, CoSQL; withheld golds: mini-interact) this and AR are
      what measure the clarifications.
    * ``AIR`` (ABISS §5.3, App. D): over ambiguous episodes with at least one ``relevant`` user reply; hit
      when the agent turn right after the first relevant reply is terminal (``sql`` or ``feedback``).
      An episode that ended before any next agent turn is left out (nothing to judge).
    * ``turns``: agent turns outside the classification phase (ABISS App. D "Avg. Turns").
    * ``DEA`` (TIDE Table 2): over episodes with a valid gold (``gold_status == "ok"``) whose required EX
      values are all defined; hit when every SQL passes: ``ex == 1``, and for a drift sample also
      ``ex_post == 1``. Unanswerable samples (no gold) are outside TIDE's sample sets.
    * ``AR`` (TIDE Table 2): over all episodes; hit when the episode holds at least one clarification.
    * ``L1-IR`` / ``JIR`` (TIDE Table 2): over chain samples; hit when some clarification was routed
      ``L1`` (JIR: some ``L1`` and some ``L2``). ``L2-IR^p``: over chain samples under the p-protocol;
      hit when some clarification was routed ``L2``.
    * ``DRR`` (TIDE Table 2): over drift samples with ``scores.drift_recognised`` defined; hit = Rec(τ),
      i.e. S(y_pre) ⊄ S(y_post). ``DRA``: over drift samples with Rec(τ) and ``ex_post`` defined; hit =
      Rec(τ) and ``ex_post == 1``.
    * PremiseSQL §4 metrics, over samples with a ``premise_flaw``: ``SQL_behaviour`` on its 0–2 ordinal
      scale (our reading of "degree of abstention from misleading SQL"): 2 = ended with feedback and no
      SQL; 1 = asked at least one clarification before its first SQL (it suspected a problem, yet
      generated); 0 = SQL with no clarification first. Episodes that ended without SQL or feedback
      (abstain, truncated) are not placed on the scale (``None``). ``DET``: 1 when the agent gave
      feedback. ``TYPE``: 1 when it gave feedback that the judge accepted (``fb == 1``), 0 when it gave
      none or a rejected one, ``None`` when feedback was given but not judged.
    * ``GEN`` / ``VAL`` (PremiseSQL §4), over originals only (``original=True``): GEN = the agent produced
      SQL; VAL = it produced SQL without giving feedback or asking a clarification (our stand-in for
      PremiseSQL's explicit ``is_valid=true`` judgement).
    * Article families (article: "Retrieval", "Output: columns and cells", "Component"): the env's
      ``scores`` as given: table/column/cell precision and recall, ``cell_f1``, ``spurious_tables`` (a
      count per episode), ``components.<set>.precision|recall``.
    * ``DEC`` (the ``decision`` reward component's metric, ``textsql_clarify/rewards/decision.py``; ABISS §5.1):
      1 when the episode's first decision (its first ``sql``, ``clarify`` or ``feedback`` action) is the type its
      sample calls for (answerable: ``sql``, ambiguous: ``clarify``, unanswerable: ``feedback``), else 0 (none
      made counts 0); ``None`` where the right type is undefined (``indistinguishable`` ambiguous samples, a
      premise flaw on a sample that is not unanswerable). By group it is the recall of that group's decision.
      ``DEC_bacc`` is a run-level value (``None`` per trajectory): the balanced accuracy, the mean of those
      recalls over the types present (a constant policy scores 1 / k), computed by :func:`aggregate`.
    * ``format_valid_rate`` (ours; :func:`format_valid`): here the episode's share of actions that were
      well formed and allowed (``None`` without a turn); :func:`aggregate` pools it over actions, so its
      n there is the number of actions.

    Under the p-protocol every metric is ``None`` except ``L2-IR^p`` (TIDE Table 2 caption).

    Args:
        t: a trajectory (assumed valid; :func:`aggregate` validates).
        original: the trajectory is the unflawed original of a PremiseSQL pair (feeds GEN and VAL).

    Returns:
        ``{metric name: value or None}``: every name in :data:`METRICS` plus one pair per component set.
    """
    if t.protocol == "p":
        out: dict[str, float | None] = dict.fromkeys(METRICS)
        out["L2-IR^p"] = float("L2" in _layers(t)) if t.has_chain else None
        return out
    out = {}
    out.update(_abiss(t))
    out.update(_tide(t))
    out.update(_premise(t, original))
    out.update(_article(t))
    out["DEC"], out["DEC_bacc"] = _decision(t), None
    flags = _format_valid_flags(t)
    out["format_valid_rate"] = sum(flags) / len(flags) if flags else None
    return out


def _expected(t: Trajectory) -> str | None:
    """The right first decision of the trajectory's sample (``rewards/decision.py``), from its labels."""
    return expected_for(t.group, t.flags, t.premise_flaw)


def _decision(t: Trajectory) -> float | None:
    """``DEC`` of one trajectory (:func:`trajectory_metrics`)."""
    expected = _expected(t)
    if expected is None:
        return None
    return float(first_decision(turn.action_type for turn in t.turns) == expected)


def _sample_type(t: Trajectory) -> str | None:
    if t.has_chain and t.has_drift:
        return "joint"
    if t.has_chain:
        return "chain_only"
    if t.has_drift:
        return "drift_only"
    return None


def _key(t: Trajectory, breakdown: str) -> str | None:
    if breakdown == "sample_type":
        return _sample_type(t)
    if breakdown == "subcategory" and t.subcategory is None:
        return UNKNOWN_SUBCATEGORY
    return getattr(t, breakdown)


_ORDER = {"group": GROUPS, "subcategory": tuple(SUBCATEGORIES), "difficulty": DIFFICULTIES,
          "drift_subtype": DRIFT_SUBTYPES, "sample_type": SAMPLE_TYPES}
#: rows placed after every other row of their breakdown.
_LAST = {"subcategory": (UNKNOWN_SUBCATEGORY,)}


def count_flags(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """How many f-protocol trajectories carry each load-time flag (:data:`~textsql_clarify.samples.SAMPLE_FLAGS`,
    every flag listed, in that order); p-protocol re-runs of chain samples are not counted twice."""
    c = dict.fromkeys(SAMPLE_FLAGS, 0)
    for t in trajectories:
        if t.protocol != "f":
            continue
        for flag in dict.fromkeys(t.flags):
            if flag in c:
                c[flag] += 1
    return c


# ------------------------------------------------------------------------------------------ aggregate

def count_ceilings(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """Ceiling counts (article: "Ceilings are counted, never corrected"), in trajectories.

    ``gold_error``: gold SQL fails (``gold_status == "error"``, an invalid sample); ``gold_empty``: gold
    returns no rows; ``gold_nondeterministic``: gold reads the clock or randomness (``date('now')``,
    ``random()``), left out of EX like an empty gold; ``gold_truncated`` / ``pred_truncated``: a result
    cut at the row cap; ``keyless``:
    rows scored without a usable row key; ``scorer_inconsistent``: the cell scores and exact EX disagree
    (article: EX kept "as a test of the scorer"); ``gold_withheld``: the source withholds the gold (a
    clarification-only sample, mini-interact), so EX is undefined there. Flags that are ``None`` or missing
    count as not set.
    """
    c = dict.fromkeys(CEILINGS, 0)
    for t in trajectories:
        if t.protocol != "f":  # p-protocol re-runs of chain samples are not counted twice
            continue
        c["gold_error"] += t.gold_status == "error"
        c["gold_empty"] += t.gold_status == "empty"
        c["gold_nondeterministic"] += t.gold_status == "nondeterministic"
        c["gold_withheld"] += t.gold_status == "withheld"
        for flag in _FLAG_SCORES:
            c[flag] += t.scores.get(flag) is True
    return c


def _cell(m: Mean, ci: tuple[float, float] | None) -> dict[str, Any]:
    """``{"value", "n", "ci95"}``: a mean with its n and its bootstrap interval (``None`` when n == 0)."""
    return {"value": m.value, "n": m.n, "ci95": None if ci is None else [ci[0], ci[1]]}


def _block(rows: list[dict[str, float | None]], names: Sequence[str], trajs: Sequence[Trajectory],
           boot: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    cols = {m: [r.get(m) for r in rows] for m in names}
    means = {m: mean(cols[m]) for m in names}  # validates the values first (MetricsError names the index)
    cis = bootstrap_cis(cols, **boot)
    out = {m: _cell(means[m], cis[m]) for m in names}
    if "DEC_bacc" in out:  # balanced over the decision types present: not a mean of per-episode values
        pairs = [(r["DEC"], _expected(t)) for r, t in zip(rows, trajs) if r.get("DEC") is not None]
        hits, expected = [h for h, _ in pairs], [e for _, e in pairs]
        recalls = {d: [h for h, e in pairs if e == d] for d in dict.fromkeys(expected)}
        value = sum(sum(v) / len(v) for v in recalls.values()) / len(recalls) if recalls else None
        ci = balanced_accuracy_ci(hits, expected, n_resamples=boot["n_resamples"], seed=boot["seed"])
        out["DEC_bacc"] = {"value": value, "n": len(pairs), "ci95": None if ci is None else [ci[0], ci[1]]}
    flags = [f for t in trajs if t.protocol == "f" for f in _format_valid_flags(t)]
    out["format_valid_rate"] = _cell(mean(flags), bootstrap_ci(flags, **boot))  # pooled over actions
    return out


def _outcomes(trajs: Sequence[Trajectory], boot: Mapping[str, int]) -> dict[str, Any]:
    """:func:`~textsql_clarify.rewards.outcomes.outcome_summary` of the f-protocol episodes (p-protocol
    re-runs of chain samples are not counted twice), or of the p-protocol ones when there is no other."""
    f = [t for t in trajs if t.protocol == "f"]
    return outcome_summary(f or trajs, **boot)


def aggregate(trajectories: Sequence[Trajectory | Mapping[str, Any]], *,
              original_ids: Collection[str] | None = None, include_indistinguishable: bool = False,
              bootstrap_seed: int = DEFAULT_SEED, n_resamples: int = DEFAULT_RESAMPLES) -> dict[str, Any]:
    """Every supported metric over a run, with its n and 95 % interval, overall and by breakdown, plus
    the episodes' outcomes and ceiling counts.

    Args:
        trajectories: the run's trajectories (or their ``to_dict()`` records, e.g. lines of
            ``trajectories.jsonl``). An empty run is allowed: every metric is then ``None`` with n = 0.
        original_ids: sample ids of the unflawed originals of PremiseSQL pairs (from the samples'
            provenance; trajectories do not carry it). When ``None`` and the run holds any sample with a
            ``premise_flaw``, the originals are taken to be the run's answerable samples without a flaw
            (PremiseSQL pairs each flawed query with an answerable original); when the run holds no
            flawed sample, GEN and VAL are undefined.
        include_indistinguishable: keep trajectories flagged ``indistinguishable`` (an ambiguous sample whose
            readings return the same rows: EX cannot reward asking) in the means. Default ``False``: they
            are left out of every mean of every row (overall and each breakdown) and counted in
            ``excluded_indistinguishable``.
        bootstrap_seed, n_resamples: the seeded percentile bootstrap of every mean's ``ci95``
            (:mod:`~textsql_clarify.rewards.bootstrap`; unit: the values the mean is taken over, i.e. samples,
            and actions for ``format_valid_rate``); default seed 0, 1,000 resamples, recorded in ``"bootstrap"``.

    Returns:
        JSON-ready dict::

            {"n_trajectories": N (aggregated, after the exclusion), "n_by_protocol": {"f": k, "p": k},
             "flagged": {flag: k for every flag in SAMPLE_FLAGS} (f-protocol trajectories given, before the
                 exclusion), "excluded_indistinguishable": k, "include_indistinguishable": bool,
             "bootstrap": {"seed", "n_resamples", "level": 0.95, "unit": "sample", "method": "percentile"},
             "overall": {metric: {"value": v, "n": n, "ci95": [lo, hi] | None}},
             "outcomes": outcome_summary(...) of the f-protocol episodes (rewards/outcomes.py),
             "ceilings": {"gold_error": k, "gold_empty": k, "gold_nondeterministic": k, "gold_truncated": k,
                          "pred_truncated": k,
                          "keyless": k, "scorer_inconsistent": k},
             "by_group" | "by_subcategory" | "by_difficulty" | "by_drift_subtype" | "by_sample_type":
                 {key: {"n_trajectories": k, "metrics": {metric: {"value", "n", "ci95"}},
                        "outcomes": {...}, "ceilings": {...}}},
             "premise_originals": {"rule": "original_ids" | "answerable_fallback" | None, "n": k}}

        Metric definitions: :func:`trajectory_metrics`. Breakdown keys appear in taxonomy order and only
        when some trajectory has them (trajectories without drift are not in ``by_drift_subtype``;
        ``by_sample_type`` holds TIDE's chain_only / drift_only / joint sets); samples whose subcategory is
        unknown are the ``unknown`` row of ``by_subcategory``, after every other row. ``by_difficulty``
        follows :data:`~textsql_clarify.samples.DIFFICULTIES` (Spider's levels, then BIRD's simple /
        moderate / challenging, then ``unknown``).

    Raises:
        MetricsError: a trajectory is malformed (names the index, sample id and field), or an
            ``original_ids`` entry names a trajectory that has a premise flaw.
    """
    boot = {"seed": bootstrap_seed, "n_resamples": n_resamples}
    settings = bootstrap_settings(**boot)  # BootstrapError (a ValueError) for a bad setting
    trajs = [_as_trajectory(t, i) for i, t in enumerate(trajectories)]
    for i, t in enumerate(trajs):
        _validate(i, t)
    flagged = count_flags(trajs)
    n_given = len(trajs)
    if original_ids is not None:
        ids = set(original_ids)
        for i, t in enumerate(trajs):
            if t.sample_id in ids and t.premise_flaw is not None:
                raise _problem(i, t, "premise_flaw", "listed in original_ids but has a premise flaw")
        originals = [t.sample_id in ids for t in trajs]
        rule = "original_ids"
    elif any(t.premise_flaw is not None for t in trajs):
        originals = [t.premise_flaw is None and t.group == "answerable" for t in trajs]
        rule = "answerable_fallback"
    else:
        originals = [False] * len(trajs)
        rule = None
    if not include_indistinguishable:  # out of every mean of every row (module docstring)
        keep = [INDISTINGUISHABLE not in t.flags for t in trajs]
        trajs = [t for t, k in zip(trajs, keep) if k]
        originals = [o for o, k in zip(originals, keep) if k]
    rows = [trajectory_metrics(t, original=o) for t, o in zip(trajs, originals)]
    comp_sets = sorted({k for r in rows for k in r if k.startswith("components.")})
    names = list(METRICS)
    if any(m in r for r in rows for m in SUITE_METRICS):  # beside EX_strict, only in a test-suite run
        at = names.index("EX_strict") + 1
        names[at:at] = list(SUITE_METRICS)
    names += comp_sets

    out: dict[str, Any] = {
        "n_trajectories": len(trajs),
        "n_by_protocol": {p: sum(t.protocol == p for t in trajs) for p in PROTOCOLS},
        "flagged": flagged,
        "excluded_indistinguishable": n_given - len(trajs),
        "include_indistinguishable": bool(include_indistinguishable),
        "bootstrap": settings,
        "overall": _block(rows, names, trajs, boot),
        "outcomes": _outcomes(trajs, boot),
        "ceilings": count_ceilings(trajs),
    }
    for b in BREAKDOWNS:
        keys = {_key(t, b) for t in trajs} - {None}
        last = [k for k in _LAST.get(b, ()) if k in keys]
        order = [k for k in _ORDER[b] if k in keys] + sorted(keys - set(_ORDER[b]) - set(last)) + last
        sub: dict[str, Any] = {}
        for k in order:
            idx = [j for j, t in enumerate(trajs) if _key(t, b) == k]
            part = [trajs[j] for j in idx]
            sub[k] = {
                "n_trajectories": len(idx),
                "metrics": _block([rows[j] for j in idx], names, part, boot),
                "outcomes": _outcomes(part, boot),
                "ceilings": count_ceilings(part),
            }
        out[f"by_{b}"] = sub
    out["premise_originals"] = {"rule": rule, "n": sum(originals)}
    return out


def write_metrics_json(trajectories: Sequence[Trajectory | Mapping[str, Any]], path: str | os.PathLike, *,
                       original_ids: Collection[str] | None = None,
                       include_indistinguishable: bool = False) -> dict[str, Any]:
    """Aggregate (see :func:`aggregate`) and write the result as ``metrics.json`` (UTF-8, indented).

    Returns:
        The dict written.

    Raises:
        MetricsError: as :func:`aggregate`.
        OSError: the file cannot be written (e.g. its folder does not exist).
    """
    result = aggregate(trajectories, original_ids=original_ids, include_indistinguishable=include_indistinguishable)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
    return result
