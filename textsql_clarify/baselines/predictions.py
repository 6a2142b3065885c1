"""Score a file of predicted SQL through the env (``textsql-clarify score``), as Spider's and BIRD's
evaluation scripts score a predictions file, plus Spider's exact-set-match (EM).

Two file formats, told apart by content (:func:`read_predictions`):

- **JSONL**: one ``{"id": <sample id>, "sql": <query>}`` object per line (other fields are allowed; a
  ``db_id`` field must name the sample's database);
- **lines**: Spider's ``predicted.txt``, one query per line in the dataset's gold order; blank (empty or
  whitespace-only) lines are skipped, not read as empty predictions, and a line may end in a tab and the database
  id, as Spider's evaluation script reads them.

A prediction is never empty: a JSONL ``sql`` that is empty or whitespace only is refused (a deliberate miss is any
non-empty text), and a line file cannot hold one (its blank lines are skipped, so the count no longer matches).

Each prediction is replayed as a one-turn SQL episode by :class:`ReplayAgent` through
:func:`~textsql_clarify.baselines.rollout.evaluate`, so EX, EX_strict (and with ``ex_mode="suite"`` EX_suite)
are exactly what ``textsql-clarify eval`` computes, and the same ``trajectories.jsonl``, ``metrics.json`` and
``run.json`` are written. :func:`add_exact_match` then adds EM (:mod:`textsql_clarify.rewards.exact_match`)
with its n and interval to ``metrics.json``, and each episode's EM to its ``scores["em"]`` in
``trajectories.jsonl`` (beside its ``scores["ex"]``), so that a report pairs two runs' EM per sample as it pairs
their EX.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import SQLParseError, TextSQLClarifyError
from ..samples import Sample

__all__ = ["PredictionsError", "ReplayAgent", "read_predictions", "add_exact_match", "score_predictions",
           "render_exact_match"]


class PredictionsError(TextSQLClarifyError, ValueError):
    """A predictions file that cannot be scored: the message names the file, the line and the field."""


class ReplayAgent:
    """Answers every episode with the prediction for its sample: ``{"type": "sql", "content": <sql>}``.

    Not privileged: it reads the sample id from ``info["sample_id"]`` (the env's info after ``reset``) and is
    told nothing else, so the run's ``privileged`` flag stays false. JSON carries any query text, including
    one that holds ``</sql>``. An episode that goes on after the answer (a drift utterance) gets the same
    query again.

    Args:
        predictions: ``{sample id: SQL}``.
    Raises (from ``act``):
        KeyError: the episode's sample has no prediction.
    """

    name = "predictions"
    privileged = False

    def __init__(self, predictions: Mapping[str, str]) -> None:
        self.predictions = dict(predictions)

    def begin_episode(self, sample: Sample | None) -> None:
        """Nothing to prepare: the sample id arrives with each ``info``."""

    def act(self, observation: Mapping[str, Any], info: Mapping[str, Any]) -> str:
        """The JSON SQL action of the episode's prediction."""
        sid = info.get("sample_id")
        if sid not in self.predictions:
            raise KeyError(f"no prediction for sample {sid!r}")
        return json.dumps({"type": "sql", "content": self.predictions[sid]}, ensure_ascii=False)


# ----------------------------------------------------------------------------------------- reading

def _plural(n: int, one: str, many: str) -> str:
    """``"1 query"`` / ``"2 queries"``: ``n`` with the word's singular or plural form."""
    return f"{n} {one if n == 1 else many}"


def _limit_hint(k: int, limit: int | None) -> str:
    """The hint for a file that predicts the dataset's first ``k`` samples: add ``--limit k``, or, when a
    ``--limit`` was given, use ``k`` instead of it."""
    how = f"add --limit {k}" if limit is None else f"use --limit {k} instead of {limit}"
    return f"; to score the first {k} samples only, {how}"


_JSONL_FORM = "write one JSON object per line (JSONL: {\"id\": ..., \"sql\": ...})"


def _error(file: str, line: int | None, field: str | None, message: str) -> PredictionsError:
    where = file + (f", line {line}" if line is not None else "") + (f", field {field!r}" if field else "")
    return PredictionsError(f"{where}: {message}")


def read_predictions(path: str | Path, samples: Sequence[Sample], *, limit: int | None = None) -> dict[str, str]:
    """Read a predictions file (module docstring) against the dataset it predicts.

    The format is told by content: a file whose first non-blank line starts with ``{`` is JSONL, any other
    is one query per line (SQL never starts with ``{``); one whose first non-blank character is ``[`` (a JSON
    array) is refused.

    Args:
        path: the file (UTF-8).
        samples: the dataset's samples, in gold order.
        limit: the ``--limit`` the samples were cut to, or ``None``; only the hint of a count error names it.
    Returns:
        ``{sample id: SQL}`` with one entry per sample, none empty.
    Raises:
        PredictionsError: the file is empty or a JSON array; a JSONL line is not a JSON object (one object
            pretty-printed over several lines is named as such), lacks ``id`` or ``sql`` or has one of another
            type, has an empty or whitespace-only ``sql``, names an unknown id, repeats an id, or names another
            database; the ids do not cover the dataset (when they are its first N samples, the message suggests
            ``--limit N``, or ``--limit N`` instead of ``limit``); a line file holds another number of queries than
            the dataset has samples (with fewer, the same hint with the file's count), or a line's tab-separated
            database id is not its sample's. Each names the file and the line.
        OSError: the file cannot be read (a missing file is a PredictionsError naming it).

    Source: Spider's evaluation script's reading of ``predicted.txt`` (Yu et al. 2018, the released
    evaluation; one query per line, blank lines skipped, ``query<TAB>db_id`` accepted).
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a leading byte-order mark is not part of line 1
    except UnicodeDecodeError as e:
        raise _error(file, None, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except FileNotFoundError:
        raise _error(file, None, None, "no such predictions file (--predictions names a JSONL file of "
                                       "{\"id\", \"sql\"} records or one query per line)") from None
    # lines end at "\n" (or "\r\n") only, as Python's readlines() and Spider's evaluation script read them:
    # str.splitlines() also breaks at U+0085, U+2028, form feeds ..., which may stand inside a SQL string literal
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    first = next((ln.strip() for ln in lines if ln.strip()), None)
    if first is None:
        raise _error(file, None, None, f"holds no prediction; the dataset has {len(samples)} samples")
    if first.startswith("["):  # SQL never starts with "[": a JSON array, which neither format is
        raise PredictionsError(f"{file} looks like a JSON array; {_JSONL_FORM}")
    if first.startswith("{"):
        return _read_jsonl(file, lines, samples, limit)
    return _read_lines(file, lines, samples, limit)


def _spanning_object(lines: list[str], start: int) -> int | None:
    """The 1-based line on which a JSON object or array that opens on line ``start`` (1-based) ends, when it
    decodes whole and ends on a later line (a pretty-printed record); else ``None``."""
    rest = "\n".join(lines[start - 1:])
    try:
        value, end = json.JSONDecoder().raw_decode(rest, len(rest) - len(rest.lstrip()))
    except json.JSONDecodeError:
        return None
    last = start + rest.count("\n", 0, end)
    return last if isinstance(value, (dict, list)) and last > start else None


def _read_jsonl(file: str, lines: list[str], samples: Sequence[Sample], limit: int | None) -> dict[str, str]:
    by_id = {s.id: s for s in samples}
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as e:
            end = _spanning_object(lines, no)
            if end is not None:
                raise PredictionsError(f"{file} looks like one JSON object spanning lines {no}-{end}; "
                                       f"{_JSONL_FORM}") from None
            # json's own form "<msg>: line L column C (char K)" from its parts: some messages end in "at"
            # ("Unterminated string starting at"); the line is the file's, as each record is decoded alone
            raise _error(file, no, None, f"not valid JSON ({e.msg}: column {e.colno}); "
                                         "a JSONL predictions file holds one {\"id\", \"sql\"} object per line") from None
        if not isinstance(rec, dict):
            raise _error(file, no, None, f"must be a JSON object {{\"id\", \"sql\"}}, got {type(rec).__name__}")
        for fld in ("id", "sql"):
            if fld not in rec:
                raise _error(file, no, fld, "missing")
            if not isinstance(rec[fld], str):
                raise _error(file, no, fld, f"must be a string, got {type(rec[fld]).__name__}")
        if not rec["sql"].strip():  # replayed, it would be two malformed turns: a miss nobody asked for
            raise _error(file, no, "sql", "empty")
        sid = rec["id"]
        if sid not in by_id:
            example = next(iter(by_id))
            raise _error(file, no, "id", f"unknown sample id {sid!r}: not in the dataset (its ids look like {example!r})")
        if sid in seen:
            raise _error(file, no, "id", f"sample id {sid!r} repeated (first on line {seen[sid]})")
        db = rec.get("db_id")
        if db is not None and db != by_id[sid].db_id:
            raise _error(file, no, "db_id", f"{db!r} is not the database of sample {sid!r} ({by_id[sid].db_id!r})")
        seen[sid] = no
        out[sid] = rec["sql"]
    missing = [s.id for s in samples if s.id not in out]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:3]) + (", ..." if len(missing) > 3 else "")
        # the file predicts exactly the dataset's first samples: most often it was written for a --limit run
        first = len(out) > 0 and all(s.id in out for s in samples[:len(out)])
        hint = _limit_hint(len(out), limit) if first else ""
        raise _error(file, None, None, f"{_plural(len(out), 'prediction', 'predictions')} for {len(samples)} "
                                       f"samples: {_plural(len(missing), 'sample has', 'samples have')} none "
                                       f"({shown}){hint}")
    return out


def _read_lines(file: str, lines: list[str], samples: Sequence[Sample], limit: int | None) -> dict[str, str]:
    # a blank line is skipped, as Spider's evaluation script skips it: it is no (empty) prediction
    kept = [(no, raw.strip()) for no, raw in enumerate(lines, 1) if raw.strip()]
    if len(kept) != len(samples):
        skipped = len(lines) - len(kept)
        # fewer queries than samples: most often the file predicts the dataset's first samples only
        hint = _limit_hint(len(kept), limit) if 0 < len(kept) < len(samples) else ""
        blank = (f", {_plural(skipped, 'blank line', 'blank lines')} skipped: a blank line is no prediction"
                 if skipped else "")
        raise _error(file, None, None, f"{_plural(len(kept), 'query', 'queries')} (one per non-blank line{blank}) "
                                       f"for {len(samples)} samples: a line file must hold one query per sample, in "
                                       f"the dataset's gold order{hint}")
    out: dict[str, str] = {}
    for (no, line), sample in zip(kept, samples):
        if line.startswith("{"):  # SQL never starts with "{": a JSON record in a file read as one query per line
            raise _error(file, no, None, "a JSON object in a one-query-per-line file (line 1 was read as SQL); "
                                         "write every line as JSON {\"id\", \"sql\"} or none")
        sql = line
        if "\t" in line:  # Spider's "query<TAB>db_id"
            head, tail = line.rsplit("\t", 1)
            tail = tail.strip()
            if tail and " " not in tail:
                if tail != sample.db_id:
                    raise _error(file, no, "db_id", f"{tail!r} is not the database of sample {sample.id!r} "
                                                    f"({sample.db_id!r}), the sample at this position in gold order")
                sql = head.strip()
        out[sample.id] = sql
    return out


def predictions_digest(predictions: Mapping[str, str]) -> str:
    """First 12 hex digits of the SHA-256 of the predictions (sorted JSON): names their content in the run's
    agent spec, so a run folder is never resumed with another file's predictions."""
    blob = json.dumps(sorted(predictions.items()), ensure_ascii=False).encode("utf-8", "backslashreplace")
    return hashlib.sha256(blob).hexdigest()[:12]


# ----------------------------------------------------------------------------------------- EM

def _em_values(samples: Sequence[Sample], predictions: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, int]]:
    """``({sample id: ExactMatch | None}, counts)``: ``None`` where the sample has no gold SQL or the gold
    cannot be read (counted in ``gold_unreadable``); ``counts["pred_unreadable_ids"]`` lists, in gold order, the
    samples whose prediction cannot be read."""
    from ..rewards.exact_match import exact_match, foreign_keys
    from ..sql.schema import read_schema

    facts: dict[str, tuple] = {}
    out: dict[str, Any] = {}
    counts: dict[str, Any] = {"no_gold": 0, "gold_unreadable": 0, "pred_unreadable": 0, "pred_unreadable_ids": []}
    for s in samples:
        if not s.gold_sql:
            out[s.id] = None
            counts["no_gold"] += 1
            continue
        if s.db_path not in facts:
            try:
                facts[s.db_path] = (read_schema(s.db_path), foreign_keys(s.db_path))
            except (OSError, sqlite3.Error):  # no schema: columns are resolved from the queries alone
                facts[s.db_path] = (None, ())
        schema, keys = facts[s.db_path]
        try:
            verdict = exact_match(predictions[s.id], s.gold_sql, schema, keys)
        except SQLParseError:
            out[s.id] = None
            counts["gold_unreadable"] += 1
            continue
        if verdict.error is not None:
            counts["pred_unreadable"] += 1
            counts["pred_unreadable_ids"].append(s.id)
        out[s.id] = verdict
    return out, counts


def add_exact_match(metrics: dict[str, Any], trajectories: Sequence[Any], samples: Sequence[Sample],
                    predictions: Mapping[str, str]) -> dict[str, Any]:
    """Add Spider's exact-set-match to an eval ``metrics`` dict, in place, and return it.

    ``overall["EM"]`` and each breakdown row's ``metrics["EM"]`` get ``{"value", "n", "ci95"}`` over the
    trajectories the metrics averaged (the ``indistinguishable`` exclusion is the run's), with the run's
    bootstrap settings; ``exact_match`` holds each component's rate the same way, and the counts of samples
    without a gold, with a gold that cannot be read (both undefined, out of the means) and with a prediction
    that cannot be read (a miss, as Spider scores it; their sample ids in ``pred_unreadable_ids``, in gold
    order); ``exact_match["partial"]`` holds Spider's partial-match
    precision, recall (each with its n) and F1 of each component over the same trajectories
    (:func:`~textsql_clarify.rewards.exact_match.partial_match`). Every trajectory (excluded ones too) gets its own EM in
    ``scores["em"]``: 1.0 or 0.0, ``None`` where undefined (what
    :func:`~textsql_clarify.rewards.metrics.trajectory_metrics` reads as ``EM``).

    Args:
        metrics: :func:`~textsql_clarify.rewards.metrics.aggregate`'s dict of the run.
        trajectories: the run's trajectories (each has ``sample_id``, ``flags`` and the breakdown keys).
        samples: the samples played.
        predictions: ``{sample id: SQL}``.
    Returns:
        ``metrics`` (the trajectories' ``scores`` are changed in place too).
    Raises:
        KeyError: a trajectory's sample has no prediction.

    Source: Yu et al. 2018 (Spider), §Evaluation Metrics (Exact Matching); intervals as in
    :mod:`textsql_clarify.rewards.bootstrap`.
    """
    from ..rewards.bootstrap import bootstrap_cis
    from ..rewards.exact_match import COMPONENTS, partial_match
    from ..rewards.metrics import BREAKDOWNS, INDISTINGUISHABLE, _key  # _key: a trajectory's row, as aggregate keys it

    verdicts, counts = _em_values(samples, predictions)
    for t in trajectories:  # per episode, beside EX: what the report's paired difference of EM reads
        v = verdicts[t.sample_id]
        t.scores["em"] = None if v is None else float(v.match)
    boot = metrics.get("bootstrap") or {}
    settings = {"seed": boot.get("seed", 0), "n_resamples": boot.get("n_resamples", 1000)}
    keep = [t for t in trajectories
            if metrics.get("include_indistinguishable") or INDISTINGUISHABLE not in (t.flags or ())]

    def cells(trajs: Sequence[Any]) -> dict[str, dict[str, Any]]:
        cols: dict[str, list] = {"EM": []}
        for c in COMPONENTS:
            cols[c] = []
        for t in trajs:
            v = verdicts[t.sample_id]
            cols["EM"].append(None if v is None else float(v.match))
            for c in COMPONENTS:
                cols[c].append(None if v is None else float(v.components[c]))
        cis = bootstrap_cis(cols, **settings)
        out = {}
        for name, values in cols.items():
            defined = [x for x in values if x is not None]
            out[name] = {"value": sum(defined) / len(defined) if defined else None, "n": len(defined),
                         "ci95": None if cis[name] is None else [cis[name][0], cis[name][1]]}
        return out

    whole = cells(keep)
    metrics["overall"]["EM"] = whole["EM"]
    metrics["exact_match"] = {
        "source": "Yu et al. 2018 (Spider), Evaluation: exact-set-match, values ignored (docs/metrics.md)",
        "components": {c: whole[c] for c in COMPONENTS},
        **counts,
        "partial": {
            "source": "Spider evaluation.py (github.com/taoyds/spider): eval_partial_match and evaluate's partial "
                      "averages; precision over the samples whose prediction has the component, recall over those "
                      "whose gold has it, F1 = 2PR / (P + R) (docs/metrics.md)",
            "components": partial_match(v for v in (verdicts[t.sample_id] for t in keep) if v is not None),
        },
    }
    for b in BREAKDOWNS:
        rows = metrics.get(f"by_{b}") or {}
        for k, row in rows.items():
            part = [t for t in keep if _key(t, b) == k]
            row.setdefault("metrics", {})["EM"] = cells(part)["EM"]
    return metrics


def render_exact_match(metrics: Mapping[str, Any]) -> str:
    """Plain-text table of EM and its components (value, 95 % interval, n), then Spider's partial-match precision,
    recall (each with its n) and F1 per component where ``metrics`` has them, then EM and EX by difficulty, in the
    format of ``eval``'s tables (:func:`~textsql_clarify.rewards.report.grid`: a dashed rule under each header,
    no trailing spaces).

    Args:
        metrics: a dict :func:`add_exact_match` filled.
    Returns:
        The lines, joined by ``"\\n"``, every line under 100 columns.
    """
    from ..rewards.report import UNDEFINED, format_ci, format_mean, format_value, grid

    em = metrics["exact_match"]
    body = [[name, format_value(cell), format_ci(cell), str(cell["n"])]
            for name, cell in [("EM", metrics["overall"]["EM"]), *em["components"].items()]]
    lines = ["Exact-set-match (Spider, Yu et al. 2018; values ignored)"]
    lines += grid(["component", "value", "95% CI", "n"], body, [False, True, True, True])
    notes = [_plural(em[k], one, many) + label
             for k, one, many, label in (("gold_unreadable", "gold", "golds", " unreadable (left out)"),
                                         ("no_gold", "sample", "samples", " without gold SQL (left out)")) if em.get(k)]
    if em.get("pred_unreadable"):
        k = em["pred_unreadable"]
        ids = list(em.get("pred_unreadable_ids") or [])
        named = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        lines.append(_plural(k, "prediction", "predictions") + " unreadable (scored as "
                     + ("a miss; see its turn" if k == 1 else "misses; see their turns") + " in trajectories.jsonl)"
                     + (":" if named else ""))
        # the ids wrapped under the table's width: a long id must not push a line past it
        lines += textwrap.wrap(named, width=99, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
    if notes:
        lines.append("; ".join(notes))
    partial = (em.get("partial") or {}).get("components")
    if partial:
        body = [[name, format_mean(cell["precision"]), format_mean(cell["recall"]),
                 UNDEFINED if cell["f1"] is None else f"{cell['f1']:.3f}"] for name, cell in partial.items()]
        lines += ["", "Partial match (Spider evaluation.py): precision over the samples whose prediction has the",
                  "component, recall over those whose gold has it (n), F1 = 2PR / (P + R)"]
        lines += grid(["component", "precision", "recall", "F1"], body, [False, False, False, True])
    rows = metrics.get("by_difficulty") or {}
    if len(rows) > 1 or (rows and "unknown" not in rows):
        body = [["overall", format_mean(metrics["overall"]["EM"]), format_mean(metrics["overall"].get("EX"))]]
        body += [[k, format_mean(row.get("metrics", {}).get("EM")), format_mean(row.get("metrics", {}).get("EX"))]
                 for k, row in rows.items()]
        lines += [""] + grid(["difficulty", "EM", "EX"], body, [False, False, False])
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------- scoring

def score_predictions(samples: Sequence[Sample], predictions: Mapping[str, str], *, out_dir: str | Path | None = None,
                      seed: int = 0, progress: bool = True, dataset: str | None = None, name: str = "predictions",
                      **env_kwargs: Any) -> tuple[list, dict[str, Any]]:
    """Replay every prediction through the env and aggregate, with EM.

    Args:
        samples: the dataset's samples, in gold order.
        predictions: ``{sample id: SQL}``, one per sample (:func:`read_predictions`).
        out_dir: where ``trajectories.jsonl``, ``metrics.json`` and ``run.json`` go (as ``eval`` writes them;
            ``metrics.json`` and ``trajectories.jsonl`` are then rewritten with EM, all under one lock of the
            folder), or ``None``.
        seed, progress, dataset: as :func:`~textsql_clarify.baselines.rollout.evaluate`.
        name: the predictions' name in the run's agent spec (``predictions:<name>@<digest>``).
        env_kwargs: env options (``ex_mode``, ``suite_k``, ``isolation``, ...), as for ``evaluate``.
    Returns:
        ``(trajectories, metrics)``; metrics as ``evaluate`` returns them plus :func:`add_exact_match`'s fields.
    Raises:
        PredictionsError: a sample has no prediction, or an empty or whitespace-only one.
        RunFolderError: ``out_dir`` is held by another run (:func:`~textsql_clarify.baselines.run_journal.run_folder`).
        Whatever :func:`~textsql_clarify.baselines.rollout.evaluate` raises.
    """
    from .rollout import evaluate

    missing = [s.id for s in samples if s.id not in predictions]
    if missing:
        raise PredictionsError(f"{_plural(len(missing), 'sample has', 'samples have')} no prediction, "
                               f"e.g. {missing[0]!r}")
    blank = [s.id for s in samples if not predictions[s.id].strip()]
    if blank:  # replayed, an empty answer is two malformed turns, not a scored query
        raise PredictionsError(f"{_plural(len(blank), 'sample has', 'samples have')} an empty prediction, "
                               f"e.g. {blank[0]!r}")
    spec = f"predictions:{name}@{predictions_digest({s.id: predictions[s.id] for s in samples})}"
    if out_dir is None:
        trajs, metrics = evaluate(samples, ReplayAgent(predictions), seed=seed, out_dir=None, progress=progress,
                                  agent_spec=spec, dataset=dataset, **env_kwargs)
        add_exact_match(metrics, trajs, samples, predictions)
        return trajs, metrics
    from .run_journal import replace_files, run_folder

    # one lock (reentrant: evaluate's own nests in it) over the replay and EM's rewrite of metrics.json and
    # trajectories.jsonl, so no other run writes the folder between the two
    with run_folder(out_dir):
        trajs, metrics = evaluate(samples, ReplayAgent(predictions), seed=seed, out_dir=out_dir, progress=progress,
                                  agent_spec=spec, dataset=dataset, **env_kwargs)
        add_exact_match(metrics, trajs, samples, predictions)
        replace_files(out_dir, {
            "trajectories.jsonl": _with_em(Path(out_dir) / "trajectories.jsonl", trajs),
            "metrics.json": (json.dumps(metrics, indent=2, ensure_ascii=False, default=str) + "\n").encode(
                "utf-8", "backslashreplace"),
        })
    return trajs, metrics


def _with_em(path: Path, trajectories: Sequence[Any]) -> bytes:
    """``trajectories.jsonl`` as ``evaluate`` wrote it, each record's ``scores["em"]`` set from the trajectory
    of the same line (one line per trajectory, in order; every other field kept as written), as ASCII JSON lines.

    Raises:
        PredictionsError: the file's lines are not the trajectories (another count or sample id).
    """
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if len(lines) != len(trajectories):
        raise PredictionsError(f"{path}: {len(lines)} records for {len(trajectories)} episodes played")
    out = []
    for no, (line, t) in enumerate(zip(lines, trajectories), 1):
        rec = json.loads(line)
        if rec.get("sample_id") != t.sample_id:
            raise PredictionsError(f"{path}, line {no}, field 'sample_id': {rec.get('sample_id')!r}, but the episode "
                                   f"played there is {t.sample_id!r}")
        rec.setdefault("scores", {})["em"] = t.scores.get("em")
        out.append(json.dumps(rec, ensure_ascii=True) + "\n")
    return "".join(out).encode("ascii")
