"""Moved: the red team's reward-hacking policies now live in :mod:`textsql_clarify.redteam.policies`.

This name is kept so that existing imports (``from textsql_clarify.baselines.hacks import ...``) keep
working: it makes ``textsql_clarify.baselines.hacks`` the same module object as ``textsql_clarify.redteam.policies``
(private names included, and a ``monkeypatch.setattr`` on either name patches the one module).
New code imports ``textsql_clarify.redteam.policies``.
"""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("textsql_clarify.redteam.policies")
