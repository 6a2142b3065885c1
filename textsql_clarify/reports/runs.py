"""Load run folders for ``textsql-clarify report``.

A run folder is what ``textsql-clarify eval --out DIR`` (:func:`~textsql_clarify.baselines.rollout.evaluate`)
writes: ``trajectories.jsonl`` (one :class:`~textsql_clarify.trajectory.Trajectory` per line), ``metrics.json``
(:func:`~textsql_clarify.rewards.metrics.aggregate`'s dict plus a ``run`` block) and ``run.json`` (what ran:
agent, dataset, seed, simulator ...; :func:`~textsql_clarify.baselines.rollout.run_info`). Older folders may
lack ``run.json`` (the run is then named from ``metrics.json``'s ``run`` block or the folder's name) or
intervals in ``metrics.json`` (the metrics are then recomputed from the trajectories, which gives them).

Every problem raises :class:`ReportError` naming the file, the line (for ``trajectories.jsonl``) and the field.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from ..errors import TextSQLClarifyError
from ..text import loads_valid_unicode
from ..trajectory import Trajectory, Turn

TRAJECTORIES = "trajectories.jsonl"
METRICS = "metrics.json"
RUN_INFO = "run.json"

_TRAJ_FIELDS = {f.name for f in fields(Trajectory)}
_TURN_FIELDS = {f.name for f in fields(Turn)}
_TRAJ_REQUIRED = ("sample_id", "db_id", "group", "subcategory")
_TURN_REQUIRED = ("index", "phase", "action_type", "content")


#: the agent spec of a predictions replay (``textsql-clarify score``): ``predictions:<file stem>@<12 hex digits>``
#: (:func:`~textsql_clarify.baselines.predictions.score_predictions`; the digest names the predictions' content)
_PREDICTIONS_SPEC = re.compile(r"predictions:(?P<stem>.+)@[0-9a-f]{12}")


def display_name(agent: str) -> str:
    """A run's display name from its agent spec: a predictions replay's file stem
    (``predictions:dev_pred@f465b5029c73`` -> ``dev_pred``), any other spec as it is.

    Args:
        agent: the agent spec (``run.json``'s ``agent``).
    Returns:
        The name (:func:`load_runs` still makes names unique).
    """
    m = _PREDICTIONS_SPEC.fullmatch(agent)
    return m.group("stem") if m else agent


class ReportError(TextSQLClarifyError, ValueError):
    """A run folder or one of its files cannot be read as a run; the message names the file, line and field."""


@dataclass
class Run:
    """One evaluated run, as the report reads it.

    Attributes:
        path: the run folder.
        name: display name, unique among the runs of one report (:func:`load_runs`).
        info: ``run.json`` (``{}`` when the folder has none).
        metrics: ``metrics.json``, or :func:`~textsql_clarify.rewards.metrics.aggregate` of the trajectories
            where the file is absent or holds no intervals (``metrics_source`` says which).
        trajectories: every line of ``trajectories.jsonl``, in order.
        metrics_source: ``"file"`` | ``"recomputed"``.
        per_sample: per-sample metric values, filled on first use by
            :func:`~textsql_clarify.reports.leaderboard.per_sample_values`.
    """

    path: Path
    name: str
    info: dict[str, Any]
    metrics: dict[str, Any]
    trajectories: list[Trajectory] = field(default_factory=list)
    metrics_source: str = "file"
    per_sample: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def agent(self) -> str:
        """The agent spec (``run.json``, else ``metrics.json``'s run block, else the folder name)."""
        return str(self.info.get("agent") or (self.metrics.get("run") or {}).get("agent") or self.path.name)

    @property
    def replay(self) -> bool:
        """Whether the run is a predictions replay (``textsql-clarify score``), told from its own record: the
        agent spec in ``run.json`` (else ``metrics.json``'s run block) is ``predictions:<stem>@<digest>``
        (:func:`~textsql_clarify.baselines.predictions.score_predictions`). Every episode of such a run is one SQL
        turn, so its agent-behaviour metrics (AR, turns, ...) describe no agent (docs/metrics.md, "Scoring a
        predictions file")."""
        return _PREDICTIONS_SPEC.fullmatch(self.agent) is not None

    @property
    def privileged(self) -> bool:
        """Whether the agent was given each episode's gold (the oracle): its scores are no model's."""
        return bool(self.info.get("privileged", (self.metrics.get("run") or {}).get("privileged", False)))


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text ({e})") from e
    try:
        return loads_valid_unicode(text)  # a lone surrogate (an older run's) reads as U+FFFD
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}:{e.lineno}: not valid JSON: {e.msg} (column {e.colno})") from e


def _trajectory(path: Path, line: int, rec: Any) -> Trajectory:
    """One ``trajectories.jsonl`` record as a validated :class:`Trajectory`; raises :class:`ReportError`."""
    from ..rewards.metrics import MetricsError, _validate

    where = f"{path}:{line}"
    if not isinstance(rec, dict):
        raise ReportError(f"{where}: field '<record>': expected a JSON object (one trajectory), got {type(rec).__name__}")
    for name in _TRAJ_REQUIRED:
        if name not in rec:
            raise ReportError(f"{where}: field '{name}': missing (is this a trajectories.jsonl of textsql-clarify eval?)")
    unknown = sorted(set(rec) - _TRAJ_FIELDS)
    if unknown:
        raise ReportError(f"{where}: field '{unknown[0]}': not a trajectory field (written by a newer version?)")
    turns = rec.get("turns", [])
    if not isinstance(turns, list):
        raise ReportError(f"{where}: field 'turns': expected a list, got {type(turns).__name__}")
    for k, t in enumerate(turns):
        if not isinstance(t, dict):
            raise ReportError(f"{where}: field 'turns[{k}]': expected an object, got {type(t).__name__}")
        missing = [n for n in _TURN_REQUIRED if n not in t]
        if missing:
            raise ReportError(f"{where}: field 'turns[{k}].{missing[0]}': missing")
        extra = sorted(set(t) - _TURN_FIELDS)
        if extra:
            raise ReportError(f"{where}: field 'turns[{k}].{extra[0]}': not a turn field")
        if not isinstance(t.get("reward_components", {}), dict):
            raise ReportError(f"{where}: field 'turns[{k}].reward_components': expected an object")
    if not isinstance(rec.get("question", ""), str):
        raise ReportError(f"{where}: field 'question': expected a string, got {type(rec['question']).__name__}")
    traj = Trajectory.from_dict(rec)
    try:
        _validate(line - 1, traj)
    except MetricsError as e:  # "trajectories[i] (sample ...): field 'x': ..." -> the file and line
        msg = str(e).split(": ", 1)[1] if str(e).startswith("trajectories[") else str(e)
        raise ReportError(f"{where}: {msg}") from e
    return traj


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Read and validate a ``trajectories.jsonl`` (blank lines are skipped).

    Args:
        path: the file.
    Returns:
        The trajectories, in file order.
    Raises:
        ReportError: the file is missing, a line is not JSON, a record is not a valid trajectory, or a sample
            is played twice under one protocol (names the line and field).
    """
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"{path}: not found (a run folder holds the {TRAJECTORIES} that textsql-clarify eval "
                          f"--out writes)")
    out: list[Trajectory] = []
    seen: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8", errors="strict") as fh:
        try:
            for line, text in enumerate(fh, 1):
                if not text.strip():
                    continue
                try:
                    rec = loads_valid_unicode(text)
                except json.JSONDecodeError as e:
                    raise ReportError(f"{path}:{line}: not valid JSON: {e.msg} (column {e.colno})") from e
                traj = _trajectory(path, line, rec)
                key = (traj.sample_id, traj.protocol)
                if key in seen:  # the paired differences go per sample: a second episode would be dropped
                    raise ReportError(f"{path}:{line}: field 'sample_id': {traj.sample_id!r} (protocol "
                                      f"{traj.protocol}) was played already on line {seen[key]}; a run plays each "
                                      f"sample once per protocol (runs appended to one file?)")
                seen[key] = line
                out.append(traj)
        except UnicodeDecodeError as e:
            raise ReportError(f"{path}: not UTF-8 text ({e})") from e
    if not out:
        raise ReportError(f"{path}: holds no trajectory")
    return out


def _has_intervals(metrics: dict) -> bool:
    """True when the overall means carry ``ci95`` (metrics.json written with bootstrap intervals)."""
    overall = metrics.get("overall")
    return isinstance(overall, dict) and any(isinstance(m, dict) and "ci95" in m for m in overall.values())


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_numbers(path: Path, node: Any, where: str) -> None:
    """Every number in ``node`` finite (``NaN``/``Infinity`` are no metric value), and every metric entry (an
    object with ``value`` and ``n``) well typed: ``value`` a finite number or null, ``n`` a non-negative integer,
    ``ci95`` absent, null or two finite numbers; raises :class:`ReportError` naming the field."""
    if isinstance(node, float) and not math.isfinite(node):
        raise ReportError(f"{path}: field '{where}': {node!r} is not a metric value (expected a finite number or null)")
    if isinstance(node, list):
        for k, v in enumerate(node):
            _check_numbers(path, v, f"{where}[{k}]")
        return
    if not isinstance(node, dict):
        return
    if "value" in node and "n" in node:
        if node["value"] is not None and not _number(node["value"]):
            raise ReportError(f"{path}: field '{where}.value': expected a finite number or null, got {node['value']!r}")
        if isinstance(node["n"], bool) or not isinstance(node["n"], int) or node["n"] < 0:
            raise ReportError(f"{path}: field '{where}.n': expected a non-negative integer, got {node['n']!r}")
        ci = node.get("ci95")
        if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(_number(c) for c in ci)):
            raise ReportError(f"{path}: field '{where}.ci95': expected null or [lo, hi] (finite numbers), got {ci!r}")
    for k, v in node.items():
        _check_numbers(path, v, f"{where}.{k}" if where else str(k))


def _check_metrics(path: Path, metrics: Any, n_lines: int) -> None:
    if not isinstance(metrics, dict):
        raise ReportError(f"{path}: field '<file>': expected a JSON object, got {type(metrics).__name__}")
    for key in ("overall", "n_trajectories"):
        if key not in metrics:
            raise ReportError(f"{path}: field '{key}': missing (is this a metrics.json of textsql-clarify eval?)")
    if not isinstance(metrics["overall"], dict):
        raise ReportError(f"{path}: field 'overall': expected an object of metrics")
    for name, m in metrics["overall"].items():
        if not isinstance(m, dict) or "value" not in m or "n" not in m:
            raise ReportError(f"{path}: field 'overall.{name}': expected {{\"value\", \"n\"}}, got {m!r}")
    for key in ("n_trajectories", "excluded_indistinguishable"):
        v = metrics.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ReportError(f"{path}: field '{key}': expected a non-negative integer, got {v!r}")
    if not isinstance(metrics.get("run", {}), dict):
        raise ReportError(f"{path}: field 'run': expected an object, got {metrics['run']!r}")
    _check_numbers(path, metrics, "")
    given = metrics["n_trajectories"] + metrics.get("excluded_indistinguishable", 0)
    if given != n_lines:
        raise ReportError(f"{path}: field 'n_trajectories': counts {given} trajectories but {TRAJECTORIES} beside it "
                          f"holds {n_lines} (written by different runs?); rerun eval or delete {METRICS} to have it "
                          f"recomputed")


def load_run(path: str | Path) -> Run:
    """Read one run folder.

    Args:
        path: a folder that ``textsql-clarify eval --out`` wrote.
    Returns:
        The :class:`Run` (its ``name`` is :func:`display_name` of the agent spec; :func:`load_runs` makes names
        unique).
    Raises:
        ReportError: the folder is missing, or a file in it is malformed (names the file, line and field).
    """
    from ..rewards.metrics import aggregate

    p = Path(path)
    if not p.exists():
        raise ReportError(f"run folder {p} does not exist")
    if not p.is_dir():
        raise ReportError(f"{p} is not a folder (give the folder that textsql-clarify eval --out wrote)")
    trajs = read_trajectories(p / TRAJECTORIES)
    info: dict[str, Any] = {}
    if (p / RUN_INFO).is_file():
        info = _read_json(p / RUN_INFO)
        if not isinstance(info, dict):
            raise ReportError(f"{p / RUN_INFO}: field '<file>': expected a JSON object, got {type(info).__name__}")
    metrics: dict[str, Any] | None = None
    source = "recomputed"
    if (p / METRICS).is_file():
        metrics = _read_json(p / METRICS)
        _check_metrics(p / METRICS, metrics, len(trajs))
        source = "file"
    if metrics is None or not _has_intervals(metrics):
        include = bool((metrics or {}).get("include_indistinguishable", False))
        run_block = (metrics or {}).get("run") or {"agent": info.get("agent") or p.name,
                                                   "privileged": bool(info.get("privileged", False))}
        metrics = {**aggregate(trajs, include_indistinguishable=include), "run": run_block}
        source = "recomputed"
    run = Run(path=p, name="", info=info, metrics=metrics, trajectories=trajs, metrics_source=source)
    run.name = display_name(run.agent)
    return run


def load_runs(paths: Sequence[str | Path]) -> list[Run]:
    """Read several run folders and give each a unique display name.

    A name is the agent spec (a predictions replay's: the predictions file stem); where two runs share it, each gets its folder name after it
    (``oracle (embedded-oracle-rule)``), and a number where that is not enough.

    Args:
        paths: run folders, in report order (the first is the reference of the paired differences).
    Returns:
        The runs, in the given order.
    Raises:
        ReportError: no folder given, or as :func:`load_run`.
    """
    if not paths:
        raise ReportError("no run folder given")
    runs = [load_run(p) for p in paths]
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
    for r in runs:
        if counts[r.name] > 1:
            r.name = f"{r.name} ({r.path.name})"
    seen: dict[str, int] = {}
    for r in runs:
        if r.name in seen:
            seen[r.name] += 1
            r.name = f"{r.name} #{seen[r.name]}"
        else:
            seen[r.name] = 1
    return runs
