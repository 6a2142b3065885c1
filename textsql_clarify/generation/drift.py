"""The model-free drift recipe: post-drift golds by sqlglot AST edits of an anchor (TIDE §2.2, §3.2).

From one anchor (a gold SQL over a SQLite database) the recipe builds candidate post-drift golds of
each TIDE subtype, by editing the anchor's AST (never its text):

``value``
    one literal of a filter (a ``WHERE`` comparison, an ``IN`` list item, a ``BETWEEN`` bound, in any
    query scope) replaced by another value that occurs in that column of the database, drawn with the
    rng (:meth:`DriftRecipe.value_candidates`).
``constraint``
    one filter removed: a ``WHERE`` conjunct (any scope, not a join equality, not one holding a
    subquery; an OR of filters goes whole, on one column or as an either-or over two), one bound of a
    ``BETWEEN`` range, a filter that both branches of a root set operation hold identically (from both
    at once), or a joined table that only filters the rows (it is read by nothing but its join and
    filter conditions) removed with those conditions (:meth:`DriftRecipe.constraint_candidates`).
``projection``
    an output column replaced by another column of its table, an output column removed, or an
    aggregate replaced by another over the same column (:meth:`DriftRecipe.projection_candidates`).

Edits that TIDE's definition can never accept are not generated: a pure addition (a predicate or an
output column added, nothing withdrawn) keeps S_pre within S_post, so it is no drift (§2.2, the
``non_monotone`` check); a predicate added *with* one removed, or a range bound moved, is not a
constraint drift under Algorithm 1 (a moved bound is one changed literal: a ``value`` drift, which is
how the value candidates move ranges).

Every candidate gets a drift utterance from the style templates of
:mod:`~textsql_clarify.generation.utterances` and passes the checks of
:mod:`~textsql_clarify.generation.drift_checks` in order (TIDE Table 7). Per anchor and subtype the
recipe tries at most :attr:`DriftRecipe.tries` candidates and keeps at most
:attr:`DriftRecipe.per_subtype` accepted ones. Deterministic for a seeded rng.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from sqlglot import exp

from ..errors import SQLParseError
from ..rewards.commitments import commitment_set
from ..rewards.execution import is_empty_result
from ..rewards.sql_canonical import _double_quoted_literals
from ..samples import DriftEvent, Sample
from ..sql.sandbox import SQLiteSandbox, get_sandbox
from ..sql.schema import DIALECT, parse_sql
from .base import Accepted, Anchor, GenContext, OptionSpec, Outcome, Rejected
from .drift_checks import STAGES, check_drift_candidate
from .utterances import (aggregate_words, attribute_words, column_words, condition_words, entity_words,
                         flag_column_words, flag_value_words, relation_words, render_utterance, table_words,
                         value_words)

__all__ = ["DriftCandidate", "DriftRecipe", "SUBTYPES", "DEFAULT_PER_SUBTYPE", "DEFAULT_PROJECTION_FILL",
           "DEFAULT_PER_ANCHOR", "DEFAULT_TRIES", "DRIFT_OPTIONS"]

#: the subtypes, in the order the recipe tries them (TIDE §2.2)
SUBTYPES: tuple[str, ...] = ("value", "constraint", "projection")
#: most accepted samples per anchor and subtype (option ``drift_per_subtype``: one number, or
#: ``value=3,constraint=8,projection=1``). TIDE keeps one drift per anchor (``drift_per_subtype=1``,
#: ``drift_per_anchor=0``); the defaults grow a corpus whose subtypes are balanced on Spider dev (each 25-40 %,
#: ``docs/generation.md``), where filters are rarer than outputs: 300 of the 1,034 golds give a value drift and
#: 332 a constraint drift, 592 a projection drift.
DEFAULT_PER_SUBTYPE: Mapping[str, int] = {"value": 3, "constraint": 8, "projection": 1}
#: most projection samples of an anchor that gave no value and no constraint sample (option
#: ``drift_projection_fill``): such anchors have no filter to drift on
DEFAULT_PROJECTION_FILL = 2
#: projection samples only fill an anchor up to this many samples in all (option ``drift_per_anchor``;
#: 0 = no limit); value and constraint samples are not limited by it
DEFAULT_PER_ANCHOR = 3
#: most candidates checked per anchor and subtype (option ``drift_tries``)
DEFAULT_TRIES = 24
#: most distinct values read from a column to draw replacements from
VALUE_POOL = 1000
#: longest text value used as a replacement (characters)
MAX_VALUE_CHARS = 40

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_FLIP = {"GT": "LT", "GTE": "LTE", "LT": "GT", "LTE": "GTE", "EQ": "EQ", "NEQ": "NEQ"}
_AGGS = {"Avg": exp.Avg, "Max": exp.Max, "Min": exp.Min, "Sum": exp.Sum}
#: column names that say nothing without their table ("name" -> "country name")
_GENERIC_COLUMNS = frozenset({"name", "id", "type", "code", "title", "description", "details", "status"})
_NUMERIC_TYPES = ("INT", "REAL", "NUM", "FLOA", "DOUB", "DEC")


@dataclass
class DriftCandidate:
    """One candidate post-drift gold, before its checks.

    Attributes:
        subtype: the assigned subtype (``value``, ``constraint``, ``projection``).
        post_sql: the post-drift gold SQL (the edited AST, rendered in the SQLite dialect).
        kind: the edit kind, a key of :data:`~textsql_clarify.generation.utterances.TEMPLATES`.
        edit: a short description of the AST edit, e.g. ``"value: singer.Country 'France' -> 'Netherlands'"``.
        slots: the words for the utterance templates.
        identifiers: schema names the utterance must not carry verbatim.
    """

    subtype: str
    post_sql: str
    kind: str
    edit: str
    slots: dict[str, str]
    identifiers: tuple[str, ...] = ()


@dataclass
class _Query:
    """The anchor's parsed tree and what the generators read from it."""

    tree: exp.Expression
    schema: Mapping[str, Mapping[str, str]]
    question: str
    selects: list[exp.Select] = field(default_factory=list)


def _render(tree: exp.Expression) -> str:
    return tree.sql(dialect=DIALECT)


def _strip(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _conjuncts(where: exp.Expression | None) -> list[exp.Expression]:
    """Top-level AND operands of a WHERE (in order), parentheses looked through."""
    if where is None:
        return []
    node = _strip(where.this if isinstance(where, exp.Where) else where)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _disjuncts(node: exp.Expression) -> list[exp.Expression]:
    """Top-level OR operands of a condition (in order), parentheses looked through."""
    node = _strip(node)
    if isinstance(node, exp.Or):
        return _disjuncts(node.this) + _disjuncts(node.expression)
    return [node]


def _has_subquery(node: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Select, exp.Subquery, exp.Union, exp.Intersect, exp.Except))
               for n in node.walk() if n is not node)


def _in_set_operation(sel: exp.Select) -> bool:
    """True when ``sel`` lies inside a UNION / INTERSECT / EXCEPT (a branch, or a subquery of one)."""
    p = sel.parent
    while p is not None:
        if isinstance(p, exp.SetOperation):
            return True
        p = p.parent
    return False


def _collapses(sel: exp.Select) -> bool:
    """True when ``sel`` aggregates without a GROUP BY (an aggregate in its output or HAVING, its own
    scope): it returns one row, whatever the table holds."""
    if sel.args.get("group") is not None:
        return False
    parts = list(sel.expressions) + ([sel.args["having"]] if sel.args.get("having") is not None else [])
    return any(isinstance(n, exp.AggFunc) for p in parts
               for n in p.walk(prune=lambda n: isinstance(n, (exp.Select, exp.Subquery))))


def _root_branch(sel: exp.Select, root: exp.Expression) -> bool:
    """True when ``sel`` is one of the two branches of ``root``, an INTERSECT or an EXCEPT (not a UNION:
    :meth:`DriftRecipe.constraint_candidates`)."""
    return isinstance(root, (exp.Intersect, exp.Except)) and sel.parent is root


def _own_select(node: exp.Expression) -> exp.Select | None:
    p = node.parent
    while p is not None and not isinstance(p, exp.Select):
        p = p.parent
    return p


def _sources(sel: exp.Select) -> dict[str, exp.Table]:
    """alias-or-name (lower) -> Table node, for the base tables of ``sel``'s FROM and JOINs."""
    out: dict[str, exp.Table] = {}
    nodes = []
    if sel.args.get("from_") is not None:
        nodes.append(sel.args["from_"].this)
    nodes += [j.this for j in sel.args.get("joins") or []]
    for t in nodes:
        if isinstance(t, exp.Table) and t.name:
            out[(t.alias or t.name).lower()] = t
    return out


def _resolve(col: exp.Column, sel: exp.Select | None, schema: Mapping) -> tuple[str, str] | None:
    """(table name as written, column name as written) of a column of ``sel``, looking outward for a
    correlated one; ``None`` when it does not resolve to one base table."""
    name = col.name
    if not name or isinstance(col.this, exp.Star):
        return None
    while sel is not None:
        src = _sources(sel)
        if col.table:
            t = src.get(col.table.lower())
            if t is not None:
                return (t.name, name) if name.lower() in schema.get(t.name.lower(), {}) else None
        else:
            hits = [t for t in src.values() if name.lower() in schema.get(t.name.lower(), {})]
            if len(hits) == 1:
                return hits[0].name, name
            if len(hits) > 1:
                return None
        sel = _own_select(sel)
    return None


def _literal_value(node: exp.Expression) -> tuple[Any, bool] | None:
    """(value, is_string) of a literal operand (``-3`` included); ``None`` for anything else."""
    neg = False
    if isinstance(node, exp.Neg):
        neg, node = True, node.this
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return (None, True) if neg else (node.this, True)
    try:
        v = float(node.this)
    except ValueError:
        return None
    v = -v if neg else v
    return (int(v) if v.is_integer() and "." not in node.this else v), False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return str(a) == str(b)


def _as_number(v: Any) -> Any:
    """``'2014'`` -> ``2014``, ``'3.5'`` -> ``3.5``; anything else unchanged."""
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        if f == f and abs(f) != float("inf"):
            return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f
    return v


def _shown(value: Any, column: str) -> Any:
    """A value as the utterance says it: a flag column's code in words (``IsOfficial`` ``'T'`` -> ``true``)."""
    if flag_column_words(column) is not None:
        return flag_value_words(value) or value
    return value


def _said(op: str, value: Any, column: str) -> str:
    """How a value drift's utterance names the literal it changes (lower case): ``France`` for an equality,
    ``less than 2003`` for another comparison, a flag's code in words (``true``)."""
    shown = _shown(value, column)
    return (value_words(shown) if op == "EQ" else condition_words(op, shown)).lower()


def _excluded_words(c: exp.Expression, column: str) -> str | None:
    """What an exclusion filter leaves out, in the user's words: ``name != 'Jessie Alloway'`` and ``NOT name =
    'Jessie Alloway'`` -> ``Jessie Alloway``; ``NOT x IN ('a', 'b')`` -> ``a and b``; ``None`` for any other
    filter ("not just other than Jessie Alloway" would name nothing; ``docs/generation.md`` "Quality: a fresh
    reader's ratings")."""
    neg = isinstance(c, exp.Not)
    node = _strip(c.this) if neg else c
    if isinstance(node, (exp.NEQ, exp.EQ)) and (neg != isinstance(node, exp.NEQ)):
        lit = node.expression if isinstance(node.this, exp.Column) else node.this
        lv = _literal_value(lit)
        return value_words(_shown(lv[0], column)) if lv and lv[0] is not None else None
    if neg and isinstance(node, exp.In) and not node.args.get("query"):
        vals = [_literal_value(i) for i in node.expressions]
        if not vals or any(v is None or v[0] is None for v in vals):
            return None
        items = [value_words(_shown(v[0], column)) for v in vals]
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return None


def _make_literal(value: Any, as_string: bool) -> exp.Expression | None:
    if as_string:
        return exp.Literal.string(value_words(value) if isinstance(value, float) else str(value))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    lit = exp.Literal.number(abs(value) if not isinstance(value, float) or not value.is_integer()
                             else int(abs(value)))
    return exp.Neg(this=lit) if value < 0 else lit


def _plain_identifier(name: str) -> bool:
    """True when a schema name reads as a plain word (no underscore, no inner capital, no digit run)."""
    return name.isalpha() and (name.islower() or name[1:].islower() or name.isupper())


#: characters that make a stored value read as markup or code, not as something a user types
#: (``[South]Mande``, ``{x}``, ``a|b``)
_MARKUP = "'\"`_=<>*%\\;[]{}|^~"


def _clean_value(v: Any) -> bool:
    """A replacement value the user can say: short text without quoting, markup or code-like characters
    (:data:`_MARKUP`: brackets, braces, pipes ...), control characters, padding or runs of spaces; any
    number (the fresh reader's samples 45, 47: ``[South]Mande``)."""
    if v is None or isinstance(v, (bytes, bool)):
        return False
    if isinstance(v, (int, float)):
        return True
    s = str(v)
    return (0 < len(s) <= MAX_VALUE_CHARS and s == s.strip() and s.isprintable() and "  " not in s
            and not any(ch in s for ch in _MARKUP) and "." not in s.replace(". ", ""))


class DriftRecipe:
    """The model-free drift recipe (TIDE §2.2 subtypes, §3.2 drift injection, App. B Table 7).

    Per anchor, value candidates are checked first, then constraint, then projection; each subtype
    stops at its cap or after :attr:`tries` candidates. Projection samples are capped by
    ``per_subtype["projection"]``, or by :attr:`projection_fill` when the anchor gave no value and no
    constraint sample, and never take the anchor past :attr:`per_anchor` samples in all.

    Attributes:
        name: ``"drift"``.
        stages: :data:`~textsql_clarify.generation.drift_checks.STAGES`.
        needs_model: ``False``.
        per_subtype: most accepted samples per anchor and subtype.
        projection_fill: most projection samples of an anchor without a value or constraint sample.
        per_anchor: the total that projection samples fill an anchor up to (0: no limit).
        tries: most candidates checked per anchor and subtype.

    Args:
        per_subtype: an int for every subtype, a mapping subtype -> int, or the option string
            (default :data:`DEFAULT_PER_SUBTYPE`).
        projection_fill, per_anchor, tries: defaults :data:`DEFAULT_PROJECTION_FILL`,
            :data:`DEFAULT_PER_ANCHOR`, :data:`DEFAULT_TRIES`.

    The options ``drift_per_subtype``, ``drift_projection_fill``, ``drift_per_anchor`` and ``drift_tries``
    of :attr:`GenContext.options` override them per run.

    Raises:
        ValueError: an unknown subtype, a negative count, or ``tries < 1``.
    """

    name = "drift"
    stages: tuple[str, ...] = STAGES
    needs_model = False

    def __init__(self, per_subtype: int | str | Mapping[str, int] | None = None, *,
                 projection_fill: int = DEFAULT_PROJECTION_FILL, per_anchor: int = DEFAULT_PER_ANCHOR,
                 tries: int = DEFAULT_TRIES):
        self.per_subtype = self._per_subtype(per_subtype)
        self.projection_fill = self._count("projection_fill", projection_fill)
        self.per_anchor = self._count("per_anchor", per_anchor)
        self.tries = self._count("tries", tries, 1)
        self._values: dict[tuple[str, str, str], list] = {}

    @staticmethod
    def _count(name: str, value: int | str, minimum: int = 0) -> int:
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"drift option {name} must be an integer, got {value!r}") from None
        if n < minimum:
            raise ValueError(f"drift option {name} must be >= {minimum}, got {n}")
        return n

    @staticmethod
    def _per_subtype(spec: int | str | Mapping[str, int] | None) -> dict[str, int]:
        if spec is None:
            return dict(DEFAULT_PER_SUBTYPE)
        try:
            if isinstance(spec, str):
                spec = spec.strip()
                if "=" not in spec:
                    spec = int(spec)
                else:
                    spec = {k.strip(): int(v) for k, v in (p.split("=", 1) for p in spec.split(",") if p.strip())}
        except ValueError:
            raise ValueError(f"drift_per_subtype must be an integer or 'value=N,constraint=N,projection=N', "
                             f"got {spec!r}") from None
        if isinstance(spec, int):
            spec = {s: spec for s in SUBTYPES}
        unknown = set(spec) - set(SUBTYPES)
        if unknown:
            raise ValueError(f"unknown drift subtype(s) {sorted(unknown)}; known: {SUBTYPES}")
        out = {s: int(spec.get(s, DEFAULT_PER_SUBTYPE[s])) for s in SUBTYPES}
        if any(v < 0 for v in out.values()):
            raise ValueError(f"per-subtype counts must be >= 0, got {out}")
        return out

    # ------------------------------------------------------------------------------------------ run
    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """Candidates of each subtype from ``anchor``, each checked (TIDE Table 7 order) and accepted or
        rejected, within the caps of the class docstring.

        Args:
            anchor: the anchor (its database is opened read-only).
            rng: the pipeline's generator for (seed, recipe, anchor).
            ctx: the options ``drift_per_subtype``, ``drift_projection_fill``, ``drift_per_anchor``,
                ``drift_tries`` are read; ``timeout_s`` limits each query.
        Returns:
            The outcomes, subtype by subtype. An anchor whose gold fails, returns nothing, or cannot be
            analysed gives one :class:`~textsql_clarify.generation.base.Rejected` (stage ``executes``,
            ``non_empty`` or ``parses``) and no candidates.
        Raises:
            ValueError: a bad option.
        """
        opts = ctx.options
        per = self._per_subtype(opts.get("drift_per_subtype", self.per_subtype))
        fill = self._count("drift_projection_fill", opts.get("drift_projection_fill", self.projection_fill))
        per_anchor = self._count("drift_per_anchor", opts.get("drift_per_anchor", self.per_anchor))
        tries = self._count("drift_tries", opts.get("drift_tries", self.tries), 1)
        sandbox = get_sandbox(anchor.db_path, timeout_s=ctx.timeout_s)
        pre = sandbox.execute_gold(f"drift-anchor:{anchor.id}", anchor.gold_sql)
        if not pre.ok or pre.truncated:
            return [Rejected("executes", f"the anchor's gold SQL fails ({pre.error_kind or 'truncated'}): "
                                         f"{pre.error_message or ''}".rstrip(": "))]
        if not pre.rows or is_empty_result(pre):
            return [Rejected("non_empty", "the anchor's gold SQL returns no rows (or only NULLs)")]
        try:
            query = self._query(anchor, sandbox)
            pre_set = commitment_set(anchor.gold_sql, sandbox.schema)
        except SQLParseError as e:
            return [Rejected("parses", f"the anchor's gold SQL cannot be analysed: {e.reason}")]
        out: list[Outcome] = []
        generators: dict[str, Callable[[_Query, random.Random, SQLiteSandbox], Iterator[DriftCandidate]]] = {
            "value": self.value_candidates, "constraint": self.constraint_candidates,
            "projection": self.projection_candidates}
        total = 0
        for subtype in SUBTYPES:
            cap = per[subtype]
            if subtype == "projection":
                if total == 0:
                    cap = fill
                if per_anchor:
                    cap = min(cap, max(0, per_anchor - total))
            if cap == 0:
                continue
            accepted, tried, seen = 0, 0, {anchor.gold_sql}
            for cand in generators[subtype](query, rng, sandbox):
                if cand.post_sql in seen:
                    continue
                seen.add(cand.post_sql)
                tried += 1
                out.append(self._check(anchor, cand, accepted, rng, sandbox, pre, pre_set))
                accepted += isinstance(out[-1], Accepted)
                if accepted >= cap or tried >= tries:
                    break
            total += accepted
        return out

    def _check(self, anchor: Anchor, cand: DriftCandidate, k: int, rng: random.Random, sandbox: SQLiteSandbox,
               pre, pre_set) -> Outcome:
        utt = render_utterance(cand.kind, cand.slots, rng)
        res = check_drift_candidate(anchor.gold_sql, cand.post_sql, cand.subtype, utt.text, sandbox,
                                    pre_result=pre, pre_set=pre_set, identifiers=cand.identifiers)
        if not res.passed:
            return Rejected(res.stage, f"{cand.edit}: {res.reason}")
        suffix = cand.subtype if k == 0 else f"{cand.subtype}-{k + 1}"
        sample = Sample(
            id=f"drift-{anchor.id}-{suffix}", db_id=anchor.db_id, db_path=anchor.db_path,
            question=anchor.question, group="answerable",
            subcategory="answerable_with_evidence" if anchor.evidence else "answerable_without_evidence",
            gold_sql=anchor.gold_sql, evidence=tuple(anchor.evidence), style=utt.style,
            difficulty=anchor.difficulty, drift=DriftEvent(utt.text, cand.post_sql, cand.subtype),
            provenance={"subtype": cand.subtype, "edit": cand.edit, "edit_kind": cand.kind,
                        "template": utt.template})
        return Accepted(sample, dict(res.verdicts))

    def _query(self, anchor: Anchor, sandbox: SQLiteSandbox) -> _Query:
        tree = parse_sql(anchor.gold_sql)
        if not isinstance(tree, exp.Query):
            raise SQLParseError(anchor.gold_sql, "not a query")
        schema = sandbox.schema
        _double_quoted_literals(tree, anchor.gold_sql, schema)  # "France" -> 'France', as SQLite reads it
        return _Query(tree, schema, anchor.question, list(tree.find_all(exp.Select)))

    # ------------------------------------------------------------------------------------ values
    def column_values(self, sandbox: SQLiteSandbox, table: str, column: str) -> list:
        """Distinct non-NULL values of ``table.column`` (at most :data:`VALUE_POOL`, in the column's
        order), read once per database and column through the read-only sandbox.

        Returns:
            The values (empty when the query fails).
        """
        key = (sandbox.db_path, table.lower(), column.lower())
        if key not in self._values:
            col = exp.column(column, quoted=True)
            q = (exp.select(col).distinct().from_(exp.table_(table, quoted=True))
                 .where(col.copy().is_(exp.null()).not_()).order_by(col.copy()).limit(VALUE_POOL))
            r = sandbox.execute(_render(q))
            self._values[key] = [row[0] for row in r.rows] if r.ok else []
        return self._values[key]

    def _replacements(self, sandbox, table, column, old, as_string, rng, k=4) -> list:
        values = self.column_values(sandbox, table, column)
        if not as_string:  # a number compared with a column stored as text ('2014'): its numeric values
            values = [_as_number(v) for v in values]
        pool = [v for v in values
                if _clean_value(v) and not _same(v, old) and (as_string or isinstance(v, (int, float)))]
        if as_string:
            pool = [v for v in pool if not _same(value_words(v), old)]
        return rng.sample(pool, min(k, len(pool)))

    # -------------------------------------------------------------------------------- generators
    def value_candidates(self, q: _Query, rng: random.Random, sandbox: SQLiteSandbox) -> Iterator[DriftCandidate]:
        """``value`` candidates: each filter literal (WHERE comparisons, IN items, BETWEEN bounds, every
        scope; LIKE patterns excluded, they are no column value; none under a NOT, whose words would say the
        opposite) replaced by up to 4 other values of its column drawn with ``rng``; the literals are visited
        in an rng-shuffled order. A literal whose words occur twice among the query's filters (``IsOfficial =
        'T'`` in both branches of a UNION: "false instead of true" cannot say which) is not edited; the same
        value under two comparisons reads apart (``< 2003`` and ``> 2003``: "less than 2003")."""
        sites, said = [], {}
        for sel in q.selects:
            for c in _conjuncts(sel.args.get("where")):
                for node in c.walk(prune=lambda n: isinstance(n, (exp.Select, exp.Subquery))):
                    for op, _col, lit, (_t, column) in self._literal_sites(node, sel, q.schema):
                        key = _said(op, _literal_value(lit)[0], column)
                        said[key] = said.get(key, 0) + 1
                # not under NOT: "2 instead of 1" would say the opposite of "NOT x = 2"
                for node in c.walk(prune=lambda n: isinstance(n, (exp.Select, exp.Subquery, exp.Not))):
                    sites.extend(self._literal_sites(node, sel, q.schema))
        rng.shuffle(sites)
        for op, col, lit, (table, column) in sites:
            old, as_string = _literal_value(lit)
            if said.get(_said(op, old, column), 0) > 1:
                continue  # the utterance could not say which of the two it changes
            for new in self._replacements(sandbox, table, column, old, as_string, rng):
                node = _make_literal(new, as_string)
                if node is None:
                    continue
                placed = lit.replace(node)
                post = _render(q.tree)
                placed.replace(lit)
                say_old, say_new = _shown(old, column), _shown(new, column)
                if value_words(say_old) == value_words(say_new):
                    continue
                slots = {"col": self._words(sandbox, table, column), "old": condition_words(op, say_old),
                         "new": condition_words(op, say_new)}
                if op in ("EQ", "NEQ"):
                    slots["old"], slots["new"] = value_words(say_old), value_words(say_new)
                yield DriftCandidate(
                    "value", post, "replace_exclusion" if op == "NEQ" else "replace_literal",
                    f"value: {table}.{column} {lit.sql(dialect=DIALECT)} -> {node.sql(dialect=DIALECT)}",
                    slots, self._identifiers(q, column))

    def _literal_sites(self, node, sel, schema) -> list[tuple[str, exp.Column, exp.Expression, tuple]]:
        """(op words key, column, literal node, (table, column)) for a comparison node."""
        out = []
        if isinstance(node, _COMPARISONS):
            left, right = node.this, node.expression
            op = type(node).__name__
            if isinstance(right, exp.Column) and _literal_value(left) is not None:
                left, right, op = right, left, _FLIP[op]
            lv = _literal_value(right)
            if isinstance(left, exp.Column) and lv is not None and lv[0] is not None:
                where = _resolve(left, sel, schema)
                if where:
                    out.append((op, left, right, where))
        elif isinstance(node, exp.In) and isinstance(node.this, exp.Column) and not node.args.get("query"):
            where = _resolve(node.this, sel, schema)
            items = node.expressions
            if where and items and all(_literal_value(i) is not None for i in items):
                out.extend(("EQ", node.this, i, where) for i in items if _literal_value(i)[0] is not None)
        elif isinstance(node, exp.Between) and isinstance(node.this, exp.Column):
            where = _resolve(node.this, sel, schema)
            for key, op in (("low", "GTE"), ("high", "LTE")):
                b = node.args.get(key)
                if where and b is not None and _literal_value(b) is not None and _literal_value(b)[0] is not None:
                    out.append((op, node.this, b, where))
        return out

    def constraint_candidates(self, q: _Query, rng: random.Random,
                              sandbox: SQLiteSandbox) -> Iterator[DriftCandidate]:
        """``constraint`` candidates, in an rng-shuffled order: a WHERE conjunct removed (a comparison,
        IN list, LIKE or BETWEEN on one column, in any scope; never a column = column join condition or a
        conjunct with a subquery), one bound of a BETWEEN dropped, or a filtering join removed
        (:meth:`_join_removals`). Inside a set operation only a filter of one of the two branches of a root
        INTERSECT or EXCEPT (:func:`_root_branch`) whose words occur once in the query (else the utterance
        cannot say which branch): there a withdrawn filter withdraws a requirement ("in 2014 and 2015" ->
        "in 2014"; "without a concert in 2014" -> "without a concert"). Never in a UNION: a branch without
        its filter takes in every row, where the user dropping "or younger than 30" means the other branch
        alone. A filter that both branches of a root set operation hold identically goes from both at once
        (:meth:`_shared_filter_removals`, any set operation). An OR conjunct goes whole: on one column it is
        one filter (``year = 2014 OR year = 2015``: "2014 or 2015", :meth:`_describe_condition`); over two
        columns an either-or (:meth:`_either_or`, kind ``remove_either``, not in a set operation)."""
        edits: list[tuple[exp.Select, exp.Expression, exp.Expression | None, str, dict, str]] = []
        said = self._filter_words(q, sandbox)
        for sel in q.selects:
            branch = _in_set_operation(sel)
            if branch and not _root_branch(sel, q.tree):
                continue  # a UNION's branch, or deeper inside a set operation
            for c in _conjuncts(sel.args.get("where")):
                if _has_subquery(c):
                    continue
                desc = self._describe_condition(c, sel, q.schema)
                if desc is None:
                    either = None if branch else self._either_or(c, sel, q.schema, sandbox)
                    if either is not None:
                        edits.append((sel, c, None, "remove_either", either,
                                      f"constraint: removed either-or filter {c.sql(dialect=DIALECT)}"))
                    continue
                (table, column), cond = desc
                words = self._words(sandbox, table, column)
                if branch and said.get((words, cond), 0) > 1:
                    continue  # the same filter words in another place: which one goes?
                excluded = _excluded_words(c, column)
                slots = {"col": words, "cond": cond} | ({"excluded": excluded} if excluded else {})
                edits.append((sel, c, None, "remove_exclusion" if excluded else "remove_predicate", slots,
                              f"constraint: removed {table}.{column} filter {c.sql(dialect=DIALECT)}"))
                if isinstance(c, exp.Between) and _literal_value(c.args["low"]) and _literal_value(c.args["high"]):
                    for keep, op in (("low", "GTE"), ("high", "LTE")):
                        bound = c.args[keep]
                        kept = (exp.GTE if op == "GTE" else exp.LTE)(this=c.this.copy(), expression=bound.copy())
                        edits.append((sel, c, kept, "drop_bound",
                                      {"col": self._words(sandbox, table, column),
                                       "cond": condition_words(op, _literal_value(bound)[0])},
                                      f"constraint: {table}.{column} range {c.sql(dialect=DIALECT)} -> "
                                      f"{kept.sql(dialect=DIALECT)}"))
        singles = [e for e in edits if e[3] in ("remove_predicate", "remove_exclusion")]
        edits += self._shared_filter_removals(q, sandbox, said)
        rng.shuffle(edits)
        pairs = []
        for i, a in enumerate(singles):
            for b in singles[i + 1:]:
                # two filters withdrawn together (one scope, or two scopes such as a set operation's branches)
                if a[4] == b[4]:
                    continue  # the same filter in two scopes: "drop both T and T" names nothing
                slots = {"col": a[4]["col"], "cond": a[4]["cond"], "col2": b[4]["col"], "cond2": b[4]["cond"]}
                pairs.append(((a[0], b[0]), (a[1], b[1]), None,
                              "remove_predicates_same" if slots["col"] == slots["col2"] else "remove_predicates", slots,
                              f"{a[5]}; {b[5].replace('constraint: ', '')}"))
        rng.shuffle(pairs)
        for sels, c, replacement, kind, slots, edit in edits + pairs:
            gone = c if isinstance(c, tuple) else (c,)
            scopes = list({id(x): x for x in (sels if isinstance(sels, tuple) else (sels,))}.values())
            saved = [(sel, sel.args.get("where")) for sel in scopes]
            for sel, where in saved:
                rest = [x.copy() if not any(x is g for g in gone) else replacement for x in _conjuncts(where)]
                rest = [x for x in rest if x is not None]
                sel.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
            post = _render(q.tree)
            for sel, where in saved:
                sel.set("where", where)
            yield DriftCandidate("constraint", post, kind, edit, slots, self._identifiers(q))
        yield from self._join_removals(q, rng, sandbox)

    def _either_or(self, c: exp.Expression, sel: exp.Select, schema, sandbox: SQLiteSandbox) -> dict | None:
        """The slots ``col``, ``cond``, ``col2``, ``cond2`` of an OR of two one-column filters on two different
        columns (``FullName = 'General Motors' OR weight > 3500``), for the ``remove_either`` utterance; ``None``
        for any other condition (a negated OR, three disjuncts, one column: :meth:`_describe_condition`).
        TIDE Alg. 1 keeps the OR whole as one W unit, so removing it is a constraint drift."""
        c = _strip(c)
        if not isinstance(c, exp.Or):
            return None
        parts = _disjuncts(c)
        descs = [self._describe_condition(d, sel, schema) for d in parts] if len(parts) == 2 else [None]
        if any(d is None or d[1].startswith("not ") for d in descs) or descs[0][0] == descs[1][0]:
            return None
        (ta, ca), cond = descs[0]
        (tb, cb), cond2 = descs[1]
        col, col2 = self._words(sandbox, ta, ca), self._words(sandbox, tb, cb)
        return None if col == col2 else {"col": col, "cond": cond, "col2": col2, "cond2": cond2}

    def _shared_filter_removals(self, q: _Query, sandbox: SQLiteSandbox,
                                said: Mapping[tuple[str, str], int]) -> list[tuple]:
        """Edits removing one filter that both branches of a root UNION / INTERSECT / EXCEPT hold identically
        (the same column and condition words), from both branches at once (TIDE Alg. 1: both W
        units go, O unchanged). The filter's words occur in those two places only (:meth:`_filter_words`),
        so the utterance names one requirement and withdraws it everywhere: ``... WHERE IsOfficial = 'T'
        AND Language = 'English' UNION ... WHERE IsOfficial = 'T' AND Language = 'Dutch'`` -> without the
        official-language filter ("include the unofficial languages too"). A branch that is itself a set
        operation or a subquery is not looked into.

        Returns:
            Tuples ``((sel_a, sel_b), (conjunct_a, conjunct_b), None, kind, slots, edit)`` in the shape
            :meth:`constraint_candidates` renders.
        """
        root = q.tree
        if not isinstance(root, exp.SetOperation):
            return []
        a, b = _strip(root.this), _strip(root.expression)
        if not (isinstance(a, exp.Select) and isinstance(b, exp.Select)):
            return []

        def described(sel: exp.Select) -> dict:
            out: dict = {}
            for c in _conjuncts(sel.args.get("where")):
                desc = None if _has_subquery(c) else self._describe_condition(c, sel, q.schema)
                if desc is not None:
                    out.setdefault(desc, []).append(c)
            return out

        da, db = described(a), described(b)
        edits = []
        for desc, cs in da.items():
            (table, column), cond = desc
            words = self._words(sandbox, table, column)
            if len(cs) != 1 or len(db.get(desc, [])) != 1 or said.get((words, cond), 0) != 2:
                continue
            ca, cb = cs[0], db[desc][0]
            excluded = _excluded_words(ca, column)
            slots = {"col": words, "cond": cond} | ({"excluded": excluded} if excluded else {})
            edits.append(((a, b), (ca, cb), None, "remove_exclusion" if excluded else "remove_predicate", slots,
                          f"constraint: removed {table}.{column} filter {ca.sql(dialect=DIALECT)} from both "
                          f"branches of the {type(root).__name__.upper()}"))
        return edits

    def _filter_words(self, q: _Query, sandbox: SQLiteSandbox) -> dict[tuple[str, str], int]:
        """How often each (column words, condition words) pair names a one-column filter of the query
        (every scope): a filter named twice cannot be named apart by a constraint utterance."""
        out: dict[tuple[str, str], int] = {}
        for sel in q.selects:
            for c in _conjuncts(sel.args.get("where")):
                desc = None if _has_subquery(c) else self._describe_condition(c, sel, q.schema)
                if desc is not None:
                    key = (self._words(sandbox, *desc[0]), desc[1])
                    out[key] = out.get(key, 0) + 1
        return out


    def _describe_condition(self, c: exp.Expression, sel: exp.Select, schema) -> tuple[tuple[str, str], str] | None:
        """((table, column), condition words) of a one-column filter; ``None`` when it is not one.

        A disjunction of such filters on one column (``year = 2014 OR year = 2015``) is one filter too, its
        words joined by "or" (``2014 or 2015``): TIDE Alg. 1 keeps an OR subtree whole as one W unit, so
        removing it is a constraint drift. Not a negated OR, nor a disjunct that is itself negated.
        """
        neg = False
        if isinstance(c, exp.Not):
            neg, c = True, _strip(c.this)
        if isinstance(c, exp.Or):
            descs = [None if neg else self._describe_condition(d, sel, schema) for d in _disjuncts(c)]
            if any(d is None or d[1].startswith("not ") for d in descs) or len({d[0] for d in descs}) != 1:
                return None
            return descs[0][0], " or ".join(d[1] for d in descs)
        col, words = None, None
        if isinstance(c, _COMPARISONS):
            left, right, op = c.this, c.expression, type(c).__name__
            if isinstance(right, exp.Column) and _literal_value(left) is not None:
                left, right, op = right, left, _FLIP[op]
            lv = _literal_value(right)
            if isinstance(left, exp.Column) and lv is not None and lv[0] is not None:
                col, words = left, condition_words(op, _shown(lv[0], left.name))
        elif isinstance(c, exp.In) and isinstance(c.this, exp.Column) and not c.args.get("query"):
            vals = [_literal_value(i) for i in c.expressions]
            if vals and all(v is not None and v[0] is not None for v in vals):
                col, words = c.this, condition_words("In", [_shown(v[0], c.this.name) for v in vals])
        elif isinstance(c, exp.Like) and isinstance(c.this, exp.Column):
            lv = _literal_value(c.expression)
            if lv is not None and lv[1] and lv[0]:
                col, words = c.this, condition_words("Like", lv[0])
        elif isinstance(c, exp.Between) and isinstance(c.this, exp.Column):
            lo, hi = _literal_value(c.args["low"]), _literal_value(c.args["high"])
            if lo and hi and lo[0] is not None and hi[0] is not None:
                col, words = c.this, f"between {value_words(lo[0])} and {value_words(hi[0])}"
        if col is None or not words:
            return None
        where = _resolve(col, sel, schema)
        if where is None:
            return None
        return where, (f"not {words}" if neg else words)

    def _join_removals(self, q: _Query, rng: random.Random, sandbox: SQLiteSandbox) -> Iterator[DriftCandidate]:
        """Tables of the root query that only filter its rows, removed with every condition on them.

        The root's tables must all be joined by inner joins with one column = column ON condition each.
        A table is *needed* when something that stays reads it (the output, GROUP BY, ORDER BY, HAVING,
        a WHERE conjunct that is not a one-table filter, :meth:`_describe_condition`). The tables that
        are not needed all go, with their ON conditions and their filters, when the needed ones stay
        linked by the ON conditions left (one that stayed behind would still filter the rows). Under an aggregate
        or a GROUP BY only one table may go, by a many-to-one link (its ON column unique in it), so that
        removing it changes which rows count, not how often. No scope inside a set operation. TIDE §2.2
        constraint drift: the links and their filters withdrawn, nothing else (``singer_in_concert JOIN singer
        JOIN concert WHERE concert.year = 2014`` -> ``FROM singer``: every singer)."""
        for sel in q.selects:
            if not _in_set_operation(sel):  # in a branch "every student enrolment" would misname the result
                yield from self._join_removal(q, sel, rng, sandbox)

    def _join_removal(self, q: _Query, root: exp.Select, rng: random.Random,
                      sandbox: SQLiteSandbox) -> Iterator[DriftCandidate]:
        """:meth:`_join_removals` for one query scope ``root``."""
        if any(isinstance(n, exp.Star) for n in root.expressions):
            return
        frm = root.args.get("from_")
        joins = list(root.args.get("joins") or [])
        if frm is None or not isinstance(frm.this, exp.Table) or not joins:
            return
        tables = [frm.this] + [j.this for j in joins]
        if any(not isinstance(t, exp.Table) for t in tables) or any(
                j.args.get("on") is None or j.args.get("side") or j.args.get("using")
                or (j.args.get("kind") or "").upper() not in ("", "INNER") for j in joins):
            return
        ons = [_strip(j.args["on"]) for j in joins]
        if not all(isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column)
                   for c in ons):
            return
        sources = _sources(root)
        if len(sources) != len(tables):
            return  # a table joined twice under one name

        def table_of(c: exp.Column) -> exp.Table | None:
            if c.table:
                return sources.get(c.table.lower())
            hits = [t for t in tables if c.name.lower() in q.schema.get(t.name.lower(), {})]
            return hits[0] if len(hits) == 1 else None

        edges = []  # (join index, table a, table b, ON condition)
        for i, c in enumerate(ons):
            a, b = table_of(c.this), table_of(c.expression)
            if a is None or b is None or a is b:
                return
            edges.append((i, a, b, c))
        filters: dict[int, list] = {}  # id(table) -> [(conjunct, description)]
        needed: set[int] = set()
        on_nodes = {id(n) for c in ons for n in c.walk()}
        filter_nodes: set[int] = set()
        for c in _conjuncts(root.args.get("where")):
            tabs = {id(t) for t in (table_of(x) for x in c.find_all(exp.Column)) if t is not None}
            desc = None if _has_subquery(c) or len(tabs) != 1 else self._describe_condition(c, root, q.schema)
            if desc is not None:
                filters.setdefault(next(iter(tabs)), []).append((c, desc))
                filter_nodes |= {id(n) for n in c.walk()}
        for c in root.walk(prune=lambda n: n is not root and isinstance(n, (exp.Select, exp.Subquery))):
            if isinstance(c, exp.Column) and id(c) not in on_nodes and id(c) not in filter_nodes:
                t = table_of(c)
                if t is None:
                    return  # a column that resolves to no table of this scope (correlated, unknown)
                needed.add(id(t))
        optional = [t for t in tables if id(t) not in needed]
        if not optional or not needed or len(optional) > 4:
            return
        aggregated = root.args.get("group") is not None or any(
            isinstance(n, exp.AggFunc) for i in root.expressions for n in i.walk())
        picks = []
        for gone in [optional]:  # all of them: a table left behind would still filter (no "every singer")
            gone_ids = {id(t) for t in gone}
            kept = [t for t in tables if id(t) not in gone_ids]
            kept_edges = [e for e in edges if id(e[1]) not in gone_ids and id(e[2]) not in gone_ids]
            if not self._linked(kept, kept_edges):
                continue
            if aggregated:
                cut = [e for e in edges if (id(e[1]) in gone_ids) != (id(e[2]) in gone_ids)]
                if len(gone) != 1 or len(cut) != 1:
                    continue
                _, a, b, c = cut[0]
                col = c.this if id(a) in gone_ids else c.expression
                if not self._unique(sandbox, gone[0].name, col.name):
                    continue
            picks.append((gone, kept, kept_edges))
        rng.shuffle(picks)
        out_tables = [table_of(c) for i in root.expressions for c in i.find_all(exp.Column)]
        for gone, kept, kept_edges in picks:
            gone_ids = {id(t) for t in gone}
            dropped = [fc for t in gone for fc in filters.get(id(t), [])]
            # the new FROM: the first table left; each other table left joins on its ON conditions to those before
            order, left, new_joins = [kept[0]], kept_edges[:], []
            while len(order) < len(kept):
                for t in kept:
                    if t in order:
                        continue
                    link = [e for e in left if (e[1] is t and e[2] in order) or (e[2] is t and e[1] in order)]
                    if link:
                        on = exp.and_(*[e[3].copy() for e in link])
                        new_joins.append(exp.Join(this=t.copy(), on=on))
                        left = [e for e in left if e not in link]
                        order.append(t)
                        break
            edits_ok = not left  # every kept link placed
            if not edits_ok:
                continue
            old_from, old_joins, old_where = root.args.get("from_"), root.args.get("joins"), root.args.get("where")
            drop_ids = {id(c) for c, _ in dropped}
            rest = [x.copy() for x in _conjuncts(old_where) if id(x) not in drop_ids]
            root.set("from_", exp.From(this=kept[0].copy()))
            root.set("joins", new_joins or None)
            root.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
            post = _render(q.tree)
            root.set("from_", old_from)
            root.set("joins", old_joins)
            root.set("where", old_where)
            main = next((t for t in out_tables if t is not None and id(t) not in gone_ids), kept[0])
            named = next((t for t in gone if filters.get(id(t))), gone[-1])
            slots = {"table": entity_words(main.name, named.name, q.question),
                     "tables": entity_words(main.name, named.name, q.question, plural=True),
                     "other": relation_words(named.name, main.name)}
            edit = "constraint: removed table(s) " + ", ".join(t.name for t in gone) + " with their join condition(s)"
            kind = "remove_join"
            if dropped:
                (table, column), cond = dropped[0][1]
                slots.update(col=self._words(sandbox, table, column), cond=cond)
                kind = "remove_join_filter"
                edit += " and filter(s) " + " AND ".join(c.sql(dialect=DIALECT) for c, _ in dropped)
            yield DriftCandidate("constraint", post, kind, edit, slots, self._identifiers(q))

    @staticmethod
    def _linked(kept: list, edges: list) -> bool:
        """True when the ``edges`` (join index, table, table, condition) link every table of ``kept``."""
        reach, frontier = {id(kept[0])}, [kept[0]]
        while frontier:
            t = frontier.pop()
            for _, a, b, _c in edges:
                for x, y in ((a, b), (b, a)):
                    if x is t and id(y) not in reach:
                        reach.add(id(y))
                        frontier.append(y)
        return all(id(t) in reach for t in kept)

    def _unique(self, sandbox: SQLiteSandbox, table: str, column: str) -> bool:
        """True when ``table.column`` holds no value twice (NULLs aside): a join on it is many-to-one."""
        key = (sandbox.db_path, table.lower(), column.lower() + "#unique")
        if key not in self._values:
            col = exp.column(column, quoted=True)
            q = exp.select(exp.Count(this=col.copy()), exp.Count(this=exp.Distinct(expressions=[col.copy()]))).from_(
                exp.table_(table, quoted=True))
            r = sandbox.execute(_render(q))
            self._values[key] = [bool(r.ok and r.rows and r.rows[0][0] == r.rows[0][1])]
        return self._values[key][0]

    def projection_candidates(self, q: _Query, rng: random.Random,
                              sandbox: SQLiteSandbox) -> Iterator[DriftCandidate]:
        """``projection`` candidates on the root SELECT, in an rng-shuffled order: a plain output column
        (no aggregation in the query) replaced by another column of its table (up to 3, id-like columns
        last); an output item removed (two or more items, no alias read elsewhere); an AVG / MAX / MIN /
        SUM replaced by another of them over the same column (SUM and AVG only on a numeric column). No
        edit changes whether the query collapses its rows into one (:func:`_collapses`): ``SELECT MIN(v), code
        FROM t`` without the MIN returns every row, not the code of the smallest ``v``."""
        root = q.tree
        if not isinstance(root, exp.Select):
            return
        items = list(root.expressions)
        if any(isinstance(i, exp.Star) or isinstance(i, exp.Column) and isinstance(i.this, exp.Star) for i in items):
            return
        aggregated = root.args.get("group") is not None or any(
            isinstance(n, exp.AggFunc) for i in items for n in i.walk())
        edits: list[tuple[exp.Expression, exp.Expression | None, str, dict, str, str]] = []
        for item in items:
            node = item.this if isinstance(item, exp.Alias) else item
            if isinstance(node, exp.Column) and not aggregated:
                where = _resolve(node, root, q.schema)
                if where is None:
                    continue
                table, column = where
                chosen = {(_resolve(i.this if isinstance(i, exp.Alias) else i, root, q.schema) or ("", ""))[1].lower()
                          for i in items}
                pool = [c for c in self._table_columns(sandbox, table) if c.lower() not in chosen]
                plain = [c for c in pool if not c.lower().endswith("id") and not column_words(c).startswith("is ")]
                picks = rng.sample(plain, min(3, len(plain))) or rng.sample(pool, min(1, len(pool)))
                for new in picks:
                    repl = exp.column(new, table=node.table or None)
                    edits.append((node, repl, "replace_column",
                                  {"old_col": self._words(sandbox, table, column),
                                   "new_col": self._words(sandbox, table, new)},
                                  f"projection: {table}.{column} -> {table}.{new}", new))
            agg = type(node).__name__
            if agg in _AGGS and isinstance(node.this, exp.Column) and not node.args.get("distinct"):
                where = _resolve(node.this, root, q.schema)
                if where is None:
                    continue
                table, column = where
                numeric = any(t in q.schema.get(table.lower(), {}).get(column.lower(), "").upper()
                              for t in _NUMERIC_TYPES)
                others = [a for a in _AGGS if a != agg and (numeric or a in ("Max", "Min"))]
                if agg in ("Avg", "Sum") or numeric:
                    for a in rng.sample(others, min(2, len(others))):
                        repl = _AGGS[a](this=node.this.copy())
                        edits.append((node, repl, "swap_aggregate",
                                      {"col": self._words(sandbox, table, column), "old_agg": aggregate_words(agg),
                                       "new_agg": aggregate_words(a)},
                                      f"projection: {agg.upper()}({table}.{column}) -> {a.upper()}({table}.{column})",
                                      column))
        if len(items) >= 2:
            read_aliases = {c.name.lower() for part in ("order", "group", "having") if root.args.get(part) is not None
                            for c in root.args[part].find_all(exp.Column) if not c.table}
            for item in items:
                if isinstance(item, exp.Alias) and item.alias.lower() in read_aliases:
                    continue
                words = self._item_words(item, root, q.schema)
                if words is None:
                    continue
                edits.append((item, None, "remove_column", {"old_col": words},
                              f"projection: removed output {item.sql(dialect=DIALECT)}", ""))
        rng.shuffle(edits)
        collapses = _collapses(root)
        for node, repl, kind, slots, edit, name in edits:
            if repl is None:
                kept = root.expressions
                root.set("expressions", [i for i in kept if i is not node])
                post, changes = _render(q.tree), _collapses(root) != collapses
                root.set("expressions", kept)
            else:
                placed = node.replace(repl.copy())
                post, changes = _render(q.tree), _collapses(root) != collapses
                placed.replace(node)
            if changes:
                continue  # MIN(v), code -> code: every row, no longer the row of the smallest v
            yield DriftCandidate("projection", post, kind, edit, slots, self._identifiers(q, name))

    def _item_words(self, item: exp.Expression, root: exp.Select, schema) -> str | None:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Column):
            where = _resolve(node, root, schema)
            return column_words(where[1]) if where else None
        name = type(node).__name__
        if name == "Count":
            arg = node.this
            inner = (arg.expressions[0] if arg.expressions else None) if isinstance(arg, exp.Distinct) else arg
            if isinstance(inner, exp.Column):
                where = _resolve(inner, root, schema)
                return f"number of {column_words(where[1])} values" if where else None
            return "count"
        if name in _AGGS and isinstance(node.this, exp.Column):
            where = _resolve(node.this, root, schema)
            return f"{aggregate_words(name)} {column_words(where[1])}" if where else None
        return None

    def _words(self, sandbox: SQLiteSandbox, table: str, column: str) -> str:
        """:func:`~textsql_clarify.generation.utterances.column_words` of the column as the database spells
        it (a query may write ``pettype`` for ``PetType``)."""
        spelt = {c.lower(): c for c in self._table_columns(sandbox, table)}.get(column.lower(), column)
        if spelt.lower() in _GENERIC_COLUMNS:  # "the name" of what: "the country name"
            return f"{table_words(table)} {column_words(spelt)}"
        sql_type = sandbox.schema.get(table.lower(), {}).get(column.lower(), "")
        return flag_column_words(spelt) or attribute_words(column_words(spelt), sql_type)  # "number killed"

    def _table_columns(self, sandbox: SQLiteSandbox, table: str) -> list[str]:
        """The table's column names as the database spells them, in table order (read once per database
        and table from an empty ``SELECT *`` in the read-only sandbox; the sandbox schema lower-cases)."""
        key = (sandbox.db_path, table.lower(), "*")
        if key not in self._values:
            r = sandbox.execute(_render(exp.select("*").from_(exp.table_(table, quoted=True)).limit(0)))
            self._values[key] = list(r.columns) if r.ok else list(sandbox.schema.get(table.lower(), {}))
        return self._values[key]

    @staticmethod
    def _identifiers(q: _Query, *extra: str) -> tuple[str, ...]:
        """Names the utterance must not carry verbatim: the query's tables and columns (and ``extra``)
        that are not plain words."""
        names = {t.name for t in q.tree.find_all(exp.Table)} | {c.name for c in q.tree.find_all(exp.Column)}
        names |= {e for e in extra if e}
        return tuple(sorted(n for n in names if n and not _plain_identifier(n)))


def _check_per_subtype(raw: str) -> None:
    """Raise ``ValueError`` where ``drift_per_subtype`` does not parse (as :class:`DriftRecipe` parses it)."""
    DriftRecipe._per_subtype(raw)


#: the options the drift recipe reads (``--option key=value``), also read by ``tide_drift``
#: and ``tide_triplets`` with the ``rules`` source.
DRIFT_OPTIONS: dict[str, OptionSpec] = {
    "drift_per_subtype": OptionSpec("str", "value=3,constraint=8,projection=1",
                                    "most samples per anchor and subtype: N, or value=N,constraint=N,projection=N",
                                    check=_check_per_subtype),
    "drift_projection_fill": OptionSpec("int", str(DEFAULT_PROJECTION_FILL),
                                        "most projection samples of an anchor without a value or constraint one",
                                        minimum=0),
    "drift_per_anchor": OptionSpec("int", str(DEFAULT_PER_ANCHOR),
                                   "the total projection samples fill an anchor up to (0: no limit)", minimum=0),
    "drift_tries": OptionSpec("int", str(DEFAULT_TRIES), "most candidates checked per anchor and subtype", minimum=1),
}
DriftRecipe.options = DRIFT_OPTIONS
