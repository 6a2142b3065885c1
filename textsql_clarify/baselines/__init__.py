"""Agents: oracle, no-clarify, random, transformers LLM and OpenAI-compatible server; the rollout engine is in ``textsql_clarify/rollout/``.

The rollout engine that plays them lives in :mod:`textsql_clarify.rollout`, the red team's policies in
:mod:`textsql_clarify.redteam`; the old names here (``baselines.rollout``, ``baselines.ray_runner``,
``baselines.sft_export``, ``baselines.run_journal``, ``baselines.hacks``) are aliases of those modules.
"""
