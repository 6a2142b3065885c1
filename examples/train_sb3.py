"""Classic RL on TextSQLClarify-v0: sb3-contrib's MaskablePPO over the candidate-action wrapper.

The wrapper (:class:`textsql_clarify.envs.wrappers.CandidateActionWrapper`) turns an episode into
``Discrete(K + 2)`` actions (0 ask, 1..K answer with candidate k, K + 1 refuse) over float features
(MiniLM embeddings and similarities). This script trains ``MaskablePPO`` (``action_masks``: ask once) on a
training split, then reports on the held-out split, with 95 % percentile bootstrap intervals:

* mean reward (the env's scalar reward under ``--preset``);
* ask rate on the distinguishable ambiguous samples (ambiguous, not flagged ``indistinguishable``) and on
  the others (answerable, unanswerable, indistinguishable ambiguous): asking should pay on the first only;
* the first action's recall per group (ask on distinguishable ambiguous, answer on answerable, refuse on
  unanswerable);
* the same for two baselines over the same candidates: never-ask (the candidate most similar to the
  question) and always-ask (ask, then the candidate the reply supports most, ties to its word overlap, then to the
  question);
* a paired test of the trained policy against the better baseline (:func:`paired_test`).

Intervals resample databases (a cluster bootstrap) when the held-out episodes span two or more, else episodes
(``bootstrap_unit`` in the report). ``--corpus DATA_ROOT`` trains on the training corpus
(:func:`load_corpus`) and also plays the held-out databases' indistinguishable ambiguous samples.

Split: :func:`textsql_clarify.integrations.splits.split_sample_ids`, by database (``by="db"``) where that
option exists, else stratified by group (the report says which).

Run::

    pip install "textsql-clarify[sb3,hf]"
    python examples/train_sb3.py --smoke                       # 2 tiny iterations, fake encoder, seconds
    python examples/train_sb3.py --corpus ../shared/data --per-group 150 --heldout-fraction 0.45 \\
        --preset shaped_decision --timesteps 20480 --out runs/sb3

Options: ``--preset`` (any preset name the env accepts, default ``binary``), ``--encoder minilm|hash``,
``--candidates K``, ``--timesteps``, ``--seed``, ``--heldout-fraction``, ``--split-seed``, ``--corpus DATA_ROOT``
with ``--per-group N`` and ``--indistinguishable N``, ``--detailed-scores`` (for a preset
that weights the env's detailed SQL scores), ``--out`` (writes ``report.json``).
Needs the ``sb3`` extra (stable-baselines3, sb3-contrib), imported lazily; the ``minilm`` encoder needs ``hf``.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from textsql_clarify.envs.wrappers import ASK, CandidateActionWrapper, HashEncoder, minilm_encoder, supported_samples

#: what a policy is: ``(wrapper, obs) -> action``
Policy = Callable[[CandidateActionWrapper, np.ndarray], int]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", action="append", default=None,
                   help="dataset spec (repeatable; default: embedded); specs whose files are absent are skipped")
    p.add_argument("--preset", default="binary", help="reward preset of the env (any name it accepts)")
    p.add_argument("--encoder", choices=("minilm", "hash"), default=None,
                   help="sentence encoder (default minilm; hash with --smoke)")
    p.add_argument("--candidates", type=int, default=6, help="K, candidates per sample")
    p.add_argument("--timesteps", type=int, default=20_000, help="PPO environment steps")
    p.add_argument("--n-steps", type=int, default=256, help="PPO rollout length per update")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heldout-fraction", type=float, default=0.3)
    p.add_argument("--split-seed", type=int, default=None, help="seed of the split draw (default: --seed)")
    p.add_argument("--corpus", default=None, metavar="DATA_ROOT",
                   help="the training corpus of DATA_ROOT (build_training_corpus, then the samples the wrapper "
                        "serves, balanced by group: every ambiguous one, --per-group of each other group); "
                        "replaces --dataset")
    p.add_argument("--per-group", type=int, default=150,
                   help="with --corpus: answerable and unanswerable samples kept each (ambiguous: all)")
    p.add_argument("--indistinguishable", type=int, default=60,
                   help="with --corpus: also play up to N indistinguishable ambiguous samples of the held-out "
                        "databases (not trained on), to check that asking pays only where the reply separates")
    p.add_argument("--limit", type=int, default=None, help="keep the first N samples of each spec")
    p.add_argument("--detailed-scores", action="store_true",
                   help="compute the env's detailed SQL scores (a preset that weights them, e.g. dense, needs it)")
    p.add_argument("--out", default=None, help="folder for report.json")
    p.add_argument("--smoke", action="store_true", help="2 tiny PPO iterations on embedded, hash encoder (CI)")
    return p.parse_args(argv)


def split(samples, heldout_fraction: float, seed: int) -> tuple[list[str], list[str], str]:
    """``(train ids, held-out ids, how)``: ``split_sample_ids(..., by="db")`` where it takes ``by``, else the
    stratified-by-group split (``how`` says which). Each side's databases:
    ``splits.split_databases(samples, ids=(train, held))``."""
    from textsql_clarify.integrations.splits import split_sample_ids

    n_db = len({s.db_id for s in samples})
    if "by" in inspect.signature(split_sample_ids).parameters and n_db >= 2:
        train, held = split_sample_ids(samples, heldout_fraction=heldout_fraction, seed=seed, by="db")
        if train and held:
            return train, held, "by database"
    train, held = split_sample_ids(samples, heldout_fraction=heldout_fraction, seed=seed)
    why = "one database only" if n_db < 2 else "no by='db' split here"
    return train, held, f"stratified by group ({why})"


def distinguishable(sample) -> bool:
    """An ambiguous sample whose readings return different rows (not flagged ``indistinguishable``)."""
    return sample.group == "ambiguous" and "indistinguishable" not in sample.flags


def action_kind(wrapper: CandidateActionWrapper, action: int) -> str:
    """``"clarify"`` (action 0), ``"sql"`` (1..K) or ``"feedback"`` (K + 1): the env's action type of a discrete
    action, the decision's vocabulary (``textsql_clarify.rewards.decision``)."""
    a = int(action)
    return "clarify" if a == ASK else ("feedback" if a == wrapper.refuse_action else "sql")


def play(wrapper: CandidateActionWrapper, policy: Policy) -> list[dict[str, Any]]:
    """Play one episode per sample of ``wrapper``'s env with ``policy``: the per-episode records.

    Returns:
        One dict per sample, in sample order: ``sample_id``, ``db_id`` (``splits.database_of``), ``group``,
        ``distinguishable``, ``reward`` (the episode's summed env reward), ``asked``, ``decision`` (the first
        action's type), ``expected_decision`` (``rewards.decision.expected_decision``; ``None`` where undefined),
        ``decision_correct`` (``None`` where undefined), ``ex`` (the final SQL turn's ``ex`` component, ``None``
        without one), ``actions`` (the discrete actions taken).
    """
    from textsql_clarify.integrations.splits import database_of
    from textsql_clarify.rewards.decision import expected_decision

    rows = []
    for s in wrapper.env.unwrapped.samples:
        obs, _info = wrapper.reset(options={"sample_id": s.id})
        total, done, actions, ex = 0.0, False, [], None
        while not done:
            a = int(policy(wrapper, obs))
            actions.append(a)
            obs, r, term, trunc, info = wrapper.step(a)
            total += r
            done = term or trunc
            if action_kind(wrapper, a) == "sql":
                ex = info.get("reward_components", {}).get("ex")
        exp = expected_decision(s)
        first = action_kind(wrapper, actions[0])
        rows.append({"sample_id": s.id, "db_id": database_of(s), "group": s.group,
                     "distinguishable": distinguishable(s), "reward": total, "asked": ASK in actions,
                     "decision": first, "expected_decision": exp,
                     "decision_correct": None if exp is None else first == exp,
                     "ex": None if ex is None else float(ex), "actions": actions})
    return rows


def _cluster_bootstrap(rows: Sequence[dict], seed: int = 0, n_resamples: int = 1000):
    """``(bootstrap, unit)``: a cluster bootstrap over the records' databases when they span two or more
    (``unit="database"``), else over episodes (each its own cluster, ``unit="episode"``); the resampler is
    ``DatabaseBootstrap`` of ``examples/train_decision.py`` (one definition), keyed by ``row["cluster"]``."""
    unit = "database" if len({r["db_id"] for r in rows}) >= 2 else "episode"
    for r in rows:
        r["cluster"] = r["db_id"] if unit == "database" else r["sample_id"]
    keys = sorted({r["cluster"] for r in rows})
    return _decision_module().DatabaseBootstrap(keys, n_resamples=n_resamples, seed=seed), unit


def _stat(rows: Sequence[dict], boot, value: Callable[[dict], float], keep: Callable[[dict], bool]) -> dict:
    """``{mean, ci95, n, n_db}`` of ``value`` over the records ``keep`` accepts; the interval resamples
    clusters (``_cluster_bootstrap``); ``mean`` / ``ci95`` are ``None`` where n = 0 (undefined is not zero)."""
    dm = _decision_module()
    kept = [r for r in rows if keep(r)]
    vals = [float(value(r)) for r in kept]
    num, den = boot.sums(rows, value, keep, key="cluster")
    ci, _undefined = dm._interval(boot.ratio(num, den)) if kept else (None, 0)
    return {"mean": float(np.mean(vals)) if vals else None, "ci95": ci, "n": len(vals),
            "n_db": len({r["db_id"] for r in kept})}


def summarize(rows: Sequence[dict], boot) -> dict[str, Any]:
    """A policy's held-out table from its per-episode records (:func:`play`).

    Returns:
        ``{"reward", "ask_rate_distinguishable", "ask_rate_other", "recall": {answerable, ambiguous_distinguishable,
        unanswerable}}``, each ``{mean, ci95, n, n_db}`` (:func:`_stat`): recall is the share of episodes whose first
        action is the right one (``expected_decision``; ask on a distinguishable ambiguous sample, answer on an
        answerable one, refuse on an unanswerable one), ABISS §5.3 Rec per group.
    """
    everyone = lambda r: True  # noqa: E731
    out = {"reward": _stat(rows, boot, lambda r: r["reward"], everyone),
           "ask_rate_distinguishable": _stat(rows, boot, lambda r: r["asked"], lambda r: r["distinguishable"]),
           "ask_rate_other": _stat(rows, boot, lambda r: r["asked"], lambda r: not r["distinguishable"]),
           "recall": {}}
    for name, keep in (("answerable", lambda r: r["group"] == "answerable"),
                       ("ambiguous_distinguishable", lambda r: r["distinguishable"]),
                       ("unanswerable", lambda r: r["group"] == "unanswerable")):
        out["recall"][name] = _stat(rows, boot, lambda r: bool(r["decision_correct"]),
                                    lambda r, keep=keep: keep(r) and r["decision_correct"] is not None)
    return out


def paired_test(a: Sequence[dict], b: Sequence[dict], boot) -> dict[str, Any]:
    """Policy A against policy B on the same episodes.

    * ``reward_diff``: mean per-episode reward difference A - B with a paired bootstrap interval: each resample
      draws clusters (databases, or episodes with one database; :func:`_cluster_bootstrap`) and both policies
      keep their episodes, so the pairing is kept (Efron and Tibshirani 1993, ch. 16 paired / cluster
      bootstrap; percentile interval); and the episode-level paired bootstrap
      (``rewards.bootstrap.paired_difference``, PremiseSQL's appendix on uncertainty) beside it.
    * ``mcnemar``: exact McNemar test on per-episode decision correctness where defined (McNemar 1947, the
      exact binomial form ``scipy.stats.binomtest(b_only, b_only + a_only, 0.5)``; ``mcnemar_exact`` of
      ``examples/train_decision.py``); ``a_only`` counts the episodes A gets right and B wrong.

    Raises:
        ValueError: the records are not the same samples in the same order.
    """
    from textsql_clarify.rewards.bootstrap import paired_difference

    if [r["sample_id"] for r in a] != [r["sample_id"] for r in b]:
        raise ValueError("paired_test: the two policies played different episodes")
    dm = _decision_module()
    diffs = [dict(r, reward=ra["reward"] - r["reward"]) for ra, r in zip(a, b)]
    reward_diff = _stat(diffs, boot, lambda r: r["reward"], lambda r: True)
    ep = paired_difference({r["sample_id"]: r["reward"] for r in a}, {r["sample_id"]: r["reward"] for r in b})
    both = [(ra["decision_correct"], rb["decision_correct"]) for ra, rb in zip(a, b)
            if ra["decision_correct"] is not None and rb["decision_correct"] is not None]
    mc = dm.mcnemar_exact([x for _, x in both], [x for x, _ in both])  # b_only: A right, B wrong
    mcnemar = {"n": mc["n"], "a_only": mc["b_only"], "b_only": mc["a_only"], "p_value": mc["p_value"]}
    return {"reward_diff": reward_diff, "reward_diff_episode_bootstrap": ep, "mcnemar_decision": mcnemar}


def ask_pays(never: Sequence[dict], always: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """Where asking pays: always-ask against never-ask on the same episodes, per kind of sample.

    Args:
        never, always: the two baselines' records (:func:`play`) over the same samples.
    Returns:
        ``{kind: {"n", "ex_never", "ex_always", "reward_diff"}}`` for ``distinguishable`` (ambiguous, readings
        differ), ``indistinguishable`` (ambiguous, same rows), ``answerable`` and ``unanswerable``: the mean
        final-SQL ``ex`` of each (episodes without one left out) and the mean reward difference always - never.
        The reply separates the candidates where ``ex_always > ex_never``; asking pays where ``reward_diff > 0``.
        Kinds with no episode are left out.
    Raises:
        ValueError: the records are not the same samples in the same order.
    """
    if [r["sample_id"] for r in never] != [r["sample_id"] for r in always]:
        raise ValueError("ask_pays: the two baselines played different episodes")

    def kind(r):
        return ("distinguishable" if r["distinguishable"] else "indistinguishable") if r["group"] == "ambiguous" \
            else r["group"]

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return float(np.mean(xs)) if xs else None

    out = {}
    for k in ("distinguishable", "indistinguishable", "answerable", "unanswerable"):
        pairs = [(a, b) for a, b in zip(never, always) if kind(a) == k]
        if pairs:
            out[k] = {"n": len(pairs), "ex_never": mean(a["ex"] for a, _ in pairs),
                      "ex_always": mean(b["ex"] for _, b in pairs),
                      "reward_diff": mean(b["reward"] - a["reward"] for a, b in pairs)}
    return out


def evaluate(wrapper: CandidateActionWrapper, policy: Policy, seed: int = 0) -> dict[str, Any]:
    """Play every sample of ``wrapper`` with ``policy`` (:func:`play`) and summarise (:func:`summarize`), with
    the bootstrap unit (``"database"`` or ``"episode"``) and the records under ``per_sample``."""
    rows = play(wrapper, policy)
    boot, unit = _cluster_bootstrap(rows, seed=seed)
    return {**summarize(rows, boot), "bootstrap_unit": unit, "per_sample": rows}


_DECISION_MODULE = None


def _decision_module():
    """``examples/train_decision.py`` as a module (its ``DatabaseBootstrap``, ``_interval`` and
    ``mcnemar_exact`` are reused, so the statistics have one definition)."""
    global _DECISION_MODULE
    if _DECISION_MODULE is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("train_decision", Path(__file__).with_name("train_decision.py"))
        _DECISION_MODULE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_DECISION_MODULE)
    return _DECISION_MODULE


def _best(wrapper: CandidateActionWrapper, obs: np.ndarray, keys: Sequence[str]) -> int:
    """1 + the candidate that ranks highest on the features ``keys``: the last key decides, earlier ones break
    ties (``numpy.lexsort`` order); a full tie goes to the last candidate in that order."""
    order = np.lexsort([obs[wrapper.feature_slices[k]] for k in keys])
    return int(order[-1]) + 1


def never_ask(wrapper: CandidateActionWrapper, obs: np.ndarray) -> int:
    """Answer at once with the candidate closest to the question (word overlap, then cosine)."""
    return _best(wrapper, obs, ["cand_question_cos", "cand_question_overlap"])


def always_ask(wrapper: CandidateActionWrapper, obs: np.ndarray) -> int:
    """Ask first; then the candidate the reply supports most (``cand_reply_support``: items named for it minus
    items named against it, negation read), ties broken by the reply's word overlap, then by the question
    (overlap, then cosine), as :func:`never_ask` picks. The reply's cosines are not keys: they are continuous, so
    they would never tie, and on an answerable or unanswerable sample the reply is the user's constant refusal,
    which names no candidate item (support 0 everywhere) and mostly no candidate word, so the question decides."""
    if wrapper.action_masks()[ASK]:
        return ASK
    return _best(wrapper, obs, ["cand_question_cos", "cand_question_overlap", "cand_reply_overlap",
                                "cand_reply_support"])


def load_corpus(data_root: str, per_group: int, seed: int):
    """The samples of ``--corpus``: :func:`~textsql_clarify.integrations.corpus.build_training_corpus` of
    ``data_root`` unbalanced (``indistinguishable`` dropped), the samples the wrapper serves
    (:func:`supported_samples`: no drift, no withheld gold; mini-interact's tasks have no gold SQL), then
    :func:`~textsql_clarify.integrations.corpus.balance_by_group` with every ambiguous sample and ``per_group``
    of each other group (the distinguishable ambiguous samples with a gold are the scarce group).

    Returns:
        ``(samples, counts)``: the samples and ``{source: {group: n}}`` of them.
    """
    from textsql_clarify.integrations.corpus import balance_by_group, build_training_corpus, count_by_source

    corpus = build_training_corpus(data_root, per_group=10 ** 9, seed=seed)
    served = supported_samples(corpus.samples)
    n_amb = sum(s.group == "ambiguous" for s in served)
    kept, _caps = balance_by_group(served, {"answerable": per_group, "ambiguous": n_amb,
                                            "unanswerable": per_group}, seed=seed)
    return kept, count_by_source(kept)


def indistinguishable_check(data_root: str, held_dbs: Sequence[str], limit: int, seed: int):
    """Up to ``limit`` indistinguishable ambiguous samples (readings return the same rows) of the held-out
    databases, which the wrapper serves, for the check that asking pays only where the reply separates the
    readings; drawn by a seeded shuffle of their sorted ids."""
    import random

    from textsql_clarify.integrations.corpus import build_training_corpus
    from textsql_clarify.integrations.splits import database_of

    every = build_training_corpus(data_root, per_group=10 ** 9, seed=seed, exclude_flags=()).samples
    pick = sorted((s for s in supported_samples(every) if s.group == "ambiguous" and
                   "indistinguishable" in s.flags and database_of(s) in set(held_dbs)), key=lambda s: s.id)
    random.Random(f"{seed}:indistinguishable").shuffle(pick)
    return pick[:limit]


def main(argv: Sequence[str] | None = None) -> dict:
    """Train and report; returns the report (also written to ``--out/report.json``)."""
    args = parse_args(argv)
    try:
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.monitor import Monitor
    except ImportError as e:
        sys.exit(f"train_sb3.py needs the sb3 extra: pip install 'textsql-clarify[sb3]' ({e})")
    from textsql_clarify.integrations.splits import load_training_samples, split_counts, split_databases
    from textsql_clarify.rewards.feedback import LexicalFeedbackJudge

    t0 = time.time()
    split_seed = args.seed if args.split_seed is None else args.split_seed
    if args.corpus and not args.smoke:
        specs = [f"corpus:{args.corpus}"]
        samples, counts = load_corpus(args.corpus, args.per_group, split_seed)
    else:
        specs = ["embedded"] if args.smoke else (args.dataset or ["embedded"])
        samples = supported_samples(load_training_samples(specs, limit=args.limit))
        counts = None
    train_ids, held_ids, how = split(samples, args.heldout_fraction, split_seed)
    train_dbs, held_dbs = split_databases(samples, ids=(train_ids, held_ids))
    by_id = {s.id: s for s in samples}
    train = [by_id[i] for i in train_ids]
    held = [by_id[i] for i in held_ids]
    enc_name = args.encoder or ("hash" if args.smoke else "minilm")
    encoder = HashEncoder(32) if enc_name == "hash" else minilm_encoder()
    # the smoke run judges feedback lexically so it loads no model; a real run uses the env's default judge
    judge = {"feedback_judge": LexicalFeedbackJudge()} if args.smoke or enc_name == "hash" else {}

    def make(part):
        return CandidateActionWrapper(samples=part, encoder=encoder, n_candidates=args.candidates, seed=args.seed,
                                      pool_samples=samples, reward_preset=args.preset,
                                      detailed_scores=args.detailed_scores, **judge)

    train_env, held_env = make(train), make(held)
    indist = indistinguishable_check(args.corpus, held_dbs, args.indistinguishable, split_seed) \
        if args.corpus and not args.smoke and args.indistinguishable > 0 else []
    indist_env = make(indist) if indist else None
    for env in (train_env, held_env, indist_env):
        if env is not None:
            env.precompute()
    train_env.reset(seed=args.seed)
    timesteps = 2 * 32 if args.smoke else args.timesteps
    n_steps = 32 if args.smoke else args.n_steps
    model = MaskablePPO("MlpPolicy", Monitor(train_env), n_steps=n_steps, batch_size=min(64, n_steps),
                        n_epochs=2 if args.smoke else 10, gamma=1.0, ent_coef=0.01, seed=args.seed, verbose=0 if args.smoke else 1,
                        device="cpu")
    t1 = time.time()
    model.learn(total_timesteps=timesteps)
    t2 = time.time()

    def ppo(wrapper, obs):
        action, _ = model.predict(obs, action_masks=wrapper.action_masks(), deterministic=True)
        return int(action)

    policies = (("maskable_ppo", ppo), ("never_ask", never_ask), ("always_ask", always_ask))
    heldout = {name: evaluate(held_env, pol) for name, pol in policies}
    best = max(("never_ask", "always_ask"), key=lambda n: heldout[n]["reward"]["mean"])
    boot, unit = _cluster_bootstrap(heldout["maskable_ppo"]["per_sample"])
    paired = {"baseline": best, "policy": "maskable_ppo", "bootstrap_unit": unit,
              **paired_test(heldout["maskable_ppo"]["per_sample"], heldout[best]["per_sample"], boot)}
    report = {"datasets": specs, "corpus_counts": counts, "n_train": len(train), "n_heldout": len(held),
              "split": how, "heldout_fraction": args.heldout_fraction, "split_seed": split_seed,
              "train_dbs": train_dbs, "heldout_dbs": held_dbs,
              "split_counts": split_counts(samples, train_ids, held_ids),
              "preset": args.preset, "encoder": enc_name, "n_candidates": args.candidates,
              "timesteps": timesteps, "n_steps": n_steps, "seed": args.seed,
              "train_seconds": round(t2 - t1, 1), "heldout": heldout, "paired_vs_best_baseline": paired,
              "train": {"maskable_ppo": evaluate(train_env, ppo)}}
    if indist_env is not None:
        report["heldout_indistinguishable"] = {name: evaluate(indist_env, pol) for name, pol in policies}
    both = {n: [*heldout[n]["per_sample"], *report.get("heldout_indistinguishable", {}).get(n, {}).get(
        "per_sample", [])] for n in ("never_ask", "always_ask")}
    report["ask_pays_heldout"] = ask_pays(both["never_ask"], both["always_ask"])
    report["seconds"] = round(time.time() - t0, 1)
    for part in ("heldout", "heldout_indistinguishable", "train"):
        for name, res in report.get(part, {}).items():
            print(f"{part:8s} {name:13s} reward {_fmt(res['reward'])}  ask|distinguishable "
                  f"{_fmt(res['ask_rate_distinguishable'])}  ask|other {_fmt(res['ask_rate_other'])}  recall "
                  + "  ".join(f"{g} {_fmt(v)}" for g, v in res["recall"].items()))
    for k, v in report["ask_pays_heldout"].items():
        print(f"asking on {k} (n={v['n']}): ex never {v['ex_never']}, always {v['ex_always']}; reward "
              f"always - never {v['reward_diff']:+.3f}")
    d, m = paired["reward_diff"], paired["mcnemar_decision"]
    print(f"paired maskable_ppo - {best}: reward diff {_fmt(d)}; McNemar on the decision: PPO only right "
          f"{m['a_only']}, {best} only right {m['b_only']}, exact p = {m['p_value']:.3g}")
    print(f"split {how}; train n={len(train)} on {len(train_dbs)} dbs, held-out n={len(held)} on {len(held_dbs)} "
          f"dbs {held_dbs}; {timesteps} steps in {t2 - t1:.0f} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def _fmt(b: dict) -> str:
    if b["mean"] is None:
        return "n/a (n=0)"
    if b["ci95"] is None:
        return f"{b['mean']:.3f} (n={b['n']})"
    lo, hi = b["ci95"]
    return f"{b['mean']:.3f} [{lo:.3f}, {hi:.3f}] (n={b['n']})"


if __name__ == "__main__":
    main()
