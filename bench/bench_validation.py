"""Benchmark: loading Spider dev (1,034 golds) with load-time validation, cold against cached, side by side.

Three ways to load, interleaved pass by pass in one run (:func:`textsql_clarify.datasets.load_dataset`):

* ``cold``: validation on, an empty cache folder (every distinct gold executed once per database, masked,
  compared; the result written to ``<cache>/validation/<sha256>.json``); the masking cache of
  :func:`textsql_clarify.datasets.gold_masking.mask_values` is cleared first;
* ``cached``: validation on, the cache file of the cold pass present (nothing executed);
* ``no-validate``: ``validate=False``, the loader alone (the floor).

Each row gives the median seconds over ``--reps`` passes and the ratio to ``cached``; the last lines give the
cold validation's own cost (cold minus no-validate) and the flags found. The cache folder is a temporary one
(``TEXTSQL_CLARIFY_CACHE``), never the user's.

    python bench/bench_validation.py [--spider ../shared/data/spider_dev] [--reps 5]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table. Returns 0, or 2 when the Spider folder is absent."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spider", default=str(REPO.parent / "shared" / "data" / "spider_dev"),
                    help="Spider folder with dev.json and database/ (default: ../shared/data/spider_dev)")
    ap.add_argument("--reps", type=int, default=5, help="passes per mode (default 5)")
    args = ap.parse_args(argv)
    if not (Path(args.spider) / "dev.json").is_file():
        print(f"Spider dev not found under {args.spider}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-validation-"))
    os.environ["TEXTSQL_CLARIFY_CACHE"] = str(tmp)
    from textsql_clarify.datasets import load_dataset
    from textsql_clarify.datasets.gold_masking import mask_values
    from textsql_clarify.datasets.validate import validate_samples

    spec = f"spider:{args.spider}"
    load_dataset(spec, validate=False)  # imports, hardness tables and OS file cache warm for every mode
    times: dict[str, list[float]] = {"cold": [], "cached": [], "no-validate": []}
    try:
        for _ in range(args.reps):
            shutil.rmtree(tmp / "validation", ignore_errors=True)
            mask_values.cache_clear()
            t = time.perf_counter()
            samples = load_dataset(spec)
            times["cold"].append(time.perf_counter() - t)
            t = time.perf_counter()
            again = load_dataset(spec)
            times["cached"].append(time.perf_counter() - t)
            t = time.perf_counter()
            load_dataset(spec, validate=False)
            times["no-validate"].append(time.perf_counter() - t)
            assert [s.flags for s in again] == [s.flags for s in samples]
        report = validate_samples(load_dataset(spec, validate=False), spec=spec)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"load_dataset({spec!r}): {len(samples)} samples, median of {args.reps} passes, interleaved")
    print(f"{'mode':<12} {'seconds':>8} {'x cached':>9}")
    for k in ("cold", "cached", "no-validate"):
        print(f"{k:<12} {med[k]:8.3f} {med[k] / med['cached']:9.2f}")
    print(f"cold validation alone (cold - no-validate): {med['cold'] - med['no-validate']:.3f} s; "
          f"cached lookup alone (cached - no-validate): {med['cached'] - med['no-validate']:.3f} s")
    print(f"flags: {report.counts()} ({report.n_flagged} of {len(report.samples)} samples flagged)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
