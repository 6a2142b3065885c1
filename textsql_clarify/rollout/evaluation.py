"""Evaluation: play an agent on every sample (locally, in lockstep or on Ray) and aggregate the
trajectories; the ``run.json`` fields of a run.

The episode runners live in :mod:`~textsql_clarify.rollout.episodes`; :func:`run_episode` and
:func:`run_lockstep` are imported here too, so ``from textsql_clarify.rollout.evaluation import run_episode``
keeps working.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm import tqdm

from ..rewards.metrics import aggregate
from ..samples import Sample
from ..trajectory import Trajectory
from .episodes import _check_num_envs, run_episode, run_lockstep

__all__ = ["evaluate", "paired_original_ids", "run_episode", "run_info", "run_lockstep"]


def paired_original_ids(samples: Sequence[Sample]) -> set[str] | None:
    """The ids of the paired originals among ``samples``, for :func:`~textsql_clarify.rewards.metrics.aggregate`'s
    ``original_ids`` (PremiseSQL's GEN and VAL are taken over the unflawed originals of its pairs only).

    Args:
        samples: the run's samples; a paired original is one whose ``provenance`` has ``paired_with`` (the id of
            the flawed sample it is paired with, as the generation pipeline writes it: missing schema, PremiseSQL).
    Returns:
        The set of those ids, or ``None`` when there is none (``aggregate`` then falls back to the answerable
        samples without a flaw).

    Source: PremiseSQL §4 (GEN, VAL over the originals), §A.3 (paired originals).
    """
    ids = {s.id for s in samples if s.provenance.get("paired_with")}
    return ids or None


def evaluate(samples: Sequence[Sample], agent: Any, *, seed: int = 0, out_dir: str | os.PathLike | None = None,
             progress: bool = True, num_envs: int = 1, agent_spec: str | None = None,
             include_indistinguishable: bool = False, backend: str = "local", ray_address: str | None = None,
             ray_actors: int | None = None, dataset: str | None = None, resume: bool | None = None,
             agent_options: dict[str, Any] | None = None, **env_kwargs: Any) -> tuple[list[Trajectory], dict]:
    """Run ``agent`` once on every sample, in order, and aggregate.

    Args:
        samples: the samples (one episode each).
        agent: the agent, or a spec string for :func:`~textsql_clarify.baselines.agents.make_agent`
            (``"oracle"``, ``"no-clarify"``, ``"random"`` (seeded with ``seed``), ``"hf:PATH"`` ...).
        seed: reset seed of the first episode (episode i uses ``seed + i``).
        out_dir: if given, write ``trajectories.jsonl``, ``metrics.json``, ``timings.jsonl`` and ``run.json``
            (what ran: :func:`run_info`, plus ``episodes_resumed``) there (created if needed), atomically and
            resumably (:mod:`~textsql_clarify.rollout.run_journal`): each finished episode goes to
            ``journal.jsonl`` as it ends (fsynced per batch); the final files are written to temporary names and
            renamed over the old ones, then the journal is removed. ``trajectories.jsonl`` holds no wall-clock
            field (each SQL turn's ``elapsed_s`` is in ``timings.jsonl``), so a resumed run writes it and
            ``metrics.json`` byte for byte as an uninterrupted run does. The returned trajectories are then the
            records as they read back from JSON, timings included.
        progress: show a tqdm progress bar.
        num_envs: episodes played at once (:func:`run_lockstep`); their clarifications reach the
            simulated user in one batch, which a transformers user answers in one padded call per
            stage. A batch agent (``act_batch``) answers all live envs of a turn in one call. A
            deterministic agent and simulator give the same trajectories for any value, up to the
            floating-point effect of padding on a batched LLM (a near-tie token may flip).
        agent_spec: how the agent was named (the CLI's ``--agent``), recorded in the ``run`` block;
            ``None``: the agent's ``name`` attribute (or its class name).
        include_indistinguishable: keep samples flagged ``indistinguishable`` in the metrics' means
            (:func:`~textsql_clarify.rewards.metrics.aggregate`); by default they are played and written to
            ``trajectories.jsonl`` but left out of every mean and counted in ``excluded_indistinguishable``.
        backend: ``"local"`` (this process) or ``"ray"``: a pool of Ray actors plays the episodes
            (:func:`~textsql_clarify.rollout.ray_runner.run_ray`; ``num_envs`` then counts envs per actor);
            the trajectories come back in sample order and the metrics are computed here, the same as the
            local runner's for a deterministic agent (``docs/platform.md``, section Ray).
        ray_address: ``backend="ray"``: ``"local"``, ``"auto"``, ``"host:port"`` or ``"ray://host:10001"``
            (``None``: ``RAY_ADDRESS``, else a new local instance); unused when Ray is already initialised.
        ray_actors: ``backend="ray"``: actors in the pool (``None``: one per cluster CPU).
        dataset: the dataset spec the samples came from (the CLI's ``--dataset``), recorded in ``run.json``.
        resume: with ``out_dir``: ``None`` (default) continues a journal of the same configuration
            (:func:`~textsql_clarify.rollout.run_journal.run_config`: samples, dataset, agent, seed, preset
            and every env option) and plays only the episodes it lacks, starts a run where there is none, and
            refuses one of another configuration; ``True`` also refuses a folder with no journal; ``False``
            discards any journal and starts over.
        agent_options: how the agent was built beyond its spec (the CLI's ``--max-new-tokens``, ``--device``),
            part of the configuration a journal is resumed under.
        env_kwargs: passed to :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` (``limit`` keeps the first
            ``limit`` samples).

    Raises:
        FileExistsError: ``out_dir`` is an existing file (checked before any episode runs).
        RunFolderError: ``out_dir`` holds the journal of another configuration (or, with ``resume=True``, none),
            or another eval is writing to it.
        ValueError: ``num_envs`` below 1, an unknown ``backend``.
        RayUnavailableError: ``backend="ray"`` without Ray installed (``pip install 'textsql-clarify[ray]'``).
        RayEpisodeError: ``backend="ray"`` and an episode raised in an actor (the message names the sample).

    Returns:
        ``(trajectories, metrics)`` where metrics is :func:`textsql_clarify.rewards.metrics.aggregate`'s dict
        (``original_ids``: :func:`paired_original_ids` of the samples played, so GEN and VAL count the paired
        originals only when the samples have any)
        plus a ``run`` block ``{"agent": spec or name, "privileged": bool}``; ``privileged`` true marks a run
        whose agent was given each episode's sample (the gold), so its scores are no model's.
    """
    from ..envs.env import episode_samples

    samples = episode_samples("", samples, env_kwargs.pop("limit", None))
    if not samples:  # as the env says it, for every backend (Ray returned empty metrics for limit=0)
        raise ValueError("the env needs at least one sample")
    if isinstance(agent, str):  # a spec, as the CLI's --agent takes it ("oracle", "random", "hf:PATH", ...)
        from ..baselines.agents import make_agent

        agent_spec = agent if agent_spec is None else agent_spec
        agent = make_agent(agent, seed=seed)
    if backend not in ("local", "ray"):
        raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
    if backend == "ray":
        from .ray_runner import import_ray
        import_ray()  # a missing Ray fails before any folder is made
    num_envs = _check_num_envs(num_envs)
    run = {"agent": agent_spec if agent_spec is not None else str(getattr(agent, "name", type(agent).__name__)),
           "privileged": bool(getattr(agent, "privileged", False))}
    originals = paired_original_ids(samples)
    if out_dir is None:
        trajs = _play(samples, agent, range(len(samples)), seed=seed, num_envs=num_envs, backend=backend,
                      ray_address=ray_address, ray_actors=ray_actors, progress=progress, env_kwargs=env_kwargs)
        return trajs, {**aggregate(trajs, original_ids=originals, include_indistinguishable=include_indistinguishable),
                       "run": run}
    from .run_journal import TIMINGS, EvalJournal, exclusive_folder, replace_files, run_config, split_timing

    out = Path(out_dir)
    if out.exists() and not out.is_dir():  # fail before the run, not after it
        raise FileExistsError(f"output folder {out_dir} exists and is not a folder")
    created = [p for p in (out, *out.parents) if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    config = run_config(samples, dataset=dataset, agent=run["agent"], privileged=run["privileged"], seed=seed,
                        backend=backend, num_envs=num_envs, include_indistinguishable=include_indistinguishable,
                        env_kwargs=env_kwargs, agent_options=agent_options)
    journal = None
    try:
        with exclusive_folder(out):
            journal = EvalJournal(out, config, [s.id for s in samples], resume=resume)
            todo = [i for i in range(len(samples)) if i not in journal.done]

            def journaled(batch: list[tuple[int, Trajectory]]) -> None:
                for i, t in batch:
                    journal.add(i, t)
                journal.sync()  # one fsync per batch of finished episodes

            _play(samples, agent, todo, seed=seed, num_envs=num_envs, backend=backend, ray_address=ray_address,
                  ray_actors=ray_actors, progress=progress, env_kwargs=env_kwargs, on_done=journaled,
                  initial=journal.resumed)
            records = [journal.done[i] for i in range(len(samples))]
            trajs = [Trajectory.from_dict(r) for r in records]  # fresh and journaled episodes read alike
            metrics = {**aggregate(trajs, original_ids=originals,
                                   include_indistinguishable=include_indistinguishable), "run": run}
            parts = [split_timing(r) for r in records]
            info = run_info(run, dataset=dataset, seed=seed, backend=backend, num_envs=num_envs,
                            n_samples=len(samples), env_kwargs=env_kwargs, samples=samples)
            info["episodes_resumed"] = journal.resumed
            # ASCII escapes in the JSONL files: a lone surrogate from an agent's output cannot break them
            replace_files(out, {
                "trajectories.jsonl": _jsonl_bytes(rest for rest, _ in parts),
                TIMINGS: _jsonl_bytes(timing for _, timing in parts),
                "metrics.json": _json_bytes(metrics),
                "run.json": _json_bytes(info),
            })
            journal.remove()  # the run is whole: the next eval here starts over
    except BaseException:
        if journal is not None:
            journal.close()
            if not journal.done:  # nothing played: the run leaves no journal, and no folder it made
                journal.path.unlink(missing_ok=True)
        for p in created:  # a run that failed before any episode (a bad option, a model that cannot load)
            try:           # leaves no empty folder
                p.rmdir()  # only an empty folder this call made
            except OSError:
                break
        raise
    return trajs, metrics


def _jsonl_bytes(records: Any) -> bytes:
    """One ASCII JSON line per record (trajectories.jsonl, timings.jsonl)."""
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in records).encode("ascii")


def _json_bytes(obj: Any) -> bytes:
    """``obj`` as indented UTF-8 JSON with a final newline (metrics.json, run.json); a lone surrogate, which
    UTF-8 cannot encode, is written as a backslash escape instead of failing the write."""
    return (json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n").encode("utf-8", "backslashreplace")


def _play(samples: Sequence[Sample], agent: Any, indices: Sequence[int], *, seed: int, num_envs: int, backend: str,
          ray_address: str | None, ray_actors: int | None, progress: bool, env_kwargs: dict,
          on_done: Callable[[list[tuple[int, Trajectory]]], None] | None = None, initial: int = 0) -> list[Trajectory]:
    """Play episodes ``indices`` (episode ``i``: sample ``i``, reset seed ``seed + i``) on the chosen runner
    (Ray, lockstep or one env), with a tqdm bar over all samples that starts at ``initial``; ``on_done`` gets
    each batch of finished ``(index, trajectory)`` pairs. Returns the trajectories in ``indices`` order."""
    from ..envs.env import TextSQLClarifyEnv

    indices = list(indices)
    bar = tqdm(total=len(samples), initial=initial, desc=f"eval {getattr(agent, 'name', 'agent')}", unit="ep",
               disable=not progress)
    with bar:
        if not indices:
            return []
        if backend == "ray":
            from .ray_runner import run_ray
            return run_ray(samples, agent, seed=seed, num_envs=num_envs, bar=bar, address=ray_address,
                           num_actors=ray_actors, indices=indices, on_done=on_done, **env_kwargs)
        if num_envs > 1:
            return run_lockstep(samples, agent, num_envs=num_envs, seed=seed, bar=bar, indices=indices,
                                on_done=on_done, **env_kwargs)
        env = TextSQLClarifyEnv(samples=samples, **env_kwargs)
        trajs = []
        try:
            for i in indices:
                trajs.append(run_episode(env, agent, index=i, seed=seed + i))
                bar.update(1)
                if on_done is not None:
                    on_done([(i, trajs[-1])])  # a batch of one episode
        finally:
            env.close()  # its sandboxes and, with isolation="process", their worker processes
        return trajs


def _spec_name(value: Any) -> Any:
    """A simulator or preset as ``run.json`` records it: a string or dict spec as given, else the object's
    ``name``, else its class name."""
    if value is None or isinstance(value, (str, dict)):
        return value
    return str(getattr(value, "name", None) or type(value).__name__)


def run_info(run: dict, *, dataset: str | None, seed: int, backend: str, num_envs: int, n_samples: int,
             env_kwargs: dict, samples: Sequence[Any] | None = None) -> dict[str, Any]:
    """What a run was: the ``run.json`` that :func:`evaluate` writes next to ``metrics.json``, so
    that ``textsql-clarify report`` can name and compare runs.

    Args:
        run: the metrics' ``run`` block (``agent``, ``privileged``).
        dataset: the dataset spec (``None`` when the caller did not say).
        seed: reset seed of the first episode; backend: ``local`` | ``ray``; num_envs: envs played at once;
        n_samples: episodes played.
        env_kwargs: the env options evaluate passed on (simulator, isolation, preset, budget, protocol ...).
        samples: the samples played; when given, ``samples_sha256`` holds their digest
            (:func:`~textsql_clarify.rollout.run_journal.samples_digest`), so a finished run of an edited
            dataset under the same spec is told apart.
    Returns:
        A JSON-ready dict: ``agent``, ``privileged``, ``dataset``, ``n_samples``, ``seed``, ``simulator``,
        ``reward_preset``, ``max_clarifications``, ``category_mode``, ``protocol``, ``isolation``, ``ex_mode``
        (``single`` | ``suite``), ``suite_k`` (variants per database; ``None`` without test-suite EX), ``backend``,
        ``num_envs`` and ``version`` (the package's); env options not given are the env's defaults.
    """
    from .. import __version__
    from ..sql.variants import DEFAULT_K
    from .run_journal import samples_digest

    return {"agent": run.get("agent"), "privileged": run.get("privileged"), "dataset": dataset,
            "n_samples": n_samples, "seed": seed,
            "simulator": _spec_name(env_kwargs.get("simulator", "rule")),
            "reward_preset": _spec_name(env_kwargs.get("reward_preset", "binary")),
            "max_clarifications": env_kwargs.get("max_clarifications", 3),
            "category_mode": env_kwargs.get("category_mode", "taxonomy_free"),
            "protocol": env_kwargs.get("protocol", "f"),
            "isolation": env_kwargs.get("isolation", "in_process"),
            "ex_mode": env_kwargs.get("ex_mode", "single"),
            "suite_k": (env_kwargs.get("suite_k") or DEFAULT_K) if env_kwargs.get("ex_mode") == "suite" else None,
            "backend": backend, "num_envs": num_envs, "version": __version__,
            **({} if samples is None else {"samples_sha256": samples_digest(samples)})}
