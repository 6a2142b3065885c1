"""Component sets: where the SQL went wrong (article: "Component: where the SQL went wrong").

Both queries are reduced to six sets of canonical SQL fragments, each scored with its own precision and
recall. Precision falls where the candidate added something, recall where it left something out. The
sets follow the article (and the spirit of Spider's component matching):

- ``tables``: base tables read anywhere in the query (CTE names are not tables);
- ``joins``: column-to-column equalities between two different sources, from ON *or* WHERE;
- ``filters``: every other WHERE, HAVING and ON conjunct (top-level AND split);
- ``aggregations``: every aggregate call (``SUM(orders.amount)``, ``COUNT(*)``), wherever it is;
- ``group_by``: grouping keys;
- ``order_by``: ordering keys with their direction, plus the row window (``LIMIT n`` / ``OFFSET m``);
  top-k is an ordering decision in SQLite, and without it the agent-LIMIT policy would have nothing to act
  on (argued in ``docs/metrics.md``).

Preparation (article: the "preparation" paragraph) is identical on both sides and shared with
:mod:`.commitments`: it lives in :mod:`.sql_canonical` (:func:`prepare_sql`, :func:`canonical_sql`, re-exported
here). The only one-sided step is the documented agent-side cleaning of :class:`ComponentPolicy`. A query
that cannot be parsed or analysed raises :class:`~textsql_clarify.errors.SQLParseError` (see
:mod:`.sql_canonical` for the analysis caps and the degraded qualify paths).

Undefined is not zero (article: "Measuring honestly"): a precision or recall whose denominator is 0 is
``None``.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from ..sql.schema import active_memo, analysis_errors
from .sql_canonical import (  # re-exported: the preparation used to live here
    PreparedQuery, canonical_sql, conjuncts, immediate_subqueries, prepare_sql, prepared_for_analysis,
)

__all__ = [
    "COMPONENT_SETS", "ComponentPolicy", "PreparedQuery", "prepare_sql", "canonical_sql", "conjuncts",
    "immediate_subqueries", "component_sets", "score_components", "precision_recall",
]

#: the six component sets, in report order (article: "Component").
COMPONENT_SETS: tuple[str, ...] = ("tables", "joins", "filters", "aggregations", "group_by", "order_by")


@dataclass(frozen=True)
class ComponentPolicy:
    """What the candidate (agent) side loses before scoring, and nothing else (article: "Component").

    The article's rule: both sides are parsed identically, and the candidate loses only what the agent adds
    by design and the gold never has. A step applied to one side only would measure the harness.

    Attributes:
        ignore_agent_limit: drop the agent's pagination row cap: an outermost ``LIMIT n`` (with its
            ``OFFSET``) on the candidate whose ``n >= agent_limit_min_rows``, and only when the gold's
            outermost query has no LIMIT. Default ``True``.
        agent_limit_min_rows: smallest ``n`` (rows) read as a pagination cap rather than a top-k choice
            of the model (``LIMIT 1`` is a choice, ``LIMIT 1000`` a cap). Default 100.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: ``agent_limit_min_rows < 1``.
    """

    ignore_agent_limit: bool = True
    agent_limit_min_rows: int = 100

    def __post_init__(self) -> None:
        if not isinstance(self.ignore_agent_limit, bool):
            raise TypeError(f"ComponentPolicy.ignore_agent_limit must be a bool, got {self.ignore_agent_limit!r}")
        if isinstance(self.agent_limit_min_rows, bool) or not isinstance(self.agent_limit_min_rows, int):
            raise TypeError(
                f"ComponentPolicy.agent_limit_min_rows must be an int, got {self.agent_limit_min_rows!r}")
        if self.agent_limit_min_rows < 1:
            raise ValueError(f"ComponentPolicy.agent_limit_min_rows must be >= 1, got {self.agent_limit_min_rows}")


# ------------------------------------------------------------------------------------------- component sets
def _root_limit(tree: exp.Expression) -> exp.Expression | None:
    return tree.args.get("limit")


def _limit_rows(limit: exp.Expression) -> int | None:
    e = limit.args.get("expression")
    if isinstance(e, exp.Literal) and not e.is_string:
        try:
            return int(float(e.this))
        except ValueError:
            return None
    return None


def _has_agent_limit(tree: exp.Expression, policy: ComponentPolicy) -> bool:
    """The outermost query ends in ``LIMIT n`` with ``n >= agent_limit_min_rows`` (a pagination cap)."""
    limit = _root_limit(tree)
    if limit is None:
        return False
    rows = _limit_rows(limit)
    return rows is not None and rows >= policy.agent_limit_min_rows


def _strip_agent_limit(tree: exp.Expression, policy: ComponentPolicy) -> None:
    if _has_agent_limit(tree, policy):
        tree.set("limit", None)
        tree.set("offset", None)


def _query_sets(sql: str, schema: Mapping | None, policy: ComponentPolicy, strip: bool) -> dict[str, frozenset[str]]:
    """Component sets of ``sql``, without its agent LIMIT when ``strip`` (and the policy's cap applies).

    Inside one env step (:func:`~textsql_clarify.sql.schema.shared_analysis`) the preparation is shared and
    the sets of each (text, schema, LIMIT dropped or not) are worked out once: the dense reward and the
    component scores ask for the same prediction's sets."""
    if active_memo() is None:
        tree = prepare_sql(sql, schema).tree
        with analysis_errors(sql, "component sets"):
            if strip:
                _strip_agent_limit(tree, policy)
            return _sets_of(tree)
    prepared = prepared_for_analysis(sql, schema)  # shared: read only (``_sets_of`` does not mutate)
    with analysis_errors(sql, "component sets"):
        strip = strip and _has_agent_limit(prepared.tree, policy)

    def compute() -> dict[str, frozenset[str]]:
        with analysis_errors(sql, "component sets"):
            if not strip:
                return _sets_of(prepared.tree)
            tree = prepared.tree.copy()
            _strip_agent_limit(tree, policy)
            return _sets_of(tree)

    # the shared preparation lives as long as the memo, so its identity names the text and schema
    return active_memo().get(("component sets", id(prepared), strip), compute)


def _is_join_equality(c: exp.Expression) -> bool:
    if not isinstance(c, exp.EQ):
        return False
    left, right = c.this, c.expression
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        return False
    if isinstance(left.this, exp.Star) or isinstance(right.this, exp.Star):
        return False
    return not left.table or not right.table or left.table.lower() != right.table.lower()


#: node kinds :func:`_sets_of` reads, gathered in one walk of the tree (as six ``find_all`` walks would find them)
_GATHERED = (exp.CTE, exp.Table, exp.Select, exp.AggFunc, exp.Order, (exp.Limit, exp.Offset))


def _gather(tree: exp.Expression) -> list[list[exp.Expression]]:
    """The nodes of each kind of :data:`_GATHERED`, in ``find_all``'s (breadth-first) order, from one walk."""
    found: list[list[exp.Expression]] = [[] for _ in _GATHERED]
    for node in tree.walk():
        for k, kind in enumerate(_GATHERED):
            if isinstance(node, kind):
                found[k].append(node)
    return found


def _sets_of(tree: exp.Expression) -> dict[str, frozenset[str]]:
    """The six component sets of a prepared tree (which is only read). One walk gathers the nodes; they are
    then read in the order the six ``find_all`` walks used to give them, so a failing fragment is the same."""
    sets: dict[str, set[str]] = {name: set() for name in COMPONENT_SETS}
    cte_nodes, tables, selects, aggs, orders, windows = _gather(tree)
    ctes = {c.alias_or_name.lower() for c in cte_nodes}
    for t in tables:
        if t.name and t.name.lower() not in ctes:
            sets["tables"].add(t.name.lower())
    for sel in selects:
        conds = conjuncts(sel.args.get("where"))
        for j in sel.args.get("joins") or []:
            conds += conjuncts(j.args.get("on"))
        for c in conds:
            sets["joins" if _is_join_equality(c) else "filters"].add(canonical_sql(c))
        for c in conjuncts(sel.args.get("having")):
            sets["filters"].add(canonical_sql(c))
        group = sel.args.get("group")
        for g in group.expressions if group is not None else []:
            sets["group_by"].add(canonical_sql(g))
    for agg in aggs:
        sets["aggregations"].add(canonical_sql(agg))
    for order in orders:
        if isinstance(order.parent, exp.Window):
            continue
        for o in order.expressions:
            sets["order_by"].add(canonical_sql(o if isinstance(o, exp.Ordered) else exp.Ordered(this=o.copy())))
    for node in windows:
        word = "LIMIT" if isinstance(node, exp.Limit) else "OFFSET"
        sets["order_by"].add(f"{word} {canonical_sql(node.args['expression'])}")
    return {name: frozenset(v) for name, v in sets.items()}


def component_sets(sql: str, schema: Mapping | None = None, policy: ComponentPolicy = ComponentPolicy(), *,
                   agent: bool = False) -> dict[str, frozenset[str]]:
    """Reduce one query to the six component sets (article: "Component: where the SQL went wrong").

    Args:
        sql: one SQLite query.
        schema: ``{table: {column: type}}`` used to resolve bare column names, or ``None``.
        policy: the agent-side cleaning (:class:`ComponentPolicy`).
        agent: ``True`` when ``sql`` is the agent's query; the policy's cleaning applies only then. (In
            :func:`score_components` it also requires the gold to lack an outermost LIMIT.)

    Returns:
        ``{name: frozenset of canonical fragments}`` for every name in :data:`COMPONENT_SETS`, e.g.
        ``{"tables": {"orders", "customers"}, "joins": {"customers.customer_id = orders.customer_id"}, ...}``.

    Raises:
        SQLParseError: the query cannot be parsed, is not a query, is too big to analyse, or sqlglot fails on
            it (:func:`prepare_sql`).
        TypeError: bad ``schema`` or ``policy``.
    """
    if not isinstance(policy, ComponentPolicy):
        raise TypeError(f"policy must be a ComponentPolicy, got {type(policy).__name__}")
    return dict(_query_sets(sql, schema, policy, agent and policy.ignore_agent_limit))


def precision_recall(predicted: frozenset | set, gold: frozenset | set) -> tuple[float | None, float | None]:
    """``(|P ∩ G| / |P|, |P ∩ G| / |G|)``, each ``None`` when its denominator is 0 (article: "Undefined is
    not zero, and not one")."""
    hit = len(predicted & gold)
    return (hit / len(predicted) if predicted else None, hit / len(gold) if gold else None)


def _schema_key(schema: Mapping | None):
    if schema is None:
        return None
    return tuple(sorted((str(t), tuple(sorted(map(str, cols))) if isinstance(cols, Mapping) else ())
                        for t, cols in schema.items()))


@functools.lru_cache(maxsize=4096)
def _gold_side(gold_sql: str, schema_key) -> tuple[dict, object]:
    """The gold's component sets and outermost LIMIT, cached: the gold is scored against many candidates.

    The cache key is the SQL text and a fingerprint of the schema (table and column names)."""
    schema = None if schema_key is None else {t: {c: "" for c in cols} for t, cols in schema_key}
    tree = prepare_sql(gold_sql, schema).tree
    with analysis_errors(gold_sql, "component sets"):
        return _sets_of(tree), _root_limit(tree)


def score_components(pred_sql: str, gold_sql: str, schema: Mapping | None = None,
                     policy: ComponentPolicy = ComponentPolicy()) -> dict[str, dict[str, float | None]]:
    """Precision and recall of each component set of the agent's query against the gold SQL.

    Both sides go through the same preparation; the candidate alone loses the agent's pagination LIMIT
    when the policy says so and the gold's outermost query has no LIMIT (article: "Component").

    Args:
        pred_sql: the agent's (candidate) query.
        gold_sql: the gold SQL.
        schema: ``{table: {column: type}}`` of the database, or ``None``.
        policy: :class:`ComponentPolicy`.

    Returns:
        ``{set_name: {"precision": p, "recall": r}}`` for every name in :data:`COMPONENT_SETS`; ``p`` or
        ``r`` is ``None`` when its denominator is 0 (e.g. neither query groups: both ``None``).

    Raises:
        SQLParseError: either query cannot be parsed or analysed (:func:`prepare_sql`; ``.sql`` says which).
        TypeError: bad ``schema`` or ``policy``.
    """
    if not isinstance(policy, ComponentPolicy):
        raise TypeError(f"policy must be a ComponentPolicy, got {type(policy).__name__}")
    memo = active_memo()
    if memo is not None and isinstance(pred_sql, str) and isinstance(gold_sql, str):
        try:
            key = ("score components", pred_sql, gold_sql, memo.fingerprint(schema), policy)
            hash(key)
        except (TypeError, AttributeError):
            pass
        else:  # worked out once per pair and schema in a step (kept with the step's memo); a copy out
            shared = memo.get(key, lambda: _score_components(pred_sql, gold_sql, schema, policy))
            return {name: dict(pr) for name, pr in shared.items()}
    return _score_components(pred_sql, gold_sql, schema, policy)


def _score_components(pred_sql: str, gold_sql: str, schema: Mapping | None,
                      policy: ComponentPolicy) -> dict[str, dict[str, float | None]]:
    """:func:`score_components` without the step memo of its answer."""
    gold, gold_limit = _gold_side(gold_sql, _schema_key(schema))
    pred = _query_sets(pred_sql, schema, policy, policy.ignore_agent_limit and gold_limit is None)
    out: dict[str, dict[str, float | None]] = {}
    for name in COMPONENT_SETS:
        p, r = precision_recall(pred[name], gold[name])
        out[name] = {"precision": p, "recall": r}
    return out
