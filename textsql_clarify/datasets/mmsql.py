"""MMSQL loader: ``mmsql:<file>:<spider root>``, every user turn of every dialogue as a sample.

MMSQL (``MMSQL_test.json``, built on CoSQL over the Spider dev databases) is one JSON list of dialogues
``{db_name, id, turns}``. A user turn is ``{isuser: true, text, type}`` with ``type`` one of
``answerable`` | ``ambiguous`` | ``unanswerable`` | ``improper``; a system turn is
``{isuser: false, text, query}``, where ``query`` holds the SQL, or (on some unanswerable turns) the
explanation in place of ``text``. The file is small (244 KB) and a JSON list, so it is read whole.

Mapping to our samples (``docs/datasets.md``, section MMSQL):

* every user turn is a candidate sample, with all earlier turns as its ``dialogue`` (a system turn's
  ``query`` becomes the turn's ``sql`` when it is SQL, else its text);
* ``answerable``: gold = the SQL of the next system turn that has SQL (before the next user turn);
  subcategory ``answerable_without_evidence`` (MMSQL has no evidence). A user's answer to a
  clarification is typed ``answerable`` in MMSQL and is a sample too: the clarification is in its
  dialogue;
* ``ambiguous``: the next system turn is a clarification, the next user turn answers it (typed
  ``answerable``), and the SQL after that is the gold. Hidden knowledge: the answer rewritten as a
  stand-alone statement (:func:`.dialogue_common.standalone_knowledge`). Subcategory ``None`` (MMSQL does
  not say which ABISS ambiguity). MMSQL gives one reading only, so there are no ``interpretations``:
  ``indistinguishable`` cannot be computed for these samples;
* ``unanswerable``: hidden knowledge = the system's explanation when it states a reason beyond the
  question's words (:func:`.dialogue_common.has_stated_reason`), else absent, the explanation kept in
  ``provenance["system_reply"]`` (``provenance["hidden_knowledge"] =
  "absent"``: FB undefined, ``abstained`` reported); subcategory ``None`` (MMSQL gives no reason type);
* ``improper`` (thanks, greetings, requests outside the database such as "send him an email"): group
  ``unanswerable`` with ABISS's ``improper_question`` subcategory (ABISS §3.2: chit-chat, out-of-domain
  and non-query requests), derived from MMSQL's type (``provenance["subcategory"] = "mmsql_type"``);
  hidden knowledge absent (the system's reply, "Welcome goodbye!", is no reason).
* difficulty: Spider's hardness when the gold equals a Spider ``dev.json`` query of the same database
  (whitespace, case and a final ``;`` aside) in ``<spider root>/dev.json``, else ``unknown``.

Ids ``mmsql-<dialogue id>-<turn index>``; provenance ``{source, dialogue, record, turn, mmsql_type}``
(plus ``clarification``, ``answer``, ``answer_turn``, ``hidden_knowledge_rule`` on ambiguous samples).

Bad records (not an object, missing ``db_name`` / ``turns`` / ``isuser`` / ``text`` / ``type``, an
unknown type, a missing database) raise :class:`~textsql_clarify.errors.DatasetError` listing all of
them (file, record = dialogue index + 1, field such as ``turns[3].query``). A user turn whose dialogue
breaks the pattern its type promises (an answerable turn with no SQL after it, an ambiguous turn
without the clarify / answer / SQL pattern) is skipped and reported in one
:class:`~.dialogue_common.SkippedTurnsWarning`; see :func:`read_mmsql` for the list itself.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DatasetError, RecordProblem
from ..samples import Sample, sample_from_dict
from .dialogue_common import has_stated_reason, is_sql, standalone_knowledge, warn_skipped
from .spider_hardness import spider_hardness

__all__ = ["load_mmsql", "read_mmsql", "MMSQLRead", "load_from_spec", "MMSQL_TYPES"]

#: MMSQL's user-turn types.
MMSQL_TYPES = ("answerable", "ambiguous", "unanswerable", "improper")
_FORM = "mmsql:<file>:<spider root>"


@dataclass(frozen=True)
class MMSQLRead:
    """What :func:`read_mmsql` found: the samples, and the user turns it skipped (with why)."""

    samples: list[Sample]
    skipped: list[RecordProblem]


def _norm_sql(sql: str) -> str:
    s = re.sub(r"\s+", " ", sql.strip().rstrip(";").strip().lower())
    return re.sub(r"\s*([(),])\s*", r"\1", s)


def _spider_levels(spider_root: Path) -> dict[tuple[str, str], str]:
    """(db_id, normalised query) -> Spider hardness, from ``<spider root>/dev.json`` (empty if absent)."""
    from .spider import _read_json_list

    path = spider_root / "dev.json"
    if not path.is_file():
        return {}
    out: dict[tuple[str, str], str] = {}
    for rec in _read_json_list(path, "Spider question file"):
        if isinstance(rec, dict) and isinstance(rec.get("query"), str) and isinstance(rec.get("db_id"), str):
            out.setdefault((rec["db_id"], _norm_sql(rec["query"])), spider_hardness(rec.get("sql")))
    return out


def _check_record(rec: Any, where) -> bool:
    """Structural checks of one dialogue; ``where(field, msg)`` records a problem. True when usable."""
    if not isinstance(rec, dict):
        where("<record>", f"must be a JSON object, got {type(rec).__name__}")
        return False
    ok = True
    if not isinstance(rec.get("db_name"), str) or not rec["db_name"].strip():
        where("db_name", "is required and must be a non-empty string")
        ok = False
    if "id" not in rec or isinstance(rec["id"], bool) or not isinstance(rec["id"], (int, str)) or str(rec["id"]) == "":
        where("id", "is required (the dialogue id, an integer or string)")
        ok = False
    turns = rec.get("turns")
    if not isinstance(turns, list) or not turns:
        where("turns", "is required and must be a non-empty list")
        return False
    for i, t in enumerate(turns):
        f = f"turns[{i}]"
        if not isinstance(t, dict):
            where(f, f"must be an object, got {type(t).__name__}")
            ok = False
            continue
        if not isinstance(t.get("isuser"), bool):
            where(f"{f}.isuser", "is required and must be true or false")
            ok = False
            continue
        if not isinstance(t.get("text"), str):
            where(f"{f}.text", "is required and must be a string")
            ok = False
        if t["isuser"]:
            if t.get("type") not in MMSQL_TYPES:
                where(f"{f}.type", f"must be one of {list(MMSQL_TYPES)}, got {t.get('type')!r}")
                ok = False
            elif isinstance(t.get("text"), str) and not t["text"].strip():
                where(f"{f}.text", "a user turn must not be empty")
                ok = False
        else:
            q = t.get("query", "")
            if q is not None and not isinstance(q, str):
                where(f"{f}.query", f"must be a string, got {type(q).__name__}")
                ok = False
    return ok


def _system_parts(t: dict) -> tuple[str, str | None]:
    """(text, sql) of a system turn: ``query`` is its SQL when it is SQL, else more text."""
    text = (t.get("text") or "").strip()
    q = (t.get("query") or "").strip()
    if is_sql(q):
        return text, q
    return " ".join(x for x in (text, q) if x), None


def _next_sql(turns: list, start: int) -> str | None:
    """The SQL of the first system turn with SQL from ``start`` up to the next user turn, else ``None``."""
    for k in range(start, len(turns)):
        if turns[k]["isuser"]:
            return None
        sql = _system_parts(turns[k])[1]
        if sql is not None:
            return sql
    return None


def _next_user(turns: list, start: int) -> int | None:
    for k in range(start, len(turns)):
        if turns[k]["isuser"]:
            return k
    return None


def _dialogue(turns: list, upto: int) -> list[dict]:
    out = []
    for t in turns[:upto]:
        if t["isuser"]:
            out.append({"role": "user", "text": t["text"].strip(), "sql": None})
        else:
            text, sql = _system_parts(t)
            if text or sql:
                out.append({"role": "system", "text": text, "sql": sql})
    return out


def _ambiguous(turns: list, i: int) -> tuple[dict | None, str]:
    """The clarify / answer / SQL pattern after ambiguous user turn ``i``: (parts, "") or (None, why)."""
    k = i + 1
    if k >= len(turns) or turns[k]["isuser"]:
        return None, f"turns[{i}]: typed ambiguous but no system turn follows"
    text, sql = _system_parts(turns[k])
    if sql is not None:
        return None, (f"turns[{k}].query: typed ambiguous but the system answered with SQL, without a "
                      "clarification (no hidden knowledge)")
    if not text:
        return None, f"turns[{k}].text: typed ambiguous but the system's reply is empty"
    j = _next_user(turns, k + 1)
    if j is None:
        return None, f"turns[{k}]: typed ambiguous; the system's reply ends the dialogue (no answer, no SQL)"
    if turns[j]["type"] != "answerable":
        return None, (f"turns[{j}].type: the reply to the clarification is typed {turns[j]['type']!r}, not "
                      "'answerable': the question was replaced, so the gold after it is that reply's")
    gold = _next_sql(turns, j + 1)
    if gold is None:
        return None, f"turns[{j + 1}]: no SQL follows the user's answer to the clarification"
    return {"clarification": text, "answer": turns[j]["text"].strip(), "answer_turn": j, "gold": gold}, ""


def read_mmsql(file: str | os.PathLike, spider_root: str | os.PathLike) -> MMSQLRead:
    """Read an MMSQL file into samples, and list the user turns that could not become samples.

    Args:
        file: the MMSQL JSON list (e.g. ``MMSQL_test.json``).
        spider_root: the Spider folder with ``database/<db_id>/<db_id>.sqlite`` (and ``dev.json``, for
            difficulty).

    Returns:
        :class:`MMSQLRead`: the samples in file order (dialogue by dialogue, turn by turn; mapping in the
        module docstring) and the skipped turns, each a :class:`~textsql_clarify.errors.RecordProblem`
        (file, record = dialogue index + 1, field ``turns[i]...``, why).

    Raises:
        DatasetError: missing file or folders, not a JSON list, a structurally bad dialogue (every one
            listed with file, record and field), a database that is missing, a duplicate sample id, or
            no samples at all.
    """
    from .spider import _database_dir, _read_json_list

    db_dir = _database_dir(spider_root)
    path = Path(file)
    records = _read_json_list(path, "MMSQL file")
    levels = _spider_levels(Path(spider_root).resolve())
    problems: list[RecordProblem] = []
    skipped: list[RecordProblem] = []
    out: list[Sample] = []
    seen: dict[str, int] = {}
    db_ok: dict[str, bool] = {}
    for r, rec in enumerate(records):
        line = r + 1

        def where(fld: str, msg: str, line=line) -> None:
            problems.append(RecordProblem(str(path), line, fld, msg))

        def skip(fld: str, msg: str, line=line) -> None:
            skipped.append(RecordProblem(str(path), line, fld, msg))

        if not _check_record(rec, where):
            continue
        db_id = rec["db_name"].strip()
        if db_id not in db_ok:
            db_ok[db_id] = (db_dir / db_id / f"{db_id}.sqlite").is_file()
        if not db_ok[db_id]:
            where("db_name", f"database file not found: {db_dir / db_id / (db_id + '.sqlite')}")
            continue
        db_path = str(db_dir / db_id / f"{db_id}.sqlite")
        turns, did = rec["turns"], rec["id"]
        for i, t in enumerate(turns):
            if not t["isuser"]:
                continue
            kind = t["type"]
            native: dict[str, Any] = {
                "id": f"mmsql-{did}-{i}", "db_id": db_id, "db_path": db_path, "question": t["text"].strip(),
                "dialogue": _dialogue(turns, i),
                "provenance": {"source": "mmsql", "dialogue": did, "record": line, "turn": i, "mmsql_type": kind},
            }
            if kind == "answerable":
                gold = _next_sql(turns, i + 1)
                if gold is None:
                    skip(f"turns[{i + 1}].query" if i + 1 < len(turns) else f"turns[{i}]",
                         "typed answerable but no system SQL follows before the next user turn")
                    continue
                native.update(group="answerable", subcategory="answerable_without_evidence", gold_sql=gold)
            elif kind == "ambiguous":
                parts, why = _ambiguous(turns, i)
                if parts is None:
                    fld, _, msg = why.partition(": ")
                    skip(fld, msg)
                    continue
                hk, rules = standalone_knowledge([(parts["clarification"], parts["answer"])])
                gold = parts["gold"]
                native.update(group="ambiguous", subcategory=None, gold_sql=gold, hidden_knowledge=hk)
                native["provenance"].update(clarification=parts["clarification"], answer=parts["answer"],
                                            answer_turn=parts["answer_turn"], hidden_knowledge_rule=rules[0])
            else:
                k = i + 1
                if k >= len(turns) or turns[k]["isuser"]:
                    reply = ""
                else:
                    reply = _system_parts(turns[k])[0]
                if kind == "unanswerable" and reply and has_stated_reason(reply, t["text"]):
                    native.update(hidden_knowledge=reply)
                else:
                    native.update(hidden_knowledge="")
                    native["provenance"]["hidden_knowledge"] = "absent"
                    if reply:
                        native["provenance"]["system_reply"] = reply
                gold = None
                native.update(group="unanswerable", gold_sql=None,
                              subcategory="improper_question" if kind == "improper" else None)
                if kind == "improper":
                    native["provenance"]["subcategory"] = "mmsql_type"
            native["difficulty"] = levels.get((db_id, _norm_sql(gold)), "unknown") if gold else "unknown"
            s, probs = sample_from_dict(native, file=str(path), line=line, check_db_exists=False)
            problems.extend(probs)
            if s is None:
                continue
            if s.id in seen:
                where("id", f"duplicate sample id {s.id!r} (dialogue id repeated; first in record {seen[s.id]})")
                continue
            seen[s.id] = line
            out.append(s)
    if problems:
        raise DatasetError(f"invalid MMSQL file {path}", problems)
    if not out:
        raise DatasetError(f"MMSQL file {path} holds no samples")
    return MMSQLRead(out, skipped)


def load_mmsql(file: str | os.PathLike, spider_root: str | os.PathLike) -> list[Sample]:
    """Load MMSQL dialogues as samples (:func:`read_mmsql`), warning once about skipped turns.

    Args:
        file: the MMSQL JSON list. spider_root: the Spider folder with ``database/``.
    Returns:
        The samples (see the module docstring for the mapping).
    Warns:
        SkippedTurnsWarning: user turns that break their type's pattern, each with file, record, field.
    Raises:
        DatasetError: see :func:`read_mmsql`.
    """
    res = read_mmsql(file, spider_root)
    warn_skipped(f"MMSQL file {file}: user turns that are not samples", res.skipped)
    return res.samples


def load_from_spec(rest: str, *, spec: str, db_root: str | None) -> list[Sample]:
    """``mmsql:<file>:<spider root>`` (the registry entry of :mod:`textsql_clarify.datasets`).

    Args:
        rest: ``<file>:<spider root>``. spec: the whole spec, for messages. db_root: unused (the spec
            names the Spider root).
    Raises:
        DatasetError: a malformed spec, or anything :func:`read_mmsql` raises.
    """
    from . import split_spec_paths

    file, root = split_spec_paths(rest, spec, _FORM)
    return load_mmsql(file, root)
