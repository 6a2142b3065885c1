"""Episode runners: one episode on one env (:func:`run_episode`) or many on ``num_envs`` envs in lockstep
(:func:`run_lockstep`), and the agent calls they share.

:mod:`~textsql_clarify.rollout.evaluation` (the local backend of ``evaluate``) and
:mod:`~textsql_clarify.rollout.ray_runner` (its Ray backend, whose actors play episodes the same way) both
import these, so neither backend imports the other's module at play time.
"""
from __future__ import annotations

import copy
import numbers
import time
from typing import Any, Callable, Sequence

from ..progress import announce, rate
from ..samples import Sample
from ..trajectory import Trajectory

__all__ = ["round_line", "run_episode", "run_lockstep"]


def _act(agent: Any, obs: dict, info: dict, where: str) -> Any:
    """``agent.act(obs, info)`` (``agent.act_batch([obs], [info])[0]`` for an agent with only
    ``act_batch``); an error from the agent gets a note naming the sample and turn."""
    try:
        if not callable(getattr(agent, "act", None)) and callable(getattr(agent, "act_batch", None)):
            return _act_batch(agent, [obs], [info])[0]
        return agent.act(obs, info)
    except Exception as e:
        if hasattr(e, "add_note"):  # Python 3.11+
            e.add_note(f"raised by the agent on {where}")
        raise


def _act_batch(agent: Any, observations: list, infos: list) -> list:
    """``agent.act_batch(observations, infos)``, checked to return one action per observation.

    Raises:
        TypeError: the agent returned something other than a list or tuple of that length.
    """
    actions = agent.act_batch(observations, infos)
    if not isinstance(actions, (list, tuple)) or len(actions) != len(observations):
        got = f"{len(actions)} actions" if isinstance(actions, (list, tuple)) else type(actions).__name__
        raise TypeError(f"{type(agent).__name__}.act_batch must return one action per observation: "
                        f"{len(observations)} expected, got {got}")
    return list(actions)


def _check_num_envs(num_envs: Any) -> int:
    """``num_envs`` as an int >= 1. Raises ValueError otherwise."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    return int(num_envs)


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
    for turn in range(base.max_turns + 1):
        action = _act(agent, obs, info, f"sample {base.current_sample.id} (turn {turn + 1})")
        obs, _reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return info["trajectory"]
    raise RuntimeError(f"episode for sample {base.current_sample.id} did not end within {base.max_turns} turns")


def run_lockstep(samples: Sequence[Sample], agent: Any, *, num_envs: int, seed: int = 0, bar: Any = None,
                 indices: Sequence[int] | None = None,
                 on_done: Callable[[list[tuple[int, Trajectory]]], None] | None = None,
                 **env_kwargs: Any) -> list[Trajectory]:
    """Play one episode per sample on ``num_envs`` envs in lockstep; each turn's clarifications from all
    envs go to the shared simulated user in one ``respond(batch)``.

    Episode ``i`` runs sample ``i`` with reset seed ``seed + i``, as :func:`~textsql_clarify.rollout.evaluation.evaluate` does sequentially;
    a free env takes the next sample. Each env has its own copy of ``agent``: ``agent.fork(k)`` when the
    agent defines it (to share a model between the copies, say), else ``copy.deepcopy(agent)``.

    A batch agent (one with a callable ``act_batch(observations, infos) -> list[str]``, such as
    :class:`~textsql_clarify.baselines.llm_agents.TransformersAgent`) is not copied: each turn, the
    observations and infos of every live env go to one ``agent.act_batch`` call, in env-slot order, so N
    envs cost one model call per turn. Its ``begin_episode`` is called once per episode as it starts
    (with the sample when it is privileged), so it must keep no per-episode state that another live
    episode would overwrite.

    Args:
        samples: the samples.
        agent: the agent (copied per env).
        num_envs: envs played at once (>= 1).
        seed: reset seed of the first episode.
        bar: an optional tqdm bar, advanced by one per finished episode. While it is shown (not ``disable``-d),
            a batch agent that counts its generated tokens (``agent.stats["new_tokens"]``, as
            :class:`~textsql_clarify.baselines.llm_agents.TransformersAgent` does) gets one stderr line per
            round (:func:`round_line`), so a slow model's first episodes do not look hung.
        indices: the episodes to play, in order (``None``: all of them); episode ``i`` is still sample ``i``
            with seed ``seed + i``, so a resumed run plays the episodes it lacks as a full run would.
        on_done: called once per turn with the ``(index, trajectory)`` pairs of the episodes that ended in it
            (the run journal's batch).
        env_kwargs: :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options; the simulator and the FB
            judge are built once and shared.
    Returns:
        The trajectories, in sample order (in ``indices`` order when given).
    Raises:
        ValueError: ``num_envs`` below 1.
        TypeError: the agent has no ``fork`` and cannot be deep-copied.
        RuntimeError: an episode did not end within the env's turn bound.
    """
    from ..envs.env import TextSQLClarifyEnv, answer_clarifications
    from ..rewards.feedback import default_judge
    from ..simulators import make_simulator
    from ..simulators.base import UserRequest

    num_envs = _check_num_envs(num_envs)
    sim = make_simulator(env_kwargs.pop("simulator", "rule"))
    judge = env_kwargs.pop("feedback_judge", None) or default_judge()
    order = list(range(len(samples))) if indices is None else [int(i) for i in indices]
    n_envs = min(num_envs, len(order)) or 1
    envs = [TextSQLClarifyEnv(samples=samples, simulator=sim, feedback_judge=judge, **env_kwargs)
            for _ in range(n_envs)]
    batched = callable(getattr(agent, "act_batch", None))
    counts_tokens = batched and isinstance(getattr(agent, "stats", None), dict) and "new_tokens" in agent.stats
    show_rounds = counts_tokens and bar is not None and not getattr(bar, "disable", True)
    rounds = 0
    n_done = len(samples) - len(order)  # episodes finished before this call (a resumed run)
    try:
        agents = ([agent] * n_envs if batched else
                  [agent.fork(k) if callable(getattr(agent, "fork", None)) else copy.deepcopy(agent)
                   for k in range(n_envs)])
    except (TypeError, copy.Error) as e:
        raise TypeError(f"num_envs={num_envs} needs one agent per env, and {type(agent).__name__} cannot be "
                        f"deep-copied ({e}); give it a fork(k) method that returns the agent for env k "
                        f"(sharing any model it holds)") from e
    try:
        trajs: dict[int, Trajectory] = {}
        live: dict[int, list] = {}  # env slot -> [episode index, obs, info, turns taken]
        nxt = 0  # position in order
        while nxt < len(order) or live:
            for k in range(n_envs):
                if k not in live and nxt < len(order):
                    i = order[nxt]
                    obs, info = envs[k].reset(seed=seed + i, options={"index": i})
                    agents[k].begin_episode(envs[k].current_sample if getattr(agents[k], "privileged", False) else None)
                    live[k] = [i, obs, info, 0]
                    nxt += 1
            results: dict[int, tuple] = {}
            pending = []
            for k, (i, _obs, _info, turns) in live.items():
                if turns > envs[k].max_turns:
                    raise RuntimeError(f"episode for sample {samples[i].id} did not end within {envs[k].max_turns} turns")
            actions: dict[int, Any] = {}
            if batched:
                slots = list(live)
                tokens0, t0 = (agent.stats["new_tokens"], time.perf_counter()) if show_rounds else (0, 0.0)
                try:
                    batch = _act_batch(agent, [live[k][1] for k in slots], [live[k][2] for k in slots])
                except Exception as e:
                    if hasattr(e, "add_note"):
                        e.add_note("raised by the agent's act_batch on " + ", ".join(
                            f"sample {samples[live[k][0]].id} (episode {live[k][0]}, turn {live[k][3] + 1})" for k in slots))
                    raise
                actions = dict(zip(slots, batch))
                rounds += 1
                if show_rounds:
                    announce(round_line(getattr(agent, "name", "agent"), rounds, len(slots),
                                        agent.stats["new_tokens"] - tokens0, time.perf_counter() - t0,
                                        n_done, len(samples)))
            for k, (i, obs, info, turns) in live.items():
                live[k][3] += 1
                action = actions[k] if batched else _act(agents[k], obs, info,
                                                         f"sample {samples[i].id} (episode {i}, turn {turns + 1})")
                out = envs[k].begin_step(action)
                if isinstance(out, UserRequest):
                    pending.append((k, out))
                else:
                    results[k] = out
            for (k, _), out in zip(pending, answer_clarifications(sim, [(envs[k], req) for k, req in pending])):
                results[k] = out
            finished: list[tuple[int, Trajectory]] = []
            for k, (obs, _reward, terminated, truncated, info) in results.items():
                if terminated or truncated:
                    finished.append((live.pop(k)[0], info["trajectory"]))
                    n_done += 1
                    if bar is not None:
                        bar.update(1)
                else:
                    live[k][1], live[k][2] = obs, info
            trajs.update(finished)
            if finished and on_done is not None:
                on_done(finished)
    finally:
        for e in envs:  # their sandboxes and, with isolation="process", their worker processes
            e.close()
    return [trajs[i] for i in order]


def round_line(name: str, round_no: int, rows: int, new_tokens: int, seconds: float, done: int, total: int) -> str:
    """One lockstep round of a batch agent as a progress line, e.g. ``"hf:smollm2 round 3: 8 rows, 412 tokens
    generated in 5.1 s (80.8 tokens/s); 2/8 episodes done"`` (``seconds``: wall time of the ``act_batch`` call).
    Before the round's episodes are stepped, so ``done`` counts the episodes ended in earlier rounds."""
    return (f"{name} round {round_no}: {rows} rows, {new_tokens} tokens generated in {seconds:.1f} s "
            f"({rate(new_tokens, seconds, 'tokens')}); {done}/{total} episodes done")
