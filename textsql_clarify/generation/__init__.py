"""Generation: recipes that turn SQLite databases and gold SQL into validated samples.

See ``docs/generation.md``. The recipe contract is :mod:`textsql_clarify.generation.base`; anchors come from
:func:`load_anchors` (:mod:`.anchors`), recipes from the registry (:mod:`.recipes`), and :func:`generate`
(:mod:`.pipeline`) runs them, resumably, into an output folder with a per-stage rejection table
(:mod:`.rejections`). The submodules import nothing heavy until used.
"""
from .base import Accepted, Anchor, GenContext, Recipe, Rejected

__all__ = ["Accepted", "Anchor", "GenContext", "Recipe", "Rejected", "AnchorList", "load_anchors", "generate",
           "GenerationReport", "GenerationError", "RECIPES", "make_recipe", "make_recipes", "RecipeError"]

_LAZY = {
    "AnchorList": "anchors", "load_anchors": "anchors",
    "generate": "pipeline", "GenerationReport": "pipeline", "GenerationError": "pipeline",
    "RECIPES": "recipes", "make_recipe": "recipes", "make_recipes": "recipes", "RecipeError": "recipes",
}


def __getattr__(name: str):
    """The pipeline's public names, imported on first use (PEP 562)."""
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
