"""Rollout engine: play agents through the env and keep what they did (docs/platform.md).

* :mod:`.episodes`: :func:`~textsql_clarify.rollout.episodes.run_episode` (one episode on one env) and
  :func:`~textsql_clarify.rollout.episodes.run_lockstep` (many on ``num_envs`` envs, one user call per turn);
* :mod:`.evaluation`: :func:`~textsql_clarify.rollout.evaluation.evaluate` (local, lockstep or Ray backend,
  then the metrics) and the ``run.json`` fields (:func:`~textsql_clarify.rollout.evaluation.run_info`);
* :mod:`.ray_runner`: the Ray backend of ``evaluate`` (Ray is the optional ``ray`` extra, imported lazily);
* :mod:`.run_journal`: resumable run folders (the episode journal, the folder lock, atomic file writes);
* :mod:`.sft_export`: SFT demonstrations from an agent's episodes.

Imports point one way: ``evaluation`` -> ``ray_runner`` -> ``episodes``, ``sft_export`` -> ``episodes``.
Nothing is imported here, so ``import textsql_clarify.rollout`` stays cheap.
"""
