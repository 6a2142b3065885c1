"""Category taxonomies: ABISS's 13 subcategories, PremiseSQL's 9 premise flaws, and a crosswalk.

Definitions are written in our own words.

* ABISS §3.2: 8 categories, 11 problematic subcategories plus 2 answerable ones = 13 subcategories,
  each in one group (``answerable`` | ``ambiguous`` | ``unanswerable``).
* PremiseSQL §3 (Table 1 and App. "neighbouring categories"): 4 error categories, 9 subcategories
  E1.1 ... E4.2. The short names are ours where the paper's table is not in the reference text.
* Crosswalk: for each premise flaw, the ABISS subcategory that describes the same root cause
  (many-to-one; our mapping, argued in ``docs/metrics.md``).
"""
from __future__ import annotations

from dataclasses import dataclass

GROUPS = ("answerable", "ambiguous", "unanswerable")


@dataclass(frozen=True)
class Subcategory:
    """One ABISS subcategory.

    Attributes:
        name: snake_case id used in datasets (``"lexical_overlap"``).
        category: the ABISS category (§3.2.x heading) it belongs to.
        group: ``answerable`` | ``ambiguous`` | ``unanswerable``.
        definition: one line, our words.
    """

    name: str
    category: str
    group: str
    definition: str


_SUBS = [
    Subcategory("answerable_without_evidence", "answerable", "answerable",
                "The schema alone determines one SQL answer; no outside knowledge is needed."),
    Subcategory("answerable_with_evidence", "answerable", "answerable",
                "One SQL answer exists once the supplied evidence is used (e.g. a formula or a code)."),
    Subcategory("scope", "structural_ambiguity", "ambiguous",
                "A quantifier such as each/every/all can be read collectively or per item, giving different queries."),
    Subcategory("attachment", "structural_ambiguity", "ambiguous",
                "A modifier can attach to different parts of the question, changing which rows are filtered."),
    Subcategory("lexical_overlap", "semantic_mapping_ambiguity", "ambiguous",
                "A word matches two similarly named columns or tables (e.g. two email columns)."),
    Subcategory("entity_ambiguity", "semantic_mapping_ambiguity", "ambiguous",
                "A phrase can denote two distinct entities or attributes in the schema (e.g. two enrolment dates)."),
    Subcategory("lexical_vagueness", "lexical_vagueness", "ambiguous",
                "A vague term (recent, high, popular) has no fixed threshold in the data."),
    Subcategory("missing_user_knowledge", "missing_user_knowledge", "ambiguous",
                "The answer depends on a fact about the user (my department) that only the user can supply."),
    Subcategory("conflicting_knowledge", "conflicting_knowledge", "ambiguous",
                "The evidence holds two incompatible definitions of the same concept."),
    Subcategory("missing_entities_or_attributes", "missing_schema_elements", "unanswerable",
                "The schema has no table or column for the thing asked about."),
    Subcategory("missing_relationship", "missing_schema_elements", "unanswerable",
                "Both entities exist but nothing in the schema links them."),
    Subcategory("missing_external_knowledge", "missing_external_knowledge", "unanswerable",
                "An objective outside fact or rule (a grade scale, an exchange rate) is needed and is absent."),
    Subcategory("improper_question", "improper_question", "unanswerable",
                "Chit-chat, a request outside the database's domain, or a non-query request such as an update."),
]

#: name -> :class:`Subcategory`, in ABISS order (13 entries).
SUBCATEGORIES: dict[str, Subcategory] = {s.name: s for s in _SUBS}

#: ABISS category -> its subcategory names.
CATEGORIES: dict[str, tuple[str, ...]] = {}
for _s in _SUBS:
    CATEGORIES.setdefault(_s.category, ())
    CATEGORIES[_s.category] = CATEGORIES[_s.category] + (_s.name,)


@dataclass(frozen=True)
class PremiseFlaw:
    """One PremiseSQL premise-flaw subcategory.

    Attributes:
        code: ``"E1.1"`` ... ``"E4.2"``.
        name: snake_case id used in datasets.
        category: ``expression_error`` | ``premise_contradiction`` | ``missing_premise`` | ``beyond_ability``.
        definition: one line, our words.
        abiss: the ABISS subcategory with the same root cause (crosswalk).
    """

    code: str
    name: str
    category: str
    definition: str
    abiss: str


_FLAWS = [
    PremiseFlaw("E1.1", "ambiguous_expression", "expression_error",
                "A condition over existing columns admits several mappings or aggregations.", "lexical_overlap"),
    PremiseFlaw("E1.2", "unclear_intent", "expression_error",
                "The SQL operation itself (list, count, compare) is left unspecified.", "scope"),
    PremiseFlaw("E2.1", "logical_contradiction", "premise_contradiction",
                "The question's own conditions cannot hold together.", "conflicting_knowledge"),
    PremiseFlaw("E2.2", "schema_contradiction", "premise_contradiction",
                "The question assumes something about the data that the unchanged schema contradicts.",
                "missing_entities_or_attributes"),
    PremiseFlaw("E3.1", "missing_constraint", "missing_premise",
                "A constraint that defines the task is omitted while the operation stays clear.", "missing_user_knowledge"),
    PremiseFlaw("E3.2", "missing_schema_premise", "missing_premise",
                "Part of the schema the query needs is not available to the model.", "missing_relationship"),
    PremiseFlaw("E3.3", "undefined_concept", "missing_premise",
                "An abstract concept has no unique mapping onto the available columns.", "lexical_vagueness"),
    PremiseFlaw("E4.1", "beyond_sql", "beyond_ability",
                "The request (e.g. forecasting) cannot be computed by standard SQL over stored data.", "improper_question"),
    PremiseFlaw("E4.2", "external_fact", "beyond_ability",
                "The answer needs an outside fact that the database does not hold.", "missing_external_knowledge"),
]

#: name -> :class:`PremiseFlaw` (9 entries).
PREMISE_FLAWS: dict[str, PremiseFlaw] = {f.name: f for f in _FLAWS}
#: code ("E1.1") -> name.
PREMISE_FLAW_CODES: dict[str, str] = {f.code: f.name for f in _FLAWS}


def group_of(subcategory: str) -> str:
    """The group of an ABISS subcategory name.

    Raises:
        KeyError: unknown subcategory (message lists the valid names).
    """
    try:
        return SUBCATEGORIES[subcategory].group
    except KeyError:
        raise KeyError(f"unknown ABISS subcategory {subcategory!r}; valid: {sorted(SUBCATEGORIES)}") from None


def crosswalk(premise_flaw: str) -> str:
    """The ABISS subcategory that a PremiseSQL flaw (name or code) maps to.

    Raises:
        KeyError: unknown flaw.
    """
    name = PREMISE_FLAW_CODES.get(premise_flaw, premise_flaw)
    if name not in PREMISE_FLAWS:
        raise KeyError(f"unknown premise flaw {premise_flaw!r}; valid: {sorted(PREMISE_FLAWS)}")
    return PREMISE_FLAWS[name].abiss


def taxonomy_text() -> str:
    """The taxonomy as plain text for the ``taxonomy_only`` category mode (ABISS §5.1)."""
    lines = []
    for cat, subs in CATEGORIES.items():
        for s in subs:
            sc = SUBCATEGORIES[s]
            lines.append(f"- {s} ({sc.group}): {sc.definition}")
    return "\n".join(lines)
