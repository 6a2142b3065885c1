"""Rollout and evaluation runners: play agents through the env and aggregate the trajectories."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from ..rewards.metrics import aggregate, write_metrics_json
from ..samples import Sample
from ..trajectory import Trajectory


def run_episode(env: Any, agent: Any, *, sample_id: str | None = None, index: int | None = None,
                seed: int | None = None) -> Trajectory:
    """Play one episode and return its trajectory.

    Args:
        env: a ``TextSQLClarify-v0`` env (wrapped or not).
        agent: an object with ``begin_episode(sample_or_None)`` and ``act(obs, info) -> str``.
        sample_id / index: which sample (else drawn from ``seed``).
        seed: passed to ``reset``.

    Raises:
        RuntimeError: the episode did not end within the env's turn bound (a bug, not an agent error).
    """
    options = {"sample_id": sample_id} if sample_id is not None else ({"index": index} if index is not None else None)
    obs, info = env.reset(seed=seed, options=options)
    base = env.unwrapped
    agent.begin_episode(base.current_sample if getattr(agent, "privileged", False) else None)
    for _ in range(base.max_turns + 1):
        obs, _reward, terminated, truncated, info = env.step(agent.act(obs, info))
        if terminated or truncated:
            return info["trajectory"]
    raise RuntimeError(f"episode for sample {base.current_sample.id} did not end within {base.max_turns} turns")


def evaluate(samples: Sequence[Sample], agent: Any, *, seed: int = 0, out_dir: str | os.PathLike | None = None,
             progress: bool = True, **env_kwargs: Any) -> tuple[list[Trajectory], dict]:
    """Run ``agent`` once on every sample, in order, and aggregate.

    Args:
        samples: the samples (one episode each).
        agent: the agent.
        seed: reset seed of the first episode (episode i uses ``seed + i``).
        out_dir: if given, write ``trajectories.jsonl`` and ``metrics.json`` there (created if needed).
        progress: show a tqdm progress bar.
        env_kwargs: passed to :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv`.

    Raises:
        FileExistsError: ``out_dir`` is an existing file (checked before any episode runs).

    Returns:
        ``(trajectories, metrics)`` where metrics is :func:`textsql_clarify.rewards.metrics.aggregate`'s dict.
    """
    from ..envs.env import TextSQLClarifyEnv

    if out_dir is not None:  # fail before the run, not after it
        if Path(out_dir).exists() and not Path(out_dir).is_dir():
            raise FileExistsError(f"output folder {out_dir} exists and is not a folder")
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    env = TextSQLClarifyEnv(samples=samples, **env_kwargs)
    trajs: list[Trajectory] = []
    for i in tqdm(range(len(samples)), desc=f"eval {getattr(agent, 'name', 'agent')}", unit="ep",
                  disable=not progress):
        trajs.append(run_episode(env, agent, index=i, seed=seed + i))
    if out_dir is None:
        return trajs, aggregate(trajs)
    out = Path(out_dir)
    with open(out / "trajectories.jsonl", "w", encoding="utf-8") as fh:
        for t in trajs:
            # ASCII escapes: a lone surrogate from an agent's output cannot break the file
            fh.write(json.dumps(t.to_dict(), ensure_ascii=True, default=str) + "\n")
    metrics = write_metrics_json(trajs, out / "metrics.json")
    return trajs, metrics
