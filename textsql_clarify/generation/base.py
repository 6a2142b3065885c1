"""The contract between the generation pipeline and its recipes (issue 11; TIDE §3.1 anchors).

A **recipe** (DESIGN.md "Words") turns one **anchor** (a gold SQL over a SQLite database, with its
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
from typing import Any, Protocol, Sequence, runtime_checkable

from ..samples import Sample

__all__ = ["Anchor", "Accepted", "Rejected", "Outcome", "GenContext", "Recipe"]


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
    """A generation procedure (DESIGN.md "recipe").

    Attributes:
        name: registry name (``drift``, ``missing_schema``, ``lexical_overlap``, ``abiss``, ``tide_chain``,
            ``premise``).
        stages: its checks, in the order they run; every :class:`Rejected` names one of them.
        needs_model: ``True`` for the model recipes (the pipeline then requires a council).
    """

    name: str
    stages: tuple[str, ...]
    needs_model: bool

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """Every candidate grown from ``anchor``, each accepted or rejected. Deterministic given ``rng``
        (seeded by the pipeline from the seed, the recipe name and the anchor id) and the models.
        Sample ids must be unique across anchors: ``f"{name}-{anchor.id}-{suffix}"``."""
        ...
