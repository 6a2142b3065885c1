"""Value-masked gold SQL, for ABISS's duplicate check (ABISS §4.2, validation stage 1).

ABISS §4.2, "Stage 1: Duplicate Removal": "The pipeline first eliminates exact duplicates. Then, for
answerable and ambiguous questions, we adopt the same duplicate check proposed in (Li et al., 2025
[OmniSQL]): each ground truth SQL is value-masked and checked against previously produced ones. For the
attachment ambiguity example, ``SELECT * FROM students WHERE department = 'Engineering'`` would be masked
to ``SELECT * FROM students WHERE department = ?``, preventing duplicates that differ only in literal
values." :func:`mask_values` is that masking; :mod:`.validate` compares the masked golds of the samples
over one database, in load order.

Double-quoted strings. SQLite reads ``"France"`` as a string literal where no column of that name is in
scope (SQLite docs, "SQL As Understood By SQLite", keywords: "If a keyword in double quotes is used in a
context where it cannot be resolved to an identifier but where a string literal is allowed, then the token
is understood to be a string literal"), and Spider, CoSQL and GeoQuery golds write values that way
(``WHERE country = "France"``). sqlglot parses such a token as a quoted column name, so the masking needs
the database's column names to tell the two apart: given ``columns``, an unqualified quoted name that is
neither a column of the database nor an alias of the query is a value and is masked as ``'France'`` is.
"""
from __future__ import annotations

import functools

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Tokenizer, TokenType

from ..errors import SQLParseError
from ..sql.schema import parse_for_analysis

__all__ = ["mask_values"]

#: Token types masked when sqlglot cannot parse a gold (:func:`mask_values`'s fallback).
_LITERAL_TOKENS = frozenset({TokenType.STRING, TokenType.NUMBER, TokenType.TRUE, TokenType.FALSE})


def _is_quoted_string(node: exp.Expression, names: frozenset[str] | None) -> bool:
    """Whether ``node`` is a quoted, unqualified "column" that SQLite reads as a string literal: its name is
    not in ``names`` (the database's columns plus the query's aliases). ``names`` None: never (no schema to
    decide with)."""
    if names is None or not isinstance(node, exp.Column) or node.table:
        return False
    ident = node.this
    return isinstance(ident, exp.Identifier) and bool(ident.quoted) and str(ident.this).lower() not in names


def _mask_node(node: exp.Expression, names: frozenset[str] | None = None) -> exp.Expression:
    """One step of the masking transform: a literal (string, number, boolean, a negated number, a
    double-quoted string per :func:`_is_quoted_string`) becomes ``?``; an identifier is lower-cased and
    unquoted (SQLite identifiers ignore case; quoting a plain name changes nothing)."""
    if isinstance(node, (exp.Literal, exp.Boolean)) or _is_quoted_string(node, names):
        return exp.Placeholder()
    if isinstance(node, exp.Neg) and isinstance(node.this, (exp.Literal, exp.Placeholder)):
        return exp.Placeholder()
    if isinstance(node, exp.Identifier):
        return exp.Identifier(this=str(node.this).lower(), quoted=False)
    return node


def _mask_by_tokens(sql: str, columns: frozenset[str] | None = None) -> str:
    """Fallback for SQL sqlglot cannot parse: its tokens, literals as ``?`` (a quoted name that is not one of
    ``columns`` too, when given), the rest upper-cased, one space apart. Never raises (an untokenisable
    text is returned stripped and upper-cased)."""
    try:
        tokens = Tokenizer(dialect="sqlite").tokenize(sql)
    except SqlglotError:
        return " ".join(sql.split()).upper()

    def literal(t) -> bool:
        if t.token_type in _LITERAL_TOKENS:
            return True
        return columns is not None and t.token_type == TokenType.IDENTIFIER and t.text.lower() not in columns

    return " ".join("?" if literal(t) else t.text.upper() for t in tokens if t.text != ";")


@functools.lru_cache(maxsize=8192)
def mask_values(sql: str, columns: frozenset[str] | None = None) -> str:
    """The value-masked, normalised form of one gold SQL (ABISS §4.2 stage 1, after OmniSQL).

    Every literal (string, number, ``TRUE``/``FALSE``, a negative number) becomes the placeholder ``?``;
    identifiers are lower-cased and unquoted; the tree is written back by sqlglot in SQLite dialect, so
    keyword case, whitespace and optional parentheses no longer matter. ``NULL`` stays (``IS NULL`` is
    structure, not a value). Two golds that differ only in their literal values mask to the same text.
    With ``columns``, a double-quoted value (``WHERE country = "France"``, valid SQLite where no column
    ``France`` exists) is masked too; without, quoted names are kept as identifiers.

    Args:
        sql: one SQLite statement.
        columns: the lower-cased column names of the database the gold runs on (every table's), or
            ``None`` when no schema is at hand.
    Returns:
        The masked text. SQL that sqlglot cannot parse (or that is too large to analyse) is masked from its
        tokens instead (:func:`_mask_by_tokens`), so the function never raises. Cached.
    """
    try:
        tree = parse_for_analysis(sql)
    except SQLParseError:
        return _mask_by_tokens(sql, columns)
    names = None
    if columns is not None:
        # an alias named in quotes ("ORDER BY "n"") is an identifier as much as a column is
        names = columns | {a.alias.lower() for a in tree.find_all(exp.Alias, exp.TableAlias) if a.alias}
        names |= {str(t.name).lower() for t in tree.find_all(exp.Table)}
    try:
        return tree.transform(lambda n: _mask_node(n, names), copy=False).sql(dialect="sqlite")
    except (SqlglotError, RecursionError, ValueError):
        return _mask_by_tokens(sql, columns)
