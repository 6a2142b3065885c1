"""A static bound on common-table-expression expansion, checked before SQLite prepares a statement.

SQLite copies a CTE's definition once per reference while it prepares a statement, and no progress
handler or interrupt runs then. A chain in which each CTE reads the previous one twice
(``WITH a0 AS (...), a1 AS (SELECT * FROM a0 UNION ALL SELECT * FROM a0), ...``) doubles the copies with
each term: 825 bytes of SQL with 16 terms spent 3.7 s in prepare (measured: a 0.5 s limit overrun
to 5.4 s, +350 MiB). :func:`cte_copies` counts the copies from the sqlglot AST, and the
sandbox refuses a statement above :data:`MAX_CTE_COPIES` before preparing it.
"""
from __future__ import annotations

import functools

#: The most CTE copies a statement may expand to (a real query has a handful; 2 ** 10 copies prepare in
#: a few milliseconds, 2 ** 16 took seconds).
MAX_CTE_COPIES = 1_000


@functools.lru_cache(maxsize=2048)
def cte_copies(sql: str) -> int:
    """How many CTE bodies SQLite will copy while preparing ``sql`` (an upper-bound estimate).

    Each reference to a CTE costs one copy of it plus the copies its own body makes; references inside a
    recursive CTE to itself count once. Names are matched case-insensitively across the whole statement
    (scoping is ignored, which can only overcount). ``0`` when the SQL has no ``WITH`` or does not parse
    (SQLite then reports its own error).

    Args:
        sql: one SQL statement.
    Returns:
        int: the estimated number of copies (``0`` .. large; capped at ``10 ** 12``).
    Source: ``docs/platform.md`` "SQL bounds" (the CTE-expansion case); SQLite's ``sqlite3WithAdd`` /
    ``resolveFromTermToCte``.
    """
    if "with" not in sql.lower():
        return 0
    try:
        import sqlglot
        from sqlglot import exp

        from .schema import DIALECT

        trees = sqlglot.parse(sql, read=DIALECT)
    except Exception:  # noqa: BLE001 - a statement sqlglot cannot read: SQLite decides
        return 0
    bodies: dict[str, exp.Expression] = {}
    for tree in trees:
        if tree is None:
            continue
        for cte in tree.find_all(exp.CTE):
            name = (cte.alias_or_name or "").lower()
            if name:
                bodies[name] = cte.this
    if not bodies:
        return 0

    def refs(node: exp.Expression, own: str | None) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in node.find_all(exp.Table):
            n = (t.name or "").lower()
            if n in bodies and n != own and not t.args.get("db"):
                out[n] = out.get(n, 0) + 1
        return out

    cap = 10 ** 12
    memo: dict[str, int] = {}

    def size(name: str, stack: frozenset[str]) -> int:
        if name in memo:
            return memo[name]
        if name in stack:  # mutual recursion: count once
            return 1
        total = 1
        for r, k in refs(bodies[name], name).items():
            total = min(cap, total + k * size(r, stack | {name}))
        memo[name] = total
        return total

    total = 0
    for tree in trees:
        if tree is None:
            continue
        main = tree.copy()
        for w in list(main.find_all(exp.With)):
            w.pop()
        for r, k in refs(main, None).items():
            total = min(cap, total + k * size(r, frozenset()))
    return total
