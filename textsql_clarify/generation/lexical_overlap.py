"""The lexical-overlap recipe: a second reading that swaps a gold column for a look-alike one.

Source: ABISS §3.2 "lexical overlap" (two schema attributes share similar or identical forms: "emails" for
``students.personal_email`` or ``students.institutional_email``); PremiseSQL E1.1 (ambiguous expression: a
condition over existing columns admits several mappings) is the same root cause (``taxonomy.crosswalk``).

From one anchor the recipe lists **pairs** (:func:`overlap_pairs`): a column the gold reads by name and another
column that the same wording fits:

* same declared type affinity (SQLite "Datatypes" §3.1 rules), neither a primary key, a foreign key or a join key;
* either in the same table and sharing a word of their names (``home_city`` / ``residence_city``: *city*;
  ``first_name`` / ``last_name``: *name*) that is neither generic (:data:`GENERIC`) nor the table's own name,
  each name with a word of its own (not ``name`` / ``song_name``: the bare name fits better) that is not only a
  number (not ``line_1`` / ``line_2``); or the same name in another table of the same query scope (``T1.name`` /
  ``T2.name`` of two joined tables; the distinguishing words are then the words of one table's name only);
* the other column is not read by the gold too (the question would then cover both).

The shared words are the **shared part**, the others the **distinguishing words** (for a same-name pair, the
two tables' names). Pairs are tried in ``rng`` order, at most ``max_tries`` (``--option max_tries=N``, default
3), until one passes; one sample per anchor. The checks (:attr:`LexicalOverlapRecipe.stages`), in order:

1. ``pair_found``: the gold parses and has a pair.
2. ``question_fits_both``: the question names the shared part and no distinguishing word of either column
   (word stems; a shared prefix of 5 letters counts, so *enrol* names *enrollment*).
3. ``swap_executes``: the swapped gold (every reference to the column replaced by the other one in the sqlglot
   AST, qualifiers kept or moved to the other table's alias) and the anchor's gold both run.
4. ``swap_nonempty``: both return rows.
5. ``results_differ``: their results differ (as multisets of rows, values compared as SQLite returns them).

The sample is ambiguous (``lexical_overlap``); its gold is the anchor's, its hidden knowledge says in user words
which column is meant (the column's comment in the ``CREATE TABLE`` text where it has one: "I mean the city
where the student lives during term, not the city of the family home"), and its one interpretation is the swap,
with its own hidden knowledge and description.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from sqlglot import exp

from ..errors import TextSQLClarifyError
from ..samples import Interpretation, Sample
from ..sql.sandbox import SQLiteSandbox
from ..sql.uri import ro_uri
from ..text import plural_stem
from .base import Accepted, Anchor, GenContext, OptionSpec, Outcome, Rejected, read_option
from .derived_db import column_comments
from .gold_refs import SourceSchema, gold_refs, source_schema, words

__all__ = ["LexicalOverlapRecipe", "Pair", "overlap_pairs", "affinity", "question_fits", "swap_column", "TEMPLATES"]

#: words too generic to be the shared part of two names on their own.
GENERIC = frozenset({"id", "no", "num", "number", "code", "key", "type", "flag", "is", "of", "the", "in", "at", "to"})
#: letters of a common prefix that make two words the same mention (``enrol`` / ``enrollment``).
PREFIX = 5

#: hidden-knowledge templates: ``{a}`` the meant column in user words, ``{b}`` the other.
TEMPLATES = {
    "same_table": "I mean the {a}, not the {b}.",
    "other_table": "I mean the {a}, not the {b}.",
}


def affinity(declared: str) -> str:
    """SQLite's type affinity of a declared type (SQLite "Datatypes In SQLite" §3.1, in rule order):
    ``INTEGER`` | ``TEXT`` | ``BLOB`` | ``REAL`` | ``NUMERIC``."""
    t = (declared or "").upper()
    if "INT" in t:
        return "INTEGER"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not t or "BLOB" in t:
        return "BLOB"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def _stems(text: str) -> list[str]:
    """Lower-cased, plural-stemmed words of a name or a question (letters and digits only)."""
    return [plural_stem(w) for w in re.findall(r"[a-z0-9]+", words(text))]


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n >= PREFIX


@dataclass(frozen=True)
class Pair:
    """A gold column and its look-alike (lower-cased names).

    Attributes:
        column: ``(table, column)`` the gold reads.
        other: ``(table, column)`` the same wording fits.
        shared: the shared words (stems).
        distinguishing: the words that tell them apart (stems), both columns' together.
    """

    column: tuple[str, str]
    other: tuple[str, str]
    shared: tuple[str, ...]
    distinguishing: tuple[str, ...]

    def slug(self) -> str:
        """``<column>-<other column>`` for ids (table-qualified when the tables differ)."""
        if self.column[0] == self.other[0]:
            return f"{self.column[1]}-{self.other[1]}"
        return f"{self.column[0]}.{self.column[1]}-{self.other[0]}.{self.other[1]}"


def _keys(schema: SourceSchema, join_keys) -> set[tuple[str, str]]:
    out = set(join_keys)
    for t, info in schema.tables.items():
        out |= {(t, c) for c in info.pk | info.fk_columns}
    return out


def _scope_tables(tree: exp.Expression, schema: SourceSchema) -> list[set[str]]:
    from sqlglot.optimizer.scope import traverse_scope

    return [{s.name.lower() for s in scope.sources.values() if isinstance(s, exp.Table)}
            for scope in traverse_scope(tree)]


def overlap_pairs(sql: str, schema: SourceSchema) -> list[Pair]:
    """The gold's pairs (module doc), in a fixed order (sorted by column, then other).

    Args:
        sql: the gold SQL.
        schema: its database (:func:`~textsql_clarify.generation.gold_refs.source_schema`).
    Raises:
        textsql_clarify.errors.SQLParseError: the gold cannot be parsed or qualified.
    Source: ABISS §3.2 (lexical overlap).
    """
    refs = gold_refs(sql, schema)
    keys = _keys(schema, refs.join_keys)
    scopes = _scope_tables(refs.tree, schema)
    out: dict[tuple, Pair] = {}
    for t, c in sorted(refs.columns):
        if (t, c) in keys:
            continue
        info = schema.tables[t]
        aff = affinity(info.types[c])
        mine = _stems(info.columns[c])
        for t2 in sorted({t} | {x for sc in scopes if t in sc for x in sc}):
            info2 = schema.tables.get(t2)
            if info2 is None:
                continue
            for c2 in info2.columns:
                if (t2, c2) == (t, c) or (t2, c2) in keys or affinity(info2.types[c2]) != aff:
                    continue
                if (t2, c2) in refs.columns:
                    continue  # the gold reads both: the question already covers both
                theirs = _stems(info2.columns[c2])
                if t2 == t:
                    shared = [w for w in mine if w in theirs]
                    entity = set(_stems(info.name))
                    if not shared or all(w in GENERIC or w in entity for w in shared):
                        continue  # nothing shared but generic words or the table's own name
                    own, their_own = [w for w in mine if w not in shared], [w for w in theirs if w not in shared]
                    if not own or not their_own:
                        continue  # one name inside the other (name / song_name): the bare one fits better
                    if all(w.isdigit() for w in own) or all(w.isdigit() for w in their_own):
                        continue  # line_1 / line_2: an ordinal, which a question names as "first", "second"
                    dist = own + their_own
                else:
                    if mine != theirs or all(w in GENERIC for w in mine):
                        continue
                    shared = mine
                    ta, tb = _stems(info.name), _stems(info2.name)
                    dist = [w for w in ta if w not in tb] + [w for w in tb if w not in ta]
                if not dist:
                    continue
                out[(t, c, t2, c2)] = Pair((t, c), (t2, c2), tuple(dict.fromkeys(shared)), tuple(dict.fromkeys(dist)))
    return [out[k] for k in sorted(out)]


def question_fits(question: str, pair: Pair) -> str | None:
    """``None`` when the question names the pair's shared part and none of its distinguishing words (check
    ``question_fits_both``), else why not.

    Args:
        question: the anchor's question.
        pair: the pair.
    """
    q = _stems(question.replace("'", " "))
    named = [d for d in pair.distinguishing if any(_same_word(d, w) for w in q)]
    if named:
        return f"the question names the distinguishing word {named[0]!r}"
    if not any(any(_same_word(s, w) for w in q) for s in pair.shared if s not in GENERIC):
        return f"the question does not name the shared part {' '.join(pair.shared)!r}"
    return None


def swap_column(sql: str, pair: Pair, schema: SourceSchema) -> str:
    """``sql`` with every reference to ``pair.column`` replaced by ``pair.other`` (sqlglot AST edit: the column's
    identifier renamed, its qualifier kept for the same table or set to the other table's alias in its scope).

    Raises:
        textsql_clarify.errors.SQLParseError: the SQL cannot be parsed.
        ValueError: a reference's scope has no source for the other table, or the gold has no reference.
    Source: ABISS §3.2 (lexical overlap); sqlglot's ``traverse_scope`` docs (the swap by AST edit).
    """
    from sqlglot.optimizer.scope import traverse_scope

    from ..sql.schema import parse_sql

    tree = parse_sql(sql)
    (t, c), (t2, c2) = pair.column, pair.other
    spelled = schema.tables[t2].columns[c2]
    n = 0
    for scope in traverse_scope(tree):
        by_alias = {a.lower(): s.name.lower() for a, s in scope.sources.items() if isinstance(s, exp.Table)}
        for col in scope.columns:
            if col.name.lower() != c:
                continue
            if col.table:
                src = by_alias.get(col.table.lower())
            else:
                owners = {tt for tt in by_alias.values() if tt in schema.tables and c in schema.tables[tt].columns}
                src = owners.pop() if len(owners) == 1 else None
            if src != t:
                continue
            col.set("this", exp.to_identifier(spelled, quoted=bool(col.this.args.get("quoted"))))
            if t2 != t:
                alias = next((a for a, s in scope.sources.items() if isinstance(s, exp.Table) and s.name.lower() == t2),
                             None)
                if alias is None:
                    raise ValueError(f"no source for {t2} in the scope of {t}.{c}")
                col.set("table", exp.to_identifier(alias))
            n += 1
    if n == 0:
        raise ValueError(f"the SQL has no reference to {t}.{c}")
    return tree.sql(dialect="sqlite")


def _comments(db_path: str, table: str) -> dict[str, str]:
    import sqlite3

    con = sqlite3.connect(ro_uri(db_path), uri=True)
    try:
        row = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND lower(name) = ?", (table,)).fetchone()
    finally:
        con.close()
    try:
        return column_comments(row[0]) if row and row[0] else {}
    except TextSQLClarifyError:
        return {}


def _user_words(db_path: str, schema: SourceSchema, tc: tuple[str, str], other_table: bool) -> str:
    """The column in user words: its comment's first clause where the CREATE text has one (``city of the family
    home``), else its name in words, with its table's name when the pair spans two tables."""
    t, c = tc
    comment = _comments(db_path, t).get(c, "")
    text = comment.split(",")[0].split(";")[0].strip().rstrip(".")
    if not text or any(ch.isdigit() for ch in text) or text.upper() == text:
        text = words(schema.tables[t].columns[c])
    if other_table:
        text = f"{text} of the {words(schema.tables[t].name)}"
    return text


def _bag(rows) -> Counter:
    return Counter(repr(r) for r in rows)


class LexicalOverlapRecipe:
    """The lexical-overlap recipe (module doc): ``name = "lexical_overlap"``, model-free.

    Args:
        max_tries: most pairs tried per anchor (default 3; ``ctx.options["max_tries"]`` wins).
    """

    name = "lexical_overlap"
    stages = ("pair_found", "question_fits_both", "swap_executes", "swap_nonempty", "results_differ")
    needs_model = False
    #: ``--option`` names this recipe reads.
    options = {"max_tries": OptionSpec("int", "3", "most pairs tried per anchor", minimum=1)}

    def __init__(self, max_tries: int = 3) -> None:
        self.max_tries = max_tries

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """Try the anchor's pairs in ``rng`` order until one passes every check (module doc).

        Returns:
            The :class:`Rejected` outcomes of the pairs tried, then at most one :class:`Accepted`.
        Raises:
            ValueError: ``ctx.options["max_tries"]`` is not an integer >= 1 (:func:`~.base.read_option`).
        """
        tries = read_option(self, ctx.options, "max_tries", self.max_tries)
        try:
            schema = source_schema(anchor.db_path)
            pairs = overlap_pairs(anchor.gold_sql, schema)
        except (TextSQLClarifyError, OSError) as e:
            return [Rejected("pair_found", f"the gold cannot be analysed: {str(e)[:160]}")]
        if not pairs:
            return [Rejected("pair_found", "no column of the gold has a look-alike of the same type")]
        rng.shuffle(pairs)
        out: list[Outcome] = []
        gold_res = None
        for pair in pairs[:tries]:
            res, gold_res = self._try(anchor, pair, schema, ctx, gold_res)
            out.append(res)
            if isinstance(res, Accepted):
                break
        return out

    def _try(self, anchor: Anchor, pair: Pair, schema: SourceSchema, ctx: GenContext, gold_res):
        desc = f"{pair.column[0]}.{pair.column[1]} / {pair.other[0]}.{pair.other[1]}"
        verdicts = {"pair_found": desc}
        why = question_fits(anchor.question, pair)
        if why is not None:
            return Rejected("question_fits_both", why), gold_res
        verdicts["question_fits_both"] = "pass"
        try:
            swapped = swap_column(anchor.gold_sql, pair, schema)
        except (TextSQLClarifyError, ValueError) as e:
            return Rejected("swap_executes", f"the swap cannot be written: {str(e)[:120]}"), gold_res
        with SQLiteSandbox(anchor.db_path, timeout_s=ctx.timeout_s) as sb:
            if gold_res is None:
                gold_res = sb.execute(anchor.gold_sql)
            swap_res = sb.execute(swapped)
        for what, r in (("the anchor's gold", gold_res), ("the swapped gold", swap_res)):
            if not r.ok:
                return Rejected("swap_executes", f"{what} fails: {r.error_kind}: {(r.error_message or '')[:80]}"), \
                    gold_res
        verdicts["swap_executes"] = "pass"
        for what, r in (("the anchor's gold", gold_res), ("the swapped gold", swap_res)):
            if not r.rows:
                return Rejected("swap_nonempty", f"{what} returns no rows"), gold_res
        verdicts["swap_nonempty"] = f"{gold_res.row_count} / {swap_res.row_count} rows"
        if _bag(gold_res.rows) == _bag(swap_res.rows) and not (gold_res.truncated or swap_res.truncated):
            return Rejected("results_differ", "the swapped gold returns the anchor's rows"), gold_res
        if gold_res.truncated and swap_res.truncated and _bag(gold_res.rows) == _bag(swap_res.rows):
            return Rejected("results_differ", "both results are truncated and their first rows agree"), gold_res
        verdicts["results_differ"] = "pass"
        cross = pair.column[0] != pair.other[0]
        a = _user_words(anchor.db_path, schema, pair.column, cross)
        b = _user_words(anchor.db_path, schema, pair.other, cross)
        if a == b:  # two columns with one comment: fall back to the names
            a, b = words(schema.tables[pair.column[0]].columns[pair.column[1]]), \
                words(schema.tables[pair.other[0]].columns[pair.other[1]])
        tpl = TEMPLATES["other_table" if cross else "same_table"]
        t1, c1 = pair.column
        t2, c2 = pair.other
        sample = Sample(
            id=f"{self.name}-{anchor.id}-{pair.slug()}", db_id=anchor.db_id, db_path=anchor.db_path,
            question=anchor.question, group="ambiguous", subcategory="lexical_overlap",
            gold_sql=anchor.gold_sql, hidden_knowledge=tpl.format(a=a, b=b), evidence=tuple(anchor.evidence),
            difficulty=anchor.difficulty,
            interpretations=(Interpretation(swapped, tpl.format(a=b, b=a),
                                            f"{schema.tables[t2].name}.{schema.tables[t2].columns[c2]} in place of "
                                            f"{schema.tables[t1].name}.{schema.tables[t1].columns[c1]}"),),
            provenance={"columns": [f"{schema.tables[t1].name}.{schema.tables[t1].columns[c1]}",
                                    f"{schema.tables[t2].name}.{schema.tables[t2].columns[c2]}"],
                        "shared": list(pair.shared), "distinguishing": list(pair.distinguishing)},
        )
        return Accepted(sample, verdicts), gold_res
