"""Moved: the Ray backend of ``evaluate`` now lives in :mod:`textsql_clarify.rollout.ray_runner`.

This name is kept so that existing imports (``from textsql_clarify.baselines.ray_runner import ...``) keep
working: it makes ``textsql_clarify.baselines.ray_runner`` the same module object as ``textsql_clarify.rollout.ray_runner``
(private names included, and a ``monkeypatch.setattr`` on either name patches the one module).
New code imports ``textsql_clarify.rollout.ray_runner``.
"""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("textsql_clarify.rollout.ray_runner")
