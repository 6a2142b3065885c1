"""Prompts of the PremiseSQL recipe: flaw generation, review, type check (PremiseSQL §3, §A.3).

PremiseSQL builds each flawed query in two prompt stages (§A.3): a generation stage that puts one
controlled premise flaw into a source text-to-SQL instance, and a review stage that checks the candidate
against the criteria of its subcategory. The prompts here are ours, written from the paper's definitions
(its Table 1 and the "neighbouring categories" notes, in our words in :mod:`textsql_clarify.taxonomy`),
never copied. Each request carries a task marker for :class:`textsql_clarify.generation.fake_model.FakeModel`.
"""
from __future__ import annotations

from typing import Sequence

from ..taxonomy import PREMISE_FLAWS
from .tide_prompts import JSON_CUE

__all__ = ["MARKERS", "REWRITE_FLAWS", "FLAW_RECIPES", "generate_messages", "review_messages", "type_messages"]

#: Task markers of the PremiseSQL prompts.
MARKERS = {
    "generate": "[task:premise_gen]",
    "review": "[task:premise_review]",
    "type_check": "[task:premise_type]",
}

#: The subcategories built by rewriting the question (PremiseSQL §A.2: eight of nine; E3.2, the missing schema
#: premise, perturbs the schema instead and is the model-free ``missing_schema`` recipe).
REWRITE_FLAWS: tuple[str, ...] = tuple(n for n in PREMISE_FLAWS if n != "missing_schema_premise")

#: flaw -> (how to rewrite the question, what the review checks); our words, from PremiseSQL Table 1 and its
#: notes on neighbouring categories.
FLAW_RECIPES: dict[str, tuple[str, str]] = {
    "ambiguous_expression": (
        "Replace one precise condition or measure with a wording that maps onto several existing columns or "
        "several aggregations equally well (e.g. 'sales' when both a count and a total are possible).",
        "The new wording fits at least two different SQL computations over existing columns, and the overall "
        "operation (list, count, compare) is still clear."),
    "unclear_intent": (
        "Keep the entities but leave unclear what operation is wanted: whether to list, count, compare or "
        "rank them.",
        "The question no longer says which SQL operation is wanted; it is not only a vague condition."),
    "logical_contradiction": (
        "Add a condition that cannot hold together with another condition of the question "
        "(e.g. older than 60 and younger than 30).",
        "The question's own conditions are mutually incompatible, whatever the data holds."),
    "schema_contradiction": (
        "Make the question assume something that the unchanged schema contradicts: an attribute, relation or "
        "category that the tables shown do not have.",
        "The assumption conflicts with the schema as shown; the schema itself is unchanged."),
    "missing_constraint": (
        "Remove a constraint that defines the task (a year, a group, a threshold) and make the question depend "
        "on it, so that the operation stays clear but the intended subset is not said.",
        "The operation is clear, but a constraint needed to choose the intended rows is missing."),
    "undefined_concept": (
        "Replace a precise criterion with an abstract concept (e.g. 'impactful', 'successful') that has no "
        "unique mapping onto the available columns.",
        "Related columns exist, but the concept has no single agreed definition in terms of them."),
    "beyond_sql": (
        "Ask for something standard SQL cannot compute from stored data, such as a forecast, a causal "
        "explanation or a recommendation.",
        "The request needs prediction or reasoning beyond querying the stored data."),
    "external_fact": (
        "Make the answer depend on an outside fact that the database does not hold (a current exchange rate, "
        "a population, a public ranking).",
        "The needed fact is objective but absent from the database."),
}

_SYSTEM_WRITE = ("You help build a benchmark of flawed text-to-SQL questions. You answer with exactly one JSON "
                 "object and nothing else.")
_SYSTEM_JUDGE = "You are a strict reviewer of flawed text-to-SQL benchmark questions. You answer with one word."


def _flaw_head(flaw: str) -> str:
    f = PREMISE_FLAWS[flaw]
    return f"{f.code} {flaw.replace('_', ' ')} ({f.category.replace('_', ' ')}): {f.definition}"


def generate_messages(flaw: str, question: str, gold_sql: str, schema: str, evidence: Sequence[str] = ()) -> list[dict]:
    """The generation stage (PremiseSQL §A.3.1): put exactly one flaw of type ``flaw`` into the source question.

    The reply is JSON ``{"question": the flawed question, "explanation": why it cannot be answered as asked,
    naming the flaw}``.

    Args:
        flaw: a :data:`REWRITE_FLAWS` name.
        question, gold_sql: the source instance.
        schema: the schema summary (:func:`textsql_clarify.generation.tide_prompts.schema_summary`).
        evidence: the source's evidence.
    Raises:
        KeyError: ``flaw`` is not a rewriting flaw.
    """
    how, _ = FLAW_RECIPES[flaw]
    ev = ("\nEvidence: " + " ".join(evidence)) if evidence else ""
    req = (f"{MARKERS['generate']} Database schema:\n{schema}\n\nSource question: {question}{ev}\n"
           f"Its SQL: {gold_sql}\n\n"
           f"Flaw to introduce: {_flaw_head(flaw)}\nHow: {how}\n"
           "Change as little as possible, introduce only this one flaw, keep the question natural, and write no "
           "SQL or column names with underscores in it.\n"
           'Reply with JSON: {"question": "the flawed question", "explanation": "why it cannot be answered as asked"}')
    return [{"role": "system", "content": _SYSTEM_WRITE}, {"role": "user", "content": req + JSON_CUE}]


def review_messages(flaw: str, original: str, flawed: str, explanation: str, schema: str) -> list[dict]:
    """The review stage (PremiseSQL §A.3.2): does the candidate meet its subcategory's validity criteria? The
    judge answers ``pass`` or ``fail``.

    Raises:
        KeyError: ``flaw`` is not a rewriting flaw.
    """
    _, check = FLAW_RECIPES[flaw]
    req = (f"{MARKERS['review']} Database schema:\n{schema}\n\nOriginal question: {original}\n"
           f"Flawed question: {flawed}\n"
           f"Stated flaw: {explanation}\nIntended type: {_flaw_head(flaw)}\n"
           f"Criteria: {check} The flawed question differs from the original only by this one flaw and reads "
           "naturally.\nDoes the candidate meet every criterion? Answer pass or fail.\nVerdict:")
    return [{"role": "system", "content": _SYSTEM_JUDGE}, {"role": "user", "content": req}]


def type_messages(flawed: str, schema: str, order: Sequence[str] | None = None) -> list[dict]:
    """The type check (ours, after PremiseSQL's assignment of every instance to one subcategory): which of the
    nine flaw types does the flawed question have? The judge answers one flaw name; the intended type is not shown.

    Args:
        flawed: the flawed question.
        schema: the schema summary.
        order: the order the nine types are listed in (a small model favours the first listed); default
            ``PREMISE_FLAWS`` order.
    Raises:
        KeyError: ``order`` names an unknown flaw.
    """
    names = list(order) if order is not None else list(PREMISE_FLAWS)
    lines = "\n".join(f"- {n}: {PREMISE_FLAWS[n].definition}" for n in names)
    req = (f"{MARKERS['type_check']} Database schema:\n{schema}\n\nQuestion: {flawed}\n\nFlaw types:\n{lines}\n"
           "Which flaw type does the question have? Answer with the type's name.\nType:")
    return [{"role": "system", "content": _SYSTEM_JUDGE}, {"role": "user", "content": req}]


# --------------------------------------------------------------------------- the fake model's defaults
#: the fake generator's flawed question for each flaw: the source question with a clause added (control flow
#: only, not natural flaws).
_FAKE_CLAUSE = {
    "ambiguous_expression": "by the bigger measure",
    "unclear_intent": "or something along those lines",
    "logical_contradiction": "counting only those both above and below the average",
    "schema_contradiction": "grouped by their favourite colour",
    "missing_constraint": "for the period I have in mind",
    "undefined_concept": "for the most impactful ones",
    "beyond_sql": "and predict the value for next year",
    "external_fact": "converted at today's exchange rate",
}
#: flawed question -> flaw, for every question the fake wrote (so that its type check names the flaw).
_FAKE_MADE: dict[str, str] = {}


def _fake_generate(_fake, prompt: str) -> str:
    import json

    from .fake_model import prompt_field

    head = prompt_field(prompt, "Flaw to introduce")
    code = head.split(" ")[0]
    flaw = next((n for n, f in PREMISE_FLAWS.items() if f.code == code), "unclear_intent")
    q = prompt_field(prompt, "Source question").rstrip("?. ")
    flawed = f"{q}, {_FAKE_CLAUSE.get(flaw, 'somehow')}?"
    _FAKE_MADE[flawed] = flaw
    return json.dumps({"question": flawed, "explanation": f"The question now has a {flaw.replace('_', ' ')}."})


def _fake_type(_fake, prompt: str, options: Sequence[str]) -> str:
    from .fake_model import prompt_field

    flaw = _FAKE_MADE.get(prompt_field(prompt, "Question"), "")
    return flaw if flaw in options else options[0]


def register_fake_defaults() -> None:
    """Register the fake model's default answers for the PremiseSQL markers
    (:func:`textsql_clarify.generation.fake_model.register_default`): a flawed question per flaw, a passing
    review, and a type check that names the flaw the fake wrote. Called on import."""
    from .fake_model import register_default

    register_default(MARKERS["generate"], reply=_fake_generate)
    register_default(MARKERS["review"], choice="pass")
    register_default(MARKERS["type_check"], choice=_fake_type)


register_fake_defaults()
