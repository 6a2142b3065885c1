"""Atomic fragments of a gold SQL query, each with a plain-language rendering.

ABISS §5.2 grounds *technical* user answers in "structured SQL query fragments" extracted from the
gold query; TIDE App. E restricts each answer to a single atomic AST node so that the user never
volunteers more than was asked. :func:`gold_fragments` walks the top-level query with sqlglot and
returns one :class:`Fragment` per atomic node (an ORDER BY key, the LIMIT, DISTINCT, the projection
list, a WHERE/HAVING conjunct, a GROUP BY key, an aggregate of the projection, a JOIN). The ``sql``
field is for grounding a model prompt only; the ``text`` field is what a user may say.

:func:`technical_topic` tells which technical topic (ordering, limit, duplicates, output columns) a
clarification asks about, the "valid but secondary database concern" of ABISS §5.2.
"""
from __future__ import annotations

import functools

import re
from dataclasses import dataclass
from typing import Iterable

from sqlglot import exp

from ..errors import SQLParseError
from ..sql.schema import DIALECT, parse_sql

__all__ = ["Fragment", "FRAGMENT_KINDS", "TECHNICAL_TOPICS", "gold_fragments", "technical_topic", "vague_text"]

FRAGMENT_KINDS = ("columns", "distinct", "aggregate", "join", "filter", "group", "order", "limit")
TECHNICAL_TOPICS = ("order", "limit", "distinct", "columns")


@dataclass(frozen=True)
class Fragment:
    """One atomic node of the gold query's top level (TIDE App. E: one node per technical reply).

    Attributes:
        kind: ``order`` | ``limit`` | ``distinct`` | ``columns`` | ``filter`` | ``group`` |
            ``aggregate`` | ``join``.
        sql: the node rendered by sqlglot (SQLite dialect), e.g. ``"ORDER BY grade DESC"``. For
            grounding or prompting only; never shown to the agent.
        text: the same content in plain words with no SQL syntax, e.g.
            ``"sorted from highest to lowest by grade"``, ``"only the first 5 results"``.
    """

    kind: str
    sql: str
    text: str


# ----------------------------------------------------------------------------- describing expressions

def _words(name: str) -> str:
    """``"StuID"`` -> ``"stu id"``; ``"home_city"`` -> ``"home city"``."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
    return " ".join(w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w) or "a value"


def _join_list(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


_AGG_WORDS = {exp.Avg: "the average", exp.Sum: "the total", exp.Min: "the smallest", exp.Max: "the largest"}


class _Describer:
    """Plain-language rendering of sqlglot expressions; resolves projection aliases."""

    def __init__(self, aliases: dict[str, exp.Expression], schema: set[str]):
        self.aliases = aliases
        self.schema = schema

    def expr(self, e: exp.Expression, depth: int = 0) -> str:  # noqa: C901 - one branch per node type
        if depth > 8:
            return "a computed value"
        d = depth + 1
        if isinstance(e, (exp.Paren, exp.Alias)):
            return self.expr(e.this, d)
        if isinstance(e, exp.Star):
            return "every detail"
        if isinstance(e, exp.Column):
            if isinstance(e.this, exp.Star):
                return "every detail"
            name = e.name
            low = name.lower()
            if low in self.aliases and not e.table and (not self.schema or low not in self.schema):
                return self.expr(self.aliases[low], d)
            return _words(name)
        if isinstance(e, exp.Literal):
            return f'"{e.this}"' if e.is_string else str(e.this)
        if isinstance(e, exp.Boolean):
            return "true" if e.this else "false"
        if isinstance(e, exp.Null):
            return "nothing"
        if isinstance(e, exp.Count):
            inner = e.this
            if inner is None or isinstance(inner, exp.Star):
                return "the number of records"
            if isinstance(inner, exp.Distinct):
                parts = [self.expr(x, d) for x in inner.expressions]
                return f"the number of different {_join_list(parts)} values"
            return f"the number of {self.expr(inner, d)} values"
        for cls, word in _AGG_WORDS.items():
            if isinstance(e, cls):
                inner = e.this
                if isinstance(inner, exp.Distinct):
                    return f"{word} of the different {_join_list([self.expr(x, d) for x in inner.expressions])} values"
                return f"{word} {self.expr(inner, d)}"
        if isinstance(e, exp.Distinct):
            return _join_list([self.expr(x, d) for x in e.expressions])
        for cls, word in ((exp.Add, "plus"), (exp.Sub, "minus"), (exp.Mul, "times"), (exp.Div, "divided by")):
            if isinstance(e, cls):
                return f"{self.expr(e.this, d)} {word} {self.expr(e.expression, d)}"
        if isinstance(e, exp.Neg):
            return f"minus {self.expr(e.this, d)}"
        if isinstance(e, (exp.Cast, exp.TryCast)):
            return self.expr(e.this, d)
        if isinstance(e, (exp.Subquery, exp.Select, exp.SetOperation)):
            q = e.this if isinstance(e, exp.Subquery) else e
            if isinstance(q, exp.Select) and len(q.expressions) == 1:
                return f"{self.expr(q.expressions[0], d)} from a separate lookup"
            return "the result of a separate lookup"
        if isinstance(e, exp.DPipe):
            return f"{self.expr(e.this, d)} joined with {self.expr(e.expression, d)}"
        return "a computed value"

    def condition(self, c: exp.Expression, depth: int = 0) -> str:  # noqa: C901
        d = depth + 1
        if depth > 8:
            return "a further condition holds"
        if isinstance(c, exp.Paren):
            return self.condition(c.this, d)
        if isinstance(c, exp.And):
            return f"{self.condition(c.this, d)} and {self.condition(c.expression, d)}"
        if isinstance(c, exp.Or):
            return f"either {self.condition(c.this, d)} or {self.condition(c.expression, d)}"
        if isinstance(c, exp.Not):
            inner = c.this.this if isinstance(c.this, exp.Paren) else c.this
            if isinstance(inner, exp.In):
                return self._in(inner, negated=True, d=d)
            if isinstance(inner, exp.Like):
                return self._like(inner, negated=True, d=d)
            if isinstance(inner, exp.Is):
                return f"{self.expr(inner.this, d)} is present"
            if isinstance(inner, exp.Exists):
                return "there is no matching related record"
            return f"it is not the case that {self.condition(inner, d)}"
        ops = ((exp.EQ, "is"), (exp.NEQ, "is not"), (exp.GT, "is more than"), (exp.GTE, "is at least"),
               (exp.LT, "is less than"), (exp.LTE, "is at most"))
        for cls, word in ops:
            if isinstance(c, cls):
                return f"{self.expr(c.this, d)} {word} {self.expr(c.expression, d)}"
        if isinstance(c, exp.In):
            return self._in(c, negated=False, d=d)
        if isinstance(c, (exp.Like, exp.ILike)):
            return self._like(c, negated=False, d=d)
        if isinstance(c, exp.Between):
            return (f"{self.expr(c.this, d)} is between {self.expr(c.args['low'], d)} "
                    f"and {self.expr(c.args['high'], d)}")
        if isinstance(c, exp.Is):
            return f"{self.expr(c.this, d)} is missing"
        if isinstance(c, exp.Exists):
            return "there is a matching related record"
        return "a further condition holds"

    def _in(self, c: exp.In, negated: bool, d: int) -> str:
        left = self.expr(c.this, d)
        q = c.args.get("query")
        if q is not None:
            return f"{left} {'does not appear' if negated else 'appears'} among the results of a separate lookup"
        vals = _join_list([self.expr(v, d) for v in c.expressions]).replace(" and ", " or ")
        return f"{left} is {'none' if negated else 'one'} of {vals}"

    def _like(self, c: exp.Expression, negated: bool, d: int) -> str:
        left = self.expr(c.this, d)
        pat = c.expression
        neg = " not" if negated else ""
        if isinstance(pat, exp.Literal) and pat.is_string:
            p = pat.this
            core = p.strip("%")
            if p.startswith("%") and p.endswith("%") and len(p) > 1:
                return f'{left} does{neg} contain "{core}"' if negated else f'{left} contains "{core}"'
            if p.endswith("%"):
                return f'{left} does{neg} start with "{core}"' if negated else f'{left} starts with "{core}"'
            if p.startswith("%"):
                return f'{left} does{neg} end with "{core}"' if negated else f'{left} ends with "{core}"'
            return f'{left} is{neg} "{p}"'
        return f"{left} does{neg} match a pattern"


# ----------------------------------------------------------------------------- fragments

def _conjuncts(c: exp.Expression) -> list[exp.Expression]:
    if isinstance(c, exp.And):
        return _conjuncts(c.this) + _conjuncts(c.expression)
    return [c]


def _leftmost_select(tree: exp.Expression) -> exp.Select | None:
    while isinstance(tree, exp.SetOperation):
        tree = tree.this
    if isinstance(tree, exp.Subquery):
        return _leftmost_select(tree.this)
    return tree if isinstance(tree, exp.Select) else None


def _sql(e: exp.Expression) -> str:
    return e.sql(dialect=DIALECT)


def _order_fragments(order: exp.Order | None, desc: _Describer) -> list[Fragment]:
    out = []
    for o in (order.expressions if order is not None else []):
        key = o.this if isinstance(o, exp.Ordered) else o
        is_desc = bool(o.args.get("desc")) if isinstance(o, exp.Ordered) else False
        way = "from highest to lowest" if is_desc else "from lowest to highest"
        out.append(Fragment("order", f"ORDER BY {_sql(o)}", f"sorted {way} by {desc.expr(key)}"))
    return out


def _limit_fragments(node: exp.Expression, ordered: bool) -> list[Fragment]:
    lim = node.args.get("limit")
    if lim is None:
        return []
    val = lim.expression if isinstance(lim, exp.Limit) else lim
    off = node.args.get("offset")
    n = val.this if isinstance(val, exp.Literal) and not val.is_string else None
    if n is not None and str(n) == "1":
        text = "only the top result" if ordered else "only one result"
    elif n is not None:
        text = f"only the first {n} results"
    else:
        text = "only a limited number of results"
    sql = _sql(lim)
    if off is not None:
        o = off.expression if isinstance(off, exp.Offset) else off
        text += f", skipping the first {o.this if isinstance(o, exp.Literal) else 'few'}"
        sql += " " + _sql(off)
    return [Fragment("limit", sql, text)]


def gold_fragments(gold_sql: str, schema_identifiers: Iterable[str] = ()) -> list[Fragment]:
    """The atomic fragments of the gold query's top level (ABISS §5.2 fragments; TIDE App. E).

    Kinds come in this order: ``columns`` (one fragment for the whole projection list), ``distinct``
    (SELECT DISTINCT, or a UNION / INTERSECT / EXCEPT that removes repeats), ``aggregate`` (one per
    aggregate call in the projection), ``join`` (one per JOIN), ``filter`` (one per WHERE, then HAVING,
    conjunct), ``group`` (one per GROUP BY key), ``order`` (one per ORDER BY key), ``limit``. Nested
    queries are not entered. For a set operation, the projection comes from its leftmost SELECT and
    ORDER BY / LIMIT from the set operation itself; the branches' filters are not listed.

    Args:
        gold_sql: one SQLite query.
        schema_identifiers: table and column names. A name used in ORDER BY that is a projection alias
            (``ORDER BY cnt`` for ``COUNT(*) AS cnt``) and not a schema name is described through its
            definition ("the number of records"); with no names given, every matching alias is.
    Returns:
        Fragments as above; ``text`` uses no SQL syntax and no table qualifiers.
    Raises:
        SQLParseError: the SQL is empty, not one statement, does not parse, or is not a query.
    """
    schema = frozenset(x.strip().lower() for x in schema_identifiers if isinstance(x, str))
    return list(_gold_fragments_cached(gold_sql, schema))


@functools.lru_cache(maxsize=2048)
def _gold_fragments_cached(gold_sql: str, schema: frozenset[str]) -> tuple[Fragment, ...]:
    """:func:`gold_fragments`, cached: the same gold is described on every clarification of an episode."""
    return tuple(_gold_fragments(gold_sql, schema))


def _gold_fragments(gold_sql: str, schema: frozenset[str]) -> list[Fragment]:
    tree = parse_sql(gold_sql)
    sel = _leftmost_select(tree)
    if sel is None:
        raise SQLParseError(gold_sql, f"not a query: top-level node is {type(tree).__name__}")
    aliases = {a.alias.lower(): a.this for a in sel.expressions if isinstance(a, exp.Alias) and a.alias}
    desc = _Describer(aliases, schema)
    top = tree if isinstance(tree, exp.SetOperation) else sel
    out: list[Fragment] = []

    items = [desc.expr(e) for e in sel.expressions]
    out.append(Fragment("columns", "SELECT " + ", ".join(_sql(e) for e in sel.expressions),
                        "the " + _join_list(items) if items and not items[0].startswith(("the ", "every"))
                        else _join_list(items)))
    if isinstance(tree, exp.SetOperation):
        if tree.args.get("distinct"):
            word = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}.get(type(tree), "UNION")
            out.append(Fragment("distinct", word, "each result listed only once, without duplicates"))
    else:
        if sel.args.get("distinct") is not None:
            out.append(Fragment("distinct", "SELECT DISTINCT", "each result listed only once, without duplicates"))
        for e in sel.expressions:
            inner = e.this if isinstance(e, exp.Alias) else e
            if isinstance(inner, exp.AggFunc):
                out.append(Fragment("aggregate", _sql(inner), desc.expr(inner)))
        for j in sel.args.get("joins") or []:
            tname = j.this.name if isinstance(j.this, exp.Table) else ""
            what = f"the {_words(tname)} records" if tname else "a related list"
            out.append(Fragment("join", _sql(j), f"combined with {what}"))
        where = sel.args.get("where")
        if where is not None:
            for c in _conjuncts(where.this):
                out.append(Fragment("filter", f"WHERE {_sql(c)}", f"only those where {desc.condition(c)}"))
        group = sel.args.get("group")
        for g in (group.expressions if group is not None else []):
            out.append(Fragment("group", f"GROUP BY {_sql(g)}", f"one result per {desc.expr(g)}"))
        having = sel.args.get("having")
        if having is not None:
            for c in _conjuncts(having.this):
                out.append(Fragment("filter", f"HAVING {_sql(c)}", f"only groups where {desc.condition(c)}"))
    order_frags = _order_fragments(top.args.get("order"), desc)
    out.extend(order_frags)
    out.extend(_limit_fragments(top, ordered=bool(order_frags)))
    return out


_VAGUE = {
    "columns": "just what my question asks for",
    "distinct": "each result listed only once, without duplicates",
    "aggregate": "a summary figure rather than a full list",
    "join": "details from a related list as well",
    "filter": "only the ones my question describes",
    "group": "one result per group",
}


def vague_text(fragment: Fragment) -> str:
    """A rendering of ``fragment`` that names no column or table (fallback for the leakage guard).

    Order keeps its direction ("sorted from highest to lowest"); limit and distinct keep their full text,
    which names nothing from the schema.

    Raises:
        ValueError: unknown fragment kind.
    """
    if fragment.kind == "order":
        return fragment.text.split(" by ", 1)[0]
    if fragment.kind == "limit":
        return fragment.text
    try:
        return _VAGUE[fragment.kind]
    except KeyError:
        raise ValueError(f"unknown fragment kind {fragment.kind!r}; valid: {list(FRAGMENT_KINDS)}") from None


# ----------------------------------------------------------------------------- technical topics

_NUM = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|few)"
_TOPIC_PATTERNS: dict[str, tuple[re.Pattern, ...]] = {
    "order": tuple(re.compile(p, re.IGNORECASE) for p in (
        r"\bsort(?:s|ed|ing)?\b",
        r"\b(?:in|what|which|any|particular|specific|certain|some|descending|ascending|alphabetical|reverse|"
        r"chronological|numerical)\s+order\b",
        r"\border(?:ed)?\s+(?:by|them|it|the\s+(?:results?|rows|list|output|records))\b",
        r"\bordering\b",
        r"\b(?:ascending|descending)\b",
        r"\b(?:highest|lowest|largest|smallest|biggest|newest|oldest|most|least)\s+(?:first|to\s+(?:lowest|highest|"
        r"smallest|largest|least|most|oldest|newest))\b",
        r"\balphabetical(?:ly)?\b",
        r"\brank(?:ed|ing)?\b",
    )),
    "limit": tuple(re.compile(p, re.IGNORECASE) for p in (
        r"\blimit(?:ed|ing)?\b",
        rf"\btop\s+{_NUM}\b",
        rf"\bfirst\s+{_NUM}\b",
        r"\bhow\s+many\s+(?:results|rows|records|entries|items|answers)\b",
        r"\bhow\s+many\b[^?.!]{0,30}\b(?:return|returned|show|shown|list|listed|display|displayed|include|included)\b",
        r"\bnumber\s+of\s+(?:results|rows|records\s+to\s+(?:show|return))\b",
        r"\b(?:only|just)\s+(?:one|the\s+(?:top|first|single|best))\b",
        r"\bsingle\s+(?:result|row|answer|record)\b",
        r"\ball\s+(?:of\s+)?(?:them|the\s+results|results|rows|matches)\b",
    )),
    "distinct": tuple(re.compile(p, re.IGNORECASE) for p in (
        r"\bduplicat(?:e|es|ed|ion)\b",
        r"\bdistinct\b",
        r"\bunique\b",
        r"\brepeat(?:s|ed|ing)?\b",
        r"\b(?:only\s+once|more\s+than\s+once|once\s+each)\b",
        r"\bde-?dup",
    )),
    "columns": tuple(re.compile(p, re.IGNORECASE) for p in (
        r"\bcolumns?\b",
        r"\bfields?\b",
        r"\battributes?\b",
        r"\b(?:what|which)\s+(?:information|info|details|data|properties)\b",
        r"\b(?:show|display|include|return|output|list|see)\s+(?:which|what)\b",
        r"\b(?:what|which)\b[^?.!]{0,40}\b(?:show|display|include|return|output|shown|displayed|returned|included)\b"
        r"[^?.!]{0,30}\b(?:for|about|of)\s+(?:each|every|them|it)\b",
        r"\boutput\b",
    )),
}


def technical_topic(clarification: str) -> str | None:
    """Which technical topic a clarification asks about (ABISS §5.2 "Technical": e.g. result ordering).

    Topics: ``order`` (sorting), ``limit`` (how many results), ``distinct`` (duplicates),
    ``columns`` (which output columns). When several match, the one mentioned first wins; a tie at the
    same position goes to the order of :data:`TECHNICAL_TOPICS`. ``"orders"`` as a noun (an orders
    table) does not count as ordering.

    Args:
        clarification: the agent's clarification question.
    Returns:
        The topic, or ``None`` when none matches.
    Raises:
        TypeError: ``clarification`` is not a string.
    """
    if not isinstance(clarification, str):
        raise TypeError(f"technical_topic: clarification must be a string, got {type(clarification).__name__}")
    best: tuple[int, int, str] | None = None
    for rank, topic in enumerate(TECHNICAL_TOPICS):
        for pat in _TOPIC_PATTERNS[topic]:
            m = pat.search(clarification)
            if m and (best is None or (m.start(), rank) < best[:2]):
                best = (m.start(), rank, topic)
    return best[2] if best else None
