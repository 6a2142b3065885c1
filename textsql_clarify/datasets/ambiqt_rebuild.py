"""Rebuild the databases AmbiQT's items assume, from the Spider originals (AmbiQT is released without them).

AmbiQT (Bhaskar et al., 2023; ``testzer0/AmbiQT``, ``benchmark/<kind>/generate.py``) makes a question
ambiguous by changing the *schema* it is asked over, and records the changed schema only as text in
each item's ``schema_with_content`` (``table : col (v1, v2, v3), ... | table2 : ...``). Its evaluation
compares SQL text, so the changed databases were never built. This module builds them, one SQLite file
per (Spider database, target schema), from a read-only copy of the Spider original:

* **tbl-split** (``split_map = {T: c}``, ``primary_key = {T: pk}``): a new table ``T_c(pk, c)``
  holding, for every row of ``T``, its key and its ``c``; ``T`` keeps ``c`` too (AmbiQT's schema lists
  it in both), so the question's ``c`` can be read from ``T`` or through the join on ``pk``. A foreign
  key ``T_c.pk -> T.pk`` records the join key.
* **tbl-agg** (``new_table_name``, ``all_cols``, ``all_raw_cols``): a table of precomputed aggregates
  over ``query1``'s ``FROM``/``JOIN`` clause. A column ``sum_x`` / ``avg_x`` / ``min_x`` / ``max_x`` /
  ``count_x`` is that aggregate of the source column ``x``; ``number`` is ``COUNT(*)``; every other
  column is a grouping key. The aggregates are computed from the rows themselves (no value is made up),
  so a summary row equals the aggregate over its group. AmbiQT's generator drops a ``WHERE`` / ``GROUP
  BY`` column written without a table alias from the table's schema, and never lists ``count_x``
  (``all_cols`` takes only ``sum/avg/min/max``), although ``query2`` uses them; the rebuild adds every
  column ``query2`` needs on the table (as a grouping key or an aggregate) and records each addition
  (:attr:`BuildPlan.added`).
* **col-synonyms** (``extra_map = {T: {c: [a1, a2]}}``): ``T.c`` becomes two columns ``a1`` and ``a2``
  with the same values. **tbl-synonyms** (``extra_table_map = {T: [a1, a2]}``): ``T`` becomes two
  tables ``a1`` and ``a2`` with the same rows. (These two kinds are not in ``../shared/data``; they are
  built from the generator's fields and tested on a small database.)
* A Spider table that the item's schema does not name is dropped (e.g. ``wta_1.qualifying_matches``,
  which the InterCode SQLite dump has and Spider's ``tables.json`` lacks), so the rebuilt schema is the
  item's.

The plan of one target (:func:`plan_rebuild`) is a list of SQL statements; its SHA-256 (with the
source file's SHA-256 and :data:`BUILD_VERSION`) names the cached file ``<cache>/ambiqt/<hash>.sqlite``,
so the same target is built once (:func:`build_database`: backup of the read-only source into a
temporary file, the statements, a schema check, then a rename). The source is opened with
``mode=ro`` and never written.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ..sql.uri import ro_uri

__all__ = ["BUILD_VERSION", "AGG_PREFIXES", "SchemaTable", "BuildPlan", "RebuildError", "parse_schema_text",
           "read_schema", "plan_rebuild", "build_database", "file_sha256", "rebuilt_schema"]

#: Bump when the construction changes: it is part of every cache key, so old files are not reused.
BUILD_VERSION = 1
#: Aggregate column prefixes of AmbiQT tbl-agg (``generate.py``: ``sum_``, ``avg_``, ``min_``, ``max_``;
#: ``count_`` appears in its ``query2`` only) and the SQL function each names.
AGG_PREFIXES = {"sum": "SUM", "avg": "AVG", "min": "MIN", "max": "MAX", "count": "COUNT"}
_AGG_ORDER = tuple(AGG_PREFIXES)
_DIALECT = "sqlite"
_IDENT = re.compile(r"\w+")


class RebuildError(ValueError):
    """An item whose schema no AmbiQT construction explains; ``field`` names the item field at fault."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class SchemaTable:
    """One table of a Spider database as SQLite declares it.

    Attributes:
        name: the table name as stored (original case).
        columns: ``(name, declared type)`` pairs, in column order, names as stored.
    """

    name: str
    columns: tuple[tuple[str, str], ...]

    def norm_columns(self) -> dict[str, str]:
        """Lower-cased column name with any ``(...)`` part removed (how AmbiQT's schema text shows it,
        e.g. ``Official_ratings_(millions)`` -> ``official_ratings_``) -> the stored name."""
        return {_norm_col(c): c for c, _t in self.columns}

    def col_type(self, stored: str) -> str:
        """Declared type of the stored column ``stored`` (``""`` when none)."""
        return next((t for c, t in self.columns if c == stored), "")


@dataclass(frozen=True)
class BuildPlan:
    """How to derive one target database from its Spider original.

    Attributes:
        db_id: the Spider database.
        statements: SQL run, in order, on a copy of the original.
        tables: the target schema: lower-cased table -> lower-cased column names (for the check after the
            build); columns of kept Spider tables in their normalised form (:meth:`SchemaTable.norm_columns`).
        added: ``"table.column"`` columns built beyond the item's schema because ``query2`` needs them.
        constructions: new or changed table -> what it is (``"split of singer on singer_id"``, ...).
        dropped: Spider tables left out because the item's schema does not name them.
    """

    db_id: str
    statements: tuple[str, ...]
    tables: Mapping[str, tuple[str, ...]]
    added: tuple[str, ...] = ()
    constructions: Mapping[str, str] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()

    def key(self, source_sha256: str) -> str:
        """The cache key: SHA-256 of the build version, database, source file hash and statements."""
        payload = json.dumps({"v": BUILD_VERSION, "db_id": self.db_id, "source": source_sha256,
                              "statements": list(self.statements)}, sort_keys=True)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _norm_col(name: str) -> str:
    return re.sub(r"\([^)]*\)", "", name).strip().lower()


def _q(name: str) -> str:
    """A quoted SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def parse_schema_text(text: str) -> list[tuple[str, list[str]]]:
    """Parse AmbiQT's ``schema_with_content`` (or ``schema_without_content``) text.

    The text is ``table : col (v1, v2), col2 (v3) | table2 : ...``; values in parentheses are skipped,
    double-quoted strings inside them may hold ``(``, ``)``, ``,`` or ``|`` (``schema_without_content``,
    which AmbiQT cut at the first ``)``, is broken by such values in 233 of the 815 items, so the
    loader parses ``schema_with_content``).

    Args:
        text: the schema string.
    Returns:
        ``[(table, [column, ...]), ...]`` in text order, names lower-cased.
    Raises:
        ValueError: unbalanced parentheses, a part without ``table : columns``, a name that is not a
            plain identifier, or a table named twice.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("is empty")
    out: list[str] = []
    depth, inq = 0, False
    for c in text:
        if depth:
            if inq:
                inq = c != '"'
            elif c == '"':
                inq = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            continue
        if c == "(":
            depth, inq = 1, False
            continue
        out.append(c)
    if depth:
        raise ValueError("has an unclosed '(' in its values")
    tables: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    for part in "".join(out).split("|"):
        name, sep, cols = part.partition(":")
        name = name.strip().lower()
        if not sep or not name:
            raise ValueError(f"part {part.strip()!r} is not 'table : columns'")
        columns = [c.strip().lower() for c in cols.split(",") if c.strip()]
        for n in [name, *columns]:
            if not _IDENT.fullmatch(n):
                raise ValueError(f"name {n!r} in table {name!r} is not a plain identifier")
        if name in seen:
            raise ValueError(f"table {name!r} appears twice")
        seen.add(name)
        tables.append((name, columns))
    return tables


def _ro_uri(path: str | os.PathLike) -> str:
    return ro_uri(path)  # mode=ro, and immutable=1 for a WAL file (no -wal/-shm beside it)


def read_schema(db_path: str | os.PathLike) -> dict[str, SchemaTable]:
    """The tables of a SQLite file, opened read-only.

    Args:
        db_path: the database file.
    Returns:
        lower-cased table name -> :class:`SchemaTable` (SQLite's own ``sqlite_sequence`` included: Spider's
        ``world_1`` schema names it).
    Raises:
        sqlite3.Error: the file cannot be opened or read.
    """
    con = sqlite3.connect(_ro_uri(db_path), uri=True)
    try:
        out: dict[str, SchemaTable] = {}
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        for t in names:
            cols = tuple((r[1], r[2] or "") for r in con.execute(f"PRAGMA table_info({_q(t)})"))
            out[t.lower()] = SchemaTable(t, cols)
        return out
    finally:
        con.close()


def rebuilt_schema(db_path: str | os.PathLike) -> dict[str, tuple[str, ...]]:
    """Lower-cased table -> normalised column names of a (rebuilt) database (read-only)."""
    return {t: tuple(_norm_col(c) for c, _ in st.columns) for t, st in read_schema(db_path).items()}


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- constructions -------------------------------------------------------------------------------------
def _split_statements(orig: SchemaTable, new: str, pk: str, col: str) -> list[str]:
    cols = orig.norm_columns()
    spk, scol = cols[pk], cols[col]
    return [
        f"CREATE TABLE {_q(new)} ({_q(pk)} {orig.col_type(spk)}, {_q(col)} {orig.col_type(scol)}, "
        f"FOREIGN KEY ({_q(pk)}) REFERENCES {_q(orig.name)} ({_q(spk)}))",
        f"INSERT INTO {_q(new)} ({_q(pk)}, {_q(col)}) SELECT {_q(spk)}, {_q(scol)} FROM {_q(orig.name)}",
    ]


def _parse_select(sql: str, what: str) -> exp.Select:
    try:
        tree = sqlglot.parse_one(sql, read=_DIALECT)
    except SqlglotError as e:
        raise RebuildError(what, f"does not parse: {str(e).splitlines()[0]}") from None
    if not isinstance(tree, exp.Select):
        raise RebuildError(what, f"is not a single SELECT ({type(tree).__name__})")
    return tree


def _agg_source(q1: str, original: Mapping[str, SchemaTable]) -> tuple[exp.Select, list[tuple[str, str]], dict[str, str]]:
    """query1's FROM/JOIN clause: (the tree, [(alias or name, lower table)] in order, column -> alias)."""
    tree = _parse_select(q1, "query1")
    if tree.find(exp.Subquery) or list(tree.find_all(exp.Select))[1:]:
        raise RebuildError("query1", "has a nested SELECT; AmbiQT tbl-agg builds from flat queries only")
    sources: list[tuple[str, str]] = []
    for t in tree.find_all(exp.Table):
        name = t.name.lower()
        if name not in original:
            raise RebuildError("query1", f"names table {t.name!r}, which the Spider database lacks")
        sources.append((t.alias_or_name, name))
    if not sources:
        raise RebuildError("query1", "has no FROM table")
    by_alias = {a.lower(): n for a, n in sources}
    qualified: dict[str, str] = {}
    for c in tree.find_all(exp.Column):
        if c.table and c.table.lower() in by_alias:
            qualified.setdefault(c.name.lower(), next(a for a, n in sources if a.lower() == c.table.lower()))
    return tree, sources, qualified


def _resolve(raw: str, sources: Sequence[tuple[str, str]], qualified: Mapping[str, str],
             original: Mapping[str, SchemaTable]) -> exp.Column | None:
    """The source column ``raw`` as a qualified column of query1's FROM clause (None when no table has it).

    query1's own qualification wins (``t2.edispl``); else the first table in FROM/JOIN order that has the
    column, as AmbiQT's generator resolves it."""
    if raw in qualified:
        alias = qualified[raw]
        tbl = next(n for a, n in sources if a == alias)
        stored = original[tbl].norm_columns().get(raw)
        if stored is not None:
            return exp.column(stored, table=alias, quoted=True)
    for alias, tbl in sources:
        stored = original[tbl].norm_columns().get(raw)
        if stored is not None:
            return exp.column(stored, table=alias, quoted=True)
    return None


def _agg_column(name: str, sources, qualified, original) -> exp.Expression | None:
    """The expression a tbl-agg column name stands for, or None when it is a grouping key."""
    if name == "number":
        return exp.Count(this=exp.Star())
    prefix, _, raw = name.partition("_")
    if prefix in AGG_PREFIXES and raw:
        src = _resolve(raw, sources, qualified, original)
        if src is not None:
            return exp.func(AGG_PREFIXES[prefix], src)
    return None


def _agg_statements(new: str, schema_cols: Sequence[str], q1: str, q2: str,
                    original: Mapping[str, SchemaTable]) -> tuple[list[str], list[str], list[str], list[str]]:
    """(statements, grouping keys, aggregate columns, added columns) of a tbl-agg table."""
    tree, sources, qualified = _agg_source(q1, original)
    cols = list(dict.fromkeys(schema_cols))
    added: list[str] = []
    q2_tree = _parse_select(q2, "query2")
    q2_tables = {t.name.lower() for t in q2_tree.find_all(exp.Table)}
    if new in q2_tables:
        for c in q2_tree.find_all(exp.Column):
            n = c.name.lower()
            if n in cols or not _IDENT.fullmatch(n) or (c.table and c.table.lower() not in (new,)):
                continue
            if _agg_column(n, sources, qualified, original) is not None or \
                    _resolve(n, sources, qualified, original) is not None:
                cols.append(n)
                added.append(n)
    keys: list[tuple[str, exp.Expression]] = []
    aggs: list[tuple[tuple, str, exp.Expression]] = []
    for n in cols:
        e = _agg_column(n, sources, qualified, original)
        if e is not None:
            prefix, _, raw = n.partition("_")
            order = (raw, _AGG_ORDER.index(prefix)) if n != "number" else ("", -1)
            aggs.append((order, n, e))
            continue
        src = _resolve(n, sources, qualified, original)
        if src is None:
            raise RebuildError("schema_with_content", f"column {n!r} of aggregate table {new!r} is neither an "
                                                      f"aggregate of a source column nor a column of query1's tables")
        keys.append((n, src))
    if not aggs:
        raise RebuildError("schema_with_content", f"aggregate table {new!r} has no aggregate column")
    keys.sort(key=lambda kv: kv[0])
    aggs.sort(key=lambda t: t[0])
    select = exp.select(*[exp.alias_(e, n, quoted=True) for n, e in keys],
                        *[exp.alias_(e, n, quoted=True) for _o, n, e in aggs])
    from_key = "from_" if "from_" in tree.args else "from"  # sqlglot >= 28 names it from_
    select.set(from_key, tree.args[from_key].copy())
    if tree.args.get("joins"):
        select.set("joins", [j.copy() for j in tree.args["joins"]])
    if keys:
        select = select.group_by(*[e.copy() for _n, e in keys])
    stmt = f"CREATE TABLE {_q(new)} AS {select.sql(dialect=_DIALECT)}"
    return [stmt], [n for n, _ in keys], [n for _o, n, _e in aggs], added


def _copy_table_statements(orig: SchemaTable, new: str, rename: Mapping[str, str] | None = None) -> list[str]:
    defs = ", ".join(f"{_q((rename or {}).get(c, c))} {t}".rstrip() for c, t in orig.columns)
    names = ", ".join(_q((rename or {}).get(c, c)) for c, _ in orig.columns)
    return [f"CREATE TABLE {_q(new)} ({defs})",
            f"INSERT INTO {_q(new)} ({names}) SELECT {', '.join(_q(c) for c, _ in orig.columns)} FROM {_q(orig.name)}"]


def _lower_map(m: Any) -> dict:
    return {str(k).lower(): v for k, v in m.items()} if isinstance(m, dict) else {}


def plan_rebuild(item: Mapping[str, Any], schema: Sequence[tuple[str, Sequence[str]]],
                 original: Mapping[str, SchemaTable], db_id: str) -> BuildPlan:
    """The construction of one item's target database (see the module docstring).

    Args:
        item: the AmbiQT record (``query1``, ``query2``, and the kind's fields: ``split_map`` /
            ``primary_key``, ``new_table_name``, ``extra_map``, ``extra_table_map``).
        schema: the item's schema, :func:`parse_schema_text` of its ``schema_with_content``.
        original: :func:`read_schema` of the Spider database.
        db_id: the database name.
    Returns:
        The :class:`BuildPlan`; deterministic in the target schema (column order of the schema text,
        which AmbiQT shuffles, does not change it).
    Raises:
        RebuildError: a table or column of ``schema`` that no construction explains, naming the field.
    """
    target = {t: list(cs) for t, cs in schema}
    stmts: list[str] = []
    built: dict[str, tuple[str, ...]] = {}
    constructions: dict[str, str] = {}
    added: list[str] = []
    consumed: set[str] = set()  # Spider tables replaced by synonyms
    split_map = _lower_map(item.get("split_map"))
    pkeys = _lower_map(item.get("primary_key"))
    col_syn = _lower_map(item.get("extra_map"))
    tbl_syn = _lower_map(item.get("extra_table_map"))
    new_name = item.get("new_table_name")
    new_name = new_name.lower() if isinstance(new_name, str) else None

    # column synonyms: T.c -> a1, a2 (rebuild T with both)
    for t, cmap in col_syn.items():
        if t not in original or not isinstance(cmap, dict):
            raise RebuildError("extra_map", f"names table {t!r}, which the Spider database {db_id!r} lacks")
        orig = original[t]
        norm = orig.norm_columns()
        rename: dict[str, str] = {}
        extra: list[tuple[str, str]] = []
        for c, alts in cmap.items():
            c = str(c).lower()
            if c not in norm or not (isinstance(alts, list) and len(alts) == 2 and all(isinstance(a, str) for a in alts)):
                raise RebuildError("extra_map", f"{t}.{c}: expected a column of {t!r} and two synonyms")
            rename[norm[c]] = alts[0].lower()
            extra.append((alts[1].lower(), alts[0].lower()))
        tmp = f"{t}__ambiqt_old"
        stmts.append(f"ALTER TABLE {_q(orig.name)} RENAME TO {_q(tmp)}")
        renamed = SchemaTable(tmp, orig.columns)
        stmts += _copy_table_statements(renamed, t, rename)
        for a2, a1 in extra:
            typ = orig.col_type(next(k for k, v in rename.items() if v == a1))
            stmts.append(f"ALTER TABLE {_q(t)} ADD COLUMN {_q(a2)} {typ}".rstrip())
            stmts.append(f"UPDATE {_q(t)} SET {_q(a2)} = {_q(a1)}")
        stmts.append(f"DROP TABLE {_q(tmp)}")
        constructions[t] = "column synonyms: " + ", ".join(f"{c} -> {a[0]}, {a[1]}" for c, a in cmap.items())
        built[t] = tuple(rename.get(c, _norm_col(c)) for c, _ in orig.columns) + tuple(a2 for a2, _ in extra)

    # table synonyms: T -> a1, a2
    tbl_alias: dict[str, str] = {}
    for t, alts in tbl_syn.items():
        if t not in original or not (isinstance(alts, list) and len(alts) == 2 and all(isinstance(a, str) for a in alts)):
            raise RebuildError("extra_table_map", f"{t!r}: expected a Spider table and two synonyms")
        for a in alts:
            tbl_alias[a.lower()] = t
        consumed.add(t)

    for t, cols in schema:
        if t in built:
            continue
        if t.startswith("sqlite_") and t not in original:
            # SQLite's own table (Spider's world_1 schema lists sqlite_sequence; the InterCode dump has none):
            # it cannot be created by hand and no query reads it
            continue
        if t in original and t not in consumed:
            have = set(original[t].norm_columns())
            if set(cols) != have:
                raise RebuildError("schema_with_content", f"table {t!r} has columns {sorted(set(cols) - have)} that "
                                                          f"Spider's {db_id}.{t} lacks and lacks {sorted(have - set(cols))}")
            built[t] = tuple(original[t].norm_columns())
            continue
        if t in tbl_alias:
            src = original[tbl_alias[t]]
            stmts += _copy_table_statements(src, t)
            constructions[t] = f"synonym of {src.name}"
            built[t] = tuple(_norm_col(c) for c, _ in src.columns)
            continue
        split = next(((b, c) for b, c in split_map.items() if isinstance(c, str) and t == f"{b}_{c.lower()}"), None)
        if split is None and new_name is None:  # infer a split: T_c with (pk, c) columns of T
            split = next(((b, t[len(b) + 1:]) for b in sorted(original, key=len, reverse=True)
                          if t.startswith(b + "_") and t[len(b) + 1:] in cols and len(cols) == 2
                          and set(cols) <= set(original[b].norm_columns())), None)
        if split is not None:
            base, col = split[0], split[1].lower()
            if base not in original:
                raise RebuildError("split_map", f"names table {base!r}, which the Spider database {db_id!r} lacks")
            others = [c for c in cols if c != col]
            pk = pkeys.get(base)
            pk = pk.lower() if isinstance(pk, str) else (others[0] if len(others) == 1 else None)
            norm = original[base].norm_columns()
            if pk is None or col not in cols or set(cols) != {pk, col} or pk not in norm or col not in norm:
                raise RebuildError("schema_with_content", f"split table {t!r} should hold {base}'s key and {col!r}, "
                                                          f"has {cols}")
            stmts += _split_statements(original[base], t, pk, col)
            constructions[t] = f"split of {base}: ({pk}, {col}) joined on {pk}"
            built[t] = (pk, col)
            continue
        if new_name == t or any(c.partition("_")[0] in AGG_PREFIXES for c in cols):
            q1, q2 = item.get("query1"), item.get("query2")
            if not isinstance(q1, str) or not isinstance(q2, str):
                raise RebuildError("query1", "an aggregate table is built from query1 and query2, both strings")
            agg_stmts, keys, agg_cols, extra = _agg_statements(t, cols, q1, q2, original)
            stmts += agg_stmts
            constructions[t] = ("precomputed aggregates over query1's FROM clause, grouped by "
                                + (", ".join(keys) or "nothing (one row)"))
            added += [f"{t}.{c}" for c in extra]
            built[t] = tuple(keys + agg_cols)
            continue
        raise RebuildError("schema_with_content", f"table {t!r} is not in Spider's {db_id} and no AmbiQT construction "
                                                  f"(split, aggregate, synonym) explains it")
    gone = [t for t in original if t not in target and t not in built]
    keep_internal = [t for t in gone if t.startswith("sqlite_")]  # SQLite's own: cannot be dropped
    for t in keep_internal:
        built[t] = tuple(original[t].norm_columns())
    gone = [t for t in gone if t not in keep_internal]
    dropped = tuple(sorted(original[t].name for t in gone))
    for t in gone:
        stmts.append(f"DROP TABLE {_q(original[t].name)}")
    return BuildPlan(db_id=db_id, statements=tuple(stmts), tables=dict(built),
                     added=tuple(added), constructions=constructions, dropped=dropped)


def build_database(plan: BuildPlan, source: str | os.PathLike, cache_dir: str | os.PathLike, *,
                   source_sha256: str | None = None) -> tuple[Path, bool]:
    """The rebuilt database of ``plan``: reused from ``cache_dir`` when there, else built there.

    Builds into a temporary file in ``cache_dir`` (the read-only source copied with SQLite's backup API,
    then ``plan.statements`` in one transaction, then a check that the tables and columns are
    ``plan.tables``), and renames it to ``<key>.sqlite``; a failed build leaves no file behind.

    Args:
        plan: from :func:`plan_rebuild`.
        source: the Spider ``.sqlite`` file (opened ``mode=ro``, never written).
        cache_dir: the folder of rebuilt files (created if needed).
        source_sha256: the source's :func:`file_sha256`, if already known.
    Returns:
        ``(path, built)``: ``built`` is False when the file was already in the cache.
    Raises:
        RebuildError: a statement fails, or the result's schema is not the plan's (field
            ``schema_with_content``).
        OSError, sqlite3.Error: the source cannot be read or the cache folder written.
    """
    sha = source_sha256 or file_sha256(source)
    folder = Path(cache_dir)
    final = folder / f"{plan.key(sha)}.sqlite"
    if final.is_file():
        return final, False
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{final.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        src = sqlite3.connect(_ro_uri(source), uri=True)
        try:
            dst = sqlite3.connect(tmp)
            try:
                src.backup(dst)
                with dst:
                    for s in plan.statements:
                        try:
                            dst.execute(s)
                        except sqlite3.Error as e:
                            raise RebuildError("schema_with_content", f"rebuild statement failed ({e}): {s}") from None
            finally:
                dst.close()
        finally:
            src.close()
        got = rebuilt_schema(tmp)
        want = {t: tuple(cs) for t, cs in plan.tables.items()}
        if {t: set(c) for t, c in got.items()} != {t: set(c) for t, c in want.items()}:
            raise RebuildError("schema_with_content", f"rebuilt schema {got} is not the target {want}")
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
    return final, True
