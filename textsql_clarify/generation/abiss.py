"""The ABISS recipe: category-aware NLQ generation, SQL grounding and ten validators (ABISS §4).

Per anchor (the pipeline grows every sample from an anchor, TIDE §3.1; ABISS §4.1 generates per database, so the
anchor's question and SQL serve as the seed, and by default the schema shown is that of the anchor's tables), for
each of ``per_anchor`` candidates the recipe draws a subcategory, a style (formal, colloquial,
interrogative) and an SQL difficulty (simple ... highly complex) with the pipeline's ``rng``, then:

1. ``nlq_generation`` (§4.1 step 1): the council's generator writes the NLQ object: question, evidence,
   hidden knowledge (two for an ambiguous question: one NLQ object per reading);
2. ``sql_grounding`` (§4.1 step 2): it writes the gold SQL of each solvable object (chain of thought, then
   ``SQL:``); the difficulty label is then set from the SQL (:func:`sql_difficulty`);

then the ten validators of §4.2, in order, each on the candidates that passed the ones before:

3. ``duplicate_removal`` (Stage 1): the question, or a value-masked gold SQL, equals one accepted before from
   the same anchor (:func:`textsql_clarify.datasets.gold_masking.mask_values`). Duplicates across anchors are
   the pipeline's ``duplicate`` and ``load_validation`` (``duplicate_gold``) stages: a unit (one recipe on one
   anchor) must not depend on the units run before it, or a resumed run would differ from an uninterrupted one;
4. ``sql_executability`` (Stage 2): every gold runs in the read-only sandbox within the time limit, without
   error, not truncated, with a non-empty result;
5. ``category_conformance`` (Stage 3): council majority that the question fits its subcategory;
6. ``ground_truth_satisfaction`` (Stage 4): council majority, per gold, that the SQL and its rows answer the
   question (read with its hidden knowledge for an ambiguous reading);
7. ``evidence_necessity`` (Stage 5, answerable with evidence): every council model writes SQL without the
   evidence; if the majority's SQL is equivalent to the gold (the reward module's relaxed EX), rejected;
8. ``ambiguity_verification`` (Stage 6, ambiguous): the two readings must return different results (the
   load-time validator's ``indistinguishable`` test), and every model writes SQL without the hidden
   knowledge; if the majority's SQL is equivalent to one reading, that reading dominates and the
   question is rejected;
9. ``unsolvability_verification`` (Stage 7, unanswerable): every model attempts SQL; an attempt that passes
   Stage 2 and Stage 4 (council) solves the question, and any solving model rejects it;
10. ``feedback_quality`` (Stage 8, unanswerable): council majority that the hidden knowledge is accurate,
    specific and actionable feedback;
11. ``category_consistency`` (Stage 9, ambiguous and unanswerable): against every other subcategory of the
    same group, the assigned one must win a strict council majority (the order of A and B alternates);
12. ``style_conformance`` (Stage 10): the council's majority style must be the requested one.

A plain (few-shot, small) backend writes each SQL on its cue's line (its text stops at a line break) and the
NLQ object up to a blank line; a chat backend writes to its end of turn or ``max_new_tokens``
(:meth:`~textsql_clarify.generation.council.Council.write`, ``plain_stop``).

Every council vote breaks a tie conservatively (ABISS §5.2's rule, here: a tie rejects). A stage that does
not apply to the candidate's group gets the verdict ``"n/a"``.

Recipe options (``--option key=value``): ``per_anchor`` (candidates per anchor, default 1),
``subcategories`` (comma list to draw from, default all 13), ``styles``, ``difficulties`` (comma lists),
``schema_scope`` (``anchor``: the tables the anchor's SQL reads, default; ``all``: every table),
``sample_rows`` (rows per table shown, default 5, ABISS §4.1), ``max_new_tokens`` (per written text,
default 256).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from sqlglot import exp

from ..datasets.gold_masking import mask_values
from ..errors import SQLParseError, TextSQLClarifyError
from ..rewards.execution import is_empty_result, score_execution
from ..samples import Interpretation, Sample
from ..sql.sandbox import ExecutionResult, get_sandbox
from ..sql.schema import parse_sql
from ..taxonomy import SUBCATEGORIES
from . import prompts as P
from .base import Accepted, Anchor, GenContext, OptionSpec, Outcome, Rejected
from .council import Vote, tally

__all__ = ["AbissRecipe", "NLQObject", "STAGES", "parse_nlq", "extract_sql", "sql_difficulty", "RecipeOptionError"]

#: The recipe's stages in order: two generation steps, then ABISS §4.2's ten validators.
STAGES = ("nlq_generation", "sql_grounding", "duplicate_removal", "sql_executability", "category_conformance",
          "ground_truth_satisfaction", "evidence_necessity", "ambiguity_verification",
          "unsolvability_verification", "feedback_quality", "category_consistency", "style_conformance")
NA = "n/a"
#: requested difficulty level -> the Sample difficulty label used when no SQL exists (unanswerable).
_LEVEL_LABEL = {"simple": "easy", "moderate": "medium", "complex": "hard", "highly complex": "extra"}
_FIELD = re.compile(r"^\s*(question|evidence|hidden knowledge(?:\s*([12]))?)\s*:\s*(.*)$", re.I)


class RecipeOptionError(TextSQLClarifyError, ValueError):
    """A recipe option (``--option key=value``) that the ABISS recipe cannot use; names the option."""


@dataclass
class NLQObject:
    """One generated NLQ object (ABISS §4.1): the question, its evidence and hidden knowledge.

    Attributes:
        question: the natural-language question.
        evidence: external knowledge strings (may be empty).
        hidden: the hidden knowledge: one string (answerable: ``""``; unanswerable: the feedback) or, for an
            ambiguous question, two (one per reading).
        sqls: the gold SQL per reading (filled by grounding; empty for unanswerable).
    """

    question: str
    evidence: tuple[str, ...]
    hidden: tuple[str, ...]
    sqls: list[str] = field(default_factory=list)


def _none(text: str) -> bool:
    return text.strip().strip(".").lower() in ("", "none", "n/a", "no", "-")


def parse_nlq(text: str, group: str, subcategory: str) -> NLQObject | str:
    """Read the generator's NLQ object (the ``Question:`` / ``Evidence:`` / ``Hidden knowledge[ 1|2]:`` lines).

    Args:
        text: the model's output (the leading ``Question:`` may be missing: the prompt's cue ends with it).
        group: the subcategory's group (what fields are needed).
        subcategory: the requested subcategory (``answerable_with_evidence`` and ``conflicting_knowledge``
            need evidence; ``answerable_without_evidence`` drops any).
    Returns:
        The :class:`NLQObject`, or a string saying what is missing.
    """
    lines = text.strip().splitlines()
    if lines and not _FIELD.match(lines[0]):
        lines[0] = "Question: " + lines[0]
    got: dict[str, str] = {}
    for ln in lines:
        m = _FIELD.match(ln)
        if m:
            key = m.group(1).lower()
            key = "hk" + (m.group(2) or "") if key.startswith("hidden") else key
            got.setdefault(key, m.group(3).strip())
    q = got.get("question", "").strip()
    if not q or _none(q):
        return "no question"
    ev = () if _none(got.get("evidence", "")) else (got["evidence"],)
    if subcategory == "answerable_without_evidence":
        ev = ()
    elif subcategory in ("answerable_with_evidence", "conflicting_knowledge") and not ev:
        return f"no evidence (needed by {subcategory})"
    if group == "ambiguous":
        h1, h2 = got.get("hk1", ""), got.get("hk2", "")
        if _none(h1) or _none(h2):
            return "ambiguous question without two hidden-knowledge readings"
        if " ".join(h1.lower().split()) == " ".join(h2.lower().split()):
            return "the two hidden-knowledge readings are the same"
        return NLQObject(q, ev, (h1, h2))
    hk = got.get("hk", got.get("hk1", ""))
    if group == "unanswerable":
        if _none(hk):
            return "unanswerable question without feedback (hidden knowledge)"
        return NLQObject(q, ev, (hk,))
    return NLQObject(q, ev, ("",))


_FENCE = re.compile(r"```(?:sql|sqlite)?\s*(.*?)```", re.S | re.I)
_SQL_LINE = re.compile(r"(?:^|(?<=\s))SQL\s*:\s*", re.I | re.M)


def extract_sql(text: str) -> str:
    """The SQL of a model's answer: a fenced block, else what follows the last ``SQL:`` (at a line start or after a space), else the
    whole text; cut to its first statement (sqlglot) when it parses. ``""`` when the model wrote ``NONE``.
    (Text handling only; the SQL itself is read by sqlglot, never edited.)"""
    t = text.strip()
    m = _FENCE.search(t)
    if m:
        t = m.group(1).strip()
    else:
        starts = list(_SQL_LINE.finditer(t))
        if starts:
            t = t[starts[-1].end():].strip()
    if not t or t.strip().rstrip(";").upper() == "NONE":
        return ""
    import sqlglot

    try:
        trees = [x for x in sqlglot.parse(t, read="sqlite") if x is not None]
    except Exception:  # noqa: BLE001 - an unparseable answer stays as written; Stage 2 rejects it
        return t.rstrip(";").strip()
    if len(trees) > 1:
        return trees[0].sql(dialect="sqlite")
    return t.rstrip(";").strip()


def sql_difficulty(sql: str) -> str:
    """Spider-style difficulty label from the SQL's structure (ABISS §4.1: "updated to reflect the actual SQL
    complexity through automated keyword and pattern analysis"; our rule over the sqlglot AST).

    Points: one per join, aggregate, ``GROUP BY``, ``ORDER BY``, ``HAVING``, ``LIMIT``, ``WHERE`` predicate
    beyond the first; two per ``SELECT`` beyond the first (subqueries, set
    operands) and per set operation. 0-1 ``easy``, 2-3 ``medium``, 4-5 ``hard``, more
    ``extra``; ``unknown`` when the SQL does not parse.
    """
    try:
        tree = parse_sql(sql)
    except SQLParseError:
        return "unknown"
    pts = len(list(tree.find_all(exp.Join))) + len(list(tree.find_all(exp.AggFunc)))
    pts += sum(len(list(tree.find_all(k))) for k in (exp.Group, exp.Order, exp.Having, exp.Limit))
    for w in tree.find_all(exp.Where):
        pts += max(0, len(list(w.find_all(exp.And, exp.Or))))
    pts += 2 * (len(list(tree.find_all(exp.Select))) - 1 + len(list(tree.find_all(exp.Union, exp.Intersect,
                                                                                     exp.Except))))
    return "easy" if pts <= 1 else "medium" if pts <= 3 else "hard" if pts <= 5 else "extra"


def _opt_list(options: dict, key: str, allowed: Sequence[str]) -> list[str]:
    raw = options.get(key)
    if raw is None or not str(raw).strip():
        return list(allowed)
    vals = [v.strip() for v in str(raw).split(",") if v.strip()]
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        raise RecipeOptionError(f"abiss option {key}={raw!r}: unknown {bad}; valid: {', '.join(allowed)}")
    return vals


def _opt_int(options: dict, key: str, default: int, minimum: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        v = int(str(raw))
    except ValueError:
        raise RecipeOptionError(f"abiss option {key}={raw!r} must be an integer >= {minimum}") from None
    if v < minimum:
        raise RecipeOptionError(f"abiss option {key}={raw!r} must be an integer >= {minimum}")
    return v


@dataclass
class _Cand:
    """One candidate as it moves through the stages."""

    k: int
    sub: str
    group: str
    style: str
    level: str
    seed: int
    obj: NLQObject | None = None
    results: list[ExecutionResult] = field(default_factory=list)
    verdicts: dict[str, Any] = field(default_factory=dict)


class AbissRecipe:
    """ABISS §4 generation and validation as a recipe (module docstring).

    Attributes:
        name: ``"abiss"``.
        stages: :data:`STAGES`.
        needs_model: ``True``.
    """

    name = "abiss"
    stages = STAGES
    needs_model = True
    #: ``--option`` names this recipe reads (module doc).
    options = {
        "per_anchor": OptionSpec("int", "1", "candidates per anchor", minimum=1),
        "subcategories": OptionSpec("list", "all 13", "subcategories to draw from", choices=tuple(SUBCATEGORIES)),
        "styles": OptionSpec("list", "all", "question styles to draw from", choices=tuple(P.STYLES)),
        "difficulties": OptionSpec("list", "all", "difficulty levels to draw from", choices=tuple(P.DIFFICULTY_LEVELS)),
        "schema_scope": OptionSpec("choice", "anchor", "tables shown: the anchor's, or all", choices=("anchor", "all")),
        "sample_rows": OptionSpec("int", "5", "rows per table shown (ABISS §4.1)", minimum=0),
        "max_new_tokens": OptionSpec("int", "256", "most tokens per written text", minimum=16),
    }

    def __init__(self) -> None:
        # Stage 1 memory of the current unit (one anchor): normalised questions and masked golds accepted so far.
        self._questions: set[tuple[str, str]] = set()
        self._masked: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ context
    @staticmethod
    def _schema(anchor: Anchor, scope: str, n_rows: int, sandbox) -> str:
        """The ``CREATE`` statements of the tables shown (the anchor's, or all), each followed by ``n_rows``
        sample rows (ABISS §4.1 (2)), read through the read-only sandbox."""
        r = sandbox.execute("SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
                            "AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL ORDER BY name")
        stmts = [(n, s.strip().rstrip(";") + ";") for n, s in r.rows] if r.ok else []
        if scope == "anchor":
            try:
                used = {t.name.lower() for t in parse_sql(anchor.gold_sql).find_all(exp.Table)}
            except SQLParseError:
                used = set()
            stmts = [x for x in stmts if x[0].lower() in used] or stmts
        parts = []
        for n, create in stmts:
            parts.append(create)
            if n_rows:
                rows = sandbox.execute(exp.select("*").from_(exp.to_table(n, quoted=True)).limit(n_rows).sql("sqlite"))
                if rows.ok:
                    parts.append(f"-- sample rows of {n}:\n" + P.rows_text(rows.columns, rows.rows, limit=n_rows))
        return "\n".join(parts)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _equivalent(sandbox, pred_sql: str, gold_sql: str, gold: ExecutionResult) -> bool:
        """Relaxed EX (ABISS App. A, the reward module's scorer) of ``pred_sql`` against a gold."""
        if not pred_sql.strip():
            return False
        pred = sandbox.execute(pred_sql)
        if not pred.ok:
            return False
        relaxed, _ = score_execution(pred, gold, pred_sql, gold_sql, sandbox)
        return relaxed.status == "match"

    @staticmethod
    def _runnable(r: ExecutionResult) -> str | None:
        """Why a result fails Stage 2, or ``None``."""
        if not r.ok:
            return f"{r.error_kind}: {(r.error_message or '')[:120]}"
        if r.truncated:
            return "result truncated at the row cap"
        if is_empty_result(r):
            return "empty result"
        return None

    @staticmethod
    def _passed(vote: Vote) -> str:
        return "pass: " + vote.summary()

    # ------------------------------------------------------------------ run
    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """Every candidate grown from ``anchor`` (module docstring), each accepted or rejected.

        Args:
            anchor: the seed gold query.
            rng: the pipeline's seeded generator (draws subcategory, style, difficulty, seeds).
            ctx: needs ``ctx.council`` (a :class:`~textsql_clarify.generation.council.Council`).
        Returns:
            One :class:`Accepted` or :class:`Rejected` per candidate.
        Raises:
            RecipeOptionError: a bad option. ValueError: no council.
        """
        if ctx.council is None:
            raise ValueError("the abiss recipe needs a council of models (--model SPEC)")
        o = ctx.options or {}
        subs = _opt_list(o, "subcategories", list(SUBCATEGORIES))
        styles = _opt_list(o, "styles", list(P.STYLES))
        levels = _opt_list(o, "difficulties", list(P.DIFFICULTY_LEVELS))
        scope = _opt_list(o, "schema_scope", ["anchor", "all"]) if "schema_scope" in o else ["anchor"]
        if len(scope) != 1:
            raise RecipeOptionError("abiss option schema_scope takes one of anchor, all")
        per = _opt_int(o, "per_anchor", 1, 1)
        n_rows = _opt_int(o, "sample_rows", 5, 0)
        self._max_new = _opt_int(o, "max_new_tokens", 256, 16)
        self._questions, self._masked = set(), set()   # a unit depends on nothing that ran before it
        sandbox = get_sandbox(anchor.db_path, timeout_s=ctx.timeout_s)
        schema = self._schema(anchor, scope[0], n_rows, sandbox)
        out: list[Outcome] = []
        for k in range(per):
            sub = rng.choice(subs)
            c = _Cand(k, sub, SUBCATEGORIES[sub].group, rng.choice(styles), rng.choice(levels),
                      rng.randrange(2 ** 31))
            out.append(self._one(anchor, c, schema, sandbox, ctx.council))
        return out

    def _one(self, anchor: Anchor, c: _Cand, schema: str, sandbox, council) -> Outcome:
        checks = (self._nlq, self._ground, self._duplicate, self._executable, self._conform, self._satisfy,
                  self._evidence, self._ambiguity, self._unsolvable, self._feedback, self._consistency, self._style)
        for stage, check in zip(STAGES, checks):
            res = check(anchor, c, schema, sandbox, council)
            if isinstance(res, Rejected):
                return res
            c.verdicts[stage] = res
        return self._accept(anchor, c, council)

    # ------------------------------------------------------------------ generation
    def _nlq(self, anchor, c, schema, sandbox, council):
        msgs = P.nlq_messages(db_id=anchor.db_id, schema=schema, subcategory=c.sub, style=c.style,
                              difficulty=c.level, seed_question=anchor.question, seed_sql=anchor.gold_sql)
        text = council.write(msgs, max_new_tokens=self._max_new, seed=c.seed, plain_stop="\n\n")
        obj = parse_nlq(text, c.group, c.sub)
        if isinstance(obj, str):
            return Rejected("nlq_generation", f"{c.sub}: {obj}")
        c.obj = obj
        return "pass"

    def _ground(self, anchor, c, schema, sandbox, council):
        if c.group == "unanswerable":
            return NA
        obj = c.obj
        texts = council.write_all([P.sql_messages(schema=schema, question=obj.question, evidence=obj.evidence,
                                                  hidden_knowledge=h, reference_sql=anchor.gold_sql)
                                   for h in obj.hidden], max_new_tokens=self._max_new, seed=c.seed, plain_stop="\n")
        obj.sqls = [extract_sql(t) for t in texts]
        for i, s in enumerate(obj.sqls):
            if not s:
                return Rejected("sql_grounding", f"no SQL written for reading {i + 1}")
        if len(obj.sqls) == 2 and obj.sqls[0].strip() == obj.sqls[1].strip():
            return Rejected("sql_grounding", "both readings got the same SQL")
        return "pass"

    # ------------------------------------------------------------------ validators
    def _duplicate(self, anchor, c, schema, sandbox, council):
        q = " ".join(c.obj.question.lower().split())
        if (anchor.db_id, q) in self._questions:
            return Rejected("duplicate_removal", "the question was already generated from this anchor")
        for s in c.obj.sqls:
            if (anchor.db_id, mask_values(s)) in self._masked:
                return Rejected("duplicate_removal", "a gold SQL equals an earlier one once values are masked")
        return "pass"

    def _executable(self, anchor, c, schema, sandbox, council):
        if c.group == "unanswerable":
            return NA
        c.results = []
        for i, s in enumerate(c.obj.sqls):
            r = sandbox.execute(s)
            why = self._runnable(r)
            if why:
                return Rejected("sql_executability", f"reading {i + 1}: {why}")
            c.results.append(r)
        return "pass"

    def _conform(self, anchor, c, schema, sandbox, council):
        o = c.obj
        v = council.vote(P.conformance_messages(schema=schema, subcategory=c.sub, question=o.question,
                                                evidence=o.evidence, sqls=o.sqls, hidden=o.hidden),
                         ("yes", "no"), tie="no")
        if v.winner != "yes":
            return Rejected("category_conformance", f"not a clear {c.sub}: {v.summary()}")
        return self._passed(v)

    def _satisfy(self, anchor, c, schema, sandbox, council):
        if c.group == "unanswerable":
            return NA
        o = c.obj
        hidden = o.hidden if c.group == "ambiguous" else ("",) * len(o.sqls)
        msgs = [P.satisfaction_messages(schema=schema, question=o.question, evidence=o.evidence,
                                        hidden_knowledge=h, sql=s, result=P.rows_text(r.columns, r.rows))
                for h, s, r in zip(hidden, o.sqls, c.results)]
        votes = council.vote_all(msgs, ("yes", "no"), tie="no")
        for i, v in enumerate(votes):
            if v.winner != "yes":
                return Rejected("ground_truth_satisfaction", f"reading {i + 1} not answered by its SQL: {v.summary()}")
        return "; ".join(self._passed(v) for v in votes)

    def _evidence(self, anchor, c, schema, sandbox, council):
        if c.group != "answerable" or not c.obj.evidence:
            return NA
        o = c.obj
        written = council.write_each(P.sql_free_messages("sql_noevidence", schema=schema, question=o.question,
                                                         evidence=o.evidence),
                                     max_new_tokens=self._max_new, seed=c.seed, plain_stop="\n")
        votes = {m: ("not_needed" if self._equivalent(sandbox, extract_sql(t), o.sqls[0], c.results[0]) else "needed")
                 for m, t in written.items()}
        v = tally(votes, ("needed", "not_needed"), tie="not_needed")
        if v.winner != "needed":
            return Rejected("evidence_necessity", f"the gold is found without the evidence: {v.summary()}")
        return self._passed(v)

    def _ambiguity(self, anchor, c, schema, sandbox, council):
        if c.group != "ambiguous":
            return NA
        from ..datasets.validate import _same  # the load-time ``indistinguishable`` test, so both agree

        o = c.obj
        how = _same(c.results[1], o.sqls[1], c.results[0], o.sqls[0], sandbox)
        if how:
            return Rejected("ambiguity_verification", f"the two readings return the same result ({how})")
        written = council.write_each(P.sql_free_messages("sql_nohk", schema=schema, question=o.question,
                                                         evidence=o.evidence),
                                     max_new_tokens=self._max_new, seed=c.seed, plain_stop="\n")
        options = ("none", "reading 1", "reading 2")
        votes = {}
        for m, t in written.items():
            s = extract_sql(t)
            hit = next((f"reading {i + 1}" for i in range(2)
                        if self._equivalent(sandbox, s, o.sqls[i], c.results[i])), "none")
            votes[m] = hit
        v = tally(votes, options)
        if v.winner != "none":
            what = "no majority" if v.winner is None else f"{v.winner} is the dominant reading"
            return Rejected("ambiguity_verification", f"{what} without the hidden knowledge: {v.summary()}")
        return self._passed(v)

    def _unsolvable(self, anchor, c, schema, sandbox, council):
        if c.group != "unanswerable":
            return NA
        o = c.obj
        written = council.write_each(P.sql_free_messages("sql_attempt", schema=schema, question=o.question,
                                                         evidence=o.evidence),
                                     max_new_tokens=self._max_new, seed=c.seed, plain_stop="\n")
        tried = []
        for m, t in written.items():
            s = extract_sql(t)
            r = sandbox.execute(s) if s else None
            if r is None or self._runnable(r):
                tried.append(f"{m}: no runnable SQL")
                continue
            v = council.vote(P.satisfaction_messages(schema=schema, question=o.question, evidence=o.evidence,
                                                     hidden_knowledge="", sql=s, result=P.rows_text(r.columns, r.rows)),
                             ("yes", "no"), tie="no")
            if v.winner == "yes":
                return Rejected("unsolvability_verification", f"{m} answered it: {s[:160]} ({v.summary()})")
            tried.append(f"{m}: SQL judged wrong ({v.summary()})")
        return "pass: " + "; ".join(tried)

    def _feedback(self, anchor, c, schema, sandbox, council):
        if c.group != "unanswerable":
            return NA
        v = council.vote(P.feedback_messages(schema=schema, subcategory=c.sub, question=c.obj.question,
                                             feedback=c.obj.hidden[0]), ("yes", "no"), tie="no")
        if v.winner != "yes":
            return Rejected("feedback_quality", f"feedback not accurate, specific and actionable: {v.summary()}")
        return self._passed(v)

    def _consistency(self, anchor, c, schema, sandbox, council):
        if c.group == "answerable":
            return NA
        o = c.obj
        rivals = [s for s, d in SUBCATEGORIES.items() if d.group == c.group and s != c.sub]
        msgs, mine = [], []
        for i, r in enumerate(rivals):
            a, b = (c.sub, r) if i % 2 == 0 else (r, c.sub)
            mine.append("A" if i % 2 == 0 else "B")
            msgs.append(P.category_pair_messages(question=o.question, evidence=o.evidence, hidden=o.hidden, a=a, b=b))
        votes = council.vote_all(msgs, ("A", "B"))
        for r, letter, v in zip(rivals, mine, votes):
            if v.winner != letter:
                return Rejected("category_consistency", f"{c.sub} does not beat {r} by a strict majority: {v.summary()}")
        return f"pass: beats {len(rivals)} rivals"

    def _style(self, anchor, c, schema, sandbox, council):
        v = council.vote(P.style_messages(question=c.obj.question), tuple(P.STYLES))
        if v.winner != c.style:
            return Rejected("style_conformance", f"asked for {c.style}: {v.summary()}")
        return self._passed(v)

    # ------------------------------------------------------------------ output
    def _accept(self, anchor: Anchor, c: _Cand, council) -> Accepted:
        o = c.obj
        common = dict(id=f"abiss-{anchor.id}-{c.k}", db_id=anchor.db_id, db_path=anchor.db_path, question=o.question,
                      group=c.group, subcategory=c.sub, evidence=tuple(o.evidence), style=c.style,
                      provenance={"style": c.style, "subcategory": c.sub, "difficulty_requested": c.level,
                                  "generator": council.names[council.generator]})
        if c.group == "unanswerable":
            s = Sample(**common, gold_sql=None, hidden_knowledge=o.hidden[0], difficulty=_LEVEL_LABEL[c.level])
        elif c.group == "ambiguous":
            s = Sample(**common, gold_sql=o.sqls[0], hidden_knowledge=o.hidden[0], difficulty=sql_difficulty(o.sqls[0]),
                       interpretations=(Interpretation(o.sqls[1], o.hidden[1], "reading 2"),))
        else:
            s = Sample(**common, gold_sql=o.sqls[0], hidden_knowledge="", difficulty=sql_difficulty(o.sqls[0]))
        self._questions.add((anchor.db_id, " ".join(o.question.lower().split())))
        self._masked.update((anchor.db_id, mask_values(q)) for q in o.sqls)
        return Accepted(s, dict(c.verdicts))
