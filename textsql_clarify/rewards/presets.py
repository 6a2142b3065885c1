"""Reward presets: the scalar reward is a documented weighted sum of reward components.

Every component stays separate in ``info["reward_components"]``; a preset only says how they are
summed into the scalar ``reward`` that ``step`` returns. A component that is ``None`` (undefined)
contributes nothing; it is never treated as 0 or 1. See ``docs/rewards.md``.

Components (per turn):

* ``ex``: 1/0 relaxed EX of a SQL turn against the gold in force (ABISS §5.3, App. A); 0 for SQL on an
  unanswerable sample; ``None`` when the gold is empty or fails (ceiling / invalid sample).
* ``ex_strict``: 1/0 strict EX of a SQL turn: the gold's number of columns (no column superset), rows as bags
  or in order as the gold says, the same options as ``ex`` otherwise; ``None`` exactly where ``ex`` is.
* ``ex_suite`` (only with the env's ``ex_mode="suite"``): 1/0 test-suite EX of a SQL turn (Zhong, Yu and Klein
  2020): ``ex``'s verdict on the sample's database *and* on every database variant where the gold runs
  (:mod:`textsql_clarify.rewards.ex_suite`); ``None`` exactly where ``ex`` is, 0 where ``ex`` is 0, and 0 when the
  check runs out of the prediction's time limit. ``ex_strict_suite``: the same with ``ex_strict``. A constant or a
  filter that matches the gold on one database by chance (``count(*)*0`` against a gold returning 0) passes ``ex``
  and fails ``ex_suite``. ``ex`` itself stays single-instance (comparable to published numbers).
* ``feedback``: 1/0 FB of a feedback turn (ABISS §5.3); 0 for feedback on a solvable sample; ``None`` on an
  unanswerable sample without a stated rationale (nothing to compare with: see ``abstained``).
* ``abstained``: on an unanswerable sample without a stated rationale only (Spider unanswerable): 1 when
  the episode ended in feedback the judge's no-rationale rule accepts (not SQL, blames no existing table or
  column as missing), 0 when it ended otherwise (SQL, a rejected feedback, out of turns); ``None`` elsewhere.
  Weight 0 in every built-in preset: on a set of unanswerable samples only, refusing everything earns as much
  as the oracle, so it is a reward only on mixed data and only in a custom preset (``docs/rewards.md``).
* ``format``: -1 on a malformed or refused action, else 0 (TIDE App. D retry rule).
* ``turn_penalty``: -1 on each clarification turn, else 0.
* ``drift``: on the post-drift SQL turn, 1 if that SQL is correct (post-drift ``ex`` 1) and revised what the
  drift retracted (``commitments.drift_revision``: the retracted units dropped, nothing else withdrawn, the
  introduced units carried), else 0; ``None`` when ``ex`` is. TIDE's Rec(τ) alone (any change) is the DRR
  metric, never paid. ``drift_revised`` (the revision without correctness) is reported and not weightable.
* ``cell_f1`` (and the other article scores): cell-level F1 of a SQL turn (article: cell precision and
  recall); ``None`` when undefined.
* ``cell_f1_covered``: ``cell_f1 × column_recall``. Cell F1 alone counts only paired columns, so a query
  that drops a hard gold column keeps F1 1.0; scaling by column recall removes that shortcut. Kept as a
  metric; the ``dense`` preset no longer weights it (order, duplicates, truncation and width still paid).
* ``sql_partial``: 1 for the strict execution match, else capped partial credit: rows x columns x order x
  content with gates for errors of form (width, row window, set operation, duplicates); ``rewards/dense.py``.
* ``decision``: on the episode's decision turn (its first well-formed ``sql`` / ``clarify`` / ``feedback`` action),
  1 when that type is the sample's right one (:func:`~textsql_clarify.rewards.decision.expected_decision`: ask on
  an ambiguous sample, refuse on an unanswerable one, answer otherwise), else 0; 0 on the last turn of an episode
  that never made one; ``None`` on every other turn and where the right type is undefined (``indistinguishable``).
  A constant policy earns its group's share of the defined samples (the prior): ``docs/rewards.md``, "decision".
"""
from __future__ import annotations

import math
from typing import Mapping

#: name -> {component: weight}. Components not listed have weight 0.
PRESETS: dict[str, dict[str, float]] = {
    # EX on SQL, FB on feedback, nothing else: 0 for the wrong terminal action type.
    "binary": {"ex": 1.0, "feedback": 1.0},
    # binary with strict EX: the answer's columns are the gold's, no extra column tolerated.
    "strict": {"ex_strict": 1.0, "feedback": 1.0},
    # binary plus small shaping: malformed actions and each clarification cost a little.
    "shaped": {"ex": 1.0, "feedback": 1.0, "format": 0.1, "turn_penalty": 0.05},
    # partial credit on SQL turns: sql_partial (rewards/dense.py: 1 for the exact answer, capped partial
    # credit that ranks honest near-misses above hacks), same shaping as "shaped".
    "dense": {"sql_partial": 1.0, "feedback": 1.0, "format": 0.1, "turn_penalty": 0.05},
    # binary plus a bonus for a correct post-drift SQL that revised what the drift retracted (docs/metrics.md).
    "drift": {"ex": 1.0, "feedback": 1.0, "drift": 0.5},
    # the ask / answer / refuse decision alone (ABISS §5.1 classification phase as a reward; rewards/decision.py)
    "decision": {"decision": 1.0},
    # shaped plus the decision: the outcome and the kind of first move are both paid
    "shaped_decision": {"ex": 1.0, "feedback": 1.0, "format": 0.1, "turn_penalty": 0.05, "decision": 1.0},
}

#: presets that pay a test-suite component, which only an env with ``ex_mode="suite"`` computes (it refuses them
#: otherwise). Kept out of :data:`PRESETS`, which the red team (``bench/red_team.py``,
#: ``tests/test_reward_hacks.py``) plays in full with the single-instance env, until it plays them with
#: ``ex_mode="suite"``; :func:`resolve_preset` and ``eval --preset`` know them.
#: ``suite``: binary with test-suite EX in place of EX (``ex_suite`` on SQL, FB on feedback).
SUITE_PRESETS: dict[str, dict[str, float]] = {
    "suite": {"ex_suite": 1.0, "feedback": 1.0},
}


#: every component a preset may weight (numeric ones; ``components`` is a nested dict, not weightable).
COMPONENTS = ("ex", "ex_strict", "ex_suite", "ex_strict_suite", "feedback", "abstained", "format", "turn_penalty", "classification", "drift",
              "decision", "cell_precision", "cell_recall", "cell_f1", "cell_f1_covered", "sql_partial", "column_precision",
              "column_recall", "table_recall", "table_precision", "spurious_tables")


def resolve_preset(preset: str | Mapping[str, float]) -> dict[str, float]:
    """A preset name (:data:`PRESETS` or :data:`SUITE_PRESETS`) or an explicit ``{component: weight}`` mapping ->
    the weights.

    Raises:
        ValueError: unknown preset name, an unknown component name, or a non-numeric weight.
    """
    if isinstance(preset, str):
        if preset in SUITE_PRESETS:
            return dict(SUITE_PRESETS[preset])
        if preset not in PRESETS:
            raise ValueError(f"unknown reward preset {preset!r}; available: {sorted(PRESETS) + sorted(SUITE_PRESETS)}")
        return dict(PRESETS[preset])
    weights = {}
    if not hasattr(preset, "items"):
        raise ValueError(f"reward_preset must be a preset name or a {{component: weight}} mapping, got {preset!r}")
    for k, v in dict(preset).items():
        if k not in COMPONENTS:
            raise ValueError(f"unknown reward component {k!r} in reward_preset; weightable: {list(COMPONENTS)}")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"reward weight for {k!r} must be a finite number, got {v!r}")
        weights[str(k)] = float(v)
    return weights


def scalar_reward(components: Mapping[str, object], weights: Mapping[str, float]) -> float:
    """Weighted sum of the numeric components; ``None`` and non-numeric components are skipped."""
    total = 0.0
    for name, w in weights.items():
        v = components.get(name)
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)):
            total += w * float(v)
    return total
