"""Derived databases: a copy of a source SQLite file with one column or one table removed.

The missing-schema recipe (:mod:`textsql_clarify.generation.missing_schema`; ABISS §3.2 "missing entities
or attributes" / "missing relationship", PremiseSQL E3.2 "missing schema premise, by schema perturbation")
needs a database in which what the gold SQL needs is gone, so that the agent can neither see it in the
schema nor query it. :func:`build_derived` makes one:

1. The source is opened read-only (:func:`textsql_clarify.sql.uri.ro_uri`) and copied with SQLite's
   backup API into a temporary file next to the destination; only that new file is ever written.
2. In the copy, views and triggers that name the removed element are dropped (token-level check with
   sqlglot's tokenizer), and indexes on a removed column (``PRAGMA index_info``).
3. A column is removed with ``ALTER TABLE ... DROP COLUMN`` where SQLite allows it; where it refuses (a
   primary-key, unique or foreign-key column, SQLite "ALTER TABLE" docs) the table is rebuilt from its own
   ``CREATE TABLE`` text with that column's definition and every constraint naming it cut out. A table is
   removed with ``DROP TABLE``. Every other table whose foreign key points at the removed element is rebuilt
   without that foreign key, so no ``REFERENCES`` clause in the schema still names it.
   The tables are then put back in the source's creation order (a rebuilt table would otherwise come last in
   ``sqlite_master``, which tells what was removed): every table from the first one out of place on is
   rebuilt in the source's order.
4. The copy is checked (the element is gone, ``PRAGMA integrity_check`` is ``ok``), vacuumed, switched to the
   rollback journal, and renamed onto the destination (atomic ``os.replace``). A destination that exists is
   reused: one derived file per (source database, removed element).

``CREATE TABLE`` text is edited by token spans (sqlglot's SQLite tokenizer), not regenerated: sqlglot would
rewrite ``id int NOT NULL, PRIMARY KEY (id)`` as ``id INTEGER NOT NULL PRIMARY KEY``, which turns the column
into a rowid alias and changes what it stores.
"""
from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..errors import TextSQLClarifyError
from ..sql.uri import ro_uri

__all__ = ["Removal", "DerivedDBError", "derived_name", "build_derived", "table_columns", "table_order",
           "drop_element_from_create", "column_comments"]


class DerivedDBError(TextSQLClarifyError):
    """A derived database could not be built (names the source file and the element)."""


@dataclass(frozen=True)
class Removal:
    """What a derived database lacks (missing schema, ABISS §3.2).

    Attributes:
        table: the table's name as the source schema spells it.
        column: the column's name as the source spells it, or ``None`` when the whole table is removed.
    """

    table: str
    column: str | None = None

    @property
    def slug(self) -> str:
        """``no_<table>_<column>`` or ``no_<table>``: file-name safe (other characters become ``_``)."""
        raw = f"no_{self.table}" + (f"_{self.column}" if self.column is not None else "")
        return re.sub(r"[^A-Za-z0-9_]", "_", raw)

    def describe(self) -> str:
        """``table.column`` or ``table`` (for messages)."""
        return self.table if self.column is None else f"{self.table}.{self.column}"


def derived_name(db_id: str, removal: Removal) -> str:
    """The derived database's file name: ``<db_id>__<slug>.sqlite``; a short hash of the exact names is added
    when the slug had to replace characters (so two removals never share a file).

    Args:
        db_id: the source database's name.
        removal: the removed element.
    """
    safe_db = re.sub(r"[^A-Za-z0-9_]", "_", db_id)
    name = f"{safe_db}__{removal.slug}"
    exact = f"{db_id}__no_{removal.table}" + (f"_{removal.column}" if removal.column is not None else "")
    if name != exact:
        name += "_" + hashlib.sha256(exact.encode("utf-8")).hexdigest()[:8]
    return name + ".sqlite"


def _q(name: str) -> str:
    """A double-quoted SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    """The column names of ``table`` in declaration order (``PRAGMA table_info``), as spelled."""
    return [r[1] for r in con.execute(f"PRAGMA table_info({_q(table)})")]


# ------------------------------------------------------------------------------- CREATE TABLE by tokens
def _tokens(sql: str) -> list:
    from sqlglot.dialects.dialect import Dialect

    return Dialect.get_or_raise("sqlite").tokenize(sql)


def _items(sql: str) -> tuple[list, int, int, list[tuple[int, int]]]:
    """The tokens of a ``CREATE TABLE`` statement, the indices of the body's parentheses and each top-level
    item of the body as a (first token, last token) index pair."""
    from sqlglot.tokens import TokenType

    toks = _tokens(sql)
    try:
        open_i = next(i for i, t in enumerate(toks) if t.token_type == TokenType.L_PAREN)
    except StopIteration:
        raise DerivedDBError(f"CREATE TABLE without a column list: {sql[:120]!r}") from None
    depth, start, items, close_i = 0, open_i + 1, [], None
    for i in range(open_i, len(toks)):
        tt = toks[i].token_type
        if tt == TokenType.L_PAREN:
            depth += 1
        elif tt == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                close_i = i
                if i > start:
                    items.append((start, i - 1))
                break
        elif tt == TokenType.COMMA and depth == 1:
            items.append((start, i - 1))
            start = i + 1
    if close_i is None:
        raise DerivedDBError(f"unbalanced CREATE TABLE: {sql[:120]!r}")
    return toks, open_i, close_i, items


def _paren_names(toks: list, i: int) -> tuple[list[str], int]:
    """The names inside the parenthesised list that starts at token ``i`` (an L_PAREN) and the index after it."""
    from sqlglot.tokens import TokenType

    names, depth, j = [], 0, i
    while j < len(toks):
        tt = toks[j].token_type
        if tt == TokenType.L_PAREN:
            depth += 1
        elif tt == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return names, j + 1
        elif depth == 1 and tt != TokenType.COMMA:
            names.append(toks[j].text)
        j += 1
    return names, j


def _references(toks: list, a: int, b: int) -> tuple[int, str, list[str]] | None:
    """The first ``REFERENCES t (cols)`` in tokens a..b: (its token index, table, columns), or ``None``."""
    from sqlglot.tokens import TokenType

    for j in range(a, b + 1):
        if toks[j].token_type == TokenType.REFERENCES and j + 1 <= b:
            table = toks[j + 1].text
            cols: list[str] = []
            if j + 2 <= b and toks[j + 2].token_type == TokenType.L_PAREN:
                cols, _ = _paren_names(toks, j + 2)
            return j, table, cols
    return None


_CONSTRAINT_STARTS = ("CONSTRAINT", "PRIMARY_KEY", "FOREIGN_KEY", "UNIQUE", "CHECK")


def _names_removed(table: str, ref_table: str, ref_cols: list[str], removal: Removal) -> bool:
    """Whether a reference to ``ref_table(ref_cols)`` points at the removed element."""
    if ref_table.lower() != removal.table.lower():
        return False
    return removal.column is None or removal.column.lower() in {c.lower() for c in ref_cols} or not ref_cols


def drop_element_from_create(sql: str, table: str, removal: Removal) -> tuple[str, bool]:
    """``CREATE TABLE`` text of ``table`` without what names ``removal``: the removed column's definition (when
    ``table`` is the removal's table), each table constraint that lists that column (PRIMARY KEY, UNIQUE, CHECK,
    FOREIGN KEY), and each foreign key (table constraint or a column's ``REFERENCES`` clause) that points at the
    removed column or table. The rest of the text is kept byte for byte.

    Args:
        sql: the table's ``CREATE TABLE`` statement (``sqlite_master.sql``).
        table: the table the statement creates.
        removal: the removed element.
    Returns:
        ``(new_sql, changed)``.
    Raises:
        DerivedDBError: the statement has no column list, or removing leaves no column.
    Source: ABISS §3.2 (missing schema); SQLite "CREATE TABLE" syntax.
    """
    toks, open_i, close_i, items = _items(sql)
    own = table.lower() == removal.table.lower() and removal.column is not None
    col = (removal.column or "").lower()
    # each item as (lead, core, trail): the layout before it, its tokens' text, and the comment on the line of
    # its comma (which describes it, so it goes where the item goes)
    leads = [sql[toks[a - 1].end + 1:toks[a].start] for a, _ in items]
    tail = sql[toks[items[-1][1]].end + 1:toks[close_i].start] if items else ""
    following = leads[1:] + [tail]
    trails = []
    for k, nxt in enumerate(following):
        trail, rest = _split_line_comment(nxt)
        trails.append(trail)
        if k + 1 < len(leads):
            leads[k + 1] = rest
        else:
            tail = rest
    keep: list[tuple[str, str, str]] = []
    changed = False
    n_columns = 0
    for k, (a, b) in enumerate(items):
        first = toks[a].token_type.name
        core = sql[toks[a].start:toks[b].end + 1]
        if first in _CONSTRAINT_STARTS:
            names = {t.text.lower() for t in toks[a:b + 1]}
            ref = _references(toks, a, b)
            local_hit = own and col in names and (ref is None or col in {t.text.lower() for t in toks[a:ref[0]]})
            ref_hit = ref is not None and _names_removed(table, ref[1], ref[2], removal)
            if local_hit or ref_hit:
                changed = True
                continue
            keep.append((leads[k], core, trails[k]))
            continue
        # a column definition
        if own and toks[a].text.lower() == col:
            changed = True
            continue
        n_columns += 1
        ref = _references(toks, a, b)
        if ref is not None and _names_removed(table, ref[1], ref[2], removal):
            j = ref[0]
            # drop "[CONSTRAINT name] REFERENCES t (cols) [ON ... | MATCH ... | DEFERRABLE ...]" to the item's end
            if j >= 2 and toks[j - 2].token_type.name == "CONSTRAINT":
                j -= 2
            core = sql[toks[a].start:toks[j - 1].end + 1]
            changed = True
        keep.append((leads[k], core, trails[k]))
    if n_columns == 0:
        raise DerivedDBError(f"removing {removal.describe()} leaves table {table!r} without a column")
    if not changed:
        return sql, False
    body = "".join(lead + core + ("," if i < len(keep) - 1 else "") + trail
                   for i, (lead, core, trail) in enumerate(keep))
    new = sql[:toks[open_i].end + 1] + body + tail + sql[toks[close_i].start:]
    return new, changed


def _split_line_comment(text: str) -> tuple[str, str]:
    """``(comment, rest)``: the first line of ``text`` when it holds only a comment (``--`` or ``/* */``), that is
    the comment after an item's comma, and what follows it (from its newline on); else ``("", text)``."""
    head, nl, rest = text.partition("\n")
    h = head.strip()
    if nl and (h.startswith("--") or (h.startswith("/*") and h.endswith("*/"))):
        return head, nl + rest
    return "", text


def column_comments(sql: str) -> dict[str, str]:
    """The comment written on each column's line in a ``CREATE TABLE`` statement (``-- city of the family
    home``), comment marks and spaces stripped: lower-cased column name -> text; columns without one are absent.

    Args:
        sql: a ``CREATE TABLE`` statement.
    Raises:
        DerivedDBError: the statement has no column list.
    """
    toks, open_i, close_i, items = _items(sql)
    leads = [sql[toks[a - 1].end + 1:toks[a].start] for a, _ in items]
    tail = sql[toks[items[-1][1]].end + 1:toks[close_i].start] if items else ""
    out = {}
    for (a, _), nxt in zip(items, leads[1:] + [tail]):
        if toks[a].token_type.name in _CONSTRAINT_STARTS:
            continue
        trail, _ = _split_line_comment(nxt)
        text = trail.strip()
        text = text[2:] if text.startswith("--") else text[2:-2] if text.startswith("/*") else ""
        if text.strip():
            out[toks[a].text.lower()] = " ".join(text.split())
    return out


# ----------------------------------------------------------------------------------------- building
def _mentions(sql: str, names: set[str]) -> bool:
    """Whether the statement's tokens include any of ``names`` (lower-cased) as a word."""
    try:
        return any(t.text.lower() in names for t in _tokens(sql))
    except Exception:  # noqa: BLE001 - sqlglot's tokenizer on odd SQL: treat it as naming it (drop it)
        return True


def _rebuild_table(con: sqlite3.Connection, table: str, new_sql: str) -> None:
    """Re-create ``table`` from ``new_sql`` keeping the rows of the columns both versions have, and its indexes
    and triggers whose columns are still there (foreign keys are off)."""
    old_cols = table_columns(con, table)
    extras = [(n, s) for n, s in con.execute(
        "SELECT name, sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') AND sql IS NOT NULL",
        (table,))]
    tmp = f"__textsql_rebuild_{uuid.uuid4().hex[:8]}"
    con.execute(f"CREATE TEMP TABLE {_q(tmp)} AS SELECT * FROM main.{_q(table)}")
    con.execute(f"DROP TABLE main.{_q(table)}")
    con.execute(new_sql)
    new_cols = table_columns(con, table)
    both = [c for c in old_cols if c.lower() in {n.lower() for n in new_cols}]
    cols = ", ".join(_q(c) for c in both)
    con.execute(f"INSERT INTO main.{_q(table)} ({cols}) SELECT {cols} FROM temp.{_q(tmp)}")
    con.execute(f"DROP TABLE temp.{_q(tmp)}")
    for _, s in extras:
        try:
            con.execute(s)
        except sqlite3.Error:  # it named what was removed: it goes with it
            pass


def table_order(con: sqlite3.Connection) -> list[str]:
    """The user tables of an open database in creation order (``sqlite_master`` rowid order), as spelled."""
    return [n for (n,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]


def _restore_table_order(con: sqlite3.Connection, wanted: list[str]) -> None:
    """Put the tables back in the source's creation order ``wanted`` (names as spelled).

    A rebuilt table is created anew, so it would be listed last (``sqlite_master`` order, which a schema
    listing in creation order follows), a hint of what was removed. Every table from the first one out of
    place on is rebuilt from its own text, in ``wanted`` order, so the order ends as in the source.
    Source: ``docs/generation.md`` "Quality: a fresh reader's ratings" (the moved table tells what was removed).
    """
    now = table_order(con)
    wanted = [n for n in wanted if n in now]
    first = next((i for i, (a, b) in enumerate(zip(now, wanted)) if a != b), None)
    if first is None:
        return
    for name in wanted[first:]:
        row = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
        _rebuild_table(con, name, row[0])
    if table_order(con) != wanted:
        raise DerivedDBError(f"the tables could not be put back in the source's order: {table_order(con)}")


def _drop_dependents(con: sqlite3.Connection, removal: Removal) -> list[str]:
    """Drop the views, triggers and indexes that name the removed element; returns their names."""
    dropped = []
    table_l = removal.table.lower()
    names = {table_l} if removal.column is None else {removal.column.lower()}
    rows = list(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "WHERE type IN ('view', 'trigger', 'index') AND sql IS NOT NULL"))
    for kind, name, tbl, sql in rows:
        if kind == "index":
            if tbl.lower() != table_l:
                continue
            if removal.column is not None:
                idx_cols = {r[2].lower() for r in con.execute(f"PRAGMA index_info({_q(name)})") if r[2]}
                if removal.column.lower() not in idx_cols and not _mentions(sql, names):
                    continue
        elif kind == "trigger":
            if not (tbl.lower() == table_l and removal.column is None) and not _mentions(sql, names):
                continue
        else:  # view
            hit = _mentions(sql, names) if removal.column is None else \
                (_mentions(sql, names) and _mentions(sql, {table_l}))
            if not hit:
                continue
        con.execute(f"DROP {kind.upper()} IF EXISTS {_q(name)}")
        dropped.append(f"{kind} {name}")
    return dropped


def build_derived(source: str | os.PathLike, removal: Removal, work_dir: str | os.PathLike, db_id: str) -> Path:
    """The derived database of ``source`` without ``removal``, built once under ``work_dir`` (module doc).

    Args:
        source: the source SQLite file (opened read-only; never written).
        removal: the column or table to remove (names as the source spells them, any case).
        work_dir: folder for derived files (created if absent).
        db_id: the source database's name (the file is :func:`derived_name`).
    Returns:
        The path of the derived file (an existing one is reused as it is).
    Raises:
        DerivedDBError: the element is not in the source, removing it leaves nothing, or SQLite refuses a step
            (the message names the source and the element); no partial file is left behind.
    Source: ABISS §3.2 (missing schema; ours: atomic build, source unchanged); SQLite "ALTER TABLE" docs.
    """
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    dest = work / derived_name(db_id, removal)
    if dest.is_file():
        return dest
    tmp = work / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        src = sqlite3.connect(ro_uri(source), uri=True)
        try:
            dst = sqlite3.connect(str(tmp), isolation_level=None)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
        con = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            _remove(con, removal)
            problems = [r[0] for r in con.execute("PRAGMA integrity_check")]
            if problems != ["ok"]:
                raise DerivedDBError(f"integrity check failed: {problems[:3]}")
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("VACUUM")
        finally:
            con.close()
        os.replace(tmp, dest)
    except DerivedDBError as e:
        raise DerivedDBError(f"cannot derive {source} without {removal.describe()}: {e}") from None
    except sqlite3.Error as e:
        raise DerivedDBError(f"cannot derive {source} without {removal.describe()}: SQLite: {e}") from e
    finally:
        for p in (tmp, Path(str(tmp) + "-journal"), Path(str(tmp) + "-wal"), Path(str(tmp) + "-shm")):
            if p.exists():
                p.unlink()
    return dest


def _remove(con: sqlite3.Connection, removal: Removal) -> None:
    """Remove ``removal`` from the open copy (module doc, steps 2-3)."""
    con.execute("PRAGMA foreign_keys=OFF")
    order = list(con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"))
    tables = {n.lower(): (n, s) for n, s in order}
    key = removal.table.lower()
    if key not in tables:
        raise DerivedDBError(f"no table {removal.table!r}")
    table = tables[key][0]
    if removal.column is not None:
        cols = {c.lower(): c for c in table_columns(con, table)}
        if removal.column.lower() not in cols:
            raise DerivedDBError(f"no column {removal.column!r} in table {table!r}")
        if len(cols) == 1:
            raise DerivedDBError(f"{removal.column!r} is the only column of {table!r}")
    elif len(tables) == 1:
        raise DerivedDBError(f"{table!r} is the database's only table")
    con.execute("BEGIN")
    try:
        _drop_dependents(con, removal)
        if removal.column is None:
            con.execute(f"DROP TABLE {_q(table)}")
        else:
            try:
                con.execute(f"ALTER TABLE {_q(table)} DROP COLUMN {_q(removal.column)}")
            except sqlite3.OperationalError:  # a key, unique or indexed column: rebuild without it
                new_sql, _ = drop_element_from_create(tables[key][1], table, removal)
                _rebuild_table(con, table, new_sql)
        # foreign keys elsewhere that point at the removed element
        for low, (name, _) in sorted(tables.items()):
            if low == key and removal.column is None:
                continue
            row = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
            if row is None or row[0] is None:
                continue
            new_sql, changed = drop_element_from_create(row[0], name, Removal(removal.table, removal.column)) \
                if low != key else (row[0], False)
            if low != key and changed:
                _rebuild_table(con, name, new_sql)
        _restore_table_order(con, [n for n, _ in order if n.lower() != key or removal.column is not None])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    left = {n.lower() for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if removal.column is None and key in left:
        raise DerivedDBError(f"table {table!r} still present")
    if removal.column is not None and removal.column.lower() in {c.lower() for c in table_columns(con, table)}:
        raise DerivedDBError(f"column {removal.describe()} still present")
