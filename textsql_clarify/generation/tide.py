"""TIDE-Bench's model recipes: chain injection, drift cross-validation, triplet assembly (TIDE §3, App. B).

Three recipes, each a :class:`textsql_clarify.generation.base.Recipe` over a council of models
(:class:`textsql_clarify.generation.council.Council`):

* :class:`TideChainRecipe` (``tide_chain``): anchor selection (TIDE §3.2: the anchor executes, returns
  data and carries enough structure for two layers), then chain injection in two layers (App. B.1: the
  generator writes an underspecified question and the first clarification L1 with its chosen and unchosen
  answers; then the dependent second layer L2), then the SQL of the unchosen readings checked by execution
  in the read-only sandbox (ours: they become the sample's interpretations), then the judges of Table 6 in
  priority order (plausibility, re-ask, counterfactual test: every judge must pass each; a judge that finds
  L2 ``invariant`` rejects the candidate), then the evidence rewrite of App. B.3 where the anchor has evidence.
  The accepted sample is ambiguous, with ``Chain(l1, l2, verdict)``.
* :class:`TideDriftRecipe` (``tide_drift``): drift candidates with TIDE Table 7's checks, from the model-free
  :class:`textsql_clarify.generation.drift.DriftRecipe` (default) or written by the generator
  (:class:`ModelDriftSource`, option ``tide_drift_source=model``), then the LLM cross-validation of App. B.2:
  drift fit, then stability, each passed by every judge.
* :class:`TideTripletRecipe` (``tide_triplets``): a chain and a drift over the same anchor, assembled into
  TIDE's triplet (§3.1, §3.2 "triplet assembly"): chain-only, drift-only and joint samples, marked in
  provenance (``triplet``, ``sample_type``); :func:`textsql_clarify.rewards.metrics.aggregate`'s
  ``by_sample_type`` reads them from the samples' chain and drift.

Votes: TIDE accepts a candidate only when both of its judges pass it (App. B.1, B.2), so a criterion passes
only when every council model votes ``pass`` (unanimity; a single-model council is its own judge). The
counterfactual verdict is the judges' majority among eliminated / transformed; a tie between the two goes to
``transformed``, the weaker claim (ours: TIDE reports agreement, not its tie rule).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Sequence

from ..errors import SQLParseError
from ..rewards.commitments import commitment_set
from ..rewards.execution import is_empty_result, score_execution
from ..samples import Chain, ChainLayer, DriftEvent, Interpretation, Sample
from ..sql.sandbox import ExecutionResult, SQLiteSandbox, get_sandbox
from ..sql.schema import parse_for_analysis
from ..taxonomy import SUBCATEGORIES
from . import tide_prompts as P
from .base import Accepted, Anchor, GenContext, OptionSpec, Outcome, Rejected
from .drift import DRIFT_OPTIONS

__all__ = ["TideChainRecipe", "TideDriftRecipe", "TideTripletRecipe", "ModelDriftSource", "unanimous",
           "reading_problem", "anchor_problem", "feasible_subtypes", "CHAIN_STAGES", "CROSS_STAGES",
           "DRIFT_SOURCES"]

#: :class:`TideChainRecipe`'s checks, in order.
CHAIN_STAGES = ("anchor", "l1_format", "l2_format", "alternatives", "plausibility", "re_ask", "counterfactual",
                "evidence")
#: the LLM cross-validation stages that :class:`TideDriftRecipe` adds after the drift recipe's own checks.
CROSS_STAGES = ("drift_fit", "stability")
#: the values of the ``tide_drift_source`` option: the model-free recipe's candidates, or the generator's
#: (TIDE App. B.2).
DRIFT_SOURCES = ("rules", "model")
#: the ambiguous ABISS subcategories a chain's L1 may be labelled with.
_AMBIGUOUS = tuple(n for n, s in SUBCATEGORIES.items() if s.group == "ambiguous")


#: ``--option`` names the chain recipe reads.
CHAIN_OPTIONS: dict[str, OptionSpec] = {
    "tide_min_commitments": OptionSpec("int", "2", "fewest commitments an anchor needs", minimum=0),
    "max_new_tokens": OptionSpec("int", "320", "most tokens per generation", minimum=1),
}
#: ``--option`` names the cross-validated drift recipe reads: its source's (drift's, or the model source's
#: ``max_new_tokens``) and ``tide_drift_source``.
TIDE_DRIFT_OPTIONS: dict[str, OptionSpec] = {
    "tide_drift_source": OptionSpec("choice", "rules", "where the drift candidates come from",
                                    choices=DRIFT_SOURCES),
    "max_new_tokens": CHAIN_OPTIONS["max_new_tokens"],
}


def _opt_int(ctx: GenContext, key: str, default: int) -> int:
    raw = ctx.options.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"option {key}={raw!r} must be an integer") from None


def _council(ctx: GenContext, recipe: str):
    if ctx.council is None:
        raise ValueError(f"recipe {recipe!r} needs a council of models (--model SPEC)")
    return ctx.council


def _sandbox(db_path: str, ctx: GenContext) -> SQLiteSandbox:
    """The shared read-only sandbox of a database (``mode=ro``; never written)."""
    return get_sandbox(db_path, timeout_s=ctx.timeout_s)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def unanimous(council, messages: list[dict]) -> tuple[bool, str]:
    """One pass/fail criterion judged by every council model (TIDE App. B.1, B.2: accepted only when both judges
    pass, "requiring agreement on validity").

    Args:
        council: a :class:`~textsql_clarify.generation.council.Council`.
        messages: the judging prompt (its cue is followed by ``pass`` or ``fail``).
    Returns:
        ``(passed, summary)``: ``passed`` when every model chose ``pass``; the vote's summary text.
    """
    v = council.vote(messages, (P.PASS, P.FAIL), tie=P.FAIL)
    return all(o == P.PASS for o in v.votes.values()), v.summary()


def anchor_problem(anchor: Anchor, sandbox: SQLiteSandbox, *, min_commitments: int = 2) -> str | None:
    """TIDE §3.2 anchor selection for one anchor: why it cannot carry a chain, or ``None``.

    The gold must parse, execute (not truncated) and return data, and its commitment set (TIDE App. A,
    :func:`textsql_clarify.rewards.commitments.commitment_set`) must hold at least ``min_commitments`` units
    (TIDE: "enough structural complexity for two-layer chain injection"; our threshold).

    Args:
        anchor: the anchor.
        sandbox: its database's read-only sandbox.
        min_commitments: the fewest commitment units accepted (>= 1).
    """
    try:
        parse_for_analysis(anchor.gold_sql)
        units = commitment_set(anchor.gold_sql)
    except SQLParseError as e:
        return f"the anchor's gold does not parse: {e.reason}"
    r = sandbox.execute(anchor.gold_sql)
    if not r.ok:
        return f"the anchor's gold fails ({r.error_kind}): {r.error_message}"
    if r.truncated:
        return "the anchor's gold result is truncated at the row cap"
    if is_empty_result(r):
        return "the anchor's gold returns no data"
    if len(units) < min_commitments:
        return f"the anchor's gold has {len(units)} commitment unit(s), fewer than {min_commitments}"
    return None


def reading_problem(sql: str, gold: ExecutionResult, gold_sql: str, sandbox: SQLiteSandbox) -> str | None:
    """Why another reading's SQL cannot be an interpretation of a sample whose gold is ``gold_sql``, or ``None``.

    The SQL must parse, execute in the read-only sandbox (not truncated), return data, and differ from the gold
    under the env's scorer: neither the strict EX match of either result taken as the gold, nor a relaxed-EX
    match of the reading submitted as the answer (the load-time ``indistinguishable`` test,
    :mod:`textsql_clarify.datasets.validate`).

    Args:
        sql: the reading's SQL.
        gold, gold_sql: the gold's result and text.
        sandbox: the database's sandbox.
    """
    try:
        parse_for_analysis(sql)
    except SQLParseError as e:
        return f"does not parse: {e.reason}"
    r = sandbox.execute(sql)
    if not r.ok:
        return f"fails ({r.error_kind}): {r.error_message}"
    if r.truncated:
        return "its result is truncated at the row cap"
    if is_empty_result(r):
        return "returns no data"
    for k, (pred, pred_sql, g, g_sql) in enumerate(((r, sql, gold, gold_sql), (gold, gold_sql, r, sql))):
        relaxed, strict = score_execution(pred, g, pred_sql, g_sql, sandbox)
        if strict.status == "match" or (k == 0 and relaxed.status == "match"):
            return "returns the same result as the gold"
    return None


class TideChainRecipe:
    """TIDE chain injection (§2.1, §3.2, App. B.1, Table 6) over a council: ``tide_chain``.

    Stages (:data:`CHAIN_STAGES`), each able to reject:

    1. ``anchor``: :func:`anchor_problem` (option ``tide_min_commitments``, default 2).
    2. ``l1_format``: the L1 reply (:func:`~.tide_prompts.chain_l1_messages`) is a JSON object with the
       underspecified ``question``, ``clarification``, ``answer`` and ``alternative``; the question differs from
       the anchor's and the two answers differ.
    3. ``l2_format``: the L2 reply (:func:`~.tide_prompts.chain_l2_messages`), the same fields but ``question``;
       L2's clarification differs from L1's.
    4. ``alternatives``: every unchosen reading's SQL that the generator gave (``alternative_sql`` of L1: the
       reading under the L1 alternative; of L2: the L1 answer with the L2 alternative) passes
       :func:`reading_problem`, and at least one is given (ours: they are the sample's interpretations, so that
       asking is rewarded).
    5. ``plausibility``, 6. ``re_ask``: TIDE Table 6's first two criteria, each passed by every judge
       (:func:`unanimous`).
    7. ``counterfactual``: each judge gives the counterfactual verdict; any ``invariant`` rejects; the verdict
       is the majority, a tie going to ``transformed``.
    8. ``evidence``: only for an anchor with evidence (TIDE App. B.3): the generator rewrites it without the
       cues that settle L1 or L2; rejected when the reply is not JSON or still holds a chosen answer verbatim.

    Options (``ctx.options``): ``tide_min_commitments`` (int, 2), ``max_new_tokens`` (int, 320).
    """

    name = "tide_chain"
    stages = CHAIN_STAGES
    needs_model = True
    options = CHAIN_OPTIONS

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """One chain candidate per anchor, accepted or rejected at its first failed stage.

        Raises:
            ValueError: no council in ``ctx``, or a malformed option.
        """
        return [self.build(anchor, rng, ctx)]

    def build(self, anchor: Anchor, rng: random.Random, ctx: GenContext, *, sample_id: str | None = None,
              sample_type: str = "chain_only") -> Outcome:
        """The chain candidate of ``anchor`` (the stages of the class docstring).

        Args:
            anchor, rng, ctx: as :meth:`run`.
            sample_id: the accepted sample's id; default ``f"tide_chain-{anchor.id}"``.
            sample_type: written to ``provenance["sample_type"]``.
        Returns:
            :class:`Accepted` (the ambiguous chain sample) or :class:`Rejected`.
        """
        council = _council(ctx, self.name)
        tokens = _opt_int(ctx, "max_new_tokens", 320)
        seed = rng.randrange(2 ** 31)
        verdicts: dict[str, Any] = {}
        sb = _sandbox(anchor.db_path, ctx)
        why = anchor_problem(anchor, sb, min_commitments=_opt_int(ctx, "tide_min_commitments", 2))
        if why:
            return Rejected("anchor", why)
        verdicts["anchor"] = "pass"
        schema = P.schema_summary(anchor.db_path)

        reply = council.write(P.chain_l1_messages(anchor.question, anchor.gold_sql, schema, anchor.evidence),
                              max_new_tokens=tokens, seed=seed)
        l1 = P.parse_json_reply(reply, ("question", "clarification", "answer", "alternative"))
        if isinstance(l1, str):
            return Rejected("l1_format", l1)
        question = l1["question"].strip()
        if _norm(question) == _norm(anchor.question):
            return Rejected("l1_format", "the initial question is the anchor's question: nothing is left open")
        if _norm(l1["answer"]) == _norm(l1["alternative"]):
            return Rejected("l1_format", "L1's chosen and unchosen answers are the same")
        verdicts["l1_format"] = "pass"

        reply = council.write(P.chain_l2_messages(anchor.question, anchor.gold_sql, schema, question, l1,
                                                  anchor.evidence), max_new_tokens=tokens, seed=seed)
        l2 = P.parse_json_reply(reply, ("clarification", "answer", "alternative"))
        if isinstance(l2, str):
            return Rejected("l2_format", l2)
        if _norm(l2["answer"]) == _norm(l2["alternative"]):
            return Rejected("l2_format", "L2's chosen and unchosen answers are the same")
        if _norm(l2["clarification"]) == _norm(l1["clarification"]):
            return Rejected("l2_format", "L2 asks the same clarification as L1")
        verdicts["l2_format"] = "pass"

        gold = sb.execute(anchor.gold_sql)
        interps: list[Interpretation] = []
        readings = (("L1", l1, l1["alternative"]), ("L2", l2, f"{l1['answer']} {l2['alternative']}"))
        for layer, reply_obj, hk in readings:
            alt_sql = reply_obj.get("alternative_sql")
            if not isinstance(alt_sql, str) or not alt_sql.strip():
                continue
            why = reading_problem(alt_sql.strip(), gold, anchor.gold_sql, sb)
            if why:
                return Rejected("alternatives", f"the {layer} alternative's SQL {why}")
            if any(it.gold_sql == alt_sql.strip() for it in interps):
                continue
            interps.append(Interpretation(alt_sql.strip(), hk.strip(),
                                          f"{layer} alternative: {reply_obj['alternative']}"))
        if not interps:
            return Rejected("alternatives", "no unchosen reading comes with SQL")
        verdicts["alternatives"] = f"pass ({len(interps)} reading(s))"

        for crit in ("plausibility", "re_ask"):
            ok, summary = unanimous(council, P.chain_judge_messages(crit, question, l1, l2))
            if not ok:
                return Rejected(crit, f"not every judge passed it: {summary}")
            verdicts[crit] = summary

        v = council.vote(P.counterfactual_messages(question, l1, l2), P.VERDICT_OPTIONS)
        if any(o == "invariant" for o in v.votes.values()):
            return Rejected("counterfactual", f"a judge finds L2 invariant under the L1 alternative: {v.summary()}")
        verdict = v.winner if v.winner in ("eliminated", "transformed") else "transformed"
        verdicts["counterfactual"] = f"{verdict}: {v.summary()}"

        evidence = tuple(anchor.evidence)
        if evidence:
            reply = council.write(P.evidence_rewrite_messages(evidence, question, l1, l2, anchor.gold_sql),
                                  max_new_tokens=tokens, seed=seed)
            obj = P.parse_json_reply(reply, ())
            if isinstance(obj, str) or not isinstance(obj.get("evidence"), str):
                return Rejected("evidence", obj if isinstance(obj, str) else "field 'evidence' is missing")
            text = obj["evidence"].strip()
            for lay in (l1, l2):
                if len(_norm(lay["answer"])) >= 8 and _norm(lay["answer"]) in _norm(text):
                    return Rejected("evidence", "the rewritten evidence still states a chosen answer")
            evidence = (text,) if text else ()
            verdicts["evidence"] = "pass (rewritten)"

        sub = l1.get("subcategory")
        sub = sub.strip() if isinstance(sub, str) and sub.strip() in _AMBIGUOUS else None
        chain = Chain(ChainLayer(l1["clarification"].strip(), l1["answer"].strip(), l1["alternative"].strip()),
                      ChainLayer(l2["clarification"].strip(), l2["answer"].strip(), l2["alternative"].strip()),
                      verdict)
        sample = Sample(
            id=sample_id or f"{self.name}-{anchor.id}", db_id=anchor.db_id, db_path=anchor.db_path, question=question,
            group="ambiguous", subcategory=sub, gold_sql=anchor.gold_sql,
            hidden_knowledge=f"{chain.l1.answer} {chain.l2.answer}", evidence=evidence, difficulty=anchor.difficulty,
            interpretations=tuple(interps), chain=chain,
            provenance={"sample_type": sample_type, "anchor_question": anchor.question, "chain_verdict": verdict},
        )
        return Accepted(sample, verdicts)


def feasible_subtypes(gold_sql: str, schema=None) -> list[str]:
    """The drift subtypes an anchor admits (TIDE §3.2 anchor selection (iii), Algorithm 1): ``value`` needs a
    filtering predicate with a literal, ``constraint`` a filtering predicate, ``projection`` is always possible.

    Args:
        gold_sql: the anchor's gold.
        schema: ``{table: {column: type}}`` for column resolution, or ``None``.
    Raises:
        SQLParseError: the gold cannot be analysed.
    """
    where = [c for c in commitment_set(gold_sql, schema) if c.kind == "where"]
    out = []
    if any(c.value_form != c.structural_form for c in where):
        out.append("value")
    if where:
        out.append("constraint")
    return out + ["projection"]


class ModelDriftSource:
    """Drift candidates written by the council's generator (TIDE §3.2 "drift injection", App. B.2 "Generation"):
    per anchor, one candidate of a pre-assigned subtype (chosen with ``rng`` among :func:`feasible_subtypes`;
    TIDE balances subtypes across anchors), checked by TIDE Table 7: ``json_format`` (the reply holds
    ``utterance`` and ``post_drift_sql``), then the drift recipe's AST and execution checks
    (:func:`textsql_clarify.generation.drift_checks.check_drift_candidate`: parses, executes, non_empty,
    distinct_result, non_monotone, subtype_scope, utterance). Accepted samples look like the model-free
    recipe's: the anchor's question and gold with the drift event, id ``drift-<anchor>-<subtype>``.

    Options (``ctx.options``): ``max_new_tokens`` (int, 320).
    """

    name = "drift"
    needs_model = True

    def __init__(self):
        from .drift_checks import STAGES

        self.stages = ("json_format",) + tuple(STAGES)

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """One generated drift candidate of ``anchor``, accepted or rejected at its first failed check.

        Raises:
            ValueError: no council in ``ctx``, or a malformed option.
        """
        from .drift_checks import check_drift_candidate

        council = _council(ctx, "tide_drift")
        sb = _sandbox(anchor.db_path, ctx)
        pre = sb.execute(anchor.gold_sql)
        if not pre.ok or pre.truncated:
            return [Rejected("executes", f"the anchor's gold SQL fails ({pre.error_kind or 'truncated'})")]
        if is_empty_result(pre):
            return [Rejected("non_empty", "the anchor's gold SQL returns no data")]
        try:
            subtype = rng.choice(feasible_subtypes(anchor.gold_sql, sb.schema))
        except SQLParseError as e:
            return [Rejected("parses", f"the anchor's gold SQL cannot be analysed: {e.reason}")]
        reply = council.write(P.drift_gen_messages(anchor.question, anchor.gold_sql, P.schema_summary(anchor.db_path),
                                                   subtype),
                              max_new_tokens=_opt_int(ctx, "max_new_tokens", 320), seed=rng.randrange(2 ** 31))
        obj = P.parse_json_reply(reply, ("utterance", "post_drift_sql"))
        if isinstance(obj, str):
            return [Rejected("json_format", f"{subtype}: {obj}")]
        utt, post = obj["utterance"].strip(), obj["post_drift_sql"].strip().rstrip(";").strip()
        res = check_drift_candidate(anchor.gold_sql, post, subtype, utt, sb, pre_result=pre)
        if not res.passed:
            return [Rejected(res.stage, f"{subtype}: {res.reason}")]
        sample = Sample(
            id=f"drift-{anchor.id}-{subtype}", db_id=anchor.db_id, db_path=anchor.db_path, question=anchor.question,
            group="answerable",
            subcategory="answerable_with_evidence" if anchor.evidence else "answerable_without_evidence",
            gold_sql=anchor.gold_sql, evidence=tuple(anchor.evidence), difficulty=anchor.difficulty,
            drift=DriftEvent(utt, post, subtype),
            provenance={"subtype": subtype, "edit": "written by the generator", "candidate_source": "model"})
        return [Accepted(sample, {"json_format": "pass", **res.verdicts})]


class TideDriftRecipe:
    """TIDE drift injection with LLM cross-validation (§3.2, App. B.2): ``tide_drift``.

    The candidates and their AST checks (TIDE Table 7) come from ``source``: by default the option
    ``tide_drift_source`` picks it per run, ``rules`` (default: the model-free
    :class:`textsql_clarify.generation.drift.DriftRecipe`) or ``model`` (:class:`ModelDriftSource`: the
    generator writes them, as TIDE does). Each candidate the source accepts then goes to the council's
    cross-validation, in TIDE's priority order: ``drift_fit`` (the post-drift SQL matches the subtype and what
    the user said) and ``stability`` (what the user did not touch is unchanged), each passed by every judge
    (:func:`unanimous`). Accepted samples are re-identified ``tide_drift-<anchor>-<subtype>``.

    Args:
        source: a fixed candidate source (a :class:`~textsql_clarify.generation.base.Recipe` whose accepted
            samples carry a drift event); ``None``: chosen by the ``tide_drift_source`` option.
    """

    name = "tide_drift"
    needs_model = True
    options = {**DRIFT_OPTIONS, **TIDE_DRIFT_OPTIONS}

    def __init__(self, source: Any | None = None):
        from .drift_checks import STAGES

        self._fixed = source
        self._sources: dict[str, Any] = {}
        own = tuple(source.stages) if source is not None else ("json_format",) + tuple(STAGES)
        self.stages = own + tuple(s for s in CROSS_STAGES if s not in own)

    def source_for(self, ctx: GenContext) -> Any:
        """The candidate source of this run: the fixed one, else the ``tide_drift_source`` option's.

        Raises:
            ValueError: an unknown ``tide_drift_source``.
        """
        if self._fixed is not None:
            return self._fixed
        kind = ctx.options.get("tide_drift_source", "rules")
        if kind not in DRIFT_SOURCES:
            raise ValueError(f"option tide_drift_source={kind!r}; valid: {', '.join(DRIFT_SOURCES)}")
        if kind not in self._sources:
            if kind == "rules":
                from .drift import DriftRecipe

                self._sources[kind] = DriftRecipe()
            else:
                self._sources[kind] = ModelDriftSource()
        return self._sources[kind]

    def cross_validate(self, acc: Accepted, ctx: GenContext, *, sample_id: str | None = None,
                       sample_type: str | None = None) -> Outcome:
        """The cross-validation of one accepted drift candidate.

        Args:
            acc: an accepted drift sample (its ``drift`` set).
            ctx: the context (its council judges).
            sample_id: the id of the accepted sample; default ``tide_drift-`` + the part after the source's name.
            sample_type: written to ``provenance["sample_type"]`` when given.
        Returns:
            :class:`Accepted` (the sample re-identified, the judges' verdicts added) or :class:`Rejected`.
        Raises:
            ValueError: no council, or ``acc`` has no drift event.
        """
        council = _council(ctx, self.name)
        s = acc.sample
        if s.drift is None:
            raise ValueError(f"cross_validate needs a drift sample, got {s.id!r} without one")
        verdicts = dict(acc.verdicts)
        for crit in CROSS_STAGES:
            ok, summary = unanimous(council, P.drift_judge_messages(crit, s.gold_sql, s.drift.utterance,
                                                                    s.drift.post_gold_sql, s.drift.subtype))
            if not ok:
                return Rejected(crit, f"not every judge passed it: {summary}")
            verdicts[crit] = summary
        if sample_id is None:
            tail = s.id[len("drift-"):] if s.id.startswith("drift-") else s.id
            sample_id = f"{self.name}-{tail}"
        prov = dict(s.provenance)
        prov.setdefault("candidate_source", "rules")
        if sample_type is not None:
            prov["sample_type"] = sample_type
        return Accepted(dataclasses.replace(s, id=sample_id, provenance=prov), verdicts, acc.paired)

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """The source's outcomes for ``anchor``, its accepted ones cross-validated.

        Raises:
            ValueError: no council in ``ctx``.
        """
        _council(ctx, self.name)
        return [self.cross_validate(o, ctx) if isinstance(o, Accepted) else o
                for o in self.source_for(ctx).run(anchor, rng, ctx)]


class TideTripletRecipe:
    """TIDE triplet assembly (§3.1 paired factorial design, §3.2): ``tide_triplets``.

    Per anchor: the chain candidate (:class:`TideChainRecipe`); when it is accepted, the cross-validated drift
    candidates (:class:`TideDriftRecipe`); when one survives, one of them (a subtype drawn with ``rng``
    uniformly among the surviving subtypes, then its first candidate; TIDE balances the subtypes) makes three
    samples over the same anchor and schema:

    * ``tide_triplets-<anchor>-chain_only``: the chain sample, no drift;
    * ``tide_triplets-<anchor>-drift_only``: the anchor's own question with the drift event (answerable);
    * ``tide_triplets-<anchor>-joint``: the chain sample with the same drift event (chain, then drift, the
      order TIDE's Joint samples follow).

    Each carries ``provenance["triplet"]`` (the anchor id) and ``provenance["sample_type"]``. A chain rejection
    is the anchor's only outcome; the drift candidates' rejections are passed through; accepted drift
    candidates not chosen are :class:`Rejected` at stage ``triplet`` (one subtype per triplet), as is an anchor
    whose chain passed and whose every drift candidate failed.

    Args:
        chain: the chain recipe; default :class:`TideChainRecipe`.
        drift: the cross-validated drift recipe; default :class:`TideDriftRecipe`.
    """

    name = "tide_triplets"
    needs_model = True
    options = {**DRIFT_OPTIONS, **TIDE_DRIFT_OPTIONS, **CHAIN_OPTIONS}

    def __init__(self, chain: TideChainRecipe | None = None, drift: TideDriftRecipe | None = None):
        self.chain = chain or TideChainRecipe()
        self.drift = drift or TideDriftRecipe()
        stages = list(self.chain.stages)
        stages += [s for s in self.drift.stages if s not in stages]
        self.stages = tuple(stages) + ("triplet",)

    def run(self, anchor: Anchor, rng: random.Random, ctx: GenContext) -> Sequence[Outcome]:
        """The triplet of ``anchor`` (three :class:`Accepted`), or the rejections (class docstring).

        Raises:
            ValueError: no council in ``ctx``.
        """
        base = f"{self.name}-{anchor.id}"
        c = self.chain.build(anchor, rng, ctx, sample_id=f"{base}-chain_only", sample_type="chain_only")
        if isinstance(c, Rejected):
            return [c]
        out: list[Outcome] = []
        survivors: list[Accepted] = []
        for o in self.drift.source_for(ctx).run(anchor, rng, ctx):
            if isinstance(o, Accepted):
                o = self.drift.cross_validate(o, ctx, sample_id=f"{base}-drift_only", sample_type="drift_only")
            (survivors.append(o) if isinstance(o, Accepted) else out.append(o))
        if not survivors:
            out.append(Rejected("triplet", "the chain passed but no drift candidate survived its checks"))
            return out
        subtypes = list(dict.fromkeys(s.sample.drift.subtype for s in survivors))
        chosen = rng.choice(subtypes)  # uniform over the surviving subtypes, not over the candidates
        pick = next(s for s in survivors if s.sample.drift.subtype == chosen)
        for s in survivors:
            if s is not pick:
                out.append(Rejected("triplet", f"another subtype ({pick.sample.drift.subtype}) makes this anchor's "
                                               f"triplet; {s.sample.drift.subtype} not used"))
        chain_s, drift_s = c.sample, pick.sample
        triplet = {"triplet": anchor.id, "drift_subtype": drift_s.drift.subtype, "chain_verdict": chain_s.chain.verdict}
        chain_only = dataclasses.replace(chain_s, provenance={**chain_s.provenance, **triplet})
        drift_only = dataclasses.replace(drift_s, provenance={**drift_s.provenance, **triplet})
        joint = dataclasses.replace(
            chain_s, id=f"{base}-joint", drift=drift_s.drift,
            provenance={**chain_s.provenance, **triplet, "sample_type": "joint",
                        **{k: v for k, v in drift_s.provenance.items() if k in ("subtype", "edit")}})
        both = {**c.verdicts, **pick.verdicts}
        out[:0] = [Accepted(chain_only, dict(c.verdicts)), Accepted(drift_only, dict(pick.verdicts)),
                   Accepted(joint, both)]
        return out
