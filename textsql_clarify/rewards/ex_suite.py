"""Test-suite EX (``ex_suite``): EX on the original database and on every database variant.

Single-instance EX compares two results on one database, so a query that returns the gold's rows there by
chance (the constant ``SELECT count(*)*0 FROM sqlite_master`` against a gold whose answer is 0, the count of
another table of the same size) scores as a right one. Test-suite EX (Zhong, Yu and Klein 2020, "Semantic
Evaluation for Text-to-SQL with Distilled Test Suites") runs both queries on several databases of the same
schema and calls the prediction right only when the results agree on all of them. The variants come from
:func:`textsql_clarify.sql.variants.build_variants`.

The rules, per database:

* the **original** decides whether the sample is scorable at all: its verdict is the single-instance verdict
  (:func:`~textsql_clarify.rewards.execution.score_execution`, relaxed or ``ex_strict``, the same options); a
  gold that fails there, or is empty or reads the clock (the ``EXCLUDED_STATUSES``), gives ``None``, and a
  prediction that does not match there is a mismatch, with no variant run;
* on a **variant**, the same comparison is made with the variant's results (so relaxed / strict, bags vs
  ordered, the column-superset bound, ROUND precision and ORDER BY ... LIMIT ties are identical); a variant
  where the gold fails, times out or is truncated at the row cap is skipped (it says nothing about the
  prediction); a variant where the gold returns no data (no rows, or only NULLs) asks the prediction for no
  data too (it cannot be matched cell by cell, and returning rows where the gold returns none is a different
  answer);
* the prediction is right when it agrees on the original and on every variant not skipped.

Every statement runs in the project's read-only sandbox (:func:`~textsql_clarify.sql.sandbox.get_sandbox`:
time limit, row cap, size guards), one sandbox per database file, held by a :class:`VariantSuite`; a gold's
result is cached per sandbox under ``gold_key``. The work is up to K + 1 times one EX for a prediction that
matches and one EX for one that does not (variants are tried only after a match, and the first disagreement
stops the check).

**Time budget** (:meth:`VariantSuite.check`, what the env calls): the statements a check runs on the variants
(the prediction's, and the gold's not yet cached) share one budget in seconds, the time the prediction left of its
own limit on the original; each statement is given what is left (never more than the sandbox's limit), and a
check that runs out of it, on the prediction or on the gold, is a mismatch (``out_of_time``), never a skipped
variant: otherwise a prediction slow on the original would leave no time to check it and pass unchecked. A suite
built with ``private=True`` holds its own variant sandboxes (:class:`BudgetSandbox`), so that a statement can be
given less than the sandbox's limit; a shared one (``get_sandbox``) runs each statement under its full limit and
only stops between statements.

Sources: Zhong, Yu and Klein 2020 §2-3 (a prediction is judged on a suite of databases; it is right when its
denotation equals the gold's on all of them); ABISS App. A (the comparison on each database); the bounds
contract (``docs/platform.md`` "SQL bounds": no step outlives its time limit by more than 10 % plus a constant).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..sql.sandbox import WORK_UNITS_PER_SECOND, ExecutionResult, SQLiteSandbox, get_sandbox
from .execution import EXCLUDED_STATUSES, EXOptions, EXVerdict, is_empty_result, score_execution

__all__ = ["SuiteVerdict", "VariantCheck", "VariantSuite", "BudgetSandbox", "MIN_STATEMENT_S", "suite_ex", "suite_verdict", "readings_differ_on_variants",
           "reading_differences"]

#: ``compare(pred, gold, pred_sql, gold_sql, sandbox, *, gold_key=..., options=...) -> (relaxed, strict)``:
#: the result comparison (by default :func:`~textsql_clarify.rewards.execution.score_execution`).
Compare = Callable[..., tuple[EXVerdict, EXVerdict]]


@dataclass(frozen=True)
class SuiteVerdict:
    """The test-suite EX verdict of one prediction.

    Attributes:
        score: ``1.0`` (agrees on the original and every variant checked), ``0.0`` (disagrees on one), ``None``
            (the gold is not scorable on the original: ``original.status`` in ``EXCLUDED_STATUSES``).
        original: the single-instance verdict on the original database.
        checked: variants on which the two results were compared (``0`` when the original already decided).
        skipped: variants skipped because the gold failed, timed out or was truncated there.
        failed_on: index (into the variant paths) of the first variant that disagreed, or ``None``.
        reason: what decided it, in words.
    """

    score: float | None
    original: EXVerdict
    checked: int = 0
    skipped: int = 0
    failed_on: int | None = None
    reason: str = ""

    @property
    def ok(self) -> bool | None:
        """``True`` / ``False`` / ``None`` (not scorable), from :attr:`score`."""
        return None if self.score is None else self.score == 1.0

    @property
    def single_instance_ok(self) -> bool | None:
        """The single-instance EX on the original alone, for the same prediction."""
        return None if self.original.score is None else self.original.score == 1.0


#: Least time, seconds, worth giving a statement of a budgeted check: with less left the check stops (out of time).
MIN_STATEMENT_S = 0.001


class BudgetSandbox(SQLiteSandbox):
    """A :class:`~textsql_clarify.sql.sandbox.SQLiteSandbox` whose statements can be given less time than its
    limit (:meth:`execute_within`); opened privately (not through ``get_sandbox``'s shared cache), so no other
    caller sees a statement's shortened limit. Thread-safe: a re-entrant lock serialises the statements.

    Args and raises: as ``SQLiteSandbox``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._budget_lock = threading.RLock()

    def execute(self, sql: str) -> ExecutionResult:
        """``SQLiteSandbox.execute`` under the sandbox's own limit (or the one :meth:`execute_within` set)."""
        with self._budget_lock:
            return super().execute(sql)

    def execute_within(self, sql: str, seconds: float, gold_key: str | None = None) -> ExecutionResult:
        """Run ``sql`` (``execute_gold(gold_key, sql)`` when a key is given: cached, a timeout never is) with the
        time limit ``min(seconds, timeout_s)`` and the guarded-work budget scaled to it
        (``WORK_UNITS_PER_SECOND`` per second); the sandbox's limits are restored afterwards.

        Args:
            sql: one SQLite statement. seconds: the time this statement may take (> 0).
            gold_key: the gold cache key, or ``None`` (a plain statement).
        Returns:
            The :class:`~textsql_clarify.sql.sandbox.ExecutionResult` (error kind ``timeout`` past the limit).
        Raises:
            TypeError, SandboxClosedError: as ``execute``.
        """
        with self._budget_lock:
            full = (self.timeout_s, self.max_statement_work)
            limit = min(full[0], max(float(seconds), MIN_STATEMENT_S))
            self.timeout_s = limit
            self.max_statement_work = max(1, min(full[1], int(limit * WORK_UNITS_PER_SECOND)))
            try:
                return self.execute_gold(gold_key, sql) if gold_key is not None else super().execute(sql)
            finally:
                self.timeout_s, self.max_statement_work = full


@dataclass(frozen=True)
class VariantCheck:
    """What :meth:`VariantSuite.check` found on the variants, for relaxed and strict EX at once.

    Attributes:
        relaxed, strict: ``1.0`` (agrees on every variant checked), ``0.0`` (disagrees on one, or the budget ran
            out), ``None`` (not asked).
        checked: variants on which the two results were compared. skipped: variants where the gold failed, timed
            out under its full limit, was truncated or had no columns.
        failed_on: index of the first variant that decided a ``0.0`` (relaxed first, else strict), or ``None``.
        out_of_time: the budget ran out before every variant was checked (the undecided scores are ``0.0``).
        reason: what decided it, in words. elapsed_s: seconds the check took (wall).
    """

    relaxed: float | None
    strict: float | None
    checked: int = 0
    skipped: int = 0
    failed_on: int | None = None
    out_of_time: bool = False
    reason: str = ""
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``elapsed_s`` rounded to the microsecond)."""
        return {"relaxed": self.relaxed, "strict": self.strict, "checked": self.checked, "skipped": self.skipped,
                "failed_on": self.failed_on, "out_of_time": self.out_of_time, "reason": self.reason,
                "elapsed_s": round(self.elapsed_s, 6)}


class VariantSuite:
    """The original database and its variants, each with its own read-only sandbox, held for reuse.

    Args:
        original: the original database file.
        variants: the variant files (:func:`textsql_clarify.sql.variants.build_variants`).
        timeout_s: time limit per statement, seconds (the env's default 5.0).
        row_cap: row cap per statement (the env's default 10,000).
        private: open the variants as private :class:`BudgetSandbox` connections (closed by :meth:`close`), so
            that :meth:`check` can give each statement what is left of a budget; ``False`` (default): the shared
            sandboxes of ``get_sandbox``.
    Raises:
        FileNotFoundError, DatabaseOpenError: as :func:`~textsql_clarify.sql.sandbox.get_sandbox`.
    """

    def __init__(self, original: str | os.PathLike | SQLiteSandbox, variants: Sequence[str | os.PathLike], *,
                 timeout_s: float = 5.0, row_cap: int = 10_000, private: bool = False) -> None:
        self.original = (original if isinstance(original, SQLiteSandbox) or hasattr(original, "execute_gold")
                         else get_sandbox(original, timeout_s=timeout_s, row_cap=row_cap))
        self.variant_paths = tuple(Path(p) for p in variants)
        self.private = bool(private)
        # held here, so that get_sandbox's bounded cache cannot close them (and drop their gold caches)
        self.variants = tuple((BudgetSandbox(p, timeout_s=timeout_s, row_cap=row_cap) if private
                               else get_sandbox(p, timeout_s=timeout_s, row_cap=row_cap)) for p in self.variant_paths)

    @property
    def closed(self) -> bool:
        """Whether a variant sandbox was closed (the suite must then be rebuilt)."""
        return any(s.closed for s in self.variants)

    def close(self) -> None:
        """Close the private variant sandboxes (a shared suite leaves ``get_sandbox``'s alone). Safe twice."""
        if self.private:
            for s in self.variants:
                s.close()

    def check(self, pred_sql: str, gold_sql: str, *, gold_key: str | None = None, relaxed: bool = True,
              strict: bool = False, options: EXOptions | Mapping[str, Any] | None = None,
              budget_s: float | None = None, compare: Compare = score_execution) -> VariantCheck:
        """The variant half of test-suite EX, for a prediction already known to match on the original: run the
        gold and the prediction on each variant and compare (the module docstring's rules), for relaxed EX
        (``relaxed``), ``ex_strict`` (``strict``) or both in one pass (each statement runs once); stops once every
        score asked for is decided.

        Args:
            pred_sql, gold_sql: the two SQL texts. gold_key: the gold's cache key per variant sandbox, or ``None``.
            relaxed, strict: which verdicts to work out (the ones that matched on the original).
            options: :class:`~textsql_clarify.rewards.execution.EXOptions` or a mapping; ``None``: the defaults.
            budget_s: seconds all statements of the check may take together (the module docstring, "Time
                budget"); ``None``: no budget beyond each statement's own limit.
            compare: the result comparison (``score_execution``'s signature).
        Returns:
            A :class:`VariantCheck`.
        Raises:
            TypeError: a SQL text is not a ``str``. ValueError: bad ``options``, or neither score asked for.
        """
        if not isinstance(pred_sql, str) or not isinstance(gold_sql, str):
            raise TypeError("pred_sql and gold_sql must be str")
        if not (relaxed or strict):
            raise ValueError("check: ask for relaxed, strict or both")
        opts = EXOptions.from_mapping(options)
        t0 = time.perf_counter()
        deadline = None if budget_s is None else t0 + float(budget_s)
        fail: dict[int, tuple[int, str]] = {}  # pick (0 relaxed, 1 strict) -> (variant, why)
        want = [k for k, on in ((0, relaxed), (1, strict)) if on]
        checked = skipped = 0
        out_of_time = False
        why_time = ""

        def run(vsb: SQLiteSandbox, sql: str, key: str | None) -> tuple[ExecutionResult | None, bool]:
            """``(result, budgeted)``; ``(None, True)`` when the budget is spent before the statement."""
            if deadline is None:
                return (vsb.execute_gold(key, sql) if key is not None else vsb.execute(sql)), False
            left = deadline - time.perf_counter()
            if left < MIN_STATEMENT_S:
                return None, True
            within = getattr(vsb, "execute_within", None)
            if within is not None:
                return within(sql, left, key), left < vsb.timeout_s
            return (vsb.execute_gold(key, sql) if key is not None else vsb.execute(sql)), False

        for i, vsb in enumerate(self.variants):
            g, short = run(vsb, gold_sql, gold_key)
            if g is None or (short and g.error_kind == "timeout"):
                out_of_time, why_time = True, f"the time budget ran out at the gold on variant {i}"
                break
            if not g.ok or g.truncated or not g.columns:
                skipped += 1
                continue
            p, short = run(vsb, pred_sql, None)
            if p is None or (short and p.error_kind == "timeout"):
                out_of_time, why_time = True, f"the prediction ran out of the time budget on variant {i}"
                break
            checked += 1
            for pick, (agree, text) in zip(want, _agree_both(p, g, pred_sql, gold_sql, vsb, gold_key, opts,
                                                             compare, want)):
                if not agree and pick not in fail:
                    fail[pick] = (i, text)
            if all(k in fail for k in want):
                break
        scores = {k: (0.0 if k in fail or out_of_time else 1.0) for k in want}
        first = fail.get(0) or fail.get(1)
        if first is not None:
            reason = f"matches on the original, not on variant {first[0]}: {first[1]}"
        elif out_of_time:
            reason = f"matches on the original and on {checked} variant(s), then {why_time} (budget {budget_s:.3f} s)"
        else:
            reason = f"matches on the original and on {checked} variant(s) ({skipped} skipped: gold failed)"
        return VariantCheck(scores.get(0), scores.get(1), checked, skipped, None if first is None else first[0],
                            out_of_time, reason, time.perf_counter() - t0)

    def verdict(self, pred_sql: str, gold_sql: str, *, gold_key: str | None = None, strict: bool = False,
                options: EXOptions | Mapping[str, Any] | None = None, compare: Compare = score_execution,
                stop_early: bool = True) -> SuiteVerdict:
        """Score ``pred_sql`` against ``gold_sql`` by test-suite EX (the module docstring gives the rules).

        Args:
            pred_sql, gold_sql: the two SQL texts.
            gold_key: the gold's cache key in each sandbox (sample id), or ``None`` (no cache).
            strict: ``ex_strict`` on every database in place of relaxed EX.
            options: :class:`~textsql_clarify.rewards.execution.EXOptions` or a mapping; ``None``: the defaults.
            compare: the result comparison (``score_execution``'s signature).
            stop_early: stop at the first disagreeing variant (``False``: check all, for measurement).
        Returns:
            A :class:`SuiteVerdict`.
        Raises:
            TypeError: a SQL text is not a ``str``. ValueError: bad ``options``.
        """
        if not isinstance(pred_sql, str) or not isinstance(gold_sql, str):
            raise TypeError("pred_sql and gold_sql must be str")
        opts = EXOptions.from_mapping(options)
        pick = 1 if strict else 0
        sb = self.original
        gold = sb.execute_gold(gold_key, gold_sql) if gold_key is not None else sb.execute(gold_sql)
        pred = sb.execute(pred_sql)
        first = compare(pred, gold, pred_sql, gold_sql, sb, gold_key=gold_key, options=opts)[pick]
        if first.status in EXCLUDED_STATUSES:
            return SuiteVerdict(None, first, reason=f"not scorable on the original: {first.reason}")
        if first.status != "match":
            return SuiteVerdict(0.0, first, reason=f"no match on the original: {first.reason}")
        checked = skipped = 0
        failed_on: int | None = None
        why = ""
        for i, vsb in enumerate(self.variants):
            g = vsb.execute_gold(gold_key, gold_sql) if gold_key is not None else vsb.execute(gold_sql)
            if not g.ok or g.truncated or not g.columns:
                skipped += 1
                continue
            checked += 1
            p = vsb.execute(pred_sql)
            agree, text = _agree(p, g, pred_sql, gold_sql, vsb, gold_key, opts, compare, pick)
            if not agree and failed_on is None:
                failed_on, why = i, text
                if stop_early:
                    break
        if failed_on is not None:
            return SuiteVerdict(0.0, first, checked, skipped, failed_on,
                                f"matches on the original, not on variant {failed_on}: {why}")
        return SuiteVerdict(1.0, first, checked, skipped, None,
                            f"matches on the original and on {checked} variant(s) ({skipped} skipped: gold failed)")

    def ex(self, pred_sql: str, gold_sql: str, **kw: Any) -> bool | None:
        """:meth:`verdict`'s :attr:`SuiteVerdict.ok`: ``True``, ``False``, or ``None`` (gold not scorable)."""
        return self.verdict(pred_sql, gold_sql, **kw).ok


def _agree(p: ExecutionResult, g: ExecutionResult, pred_sql: str, gold_sql: str, sb: SQLiteSandbox,
           gold_key: str | None, opts: EXOptions, compare: Compare, pick: int) -> tuple[bool, str]:
    """Whether the prediction's result ``p`` agrees with the gold's ``g`` on one variant (``g`` ran)."""
    if not p.ok:
        return False, f"the prediction fails there ({p.error_kind}): {p.error_message}"
    if is_empty_result(g):
        if p.truncated or not is_empty_result(p):
            return False, "the gold returns no data there, the prediction returns data"
        return True, ""
    if p.truncated:
        return False, "the prediction's result is truncated at the row cap there"
    v = compare(p, g, pred_sql, gold_sql, sb, gold_key=gold_key, options=opts)[pick]
    return v.status == "match", v.reason


def _agree_both(p: ExecutionResult, g: ExecutionResult, pred_sql: str, gold_sql: str, sb: SQLiteSandbox,
                gold_key: str | None, opts: EXOptions, compare: Compare, picks: Sequence[int]) -> list[tuple[bool, str]]:
    """:func:`_agree` for several verdicts (0 relaxed, 1 strict) from one comparison of the two results."""
    if not p.ok:
        return [(False, f"the prediction fails there ({p.error_kind}): {p.error_message}")] * len(picks)
    if is_empty_result(g):
        if p.truncated or not is_empty_result(p):
            return [(False, "the gold returns no data there, the prediction returns data")] * len(picks)
        return [(True, "")] * len(picks)
    if p.truncated:
        return [(False, "the prediction's result is truncated at the row cap there")] * len(picks)
    both = compare(p, g, pred_sql, gold_sql, sb, gold_key=gold_key, options=opts)
    return [(both[k].status == "match", both[k].reason) for k in picks]


_SUITES: dict[tuple, VariantSuite] = {}
_SUITES_MAX = 64


def _suite_for(original: str | os.PathLike | SQLiteSandbox, variant_paths: Sequence[str | os.PathLike],
               timeout_s: float, row_cap: int) -> VariantSuite:
    okey = original.db_path if isinstance(original, SQLiteSandbox) else str(Path(original).resolve())
    key = (os.getpid(), okey, tuple(str(Path(p).resolve()) for p in variant_paths), float(timeout_s), row_cap)
    suite = _SUITES.get(key)
    if suite is None or suite.original.closed or any(s.closed for s in suite.variants):
        if len(_SUITES) >= _SUITES_MAX:
            _SUITES.pop(next(iter(_SUITES)))
        suite = _SUITES[key] = VariantSuite(original, variant_paths, timeout_s=timeout_s, row_cap=row_cap)
    return suite


def suite_verdict(pred_sql: str, gold_sql: str, variant_paths: Sequence[str | os.PathLike], *,
                  original: str | os.PathLike | SQLiteSandbox, strict: bool = False,
                  options: EXOptions | Mapping[str, Any] | None = None, gold_key: str | None = None,
                  compare: Compare = score_execution, timeout_s: float = 5.0, row_cap: int = 10_000) -> SuiteVerdict:
    """:meth:`VariantSuite.verdict` on a suite kept per (process, original, variants, limits) (at most 64).

    Args:
        pred_sql, gold_sql: the two SQL texts.
        variant_paths: the variants of ``original`` (:func:`textsql_clarify.sql.variants.build_variants`).
        original: the original database (a path, or the env's sandbox for it).
        strict, options, gold_key, compare: as :meth:`VariantSuite.verdict`.
        timeout_s, row_cap: the sandbox limits of the variants (and of the original when a path is given).
    Returns:
        A :class:`SuiteVerdict`.
    Raises:
        TypeError, ValueError: as :meth:`VariantSuite.verdict`. FileNotFoundError: a database file is missing.
    """
    suite = _suite_for(original, variant_paths, timeout_s, row_cap)
    return suite.verdict(pred_sql, gold_sql, gold_key=gold_key, strict=strict, options=options, compare=compare)


def suite_ex(pred_sql: str, gold_sql: str, variant_paths: Sequence[str | os.PathLike], *,
             original: str | os.PathLike | SQLiteSandbox, strict: bool = False,
             options: EXOptions | Mapping[str, Any] | None = None, gold_key: str | None = None,
             compare: Compare = score_execution, timeout_s: float = 5.0, row_cap: int = 10_000) -> bool | None:
    """Test-suite EX of one prediction: ``True`` when it agrees with the gold on ``original`` and on every
    variant where the gold runs, ``False`` otherwise, ``None`` when the gold is not scorable on the original
    (it fails, is truncated, empty, or reads the clock). Arguments as :func:`suite_verdict`.

    Source: Zhong, Yu and Klein 2020 §2; the comparison is the env's (ABISS App. A, ``docs/metrics.md``).
    """
    return suite_verdict(pred_sql, gold_sql, variant_paths, original=original, strict=strict, options=options,
                         gold_key=gold_key, compare=compare, timeout_s=timeout_s, row_cap=row_cap).ok


# ----------------------------------------------------------------------------------------- distinguishability
def reading_differences(sample: Any, variants: Sequence[str | os.PathLike], *, timeout_s: float = 5.0,
                        row_cap: int = 10_000) -> list[int | None]:
    """For each interpretation of ``sample``, the first database on which its result differs from the gold's:
    ``0`` the original, ``i + 1`` variant ``i``; ``None`` when it is the same on all of them.

    "The same" is the load-time ``indistinguishable`` test (:func:`textsql_clarify.datasets.validate._same`:
    strict EX either way, or the reading submitted as the answer matching the gold under relaxed EX; two
    results without data are the same), applied per database; a database where either reading fails or is
    truncated says nothing and is passed over.

    Args:
        sample: a :class:`~textsql_clarify.samples.Sample` with ``gold_sql`` and ``interpretations``.
        variants: variants of ``sample.db_path``.
        timeout_s, row_cap: sandbox limits.
    Returns:
        One entry per interpretation (empty list when the sample has no gold or no interpretation).
    """
    from ..datasets.validate import _same  # the load-time test itself, so both agree (lazy: datasets imports rewards)

    if sample.gold_sql is None or not sample.interpretations:
        return []
    dbs = [get_sandbox(sample.db_path, timeout_s=timeout_s, row_cap=row_cap)]
    dbs += [get_sandbox(p, timeout_s=timeout_s, row_cap=row_cap) for p in variants]
    golds = [sb.execute(sample.gold_sql) for sb in dbs]
    out: list[int | None] = []
    for it in sample.interpretations:
        first: int | None = None
        for j, sb in enumerate(dbs):
            g = golds[j]
            r = sb.execute(it.gold_sql)
            if not (g.ok and r.ok) or g.truncated or r.truncated or not g.columns or not r.columns:
                continue
            if _same(r, it.gold_sql, g, sample.gold_sql, sb) is None:
                first = j
                break
        out.append(first)
    return out


def readings_differ_on_variants(sample: Any, variants: Sequence[str | os.PathLike], **kw: Any) -> bool:
    """Whether an ambiguous sample's readings can be told apart by EX over the original and its variants: every
    interpretation's result differs from the gold's on at least one of the databases
    (:func:`reading_differences`). ``False`` for a sample with no gold or no interpretation (one reading only:
    nothing to tell apart), as the load-time ``indistinguishable`` flag says.

    Args:
        sample: a :class:`~textsql_clarify.samples.Sample`. variants: variants of ``sample.db_path``.
        **kw: ``timeout_s``, ``row_cap``.
    Returns:
        ``True`` when the readings differ somewhere (the sample can reward asking under test-suite EX).
    """
    diffs = reading_differences(sample, variants, **kw)
    return bool(diffs) and all(d is not None for d in diffs)
