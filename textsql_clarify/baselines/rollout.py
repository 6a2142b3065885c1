"""Moved: the rollout and evaluation runners now lives in :mod:`textsql_clarify.rollout.evaluation`.

This name is kept so that existing imports (``from textsql_clarify.baselines.rollout import ...``) keep
working: it makes ``textsql_clarify.baselines.rollout`` the same module object as ``textsql_clarify.rollout.evaluation``
(private names included, and a ``monkeypatch.setattr`` on either name patches the one module).
New code imports ``textsql_clarify.rollout.evaluation``.
"""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("textsql_clarify.rollout.evaluation")
