"""Score one SQL turn: execute it in the sandbox and compute its reward components.

This is the env's glue over the pure metric modules in :mod:`textsql_clarify.rewards`:
relaxed EX (ABISS App. A), cells and columns (article), components (article), table retrieval
(article). Gold-side work (gold execution, ORDER BY detection, gold column origins, gold tables) is
done once per gold SQL and cached.
"""
from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ..sql.sandbox import ExecutionResult, SQLiteSandbox
from ..errors import SQLParseError
from ..rewards.cells import ResultTable, column_origins, score_cells
from ..rewards.components import score_components
from ..rewards.dense import score_partial
from ..rewards.drift_ex import carried_columns, kept_filters, query_commitments, retracted_columns, retracted_filters
from ..rewards.execution import EXOptions, gold_is_ordered, score_execution
from ..rewards.retrieval import score_retrieval, tables_read
from ..sql.schema import shared_analysis


def _ordered(gold_sql: str) -> bool:
    """``gold_is_ordered`` (cached there); an unparsable gold compares unordered (its execution decides)."""
    try:
        return gold_is_ordered(gold_sql)
    except SQLParseError:
        return False


@functools.lru_cache(maxsize=4096)
def _gold_tables(gold_sql: str) -> frozenset[str] | None:
    try:
        return tables_read(gold_sql)
    except SQLParseError:
        return None


def _origins(sql: str, schema: dict) -> tuple | None:
    try:
        return column_origins(sql, schema)
    except (SQLParseError, Exception):  # noqa: BLE001 - origins are optional; pairing falls back to values
        return None


@dataclass
class SQLTurnScore:
    """What scoring one SQL turn produced.

    Attributes:
        components: reward components (``ex``, ``ex_strict``, and with detail on, ``cell_*``, ``sql_partial``,
            ``column_*``, ``table_*``, ``components``); ``None`` where undefined.
        execution: ``{"error_kind", "error_message", "n_rows", "truncated", "elapsed_s"}`` of the agent's SQL.
        gold_status: ``ok`` | ``empty`` | ``error`` | ``nondeterministic`` (gold reads the clock or randomness)
            | ``none`` (no gold SQL: unanswerable) | ``withheld`` (the source withholds the gold,
            :attr:`~textsql_clarify.samples.Sample.gold_withheld`).
        flags: ceiling flags: ``gold_truncated``, ``pred_truncated``, ``keyless``, ``scorer_inconsistent``; and
            ``hedged`` (two readings answered at once), ``retraction_kept`` (a post-drift answer that still carries
            what the drift retracted; only with ``retracted_gold``).
        ex_status: the EX verdict's status string.
    """

    components: dict[str, Any]
    execution: dict[str, Any]
    gold_status: str
    flags: dict[str, bool] = field(default_factory=dict)
    ex_status: str = ""


def _exec_info(r: ExecutionResult) -> dict[str, Any]:
    return {"error_kind": r.error_kind, "error_message": r.error_message, "n_rows": len(r.rows),
            "truncated": r.truncated, "elapsed_s": round(r.elapsed_s, 6)}


#: the test-suite EX components of a SQL turn under ``ex_mode="suite"`` (:func:`suite_components`).
SUITE_KEYS = ("ex_suite", "ex_strict_suite")


def suite_components(pred_sql: str, gold_sql: str | None, res: SQLTurnScore, suite: Any, *, gold_key: str,
                     ex_options: EXOptions | None, timeout_s: float) -> tuple[dict[str, float | None], dict | None]:
    """Test-suite EX of a scored SQL turn: ``ex_suite`` / ``ex_strict_suite`` from its single-instance ``ex`` /
    ``ex_strict`` (``res``, :func:`score_sql_turn`) and, where one of them is 1, the variants
    (:meth:`~textsql_clarify.rewards.ex_suite.VariantSuite.check`, both verdicts in one pass).

    Rules: ``None`` where the single-instance score is ``None`` (no gold to compare, a gold withheld, empty or
    failing on the original); 0 where it is 0 (a mismatch on the original, a hedge, a retraction kept, SQL on an
    unanswerable sample); where it is 1, 1 only when the prediction also agrees on every variant where the gold
    runs. Time: the variants share what the prediction left of its limit on the original,
    ``timeout_s - res.execution["elapsed_s"]``; a check that runs out of it scores 0.

    Args:
        pred_sql: the agent's SQL. gold_sql: the gold in force (``None``: no gold). res: the turn's single-instance
            score. suite: the database's :class:`~textsql_clarify.rewards.ex_suite.VariantSuite`.
        gold_key: the gold's cache key. ex_options: the EX options. timeout_s: the prediction's time limit, s.
    Returns:
        ``({"ex_suite": v, "ex_strict_suite": v}, detail)`` where ``detail`` is the check's
        :meth:`~textsql_clarify.rewards.ex_suite.VariantCheck.to_dict` plus ``budget_s``, or ``None`` when no
        variant was run.
    Source: Zhong, Yu and Klein 2020 §2 (right on every database of the suite); ``docs/metrics.md``, "Test-suite EX".
    """
    ex, strict = res.components.get("ex"), res.components.get("ex_strict")
    out = {"ex_suite": ex, "ex_strict_suite": strict}
    if gold_sql is None or (ex != 1 and strict != 1):
        return out, None
    budget = max(0.0, float(timeout_s) - float(res.execution.get("elapsed_s") or 0.0))
    check = suite.check(pred_sql, gold_sql, gold_key=gold_key, relaxed=ex == 1, strict=strict == 1,
                        options=ex_options, budget_s=budget)
    if ex == 1:
        out["ex_suite"] = check.relaxed
    if strict == 1:
        out["ex_strict_suite"] = check.strict
    return out, {**check.to_dict(), "budget_s": round(budget, 6)}


DETAIL_KEYS = ("cell_precision", "cell_recall", "cell_f1", "cell_f1_covered", "sql_partial", "column_precision",
               "column_recall", "table_recall", "table_precision", "spurious_tables", "components")


def score_sql_turn(pred_sql: str, gold_sql: str | None, sandbox: SQLiteSandbox, *, gold_key: str,
                   detailed: bool = True, offered_tables: Iterable[str] | None = None,
                   ex_options: EXOptions | None = None, gold_withheld: bool = False,
                   other_readings: Sequence[tuple[str, str]] = (),
                   retracted_gold: tuple[str, str] | None = None) -> SQLTurnScore:
    """Execute ``pred_sql`` and score it against ``gold_sql``.

    Args:
        pred_sql: the agent's SQL.
        gold_sql: the gold SQL in force, or ``None`` for an unanswerable sample (EX is then 0: SQL on an
            unanswerable question counts as a failed execution, ABISS §5.3).
        sandbox: the database sandbox (read-only, time-limited).
        gold_key: cache key for the gold result (sample id, plus ``#post`` after a drift).
        detailed: also compute the article's families (cells, columns, components, retrieval).
        offered_tables: tables whose schema the agent was shown (retrieval precision); ``None`` = all.
        ex_options: the EX policy options (:class:`~textsql_clarify.rewards.execution.EXOptions`); ``None``:
            the defaults.
        gold_withheld: the sample is ambiguous and its gold is withheld by the source (``gold_sql`` is
            ``None``): EX, ``ex_strict`` and every detailed component are ``None`` (undefined, not 0: there is
            nothing to compare with), gold status ``withheld``; the SQL still runs (its execution is recorded).
        other_readings: ``(gold_key, gold_sql)`` of the sample's other interpretations (ambiguous samples,
            before any drift). A prediction that relaxed EX matches with the gold *and* with another reading
            whose own result the gold does not match is a hedge (it answers both readings at once, e.g. the
            two golds side by side in one cross join, which the column-superset bound can let through): its
            ``ex`` and ``sql_partial`` are 0 and ``flags["hedged"]`` is set. A strict match of the gold is
            never a hedge (it is the gold's result, column for column: the other reading's ``ORDER BY``
            rows against an unordered gold), so ``ex_strict`` 1 implies ``ex`` 1. ABISS Def. 2: an ambiguous question
            is answered by choosing a reading; an answer that satisfies two different readings chose none.
        retracted_gold: on a post-drift turn, ``(gold_key, gold_sql)`` of the pre-drift gold (``gold_sql`` is then
            the post-drift gold). A prediction that relaxed EX matches but that still carries what the drift
            retracted scores ``ex`` 0 and ``ex_strict`` 0 (status ``retraction_kept``, ``flags["retraction_kept"]``,
            ``sql_partial`` 0): an extra column whose values are those of a pre-drift gold column that no post-drift
            gold column has (the age beside the song name; ``min`` beside ``max``), a retracted WHERE unit of the
            commitment sets held at its scope, or a result that relaxed EX also matches with the pre-drift gold
            where the post-drift gold does not match it (:mod:`textsql_clarify.rewards.drift_ex`; TIDE §2.2: the
            post-drift answer follows the user's revised request). The post-drift gold never triggers it.

    Returns:
        A :class:`SQLTurnScore`. Never raises for bad SQL.

    Cost: the scorers share one parse and one qualify of ``pred_sql`` (and one preparation for the component
    sets) through :func:`~textsql_clarify.sql.schema.shared_analysis`, opened here (detailed steps) unless the
    caller opened one (the env does, so that drift commitments share it too), and keyed by ``pred_sql`` and the
    sandbox's database and schema, so that a prediction seen again reuses its analysis (docs/platform.md).
    """
    if not detailed:  # the EX-only path reads the prediction's SQL once (its projection): nothing to share
        return _score_sql_turn(pred_sql, gold_sql, sandbox, gold_key=gold_key, detailed=detailed,
                               offered_tables=offered_tables, ex_options=ex_options, gold_withheld=gold_withheld,
                               other_readings=other_readings, retracted_gold=retracted_gold)
    try:
        key = (pred_sql, sandbox.db_path, sandbox.schema)
    except Exception:  # noqa: BLE001 - no key, no cross-step cache; the scorers meet (and report) it as before
        key = (None, None, None)
    with shared_analysis(*key):
        return _score_sql_turn(pred_sql, gold_sql, sandbox, gold_key=gold_key, detailed=detailed,
                               offered_tables=offered_tables, ex_options=ex_options, gold_withheld=gold_withheld,
                               other_readings=other_readings, retracted_gold=retracted_gold)


def _score_sql_turn(pred_sql: str, gold_sql: str | None, sandbox: SQLiteSandbox, *, gold_key: str, detailed: bool,
                    offered_tables: Iterable[str] | None, ex_options: EXOptions | None, gold_withheld: bool,
                    other_readings: Sequence[tuple[str, str]],
                    retracted_gold: tuple[str, str] | None = None) -> SQLTurnScore:
    """:func:`score_sql_turn` inside its analysis scope."""
    pred = sandbox.execute(pred_sql)
    comps: dict[str, Any] = {"ex": None, "ex_strict": None}
    flags = {"pred_truncated": pred.truncated, "gold_truncated": False, "keyless": False,
             "scorer_inconsistent": False}
    if detailed:
        comps.update({k: None for k in DETAIL_KEYS})
    if gold_sql is None and gold_withheld:
        return SQLTurnScore(comps, _exec_info(pred), "withheld", flags, "gold_withheld")
    if gold_sql is None:
        comps["ex"] = comps["ex_strict"] = 0.0
        return SQLTurnScore(comps, _exec_info(pred), "none", flags, "no_gold")
    gold = sandbox.execute_gold(gold_key, gold_sql)
    flags["gold_truncated"] = gold.truncated
    # relaxed EX and ex_strict (rewards/execution.py: width bound, constant columns, ties, rounding)
    verdict, strict_verdict = score_execution(pred, gold, pred_sql, gold_sql, sandbox, gold_key=gold_key,
                                              options=ex_options)
    comps["ex"], comps["ex_strict"] = verdict.score, strict_verdict.score
    flags["hedged"] = False
    # a strict match returns the gold's own result (its columns, nothing beside them): that is the gold's
    # answer, not two readings at once, so the hedge rule only reads relaxed-only matches and strict EX
    # implies relaxed EX (docs/metrics.md, "Hedges across readings")
    if verdict.score == 1.0 and strict_verdict.score != 1.0 and other_readings and pred.ok:
        flags["hedged"] = _matches_another_reading(pred, pred_sql, gold, gold_sql, other_readings, sandbox,
                                                   ex_options, verdict.column_mapping)
        if flags["hedged"]:
            comps["ex"] = 0.0
    if retracted_gold is not None:
        flags["retraction_kept"] = bool(verdict.score == 1.0 and pred.ok and _keeps_retraction(
            pred, pred_sql, gold, gold_sql, retracted_gold, sandbox, ex_options, verdict.column_mapping))
        if flags["retraction_kept"]:
            comps["ex"] = comps["ex_strict"] = 0.0
    # the verdict knows every reason a gold cannot be scored (fails, empty, truncated, no columns, clock)
    gold_status = {"gold_error": "error", "gold_empty": "empty",
                   "gold_nondeterministic": "nondeterministic"}.get(verdict.status, "ok")
    if gold_status == "ok" and (not gold.ok or gold.truncated):
        gold_status = "error"
    if detailed and gold_status == "ok":
        schema = sandbox.schema
        if pred.ok:
            cand = ResultTable(pred.columns, pred.rows, _origins(pred_sql, schema))
            ref = ResultTable(gold.columns, gold.rows, _gold_origins(gold_sql, sandbox))
            cs = score_cells(cand, ref)
            recall, f1 = cs.cell_recall, cs.cell_f1
            # the gold has rows: a query that ran but paired no column (or returned nothing) recovered none
            # of them, so recall and F1 are 0, as for a query that fails (the article leaves w = 0 undefined)
            if recall is None:
                recall = 0.0
            if f1 is None and recall == 0.0:
                f1 = 0.0
            comps.update(cell_precision=cs.cell_precision, cell_recall=recall, cell_f1=f1,
                         column_precision=cs.column_precision, column_recall=cs.column_recall)
            # sql_partial (rewards/dense.py): 1 for the strict match, else capped and gated partial credit
            comps["sql_partial"] = score_partial(pred_sql, gold_sql, cand, ref, cs, ordered=_ordered(gold_sql),
                                                 exact=strict_verdict.score == 1.0, schema=schema).score
            flags["keyless"] = bool(cs.keyless)
            flags["scorer_inconsistent"] = bool(cs.scorer_inconsistent)
        else:
            # nothing returned: recall and F1 are 0 (reference cells exist, none matched); precision undefined
            comps.update(cell_precision=None, cell_recall=0.0, cell_f1=0.0, column_precision=None, column_recall=0.0,
                         sql_partial=0.0)
        f1, cr = comps["cell_f1"], comps["column_recall"]
        comps["cell_f1_covered"] = None if f1 is None or cr is None else f1 * cr
        try:
            comps["components"] = score_components(pred_sql, gold_sql, schema)
        except SQLParseError:
            comps["components"] = None
        required = _gold_tables(gold_sql)
        if required is not None:
            offered = offered_tables if offered_tables is not None else schema.keys()
            rs = score_retrieval(required, offered)
            comps.update(table_recall=rs.recall, table_precision=rs.precision, spurious_tables=rs.spurious)
    # a second answer beside the first (relaxed EX refused it before the hedge rule could read it) is a hedge
    # too: partial credit for its cells would pay the hedge that EX refuses
    flags["second_answer"] = bool(verdict.second_answer)
    if (flags["hedged"] or flags.get("retraction_kept") or flags["second_answer"]) \
            and comps.get("sql_partial") is not None:
        comps["sql_partial"] = 0.0
    status = "hedged" if flags["hedged"] else "retraction_kept" if flags.get("retraction_kept") else verdict.status
    return SQLTurnScore(comps, _exec_info(pred), gold_status, flags, status)


#: per sandbox: (pre-drift gold SQL, post-drift gold SQL) -> what the drift retracted (:func:`_retraction`), the
#: gold-side part of :func:`_keeps_retraction`, worked out once per drift sample
_RETRACTED: "weakref.WeakKeyDictionary[SQLiteSandbox, dict[tuple, tuple]]" = weakref.WeakKeyDictionary()


def _retraction(pre: ExecutionResult | None, pre_sql: str, post: ExecutionResult, post_sql: str,
                sandbox: SQLiteSandbox) -> tuple[tuple[int, ...], frozenset]:
    """What the drift retracted: the pre-drift gold's result columns that no post-drift gold column has by values
    (:func:`~textsql_clarify.rewards.drift_ex.retracted_columns`; none when ``pre`` is ``None``: it could not be
    used) and its WHERE units the post-drift gold does not hold
    (:func:`~textsql_clarify.rewards.drift_ex.retracted_filters`; none when either gold cannot be analysed);
    cached per sandbox, gold pair and whether ``pre`` was usable."""
    memo = _RETRACTED.setdefault(sandbox, {})
    key = (pre_sql, post_sql, pre is not None)
    if key not in memo:
        if len(memo) > 4096:
            memo.clear()
        schema = sandbox.schema
        s_pre, s_post = query_commitments(pre_sql, schema), query_commitments(post_sql, schema)
        filters = retracted_filters(s_pre, s_post) if s_pre is not None and s_post is not None else frozenset()
        memo[key] = (retracted_columns(pre, post) if pre is not None else (), filters)
    return memo[key]


def _keeps_retraction(pred: ExecutionResult, pred_sql: str, post: ExecutionResult, post_sql: str,
                      retracted_gold: tuple[str, str], sandbox: SQLiteSandbox, ex_options: EXOptions | None,
                      mapping: Sequence[int] | None) -> bool:
    """Whether ``pred``, a relaxed-EX match of the post-drift gold (gold column ``i`` -> ``pred`` column
    ``mapping[i]``), still carries what the drift retracted (:func:`score_sql_turn`, ``retracted_gold``): an
    extra column holding a retracted pre-drift column's values, a retracted WHERE unit, or the pre-drift answer
    itself (relaxed EX matches the pre-drift gold too, or the extra columns hold its rows, where the post-drift
    gold does not match it: :func:`_matches_another_reading`). A pre-drift gold that fails, comes back truncated
    or returns nothing leaves only the WHERE-unit test."""
    pre_key, pre_sql = retracted_gold
    pre = sandbox.execute_gold(pre_key, pre_sql)
    usable = pre.ok and not pre.truncated and bool(pre.rows)
    columns, filters = _retraction(pre if usable else None, pre_sql, post, post_sql, sandbox)
    if columns and carried_columns(pred, mapping, pre, columns):
        return True
    if filters:
        held = query_commitments(pred_sql, sandbox.schema)
        if held and kept_filters(held, filters):
            return True
    return usable and _matches_another_reading(pred, pred_sql, post, post_sql, ((pre_key, pre_sql),), sandbox,
                                               ex_options, mapping)


def _matches_another_reading(pred: ExecutionResult, pred_sql: str, gold: ExecutionResult, gold_sql: str,
                             readings: Sequence[tuple[str, str]], sandbox: SQLiteSandbox,
                             ex_options: EXOptions | None, mapping: Sequence[int] | None) -> bool:
    """Whether ``pred`` (already a relaxed-EX match of the gold, gold column ``i`` -> ``pred`` column
    ``mapping[i]``) also answers one of ``readings`` whose own result the gold does not match
    (:func:`score_sql_turn`, ``other_readings``): relaxed EX matches it too, or its extra columns (those no gold
    column paired with) hold that reading's rows (:func:`result_contains`). Readings that fail, come back
    truncated or return nothing are skipped (they cannot be matched); which readings count is cached per
    sample (:func:`_distinct_readings`), so each SQL turn only compares the prediction."""
    distinct = _distinct_readings(gold, gold_sql, readings, sandbox, ex_options)
    if not distinct:
        return False
    used = set(mapping or ())
    extra = [c for c in range(len(pred.columns)) if c not in used]
    extras = None
    if extra and mapping is not None:
        extras = ExecutionResult(columns=tuple(pred.columns[c] for c in extra),
                                 rows=tuple(tuple(row[c] for c in extra) for row in pred.rows), elapsed_s=0.0)
    for key, sql, r in distinct:
        if score_execution(pred, r, pred_sql, sql, sandbox, gold_key=key, options=ex_options)[0].score == 1.0:
            return True
        if extras is not None and result_contains(extras, r):
            return True
    return False


#: per sandbox (its row cap decides what comes back truncated; the cache goes with it, as its gold cache does):
#: (gold SQL, readings, EX options) -> :func:`_distinct_readings`' answer.
_DISTINCT: "weakref.WeakKeyDictionary[SQLiteSandbox, dict[tuple, tuple]]" = weakref.WeakKeyDictionary()


def _distinct_readings(gold: ExecutionResult, gold_sql: str, readings: Sequence[tuple[str, str]],
                       sandbox: SQLiteSandbox, ex_options: EXOptions | None) -> tuple[tuple[str, str, ExecutionResult], ...]:
    """The readings a hedge could carry besides the gold: ``(key, sql, result)`` of each reading that runs, comes
    back whole and with rows, and that the gold, submitted as its answer, does not match under relaxed EX (a
    reading the gold itself answers is not a different one: an indistinguishable pair). It depends only on the
    sample, its database and the EX options, not on the prediction, so it is worked out once per sample and
    cached; not when a reading failed in a way that may pass later (:func:`_may_pass_later`: the sandbox does not
    cache such a gold either, so the next look may run it)."""
    memo = _DISTINCT.setdefault(sandbox, {})
    key = (gold_sql, tuple(readings), ex_options)
    hit = memo.get(key)
    if hit is not None:
        return hit
    out, retry = [], False
    for rkey, sql in readings:
        r = sandbox.execute_gold(rkey, sql)
        retry = retry or (r.error_kind is not None and _may_pass_later(r))
        if not r.ok or r.truncated or not r.rows:
            continue
        if score_execution(gold, r, gold_sql, sql, sandbox, gold_key=rkey, options=ex_options)[0].score == 1.0:
            continue
        out.append((rkey, sql, r))
    if not retry:
        memo[key] = tuple(out)
    return tuple(out)


def _may_pass_later(r: ExecutionResult) -> bool:
    """Whether a failed gold or reading may run on a later try: a timeout, a locked or busy database, SQLite's
    out-of-memory, a dead or killed SQL worker; the failures :meth:`SQLiteSandbox.execute_gold` (``_is_transient``,
    ``_is_memory``) and :class:`~textsql_clarify.sql.isolated.ProcessSandbox` (``_cacheable``) do not cache.
    Why: a reading locked on the first look (a transient failure cached as final) would turn hedge detection off
    for the sample for the rest of the run."""
    from ..sql.isolated import _cacheable
    from ..sql.sandbox import _is_memory, _is_transient

    return r.error_kind is not None and (not _cacheable(r) or _is_transient(r) or _is_memory(r))


def _norm(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        return round(v, 6) + 0.0
    return v


#: most column assignments :func:`result_contains` tries before it gives up (answers False).
CONTAIN_BUDGET = 256


def result_contains(big: ExecutionResult, small: ExecutionResult) -> bool:
    """Whether ``small``'s rows all appear in ``big`` projected onto some of its columns, one distinct ``big``
    column per ``small`` column (a set comparison; floats to 6 decimals). This is how a hedge carries a second
    reading: ``SELECT * FROM (gold) a, (other reading) b`` holds the other reading's one row in every row.

    Args:
        big, small: executed results (``columns``, ``rows``).
    Returns:
        ``True`` when such a projection exists (found within :data:`CONTAIN_BUDGET` assignments); ``False``
        otherwise, or when ``small`` has more columns than ``big`` or no rows.
    """
    if not small.rows or not big.rows or len(small.columns) > len(big.columns) or len(small.columns) == 0:
        return False
    big_cols = [{_norm(row[c]) for row in big.rows} for c in range(len(big.columns))]
    small_rows = {tuple(_norm(v) for v in row) for row in small.rows}
    cands: list[list[int]] = []
    for j in range(len(small.columns)):
        need = {row[j] for row in small_rows}
        cj = [c for c in range(len(big.columns)) if need <= big_cols[c]]
        if not cj:
            return False
        cands.append(cj)
    tried = 0
    stack: list[tuple[int, ...]] = [()]
    while stack:
        combo = stack.pop()
        if len(combo) == len(cands):
            tried += 1
            proj = {tuple(_norm(row[c]) for c in combo) for row in big.rows}
            if small_rows <= proj:
                return True
            if tried >= CONTAIN_BUDGET:
                return False
            continue
        for c in cands[len(combo)]:
            if c not in combo:
                stack.append(combo + (c,))
    return False


_GOLD_ORIGINS: dict[tuple[str, str], tuple | None] = {}


def _gold_origins(gold_sql: str, sandbox: SQLiteSandbox) -> tuple | None:
    key = (getattr(sandbox, "db_path", ""), gold_sql)
    if key not in _GOLD_ORIGINS:
        if len(_GOLD_ORIGINS) > 8192:
            _GOLD_ORIGINS.clear()
        _GOLD_ORIGINS[key] = _origins(gold_sql, sandbox.schema)
    return _GOLD_ORIGINS[key]
