"""BIRD-Interact's mini-interact: ambiguous business-intelligence tasks over SQLite, as clarification-only samples.

Spec ``mini-interact:<dir>``. ``<dir>`` holds ``mini_interact.jsonl`` (one task per line) and, per database,
``<db>/<db>.sqlite``, ``<db>/<db>_kb.jsonl`` (the hierarchical knowledge base), ``<db>_column_meaning_base.json``
and ``<db>_schema.txt`` (BIRD-Interact's mini-interact release, README "Dataset Description"). A ``db_root``
(``load_dataset(..., db_root=)``) moves only the ``.sqlite`` files: ``<db_root>/<db>/<db>.sqlite``.

Mapping to our taxonomy (``docs/datasets.md``, mini-interact):

* every task is one **ambiguous** sample ``mini-interact-<instance_id>`` over ``<db>.sqlite``; question =
  ``amb_user_query`` (the query with the injected ambiguities);
* **gold**: ``sol_sql`` and ``test_cases`` are withheld upstream (empty in the public file), so the sample's
  ``gold_sql`` is ``None`` with ``provenance["gold"] == "withheld"`` (:attr:`~textsql_clarify.samples.Sample.gold_withheld`):
  EX and every gold-based reward are ``None``; only clarification behaviour is measured. A task whose
  ``sol_sql`` holds exactly one statement and no ``preprocess_sql`` (a file merged with the ground truth the
  BIRD team sends on request) gets that statement as its gold (``provenance["gold"] == "given"``);
* **hidden knowledge** (:func:`hidden_knowledge_of`): one stand-alone sentence per critical ambiguity term
  ("By 'good signals' I mean ..."), what the user means in words: the knowledge-base entry the term stands
  for when a ``knowledge_ambiguity`` entry resolves it with the same SQL snippet (its name, description and
  definition), else the term's SQL snippet rendered in words with sqlglot (:func:`describe_snippet`); then one
  sentence per remaining knowledge-ambiguity entry, stating that entry's definition. Non-critical terms (order,
  rounding, NULL handling, joins, ...) are the "valid but secondary" technical details of ABISS §5.2: kept in
  ``provenance`` only;
* **evidence**: the knowledge base minus every entry a ``knowledge_ambiguity`` names as ``deleted_knowledge``
  (BIRD-Interact masks those from the system, which must ask for them), one line per entry
  (``name: definition``, LaTeX reduced to plain text), in id order up to :data:`EVIDENCE_CHARS`;
* **subcategory**: ``None`` (the source does not say one ABISS subcategory; see ``docs/datasets.md`` for why
  BIRD-Interact's per-term types do not map); **difficulty**: ``unknown`` (the tasks carry none).

Tasks whose database has no ``.sqlite`` (three of the 27 in the public release) are skipped and counted
(:attr:`MiniInteractLoad.skipped`), not errors. Bad records are collected and reported at once, each with
file, line and field (:class:`~textsql_clarify.errors.DatasetError`). Databases are never opened here.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ..errors import DatasetError, RecordProblem
from ..samples import GOLD_WITHHELD, Sample, sample_from_dict
from ..simulators.fragments import _Describer, _join_list, _limit_fragments, _order_fragments, _words
from .jsonl_stream import iter_jsonl

__all__ = ["MiniInteractLoad", "load_mini_interact", "load_from_spec", "hidden_knowledge_of", "describe_snippet",
           "evidence_of", "plain_math", "TASK_FILE", "EVIDENCE_CHARS"]

log = logging.getLogger(__name__)

#: the task file inside ``<dir>``.
TASK_FILE = "mini_interact.jsonl"
#: most characters of evidence per sample: the observation's ``evidence`` field holds 16,384; whole
#: knowledge-base entries are kept in id order up to this and the rest left out (counted in provenance).
EVIDENCE_CHARS = 16_000
_SOURCE = "mini-interact"


@dataclass
class MiniInteractLoad:
    """What :func:`load_mini_interact` read.

    Attributes:
        samples: the samples, in file order.
        n_tasks: task records in the file.
        skipped: database name -> instance ids of the tasks skipped because ``<db>.sqlite`` is absent.
    """

    samples: list[Sample]
    n_tasks: int
    skipped: dict[str, list[str]] = field(default_factory=dict)

    @property
    def n_skipped(self) -> int:
        """How many tasks were skipped (their database is absent)."""
        return sum(len(v) for v in self.skipped.values())


# ----------------------------------------------------------------------------- reading

def _read_kb(path: Path, problems: list[RecordProblem]) -> dict[int, dict]:
    """Knowledge base ``{id: entry}`` of one database (``<db>_kb.jsonl``: ``id``, ``knowledge``,
    ``description``, ``definition``, ``type``, ``children_knowledge``), streamed; bad entries become problems."""
    kb: dict[int, dict] = {}
    for ln, rec in iter_jsonl(path, problems, "knowledge base"):
        where = lambda f, m, ln=ln: problems.append(RecordProblem(str(path), ln, f, m))  # noqa: E731
        if not isinstance(rec, dict):
            where("<record>", f"must be a JSON object, got {type(rec).__name__}")
            continue
        kid = rec.get("id")
        if isinstance(kid, bool) or not isinstance(kid, int):
            where("id", f"must be an integer, got {kid!r}")
            continue
        if not isinstance(rec.get("knowledge"), str) or not rec["knowledge"].strip():
            where("knowledge", "must be a non-empty string")
            continue
        for f in ("description", "definition"):
            if rec.get(f) is not None and not isinstance(rec[f], str):
                where(f, f"must be a string, got {type(rec[f]).__name__}")
        if kid in kb:
            where("id", f"duplicate knowledge id {kid}")
            continue
        kb[kid] = rec
    return kb


# ----------------------------------------------------------------------------- words for the user

_LATEX = (
    (re.compile(r"\\(?:begin|end)\{[A-Za-z*]+\}"), ""),
    (re.compile(r"\\\\"), "; "),          # a line break of a cases / array environment
    (re.compile(r"\s&\s"), " "),            # a column separator there
    (re.compile(r"\\\s"), " "),            # an explicit space
    (re.compile(r"\\[()\[\]]"), ""),        # inline / display math delimiters \( \) \[ \]
    (re.compile(r"\\\{"), "("),
    (re.compile(r"\\\}"), ")"),
    (re.compile(r"\\(?:text|mathrm|mathit|textbf|operatorname|mathbf)\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}"), r"(\1) / (\2)"),
    (re.compile(r"\\sqrt\{([^{}]*)\}"), r"sqrt(\1)"),
    (re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\s*"), ""),
    (re.compile(r"\\(?:times|cdot)(?![A-Za-z])"), "×"),
    (re.compile(r"\\(?:leq|le)(?![A-Za-z])"), "≤"),
    (re.compile(r"\\(?:geq|ge)(?![A-Za-z])"), "≥"),
    (re.compile(r"\\neq(?![A-Za-z])"), "≠"),
    (re.compile(r"\\(?:approx|sim)(?![A-Za-z])"), "≈"),
    (re.compile(r"\\sum(?![A-Za-z])"), "Σ"),
    (re.compile(r"\\in(?![A-Za-z])"), "∈"),
    (re.compile(r"\\(?:log|ln|exp|min|max|sum)(?![A-Za-z])"), lambda m: m.group(0)[1:]),
    (re.compile(r"\\([%_&$#])"), r"\1"),
    (re.compile(r"\\(?:quad|qquad|,|;|!)"), " "),
    (re.compile(r"\\([A-Za-z]+)"), r"\1"),   # any other command: its name (\alpha -> alpha)
)


def plain_math(text: str) -> str:
    """A knowledge-base definition with its LaTeX reduced to plain text (``$\\text{SNQI} = a \\times b$`` ->
    ``SNQI = a × b``), for evidence lines and the user's statements. Text, not SQL: regular expressions suffice.

    Args:
        text: the KB text (may be empty).
    Returns:
        The text without ``$`` delimiters, ``\\text{}`` wrappers and common commands; whitespace collapsed.
    """
    s = text or ""
    for _ in range(4):  # nested \frac{\text{a}}{\text{b}}: inner wrappers first, then the outer command
        before = s
        for pat, rep in _LATEX:
            s = pat.sub(rep, s)
        if s == before:
            break
    s = s.replace("$", "").replace("{", "").replace("}", "")
    return re.sub(r"\s+", " ", s).strip()


class _TermDescriber(_Describer):
    """Plain-language rendering of a BIRD-Interact SQL snippet: the fragments describer (ABISS §5.2 technical
    answers, :mod:`textsql_clarify.simulators.fragments`) plus the functions these snippets use (ROUND,
    COALESCE, CASE, JSON paths, window functions, ...) and conditions inside expressions."""

    def __init__(self) -> None:
        super().__init__({}, set())

    def expr(self, e: exp.Expression, depth: int = 0) -> str:  # noqa: C901 - one branch per node type
        d = depth + 1
        if depth > 12:
            return "a computed value"
        if isinstance(e, (exp.Predicate, exp.Connector, exp.Not)) and not isinstance(e, exp.Exists):
            return self.condition(e, d)
        if isinstance(e, exp.Paren) and isinstance(e.this, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            return f"({self.expr(e.this, d)})"   # a formula keeps its grouping: "x times (1 minus y)"
        if isinstance(e, (exp.Sum, exp.Avg)) and isinstance(e.this, (exp.Case, exp.If)):
            flag = _indicator(e.this)
            if flag is not None:   # SUM(CASE WHEN c THEN 1 ELSE 0 END): a count; AVG of it: a share
                what = "the number of records" if isinstance(e, exp.Sum) else "the share of records"
                return f"{what} where {self.condition(flag, d)}"
        if isinstance(e, exp.Round):
            dec = e.args.get("decimals")
            return f"{self.expr(e.this, d)} rounded to {self.expr(dec, d) if dec is not None else 0} decimals"
        if isinstance(e, exp.Coalesce):
            rest = [self.expr(x, d) for x in e.expressions]
            return f"{self.expr(e.this, d)} (or {_join_list(rest).replace(' and ', ' or ')} when it is missing)"
        if isinstance(e, exp.Nullif):
            return self.expr(e.this, d)
        if isinstance(e, exp.Case):
            subject = e.this
            parts = []
            for w in e.args.get("ifs") or []:
                cond = (f"{self.expr(subject, d)} is {self.expr(w.this, d)}" if subject is not None
                        else self.condition(w.this, d))
                parts.append(f"{self.expr(w.args.get('true'), d)} when {cond}")
            default = e.args.get("default")
            if default is not None:
                parts.append(f"otherwise {self.expr(default, d)}")
            return ", ".join(parts) or "a computed value"
        if isinstance(e, exp.If):
            out = f"{self.expr(e.args.get('true'), d)} when {self.condition(e.this, d)}"
            false = e.args.get("false")
            return out + (f", otherwise {self.expr(false, d)}" if false is not None else "")
        if isinstance(e, (exp.JSONExtract, exp.JSONExtractScalar)):
            path = e.expression
            raw = path.this if isinstance(path, exp.Literal) else path.sql(dialect="sqlite") if path else ""
            keys = [k for k in re.split(r"[$.\[\]'\"]+", str(raw)) if k and not k.isdigit()]
            what = _words(keys[-1]) if keys else "entry"
            return f"the {what} recorded in {self.expr(e.this, d)}"
        unary = {exp.Abs: "the absolute value of", exp.Sqrt: "the square root of", exp.Ln: "the natural logarithm of",
                 exp.Length: "the length of", exp.Median: "the median of", exp.Stddev: "the standard deviation of",
                 exp.StddevPop: "the standard deviation of", exp.StddevSamp: "the standard deviation of",
                 exp.Variance: "the variance of", exp.Exp: "e to the power of", exp.Floor: "the floor of",
                 exp.Ceil: "the ceiling of"}
        for cls, word in unary.items():
            if isinstance(e, cls):
                return f"{word} {self.expr(e.this, d)}"
        if isinstance(e, exp.Log):
            base = e.this if e.expression is not None else None
            arg = e.expression if e.expression is not None else e.this
            return f"the logarithm{' base ' + self.expr(base, d) if base is not None else ''} of {self.expr(arg, d)}"
        if isinstance(e, exp.Pow):
            return f"{self.expr(e.this, d)} to the power of {self.expr(e.expression, d)}"
        if isinstance(e, exp.Mod):
            return f"the remainder of {self.expr(e.this, d)} divided by {self.expr(e.expression, d)}"
        if isinstance(e, (exp.Lower, exp.Upper, exp.Trim, exp.Replace)):
            return self.expr(e.this, d)
        if isinstance(e, exp.Window):
            spec = [self.expr(o.this if isinstance(o, exp.Ordered) else o, d)
                    for o in (e.args.get("order").expressions if e.args.get("order") else [])]
            part = [self.expr(x, d) for x in e.args.get("partition_by") or []]
            inner = self.expr(e.this, d)
            if isinstance(e.this, (exp.RowNumber, exp.Anonymous)) or e.this.key in ("rank", "denserank", "rownumber"):
                inner = "the rank"
            where = f" within each {_join_list(part)}" if part else ""
            return f"{inner}{where}{' by ' + _join_list(spec) if spec else ''}"
        if isinstance(e, (exp.CurrentDate, exp.CurrentTimestamp)):
            return "today's date"
        if isinstance(e, exp.Ordered):
            return self.expr(e.this, d)
        if isinstance(e, exp.Tuple):
            return _join_list([self.expr(x, d) for x in e.expressions])
        out = super().expr(e, depth)
        if out == "a computed value" and isinstance(e, exp.Func):
            args = [self.expr(a, d) for a in e.args.values() if isinstance(a, exp.Expression)]
            args += [self.expr(a, d) for v in e.args.values() if isinstance(v, list) for a in v
                     if isinstance(a, exp.Expression)]
            name = e.name if isinstance(e, exp.Anonymous) else e.key
            return f"the {_words(name)} of {_join_list(args)}" if args else f"the {_words(name)}"
        return out


def _indicator(e: exp.Expression) -> exp.Expression | None:
    """The condition ``c`` of ``CASE WHEN c THEN 1 ELSE 0 END`` (or ``IIF(c, 1, 0)``), else ``None``."""
    def num(x: exp.Expression | None) -> float | None:
        try:
            return float(x.this) if isinstance(x, exp.Literal) and not x.is_string else None
        except ValueError:
            return None
    if isinstance(e, exp.Case) and e.this is None and len(e.args.get("ifs") or []) == 1:
        w = e.args["ifs"][0]
        if num(w.args.get("true")) == 1 and num(e.args.get("default")) in (0, None):
            return w.this
    if isinstance(e, exp.If) and num(e.args.get("true")) == 1 and num(e.args.get("false")) in (0, None):
        return e.this
    return None


_LEAD = re.compile(r"^\s*(select|with|from|where|and|or|having|group\s+by|order\s+by|limit|"
                   r"(?:(?:left|right|inner|full|cross)\s+)?(?:outer\s+)?join)\b", re.IGNORECASE)


def _parse_snippet(snippet: str) -> tuple[exp.Select, bool] | None:
    """The snippet as a SELECT (``(tree, wrapped)``: ``wrapped`` when a placeholder ``FROM _t`` was added to
    make a clause fragment parse), or ``None`` when sqlglot cannot read it."""
    s = snippet.strip().rstrip(";")
    m = _LEAD.match(s)
    lead = re.sub(r"\s+", " ", m.group(1).lower()) if m else ""
    if lead in ("select", "with"):
        tries = [(s, False)]
    elif lead == "from":
        tries = [("SELECT * " + s, False)]
    elif lead in ("and", "or"):
        tries = [("SELECT * FROM _t WHERE 1 = 1 " + s, True)]
    elif lead:
        tries = [("SELECT * FROM _t " + s, True)]
    else:
        tries = [("SELECT " + s, False), ("SELECT * FROM _t WHERE " + s, True)]
    for sql, wrapped in tries:
        try:
            trees = sqlglot.parse(sql, read="sqlite")
        except (SqlglotError, RecursionError, ValueError):
            continue
        if len(trees) == 1 and isinstance(trees[0], exp.Select):
            return trees[0], wrapped
    return None


def _alias_words(e: exp.Expression) -> str:
    return _words(e.alias) if isinstance(e, exp.Alias) and e.alias else ""


def describe_snippet(snippet: str) -> str | None:
    """What a BIRD-Interact ambiguity snippet (a SQL fragment: select items, a WHERE / AND condition, ORDER BY,
    LIMIT, a JOIN ...) means, in words with no SQL syntax and no table qualifiers, or ``None`` when sqlglot
    cannot parse it.

    ``"SUM(CASE WHEN SNQI > 0 THEN 1 ELSE 0 END) as analyzable_signals"`` ->
    ``"the number of records where snqi is more than 0 (analyzable signals)"``.

    Args:
        snippet: the ``sql_snippet`` of an ambiguity term.
    Returns:
        The description, or ``None``.
    """
    parsed = _parse_snippet(snippet)
    if parsed is None:
        return None
    tree, wrapped = parsed
    desc = _TermDescriber()
    parts: list[str] = []
    try:
        items = [] if (len(tree.expressions) == 1 and isinstance(tree.expressions[0], exp.Star)) else tree.expressions
        for e in items:
            text = desc.expr(e)
            alias = _alias_words(e)
            parts.append(f"{text} ({alias})" if alias and alias not in text else text)
        frm = tree.args.get("from_") or tree.args.get("from")
        if frm is not None and not wrapped and isinstance(frm.this, exp.Table):
            parts.append(f"from the {_words(frm.this.name)} records")
        for j in tree.args.get("joins") or []:
            tbl = j.this.name if isinstance(j.this, exp.Table) else "related"
            keep = ", keeping rows that have none" if (j.side or "").upper() == "LEFT" else ""
            parts.append(f"together with the matching {_words(tbl)} records{keep}")
        where = tree.args.get("where")
        if where is not None:
            cond = where.this
            if wrapped and isinstance(cond, (exp.And, exp.Or)) and cond.this.sql() == "1 = 1":
                cond = cond.expression
            parts.append(f"only where {desc.condition(cond)}")
        group = tree.args.get("group")
        if group is not None:
            parts.append(f"grouped by {_join_list([desc.expr(x) for x in group.expressions])}")
        having = tree.args.get("having")
        if having is not None:
            parts.append(f"keeping only groups where {desc.condition(having.this)}")
        order = tree.args.get("order")  # ORDER BY and LIMIT in the words of the gold fragments (ABISS §5.2)
        parts += [f.text for f in _order_fragments(order, desc)]
        parts += [f.text for f in _limit_fragments(tree, order is not None)]
    except (AttributeError, TypeError, KeyError, RecursionError):  # an AST shape the describer does not know
        return None
    text = "; ".join(p for p in parts if p)
    return text or None


def _norm_sql(s: str) -> str:
    return re.sub(r"\s+", " ", s or "").strip().lower()


def _kb_body(entry: dict) -> str:
    """``description. definition`` of a KB entry, LaTeX reduced (:func:`plain_math`)."""
    desc = plain_math(entry.get("description") or "").rstrip(".")
    definition = plain_math(entry.get("definition") or "")
    return ". ".join(x for x in (desc, definition) if x)


def _kb_statement(entry: dict) -> str:
    """``name: description. definition`` of a KB entry."""
    body = _kb_body(entry)
    return f"{entry['knowledge'].strip()}{': ' + body if body else ''}"


def _sentence(s: str) -> str:
    s = s.strip()
    return s if s.endswith((".", "!", "?")) else s + "."


def hidden_knowledge_of(task: dict, kb: dict[int, dict]) -> tuple[str, dict[str, int]]:
    """The user's hidden knowledge for one task: one stand-alone sentence per critical ambiguity term, then one per
    knowledge-ambiguity entry that no term already states (module docstring).

    A term is resolved by the KB entry of the knowledge-ambiguity entry with the same SQL snippet (name,
    description and definition: "By 'signal quality' I mean the Signal-to-Noise Quality Indicator (SNQI): ..."),
    else by its snippet in words (:func:`describe_snippet`), else, when sqlglot cannot read it, by the snippet
    quoted ("... what this expresses: <SQL>"), which the leakage guard may then keep from the reply.

    Args:
        task: one ``mini_interact.jsonl`` record (already checked by the loader).
        kb: the database's knowledge base ``{id: entry}``.
    Returns:
        ``(text, counts)``; counts: ``kb`` (terms stated from a KB entry), ``words`` (from the snippet in words),
        ``quoted`` (snippet quoted as SQL), ``knowledge`` (extra knowledge-entry sentences).
    """
    amb = task.get("user_query_ambiguity") or {}
    ka = task.get("knowledge_ambiguity") or []
    by_snippet = {}
    for k in ka:
        if k.get("deleted_knowledge") in kb:
            by_snippet.setdefault(_norm_sql(k.get("sql_snippet", "")), k["deleted_knowledge"])
    counts = {"kb": 0, "words": 0, "quoted": 0, "knowledge": 0}
    out: list[str] = []
    used: set[int] = set()
    seen_terms: set[tuple[str, str]] = set()
    for a in amb.get("critical_ambiguity") or []:
        term, snippet = a["term"].strip(), a.get("sql_snippet") or ""
        if (term.lower(), _norm_sql(snippet)) in seen_terms:
            continue
        seen_terms.add((term.lower(), _norm_sql(snippet)))
        kid = by_snippet.get(_norm_sql(snippet))
        if kid is not None:
            out.append(_sentence(f"By '{term}' I mean {_kb_statement(kb[kid])}"))
            used.add(kid)
            counts["kb"] += 1
            continue
        words = describe_snippet(snippet)
        if words:
            out.append(_sentence(f"By '{term}' I mean {words}"))
            counts["words"] += 1
        else:
            out.append(_sentence(f"By '{term}' I mean what this expresses: {snippet.strip()}"))
            counts["quoted"] += 1
    for k in ka:
        kid = k.get("deleted_knowledge")
        if kid in kb and kid not in used:
            used.add(kid)
            body = _kb_body(kb[kid]) or "as the knowledge base names it"
            out.append(_sentence(f"For {kb[kid]['knowledge'].strip()} I go by this definition: {body}"))
            counts["knowledge"] += 1
    return " ".join(out), counts


def evidence_of(task: dict, kb: dict[int, dict], limit: int = EVIDENCE_CHARS) -> tuple[list[str], int]:
    """The evidence shown to the agent: every KB entry except those the task's knowledge ambiguities delete
    (BIRD-Interact masks them: the system must ask), ``name: definition`` in id order, LaTeX reduced, whole
    entries while the rendered evidence (``- `` and a newline per line) stays within ``limit`` characters.

    Args:
        task: one task record; kb: its database's knowledge base.
        limit: most characters of rendered evidence.
    Returns:
        ``(lines, left_out)``: the lines and how many non-deleted entries did not fit.
    """
    deleted = {k.get("deleted_knowledge") for k in task.get("knowledge_ambiguity") or []}
    lines: list[str] = []
    used = 0
    left_out = 0
    for kid in sorted(kb):
        if kid in deleted:
            continue
        e = kb[kid]
        line = f"{e['knowledge'].strip()}: {plain_math(e.get('definition') or e.get('description') or '')}".rstrip(": ")
        cost = len(line) + 3
        if used + cost > limit:
            left_out += 1
            continue
        lines.append(line)
        used += cost
    return lines, left_out


# ----------------------------------------------------------------------------- records

def _check_terms(items: Any, fld: str, where: Callable[[str, str], None], *, knowledge: bool = False) -> bool:
    if not isinstance(items, list):
        where(fld, "must be a list")
        return False
    ok = True
    for k, a in enumerate(items):
        f = f"{fld}[{k}]"
        if not isinstance(a, dict):
            where(f, "must be an object {term, sql_snippet, is_mask, type}")
            ok = False
            continue
        if not isinstance(a.get("term"), str) or not a["term"].strip():
            where(f"{f}.term", "must be a non-empty string")
            ok = False
        if not isinstance(a.get("sql_snippet"), str):
            where(f"{f}.sql_snippet", "must be a string")
            ok = False
        if knowledge:
            kid = a.get("deleted_knowledge")
            if isinstance(kid, bool) or not isinstance(kid, int):
                where(f"{f}.deleted_knowledge", f"must be a knowledge-base id (integer), got {kid!r}")
                ok = False
    return ok


def _gold_of(rec: dict, where: Callable[[str, str], None]) -> tuple[str | None, dict]:
    """``(gold_sql or None, provenance fields)`` from ``sol_sql`` / ``preprocess_sql`` (module docstring)."""
    sol = rec.get("sol_sql")
    golds = [sol] if isinstance(sol, str) else sol if isinstance(sol, list) else None
    if golds is None and sol is not None:
        where("sol_sql", f"must be a list of SQL strings (empty when withheld), got {type(sol).__name__}")
        golds = []
    golds = [g for g in (golds or []) if isinstance(g, str) and g.strip()]
    pre = rec.get("preprocess_sql") or []
    if not golds:
        return None, {"gold": GOLD_WITHHELD}
    if len(golds) == 1 and not pre:
        return golds[0], {"gold": "given"}
    why = "needs preprocess_sql run first" if pre else f"has {len(golds)} statements"
    return None, {"gold": GOLD_WITHHELD, "gold_note": f"sol_sql {why}: not a single read-only query, treated as withheld"}


def _resolve(dir_path: str | Path) -> tuple[Path, Path]:
    p = Path(dir_path).expanduser().resolve()
    if p.is_file() and p.suffix == ".jsonl":
        return p.parent, p
    if not p.is_dir():
        raise DatasetError(f"mini-interact folder not found: {p} (expected <dir>/{TASK_FILE} and <dir>/<db>/<db>.sqlite)")
    f = p / TASK_FILE
    if not f.is_file():
        raise DatasetError(f"mini-interact task file not found: {f}")
    return p, f


def load_mini_interact(dir_path: str | Path, *, db_root: str | Path | None = None) -> MiniInteractLoad:
    """Load mini-interact tasks as ambiguous, clarification-only samples (module docstring for the mapping).

    Args:
        dir_path: the release folder (``mini_interact.jsonl`` and ``<db>/`` folders), or the ``.jsonl`` itself.
        db_root: folder of ``<db>/<db>.sqlite`` when the databases live elsewhere (``None``: ``dir_path``).
    Returns:
        :class:`MiniInteractLoad`: the samples, the task count and the tasks skipped per absent database.
    Warns:
        SkippedRecordsWarning: one line naming how many tasks were skipped, per absent database.
    Raises:
        DatasetError: the folder or task file is missing; any record is bad (every problem listed with file, line
            and field: missing or mistyped fields, a duplicate ``instance_id``, a ``deleted_knowledge`` id absent
            from the knowledge base, a database with a ``.sqlite`` but no ``<db>_kb.jsonl``, a task without any
            ambiguity term); or no task has its database.
    """
    root, task_file = _resolve(dir_path)
    db_dir = Path(db_root).expanduser().resolve() if db_root is not None else root
    if not db_dir.is_dir():
        raise DatasetError(f"db_root is not a directory: {db_dir}")
    problems: list[RecordProblem] = []
    kbs: dict[str, dict[int, dict] | None] = {}
    have_db: dict[str, bool] = {}
    samples: list[Sample] = []
    skipped: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    n_tasks = 0
    for ln, rec in iter_jsonl(task_file, problems, "mini-interact task file"):
        n_tasks += 1
        n_before = len(problems)
        where = lambda f, m, ln=ln: problems.append(RecordProblem(str(task_file), ln, f, m))  # noqa: E731
        if not isinstance(rec, dict):
            where("<record>", f"must be a JSON object, got {type(rec).__name__}")
            continue
        for f in ("instance_id", "selected_database", "amb_user_query"):
            if not isinstance(rec.get(f), str) or not rec[f].strip():
                where(f, "is required and must be a non-empty string")
        amb = rec.get("user_query_ambiguity")
        if not isinstance(amb, dict):
            where("user_query_ambiguity", "must be an object {critical_ambiguity, non_critical_ambiguity}")
            amb = {}
        crit_ok = _check_terms(amb.get("critical_ambiguity", []), "user_query_ambiguity.critical_ambiguity", where)
        _check_terms(amb.get("non_critical_ambiguity", []), "user_query_ambiguity.non_critical_ambiguity", where)
        ka_ok = _check_terms(rec.get("knowledge_ambiguity", []), "knowledge_ambiguity", where, knowledge=True)
        iid = rec.get("instance_id")
        if isinstance(iid, str) and iid.strip():
            if iid in seen:
                where("instance_id", f"duplicate instance_id {iid!r} (first on line {seen[iid]})")
            else:
                seen[iid] = ln
        if crit_ok and ka_ok and not (amb.get("critical_ambiguity") or rec.get("knowledge_ambiguity")):
            where("user_query_ambiguity", "the task has no critical or knowledge ambiguity term: nothing to clarify")
        gold, gold_prov = _gold_of(rec, where)
        ext = rec.get("external_knowledge")
        if ext is not None and (not isinstance(ext, list) or not all(isinstance(e, str) for e in ext)):
            where("external_knowledge", f"must be a list of strings (may be empty), got {type(ext).__name__}")
        if len(problems) > n_before:
            continue
        db = rec["selected_database"].strip()
        if db not in have_db:
            have_db[db] = (db_dir / db / f"{db}.sqlite").is_file()
        if not have_db[db]:
            skipped.setdefault(db, []).append(iid)
            continue
        if db not in kbs:
            kb_path = root / db / f"{db}_kb.jsonl"
            kbs[db] = _read_kb(kb_path, problems) if kb_path.is_file() else None
        kb = kbs[db]
        if kb is None:
            where("selected_database", f"knowledge base not found: {root / db / (db + '_kb.jsonl')}")
            continue
        for k, a in enumerate(rec.get("knowledge_ambiguity") or []):
            if a["deleted_knowledge"] not in kb:
                where(f"knowledge_ambiguity[{k}].deleted_knowledge",
                      f"knowledge id {a['deleted_knowledge']} is not in {db}_kb.jsonl")
        if len(problems) > n_before:
            continue
        hk, hk_counts = hidden_knowledge_of(rec, kb)
        evidence, left_out = evidence_of(rec, kb)
        evidence += [e for e in rec.get("external_knowledge") or [] if isinstance(e, str) and e.strip()]
        prov = {
            "source": _SOURCE, "instance_id": iid, **gold_prov,
            "critical_terms": [a["term"] for a in amb.get("critical_ambiguity") or []],
            "critical_ambiguity": [{"term": a["term"], "type": a.get("type"), "is_mask": a.get("is_mask")}
                                   for a in amb.get("critical_ambiguity") or []],
            "non_critical_ambiguity": [{"term": a["term"], "type": a.get("type"), "sql_snippet": a["sql_snippet"]}
                                       for a in amb.get("non_critical_ambiguity") or []],
            "knowledge_ambiguity": [{"term": a["term"], "kb_id": a["deleted_knowledge"], "is_mask": a.get("is_mask")}
                                    for a in rec.get("knowledge_ambiguity") or []],
            "hidden_knowledge_from": hk_counts, "evidence_left_out": left_out,
            "high_level": rec.get("high_level"), "category": rec.get("category"),
        }
        native = {"id": f"{_SOURCE}-{iid}", "db_id": db, "db_path": str(db_dir / db / f"{db}.sqlite"),
                  "question": rec["amb_user_query"].strip(), "group": "ambiguous", "subcategory": None,
                  "gold_sql": gold, "hidden_knowledge": hk, "evidence": evidence, "difficulty": "unknown",
                  "provenance": prov}
        s, probs = sample_from_dict(native, file=str(task_file), line=ln)
        problems.extend(probs)
        if s is not None:
            samples.append(s)
    if problems:
        raise DatasetError(f"invalid mini-interact data in {root}", problems)
    if not samples:
        raise DatasetError(f"no mini-interact task in {task_file} has its database under {db_dir} "
                           f"({n_tasks} tasks; expected <db>/<db>.sqlite)")
    if skipped:
        import warnings

        from ..errors import SkippedRecordsWarning

        warnings.warn(SkippedRecordsWarning(
            f"mini-interact {dir_path}: {sum(map(len, skipped.values()))} of {n_tasks} tasks skipped, their database "
            f"is absent: " + ", ".join(f"{db} ({len(v)})" for db, v in sorted(skipped.items()))), stacklevel=2)
    return MiniInteractLoad(samples, n_tasks, skipped)


def load_from_spec(rest: str, *, spec: str, db_root: str | None) -> list[Sample]:
    """The ``mini-interact:<dir>`` spec (:func:`textsql_clarify.datasets.load_dataset`).

    Args:
        rest: ``<dir>`` (the spec after ``mini-interact:``); spec: the whole spec, for messages.
        db_root: folder of ``<db>/<db>.sqlite`` files, or ``None`` for ``<dir>``.
    Returns:
        The samples (tasks whose database is absent are skipped; :func:`load_mini_interact` counts them).
    Raises:
        DatasetError: as :func:`load_mini_interact`, or an empty ``<dir>``.
    """
    if not rest.strip():
        raise DatasetError(f"bad dataset spec {spec!r}: expected 'mini-interact:<dir>'")
    return load_mini_interact(rest, db_root=db_root).samples
