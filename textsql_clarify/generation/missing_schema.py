"""The missing-schema recipe: the question stays, what its gold needs is removed from the database.

Sources: ABISS §3.2 "missing entities or attributes" (no table or column for what is asked) and "missing
relationship" (both entities exist, nothing links them); PremiseSQL §3 E3.2 "missing schema premise", built
by schema perturbation with the unmodified original kept as its paired answerable sample (§A.3).

From one anchor the recipe lists the gold's **eligible elements** (:func:`eligible_elements`):

* a non-key column the gold reads by name (not a primary key, not in a foreign key, not a join key):
  ``missing_entities_or_attributes``;
* a join key (the referencing side where a foreign key says which, else either side that is not the
  primary key): ``missing_relationship``;
* a table the gold reads: ``missing_relationship`` when it only links the others (every column the gold
  reads there is a join key, joined to two other tables), else ``missing_entities_or_attributes``.

It shuffles them with the anchor's ``rng`` and tries them in that order, at most ``max_tries``
(``--option max_tries=N``, default 3), until one passes every check; one sample per anchor. The checks
(:attr:`MissingSchemaRecipe.stages`), in order:

1. ``element_chosen``: the gold parses, qualifies and has an eligible element.
2. ``derived_built``: :func:`textsql_clarify.generation.derived_db.build_derived` made the derived database.
3. ``gold_fails_on_derived``: the gold SQL errors there (not a timeout: an error).
4. ``no_substitute``: nothing in the derived schema can stand in (:func:`substitute`).
5. ``original_nonempty``: the gold returns rows on the source database.
6. ``hidden_knowledge_judged``: the project's offline FB judge accepts the hidden knowledge as the oracle's
   feedback, the templates' fixed words stripped (the first template of the element's role that it accepts,
   :func:`judged_hidden_knowledge`); the pipeline's ``oracle_fb`` check then judges the written file under the
   stock phrases of the whole file, as the env does (:mod:`~textsql_clarify.generation.oracle_fb`).

The sample is unanswerable, its premise flaw ``missing_schema_premise`` (E3.2), its database the derived
file (``db_path`` relative to the output folder: ``<work_dir name>/<file>``), and its hidden knowledge names
what is missing in plain words. ``paired`` is the original, answerable, on the source database.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import random
from dataclasses import dataclass
from typing import Sequence

from ..errors import TextSQLClarifyError
from ..samples import Sample
from ..sql.sandbox import ExecutionResult, SQLiteSandbox
from ..text import plural_stem
from .base import Accepted, Anchor, GenContext, OptionSpec, Outcome, Rejected, read_option
from .derived_db import DerivedDBError, Removal, build_derived
from .gold_refs import GoldRefs, SourceSchema, gold_refs, source_schema, words
from .utterances import attribute_words

__all__ = ["MissingSchemaRecipe", "Element", "eligible_elements", "substitute", "hidden_knowledge",
           "hidden_knowledge_options", "judged_hidden_knowledge", "norm_name", "plural", "TEMPLATES", "gold_uses",
           "element_facts"]

PREMISE_FLAW = "missing_schema_premise"  # taxonomy.PREMISE_FLAWS, E3.2
#: a remaining name this similar (difflib ratio of the normalised forms) to the removed one can stand in.
NEAR_RATIO = 0.85


@dataclass(frozen=True)
class Element:
    """One eligible element of a gold SQL.

    Attributes:
        removal: what to remove (names as the source spells them).
        subcategory: ``missing_entities_or_attributes`` or ``missing_relationship``.
        role: ``attribute`` | ``join_key`` | ``table`` | ``bridge_table``.
        partner: for a join key, the ``(table, column)`` on the other side (lower-cased); else ``None``.
        links: for a bridge table, the tables it joins to in the gold (lower-cased, sorted); else ``()``.
    """

    removal: Removal
    subcategory: str
    role: str
    partner: tuple[str, str] | None = None
    links: tuple[str, ...] = ()


def norm_name(name: str) -> str:
    """A name compared for substitutes: its words (:func:`~textsql_clarify.generation.gold_refs.words`), each
    plural-stemmed, joined without spaces: ``Singer_IDs`` -> ``singerid``."""
    return "".join(plural_stem(w) for w in words(name).split())


def _near(a: str, b: str) -> bool:
    na, nb = norm_name(a), norm_name(b)
    return na == nb or difflib.SequenceMatcher(None, na, nb).ratio() >= NEAR_RATIO


def eligible_elements(refs: GoldRefs, schema: SourceSchema) -> list[Element]:
    """The gold's eligible elements (module doc), in a fixed order (sorted by table, column).

    Args:
        refs: the gold's references (:func:`~textsql_clarify.generation.gold_refs.gold_refs`).
        schema: the source schema.
    Source: ABISS §3.2 (the two missing-schema subcategories).
    """
    out: dict[tuple[str, str | None], Element] = {}
    keys = refs.join_keys
    for a, b in refs.join_pairs:
        if a[0] == b[0]:
            continue  # a self-join: removing the key leaves no second entity
        ta, tb = schema.tables[a[0]], schema.tables[b[0]]
        a_refs_b = any(f[0] == a[1] and f[1] == b[0] for f in ta.fks)
        b_refs_a = any(f[0] == b[1] and f[1] == a[0] for f in tb.fks)
        if a_refs_b and not b_refs_a:
            sides = [(a, b)]
        elif b_refs_a and not a_refs_b:
            sides = [(b, a)]
        else:
            sides = [(s, o) for s, o in ((a, b), (b, a)) if s[1] not in schema.tables[s[0]].pk] or [(a, b), (b, a)]
        for (t, c), partner in sides:
            info = schema.tables[t]
            out.setdefault((t, c), Element(Removal(info.name, info.columns[c]), "missing_relationship",
                                           "join_key", partner))
    for t, c in sorted(refs.columns):
        info = schema.tables[t]
        if (t, c) in keys or c in info.pk or c in info.fk_columns:
            continue
        out.setdefault((t, c), Element(Removal(info.name, info.columns[c]), "missing_entities_or_attributes",
                                       "attribute"))
    if len(schema.tables) > 1:
        for t in sorted(refs.tables):
            read = {c for (tt, c) in refs.columns if tt == t}
            others = refs.tables - {t}
            links = tuple(sorted({o[0] for pair in refs.join_pairs for s, o in (pair, pair[::-1])
                                  if s[0] == t and o[0] != t}))
            bridge = bool(read) and read <= {c for (tt, c) in keys if tt == t} and len(others) >= 2 \
                and len(links) >= 2
            out[(t, None)] = Element(Removal(schema.tables[t].name), "missing_relationship" if bridge
                                     else "missing_entities_or_attributes", "bridge_table" if bridge else "table",
                                     links=links if bridge else ())
    return [out[k] for k in sorted(out, key=lambda k: (k[0], k[1] or ""))]


def substitute(element: Element, refs: GoldRefs, derived: SourceSchema) -> str | None:
    """What in the derived schema could stand in for the removed element, or ``None`` (check ``no_substitute``).

    * any element: sqlglot ``qualify`` (columns validated) binds every reference of the gold in the derived
      schema (a column removal only; an unknown table is not validated by sqlglot);
    * a column: a remaining column with the same normalised name (:func:`norm_name`) anywhere, or a near-same
      one (difflib ratio >= :data:`NEAR_RATIO`) in a table the gold reads; for a join key, the column on the
      other side is not a substitute, but a column near-same to it left in the key's own table is, and so is a
      foreign key left between the two tables;
    * a table: a remaining table or column whose normalised name is the table's.

    Args:
        element: the removed element.
        refs: the gold's references on the source.
        derived: the derived database's schema.
    Source: ABISS §3.2 (a missing-schema question has no substitute in the schema).
    """
    r = element.removal
    t_low = r.table.lower()
    if r.column is None:
        for t, info in derived.tables.items():
            if norm_name(info.name) == norm_name(r.table):
                return f"table {info.name!r} has the removed table's name"
            for c in info.columns.values():
                if norm_name(c) == norm_name(r.table):
                    return f"column {info.name}.{c} has the removed table's name"
        return None
    from sqlglot.optimizer.qualify import qualify

    try:
        qualify(refs.tree.copy(), schema=derived.lower_schema(), dialect="sqlite", validate_qualify_columns=True)
        return "sqlglot qualify binds every column of the gold in the derived schema"
    except Exception:  # noqa: BLE001 - sqlglot raises OptimizeError and others: nothing binds
        pass
    if element.role == "join_key":
        pt, pc = element.partner
        own = derived.tables.get(t_low)
        partner_name = derived.tables[pt].columns.get(pc, pc) if pt in derived.tables else pc
        if own is not None:
            for c in own.columns.values():
                if _near(c, r.column) or _near(c, partner_name):
                    return f"column {own.name}.{c} could still link {r.table} to {pt}"
            if any(f[1] == pt for f in own.fks):
                return f"a foreign key still links {own.name} to {pt}"
        if pt in derived.tables and any(f[1] == t_low for f in derived.tables[pt].fks):
            return f"a foreign key still links {pt} to {r.table}"
        return None
    for t, info in derived.tables.items():
        for c in info.columns.values():
            if norm_name(c) == norm_name(r.column):
                return f"column {info.name}.{c} has the removed column's name"
            if t in refs.tables and _near(c, r.column):
                return f"column {info.name}.{c} is named nearly like the removed column"
    return None


_UNCOUNTABLE = frozenset({"data", "info", "information", "staff", "people", "equipment", "music", "furniture"})


def plural(phrase: str) -> str:
    """``phrase`` with its last word in the plural (English rules for -y, -s, -x, -ch, -sh): ``singer`` ->
    ``singers``, ``city`` -> ``cities``; a last word that already ends in ``s`` is kept."""
    head, _, last = phrase.rpartition(" ")
    if last.endswith("s") or last in _UNCOUNTABLE:
        out = last
    elif last.endswith("y") and len(last) > 1 and last[-2] not in "aeiou":
        out = last[:-1] + "ies"
    elif last.endswith(("x", "ch", "sh")):
        out = last + "es"
    else:
        out = last + "s"
    return f"{head} {out}" if head else out


#: the hidden-knowledge templates per role, tried in order (:func:`hidden_knowledge_options`). Each names the
#: missing element, then says what the question needed it for and what of the sample's data went with it, so
#: that no sentence is shared by rationales of different elements (``docs/generation.md``). Fields: ``table``,
#: ``many`` (its plural), ``col`` (the column as a noun: ``number killed``, ``year founded``,
#: :func:`~textsql_clarify.generation.utterances.attribute_words`), ``name`` (the column's words), ``other`` (the
#: partner table's plural, join keys only), ``linked`` (the tables a bridge table joins, in the plural, bridge
#: tables only), ``uses`` (what the gold does with the element, :func:`gold_uses`), ``facts`` (a sentence of the
#: source data that went with it, :func:`element_facts`; may be empty).
TEMPLATES: dict[str, tuple[str, ...]] = {
    "attribute": (
        "The {table} table has no {name} column. The question needs the {name} column to {uses}.{facts}",
        "There is no {name} column in the {table} table, yet the question needs it to {uses}.{facts}",
    ),
    "join_key": (
        "There is no link between {many} and {other}: the {table} table has no {name} column. The question "
        "needs the {name} column to {uses}.{facts}",
        "Nothing links {many} to {other} since the {table} table lost its {name} column, which the question "
        "needs to {uses}.{facts}",
    ),
    "bridge_table": (
        "There is no link between {linked}: the database has no {table} table. The question needs the {table} "
        "table to {uses}.{facts}",
        "Nothing links {linked} without the {table} table, which the question needs to {uses}.{facts}",
    ),
    "table": (
        "The database has no {table} table. The question needs the {table} table to {uses}.{facts}",
        "There is no {table} table in the database, yet the question needs it to {uses}.{facts}",
    ),
}

#: what a gold does with a column, by the SQL construct around it (sqlglot node class name) -> verb phrase;
#: ``{col}`` and ``{many}`` as in :data:`TEMPLATES`.
_USE_PHRASES = {
    "Where": "filter {many} by {col}", "Having": "filter groups by {col}", "Group": "group {many} by {col}",
    "Order": "sort {many} by {col}", "Count": "count the {col} values of {many}",
    "Avg": "average the {col} of {many}", "Sum": "add up the {col} of {many}",
    "Max": "find the highest {col} of {many}", "Min": "find the lowest {col} of {many}",
    "Select": "show the {col} of {many}", "Join": "join {many} to {other}",
}


def _use_of(node) -> str:
    """The construct a column node of the gold sits in (a key of :data:`_USE_PHRASES`)."""
    from sqlglot import exp

    n = node
    while n.parent is not None:
        p = n.parent
        for cls in (exp.Count, exp.Avg, exp.Sum, exp.Max, exp.Min):
            if isinstance(p, cls):
                return cls.__name__
        if isinstance(p, (exp.Where, exp.Having, exp.Group, exp.Order, exp.Join)):
            return type(p).__name__
        if isinstance(p, exp.Select):
            return "Select"
        n = p
    return "Select"


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def gold_uses(element: Element, refs: GoldRefs | None, schema: SourceSchema) -> str:
    """What the gold needs the removed element for, as verb phrases ("group people by nationality and sort
    people by nationality"): for a column, the constructs it sits in (:data:`_USE_PHRASES`, at most two); for a
    table, those of the columns the gold reads there (non-key first), else "count" it; for a join key or a
    bridge table, the join. Source: ABISS §4.2 (a rationale says why the question cannot be answered: here,
    what the question needed the element for).
    """
    r = element.removal
    table = words(r.table)
    many = plural(table)
    other = plural(words(schema.tables[element.partner[0]].name)) if element.partner else "the other tables"
    if element.role in ("join_key", "bridge_table"):
        if element.role == "bridge_table":
            return f"join {_and([plural(words(schema.tables[t].name)) for t in element.links])}"
        return f"join {many} to {other}"
    t_low = r.table.lower()
    info = schema.tables.get(t_low)
    cols = [r.column.lower()] if r.column else sorted(
        (c for (t, c) in (refs.columns if refs else ()) if t == t_low),
        key=lambda c: (info is not None and (c in info.pk or c in info.fk_columns), c))
    out: list[str] = []
    for c in cols:
        nodes = refs.column_nodes.get((t_low, c), []) if refs else []
        name = words(info.columns.get(c, c)) if info else words(c)
        col = attribute_words(name, info.types.get(c, "") if info else "")
        for key in dict.fromkeys(_use_of(n) for n in nodes):
            phrase = _USE_PHRASES["Join" if key == "Join" else key].format(col=col, many=many, other=other)
            if phrase not in out:
                out.append(phrase)
    if not out:
        col = attribute_words(words(r.column), info.types.get(r.column.lower(), "") if info else "") if r.column \
            else ""
        out = [f"count {many}" if r.column is None else f"read the {col} of {many}"]
    return _and(out[:2])


def _values(db_path: str, table: str, column: str, sql_type: str) -> str:
    """A few of a column's values in the source database: ``"such as Russia and Bulgaria"`` (the two most
    frequent texts, ties by value) or ``"from 18 to 52"`` (a number's range); ``""`` when none fits."""
    import sqlite3

    from ..sql.uri import ro_uri

    qt, qc = table.replace('"', '""'), column.replace('"', '""')
    con = sqlite3.connect(ro_uri(db_path), uri=True)
    try:
        numeric = any(k in sql_type.upper() for k in ("INT", "REAL", "NUM", "FLOA", "DOUB", "DEC"))
        if numeric:
            lo, hi = con.execute(f'SELECT min("{qc}"), max("{qc}") FROM "{qt}" WHERE typeof("{qc}") IN '
                                 f"('integer', 'real')").fetchone()
            if lo is None or lo == hi:
                return ""
            fmt = (lambda v: str(int(v)) if float(v).is_integer() else f"{v:g}")
            return f"from {fmt(lo)} to {fmt(hi)}"
        rows = con.execute(f'SELECT "{qc}", count(*) AS n FROM "{qt}" WHERE "{qc}" IS NOT NULL AND '
                           f"typeof(\"{qc}\") = 'text' AND trim(\"{qc}\") <> '' GROUP BY 1 "
                           "ORDER BY n DESC, 1 LIMIT 2").fetchall()
    except sqlite3.DatabaseError:
        return ""
    finally:
        con.close()
    vals = [" ".join(str(v).split()) for v, _n in rows if len(str(v)) <= 40]
    return f"such as {_and(vals)}" if vals else ""


#: the literal text of the facts sentences of :func:`element_facts` (for :func:`template_stock`).
_FACT_TEXTS = (" Its {v} values were such as {v}.", " Its {v} values were from {v} to {v}.", " It held the {v} of {v}.",
               " Nothing says which of the {v} each of the {v} goes with.", " Its {v} rows paired them.")


def element_facts(element: Element, schema: SourceSchema, db_path: str | None) -> str:
    """One sentence of what went with the removed element in the source database (with a leading space), or
    ``""``: a column's values (:func:`_values`), a table's other columns ("It held the name, country and age
    of singers."), or for a join key or bridge table the row counts it linked. This is what makes one sample's
    rationale its own: the template's words recur across the dataset, the data does not.

    Args:
        element: the removed element. schema: the source schema. db_path: the source database (``None``: ``""``).
    """
    if not db_path:
        return ""
    r = element.removal
    info = schema.tables.get(r.table.lower())
    if info is None:
        return ""
    many = plural(words(r.table))
    if element.role == "attribute":
        vals = _values(db_path, info.name, r.column, info.types.get(r.column.lower(), ""))
        col = attribute_words(words(r.column), info.types.get(r.column.lower(), ""))
        return f" Its {col} values were {vals}." if vals else ""
    if element.role == "table":
        cols = [attribute_words(words(n), info.types.get(c, "")) for c, n in info.columns.items()
                if c not in info.pk and c not in info.fk_columns and not norm_name(n).endswith("id")]
        return f" It held the {_and(cols[:5])} of {many}." if cols else ""
    import sqlite3

    from ..sql.uri import ro_uri

    def count(t: str) -> int | None:
        con = sqlite3.connect(ro_uri(db_path), uri=True)
        try:
            return con.execute(f'SELECT count(*) FROM "{t.replace(chr(34), chr(34) * 2)}"').fetchone()[0]
        except sqlite3.DatabaseError:
            return None
        finally:
            con.close()

    if element.role == "join_key" and element.partner:
        other = schema.tables[element.partner[0]]
        n, m = count(info.name), count(other.name)
        if n is None or m is None:
            return ""
        return f" Nothing says which of the {m} {plural(words(other.name))} each of the {n} {many} goes with."
    n = count(info.name)
    return f" Its {n} rows paired them." if n else ""


def hidden_knowledge_options(element: Element, schema: SourceSchema, refs: GoldRefs | None = None,
                             db_path: str | None = None) -> list[str]:
    """What is missing, in plain words (the user's reason the question cannot be answered), one text per
    template of the element's role (:data:`TEMPLATES`), in order.

    Args:
        element: the removed element.
        schema: the source schema (for the partner table's name).
        refs: the gold's references (what the question needs the element for, :func:`gold_uses`); ``None``:
            the element's own name stands in.
        db_path: the source database (the data that went with the element, :func:`element_facts`); ``None``:
            no such sentence.
    Source: ABISS §3.2's examples (hidden knowledge names what is missing).
    """
    r = element.removal
    table = words(r.table)
    name = words(r.column) if r.column else ""
    info = schema.tables.get(r.table.lower())
    sql_type = info.types.get(r.column.lower(), "") if info is not None and r.column else ""
    col = attribute_words(name, sql_type) if name else ""
    fields = {"table": table, "many": plural(table), "col": col, "name": name,
              "other": plural(words(schema.tables[element.partner[0]].name)) if element.partner else "",
              "linked": " and ".join(plural(words(schema.tables[t].name)) for t in element.links) or "the other tables",
              "uses": gold_uses(element, refs, schema), "facts": element_facts(element, schema, db_path)}
    return [t.format(**fields) for t in TEMPLATES[element.role]]


def hidden_knowledge(element: Element, schema: SourceSchema, refs: GoldRefs | None = None,
                     db_path: str | None = None) -> str:
    """The first of :func:`hidden_knowledge_options`."""
    return hidden_knowledge_options(element, schema, refs, db_path)[0]


def judged_hidden_knowledge(sample: Sample, db_path: str, options: Sequence[str]) -> str | None:
    """The first of ``options`` that the project's offline FB judge accepts as its own feedback on ``sample``
    over the database at ``db_path``, or ``None`` (check ``hidden_knowledge_judged``).

    The oracle's feedback is the hidden knowledge (:class:`~textsql_clarify.baselines.agents.OracleAgent`), so a
    text the judge refuses would make FB fail the oracle;
    :func:`~textsql_clarify.rewards.feedback.own_rationale_verdict` is the verdict of both offline judges (lexical
    and MiniLM) on a feedback identical to the hidden knowledge, here with the templates' fixed words stripped
    (:func:`template_stock`). The stock phrases of the whole written file, which no single anchor sees, are
    judged by the pipeline's ``oracle_fb`` check (:mod:`~textsql_clarify.generation.oracle_fb`).
    Source: ABISS §5.3 (FB); ``docs/generation.md`` (the oracle scores FB 1.0 on every generated file).
    """
    import dataclasses

    from ..rewards.feedback import own_rationale_verdict
    from .oracle_fb import schema_identifiers

    ids = schema_identifiers(db_path)
    for hk in options:
        if own_rationale_verdict(dataclasses.replace(sample, db_path=db_path, hidden_knowledge=hk), ids,
                                 template_stock()).correct:
            return hk
    return None


@functools.lru_cache(maxsize=1)
def template_stock():
    """The fixed words of :data:`TEMPLATES` and :data:`_USE_PHRASES` and of the facts sentences as stock
    phrases (:class:`~textsql_clarify.rewards.feedback.stock.StockPhrases`): every 1- to 5-word run of a
    template's literal text. :func:`judged_hidden_knowledge` judges with them stripped, so a rationale passes
    only through what it says of its own sample (the element's name, its data), as the env's judge, which strips
    the dataset's recurring phrases, will see it."""
    import re

    from ..rewards.feedback.stock import NGRAM_SIZES, StockPhrases, _clauses

    literal = [*(t for ts in TEMPLATES.values() for t in ts), *_USE_PHRASES.values(), *_FACT_TEXTS]
    phrases = set()
    _lo, hi = NGRAM_SIZES
    for t in literal:
        for part in re.split(r"\{[a-z]+\}", t):
            for ws in _clauses(part):
                for n in range(1, hi + 1):
                    phrases.update(tuple(ws[i:i + n]) for i in range(len(ws) - n + 1))
    return StockPhrases(frozenset(phrases), len(literal), 0.0)


class MissingSchemaRecipe:
    """The missing-schema recipe (module doc): ``name = "missing_schema"``, model-free.

    Args:
        max_tries: most eligible elements tried per anchor (default 3; ``ctx.options["max_tries"]`` wins).
    """

    name = "missing_schema"
    stages = ("element_chosen", "derived_built", "gold_fails_on_derived", "no_substitute", "original_nonempty",
              "hidden_knowledge_judged")
    needs_model = False
    #: ``--option`` names this recipe reads.
    options = {"max_tries": OptionSpec("int", "3", "most eligible elements tried per anchor", minimum=1)}

    def __init__(self, max_tries: int = 3) -> None:
        self.max_tries = max_tries

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """Try the anchor's eligible elements in ``rng`` order until one passes every check (module doc).

        Returns:
            The :class:`Rejected` outcomes of the elements tried, then at most one :class:`Accepted`.
        Raises:
            ValueError: ``ctx.options["max_tries"]`` is not an integer >= 1 (:func:`~.base.read_option`).
        """
        tries = read_option(self, ctx.options, "max_tries", self.max_tries)
        try:
            schema = source_schema(anchor.db_path)
            refs = gold_refs(anchor.gold_sql, schema)
        except (TextSQLClarifyError, OSError) as e:
            return [Rejected("element_chosen", f"the gold cannot be analysed: {str(e)[:160]}")]
        elements = eligible_elements(refs, schema)
        if not elements:
            return [Rejected("element_chosen", "the gold reads no eligible column or table")]
        rng.shuffle(elements)
        out: list[Outcome] = []
        original = None
        for el in elements[:tries]:
            res, original = self._try(anchor, el, refs, schema, ctx, original)
            out.append(res)
            if isinstance(res, Accepted) or res.stage == "original_nonempty":
                break  # accepted, or the gold is empty on the source: no other element can pass
        return out

    def _try(self, anchor: Anchor, el: Element, refs: GoldRefs, schema: SourceSchema, ctx: GenContext,
             original: ExecutionResult | None) -> tuple[Outcome, ExecutionResult | None]:
        """One element through the checks: ``(outcome, the gold's result on the source or None)``."""
        verdicts = {"element_chosen": f"{el.role} {el.removal.describe()}"}
        try:
            path = build_derived(anchor.db_path, el.removal, ctx.work_dir, anchor.db_id)
        except DerivedDBError as e:
            return Rejected("derived_built", str(e)[:200]), original
        verdicts["derived_built"] = "pass"
        with SQLiteSandbox(path, timeout_s=ctx.timeout_s) as sb:
            res = sb.execute(anchor.gold_sql)
        if res.ok:
            return Rejected("gold_fails_on_derived", f"the gold still runs without {el.removal.describe()}"), original
        if res.error_kind == "timeout":
            return Rejected("gold_fails_on_derived", "the gold timed out on the derived database"), original
        verdicts["gold_fails_on_derived"] = f"{res.error_kind}: {(res.error_message or '')[:80]}"
        sub = substitute(el, refs, source_schema(path))
        if sub is not None:
            return Rejected("no_substitute", sub), original
        verdicts["no_substitute"] = "pass"
        if original is None:
            with SQLiteSandbox(anchor.db_path, timeout_s=ctx.timeout_s) as sb:
                original = sb.execute(anchor.gold_sql)
        if not original.ok:
            return Rejected("original_nonempty", f"the gold fails on the source: {original.error_kind}"), original
        if not original.rows:
            return Rejected("original_nonempty", "the gold returns no rows on the source"), original
        verdicts["original_nonempty"] = f"{original.row_count} rows"
        removed = {"table": el.removal.table, "column": el.removal.column, "role": el.role}
        db_id = f"{anchor.db_id}__{el.removal.slug}"
        sample = Sample(
            id=f"{self.name}-{anchor.id}-{el.removal.slug}", db_id=db_id,
            db_path=f"{ctx.work_dir.name}/{path.name}", question=anchor.question, group="unanswerable",
            subcategory=el.subcategory, gold_sql=None,
            hidden_knowledge=hidden_knowledge(el, schema, refs, anchor.db_path),
            evidence=tuple(anchor.evidence), premise_flaw=PREMISE_FLAW, difficulty=anchor.difficulty,
            provenance={"removed": removed, "derived_db": path.name, "source_db_id": anchor.db_id,
                        "original_gold_sql": anchor.gold_sql},
        )
        hk = judged_hidden_knowledge(sample, str(path), hidden_knowledge_options(el, schema, refs, anchor.db_path))
        if hk is None:
            return Rejected("hidden_knowledge_judged", "the FB judge refuses every hidden-knowledge template "
                                                       "as the oracle's feedback"), original
        verdicts["hidden_knowledge_judged"] = "pass"
        sample = dataclasses.replace(sample, hidden_knowledge=hk)
        paired = Sample(
            id=f"{self.name}-{anchor.id}-orig", db_id=anchor.db_id, db_path=anchor.db_path,
            question=anchor.question, group="answerable",
            subcategory="answerable_with_evidence" if anchor.evidence else "answerable_without_evidence",
            gold_sql=anchor.gold_sql, evidence=tuple(anchor.evidence), difficulty=anchor.difficulty,
            provenance={"original_of": sample.id, "removed": removed},
        )
        return Accepted(sample, verdicts, paired), original

