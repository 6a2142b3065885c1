"""Moved: the run journal (resumable run folders) now lives in :mod:`textsql_clarify.rollout.run_journal`.

This name is kept so that existing imports (``from textsql_clarify.baselines.run_journal import ...``) keep
working: it makes ``textsql_clarify.baselines.run_journal`` the same module object as ``textsql_clarify.rollout.run_journal``
(private names included, and a ``monkeypatch.setattr`` on either name patches the one module).
New code imports ``textsql_clarify.rollout.run_journal``.
"""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("textsql_clarify.rollout.run_journal")
