"""CoSQL loader: ``cosql:<dir>:<spider root>``, CoSQL's published state-tracking file, one sample per turn.

CoSQL (Yu et al., EMNLP 2019) ships ``sql_state_tracking/cosql_dev.json`` (and ``cosql_train.json``): a
JSON list of interactions ``{database_id, interaction: [{utterance, utterance_toks, query, sql}, ...],
final: {utterance, query}}``. ``query`` is the gold SQL of the turn, written by a tokeniser (``> =``,
``! =``, ``Count ( * )``); ``sql`` is Spider's parsed form of it. Where the wizard asked a clarification
and the user answered it, the turn's ``utterance`` joins the three with ``" | "``: ``"please list the
singers | did you mean list their names? | yes"`` (CoSQL's DST task gives the clarification as part of
the context). The file is read whole (a JSON list; CoSQL's dev file is not in ``../shared/data``, so
its size is not measured here).

``<dir>`` is the CoSQL folder (holding ``sql_state_tracking/cosql_dev.json``), the
``sql_state_tracking`` folder itself (``cosql_dev.json`` or ``dev.json``), or the JSON file. The
databases are the Spider ones: ``<spider root>/database/<db_id>/<db_id>.sqlite`` (CoSQL dev is over the
Spider dev databases).

Mapping (``docs/datasets.md``, section CoSQL):

* each turn's utterance is expanded into dialogue turns: user question, then (for a ``" | "`` turn)
  system clarification and user answer, pairs repeated, then the system's SQL;
* a plain turn is an ``answerable`` sample (``answerable_without_evidence``): question = utterance,
  gold = the repaired ``query``, earlier turns as ``dialogue``;
* a ``" | "`` turn whose system part answers instead of asking (:func:`.dialogue_common.asks`: no ``?``, no
  question opening; ``"how much bonus was Employee with ID 1 awarded? | <the answer> | <a new question>"``,
  ``cosql-dev-239-2``) is question, answer and new question: one ``answerable`` follow-up sample for the new
  question (its gold is the turn's ``query``), with the answered exchange in its dialogue
  (``provenance["answered_turn"]``, ``["system_answers"]``); no ambiguous sample;
* a ``" | "`` turn whose system parts ask gives an ``ambiguous`` sample (question = its first part; hidden
  knowledge = the answers rewritten as stand-alone statements, :func:`.dialogue_common.standalone_knowledge`;
  subcategory ``None``: CoSQL does not say which ABISS ambiguity; no ``interpretations``: one reading is
  given, so ``indistinguishable`` cannot be computed) and an ``answerable`` follow-up sample for the
  user's last answer, with the clarification in its dialogue. A reply that carries no content ("I mean both."
  to a yes/no question) marks the sample ``provenance["hidden_knowledge_contentless"]`` and is listed in
  :attr:`CoSQLRead.contentless` (:func:`load_cosql` warns); "both" to "X or Y?" names both alternatives;
* difficulty: Spider's hardness of the turn's ``sql`` (``unknown`` without a usable one);
* the gold is repaired (:func:`.dialogue_common.repair_tokenised_sql`); the repairs are listed in
  ``provenance["sql_repairs"]``, and a gold sqlglot still cannot parse is marked
  ``provenance["sql_parse_error"]`` (the load-time validator flags it when it fails to execute).

This file holds only turns that have SQL: CoSQL's unanswerable and chit-chat turns are in its dialogue-act
files, which this loader does not read, so CoSQL gives no unanswerable samples here.

Ids ``cosql-<split>-<interaction index>-<turn index>`` (turn index in the expanded dialogue, as in MMSQL);
provenance ``{source, file, record, interaction, turn, utterance}``.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DatasetError, RecordProblem
from ..samples import Sample, sample_from_dict
from .dialogue_common import CONTENTLESS, asks, repair_tokenised_sql, sql_parses, standalone_knowledge, warn_skipped
from .spider_hardness import spider_hardness

__all__ = ["load_cosql", "read_cosql", "CoSQLRead", "find_cosql_file", "load_from_spec"]

_FORM = "cosql:<dir>:<spider root>"
#: where a CoSQL state-tracking file is looked for under the given folder, in order.
CANDIDATES = ("sql_state_tracking/cosql_dev.json", "cosql_dev.json", "dev.json")


@dataclass(frozen=True)
class CoSQLRead:
    """What :func:`read_cosql` found: the samples, the turns it skipped (with why), and the file it read."""

    samples: list[Sample]
    skipped: list[RecordProblem]
    file: Path
    #: ambiguous samples whose hidden knowledge, written from the user's reply, carries no content
    #: (:data:`.dialogue_common.CONTENTLESS`), each with file, record, field and why
    contentless: list[RecordProblem] = dataclasses.field(default_factory=list)


def find_cosql_file(path: str | os.PathLike) -> Path:
    """The state-tracking JSON file that ``path`` names: the file itself, or the first of
    :data:`CANDIDATES` under the folder.

    Raises:
        DatasetError: nothing there.
    """
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        for c in CANDIDATES:
            if (p / c).is_file():
                return p / c
        raise DatasetError(f"no CoSQL state-tracking file under {p} (looked for {', '.join(CANDIDATES)})")
    raise DatasetError(f"CoSQL path not found: {p}")


def _split_name(file: Path) -> str:
    stem = file.stem.lower()
    return stem[len("cosql_"):] if stem.startswith("cosql_") else stem


def _parts(utterance: str) -> list[str]:
    return [p.strip() for p in utterance.split("|")]


def read_cosql(path: str | os.PathLike, spider_root: str | os.PathLike) -> CoSQLRead:
    """Read a CoSQL state-tracking file into samples, and list the turns that could not become samples.

    Args:
        path: the CoSQL folder, its ``sql_state_tracking`` folder or the JSON file (:func:`find_cosql_file`).
        spider_root: the Spider folder with ``database/<db_id>/<db_id>.sqlite``.

    Returns:
        :class:`CoSQLRead`: samples in file order (mapping in the module docstring), skipped turns
        (a ``" | "`` utterance with an even number of parts: a clarification without its answer), each a
        :class:`~textsql_clarify.errors.RecordProblem` (file, record = interaction index + 1, field
        ``interaction[j].utterance``, why), and the state-tracking file read.

    Raises:
        DatasetError: missing file or folders, not a JSON list, a structurally bad record (not an object,
            missing ``database_id`` / ``interaction``, a turn without a non-empty ``utterance`` or
            ``query``), a missing database; every one listed with file, record and field.
    """
    from .spider import _database_dir, _read_json_list

    db_dir = _database_dir(spider_root)
    file = find_cosql_file(path)
    records = _read_json_list(file, "CoSQL state-tracking file")
    split = _split_name(file)
    problems: list[RecordProblem] = []
    skipped: list[RecordProblem] = []
    contentless: list[RecordProblem] = []
    out: list[Sample] = []
    db_ok: dict[str, bool] = {}
    for r, rec in enumerate(records):
        line = r + 1

        def where(fld: str, msg: str, line=line) -> None:
            problems.append(RecordProblem(str(file), line, fld, msg))

        if not isinstance(rec, dict):
            where("<record>", f"must be a JSON object, got {type(rec).__name__}")
            continue
        db_id = rec.get("database_id")
        if not isinstance(db_id, str) or not db_id.strip():
            where("database_id", "is required and must be a non-empty string")
            continue
        inter = rec.get("interaction")
        if not isinstance(inter, list) or not inter:
            where("interaction", "is required and must be a non-empty list of turns")
            continue
        bad = False
        for j, it in enumerate(inter):
            f = f"interaction[{j}]"
            if not isinstance(it, dict):
                where(f, f"must be an object, got {type(it).__name__}")
                bad = True
                continue
            for fld in ("utterance", "query"):
                if not isinstance(it.get(fld), str) or not it[fld].strip():
                    where(f"{f}.{fld}", "is required and must be a non-empty string")
                    bad = True
        if db_id not in db_ok:
            db_ok[db_id] = (db_dir / db_id / f"{db_id}.sqlite").is_file()
        if not db_ok[db_id]:
            where("database_id", f"database file not found: {db_dir / db_id / (db_id + '.sqlite')}")
            continue
        if bad:
            continue
        db_path = str(db_dir / db_id / f"{db_id}.sqlite")
        history: list[dict] = []
        for j, it in enumerate(inter):
            parts = _parts(it["utterance"])
            gold, repairs = repair_tokenised_sql(it["query"].strip())
            base_prov: dict[str, Any] = {"source": "cosql", "file": file.name, "record": line, "interaction": r,
                                         "utterance": it["utterance"]}
            if repairs:
                base_prov["sql_repairs"] = repairs
            parse_error = sql_parses(gold)
            if parse_error:
                base_prov["sql_parse_error"] = parse_error
            diff = spider_hardness(it.get("sql"))
            k = len(history)
            common = {"db_id": db_id, "db_path": db_path, "gold_sql": gold, "difficulty": diff}
            if any(not p for p in parts) or (len(parts) > 1 and len(parts) % 2 == 0):
                skipped.append(RecordProblem(str(file), line, f"interaction[{j}].utterance",
                                             f"{len(parts)} ' | '-separated parts (an empty one, or a clarification "
                                             "without its answer): expected question | clarification | answer"))
                history.append({"role": "user", "text": it["utterance"].strip(), "sql": None})
                history.append({"role": "system", "text": "", "sql": gold})
                continue
            # the turn as dialogue turns: the question, then clarification / answer pairs
            exchange = [{"role": "user", "text": parts[0], "sql": None}]
            exchange += [{"role": "system" if n % 2 else "user", "text": parts[n], "sql": None}
                         for n in range(1, len(parts))]
            natives = []
            answered = len(parts) > 1 and not all(asks(parts[n]) for n in range(1, len(parts), 2))
            if answered:
                # question | the system's answer | a new question (cosql-dev-239-2): the system answered rather
                # than asked, so this is not a clarification; the gold is the new question's, and the
                # answered question stays as context (it has no gold of its own here)
                last = k + len(parts) - 1
                natives.append({**common, "id": f"cosql-{split}-{r}-{last}", "question": parts[-1],
                                "group": "answerable", "subcategory": "answerable_without_evidence",
                                "dialogue": history + exchange[:-1],
                                "provenance": {**base_prov, "turn": last, "answered_turn": k,
                                               "system_answers": [parts[n] for n in range(1, len(parts), 2)]}})
            elif len(parts) == 1:
                natives.append({**common, "id": f"cosql-{split}-{r}-{k}", "question": parts[0],
                                "group": "answerable", "subcategory": "answerable_without_evidence",
                                "dialogue": list(history), "provenance": {**base_prov, "turn": k}})
            else:
                pairs = [(parts[n], parts[n + 1]) for n in range(1, len(parts), 2)]
                hk, rules = standalone_knowledge(pairs)
                prov = {**base_prov, "turn": k, "clarifications": [c for c, _ in pairs],
                        "answers": [a for _, a in pairs], "hidden_knowledge_rules": rules}
                if CONTENTLESS in rules:
                    # "I mean both." after "Do you mean all of them?": nothing for a user simulator to say
                    prov["hidden_knowledge_contentless"] = True
                    contentless.append(RecordProblem(
                        str(file), line, f"interaction[{j}].utterance",
                        f"cosql-{split}-{r}-{k}: the reply {pairs[rules.index(CONTENTLESS)][1]!r} carries no content "
                        f"(hidden knowledge {hk!r}); the sample is marked provenance.hidden_knowledge_contentless"))
                natives.append({**common, "id": f"cosql-{split}-{r}-{k}", "question": parts[0], "group": "ambiguous",
                                "subcategory": None, "hidden_knowledge": hk, "dialogue": list(history),
                                "provenance": prov})
                last = k + len(parts) - 1
                natives.append({**common, "id": f"cosql-{split}-{r}-{last}", "question": parts[-1],
                                "group": "answerable", "subcategory": "answerable_without_evidence",
                                "dialogue": history + exchange[:-1],
                                "provenance": {**base_prov, "turn": last, "reply_to": k}})
            for native in natives:
                s, probs = sample_from_dict(native, file=str(file), line=line, check_db_exists=False)
                problems.extend(probs)
                if s is not None:
                    out.append(s)
            history += exchange
            history.append({"role": "system", "text": "", "sql": gold})
    if problems:
        raise DatasetError(f"invalid CoSQL file {file}", problems)
    if not out:
        raise DatasetError(f"CoSQL file {file} holds no samples")
    return CoSQLRead(out, skipped, file, contentless)


def load_cosql(path: str | os.PathLike, spider_root: str | os.PathLike) -> list[Sample]:
    """Load a CoSQL state-tracking file as samples (:func:`read_cosql`), warning once about skipped turns.

    Args:
        path: the CoSQL folder, its ``sql_state_tracking`` folder or the JSON file.
        spider_root: the Spider folder with ``database/``.
    Returns:
        The samples (mapping in the module docstring).
    Warns:
        SkippedTurnsWarning: turns whose ``" | "`` utterance is malformed, each with file, record, field.
    Raises:
        DatasetError: see :func:`read_cosql`.
    """
    res = read_cosql(path, spider_root)
    warn_skipped(f"CoSQL file {res.file}: turns that are not samples", res.skipped)
    if res.contentless:
        shown = "\n".join(f"  - {p}" for p in res.contentless[:20])
        warnings.warn(f"CoSQL file {res.file}: {len(res.contentless)} ambiguous sample(s) whose hidden knowledge "
                      f"carries no content:\n{shown}", UserWarning, stacklevel=2)
    return res.samples


def load_from_spec(rest: str, *, spec: str, db_root: str | None) -> list[Sample]:
    """``cosql:<dir>:<spider root>`` (the registry entry of :mod:`textsql_clarify.datasets`).

    Args:
        rest: ``<dir>:<spider root>``. spec: the whole spec, for messages. db_root: unused (the spec names
            the Spider root).
    Raises:
        DatasetError: a malformed spec, or anything :func:`read_cosql` raises.
    """
    from . import split_spec_paths

    path, root = split_spec_paths(rest, spec, _FORM)
    return load_cosql(path, root)
