"""The PremiseSQL recipe: one controlled premise flaw per source question and subcategory, reviewed, with its
paired original (PremiseSQL §3, §A.2, §A.3).

Per anchor (a source question with its gold SQL), for each subcategory that PremiseSQL builds by rewriting the
question (:data:`~.premise_prompts.REWRITE_FLAWS`: eight of the nine; E3.2 perturbs the schema and is the
model-free ``missing_schema`` recipe), the council's generator rewrites the question with exactly that flaw
(the generation stage), and the candidate then passes the checks below in order. An accepted candidate is an
unanswerable sample with ``premise_flaw`` set (its code in ``provenance["premise_code"]``) and, as hidden
knowledge, the council's explanation of the flaw alone (no label shared by every sample of a flaw: the FB judge
scores only what is specific to the sample, ``docs/rewards.md``); the unmodified source
is kept as its paired answerable original (PremiseSQL's negative sample; ``Accepted.paired`` of every flawed
sample of the anchor, the same record: the pipeline writes it once, after the first, and links the others to it;
each flawed sample also names it in ``provenance["original_id"]``).

Votes: PremiseSQL verifies with one LLM and then people; with a council, each check is the council's majority
vote and a tie rejects (the conservative choice; ABISS §4.2, §5.2's tie rule).
"""
from __future__ import annotations

import random
import re
from typing import Any, Sequence

from ..rewards.execution import is_empty_result
from ..samples import Sample
from ..sql.schema import read_schema
from ..taxonomy import PREMISE_FLAW_CODES, PREMISE_FLAWS, SUBCATEGORIES
from . import premise_prompts as PP
from .base import Accepted, Anchor, GenContext, OptionSpec, Outcome, Rejected
from .tide import _council, _norm, _opt_int, _sandbox
from .tide_prompts import parse_json_reply, schema_summary

__all__ = ["PremiseRecipe", "PREMISE_STAGES", "sql_in_text"]

#: :class:`PremiseRecipe`'s checks, in order.
PREMISE_STAGES = ("source", "format", "no_sql", "review", "type_check")
#: SQL written as code: its clause keywords in capitals (a question's "Order by their name." is English).
_SQL_SHAPE = re.compile(r"\bSELECT\b[\s\S]*\bFROM\b|\bWHERE\s+\w+\s*(=|<|>|LIKE\b)|\bGROUP\s+BY\b|\bORDER\s+BY\b")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?")


def sql_in_text(text: str, schema: dict[str, dict[str, str]]) -> str | None:
    """What makes a question read as SQL rather than as a user's words, or ``None``.

    SQL as code: a ``SELECT ... FROM`` shape or a clause (``WHERE col =``, ``GROUP BY``, ``ORDER BY``) with its
    keywords in capitals (Spider's questions say "Order by their name." in English); a schema identifier that
    holds an underscore (``first_name``) or a ``table.column`` reference. Names without an underscore (``age``)
    are ordinary words and pass. Source: ours (the PremiseSQL generation prompt asks for a natural question).

    Args:
        text: the question.
        schema: ``{table: {column: type}}`` (lower-cased, :func:`textsql_clarify.sql.schema.read_schema`).
    """
    m = _SQL_SHAPE.search(text)
    if m:
        return f"it holds SQL ({m.group(0)[:30]!r})"
    names = set(schema) | {c for cols in schema.values() for c in cols}
    for w in _WORD.findall(text):
        lw = w.lower()
        if "." in lw:
            t, c = lw.split(".", 1)
            if t in schema and c in schema[t]:
                return f"it names the column {w!r} as table.column"
        elif "_" in lw and lw in names:
            return f"it names the schema identifier {w!r}"
    return None


def _flaw_names(raw: str) -> list[str]:
    """The rewriting flaws named by the ``premise_flaws`` option ``raw`` (comma list of names or codes).

    Raises:
        ValueError: a part that is not a rewriting premise flaw (PremiseSQL §A.3).
    """
    names = []
    for part in raw.split(","):
        part = part.strip()
        name = PREMISE_FLAW_CODES.get(part, part)
        if name not in PP.REWRITE_FLAWS:
            raise ValueError(f"option premise_flaws: {part!r} is not a rewriting premise flaw; valid: "
                             f"{', '.join(PP.REWRITE_FLAWS)} (or their codes)")
        if name not in names:
            names.append(name)
    return names


def _flaws(ctx: GenContext, rng: random.Random) -> list[str]:
    raw = ctx.options.get("premise_flaws")
    names = _flaw_names(raw) if raw else list(PP.REWRITE_FLAWS)
    k = _opt_int(ctx, "premise_per_anchor", len(names))
    if k < len(names):
        names = sorted(rng.sample(names, max(k, 0)), key=list(PREMISE_FLAWS).index)
    return names


class PremiseRecipe:
    """PremiseSQL flaw injection (§A.3) over a council: ``premise``.

    Stages (:data:`PREMISE_STAGES`), each able to reject:

    1. ``source``: the anchor's gold executes in the read-only sandbox (not truncated) and returns data, so its
       paired original is a valid answerable sample (PremiseSQL keeps originals with a reliable reference
       result). One rejection for the whole anchor.
    2. ``format``: the generation reply (:func:`~.premise_prompts.generate_messages`) is a JSON object with the
       flawed ``question`` and an ``explanation``; the question differs from the source's.
    3. ``no_sql``: the flawed question holds no SQL and no schema identifier (:func:`sql_in_text`).
    4. ``review``: the council's majority finds the candidate meets its subcategory's criteria
       (:func:`~.premise_prompts.review_messages`); a tie rejects.
    5. ``type_check``: the council's majority, shown the flawed question and the nine types (in an order drawn
       with ``rng`` per candidate) but not the intended one, names the intended type; a tie rejects.

    Options (``ctx.options``): ``premise_flaws`` (comma list of names or codes, default all eight rewriting flaws),
    ``premise_per_anchor`` (int: that many of them, chosen with ``rng``), ``max_new_tokens`` (int, 200).
    """

    name = "premise"
    stages = PREMISE_STAGES
    needs_model = True
    #: ``--option`` names this recipe reads.
    options = {
        "premise_flaws": OptionSpec("str", "all eight rewriting flaws", "comma list of rewriting flaw names or codes",
                                    check=lambda raw: _flaw_names(raw) if raw else None),
        "premise_per_anchor": OptionSpec("int", "all of premise_flaws", "that many of them per anchor, drawn with rng",
                                         minimum=0),
        "max_new_tokens": OptionSpec("int", "200", "most tokens per generation", minimum=1),
    }

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """One candidate per flaw for ``anchor`` (the class docstring's stages).

        Raises:
            ValueError: no council in ``ctx``, or a malformed option.
        """
        council = _council(ctx, self.name)
        flaws = _flaws(ctx, rng)
        tokens = _opt_int(ctx, "max_new_tokens", 200)
        seed = rng.randrange(2 ** 31)
        sb = _sandbox(anchor.db_path, ctx)
        r = sb.execute(anchor.gold_sql)
        if not r.ok or r.truncated or is_empty_result(r):
            why = (f"fails ({r.error_kind}): {r.error_message}" if not r.ok
                   else "is truncated at the row cap" if r.truncated else "returns no data")
            return [Rejected("source", f"the source gold {why}")]
        schema_text = schema_summary(anchor.db_path)
        schema = read_schema(anchor.db_path)
        replies = council.write_all([PP.generate_messages(f, anchor.question, anchor.gold_sql, schema_text,
                                                          anchor.evidence) for f in flaws],
                                    max_new_tokens=tokens, seed=seed)
        original = self._original(anchor, f"{self.name}-{anchor.id}-original")
        out: list[Outcome] = []
        for flaw, reply in zip(flaws, replies):
            order = list(PREMISE_FLAWS)
            rng.shuffle(order)  # the types are listed in a drawn order: a small judge favours the first one
            o = self._check(anchor, flaw, reply, council, schema_text, schema, original.id, order)
            if isinstance(o, Accepted):
                o.paired = original
            out.append(o)
        return out

    def _check(self, anchor: Anchor, flaw: str, reply: str, council, schema_text: str,
               schema: dict, original_id: str, order: list[str]) -> Outcome:
        obj = parse_json_reply(reply, ("question", "explanation"))
        if isinstance(obj, str):
            return Rejected("format", f"{flaw}: {obj}")
        flawed, expl = obj["question"].strip(), obj["explanation"].strip()
        if _norm(flawed) == _norm(anchor.question):
            return Rejected("format", f"{flaw}: the flawed question is the source question")
        verdicts: dict[str, Any] = {"source": "pass", "format": "pass"}
        why = sql_in_text(flawed, schema)
        if why:
            return Rejected("no_sql", f"{flaw}: {why}")
        verdicts["no_sql"] = "pass"
        v = council.vote(PP.review_messages(flaw, anchor.question, flawed, expl, schema_text), ("pass", "fail"),
                         tie="fail")
        if v.winner != "pass":
            return Rejected("review", f"{flaw}: {v.summary()}")
        verdicts["review"] = v.summary()
        v = council.vote(PP.type_messages(flawed, schema_text, order), tuple(order))
        if v.tie or v.winner != flaw:
            return Rejected("type_check", f"{flaw}: the council names {v.summary()}")
        verdicts["type_check"] = v.summary()
        pf = PREMISE_FLAWS[flaw]
        sub = pf.abiss if SUBCATEGORIES[pf.abiss].group == "unanswerable" else None
        sample = Sample(
            id=f"{self.name}-{anchor.id}-{flaw}", db_id=anchor.db_id, db_path=anchor.db_path, question=flawed,
            group="unanswerable", subcategory=sub, premise_flaw=flaw,
            # the explanation alone: a label shared by every sample of the flaw is no part of why this one
            # cannot be answered (the FB judge strips what recurs across rationales); the flaw is in
            # premise_flaw and provenance["premise_code"]
            hidden_knowledge=expl, evidence=tuple(anchor.evidence),
            difficulty=anchor.difficulty,
            provenance={"premise_code": pf.code, "original_id": original_id, "anchor_question": anchor.question},
        )
        return Accepted(sample, verdicts)

    def _original(self, anchor: Anchor, original_id: str) -> Sample:
        """The paired original (PremiseSQL's negative sample): the source question and gold, answerable."""
        sub = "answerable_with_evidence" if anchor.evidence else "answerable_without_evidence"
        return Sample(id=original_id, db_id=anchor.db_id, db_path=anchor.db_path, question=anchor.question,
                      group="answerable", subcategory=sub, gold_sql=anchor.gold_sql, evidence=tuple(anchor.evidence),
                      difficulty=anchor.difficulty, provenance={"premise_original": True})
