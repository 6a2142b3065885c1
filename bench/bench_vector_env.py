"""Benchmark: whole evaluations with the transformers user, one episode at a time versus N at once.

``evaluate(..., num_envs=N)`` plays N episodes in lockstep and sends the clarifications of each turn to
the shared simulated user in one ``respond(batch)`` (``textsql_clarify/envs/vector.py`` does the same
for RL rollouts). This script runs the same evaluation with every ``--num-envs`` value in one process,
side by side: the oracle agent on the embedded dataset's ambiguous samples (it asks one clarification
per sample, two on chain samples), the transformers user with SmolLM2-135M on the CPU by default. It
prints episodes/s, clarification replies/s, the mean batch the user saw, and the ratio to one env.
It also checks that every setting gives the same EX and the same labels (greedy decoding), so the
speed-up does not change what is measured.

Usage::

    python bench/bench_vector_env.py                          # num_envs 1,8,16 on the CPU
    python bench/bench_vector_env.py --num-envs 1,16,64 --device cuda --repeat 4
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class CountingUser:
    """Wraps a simulator; counts ``respond`` calls and requests."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0
        self.requests = 0

    def respond(self, batch):
        self.calls += 1
        self.requests += len(batch)
        return self.inner.respond(batch)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-envs", default="1,8,16", help="comma-separated env counts; 1 is the baseline")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--model", action="append", default=None, help="model spec (repeat for a council)")
    ap.add_argument("--repeat", type=int, default=1, help="copies of the ambiguous samples (ids suffixed)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    counts = sorted({int(x) for x in args.num_envs.split(",") if x.strip()} | {1})
    if counts[0] < 1:
        ap.error("--num-envs needs positive integers")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from textsql_clarify.baselines.agents import OracleAgent
    from textsql_clarify.baselines.rollout import evaluate
    from textsql_clarify.datasets import load_dataset
    from textsql_clarify.simulators.transformers_user import TransformersUserSimulator

    amb = [s for s in load_dataset("embedded") if s.group == "ambiguous"]
    samples = [replace(s, id=f"{s.id}#{r}") if r else s for r in range(max(1, args.repeat)) for s in amb]
    sim = TransformersUserSimulator(args.model, device=args.device, dtype=args.dtype)
    user = CountingUser(sim)
    evaluate(samples[: max(counts)], OracleAgent(), progress=False, num_envs=max(counts), simulator=user)  # warm-up
    rows, reference = [], None
    for n in counts:
        user.calls = user.requests = 0
        t0 = time.perf_counter()
        trajs, metrics = evaluate(samples, OracleAgent(), progress=False, num_envs=n, simulator=user,
                                  detailed_scores=False)
        secs = time.perf_counter() - t0
        labels = [c.user_reply["label"] for t in trajs for c in t.clarifications]
        same = reference is None or (metrics["overall"]["EX"], labels) == reference
        reference = reference or (metrics["overall"]["EX"], labels)
        rows.append({"num_envs": n, "seconds": round(secs, 2), "episodes_per_s": round(len(samples) / secs, 3),
                     "replies_per_s": round(user.requests / secs, 3), "respond_calls": user.calls,
                     "mean_batch": round(user.requests / max(user.calls, 1), 2), "same_results": same,
                     "EX": metrics["overall"]["EX"]})
    base = rows[0]["replies_per_s"]
    for r in rows:
        r["ratio"] = round(r["replies_per_s"] / base, 2)
    lm = sim.backends[0].lm
    result = {"episodes": len(samples), "models": sim.model_names, "device": lm.device, "dtype": str(lm.dtype),
              "torch_threads": torch.get_num_threads(), "rows": rows}
    print(f"evaluation with the transformers user: {result['models']} on {result['device']} ({result['dtype']}, "
          f"{result['torch_threads']} threads), oracle agent, {len(samples)} ambiguous episodes per setting")
    print(f"{'envs':>5} {'seconds':>8} {'episodes/s':>11} {'replies/s':>10} {'mean batch':>11} {'x 1 env':>8} same")
    for r in rows:
        print(f"{r['num_envs']:>5} {r['seconds']:>8.2f} {r['episodes_per_s']:>11.3f} {r['replies_per_s']:>10.3f} "
              f"{r['mean_batch']:>11.2f} {r['ratio']:>8.2f} {r['same_results']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
