"""Episode outcomes: how each episode ended, the run's shares with their n and intervals.

The embedded runs of the oracle, no-clarify and random agents (seed 0) are played once for the module;
their shares are asserted exactly, each from the trajectories themselves (their last turns). The
budget-spent and malformed endings are played through the real env with agents that keep asking or
never emit a valid action.
"""
from __future__ import annotations

from collections import Counter

import pytest

from textsql_clarify.baselines.agents import make_agent
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.rewards.metrics import aggregate
from textsql_clarify.rewards.outcomes import OUTCOMES, episode_outcome, outcome_summary
from textsql_clarify.trajectory import Trajectory, Turn


@pytest.fixture(scope="module")
def samples():
    return load_dataset("embedded")


@pytest.fixture(scope="module")
def runs(samples):
    """``{agent: (trajectories, metrics)}`` for the oracle, no-clarify and random agents on the embedded set."""
    return {a: evaluate(samples, make_agent(a, seed=0), seed=0, progress=False)
            for a in ("oracle", "no-clarify", "random")}


class _Repeat:
    """An agent that sends the same action string on every turn."""

    privileged = False

    def __init__(self, action: str):
        self.action = action

    def begin_episode(self, sample) -> None:
        pass

    def act(self, obs, info) -> str:
        return self.action


def test_outcome_shares_on_the_embedded_set(runs):
    expected = {  # (sql, feedback) counts of 48 episodes; no other ending
        "oracle": (36, 12),      # SQL on the 12 answerable and 24 ambiguous samples, feedback on the 12 unanswerable
        "no-clarify": (36, 12),  # the same endings, without asking
        "random": (22, 26),      # seed 0: 2 + 11 + 9 SQL endings, 10 + 13 + 3 feedback endings
    }
    for agent, (n_sql, n_fb) in expected.items():
        trajs, metrics = runs[agent]
        # the endings read from the trajectories themselves: the last turn's action type
        last = Counter(t.turns[-1].action_type for t in trajs)
        assert last == Counter({"sql": n_sql, "feedback": n_fb}), agent
        s = outcome_summary(trajs)
        assert s["n"] == 48
        assert s["shares"]["sql"] == {"value": n_sql / 48, "n": 48, "count": n_sql, "ci95": s["shares"]["sql"]["ci95"]}
        assert s["shares"]["feedback"]["count"] == n_fb and s["shares"]["feedback"]["value"] == n_fb / 48
        for o in ("budget_spent", "malformed", "truncated"):
            assert s["shares"][o] == {"value": 0.0, "n": 48, "count": 0, "ci95": [0.0, 0.0]}, (agent, o)
        lo, hi = s["shares"]["sql"]["ci95"]
        assert lo < n_sql / 48 < hi and 0.0 < lo and hi < 1.0
        assert metrics["outcomes"] == s  # metrics.json carries the same block
    # mean turns and clarifications, from the turns of each run (81, 54, 71 turns; 27, 0, 21 clarifications)
    for agent, turns, clar in (("oracle", 81, 27), ("no-clarify", 54, 0), ("random", 71, 21)):
        trajs, metrics = runs[agent]
        assert sum(len(t.turns) for t in trajs) == turns
        assert metrics["outcomes"]["turns"]["value"] == turns / 48 and metrics["outcomes"]["turns"]["n"] == 48
        assert metrics["outcomes"]["clarifications"]["value"] == clar / 48
    assert runs["no-clarify"][1]["outcomes"]["clarifications"]["ci95"] == [0.0, 0.0]


def test_outcomes_per_breakdown_block(runs):
    _, m = runs["random"]
    by = {g: blk["outcomes"]["shares"] for g, blk in m["by_group"].items()}
    assert {g: (s["sql"]["count"], s["feedback"]["count"]) for g, s in by.items()} == {
        "answerable": (2, 10), "ambiguous": (11, 13), "unanswerable": (9, 3)}
    assert m["by_group"]["ambiguous"]["outcomes"]["n"] == 24
    _, o = runs["oracle"]
    assert o["by_group"]["unanswerable"]["outcomes"]["shares"]["feedback"]["value"] == 1.0
    sub = o["by_subcategory"]
    assert all(blk["outcomes"]["n"] == blk["n_trajectories"] for blk in sub.values())
    assert sum(blk["outcomes"]["shares"]["sql"]["count"] for blk in sub.values()) == 36


def test_budget_spent_and_malformed_through_the_env(samples):
    chosen = [s for s in samples if s.group == "ambiguous"][:2]
    # asks on every turn: three clarifications are answered, the fourth (the forced final turn) is refused
    trajs, m = evaluate(chosen, _Repeat("<clarify>Which one do you mean?</clarify>"), progress=False)
    for t in trajs:
        assert t.outcome == "truncated" and [x.action_type for x in t.turns] == ["clarify"] * 3 + ["invalid"]
        assert episode_outcome(t) == "budget_spent"
    assert m["outcomes"]["shares"]["budget_spent"] == {"value": 1.0, "n": 2, "count": 2, "ci95": [1.0, 1.0]}
    assert m["outcomes"]["clarifications"]["value"] == 3.0 and m["outcomes"]["turns"]["value"] == 4.0
    # never a valid action: one retry, then the episode ends as an abstention (TIDE App. D)
    trajs, m = evaluate(chosen, _Repeat("I am not sure."), progress=False)
    for t in trajs:
        assert t.outcome == "abstain" and [x.action_type for x in t.turns] == ["invalid", "invalid"]
        assert episode_outcome(t) == "malformed"
    assert m["outcomes"]["shares"]["malformed"]["count"] == 2 and m["outcomes"]["clarifications"]["value"] == 0.0
    # the dict form (a line of trajectories.jsonl) reads the same
    assert episode_outcome(trajs[0].to_dict()) == "malformed"


def test_outcome_rules_on_constructed_trajectories():
    def traj(outcome: str, kinds: list[str]) -> Trajectory:
        turns = [Turn(index=k, phase="interactive", action_type=a, content="x") for k, a in enumerate(kinds)]
        return Trajectory(sample_id="s", db_id="d", group="answerable", subcategory="answerable_with_evidence",
                          turns=turns, outcome=outcome)

    assert episode_outcome(traj("sql", ["clarify", "sql"])) == "sql"
    assert episode_outcome(traj("feedback", ["feedback"])) == "feedback"
    assert episode_outcome(traj("truncated", ["clarify", "clarify", "clarify", "invalid"])) == "budget_spent"
    assert episode_outcome(traj("abstain", ["sql", "invalid", "invalid"])) == "malformed"
    # the turn cap after a clarification, one malformed action at the cap, or no turn at all
    assert episode_outcome(traj("truncated", ["clarify"])) == "truncated"
    assert episode_outcome(traj("abstain", ["clarify", "invalid"])) == "truncated"
    assert episode_outcome(traj("abstain", [])) == "truncated"
    with pytest.raises(TypeError, match="Trajectory"):
        episode_outcome("sql")


def test_empty_run_and_p_protocol_runs():
    s = outcome_summary([])
    assert s["n"] == 0 and s["turns"] == {"value": None, "n": 0, "ci95": None}
    assert all(s["shares"][o] == {"value": None, "n": 0, "count": 0, "ci95": None} for o in OUTCOMES)
    assert aggregate([])["outcomes"] == s
    f = Trajectory(sample_id="a", db_id="d", group="answerable", subcategory="answerable_with_evidence",
                   turns=[Turn(0, "interactive", "sql", "SELECT 1")], outcome="sql", scores={"ex": 1.0})
    p = Trajectory(sample_id="a", db_id="d", group="answerable", subcategory="answerable_with_evidence",
                   turns=[Turn(0, "interactive", "feedback", "no")], outcome="feedback", protocol="p")
    # a p-protocol re-run of the same sample is not counted twice; a p-only run is counted as it is
    assert aggregate([f, p])["outcomes"]["shares"]["sql"]["count"] == 1
    assert aggregate([f, p])["outcomes"]["n"] == 1
    assert aggregate([p])["outcomes"]["shares"]["feedback"]["count"] == 1
