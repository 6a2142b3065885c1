"""Commitment sets and user intent drift (TIDE §2.2, Appendix A with Table 5 and Algorithm 2, Algorithm 1).

A query's **commitment set** S(y) holds clause-scoped atomic units read from its sqlglot AST (TIDE Table 5):

======== ==========================================================================================
kind     units emitted per query scope
======== ==========================================================================================
where    each WHERE conjunct after top-level AND splitting (OR / NOT subtrees kept whole)
having   each HAVING conjunct, split the same way
select   each SELECT item, alias dropped; ``*`` is one marker
group_by each GROUP BY expression
order_by each ORDER BY expression with its direction (``expr ASC`` / ``expr DESC``)
limit    ``LIMIT n``;  offset: ``OFFSET m``
======== ==========================================================================================

Scopes (TIDE Alg. 2): the root is ``$``; the j-th branch of a set operation is ``<path>/union[j]`` (or
``union_all``, ``intersect``, ``except``); an immediate subquery is ``<path>/<clause>[k]``, where clause is
``where``, ``having``, ``select``, ``group_by``, ``order_by``, ``from`` (derived tables, FROM then JOINs),
``with`` (CTEs) or ``other``. Inside a unit, a subquery is masked as ``(@<clause>[k])``: its content is
committed in its own scope. WHERE/HAVING subqueries are numbered in the canonical (sorted) order of the
conjuncts, so reordering conjuncts does not renumber them.

Each unit has a **value form** (literals kept) and a **structural form** (literals -> ``?``), both from
:func:`~textsql_clarify.rewards.sql_canonical.canonical_sql` over a prepared tree
(:func:`~textsql_clarify.rewards.sql_canonical.prepare_sql`): equivalent spellings give one commitment
(``a = 1`` / ``1 = a``; ``x > 5`` / ``5 < x``; ``dept_id = 1`` / ``dept_id = 1.0``, numerically equal
literals compared by value; keyword and identifier case; redundant parentheses; table and column aliases),
and a reversed polarity gives another.

Three canonicalisation choices that go beyond Table 5, each so that a mere respelling is never drift:

- an inner (or cross / comma) join's ON conjuncts are WHERE conjuncts: ``FROM a JOIN b ON p`` and
  ``FROM a, b WHERE p`` are one query (article: "A join written in the ON clause and the same equality
  written in WHERE score the same"). Outer-join ON conditions are not filters and are not emitted;
- a set operation's own ORDER BY / LIMIT / OFFSET are emitted at the set operation's scope (Alg. 2 would
  drop them);
- DISTINCT is not a unit (Table 5 has none), so ``SELECT DISTINCT a`` -> ``SELECT a`` is not drift.

Drift (TIDE §2.2, Alg. 1): ``W(y)`` are the filtering commitments (kind ``where``), ``O(y) = S(y) \\ W(y)``
the output-side ones (SELECT, GROUP BY, ORDER BY, HAVING, LIMIT, OFFSET: TIDE App. G lists HAVING among the
projection-level edits).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment
from sqlglot import exp

from ..errors import SQLParseError
from ..sql.schema import analysis_errors
from .sql_canonical import canonical_sql, conjuncts, immediate_subqueries, normalise_predicates, prepare_sql

__all__ = [
    "Commitment", "KINDS", "FILTER_KINDS", "DRIFT_SUBTYPES", "commitment_set", "filtering_commitments",
    "output_commitments", "literal_replacement", "is_drift", "drift_subtype", "DriftRevision", "drift_revision",
]

#: unit kinds, in clause order (TIDE Table 5)
KINDS: tuple[str, ...] = ("where", "having", "select", "group_by", "order_by", "limit", "offset")
#: kinds that make up W(y), the filtering commitments of Algorithm 1
FILTER_KINDS: frozenset[str] = frozenset({"where"})
#: what :func:`drift_subtype` returns (Algorithm 1's outcomes)
DRIFT_SUBTYPES: tuple[str, ...] = ("value", "constraint", "projection", "not_drift", "reject")


@dataclass(frozen=True, order=True)
class Commitment:
    """One clause-scoped atomic unit of a commitment set (TIDE App. A).

    Attributes:
        scope: query-scope path, ``"$"`` for the root, e.g. ``"$/union[1]/where[0]"``.
        kind: one of :data:`KINDS`.
        value_form: canonical text with literals, e.g. ``"region.name = 'West'"``, ``"sales.v DESC"``,
            ``"LIMIT 10"``.
        structural_form: the same with every literal replaced by ``?``, e.g. ``"region.name = ?"``.

        columns: the ``table.column`` names the unit reads in its own scope (not inside a masked subquery),
            e.g. ``frozenset({"region.name"})``; used by :func:`drift_revision` to tell a retracted filter
            that was only re-worded from one that was dropped. Not part of equality, hashing or order.

    Two commitments are equal when their first four fields are; the structural form is a function of the
    value form, so this is TIDE's comparison of (scope, value form) per kind.
    """

    scope: str
    kind: str
    value_form: str
    structural_form: str
    columns: frozenset[str] = field(default=frozenset(), compare=False, repr=False)


#: mask of a subquery in a set operation's ORDER BY / LIMIT (not given a scope of its own)
GENERIC = "@subquery"


def _columns(node: exp.Expression) -> frozenset[str]:
    """``table.column`` names read by ``node`` outside the subqueries inside it (lower case)."""
    out = set()
    for c in node.walk(prune=lambda x: x is not node and isinstance(x, (exp.Query, exp.Subquery))):
        if isinstance(c, exp.Column) and not isinstance(c.this, exp.Star) and c.name:
            out.add(f"{c.table}.{c.name}".lower() if c.table else c.name.lower())
    return frozenset(out)


def _unit(scope: str, kind: str, node: exp.Expression, label, prefix: str = "") -> Commitment:
    return Commitment(scope, kind, prefix + canonical_sql(node, subquery_label=label),
                      prefix + canonical_sql(node, literals=False, subquery_label=label), _columns(node))


def _select_item(e: exp.Expression) -> exp.Expression:
    """A SELECT item without its alias (``a AS x`` -> ``a``; a scalar subquery's own alias is removed in
    place, the prepared tree being private to :func:`commitment_set`)."""
    node = e.this if isinstance(e, exp.Alias) else e
    if isinstance(node, exp.Subquery) and node.args.get("alias") is not None:
        node.set("alias", None)
    return node


def _inner_join(j: exp.Join) -> bool:
    return not j.args.get("side") and (j.args.get("kind") or "").upper() in ("", "INNER", "CROSS")


def _set_op_name(q: exp.Expression) -> str:
    if isinstance(q, exp.Union):
        return "union" if q.args.get("distinct", True) else "union_all"
    return "intersect" if isinstance(q, exp.Intersect) else "except"


def _tail_units(q: exp.Expression, scope: str, out: set, push, labeller) -> None:
    """ORDER BY, LIMIT and OFFSET of a SELECT or a set operation."""
    order = q.args.get("order")
    for o in order.expressions if order is not None else []:
        node = o if isinstance(o, exp.Ordered) else exp.Ordered(this=o.copy())
        out.add(_unit(scope, "order_by", node, labeller("order_by", [node])))
    for key, word in (("limit", "LIMIT"), ("offset", "OFFSET")):
        node = q.args.get(key)
        if node is not None and node.args.get("expression") is not None:
            arg = node.args["expression"]
            out.add(_unit(scope, key, arg, labeller(key, [arg]), prefix=f"{word} "))


def _select_units(q: exp.Select, scope: str, out: set, push) -> None:
    labels: dict[int, str] = {}
    counters: dict[str, int] = {}

    def label_all(clause: str, nodes: list[exp.Expression]):
        for node in nodes:
            for sub in immediate_subqueries(node):
                if id(sub) not in labels:
                    k = counters.get(clause, 0)
                    counters[clause] = k + 1
                    labels[id(sub)] = f"@{clause}[{k}]"
                    push(sub, f"{scope}/{clause}[{k}]")
        return lambda s: labels[id(s)]

    def sorted_conjuncts(nodes: list[exp.Expression]) -> list[exp.Expression]:
        return sorted(nodes, key=lambda c: (canonical_sql(c, literals=False), canonical_sql(c)))

    where = conjuncts(q.args.get("where"))
    for j in q.args.get("joins") or []:
        if _inner_join(j):
            where += conjuncts(j.args.get("on"))
    where = sorted_conjuncts(where)
    lab = label_all("where", where)
    for c in where:
        out.add(_unit(scope, "where", c, lab))
    having = sorted_conjuncts(conjuncts(q.args.get("having")))
    lab = label_all("having", having)
    for c in having:
        out.add(_unit(scope, "having", c, lab))
    items = [_select_item(e) for e in q.expressions]
    lab = label_all("select", items)
    for it in items:
        out.add(_unit(scope, "select", it, lab))
    group = q.args.get("group")
    keys = list(group.expressions) if group is not None else []
    lab = label_all("group_by", keys)
    for g in keys:
        out.add(_unit(scope, "group_by", g, lab))
    _tail_units(q, scope, out, push, label_all)
    # derived tables and CTEs are scopes of their own; they emit nothing here
    sources = []
    if q.args.get("from_") is not None:
        sources.append(q.args["from_"].this)
    sources += [j.this for j in q.args.get("joins") or []]
    k = 0
    for src in sources:
        if isinstance(src, (exp.Subquery, exp.Query)):
            labels[id(src)] = f"@from[{k}]"
            push(src, f"{scope}/from[{k}]")
            k += 1
    with_ = q.args.get("with_")
    ctes = [cte.this for cte in (with_.expressions if with_ is not None else [])]
    for i, cte_query in enumerate(ctes):
        push(cte_query, f"{scope}/with[{i}]")
    # any subquery not reached yet (outer-join ON, window clauses, ...) still gets its own scope
    skip = {id(c) for c in ctes}
    for sub in immediate_subqueries(q):
        seen = id(sub) in labels or (isinstance(sub, exp.Subquery) and id(sub.this) in labels)
        if not seen and id(sub) not in skip:
            k = counters.get("other", 0)
            counters["other"] = k + 1
            labels[id(sub)] = f"@other[{k}]"
            push(sub, f"{scope}/other[{k}]")


def _extract(tree: exp.Expression) -> frozenset[Commitment]:
    out: set[Commitment] = set()
    work: list[tuple[exp.Expression, str]] = [(tree, "$")]

    def push(node: exp.Expression, path: str) -> None:
        work.append((node, path))

    while work:
        q, path = work.pop()
        while isinstance(q, (exp.Subquery, exp.Paren)):
            q = q.this
        if isinstance(q, exp.SetOperation):
            op = _set_op_name(q)
            for j, branch in enumerate((q.this, q.expression)):
                push(branch, f"{path}/{op}[{j}]")
            _tail_units(q, path, out, push, lambda clause, nodes: lambda s: GENERIC)
            with_ = q.args.get("with_")
            for i, cte in enumerate(with_.expressions if with_ is not None else []):
                push(cte.this, f"{path}/with[{i}]")
            continue
        if isinstance(q, exp.Select):
            _select_units(q, path, out, push)
    return frozenset(out)


def commitment_set(sql: str, schema: Mapping | None = None) -> frozenset[Commitment]:
    """The commitment set S(y) of one query (TIDE App. A, Table 5, Algorithm 2).

    Args:
        sql: one SQLite query.
        schema: optional ``{table: {column: type}}``; with it, bare column names resolve to their tables
            even in multi-table scopes. Without it, the query's own qualified references are used.

    Returns:
        frozenset of :class:`Commitment`. E.g. ``SELECT c, AVG(v) FROM t`` gives the select units
        ``t.c`` and ``AVG(t.v)`` at scope ``$``.

    Raises:
        SQLParseError: the query cannot be parsed, is not a query, is too big or nested too deeply to analyse,
            or sqlglot fails on it (any exception, with the reason; see
            :func:`~textsql_clarify.rewards.sql_canonical.prepare_sql`).
        TypeError: bad ``schema``.
    """
    tree = normalise_predicates(prepare_sql(sql, schema).tree)
    with analysis_errors(sql, "commitment set"):
        return _extract(tree)


def _as_set(x: object, name: str, schema: Mapping | None) -> frozenset[Commitment]:
    if isinstance(x, str):
        return commitment_set(x, schema)
    if isinstance(x, (set, frozenset)):
        bad = [e for e in x if not isinstance(e, Commitment)]
        if bad:
            raise TypeError(f"{name}: a commitment set holds Commitment objects, got {type(bad[0]).__name__}")
        return frozenset(x)
    raise TypeError(f"{name} must be a SQL string or a commitment set (frozenset of Commitment), "
                    f"got {type(x).__name__}")


def filtering_commitments(s: frozenset[Commitment]) -> frozenset[Commitment]:
    """W(y): the filtering commitments (kind in :data:`FILTER_KINDS`) of a commitment set (TIDE Alg. 1)."""
    return frozenset(c for c in s if c.kind in FILTER_KINDS)


def output_commitments(s: frozenset[Commitment]) -> frozenset[Commitment]:
    """O(y) = S(y) \\ W(y): the output-side commitments (TIDE Alg. 1)."""
    return frozenset(c for c in s if c.kind not in FILTER_KINDS)


_LITERAL = r"('(?:[^']|'')*'|[^\s,()]+)"


def _literals(c: Commitment) -> list[str] | None:
    """The literal texts of a unit, read by aligning its value form on its structural form."""
    parts = c.structural_form.split("?")
    m = re.fullmatch(_LITERAL.join(re.escape(p) for p in parts), c.value_form, flags=re.DOTALL)
    return list(m.groups()) if m else None


def _literal_changes(a: Commitment, b: Commitment) -> int | None:
    """How many literals differ between two units of one structural form (``None``: not alignable)."""
    la, lb = _literals(a), _literals(b)
    if la is None or lb is None or len(la) != len(lb):
        return None
    return sum(x != y for x, y in zip(la, lb))


def literal_replacement(w_pre: frozenset[Commitment], w_post: frozenset[Commitment], *,
                        max_literal_changes: int = 1) -> bool:
    """LitReplace of TIDE Alg. 1: the filtering units that changed were replaced, one for one, by units of the
    same scope, kind and structural form (TIDE App. A), with between 1 and ``max_literal_changes`` literals
    changed in all; every other filter is unchanged.

    With the default (one literal) this is exactly one unit replaced by one that differs in one literal, as
    Alg. 1 says. The one-for-one pairing matters for larger budgets only: ``x BETWEEN 2000 AND 2010`` is the
    two units ``x >= 2000`` and ``x <= 2010`` (:func:`~textsql_clarify.rewards.sql_canonical.normalise_predicates`),
    so moving both bounds replaces two units, two literals in all. Several candidate pairings of one
    structural form are resolved by the fewest changed literals (scipy's assignment solver).

    Args:
        w_pre, w_post: W(y_pre) and W(y_post) (:func:`filtering_commitments`).
        max_literal_changes: literals allowed to differ in all (Alg. 1: "one predicate literal changes").

    Raises:
        ValueError: ``max_literal_changes < 1``.
    """
    if max_literal_changes < 1:
        raise ValueError(f"max_literal_changes must be >= 1, got {max_literal_changes}")
    removed, added = w_pre - w_post, w_post - w_pre
    if not removed or len(removed) != len(added):
        return False
    groups: dict[tuple, tuple[list, list]] = {}
    for side, units in ((0, removed), (1, added)):
        for c in sorted(units):
            groups.setdefault((c.scope, c.kind, c.structural_form), ([], []))[side].append(c)
    total = 0
    for olds, news in groups.values():
        if len(olds) != len(news):
            return False
        big = max_literal_changes + 1  # an unalignable pair costs more than the whole budget
        cost = np.array([[_literal_changes(a, b) if _literal_changes(a, b) is not None else big for b in news]
                         for a in olds])
        rows, cols = linear_sum_assignment(cost)
        pair_costs = cost[rows, cols]
        if (pair_costs < 1).any():  # a pair that differs in no literal is not a replacement
            return False
        total += int(pair_costs.sum())
    return 1 <= total <= max_literal_changes


def is_drift(pre: str | frozenset, post: str | frozenset, schema: Mapping | None = None) -> bool:
    """The non-monotonicity test (TIDE §2.2): drift iff S_pre is not a subset of S_post.

    Removal and replacement are drift; no change and pure additions are not.

    Args:
        pre, post: SQL strings or commitment sets (:func:`commitment_set`).
        schema: passed to :func:`commitment_set` for string inputs.

    Raises:
        SQLParseError: a string input cannot be parsed.
        TypeError: an input is neither a string nor a set of :class:`Commitment`.
    """
    return not _as_set(pre, "pre", schema) <= _as_set(post, "post", schema)


def drift_subtype(pre: str | frozenset, post: str | frozenset, schema: Mapping | None = None, *,
                  max_literal_changes: int = 1) -> str:
    """Drift status or subtype of one update, TIDE Algorithm 1.

    Returns ``"not_drift"`` when S_pre ⊆ S_post; else ``"value"`` when O is unchanged and one filter's
    literal changed (:func:`literal_replacement`); else ``"constraint"`` when O is unchanged and
    W_post ⊊ W_pre (filters removed, nothing else changed); else ``"projection"`` when W is unchanged and
    O_pre ⊄ O_post; else ``"reject"``.

    Args:
        pre, post: SQL strings or commitment sets.
        schema: passed to :func:`commitment_set` for string inputs.
        max_literal_changes: see :func:`literal_replacement`.

    Raises:
        SQLParseError: a string input cannot be parsed.
        TypeError: an input is neither a string nor a set of :class:`Commitment`.
        ValueError: ``max_literal_changes < 1``.
    """
    s_pre, s_post = _as_set(pre, "pre", schema), _as_set(post, "post", schema)
    if max_literal_changes < 1:
        raise ValueError(f"max_literal_changes must be >= 1, got {max_literal_changes}")
    if s_pre <= s_post:
        return "not_drift"
    w_pre, w_post = filtering_commitments(s_pre), filtering_commitments(s_post)
    o_pre, o_post = output_commitments(s_pre), output_commitments(s_post)
    if o_pre == o_post and literal_replacement(w_pre, w_post, max_literal_changes=max_literal_changes):
        return "value"
    if o_pre == o_post and w_post < w_pre:
        return "constraint"
    if w_pre == w_post and not o_pre <= o_post:
        return "projection"
    return "reject"


# ------------------------------------------------------------------------------- revision of a retraction
#: which side of the commitment set each TIDE subtype edits (Alg. 1): W for value and constraint, O for projection
_SUBTYPE_SIDE = {"value": FILTER_KINDS, "constraint": FILTER_KINDS,
                 "projection": frozenset(KINDS) - FILTER_KINDS}


@dataclass(frozen=True)
class DriftRevision:
    """How the agent's two queries handled one drift event, read against the gold pair (TIDE §2.2).

    Attributes:
        subtype: the drift's TIDE subtype (Alg. 1 on the gold pair): ``value``, ``constraint`` or
            ``projection``.
        retracted: R = S(gold_pre) \\ S(gold_post), the commitments the drift withdrew (never empty).
        introduced: A = S(gold_post) \\ S(gold_pre), the commitments it brought in (empty for constraint).
        uncommitted: R \\ S(y_pre): retracted units the agent's pre-drift SQL never held, so there was
            nothing of them to revise.
        surviving: retracted units still held after the drift: those in S(y_post), plus those whose
            columns a unit of S(y_post) \\ S(gold_post) of the same scope and kind still reads (a
            retracted ``amount > 2500`` re-worded as ``amount > 0`` was not dropped).
        missing: A \\ S(y_post): introduced units the post-drift SQL does not carry.
        collateral: (S(y_pre) \\ S(y_post)) \\ R: units the agent withdrew that the drift did not retract
            (TIDE App. C: the post-drift SQL "leaves every commitment not targeted by the drift unchanged").
        recognised: TIDE's Rec(τ), S(y_pre) ⊄ S(y_post).
    """

    subtype: str
    retracted: frozenset[Commitment]
    introduced: frozenset[Commitment]
    uncommitted: frozenset[Commitment]
    surviving: frozenset[Commitment]
    missing: frozenset[Commitment]
    collateral: frozenset[Commitment]
    recognised: bool

    @property
    def revised(self) -> bool:
        """The agent revised what the drift retracted, and only that: it held every retracted unit before the
        drift, holds none of them after it, withdrew nothing else, and carries every introduced unit
        (additions beyond A are allowed, as TIDE's test allows them). Implies :attr:`recognised` (R is never
        empty)."""
        return not (self.uncommitted or self.surviving or self.missing or self.collateral)


def _agent_set(x: object, name: str, schema: Mapping | None) -> frozenset[Commitment]:
    """An agent query's commitment set; a query that cannot be analysed commits to nothing."""
    try:
        return _as_set(x, name, schema)
    except SQLParseError:
        return frozenset()


def drift_revision(gold_pre: str | frozenset, gold_post: str | frozenset, pred_pre: str | frozenset | None,
                   pred_post: str | frozenset | None, *, subtype: str | None = None,
                   schema: Mapping | None = None) -> DriftRevision:
    """Did the agent's post-drift SQL revise what the drift retracted? (TIDE §2.2, App. A, Alg. 1)

    The retracted units R and the introduced units A are the difference between the gold pair's commitment
    sets (value forms, scope by scope). The agent revised the drift when (see :attr:`DriftRevision.revised`)
    R ⊆ S(y_pre) (it had committed to what the user withdrew), no unit of R survives in S(y_post) (see
    :attr:`DriftRevision.surviving`), S(y_pre) \\ S(y_post) ⊆ R (it withdrew nothing else) and
    A ⊆ S(y_post). This is stronger than TIDE's Rec(τ), which any change of the agent's SQL satisfies
    (``SELECT 1`` then ``SELECT 2``).

    Args:
        gold_pre, gold_post: the pre- and post-drift gold SQL (or their commitment sets).
        pred_pre, pred_post: the agent's SQL before and after the drift utterance (or commitment sets);
            ``None`` or a query that cannot be analysed commits to nothing.
        subtype: the sample's TIDE subtype, checked against Alg. 1 on the gold pair; ``None`` reads it
            from the gold pair.
        schema: passed to :func:`commitment_set` for string inputs (resolves bare columns).

    Returns:
        :class:`DriftRevision`.

    Raises:
        SQLParseError: a gold query cannot be analysed.
        ValueError: the gold pair is not a drift of TIDE's three subtypes (Alg. 1 gives ``not_drift`` or
            ``reject``), or ``subtype`` is not the one Alg. 1 gives.
        TypeError: an input is neither a string, ``None`` (agent side) nor a set of :class:`Commitment`.
    """
    g_pre, g_post = _as_set(gold_pre, "gold_pre", schema), _as_set(gold_post, "gold_post", schema)
    found = drift_subtype(g_pre, g_post)
    if found not in _SUBTYPE_SIDE:
        raise ValueError(f"the gold pair is not a drift of a TIDE subtype: Algorithm 1 gives {found!r}")
    if subtype is not None and subtype != found:
        raise ValueError(f"subtype {subtype!r} does not match the gold pair: Algorithm 1 gives {found!r}")
    y_pre = frozenset() if pred_pre is None else _agent_set(pred_pre, "pred_pre", schema)
    y_post = frozenset() if pred_post is None else _agent_set(pred_post, "pred_post", schema)
    retracted, introduced = g_pre - g_post, g_post - g_pre
    side = _SUBTYPE_SIDE[found]
    # Alg. 1 put every changed unit on the subtype's side; only there can a re-worded unit hide
    extra = [u for u in y_post - g_post if u.kind in side and u.columns]
    surviving = frozenset(
        r for r in retracted
        if r in y_post or (r.columns and any(u.scope == r.scope and u.kind == r.kind and u.columns & r.columns
                                             for u in extra)))
    return DriftRevision(found, retracted, introduced, retracted - y_pre, surviving, introduced - y_post,
                         (y_pre - y_post) - retracted, not y_pre <= y_post)
