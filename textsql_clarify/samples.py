"""The episode spec: :class:`Sample` and its parts, and the native JSONL format.

One line of a JSONL file is one sample (see ``docs/dataset-format.md``). Loading validates every record
and reports every bad one at once, each with file, line and field (:class:`~textsql_clarify.errors.DatasetError`).

Sources: groups and subcategories from ABISS §3.2; premise flaws from PremiseSQL §3; chain ambiguity
(L1/L2, counterfactual verdict) from TIDE §2.1; drift events from TIDE §2.2.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import DatasetError, RecordProblem
from .taxonomy import GROUPS, PREMISE_FLAWS, SUBCATEGORIES
from .text import loads_valid_unicode

DRIFT_SUBTYPES = ("value", "constraint", "projection")
CHAIN_VERDICTS = ("eliminated", "transformed")
#: Spider's hardness levels, then BIRD's difficulty labels, then ``unknown``.
DIFFICULTIES = ("easy", "medium", "hard", "extra", "simple", "moderate", "challenging", "unknown")
DIALOGUE_ROLES = ("user", "system")
#: ``provenance["gold"]`` of an ambiguous sample whose gold SQL the source withholds (``gold_sql`` null).
GOLD_WITHHELD = "withheld"
#: Load-time validation flags (:mod:`textsql_clarify.datasets.validate`); a flagged sample is reported,
#: and ``indistinguishable`` ones are kept out of the ambiguous metrics unless asked.
SAMPLE_FLAGS = ("gold_error", "gold_empty", "gold_timeout", "gold_nondeterministic", "interpretation_error",
                "indistinguishable", "duplicate_gold")


@dataclass(frozen=True)
class Interpretation:
    """One reading of an ambiguous question (ABISS Def. 2).

    Attributes:
        gold_sql: the SQL that answers this reading (SQLite dialect).
        hidden_knowledge: the fact the user would state to select this reading.
        description: a short name for the reading (optional).
    """

    gold_sql: str
    hidden_knowledge: str
    description: str = ""


@dataclass(frozen=True)
class ChainLayer:
    """One clarification layer of a chain ambiguity (TIDE §2.1).

    Attributes:
        question: the clarification that targets this layer.
        answer: the user's chosen answer (the canonical resolution).
        alternative: the other plausible answer.
    """

    question: str
    answer: str
    alternative: str


@dataclass(frozen=True)
class Chain:
    """Chain ambiguity: L2 depends on how L1 is resolved (TIDE §2.1).

    ``verdict`` is the counterfactual test's result, ``eliminated`` or ``transformed``.
    """

    l1: ChainLayer
    l2: ChainLayer
    verdict: str


@dataclass(frozen=True)
class DriftEvent:
    """A user intent drift injected after the agent's first SQL (TIDE §2.2, §4.1).

    Attributes:
        utterance: the user's drift turn, injected verbatim.
        post_gold_sql: the gold SQL after the drift.
        subtype: ``value`` | ``constraint`` | ``projection`` (TIDE Algorithm 1).
    """

    utterance: str
    post_gold_sql: str
    subtype: str


@dataclass(frozen=True)
class DialogueTurn:
    """One earlier turn of a multi-turn dialogue, before the sample's question (MMSQL, CoSQL).

    Attributes:
        role: ``user`` or ``system``.
        text: what was said (for a system turn that only answered with SQL, may be empty).
        sql: the SQL the system answered with on that turn, where known; else ``None``.
    """

    role: str
    text: str
    sql: str | None = None


@dataclass(frozen=True)
class Sample:
    """One benchmark sample, the spec of one episode.

    Attributes:
        id: unique id within its dataset.
        db_id: database name.
        db_path: absolute path of the SQLite file (resolved at load time).
        question: the user's natural-language question.
        evidence: external knowledge shown to the agent (list of strings; may be empty).
        group: ``answerable`` | ``ambiguous`` | ``unanswerable`` (ABISS §3.1).
        subcategory: one of the 13 ABISS subcategories (:mod:`textsql_clarify.taxonomy`), or ``None``
            for an ambiguous or unanswerable sample whose source does not say which (reported as its own
            ``unknown`` row in breakdowns).
        premise_flaw: a PremiseSQL flaw type or ``None``.
        style: the linguistic style of the question (free text, e.g. ``"terse"``).
        difficulty: Spider's ``easy`` | ``medium`` | ``hard`` | ``extra``, BIRD's ``simple`` |
            ``moderate`` | ``challenging``, or ``unknown``.
        gold_sql: the gold SQL of the intended interpretation; ``None`` for unanswerable samples, and for an
            ambiguous sample whose gold the source withholds (``provenance["gold"] == "withheld"``,
            :attr:`gold_withheld`: clarification-only, EX undefined; ``docs/dataset-format.md``).
        hidden_knowledge: what the user knows: the disambiguating fact, or why it is unanswerable.
        interpretations: the other readings of an ambiguous question.
        chain: optional chain ambiguity.
        drift: optional drift event.
        dialogue: earlier turns of the dialogue, oldest first (:class:`DialogueTurn`); the agent sees them
            as history before the question, and the simulated user sees them too.
        flags: load-time validation flags (:data:`SAMPLE_FLAGS`), e.g. ``indistinguishable``.
        provenance: where the sample came from (free-form mapping; ``source`` at least).
    """

    id: str
    db_id: str
    db_path: str
    question: str
    group: str
    subcategory: str | None
    gold_sql: str | None = None
    hidden_knowledge: str = ""
    evidence: tuple[str, ...] = ()
    premise_flaw: str | None = None
    style: str = "neutral"
    difficulty: str = "unknown"
    interpretations: tuple[Interpretation, ...] = ()
    chain: Chain | None = None
    drift: DriftEvent | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    dialogue: tuple[DialogueTurn, ...] = ()
    flags: tuple[str, ...] = ()

    @property
    def solvable(self) -> bool:
        """True when the sample has a gold SQL to execute (answerable or ambiguous); False for an unanswerable
        sample and for a withheld gold (:attr:`gold_withheld`), which the env cannot score."""
        return self.gold_sql is not None

    @property
    def gold_withheld(self) -> bool:
        """True for an ambiguous sample whose gold SQL the source withholds (``gold_sql`` ``None`` and
        ``provenance["gold"] == "withheld"``, e.g. BIRD-Interact's mini-interact): a clarification-only sample;
        EX and every gold-based reward component are ``None`` on it (``docs/dataset-format.md``)."""
        return self.gold_sql is None and self.provenance.get("gold") == GOLD_WITHHELD

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready record of this sample (the native JSONL schema)."""
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        d["interpretations"] = [asdict(i) for i in self.interpretations]
        d["provenance"] = dict(self.provenance)
        d["dialogue"] = [asdict(t) for t in self.dialogue]
        d["flags"] = list(self.flags)
        return d


_REQUIRED_STR = ("id", "db_id", "question", "group")
#: flags about the other readings: only an ambiguous sample has them (``indistinguishable`` keeps it out of the means)
_READING_FLAGS = ("indistinguishable", "interpretation_error")
_KNOWN = {
    "id", "db_id", "db_path", "question", "evidence", "group", "subcategory", "premise_flaw", "style",
    "difficulty", "gold_sql", "hidden_knowledge", "interpretations", "chain", "drift", "provenance",
    "dialogue", "flags",
}


def flag_set(exclude_flags: str | Iterable[str] | None) -> frozenset[str]:
    """The load-time flags named by an ``exclude_flags`` option (one name, an iterable of names, or ``None``).

    Args:
        exclude_flags: a flag of :data:`SAMPLE_FLAGS`, several, or ``None`` / empty for none.
    Returns:
        The flags as a frozenset (empty for none).
    Raises:
        ValueError: a name that is not in :data:`SAMPLE_FLAGS` (the message lists the known ones).
    Source: the validation flags of ``docs/dataset-format.md``; the env, the splits and the training corpus take
    this option alike.
    """
    if isinstance(exclude_flags, str):
        exclude_flags = (exclude_flags,)
    drop = frozenset(exclude_flags or ())
    if drop - set(SAMPLE_FLAGS):
        raise ValueError(f"unknown flag(s) in exclude_flags: {sorted(drop - set(SAMPLE_FLAGS))}; known: "
                         f"{list(SAMPLE_FLAGS)}")
    return drop


def _str_field(rec: Mapping, name: str, problems: list, where, required: bool, allow_empty: bool = False):
    if name not in rec or rec[name] is None:
        if required:
            problems.append(where(name, "is required"))
        return None
    v = rec[name]
    if not isinstance(v, str):
        problems.append(where(name, f"must be a string, got {type(v).__name__}"))
        return None
    if not allow_empty and required and not v.strip():
        problems.append(where(name, "must not be empty"))
        return None
    return v


def _objects(raw: Any, name: str, problems: list, where, list_what: str = "", obj_what: str = "") -> list[tuple[str, dict]]:
    """The entries of the list field ``name`` (``raw``; ``None`` or empty: none) that are objects, each with its
    field name ``name[k]``; a ``raw`` that is not a list, and each entry that is not an object, is a problem
    (``must be a list<list_what>``, ``must be an object<obj_what>``)."""
    raw = raw or []
    if not isinstance(raw, list):
        problems.append(where(name, f"must be a list{list_what}"))
        return []
    out = []
    for k, item in enumerate(raw):
        if isinstance(item, dict):
            out.append((f"{name}[{k}]", item))
        else:
            problems.append(where(f"{name}[{k}]", f"must be an object{obj_what}"))
    return out


def sample_from_dict(
    rec: Any, *, file: str = "<memory>", line: int = 1, base_dir: str | os.PathLike | None = None,
    db_root: str | os.PathLike | None = None, check_db_exists: bool = True,
) -> tuple[Sample | None, list[RecordProblem]]:
    """Validate one record and build a :class:`Sample`.

    Args:
        rec: the decoded JSON object.
        file, line: where the record came from, for error messages.
        base_dir: directory that a relative ``db_path`` is resolved against (the JSONL file's folder).
        db_root: when ``db_path`` is absent, the database is ``db_root/<db_id>/<db_id>.sqlite``.
        check_db_exists: report a missing database file as a problem.

    Returns:
        ``(sample, [])`` when valid, else ``(None, problems)`` listing every problem found.
    """
    problems: list[RecordProblem] = []

    def where(fld: str, msg: str) -> RecordProblem:
        return RecordProblem(file, line, fld, msg)

    if not isinstance(rec, dict):
        return None, [where("<record>", f"must be a JSON object, got {type(rec).__name__}")]
    for k in rec:
        if k not in _KNOWN:
            problems.append(where(k, "unknown field"))
    vals = {n: _str_field(rec, n, problems, where, True) for n in _REQUIRED_STR}
    dbid = vals["db_id"]
    if dbid is not None and (dbid.strip() in (".", "..") or any(c in dbid for c in "/\\\x00")):
        # loaders build <root>/<db_id>/<db_id>.sqlite: a path here would open a file outside the root
        problems.append(where("db_id", f"must be a database name, not a path (no '/', '\\', NUL, '.' or '..'), "
                                       f"got {dbid!r}"))
    group = vals["group"]
    if group is not None and group not in GROUPS:
        problems.append(where("group", f"must be one of {list(GROUPS)}, got {group!r}"))
    if "subcategory" not in rec:
        problems.append(where("subcategory", "is required (null when the source does not say, for an "
                                             "ambiguous or unanswerable sample)"))
    sub = rec.get("subcategory")
    if sub is None:
        if "subcategory" in rec and group == "answerable":
            problems.append(where("subcategory", "may be null only for an ambiguous or unanswerable sample"))
    elif not isinstance(sub, str):
        problems.append(where("subcategory", f"must be a string or null, got {type(sub).__name__}"))
        sub = None
    else:
        if sub not in SUBCATEGORIES:
            names = [k for k, v in SUBCATEGORIES.items() if group not in GROUPS or v.group == group]
            problems.append(where("subcategory", f"unknown ABISS subcategory {sub!r}; known"
                                                 f"{'' if group not in GROUPS else ' for ' + repr(group)}: {names}"))
        elif group in GROUPS and SUBCATEGORIES[sub].group != group:
            problems.append(where("subcategory", f"{sub!r} belongs to group {SUBCATEGORIES[sub].group!r}, not {group!r}"))
    gold = _str_field(rec, "gold_sql", problems, where, False)
    if gold is not None and not gold.strip():
        problems.append(where("gold_sql", "must not be empty (use null for unanswerable samples)"))
    if group == "unanswerable" and gold is not None:
        problems.append(where("gold_sql", "must be null for an unanswerable sample"))
    hk = _str_field(rec, "hidden_knowledge", problems, where, False) or ""
    prov = rec.get("provenance", {})
    if prov is None:
        prov = {}
    if not isinstance(prov, dict):
        problems.append(where("provenance", f"must be an object, got {type(prov).__name__}"))
        prov = {}
    withheld = prov.get("gold") == GOLD_WITHHELD
    if withheld and (group != "ambiguous" or gold is not None):
        problems.append(where("provenance.gold", f"{GOLD_WITHHELD!r} is only for an ambiguous sample whose gold_sql "
                                                 f"is null (got group {group!r}, gold_sql "
                                                 f"{'null' if gold is None else 'set'})"))
    elif withheld and (rec.get("interpretations") or rec.get("drift") is not None):
        problems.append(where("provenance.gold", f"a {GOLD_WITHHELD!r} gold allows no interpretations and no drift "
                                                 "(nothing could score them against the missing gold)"))
    if (group in ("answerable", "ambiguous") and gold is None and not withheld
            and "gold_sql" not in [p.field for p in problems]):
        problems.append(where("gold_sql", f"is required for group {group!r} (null only with provenance.gold "
                                          f"{GOLD_WITHHELD!r}, for an ambiguous sample)"))
    if group in ("ambiguous", "unanswerable") and not hk.strip() and prov.get("hidden_knowledge") != "absent":
        problems.append(where("hidden_knowledge", f"is required for group {group!r}"))
    evidence = rec.get("evidence", [])
    if evidence is None:
        evidence = []
    if isinstance(evidence, str):
        evidence = [evidence]
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        problems.append(where("evidence", "must be a list of strings"))
        evidence = []
    flaw = rec.get("premise_flaw")
    if flaw is not None and not isinstance(flaw, str):
        problems.append(where("premise_flaw", f"must be a string or null, got {type(flaw).__name__}"))
        flaw = None
    elif flaw is not None and flaw not in PREMISE_FLAWS:
        problems.append(where("premise_flaw", f"unknown PremiseSQL flaw type {flaw!r}"))
    style = _str_field(rec, "style", problems, where, False) or "neutral"
    # labels are read case-insensitively: BIRD re-releases and hand-written files write "Moderate"
    diff = (_str_field(rec, "difficulty", problems, where, False) or "unknown").strip().lower() or "unknown"
    if diff not in DIFFICULTIES:
        problems.append(where("difficulty", f"must be one of {list(DIFFICULTIES)}, got {diff!r}"))

    interps: list[Interpretation] = []
    raw_i = rec.get("interpretations")
    if raw_i and isinstance(raw_i, list) and group in GROUPS and group != "ambiguous":
        # the other readings of an ambiguous question; elsewhere the validator would compare them with the gold
        # and an alternative gold that returns the same rows would flag the sample out of every mean
        problems.append(where("interpretations", f"only an ambiguous sample has other readings, got group {group!r}"))
        raw_i = []
    for f, it in _objects(raw_i, "interpretations", problems, where):
        s = _str_field(it, "gold_sql", problems, lambda n, m: where(f"{f}.{n}", m), True)
        h = _str_field(it, "hidden_knowledge", problems, lambda n, m: where(f"{f}.{n}", m), True)
        d = _str_field(it, "description", problems, lambda n, m: where(f"{f}.{n}", m), False) or ""
        if s is not None and h is not None:
            interps.append(Interpretation(s, h, d))

    dialogue: list[DialogueTurn] = []
    for f, turn in _objects(rec.get("dialogue"), "dialogue", problems, where, " of turns", " {role, text, sql}"):
        extra = set(turn) - {"role", "text", "sql"}
        for x in sorted(extra):
            problems.append(where(f"{f}.{x}", "unknown field"))
        role = turn.get("role")
        if role not in DIALOGUE_ROLES:
            problems.append(where(f"{f}.role", f"must be one of {list(DIALOGUE_ROLES)}, got {role!r}"))
        if "text" not in turn:
            # a turn that says nothing is refused rather than read as silence: a loader that drops a
            # system reply would otherwise hand the agent a dialogue with a hole in it
            problems.append(where(f"{f}.text", 'is required (a system turn that only answered with SQL gives '
                                               '"text": "" and its "sql")'))
            continue
        text = turn.get("text")
        if text is None:
            text = ""
        if not isinstance(text, str):
            problems.append(where(f"{f}.text", f"must be a string, got {type(text).__name__}"))
            continue
        tsql = turn.get("sql")
        if tsql is not None and not isinstance(tsql, str):
            problems.append(where(f"{f}.sql", f"must be a string or null, got {type(tsql).__name__}"))
            continue
        if tsql is not None and not tsql.strip():
            tsql = None
        if role == "user" and tsql is not None:
            problems.append(where(f"{f}.sql", "only a system turn carries SQL"))
            continue
        if not text.strip() and tsql is None:
            problems.append(where(f"{f}.text", "must not be empty (a system turn may give sql instead)"))
            continue
        if role in DIALOGUE_ROLES:
            dialogue.append(DialogueTurn(role, text, tsql))

    flags: list[str] = []
    raw_fl = rec.get("flags") or []
    if not isinstance(raw_fl, list) or not all(isinstance(x, str) for x in raw_fl):
        problems.append(where("flags", "must be a list of strings"))
        raw_fl = []
    for x in raw_fl:
        if x not in SAMPLE_FLAGS:
            problems.append(where("flags", f"unknown flag {x!r}; known: {list(SAMPLE_FLAGS)}"))
        elif x in _READING_FLAGS and group in GROUPS and group != "ambiguous":
            problems.append(where("flags", f"{x!r} is a flag of an ambiguous sample's readings, got group {group!r}"))
        elif x not in flags:
            flags.append(x)

    chain = None
    raw_c = rec.get("chain")
    if raw_c is not None:
        if not isinstance(raw_c, dict):
            problems.append(where("chain", "must be an object or null"))
        else:
            layers = []
            for ln in ("l1", "l2"):
                lay = raw_c.get(ln)
                if not isinstance(lay, dict):
                    problems.append(where(f"chain.{ln}", "is required and must be an object"))
                    continue
                parts = [_str_field(lay, n, problems, lambda n2, m, ln=ln: where(f"chain.{ln}.{n2}", m), True)
                         for n in ("question", "answer", "alternative")]
                if all(p is not None for p in parts):
                    layers.append(ChainLayer(*parts))
            verdict = raw_c.get("verdict")
            if verdict not in CHAIN_VERDICTS:
                problems.append(where("chain.verdict", f"must be one of {list(CHAIN_VERDICTS)}, got {verdict!r}"))
            if len(layers) == 2 and verdict in CHAIN_VERDICTS:
                chain = Chain(layers[0], layers[1], verdict)

    drift = None
    raw_d = rec.get("drift")
    if raw_d is not None:
        if not isinstance(raw_d, dict):
            problems.append(where("drift", "must be an object or null"))
        else:
            dw = lambda n, m: where(f"drift.{n}", m)  # noqa: E731
            u = _str_field(raw_d, "utterance", problems, dw, True)
            p = _str_field(raw_d, "post_gold_sql", problems, dw, True)
            st = raw_d.get("subtype")
            if st not in DRIFT_SUBTYPES:
                problems.append(where("drift.subtype", f"must be one of {list(DRIFT_SUBTYPES)}, got {st!r}"))
            if gold is None:
                problems.append(where("drift", "a drift event needs a pre-drift gold_sql"))
            if u is not None and p is not None and st in DRIFT_SUBTYPES:
                drift = DriftEvent(u, p, st)


    db_path = None
    raw_p = rec.get("db_path")
    if raw_p is not None and not isinstance(raw_p, str):
        problems.append(where("db_path", "must be a string"))
    elif raw_p:
        pth = Path(raw_p)
        if not pth.is_absolute() and base_dir is not None:
            pth = Path(base_dir) / pth
        db_path = str(pth)
    elif db_root is not None and vals["db_id"]:
        db_path = str(Path(db_root) / vals["db_id"] / f"{vals['db_id']}.sqlite")
    else:
        problems.append(where("db_path", "is required (or give a db_root)"))
    if db_path is not None and check_db_exists and not Path(db_path).is_file():
        problems.append(where("db_path", f"database file not found: {db_path}"))

    if problems:
        return None, problems
    prov = dict(prov)  # the flag goes on the sample's copy, not on the caller's record
    flag_nondeterministic_gold(prov, gold, drift)
    return Sample(
        id=vals["id"], db_id=vals["db_id"], db_path=db_path, question=vals["question"], group=group,
        subcategory=sub, gold_sql=gold, hidden_knowledge=hk, evidence=tuple(evidence), premise_flaw=flaw,
        style=style, difficulty=diff, interpretations=tuple(interps), chain=chain, drift=drift,
        provenance=dict(prov), dialogue=tuple(dialogue), flags=tuple(flags),
    ), []


def flag_nondeterministic_gold(provenance: dict, gold_sql: str | None, drift: DriftEvent | None = None) -> None:
    """Load-time flag: when the gold SQL (or the post-drift gold) reads the clock or randomness
    (``date('now')``, ``random()``, ...; :func:`textsql_clarify.rewards.ex_sql.gold_nondeterminism`), set
    ``provenance["gold_nondeterministic"]`` (or ``"post_gold_nondeterministic"``) to what it uses. Such a gold
    is scored ``gold_nondeterministic`` and left out of EX means, like an empty gold (``docs/metrics.md``).
    Modifies ``provenance`` in place."""
    from .rewards.ex_sql import gold_nondeterminism  # sqlglot work, only when a sample is built

    for key, sql in (("gold_nondeterministic", gold_sql),
                     ("post_gold_nondeterministic", drift.post_gold_sql if drift is not None else None)):
        reason = gold_nondeterminism(sql) if sql else None
        if reason:
            provenance[key] = reason


def load_jsonl(path: str | os.PathLike, *, db_root: str | os.PathLike | None = None,
               check_db_exists: bool = True) -> list[Sample]:
    """Load and validate a native JSONL dataset.

    Args:
        path: the ``.jsonl`` file; relative ``db_path`` values resolve against its folder.
        db_root: fallback folder holding ``<db_id>/<db_id>.sqlite`` for records without ``db_path``.
        check_db_exists: also report records whose database file is missing.

    Returns:
        The samples, in file order.

    Raises:
        DatasetError: the file is missing or unreadable, or any record is invalid (all listed,
            each with file, line and field), or two records share an id.
    """
    p = Path(path)
    if p.is_dir():
        raise DatasetError(f"dataset path {path} is a folder; give a .jsonl file")
    if not p.is_file():
        raise DatasetError(f"dataset file not found: {path}")
    problems: list[RecordProblem] = []
    out: list[Sample] = []
    seen: dict[str, int] = {}
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read dataset file {path}: {e}") from e
    # split on "\n" only: str.splitlines would also split inside strings holding U+2028 or U+0085,
    # which json.dumps(ensure_ascii=False) writes raw
    for ln, raw in enumerate(text.split("\n"), start=1):
        raw = raw.rstrip("\r")
        if not raw.strip():
            continue
        try:
            rec = loads_valid_unicode(raw)  # a lone surrogate escape reads as U+FFFD (docs/dataset-format.md)
        except json.JSONDecodeError as e:
            problems.append(RecordProblem(str(path), ln, "<record>", f"invalid JSON: {e.msg} at column {e.colno}"))
            continue
        except (RecursionError, ValueError) as e:  # nesting too deep, integer too long to convert
            problems.append(RecordProblem(str(path), ln, "<record>", f"invalid JSON: {str(e)[:120] or type(e).__name__}"))
            continue
        s, probs = sample_from_dict(rec, file=str(path), line=ln, base_dir=p.parent, db_root=db_root,
                                    check_db_exists=check_db_exists)
        problems.extend(probs)
        if s is not None:
            if s.id in seen:
                problems.append(RecordProblem(str(path), ln, "id", f"duplicate id {s.id!r} (first on line {seen[s.id]})"))
                continue
            seen[s.id] = ln
            out.append(s)
    if problems:
        raise DatasetError(f"invalid dataset {path}", problems)
    if not out:
        raise DatasetError(f"dataset {path} holds no samples")
    return out


def write_jsonl(samples: Iterable[Sample], path: str | os.PathLike) -> int:
    """Write samples as native JSONL (absolute ``db_path``). Returns the number of lines written."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for s in samples:
            fh.write(json.dumps(s.to_dict(), ensure_ascii=False) + "\n")
            n += 1
    return n
