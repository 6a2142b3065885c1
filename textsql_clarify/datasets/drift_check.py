"""Load-time checks of drift records against their database (TIDE App. B, Table 7; Algorithm 1).

A drift sample's ``drift.post_gold_sql`` must execute, return rows, and return a different result
from ``gold_sql``; and ``drift.subtype`` must be what TIDE Algorithm 1 assigns to the pair. A record
that breaks one of these would make the drift ceiling wrong without any error (an oracle that answers
the post-drift gold would score DRR 0), so :func:`drift_problems` reports it, with file, line and
field, before any episode runs. The queries run in the read-only sandbox; nothing is written.
"""
from __future__ import annotations

import os
from typing import Sequence

from ..sql.sandbox import get_sandbox
from ..errors import RecordProblem, SQLParseError
from ..rewards.commitments import drift_subtype
from ..rewards.execution import is_empty_result, score_execution
from ..samples import Sample
from ..text import loads_valid_unicode


def _pre_gold_problem(pre_sql: str, post_sql: str, sandbox) -> str | None:
    """:func:`textsql_clarify.generation.drift_checks.pre_gold_problem` (imported on use: the generation package
    imports the datasets layer)."""
    from ..generation.drift_checks import pre_gold_problem as check

    return check(pre_sql, post_sql, sandbox)

__all__ = ["drift_problems"]


def _lines_by_id(file: str | os.PathLike) -> dict[str, int]:
    """1-based line number of each record id in a JSONL file (lines that do not parse are skipped)."""
    out: dict[str, int] = {}
    with open(file, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            try:
                rec = loads_valid_unicode(line)  # the ids as the loader read them
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("id"), str):
                out.setdefault(rec["id"], n)
    return out


def drift_problems(samples: Sequence[Sample], file: str | os.PathLike) -> list[RecordProblem]:
    """Every drift record of ``samples`` (loaded from ``file``) whose post-drift gold is unusable.

    Checks per sample with a drift event and a gold SQL, in order (the first failure is reported):

    * ``drift.post_gold_sql`` executes and is not truncated;
    * it returns rows that are not all NULL;
    * its result differs from ``gold_sql``'s (relaxed EX, ABISS App. A: a post-drift gold that matches
      the pre-drift one is no drift); skipped when ``gold_sql`` itself fails or returns nothing, which
      the metrics already count as a ceiling;
    * ``gold_sql``, submitted as the answer after the drift, scores ``ex`` 0 and ``ex_strict`` 0 under the
      env's own post-drift scorer (the recipe's ``pre_gold_fails`` stage,
      :func:`~textsql_clarify.generation.drift_checks.pre_gold_problem`): otherwise an agent that ignores the
      drift is paid as if it had followed it; skipped where ``gold_sql`` fails or returns nothing;
    * ``drift.subtype`` equals TIDE Algorithm 1's subtype of (``gold_sql``, ``post_gold_sql``).

    Args:
        samples: the loaded samples.
        file: the JSONL file they came from (for line numbers in the problems).
    Returns:
        One :class:`~textsql_clarify.errors.RecordProblem` per bad record; empty when all are fine.
    """
    drifting = [s for s in samples if s.drift is not None and s.gold_sql]
    if not drifting:
        return []
    lines = _lines_by_id(file)
    problems: list[RecordProblem] = []
    for s in drifting:
        line = lines.get(s.id, 0)

        def bad(field: str, message: str) -> None:
            problems.append(RecordProblem(str(file), line, field, message))

        sandbox = get_sandbox(s.db_path)
        post = sandbox.execute(s.drift.post_gold_sql)
        if not post.ok:
            bad("drift.post_gold_sql", f"fails to execute ({post.error_kind}): {post.error_message}")
            continue
        if post.truncated:
            bad("drift.post_gold_sql", f"result truncated at {post.row_count} rows")
            continue
        if not post.rows or is_empty_result(post):
            bad("drift.post_gold_sql", "returns no rows (or only NULLs): the post-drift request has no answer")
            continue
        gold = sandbox.execute(s.gold_sql)
        if gold.ok and not gold.truncated and gold.rows and not is_empty_result(gold):
            # the env's own scorer, strict: a post-drift gold that adds a column is a change (projection drift)
            verdict = score_execution(post, gold, s.drift.post_gold_sql, s.gold_sql, sandbox)[1]
            if verdict.status == "match":
                bad("drift.post_gold_sql", "returns the same result as gold_sql: the drift changes nothing")
                continue
            problem = _pre_gold_problem(s.gold_sql, s.drift.post_gold_sql, sandbox)
            if problem:
                bad("drift.post_gold_sql", problem.replace("the anchor's gold SQL", "gold_sql"))
                continue
        try:
            found = drift_subtype(s.gold_sql, s.drift.post_gold_sql, sandbox.schema)
        except SQLParseError as e:
            bad("drift.post_gold_sql", f"cannot be analysed: {e}")
            continue
        if found != s.drift.subtype:
            bad("drift.subtype", f"is {s.drift.subtype!r} but TIDE Algorithm 1 gives {found!r} for "
                                 f"(gold_sql, post_gold_sql)")
    return problems
