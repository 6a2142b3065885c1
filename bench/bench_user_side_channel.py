"""What a content-free clarification's reply is worth to a policy that reads it (docs/simulator.md "No side channels").

For each corpus:

1. the side channel of the rule-based user (:mod:`textsql_clarify.simulators.side_channel`): I(reply; group |
   probe) in bits and the leave-one-out reply-text -> group lookup against the majority-class prior, on the
   content-free probes and (a residual, not held at chance) the result-format probes;
2. the return of the strongest policy built from the reply alone (and the same with the oracle's feedback or
   gold SQL as the two continuations: :class:`ProbePrivileged`), through ``gym.make``: ask one content-free
   probe, then either refuse with a constant feedback (the stock tail of the missing-schema rationale) or answer
   ``SELECT *`` of the table the question names best (the red team's ``star_mentioned``). Both continuations
   are played on every sample; the policy picks, per sample, the continuation with the higher leave-one-out
   mean return among the other samples that got the same reply text (the best reply-text -> action lookup).
   Next to it: the better of the two constant continuations (what a policy earns without the reply).

A group-blind user leaves the lookup policy no better than the best constant one.

Run: ``python bench/bench_user_side_channel.py embedded=embedded gen=<dir>/samples.jsonl --recipe missing_schema``
(``--limit N`` per corpus; ``--probes K`` the first K content-free probes for the side channel).
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict

import gymnasium as gym

import textsql_clarify
from textsql_clarify.redteam.policies import SelectStarMentioned, _Clarify, play
from textsql_clarify.datasets import load_dataset
from textsql_clarify.rewards.presets import PRESETS
from textsql_clarify.simulators import side_channel as sc
from textsql_clarify.simulators.rule_based import RuleBasedUser

PROBE = sc.CONTENT_FREE_PROBES[0]
REFUSAL = "That part of the data is not kept at all."


class _ProbeThen(_Clarify):
    """Ask :data:`PROBE` once, then a fixed continuation."""

    kind = "clarify"

    def question(self, observation):
        return PROBE


class ProbeRefuse(_ProbeThen):
    name = "probe_refuse"

    def next_action(self, observation, info):
        if self.asked < self.asks and observation.get("clarifications_left", 0) > 0:
            return super().next_action(observation, info)
        return f"<feedback>{REFUSAL}</feedback>"


class ProbeAnswer(_ProbeThen):
    name = "probe_answer"

    def next_action(self, observation, info):
        if self.asked < self.asks and observation.get("clarifications_left", 0) > 0:
            return super().next_action(observation, info)
        return f"<sql>{SelectStarMentioned().sql(observation)}</sql>"


class ProbePrivileged(_ProbeThen):
    """Ask :data:`PROBE`, then the oracle's action of one kind: ``refuse`` states the sample's hidden knowledge
    as feedback, ``answer`` submits its gold SQL. Choosing between them from the reply alone prices what the
    reply says about the group, apart from what any honest answer or rationale is worth."""

    privileged = True

    def __init__(self, then: str):
        super().__init__()
        self.then = then
        self.name = f"probe_oracle_{then}"

    def next_action(self, observation, info):
        if self.asked < self.asks and observation.get("clarifications_left", 0) > 0:
            return super().next_action(observation, info)
        s = self.sample
        if self.then == "refuse":
            return f"<feedback>{s.hidden_knowledge or 'The database cannot answer this.'}</feedback>"
        return f"<sql>{s.gold_sql or 'SELECT 1'}</sql>"


def lookup_policy(texts: list[str], returns: dict[str, list[float]]) -> list[str]:
    """Per sample, the continuation with the higher leave-one-out mean return among the other samples with the
    same reply text (the overall leave-one-out means when the text is unique); ties go to ``answer``."""
    by_text: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(texts):
        by_text[t].append(i)
    totals = {a: sum(r) for a, r in returns.items()}
    n = len(texts)
    out = []
    for i, t in enumerate(texts):
        peers = [j for j in by_text[t] if j != i]
        if peers:
            means = {a: sum(returns[a][j] for j in peers) / len(peers) for a in returns}
        else:
            means = {a: (totals[a] - returns[a][i]) / max(1, n - 1) for a in returns}
        out.append(max(sorted(means), key=lambda a: (means[a], a == "answer")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpora", nargs="+", help="name=dataset spec")
    ap.add_argument("--recipe", default=None, help="keep only generated samples of this recipe (and their pairs)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--probes", type=int, default=len(sc.CONTENT_FREE_PROBES))
    ap.add_argument("--presets", default="binary,shaped")
    args = ap.parse_args()
    print("package:", textsql_clarify.__file__)
    for item in args.corpora:
        name, spec = item.split("=", 1)
        samples = load_dataset(spec)
        if args.recipe:
            samples = [s for s in samples if (s.provenance or {}).get("recipe") == args.recipe]
        samples = samples[:args.limit] if args.limit else samples
        t = time.time()
        probe_sets = (("content-free", sc.CONTENT_FREE_PROBES[:args.probes]), ("technical", sc.TECHNICAL_PROBES))
        for label, probes in probe_sets:
            print(f"[{name}] {label}: {sc.measure(samples, RuleBasedUser(), probes).summary()}", flush=True)
        env = gym.make(textsql_clarify.ENV_ID, samples=samples, reward_preset="binary", simulator="rule")
        idx = range(len(samples))
        for kind, eps in (("plain", {"refuse": play(env, ProbeRefuse(), idx), "answer": play(env, ProbeAnswer(), idx)}),
                          ("oracle", {a: play(env, ProbePrivileged(a), idx) for a in ("refuse", "answer")})):
            texts = [e.replies[0][1] if e.replies else "" for e in eps["refuse"]]
            assert texts == [e.replies[0][1] if e.replies else "" for e in eps["answer"]], "replies differ"
            for p in args.presets.split(","):
                w = PRESETS[p]
                rets = {a: [e.reward(w) for e in es] for a, es in eps.items()}
                pick = lookup_policy(texts, rets)
                lookup = sum(rets[a][i] for i, a in enumerate(pick)) / len(samples)
                const = {a: sum(r) / len(r) for a, r in rets.items()}
                print(f"[{name}] {kind} continuations, n={len(samples)} preset={p}: lookup policy {lookup:.3f}; "
                      f"constant refuse {const['refuse']:.3f}, constant answer {const['answer']:.3f}; "
                      f"{len(set(texts))} distinct replies ({time.time() - t:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
