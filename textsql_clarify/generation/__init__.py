"""Generation: recipes that turn SQLite databases and gold SQL into validated samples (issue 11).

See ``docs/generation.md``. The recipe contract is :mod:`textsql_clarify.generation.base`.
"""
from .base import Accepted, Anchor, GenContext, Recipe, Rejected

__all__ = ["Accepted", "Anchor", "GenContext", "Recipe", "Rejected"]
