"""Load-time validation: every loaded sample's golds are executed and checked before any episode runs.

:func:`load_dataset` calls :func:`validate_loaded` (on by default; ``validate=False`` skips it). Each check
that fails sets one flag of :data:`~textsql_clarify.samples.SAMPLE_FLAGS` on the sample (a new
:class:`~textsql_clarify.samples.Sample`, ``dataclasses.replace``; flags the loader set are kept) and
records a :class:`Problem` with a message; ``textsql-clarify data validate SPEC`` prints them. Flagged
samples stay in the dataset: the metrics decide what to leave out (``indistinguishable`` samples are kept
out of the ambiguous metrics, gold ceilings are counted apart, ``docs/metrics.md``).

Checks, per sample with a gold SQL (ABISS §4.2 stage 2, "SQL Executability": executes "without: syntax
errors, non-empty result sets, runtime failures and within a time limit"; the stage 1 duplicate check):

* ``gold_timeout``: ``gold_sql`` did not finish within :data:`GOLD_TIMEOUT_S` (the env's default limit);
* ``gold_error``: it fails (syntax, forbidden, runtime), or its result is truncated at the row cap (the
  scorer cannot compare a truncated gold, :func:`~textsql_clarify.rewards.execution.gold_scorability`);
* ``gold_empty``: it returns no rows, or only NULLs (:func:`~textsql_clarify.rewards.execution.is_empty_result`);
* ``gold_nondeterministic``: it (or the post-drift gold) reads the clock or randomness
  (:func:`~textsql_clarify.rewards.ex_sql.gold_nondeterminism`, the sample's ``provenance`` flag);
* ``interpretation_error``: an interpretation's gold fails, times out or is truncated;
* ``indistinguishable``: an interpretation's result equals the main gold's by the env's own strict scorer
  (:func:`~textsql_clarify.rewards.execution.score_execution`, ``ex_strict``, taking either result as the
  gold; two results without data count as equal), or the interpretation's result, submitted as the answer,
  scores as a match of the gold under the relaxed EX the env pays (a superset of the gold's columns within
  the scorer's bound). Such a sample cannot reward asking: the agent that never
  asks and answers the other reading scores as the one that asked. Two *other* readings that return the
  same rows as each other, but not as the gold, still leave asking rewarded, so they are not flagged. An
  ambiguous sample with a gold and no interpretation at all (MMSQL, CoSQL: one reading per turn) is flagged
  too: the agent that never asks submits the only reading;
* ``duplicate_gold``: ABISS §4.2 stage 1 (after OmniSQL): a later answerable or ambiguous sample whose
  value-masked gold (:func:`.gold_masking.mask_values`, given the database's column names so that a
  double-quoted value such as ``"France"`` is masked as ``'France'`` is) equals an earlier one's over the same database,
  unless it is another reading of the same question (same question text, or its gold is one of the earlier
  sample's interpretations), or both were generated from the same anchor or from anchors with the same
  gold SQL text (``provenance["anchor_gold"]``: one source query asked in two phrasings, Spider's paraphrase
  pairs; each generated sample keeps its own anchor's question, so the episodes differ); the first keeps no flag.
  Golds that are equal only once values are masked come from different source queries and are still flagged,
  generated or not.

Drift records of a ``.jsonl`` file are checked by the JSONL loader as before
(:func:`.drift_check.drift_problems`; a bad one raises :class:`~textsql_clarify.errors.DatasetError`).

Each distinct SQL runs once per database, in the read-only sandbox shared with the env
(:func:`~textsql_clarify.sql.sandbox.get_sandbox` with the env's default limits). Results are cached per dataset
on disk (:mod:`.validation_cache`), except a run in which something timed out, found the database locked by
another connection (retried at once, as the sandbox retries golds) or hit SQLite's heap limit: a busy machine or
a lock causes these, not the gold, so they are retried on the next load.
"""
from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..sql.sandbox import (GOLD_RETRIES, GOLD_RETRY_WAIT_S, DatabaseOpenError, ExecutionResult, SQLiteSandbox, _is_memory,
                           _is_transient, get_sandbox)
from ..errors import DatasetError
from ..sql.schema import read_schema
from ..rewards.execution import EXOptions, is_empty_result, score_execution
from ..rewards.ex_sql import gold_nondeterminism
from ..samples import SAMPLE_FLAGS, Sample
from .gold_masking import mask_values

__all__ = ["VALIDATOR_VERSION", "GOLD_TIMEOUT_S", "ROW_CAP", "Problem", "ValidationReport", "validate_samples",
           "validate_loaded"]

#: Bumped whenever a check changes, so that cached results of the old checks are not reused.
VALIDATOR_VERSION = 6
#: Time limit per gold, seconds: the env's default ``timeout_s`` (:class:`textsql_clarify.envs.env.TextSQLClarifyEnv`).
GOLD_TIMEOUT_S = 5.0
#: Row cap per gold: the env's default ``row_cap``; a gold with more rows is truncated, hence ``gold_error``.
ROW_CAP = 10_000
#: Scorer options of the ``indistinguishable`` comparison: the env's defaults, except that a gold reading the
#: clock is compared too (it is flagged ``gold_nondeterministic`` separately).
_COMPARE_OPTIONS = EXOptions(exclude_nondeterministic_gold=False)
#: Message of a flag that the loader set and the validator did not find itself.
LOADER_FLAG_MESSAGE = "set by the loader"
_PKG = Path(__file__).resolve().parents[1]
#: The source files whose code decides the checks' results (this module, the value masking, the scorer, the
#: sandbox and its guards); their bytes are part of the cache key (:mod:`.validation_cache`).
_CODE_FILES: tuple[Path, ...] = tuple(_PKG / f for f in (
    "datasets/validate.py", "datasets/gold_masking.py", "rewards/execution.py", "rewards/ex_sql.py",
    "sql/sandbox.py", "sql/guards.py"))


@dataclass(frozen=True)
class Problem:
    """One validation problem of one sample.

    Attributes:
        sample_id: the sample's id.
        flag: one of :data:`~textsql_clarify.samples.SAMPLE_FLAGS`.
        message: what was found (the error text, the sample it duplicates, ...).
    """

    sample_id: str
    flag: str
    message: str

    def __str__(self) -> str:
        return f"{self.sample_id}: {self.flag}: {self.message}"


@dataclass
class ValidationReport:
    """What :func:`validate_samples` found.

    Attributes:
        samples: the samples, in input order, with their ``flags`` set (unflagged ones unchanged).
        problems: every problem, in sample order; at most one per (sample, flag), messages joined by ``; ``.
        cached: ``True`` when the results came from the on-disk cache (nothing was executed).
    """

    samples: list[Sample]
    problems: list[Problem] = field(default_factory=list)
    cached: bool = False

    def counts(self) -> dict[str, int]:
        """Samples per flag, in :data:`~textsql_clarify.samples.SAMPLE_FLAGS` order (flags with 0 left out)."""
        c = Counter(f for s in self.samples for f in s.flags)
        return {f: c[f] for f in SAMPLE_FLAGS if c[f]}

    @property
    def n_flagged(self) -> int:
        """Number of samples with at least one flag."""
        return sum(1 for s in self.samples if s.flags)


class _Runner:
    """Executes each distinct (database, SQL) once and remembers the result."""

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], ExecutionResult] = {}
        self.timed_out = False

    def sandbox(self, db_path: str) -> SQLiteSandbox:
        try:
            return get_sandbox(db_path, timeout_s=GOLD_TIMEOUT_S, row_cap=ROW_CAP)
        except (OSError, DatabaseOpenError) as e:
            raise DatasetError(f"cannot validate: database {db_path} cannot be opened: {e}") from e

    def run(self, db_path: str, sql: str) -> ExecutionResult:
        key = (db_path, sql)
        hit = self.results.get(key)
        if hit is None:
            sandbox = self.sandbox(db_path)
            hit = sandbox.execute(sql)
            for _ in range(GOLD_RETRIES):  # another connection held a lock: it may pass by itself
                if not _is_transient(hit):
                    break
                time.sleep(GOLD_RETRY_WAIT_S)
                hit = sandbox.execute(sql)
            self.results[key] = hit
            if hit.error_kind == "timeout" or _is_transient(hit) or _is_memory(hit):
                self.timed_out = True  # a busy machine or a lock, not the gold: the run is not cached
        return hit


def _failure_text(r: ExecutionResult) -> str | None:
    """Why a result cannot be compared (error, truncated, no columns), or ``None`` when it can."""
    if not r.ok:
        return f"fails ({r.error_kind}): {r.error_message}"
    if r.truncated:
        # a ceiling, not a 0: EX compares whole results, so the sample is left out of EX means
        # (docs/metrics.md, "gold_error"); an env with a larger row_cap could score it
        return (f"returns more than the row cap of {ROW_CAP:,} rows (fetched {r.row_count:,}, truncated): EX cannot "
                "compare a truncated result, so the sample is a ceiling (EX undefined, left out of EX means)")
    if not r.columns:
        return "returns no columns"
    return None


def _same(a: ExecutionResult, a_sql: str, b: ExecutionResult, b_sql: str, sandbox: SQLiteSandbox) -> str | None:
    """How two comparable results are equal, or ``None``: ``"strict EX"`` when the env's strict scorer finds them
    equal, either one taken as the gold; ``"relaxed EX"`` when ``a`` (a reading) submitted as the answer scores as a
    match of ``b`` (the gold) under the relaxed EX that the ``binary`` and ``shaped`` presets pay (a reading that
    returns the gold's rows plus an extra column the scorer tolerates: the never-asking agent earns EX 1 with it).
    Two results without data are equal, one without data never equals one with data."""
    a_empty, b_empty = is_empty_result(a), is_empty_result(b)
    if a_empty or b_empty:
        return "strict EX" if a_empty and b_empty else None
    relaxed_hit = False
    for k, (pred, pred_sql, gold, gold_sql) in enumerate(((a, a_sql, b, b_sql), (b, b_sql, a, a_sql))):
        relaxed, strict = score_execution(pred, gold, pred_sql, gold_sql, sandbox, options=_COMPARE_OPTIONS)
        if strict.status == "match":
            return "strict EX"
        relaxed_hit = relaxed_hit or (k == 0 and relaxed.status == "match")
    return "relaxed EX" if relaxed_hit else None


def _check_sample(s: Sample, runner: _Runner, add) -> None:
    """The execution checks of one sample; ``add(flag, message)`` records a problem."""
    what = s.provenance.get("gold_nondeterministic") or gold_nondeterminism(s.gold_sql)
    if what:
        add("gold_nondeterministic", f"gold_sql reads {what}: its result depends on when it runs")
    if s.drift is not None:
        post = s.provenance.get("post_gold_nondeterministic") or gold_nondeterminism(s.drift.post_gold_sql)
        if post:
            add("gold_nondeterministic", f"drift.post_gold_sql reads {post}: its result depends on when it runs")
    gold = runner.run(s.db_path, s.gold_sql)
    gold_ok = False
    if gold.error_kind == "timeout":
        add("gold_timeout", f"gold_sql did not finish within the {GOLD_TIMEOUT_S:g} s time limit")
    elif (why := _failure_text(gold)) is not None:
        add("gold_error", f"gold_sql {why}")
    else:
        gold_ok = True
        if not gold.rows:
            add("gold_empty", "gold_sql returns no rows")
        elif is_empty_result(gold):
            add("gold_empty", "gold_sql returns only NULL values")
    if not s.interpretations:
        if s.group == "ambiguous":
            add("indistinguishable", "no other reading is given (no interpretations): EX cannot tell asking "
                                     "from answering the only reading")
        return
    comparable: list[tuple[str, str, ExecutionResult]] = [("gold_sql", s.gold_sql, gold)] if gold_ok else []
    for k, it in enumerate(s.interpretations):
        r = runner.run(s.db_path, it.gold_sql)
        name = f"interpretations[{k}]"
        if r.error_kind == "timeout":
            add("interpretation_error", f"{name}.gold_sql did not finish within the {GOLD_TIMEOUT_S:g} s time limit")
            continue
        if (why := _failure_text(r)) is not None:
            add("interpretation_error", f"{name}.gold_sql {why}")
            continue
        sandbox = runner.sandbox(s.db_path)
        for other, other_sql, other_r in comparable:
            how = _same(r, it.gold_sql, other_r, other_sql, sandbox)
            if how:
                add("indistinguishable", f"{name}.gold_sql returns the same result as {other}"
                                         f"{'' if other == 'gold_sql' else '.gold_sql'} ({how})")
                break


def _run_checks(samples: Sequence[Sample]) -> tuple[list[tuple[int, str, str]], bool]:
    """All checks over ``samples``. Returns ``([(index, flag, message)], whether something timed out)``."""
    runner = _Runner()
    found: list[tuple[int, str, str]] = []
    first_by_mask: dict[tuple[str, str], Sample] = {}
    columns: dict[str, frozenset[str] | None] = {}

    def columns_of(db_path: str) -> frozenset[str] | None:
        # the database's column names, so that the masking reads "France" as SQLite does (a value where no
        # such column exists); None where the schema cannot be read (the gold then fails on its own)
        if db_path not in columns:
            try:
                columns[db_path] = frozenset(c for cols in read_schema(db_path).values() for c in cols)
            except (OSError, sqlite3.DatabaseError):
                columns[db_path] = None
        return columns[db_path]

    for i, s in enumerate(samples):
        if s.gold_sql is None:
            continue
        mine: dict[str, list[str]] = {}

        def add(flag: str, message: str, mine=mine) -> None:
            mine.setdefault(flag, []).append(message)

        _check_sample(s, runner, add)
        if s.group in ("answerable", "ambiguous"):
            key = (s.db_path, mask_values(s.gold_sql, columns_of(s.db_path)))
            first = first_by_mask.setdefault(key, s)
            if first is not s and not _same_question(first, s):
                add("duplicate_gold", f"gold_sql equals {first.id}'s once values are masked (ABISS §4.2 stage 1)")
        found.extend((i, flag, "; ".join(mine[flag])) for flag in SAMPLE_FLAGS if flag in mine)
    return found, runner.timed_out


def _same_question(a: Sample, b: Sample) -> bool:
    """Whether ``b`` is another reading of ``a``'s question rather than a duplicate: the same question text
    (case and spacing aside), or ``b``'s gold is one of ``a``'s interpretations (ABISS writes each reading of
    an ambiguous question as its own record; readings that differ only in a value, ``Age > 40`` /
    ``Age > 50``, mask alike), or both were generated from the same anchor (``provenance`` ``source`` is
    ``"generated"`` and ``anchor_id`` is the same: the generation recipes grow several episodes from one gold on
    purpose, e.g. TIDE's chain-only / drift-only / joint triplets over one anchor, a PremiseSQL flaw and its paired
    original), or both were generated from anchors with the same gold SQL text (the same ``anchor_gold``,
    :func:`textsql_clarify.generation.anchors.anchor_gold`: one source query asked in another phrasing, Spider's
    paraphrase pairs). Samples that are not generated (Spider dev's own paraphrase pairs) are not
    exempted by either rule, and anchors whose golds differ in a value have different ``anchor_gold``s."""
    if " ".join(a.question.lower().split()) == " ".join(b.question.lower().split()):
        return True
    pa, pb = a.provenance, b.provenance
    if pa.get("source") == pb.get("source") == "generated":
        if (pa.get("anchor_id") is not None and pa.get("anchor_id") == pb.get("anchor_id")
                and pa.get("anchor_source") == pb.get("anchor_source")):
            return True
        if pa.get("anchor_gold") is not None and pa.get("anchor_gold") == pb.get("anchor_gold"):
            return True
    return b.gold_sql in {it.gold_sql for it in a.interpretations}


def _code_digest() -> str:
    """SHA-256 of the source files in :data:`_CODE_FILES` (path names and bytes; a missing file counts as empty)."""
    h = hashlib.sha256()
    for p in _CODE_FILES:
        h.update(Path(p).name.encode("utf-8") + b"\0")
        try:
            h.update(Path(p).read_bytes())
        except OSError:
            pass
        h.update(b"\0")
    return h.hexdigest()


def _settings() -> dict:
    return {"validator_version": VALIDATOR_VERSION, "timeout_s": GOLD_TIMEOUT_S, "row_cap": ROW_CAP}


def validate_samples(samples: Sequence[Sample], *, spec: str | None = None, use_cache: bool = True) -> ValidationReport:
    """Validate loaded samples (the module docstring lists the checks) and report every problem.

    Args:
        samples: the samples as the loader built them (their ``flags`` are kept and merged).
        spec: the dataset spec they were loaded from; with ``use_cache``, the results are read from and
            written to the on-disk cache (:mod:`.validation_cache`). ``None``: no cache.
        use_cache: ``False`` always executes and writes nothing.
    Returns:
        A :class:`ValidationReport`: the flagged samples, the problems (loader flags appear with the message
        :data:`LOADER_FLAG_MESSAGE`), whether the cache answered.
    Raises:
        DatasetError: a database cannot be opened.
    """
    samples = list(samples)
    found = None
    digest = key = None
    if use_cache and spec is not None:
        from . import validation_cache as vc

        try:
            digest, key = vc.cache_key(spec, samples, _settings(), code=_code_digest())
        except OSError:
            digest = None
        if digest is not None:
            found = vc.read_cached(digest, samples)
    cached = found is not None
    if found is None:
        found, timed_out = _run_checks(samples)
        if digest is not None and not timed_out:
            vc.write_cached(digest, key, samples, found)
    by_index: dict[int, list[tuple[str, str]]] = {}
    for i, flag, msg in found:
        by_index.setdefault(i, []).append((flag, msg))
    out: list[Sample] = []
    problems: list[Problem] = []
    for i, s in enumerate(samples):
        own = dict(by_index.get(i, ()))
        for f in s.flags:
            if f not in own:
                problems.append(Problem(s.id, f, LOADER_FLAG_MESSAGE))
        problems.extend(Problem(s.id, f, m) for f, m in own.items())
        flags = tuple(dict.fromkeys([*s.flags, *own]))
        out.append(s if flags == s.flags else dataclasses.replace(s, flags=flags))
    return ValidationReport(out, problems, cached)


def validate_loaded(samples: Sequence[Sample], *, spec: str) -> list[Sample]:
    """:func:`validate_samples` with the cache, as :func:`textsql_clarify.datasets.load_dataset` calls it.

    Args:
        samples: the loaded samples. spec: their dataset spec (the cache key).
    Returns:
        The samples with their ``flags`` set, in input order.
    Raises:
        DatasetError: a database cannot be opened.
    """
    return validate_samples(samples, spec=spec).samples
