"""The recipe registry: a recipe's name -> the class that implements it, imported only when used.

The model-free recipes (``drift``, ``missing_schema``, ``lexical_overlap``) need no council; the others
(``abiss``, ``tide_chain``, ``tide_drift``, ``tide_triplets``, ``premise``) need one (``--model``).
``docs/generation.md`` describes each.
"""
from __future__ import annotations

import importlib
from typing import Any, Sequence

from ..errors import TextSQLClarifyError
from .base import Recipe

__all__ = ["RECIPES", "MODEL_FREE", "DEFAULT_RECIPES", "RecipeError", "recipe_names", "make_recipe", "make_recipes"]

#: name -> "module:Class": a bare module name is one of this package's; a dotted one is imported as given.
RECIPES: dict[str, str] = {
    "drift": "drift:DriftRecipe",
    "missing_schema": "missing_schema:MissingSchemaRecipe",
    "lexical_overlap": "lexical_overlap:LexicalOverlapRecipe",
    "abiss": "abiss:AbissRecipe",
    "tide_chain": "tide:TideChainRecipe",
    "tide_drift": "tide:TideDriftRecipe",
    "tide_triplets": "tide:TideTripletRecipe",
    "premise": "premise:PremiseRecipe",
}
#: The recipes that need no model, exact by construction and checked by execution.
MODEL_FREE = ("drift", "missing_schema", "lexical_overlap")
#: What ``textsql-clarify generate`` runs without ``--recipes``.
DEFAULT_RECIPES = MODEL_FREE


class RecipeError(TextSQLClarifyError, ValueError):
    """An unknown recipe name, a recipe whose module is not installed, or a class that breaks the contract."""


def recipe_names() -> list[str]:
    """The registered recipe names, in registry order."""
    return list(RECIPES)


def make_recipe(name: str, options: dict[str, str] | None = None) -> Recipe:
    """Import and build one recipe.

    Args:
        name: a registry name (:data:`RECIPES`).
        options: not used to build (recipes read ``ctx.options``); accepted for symmetry. May be ``None``.

    Returns:
        The recipe instance (its class built with no arguments).

    Raises:
        RecipeError: an unknown name (the message lists the valid ones); its module is not there (yet) or
            fails to import; the class is missing or does not have ``name``, ``stages``, ``needs_model``
            and ``run``; its ``name`` differs from the registry's.
    Source: ``docs/generation.md`` (the recipes), ``generation/base.py`` (the contract).
    """
    del options
    if not isinstance(name, str) or name.strip() not in RECIPES:
        raise RecipeError(f"unknown recipe {name!r}; valid recipes: {', '.join(RECIPES)}")
    name = name.strip()
    mod_name, cls_name = RECIPES[name].split(":")
    full = mod_name if "." in mod_name else f"{__package__}.{mod_name}"  # "pkg.mod:Class": a module elsewhere
    try:
        mod = importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name == full:
            raise RecipeError(f"recipe {name!r} is registered but its module {full} is not there yet") from e
        raise RecipeError(f"recipe {name!r}: importing {full} failed: {e}") from e
    except ImportError as e:
        raise RecipeError(f"recipe {name!r}: importing {full} failed: {e}") from e
    cls: Any = getattr(mod, cls_name, None)
    if cls is None:
        raise RecipeError(f"recipe {name!r}: {full} has no class {cls_name}")
    try:
        recipe = cls()
    except TypeError as e:
        raise RecipeError(f"recipe {name!r}: {full}.{cls_name} cannot be built with no arguments: {e}") from e
    if not isinstance(recipe, Recipe):
        raise RecipeError(f"recipe {name!r}: {full}.{cls_name} lacks name, stages, needs_model or run")
    if recipe.name != name:
        raise RecipeError(f"recipe {name!r}: {full}.{cls_name}.name is {recipe.name!r}")
    return recipe


def make_recipes(names: Sequence[str] | str) -> list[Recipe]:
    """Build several recipes, in the given order.

    Args:
        names: registry names, or one comma-separated string (``"drift,missing_schema"``).
    Returns:
        The recipes.
    Raises:
        RecipeError: no name, a name given twice, or any :func:`make_recipe` error.
    """
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = list(names)
    if not names:
        raise RecipeError(f"no recipe given; valid recipes: {', '.join(RECIPES)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise RecipeError(f"recipe(s) given more than once: {', '.join(twice)}")
    return [make_recipe(n) for n in names]
