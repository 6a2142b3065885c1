"""Print the combined corpus of every dataset spec that has data here, by group and subcategory, as Markdown.

Usage (from the repository root): ``.venv/bin/python scripts/corpus_table.py [--data ../shared/data]``.
The table in ``docs/datasets.md`` ("The combined corpus") is this script's output. Each spec is loaded with
load-time validation on (:mod:`textsql_clarify.datasets.validate`); the second table counts gold status and
flags; both count with :func:`textsql_clarify.datasets.stats.dataset_stats` (as ``data stats`` does). A spec
whose files are absent is left out and named.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from textsql_clarify.datasets import load_dataset
from textsql_clarify.datasets.stats import UNKNOWN, dataset_stats
from textsql_clarify.taxonomy import GROUPS, SUBCATEGORIES


def specs(data: Path, repo: Path) -> dict[str, tuple[str, Path]]:
    """Short name -> (dataset spec, a file that must exist for it), paths relative to the working folder."""
    d, sp = data, data / "spider_dev"
    return {
        "embedded": ("embedded", repo / "pyproject.toml"),
        "spider": (f"spider:{sp}", sp / "dev.json"),
        "spider-unans": (f"spider-unanswerable:{d / 'spider_unanswerable/spider_no_answer.json'}:{sp}",
                         d / "spider_unanswerable/spider_no_answer.json"),
        "mmsql": (f"mmsql:{d / 'mmsql/MMSQL_test.json'}:{sp}", d / "mmsql/MMSQL_test.json"),
        "ambiqt": (f"ambiqt:{d / 'ambiqt'}:{sp}", d / "ambiqt"),
        "mini-interact": (f"mini-interact:{d / 'mini_interact'}", d / "mini_interact"),
    }


def main() -> None:
    """Load every spec, then print the two Markdown tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data", help="the shared data folder (default ../shared/data)")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parent.parent
    loaded: dict[str, list] = {}
    for name, (spec, must) in specs(Path(args.data), repo).items():
        if not must.exists():
            print(f"<!-- {name}: absent ({must}) -->")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded[name] = load_dataset(spec)
    names = list(loaded)
    stats = {n: dataset_stats(loaded[n]) for n in names}   # the counts of ``data stats``
    print("| group | subcategory | " + " | ".join(names) + " | total |")
    print("| --- | --- | " + " | ".join("---:" for _ in names) + " | ---: |")
    for g in GROUPS:
        for sub in [*(k for k, v in SUBCATEGORIES.items() if v.group == g), UNKNOWN]:
            vals = [stats[n]["subcategory"].get(f"{g}/{sub}", 0) for n in names]
            if any(vals):
                print(f"| {g} | {sub} | " + " | ".join(str(v) for v in vals) + f" | {sum(vals)} |")
        vals = [stats[n]["group"].get(g, 0) for n in names]
        print(f"| **{g}** | all | " + " | ".join(f"**{v}**" for v in vals) + f" | **{sum(vals)}** |")
    vals = [stats[n]["n"] for n in names]
    print("| **all** | | " + " | ".join(f"**{v}**" for v in vals) + f" | **{sum(vals)}** |")
    print()
    keys = [k for k in ("valid", "gold_error", "gold_empty", "gold_timeout", "gold_nondeterministic", "no_gold",
                        "withheld", "indistinguishable", "interpretation_error", "duplicate_gold")
            if any(stats[n]["gold_status"].get(k) for n in names)]
    print("| gold status / flag | " + " | ".join(names) + " | total |")
    print("| --- | " + " | ".join("---:" for _ in names) + " | ---: |")
    for k in keys:
        vals = [stats[n]["gold_status"].get(k, 0) for n in names]
        print(f"| {k} | " + " | ".join(str(v) for v in vals) + f" | {sum(vals)} |")


if __name__ == "__main__":
    main()
