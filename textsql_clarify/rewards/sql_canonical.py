"""Shared SQL preparation and canonical text, used by every fragment-level metric family.

Two metric families compare queries fragment by fragment: component sets (:mod:`.components`, article:
"Component: where the SQL went wrong") and commitment sets (:mod:`.commitments`, TIDE App. A). Both need
the same two steps, which live here so that neither family depends on the other:

- **Preparation** (:func:`prepare_sql`, article: the "preparation" paragraph), identical for the gold SQL
  and the candidate: every column is resolved to ``table.column`` with sqlglot's qualify plus the schema,
  table aliases are replaced by table names, select aliases and ordinals in GROUP BY / ORDER BY / HAVING
  are expanded (an ordinal into a ``*`` is resolved through the schema, or kept as the ordinal), and
  double-quoted names are read as string literals where SQLite would.
- **Canonical text** (:func:`canonical_sql`, TIDE App. A CanonValue / CanonStruct): one spelling per
  fragment, so that equivalent spellings compare equal and a reversed polarity does not; plus the
  clause-splitting helpers :func:`conjuncts` (top-level AND split, TIDE Table 5) and
  :func:`immediate_subqueries` (TIDE Alg. 2).

Bounded and typed (``textsql_clarify.sql.schema``): a query over the analysis caps (``MAX_ANALYSIS_CHARS``,
``MAX_ANALYSIS_NODES``, ``MAX_ANALYSIS_DEPTH``) is refused with
:class:`~textsql_clarify.errors.SQLParseError` before any costly step; whatever sqlglot raises on a query is
that same typed error; a failed qualify degrades (without the schema, then without qualify) instead of
raising.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, UnsupportedError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.scope import traverse_scope

from ..errors import SQLParseError
from ..sql.schema import (
    DIALECT, Schema, active_memo, analysis_errors, is_star, ordinal_references, parse_for_analysis,
    parsed_for_analysis, qualified_for_analysis, qualify_sql, schema_fingerprint,
)

__all__ = [
    "PreparedQuery", "prepare_sql", "prepared_for_analysis", "canonical_sql", "normalise_predicates", "conjuncts",
    "immediate_subqueries", "GENERIC_SUBQUERY",
]


# ---------------------------------------------------------------------------------------------- preparation
@dataclass(frozen=True)
class PreparedQuery:
    """A parsed query after the shared preparation (:func:`prepare_sql`).

    Attributes:
        tree: the sqlglot AST, columns resolved to canonical source names (a private copy; callers may
            mutate it).
        qualified: ``True`` when sqlglot's qualify succeeded with the schema; ``False`` on a degraded path
            (see ``fallback``).
        fallback: ``None``, or why the preparation degraded: qualify failed with the schema and succeeded
            without it (``"qualified without the schema: <reason>"``), or failed both ways and only table
            aliases were replaced, unqualified columns staying unqualified (``"not qualified: <reason>"``).
    """

    tree: exp.Expression
    qualified: bool
    fallback: str | None = None


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.Glob,
                exp.NullSafeEQ, exp.NullSafeNEQ)


def _check_schema(schema: object) -> Schema | None:
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        raise TypeError(f"schema must be a mapping {{table: {{column: type}}}} or None, got {type(schema).__name__}")
    out: Schema = {}
    for table, cols in schema.items():
        if not isinstance(table, str) or not isinstance(cols, Mapping):
            raise TypeError(f"schema entry {table!r} must map a table name to {{column: type}}, "
                            f"got {type(cols).__name__}")
        out[table.lower()] = {str(c).lower(): str(t or "TEXT") for c, t in cols.items()}
    return out


def _double_quoted_literals(tree: exp.Expression, sql: str, schema: Schema | None) -> int:
    """Turn ``"Kyle"`` into the string ``'Kyle'`` where SQLite would (in place); returns how many were turned.

    SQLite reads a double-quoted token that resolves to no column as a string literal (Spider writes
    ``name = "Kyle"``). With a schema the rule is SQLite's: no column of that name anywhere. Without one, a
    double-quoted bare name in a value position (right operand of a comparison, an IN list item, a
    BETWEEN bound) is read as a literal.
    """
    targets = _quoted_literal_columns(tree.find_all(exp.Alias), tree.find_all(exp.Column), sql, schema)
    for col in targets:
        col.replace(exp.Literal.string(col.this.this))
    return len(targets)


def _quoted_literal_columns(alias_nodes, column_nodes, sql: str, schema: Schema | None) -> list[exp.Column]:
    """The columns :func:`_double_quoted_literals` turns into string literals (the tree is only read)."""
    known = {c for cols in schema.values() for c in cols} if schema is not None else None
    aliases = {a.alias.lower() for a in alias_nodes if a.alias}
    out = []
    for col in list(column_nodes):
        ident = col.this
        if col.table or not isinstance(ident, exp.Identifier) or not ident.args.get("quoted"):
            continue
        start = (ident.meta or {}).get("start")
        if start is None or start >= len(sql) or sql[start] != '"':
            continue
        name = ident.this
        if known is not None:
            literal = name.lower() not in known and name.lower() not in aliases
        else:
            parent = col.parent
            literal = ((isinstance(parent, _COMPARISONS) and col.arg_key == "expression")
                       or (isinstance(parent, exp.In) and col.arg_key == "expressions")
                       or (isinstance(parent, exp.Between) and col.arg_key in ("low", "high")))
        if literal:
            out.append(col)
    return out


def _infer_schema(tree: exp.Expression) -> Schema:
    """Columns the query itself attributes to base tables (qualified refs; bare names in one-table scopes)."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out: Schema = {t.name.lower(): {} for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes}
    try:
        scopes = traverse_scope(tree)
    except Exception:  # noqa: BLE001 - inference is optional: sqlglot raises many kinds on odd scopes
        return out
    for scope in scopes:
        tables = {k.lower(): v for k, v in scope.sources.items() if isinstance(v, exp.Table)}
        sel = scope.expression
        aliases = ({e.alias.lower() for e in sel.expressions if isinstance(e, exp.Alias)}
                   if isinstance(sel, exp.Select) else set())
        for col in scope.columns:
            if isinstance(col.this, exp.Star) or not col.name:
                continue
            name = col.name.lower()
            if col.table:
                s: object = scope
                while s is not None:
                    src = {k.lower(): v for k, v in s.sources.items()}.get(col.table.lower())
                    if src is not None:
                        if isinstance(src, exp.Table) and src.name.lower() in out:
                            out[src.name.lower()][name] = "TEXT"
                        break
                    s = s.parent
            elif len(scope.sources) == 1 and len(tables) == 1 and name not in aliases:
                src = next(iter(tables.values()))
                if src.name.lower() in out:
                    out[src.name.lower()][name] = "TEXT"
    return out


def _source_map(sel: exp.Select, ctes: set[str]) -> dict[str, str]:
    """``{alias: canonical source name}`` for one SELECT: the table name, ``name#k`` for the k-th copy of a
    self-joined table, ``derived<k>`` for the k-th derived table; CTE references keep their name."""
    out: dict[str, str] = {}
    seen: Counter = Counter()
    n_derived = 0
    sources = []
    if sel.args.get("from_") is not None:
        sources.append(sel.args["from_"].this)
    sources += [j.this for j in sel.args.get("joins") or []]
    for src in sources:
        key = (src.alias_or_name or "").lower()
        if isinstance(src, exp.Table) and src.name:
            name = src.name.lower()
            seen[name] += 1
            out[key] = name if seen[name] == 1 or name in ctes else f"{name}#{seen[name]}"
        elif key:
            n_derived += 1
            out[key] = f"derived{n_derived}"
    return out


def _canonical_qualifiers(tree: exp.Expression) -> None:
    """Replace every column's table qualifier by its canonical source name (in place); correlated columns
    resolve through the enclosing SELECTs, innermost first, as SQL does."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    maps: dict[int, dict[str, str]] = {}
    for col in list(tree.find_all(exp.Column)):
        qualifier = col.table
        if not qualifier:
            continue
        sel = col.find_ancestor(exp.Select)
        while sel is not None:
            m = maps.get(id(sel))
            if m is None:
                m = maps[id(sel)] = _source_map(sel, ctes)
            if qualifier.lower() in m:
                col.set("table", exp.to_identifier(m[qualifier.lower()]))
                break
            sel = sel.find_ancestor(exp.Select)


def _unalias(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Alias) else e


def _expand_references(tree: exp.Expression) -> None:
    """Expand select-list ordinals (``ORDER BY 2``) and select aliases (``ORDER BY cnt``) in GROUP BY,
    ORDER BY and HAVING into the expressions they name (in place), as SQLite resolves them."""
    for sel in list(tree.find_all(exp.Select)):
        items = sel.expressions
        aliases = {e.alias.lower(): e.this for e in items if isinstance(e, exp.Alias) and e.alias}
        for key in ("group", "order"):
            clause = sel.args.get(key)
            if clause is None:
                continue
            for e in list(clause.expressions):
                target = e.this if isinstance(e, exp.Ordered) else e
                if isinstance(target, exp.Literal) and not target.is_string and target.this.isdigit():
                    k = int(target.this)
                    # at or after a '*' item the k-th output column is not the k-th item: keep the ordinal
                    if 1 <= k <= len(items) and not any(is_star(i) for i in items[:k]):
                        target.replace(_unalias(items[k - 1]).copy())
        if not aliases:
            continue
        for key in ("group", "order", "having"):
            clause = sel.args.get(key)
            if clause is None:
                continue
            for col in list(clause.find_all(exp.Column)):
                if not col.table and col.name.lower() in aliases and col.find_ancestor(exp.Select) is sel:
                    col.replace(aliases[col.name.lower()].copy())


def _star_columns(q: exp.Query, item: exp.Expression, schema: Schema, ctes: set[str]) -> list[exp.Column] | None:
    """The output columns a ``*`` / ``t.*`` item of SELECT ``q`` stands for, from the given schema, in
    SQLite's order (FROM then JOINs, each table's declaration order); ``None`` when not known for sure
    (a derived table or CTE, a table not in the schema, a USING / NATURAL join that merges columns)."""
    if not isinstance(q, exp.Select):
        return None
    joins = q.args.get("joins") or []
    if any(j.args.get("using") or (j.args.get("method") or "").upper() == "NATURAL" for j in joins):
        return None
    sources = ([q.args["from_"].this] if q.args.get("from_") is not None else []) + [j.this for j in joins]
    node = item.this if isinstance(item, exp.Alias) else item
    if isinstance(node, exp.Column):  # t.*
        picks = [src for src in sources if (src.alias_or_name or "").lower() == node.table.lower()]
        if len(picks) != 1:
            return None
    else:
        picks = sources
    out: list[exp.Column] = []
    for src in picks:
        if not isinstance(src, exp.Table) or not src.name:
            return None
        name = src.name.lower()
        if name in ctes or name not in schema or not schema[name]:
            return None
        out += [exp.column(c, table=src.alias_or_name) for c in schema[name]]
    return out


def _resolve_star_ordinals(tree: exp.Expression, schema: Schema | None) -> None:
    """Replace (in place) an ordinal that points into a ``*`` by the column it names, where the given
    schema tells (``SELECT * FROM t ORDER BY 1`` -> ``ORDER BY t.<first column of t>``), as SQLite resolves
    it. An ordinal after a star that cannot be expanded stays an ordinal (:func:`~textsql_clarify.sql.schema.qualify_sql`
    keeps it through qualify)."""
    if not schema:
        return
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for q, lit in list(ordinal_references(tree)):
        items = q.selects
        k = int(lit.this)
        if k < 1 or not any(is_star(i) for i in items[:k]):  # a star may make k exceed the items
            continue
        pos = 0
        for item in items:
            if is_star(item):
                cols = _star_columns(q, item, schema, ctes)
                if cols is None:
                    break
                if pos + len(cols) >= k:
                    lit.replace(cols[k - pos - 1])
                    break
                pos += len(cols)
            else:
                pos += 1
                if pos == k:
                    target = _unalias(item)
                    # a numeric item is left alone: put in ORDER BY, it would read as an ordinal
                    if not (isinstance(target, exp.Literal) and not target.is_string):
                        lit.replace(target.copy())
                    break


def _qualify_with_fallback(tree: exp.Expression, merged: Schema,
                           first: Callable[[], exp.Expression] | None = None) -> tuple[exp.Expression, str | None]:
    """Qualify with the schema; else without it; else only normalise identifiers (the degraded paths).
    ``first``: the first attempt, already worked out for this step (:func:`prepare_sql`)."""
    try:
        if first is not None:
            return first(), None
        return qualify_sql(tree, merged or None, expand_stars=False), None
    except SQLParseError as e:
        if isinstance(e.__cause__, RecursionError):
            raise
        first = e.reason
    if merged:
        try:
            return qualify_sql(tree, None, expand_stars=False), f"qualified without the schema: {first}"
        except SQLParseError as e:
            if isinstance(e.__cause__, RecursionError):
                raise
    return normalize_identifiers(tree.copy(), dialect=DIALECT), f"not qualified: {first}"


def prepare_sql(sql: str, schema: Mapping | None = None) -> PreparedQuery:
    """Parse and prepare one query the same way for every side (article: "Component", preparation).

    Steps: parse (SQLite dialect, within the analysis caps of
    :func:`~textsql_clarify.sql.schema.parse_for_analysis`); double-quoted string literals as SQLite reads
    them; an ordinal that points into a ``*`` replaced by the column it names where ``schema`` tells;
    sqlglot ``qualify`` (stars are kept, so ``SELECT *`` stays one marker) with ``schema`` merged over the
    columns the query itself attributes to tables; table aliases replaced by table names
    (``t1.name`` -> ``student.name``); select aliases and ordinals expanded in GROUP BY / ORDER BY / HAVING.

    Degraded paths: when qualify fails with the schema, the query is qualified without it; when that fails
    too, only identifiers are normalised (:attr:`PreparedQuery.fallback` says which). Both sides of a
    comparison take the same path for the same text, so the sets are still computed.

    Args:
        sql: one SQLite statement; it must be a query (SELECT or a set operation).
        schema: ``{table: {column: type}}`` (e.g. :func:`textsql_clarify.sql.schema.read_schema`) or ``None``.

    Returns:
        :class:`PreparedQuery`; ``qualified`` is ``False`` where qualify failed with the schema (counted by
        the real-data tests).

    Raises:
        SQLParseError: empty input, several statements, a parse error, not a query, too big to analyse
            (:data:`~textsql_clarify.sql.schema.MAX_ANALYSIS_CHARS` and the node and depth caps), nested too
            deeply, or any failure inside sqlglot that no degraded path avoids.
        TypeError: ``schema`` is not a ``{table: {column: type}}`` mapping.
    """
    p = prepared_for_analysis(sql, schema)
    return PreparedQuery(p.tree.copy(), p.qualified, p.fallback) if active_memo() is not None else p


def prepared_for_analysis(sql: str, schema: Mapping | None = None) -> PreparedQuery:
    """:func:`prepare_sql`, done once per text and schema inside one env step
    (:func:`~textsql_clarify.sql.schema.shared_analysis`), where the result is shared: the caller must not
    mutate its tree (copy it first, as :func:`prepare_sql` does). Outside a step, a fresh preparation.

    Source: ``docs/platform.md`` "Step cost" (components, the dense reward and commitments share one preparation).

    Raises:
        SQLParseError, TypeError: as :func:`prepare_sql`.
    """
    memo = active_memo()
    if memo is not None and isinstance(sql, str):
        try:
            fp = memo.fingerprint(schema)  # of the schema as given: its checked form is a function of it
        except (TypeError, AttributeError):
            fp = None
        else:
            # the check runs on first use (a bad schema raises TypeError there, never kept)
            return memo.get(("prepare", sql, schema is None, fp), lambda: _prepare(sql, _check_schema(schema)))
        given = _check_schema(schema)
        return memo.get(("prepare", sql, given is None, schema_fingerprint(given)), lambda: _prepare(sql, given))
    return _prepare(sql, _check_schema(schema))


def _has_star_item(tree: exp.Expression) -> bool:
    """A ``*`` / ``t.*`` select item anywhere (``COUNT(*)`` is not one)."""
    return any(is_star(e) for sel in tree.find_all(exp.Select) for e in sel.expressions)


#: node kinds the shared preparation path reads from the parse, gathered in one walk
_PARSE_KINDS = (exp.Alias, exp.Column, exp.CTE, exp.Table, exp.Select)


def _prepare_shared(sql: str, given: Schema) -> PreparedQuery | None:
    """:func:`_prepare` inside an env step when the parse needs none of the preparation's rewrites before
    qualify (no double-quoted literal, no ``*`` select item, every table read in ``given``): the step's shared
    qualified tree (the one the cells' column origins read) is copied and finished. Reads the step's shared
    parse without copying it. ``None`` when a condition fails (or qualify fails): then :func:`_prepare` runs
    the whole preparation, whose result this path reproduces exactly where it applies."""
    tree = parsed_for_analysis(sql)
    if not isinstance(tree, exp.Query):
        return None
    with analysis_errors(sql, "preparation"):
        found: list[list[exp.Expression]] = [[] for _ in _PARSE_KINDS]
        for node in tree.walk():
            for k, kind in enumerate(_PARSE_KINDS):
                if isinstance(node, kind):
                    found[k].append(node)
        aliases, columns, cte_nodes, tables, selects = found
        if _quoted_literal_columns(aliases, columns, sql, given):
            return None
        ctes = {c.alias_or_name.lower() for c in cte_nodes}
        if not {t.name.lower() for t in tables if t.name and t.name.lower() not in ctes} <= given.keys():
            return None
        if any(is_star(e) for sel in selects for e in sel.expressions):
            return None
    try:
        qualified = qualified_for_analysis(sql, given)
    except SQLParseError:
        return None
    with analysis_errors(sql, "preparation"):
        out = qualified.copy()
        _canonical_qualifiers(out)
        _expand_references(out)
    return PreparedQuery(out, True, None)


def _prepare(sql: str, given: Schema | None) -> PreparedQuery:
    """:func:`prepare_sql` of a checked schema, without the step memo."""
    if given and active_memo() is not None:
        shared = _prepare_shared(sql, given)
        if shared is not None:
            return shared
    tree = parse_for_analysis(sql)
    if not isinstance(tree, exp.Query):
        raise SQLParseError(sql, f"not a query: {type(tree).__name__} statement")
    with analysis_errors(sql, "preparation"):
        turned = _double_quoted_literals(tree, sql, given)
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        read = {t.name.lower() for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes}
        if given is not None and read <= given.keys():
            # every table the query reads is in the schema: the merge below would give the schema itself
            # (the schema's columns replace the inferred ones table by table), so inferring is skipped
            merged = given
        else:
            merged = {t: cols for t, cols in _infer_schema(tree).items() if cols}
            if given:
                merged.update(given)
        _resolve_star_ordinals(tree, given)
        # the tree is still the parse of ``sql`` and has no star to expand, so qualify gives what the cells' column
        # origins get (stars expanded or not): in a step it is done once (here, it failed: the fallbacks follow)
        shared = (active_memo() is not None and merged is given and bool(given) and not turned
                  and not _has_star_item(tree))
        tree, fallback = _qualify_with_fallback(
            tree, merged, (lambda: qualified_for_analysis(sql, given).copy()) if shared else None)
        _canonical_qualifiers(tree)
        _expand_references(tree)
    return PreparedQuery(tree, fallback is None, fallback)


# ------------------------------------------------------------------------------------------- canonical text
_PLAIN_IDENT = re.compile(r"[a-z_][a-z0-9_]*")
_QUERY_NODES = (exp.Query, exp.Subquery)
_FLIP = {exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE}
_NEGATE = {exp.EQ: exp.NEQ, exp.NEQ: exp.EQ, exp.GT: exp.LTE, exp.LTE: exp.GT, exp.LT: exp.GTE, exp.GTE: exp.LT,
           exp.NullSafeEQ: exp.NullSafeNEQ, exp.NullSafeNEQ: exp.NullSafeEQ}
#: operators whose two operands commute exactly in SQLite (``=``, ``<>``, ``IS``, ``IS NOT``, ``+``, ``*``)
_SYMMETRIC = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Add, exp.Mul)
#: binding strength of SQLite operators (higher binds tighter); other nodes are atoms
_PRECEDENCE: dict[type, int] = {
    exp.Or: 1, exp.And: 2, exp.Not: 3,
    exp.EQ: 4, exp.NEQ: 4, exp.NullSafeEQ: 4, exp.NullSafeNEQ: 4, exp.Is: 4, exp.In: 4, exp.Like: 4,
    exp.ILike: 4, exp.Glob: 4, exp.Between: 4, exp.RegexpLike: 4,
    exp.GT: 5, exp.GTE: 5, exp.LT: 5, exp.LTE: 5,
    exp.BitwiseAnd: 6, exp.BitwiseOr: 6, exp.BitwiseLeftShift: 6, exp.BitwiseRightShift: 6,
    exp.Add: 7, exp.Sub: 7, exp.Mul: 8, exp.Div: 8, exp.Mod: 8, exp.IntDiv: 8, exp.DPipe: 9,
    exp.Neg: 10, exp.BitwiseNot: 10,
}
#: the SQLite dialect object every canonical text is generated with (built once, not per fragment)
_SQLITE = Dialect.get_or_raise(DIALECT)
#: label rendered for a masked subquery when the caller gave none
GENERIC_SUBQUERY = "SELECT …"


def immediate_subqueries(node: exp.Expression) -> list[exp.Expression]:
    """Query nodes directly inside ``node`` (a ``Subquery`` wrapper, or a bare ``Select`` / set operation
    as in ``EXISTS(SELECT ...)``), not those nested inside them; in walk order. ``node`` itself is never
    returned. TIDE Alg. 2, "immediate subqueries"."""
    found: list[exp.Expression] = []
    stack = list(reversed(list(node.iter_expressions())))
    while stack:
        child = stack.pop()
        if isinstance(child, _QUERY_NODES):
            found.append(child)
        else:
            stack.extend(reversed(list(child.iter_expressions())))
    return found


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """Split a condition at its top-level ANDs, looking through redundant parentheses; OR and NOT
    subtrees stay whole (TIDE Table 5, WHERE row). ``None`` gives ``[]``."""
    if node is None:
        return []
    if isinstance(node, (exp.Where, exp.Having)):
        node = node.this
    return _operands(node) if isinstance(_strip_parens(node), exp.And) else [_strip_parens(node)]


def _strip_parens(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _is_constant(n: exp.Expression) -> bool:
    while isinstance(n, (exp.Neg, exp.Paren)):
        n = n.this
    return isinstance(n, (exp.Literal, exp.Null, exp.Boolean, exp.Placeholder))


_ATOMS = (exp.Literal, exp.Column, exp.Placeholder, exp.Null, exp.Boolean, exp.Var, exp.Identifier)


def _render_copy(n: exp.Expression) -> str:
    """:func:`_render` of ``n`` without changing it (rendering adds parentheses in place; an atom has none
    to add, so it is not copied)."""
    return _render(n if isinstance(n, _ATOMS) else n.copy())


def _key(n: exp.Expression) -> tuple[int, str]:
    """Sort key of a canonical operand: non-constants first, then the fully parenthesised text."""
    return (1 if _is_constant(n) else 0, _render_copy(n))


def _rebuild(cls: type, items: list[exp.Expression]) -> exp.Expression:
    out = items[0]
    for it in items[1:]:
        out = cls(this=out, expression=it)
    return out


_INTEGER = re.compile(r"[0-9]+")
#: comparisons whose numeric literal operands SQLite compares by value (not LIKE / GLOB: those read text)
_VALUE_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)


def _number_text(text: str) -> str | None:
    """One spelling per numeric value: ``1.0`` / ``1.`` / ``1e0`` / ``01`` -> ``1``; ``1.50`` -> ``1.5``;
    ``None`` where the text is not a finite number. Integer literals keep their exact digits; a non-integer
    is spelled as Python's shortest ``repr`` of the double SQLite reads (integral ones below 2**53 as ints)."""
    if _INTEGER.fullmatch(text):
        return text.lstrip("0") or "0"
    try:
        f = float(text)
    except ValueError:
        return None
    if not math.isfinite(f):
        return None
    if f.is_integer() and abs(f) < 2 ** 53:
        return str(int(f))
    return repr(f)


def _canonical_number(node: exp.Expression) -> None:
    """Respell (in place) a numeric literal operand, looking through a unary minus."""
    while isinstance(node, (exp.Neg, exp.Paren)):
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and isinstance(node.this, str):
        text = _number_text(node.this)
        if text is not None and text != node.this:
            node.set("this", text)


def _canon(n: exp.Expression) -> exp.Expression:
    """Bottom-up canonical rewrite of one node whose children are already canonical."""
    if isinstance(n, _VALUE_COMPARISONS):
        _canonical_number(n.this)
        _canonical_number(n.expression)
    elif isinstance(n, exp.In):
        for e in n.expressions:
            _canonical_number(e)
    elif isinstance(n, exp.Between):
        _canonical_number(n.args.get("low"))
        _canonical_number(n.args.get("high"))
    if isinstance(n, exp.Paren):
        return n.this
    if isinstance(n, exp.Identifier):
        name = n.this.lower() if isinstance(n.this, str) else n.this
        n.set("this", name)
        n.set("quoted", not (isinstance(name, str) and _PLAIN_IDENT.fullmatch(name)))
        return n
    if isinstance(n, exp.Anonymous) and isinstance(n.this, str):
        n.set("this", n.this.upper())
        return n
    if isinstance(n, exp.Binary) and n.args.get("negate"):
        n.set("negate", None)
        return _canon(exp.Not(this=_canon(n)))
    if isinstance(n, exp.Not):
        inner = n.this
        if isinstance(inner, exp.Not):
            return inner.this
        neg = _NEGATE.get(type(inner))
        if neg is not None:
            return _canon(neg(this=inner.this, expression=inner.expression))
        return n
    if isinstance(n, exp.In) and n.expressions and not n.args.get("query") and not n.args.get("unnest"):
        keyed = {}
        for e in n.expressions:
            key = _key(e)
            keyed[key[1]] = (key, e)
        items = [e for _, e in sorted(keyed.values(), key=lambda kv: kv[0])]
        if len(items) == 1:
            return _canon(exp.EQ(this=n.this, expression=items[0]))
        n.set("expressions", items)
        return n
    if isinstance(n, (exp.NullSafeEQ, exp.NullSafeNEQ)) and (isinstance(n.this, exp.Null)
                                                              or isinstance(n.expression, exp.Null)):
        # ``NULL IS x`` -> ``x IS NULL``; ``NULL IS NOT x`` -> ``NOT x IS NULL`` (sqlglot's own spelling)
        other = n.expression if isinstance(n.this, exp.Null) else n.this
        is_null = exp.Is(this=other, expression=exp.Null())
        return is_null if isinstance(n, exp.NullSafeEQ) else exp.Not(this=is_null)
    if isinstance(n, _SYMMETRIC):
        if _key(n.this) > _key(n.expression):
            return type(n)(this=n.expression, expression=n.this)
        return n
    if type(n) in _FLIP:
        if _key(n.this) > _key(n.expression):
            return _FLIP[type(n)](this=n.expression, expression=n.this)
        return n
    return n


def _operands(n: exp.Expression) -> list[exp.Expression]:
    """Operands of an AND (or OR) chain, looking through parentheses; iterative, so long chains are cheap."""
    cls, out, stack = type(_strip_parens(n)), [], [n]
    while stack:
        inner = _strip_parens(stack.pop())
        if type(inner) is cls:
            stack.extend((inner.expression, inner.this))
        else:
            out.append(inner)
    return out


def _canonical_connector(n: exp.Expression) -> exp.Expression:
    """An AND / OR chain flattened, each operand canonical, de-duplicated and sorted (commutativity)."""
    keyed: dict[str, tuple[tuple[int, str], exp.Expression]] = {}
    for part in _operands(n):
        part = _canonical_tree(part)
        for p in _operands(part) if type(part) is type(n) else [part]:
            text = _render_copy(p)
            keyed.setdefault(text, ((1 if _is_constant(p) else 0, text), p))
    items = [node for _, node in sorted(keyed.values(), key=lambda kv: kv[0])]
    return _rebuild(type(n), items)


def _canonical_tree(n: exp.Expression) -> exp.Expression:
    if isinstance(n, (exp.And, exp.Or)):
        return _canonical_connector(n)
    for key, value in list(n.args.items()):
        if isinstance(value, exp.Expression):
            n.set(key, _canonical_tree(value))
        elif isinstance(value, list):
            n.set(key, [_canonical_tree(v) if isinstance(v, exp.Expression) else v for v in value])
    return _canon(n)


def _parenthesise(n: exp.Expression) -> exp.Expression:
    """Put back exactly the parentheses SQLite's precedence needs (in place): a nested operator that binds
    less tightly than its parent, or as tightly but not as the left operand. Since redundant parentheses
    were removed first, one tree has one text and two trees never share one."""
    targets = []
    for c in n.walk():
        if c is n or c.parent is None:
            continue
        pc, pp = _PRECEDENCE.get(type(c)), _PRECEDENCE.get(type(c.parent))
        if pc is None or pp is None:
            continue
        if pc < pp or (pc == pp and c.arg_key != "this"):
            targets.append(c)
    for c in targets:
        p = exp.Paren()
        c.replace(p)
        p.set("this", c)
    return n


def _render(n: exp.Expression) -> str:
    if isinstance(n, exp.Ordered):
        desc = bool(n.args.get("desc"))
        nulls_first = n.args.get("nulls_first")
        text = f"{_render(n.this)} {'DESC' if desc else 'ASC'}"
        # SQLite's default: NULLs sort first ascending, last descending
        if nulls_first is not None and bool(nulls_first) == desc:
            text += " NULLS FIRST" if nulls_first else " NULLS LAST"
        return text
    return _text(_parenthesise(n))


def _text(n: exp.Expression) -> str:
    """SQLite spelling of ``n``. Where SQLite's generator would drop part of a function (e.g. the format
    of BIRD's ``TO_CHAR(x, 'YYYY')``), that function is spelled as a plain call with all its arguments,
    so that two different trees never share one text."""
    try:
        return n.sql(dialect=_SQLITE, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError:
        pass
    for f in reversed(list(n.walk(bfs=False))):
        if isinstance(f, exp.Func) and not isinstance(f, exp.Anonymous):
            try:
                f.sql(dialect=_SQLITE, unsupported_level=ErrorLevel.RAISE)
            except UnsupportedError:
                args = [a for v in f.args.values() for a in (v if isinstance(v, list) else [v])
                        if isinstance(a, exp.Expression)]
                plain = exp.Anonymous(this=f.sql_name(), expressions=args)
                if f is n:
                    n = plain
                else:
                    f.replace(plain)
    return n.sql(dialect=_SQLITE, unsupported_level=ErrorLevel.IGNORE)


#: nodes whose truth value :func:`normalise_predicates` rewrites (parentheses around them are redundant)
_LOGIC = (exp.And, exp.Or, exp.Not, exp.Between, exp.Paren) + tuple(_NEGATE)


def normalise_predicates(tree: exp.Expression) -> exp.Expression:
    """Rewrite every condition of a prepared tree into one normal form, in place (TIDE App. A CanonValue:
    "equivalent rewrites are one commitment"). Each step is exact in SQLite's three-valued logic, so the
    value (1, 0 or NULL) of every rewritten expression is unchanged:

    - ``x BETWEEN a AND b`` -> ``x >= a AND x <= b`` (SQLite documents the two as equivalent);
    - NOT pushed down to the atoms (negation normal form): ``NOT (p AND q)`` -> ``NOT p OR NOT q`` and
      ``NOT (p OR q)`` -> ``NOT p AND NOT q`` (De Morgan holds in Kleene logic), ``NOT NOT p`` -> ``p``,
      ``NOT a = 1`` -> ``a <> 1`` (and ``<`` / ``>=``, ``>`` / ``<=``, ``IS`` / ``IS NOT`` likewise), so
      ``x NOT BETWEEN a AND b`` -> ``x < a OR x > b``;
    - parentheses around a logical operand are dropped (the canonical text puts back those that precedence
      needs).

    ``NOT`` stays in front of what has no negated operator (``NOT x IN (...)``, ``NOT x LIKE p``,
    ``NOT EXISTS (...)``, ``NOT x IS NULL``). Run on the whole tree before its WHERE / HAVING are split into
    conjuncts, so that ``x BETWEEN 1 AND 5`` and ``x >= 1 AND x <= 5`` give the same two units, and
    ``NOT (a = 1 OR b = 2)`` the units ``a <> 1`` and ``b <> 2``. Subquery nodes are kept (not copied), so
    callers that key subqueries by identity still find them; the one exception is a BETWEEN whose tested
    operand holds a subquery, whose second use is a copy.

    Args:
        tree: a prepared tree (:func:`prepare_sql`); it is modified.

    Returns:
        The rewritten tree (the same root object when the root is a query).

    Raises:
        SQLParseError: sqlglot fails on the tree (:func:`~textsql_clarify.sql.schema.analysis_errors`).
    """
    with analysis_errors(tree, "predicate normal form"):
        return _nnf(tree, False)


def _nnf(n: exp.Expression, neg: bool) -> exp.Expression:
    """``n`` (negated when ``neg``) in negation normal form; children are rewritten in place."""
    while isinstance(n, exp.Paren) and isinstance(n.this, _LOGIC):
        n = n.this
    if isinstance(n, exp.Not):
        return _nnf(n.this, not neg)
    if isinstance(n, (exp.And, exp.Or)):
        cls = type(n) if not neg else (exp.Or if isinstance(n, exp.And) else exp.And)
        return cls(this=_nnf(n.this, neg), expression=_nnf(n.expression, neg))
    if isinstance(n, exp.Between) and not n.args.get("symmetric"):
        x, lo, hi = (_nnf(n.args[k], False) for k in ("this", "low", "high"))
        if neg:
            return exp.Or(this=exp.LT(this=x, expression=lo), expression=exp.GT(this=x.copy(), expression=hi))
        return exp.And(this=exp.GTE(this=x, expression=lo), expression=exp.LTE(this=x.copy(), expression=hi))
    for key, value in list(n.args.items()):
        if isinstance(value, exp.Expression):
            new = _nnf(value, False)
            if new is not value:
                n.set(key, new)
        elif isinstance(value, list):
            items = [_nnf(v, False) if isinstance(v, exp.Expression) else v for v in value]
            if any(a is not b for a, b in zip(items, value)):
                n.set(key, items)
    if neg:
        negated = _NEGATE.get(type(n))
        if negated is not None and not n.args.get("negate"):
            return negated(this=n.this, expression=n.expression)
        return exp.Not(this=n)
    return n


def canonical_sql(node: exp.Expression, *, literals: bool = True,
                  subquery_label: Callable[[exp.Expression], str] | None = None) -> str:
    """One canonical spelling of a SQL fragment (a predicate, select item, key, ``Ordered``).

    Equivalent spellings give one text: redundant parentheses removed and the grouping re-stated
    explicitly; identifiers lower-cased; ``1 = a`` -> ``a = 1``; ``5 < x`` -> ``x > 5``; ``NOT a = 1`` ->
    ``a <> 1`` and ``NOT NOT p`` -> ``p`` (both exact in SQL's three-valued logic); AND/OR operands and IN
    lists sorted and de-duplicated; ``x IN (v)`` -> ``x = v``; ``x NOT LIKE p`` == ``NOT x LIKE p``;
    ordering as ``expr ASC|DESC`` (NULLS only when not SQLite's default). A reversed polarity stays
    different. A numeric literal compared by value (an operand of ``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``,
    an IN list item, a BETWEEN bound) is spelled one way per number: ``dept_id = 1.0`` -> ``dept_id = 1``,
    ``x > 2.50`` -> ``x > 2.5`` (SQLite compares INTEGER and REAL by value; a column of TEXT affinity would
    compare the text ``'1.0'``, a case this form does not tell apart). Literals inside arithmetic keep their
    spelling, since ``x / 2`` and ``x / 2.0`` differ in SQLite. Immediate subqueries are masked:
    ``(@label)`` from ``subquery_label``, else ``(SELECT …)``; their own content belongs to their own scope.
    TIDE App. A (CanonValue / CanonStruct).

    Args:
        node: a node of a prepared tree (:func:`prepare_sql`); it is not modified.
        literals: ``True`` for the value form; ``False`` for the structural form (literals -> ``?``).
        subquery_label: maps an immediate subquery node of ``node`` to its label.

    Returns:
        The canonical text (str).

    Raises:
        SQLParseError: sqlglot fails on the fragment (any exception, with the reason;
            :func:`~textsql_clarify.sql.schema.analysis_errors`).
    """
    with analysis_errors(node, "canonical form"):
        return _canonical_sql(node, literals, subquery_label)


def _canonical_sql(node: exp.Expression, literals: bool,
                   subquery_label: Callable[[exp.Expression], str] | None) -> str:
    cp = node.copy()
    subs = immediate_subqueries(node)
    if subs:
        index = {id(o): i for i, o in enumerate(node.walk())}
        cp_nodes = list(cp.walk())
        for s in subs:
            label = subquery_label(s) if subquery_label is not None else GENERIC_SUBQUERY
            target = cp_nodes[index[id(s)]]
            target.replace(exp.Var(this=f"({label})" if isinstance(target, exp.Subquery) else label))
    if isinstance(cp, exp.Ordered):
        cp.set("this", _canonical_tree(cp.this))
    else:
        cp = _canonical_tree(cp)
    if not literals:
        cp = _placeholders(cp)
    return _render(cp)


def _placeholders(cp: exp.Expression) -> exp.Expression:
    """Every literal of ``cp`` replaced by ``?`` (in place where possible). One ``set`` per parent argument:
    replacing list items one by one re-parents the whole list each time (quadratic on a long IN list)."""
    if isinstance(cp, exp.Literal):
        return exp.Placeholder()
    groups: dict[tuple[int, str], tuple[exp.Expression, str, set[int]]] = {}
    for lit in list(cp.find_all(exp.Literal)):
        parent, key = lit.parent, lit.arg_key
        groups.setdefault((id(parent), key), (parent, key, set()))[2].add(id(lit))
    for parent, key, ids in groups.values():
        value = parent.args.get(key)
        if isinstance(value, list):
            parent.set(key, [exp.Placeholder() if id(v) in ids else v for v in value])
        else:
            parent.set(key, exp.Placeholder())
    return cp
