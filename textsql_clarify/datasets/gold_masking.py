"""Value-masked gold SQL, for ABISS's duplicate check (ABISS §4.2, validation stage 1).

ABISS §4.2, "Stage 1: Duplicate Removal": "The pipeline first eliminates exact duplicates. Then, for
answerable and ambiguous questions, we adopt the same duplicate check proposed in (Li et al., 2025
[OmniSQL]): each ground truth SQL is value-masked and checked against previously produced ones. For the
attachment ambiguity example, ``SELECT * FROM students WHERE department = 'Engineering'`` would be masked
to ``SELECT * FROM students WHERE department = ?``, preventing duplicates that differ only in literal
values." :func:`mask_values` is that masking; :mod:`.validate` compares the masked golds of the samples
over one database, in load order.
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


def _mask_node(node: exp.Expression) -> exp.Expression:
    """One step of the masking transform: a literal (string, number, boolean, a negated number) becomes
    ``?``; an identifier is lower-cased and unquoted (SQLite identifiers ignore case; quoting a plain
    name changes nothing)."""
    if isinstance(node, (exp.Literal, exp.Boolean)):
        return exp.Placeholder()
    if isinstance(node, exp.Neg) and isinstance(node.this, (exp.Literal, exp.Placeholder)):
        return exp.Placeholder()
    if isinstance(node, exp.Identifier):
        return exp.Identifier(this=str(node.this).lower(), quoted=False)
    return node


def _mask_by_tokens(sql: str) -> str:
    """Fallback for SQL sqlglot cannot parse: its tokens, literals as ``?``, the rest upper-cased, one
    space apart. Never raises (an untokenisable text is returned stripped and upper-cased)."""
    try:
        tokens = Tokenizer().tokenize(sql)
    except SqlglotError:
        return " ".join(sql.split()).upper()
    return " ".join("?" if t.token_type in _LITERAL_TOKENS else t.text.upper() for t in tokens if t.text != ";")


@functools.lru_cache(maxsize=8192)
def mask_values(sql: str) -> str:
    """The value-masked, normalised form of one gold SQL (ABISS §4.2 stage 1, after OmniSQL).

    Every literal (string, number, ``TRUE``/``FALSE``, a negative number) becomes the placeholder ``?``;
    identifiers are lower-cased and unquoted; the tree is written back by sqlglot in SQLite dialect, so
    keyword case, whitespace and optional parentheses no longer matter. ``NULL`` stays (``IS NULL`` is
    structure, not a value). Two golds that differ only in their literal values mask to the same text.

    Args:
        sql: one SQLite statement.
    Returns:
        The masked text. SQL that sqlglot cannot parse (or that is too large to analyse) is masked from its
        tokens instead (:func:`_mask_by_tokens`), so the function never raises. Cached.
    """
    try:
        tree = parse_for_analysis(sql)
    except SQLParseError:
        return _mask_by_tokens(sql)
    try:
        return tree.transform(_mask_node, copy=False).sql(dialect="sqlite")
    except (SqlglotError, RecursionError, ValueError):
        return _mask_by_tokens(sql)
