"""The contract between the generation pipeline and its recipes (TIDE §3.1 anchors).

A **recipe** (``docs/generation.md``) turns one **anchor** (a gold SQL over a SQLite database, with its
question) into zero or more candidate samples, and runs its own checks on each, in a fixed order.
Each candidate ends as :class:`Accepted` (a validated :class:`~textsql_clarify.samples.Sample`, with
the verdict of every check it passed) or :class:`Rejected` (the first check it failed, and why). The
pipeline (:mod:`textsql_clarify.generation.pipeline`) counts rejections per recipe and stage, in the
order of :attr:`Recipe.stages` (ABISS App. B's rejection table), adds the common provenance and
writes the accepted samples.

Recipes never write a source database: a recipe that needs a changed schema (missing schema) builds
a derived database under :attr:`GenContext.work_dir`.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from ..errors import TextSQLClarifyError
from ..samples import Sample

__all__ = ["Anchor", "Accepted", "Rejected", "Outcome", "GenContext", "Recipe", "OptionSpec", "OptionError", "read_option",
           "check_options"]


@dataclass(frozen=True)
class Anchor:
    """One gold query a generated sample grows from (TIDE §3.1 "anchor").

    Attributes:
        id: unique id of the anchor within its source (e.g. the Spider dev sample id).
        db_id: database name.
        db_path: absolute path of the source SQLite file (read only, never written).
        question: the anchor's natural-language question.
        gold_sql: its gold SQL (SQLite dialect).
        difficulty: Spider / BIRD difficulty label, or ``unknown``.
        evidence: external knowledge attached to the question (may be empty).
        source: the dataset spec or file the anchor came from.
    """

    id: str
    db_id: str
    db_path: str
    question: str
    gold_sql: str
    difficulty: str = "unknown"
    evidence: tuple[str, ...] = ()
    source: str = ""


@dataclass
class Accepted:
    """A candidate that passed every check of its recipe.

    Attributes:
        sample: the generated sample. Its ``provenance`` holds recipe-specific keys (e.g. ``subtype``,
            ``removed``); the pipeline adds ``source="generated"``, ``recipe``, ``anchor_id``,
            ``anchor_source``, ``anchor_gold`` (:func:`~.anchors.anchor_gold` of the anchor's gold SQL), ``seed``,
            ``models`` and ``verdicts``.
        verdicts: check name -> verdict (``"pass"`` or a short detail), in check order.
        paired: the unmodified original, kept as its paired answerable sample (missing schema,
            PremiseSQL §A.3 pairs), or ``None``. Written next to ``sample``; its provenance gets
            ``paired_with`` = the flawed sample's id.
    """

    sample: Sample
    verdicts: dict[str, Any] = field(default_factory=dict)
    paired: Sample | None = None


@dataclass
class Rejected:
    """A candidate that failed a check.

    Attributes:
        stage: the first check it failed; one of the recipe's :attr:`Recipe.stages`.
        reason: a short human-readable reason (e.g. ``"post-drift result equals the anchor's"``).
    """

    stage: str
    reason: str


Outcome = Accepted | Rejected


@dataclass
class GenContext:
    """What a recipe may use besides its anchor.

    Attributes:
        work_dir: folder for derived files (databases with a column or table removed); inside the
            output folder, so relative ``db_path`` values resolve. Created by the pipeline.
        council: a :class:`textsql_clarify.generation.council.Council` of one or more generation
            models for the model recipes, or ``None`` for the model-free ones.
        timeout_s: time limit per SQL execution, seconds.
        options: recipe options from the command line (``--option key=value``), as strings.
    """

    work_dir: Path
    council: Any | None = None
    timeout_s: float = 5.0
    options: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Recipe(Protocol):
    """A generation procedure (``docs/generation.md``).

    Attributes:
        name: registry name (``drift``, ``missing_schema``, ``lexical_overlap``, ``abiss``, ``tide_chain``,
            ``premise``).
        stages: its checks, in the order they run; every :class:`Rejected` names one of them.
        needs_model: ``True`` for the model recipes (the pipeline then requires a council).

    Optional (not part of the runtime check): ``options``, name -> :class:`OptionSpec`, the ``--option`` names the
    recipe reads; :func:`check_options` checks them before the run (a recipe without it declares nothing).
    """

    name: str
    stages: tuple[str, ...]
    needs_model: bool

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """Every candidate grown from ``anchor``, each accepted or rejected. Deterministic given ``rng``
        (seeded by the pipeline from the seed, the recipe name and the anchor id) and the models.
        Sample ids must be unique across anchors: ``f"{name}-{anchor.id}-{suffix}"``."""
        ...


class OptionError(TextSQLClarifyError, ValueError):
    """A ``--option key=value`` that no selected recipe declares, or whose value does not parse or is out of
    range; checked before any unit runs."""


@dataclass(frozen=True)
class OptionSpec:
    """One recipe option, as a recipe declares it in its class attribute ``options`` (name -> spec).

    Attributes:
        kind: ``"int"``, ``"float"``, ``"str"``, ``"choice"`` (one of ``choices``) or ``"list"`` (a comma list of
            ``choices``; empty means the default).
        default: the value the recipe uses when the option is not given, as text (documentation; the recipe's
            own code applies it).
        help: one line.
        minimum: for ``int`` / ``float``: the smallest value allowed, or ``None``.
        choices: for ``choice`` / ``list``: the allowed values.
        check: an extra parser for ``str`` options; raises ``ValueError`` on a bad value.
    Source: ``docs/generation.md`` "The command" (``--option``; a bad value such as ``max_tries=abc`` is refused
    before the run).
    """

    kind: str
    default: str
    help: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[str], Any] | None = None

    def expected(self) -> str:
        """What a valid value looks like, in words (for error messages)."""
        if self.kind in ("int", "float"):
            word = "an integer" if self.kind == "int" else "a number"
            return word + ("" if self.minimum is None else f" >= {self.minimum:g}")
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "list":
            return "a comma list of " + ", ".join(self.choices)
        return self.help

    def parse(self, raw: str) -> Any:
        """The value of ``raw`` (text), parsed as the recipes parse it.

        Raises:
            ValueError: ``raw`` does not parse or is out of range (the message says what is expected).
        """
        raw = str(raw)
        if self.kind in ("int", "float"):
            try:
                v = int(raw) if self.kind == "int" else float(raw)
            except ValueError:
                raise ValueError(f"expected {self.expected()}") from None
            if self.kind == "float" and v != v:
                raise ValueError(f"expected {self.expected()}")
            if self.minimum is not None and v < self.minimum:
                raise ValueError(f"expected {self.expected()}")
            return v
        if self.kind == "choice":
            if raw.strip() not in self.choices:
                raise ValueError(f"expected {self.expected()}")
            return raw.strip()
        if self.kind == "list":
            vals = [v.strip() for v in raw.split(",") if v.strip()]
            bad = [v for v in vals if v not in self.choices]
            if bad or (raw.strip() and not vals):
                raise ValueError(f"unknown {bad}; expected {self.expected()}")
            return vals
        if self.check is not None:
            self.check(raw)
        return raw


def read_option(recipe: Any, options: Mapping[str, str], name: str, default: Any) -> Any:
    """The typed value of option ``name`` for ``recipe`` (its :class:`OptionSpec` in ``recipe.options`` parses the
    text), or ``default`` when ``options`` does not set it. The one place a recipe turns ``--option`` text into a
    value, so what :func:`check_options` accepts is what the recipe reads.

    Raises:
        ValueError: the text does not parse or is out of range; the message names the recipe, the option, the
            value and what is expected.
    """
    if name not in options:
        return default
    try:
        return recipe.options[name].parse(options[name])
    except ValueError as e:
        raise ValueError(f"{recipe.name}: option {name}={options[name]!r}: {e}") from None


def check_options(recipes: Sequence[Any], options: Mapping[str, str] | None) -> dict[str, str]:
    """Check ``--option`` values against what the selected recipes declare (their class attribute ``options``,
    name -> :class:`OptionSpec`), before any unit runs.

    A recipe without an ``options`` attribute (one from another package) declares nothing: then an unknown name
    cannot be judged and is let through; the declared ones are still checked.

    Args:
        recipes: the recipe instances of the run.
        options: option name -> value (text), as given on the command line; may be ``None``.

    Returns:
        The options, names and values as text (unchanged), for :attr:`GenContext.options`.

    Raises:
        OptionError: a name no selected recipe declares (the message lists the ones they accept); a value that
            does not parse or is out of range for a recipe that declares it (names the option, the value, the
            recipe and what is expected).
    Source: ``docs/generation.md`` "The command" (``--option``).
    """
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    declared: dict[str, list[tuple[str, OptionSpec]]] = {}
    undeclared = False
    for r in recipes:
        specs = getattr(r, "options", None)
        if specs is None:
            undeclared = True
            continue
        for name, spec in specs.items():
            declared.setdefault(name, []).append((r.name, spec))
    unknown = sorted(k for k in opts if k not in declared)
    if unknown and not undeclared:
        names = ", ".join(r.name for r in recipes)
        accepted = ", ".join(sorted(declared)) or "none"
        raise OptionError(f"unknown option(s) {', '.join(unknown)} for recipe(s) {names}; they accept: {accepted} "
                          f"(docs/generation.md lists each recipe's options)")
    for k, v in opts.items():
        for recipe, spec in declared.get(k, ()):
            try:
                spec.parse(v)
            except ValueError as e:
                raise OptionError(f"option {k}={v!r} (recipe {recipe}): {e}") from None
    return opts
