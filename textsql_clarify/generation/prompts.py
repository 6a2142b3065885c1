"""Prompts of the ABISS recipe (ABISS §4.1 generation, §4.2 validation), in our words.

Each builder returns a chat message list (``[system, user]``) for
:class:`textsql_clarify.generation.council.Council`. The system message is the task's fixed instruction
(the same for every request, so a backend reuses its key/value cache); the user message starts with the
task's marker (:data:`MARKERS`), by which :class:`~textsql_clarify.generation.fake_model.FakeModel`
routes, holds the request as ``Field: value`` lines, and ends with its cue (``"Question:"``, ``"SQL:"``,
``"Answer (yes or no):"``), which a plain (few-shot) prompt continues.

The prompts are written from the paper's description (category definition, distinguishing
characteristics and an example; schema with sample rows; one of three styles and four SQL difficulty
levels; an output format per group), never copied.
"""
from __future__ import annotations

from typing import Sequence

from ..taxonomy import SUBCATEGORIES

__all__ = ["MARKERS", "STYLES", "DIFFICULTY_LEVELS", "CHARACTERISTICS", "EXAMPLES", "category_text", "nlq_messages",
           "sql_messages", "sql_free_messages", "conformance_messages", "satisfaction_messages",
           "feedback_messages", "category_pair_messages", "style_messages", "rows_text"]

#: task -> marker (the first line of every user message of that task).
MARKERS = {
    "nlq": "[task:abiss_nlq]",
    "sql": "[task:abiss_sql]",
    "sql_noevidence": "[task:abiss_sql_noevidence]",
    "sql_nohk": "[task:abiss_sql_nohk]",
    "sql_attempt": "[task:abiss_sql_attempt]",
    "conform": "[task:abiss_conform]",
    "satisfy": "[task:abiss_satisfy]",
    "feedback": "[task:abiss_feedback]",
    "category": "[task:abiss_category]",
    "style": "[task:abiss_style]",
}

#: ABISS §4.1's three question styles -> how a question in that style reads (our words).
STYLES = {
    "formal": "complete, polite sentences in a professional register, no slang",
    "colloquial": "casual everyday speech, as a person would type it in a chat, possibly lower case",
    "interrogative": "a direct question that starts with a question word (what, which, who, how) and ends with ?",
}
#: ABISS §4.1's four SQL difficulty levels (after OmniSQL) -> what the SQL needs (our words).
DIFFICULTY_LEVELS = {
    "simple": "one table, a filter or a plain projection",
    "moderate": "a join of two tables, or an aggregate with GROUP BY",
    "complex": "several joins with grouping, ordering or HAVING",
    "highly complex": "nested subqueries, set operations or several aggregates combined",
}

#: subcategory -> what distinguishes it from its neighbours (ABISS §3.2, our words).
CHARACTERISTICS = {
    "answerable_without_evidence": "one clear SQL answer from the schema alone; no word is open to two readings",
    "answerable_with_evidence": "one clear SQL answer, but only once the given evidence (a formula, a code, "
                                "a threshold) is used; without the evidence a model would write a different SQL",
    "scope": "a quantifier (each, every, all) can apply to the whole set or to each member",
    "attachment": "a modifier or condition can attach to one part of the question or to several parts",
    "lexical_overlap": "one word fits two columns or tables with similar names equally well",
    "entity_ambiguity": "one phrase can mean two different entities or attributes of the schema",
    "lexical_vagueness": "a vague word (recent, high, many, popular) has no fixed threshold",
    "missing_user_knowledge": "the answer depends on who the user is (my, our, me), which only the user knows",
    "conflicting_knowledge": "the evidence gives two incompatible definitions of the same term",
    "missing_entities_or_attributes": "the question needs a table or column that the schema does not have",
    "missing_relationship": "both things asked about exist, but no key or table links them",
    "missing_external_knowledge": "the question needs an outside fact or rule (a rate, a scale) the database lacks",
    "improper_question": "chit-chat, a task outside the database's domain, or a request to change the data",
}
#: subcategory -> one illustrative example (question | hidden knowledge), over a university database.
EXAMPLES = {
    "answerable_without_evidence": "How many students are in the Physics department? | none",
    "answerable_with_evidence": "List the honours students. Evidence: honours means an average grade above 28. | none",
    "scope": "Which courses do all Mathematics students take? | 1: courses every one of them takes; "
             "2: each student with the courses they take",
    "attachment": "List professors and students in Physics. | 1: only students are in Physics; "
                  "2: both are in Physics",
    "lexical_overlap": "Show the students' email. | 1: the university email column; 2: the private email column",
    "entity_ambiguity": "List the enrollment date of the Databases students. | 1: when they joined the "
                        "university; 2: when they signed up for the course",
    "lexical_vagueness": "List recent courses. | 1: courses of the last year; 2: courses of the last five years",
    "missing_user_knowledge": "List the students of my department. | 1: I work in Physics; 2: I work in Economics",
    "conflicting_knowledge": "Who are the senior students? Evidence: senior means enrolled before 2021; senior "
                             "means older than 25. | 1: the enrolment rule; 2: the age rule",
    "missing_entities_or_attributes": "List the administrative staff. | The schema has no staff table; ask the "
                                      "database administrator to add one.",
    "missing_relationship": "Which professors teach Databases? | Professors and courses exist but nothing links "
                            "them; ask the administrator for a teaching table.",
    "missing_external_knowledge": "Show the grades on the US letter scale. | The conversion from the 18-30 scale "
                                  "to letters is not stored.",
    "improper_question": "Please delete the student Rossi. | The assistant only reads data; changes go to "
                         "the administrator.",
}


def category_text(sub: str) -> str:
    """Definition, distinguishing characteristics and example of one ABISS subcategory (ABISS §4.1 (1)).

    Raises:
        KeyError: unknown subcategory.
    """
    s = SUBCATEGORIES[sub]
    return (f"{sub} ({s.group}): {s.definition}\nDistinguishing characteristics: {CHARACTERISTICS[sub]}\n"
            f"Example: {EXAMPLES[sub]}")


def rows_text(columns: Sequence[str], rows: Sequence[tuple], *, limit: int = 5, width: int = 40) -> str:
    """A few result rows as ``col | col`` lines, each value cut at ``width`` characters."""
    def cell(v) -> str:
        t = " ".join(str(v).split())
        return t if len(t) <= width else t[: width - 3] + "..."
    head = " | ".join(columns)
    body = [" | ".join(cell(v) for v in r) for r in list(rows)[:limit]]
    return "\n".join([head, *body]) if body else head + "\n(no rows)"


def _msgs(system: str, marker: str, lines: Sequence[str], cue: str) -> list[dict]:
    user = "\n".join([marker, *[ln for ln in lines if ln is not None], cue])
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ------------------------------------------------------------------------------------------- generation
_NLQ_SYSTEM = (
    "You write test questions for a text-to-SQL assistant over one SQLite database. Each question must belong "
    "to the requested subcategory of the ABISS taxonomy, use the requested style, and need SQL of the requested "
    "difficulty. Use only tables, columns and values that the schema and sample rows show, unless the "
    "subcategory is about something missing. A seed question and its SQL show what users of this database ask.\n"
    "Answer in exactly these lines and nothing else:\n"
    "Question: <the question>\n"
    "Evidence: <external knowledge the question needs, or none>\n"
    "For an answerable question: Hidden knowledge: none\n"
    "For an ambiguous question: Hidden knowledge 1: <what the user means in reading 1>\n"
    "Hidden knowledge 2: <what the user means in reading 2>\n"
    "For an unanswerable question: Hidden knowledge: <why it cannot be answered, naming what is missing, "
    "and that the user should ask the database administrator>"
)


def nlq_messages(*, db_id: str, schema: str, subcategory: str, style: str, difficulty: str,
                 seed_question: str, seed_sql: str) -> list[dict]:
    """Step 1 of ABISS §4.1: the NLQ object (question, evidence, hidden knowledge) for one subcategory,
    style and difficulty, with the schema and sample rows; the anchor is the seed (TIDE §3.1)."""
    group = SUBCATEGORIES[subcategory].group
    return _msgs(_NLQ_SYSTEM, MARKERS["nlq"], [
        f"Database: {db_id}", "Schema and sample rows:", schema,
        f"Subcategory: {subcategory}", f"Group: {group}", "Definition: " + category_text(subcategory),
        f"Style: {style} ({STYLES[style]})", f"Difficulty: {difficulty} ({DIFFICULTY_LEVELS[difficulty]})",
        f"Seed question: {seed_question}", f"Seed SQL: {seed_sql}",
    ], "Question:")


_SQL_SYSTEM = (
    "You translate a question about a SQLite database into one SQLite SELECT query. First link the question's "
    "words to tables and columns, split it into sub-questions if needed, then write the query. Follow the "
    "evidence and the hidden knowledge (what the user means) exactly. End with one line: SQL: <query>"
)


def sql_messages(*, schema: str, question: str, evidence: Sequence[str], hidden_knowledge: str,
                 reference_sql: str) -> list[dict]:
    """Step 2 of ABISS §4.1: SQL grounding of one solvable NLQ object (chain of thought, then ``SQL:``)."""
    return _msgs(_SQL_SYSTEM, MARKERS["sql"], [
        "Schema and sample rows:", schema, f"Reference SQL: {reference_sql}",
        f"Question: {question}", f"Evidence: {'; '.join(evidence) or 'none'}",
        f"Hidden knowledge: {hidden_knowledge or 'none'}",
    ], "SQL:")


_FREE_SYSTEM = (
    "You translate a question about a SQLite database into one SQLite SELECT query. If no query can answer it, "
    "answer NONE. End with one line: SQL: <query or NONE>"
)


def sql_free_messages(kind: str, *, schema: str, question: str, evidence: Sequence[str]) -> list[dict]:
    """A council model's own SQL for the question, without what the check withholds (ABISS Stages 5-7):
    ``kind`` ``sql_noevidence`` (no evidence, Stage 5), ``sql_nohk`` (no hidden knowledge, Stage 6),
    ``sql_attempt`` (an attempt at an unanswerable question, Stage 7).

    Raises:
        KeyError: unknown ``kind``.
    """
    marker = {"sql_noevidence": MARKERS["sql_noevidence"], "sql_nohk": MARKERS["sql_nohk"],
              "sql_attempt": MARKERS["sql_attempt"]}[kind]
    ev = [] if kind == "sql_noevidence" else [f"Evidence: {'; '.join(evidence) or 'none'}"]
    return _msgs(_FREE_SYSTEM, marker, ["Schema and sample rows:", schema, f"Question: {question}", *ev], "SQL:")


# ------------------------------------------------------------------------------------------- validation
_CONFORM_SYSTEM = (
    "You check generated test questions for a text-to-SQL benchmark. Given a category definition and a "
    "question with its SQL and hidden knowledge, decide whether the question clearly has the category's "
    "defining property, not just on the surface. Answer yes or no."
)


def conformance_messages(*, schema: str, subcategory: str, question: str, evidence: Sequence[str],
                         sqls: Sequence[str], hidden: Sequence[str]) -> list[dict]:
    """ABISS Stage 3 (Category Conformance): does the question truly fit its category?"""
    lines = ["Schema and sample rows:", schema, "Category: " + category_text(subcategory),
             f"Question: {question}", f"Evidence: {'; '.join(evidence) or 'none'}"]
    lines += [f"SQL {k + 1}: {s}" for k, s in enumerate(sqls)]
    lines += [f"Hidden knowledge {k + 1}: {h}" for k, h in enumerate(hidden) if h]
    return _msgs(_CONFORM_SYSTEM, MARKERS["conform"], lines, "Answer (yes or no):")


_SATISFY_SYSTEM = (
    "You check whether a SQL query and its result answer a question about a SQLite database, reading the "
    "question as the hidden knowledge says when it is given. Answer yes or no."
)


def satisfaction_messages(*, schema: str, question: str, evidence: Sequence[str], hidden_knowledge: str,
                          sql: str, result: str) -> list[dict]:
    """ABISS Stage 4 (Ground Truth Satisfaction), also Stage 7's check of an attempted SQL."""
    return _msgs(_SATISFY_SYSTEM, MARKERS["satisfy"], [
        "Schema and sample rows:", schema, f"Question: {question}", f"Evidence: {'; '.join(evidence) or 'none'}",
        f"Hidden knowledge: {hidden_knowledge or 'none'}", f"SQL: {sql}", "Result (first rows):", result,
    ], "Answer (yes or no):")


_FEEDBACK_SYSTEM = (
    "You check the feedback a database assistant gives for a question it cannot answer. Good feedback is "
    "accurate, names the specific missing tables, columns, links or facts, says why the question cannot be "
    "answered, and suggests asking the database administrator. Answer yes or no."
)


def feedback_messages(*, schema: str, subcategory: str, question: str, feedback: str) -> list[dict]:
    """ABISS Stage 8 (Feedback Quality Check) of an unanswerable question's hidden knowledge."""
    return _msgs(_FEEDBACK_SYSTEM, MARKERS["feedback"], [
        "Schema and sample rows:", schema, "Category: " + category_text(subcategory), f"Question: {question}",
        f"Feedback: {feedback}",
    ], "Answer (yes or no):")


_CATEGORY_SYSTEM = (
    "You compare two categories of problematic database questions. Given a question (and what the user "
    "knows), decide which of the two categories better describes what makes it problematic. Answer A or B."
)


def category_pair_messages(*, question: str, evidence: Sequence[str], hidden: Sequence[str],
                           a: str, b: str) -> list[dict]:
    """ABISS Stage 9 (Category Consistency): one comparison of two subcategories of the same group."""
    lines = [f"Question: {question}", f"Evidence: {'; '.join(evidence) or 'none'}"]
    lines += [f"Hidden knowledge {k + 1}: {h}" for k, h in enumerate(hidden) if h]
    lines += [f"Category A: {a} - {SUBCATEGORIES[a].definition} ({CHARACTERISTICS[a]})",
              f"Category B: {b} - {SUBCATEGORIES[b].definition} ({CHARACTERISTICS[b]})"]
    return _msgs(_CATEGORY_SYSTEM, MARKERS["category"], lines, "Answer (A or B):")


_STYLE_SYSTEM = "You classify the writing style of a question as one of: " + "; ".join(
    f"{k}: {v}" for k, v in STYLES.items()) + ". Answer with the style name."


def style_messages(*, question: str) -> list[dict]:
    """ABISS Stage 10 (Style Conformance): which style is the question written in?"""
    return _msgs(_STYLE_SYSTEM, MARKERS["style"], [f"Question: {question}"], "Style:")
