"""The per-stage rejection table of a generation run (ABISS App. B, Table 7).

Per recipe, every candidate enters the first stage; each stage removes the candidates it rejects, and the
rest enter the next one. A stage's rate is the share of the candidates *entering it* that it removes, as in
ABISS App. B ("the percentage of questions entering each stage that are removed by it"). The stages are, in
order: ``error`` (the recipe raised on the anchor: the anchor's one candidate), the recipe's own
:attr:`~.base.Recipe.stages`, any stage a recipe named outside its ``stages`` (a recipe bug, still counted),
then the pipeline's :data:`PIPELINE_STAGES` (``duplicate``, ``load_validation``).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["ERROR_STAGE", "PIPELINE_STAGES", "RecipeRejections", "render_rejection_table", "TOP_REASONS"]

#: Stage of a recipe that raised on an anchor (the exception's message is the reason).
ERROR_STAGE = "error"
#: Stages the pipeline adds after the recipe's own: the same sample id or the same (database, question,
#: golds) written before; the load-time validation of the written file flagged it.
PIPELINE_STAGES = ("duplicate", "load_validation")
#: Most frequent reasons kept per stage in ``rejections.json``.
TOP_REASONS = 10


@dataclass
class RecipeRejections:
    """Candidates, accepted samples and rejections of one recipe, per stage.

    Attributes:
        recipe: the recipe's name.
        recipe_stages: the recipe's :attr:`~.base.Recipe.stages`, in order.
        candidates: every outcome the recipe returned (accepted or rejected), plus one per anchor it raised on.
        rejected: stage -> number of candidates that stage removed.
        reasons: stage -> reason -> count.
    """

    recipe: str
    recipe_stages: tuple[str, ...]
    candidates: int = 0
    rejected: Counter = field(default_factory=Counter)
    reasons: dict[str, Counter] = field(default_factory=dict)

    def reject(self, stage: str, reason: str) -> None:
        """Count one candidate removed by ``stage`` for ``reason`` (it must already be in :attr:`candidates`)."""
        self.rejected[stage] += 1
        self.reasons.setdefault(stage, Counter())[reason] += 1

    @property
    def accepted(self) -> int:
        """Candidates that passed every stage (the samples written for this recipe, paired originals aside)."""
        return self.candidates - sum(self.rejected.values())

    def stages(self) -> list[str]:
        """Every stage of the table, in order (see the module docstring)."""
        extra = [s for s in self.rejected if s not in self.recipe_stages and s != ERROR_STAGE
                 and s not in PIPELINE_STAGES]
        return [ERROR_STAGE, *self.recipe_stages, *sorted(extra), *PIPELINE_STAGES]

    def rows(self) -> list[dict[str, Any]]:
        """One row per stage: ``{"stage", "entered", "rejected", "rate"}``; ``rate`` = rejected / entered, or
        ``None`` when no candidate entered the stage (undefined, not zero)."""
        out = []
        entered = self.candidates
        for st in self.stages():
            r = self.rejected.get(st, 0)
            out.append({"stage": st, "entered": entered, "rejected": r, "rate": (r / entered) if entered else None})
            entered -= r
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON block of ``rejections.json``: candidates, accepted, rows and the :data:`TOP_REASONS` most
        frequent reasons per stage (with how many distinct reasons there were)."""
        return {
            "candidates": self.candidates, "accepted": self.accepted, "stages": self.rows(),
            "reasons": {st: {"top": [[r, n] for r, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_REASONS]],
                             "distinct": len(c)}
                        for st, c in self.reasons.items()},
        }


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def render_rejection_table(tables: Sequence[RecipeRejections], *, width: int = 100,
                           hide_empty: bool = True) -> str:
    """The rejection table as text, one block per recipe, no line wider than ``width``.

    Args:
        tables: one :class:`RecipeRejections` per recipe, in run order.
        width: the widest line allowed, in characters (>= 60).
        hide_empty: leave out stages that rejected nothing and are not the recipe's own (``error``,
            ``duplicate``, ``load_validation`` with 0).
    Returns:
        The table: columns recipe, stage, entered, rejected, rate (% of entered; ``—`` when none entered).
    Raises:
        ValueError: ``width`` below 60.
    Source: ABISS App. B, Table 7 (rates over the candidates entering each stage).
    """
    if width < 60:
        raise ValueError(f"width must be >= 60, got {width}")
    rec_w = min(max([len("recipe"), *(len(t.recipe) for t in tables)]), 18)
    num_w = 9
    stage_w = min(max([len("stage"), len("accepted"), *(len(s) for t in tables for s in t.stages())]),
                  width - rec_w - 3 * (num_w + 1) - 2)
    head = f"{'recipe':<{rec_w}}  {'stage':<{stage_w}} {'entered':>{num_w}} {'rejected':>{num_w}} {'rate':>{num_w}}"
    lines = [head, "-" * len(head)]
    for t in tables:
        name = _cut(t.recipe, rec_w)
        lines.append(f"{name:<{rec_w}}  {'candidates':<{stage_w}} {t.candidates:>{num_w}}")
        for row in t.rows():
            if hide_empty and row["rejected"] == 0 and row["stage"] not in t.recipe_stages:
                continue
            rate = "—" if row["rate"] is None else f"{100 * row['rate']:.1f}%"
            lines.append(f"{'':<{rec_w}}  {_cut(row['stage'], stage_w):<{stage_w}} {row['entered']:>{num_w}} "
                         f"{row['rejected']:>{num_w}} {rate:>{num_w}}")
        kept = t.accepted
        share = f"{100 * kept / t.candidates:.1f}%" if t.candidates else "—"
        lines.append(f"{'':<{rec_w}}  {'accepted':<{stage_w}} {kept:>{num_w}} {'':>{num_w}} {share:>{num_w}}")
    return "\n".join(line.rstrip() for line in lines)
