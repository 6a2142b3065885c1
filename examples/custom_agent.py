"""A hand-written agent played through ``TextSQLClarify-v0``, then scored with the project's metrics.

    .venv/bin/python examples/custom_agent.py

The agent asks one clarification when the question looks vague, answers with a fixed SQL otherwise,
and refuses when the question mentions something the schema lacks. It is deliberately naive: the point
is the loop (reset, step, info["messages"], info["trajectory"]) and the aggregation.
"""
from __future__ import annotations

import gymnasium as gym

import textsql_clarify  # noqa: F401  (registers TextSQLClarify-v0)
from textsql_clarify.rewards.metrics import aggregate
from textsql_clarify.rewards.report import render_table

VAGUE = ("recent", "high", "popular", "senior", "my ", "each", "every", "email", "date", "performance")


def act(obs: dict) -> str:
    q = obs["question"].lower()
    if obs["clarifications_left"] == 3 and any(w in q for w in VAGUE):
        return "<clarify>What exactly do you mean by that?</clarify>"
    if "staff" in q or "salary" in q or "letter" in q:
        return "<feedback>The database has no information about that.</feedback>"
    return "<sql>SELECT name FROM students</sql>"


def main() -> None:
    env = gym.make("TextSQLClarify-v0", reward_preset="shaped")
    base = env.unwrapped
    trajectories = []
    for i in range(len(base.samples)):
        obs, info = env.reset(seed=i, options={"index": i})
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(act(obs))
            done = terminated or truncated
        trajectories.append(info["trajectory"])
    print(render_table(aggregate(trajectories)))


if __name__ == "__main__":
    main()
