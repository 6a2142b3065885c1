"""Classic RL on TextSQLClarify-v0: sb3-contrib's MaskablePPO over the candidate-action wrapper.

The wrapper (:class:`textsql_clarify.envs.wrappers.CandidateActionWrapper`) turns an episode into
``Discrete(K + 2)`` actions (0 ask, 1..K answer with candidate k, K + 1 refuse) over float features
(MiniLM embeddings and similarities). This script trains ``MaskablePPO`` (``action_masks``: ask once) on a
training split, then reports on the held-out split, with 95 % bootstrap intervals
(:func:`textsql_clarify.rewards.bootstrap.bootstrap_ci`):

* mean reward (the env's scalar reward under ``--preset``);
* ask rate on the distinguishable ambiguous samples (ambiguous, not flagged ``indistinguishable``) and on
  the others (answerable, unanswerable, indistinguishable ambiguous): asking should pay on the first only;
* the same for two baselines over the same candidates: never-ask (the candidate most similar to the
  question) and always-ask (ask, then the candidate most similar to the reply, ties to the question).

Split: :func:`textsql_clarify.integrations.splits.split_sample_ids`, by database (``by="db"``) where that
option exists, else stratified by group (the report says which).

Run::

    pip install "textsql-clarify[sb3,hf]"
    python examples/train_sb3.py --smoke                       # 2 tiny iterations, fake encoder, seconds
    python examples/train_sb3.py --timesteps 20000 --dataset embedded \\
        --dataset ambiqt:../shared/data/ambiqt:../shared/data/spider_dev --out runs/sb3

Options: ``--preset`` (any preset name the env accepts, default ``binary``), ``--encoder minilm|hash``,
``--candidates K``, ``--timesteps``, ``--seed``, ``--heldout-fraction``, ``--detailed-scores`` (for a preset
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
from textsql_clarify.rewards.bootstrap import bootstrap_ci

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
    p.add_argument("--limit", type=int, default=None, help="keep the first N samples of each spec")
    p.add_argument("--detailed-scores", action="store_true",
                   help="compute the env's detailed SQL scores (a preset that weights them, e.g. dense, needs it)")
    p.add_argument("--out", default=None, help="folder for report.json")
    p.add_argument("--smoke", action="store_true", help="2 tiny PPO iterations on embedded, hash encoder (CI)")
    return p.parse_args(argv)


def split(samples, heldout_fraction: float, seed: int) -> tuple[list[str], list[str], str]:
    """``(train ids, held-out ids, how)``: ``split_sample_ids(..., by="db")`` where it takes ``by``, else the
    stratified-by-group split (``how`` says which)."""
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


def evaluate(wrapper: CandidateActionWrapper, policy: Policy) -> dict[str, Any]:
    """Play one episode per sample of ``wrapper``'s env with ``policy`` and summarise.

    Returns:
        ``{"reward": {mean, ci95, n}, "ask_rate_distinguishable": {...}, "ask_rate_other": {...},
        "per_sample": [...]}``; ``mean`` / ``ci95`` are ``None`` where n = 0 (undefined is not zero).
    """
    rows = []
    for s in wrapper.env.unwrapped.samples:
        obs, _info = wrapper.reset(options={"sample_id": s.id})
        asked, total, done = False, 0.0, False
        while not done:
            a = int(policy(wrapper, obs))
            asked = asked or a == ASK
            obs, r, term, trunc, _info = wrapper.step(a)
            total += r
            done = term or trunc
        rows.append({"sample_id": s.id, "group": s.group, "distinguishable": distinguishable(s),
                     "reward": total, "asked": asked})

    def block(values):
        vals = [float(v) for v in values]
        return {"mean": float(np.mean(vals)) if vals else None, "ci95": bootstrap_ci(vals), "n": len(vals)}

    return {"reward": block(r["reward"] for r in rows),
            "ask_rate_distinguishable": block(r["asked"] for r in rows if r["distinguishable"]),
            "ask_rate_other": block(r["asked"] for r in rows if not r["distinguishable"]),
            "per_sample": rows}


def _best(wrapper: CandidateActionWrapper, obs: np.ndarray, keys: Sequence[str]) -> int:
    """1 + the candidate that ranks highest on the features ``keys``: the last key decides, earlier ones break
    ties (``numpy.lexsort`` order); a full tie goes to the last candidate in that order."""
    order = np.lexsort([obs[wrapper.feature_slices[k]] for k in keys])
    return int(order[-1]) + 1


def never_ask(wrapper: CandidateActionWrapper, obs: np.ndarray) -> int:
    """Answer at once with the candidate closest to the question (word overlap, then cosine)."""
    return _best(wrapper, obs, ["cand_question_cos", "cand_question_overlap"])


def always_ask(wrapper: CandidateActionWrapper, obs: np.ndarray) -> int:
    """Ask first; then the candidate closest to the reply (overlap, cosine), ties broken by the question."""
    if wrapper.action_masks()[ASK]:
        return ASK
    return _best(wrapper, obs, ["cand_question_cos", "cand_question_overlap", "cand_reply_cos",
                                "cand_reply_overlap"])


def main(argv: Sequence[str] | None = None) -> dict:
    """Train and report; returns the report (also written to ``--out/report.json``)."""
    args = parse_args(argv)
    try:
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.monitor import Monitor
    except ImportError as e:
        sys.exit(f"train_sb3.py needs the sb3 extra: pip install 'textsql-clarify[sb3]' ({e})")
    from textsql_clarify.integrations.splits import load_training_samples
    from textsql_clarify.rewards.feedback import LexicalFeedbackJudge

    t0 = time.time()
    specs = ["embedded"] if args.smoke else (args.dataset or ["embedded"])
    samples = supported_samples(load_training_samples(specs, limit=args.limit))
    train_ids, held_ids, how = split(samples, args.heldout_fraction, args.seed)
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
    train_env.precompute()
    held_env.precompute()
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

    report = {"datasets": specs, "n_train": len(train), "n_heldout": len(held), "split": how,
              "preset": args.preset, "encoder": enc_name, "n_candidates": args.candidates,
              "timesteps": timesteps, "seed": args.seed, "train_seconds": round(t2 - t1, 1),
              "heldout": {name: evaluate(held_env, pol)
                          for name, pol in (("maskable_ppo", ppo), ("never_ask", never_ask),
                                            ("always_ask", always_ask))},
              "train": {"maskable_ppo": evaluate(train_env, ppo)}}
    report["seconds"] = round(time.time() - t0, 1)
    for part in ("heldout", "train"):
        for name, res in report[part].items():
            print(f"{part:8s} {name:13s} reward {_fmt(res['reward'])}  ask|distinguishable "
                  f"{_fmt(res['ask_rate_distinguishable'])}  ask|other {_fmt(res['ask_rate_other'])}")
    print(f"split {how}; train n={len(train)}, held-out n={len(held)}; {timesteps} steps in {t2 - t1:.0f} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def _fmt(b: dict) -> str:
    if b["mean"] is None:
        return "n/a (n=0)"
    lo, hi = b["ci95"]
    return f"{b['mean']:.3f} [{lo:.3f}, {hi:.3f}] (n={b['n']})"


if __name__ == "__main__":
    main()
