"""Prompts of the TIDE model recipes, and the parsing of their replies (TIDE §3.2, App. B).

The prompts are ours, written from the paper's description of each stage (TIDE App. B: B.1 chain
injection and its judging rubric, Table 6; B.2 drift cross-validation; B.3 evidence rewriting); none
is copied. Each prompt carries a task marker (``[task:chain_l1]`` ...) in its request, so that the
deterministic :class:`textsql_clarify.generation.fake_model.FakeModel` can route its replies and
choices by marker (tests make each stage reject that way).

Every builder returns a chat message list (``[{"role", "content"}]``) for
:class:`textsql_clarify.generation.council.Council`; a writing prompt asks for one JSON object, a judging
prompt ends with a cue (``Verdict:``) that a scored option follows.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from ..sql.schema import read_schema

__all__ = [
    "MARKERS", "JSON_CUE", "PASS", "FAIL", "VERDICT_OPTIONS", "schema_summary", "parse_json_reply",
    "chain_l1_messages", "chain_l2_messages", "chain_judge_messages", "counterfactual_messages",
    "evidence_rewrite_messages", "drift_gen_messages", "drift_judge_messages", "CHAIN_CRITERIA", "DRIFT_CRITERIA",
]

#: The judging options of a pass/fail criterion; ``FAIL`` is the conservative one (ties go to it).
PASS, FAIL = "pass", "fail"
#: The counterfactual test's verdicts (TIDE §2.1); ``invariant`` rejects the candidate.
VERDICT_OPTIONS = ("eliminated", "transformed", "invariant")

#: Task markers of every TIDE prompt (stage -> marker), for the fake model's routing.
MARKERS = {
    "chain_l1": "[task:chain_l1]",
    "chain_l2": "[task:chain_l2]",
    "plausibility": "[task:chain_judge_plausibility]",
    "re_ask": "[task:chain_judge_reask]",
    "counterfactual": "[task:chain_judge_counterfactual]",
    "evidence_rewrite": "[task:evidence_rewrite]",
    "drift_gen": "[task:drift_gen]",
    "drift_fit": "[task:drift_judge_fit]",
    "stability": "[task:drift_judge_stability]",
}

#: TIDE Table 6, in its priority order: criterion -> what the judge checks (our words).
CHAIN_CRITERIA = {
    "plausibility": "Both options of each layer are plausible readings of the question and clearly distinct: "
                    "neither is a strawman nor a rewording of the other.",
    "re_ask": "Each layer asks about something the initial question leaves open: the question does not already "
              "answer it.",
}
#: TIDE App. B.2 cross-validation, in its priority order (our words).
DRIFT_CRITERIA = {
    "drift_fit": "The new SQL does what the user's drift message asks, and the change is of the stated kind "
                 "({subtype}: {subtype_def}).",
    "stability": "Everything the user did not ask to change is unchanged in the new SQL: the same tables, the "
                 "same other conditions, the same other output columns.",
}
_SUBTYPE_DEF = {
    "value": "one literal value of a condition is replaced, the condition itself stays",
    "constraint": "one or more conditions are removed and nothing else changes",
    "projection": "only what is returned changes (columns added, removed or replaced); the conditions stay",
}

#: the cue that ends every writing prompt, so that a plain (non-chat) model continues with the object.
JSON_CUE = "\nJSON:"
_SYSTEM_WRITE = ("You help build a benchmark for conversational text-to-SQL. You answer with exactly one JSON "
                 "object and nothing else.")
_SYSTEM_JUDGE = ("You are a strict reviewer of benchmark items for conversational text-to-SQL. You answer with "
                 "one word.")


def schema_summary(db_path: str, *, max_chars: int = 2500) -> str:
    """A compact text of a database's schema for a prompt: one ``table(column TYPE, ...)`` line per table.

    Args:
        db_path: the SQLite file (read-only, through :func:`textsql_clarify.sql.schema.read_schema`).
        max_chars: the text is cut at this many characters (a long schema would crowd out the request).
    Raises:
        FileNotFoundError: no such file.
    """
    lines = [f"{t}({', '.join(f'{c} {ty}' for c, ty in cols.items())})" for t, cols in read_schema(db_path).items()]
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[:max_chars].rsplit("\n", 1)[0] + "\n..."


def parse_json_reply(text: str, fields: Sequence[str]) -> dict[str, Any] | str:
    """The first JSON object in a model's reply, with every required field a non-empty string.

    The reply may hold text or a code fence around the object; the first ``{`` that starts a valid object
    is taken (``json.JSONDecoder.raw_decode``). Nested objects are allowed; a required field given as a
    dotted path (``"l1.answer"``) is looked up inside them.

    Args:
        text: the model's reply.
        fields: required fields, each a key or a dotted path, whose value must be a non-empty string.
    Returns:
        The object (a dict), or a short reason string when there is no object or a field is missing
        (TIDE Table 7 step 1, ``json_format``).
    """
    dec = json.JSONDecoder()
    obj = None
    start = text.find("{")
    while start != -1:
        try:
            cand, _ = dec.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            cand = None
        if isinstance(cand, dict):
            obj = cand
            break
        start = text.find("{", start + 1)
    if obj is None:
        return "no JSON object in the reply"
    for f in fields:
        v: Any = obj
        for part in f.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if not isinstance(v, str) or not v.strip():
            return f"field {f!r} is missing or not a non-empty string"
    return obj


def _anchor_block(question: str, gold_sql: str, schema: str, evidence: Sequence[str] = ()) -> str:
    ev = ("\nEvidence: " + " ".join(evidence)) if evidence else ""
    return f"Database schema:\n{schema}\n\nFully specified question: {question}{ev}\nIts SQL: {gold_sql}"


def chain_l1_messages(question: str, gold_sql: str, schema: str, evidence: Sequence[str] = ()) -> list[dict]:
    """The first chain-injection prompt (TIDE §3.2 "chain injection", App. B.1): from the anchor, write an
    underspecified initial question and the first clarification layer L1.

    The anchor's SQL is the canonical target (the L1 answer, then the L2 answer, lead to it). The reply is a
    JSON object: ``question`` (the underspecified question), ``clarification`` (what the system would ask),
    ``answer`` (the chosen answer, which leads towards the anchor), ``alternative`` (the other plausible
    answer), ``alternative_sql`` (the SQL under the alternative, may be empty), ``subcategory`` (the ABISS
    ambiguity type of L1, optional).

    Args:
        question, gold_sql: the anchor's question and gold SQL.
        schema: :func:`schema_summary` of its database.
        evidence: the anchor's evidence.
    """
    req = (
        f"{MARKERS['chain_l1']} Rewrite the question so that it becomes underspecified in TWO dependent steps. "
        "First step (L1): make one part of the question vague, so that the system must ask a clarification "
        "with two plausible answers. The chosen answer leads towards the SQL above; the alternative is another "
        "reasonable reading. A second step (L2) will be asked only after L1 is answered, so leave a second "
        "detail open whose meaning depends on the L1 answer.\n"
        'Reply with JSON: {"question": "...", "clarification": "...", "answer": "...", "alternative": "...", '
        '"alternative_sql": "SQL for the alternative reading", "subcategory": "lexical_vagueness | '
        'entity_ambiguity | lexical_overlap | scope | attachment"}'
    )
    return [{"role": "system", "content": _SYSTEM_WRITE},
            {"role": "user", "content": _anchor_block(question, gold_sql, schema, evidence) + "\n\n" + req + JSON_CUE}]


def chain_l2_messages(question: str, gold_sql: str, schema: str, initial_question: str, l1: dict,
                      evidence: Sequence[str] = ()) -> list[dict]:
    """The second chain-injection prompt (TIDE App. B.1): given L1 and its chosen answer, write the dependent
    second layer L2.

    The reply is a JSON object: ``clarification`` (the L2 question, meaningful only once L1 is resolved),
    ``answer`` (the chosen answer: with the L1 answer it gives the anchor SQL), ``alternative`` (the other
    answer), ``alternative_sql`` (the SQL under the L1 answer and the L2 alternative).

    Args:
        question, gold_sql, schema, evidence: as :func:`chain_l1_messages`.
        initial_question: the underspecified question written for L1.
        l1: the L1 reply (``clarification``, ``answer``, ``alternative``).
    """
    req = (
        f"{MARKERS['chain_l2']} The user asked: \"{initial_question}\". The system asked \"{l1['clarification']}\" "
        f"and the user answered \"{l1['answer']}\" (not \"{l1['alternative']}\"). Now write the second "
        "clarification L2: a question that only makes sense after this answer, with a chosen answer that, "
        "together with the first answer, gives exactly the SQL above, and an alternative answer.\n"
        'Reply with JSON: {"clarification": "...", "answer": "...", "alternative": "...", '
        '"alternative_sql": "SQL for the first answer with the alternative second answer"}'
    )
    return [{"role": "system", "content": _SYSTEM_WRITE},
            {"role": "user", "content": _anchor_block(question, gold_sql, schema, evidence) + "\n\n" + req + JSON_CUE}]


def _chain_block(initial_question: str, l1: dict, l2: dict) -> str:
    return (f"Initial question: {initial_question}\n"
            f"L1 clarification: {l1['clarification']}\n  chosen: {l1['answer']}\n  alternative: {l1['alternative']}\n"
            f"L2 clarification: {l2['clarification']}\n  chosen: {l2['answer']}\n  alternative: {l2['alternative']}")


def chain_judge_messages(criterion: str, initial_question: str, l1: dict, l2: dict) -> list[dict]:
    """A chain-judging prompt for one criterion of TIDE Table 6 (``plausibility`` or ``re_ask``); the judge
    answers :data:`PASS` or :data:`FAIL`.

    Raises:
        KeyError: an unknown criterion.
    """
    rule = CHAIN_CRITERIA[criterion]
    req = (f"{MARKERS[criterion]} {_chain_block(initial_question, l1, l2)}\n\nCriterion: {rule}\n"
           f"Does the item meet the criterion? Answer {PASS} or {FAIL}.\nVerdict:")
    return [{"role": "system", "content": _SYSTEM_JUDGE}, {"role": "user", "content": req}]


def counterfactual_messages(initial_question: str, l1: dict, l2: dict) -> list[dict]:
    """The counterfactual test (TIDE §2.1; Table 6 "Counterfactuality"): if L1 were answered with its
    alternative, would L2 still be asked as the same question? The judge answers one of
    :data:`VERDICT_OPTIONS`: ``eliminated`` (L2 no longer makes sense), ``transformed`` (L2 must be reworded:
    another referent, vocabulary or scope), ``invariant`` (L2 could be asked verbatim)."""
    req = (f"{MARKERS['counterfactual']} {_chain_block(initial_question, l1, l2)}\n\n"
           f"Suppose the user had answered L1 with the alternative (\"{l1['alternative']}\"). Would L2 still be asked "
           "as the same question? Answer eliminated (L2 no longer makes sense), transformed (L2 would have to be "
           "reworded: another referent, vocabulary or scope) or invariant (L2 could be asked word for word).\n"
           "Verdict:")
    return [{"role": "system", "content": _SYSTEM_JUDGE}, {"role": "user", "content": req}]


def evidence_rewrite_messages(evidence: Sequence[str], initial_question: str, l1: dict, l2: dict,
                              gold_sql: str) -> list[dict]:
    """The evidence rewrite (TIDE App. B.3): remove from the anchor's evidence every clause that settles L1 or
    L2 in advance, keep the mappings the SQL needs. The reply is JSON ``{"evidence": "..."}`` (may be empty
    when nothing is left)."""
    req = (f"{MARKERS['evidence_rewrite']} Evidence: {' '.join(evidence)}\nSQL: {gold_sql}\n"
           f"{_chain_block(initial_question, l1, l2)}\n\nRewrite the evidence so that it no longer tells which answer "
           "the user will choose for L1 or L2, but keeps every fact needed to write the SQL (column meanings, "
           'codes, formulas).\nReply with JSON: {"evidence": "..."}')
    return [{"role": "system", "content": _SYSTEM_WRITE}, {"role": "user", "content": req + JSON_CUE}]


def drift_gen_messages(question: str, gold_sql: str, schema: str, subtype: str) -> list[dict]:
    """The drift-injection prompt (TIDE §3.2 "drift injection", App. B.2 "Generation"): for a pre-assigned
    subtype, the generator writes the user's drift utterance and the post-drift SQL. The reply is JSON
    ``{"utterance": "...", "post_drift_sql": "..."}`` (TIDE Table 7 step 1 checks its fields).

    Raises:
        KeyError: an unknown subtype.
    """
    req = (f"{MARKERS['drift_gen']} The system answered the question with the SQL above. Now the user changes their "
           f"mind: write what the user says next and the SQL that answers the changed request. The change must be "
           f"of this kind: {subtype}: {_SUBTYPE_DEF[subtype]}. The user retracts something they asked for; the user "
           "speaks in plain words, never in SQL or column names.\n"
           'Reply with JSON: {"utterance": "...", "post_drift_sql": "..."}')
    return [{"role": "system", "content": _SYSTEM_WRITE},
            {"role": "user", "content": _anchor_block(question, gold_sql, schema) + "\n\n" + req + JSON_CUE}]


def drift_judge_messages(criterion: str, gold_sql: str, utterance: str, post_sql: str, subtype: str) -> list[dict]:
    """A drift cross-validation prompt (TIDE App. B.2) for one criterion, ``drift_fit`` then ``stability``; the
    judge sees the anchor SQL, the drift utterance and the post-drift SQL and answers :data:`PASS` or
    :data:`FAIL`.

    Raises:
        KeyError: an unknown criterion or subtype.
    """
    rule = DRIFT_CRITERIA[criterion].format(subtype=subtype, subtype_def=_SUBTYPE_DEF[subtype])
    req = (f"{MARKERS[criterion]} SQL before: {gold_sql}\nThe user then says: \"{utterance}\"\n"
           f"SQL after: {post_sql}\n\n"
           f"Criterion: {rule}\nDoes the item meet the criterion? Answer {PASS} or {FAIL}.\nVerdict:")
    return [{"role": "system", "content": _SYSTEM_JUDGE}, {"role": "user", "content": req}]


# --------------------------------------------------------------------------- the fake model's defaults
def _fake_l1(_fake, prompt: str) -> str:
    """The fake generator's L1 reply: the anchor's question made vague, the count of its result as the
    alternative reading (control flow only, not a natural chain)."""
    from .fake_model import prompt_field

    q = prompt_field(prompt, "Fully specified question").rstrip("?. ")
    sql = prompt_field(prompt, "Its SQL").rstrip("; ")
    return json.dumps({
        "question": f"Roughly speaking, {q[:1].lower() + q[1:]}?",
        "clarification": "Do you want the matching rows themselves, or only how many there are?",
        "answer": "The rows themselves.", "alternative": "Only how many there are.",
        "alternative_sql": f"SELECT COUNT(*) FROM ({sql})", "subcategory": "lexical_vagueness"})


def _fake_l2(_fake, prompt: str) -> str:
    """The fake generator's L2 reply: every row (the anchor) or only the first one."""
    from .fake_model import prompt_field

    sql = prompt_field(prompt, "Its SQL").rstrip("; ")
    return json.dumps({
        "clarification": "Should I show every matching row, or only the first one?",
        "answer": "Every matching row.", "alternative": "Only the first one.",
        "alternative_sql": f"SELECT * FROM ({sql}) LIMIT 1"})


def _schema_columns(prompt: str) -> dict[str, list[str]]:
    """``{table: [columns]}`` read back from the :func:`schema_summary` lines of a prompt."""
    import re

    block = prompt.split("Database schema:", 1)[-1].split("Fully specified question:", 1)[0]
    return {m.group(1): [c.strip().split(" ")[0] for c in m.group(2).split(",") if c.strip()]
            for m in re.finditer(r"^(\w+)\((.*)\)$", block, flags=re.M)}


def _fake_value_edit(tree, where) -> tuple[str, Any] | None:
    """The first numeric comparison of ``where`` with its literal moved so that more rows pass (``>= 28`` ->
    ``>= 14``, ``< 5`` -> ``< 10``, ``= 3`` -> ``= 4``); ``(utterance, tree)`` or ``None``."""
    from sqlglot import exp

    for cmp in where.find_all(exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ):
        lit = cmp.expression
        if not isinstance(lit, exp.Literal) or lit.is_string:
            continue
        try:
            old = int(lit.this)
        except ValueError:
            continue
        if isinstance(cmp, (exp.GT, exp.GTE)):
            new = old // 2 if old > 1 else old - 1
        elif isinstance(cmp, (exp.LT, exp.LTE)):
            new = old * 2 if old > 0 else old + 1
        else:
            new = old + 1
        lit.replace(exp.Literal.number(new))
        return f"Sorry, make that {new} instead of {old}.", tree
    return None


def _fake_projection_edit(tree, prompt: str) -> tuple[str, Any] | None:
    """The first output column replaced by another column of its table (a ``COUNT(*)`` by a count of the
    first table's second column's distinct values); ``(utterance, tree)`` or ``None``."""
    from sqlglot import exp

    from .utterances import column_words

    cols = _schema_columns(prompt)
    tables = {(t.alias_or_name): t.name for t in tree.find_all(exp.Table)}
    first = next(iter(tree.find_all(exp.Table)), None)
    item = tree.expressions[0] if tree.expressions else None
    node = item.this if isinstance(item, exp.Alias) else item
    if isinstance(node, exp.Column):
        table = tables.get(node.table) if node.table else (first.name if first is not None else None)
        shown = {c.name for c in tree.expressions for c in c.find_all(exp.Column)}
        other = next((c for c in cols.get(table or "", []) if c not in shown and not c.endswith("_id")), None)
        if other is None:
            return None
        node.replace(exp.column(other, table=node.table or None))
        return f"Actually, show me the {column_words(other)} instead of the {column_words(node.name)}.", tree
    if isinstance(node, exp.Count) and isinstance(node.this, exp.Star) and first is not None:
        table_cols = cols.get(first.name, [])
        if len(table_cols) < 2:
            return None
        col = exp.column(table_cols[1], table=first.alias or None)
        node.replace(exp.Count(this=exp.Distinct(expressions=[col])))
        return f"Actually, give me how many different {column_words(table_cols[1])} values there are instead.", tree
    return None


def _fake_drift(_fake, prompt: str) -> str:
    """The fake generator's drift reply (``[task:drift_gen]``, TIDE App. B.2), edited on the anchor's AST
    (sqlglot) for the subtype the prompt assigns: ``value`` moves the first numeric comparison's literal,
    ``constraint`` removes the last condition of the WHERE clause, ``projection`` replaces the first output
    column. Where the anchor admits no such edit the anchor's SQL comes back unchanged, so the checks
    reject it (``distinct_result``): control flow only, not natural drifts."""
    import re

    import sqlglot
    from sqlglot import exp

    from .fake_model import prompt_field

    sql = prompt_field(prompt, "Its SQL").rstrip("; ")
    m = re.search(r"of this kind: (\w+):", prompt)
    subtype = m.group(1) if m else ""
    edit = None
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:  # noqa: BLE001 - a fake: an unparsable anchor gets its SQL back
        tree = None
    where = tree.args.get("where") if isinstance(tree, exp.Select) else None
    if subtype == "value" and where is not None:
        edit = _fake_value_edit(tree, where)
    elif subtype == "constraint" and where is not None:
        cond = where.this
        while isinstance(cond, exp.Paren):
            cond = cond.this
        if isinstance(cond, exp.And):
            cond.replace(cond.this)  # keeps every condition but the last
        else:
            tree.set("where", None)
        edit = ("Actually, forget that last condition; I want them all.", tree)
    elif subtype == "projection" and isinstance(tree, exp.Select):
        edit = _fake_projection_edit(tree, prompt)
    if edit is None:
        return json.dumps({"utterance": "Actually, keep it as it is.", "post_drift_sql": sql})
    return json.dumps({"utterance": edit[0], "post_drift_sql": edit[1].sql(dialect="sqlite")})


def register_fake_defaults() -> None:
    """Register the fake model's default answers for the TIDE markers
    (:func:`textsql_clarify.generation.fake_model.register_default`): a valid chain echoing the anchor, every
    judge passing, the counterfactual verdict ``transformed``, an empty evidence rewrite, a drift edited on the
    anchor's SQL (:func:`_fake_drift`). Called on import."""
    from .fake_model import register_default

    register_default(MARKERS["chain_l1"], reply=_fake_l1)
    register_default(MARKERS["chain_l2"], reply=_fake_l2)
    register_default(MARKERS["evidence_rewrite"], reply='{"evidence": ""}')
    register_default(MARKERS["drift_gen"], reply=_fake_drift)
    for k in ("plausibility", "re_ask", "drift_fit", "stability"):
        register_default(MARKERS[k], choice=PASS)
    register_default(MARKERS["counterfactual"], choice="transformed")


register_fake_defaults()
