"""The ``textsql-clarify`` command.

``textsql-clarify eval`` with no options runs the oracle agent on the embedded dataset with the
rule-based user and prints EX and FB per group and per subcategory, each with its n.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import TextSQLClarifyError


def _parser() -> argparse.ArgumentParser:
    from .baselines.agents import AGENTS
    from .rewards.presets import PRESETS

    p = argparse.ArgumentParser(prog="textsql-clarify", description="Text-to-SQL clarification environment tools.")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("eval", help="evaluate a baseline agent through the environment and print metrics")
    e.add_argument("--dataset", default="embedded",
                   help="'embedded' (default), 'spider:<root>', 'spider-unanswerable:<file>:<spider root>', or a .jsonl file")
    e.add_argument("--agent", default="oracle", choices=sorted(AGENTS), help="baseline agent (default: oracle)")
    e.add_argument("--limit", type=int, default=None, help="evaluate only the first N samples")
    e.add_argument("--out", default=None,
                   help="folder for trajectories.jsonl and metrics.json (default: runs/<dataset kind>-<agent>-<simulator>[-p])")
    e.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    e.add_argument("--simulator", default="rule", help="'rule' (default) or 'transformers'")
    e.add_argument("--preset", default="binary", choices=sorted(PRESETS), help="reward preset (default: binary)")
    e.add_argument("--max-clarifications", type=int, default=3, help="clarification budget (default 3, ABISS §6.1)")
    e.add_argument("--category-mode", default="taxonomy_free",
                   choices=["ground_truth", "predicted", "taxonomy_only", "taxonomy_free"])
    e.add_argument("--protocol", default="f", choices=["f", "p"], help="chain protocol (TIDE §4.1)")
    e.add_argument("--num-envs", type=int, default=1,
                   help="episodes played at once; their clarifications reach the simulated user in one batch (default 1)")
    e.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    e.add_argument("--json", action="store_true", help="print metrics.json to stdout instead of the table")
    return p


def _dataset_kind(spec: str) -> str:
    """A short folder-safe name for a dataset spec: ``embedded``, ``spider``, or the JSONL file's stem."""
    spec = str(spec)
    if ":" in spec and not spec.endswith(".jsonl"):
        return spec.split(":", 1)[0]
    return Path(spec).stem or "dataset"


def _eval(args: argparse.Namespace) -> int:
    from .baselines.agents import make_agent
    from .baselines.rollout import evaluate
    from .datasets import load_dataset
    from .rewards.report import render_table

    if args.limit is not None and args.limit < 1:
        raise SystemExit("error: --limit must be >= 1")
    if args.num_envs < 1:
        raise SystemExit("error: --num-envs must be >= 1")
    samples = load_dataset(args.dataset, limit=args.limit)
    if args.out is None:
        protocol = "-p" if args.protocol == "p" else ""
        args.out = str(Path("runs") / f"{_dataset_kind(args.dataset)}-{args.agent}-{args.simulator}{protocol}")
    agent = make_agent(args.agent, seed=args.seed)
    _, metrics = evaluate(samples, agent, seed=args.seed, out_dir=args.out, progress=not args.no_progress,
                          simulator=args.simulator, reward_preset=args.preset,
                          max_clarifications=args.max_clarifications, category_mode=args.category_mode,
                          protocol=args.protocol, num_envs=args.num_envs)
    if args.json:
        print(json.dumps(metrics, indent=2, default=str))
    else:
        print(f"dataset={args.dataset} agent={args.agent} simulator={args.simulator} episodes={len(samples)}")
        print(render_table(metrics))
        print(f"wrote {Path(args.out) / 'trajectories.jsonl'} and {Path(args.out) / 'metrics.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns the exit status (0 ok, 2 bad input)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "eval":
            return _eval(args)
    except (TextSQLClarifyError, ValueError, OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
