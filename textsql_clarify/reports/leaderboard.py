"""The report's tables: the leaderboard with paired differences, per-category tables, outcomes.

Numbers come from each run's ``metrics.json`` (every mean with ``value``, ``n`` and ``ci95``;
``docs/metrics.md``). Paired differences are computed here, from the trajectories: each run's per-sample value of a
metric (:func:`~textsql_clarify.rewards.metrics.trajectory_metrics`, the same definitions and
exclusions as the means) and :func:`~textsql_clarify.rewards.bootstrap.paired_difference` over the
samples both runs define (PremiseSQL's paired bootstrap interval; the p of an exact McNemar or paired
sign-flip test, :mod:`~textsql_clarify.rewards.paired_test`), each run against the first one. Each
difference carries its verdict (:func:`significance_label`): ``better`` or ``worse`` by the metric's documented
direction (:mod:`~textsql_clarify.rewards.direction`) where its p is under :data:`ALPHA`, else ``n.s. (higher)`` or
``n.s. (lower)``, the way the value moved without calling it a finding.
"""
from __future__ import annotations

from typing import Any, Sequence

from .runs import Run

#: the leaderboard's metrics, in order; those undefined in every run are left out (:func:`defined_metrics`).
#: EM (Spider's exact-set-match) is defined in ``textsql-clarify score`` runs only.
HEADLINE = ("EX", "EM", "FB", "abstained", "EX_post", "AIR", "AR", "DEA", "DRR", "DRA", "L1-IR", "JIR", "L2-IR^p",
            "SQL_behaviour", "DET", "TYPE", "cell_f1", "turns", "format_valid_rate")
#: metrics plotted per category (bar charts), where defined.
PLOTTED = ("EX", "FB", "abstained", "EX_post", "AIR", "AR", "DEA", "SQL_behaviour", "cell_f1")
#: the breakdowns a report can show (``--by``); ``metrics.json`` keys ``by_<name>``.
BREAKDOWNS = ("group", "subcategory", "difficulty", "drift_subtype", "sample_type")
DEFAULT_BY = ("group", "subcategory")
#: metrics whose values are not in [0, 1] (their axis is not fixed at 1).
UNBOUNDED = {"SQL_behaviour": 2.0, "turns": None, "spurious_tables": None}


#: the report's significance level: a paired difference is called ``better`` / ``worse`` only at p < ALPHA
#: (two-sided; the conventional 5 %), else ``n.s. (higher)`` / ``n.s. (lower)`` (:func:`significance_label`).
ALPHA = 0.05
#: the prefix of a label whose difference is not significant at :data:`ALPHA`.
NOT_SIGNIFICANT = "n.s."


def significance_label(metric: str, delta: float | None, p_value: float | None, groups: Any = None, *,
                       alpha: float = ALPHA) -> str:
    """The label a paired difference is printed with: its direction, and whether it is a finding.

    Args:
        metric: the metric's name (:func:`~textsql_clarify.rewards.direction.direction`).
        delta: this run minus the reference (``None``: undefined, n = 0).
        p_value: the difference's two-sided p (:func:`~textsql_clarify.rewards.bootstrap.paired_difference`);
            ``None`` (no test) counts as not significant.
        groups: the paired samples' groups (AR's direction depends on them).
        alpha: the significance level (default :data:`ALPHA`), in (0, 1).
    Returns:
        ``"better"`` / ``"worse"`` (by the metric's direction) when ``p_value < alpha``; otherwise
        ``"n.s. (higher)"`` / ``"n.s. (lower)"``, the sign of ``delta``; ``""`` when there is no difference
        (``delta`` 0 or ``None``) or the metric has no direction over ``groups`` (AR over a mix).
    Raises:
        KeyError: a metric with no documented direction (as :func:`~textsql_clarify.rewards.direction.direction`).
        ValueError: ``alpha`` outside (0, 1).

    Source: docs/metrics.md, "Which way is better" and "Paired tests".
    """
    from ..rewards.direction import verdict

    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    way = verdict(metric, delta, groups)
    if not way:
        return ""
    if p_value is not None and p_value < alpha:
        return way
    return f"{NOT_SIGNIFICANT} ({'higher' if delta > 0 else 'lower'})"


#: what a cell of a metric that does not apply to its run holds: undefined (n = 0), marked so the page can say why.
NOT_APPLICABLE = {"value": None, "n": 0, "ci95": None, "not_applicable": True}


def _defined(m: Any) -> bool:
    return isinstance(m, dict) and bool(m.get("n")) and m.get("value") is not None


def applies(run: Run, metric: str) -> bool:
    """Whether ``metric`` describes ``run``: not for a predictions replay (``textsql-clarify score``,
    :attr:`~textsql_clarify.reports.runs.Run.replay`) when it is one of the agent-behaviour metrics that the
    score tables leave out (:data:`~textsql_clarify.rewards.report.REPLAY_SKIPPED`: AR, turns, DEC, ...; every
    episode is one SQL turn), else always.

    Args:
        run: the run. metric: a metric name.
    Returns:
        ``False`` for a replay's skipped metric; the report shows such a cell as not applicable, leaves the
        metric's column out where it applies to no run, and gives no paired difference for it.
    """
    from ..rewards.report import REPLAY_SKIPPED

    return not (run.replay and metric in REPLAY_SKIPPED)


def applies_outcome(run: Run, column: str) -> bool:
    """As :func:`applies`, for an outcomes-table column (an outcome share, ``turns`` or ``clarifications``):
    a replay's :data:`~textsql_clarify.rewards.report.REPLAY_SKIPPED_OUTCOMES` do not apply (only ``sql``
    stays: one SQL turn per episode)."""
    from ..rewards.report import REPLAY_SKIPPED_OUTCOMES

    return not (run.replay and column in REPLAY_SKIPPED_OUTCOMES)


def breakdown_block(run: Run, by: str) -> dict[str, Any]:
    """``metrics.json``'s ``by_<by>`` block of a run (``{}`` when absent).

    Raises:
        ValueError: ``by`` is not one of :data:`BREAKDOWNS`.
    """
    if by not in BREAKDOWNS:
        raise ValueError(f"unknown breakdown {by!r}; choose from {', '.join(BREAKDOWNS)}")
    return run.metrics.get(f"by_{by}") or {}


def defined_metrics(runs: Sequence[Run], names: Sequence[str] = HEADLINE) -> list[str]:
    """The ``names`` that some run defines overall (n > 0) and that apply to it (:func:`applies`), in the given
    order (undefined is not shown; AR and turns are not shown for a report of predictions replays only)."""
    return [m for m in names if any(applies(r, m) and _defined(r.metrics["overall"].get(m)) for r in runs)]


def per_sample_values(run: Run, metric: str) -> dict[str, float | None]:
    """A run's value of ``metric`` for each of its samples, as its mean in ``metrics.json`` takes them.

    The same trajectories as the mean (``indistinguishable`` ones out unless the run kept them; PremiseSQL
    originals by the same rule as :func:`~textsql_clarify.rewards.metrics.aggregate`). Keys are sample ids;
    a p-protocol episode (TIDE §4.1) is keyed ``<id>@p``. ``format_valid_rate`` is the episode's share of
    well-formed actions here (the mean pools actions).

    Args:
        run: the run.
        metric: a metric name of :func:`~textsql_clarify.rewards.metrics.trajectory_metrics`.
    Returns:
        ``{sample key: value or None}``.
    """
    from ..rewards.metrics import INDISTINGUISHABLE, trajectory_metrics

    cache = run.per_sample
    if not cache:
        include = bool(run.metrics.get("include_indistinguishable", False))
        trajs = [t for t in run.trajectories if include or INDISTINGUISHABLE not in t.flags]
        fallback = any(t.premise_flaw is not None for t in trajs)
        for t in trajs:
            key = t.sample_id if t.protocol == "f" else f"{t.sample_id}@{t.protocol}"
            original = fallback and t.premise_flaw is None and t.group == "answerable"
            cache[key] = trajectory_metrics(t, original=original)
    return {k: row.get(metric) for k, row in cache.items()}


def _paired_groups(run: Run, ref: Run) -> set[str]:
    """The groups of the samples both runs hold (what AR's direction depends on)."""
    ids = {t.sample_id for t in run.trajectories}
    return {t.group for t in ref.trajectories if t.sample_id in ids}


def leaderboard(runs: Sequence[Run], metrics: Sequence[str] | None = None, *, seed: int = 0,
                n_resamples: int = 1000) -> dict[str, Any]:
    """The runs side by side, with each run's paired difference from the first.

    Args:
        runs: the runs; ``runs[0]`` is the reference.
        metrics: the columns (default: :data:`HEADLINE` metrics that some run defines).
        seed, n_resamples: of the paired bootstrap and the Monte Carlo sign-flip
            (:func:`~textsql_clarify.rewards.bootstrap.paired_difference`).
    Returns:
        ``{"metrics": [names], "reference": runs[0].name, "rows": [{"run": name, "agent", "dataset",
        "n_trajectories", "privileged", "replay", "metrics": {m: {"value", "n", "ci95"}}, "diff": {m: {"value",
        "n", "ci95", "p_value", "test", "verdict", "significant", "direction"}} | None (the reference)}]}``; ``diff`` is this run
        minus the reference over the samples both define; ``test`` names the test behind ``p_value``; a metric
        that does not apply to a run (:func:`applies`) is :data:`NOT_APPLICABLE` there, and its difference
        against or from that run is undefined (n = 0);
        ``verdict`` is ``"better"`` or ``"worse"`` at p < :data:`ALPHA`, ``"n.s. (higher)"`` or ``"n.s. (lower)"``
        above it, ``""`` for no difference or a metric with no direction over these samples
        (:func:`significance_label`); ``significant`` is whether p < :data:`ALPHA`; ``direction`` is the one it
        follows, ``"higher"``, ``"lower"`` or ``None`` (:func:`~textsql_clarify.rewards.direction.direction`).
        EM's per-sample values are the trajectories' ``scores["em"]``, which ``textsql-clarify score`` writes
        (:func:`~textsql_clarify.baselines.predictions.add_exact_match`): its difference between two score runs
        is exact McNemar like EX's; against a run without them it is undefined (n = 0).
    Raises:
        KeyError: a metric with no documented direction.
    """
    from ..rewards.bootstrap import paired_difference
    from ..rewards.direction import direction

    names = list(metrics) if metrics is not None else defined_metrics(runs)
    rows = []
    for k, r in enumerate(runs):
        row = {"run": r.name, "agent": r.agent, "dataset": r.info.get("dataset"),
               "n_trajectories": r.metrics.get("n_trajectories"), "privileged": r.privileged, "replay": r.replay,
               "metrics": {m: _mean(r.metrics["overall"].get(m)) if applies(r, m) else dict(NOT_APPLICABLE)
                           for m in names}, "diff": None}
        if k > 0:
            groups = _paired_groups(r, runs[0])
            row["diff"] = {}
            for m in names:
                both = applies(r, m) and applies(runs[0], m)
                d = paired_difference(per_sample_values(r, m) if both else {}, per_sample_values(runs[0], m),
                                      seed=seed, n_resamples=n_resamples)
                p = d["p_value"]
                row["diff"][m] = {**d, "verdict": significance_label(m, d["value"], p, groups),
                                  "significant": p is not None and p < ALPHA, "direction": direction(m, groups)}
        rows.append(row)
    return {"metrics": names, "reference": runs[0].name if runs else None, "rows": rows}


def sample_overlaps(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """How many sample ids each run after the first shares with the first (the paired differences' reference).

    A paired difference is taken over the samples both runs define, so a run that shares no id with the
    reference has every Δ undefined (``textsql-clarify report`` warns on stderr).

    Args:
        runs: the runs; ``runs[0]`` is the reference.
    Returns:
        One dict per run whose sample ids differ from the reference's, in report order: ``{"run": name,
        "reference": reference name, "shared": ids in both, "reference_n": the reference's ids, "n": this
        run's ids}``; ``[]`` when every run is over the reference's samples (or there is one run).
    """
    if len(runs) < 2:
        return []
    ref = {t.sample_id for t in runs[0].trajectories}
    out = []
    for r in runs[1:]:
        ids = {t.sample_id for t in r.trajectories}
        if ids != ref:
            out.append({"run": r.name, "reference": runs[0].name, "shared": len(ids & ref),
                        "reference_n": len(ref), "n": len(ids)})
    return out


def _mean(m: Any) -> dict[str, Any]:
    """A metrics.json mean as ``{"value", "n", "ci95"}`` (``ci95`` None where the file has none)."""
    if not isinstance(m, dict):
        return {"value": None, "n": 0, "ci95": None}
    return {"value": m.get("value"), "n": m.get("n", 0), "ci95": m.get("ci95")}


def category_keys(runs: Sequence[Run], by: str) -> list[str]:
    """The breakdown's keys over all runs, in the first run's order (``metrics.json`` keeps taxonomy
    order), then any other run's new keys in its order."""
    keys: list[str] = []
    for r in runs:
        for k in breakdown_block(r, by):
            if k not in keys:
                keys.append(k)
    return keys


def category_table(runs: Sequence[Run], by: str, metrics: Sequence[str] | None = None) -> dict[str, Any]:
    """One breakdown of every run (per-category tables and charts).

    Args:
        runs: the runs.
        by: one of :data:`BREAKDOWNS`.
        metrics: the columns (default: :data:`HEADLINE` metrics defined in some row of this breakdown).
    Returns:
        ``{"by": by, "metrics": [names], "keys": [keys], "rows": [{"key", "run", "n_trajectories",
        "metrics": {m: {"value", "n", "ci95"}}}]}``, rows by key, then by run (a run without the key has
        ``n_trajectories`` 0 and undefined metrics; a metric that does not apply to a run, :func:`applies`, is
        :data:`NOT_APPLICABLE` in its rows and, by default, a column only where it applies to some run).
    Raises:
        ValueError: ``by`` is unknown.
    """
    keys = category_keys(runs, by)
    blocks = [breakdown_block(r, by) for r in runs]
    if metrics is None:
        metrics = [m for m in HEADLINE
                   if any(applies(r, m) and _defined((b.get(k) or {}).get("metrics", {}).get(m))
                          for r, b in zip(runs, blocks) for k in b)]
    rows = []
    for k in keys:
        for r, b in zip(runs, blocks):
            blk = b.get(k) or {}
            rows.append({"key": k, "run": r.name, "n_trajectories": blk.get("n_trajectories", 0),
                         "metrics": {m: _mean((blk.get("metrics") or {}).get(m)) if applies(r, m)
                                     else dict(NOT_APPLICABLE) for m in metrics}})
    return {"by": by, "metrics": list(metrics), "keys": keys, "rows": rows}


def outcome_table(run: Run) -> dict[str, Any]:
    """How a run's episodes ended: ``metrics.json``'s ``outcomes`` block, else
    :func:`~textsql_clarify.rewards.outcomes.outcome_summary` of its trajectories (older folders).

    Returns:
        ``{"n": N, "shares": {outcome: {"value", "n", "count", "ci95"}}, "turns": {...}, "clarifications": {...}}``.
    """
    block = run.metrics.get("outcomes")
    if isinstance(block, dict) and "shares" in block:
        return block
    from ..rewards.outcomes import outcome_summary

    return outcome_summary([t for t in run.trajectories if t.protocol == "f"])
