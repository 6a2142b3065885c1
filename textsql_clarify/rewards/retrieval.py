"""Table retrieval: were the tables the answer needs offered to the agent at all? (article: "Retrieval").

The required tables are the ones the gold SQL reads, parsed from the query itself
(:func:`tables_read`). The offered tables are the ones whose schema (DDL) the agent was shown; a table
only mentioned elsewhere does not count (article: "Retrieval: did the agent have the tables?").
:func:`score_retrieval` gives recall, precision and the count of spurious tables, which the article
reports next to precision because it is easier to act on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from ..errors import SQLParseError
from ..sql.schema import Schema, analysis_errors, parse_for_analysis

__all__ = ["RetrievalScores", "score_retrieval", "tables_read"]


def tables_read(sql: str, schema: Schema | dict | None = None) -> frozenset[str]:
    """Lower-cased names of the base tables ``sql`` reads (article: "Retrieval": required tables).

    Every scope is visited (subqueries in FROM / WHERE / HAVING, CTEs, set-operation branches); a name
    that refers to a CTE is not a base table and is left out, while a real table shadowed by a CTE in one
    scope still counts where it is read directly. A schema-qualified name (``main.singer``) counts as its
    table name.

    Args:
        sql: one SQLite statement.
        schema: optional ``{table: {column: type}}``; when given, every table read must be in it
            (case-insensitive).

    Returns:
        frozenset of lower-cased table names (empty for a query with no FROM, e.g. ``SELECT 1``).

    Raises:
        SQLParseError: the SQL cannot be parsed, is too big to analyse
            (:func:`~textsql_clarify.sql.schema.parse_for_analysis`), sqlglot fails to build its scopes (any
            exception, with the reason), or (with ``schema``) it reads a table the schema does not have; the
            message names the table.
    """
    tree = parse_for_analysis(sql)
    with analysis_errors(sql, "cannot build scopes"):
        scopes = traverse_scope(tree)
        names: set[str] = set()
        if scopes:
            for scope in scopes:
                for source in scope.sources.values():
                    if isinstance(source, exp.Table) and source.name:
                        names.add(source.name.lower())
        else:  # not a query (e.g. INSERT/UPDATE): every table mentioned that is not a CTE name
            ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
            names = {t.name.lower() for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes}
    if schema is not None:
        known = {str(t).lower() for t in schema}
        unknown = sorted(names - known)
        if unknown:
            raise SQLParseError(sql, f"reads table(s) not in the schema: {', '.join(unknown)}")
    return frozenset(names)


@dataclass(frozen=True)
class RetrievalScores:
    """Table retrieval scores of one case (article: "Retrieval").

    Attributes:
        recall: ``|required & offered| / |required|``; ``None`` when nothing is required.
        precision: ``|required & offered| / |offered|``; ``None`` when nothing was offered.
        spurious: number of offered tables the answer does not need, ``|offered - required|``.
        required: lower-cased required table names.
        offered: lower-cased offered table names.
    """

    recall: float | None
    precision: float | None
    spurious: int
    required: frozenset[str]
    offered: frozenset[str]


def _names(values: Iterable[str], what: str) -> frozenset[str]:
    if isinstance(values, str):
        raise TypeError(f"{what} must be an iterable of table names, not a single str {values!r}")
    out = set()
    for i, v in enumerate(values):
        if not isinstance(v, str) or not v.strip():
            raise TypeError(f"{what}[{i}] must be a non-empty table name, got {v!r}")
        out.add(v.strip().lower())
    return frozenset(out)


def score_retrieval(required: Iterable[str], offered: Iterable[str]) -> RetrievalScores:
    """Recall, precision and spurious count of the offered tables against the required ones (article: "Retrieval").

    Names are compared lower-cased and stripped; duplicates count once. Worked example (article): gold
    reads orders, order_lines, customers; five tables offered without order_lines: recall 2/3, precision 2/5,
    3 spurious.

    Args:
        required: tables the gold SQL reads (e.g. :func:`tables_read` of the gold).
        offered: tables whose schema the agent was shown.

    Returns:
        :class:`RetrievalScores`; recall / precision are ``None`` when their denominator is empty.

    Raises:
        TypeError: an argument is a bare str, or holds something that is not a non-empty str (the message
            names the argument and the position).
    """
    req = _names(required, "required")
    off = _names(offered, "offered")
    hit = len(req & off)
    return RetrievalScores(
        recall=hit / len(req) if req else None,
        precision=hit / len(off) if off else None,
        spurious=len(off - req),
        required=req,
        offered=off,
    )
