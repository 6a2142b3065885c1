"""Benchmark: simulated-user replies per second, unbatched versus batched, measured side by side in one run.

Requests are real: the ambiguous user turns of MMSQL (``../shared/data/mmsql/MMSQL_test.json``) with the
system's clarification question, the user's next turn as hidden knowledge and the next gold SQL, over the
Spider dev databases (``../shared/data/spider_dev``). The same ``n`` requests are answered with every batch
size: batch size 1 is the unbatched baseline (one ``respond([request])`` per request); batch size B sends
the requests B at a time to ``respond``. The model is loaded and warmed up (header caches, stop-string
tables) before any timing. The figure is replies/s = n / wall seconds, and the ratio to batch size 1.

Usage::

    python bench/bench_simulator.py                      # SmolLM2-135M on the CPU, batches 1,8,16, n=32
    python bench/bench_simulator.py --batches 1,16,64 --device cuda --n 128
    python bench/bench_simulator.py --json out.json --repeats 2

Target (``docs/simulator.md`` "Measured throughput"): at least 6x replies/s at batch 16 over unbatched,
SmolLM2 on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from textsql_clarify.samples import Sample  # noqa: E402
from textsql_clarify.simulators.base import UserRequest  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data"


def mmsql_requests(data_root: Path, n: int) -> list[UserRequest]:
    """``n`` requests from MMSQL's ambiguous turns (cycled when n exceeds them).

    Raises:
        FileNotFoundError: MMSQL or the Spider dev databases are absent under ``data_root``.
    """
    src = data_root / "mmsql" / "MMSQL_test.json"
    db_dir = data_root / "spider_dev" / "database"
    if not src.is_file() or not db_dir.is_dir():
        raise FileNotFoundError(f"benchmark data absent: need {src} and {db_dir}")
    dialogues = json.loads(src.read_text(encoding="utf-8"))
    base: list[UserRequest] = []
    for d in dialogues:
        turns = d["turns"]
        for i in range(len(turns) - 3):
            t, clar, ans, gold = turns[i:i + 4]
            if not (t.get("isuser") and t.get("type") == "ambiguous" and not clar.get("isuser")
                    and clar.get("text") and ans.get("isuser") and gold.get("query", "").upper().startswith("SELECT")):
                continue
            db = db_dir / d["db_name"] / f"{d['db_name']}.sqlite"
            if not db.is_file():
                continue
            s = Sample(id=f"mmsql-{d['id']}-{i}", db_id=d["db_name"], db_path=str(db), question=t["text"],
                       group="ambiguous", subcategory="lexical_vagueness", gold_sql=gold["query"],
                       hidden_knowledge=ans["text"], provenance={"source": "mmsql"})
            base.append(UserRequest(sample=s, clarification=clar["text"]))
    if not base:
        raise FileNotFoundError(f"no usable ambiguous turns in {src}")
    # schema identifiers as the env passes them
    from textsql_clarify.sql.schema import read_schema

    out = []
    for k in range(n):
        r = base[k % len(base)]
        schema = read_schema(r.sample.db_path)
        ids = frozenset(list(schema) + [c for cols in schema.values() for c in cols])
        out.append(UserRequest(sample=r.sample, clarification=r.clarification, schema_identifiers=ids))
    return out


def run(sim, requests: list[UserRequest], batch: int) -> float:
    """Wall seconds to answer ``requests`` ``batch`` at a time."""
    t0 = time.perf_counter()
    for k in range(0, len(requests), batch):
        replies = sim.respond(requests[k:k + batch])
        assert len(replies) == len(requests[k:k + batch])
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,8,16", help="comma-separated batch sizes; 1 is the unbatched baseline")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    ap.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: float32 on CPU, bf16 on CUDA)")
    ap.add_argument("--model", action="append", default=None, help="model spec (repeat for a council); default SmolLM2")
    ap.add_argument("--n", type=int, default=32, help="requests answered per batch size")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=1, help="timed passes per batch size, interleaved; best is kept")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--data-root", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if not batches or any(b < 1 for b in batches):
        ap.error("--batches needs positive integers")
    if 1 not in batches:
        batches = [1] + batches

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from textsql_clarify.simulators.transformers_user import TransformersUserSimulator

    requests = mmsql_requests(args.data_root, args.n)
    t0 = time.perf_counter()
    sim = TransformersUserSimulator(args.model, device=args.device, dtype=args.dtype,
                                    max_new_tokens=args.max_new_tokens)
    load_s = time.perf_counter() - t0
    warm = requests[: max(batches)]
    t0 = time.perf_counter()
    sim.respond(warm[:1])
    sim.respond(warm)
    warm_s = time.perf_counter() - t0

    best: dict[int, float] = {}
    for _ in range(args.repeats):
        for b in batches:
            s = run(sim, requests, b)
            best[b] = min(best.get(b, float("inf")), s)
    base = len(requests) / best[1]
    rows = []
    for b in batches:
        rps = len(requests) / best[b]
        rows.append({"batch": b, "seconds": round(best[b], 2), "replies_per_s": round(rps, 3),
                     "ratio_to_unbatched": round(rps / base, 2)})
    lm = sim.backends[0].lm
    result = {
        "n": len(requests), "models": sim.model_names, "device": lm.device, "dtype": str(lm.dtype),
        "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "load_s": round(load_s, 1),
        "warmup_s": round(warm_s, 1), "grounding": getattr(sim.grounder, "name", "?"), "rows": rows,
        "leak_rejections": sim.stats["leak_rejections"], "fallbacks": sim.stats["fallbacks"],
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    print(f"simulated-user throughput: {result['models']} on {result['device']} ({result['dtype']}, "
          f"{result['torch_threads']} threads), n={result['n']} requests per batch size, best of {args.repeats}")
    print(f"{'batch':>6} {'seconds':>9} {'replies/s':>10} {'x unbatched':>12}")
    for r in rows:
        print(f"{r['batch']:>6} {r['seconds']:>9.2f} {r['replies_per_s']:>10.3f} {r['ratio_to_unbatched']:>12.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
