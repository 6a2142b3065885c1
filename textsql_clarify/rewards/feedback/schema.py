"""Claims checked against the schema: which missing-element claims blame a table or column that exists.

An explanation that blames an existing element as missing is wrong however close it is to the hidden
knowledge (ABISS §4.2 Stage 8: the explanation must name what is really absent). :func:`_structure`
reads the database's tables and columns as word stems; :func:`existing_claimed_missing` checks the
claims of :func:`textsql_clarify.rewards.feedback.claims.missing_claims` against them.
"""
from __future__ import annotations

import sqlite3
from typing import Iterable, Sequence

from ...samples import Sample
from ...sql.schema import read_schema
from .claims import MissingClaim
from .words import _split_ident, _stem

__all__ = ["Structure", "existing_claimed_missing"]

#: ``{table stems: {column stems}}`` of a database.
Structure = dict[tuple[str, ...], set[tuple[str, ...]]]


def _structure(sample: Sample | None, schema_identifiers: Iterable[str]) -> tuple[Structure, set[tuple[str, ...]]]:
    """({table stems: {column stems}}, {stems of every identifier}) from the database, else the flat names."""
    tables: Structure = {}
    if sample is not None and sample.db_path:
        try:
            for t, cols in read_schema(sample.db_path).items():
                tables[tuple(_stem(x) for x in _split_ident(t))] = {tuple(_stem(x) for x in _split_ident(c))
                                                                    for c in cols}
        except (OSError, sqlite3.DatabaseError):  # missing or unreadable db: use the flat names only
            tables = {}
    flat = {tuple(_stem(x) for x in _split_ident(s)) for s in schema_identifiers if isinstance(s, str) and s.strip()}
    flat |= set(tables)
    for cols in tables.values():
        flat |= cols
    flat.discard(())
    return tables, flat


def _has_column(head: tuple[str, ...], columns: Iterable[tuple[str, ...]]) -> bool:
    """``head`` names one of ``columns``: equal stems, or the first words of a longer name
    (``amount`` for ``amount_eur``)."""
    return any(c == head or (len(c) > len(head) and c[:len(head)] == head) for c in columns)


def _table_for(scope: tuple[str, ...] | None, tables: Structure) -> tuple[str, ...] | None:
    if not scope:
        return None
    if scope in tables:
        return scope
    for t in tables:  # "student" scope for a "students"-like table, or a table named by its last words
        if t[-len(scope):] == scope or scope[-len(t):] == t:
            return t
    return None


def existing_claimed_missing(claims: Sequence[MissingClaim], tables: Structure,
                             identifiers: set[tuple[str, ...]]) -> list[str]:
    """The claims that blame an element which exists in the schema (a contradiction).

    Args:
        claims: from :func:`missing_claims`.
        tables: ``{table stems: {column stems}}`` (may be empty when the database is unknown).
        identifiers: stems of every table and column name.
    Returns:
        One ``"table:<words>"`` or ``"column:<words>"`` string per contradicting claim.
    """
    out = []
    table_names = set(tables)
    columns_any = identifiers - table_names if tables else identifiers
    for c in claims:
        h = c.head
        scoped = _table_for(c.scope, tables)
        if c.kind in ("table", "any") and (h in table_names or (not tables and h in identifiers and c.kind == "table")):
            out.append("table:" + " ".join(h))
            continue
        if c.kind in ("column", "any"):
            if scoped is not None:
                if _has_column(h, tables[scoped]):
                    out.append("column:" + " ".join(h))
                continue
            if _has_column(h, columns_any):
                out.append("column:" + " ".join(h))
                continue
            for k in range(1, len(h)):  # "professor salaries": a table word then a column of it
                t = _table_for(h[:k], tables)
                if t is not None and _has_column(h[k:], tables[t]):
                    out.append("column:" + " ".join(h))
                    break
    return out
