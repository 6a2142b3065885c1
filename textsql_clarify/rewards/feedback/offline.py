"""The offline FB judges: the shared rule with a lexical or a MiniLM similarity score (ABISS §5.3).

:class:`LexicalFeedbackJudge` scores by content-word recall, :class:`SemanticFeedbackJudge` by MiniLM
cosine similarity (falling back to the lexical judge when MiniLM cannot load). Both apply the rule set
out in :mod:`textsql_clarify.rewards.feedback`, with the thresholds calibrated on
``tests/fixtures/probe_feedback.jsonl`` (``docs/simulator.md``, "Feedback judge").

Speed (``docs/platform.md`` "Feedback judge speed"): what does not depend on the feedback is
computed once and kept in bounded LRU caches shared by every judge of the process: the database's
structure per (file, identifiers), the hidden knowledge's missing-claims and residual text per (hidden
knowledge, question, schema words), and, per encoder, the embedding of each hidden-knowledge residual
(and of recent feedback residuals). A judgement then embeds only its feedback (on one torch thread while
the machine is busy, :func:`auto_threads`);
:meth:`SemanticFeedbackJudge.judge_many` embeds the feedbacks of a whole vector step in one encode call,
and :meth:`~SemanticFeedbackJudge.prepare` (called by the env when it first meets a sample) fills the
caches before the first feedback arrives.
"""
from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Sequence

from ...samples import Sample
from ...text import valid_unicode
from .claims import (MissingClaim, affirmed_missing, missing_claims, names_missing_element, names_missing_link,
                     number_conflicts, singles_out_missing, unsupported_claims)
from .minilm import lean_encoder, load_minilm, torch_threads
from .schema import Structure, _structure, existing_claimed_missing
from .stock import NO_STOCK, StockPhrases, corpus_stock
from .verdict import FeedbackVerdict, _check_args, _is_sql
from .words import added_words, novel_recall, residual_text

__all__ = ["LexicalFeedbackJudge", "SemanticFeedbackJudge", "MINILM_THRESHOLD", "LEXICAL_THRESHOLD", "judge_many",
           "own_rationale_verdict",
           "clear_feedback_caches", "CACHE_SIZES", "auto_threads"]

#: Cosine-similarity threshold of :class:`SemanticFeedbackJudge` (MiniLM, unit-normalised embeddings).
#: Calibrated on ``tests/fixtures/probe_feedback.jsonl``; see ``docs/simulator.md`` "Feedback judge".
MINILM_THRESHOLD = 0.35
#: Content-word recall threshold of :class:`LexicalFeedbackJudge`, calibrated the same way.
LEXICAL_THRESHOLD = 0.225

#: Entries each LRU cache keeps: database structures, hidden-knowledge sides, and per encoder
#: the hidden-knowledge and the feedback embeddings (384 float32 each: 8,192 embeddings are about 12 MB).
CACHE_SIZES = {"structure": 256, "hidden_knowledge": 4096, "hk_embedding": 4096, "feedback_embedding": 4096}


class _LRU:
    """A bounded, thread-safe least-recently-used map (``get`` returns ``None`` for a miss)."""

    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


@dataclass(frozen=True)
class _Struct:
    """A database's structure as the rule reads it (:func:`~.schema._structure`) and its schema words."""

    tables: Structure
    idents: frozenset[tuple[str, ...]]
    schema_words: frozenset[str]


@dataclass(frozen=True)
class _HKSide:
    """What the rule needs of a hidden knowledge, given the question, the schema words and the dataset's stock
    phrases: its claims, its residual text and its stock-covered stems."""

    claims: tuple[MissingClaim, ...]
    residual: str
    stock: frozenset[str] = frozenset()


_STRUCTURES = _LRU(CACHE_SIZES["structure"])
_HK_SIDES = _LRU(CACHE_SIZES["hidden_knowledge"])
#: encoder -> {"hk": _LRU, "feedback": _LRU} of embeddings by text; an encoder that takes no weak
#: reference gets no shared cache (:func:`_embedding_caches`).
_EMBEDDINGS: "weakref.WeakKeyDictionary[Any, dict[str, _LRU]]" = weakref.WeakKeyDictionary()
_EMB_LOCK = threading.Lock()
#: encoder -> its :func:`~textsql_clarify.minilm.lean_encoder` (``None``: use ``encode``), built once.
_LEAN: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


_LOAD = [float("-inf"), None]  # [when read (monotonic s), the thread count auto_threads chose]


def auto_threads() -> int | None:
    """The torch thread count of ``num_threads="auto"``: ``1`` while the machine is busy (its 1-minute
    load average, read at most once a second, is at or above the number of CPUs this process may use),
    else ``None`` (torch's own setting). ``1`` where the load average cannot be read. Source:
    ``docs/platform.md`` "Feedback judge speed" (``bench/bench_feedback_judge.py``: on 2 cores at load ~6 one
    thread took 15 ms per judgement and two 100 ms; at load ~1.7 one thread took 5.4 ms and two 3.8 ms).
    """
    now = time.monotonic()
    if now - _LOAD[0] >= 1.0:
        try:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            _LOAD[1] = 1 if os.getloadavg()[0] >= cpus else None
        except (OSError, AttributeError):
            _LOAD[1] = 1
        _LOAD[0] = now
    return _LOAD[1]


def _lean_for(model: Any) -> Callable[[list[str]], Any] | None:
    """The lean encode function of a SentenceTransformer (built and checked once per model), else ``None``."""
    if type(model).__name__ != "SentenceTransformer":
        return None
    with _EMB_LOCK:
        try:
            if model not in _LEAN:
                _LEAN[model] = lean_encoder(model)
            return _LEAN[model]
        except TypeError:  # takes no weak reference
            return None


def clear_feedback_caches() -> None:
    """Empty every cache of the offline judges (structures, hidden-knowledge sides, embeddings).

    Needed only when a database file is rewritten in place within the same second and size, or to measure
    the uncached cost (``bench/bench_feedback_judge.py``); a changed file is otherwise seen through its
    modification time and size.
    """
    _STRUCTURES.clear()
    _HK_SIDES.clear()
    with _EMB_LOCK:
        for caches in _EMBEDDINGS.values():
            for c in caches.values():
                c.clear()


def _structure_of(sample: Sample, schema_identifiers: Iterable[str]) -> _Struct:
    """:func:`~.schema._structure` of the sample's database and identifiers, cached per (file, its
    modification time and size, identifiers)."""
    ids = frozenset(s for s in schema_identifiers if isinstance(s, str))
    try:
        st = os.stat(sample.db_path) if sample.db_path else None
        stamp = (st.st_mtime_ns, st.st_size) if st is not None else None
    except OSError:
        stamp = None
    key = (sample.db_path, stamp, ids)
    hit = _STRUCTURES.get(key)
    if hit is None:
        tables, idents = _structure(sample, ids)
        hit = _Struct(tables, frozenset(idents), frozenset(w for ident in idents for w in ident))
        _STRUCTURES.put(key, hit)
    return hit


def _make_hk_side(hk: str, question: str, struct: _Struct, stock: StockPhrases) -> _HKSide:
    covered = stock.covered(hk)
    return _HKSide(tuple(missing_claims(hk)), residual_text(hk, question, struct.schema_words | covered), covered)


def _hk_side(hk: str, question: str, struct: _Struct, stock: StockPhrases = NO_STOCK) -> _HKSide:
    """The hidden knowledge's missing-claims, residual text (its stock-covered stems left out) and stock-covered
    stems (cached per hidden knowledge, question, schema words and stock table)."""
    key = (hk, question, struct.schema_words, stock.phrases)
    hit = _HK_SIDES.get(key)
    if hit is None:
        hit = _make_hk_side(hk, question, struct, stock)
        _HK_SIDES.put(key, hit)
    return hit


@dataclass
class _Pending:
    """A verdict whose similarity score is still to compute (:func:`_partial`)."""

    named: bool
    contra: tuple[str, ...]
    added: tuple[str, ...]
    feedback: str
    hk: str
    question: str
    struct: _Struct
    side: _HKSide
    hk_exclude: frozenset[str] = frozenset()
    fb_exclude: frozenset[str] = frozenset()


def _partial(sample: Sample, feedback: str, schema_identifiers: Iterable[str], judge: str,
             cached: bool = True, stock: StockPhrases = NO_STOCK) -> FeedbackVerdict | _Pending:
    """The rule of the module doc up to the score: a final verdict, or a :class:`_Pending` one. ``cached``:
    take the database's structure and the hidden knowledge's side from the caches (else compute them).
    ``stock``: the stock phrases of the sample's dataset; the stems they cover in the hidden knowledge or in
    the feedback count on neither side (:mod:`~textsql_clarify.rewards.feedback.stock`).

    Raises:
        TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
    """
    _check_args(sample, feedback)
    feedback = valid_unicode(feedback)  # a caller's lone surrogate is judged as U+FFFD, not a crash
    if not feedback.strip():
        return FeedbackVerdict(False, judge, "empty")
    if _is_sql(feedback):
        return FeedbackVerdict(False, judge, "sql")
    if cached:
        struct = _structure_of(sample, schema_identifiers)
    else:
        tables, flat = _structure(sample, schema_identifiers)
        struct = _Struct(tables, frozenset(flat), frozenset(w for ident in flat for w in ident))
    tables, idents = struct.tables, struct.idents
    fb_claims = missing_claims(feedback)
    contra = existing_claimed_missing(fb_claims, tables, idents)
    hk = sample.hidden_knowledge.strip()
    if not hk:
        return FeedbackVerdict(not contra, judge, "no_rationale", contradictions=tuple(contra))
    side = _hk_side(hk, sample.question, struct, stock) if cached else _make_hk_side(hk, sample.question, struct,
                                                                                      stock)
    both_stock = side.stock | stock.covered(feedback)
    hk_claims = list(side.claims)
    contra += [f"number:{n}" for n in number_conflicts(feedback, hk, sample.question)]
    contra += [f"affirms:{w}" for w in affirmed_missing(feedback, hk_claims, idents)]
    contra += [f"unsupported:{h}" for h in unsupported_claims(fb_claims, hk, sample.question)]
    named = (names_missing_element(fb_claims, hk_claims, idents, sample.question, both_stock)
             or singles_out_missing(feedback, fb_claims, hk_claims, idents, sample.question, both_stock))
    hk_exclude = struct.schema_words | side.stock
    if not named and not added_words(hk, sample.question, hk_exclude):
        # the rationale has no word of its own (a missing link named with the question's and the schema's
        # words): the ends of the link it says is missing are what the feedback must name
        named = names_missing_link(fb_claims, hk_claims, both_stock)
    fb_exclude = struct.schema_words | both_stock
    added = added_words(feedback, sample.question, fb_exclude)
    return _Pending(named, tuple(contra), tuple(sorted(added)), feedback, hk, sample.question, struct, side,
                    hk_exclude, fb_exclude)


def _finish(p: _Pending, judge: str, score: float, threshold: float) -> FeedbackVerdict:
    ok = (score >= threshold or p.named) and not p.contra
    return FeedbackVerdict(ok, judge, "hidden_knowledge", score, p.named, p.contra, p.added)


def _assess(sample: Sample, feedback: str, schema_identifiers: Iterable[str], judge: str,
            score_fn: Callable[[str, str, str, frozenset[str], frozenset[str]], float], threshold: float,
            cached: bool = True, stock: StockPhrases = NO_STOCK) -> FeedbackVerdict:
    """The shared rule of the offline judges (module doc); ``score_fn(feedback, hk, question, hk_exclude,
    feedback_exclude)`` is the similarity of what the feedback adds beyond the question, the schema's names and
    the stock phrases to what the hidden knowledge adds (0 when the feedback adds nothing). ``cached``,
    ``stock``: as for :func:`_partial`."""
    p = _partial(sample, feedback, schema_identifiers, judge, cached, stock)
    if isinstance(p, FeedbackVerdict):
        return p
    score = float(score_fn(p.feedback, p.hk, p.question, p.hk_exclude, p.fb_exclude)) if p.added else 0.0
    return _finish(p, judge, score, threshold)


def own_rationale_verdict(sample: Sample, schema_identifiers: Iterable[str] = (),
                          stock: StockPhrases = NO_STOCK) -> FeedbackVerdict:
    """The verdict of the offline judges when the feedback is the sample's own hidden knowledge (what the oracle
    agent says, :class:`~textsql_clarify.baselines.agents.OracleAgent`), without loading a model.

    With the feedback equal to the rationale both sides lose the same words, so the lexical recall is 1 and the
    MiniLM cosine is that of one text with itself (1) whenever anything is left, and the claim checks are shared:
    :class:`LexicalFeedbackJudge` and :class:`SemanticFeedbackJudge` agree, except where the words left are only
    numbers the MiniLM residual cannot hold (a decimal: ``3.5`` is two tokens there). The verdict is the lexical
    one, refused as well when the MiniLM residual would be empty and no naming path holds, so it accepts no
    rationale that either judge refuses.

    Args:
        sample: an unanswerable sample with a hidden knowledge.
        schema_identifiers: the table and column names of its database (any case), as the env passes them.
        stock: the stock phrases of its dataset (:func:`~.stock.corpus_stock` of the samples the env is built
            on, :meth:`LexicalFeedbackJudge.use_corpus`).
    Returns:
        A :class:`FeedbackVerdict` (``judge="lexical"``).
    Raises:
        TypeError: ``sample`` is not a Sample.
    Source: ABISS §5.3 (FB); the oracle must score FB 1.0 on every generated file.
    """
    _check_args(sample, "")
    hk = sample.hidden_knowledge
    p = _partial(sample, hk, schema_identifiers, "lexical", stock=stock)
    if isinstance(p, FeedbackVerdict):
        return p
    recall = (novel_recall(p.feedback, p.hk, p.question, p.hk_exclude, p.fb_exclude) or 0.0) if p.added else 0.0
    if recall and not residual_text(p.feedback, p.question, p.fb_exclude):
        recall = 0.0  # the MiniLM judge would embed nothing and score 0
    return _finish(p, "lexical", recall, LEXICAL_THRESHOLD)


def _check_batch(samples: Sequence[Sample], feedbacks: Sequence[str],
                 schema_identifiers_list: Sequence[Iterable[str]] | None) -> list[Iterable[str]]:
    """The identifiers of each item (``()`` when the list is ``None``).

    Raises:
        ValueError: the three sequences differ in length.
    """
    samples, feedbacks = list(samples), list(feedbacks)
    ids = [()] * len(samples) if schema_identifiers_list is None else list(schema_identifiers_list)
    if not len(samples) == len(feedbacks) == len(ids):
        raise ValueError(f"judge_many: {len(samples)} samples, {len(feedbacks)} feedbacks and {len(ids)} "
                         "schema identifier sets; give one of each per judgement")
    return ids


def judge_many(judge: Any, samples: Sequence[Sample], feedbacks: Sequence[str],
               schema_identifiers_list: Sequence[Iterable[str]] | None = None) -> list[bool]:
    """``judge.judge_many(...)`` when the judge has one, else one ``judge.judge(...)`` per item.

    Args:
        judge: any :class:`~textsql_clarify.rewards.feedback.FeedbackJudge`.
        samples, feedbacks, schema_identifiers_list: as for :meth:`SemanticFeedbackJudge.judge_many`.
    Returns:
        One bool per item, in order.
    Raises:
        ValueError: the sequences differ in length (or the judge's ``judge_many`` returned another count);
        TypeError: a sample is not a Sample or a feedback not a string.
    """
    ids = _check_batch(samples, feedbacks, schema_identifiers_list)
    many = getattr(judge, "judge_many", None)
    if callable(many):
        out = [bool(v) for v in many(list(samples), list(feedbacks), ids)]
        if len(out) != len(ids):
            raise ValueError(f"{type(judge).__name__}.judge_many returned {len(out)} verdicts for {len(ids)} items")
        return out
    return [bool(judge.judge(s, f, i)) for s, f, i in zip(samples, feedbacks, ids)]


def _use_corpus(registry: dict[str, StockPhrases], samples: Iterable[Sample]) -> StockPhrases:
    """Record the stock phrases of ``samples`` (:func:`~.stock.corpus_stock`) for each of their rationales in
    ``registry`` (a rationale already there from another dataset gets the union of both tables)."""
    samples = list(samples)
    table = corpus_stock(samples)
    merged: dict[int, StockPhrases] = {}
    for s in samples:
        hk = s.hidden_knowledge.strip() if s.group == "unanswerable" else ""
        if not hk:
            continue
        old = registry.get(hk)
        if old is None or old is table:
            registry[hk] = table
        else:
            registry[hk] = merged.setdefault(id(old), old.merged(table))
    return table


_CORPUS_DOC = """Learn the stock phrases of a dataset (:mod:`~textsql_clarify.rewards.feedback.stock`): from
        now on a feedback on one of its unanswerable samples is judged without the phrases that recur across
        many of its rationales (the env calls this with its samples when it is built, so every judgement of
        the env, its vector env and the integrations that build envs strips them).

        Args:
            samples: the dataset's samples (every group; only unanswerable ones with a rationale count).
        Returns:
            The dataset's :class:`~textsql_clarify.rewards.feedback.stock.StockPhrases`.
        """


_MANY_DOC = """{what} for many judgements at once (the vector env's step judges the feedback of all its
        sub-envs in one call).

        Contract: item ``k`` of the result is exactly ``{single}(samples[k], feedbacks[k],
        schema_identifiers_list[k])`` (same rule, same thresholds; the MiniLM score equal up to float32
        rounding, see ``docs/platform.md`` "Feedback judge speed"), in input order; the items are
        independent (no item's verdict depends on another's); nothing is written to the samples. The
        whole call raises before any item is judged when an argument is bad, so a caller can fall back
        to one call per item.

        Args:
            samples: the unanswerable samples (list of :class:`~textsql_clarify.samples.Sample`).
            feedbacks: the agents' explanations (list of str), one per sample.
            schema_identifiers_list: one iterable of table and column names per sample (any case), or
                ``None`` for none.
        Returns:
            A list of {returns}, one per item.
        Raises:
            ValueError: the three sequences differ in length.
            TypeError: a sample is not a Sample or a feedback not a string.
        """


@dataclass(frozen=True)
class LexicalFeedbackJudge:
    """Offline FB judge without models: content-word recall in place of similarity (module doc rule).

    Attributes:
        min_recall: share (0..1) of the hidden knowledge's content words the feedback must repeat, unless
            it names the missing element (:data:`LEXICAL_THRESHOLD`, calibrated on the probe set).
    """

    min_recall: float = LEXICAL_THRESHOLD
    name: str = "lexical"
    #: rationale text -> the stock phrases of its dataset (:meth:`use_corpus`); a rationale of no dataset the
    #: judge was given is judged without stock phrases.
    stock_by_rationale: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def use_corpus(self, samples: Iterable[Sample]) -> StockPhrases:
        return _use_corpus(self.stock_by_rationale, samples)

    use_corpus.__doc__ = _CORPUS_DOC

    def stock_for(self, sample: Sample) -> StockPhrases:
        """The stock phrases the judge strips on ``sample`` (the empty table when its dataset was not given)."""
        hk = getattr(sample, "hidden_knowledge", None)  # not a Sample: the rule's own check raises TypeError
        return self.stock_by_rationale.get(hk.strip(), NO_STOCK) if isinstance(hk, str) else NO_STOCK

    def assess(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> FeedbackVerdict:
        """The full verdict (see :class:`FeedbackVerdict`).

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        return _assess(sample, feedback, schema_identifiers, "lexical",
                       lambda f, h, q, x, fx: novel_recall(f, h, q, x, fx) or 0.0, self.min_recall,
                       stock=self.stock_for(sample))

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """True when ``feedback`` explains the sample's unanswerability (module doc rule).

        Args:
            sample: an unanswerable sample (the env scores feedback on solvable samples 0 itself).
            feedback: the agent's explanation.
            schema_identifiers: table and column names of the database (any case).
        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        return self.assess(sample, feedback, schema_identifiers).correct

    def assess_many(self, samples: Sequence[Sample], feedbacks: Sequence[str],
                    schema_identifiers_list: Sequence[Iterable[str]] | None = None) -> list[FeedbackVerdict]:
        ids = _check_batch(samples, feedbacks, schema_identifiers_list)
        for s, f in zip(samples, feedbacks):
            _check_args(s, f)
        return [self.assess(s, f, i) for s, f, i in zip(samples, feedbacks, ids)]

    def judge_many(self, samples: Sequence[Sample], feedbacks: Sequence[str],
                   schema_identifiers_list: Sequence[Iterable[str]] | None = None) -> list[bool]:
        return [v.correct for v in self.assess_many(samples, feedbacks, schema_identifiers_list)]

    assess_many.__doc__ = _MANY_DOC.format(what="The full verdicts", single="assess",
                                           returns=":class:`FeedbackVerdict`")
    judge_many.__doc__ = _MANY_DOC.format(what="The verdicts", single="judge", returns="bool")

    def prepare(self, sample: Sample, schema_identifiers: Iterable[str] = ()) -> None:
        """Compute and cache what the judgement of a feedback on ``sample`` needs beyond the feedback (the
        database's structure, the hidden knowledge's claims); the env calls it when it first meets a sample.

        Raises:
            TypeError: ``sample`` is not a Sample.
        """
        _prepare(sample, schema_identifiers, self.stock_for(sample))


def _prepare(sample: Sample, schema_identifiers: Iterable[str],
             stock: StockPhrases = NO_STOCK) -> tuple[_Struct, _HKSide] | None:
    _check_args(sample, "")
    struct = _structure_of(sample, schema_identifiers)
    hk = sample.hidden_knowledge.strip()
    return (struct, _hk_side(hk, sample.question, struct, stock)) if hk else None


def _embedding_caches(model: Any) -> dict[str, _LRU] | None:
    """The embedding caches of ``model`` (shared by every judge of the process that uses it), or ``None``
    when the model takes no weak reference."""
    with _EMB_LOCK:
        try:
            caches = _EMBEDDINGS.get(model)
            if caches is None:
                caches = _EMBEDDINGS[model] = {"hk": _LRU(CACHE_SIZES["hk_embedding"]),
                                               "feedback": _LRU(CACHE_SIZES["feedback_embedding"])}
        except TypeError:
            return None
    return caches


@dataclass
class SemanticFeedbackJudge:
    """Offline FB judge: MiniLM cosine similarity to the hidden knowledge plus the checks (module doc rule).

    The model loads on first use (:func:`load_minilm`, cached per process). When it cannot load, the
    judge warns once and decides with :class:`LexicalFeedbackJudge`; :attr:`used` then says
    ``"lexical"``.

    Attributes:
        threshold: cosine similarity (-1..1) at or above which the feedback matches
            (:data:`MINILM_THRESHOLD`, calibrated on the probe set).
        model: a preloaded ``SentenceTransformer`` (or anything with ``encode(list[str],
            normalize_embeddings=True, show_progress_bar=False)`` returning unit vectors); ``None`` loads MiniLM.
        fallback: the judge used when MiniLM is unavailable.
        cache: keep the hidden knowledge's side (structure, claims, embedding) and recent feedback
            embeddings in the process's LRU caches and embed only what is not there. ``False``
            is the uncached path: every judgement parses both sides and embeds the pair in one
            encode call.
        num_threads: torch threads for each encode call (:func:`~textsql_clarify.minilm.torch_threads`:
            set for the call, restored after it; process-wide while it runs). ``1`` (the default): fast for
            short sentences and the same float results whatever the machine's load, so the same seed gives
            the same verdicts (``docs/simulator.md``, "Determinism"; a different thread count moves a cosine score by up
            to about 1e-7). ``"auto"``: one thread while the machine is busy (1-minute load average at or above
            the CPUs this process may use), where a second thread that the OS has descheduled stalls every matrix product (7x slower
            measured on 2 loaded cores), else torch's own setting, which is faster on an idle machine
            (:func:`auto_threads`); it depends on the load, so a score within about 1e-7 of the threshold may
            be decided differently from one run to the next; an int: that many; ``None``: torch's setting.
        lean: with ``cache``, embed through :func:`~textsql_clarify.minilm.lean_encoder` (the same
            operations as ``SentenceTransformer.encode`` with about 40 % less time per short sentence;
            used only where it matches ``encode`` on its check texts), else through ``model.encode``.
    """

    threshold: float = MINILM_THRESHOLD
    model: Any = None
    fallback: LexicalFeedbackJudge = field(default_factory=LexicalFeedbackJudge)
    cache: bool = True
    num_threads: int | str | None = 1
    lean: bool = True
    used: str = field(default="minilm", init=False)
    name: str = field(default="minilm", init=False)
    #: as :attr:`LexicalFeedbackJudge.stock_by_rationale` (shared with the fallback by :meth:`use_corpus`).
    stock_by_rationale: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def use_corpus(self, samples: Iterable[Sample]) -> StockPhrases:
        samples = list(samples)
        if hasattr(self.fallback, "use_corpus"):
            self.fallback.use_corpus(samples)
        return _use_corpus(self.stock_by_rationale, samples)

    use_corpus.__doc__ = _CORPUS_DOC

    def stock_for(self, sample: Sample) -> StockPhrases:
        """The stock phrases the judge strips on ``sample`` (the empty table when its dataset was not given)."""
        hk = getattr(sample, "hidden_knowledge", None)  # not a Sample: the rule's own check raises TypeError
        return self.stock_by_rationale.get(hk.strip(), NO_STOCK) if isinstance(hk, str) else NO_STOCK

    def _model(self):
        if self.model is None and self.used == "minilm":
            try:
                self.model = load_minilm(purpose="the feedback judge's sentence encoder")
            except (ImportError, OSError) as e:
                warnings.warn(f"MiniLM unavailable ({e}); the feedback judge falls back to the lexical judge",
                              RuntimeWarning, stacklevel=3)
                self.used = "lexical"
        return self.model if self.used == "minilm" else None

    def _encode(self, texts: list[str]):
        texts = [valid_unicode(t) for t in texts]  # the tokenizer refuses lone surrogates
        with torch_threads(auto_threads() if self.num_threads == "auto" else self.num_threads):
            lean = _lean_for(self.model) if self.cache and self.lean else None
            if lean is not None:
                return lean(texts)
            return self.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of the MiniLM embeddings of two texts (embedded together, nothing cached).

        Raises:
            RuntimeError: MiniLM is unavailable.
        """
        if self._model() is None:
            raise RuntimeError("MiniLM is unavailable")
        va, vb = self._encode([a, b])
        return float((va * vb).sum())

    def assess(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> FeedbackVerdict:
        """The full verdict (see :class:`FeedbackVerdict`); ``judge`` says which judge decided.

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        if self._model() is None:
            return self.fallback.assess(sample, feedback, schema_identifiers)
        if not self.cache:
            return _assess(sample, feedback, schema_identifiers, "minilm", self.residual_similarity, self.threshold,
                           cached=False, stock=self.stock_for(sample))
        return self.assess_many([sample], [feedback], [schema_identifiers])[0]

    def assess_many(self, samples: Sequence[Sample], feedbacks: Sequence[str],
                    schema_identifiers_list: Sequence[Iterable[str]] | None = None) -> list[FeedbackVerdict]:
        return self._many(samples, feedbacks, schema_identifiers_list, full=True)

    def _many(self, samples: Sequence[Sample], feedbacks: Sequence[str],
              schema_identifiers_list: Sequence[Iterable[str]] | None, full: bool) -> list:
        """Full verdicts (``full``), or only their ``correct`` flags: then a feedback whose verdict the rule
        decides without the score (it contradicts the schema or the hidden knowledge, or it names the
        missing element) is not embedded, since ``(score >= threshold or named) and not contradictions`` is
        then ``not contradictions`` whatever the score."""
        ids = _check_batch(samples, feedbacks, schema_identifiers_list)
        for s, f in zip(samples, feedbacks):
            _check_args(s, f)
        if self._model() is None or not self.cache:
            vs = (self.fallback.assess_many(samples, feedbacks, ids) if self._model() is None
                  else [self.assess(s, f, i) for s, f, i in zip(samples, feedbacks, ids)])
            return vs if full else [v.correct for v in vs]
        parts = [_partial(s, f, i, "minilm", stock=self.stock_for(s)) for s, f, i in zip(samples, feedbacks, ids)]
        pairs: list[tuple[str, str] | None] = []  # (feedback residual, hidden-knowledge residual) per pending item
        for p in parts:
            pair = None
            if isinstance(p, _Pending) and p.added and (full or not (p.contra or p.named)):
                a = residual_text(p.feedback, p.question, p.fb_exclude)
                if a and p.side.residual:
                    pair = (a, p.side.residual)
            pairs.append(pair)
        vecs = self._embed({"feedback": {a for pr in pairs if pr for a in pr[:1]},
                            "hk": {b for pr in pairs if pr for b in pr[1:]}})
        out = []
        for p, pr in zip(parts, pairs):
            if isinstance(p, FeedbackVerdict):
                out.append(p if full else p.correct)
            elif not full and (p.contra or p.named):
                out.append(not p.contra)  # decided without the score (see above)
            else:
                score = float((vecs["feedback"][pr[0]] * vecs["hk"][pr[1]]).sum()) if pr else 0.0
                v = _finish(p, "minilm", score, self.threshold)
                out.append(v if full else v.correct)
        return out

    def _embed(self, wanted: dict[str, set[str]]) -> dict[str, dict[str, Any]]:
        """``{"feedback"|"hk": {text: unit vector}}`` for the wanted texts: cached ones from the caches, the
        others in one encode call (then cached)."""
        caches = _embedding_caches(self.model)
        got: dict[str, dict[str, Any]] = {k: {} for k in wanted}
        todo: list[tuple[str, str]] = []
        for kind, texts in wanted.items():
            for t in sorted(texts):
                v = caches[kind].get(t) if caches is not None else None
                if v is None:
                    todo.append((kind, t))
                else:
                    got[kind][t] = v
        if todo:
            vecs = self._encode([t for _, t in todo])
            for (kind, t), v in zip(todo, vecs):
                v = v.copy() if hasattr(v, "copy") else v  # a row of the batch: keep it alone, not the batch
                got[kind][t] = v
                if caches is not None:
                    caches[kind].put(t, v)
        return got

    def judge_many(self, samples: Sequence[Sample], feedbacks: Sequence[str],
                   schema_identifiers_list: Sequence[Iterable[str]] | None = None) -> list[bool]:
        return self._many(samples, feedbacks, schema_identifiers_list, full=False)

    assess_many.__doc__ = _MANY_DOC.format(what="The full verdicts", single="assess",
                                           returns=":class:`FeedbackVerdict`") + """
        The MiniLM judge embeds the residual texts of all the feedbacks (and of any hidden knowledge not
        yet cached) in one encode call."""
    judge_many.__doc__ = _MANY_DOC.format(what="The verdicts", single="judge", returns="bool") + """
        Only the feedbacks whose verdict depends on the similarity score are embedded (one encode call):
        one that contradicts the schema or the hidden knowledge fails, and one that names the missing
        element passes, whatever its score."""

    def prepare(self, sample: Sample, schema_identifiers: Iterable[str] = ()) -> None:
        """Compute and cache what judging a feedback on ``sample`` needs beyond the feedback: the database's
        structure, the hidden knowledge's claims, residual text and, once the encoder is loaded, its
        embedding. The env calls it when it first meets a sample, so a judgement embeds only its feedback.

        It never loads MiniLM itself (an env that never sees a feedback does not pay the load): before the
        first judgement the embedding is left to that judgement, which embeds the hidden knowledge in the
        same encode call as its feedback (about the cost of the feedback alone). Nothing is embedded with
        ``cache=False`` or after a fallback to the lexical judge.

        Raises:
            TypeError: ``sample`` is not a Sample.
        """
        prep = _prepare(sample, schema_identifiers, self.stock_for(sample))
        if prep is None or not self.cache or self.model is None or self.used != "minilm" or not prep[1].residual:
            return
        self._embed({"hk": {prep[1].residual}})

    def residual_similarity(self, feedback: str, hidden_knowledge: str, question: str,
                            exclude: frozenset[str] = frozenset(),
                            feedback_exclude: frozenset[str] | None = None) -> float:
        """Cosine similarity of what the feedback and the hidden knowledge each say beyond the question
        and the ``exclude`` stems (:func:`~textsql_clarify.rewards.feedback.words.residual_text`); 0.0 when
        either says nothing more. ``feedback_exclude``: the stems left out of the feedback instead (``None``:
        ``exclude``). Both texts are embedded together; nothing is cached.

        Raises:
            RuntimeError: MiniLM is unavailable.
        """
        fx = exclude if feedback_exclude is None else feedback_exclude
        a, b = residual_text(feedback, question, fx), residual_text(hidden_knowledge, question, exclude)
        if not a or not b:
            return 0.0
        return self.similarity(a, b)

    def judge(self, sample: Sample, feedback: str, schema_identifiers: Iterable[str] = ()) -> bool:
        """True when ``feedback`` explains the sample's unanswerability (module doc rule); ``assess(...).correct``,
        without embedding the feedback where the rule decides without the score (:meth:`judge_many`).

        Raises:
            TypeError: ``sample`` is not a Sample or ``feedback`` not a string.
        """
        if not self.cache or self._model() is None:
            return self.assess(sample, feedback, schema_identifiers).correct
        return self.judge_many([sample], [feedback], [schema_identifiers])[0]
