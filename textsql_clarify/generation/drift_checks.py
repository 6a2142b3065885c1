"""The sequential checks of a drift candidate (TIDE App. B, Table 7), as reusable functions.

A drift candidate is a pair (anchor gold SQL, post-drift gold SQL) with an assigned subtype and a
drift utterance. Its checks run in the order of :data:`STAGES`; the first that fails rejects it:

=============== =============================================================== ===================
stage           pass condition                                                  TIDE Table 7 signal
=============== =============================================================== ===================
parses          the post-drift SQL parses and yields a commitment set           sql_parse
executes        it executes in the read-only sandbox, untruncated               sql_execute
non_empty       it returns rows that are not all NULL                           empty_result
distinct_result its result differs from the anchor's (the env's strict EX,      identical_result
                as :mod:`textsql_clarify.datasets.drift_check` compares)
pre_gold_fails  the anchor's gold, answered after the drift, scores ``ex`` 0     (ours)
                and ``ex_strict`` 0 under the env's own post-drift scorer
                (:func:`pre_gold_problem`: relaxed EX, then the rule that an
                answer carrying what the drift retracted is not the answer)
non_monotone    S_pre is not a subset of S_post (TIDE §2.2,                     no_change; monotonic
                :func:`~textsql_clarify.rewards.commitments.is_drift`)
subtype_scope   TIDE Algorithm 1 gives the assigned subtype                     subtype_mismatch
                (:func:`~textsql_clarify.rewards.commitments.drift_subtype`, with the sandbox's
                schema, as the load-time check does)
utterance       the utterance carries no SQL (:func:`utterance_problem`)        (ours)
=============== =============================================================== ===================

Table 7's step 1 (the generator's JSON fields) belongs to a model recipe; step 8 (projection
fine subtype) has no counterpart here, our projection edits carry no finer label. The model-free
recipe (:mod:`textsql_clarify.generation.drift`) and the LLM cross-validation of TIDE drift candidates
(:mod:`textsql_clarify.generation.tide`) both run :func:`check_drift_candidate`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from ..errors import SQLParseError
from ..rewards.commitments import commitment_set, drift_subtype, is_drift
from ..rewards.execution import is_empty_result, score_execution
from ..sql.sandbox import ExecutionResult, SQLiteSandbox

__all__ = [
    "STAGES", "CheckResult", "parse_problem", "execution_problem", "empty_problem", "distinct_problem",
    "pre_gold_problem", "monotone_problem", "scope_problem", "utterance_problem", "check_drift_candidate",
]

#: the checks, in the order they run (TIDE Table 7 steps 2-7, then ours)
STAGES: tuple[str, ...] = ("parses", "executes", "non_empty", "distinct_result", "pre_gold_fails",
                           "non_monotone", "subtype_scope", "utterance")


def parse_problem(sql: str, schema) -> tuple[str | None, frozenset]:
    """Stage ``parses``: the query parses and yields a commitment set (TIDE Table 7 step 2).

    Args:
        sql: the post-drift gold SQL.
        schema: ``{table: {column: type}}`` (the sandbox's), for column resolution.
    Returns:
        ``(None, commitments)`` on success, ``(reason, frozenset())`` on failure.
    """
    try:
        return None, commitment_set(sql, schema)
    except SQLParseError as e:
        return f"does not parse: {e.reason}", frozenset()


def execution_problem(result: ExecutionResult) -> str | None:
    """Stage ``executes``: the statement ran to completion, untruncated (TIDE Table 7 step 3).

    Returns:
        ``None`` when fine, else the reason (error kind and message, or the truncation).
    """
    if not result.ok:
        return f"fails to execute ({result.error_kind}): {result.error_message}"
    if result.truncated:
        return f"result truncated at {result.row_count} rows"
    return None


def empty_problem(result: ExecutionResult) -> str | None:
    """Stage ``non_empty``: a successful result with at least one row that is not all NULL (TIDE Table 7
    step 4; :func:`~textsql_clarify.rewards.execution.is_empty_result`).

    Raises:
        ValueError: ``result`` is a failed result.
    """
    if not result.rows or is_empty_result(result):
        return "returns no rows (or only NULLs)"
    return None


def distinct_problem(post: ExecutionResult, pre: ExecutionResult, post_sql: str, pre_sql: str,
                     sandbox: SQLiteSandbox | None) -> str | None:
    """Stage ``distinct_result``: the post-drift result differs from the anchor's (TIDE Table 7 step 5).

    Compared with the env's strict EX (:func:`~textsql_clarify.rewards.execution.score_execution`),
    exactly as the load-time check :func:`~textsql_clarify.datasets.drift_check.drift_problems` does, so
    an accepted candidate is never flagged when the file is loaded.

    Args:
        post, pre: the two results (both successful).
        post_sql, pre_sql: their SQL.
        sandbox: the database (``*`` expansion, ties).
    """
    verdict = score_execution(post, pre, post_sql, pre_sql, sandbox)[1]
    if verdict.status == "match":
        return "returns the same result as the anchor's gold SQL"
    return None


def pre_gold_problem(pre_sql: str, post_sql: str, sandbox: SQLiteSandbox) -> str | None:
    """Stage ``pre_gold_fails``: the anchor's gold SQL, submitted as the answer after the drift, is not the
    post-drift answer under the env's own scorer, and no answer that follows the drift can return its result.

    Two failures, both with the env's default EX options:

    * the pre-drift gold scores ``ex`` 1 or ``ex_strict`` 1 against the post-drift gold under the env's post-drift
      scorer (:func:`~textsql_clarify.envs.scoring.score_sql_turn` with ``retracted_gold``: relaxed EX, then the
      rule of :mod:`textsql_clarify.rewards.drift_ex`), so some preset pays an agent that ignores the drift;
    * its result is a post-drift answer within EX's own tolerances, without any extra column (``ex_strict`` 1 under
      EX alone: e.g. one of the rows tied under the post-drift gold's ``ORDER BY ... LIMIT``). An answer that
      follows the drift may then return exactly the pre-drift result, and the post-drift rule, which refuses the
      pre-drift answer, would refuse that correct answer too.

    On the current scorer the first is implied by ``distinct_result`` together with the post-drift rule (a
    pre-drift gold is refused as the pre-drift answer wherever the post-drift gold does not match it); it keeps the
    guarantee checked whichever of the two changes. Where the pre-drift gold passes relaxed EX only through extra
    columns (a drift that removes an output column), the pair is kept: the post-drift rule tells the answers apart.
    The load-time check (:func:`~textsql_clarify.datasets.drift_check.drift_problems`) calls this same function.

    Args:
        pre_sql: the anchor's (pre-drift) gold SQL (cached in the sandbox under ``drift-pre:<sql>``, as
            :func:`check_drift_candidate` reads it).
        post_sql: the post-drift gold SQL (cached under ``drift-post:<sql>``).
        sandbox: the database.
    Returns:
        ``None`` when the pair passes (or the post-drift gold cannot be scored: an earlier stage says why), else
        the reason.
    """
    # imported on use: the env's package imports the datasets layer, whose load-time check calls this function
    from ..envs.scoring import score_sql_turn

    post_key, pre_key = f"drift-post:{post_sql}", f"drift-pre:{pre_sql}"
    res = score_sql_turn(pre_sql, post_sql, sandbox, gold_key=post_key, detailed=False,
                         retracted_gold=(pre_key, pre_sql))
    paid = [k for k in ("ex", "ex_strict") if res.components.get(k) == 1.0]
    if paid:
        return (f"the anchor's gold SQL, answered after the drift, scores {' and '.join(paid)} 1 against the "
                f"post-drift gold ({res.ex_status}): the env cannot tell the drift was ignored")
    plain = score_sql_turn(pre_sql, post_sql, sandbox, gold_key=post_key, detailed=False)
    if plain.components.get("ex_strict") == 1.0:
        return (f"the anchor's gold SQL returns a post-drift answer without any extra column (ex_strict 1 under EX "
                f"alone: {plain.ex_status}): an answer that follows the drift may return the pre-drift result")
    return None


def monotone_problem(s_pre: frozenset, s_post: frozenset) -> str | None:
    """Stage ``non_monotone``: S_pre is not a subset of S_post (TIDE §2.2; Table 7 step 6).

    Args:
        s_pre, s_post: the commitment sets (:func:`~textsql_clarify.rewards.commitments.commitment_set`).
    """
    if is_drift(s_pre, s_post):
        return None
    return "no change in the commitments" if s_pre == s_post else "monotone: it only adds commitments"


def scope_problem(s_pre: frozenset, s_post: frozenset, subtype: str) -> str | None:
    """Stage ``subtype_scope``: TIDE Algorithm 1 assigns the intended subtype (Table 7 step 7).

    Args:
        s_pre, s_post: the commitment sets.
        subtype: the assigned subtype (``value``, ``constraint`` or ``projection``).
    """
    found = drift_subtype(s_pre, s_post)
    if found != subtype:
        return f"assigned {subtype!r} but Algorithm 1 gives {found!r}"
    return None


#: SQL written as code: clause keywords in capitals, an aggregate call, a comparison operator, a star
_SQL_CODE = re.compile(
    r"\b(SELECT|FROM|WHERE|JOIN|GROUP BY|ORDER BY|HAVING|LIMIT|OFFSET|UNION|INTERSECT|EXCEPT|DISTINCT|"
    r"BETWEEN|LIKE|IS NULL|NOT NULL|AND|OR|NOT IN|IN)\b"
    r"|\b(?i:count|sum|avg|min|max|round|cast|substr|length)\s*\("
    r"|<=|>=|<>|!=|==|(?<![\w\s])\s*=|=(?!\w)|\(\s*\*\s*\)|\*")
_UNDERSCORE = re.compile(r"\b\w*[A-Za-z0-9]_[A-Za-z0-9]\w*\b")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*\.[A-Za-z_]\w*\b")
_QUOTED = re.compile(r"(?:(?<=^)|(?<=[\s(\[,:;]))(['\"`])[^'\"`]*\1(?=$|[\s)\].,;:?!])")


def utterance_problem(text: str, identifiers: Iterable[str] = ()) -> str | None:
    """Stage ``utterance``: the drift utterance is in the user's words, not SQL.

    Rejected: SQL as code (a clause keyword in capitals, an aggregate call ``count(``, a comparison
    operator, ``*``); an identifier with an underscore (``first_name``); a ``table.column`` reference;
    SQL literal quoting (``'France'``, ``"France"``); any of ``identifiers`` (e.g. the schema's names
    that are not plain words, such as ``StuID``) written verbatim.

    Args:
        text: the utterance.
        identifiers: names that must not appear verbatim (compared case-sensitively, as whole words).
    Returns:
        ``None`` when fine, else the reason (quoting the offending part).
    """
    if not text or not text.strip():
        return "empty utterance"
    for pattern, what in ((_SQL_CODE, "SQL as code"), (_UNDERSCORE, "an identifier with an underscore"),
                          (_DOTTED, "a table.column reference"), (_QUOTED, "SQL literal quoting")):
        m = pattern.search(text)
        if m:
            return f"{what}: {m.group(0).strip()!r}"
    for ident in identifiers:
        if ident and re.search(r"(?<!\w)" + re.escape(ident) + r"(?!\w)", text):
            return f"a schema identifier written verbatim: {ident!r}"
    return None


@dataclass
class CheckResult:
    """The verdicts of :func:`check_drift_candidate`.

    Attributes:
        stage: the first stage that failed, or ``None`` when every stage passed.
        reason: why it failed (``""`` when it passed).
        verdicts: stage -> ``"pass"`` for each stage passed, in order (the failed one is not included).
        post_result: the post-drift result, when it was executed.
    """

    stage: str | None
    reason: str = ""
    verdicts: dict[str, str] = field(default_factory=dict)
    post_result: ExecutionResult | None = None

    @property
    def passed(self) -> bool:
        """``True`` when every stage passed."""
        return self.stage is None


def check_drift_candidate(pre_sql: str, post_sql: str, subtype: str, utterance: str, sandbox: SQLiteSandbox, *,
                          pre_result: ExecutionResult | None = None, pre_set: frozenset | None = None,
                          identifiers: Iterable[str] = (), stages: Iterable[str] = STAGES) -> CheckResult:
    """Run the drift checks of :data:`STAGES` on one candidate, in order, stopping at the first failure.

    Args:
        pre_sql: the anchor's gold SQL (pre-drift).
        post_sql: the candidate post-drift gold SQL.
        subtype: the assigned subtype.
        utterance: the drift utterance.
        sandbox: the anchor's database (read-only sandbox); its schema resolves columns.
        pre_result: the anchor gold's result, if already executed (else executed here, cached by SQL).
        pre_set: the anchor gold's commitment set, if already computed.
        identifiers: names the utterance must not contain verbatim (:func:`utterance_problem`).
        stages: the stages to run (default all); a stage left out counts as passed without a verdict.
    Returns:
        :class:`CheckResult`.
    Raises:
        SQLParseError: the anchor's own gold SQL cannot be analysed.
        ValueError: an unknown stage name.
    Source: TIDE App. B, Table 7.
    """
    run = tuple(stages)
    unknown = set(run) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown drift check stage(s) {sorted(unknown)}; known: {STAGES}")
    schema = sandbox.schema
    out = CheckResult(stage=None)

    def fail(stage: str, reason: str) -> CheckResult:
        out.stage, out.reason = stage, reason
        return out

    s_post: frozenset = frozenset()
    if "parses" in run:
        problem, s_post = parse_problem(post_sql, schema)
        if problem:
            return fail("parses", problem)
        out.verdicts["parses"] = "pass"
    needs_rows = {"executes", "non_empty", "distinct_result", "pre_gold_fails"} & set(run)
    if needs_rows:
        post = sandbox.execute(post_sql)
        out.post_result = post
        if "executes" in run:
            problem = execution_problem(post)
            if problem:
                return fail("executes", problem)
            out.verdicts["executes"] = "pass"
        if not post.ok:
            return fail("executes", execution_problem(post) or "fails to execute")
        if "non_empty" in run:
            problem = empty_problem(post)
            if problem:
                return fail("non_empty", problem)
            out.verdicts["non_empty"] = "pass"
        if "distinct_result" in run:
            pre = pre_result if pre_result is not None else sandbox.execute_gold(f"drift-pre:{pre_sql}", pre_sql)
            if pre.ok and not pre.truncated and pre.rows and not is_empty_result(pre):
                problem = distinct_problem(post, pre, post_sql, pre_sql, sandbox)
                if problem:
                    return fail("distinct_result", problem)
            out.verdicts["distinct_result"] = "pass"
        if "pre_gold_fails" in run:
            problem = pre_gold_problem(pre_sql, post_sql, sandbox)
            if problem:
                return fail("pre_gold_fails", problem)
            out.verdicts["pre_gold_fails"] = "pass"
    if {"non_monotone", "subtype_scope"} & set(run):
        s_pre = pre_set if pre_set is not None else commitment_set(pre_sql, schema)
        if not s_post:
            problem, s_post = parse_problem(post_sql, schema)
            if problem:
                return fail("parses", problem)
        if "non_monotone" in run:
            problem = monotone_problem(s_pre, s_post)
            if problem:
                return fail("non_monotone", problem)
            out.verdicts["non_monotone"] = "pass"
        if "subtype_scope" in run:
            problem = scope_problem(s_pre, s_post, subtype)
            if problem:
                return fail("subtype_scope", problem)
            out.verdicts["subtype_scope"] = "pass"
    if "utterance" in run:
        problem = utterance_problem(utterance, identifiers)
        if problem:
            return fail("utterance", problem)
        out.verdicts["utterance"] = "pass"
    return out
