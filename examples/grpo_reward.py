"""A GRPO-style reward function over the vector env: score a group of completions on chosen samples.

    .venv/bin/python examples/grpo_reward.py

RL trainers such as TRL's ``GRPOTrainer`` call a reward function with the prompts, the sampled
completions and the dataset's extra columns, and expect one float per completion. :class:`EnvReward`
does that with ``gym.make_vec("TextSQLClarify-v0")``: each completion is played as the first action
of a fresh episode on its row's sample (``reset(options={"sample_ids": [...]})``), and the env's
reward (a named preset, ``docs/rewards.md``) is returned. The completions of a step that clarify are
answered by the simulated user in one batch. This is single-turn scoring: a clarification earns the
preset's turn penalty and its episode is left open; multi-turn training needs a rollout loop (see
``textsql_clarify.rollout.episodes.run_lockstep`` for one over plain envs).

:func:`dataset_rows` builds the prompt rows (chat messages, as ``info["messages"]`` gives them, plus
the ``sample_id`` column the reward function reads). No TRL import is needed; the demo below scores a
hand-written group of four completions for each of three samples.
"""
from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym

import textsql_clarify  # noqa: F401  (registers TextSQLClarify-v0)


def dataset_rows(env_id: str = "TextSQLClarify-v0", limit: int | None = None, **env_kwargs: Any) -> list[dict]:
    """One row per sample: ``{"prompt": chat messages, "sample_id": id}``.

    Raises:
        DatasetError: the dataset in ``env_kwargs`` cannot be loaded.
    """
    env = gym.make(env_id, limit=limit, **env_kwargs)
    rows = []
    for sample in env.unwrapped.samples:
        _, info = env.reset(options={"sample_id": sample.id})
        rows.append({"prompt": info["messages"], "sample_id": sample.id})
    return rows


def completion_text(completion: Any) -> str:
    """The action string of a completion: a plain string, or TRL's conversational form (a list of
    messages, the last one the assistant's).

    Raises:
        TypeError: neither form.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


class EnvReward:
    """``reward(prompts, completions, sample_id, **kwargs) -> list[float]`` over a vector env.

    Args:
        num_envs: sub-envs stepped at once (completions are scored ``num_envs`` at a time).
        reward_preset: the env's reward preset (``binary``: EX or FB; ``shaped``: plus turn penalties).
        env_kwargs: other :class:`~textsql_clarify.envs.vector.TextSQLClarifyVectorEnv` options
            (dataset, simulator ...).
    Raises:
        ValueError: ``sample_id`` and ``completions`` differ in length (at call time).
    """

    __name__ = "textsql_clarify_reward"  # TRL logs reward functions by name

    def __init__(self, num_envs: int = 8, reward_preset: str = "binary", **env_kwargs: Any):
        self.envs = gym.make_vec("TextSQLClarify-v0", num_envs=num_envs, reward_preset=reward_preset, **env_kwargs)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], sample_id: Sequence[str],
                 **kwargs: Any) -> list[float]:
        if len(sample_id) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(sample_id)} sample ids")
        n = self.envs.num_envs
        rewards: list[float] = []
        for start in range(0, len(completions), n):
            ids = list(sample_id[start:start + n])
            acts = [completion_text(c) for c in completions[start:start + n]]
            k = len(ids)
            # a short last chunk fills the spare sub-envs with copies of its first row; their rewards are dropped
            self.envs.reset(options={"sample_ids": ids + [ids[0]] * (n - k)})
            _, reward, _, _, _ = self.envs.step(acts + [acts[0]] * (n - k))
            rewards += [float(r) for r in reward[:k]]
        return rewards


def main() -> None:
    rows = {r["sample_id"]: r for r in dataset_rows()}
    env = gym.make("TextSQLClarify-v0")
    samples = {s.id: s for s in env.unwrapped.samples}
    chosen = ["uni-ans-001", "uni-overlap-001", "uni-missrel-001"]
    prompts, completions, ids = [], [], []
    for sid in chosen:
        s = samples[sid]
        group = [f"<sql>{s.gold_sql}</sql>" if s.gold_sql else "<sql>SELECT 1</sql>",
                 "<sql>SELECT name FROM students</sql>",
                 "<clarify>Which one do you mean?</clarify>",
                 f"<feedback>{s.hidden_knowledge or 'The question cannot be answered.'}</feedback>"]
        for c in group:
            prompts.append(rows[sid]["prompt"])
            completions.append([{"role": "assistant", "content": c}])
            ids.append(sid)
    reward = EnvReward(num_envs=8)
    scores = reward(prompts, completions, sample_id=ids)
    print(f"{'sample':<18} {'gold SQL':>9} {'other SQL':>10} {'clarify':>8} {'feedback':>9}")
    for j, sid in enumerate(chosen):
        print(f"{sid:<18} " + " ".join(f"{x:>9.2f}" for x in scores[4 * j:4 * j + 4]))
    print(f"respond calls: {reward.envs.unwrapped.respond_calls}, clarifications answered: "
          f"{reward.envs.unwrapped.requests_answered}")


if __name__ == "__main__":
    main()
