"""How each episode ended, and the shares of a run's endings with their intervals.

A run that scores 0 everywhere may have answered wrongly or never emitted a valid action; the outcome
shares say which. Each episode gets exactly one of :data:`OUTCOMES`, read from its
:class:`~textsql_clarify.trajectory.Trajectory` (the env's ``outcome`` and its last turns; the env's
rules are in ``envs/env.py``'s module docstring):

* ``sql``: it ended on an SQL action (``outcome == "sql"``; for a drift sample, the post-drift SQL).
* ``feedback``: it ended on a feedback action (``outcome == "feedback"``).
* ``budget_spent``: the clarification budget ran out and the agent still asked: on the forced final turn
  (ABISS §5.1) a clarification is refused and the episode ends without an answer. The env records this
  as ``outcome == "truncated"`` whose last turn is the refused (``invalid``) action.
* ``malformed``: two malformed or refused actions in a row ended the episode as an abstention (TIDE App. D,
  one retry): ``outcome == "abstain"`` and the last two turns are ``invalid``.
* ``truncated``: anything else: the env's turn cap ended it (``outcome == "truncated"`` after a
  clarification, or ``"abstain"`` after a single malformed action at the cap), or the trajectory holds no
  terminal action at all (an unfinished episode).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..trajectory import Trajectory
from .bootstrap import DEFAULT_LEVEL, DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_cis

#: episode endings, in report order.
OUTCOMES = ("sql", "feedback", "budget_spent", "malformed", "truncated")
#: the per-episode counts :func:`outcome_summary` averages next to the shares.
COUNTS = ("turns", "clarifications")


def _trajectory(t: Trajectory | Mapping[str, Any]) -> Trajectory:
    if isinstance(t, Trajectory):
        return t
    if isinstance(t, Mapping):
        return Trajectory.from_dict(dict(t))
    raise TypeError(f"expected a Trajectory or its dict, got {type(t).__name__}")


def episode_outcome(t: Trajectory | Mapping[str, Any]) -> str:
    """The one :data:`OUTCOMES` entry that says how an episode ended (module docstring).

    Args:
        t: a trajectory, or its ``to_dict()`` record (a line of ``trajectories.jsonl``).
    Returns:
        ``"sql"`` | ``"feedback"`` | ``"budget_spent"`` | ``"malformed"`` | ``"truncated"``.
    Raises:
        TypeError: ``t`` is neither a trajectory nor its dict (or the dict has unknown fields).
    """
    t = _trajectory(t)
    if t.outcome in ("sql", "feedback"):
        return t.outcome
    turns = t.turns
    if t.outcome == "truncated" and turns and turns[-1].action_type == "invalid":
        return "budget_spent"  # a clarification refused on the forced final turn (the env's final_refused)
    if t.outcome == "abstain" and len(turns) >= 2 and turns[-1].action_type == turns[-2].action_type == "invalid":
        return "malformed"
    return "truncated"


def episode_turns(t: Trajectory) -> int:
    """Agent turns outside the classification phase (ABISS App. D "Avg. Turns", the ``turns`` metric)."""
    return sum(1 for x in t.turns if x.phase != "classification")


def outcome_summary(trajectories: Sequence[Trajectory | Mapping[str, Any]], *, n_resamples: int = DEFAULT_RESAMPLES,
                    level: float = DEFAULT_LEVEL, seed: int = DEFAULT_SEED) -> dict:
    """Share of episodes per outcome, and the mean turns and clarifications, each with n and a bootstrap
    interval over episodes (:func:`~textsql_clarify.rewards.bootstrap.bootstrap_ci`, PremiseSQL's
    percentile intervals).

    Every trajectory given counts once; the caller chooses which (``aggregate`` passes the f-protocol
    episodes, or the p-protocol ones of a run that has no other).

    Args:
        trajectories: the episodes (trajectories or their dicts).
        n_resamples, level, seed: bootstrap settings.
    Returns:
        ``{"n": N, "shares": {outcome: {"value": k / N | None, "n": N, "count": k, "ci95": [lo, hi] | None}},
        "turns": {"value", "n", "ci95"}, "clarifications": {"value", "n", "ci95"}}``, outcomes in
        :data:`OUTCOMES` order; with no episode every value and interval is ``None`` and every n 0.
        ``clarifications`` counts the answered clarification turns of an episode (a refused one is an
        ``invalid`` turn and is not counted).
    Raises:
        TypeError: as :func:`episode_outcome`.
        BootstrapError: a bad bootstrap setting.
    """
    trajs = [_trajectory(t) for t in trajectories]
    ends = [episode_outcome(t) for t in trajs]
    columns: dict[str, list[float]] = {o: [float(e == o) for e in ends] for o in OUTCOMES}
    columns["turns"] = [float(episode_turns(t)) for t in trajs]
    columns["clarifications"] = [float(len(t.clarifications)) for t in trajs]
    cis = bootstrap_cis(columns, n_resamples=n_resamples, level=level, seed=seed)
    n = len(trajs)

    def cell(name: str) -> dict:
        ci = cis[name]
        return {"value": sum(columns[name]) / n if n else None, "n": n, "ci95": None if ci is None else list(ci)}

    shares = {}
    for o in OUTCOMES:
        shares[o] = {**cell(o), "count": int(sum(columns[o]))}
        shares[o] = {k: shares[o][k] for k in ("value", "n", "count", "ci95")}
    return {"n": n, "shares": shares, "turns": cell("turns"), "clarifications": cell("clarifications")}
