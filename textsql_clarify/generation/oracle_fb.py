"""The corpus-level oracle FB check of a generated file: every rationale passes the env's judge as its own feedback.

The oracle agent refuses an unanswerable sample with its hidden knowledge
(:class:`~textsql_clarify.baselines.agents.OracleAgent`), and must score FB 1.0 on every generated file
(ABISS §5.3). The env's judge strips the phrases that recur across the rationales of the *whole* dataset it is built on
(:mod:`~textsql_clarify.rewards.feedback.stock`), which no recipe sees while it runs one anchor: a rationale
whose own words all recur elsewhere ("It held the name, level of membership and age of visitors": ``age``
only inside "and age of", held by the rationales of many databases) passes the recipe's own check and fails
the env's. So, once the file is assembled, :func:`oracle_fb_failures` judges every unanswerable sample's
hidden knowledge as its own feedback under the stock table of the file (the table the env computes when it
is built on the file), with :func:`~textsql_clarify.rewards.feedback.own_rationale_verdict` (the verdict of
both offline judges, MiniLM and lexical, without loading a model), and the pipeline moves the samples it
refuses out with their pairs (``load_validation``, reason ``oracle_fb``; ``docs/generation.md``).

A sample that a model recipe wrote with the fake council only (``provenance["models"]`` all ``fake``,
:mod:`~.fake_model`) is not judged: the fake writes one fixed explanation per flaw, a placeholder that exercises
the pipeline's control flow, not a rationale (it still counts in the stock table, as the env counts it).

Moving samples out changes the table; the check is repeated on what is left until nothing more fails (at
most :data:`MAX_ROUNDS` rounds), so the written file is the fixed point.
"""
from __future__ import annotations

import functools
from typing import Iterable, Sequence

from ..samples import Sample

__all__ = ["oracle_fb_failures", "schema_identifiers", "MAX_ROUNDS"]

#: Most rounds of :func:`oracle_fb_failures` (each round rebuilds the stock table without the refused samples).
MAX_ROUNDS = 8


def schema_identifiers(db_path: str) -> frozenset[str]:
    """The table and column names of the database at ``db_path``, lower-cased, as the env hands them to its judge
    (``TextSQLClarifyEnv``: the sandbox's schema).

    Raises:
        OSError, sqlite3.DatabaseError: the file cannot be read as a database.
    """
    from ..sql.schema import read_schema

    sch = read_schema(db_path)
    return frozenset([t.lower() for t in sch] + [c.lower() for cols in sch.values() for c in cols])


def _fake_written(sample: Sample) -> bool:
    """Whether a model recipe wrote ``sample`` with the fake council only (module doc)."""
    prov = sample.provenance or {}
    models = prov.get("models") or []
    if not models or not all(str(m).split("#")[0] == "fake" for m in models):
        return False
    return _needs_model(str(prov.get("recipe")))


@functools.lru_cache(maxsize=64)
def _needs_model(recipe: str) -> bool:
    from .recipes import make_recipe

    try:
        return bool(make_recipe(recipe).needs_model)
    except Exception:  # noqa: BLE001 - a recipe this install does not know: judge its samples
        return False


def oracle_fb_failures(samples: Sequence[Sample], checked: Iterable[str] | None = None) -> dict[str, str]:
    """The samples whose hidden knowledge the env's judge would refuse as the oracle's feedback (module doc).

    Args:
        samples: every sample of the file as the env would load it (all groups: the stock table is counted over
            the unanswerable ones; ``db_path`` resolved).
        checked: ids of the samples to judge (``None``: every unanswerable sample with a hidden knowledge but
            those the fake council wrote). The others still count in the stock table.
    Returns:
        sample id -> reason (``"oracle_fb: ..."`` with the verdict's score, contradictions and the stems the
        stock table covers), for the samples to move out; ``{}`` when every rationale passes. A sample whose
        database cannot be read is left to the load-time validation (not listed).
    Source: ABISS §5.3 (FB); a generated file is valid only where the oracle scores FB 1.0 on it.
    """
    from ..rewards.feedback import corpus_stock, own_rationale_verdict

    want = None if checked is None else set(checked)
    if want is None:
        want = {s.id for s in samples if not _fake_written(s)}
    ids: dict[str, frozenset[str]] = {}
    out: dict[str, str] = {}
    for _ in range(MAX_ROUNDS):
        left = [s for s in samples if s.id not in out]
        stock = corpus_stock(left)
        new: dict[str, str] = {}
        for s in left:
            if s.group != "unanswerable" or not s.hidden_knowledge.strip() or (want is not None and s.id not in want):
                continue
            if s.db_path not in ids:
                try:
                    ids[s.db_path] = schema_identifiers(s.db_path)
                except Exception:  # noqa: BLE001 - an unreadable database is the load-time validation's to report
                    ids[s.db_path] = None
            if ids[s.db_path] is None:
                continue
            v = own_rationale_verdict(s, ids[s.db_path], stock)
            if not v.correct:
                covered = sorted(stock.covered(s.hidden_knowledge))
                new[s.id] = (f"oracle_fb: the env's judge refuses the hidden knowledge as the oracle's feedback "
                             f"(score {v.score}, contradictions {list(v.contradictions)}, stock-covered "
                             f"{covered[:12]})")
        if not new:
            break
        out.update(new)
    return out
