"""Moved: SFT export now lives in :mod:`textsql_clarify.rollout.sft_export`.

This name is kept so that existing imports (``from textsql_clarify.baselines.sft_export import ...``) keep
working: it makes ``textsql_clarify.baselines.sft_export`` the same module object as ``textsql_clarify.rollout.sft_export``
(private names included, and a ``monkeypatch.setattr`` on either name patches the one module).
New code imports ``textsql_clarify.rollout.sft_export``.
"""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("textsql_clarify.rollout.sft_export")
