"""Spider's hardness level (easy / medium / hard / extra) from a record's parsed ``sql`` field.

Spider (Yu et al., 2018) grades each gold query by counting SQL components in its parsed form, the
``sql`` object stored next to every question in ``dev.json``. This is a re-implementation of that
rule from its description, with the same counting conventions, so that the levels agree with the
ones published for Spider dev (248 easy, 446 medium, 174 hard, 166 extra; checked in
``tests/test_datasets.py``).

Counts, over the top-level query only:

* component1: one each for a WHERE, GROUP BY, ORDER BY and LIMIT clause; one per joined table
  beyond the first; one per ``OR`` connective and one per ``LIKE`` condition in FROM/WHERE/HAVING.
* component2: nested queries (sub-queries inside conditions, and INTERSECT/EXCEPT/UNION operands).
* others: one each for more than one aggregate, more than one SELECT column, more than one WHERE
  condition, and more than one GROUP BY column.

A record without a usable ``sql`` object gets ``"unknown"`` (:func:`spider_hardness` never raises
on malformed input; the loader decides what to do with it).
"""
from __future__ import annotations

from typing import Any

# Spider's operator tables: index 0 of the aggregate table means "no aggregate"; "like" is
# operator 9 of the condition table.
_NO_AGG = 0
_LIKE_OP = 9


def _has_agg(unit: Any) -> bool:
    return isinstance(unit, (list, tuple)) and len(unit) > 0 and unit[0] != _NO_AGG


def _count_agg(units: list) -> int:
    return sum(1 for u in units if _has_agg(u))


def _conds(sql: dict) -> list:
    """Condition units (even positions) of FROM, WHERE and HAVING."""
    return sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]


def _connectives(sql: dict) -> list:
    return sql["from"]["conds"][1::2] + sql["where"][1::2] + sql["having"][1::2]


def _component1(sql: dict) -> int:
    n = sum(1 for k in ("where", "groupBy", "orderBy") if len(sql[k]) > 0)
    n += sql["limit"] is not None
    n += max(len(sql["from"]["table_units"]) - 1, 0)
    n += sum(1 for c in _connectives(sql) if c == "or")
    n += sum(1 for c in _conds(sql) if c[1] == _LIKE_OP)
    return n


def _component2(sql: dict) -> int:
    nested = 0
    for c in _conds(sql):
        nested += isinstance(c[3], dict) + isinstance(c[4], dict)
    nested += sum(1 for k in ("intersect", "except", "union") if sql[k] is not None)
    return nested


def _others(sql: dict) -> int:
    agg = _count_agg(sql["select"][1])
    # Spider counts aggregates over WHERE and HAVING condition units too; their first slot is the
    # NOT flag, so in practice these add nothing. Kept for fidelity of the counts.
    agg += _count_agg(sql["where"][::2])
    agg += _count_agg(sql["groupBy"])
    if len(sql["orderBy"]) > 0:
        val_units = sql["orderBy"][1]
        agg += _count_agg([u[1] for u in val_units if u[1]] + [u[2] for u in val_units if u[2]])
    agg += _count_agg(sql["having"])
    n = int(agg > 1)
    n += len(sql["select"][1]) > 1
    n += len(sql["where"]) > 1
    n += len(sql["groupBy"]) > 1
    return n


def spider_hardness(sql: Any) -> str:
    """Spider's hardness level of one parsed query.

    Args:
        sql: the ``sql`` object of a Spider record (a dict with ``select``, ``from``, ``where``,
            ``groupBy``, ``having``, ``orderBy``, ``limit``, ``intersect``, ``except``, ``union``).

    Returns:
        ``"easy"`` | ``"medium"`` | ``"hard"`` | ``"extra"``, or ``"unknown"`` when ``sql`` does not
        have that shape.
    """
    try:
        c1, c2, ot = _component1(sql), _component2(sql), _others(sql)
    except (KeyError, IndexError, TypeError):
        return "unknown"
    if c1 <= 1 and ot == 0 and c2 == 0:
        return "easy"
    if (ot <= 2 and c1 <= 1 and c2 == 0) or (c1 <= 2 and ot < 2 and c2 == 0):
        return "medium"
    if ((ot > 2 and c1 <= 2 and c2 == 0) or (2 < c1 <= 3 and ot <= 2 and c2 == 0)
            or (c1 <= 1 and ot == 0 and c2 <= 1)):
        return "hard"
    return "extra"
