"""Atomic, resumable eval run folders: the episode journal, the config fingerprint and the final-file writer.

:func:`~textsql_clarify.rollout.evaluation.evaluate` with an ``out_dir`` streams every finished episode to
``journal.jsonl`` in the run folder (a header line with the run's configuration and its fingerprint, then one
line per episode, flushed per line and fsynced per batch of finished episodes). A run killed at any moment
keeps every episode journaled before the kill; the next run of the same configuration plays only the others.
The final files (``trajectories.jsonl``, ``metrics.json``, ``timings.jsonl``, ``run.json``) are each written
whole to a temporary name in the same folder, fsynced, and only then renamed over the old ones with
``os.replace``, so a kill or a failed write leaves the earlier run's files as they were, never a truncated
one. The journal is removed once all of them are in place (``docs/platform.md``, section "Run folders").

Every episode line carries a ``digest``: SHA-256 over the canonical JSON of its record (index, sample id,
trajectory) followed by the run's fingerprint (:func:`line_digest`). On resume a line whose digest does not
match, whose index is repeated or out of range, or whose sample ids are not those of the dataset's sample at
that index is refused, naming the file, the line and the field. The digest detects accidental corruption
and hand edits (an edited reward); it is no signature, so it does not stop someone who recomputes it. The
fingerprint covers the package's own source (:func:`source_digest`), so a journal written by other code is
not resumed.

Wall-clock fields (``elapsed_s`` of each SQL turn's execution, and ``elapsed_s`` / ``budget_s`` of its
test-suite check) are moved out of ``trajectories.jsonl`` into ``timings.jsonl`` (:func:`split_timing`), so
``trajectories.jsonl`` and ``metrics.json`` of a resumed run are byte-identical to an uninterrupted run's.

Source: Python's ``os.replace`` / ``os.fsync`` docs; POSIX ``rename(2)`` and ``flock(2)``.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..errors import TextSQLClarifyError

__all__ = ["JOURNAL", "JOURNAL_FORMAT", "TIMINGS", "EvalJournal", "RunFolderError", "config_fingerprint",
           "exclusive_folder", "finished_run_differences", "line_digest", "samples_digest", "normalize_record", "replace_files", "run_config", "run_folder", "source_digest",
           "split_timing"]

JOURNAL = "journal.jsonl"
TIMINGS = "timings.jsonl"
#: Bumped when the journal's layout changes (a journal of another format is refused, as another configuration).
#: 2: every episode line carries its ``digest`` (:func:`line_digest`).
JOURNAL_FORMAT = 2
#: the package folder whose ``.py`` files :func:`source_digest` reads
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


class RunFolderError(TextSQLClarifyError, ValueError):
    """A run folder cannot be resumed or written: its journal is of another configuration, is no eval journal,
    ``resume=True`` found nothing to resume, or another eval holds the folder. The message names the folder
    and the way out (``--fresh``, or another ``--out``)."""


def _plain(value: Any) -> Any:
    """``value`` as the configuration records it: JSON values as they are, mappings and sequences item by item,
    anything else by its ``name`` attribute or class name (a simulator or judge object)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(getattr(value, "name", None) or type(value).__name__)


@functools.lru_cache(maxsize=None)
def source_digest(root: str | os.PathLike = PACKAGE_ROOT) -> str:
    """SHA-256 hex digest of a package's own source: every ``.py`` file under ``root``, in sorted order of its
    path relative to ``root`` (POSIX form), each as its relative path, its byte length and its bytes. Read once
    per process and root (cached), so a run's configuration is the code that started it.

    Args:
        root: the package folder (default: ``textsql_clarify/`` of this install).
    Returns:
        64 hex characters; equal trees (paths and bytes), equal digests, wherever they lie.
    Raises:
        OSError: a source file cannot be read.
    Source: Python ``hashlib`` docs; docs/platform.md, Run folders.
    """
    base = Path(root)
    files = sorted((f.relative_to(base).as_posix(), f) for f in base.rglob("*.py") if f.is_file())
    digest = hashlib.sha256()
    for rel, f in files:
        data = f.read_bytes()
        digest.update(f"{rel}\0{len(data)}\0".encode("utf-8"))
        digest.update(data)
    return digest.hexdigest()


def samples_digest(samples: Sequence[Any]) -> str:
    """SHA-256 hex digest of the samples played, in order: each one's ``to_dict()`` record (a plain dict as
    given) as canonical JSON, one per line. An edited dataset file under the same spec gives another digest.

    Args:
        samples: :class:`~textsql_clarify.samples.Sample` objects or their dicts.
    Returns:
        64 hex characters.
    Source: docs/platform.md, Run folders.
    """
    digest = hashlib.sha256()
    for s in samples:
        rec = s.to_dict() if callable(getattr(s, "to_dict", None)) else s
        digest.update(json.dumps(rec, sort_keys=True, ensure_ascii=True, default=str).encode("ascii"))
        digest.update(b"\n")
    return digest.hexdigest()


def run_config(samples: Sequence[Any], *, dataset: str | None, agent: str, privileged: bool, seed: int,
               backend: str, num_envs: int, include_indistinguishable: bool, env_kwargs: Mapping[str, Any],
               agent_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The configuration a journal is resumed under: everything that decides the episodes and the metrics.

    Args:
        samples: the samples played, in order (after any limit); each is recorded by id and all of them by a
            SHA-256 digest of their ``to_dict()`` records, so an edited dataset file is another configuration.
        dataset: the dataset spec (the CLI's ``--dataset``); agent: the agent spec or name; privileged: whether
            the agent sees the gold; seed: reset seed of episode 0; backend: ``local`` | ``ray``; num_envs: envs
            played at once; include_indistinguishable: the metrics option.
        env_kwargs: the env options (simulator, preset, budget, category mode, protocol, isolation, EX mode ...).
        agent_options: options the agent was built with (the CLI's ``--max-new-tokens``, ``--device``).
    Returns:
        A JSON-ready dict; :func:`config_fingerprint` digests it. The package version and the digest of its
        source (:func:`source_digest`, key ``code``) are part of it, so a journal written by another version or
        by changed code is not resumed.
    """
    from .. import __version__

    return {"format": JOURNAL_FORMAT, "version": __version__, "code": source_digest(), "dataset": dataset, "n_samples": len(samples),
            "samples_sha256": samples_digest(samples), "agent": agent, "privileged": bool(privileged),
            "agent_options": _plain(dict(agent_options or {})), "seed": int(seed), "backend": backend,
            "num_envs": int(num_envs), "include_indistinguishable": bool(include_indistinguishable),
            "env": _plain(dict(sorted(env_kwargs.items())))}


def config_fingerprint(config: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of ``config`` as canonical JSON (sorted keys, ASCII): equal configurations, equal
    fingerprints, in any process (never Python's ``hash()``, which is salted per process)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()


def _canonical(value: Any) -> bytes:
    """``value`` as canonical JSON bytes: sorted keys, ASCII escapes, no spaces."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def line_digest(record: Mapping[str, Any], fingerprint: str) -> str:
    """The ``digest`` of one journal episode line: SHA-256 hex of the canonical JSON (sorted keys, ASCII, no
    spaces) of ``record`` without its ``digest`` key, a newline, then the run's ``fingerprint``.

    Binding the fingerprint in means a line copied from another run's journal does not match. This detects
    accidental corruption and hand edits; it is not a signature: whoever recomputes it can forge a line.

    Args:
        record: ``{"index", "sample_id", "trajectory"}`` (plain JSON values; a ``digest`` key is ignored).
        fingerprint: :func:`config_fingerprint` of the run's configuration.
    Returns:
        64 hex characters.
    Source: Python ``hashlib`` and ``json`` docs (``sort_keys``, ``separators``); docs/platform.md, Run folders.
    """
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(_canonical(body) + b"\n" + fingerprint.encode("ascii")).hexdigest()


def normalize_record(trajectory: Any) -> dict[str, Any]:
    """A trajectory's ``to_dict()`` record as it reads back from JSON (tuples as lists, other objects as their
    ``str``): the form both a fresh and a journaled episode take, so the files written from either are equal."""
    return json.loads(json.dumps(trajectory.to_dict(), ensure_ascii=True, default=str))


def split_timing(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a trajectory record into its wall-clock-free part and its timings.

    Args:
        record: a :func:`normalize_record` dict (left unchanged).
    Returns:
        ``(rest, timing)``: ``rest`` is ``record`` without ``turns[*].execution.elapsed_s`` and
        ``turns[*].execution.suite.elapsed_s`` / ``budget_s`` (a line of ``trajectories.jsonl``); ``timing`` is
        ``{"sample_id", "turns": [{"index", "elapsed_s"[, "suite_elapsed_s", "suite_budget_s"]}]}`` over the
        turns that had them, in seconds (a line of ``timings.jsonl``).
    """
    rest = json.loads(json.dumps(record))  # a deep copy of plain JSON values
    turns = []
    for turn in rest.get("turns") or []:
        ex = turn.get("execution")
        if not isinstance(ex, dict):
            continue
        entry: dict[str, Any] = {"index": turn.get("index")}
        if "elapsed_s" in ex:
            entry["elapsed_s"] = ex.pop("elapsed_s")
        suite = ex.get("suite")
        if isinstance(suite, dict):
            for key in ("elapsed_s", "budget_s"):
                if key in suite:
                    entry[f"suite_{key}"] = suite.pop(key)
        if len(entry) > 1:
            turns.append(entry)
    return rest, {"sample_id": rest.get("sample_id"), "turns": turns}


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The top-level keys where two configurations differ, as ``key: old -> new`` (values cut to 60 chars)."""
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    cut = lambda v: (json.dumps(v, ensure_ascii=True)[:60])  # noqa: E731 - a one-line formatter
    return "; ".join(f"{k}: {cut(old.get(k))} -> {cut(new.get(k))}" for k in keys) or "the fingerprint"


class EvalJournal:
    """The append-only episode journal of one run folder (``journal.jsonl``).

    Line 1 is ``{"header": {"fingerprint": sha256, "config": run_config(...)}}``; every other line is
    ``{"index": i, "sample_id": id, "trajectory": record, "digest": line_digest(...)}`` for one finished episode,
    written with ASCII escapes. A last line without its newline (cut by a kill or a crash mid-write) is dropped
    (the file is truncated to the line before it) and that episode runs again. Any whole line that is not such
    an episode of this run is refused, since it means the file was damaged or edited: a line that is no JSON
    object, an ``index`` repeated or outside ``0 .. n-1``, a ``sample_id`` (or the trajectory's ``sample_id``)
    other than the dataset's sample at that index, or a ``digest`` that does not match.

    Attributes:
        path: the journal file. done: episode index -> :func:`normalize_record` dict, of every episode
            journaled (read back or added). resumed: how many were read back from an earlier run.

    Args:
        out_dir: the run folder (it exists). config: :func:`run_config`'s dict. sample_ids: the ids of the
            samples, in episode order. resume: ``None`` (default): continue a journal of the same configuration,
            start one where there is none, refuse one of another configuration; ``True``: the same, but
            a folder without a journal is refused too; ``False``: start over (any journal is replaced).
    Raises:
        RunFolderError: a journal of another configuration, format or code (a message that says to pass
            ``--fresh``), a first line that is no eval journal header, a damaged or edited episode line (naming
            the file, the line number and the field), all unless ``resume=False``; or ``resume=True`` and no
            journal. A refused journal is left as it was.
    """

    def __init__(self, out_dir: str | os.PathLike, config: Mapping[str, Any], sample_ids: Sequence[str],
                 resume: bool | None = None):
        self.path = Path(out_dir) / JOURNAL
        self.config = dict(config)
        self.fingerprint = config_fingerprint(self.config)
        self.done: dict[int, dict[str, Any]] = {}
        self.resumed = 0
        self._ids = list(sample_ids)
        exists = self.path.is_file() and self.path.stat().st_size > 0
        if resume is True and not exists:
            finished = (self.path.parent / "run.json").is_file()
            raise RunFolderError(f"{self.path.parent}: nothing to resume (no {JOURNAL}); " + (
                "its run finished: run without --resume to play it again, or give another --out folder" if finished
                else "run without --resume to start the run"))
        good = self._read() if exists and resume is not False else 0
        if good:
            with open(self.path, "r+b") as fh:
                fh.truncate(good)  # drop a line cut by a kill, so the next line starts clean
            self.fh = open(self.path, "a", encoding="ascii", newline="\n")
            self.resumed = len(self.done)
        else:
            if self.path.is_symlink():  # a fresh journal is a new file here, never written through a link
                self.path.unlink()
            self.fh = open(self.path, "w", encoding="ascii", newline="\n")
            self._line({"header": {"fingerprint": self.fingerprint, "config": self.config}})
            self.sync()

    def _refuse(self, line: int, field: str | None, why: str) -> RunFolderError:
        """The error for a damaged or edited episode line ``line`` (1-based) of the journal."""
        where = f"{self.path}: line {line}" + (f": field {field!r}" if field else "")
        return RunFolderError(f"{where}: {why}; the journal was damaged or edited, so it is not resumed; use "
                              f"--fresh (resume=False) to discard it and start over, or another --out folder")

    def _header(self, rec: Any) -> None:
        """Check line 1: an eval journal header of this configuration. Raises RunFolderError."""
        header = rec.get("header") if isinstance(rec, dict) else None
        if not isinstance(header, dict) or not isinstance(header.get("config"), dict):
            raise RunFolderError(f"{self.path}: line 1 is not an eval journal header; use --fresh "
                                 f"(resume=False) to start over, or another --out folder")
        if header.get("fingerprint") == self.fingerprint:
            return
        old = header["config"]
        if old.get("code") != self.config.get("code") and old.get("format") == self.config.get("format"):
            raise RunFolderError(
                f"{self.path.parent} holds the journal of an unfinished run made by other code: the package's "
                f"source changed since it was written (code: {str(old.get('code'))[:12]} -> "
                f"{str(self.config.get('code'))[:12]}), so its episodes may not be what this code plays; pass "
                f"--fresh (resume=False) to discard it and start over, or give another --out folder")
        raise RunFolderError(
            f"{self.path.parent} holds the journal of an unfinished run of another configuration "
            f"({_differences(old, self.config)}); use --fresh (resume=False) to discard it "
            f"and start over, or another --out folder")

    def _episode(self, rec: Any, line: int) -> int:
        """Check one episode line (1-based ``line``) and return its index. Raises RunFolderError."""
        if not isinstance(rec, dict):
            raise self._refuse(line, None, "not a JSON object")
        i, n = rec.get("index"), len(self._ids)
        if isinstance(i, bool) or not isinstance(i, int):
            raise self._refuse(line, "index", f"{i!r} is not an episode index")
        if not 0 <= i < n:
            raise self._refuse(line, "index", f"{i} is out of range (this run has {n} episodes, 0 .. {n - 1})")
        if i in self.done:
            raise self._refuse(line, "index", f"episode {i} is journaled twice")
        if rec.get("sample_id") != self._ids[i]:
            raise self._refuse(line, "sample_id", f"{rec.get('sample_id')!r} is not the dataset's sample at index "
                                                  f"{i} ({self._ids[i]!r})")
        traj = rec.get("trajectory")
        if not isinstance(traj, dict):
            raise self._refuse(line, "trajectory", "not a JSON object")
        if traj.get("sample_id") != self._ids[i]:
            raise self._refuse(line, "trajectory.sample_id", f"{traj.get('sample_id')!r} is not the dataset's "
                                                             f"sample at index {i} ({self._ids[i]!r})")
        if not isinstance(rec.get("digest"), str) or rec["digest"] != line_digest(rec, self.fingerprint):
            raise self._refuse(line, "digest", "does not match the line's content (sha256 of the record and the "
                                               "run's fingerprint)")
        return i

    def _read(self) -> int:
        """Load the finished episodes of the journal into :attr:`done`; return the byte length up to its last
        whole line (0 when not even the header line is whole). Raises RunFolderError (see the class doc)."""
        data = self.path.read_bytes()
        pos = 0
        line = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            if end < 0:
                break  # the last line, cut by a kill or a crash mid-write: dropped, its episode played again
            line += 1
            try:
                rec = json.loads(data[pos:end].decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                if line == 1:
                    raise RunFolderError(f"{self.path}: line 1 is not an eval journal header; use --fresh "
                                         f"(resume=False) to start over, or another --out folder") from None
                raise self._refuse(line, None, "not a JSON line") from None
            if line == 1:
                self._header(rec)
            else:
                self.done[self._episode(rec, line)] = rec["trajectory"]
            pos = end + 1
        return pos

    def _line(self, rec: Mapping[str, Any]) -> None:
        self.fh.write(json.dumps(rec, ensure_ascii=True) + "\n")
        self.fh.flush()  # in the OS's hands: a killed process loses nothing written here

    def add(self, index: int, trajectory: Any) -> dict[str, Any]:
        """Journal episode ``index`` (a :class:`~textsql_clarify.trajectory.Trajectory`), flushed; return its
        :func:`normalize_record` dict. Call :meth:`sync` at the end of each batch."""
        rec = normalize_record(trajectory)
        line = {"index": int(index), "sample_id": self._ids[index], "trajectory": rec}
        self._line({**line, "digest": line_digest(line, self.fingerprint)})
        self.done[int(index)] = rec
        return rec

    def sync(self) -> None:
        """fsync the journal: the batch written so far survives a crash of the machine, not only of the process."""
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        """Sync and close the file (idempotent)."""
        if not self.fh.closed:
            self.sync()
            self.fh.close()

    def remove(self) -> None:
        """Close and delete the journal (after the run's final files are all in place)."""
        self.close()
        self.path.unlink(missing_ok=True)


def _write_all(fh: Any, data: bytes) -> None:
    """Write ``data`` to the open binary file ``fh`` (one seam, so tests can fail a write half-way)."""
    fh.write(data)


def file_mode() -> int:
    """The permission bits ``open(path, "w")`` gives a new file under the process's umask (``0o666 & ~umask``)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def replace_files(out_dir: str | os.PathLike, files: Mapping[str, bytes]) -> None:
    """Write every ``name -> bytes`` of ``files`` into ``out_dir`` atomically: each to a temporary file in the
    same folder, flushed and fsynced, all of them before the first ``os.replace`` onto its name; then the
    folder is fsynced. A failure while writing leaves every old file as it was and removes the temporaries;
    a kill between two renames leaves whole files only (some new, some old), and the journal, still there,
    lets the next run of the configuration write them all again.

    Raises:
        OSError: a temporary file cannot be written or renamed (the old files are then unchanged, except those
            already renamed over).
    """
    out = Path(out_dir)
    tmps: list[tuple[str, Path]] = []
    try:
        for name, data in files.items():
            fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
            tmps.append((name, Path(tmp)))
            os.fchmod(fd, file_mode())  # mkstemp makes 0600; a run's files get the mode open() would give them
            with os.fdopen(fd, "wb") as fh:
                _write_all(fh, data)
                fh.flush()
                os.fsync(fh.fileno())
        for name, tmp in tmps:
            os.replace(tmp, out / name)
    except BaseException:
        for _, tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the renames themselves made durable; not every platform opens folders
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: the ``run.json`` fields that decide a run's result: a finished run is only replaced by a run equal in all of them
RESULT_FIELDS = ("dataset", "n_samples", "samples_sha256", "agent", "seed", "simulator", "reward_preset",
                 "max_clarifications", "category_mode", "protocol", "ex_mode", "suite_k")


def finished_run_differences(out_dir: str | os.PathLike, info: Mapping[str, Any]) -> str | None:
    """How a new run differs from the finished run in ``out_dir``, if it would overwrite one of another result.

    A finished run leaves ``run.json`` and no journal (an unfinished one keeps its journal, whose fingerprint
    :class:`EvalJournal` checks). Its :data:`RESULT_FIELDS` are compared with ``info``'s (the new run's
    ``run.json``, :func:`~textsql_clarify.rollout.evaluation.run_info`); a field one of the two lacks (a run.json of
    an older version) is not compared. Fields that do not change the result (isolation, backend, num_envs, the
    version) may differ.

    Args:
        out_dir: the run folder (it may not exist). info: the new run's ``run.json`` dict.
    Returns:
        ``None`` when there is no finished run, or it is of the same result fields; else the differing fields as
        ``field: old -> new; ...``.
    Source: docs/platform.md, Run folders.
    """
    out = Path(out_dir)
    journal = out / JOURNAL
    if journal.is_file() and journal.stat().st_size > 0:
        return None  # an unfinished run: its journal's configuration decides
    try:
        old = json.loads((out / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no finished run here (or none this version can read)
    if not isinstance(old, dict):
        return None
    fields = [k for k in RESULT_FIELDS if k in old and k in info]
    diff = _differences({k: old[k] for k in fields}, {k: info[k] for k in fields})
    return None if all(old[k] == info[k] for k in fields) else diff


#: folders whose lock this process holds: (st_dev, st_ino) -> [holding thread's ident, nesting depth]
_HELD: dict[tuple[int, int], list[int]] = {}
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def exclusive_folder(out_dir: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock (``flock``) on the run folder while a run writes it, so a second eval on
    the same folder is refused instead of interleaving one journal (no lock where ``fcntl`` is missing).

    The lock is reentrant for the thread that holds it: a nested ``exclusive_folder`` on the same folder (a
    ``score`` that holds the folder around the eval it runs and the exact-match it adds after) passes through;
    another thread or process is refused.

    Raises:
        RunFolderError: another process, or another thread of this one, holds the folder's lock.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        key, me = (st.st_dev, st.st_ino), threading.get_ident()
        with _HELD_LOCK:
            held = _HELD.get(key)
            if held is not None and held[0] == me:
                held[1] += 1
        if held is not None and held[0] == me:
            try:
                yield
            finally:
                with _HELD_LOCK:
                    held[1] -= 1
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RunFolderError(f"another eval is writing to {out_dir} (it holds the folder's lock); wait for it "
                                 f"to end, or give another --out folder") from None
        with _HELD_LOCK:
            _HELD[key] = [me, 1]
        try:
            yield
        finally:
            with _HELD_LOCK:
                _HELD.pop(key, None)
    finally:
        os.close(fd)


@contextlib.contextmanager
def run_folder(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Make the run folder (and missing parents) and hold its :func:`exclusive_folder` lock for a whole command;
    if the body raises, the folders this call made are removed again while empty, so a failed command leaves
    no empty folder behind (a folder that held something is kept).

    Yields:
        The folder as a ``Path``.
    Raises:
        FileExistsError: ``out_dir`` exists and is not a folder. RunFolderError: the folder is held elsewhere.
    Source: POSIX ``flock(2)``, ``rmdir(2)``; docs/platform.md, Run folders.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output folder {out_dir} exists and is not a folder")
    created = [p for p in (out, *out.parents) if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive_folder(out):
            yield out
    except BaseException:
        for p in created:  # innermost first; stops at the first folder that is not empty
            try:
                p.rmdir()
            except OSError:
                break
        raise
